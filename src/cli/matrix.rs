//! `llmspeed matrix`: flags -> [`MatrixConfig`], Ctrl-C -> a clean stop, progress on stderr,
//! the summary on stdout. `--mock` runs against the built-in simulated server (demo profile,
//! reduced plan) so the first command in the README works without a GPU.

use super::probe::LimitArgs;
use super::progress::Display;
use super::stream::ConnectionArgs;
use super::{runtime, CliError, CliResult};
use crate::analysis::repetition::RepetitionConfig;
use crate::clock::Clock;
use crate::matrix::plan::{parse_concurrency, parse_contexts, PlanConfig, DEFAULT_MARGIN};
use crate::matrix::run::{
    default_out_dir, default_prompt_cache, estimate, execute, plan_run, HeaderFacts, MatrixConfig,
    PromptMode,
};
use crate::net::{Cancel, Client, ClientConfig, Target};
use crate::report::console;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLoop {
    /// Keep the looped cell's figures, marked Looped.
    Keep,
    /// Rerun a looped cell once with a fresh prompt seed.
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PromptModeArg {
    Auto,
    TokenIds,
    Tokenize,
    Usage,
}

/// The speed-test matrix.
#[derive(Debug, Clone, clap::Args)]
pub struct MatrixArgs {
    #[command(flatten)]
    pub conn: Option<ConnectionArgs>,
    /// Run against the built-in simulated server (demo profile) with a reduced plan.
    #[arg(long, conflicts_with = "base_url")]
    pub mock: bool,
    /// Plain log lines instead of the live progress display (the default when stdout or
    /// stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Model name (default: the first served model).
    #[arg(long)]
    pub model: Option<String>,
    /// Decode contexts, e.g. `8k,32k,max` (default 8K,16K,32K,64K,128K,max).
    #[arg(long)]
    pub contexts: Option<String>,
    /// Prefill-only contexts (default: the decode contexts plus max_model_len - 1).
    #[arg(long)]
    pub prefill_contexts: Option<String>,
    /// Concurrency levels, e.g. `1,2,4` or `1..128`.
    #[arg(long)]
    pub concurrency: Option<String>,
    #[arg(long, default_value_t = 4096)]
    pub max_tokens: u64,
    /// Window length per decode cell (30s, 2m, 500ms; a bare number is seconds).
    #[arg(long, default_value_t = 30.0, value_parser = super::duration::secs)]
    pub duration: f64,
    #[arg(long, default_value_t = 1)]
    pub prefill_samples: u32,
    /// Use /v1/chat/completions (three turns) instead of /v1/completions.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, value_enum, default_value_t = PromptModeArg::Auto)]
    pub prompt_mode: PromptModeArg,
    /// Images per prompt (needs --chat): each prefill sample carries new ones (cold), a context
    /// row's decode cells share one set (warm); their tokens count toward the context.
    #[arg(long, value_name = "N")]
    pub images: Option<u32>,
    /// With --images: each image's width x height in pixels (JPEG of noise).
    #[arg(
        long,
        value_name = "WxH",
        default_value = "1280x720",
        requires = "images"
    )]
    pub image_size: String,
    /// Count prompt tokens locally: a tokenizer.json, a directory holding one, or a model id
    /// (org/name) in the local Hugging Face cache. Needs a build with --features hf-tokenizer;
    /// completions prompts only.
    #[arg(long, value_name = "SPEC")]
    pub tokenizer: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Let streams stop at end-of-sequence (default: ignore_eos).
    #[arg(long)]
    pub no_ignore_eos: bool,
    #[arg(long, value_enum, default_value_t = OnLoop::Keep)]
    pub on_loop: OnLoop,
    /// Loop rule: full repetitions of the period.
    #[arg(long, default_value_t = 4)]
    pub loop_min_repeats: usize,
    /// Loop rule: characters the repeating tail must span.
    #[arg(long, default_value_t = 4096)]
    pub loop_min_span: usize,
    /// Results folder (default results/<date>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue an interrupted run in this folder (refused when it was measured with other
    /// settings: model, base URL, --max-tokens, --duration, prompt mode, --chat, the loop rule).
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// With --resume: keep the earlier measurements even when their settings differ; each
    /// kept row and cell records the settings it was measured under.
    #[arg(long, requires = "resume")]
    pub resume_force: bool,
    /// How long to wait for the readiness gate (a bare number is seconds); then the window
    /// opens anyway and the cell is at best Queued, or, when no stream has produced a token,
    /// Failed (timeout_first_token).
    #[arg(long, default_value_t = 120.0, value_parser = super::duration::secs)]
    pub ready_timeout: f64,
    /// Seconds the server's /metrics must keep showing every stream running and none waiting
    /// before the window opens (default 3; 1 with --mock; 0 opens on the first such sample).
    #[arg(long, value_name = "DURATION", value_parser = super::duration::secs)]
    pub ready_stable: Option<f64>,
    /// Folder of calibrated prompts, reused across runs (default
    /// $XDG_CACHE_HOME/llmspeed/prompts or ~/.cache/llmspeed/prompts).
    #[arg(long, value_name = "DIR")]
    pub prompt_cache: Option<PathBuf>,
    /// Calibrate every prompt afresh and store nothing.
    #[arg(long, conflicts_with = "prompt_cache")]
    pub no_prompt_cache: bool,
    #[arg(long)]
    pub gpu: Option<String>,
    #[arg(long)]
    pub vram_gb: Option<f64>,
    #[arg(long)]
    pub hardware: Option<String>,
    #[arg(long)]
    pub launch_command: Option<String>,
    #[arg(long)]
    pub engine_build: Option<String>,
    #[arg(long)]
    pub notes: Option<String>,
    /// Print the plan and estimate, then stop.
    #[arg(long)]
    pub dry_run: bool,
    /// An objective, repeatable (ttft_p99=500ms, itl_p99=50ms, e2e_p90=10s, tpot_p99=40ms,
    /// errors=1%, attainment=99%): for every context row, the largest concurrency whose
    /// decode cell meets them all (docs/capacity.md, "matrix --slo").
    #[arg(long = "slo", value_name = "NAME=VALUE")]
    pub slo: Vec<String>,
    /// Confidence of --slo's intervals, percent.
    #[arg(long, default_value_t = 95.0)]
    pub slo_confidence: f64,
}

/// `--slo` checked: the objectives and the confidence as a fraction (`None` without `--slo`).
pub fn slo_of(a: &MatrixArgs) -> Result<Option<(crate::capacity::slo::Slo, f64)>, CliError> {
    if a.slo.is_empty() {
        return Ok(None);
    }
    let slo = crate::capacity::slo::Slo::parse(&a.slo).map_err(CliError::usage)?;
    if !(a.slo_confidence > 50.0 && a.slo_confidence < 100.0) {
        return Err(CliError::usage(format!(
            "--slo-confidence {}: give a percentage above 50 and below 100 (e.g. 95)",
            a.slo_confidence
        )));
    }
    Ok(Some((slo, a.slo_confidence / 100.0)))
}

/// `matrix --slo`: judges the finished grid's cells, puts the table into the report and writes
/// the results folder again (results.json first) with it.
pub fn add_slo(
    report: &mut crate::report::MatrixReport,
    specs: &[String],
    slo: &crate::capacity::slo::Slo,
    confidence: f64,
    out: &std::path::Path,
) -> Result<(), CliError> {
    report.slo = Some(crate::capacity::grid::read(
        &report.decode,
        specs,
        slo,
        confidence,
    ));
    crate::report::files::write_all(out, report).map_err(|e| CliError::failed(e.to_string()))
}

fn secs(flag: &str, v: f64) -> Result<Duration, CliError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(CliError::usage(format!(
            "{flag} must be a positive number of seconds"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `matrix`'s flags, checked, as the run's configuration.
pub fn config(a: &MatrixArgs, base_url: &str) -> Result<MatrixConfig, CliError> {
    let plan = plan_config(a)?;
    let duration = if a.mock && a.duration == 30.0 {
        5.0
    } else {
        a.duration
    };
    let repetition = repetition(a)?;
    let tokenizer = local_tokenizer(a)?;
    let images = images(a)?;
    Ok(MatrixConfig {
        images,
        tokenizer,
        plan,
        duration: secs("--duration", duration)?,
        model: a.model.clone(),
        chat: a.chat,
        prompt_mode: match a.prompt_mode {
            PromptModeArg::Auto => PromptMode::Auto,
            PromptModeArg::TokenIds => PromptMode::TokenIds,
            PromptModeArg::Tokenize => PromptMode::Tokenize,
            PromptModeArg::Usage => PromptMode::Usage,
        },
        seed: a.seed,
        ignore_eos: !a.no_ignore_eos,
        out_dir: a
            .resume
            .clone()
            .or_else(|| a.out.clone())
            .unwrap_or_else(default_out_dir),
        resume: a.resume.is_some(),
        resume_force: a.resume_force,
        retry_looped: a.on_loop == OnLoop::Retry,
        repetition,
        overrides: a.limits.overrides(),
        header: HeaderFacts {
            gpu: a.gpu.clone(),
            vram_gb: a.vram_gb,
            hardware: a.hardware.clone(),
            launch_command: a.launch_command.clone(),
            engine_build: a.engine_build.clone(),
            notes: a.notes.clone(),
            simulated_server: None,
        },
        ready_timeout: secs("--ready-timeout", a.ready_timeout)?,
        ready_stable: ready_stable(a)?,
        prompt_cache: if a.no_prompt_cache {
            None
        } else {
            a.prompt_cache.clone().or_else(default_prompt_cache)
        },
        drain_timeout: Duration::from_secs(60),
        ready_check_timeout: Duration::from_secs(
            a.conn
                .as_ref()
                .map_or(0, |c| c.ready_check_timeout(READY_CHECK_DEFAULT_S)),
        ),
        base_url: base_url.to_string(),
        insecure: a.conn.as_ref().is_some_and(|c| c.insecure),
        skip_warmup: false,
    })
}

/// `--images N --image-size WxH`, checked: images travel only in chat messages.
fn images(a: &MatrixArgs) -> Result<Option<crate::matrix::images::ImageSpec>, CliError> {
    let Some(n) = a.images else {
        return Ok(None);
    };
    if !a.chat {
        return Err(CliError::usage(
            "--images needs --chat: images travel as image_url parts of chat messages (/v1/chat/completions), which /v1/completions does not take",
        ));
    }
    if a.prompt_mode == PromptModeArg::TokenIds {
        return Err(CliError::usage(
            "--images needs a text prompt: --prompt-mode token-ids sends token ids to /v1/completions",
        ));
    }
    crate::matrix::images::ImageSpec::new(n, &a.image_size)
        .map(Some)
        .map_err(CliError::usage)
}

/// The grid: contexts, prefill contexts, concurrency levels and max tokens (a reduced grid
/// with `--mock`).
fn plan_config(a: &MatrixArgs) -> Result<PlanConfig, CliError> {
    let usage = |e: crate::matrix::plan::PlanError| CliError::usage(e.to_string());
    // Requests carry max_tokens as a 32-bit count; a larger value must not wrap silently.
    if a.max_tokens == 0 || a.max_tokens > u64::from(u32::MAX) {
        return Err(CliError::usage(format!(
            "--max-tokens must be between 1 and {}, not {}",
            u32::MAX,
            a.max_tokens
        )));
    }
    let mut plan = PlanConfig {
        contexts: a
            .contexts
            .as_deref()
            .map(|s| parse_contexts("--contexts", s))
            .transpose()
            .map_err(usage)?,
        prefill_contexts: a
            .prefill_contexts
            .as_deref()
            .map(|s| parse_contexts("--prefill-contexts", s))
            .transpose()
            .map_err(usage)?,
        concurrency: a
            .concurrency
            .as_deref()
            .map(parse_concurrency)
            .transpose()
            .map_err(usage)?,
        max_tokens: a.max_tokens,
        margin: DEFAULT_MARGIN,
        prefill_samples: a.prefill_samples.max(1),
    };
    if a.mock {
        // Reduced plan: about a minute against the demo profile. Prefill contexts follow the
        // one rule of every run (the decode contexts plus max_model_len - 1, see `Plan::new`).
        plan.contexts = plan
            .contexts
            .or_else(|| parse_contexts("--contexts", "2k,8k,max").ok());
        plan.concurrency = plan.concurrency.or_else(|| Some(vec![1, 4, 16, 64]));
    }
    Ok(plan)
}

/// The loop rule, checked by building a detector with it.
fn repetition(a: &MatrixArgs) -> Result<RepetitionConfig, CliError> {
    let repetition = RepetitionConfig {
        min_repeats: a.loop_min_repeats,
        min_span: a.loop_min_span,
        ..RepetitionConfig::default()
    };
    crate::analysis::repetition::RepetitionDetector::new(repetition)
        .map_err(|e| CliError::usage(format!("loop rule: {e}")))?;
    Ok(repetition)
}

/// `--tokenizer`, loaded.
fn local_tokenizer(
    a: &MatrixArgs,
) -> Result<Option<std::sync::Arc<crate::workload::tokenizer::LocalTokenizer>>, CliError> {
    Ok(match &a.tokenizer {
        Some(spec) => Some(std::sync::Arc::new(
            crate::workload::tokenizer::LocalTokenizer::load(spec)
                .map_err(|e| CliError::usage(e.to_string()))?,
        )),
        None => None,
    })
}

/// `--ready-stable`: given, or 1 s with `--mock` and 3 s otherwise.
fn ready_stable(a: &MatrixArgs) -> Result<Duration, CliError> {
    let v = a.ready_stable.unwrap_or(if a.mock { 1.0 } else { 3.0 });
    if !(v.is_finite() && v >= 0.0) {
        return Err(CliError::usage(
            "--ready-stable must be zero or a positive number of seconds",
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `matrix --mock`'s simulated server, on its own thread and current-thread runtime (as
/// `selftest` runs it): it never shares the client's runtime, and its thread (with the mock's
/// engine and trace threads, all named `mock-*`) is left out of the client's CPU figures
/// (`sys::client_cpu`).
pub(crate) struct MockThread {
    pub(crate) addr: std::net::SocketAddr,
    stop: Cancel,
    thread: std::thread::JoinHandle<()>,
}

impl MockThread {
    pub(crate) fn start(cfg: crate::mock::MockConfig) -> Result<MockThread, CliError> {
        let failed = |e: &dyn std::fmt::Display| {
            CliError::failed(format!("cannot start the simulated server: {e}"))
        };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let stop = Cancel::new();
        let sd = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{}server", crate::sys::SERVER_THREAD_PREFIX))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = addr_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = addr_tx.send(listener.local_addr());
                    if let Err(e) =
                        crate::mock::serve(listener, cfg, async move { sd.cancelled().await }).await
                    {
                        eprintln!("[matrix] simulated server stopped: {e}");
                    }
                });
            })
            .map_err(|e| failed(&e))?;
        match addr_rx.recv() {
            Ok(Ok(addr)) => Ok(MockThread { addr, stop, thread }),
            Ok(Err(e)) => Err(failed(&e)),
            Err(_) => Err(failed(&"its thread ended before binding")),
        }
    }

    /// Stops the server and waits for its thread, so it never outlives the command.
    pub(crate) fn stop(self) {
        self.stop.cancel();
        let _ = self.thread.join();
    }
}

/// Probe, plan, run and write with plain progress lines; shared by the CLI and the end-to-end
/// tests.
pub async fn run_async(
    client: &Client,
    cfg: &MatrixConfig,
    dry_run: bool,
    stop: &Cancel,
) -> Result<crate::report::MatrixReport, CliError> {
    run_shown(client, cfg, dry_run, stop, false).await
}

/// [`run_async`] with the live display when `live` (see `progress::live_wanted`).
pub async fn run_shown(
    client: &Client,
    cfg: &MatrixConfig,
    dry_run: bool,
    stop: &Cancel,
    live: bool,
) -> Result<crate::report::MatrixReport, CliError> {
    let prepared = plan_run(client, cfg, &mut |w| eprintln!("[matrix] {w}"))
        .await
        .map_err(CliError::failed)?;
    eprint!("{}", prepared.info.render());
    eprintln!("{}", prepared.plan.render());
    eprintln!(
        "estimate: about {:.0} s; results in {}",
        estimate(&prepared.plan, cfg),
        cfg.out_dir.display()
    );
    if dry_run {
        return Ok(prepared.report);
    }
    let mut display = Display::new("matrix", "steps", live);
    let r = execute(client, cfg, prepared, stop, &mut display).await;
    display.finish();
    r.map_err(CliError::failed)
}

/// `--ready-check-timeout-sec`'s default for the matrix: a long run started beside a loading
/// server waits for it rather than failing in its first second.
const READY_CHECK_DEFAULT_S: u64 = 600;

pub fn run(a: MatrixArgs) -> CliResult {
    // Flags first: a typo must not start a server or a run.
    let mut cfg = config(&a, "")?;
    let slo = slo_of(&a)?;
    if !a.mock && a.conn.is_none() {
        return Err(CliError::usage("--base-url is required (or --mock)"));
    }
    let rt = runtime(0)?;
    let stop = Cancel::new();
    let caught = {
        let _in_runtime = rt.enter();
        super::signal::stop_on_signal(
            stop.clone(),
            "[matrix] ",
            |sig| {
                format!(
                    "stopping after {}; the partial report stays valid",
                    sig.describe()
                )
            },
            "exiting now; results.json holds every finished measurement",
        )?
    };
    let (client_cfg, base_url, mock_server) = if a.mock {
        let mock_cfg = crate::mock::MockConfig::profile(crate::mock::Profile::Demo);
        cfg.header.simulated_server = Some(format!("demo profile: {}", mock_cfg.identity()));
        let server = MockThread::start(mock_cfg)?;
        let url = format!("http://{}", server.addr);
        eprintln!("[matrix] simulated server (demo profile) at {url}");
        let target = Target::parse(&url).map_err(|e| CliError::failed(e.to_string()))?;
        (ClientConfig::new(target), url, Some(server))
    } else {
        let conn = a
            .conn
            .as_ref()
            .ok_or_else(|| CliError::usage("--base-url is required (or --mock)"))?;
        (conn.client_config()?, conn.base_url.clone(), None)
    };
    cfg.base_url = base_url;
    let client =
        Client::new(client_cfg, Clock::new()).map_err(|e| CliError::usage(e.to_string()))?;
    if let Some(conn) = &a.conn {
        // A stop while waiting for the server ends the command at once: nothing was measured.
        let stopped = rt.block_on(async {
            tokio::select! {
                r = conn.wait_ready(&client, READY_CHECK_DEFAULT_S) => r.map(|()| false),
                _ = stop.cancelled() => Ok(true),
            }
        })?;
        if let (true, Some(sig)) = (stopped, caught.get()) {
            eprintln!(
                "[matrix] stopped by {} while waiting for the server; nothing was measured",
                sig.describe()
            );
            return Ok(ExitCode::from(sig.exit_code()));
        }
    }
    let live = super::progress::live_wanted(a.no_progress);
    let report = rt.block_on(run_shown(&client, &cfg, a.dry_run, &stop, live));
    if let Some(s) = mock_server {
        s.stop();
    }
    let mut report = report?;
    if let (Some((slo, confidence)), false) = (&slo, a.dry_run) {
        add_slo(&mut report, &a.slo, slo, *confidence, &cfg.out_dir)?;
    }
    if !a.dry_run {
        println!("{}", console::summary(&report));
        println!("results: {}", cfg.out_dir.display());
    }
    Ok(if report.metadata.interrupted.is_some() {
        ExitCode::from(caught.get().map_or(130, |sig| sig.exit_code()))
    } else {
        ExitCode::SUCCESS
    })
}
