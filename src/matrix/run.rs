//! The matrix run, end to end: probe -> plan -> warm-up -> per context (prompt of an exact token
//! count, prefill scout, decode cells) -> results written after every measurement.
//!
//! Owns the order of work, the choice of prompt mode, resume and interruption; prompts of an
//! exact size are `matrix::prompts`. It never formats reports itself (that is `report`) and
//! never decides a verdict rule (that is `status`); progress goes out as `progress::Event`s.

use crate::matrix::cell::{run_cell, CellConfig, CellIds};
pub use crate::matrix::config::{HeaderFacts, MatrixConfig, PromptMode};
use crate::matrix::plan::{rows_from_plan, EstimateInputs, Plan};
use crate::matrix::prompts::{eight_digits, key_of, mix, Prepared, Run};
use crate::matrix::scout::{self, ColdSwitches, Fresh};
use crate::matrix::status::CellStatus;
use crate::net::request::{Generation, Prompt as NetPrompt};
use crate::net::{Cancel, Client};
use crate::progress::{Event, Phase, Progress, Work};
use crate::report::files;
use crate::report::{
    methodology, ClientMachine, DecodeCell, Engine, ErrorMessage, Hardware, Limits, MatrixReport,
    Metadata, ModelInfo, PrefillMode, PrefillRow, PromptTokens, Settings, SCHEMA_VERSION,
};
use crate::server::diagnose;
use crate::server::gpu::{self, GpuSampler};
use crate::server::probe::collect_when_ready;
use crate::server::probe::token_id_range;
use crate::server::sampler::unreachable;
use crate::server::{detect, EngineKind, MetricNames, ServerInfo};
use crate::sys::unix_now;
use crate::timeline::{ErrorKind, RequestError};
use crate::workload::prose;
use crate::workload::request_id::{self, RequestId};
use std::path::PathBuf;
use std::time::Duration;

/// GPU readings during a cell: nvidia-smi itself takes tens of milliseconds.
const GPU_SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The default prompt cache: `$XDG_CACHE_HOME/llmspeed/prompts`, else
/// `~/.cache/llmspeed/prompts`; `None` when neither variable is set.
pub fn default_prompt_cache() -> Option<PathBuf> {
    let non_empty = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    non_empty("XDG_CACHE_HOME")
        .or_else(|| non_empty("HOME").map(|h| h.join(".cache")))
        .map(|d| d.join("llmspeed").join("prompts"))
}

/// RFC 3339 UTC for a Unix time.
pub fn rfc3339(unix_s: u64) -> String {
    crate::sys::UtcDateTime::from_unix(unix_s).rfc3339()
}

/// The default results folder: `results/<date>-<time>`.
pub fn default_out_dir() -> PathBuf {
    let s = rfc3339(unix_now()).replace([':', '-'], "");
    PathBuf::from("results").join(s.trim_end_matches('Z'))
}

/// Everything before the first measurement: probe, plan, the report skeleton.
pub struct Prepared0 {
    pub info: ServerInfo,
    pub plan: Plan,
    pub report: MatrixReport,
}

/// Probe and plan; nothing is measured yet. `waiting` hears what the probe waits for while the
/// server is still loading.
pub async fn plan_run(
    client: &Client,
    cfg: &MatrixConfig,
    waiting: &mut dyn FnMut(&str),
) -> Result<Prepared0, String> {
    let collected = collect_when_ready(
        client,
        cfg.model.as_deref(),
        cfg.ready_check_timeout,
        waiting,
    )
    .await?;
    let info = detect(&collected, &cfg.overrides);
    let model = cfg
        .model
        .clone()
        .or_else(|| info.model.clone())
        .ok_or("the server lists no model; pass --model")?;
    let plan = Plan::new(&cfg.plan, info.limits());
    let mode = prompt_tokens(cfg, &info)?;
    let settings = settings(cfg, &plan, mode);
    let (prefill, decode) = rows_from_plan(&plan);
    // A child process and a few /proc files: off the runtime's threads.
    let (machine, gpus) = tokio::task::spawn_blocking(|| (crate::sys::machine(), gpu::list()))
        .await
        .map_err(|e| format!("reading the machine's facts: {e}"))?;
    let report = MatrixReport {
        schema_version: SCHEMA_VERSION,
        methodology: methodology(&settings),
        metadata: metadata(cfg, &info, model, settings, machine, gpus),
        prefill,
        decode,
        slo: None,
    };
    Ok(Prepared0 { info, plan, report })
}

/// How prompts are sized: what `--prompt-mode` asks for, or on `auto` the best the server
/// allows; an error where the asked way cannot work on this server and endpoint.
fn prompt_tokens(cfg: &MatrixConfig, info: &ServerInfo) -> Result<PromptTokens, String> {
    // Only a verified dialect counts, and chat prompts only where it applies the template.
    let server_counts = info
        .tokenize
        .is_some_and(|t| !cfg.chat || t.dialect.counts_chat());
    let mode = match cfg.prompt_mode {
        PromptMode::TokenIds => PromptTokens::TokenIds,
        PromptMode::Auto | PromptMode::Tokenize if cfg.tokenizer.is_some() => {
            PromptTokens::LocalTokenizer
        }
        PromptMode::Tokenize => PromptTokens::TokenizeEndpoint,
        PromptMode::Usage => PromptTokens::UsageEstimate,
        PromptMode::Auto if server_counts => PromptTokens::TokenizeEndpoint,
        PromptMode::Auto if info.token_ids == Some(true) && !cfg.chat => PromptTokens::TokenIds,
        PromptMode::Auto => PromptTokens::UsageEstimate,
    };
    if mode == PromptTokens::TokenIds && cfg.chat {
        return Err("token-id prompts work only on /v1/completions (drop --chat)".into());
    }
    if mode == PromptTokens::LocalTokenizer && cfg.chat {
        return Err(
            "--tokenizer counts /v1/completions prompts only: chat prompts need the model's chat template, which the server applies (drop --tokenizer or --chat)"
                .into(),
        );
    }
    if mode == PromptTokens::TokenizeEndpoint && !server_counts {
        return Err(match (&info.tokenize, &info.tokenize_error) {
            (Some(t), _) => format!(
                "the server's /tokenize ({} dialect) cannot count chat prompts with the chat template (try --prompt-mode usage)",
                t.dialect.as_str()
            ),
            (None, Some(e)) => format!(
                "the server's /tokenize failed when probed: {e} (try --prompt-mode token-ids or usage)"
            ),
            (None, None) => "the server has no /tokenize that counts a known text (try --prompt-mode token-ids or usage)".into(),
        });
    }
    Ok(mode)
}

/// The run's settings as results.json records them.
fn settings(cfg: &MatrixConfig, plan: &Plan, mode: PromptTokens) -> Settings {
    Settings {
        duration_s: cfg.duration.as_secs_f64(),
        max_tokens: cfg.plan.max_tokens,
        // Off when no prefill row will run (none planned, or all Over capacity / Skipped).
        prefill_mode: if plan.prefill.iter().any(|p| p.status.is_none()) {
            PrefillMode::DuringDecodeWarmup
        } else {
            PrefillMode::Off
        },
        prefill_samples: cfg.plan.prefill_samples,
        contexts: plan.contexts.iter().map(|c| c.tokens).collect(),
        prefill_contexts: plan.prefill.iter().map(|p| p.context.tokens).collect(),
        concurrency: plan.concurrency.clone(),
        endpoint: if cfg.chat { "chat" } else { "completion" }.into(),
        prompt_tokens: mode,
        seed: cfg.seed,
        ignore_eos: cfg.ignore_eos,
        insecure: cfg.insecure,
        loop_rule: Some(crate::report::LoopRule {
            min_repeats: cfg.repetition.min_repeats as u64,
            min_span_chars: cfg.repetition.min_span as u64,
            max_period_chars: cfg.repetition.max_period as u64,
        }),
        images: cfg.images.map(|i| crate::report::ImageSettings {
            per_prompt: i.count,
            width: i.width,
            height: i.height,
            image_tokens_per_prompt: None,
        }),
    }
}

/// The report's metadata: tool, server, model, machine and settings.
fn metadata(
    cfg: &MatrixConfig,
    info: &ServerInfo,
    model: String,
    settings: Settings,
    machine: crate::sys::Machine,
    gpus: gpu::Listing,
) -> Metadata {
    let h = &cfg.header;
    Metadata {
        tool: "llmspeed".into(),
        tool_version: crate::VERSION.into(),
        date: rfc3339(unix_now()),
        finished: None,
        interrupted: None,
        base_url: Some(cfg.base_url.clone()),
        simulated_server: h.simulated_server.clone(),
        hardware: Hardware {
            // The server's accelerator is what the user told (--gpu, --vram-gb,
            // --hardware); what was measured is this (the client's) machine, below.
            kind: None,
            gpu: h.gpu.clone(),
            vram_gb: h.vram_gb,
            os: Some(std::env::consts::OS.to_string()),
            description: h.hardware.clone(),
            client: Some(client_machine(machine)),
            gpus: gpus.gpus,
            gpu_source: Some(gpus.source),
        },
        engine: Engine {
            name: Some(info.engine.as_str().into()),
            version: info.version.clone(),
            quantization: None,
            backend: None,
            repository: info.engine.repository().map(String::from),
            build: h.engine_build.clone(),
            commit: None,
        },
        model: ModelInfo {
            id: model,
            name: info.model_name.clone(),
            revision: None,
        },
        server_limits: Limits::from(info.limits()),
        settings,
        launch_command: h.launch_command.clone(),
        notes: h.notes.clone(),
    }
}

fn client_machine(m: crate::sys::Machine) -> ClientMachine {
    ClientMachine {
        cpu_model: m.cpu_model,
        cpu_logical: m.cpu_logical,
        memory_gib: m.memory_bytes.map(|b| b as f64 / (1u64 << 30) as f64),
        os: m.os,
        kernel: m.kernel,
        arch: m.arch,
    }
}

/// Estimate for the plan banner, in seconds.
pub fn estimate(plan: &Plan, cfg: &MatrixConfig) -> f64 {
    plan.estimate_seconds(cfg.duration.as_secs_f64(), &EstimateInputs::default())
}

/// Run the planned measurements, writing the results folder after each one. `progress` gets
/// one line per step and the phase events of a live display. Returns the final report (also when stopped by `stop`).
pub async fn execute(
    client: &Client,
    cfg: &MatrixConfig,
    prepared: Prepared0,
    stop: &Cancel,
    progress: &mut dyn Progress,
) -> Result<MatrixReport, String> {
    let Prepared0 {
        info,
        plan,
        mut report,
    } = prepared;
    if cfg.resume {
        resume_from_disk(cfg, &mut report, progress)?;
    }
    write_results(cfg, &report)?;
    progress.event(&start_event(&plan, &report));
    let mut run = Run {
        client,
        cfg,
        model: report.metadata.model.id.clone(),
        info: &info,
        mode: report.metadata.settings.prompt_tokens,
        run_id: String::new(),
        image_tokens: 0,
    };
    run.run_id = run.typical_run_id(new_run_id(), cfg.seed).await;
    if let Some(spec) = &cfg.images {
        // Before anything is measured: a server that refuses images stops the run here, with
        // its message, once.
        progress.line(&format!(
            "images: counting the prompt tokens of {} images",
            spec.label()
        ));
        run.image_tokens = run.measure_image_tokens(spec).await?;
        progress.line(&format!(
            "images: {} images take {} prompt tokens of every prompt (the server's usage.prompt_tokens with them less without)",
            spec.label(),
            run.image_tokens
        ));
        if let Some(i) = report.metadata.settings.images.as_mut() {
            i.image_tokens_per_prompt = Some(run.image_tokens);
        }
        write_results(cfg, &report)?;
    }
    let mut m = Measure {
        cfg,
        run,
        plan: &plan,
        report,
        names: if info.has_metrics {
            MetricNames::for_engine(info.engine)
        } else {
            None
        },
        stop,
        progress,
        unreachable: None,
        diagnosed: false,
    };
    if !cfg.skip_warmup {
        m.warm_up().await;
    }
    // After the warm-up: a slow first request of a cold server is no step's time.
    let work = work_left(&plan, cfg, &m.report);
    m.progress.event(&Event::Plan(&work));
    let mut flow = Flow::Go;
    let mut prefill_done = vec![false; plan.prefill.len()];
    for row in 0..plan.contexts.len() {
        flow = m.context(row, &mut prefill_done).await?;
        if flow == Flow::Stopped {
            break;
        }
    }
    if flow == Flow::Go {
        flow = m.prefill_only(&prefill_done).await?;
    }
    let mut report = m.report;
    if flow == Flow::Stopped || stop.is_cancelled() {
        // The stop's reason names the signal (`cli::signal`); a stop without one is Ctrl-C's.
        let why = stop.reason().unwrap_or("SIGINT");
        report.metadata.interrupted = Some(format!("stopped by {why}"));
    }
    report.metadata.finished = Some(rfc3339(unix_now()));
    write_results(cfg, &report)?;
    Ok(report)
}

/// Keep the finished measurements of `cfg.out_dir/results.json`.
fn resume_from_disk(
    cfg: &MatrixConfig,
    report: &mut MatrixReport,
    progress: &mut dyn Progress,
) -> Result<(), String> {
    // A results file that cannot be read is never overwritten: it holds measurements that took
    // hours, and the user must decide what to do with it.
    let old = files::read_json(&cfg.out_dir).map_err(|e| {
        format!(
            "cannot resume from {}: {e} (nothing was overwritten; move the folder away to start afresh)",
            cfg.out_dir.display()
        )
    })?;
    let kept = super::resume::resume(report, &old, cfg.resume_force)
        .map_err(|e| format!("cannot resume from {}: {e}", cfg.out_dir.display()))?;
    report.metadata.date = old.metadata.date.clone();
    progress.line(&format!("resume: {kept} finished measurements kept"));
    Ok(())
}

/// The run's size for the progress display: runnable steps and those a resume already kept.
/// The time left comes from [`work_left`] once the warm-up is done.
fn start_event(plan: &Plan, r: &MatrixReport) -> Event<'static> {
    let total = (plan.runnable_cells().count() + plan.runnable_prefill().count()) as u64;
    let pending = |s: &CellStatus| *s == CellStatus::Pending;
    let left = r.decode.iter().filter(|d| pending(&d.status)).count()
        + r.prefill.iter().filter(|p| pending(&p.status)).count();
    Event::Start {
        total,
        done: total.saturating_sub(left as u64),
        // Nothing measured yet: the display says it is estimating.
        estimate_s: 0.0,
    }
}

/// The steps still to run, in the order [`execute`] runs them: per context its prefill row,
/// then its cells; then the prefill-only rows.
fn work_left(plan: &Plan, cfg: &MatrixConfig, r: &MatrixReport) -> Vec<Work> {
    let pending = |s: &CellStatus| *s == CellStatus::Pending;
    let prefill_work = |i: usize| Work::Prefill {
        tokens: plan.prefill[i].context.tokens,
        samples: plan.prefill_samples.max(1),
    };
    let scout_of = |tokens: u64| {
        plan.prefill
            .iter()
            .position(|p| p.context.tokens == tokens && p.status.is_none())
    };
    let mut work = Vec::new();
    let ncols = plan.concurrency.len();
    for (row, ctx) in plan.contexts.iter().enumerate() {
        if let Some(i) = scout_of(ctx.tokens).filter(|&i| pending(&r.prefill[i].status)) {
            work.push(prefill_work(i));
        }
        for i in row * ncols..(row + 1) * ncols {
            if pending(&r.decode[i].status) {
                work.push(Work::Cell {
                    window_s: cfg.duration.as_secs_f64(),
                });
            }
        }
    }
    for (i, p) in plan.prefill.iter().enumerate() {
        let in_a_row = plan.contexts.iter().any(|c| scout_of(c.tokens) == Some(i));
        if !in_a_row && p.status.is_none() && pending(&r.prefill[i].status) {
            work.push(prefill_work(i));
        }
    }
    work
}

fn write_results(cfg: &MatrixConfig, r: &MatrixReport) -> Result<(), String> {
    files::write_all(&cfg.out_dir, r).map_err(|e| e.to_string())
}

/// This run's id, on every prompt's first line.
fn new_run_id() -> String {
    // Nanoseconds, not seconds: two runs in one second (tests, scripts) still differ. Eight
    // decimal digits, not hex (hex letters can form words). Many tokenizers split a digit
    // string of one width the same way whatever the digits, not all (a byte-level BPE merges
    // digit runs): a cached prompt is recounted with this run's id, and a scout's own id is
    // counted where counting is free (`scout::pick_fresh`).
    eight_digits(mix(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        std::process::id() as u64,
    ))
}

/// What makes prefill sample `i` of a context new to the server, its `try_`th candidate:
/// another run id on the first line (same width; [`scout::pick_fresh`] checks it keeps the
/// count), or other leading token ids.
fn fresh_start(run: &Run, context: u64, seed: u64, i: u32, try_: u32) -> Result<Fresh, String> {
    let mut key = mix(mix(key_of(&run.run_id), context), 0x5C00_7000 + i as u64);
    if try_ > 0 {
        key = mix(key, u64::from(try_));
    }
    if run.mode == PromptTokens::TokenIds {
        return prose::token_ids(
            scout::FRESH_IDS,
            key,
            token_id_range(run.info.vocab.map(|f| f.value)),
        )
        .map(Fresh::FirstIds)
        .map_err(|e| e.to_string());
    }
    let mut id = eight_digits(key);
    if id == run.run_id {
        id = eight_digits(key + 1);
    }
    // The first line names the context its text was built for: with images, the context
    // less their tokens (`Run::prepare`).
    let text = context.saturating_sub(run.image_tokens);
    Ok(Fresh::FirstLine {
        old: prose::prompt_prefix(&run.run_id, text, seed),
        new: prose::prompt_prefix(&id, text, seed),
    })
}

/// Whether the run goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Stopped,
}

/// The measuring half of a run: the report it fills and what every step needs.
struct Measure<'a, 'p> {
    cfg: &'a MatrixConfig,
    run: Run<'a>,
    plan: &'a Plan,
    report: MatrixReport,
    names: Option<MetricNames>,
    stop: &'a Cancel,
    progress: &'p mut dyn Progress,
    /// The server refused a connection in the last step: before the next one, one connection
    /// attempt says whether it is still gone (the step then fails at once with that error) or
    /// back (the run goes on).
    unreachable: Option<ErrorMessage>,
    /// An empty 400 was already looked into (once per run).
    diagnosed: bool,
}

impl<'a> Measure<'a, '_> {
    /// A step finished: prefill row `Some(i)` (with its measured rate) or a decode cell.
    fn step_done(&mut self, prefill_row: Option<usize>) {
        if let Some(row) = prefill_row.map(|i| &self.report.prefill[i]) {
            if let (Some(tok_per_s), Some(tokens)) = (row.prefill_tok_per_s, row.prompt_tokens) {
                self.progress
                    .event(&Event::PrefillRate { tokens, tok_per_s });
            }
        }
        self.progress.event(&Event::StepDone { estimate_s: 0.0 });
    }

    async fn warm_up(&mut self) {
        self.progress.event(&Event::Phase {
            step: "warm-up",
            phase: Phase::Warming,
        });
        self.progress.line("warm-up: one short hidden request");
        let mut g = Generation::new(
            &self.run.model,
            NetPrompt::Text("Say hello in one short sentence.".into()),
        );
        g.chat = self.cfg.chat;
        self.run.warm(&g, 8, self.stop).await;
    }

    /// One context row: its prompt, its prefill row (if planned here) and its decode cells.
    async fn context(&mut self, row: usize, prefill_done: &mut [bool]) -> Result<Flow, String> {
        let plan = self.plan;
        let ctx = &plan.contexts[row];
        let ncols = plan.concurrency.len();
        let cells: Vec<usize> = (0..ncols)
            .map(|col| row * ncols + col)
            .filter(|&i| self.report.decode[i].status == CellStatus::Pending)
            .collect();
        let scout_idx = plan
            .prefill
            .iter()
            .position(|p| p.context.tokens == ctx.tokens && p.status.is_none());
        if let Some(i) = scout_idx {
            prefill_done[i] = true;
        }
        let scout_pending =
            scout_idx.filter(|&i| self.report.prefill[i].status == CellStatus::Pending);
        if cells.is_empty() && scout_pending.is_none() {
            return Ok(Flow::Go);
        }
        if self.stop.is_cancelled() {
            return Ok(Flow::Stopped);
        }
        if let Some(msg) = self.still_unreachable().await {
            self.fail_steps(&cells, scout_pending, msg)?;
            return Ok(Flow::Go);
        }
        let Some(prompt) = self.prompt(&ctx.label, ctx.tokens).await else {
            return Ok(Flow::Stopped);
        };
        let prompt = match prompt {
            Ok(p) => p,
            Err(e) => {
                // Recorded, not skipped: every row this prompt was for says why it has nothing.
                let msg = self.prompt_failure(&e).await;
                self.fail_steps(&cells, scout_pending, msg)?;
                return Ok(Flow::Go);
            }
        };
        if let Some(i) = scout_pending {
            if self.prefill_row(i, &prompt).await? == Flow::Stopped {
                return Ok(Flow::Stopped);
            }
        }
        // The scouts' prompts were all new to the server; the cells share this one, warm.
        if !cells.is_empty() {
            self.progress.event(&Event::Phase {
                step: &format!("context {}", ctx.label),
                phase: Phase::Warming,
            });
            self.run.warm(&prompt.generation, 1, self.stop).await;
        }
        for i in cells {
            if let Some(msg) = self.still_unreachable().await {
                self.fail_steps(&[i], None, msg)?;
                continue;
            }
            if self.decode_cell(i, &prompt).await? == Flow::Stopped {
                return Ok(Flow::Stopped);
            }
        }
        Ok(Flow::Go)
    }

    /// Rows and cells that cannot be measured fail with `msg`, each counted as one failure of
    /// its kind, and the results are written.
    fn fail_steps(
        &mut self,
        cells: &[usize],
        scout: Option<usize>,
        msg: ErrorMessage,
    ) -> Result<(), String> {
        let failed = || CellStatus::Failed(msg.kind.map(|k| vec![(k, 1)]).unwrap_or_default());
        // In the order the plan runs them (the progress display counts them so).
        if let Some(i) = scout {
            let row = &mut self.report.prefill[i];
            row.status = failed();
            row.error_messages = vec![msg.clone()];
            let line = format!("prefill {}: {}", row.context_label, prefill_line(row));
            self.progress.line(&line);
            self.step_done(Some(i));
        }
        for &i in cells {
            let c = &mut self.report.decode[i];
            c.status = failed();
            c.error_messages = vec![msg.clone()];
            let line = format!(
                "cell {} x {}: {}",
                c.context_label,
                c.concurrency,
                cell_line(c)
            );
            self.progress.line(&line);
            self.step_done(None);
        }
        write_results(self.cfg, &self.report)
    }

    /// The server's connection error when it is still unreachable; `None` when it was not
    /// found unreachable since, or answers again (one connection attempt, no wait).
    async fn still_unreachable(&mut self) -> Option<ErrorMessage> {
        self.unreachable.as_ref()?;
        self.unreachable = reachability(self.run.client).await;
        self.unreachable.clone()
    }

    /// Why a prompt could not be built, with its kind: a server that no longer takes
    /// connections is `connect` (and later steps fail at once), anything else `prompt`.
    async fn prompt_failure(&mut self, e: &str) -> ErrorMessage {
        self.unreachable = reachability(self.run.client).await;
        match &self.unreachable {
            Some(m) => m.clone(),
            None => ErrorMessage::new(
                Some(ErrorKind::Prompt),
                None,
                &format!("cannot build the prompt: {e}"),
            ),
        }
    }

    /// The prompt for a context, with its progress lines; `None` when stopped.
    async fn prompt(&mut self, label: &str, tokens: u64) -> Option<Result<Prepared, String>> {
        self.progress.event(&Event::Phase {
            step: &format!("context {label}"),
            phase: Phase::Preparing,
        });
        self.progress.line(&format!(
            "context {label}: preparing a {tokens}-token prompt"
        ));
        let r = self.run.prepare(tokens, self.cfg.seed).await;
        match &r {
            Ok(p) => {
                if let Some(n) = &p.note {
                    self.progress.line(&format!("context {label}: prompt: {n}"));
                }
            }
            Err(e) => self
                .progress
                .line(&format!("context {label}: cannot build the prompt: {e}")),
        }
        (!self.stop.is_cancelled() || r.is_ok()).then_some(r)
    }

    /// Prefill row `i`: cold samples of `prompt`, each with a first line of its own.
    async fn prefill_row(&mut self, i: usize, prompt: &Prepared) -> Result<Flow, String> {
        let cfg = self.cfg;
        let context = self.plan.prefill[i].context.tokens;
        let label = self.plan.prefill[i].context.label.clone();
        let switches = ColdSwitches {
            cache_salt: self.run.info.engine == EngineKind::Vllm,
            no_prompt_cache: self.run.info.engine == EngineKind::LlamaCpp,
        };
        let mut samples = Vec::new();
        for s in 0..cfg.plan.prefill_samples.max(1) {
            let salt = format!("{}-{context}-{s}", self.run.run_id);
            let sample = match self.fresh_sample(prompt, context, s).await {
                Ok(p) => {
                    if let Some(n) = p.tokens.filter(|&n| n != prompt.tokens) {
                        self.progress.line(&format!(
                            "prefill {label}: sample {}'s prompt counts {n} tokens, not {} (the closest of {} first lines)",
                            s + 1,
                            prompt.tokens,
                            p.tries
                        ));
                    }
                    scout::cold_prompt(&prompt.generation, &p.fresh, switches, &salt)
                        .and_then(|g| self.cold_images(g, context, s))
                }
                Err(e) => Err(format!("a cold sample's first line: {e}")),
            };
            match sample {
                Ok(g) => samples.push(g),
                Err(e) => {
                    let msg = ErrorMessage::new(Some(ErrorKind::Prompt), None, &e);
                    self.fail_steps(&[], Some(i), msg)?;
                    return Ok(Flow::Go);
                }
            }
        }
        let n = samples.len();
        let plural = if n == 1 { "" } else { "s" };
        self.progress.event(&Event::Phase {
            step: &format!("prefill {label}"),
            phase: Phase::Prefill,
        });
        let images = match &cfg.images {
            Some(spec) => format!(", each with {} new images", spec.label()),
            None => String::new(),
        };
        self.progress
            .line(&format!("prefill {label}: {n} cold sample{plural}{images}"));
        let row = &mut self.report.prefill[i];
        row.image_tokens = cfg.images.map(|_| prompt.image_tokens);
        if !scout::prefill(self.run.client, &samples, row, prompt.tokens, self.stop).await {
            return Ok(Flow::Stopped);
        }
        let lost = connection_error(&row.error_messages);
        let line = prefill_line(row);
        self.unreachable = lost;
        self.progress.line(&format!("prefill {label}: {line}"));
        self.step_done(Some(i));
        write_results(cfg, &self.report)?;
        Ok(Flow::Go)
    }

    /// With `--images`, prefill sample `s` of `context` carries images of its own: new to the
    /// server (no other request of any run sends them), so its prefill includes the vision
    /// encoder and no multimodal cache holds them. Made here, before the row's first request.
    fn cold_images(&self, mut g: Generation, context: u64, s: u32) -> Result<Generation, String> {
        if let Some(spec) = &self.cfg.images {
            let key = mix(
                mix(key_of(&self.run.run_id), context),
                0xC01D_0000 + u64::from(s),
            );
            let images = crate::matrix::images::make(spec, key)?;
            crate::matrix::images::attach(&mut g, &images)?;
        }
        Ok(g)
    }

    /// Prefill sample `s`'s fresh start: one whose prompt keeps `prompt`'s count, where the
    /// run counts without a prefill.
    async fn fresh_sample(
        &self,
        prompt: &Prepared,
        context: u64,
        s: u32,
    ) -> Result<scout::Picked, String> {
        let candidates = (0..scout::FRESH_TRIES)
            .map(|t| fresh_start(&self.run, context, self.cfg.seed, s, t))
            .collect::<Result<Vec<_>, _>>()?;
        let run = &self.run;
        scout::pick_fresh(candidates, prompt.tokens, async |f: &Fresh| {
            run.count_fresh(prompt, f).await
        })
        .await
    }

    /// Decode cell `i` (retried once with a fresh prompt when it looped and the user asked).
    async fn decode_cell(&mut self, i: usize, prompt: &Prepared) -> Result<Flow, String> {
        let cfg = self.cfg;
        let (ctx, label, c) = {
            let d = &self.report.decode[i];
            (d.context, d.context_label.clone(), d.concurrency)
        };
        let mut cell_cfg = CellConfig {
            concurrency: c as u32,
            duration: cfg.duration,
            ready_timeout: cfg.ready_timeout,
            ready_stable: cfg.ready_stable,
            drain_timeout: cfg.drain_timeout,
            repetition: cfg.repetition,
            sample_period: Duration::from_millis(500),
            request_ids: Some(CellIds {
                run: request_id::run_tag(&self.run.run_id),
                attempt: 0,
            }),
        };
        let mut generation = prompt.generation.clone();
        for attempt in 0..2u64 {
            if self.stop.is_cancelled() {
                return Ok(Flow::Stopped);
            }
            self.progress.line(&format!(
                "cell {label} x {c}: running ({} s window)",
                cfg.duration.as_secs_f64()
            ));
            if attempt > 0 {
                // The retry's requests must not reuse the first attempt's ids.
                cell_cfg.request_ids = cell_cfg.request_ids.map(|i| CellIds {
                    attempt: attempt as u8,
                    ..i
                });
            }
            let req = generation
                .stream_request(Some(false))
                .map_err(|e| format!("request: {e}"))?;
            let blank = DecodeCell::empty(ctx, &label, c, CellStatus::Pending);
            let sampling =
                self.report.metadata.hardware.gpu_source.as_deref() == Some("nvidia-smi");
            let gpu = sampling.then(|| GpuSampler::start(GPU_SAMPLE_EVERY));
            let mut r = run_cell(
                self.run.client,
                &req,
                self.names,
                &cell_cfg,
                blank,
                self.stop,
                self.progress,
            )
            .await;
            if let Some(g) = gpu {
                r.cell.gpu_samples = g.stop().await;
            }
            self.unreachable = r.unreachable.as_ref().map(unreachable_message);
            self.explain_empty_400(&mut r.cell, &req, &cell_cfg).await;
            if r.interrupted {
                self.keep_interrupted(i, r.cell)?;
                return Ok(Flow::Stopped);
            }
            self.progress
                .line(&format!("cell {label} x {c}: {}", cell_line(&r.cell)));
            let looped = r.cell.status == CellStatus::Looped;
            self.report.decode[i] = r.cell;
            write_results(cfg, &self.report)?;
            if !(looped && cfg.retry_looped && attempt == 0) {
                break;
            }
            self.progress.line(&format!(
                "cell {label} x {c}: looped; retrying once with a fresh prompt"
            ));
            match self
                .run
                .prepare(ctx, mix(cfg.seed, 0x5EED + attempt + 1))
                .await
            {
                Ok(p) => {
                    self.run.warm(&p.generation, 1, self.stop).await;
                    generation = p.generation;
                }
                Err(e) => {
                    self.progress.line(&format!("retry prompt failed: {e}"));
                    break;
                }
            }
        }
        self.step_done(None);
        Ok(Flow::Go)
    }

    /// A cell the run was stopped in: when its window had opened, its shortened measurement is
    /// kept with its real window length and marked `interrupted` (a later `--resume` measures
    /// it again); stopped before the window, nothing was measured and it stays Pending.
    fn keep_interrupted(&mut self, i: usize, mut cell: DecodeCell) -> Result<(), String> {
        let Some(measured) = cell.measured_s else {
            return Ok(());
        };
        cell.interrupted = true;
        cell.notes.push(format!(
            "the run was stopped inside this cell's window: its figures cover {measured:.1} s of the planned {:.1} s",
            self.cfg.duration.as_secs_f64()
        ));
        self.progress.line(&format!(
            "cell {} x {}: interrupted after {measured:.1} s of its window; kept, marked interrupted",
            cell.context_label, cell.concurrency
        ));
        self.report.decode[i] = cell;
        write_results(self.cfg, &self.report)
    }

    /// A cell refused with `400` and an empty body says nothing about why: the first time in a
    /// run, send its first request again without each suspect (`server::diagnose`) and add the
    /// cause to the cell's message.
    async fn explain_empty_400(
        &mut self,
        cell: &mut DecodeCell,
        req: &crate::net::StreamRequest,
        cell_cfg: &CellConfig,
    ) {
        if self.diagnosed {
            return;
        }
        let Some(m) = cell
            .error_messages
            .iter_mut()
            .find(|m| m.http_status == Some(400) && m.message.ends_with(crate::net::EMPTY_BODY))
        else {
            return;
        };
        self.diagnosed = true;
        let mut first = req.clone();
        first.request_id = cell_cfg.request_ids.map(|i| {
            RequestId::Matrix {
                run: i.run,
                attempt: i.attempt,
                context: cell.context,
                concurrency: cell.concurrency as u32,
                stream: 0,
                n: 0,
            }
            .to_string()
        });
        let cause = diagnose::empty_400(self.run.client, &first).await;
        let hint = diagnose::explain(&cause, diagnose::Command::Matrix);
        self.progress.line(&format!(
            "cell {} x {}: the server refused the request: {hint}",
            cell.context_label, cell.concurrency
        ));
        *m = ErrorMessage::new(m.kind, m.http_status, &format!("{}: {hint}", m.message));
    }

    /// Prefill-only contexts (e.g. the full max_model_len - 1), after every decode row.
    async fn prefill_only(&mut self, prefill_done: &[bool]) -> Result<Flow, String> {
        let plan = self.plan;
        for (i, p) in plan.prefill.iter().enumerate() {
            if prefill_done[i]
                || p.status.is_some()
                || self.report.prefill[i].status != CellStatus::Pending
            {
                continue;
            }
            if self.stop.is_cancelled() {
                return Ok(Flow::Stopped);
            }
            if let Some(msg) = self.still_unreachable().await {
                self.fail_steps(&[], Some(i), msg)?;
                continue;
            }
            let Some(prompt) = self.prompt(&p.context.label, p.context.tokens).await else {
                return Ok(Flow::Stopped);
            };
            match prompt {
                Ok(prompt) => {
                    if self.prefill_row(i, &prompt).await? == Flow::Stopped {
                        return Ok(Flow::Stopped);
                    }
                }
                Err(e) => {
                    let msg = self.prompt_failure(&e).await;
                    self.fail_steps(&[], Some(i), msg)?;
                }
            }
        }
        Ok(Flow::Go)
    }
}

/// The longest a reachability check waits (a refused connection answers at once).
const REACHABILITY_TIMEOUT: Duration = Duration::from_secs(10);

/// One `GET /v1/models`: `None` when the server answers (whatever it answers), else its
/// connection error. A server that accepts but does not answer within the limit is not
/// unreachable: its steps run and say what they get.
async fn reachability(client: &Client) -> Option<ErrorMessage> {
    match tokio::time::timeout(REACHABILITY_TIMEOUT, client.get("/v1/models")).await {
        Ok(Err(e)) if unreachable(&e) => Some(unreachable_message(&e)),
        _ => None,
    }
}

/// The error every step records while the server cannot be reached.
fn unreachable_message(e: &RequestError) -> ErrorMessage {
    ErrorMessage::new(
        Some(e.kind),
        e.status,
        &format!("server unreachable: {}", e.message),
    )
}

/// The first connection error among a row's errors, as the message later steps record.
fn connection_error(errors: &[ErrorMessage]) -> Option<ErrorMessage> {
    errors
        .iter()
        .find(|m| matches!(m.kind, Some(ErrorKind::Connect | ErrorKind::TimeoutConnect)))
        .cloned()
}

/// The console words for a finished prefill row: figures, or why it failed.
fn prefill_line(row: &PrefillRow) -> String {
    match (&row.status, row.prefill_tok_per_s, row.ttft_ms) {
        (CellStatus::Valid, Some(r), Some(t)) => {
            format!("{r:.0} tok/s, TTFT {t:.1} ms ({} samples)", row.samples)
        }
        (s, _, _) => with_first_error(s.label(), &row.error_messages),
    }
}

/// The console words for a finished cell: status, figures, and the first error and note (or,
/// without a note, why it is Client-bound).
fn cell_line(cell: &DecodeCell) -> String {
    let mut s = cell.status.label().to_string();
    if let Some(t) = cell.output_tok_per_s {
        s.push_str(&format!(" {t:.1} tok/s"));
    }
    s = with_first_error(&s, &cell.error_messages);
    let why = cell.client_lag.iter().flat_map(|l| &l.client_bound_reasons);
    let client_bound = why.map(|r| format!("Client-bound: {r}"));
    // Where the stamps put no bound on the figures, why (in place of a silent "no verdict").
    let no_bound = cell.client_lag.iter().flat_map(|l| &l.no_bound_reason);
    let batched = cell
        .client_lag
        .iter()
        .flat_map(|l| &l.upstream_batching_reason);
    let batched = batched.map(|r| format!("upstream batching: {r}"));
    let notes = cell
        .notes
        .iter()
        .cloned()
        .chain(client_bound)
        .chain(batched);
    if let Some(n) = notes.chain(no_bound.cloned()).next() {
        s.push_str(&format!(" ({n})"));
    }
    s
}

fn with_first_error(head: &str, errors: &[ErrorMessage]) -> String {
    match errors.first() {
        Some(e) => format!("{head}: {}", e.display()),
        None => head.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_say_why_a_row_failed() {
        use crate::timeline::ErrorKind;
        let mut cell = DecodeCell::empty(512, "512", 4, CellStatus::Failed(Vec::new()));
        assert_eq!(cell_line(&cell), "Failed");
        cell.error_messages.push(ErrorMessage::new(
            Some(ErrorKind::HttpStatus),
            Some(400),
            "context too long",
        ));
        cell.error_messages.push(ErrorMessage::new(
            Some(ErrorKind::TimeoutGap),
            None,
            "no event in 30 s",
        ));
        cell.notes.push("the server did not drain".into());
        assert_eq!(
            cell_line(&cell),
            "Failed: http_status (HTTP 400): context too long (the server did not drain)"
        );
        let mut valid = DecodeCell::empty(512, "512", 1, CellStatus::Valid);
        valid.output_tok_per_s = Some(95.66);
        assert_eq!(cell_line(&valid), "Valid 95.7 tok/s");
        let mut bound = valid.clone();
        bound.status = CellStatus::ClientBound;
        let lag = crate::analysis::client_lag::LagSamples::default().summary(None);
        bound.client_lag = Some(crate::report::client_lag::ClientLagFigures::new(
            &lag,
            vec!["the gap p50 of 0.000 ms is known only to ±1.000 ms".into()],
        ));
        assert_eq!(
            cell_line(&bound),
            "Client-bound 95.7 tok/s (Client-bound: the gap p50 of 0.000 ms is known only to ±1.000 ms)"
        );
        // A cell whose stamps put no bound on its figures says why.
        let mut tls = valid.clone();
        let mut figures = crate::report::client_lag::ClientLagFigures::new(&lag, Vec::new());
        figures.no_bound_reason = Some("no bounds, so no Client-bound verdict from them".into());
        tls.client_lag = Some(figures);
        assert_eq!(
            cell_line(&tls),
            "Valid 95.7 tok/s (no bounds, so no Client-bound verdict from them)"
        );
        // A cell whose tokens a proxy batched says so, before any missing bound.
        let mut proxied = tls.clone();
        if let Some(l) = proxied.client_lag.as_mut() {
            l.upstream_batched = true;
            l.upstream_batching_reason =
                Some("100% of tokens arrived several to a TCP segment".into());
        }
        assert_eq!(
            cell_line(&proxied),
            "Valid 95.7 tok/s (upstream batching: 100% of tokens arrived several to a TCP segment)"
        );
        let mut row = PrefillRow {
            context: 512,
            context_label: "512".into(),
            status: CellStatus::Failed(vec![(ErrorKind::HttpStatus, 2)]),
            prompt_tokens: None,
            ttft_ms: None,
            prefill_tok_per_s: None,
            samples: 0,
            ttft_ms_samples: Vec::new(),
            server_prompt_tokens: None,
            image_tokens: None,
            error_messages: vec![ErrorMessage::new(None, None, "cannot build the prompt: x")],
            measured_under: None,
        };
        assert_eq!(
            prefill_line(&row),
            "Failed: prompt: cannot build the prompt: x"
        );
        row.status = CellStatus::Valid;
        row.prefill_tok_per_s = Some(31_379.3);
        row.ttft_ms = Some(261.04);
        row.samples = 3;
        assert_eq!(prefill_line(&row), "31379 tok/s, TTFT 261.0 ms (3 samples)");
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_015_074), "2026-11-30T05:04:34Z");
    }
}
