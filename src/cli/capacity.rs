//! `llmspeed capacity`: flags -> [`CapacityConfig`], the search run on its runtime, then
//! `results.json` in `--out` and the summary on stdout. `--mock` runs it against the built-in
//! simulated server (demo profile), as `matrix --mock` does.

use super::matrix::MockThread;
use super::{runtime, CliError, CliResult};
use crate::bench::vllm::connection::ConnectionArgs;
use crate::bench::vllm::dataset_flags::DatasetArgs;
use crate::capacity::plan::{setup_plan, By, Workload};
use crate::capacity::run::{run as search, CapacityConfig};
use crate::capacity::search::SearchConfig;
use crate::capacity::slo::Slo;
use crate::capacity::{results, run::CapacityRun};
use crate::clock::Clock;
use crate::matrix::plan::{parse_contexts, ContextSpec};
use crate::net::Cancel;
use crate::workload::datasets::DatasetKind;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// What `--by` searches over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByArg {
    /// Closed-loop streams.
    Concurrency,
    /// Request rate: Poisson arrivals, or gamma with --burstiness (as `bench serve
    /// --request-rate --burstiness` draws them).
    Rate,
}

/// The largest concurrency (or request rate) that meets every objective.
// capacity's random prompts default to 128 tokens asking for 64 (bench serve's: 1024 and 128),
// as they did before the dataset flags came.
#[derive(Debug, Clone, clap::Args)]
#[command(
    mut_arg("random_input_len", |a| a.default_value("128")),
    mut_arg("random_output_len", |a| a.default_value("64"))
)]
pub struct CapacityArgs {
    /// The load searched over: closed-loop streams, or a request rate with Poisson arrivals.
    #[arg(long, value_enum, default_value = "concurrency")]
    pub by: ByArg,
    /// Run against the built-in simulated server (demo profile).
    #[arg(long, conflicts_with_all = ["base_url", "host", "port"])]
    pub mock: bool,
    /// An objective, repeatable: ttft_p99=500ms, itl_p99=50ms, e2e_p90=10s, tpot_p99=40ms,
    /// errors=1%, attainment=99%.
    #[arg(long = "slo", required = true, value_name = "NAME=VALUE")]
    pub slo: Vec<String>,
    /// The server and how requests reach it: `bench serve`'s flags, the same meanings.
    #[command(flatten)]
    pub conn: ConnectionArgs,
    /// What each request asks: `bench serve`'s dataset flags, the same meanings. The default
    /// is random token ids of exactly --random-input-len (--input-len) tokens asking for
    /// exactly --random-output-len (--output-len).
    #[command(flatten)]
    pub data: DatasetArgs,
    /// The prompt length as the matrix writes a context (32K, 8k, 131072, 1.5k; k = 1024):
    /// random token ids of that many tokens. Sets --random-input-len (so not beside it).
    #[arg(
        long,
        value_name = "TOKENS",
        help_heading = "Random dataset options",
        conflicts_with = "random_input_len"
    )]
    pub context: Option<String>,
    /// The seed of the dataset's draws and of each round's prompts and arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Confidence of every interval, percent.
    #[arg(long, default_value_t = 95.0)]
    pub confidence: f64,
    /// The answer's resolution, streams (or requests per second with --by rate, e.g. 0.5):
    /// the search ends when the largest passing and the smallest failing load are this close.
    /// By rate every load probed is a whole number of these steps.
    #[arg(long, default_value_t = 1.0)]
    pub resolution: f64,
    /// The first load probed: streams, or requests per second with --by rate (default: one
    /// step of --resolution).
    #[arg(long)]
    pub start: Option<f64>,
    /// The bracket's growth factor from the last passing concurrency.
    #[arg(long, default_value_t = 2.0)]
    pub growth: f64,
    /// The largest concurrency the search may probe.
    #[arg(long, default_value_t = 512)]
    pub max_concurrency: u64,
    /// With --by rate: the largest request rate the search may probe, requests per second.
    #[arg(long, default_value_t = 1000.0)]
    pub max_rate: f64,
    /// With --by rate: the gamma shape of the gaps between arrivals, as `bench serve
    /// --burstiness` (default 1: Poisson; below 1 burstier, above 1 smoother; inf: constant).
    #[arg(long)]
    pub burstiness: Option<f64>,
    /// Requests per probe round beyond its opening burst (0: max(4 x concurrency, 40)); with
    /// --by rate, arrivals per round (0: max(5 s of arrivals, 50)).
    #[arg(long, default_value_t = 0)]
    pub round: u64,
    /// Rounds a probe may take while its decision is "not yet".
    #[arg(long, default_value_t = 10)]
    pub max_rounds: u64,
    /// The whole search's time limit (e.g. 10m, 90s).
    #[arg(long, default_value = "30m", value_parser = super::duration::secs)]
    pub max_time: f64,
    /// Longest wait for the server's running and waiting gauges to read 0 between probes.
    #[arg(long, default_value = "60s", value_parser = super::duration::secs)]
    pub drain_timeout: f64,
    /// Pause between probes after the drain (or instead of it, for a server without gauges).
    #[arg(long, default_value = "500ms", value_parser = super::duration::secs)]
    pub settle: f64,
    /// Results folder (results.json).
    #[arg(long)]
    pub out: PathBuf,
}

/// The flags checked and turned into the run's config (the URL filled in by the caller).
pub fn config(a: &CapacityArgs, base_url: String) -> Result<CapacityConfig, CliError> {
    let slo = Slo::parse(&a.slo).map_err(CliError::usage)?;
    if !(a.confidence > 50.0 && a.confidence < 100.0) {
        return Err(CliError::usage(format!(
            "--confidence {}: give a percentage above 50 and below 100 (e.g. 95)",
            a.confidence
        )));
    }
    if a.max_rounds == 0 {
        return Err(CliError::usage("--max-rounds must be at least 1"));
    }
    let (by, search) = match a.by {
        ByArg::Concurrency if a.burstiness.is_some() => {
            return Err(CliError::usage(
                "--burstiness shapes the arrivals of --by rate; a closed loop (--by concurrency) sends each request when its stream's last one ends",
            ))
        }
        ByArg::Concurrency => {
            let whole = |v: f64, flag: &str| {
                if v.fract() == 0.0 && v >= 0.0 && v.is_finite() {
                    Ok(v as u64)
                } else {
                    Err(CliError::usage(format!(
                        "{flag} {v}: a concurrency is a whole number of streams (a fractional step is for --by rate)"
                    )))
                }
            };
            let search = SearchConfig {
                start: whole(a.start.unwrap_or(1.0), "--start")?,
                growth: a.growth,
                resolution: whole(a.resolution, "--resolution")?,
                max: a.max_concurrency,
            };
            search
                .validate()
                .map_err(|e| CliError::usage(e.replace("the largest load", "--max-concurrency")))?;
            (By::Concurrency, search)
        }
        ByArg::Rate => {
            let step = a.resolution;
            if !(step > 0.0 && step.is_finite()) {
                return Err(CliError::usage(format!(
                    "--resolution {step}: with --by rate give a step above 0 in requests per second (e.g. 0.5)"
                )));
            }
            let burstiness = a.burstiness.unwrap_or(1.0);
            if burstiness.is_nan() || burstiness <= 0.0 {
                return Err(CliError::usage(format!(
                    "--burstiness {burstiness}: give a gamma shape above 0, or inf (1 is Poisson)"
                )));
            }
            let start = a.start.unwrap_or(step);
            let ok =
                start > 0.0 && start.is_finite() && a.max_rate.is_finite() && a.max_rate >= start;
            if !ok {
                return Err(CliError::usage(format!(
                    "--start {start} and --max-rate {}: give rates above 0 with --start at most --max-rate",
                    a.max_rate
                )));
            }
            // Loads are whole steps: the start rounded up to one, the cap down.
            let search = SearchConfig {
                start: ((start / step) - 1e-9).ceil().max(1.0) as u64,
                growth: a.growth,
                resolution: 1,
                max: ((a.max_rate / step) + 1e-9).floor() as u64,
            };
            search
                .validate()
                .map_err(|e| CliError::usage(e.replace("the largest load", "--max-rate")))?;
            (By::Rate { step, burstiness }, search)
        }
    };
    Ok(CapacityConfig {
        workload: workload(a, base_url)?,
        by,
        slo,
        confidence: a.confidence / 100.0,
        search,
        round: a.round,
        max_rounds: a.max_rounds,
        max_time: Duration::from_secs_f64(a.max_time),
        drain_timeout: Duration::from_secs_f64(a.drain_timeout),
        settle: Duration::from_secs_f64(a.settle),
        simulated: None,
    })
}

/// The connection and dataset flags, checked as `bench serve` checks them, with `--context`
/// and capacity's own limits: `base_url` (when not empty) stands for the connection flags'
/// URL (`--mock` fills it in later).
pub fn workload(a: &CapacityArgs, base_url: String) -> Result<Workload, CliError> {
    let mut connection = a.conn.validate().map_err(CliError::usage)?;
    if !base_url.is_empty() {
        connection.base_url = base_url;
    }
    let kind = a.data.kind().map_err(CliError::usage)?;
    if kind == DatasetKind::TimedTrace {
        return Err(CliError::usage(
            "--dataset-name timed_trace sends on the trace's own timestamps; capacity sets the \
             load itself: give the trace's requests another way (e.g. --dataset-name custom)",
        ));
    }
    a.data
        .check_backend(kind, connection.backend)
        .map_err(CliError::usage)?;
    a.data.check_path(kind).map_err(CliError::usage)?;
    // A file read once, before the first probe: a wrong path is said now, before anything is
    // sent (the hub's ids are looked up when the dataset loads).
    let local_file = matches!(
        kind,
        DatasetKind::ShareGpt
            | DatasetKind::Sonnet
            | DatasetKind::Custom
            | DatasetKind::CustomImage
            | DatasetKind::BurstGpt
    );
    if let (true, Some(p)) = (local_file, &a.data.dataset_path) {
        if !p.is_file() {
            return Err(CliError::usage(format!(
                "--dataset-path {}: no such file",
                p.display()
            )));
        }
    }
    let trace = crate::workload::trace::TraceConfig {
        rounds: 1,
        ..Default::default()
    };
    let mut dataset = a
        .data
        .config(kind, a.seed, connection.skip_tokenizer_init, trace)
        .map_err(CliError::usage)?;
    let mut context_max = false;
    match a
        .context
        .as_deref()
        .map(|c| context(c, a, kind))
        .transpose()?
    {
        Some(ContextSpec::Tokens(t)) => {
            dataset.random_input_len = u32::try_from(t)
                .map_err(|_| CliError::usage(format!("--context: at most {} tokens", u32::MAX)))?
        }
        Some(ContextSpec::Max) => context_max = true,
        None => {}
    }
    if dataset.num_prompts == 0 {
        return Err(CliError::usage("--num-prompts must be at least 1"));
    }
    if kind == DatasetKind::Random
        && (dataset.random_input_len == 0 || dataset.random_output_len < 2)
    {
        return Err(CliError::usage(
            "--input-len (--random-input-len) must be at least 1 and --output-len \
             (--random-output-len) at least 2 (a request needs a gap between tokens)",
        ));
    }
    Ok(Workload {
        connection,
        dataset,
        context_max,
    })
}

/// `--context`: one size in the matrix's spelling (`matrix::plan::parse_contexts`), or `max`
/// (the largest that fits the model, found from the server), the random dataset's prompt
/// length in place of --input-len.
fn context(c: &str, a: &CapacityArgs, kind: DatasetKind) -> Result<ContextSpec, CliError> {
    if kind != DatasetKind::Random {
        return Err(CliError::usage(format!(
            "--context sets the random dataset's prompt length; --dataset-name {} brings its own",
            kind.as_str()
        )));
    }
    if a.data.input_len.is_some() {
        return Err(CliError::usage(
            "--context and --input-len both set the prompt length: give one",
        ));
    }
    let specs = parse_contexts("--context", c).map_err(|e| CliError::usage(e.to_string()))?;
    match specs[..] {
        [one] => Ok(one),
        _ => Err(CliError::usage(format!(
            "--context {c}: capacity probes one context; give one size (e.g. 32K)"
        ))),
    }
}

/// Runs the search with `[capacity]` progress lines on stderr and writes `results.json`.
pub async fn run_async(
    cfg: &CapacityConfig,
    out: &std::path::Path,
    stop: &Cancel,
) -> Result<CapacityRun, CliError> {
    // The client the search sets up with (readiness, model, gauges, the dataset read once)
    // reaches the server as every round does: its headers, key and TLS.
    let client =
        crate::bench::engine::connect::client_for(&setup_plan(&cfg.workload), Clock::new())
            .map_err(|e| CliError::usage(e.to_string()))?;
    let run = search(cfg, &client, stop, &mut |l| eprintln!("[capacity] {l}"))
        .await
        .map_err(CliError::failed)?;
    std::fs::create_dir_all(out)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", out.display())))?;
    let value = results::to_json(cfg, &run);
    let json = serde_json::to_string_pretty(&value).map_err(|e| CliError::failed(e.to_string()))?;
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))
    };
    write("results.json", json + "\n")?;
    // The page is drawn from the file's own figures, as `report site` draws it.
    let header = crate::report::header::RunHeader::capacity(&value);
    write(
        crate::report::files::HTML,
        crate::report::html::capacity::render(&value, &header),
    )?;
    Ok(run)
}

pub fn run(a: CapacityArgs) -> CliResult {
    // Flags first: a typo must not start a server or a run.
    let mut cfg = config(&a, String::new())?;
    let stop = Cancel::new();
    // The watch on its own small thread: the command's runtime is all the search's.
    let caught = super::signal::stop_on_signal_thread(
        stop.clone(),
        "[capacity] ",
        |sig| {
            format!(
                "stopping after {}; the answer so far is written",
                sig.describe()
            )
        },
        "exiting now",
    )?;
    let rt = runtime(0)?;
    let mock = if a.mock {
        let server =
            MockThread::start(crate::mock::MockConfig::profile(crate::mock::Profile::Demo))?;
        eprintln!(
            "[capacity] simulated server (demo profile) at http://{}",
            server.addr
        );
        cfg.workload.connection.base_url = format!("http://{}", server.addr);
        cfg.simulated = Some("the simulated server (demo profile)".into());
        Some(server)
    } else {
        None
    };
    let run = rt.block_on(run_async(&cfg, &a.out, &stop));
    if let Some(s) = mock {
        s.stop();
    }
    let run = run?;
    print!("{}", results::summary(&cfg, &run));
    if let Some(d) = run.dataset.filter(|d| d.sent > d.samples as u64) {
        println!(
            "note: the rounds sent {} requests from the dataset's {} samples, so some were sent \
             again (a server's prefix cache may have helped those): a larger --num-prompts avoids it",
            d.sent, d.samples
        );
    }
    println!("results: {}", a.out.join("results.json").display());
    println!("page: {}", a.out.join(crate::report::files::HTML).display());
    Ok(match caught.get() {
        Some(sig) => ExitCode::from(sig.exit_code()),
        None => ExitCode::SUCCESS,
    })
}
