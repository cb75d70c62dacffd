//! The matrix run, end to end: probe -> plan -> warm-up -> per context (prompt of an exact token
//! count, prefill scout, decode cells) -> results written after every measurement.
//!
//! Owns the order of work, prompt preparation (token ids, `/tokenize` calibration, or a usage
//! estimate), resume and interruption. It never formats reports itself (that is `report`) and
//! never decides a verdict rule (that is `status`); progress goes through a callback.

use crate::analysis::repetition::RepetitionConfig;
use crate::matrix::cell::{run_cell, CellConfig};
use crate::matrix::plan::{EstimateInputs, Plan, PlanConfig};
use crate::matrix::scout;
use crate::matrix::status::CellStatus;
use crate::net::request::{Generation, Prompt as NetPrompt};
use crate::net::{Cancel, Client, NoopObserver};
use crate::report::files;
use crate::report::{
    methodology, rows_from_plan, Engine, Hardware, Limits, MatrixReport, Metadata, ModelInfo,
    PrefillMode, PromptTokens, Settings, SCHEMA_VERSION,
};
use crate::server::probe::SAFE_TOKEN_IDS;
use crate::server::{collect, detect, MetricNames, Overrides, ServerInfo, TokenizeStyle};
use crate::sys::unix_now;
use crate::workload::prompt_cache::{self, CacheKey, CachedPrompt};
use crate::workload::prose::{self, PromptBuilder, PromptKind};
use crate::workload::tokenizer::LocalTokenizer;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How prompt sizes are made exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptMode {
    /// `/tokenize` calibration where the server has it (natural prose), else token ids, else
    /// the usage estimate.
    Auto,
    TokenIds,
    Tokenize,
    Usage,
}

/// What the header cannot probe.
#[derive(Clone, Debug, Default)]
pub struct HeaderFacts {
    pub gpu: Option<String>,
    pub vram_gb: Option<f64>,
    pub hardware: Option<String>,
    pub launch_command: Option<String>,
    pub engine_build: Option<String>,
    pub notes: Option<String>,
}

#[derive(Clone, Debug)]
pub struct MatrixConfig {
    pub plan: PlanConfig,
    pub duration: Duration,
    pub model: Option<String>,
    pub chat: bool,
    pub prompt_mode: PromptMode,
    pub seed: u64,
    pub ignore_eos: bool,
    pub out_dir: PathBuf,
    /// Keep finished measurements found in `out_dir/results.json`.
    pub resume: bool,
    /// Keep them even when they were measured with other settings (see `matrix::resume`).
    pub resume_force: bool,
    pub retry_looped: bool,
    pub repetition: RepetitionConfig,
    pub overrides: Overrides,
    pub header: HeaderFacts,
    pub ready_timeout: Duration,
    /// How long the server's metrics must keep showing the gate condition before the window
    /// opens.
    pub ready_stable: Duration,
    pub drain_timeout: Duration,
    pub base_url: String,
    /// Skip the warm-up request (tests).
    pub skip_warmup: bool,
    /// Calibrated prompts are kept here by (model, context, seed, kind); `None` calibrates
    /// every run.
    pub prompt_cache: Option<PathBuf>,
    /// `--tokenizer`: count calibration locally instead of with `/tokenize` (completions
    /// prompts only; chat prompts need the server's chat template).
    pub tokenizer: Option<Arc<LocalTokenizer>>,
}

/// A prompt ready to send, and its size.
struct Prepared {
    generation: Generation,
    tokens: u64,
    /// Where the prompt came from (cache, calibration), for the progress line.
    note: Option<String>,
}

/// The run id a cached prompt is stored under. Never sent: a loaded prompt gets this run's id
/// (see [`prose::Prompt::replace_prefix`]).
const CACHE_RUN_ID: &str = "xxxxxxxx";

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

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

async fn count_tokens(
    client: &Client,
    style: TokenizeStyle,
    model: &str,
    p: &prose::Prompt,
) -> Result<u64, String> {
    let body = match (style, p) {
        (TokenizeStyle::PromptCount, prose::Prompt::Text(t)) => {
            json!({"model": model, "prompt": t, "add_special_tokens": true})
        }
        (TokenizeStyle::PromptCount, prose::Prompt::Chat(m)) => json!({
            "model": model,
            "messages": chat_messages(m),
            "add_generation_prompt": true
        }),
        (TokenizeStyle::Content, prose::Prompt::Text(t)) => {
            json!({"content": t, "add_special": true})
        }
        (TokenizeStyle::Content, prose::Prompt::Chat(m)) => {
            let joined: Vec<&str> = m.iter().map(|m| m.content.as_str()).collect();
            json!({"content": joined.join("\n\n"), "add_special": true})
        }
    };
    let r = client
        .post_json("/tokenize", body.to_string().as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    if !r.is_success() {
        return Err(format!(
            "/tokenize answered {}: {}",
            r.status,
            r.error_message()
        ));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("/tokenize: {e}"))?;
    v.get("count")
        .and_then(Value::as_u64)
        .or_else(|| {
            v.get("tokens")
                .and_then(Value::as_array)
                .map(|a| a.len() as u64)
        })
        .ok_or_else(|| "/tokenize answer has neither count nor tokens".to_string())
}

/// `p` counted with `--tokenizer` (synchronous: a few milliseconds for a cache check).
fn local_count(cfg: &MatrixConfig, p: &prose::Prompt) -> Result<u64, String> {
    let tok = cfg
        .tokenizer
        .as_ref()
        .ok_or("no local tokenizer loaded (--tokenizer)")?;
    tok.count_prompt(p).map_err(|e| e.to_string())
}

/// `usage.prompt_tokens` of a one-token non-streaming request (the last-resort counter).
async fn usage_count(client: &Client, g: &Generation) -> Result<u64, String> {
    let mut g = g.clone();
    g.max_tokens = Some(1);
    g.ignore_eos = false;
    let mut body: Value =
        serde_json::from_slice(&g.body()?).map_err(|e| format!("request body: {e}"))?;
    body["stream"] = json!(false);
    body.as_object_mut().map(|o| o.remove("stream_options"));
    let r = client
        .post_json(g.path(), body.to_string().as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    if !r.is_success() {
        return Err(format!(
            "{} answered {}: {}",
            g.path(),
            r.status,
            r.error_message()
        ));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("usage: {e}"))?;
    v.pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| "the answer has no usage.prompt_tokens".to_string())
}

fn chat_messages(m: &[prose::ChatMessage]) -> Value {
    Value::Array(
        m.iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect(),
    )
}

struct Run<'a> {
    client: &'a Client,
    cfg: &'a MatrixConfig,
    model: String,
    info: &'a ServerInfo,
    mode: PromptTokens,
    run_id: String,
}

impl Run<'_> {
    fn generation(&self, p: &prose::Prompt) -> Generation {
        let mut g = match p {
            prose::Prompt::Text(t) => Generation::new(&self.model, NetPrompt::Text(t.clone())),
            prose::Prompt::Chat(m) => {
                let mut g = Generation::new(&self.model, NetPrompt::Text(String::new()));
                g.chat = true;
                // Three turns; `extra` is merged last so it replaces the single-message form.
                g.extra.insert("messages".into(), chat_messages(m));
                g
            }
        };
        g.max_tokens = Some(self.cfg.plan.max_tokens as u32);
        g.ignore_eos = self.cfg.ignore_eos;
        g
    }

    /// Build the prompt of `target` tokens for one context and seed.
    async fn prepare(&self, target: u64, seed: u64) -> Result<Prepared, String> {
        let kind = if self.cfg.chat {
            PromptKind::Chat
        } else {
            PromptKind::Completion
        };
        match self.mode {
            PromptTokens::TokenIds => {
                let ids = prose::token_ids(
                    target as usize,
                    mix(mix(seed, target), self.run_id.len() as u64 ^ unix_now()),
                    SAFE_TOKEN_IDS,
                )
                .map_err(|e| e.to_string())?;
                let mut g = Generation::new(&self.model, NetPrompt::TokenIds(ids));
                g.max_tokens = Some(self.cfg.plan.max_tokens as u32);
                g.ignore_eos = self.cfg.ignore_eos;
                Ok(Prepared {
                    generation: g,
                    tokens: target,
                    note: None,
                })
            }
            PromptTokens::TokenizeEndpoint
            | PromptTokens::LocalTokenizer
            | PromptTokens::UsageEstimate => self.calibrated(target, seed, kind).await,
        }
    }

    /// Count `p` the way this run counts: `/tokenize`, a local tokenizer, or the usage of a
    /// one-token request.
    async fn count(&self, p: &prose::Prompt) -> Result<u64, String> {
        match self.mode {
            PromptTokens::UsageEstimate => usage_count(self.client, &self.generation(p)).await,
            PromptTokens::LocalTokenizer => local_count(self.cfg, p),
            _ => {
                let style = self.info.tokenize.unwrap_or(TokenizeStyle::PromptCount);
                count_tokens(self.client, style, &self.model, p).await
            }
        }
    }

    /// A calibrated prompt: from the cache when it holds one for this (model, context, seed,
    /// kind) and one count confirms its size with this run's first line, else calibrated and
    /// stored. The first line differs per run, and a tokenizer may split two run ids into
    /// different numbers of tokens; the confirming count is what keeps the size exact.
    async fn calibrated(
        &self,
        target: u64,
        seed: u64,
        kind: PromptKind,
    ) -> Result<Prepared, String> {
        let key = CacheKey {
            model: &self.model,
            context: target,
            seed,
            kind,
        };
        let stored_prefix = prose::prompt_prefix(CACHE_RUN_ID, target, seed);
        let run_prefix = prose::prompt_prefix(&self.run_id, target, seed);
        let mut notes = Vec::new();
        if let Some(dir) = &self.cfg.prompt_cache {
            match prompt_cache::load(dir, &key) {
                Ok(Some(c)) => {
                    let mut p = c.prompt;
                    if !p.replace_prefix(&stored_prefix, &run_prefix) {
                        notes.push("cached prompt has another first line; recalibrating".into());
                    } else {
                        let n = self.count(&p).await?;
                        if n == c.tokens && n <= target {
                            return Ok(Prepared {
                                generation: self.generation(&p),
                                tokens: n,
                                note: Some(format!("{n} tokens, from the prompt cache (1 count)")),
                            });
                        }
                        notes.push(format!(
                            "cached prompt counts {n} tokens now, {} when stored; recalibrating",
                            c.tokens
                        ));
                    }
                }
                Ok(None) => {}
                Err(e) => notes.push(format!("{e}; recalibrating")),
            }
        }
        let (prompt, tokens, calls) = self.calibrate(target, seed, kind).await?;
        notes.push(format!("{tokens} tokens, calibrated in {calls} counts"));
        if let Some(dir) = &self.cfg.prompt_cache {
            let mut stored = prompt.clone();
            // Always true: the builder wrote `run_prefix`.
            if stored.replace_prefix(&run_prefix, &stored_prefix) {
                let cached = CachedPrompt {
                    prompt: stored,
                    tokens,
                };
                if let Err(e) = prompt_cache::store(dir, &key, &cached) {
                    notes.push(format!("not cached: {e}"));
                }
            }
        }
        Ok(Prepared {
            generation: self.generation(&prompt),
            tokens,
            note: Some(notes.join("; ")),
        })
    }

    /// Search for the prompt size; returns the prompt, its count and the counting calls.
    async fn calibrate(
        &self,
        target: u64,
        seed: u64,
        kind: PromptKind,
    ) -> Result<(prose::Prompt, u64, u32), String> {
        match self.mode {
            PromptTokens::TokenIds => Err("token-id prompts need no calibration".into()),
            PromptTokens::LocalTokenizer => {
                let tok = self
                    .cfg
                    .tokenizer
                    .clone()
                    .ok_or("no local tokenizer loaded (--tokenizer)")?;
                let run_id = self.run_id.clone();
                // Counting a long prompt locally takes tens of milliseconds per call: keep it off
                // the runtime's worker threads.
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(target, |p| tok.count_prompt(p), 24)
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
            PromptTokens::TokenizeEndpoint => {
                let style = self.info.tokenize.unwrap_or(TokenizeStyle::PromptCount);
                let handle = tokio::runtime::Handle::current();
                let client = self.client.clone();
                let model = self.model.clone();
                let run_id = self.run_id.clone();
                // Calibration is a synchronous search; run it on a blocking thread that waits
                // on the async tokenize calls.
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(
                        target,
                        |p| handle.block_on(count_tokens(&client, style, &model, p)),
                        24,
                    )
                    .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
            PromptTokens::UsageEstimate => {
                // Few calls: each one prefills the whole prompt on the server.
                let handle = tokio::runtime::Handle::current();
                let client = self.client.clone();
                let run_id = self.run_id.clone();
                let gen_of = {
                    let model = self.model.clone();
                    let max_tokens = self.cfg.plan.max_tokens as u32;
                    move |p: &prose::Prompt| {
                        let mut g = match p {
                            prose::Prompt::Text(t) => {
                                Generation::new(&model, NetPrompt::Text(t.clone()))
                            }
                            prose::Prompt::Chat(m) => {
                                let mut g = Generation::new(&model, NetPrompt::Text(String::new()));
                                g.chat = true;
                                g.extra.insert("messages".into(), chat_messages(m));
                                g
                            }
                        };
                        g.max_tokens = Some(max_tokens);
                        g
                    }
                };
                let cal = tokio::task::spawn_blocking(move || {
                    let mut b = PromptBuilder::new(&run_id, target, seed, kind);
                    b.calibrate(
                        target,
                        |p| handle.block_on(usage_count(&client, &gen_of(p))),
                        4,
                    )
                    .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| format!("calibration task: {e}"))??;
                Ok((cal.prompt, cal.tokens, cal.calls))
            }
        }
    }

    /// One hidden request that only warms (the prefix cache, or the server's first-request
    /// costs).
    async fn warm(&self, g: &Generation, max_tokens: u32, stop: &Cancel) {
        let mut g = g.clone();
        g.max_tokens = Some(max_tokens);
        if let Ok(req) = g.stream_request(Some(false)) {
            let _ = self
                .client
                .stream(&req, self.client.clock().raw(), &mut NoopObserver, stop)
                .await;
        }
    }
}

/// Everything before the first measurement: probe, plan, the report skeleton.
pub struct Prepared0 {
    pub info: ServerInfo,
    pub plan: Plan,
    pub report: MatrixReport,
}

/// Probe and plan; nothing is measured yet.
pub async fn plan_run(client: &Client, cfg: &MatrixConfig) -> Result<Prepared0, String> {
    let collected = collect(client, cfg.model.as_deref()).await?;
    let info = detect(&collected, &cfg.overrides);
    let model = cfg
        .model
        .clone()
        .or_else(|| info.model.clone())
        .ok_or("the server lists no model; pass --model")?;
    let plan = Plan::new(&cfg.plan, info.limits());
    let mode = match cfg.prompt_mode {
        PromptMode::TokenIds => PromptTokens::TokenIds,
        PromptMode::Auto | PromptMode::Tokenize if cfg.tokenizer.is_some() => {
            PromptTokens::LocalTokenizer
        }
        PromptMode::Tokenize => PromptTokens::TokenizeEndpoint,
        PromptMode::Usage => PromptTokens::UsageEstimate,
        PromptMode::Auto if info.tokenize.is_some() => PromptTokens::TokenizeEndpoint,
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
    if mode == PromptTokens::TokenizeEndpoint && info.tokenize.is_none() {
        return Err(
            "the server has no /tokenize endpoint (try --prompt-mode token-ids or usage)".into(),
        );
    }
    let settings = Settings {
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
        loop_rule: Some(crate::report::LoopRule {
            min_repeats: cfg.repetition.min_repeats as u64,
            min_span_chars: cfg.repetition.min_span as u64,
            max_period_chars: cfg.repetition.max_period as u64,
        }),
    };
    let (prefill, decode) = rows_from_plan(&plan);
    let h = &cfg.header;
    let report = MatrixReport {
        schema_version: SCHEMA_VERSION,
        metadata: Metadata {
            tool: "llmspeed".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            date: rfc3339(unix_now()),
            interrupted: None,
            base_url: Some(cfg.base_url.clone()),
            hardware: Hardware {
                // Nothing here knows the kind of accelerator; the report shows only what the
                // user told (--gpu, --vram-gb, --hardware).
                kind: None,
                gpu: h.gpu.clone(),
                vram_gb: h.vram_gb,
                os: Some(std::env::consts::OS.to_string()),
                description: h.hardware.clone(),
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
            settings: settings.clone(),
            launch_command: h.launch_command.clone(),
            notes: h.notes.clone(),
        },
        methodology: methodology(&settings),
        prefill,
        decode,
    };
    Ok(Prepared0 { info, plan, report })
}

/// Estimate for the plan banner, in seconds.
pub fn estimate(plan: &Plan, cfg: &MatrixConfig) -> f64 {
    plan.estimate_seconds(cfg.duration.as_secs_f64(), &EstimateInputs::default())
}

/// Run the planned measurements, writing the results folder after each one. `progress` gets
/// one line per step. Returns the final report (also when stopped by `stop`).
pub async fn execute(
    client: &Client,
    cfg: &MatrixConfig,
    prepared: Prepared0,
    stop: &Cancel,
    progress: &mut dyn FnMut(&str),
) -> Result<MatrixReport, String> {
    let Prepared0 {
        info,
        plan,
        mut report,
    } = prepared;
    if cfg.resume {
        // A results file that cannot be read is never overwritten: it holds measurements that
        // took hours, and the user must decide what to do with it.
        let old = files::read_json(&cfg.out_dir).map_err(|e| {
            format!(
                "cannot resume from {}: {e} (nothing was overwritten; move the folder away to start afresh)",
                cfg.out_dir.display()
            )
        })?;
        let kept = super::resume::resume(&mut report, &old, cfg.resume_force)
            .map_err(|e| format!("cannot resume from {}: {e}", cfg.out_dir.display()))?;
        report.metadata.date = old.metadata.date.clone();
        progress(&format!("resume: {kept} finished measurements kept"));
    }
    let write = |r: &MatrixReport| files::write_all(&cfg.out_dir, r).map_err(|e| e.to_string());
    write(&report)?;
    let run = Run {
        client,
        cfg,
        model: report.metadata.model.id.clone(),
        info: &info,
        mode: report.metadata.settings.prompt_tokens,
        // Nanoseconds, not seconds: two runs in one second (tests, scripts) still differ.
        // Eight decimal digits: tokenizers split a fixed-width digit string the same way
        // whatever the digits (hex letters can form words), so a cached prompt keeps its exact
        // token count when this run's id replaces the stored placeholder.
        run_id: format!(
            "{:08}",
            mix(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                std::process::id() as u64
            ) % 100_000_000
        ),
    };
    let names = if info.has_metrics {
        MetricNames::for_engine(info.engine)
    } else {
        None
    };
    let cell_cfg = |c: u64| CellConfig {
        concurrency: c as u32,
        duration: cfg.duration,
        ready_timeout: cfg.ready_timeout,
        ready_stable: cfg.ready_stable,
        drain_timeout: cfg.drain_timeout,
        repetition: cfg.repetition,
        sample_period: Duration::from_millis(500),
    };

    if !cfg.skip_warmup {
        progress("warm-up: one short hidden request");
        let g = Generation::new(
            &run.model,
            NetPrompt::Text("Say hello in one short sentence.".into()),
        );
        let mut g = g;
        g.chat = cfg.chat;
        run.warm(&g, 8, stop).await;
    }

    let mut interrupted = false;
    let ncols = plan.concurrency.len();
    let mut prefill_done = vec![false; plan.prefill.len()];
    'rows: for (row, ctx) in plan.contexts.iter().enumerate() {
        let cells: Vec<usize> = (0..ncols)
            .map(|col| row * ncols + col)
            .filter(|&i| report.decode[i].status == CellStatus::Pending)
            .collect();
        let scout_idx = plan
            .prefill
            .iter()
            .position(|p| p.context.tokens == ctx.tokens && p.status.is_none());
        let scout_pending =
            scout_idx.is_some_and(|i| report.prefill[i].status == CellStatus::Pending);
        if cells.is_empty() && !scout_pending {
            continue;
        }
        if stop.is_cancelled() {
            interrupted = true;
            break;
        }
        progress(&format!(
            "context {}: preparing a {}-token prompt",
            ctx.label, ctx.tokens
        ));
        let prompt = match run.prepare(ctx.tokens, cfg.seed).await {
            Ok(p) => {
                if let Some(n) = &p.note {
                    progress(&format!("context {}: prompt: {n}", ctx.label));
                }
                p
            }
            Err(e) => {
                progress(&format!(
                    "context {}: cannot build the prompt: {e}",
                    ctx.label
                ));
                continue;
            }
        };
        match scout_idx {
            Some(i) if scout_pending => {
                progress(&format!("context {}: prefill scout", ctx.label));
                let salt = format!("{}-{}", run.run_id, ctx.tokens);
                let row = &mut report.prefill[i];
                if !scout::prefill(
                    client,
                    &prompt.generation,
                    cfg.plan.prefill_samples,
                    &salt,
                    row,
                    prompt.tokens,
                    stop,
                )
                .await
                {
                    interrupted = true;
                    break 'rows;
                }
                prefill_done[i] = true;
                write(&report)?;
            }
            // Not measured here: still warm the prefix cache for the cells.
            _ => run.warm(&prompt.generation, 1, stop).await,
        }
        if let Some(i) = scout_idx {
            prefill_done[i] = true;
        }
        for i in cells {
            let c = report.decode[i].concurrency;
            let mut attempt = 0;
            let mut generation = prompt.generation.clone();
            loop {
                if stop.is_cancelled() {
                    interrupted = true;
                    break 'rows;
                }
                progress(&format!(
                    "cell {} x {}: running ({} s window)",
                    ctx.label,
                    c,
                    cfg.duration.as_secs_f64()
                ));
                let req = generation
                    .stream_request(Some(false))
                    .map_err(|e| format!("request: {e}"))?;
                let blank = crate::report::DecodeCell::empty(
                    ctx.tokens,
                    &ctx.label,
                    c,
                    CellStatus::Pending,
                );
                let r = run_cell(client, &req, names, &cell_cfg(c), blank, stop, progress).await;
                if r.interrupted {
                    interrupted = true;
                    break 'rows;
                }
                progress(&format!(
                    "cell {} x {}: {} {}",
                    ctx.label,
                    c,
                    r.cell.status.label(),
                    r.cell
                        .output_tok_per_s
                        .map(|t| format!("{t:.1} tok/s"))
                        .unwrap_or_default()
                ));
                let looped = r.cell.status == CellStatus::Looped;
                report.decode[i] = r.cell;
                write(&report)?;
                if looped && cfg.retry_looped && attempt == 0 {
                    attempt += 1;
                    progress(&format!(
                        "cell {} x {}: looped; retrying once with a fresh prompt",
                        ctx.label, c
                    ));
                    match run
                        .prepare(ctx.tokens, mix(cfg.seed, 0x5EED + attempt))
                        .await
                    {
                        Ok(p) => {
                            run.warm(&p.generation, 1, stop).await;
                            generation = p.generation;
                            continue;
                        }
                        Err(e) => progress(&format!("retry prompt failed: {e}")),
                    }
                }
                break;
            }
        }
    }
    // Prefill-only contexts (e.g. the full max_model_len - 1).
    if !interrupted {
        for (i, p) in plan.prefill.iter().enumerate() {
            if prefill_done[i]
                || p.status.is_some()
                || report.prefill[i].status != CellStatus::Pending
            {
                continue;
            }
            if stop.is_cancelled() {
                interrupted = true;
                break;
            }
            progress(&format!("prefill {}: preparing", p.context.label));
            let prompt = match run.prepare(p.context.tokens, cfg.seed).await {
                Ok(x) => {
                    if let Some(n) = &x.note {
                        progress(&format!("prefill {}: prompt: {n}", p.context.label));
                    }
                    x
                }
                Err(e) => {
                    progress(&format!(
                        "prefill {}: cannot build the prompt: {e}",
                        p.context.label
                    ));
                    continue;
                }
            };
            let salt = format!("{}-{}", run.run_id, p.context.tokens);
            if !scout::prefill(
                client,
                &prompt.generation,
                cfg.plan.prefill_samples,
                &salt,
                &mut report.prefill[i],
                prompt.tokens,
                stop,
            )
            .await
            {
                interrupted = true;
                break;
            }
            write(&report)?;
        }
    }
    if interrupted || stop.is_cancelled() {
        report.metadata.interrupted = Some("stopped by the user (Ctrl-C)".into());
    }
    write(&report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_015_074), "2026-11-30T05:04:34Z");
    }
}
