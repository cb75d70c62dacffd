//! `llmspeed capacity`: flags -> [`CapacityConfig`], the search run on its runtime, then
//! `results.json` in `--out` and the summary on stdout. `--mock` runs it against the built-in
//! simulated server (demo profile), as `matrix --mock` does.

use super::matrix::MockThread;
use super::{runtime, CliError, CliResult};
use crate::capacity::plan::{By, Workload};
use crate::capacity::run::{run as search, CapacityConfig};
use crate::capacity::search::SearchConfig;
use crate::capacity::slo::Slo;
use crate::capacity::{results, run::CapacityRun};
use crate::clock::Clock;
use crate::net::{Cancel, Client, ClientConfig, Target};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// What `--by` searches over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByArg {
    /// Closed-loop streams.
    Concurrency,
    /// Request rate, Poisson arrivals (as `bench serve --request-rate` draws them).
    Rate,
}

/// The largest concurrency (or request rate) that meets every objective.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// The load searched over: closed-loop streams, or a request rate with Poisson arrivals.
    #[arg(long, value_enum, default_value = "concurrency")]
    pub by: ByArg,
    /// The server, e.g. http://127.0.0.1:8000.
    #[arg(long, required_unless_present = "mock")]
    pub base_url: Option<String>,
    /// Run against the built-in simulated server (demo profile).
    #[arg(long, conflicts_with = "base_url")]
    pub mock: bool,
    /// An objective, repeatable: ttft_p99=500ms, itl_p99=50ms, e2e_p90=10s, tpot_p99=40ms,
    /// errors=1%, attainment=99%.
    #[arg(long = "slo", required = true, value_name = "NAME=VALUE")]
    pub slo: Vec<String>,
    /// Model name (default: the first served model).
    #[arg(long)]
    pub model: Option<String>,
    /// Prompt length of every request, tokens (random token ids).
    #[arg(long, default_value_t = 128)]
    pub input_len: u32,
    /// Output length of every request, tokens (held with ignore_eos).
    #[arg(long, default_value_t = 64)]
    pub output_len: u32,
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
    if a.input_len == 0 || a.output_len < 2 {
        return Err(CliError::usage(
            "--input-len must be at least 1 and --output-len at least 2 (a request needs a gap between tokens)",
        ));
    }
    if a.max_rounds == 0 {
        return Err(CliError::usage("--max-rounds must be at least 1"));
    }
    let (by, search) = match a.by {
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
            (By::Rate { step }, search)
        }
    };
    Ok(CapacityConfig {
        workload: Workload {
            base_url,
            model: a.model.clone(),
            input_len: a.input_len,
            output_len: a.output_len,
            seed: a.seed,
        },
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

/// Runs the search with `[capacity]` progress lines on stderr and writes `results.json`.
pub async fn run_async(
    cfg: &CapacityConfig,
    out: &std::path::Path,
    stop: &Cancel,
) -> Result<CapacityRun, CliError> {
    let target =
        Target::parse(&cfg.workload.base_url).map_err(|e| CliError::usage(e.to_string()))?;
    let client = Client::new(ClientConfig::new(target), Clock::new())
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
        cfg.workload.base_url = format!("http://{}", server.addr);
        cfg.simulated = Some("the simulated server (demo profile)".into());
        Some(server)
    } else {
        cfg.workload.base_url = a.base_url.clone().unwrap_or_default();
        None
    };
    let run = rt.block_on(run_async(&cfg, &a.out, &stop));
    if let Some(s) = mock {
        s.stop();
    }
    let run = run?;
    print!("{}", results::summary(&cfg, &run));
    println!("results: {}", a.out.join("results.json").display());
    println!("page: {}", a.out.join(crate::report::files::HTML).display());
    Ok(match caught.get() {
        Some(sig) => ExitCode::from(sig.exit_code()),
        None => ExitCode::SUCCESS,
    })
}
