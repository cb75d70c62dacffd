//! `llmspeed bench serve` flags: `vllm bench serve`'s names, defaults and meanings, grouped in
//! `--help` as vLLM groups them, plus a few of our own under "llmspeed extras".
//!
//! The server's flags and the dataset's are the groups `connection::ConnectionArgs` and
//! `dataset_flags::DatasetArgs`, flattened here as `llmspeed capacity` flattens them.
//!
//! Owns parsing and validating the flags into plain values the runner uses. It must never
//! do IO beyond checking that a `--tokenizer` path exists and holds a `tokenizer.json`; flags we do not support yet are
//! accepted by the parser and refused by [`ServeArgs::validate`] with a message that says so
//! (never silently ignored).

use crate::bench::engine::conversation::MultiTurnConfig;
use crate::bench::engine::session;
use crate::bench::engine::shard::ShardFlags;
pub use crate::bench::vllm::connection::Backend;
use crate::bench::vllm::connection::{split_kv, Connection, ConnectionArgs};
use crate::bench::vllm::dataset_flags::DatasetArgs;
use crate::bench::vllm::flags::{refuse, RefusedFlags};
use crate::bench::vllm::metrics::{parse_percentiles, GoodputSlo, MetricKind};
use crate::workload::datasets::{DatasetConfig, DatasetKind};
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::{Draws, Ramp, RampStrategy, ScheduleConfig};
use std::path::PathBuf;

/// `--request-rate`: a number or `inf`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestRate(pub f64);

impl std::str::FromStr for RequestRate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::bench::engine::session::parse_rate(s).map(RequestRate)
    }
}

/// Which event counts as the first token (see `bench::engine::record::TtftPredicate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TtftFrom {
    /// The first event with a non-empty `choices` list (current vLLM).
    Choice,
    /// The first event that carried output text (older vLLM versions).
    Content,
}

/// Where a chat request ends (see `bench::engine::record::RequestEnd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChatEnd {
    /// The last event with choices; a stream without one fails (current vLLM).
    LastChoice,
    /// The last message before [DONE], usage-only chunk included; a stream without choices
    /// still succeeds (older vLLM releases' chat path).
    LastMessage,
}

/// Where latency starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LatencyFrom {
    /// The scheduled send time: a late send is counted, not hidden.
    Scheduled,
    /// Just before the request was written, as vLLM measures.
    Sent,
}

#[derive(Debug, Clone, clap::Args)]
#[command(about = "Drop-in for `vllm bench serve`: same flags, same result JSON")]
pub struct ServeArgs {
    // ---- the server and how requests reach it (`llmspeed capacity` flattens the same group) ----
    #[command(flatten)]
    pub conn: ConnectionArgs,
    /// Prefix of the request ids: request i is sent with `x-request-id: {prefix}{i}`. Without
    /// it every request carries a UUID (version 8, run tag and request index encoded), which
    /// servers that validate the header as a UUID (llama-cpp-python's) accept too.
    #[arg(long, help_heading = "Server")]
    pub request_id_prefix: Option<String>,
    /// Accepted and without effect, as in vLLM 0.33 (which reads it nowhere).
    #[arg(long, help_heading = "Server")]
    pub use_beam_search: bool,
    /// Log probabilities per token, sent as `logprobs` in completions bodies (vLLM sends
    /// null without it; chat bodies carry no such field).
    #[arg(long, help_heading = "Server")]
    pub logprobs: Option<u32>,
    /// LoRA adapter names served by the server: each request's `model` names one of them
    /// (see --lora-assignment).
    #[arg(long, num_args = 1.., help_heading = "Server")]
    pub lora_modules: Vec<String>,
    /// How requests are spread over --lora-modules: random or round-robin.
    #[arg(long, value_enum, default_value = "random", help_heading = "Server")]
    pub lora_assignment: crate::bench::engine::lora::LoraAssignment,

    // ---- dataset (`llmspeed capacity` flattens the same group) ----
    #[command(flatten)]
    pub data: DatasetArgs,

    // ---- trace replay (vLLM's timed_trace dataset and --self-timed) ----
    /// Prompt tokens per `hash_ids` entry of a timed_trace (Mooncake traces use 512).
    #[arg(long, default_value_t = 16, help_heading = "Timed trace options")]
    pub timed_trace_chunk_hash_size: u32,
    /// Multiplies each timestamp into seconds (Mooncake's are ms: 0.001); scales the replay
    /// in time too (half of that replays twice as fast).
    #[arg(long, default_value_t = 1.0, help_heading = "Timed trace options")]
    pub timed_trace_sec_multiplier: f64,
    #[arg(
        long,
        default_value = "timestamp",
        help_heading = "Timed trace options"
    )]
    pub timed_trace_label_timestamp: String,
    #[arg(
        long,
        default_value = "input_length",
        help_heading = "Timed trace options"
    )]
    pub timed_trace_label_input_length: String,
    #[arg(
        long,
        default_value = "output_length",
        help_heading = "Timed trace options"
    )]
    pub timed_trace_label_output_length: String,
    #[arg(long, default_value = "hash_ids", help_heading = "Timed trace options")]
    pub timed_trace_label_hash_ids: String,
    /// Send each request at its own timestamp instead of --request-rate (the default with
    /// --dataset-name timed_trace; only valid with it).
    #[arg(
        long,
        overrides_with = "no_self_timed",
        help_heading = "Timed trace options"
    )]
    pub self_timed: bool,
    #[arg(
        long,
        overrides_with = "self_timed",
        help_heading = "Timed trace options"
    )]
    pub no_self_timed: bool,

    // ---- multi-turn conversations (vllm-bench's --multi-turn*) ----
    /// Send conversations (chat endpoint; synthetic, or a ShareGPT file's human turns): each
    /// turn carries the earlier turns and the server's answers; figures overall and per turn.
    #[arg(long, help_heading = "Multi-turn options")]
    pub multi_turn: bool,
    /// Turns per conversation.
    #[arg(long, default_value_t = 3, help_heading = "Multi-turn options")]
    pub multi_turn_num_turns: usize,
    /// Fewest turns per conversation (0 = --multi-turn-num-turns).
    #[arg(long, default_value_t = 0, help_heading = "Multi-turn options")]
    pub multi_turn_min_turns: usize,
    /// Most turns per conversation (0 = --multi-turn-num-turns; with --dataset-name sharegpt,
    /// 0 = every turn of the file).
    #[arg(long, default_value_t = 0, help_heading = "Multi-turn options")]
    pub multi_turn_max_turns: usize,
    /// Requests in flight at once [default: --max-concurrency, else every conversation].
    #[arg(long, help_heading = "Multi-turn options")]
    pub multi_turn_concurrency: Option<usize>,
    /// Think time between a conversation's turns, in ms.
    #[arg(long, default_value_t = 0, help_heading = "Multi-turn options")]
    pub multi_turn_delay_ms: u64,
    /// Share of each user message that is the same in every conversation (> 0: each turn is
    /// sent alone, without the earlier turns; --dataset-name random).
    #[arg(long, default_value_t = 0.0, help_heading = "Multi-turn options")]
    pub multi_turn_prefix_global_ratio: f64,
    /// Share of each user message that is the same within a conversation (> 0: each turn is
    /// sent alone, without the earlier turns; --dataset-name random).
    #[arg(long, default_value_t = 0.0, help_heading = "Multi-turn options")]
    pub multi_turn_prefix_conversation_ratio: f64,

    // ---- probes (vLLM's --probe-request-rate) ----
    /// One-token probe requests per second, sent one after another beside the run and outside
    /// --max-concurrency; their latency is reported apart (probe_* keys). 0 = none.
    #[arg(long, default_value_t = 0.0, help_heading = "Load options")]
    pub probe_request_rate: f64,

    // ---- load ----
    /// Most requests in flight; the wait for a slot is reported as queue time.
    #[arg(long, help_heading = "Load options")]
    pub max_concurrency: Option<usize>,
    /// Requests per second, or inf to send everything at once.
    #[arg(long, default_value = "inf", help_heading = "Load options")]
    pub request_rate: RequestRate,
    /// Gamma shape of the inter-arrival times: 1.0 is Poisson, lower is burstier.
    #[arg(long, default_value_t = 1.0, help_heading = "Load options")]
    pub burstiness: f64,
    /// linear or exponential ramp of the rate from --ramp-up-start-rps to --ramp-up-end-rps.
    #[arg(long, help_heading = "Load options")]
    pub ramp_up_strategy: Option<RampStrategy>,
    #[arg(long, help_heading = "Load options")]
    pub ramp_up_start_rps: Option<f64>,
    #[arg(long, help_heading = "Load options")]
    pub ramp_up_end_rps: Option<f64>,
    /// Requests sent (and discarded) before the measured run.
    #[arg(long, default_value_t = 0, help_heading = "Load options")]
    pub num_warmups: usize,
    /// Seeds prompts and the schedule.
    #[arg(long, default_value_t = 0, help_heading = "Load options")]
    pub seed: u64,
    /// Plain lines instead of the live progress bar of completed requests (the default when
    /// stdout or stderr is not a terminal).
    #[arg(long, help_heading = "Load options")]
    pub disable_tqdm: bool,

    // ---- sweeps, repeated runs, steady state (vllm-bench's flags) ----
    /// Run once per --max-concurrency value, e.g. 1,8,64,128: one result per point plus a
    /// sweep summary.
    #[arg(
        long,
        value_name = "N,N,...",
        help_heading = "Sweeps and repeated runs"
    )]
    pub sweep_max_concurrency: Option<String>,
    /// Run once per --request-rate value, e.g. 1,10,inf.
    #[arg(
        long,
        value_name = "RATE,RATE,...",
        help_heading = "Sweeps and repeated runs"
    )]
    pub sweep_request_rate: Option<String>,
    /// With --sweep-max-concurrency: each point sends concurrency x F prompts (instead of
    /// --num-prompts).
    #[arg(long, value_name = "F", help_heading = "Sweeps and repeated runs")]
    pub sweep_num_prompts_factor: Option<usize>,
    /// Run the benchmark N times (at every sweep point) and report each figure's mean,
    /// standard deviation, coefficient of variation and 95% confidence interval.
    #[arg(long, default_value_t = 1, help_heading = "Sweeps and repeated runs")]
    pub num_runs: usize,
    /// Share of --max-concurrency slots that must be busy for the steady-state window
    /// (closed loop: --max-concurrency with --request-rate inf), in (0, 1].
    #[arg(
        long,
        default_value_t = 0.95,
        help_heading = "Sweeps and repeated runs"
    )]
    pub steady_state_threshold: f64,
    /// Seconds below which the steady-state window carries a warning
    /// [default: max(10, 10% of the run)].
    #[arg(long, help_heading = "Sweeps and repeated runs")]
    pub steady_state_min_window: Option<f64>,
    /// Do not compute the steady-state window and figures.
    #[arg(long, help_heading = "Sweeps and repeated runs")]
    pub no_steady_state: bool,
    /// Build the dataset and print its statistics; send no request.
    #[arg(long, help_heading = "Sweeps and repeated runs")]
    pub dry_run: bool,

    // ---- sampling ----
    /// Ask the server to ignore end-of-sequence (always on for random datasets, as in vLLM).
    #[arg(long, help_heading = "Sampling parameters")]
    pub ignore_eos: bool,
    /// [default: 0.0, greedy, as vLLM sets it]
    #[arg(long, help_heading = "Sampling parameters")]
    pub temperature: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub top_p: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub top_k: Option<i64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub min_p: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub frequency_penalty: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub presence_penalty: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub repetition_penalty: Option<f64>,
    /// A JSON object merged into every request body.
    #[arg(long, help_heading = "Sampling parameters")]
    pub extra_body: Option<String>,

    // ---- metrics ----
    /// Metrics to report percentiles for: ttft, tpot, itl, e2el.
    #[arg(long, default_value = "ttft,tpot,itl", help_heading = "Metric options")]
    pub percentile_metrics: String,
    /// Percentiles to report, comma-separated (e.g. 25,50,99.9).
    #[arg(long, default_value = "99", help_heading = "Metric options")]
    pub metric_percentiles: String,
    /// Service level objectives KEY:MS (ttft, tpot, e2el) for request_goodput.
    #[arg(long, num_args = 1.., value_name = "KEY:VALUE", help_heading = "Metric options")]
    pub goodput: Vec<String>,

    // ---- output ----
    /// Save the result JSON.
    #[arg(long, help_heading = "Output options")]
    pub save_result: bool,
    /// Also save per-request lists (lengths, TTFTs, ITLs, texts, errors).
    #[arg(long, help_heading = "Output options")]
    pub save_detailed: bool,
    /// Append to the result file as a new JSON line instead of replacing it.
    #[arg(long, help_heading = "Output options")]
    pub append_result: bool,
    #[arg(long, help_heading = "Output options")]
    pub result_dir: Option<PathBuf>,
    /// [default: {label or backend}-{rate}qps[-concurrency{N}]-{model}-{date}.json]
    #[arg(long, help_heading = "Output options")]
    pub result_filename: Option<String>,
    /// Write a per-request timeline, `<result file>.timeline.html` (self-contained HTML).
    #[arg(long, help_heading = "Output options")]
    pub plot_timeline: bool,
    /// The timeline's two inter-token latency thresholds in ms: gaps below the first, between
    /// the two, and at or above the second get three colours.
    #[arg(long, default_value = "25,50", help_heading = "Output options")]
    pub timeline_itl_thresholds: String,
    /// KEY=VALUE pairs recorded in the result JSON.
    #[arg(long, num_args = 1.., value_name = "KEY=VALUE", help_heading = "Output options")]
    pub metadata: Vec<String>,
    /// Label used in the result file name and as "label" [default: the backend].
    #[arg(long, help_heading = "Output options")]
    pub label: Option<String>,

    // ---- ours ----
    /// Where latency starts: the scheduled send time (default) or the actual send, as vLLM.
    #[arg(
        long,
        value_enum,
        default_value = "scheduled",
        help_heading = "llmspeed extras"
    )]
    pub latency_from: LatencyFrom,
    /// Which event is the first token: the first with choices (vLLM) or the first with text.
    #[arg(
        long,
        value_enum,
        default_value = "choice",
        help_heading = "llmspeed extras"
    )]
    pub ttft_from: TtftFrom,
    /// Where a chat request's E2EL ends and whether a stream without choices fails: vLLM's
    /// current rule (last-choice) or its older releases' chat rule (last-message). Chat only:
    /// vLLM's completions path always used last-choice.
    #[arg(
        long,
        value_enum,
        default_value = "last-choice",
        help_heading = "llmspeed extras"
    )]
    pub chat_end: ChatEnd,
    /// Also ask for `stream_options.continuous_usage_stats` (vLLM's bench does not): exact
    /// per-event token counts in `llmspeed.token_count_source`; some servers reject the field.
    #[arg(long, help_heading = "llmspeed extras")]
    pub continuous_usage: bool,
    /// Accepted for old scripts: continuous usage is off unless `--continuous-usage`.
    #[arg(long, hide = true, conflicts_with = "continuous_usage")]
    pub no_continuous_usage: bool,
    /// Client runtime threads (0 = one per core).
    #[arg(long, default_value_t = 0, help_heading = "llmspeed extras")]
    pub threads: usize,

    // ---- load from many machines (docs/distributed.md) ----
    // `--shard K/N` (implies --save-detailed) and `--start-at`.
    #[command(flatten)]
    pub many: ShardFlags,

    // ---- vLLM's flags llmspeed refuses (flags.rs: each fails naming itself and why) ----
    #[command(flatten)]
    pub refused: RefusedFlags,
}

/// Everything the runner needs, checked.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The server and how requests reach it (the connection flags, checked).
    pub conn: Connection,
    /// What request i's `x-request-id` is: `{prefix}{i}` (vLLM's form) or a UUID.
    pub request_ids: RequestIds,
    pub dataset: DatasetConfig,
    pub schedule: ScheduleConfig,
    /// `--request-rate` as given (`inf` or a number), for the result.
    pub request_rate: f64,
    pub max_concurrency: Option<usize>,
    pub num_warmups: usize,
    pub ignore_eos: bool,
    /// Sampling fields and `--extra-body`, merged into every body (extra body last).
    pub extra: serde_json::Map<String, serde_json::Value>,
    pub continuous_usage: bool,
    pub metrics: Vec<MetricKind>,
    pub percentiles: Vec<f64>,
    pub goodput: Option<GoodputSlo>,
    pub save_result: bool,
    pub save_detailed: bool,
    pub append_result: bool,
    pub result_dir: Option<PathBuf>,
    pub result_filename: Option<String>,
    /// `--plot-timeline` with its two ITL thresholds in ms.
    pub plot_timeline: Option<[f64; 2]>,
    pub metadata: Vec<(String, serde_json::Value)>,
    pub label: Option<String>,
    pub latency_from: LatencyFrom,
    pub ttft_from: TtftFrom,
    pub chat_end: ChatEnd,
    pub threads: usize,
    /// `--sweep-max-concurrency` / `--sweep-request-rate`.
    pub sweep: Option<Sweep>,
    /// `--sweep-num-prompts-factor`.
    pub sweep_num_prompts_factor: Option<usize>,
    /// `--num-runs`, at least 1.
    pub num_runs: usize,
    /// `None` with `--no-steady-state`.
    pub steady_state: Option<SteadyConfig>,
    pub dry_run: bool,
    /// `--shard K/N`.
    pub shard: Option<crate::bench::engine::shard::Shard>,
    /// `--start-at`, Unix nanoseconds.
    pub start_at_unix_ns: Option<u64>,
    /// `--self-timed`: send on the trace's timestamps.
    pub self_timed: bool,
    /// `--probe-request-rate`; 0 = no probes.
    pub probe_request_rate: f64,
    /// `--lora-modules` (empty: every request names the model).
    pub lora_modules: Vec<String>,
    pub lora_assignment: crate::bench::engine::lora::LoraAssignment,
    /// `--multi-turn` and its settings.
    pub multi_turn: Option<crate::bench::engine::conversation::MultiTurnConfig>,
}

pub use crate::bench::engine::session::Sweep;

/// `--steady-state-threshold` and `--steady-state-min-window`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SteadyConfig {
    pub threshold: f64,
    pub min_window_s: Option<f64>,
}

impl ServeArgs {
    /// The sweep flags, checked (one sweep at a time; the factor only with concurrency).
    fn sweep(&self) -> Result<Option<Sweep>, String> {
        Sweep::parse(
            self.sweep_max_concurrency.as_deref(),
            self.sweep_request_rate.as_deref(),
            self.sweep_num_prompts_factor,
        )
    }
}

/// `--timeline-itl-thresholds`: exactly two numbers in ms, as vLLM requires; ascending.
pub fn itl_thresholds(s: &str) -> Result<[f64; 2], String> {
    let bad = |why: &str| format!("--timeline-itl-thresholds {s:?}: {why}");
    let v: Vec<f64> = s
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad("expected two numbers in ms, e.g. 25,50"))?;
    match v[..] {
        [a, b] if a.is_finite() && b.is_finite() && 0.0 < a && a <= b => Ok([a, b]),
        [_, _] => Err(bad("the thresholds must be positive and ascending")),
        _ => Err(bad(&format!("expected 2 values, got {}", v.len()))),
    }
}

impl ServeArgs {
    /// Checks every flag and refuses the unsupported ones, each with a one-line message.
    pub fn validate(&self) -> Result<ServeConfig, String> {
        self.refuse_unsupported()?;
        self.check_request_id_prefix()?;
        let conn = self.conn.validate()?;
        let backend = conn.backend;
        if self.chat_end == ChatEnd::LastMessage && !backend.is_chat() {
            return Err(
                "--chat-end last-message is vLLM's older chat rule; its completions path always \
                 ended at the last choice (use --backend openai-chat)"
                    .into(),
            );
        }
        if self.continuous_usage && backend == Backend::OpenAiResponses {
            return Err(
                "--continuous-usage asks for usage on every completions or chat chunk \
                 (stream_options); the Responses API has no such option"
                    .into(),
            );
        }
        let kind = self.data.kind()?;
        self.data.check_backend(kind, backend)?;
        let schedule = self.schedule()?;
        self.check_limits()?;
        let sweep = self.sweep()?;
        self.check_runs(&sweep)?;
        let metrics =
            MetricKind::parse_list(&self.percentile_metrics).map_err(|e| e.to_string())?;
        let percentiles = parse_percentiles(&self.metric_percentiles).map_err(|e| e.to_string())?;
        let goodput = if self.goodput.is_empty() {
            None
        } else {
            Some(GoodputSlo::parse(&self.goodput).map_err(|e| e.to_string())?)
        };
        let extra = self.extra_body(backend)?;
        let metadata = self
            .metadata
            .iter()
            // vLLM stores every value as the string given.
            .map(|m| split_kv(m, "--metadata").map(|(k, v)| (k, serde_json::Value::String(v))))
            .collect::<Result<Vec<_>, String>>()?;
        let dataset = self.data.config(
            kind,
            self.seed,
            conn.skip_tokenizer_init,
            self.trace_config(),
        )?;
        if !(self.probe_request_rate.is_finite() && self.probe_request_rate >= 0.0) {
            return Err(format!(
                "--probe-request-rate must be a finite number >= 0, got {}",
                self.probe_request_rate
            ));
        }
        let multi_turn = self.multi_turn_config(kind)?;
        self.check_trace(kind)?;
        self.assemble(Checked {
            conn,
            kind,
            schedule,
            sweep,
            metrics,
            percentiles,
            goodput,
            extra,
            metadata,
            dataset,
            multi_turn,
        })
    }

    /// The flags of vLLM we do not honour, refused by name.
    fn refuse_unsupported(&self) -> Result<(), String> {
        self.refused.check()?;
        if self.conn.tokenizer_mode != "auto" {
            return Err(refuse("--tokenizer-mode"));
        }
        self.data.kind().map(|_| ())
    }

    /// The timed-trace flags as the trace reader's settings.
    fn trace_config(&self) -> crate::workload::trace::TraceConfig {
        crate::workload::trace::TraceConfig {
            chunk_hash_size: self.timed_trace_chunk_hash_size,
            sec_multiplier: self.timed_trace_sec_multiplier,
            label_timestamp: self.timed_trace_label_timestamp.clone(),
            label_input_length: self.timed_trace_label_input_length.clone(),
            label_output_length: self.timed_trace_label_output_length.clone(),
            label_hash_ids: self.timed_trace_label_hash_ids.clone(),
            rounds: 1,
        }
    }

    /// `--request-id-prefix`, checked as it will be sent.
    fn check_request_id_prefix(&self) -> Result<(), String> {
        // Checked with a digit appended, as it will be sent, so a bad prefix fails here rather
        // than as every request failing.
        if let Some(prefix) = &self.request_id_prefix {
            crate::proto::http1::validate_header("x-request-id", &format!("{prefix}0")).map_err(
                |_| {
                    format!(
                        "--request-id-prefix {prefix:?} has bytes not allowed in a header value"
                    )
                },
            )?;
        }
        Ok(())
    }

    /// The arrival schedule: `--request-rate`, `--burstiness`, `--ramp-up-*`, `--seed`.
    fn schedule(&self) -> Result<ScheduleConfig, String> {
        let ramp = match (self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps) {
            (None, None, None) => None,
            (Some(strategy), Some(start_rps), Some(end_rps)) => {
                if self.request_rate.0.is_finite() {
                    return Err("--ramp-up-strategy sets the rate itself: leave --request-rate at inf".into());
                }
                Some(Ramp {
                    strategy,
                    start_rps,
                    end_rps,
                })
            }
            _ => {
                return Err("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps (and they need it)".into())
            }
        };
        let schedule = ScheduleConfig {
            rate: self.request_rate.0,
            burstiness: self.burstiness,
            ramp,
            seed: self.seed,
            draws: Draws::Vllm,
        };
        schedule.validate().map_err(|e| e.to_string())?;
        Ok(schedule)
    }

    /// `--max-concurrency`, `--num-warmups` and `--num-prompts` within their bounds.
    fn check_limits(&self) -> Result<(), String> {
        if self.max_concurrency == Some(0) {
            return Err("--max-concurrency must be at least 1".into());
        }
        // Both size a semaphore, which panics past its permit limit.
        let most = tokio::sync::Semaphore::MAX_PERMITS;
        for (flag, n) in [
            ("--max-concurrency", self.max_concurrency.unwrap_or(0)),
            ("--num-warmups", self.num_warmups),
        ] {
            if n > most {
                return Err(format!("{flag} must be at most {most}, got {n}"));
            }
        }
        if self.data.num_prompts == 0 {
            return Err("--num-prompts must be at least 1".into());
        }
        Ok(())
    }

    /// How the runs of a session combine: a sweep, `--num-runs`, `--shard`, the steady state.
    fn check_runs(&self, sweep: &Option<Sweep>) -> Result<(), String> {
        session::check_runs(sweep, self.max_concurrency, self.num_runs)?;
        if matches!(sweep, Some(Sweep::RequestRate(_)))
            && (self.ramp_up_strategy.is_some() || self.request_rate.0.is_finite())
        {
            return Err("--sweep-request-rate sets --request-rate at each point: leave --request-rate and --ramp-up-* out".into());
        }
        self.many.check(sweep.is_some(), self.num_runs)?;
        if !(self.steady_state_threshold > 0.0 && self.steady_state_threshold <= 1.0) {
            return Err(format!(
                "--steady-state-threshold must be in (0, 1], got {}",
                self.steady_state_threshold
            ));
        }
        if let Some(m) = self.steady_state_min_window {
            if !(m >= 0.0 && m.is_finite()) {
                return Err(format!(
                    "--steady-state-min-window must be a number of seconds >= 0, got {m}"
                ));
            }
        }
        Ok(())
    }

    /// The sampling flags and `--extra-body`, merged into every request body (extra body last).
    fn extra_body(
        &self,
        backend: Backend,
    ) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let mut extra = serde_json::Map::new();
        // vLLM 0.33 sends no temperature unless asked: the server's default applies.
        let opt = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
            ("repetition_penalty", self.repetition_penalty),
        ];
        for (k, v) in opt {
            if let Some(v) = v {
                extra.insert(k.into(), v.into());
            }
        }
        if let Some(k) = self.top_k {
            extra.insert("top_k".into(), k.into());
        }
        // vLLM's completions body carries `logprobs` (null unless given); its chat and Responses
        // bodies none.
        let no_logprobs = backend.is_chat() || backend == Backend::OpenAiResponses;
        if let (Some(n), false) = (self.logprobs, no_logprobs) {
            extra.insert("logprobs".into(), n.into());
        }
        if let Some(body) = &self.extra_body {
            match serde_json::from_str::<serde_json::Value>(body) {
                Ok(serde_json::Value::Object(m)) => extra.extend(m),
                _ => return Err(format!("--extra-body must be a JSON object, got {body:?}")),
            }
        }
        Ok(extra)
    }

    /// `--self-timed` / `--no-self-timed`: on by default for timed_trace, refused elsewhere.
    fn self_timed(&self, kind: DatasetKind) -> Result<bool, String> {
        let given = (self.self_timed || self.no_self_timed).then_some(self.self_timed);
        match (kind, given) {
            (DatasetKind::TimedTrace, g) => Ok(g.unwrap_or(true)),
            (_, None) => Ok(false),
            (_, Some(_)) => Err(
                "--self-timed/--no-self-timed only go with --dataset-name timed_trace (as in vLLM)"
                    .into(),
            ),
        }
    }

    /// `--multi-turn` and its settings (vllm-bench's rules).
    fn multi_turn_config(&self, kind: DatasetKind) -> Result<Option<MultiTurnConfig>, String> {
        if !self.multi_turn {
            return Ok(None);
        }
        if kind != DatasetKind::Random && kind != DatasetKind::ShareGpt {
            return Err("--multi-turn sends synthetic conversations (--dataset-name random: sizes from --random-input-len, --random-output-len, shared system prefix --random-prefix-len) or a ShareGPT file's (--dataset-name sharegpt --dataset-path FILE)".into());
        }
        // vllm-bench: a ShareGPT conversation is walked up to the cap, so a cap of one
        // turn would leave no conversation.
        if kind == DatasetKind::ShareGpt && self.multi_turn_max_turns == 1 {
            return Err("--multi-turn-max-turns must be at least 2 for ShareGPT multi-turn".into());
        }
        // vllm-bench's rules for prefix sharing: each ratio in [0, 1], a unique part left.
        let (pg, pc) = (
            self.multi_turn_prefix_global_ratio,
            self.multi_turn_prefix_conversation_ratio,
        );
        if !(0.0..=1.0).contains(&pg) || !(0.0..=1.0).contains(&pc) || pg + pc >= 1.0 {
            return Err("--multi-turn-prefix-global-ratio and --multi-turn-prefix-conversation-ratio must each be in [0, 1] and sum to less than 1 (a unique part is left)".into());
        }
        if (pg > 0.0 || pc > 0.0) && kind != DatasetKind::Random {
            return Err(
                "--multi-turn-prefix-*-ratio builds synthetic messages: use --dataset-name random"
                    .into(),
            );
        }
        if self.multi_turn_num_turns == 0
            || (self.multi_turn_max_turns > 0
                && self.multi_turn_max_turns < self.multi_turn_min_turns)
        {
            return Err("--multi-turn-num-turns must be at least 1 and --multi-turn-max-turns at least --multi-turn-min-turns".into());
        }
        if self.multi_turn_concurrency == Some(0)
            || self.multi_turn_concurrency.unwrap_or(0) > tokio::sync::Semaphore::MAX_PERMITS
        {
            return Err("--multi-turn-concurrency must be at least 1".into());
        }
        // A multi-turn run is one conversation benchmark with its own result shape.
        if self.num_runs > 1
            || self.sweep_max_concurrency.is_some()
            || self.sweep_request_rate.is_some()
            || self.dry_run
            || self.probe_request_rate > 0.0
        {
            return Err("--multi-turn is one run: leave --num-runs, --sweep-*, --dry-run and --probe-request-rate out".into());
        }
        Ok(Some(MultiTurnConfig {
            num_turns: self.multi_turn_num_turns,
            min_turns: self.multi_turn_min_turns,
            max_turns: self.multi_turn_max_turns,
            concurrency: self.multi_turn_concurrency,
            delay_ms: self.multi_turn_delay_ms,
            prefix_global_ratio: self.multi_turn_prefix_global_ratio,
            prefix_conversation_ratio: self.multi_turn_prefix_conversation_ratio,
        }))
    }

    /// Trace replay (`--self-timed`, `--timed-trace-*`) and the datasets that need a file.
    fn check_trace(&self, kind: DatasetKind) -> Result<(), String> {
        // Trace replay: the timestamps are the schedule, so nothing else may set one.
        // vLLM ignores the rate flags of a self-timed run; a rate the run would not follow is
        // refused here instead.
        if self.self_timed(kind)?
            && (self.request_rate.0.is_finite()
                || self.ramp_up_strategy.is_some()
                || self.sweep_request_rate.is_some())
        {
            return Err("--self-timed (timed_trace's default) sends on the trace's timestamps: leave --request-rate, --ramp-up-* and --sweep-request-rate out, or pass --no-self-timed".into());
        }
        if self.timed_trace_chunk_hash_size == 0 {
            return Err("--timed-trace-chunk-hash-size must be at least 1".into());
        }
        if !(self.timed_trace_sec_multiplier.is_finite() && self.timed_trace_sec_multiplier >= 0.0)
        {
            return Err(format!(
                "--timed-trace-sec-multiplier must be a finite number >= 0, got {}",
                self.timed_trace_sec_multiplier
            ));
        }
        self.data.check_path(kind)?;
        Ok(())
    }

    /// The config from the checked parts and the flags taken as they are.
    fn assemble(&self, c: Checked) -> Result<ServeConfig, String> {
        let Checked {
            conn,
            kind,
            schedule,
            sweep,
            metrics,
            percentiles,
            goodput,
            extra,
            metadata,
            dataset,
            multi_turn,
        } = c;
        Ok(ServeConfig {
            conn,
            request_ids: match &self.request_id_prefix {
                Some(p) => RequestIds::Prefix(p.clone()),
                // A tag per run, so two runs' logs do not mix (vLLM's default prefix holds a
                // random part too).
                None => RequestIds::Uuid {
                    run: rand::random(),
                },
            },
            dataset,
            schedule,
            request_rate: self.request_rate.0,
            max_concurrency: self.max_concurrency,
            num_warmups: self.num_warmups,
            // vLLM forces ignore_eos for the random datasets and a timed_trace, so outputs have
            // their set length.
            ignore_eos: self.ignore_eos
                || matches!(
                    kind,
                    DatasetKind::Random | DatasetKind::RandomMm | DatasetKind::TimedTrace
                ),
            extra,
            continuous_usage: self.continuous_usage,
            metrics,
            percentiles,
            goodput,
            save_result: self.save_result,
            // A shard's per-request detail is what `llmspeed merge` recomputes the run from.
            save_detailed: self.save_detailed || self.many.shard.is_some(),
            append_result: self.append_result,
            result_dir: self.result_dir.clone(),
            result_filename: self.result_filename.clone(),
            plot_timeline: if self.plot_timeline {
                Some(itl_thresholds(&self.timeline_itl_thresholds)?)
            } else {
                None
            },
            metadata,
            label: self.label.clone(),
            latency_from: self.latency_from,
            ttft_from: self.ttft_from,
            chat_end: self.chat_end,
            threads: self.threads,
            sweep,
            sweep_num_prompts_factor: self.sweep_num_prompts_factor,
            num_runs: self.num_runs,
            steady_state: (!self.no_steady_state).then_some(SteadyConfig {
                threshold: self.steady_state_threshold,
                min_window_s: self.steady_state_min_window,
            }),
            dry_run: self.dry_run,
            shard: self.many.shard,
            start_at_unix_ns: self.many.start_at_unix_ns,
            self_timed: self.self_timed(kind)?,
            probe_request_rate: self.probe_request_rate,
            lora_modules: self.lora_modules.clone(),
            lora_assignment: self.lora_assignment,
            multi_turn,
        })
    }
}

/// The flags [`ServeArgs::validate`] checked or built, on their way into the [`ServeConfig`].
struct Checked {
    conn: Connection,
    kind: DatasetKind,
    schedule: ScheduleConfig,
    sweep: Option<Sweep>,
    metrics: Vec<MetricKind>,
    percentiles: Vec<f64>,
    goodput: Option<GoodputSlo>,
    extra: serde_json::Map<String, serde_json::Value>,
    metadata: Vec<(String, serde_json::Value)>,
    dataset: DatasetConfig,
    multi_turn: Option<MultiTurnConfig>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::native::Dialect;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<ServeConfig, String> {
        let t = T::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        t.a.validate()
    }

    #[test]
    fn defaults_match_vllm() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.conn.base_url, "http://127.0.0.1:8000");
        assert_eq!(c.conn.endpoint, "/v1/completions");
        assert_eq!(c.conn.backend, Backend::OpenAi);
        assert!(c.request_rate.is_infinite());
        assert_eq!(c.dataset.num_prompts, 1000);
        assert_eq!(
            c.metrics,
            vec![MetricKind::Ttft, MetricKind::Tpot, MetricKind::Itl]
        );
        assert_eq!(c.percentiles, vec![99.0]);
        assert!(c.ignore_eos, "random forces ignore_eos");
        let with = |name: &str| {
            parse(&["--dataset-name", name, "--dataset-path", "f.jsonl"])
                .unwrap()
                .ignore_eos
        };
        assert!(with("timed_trace"), "a timed_trace forces ignore_eos");
        assert!(!with("sharegpt"), "sharegpt leaves it to --ignore-eos");
        assert!(
            !c.extra.contains_key("temperature"),
            "vLLM 0.33 sends no temperature unless asked"
        );
        assert!(c.goodput.is_none());
    }

    #[test]
    fn chat_backend_picks_the_chat_endpoint_and_mismatch_is_refused() {
        let c = parse(&["--backend", "openai-chat"]).unwrap();
        assert_eq!(c.conn.endpoint, "/v1/chat/completions");
        let e = parse(&["--backend", "openai-chat", "--endpoint", "/v1/completions"]).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
    }

    /// `random-mm`'s flags reach the dataset's settings; their bad values, and a backend that
    /// carries no images, are refused before anything is sent.
    #[test]
    fn random_mm_flags_become_settings_and_bad_ones_are_refused() {
        use crate::workload::datasets::random_mm::{Bucket, Limits};
        let c = parse(&[
            "--backend",
            "openai-chat",
            "--dataset-name",
            "random-mm",
            "--random-mm-base-items-per-request",
            "2",
            "--random-mm-num-mm-items-range-ratio",
            "0.5",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 3, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(64, 32, 1): 1.0}",
        ])
        .unwrap();
        assert_eq!(c.dataset.kind, DatasetKind::RandomMm);
        let mm = &c.dataset.random_mm;
        assert_eq!((mm.base_items, mm.items_range_ratio), (2, 0.5));
        assert_eq!(
            mm.limits,
            Limits {
                image: Some(3),
                video: Some(0)
            }
        );
        assert_eq!(
            mm.buckets,
            vec![Bucket {
                height: 64,
                width: 32,
                frames: 1,
                p: 1.0
            }]
        );
        // vLLM's defaults parse as they are.
        let mm = [
            "--enable-multimodal-chat",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "s.json",
        ];
        let e = parse(&mm).unwrap_err();
        assert!(
            e.contains("--enable-multimodal-chat") && e.contains("openai-chat"),
            "{e}"
        );
        let chat_mm = [&mm[..], &["--backend", "openai-chat"]].concat();
        let ok = parse(&chat_mm);
        assert!(ok.is_ok(), "{ok:?}");
        // vLLM reads it for its multimodal and conversation datasets only: random ignores it.
        assert!(parse(&["--enable-multimodal-chat"]).is_ok());
        let c = parse(&["--backend", "openai-chat", "--dataset-name", "random-mm"]).unwrap();
        assert_eq!(c.dataset.random_mm, Default::default());
        let chat = ["--backend", "openai-chat", "--dataset-name", "random-mm"];
        for (extra, says) in [
            (
                ["--random-mm-bucket-config", "{(1,1,1): 0}"],
                "every probability is zero",
            ),
            (
                ["--random-mm-limit-mm-per-prompt", r#"{"sound": 1}"#],
                "unknown modality",
            ),
            (["--random-mm-bucket-config", "{(1,1,16): 1}"], "no video"),
            (["--random-mm-num-mm-items-range-ratio", "2"], "[0, 1]"),
        ] {
            let e = parse(&[&chat[..], &extra[..]].concat()).unwrap_err();
            assert!(e.contains(says), "{extra:?}: {e}");
        }
        let e = parse(&["--dataset-name", "random-mm"]).unwrap_err();
        assert!(e.contains("only --backend openai-chat"), "{e}");
    }

    /// vLLM 0.33's `openai-responses`: `/v1/responses` (vLLM checks the suffix), the Responses
    /// dialect, no `logprobs` in its body, no per-event usage to ask for.
    #[test]
    fn openai_responses_speaks_the_responses_api() {
        let c = parse(&["--backend", "openai-responses"]).unwrap();
        assert_eq!(c.conn.endpoint, "/v1/responses");
        assert_eq!(c.conn.dialect(), Dialect::Responses);
        assert!(!c.conn.chat());
        let c = parse(&[
            "--backend",
            "openai-responses",
            "--endpoint",
            "/proxy/v1/responses",
        ])
        .unwrap();
        assert_eq!(c.conn.dialect(), Dialect::Responses);
        for wrong in [
            [
                "--backend",
                "openai-responses",
                "--endpoint",
                "/v1/completions",
            ],
            [
                "--backend",
                "openai-responses",
                "--endpoint",
                "/v1/chat/completions",
            ],
            ["--backend", "openai", "--endpoint", "/v1/responses"],
        ] {
            let e = parse(&wrong).unwrap_err();
            assert!(e.contains("does not match"), "{wrong:?}: {e}");
        }
        let c = parse(&["--backend", "openai-responses", "--logprobs", "2"]).unwrap();
        assert!(!c.extra.contains_key("logprobs"));
        let c = parse(&["--backend", "openai", "--logprobs", "2"]).unwrap();
        assert_eq!(c.extra["logprobs"], 2);
        let e = parse(&["--backend", "openai-responses", "--continuous-usage"]).unwrap_err();
        assert!(e.contains("Responses API"), "{e}");
        assert_eq!(Backend::OpenAiResponses.as_str(), "openai-responses");
    }

    #[test]
    fn headers_metadata_and_extra_body() {
        let c = parse(&[
            "--header",
            "X-A=1",
            "X-B: two",
            "--metadata",
            "gpu=H200",
            "tp=8",
            "--extra-body",
            r#"{"temperature": 0.7, "cache_salt": "s"}"#,
            "--top-k",
            "5",
        ])
        .unwrap();
        assert_eq!(
            c.conn.headers,
            vec![("X-A".into(), "1".into()), ("X-B".into(), "two".into())]
        );
        assert_eq!(c.metadata[0], ("gpu".into(), serde_json::json!("H200")));
        assert_eq!(c.metadata[1], ("tp".into(), serde_json::json!("8")));
        assert_eq!(c.extra["temperature"], 0.7);
        assert_eq!(c.extra["top_k"], 5);
        assert!(parse(&["--extra-body", "[1]"])
            .unwrap_err()
            .contains("JSON object"));
        assert!(parse(&["--header", "novalue"])
            .unwrap_err()
            .contains("KEY=VALUE"));
    }

    #[test]
    fn sweep_and_repeat_flags() {
        let c = parse(&[
            "--sweep-max-concurrency",
            "1, 8,64,128",
            "--sweep-num-prompts-factor",
            "4",
            "--num-runs",
            "3",
        ])
        .unwrap();
        assert_eq!(c.sweep, Some(Sweep::MaxConcurrency(vec![1, 8, 64, 128])));
        assert_eq!((c.sweep_num_prompts_factor, c.num_runs), (Some(4), 3));
        let c = parse(&["--sweep-request-rate", "1,10,inf"]).unwrap();
        assert_eq!(
            c.sweep,
            Some(Sweep::RequestRate(vec![1.0, 10.0, f64::INFINITY]))
        );
        assert_eq!(
            c.steady_state,
            Some(SteadyConfig {
                threshold: 0.95,
                min_window_s: None
            })
        );
        assert_eq!((c.num_runs, c.dry_run), (1, false));
        for (args, want) in [
            (
                &["--sweep-max-concurrency", "1,0"][..],
                "whole number from 1",
            ),
            (&["--sweep-max-concurrency", "8,8"], "listed twice"),
            (&["--sweep-max-concurrency", ""], "invalid concurrency"),
            (&["--sweep-request-rate", "1,-2"], "above 0"),
            (
                &["--sweep-request-rate", "1", "--sweep-max-concurrency", "2"],
                "cannot be combined",
            ),
            (
                &["--sweep-request-rate", "1", "--request-rate", "5"],
                "leave --request-rate",
            ),
            (
                &["--sweep-max-concurrency", "1", "--max-concurrency", "5"],
                "leave --max-concurrency",
            ),
            (
                &["--sweep-num-prompts-factor", "2"],
                "goes with --sweep-max-concurrency",
            ),
            (
                &[
                    "--sweep-max-concurrency",
                    "1",
                    "--sweep-num-prompts-factor",
                    "0",
                ],
                "at least 1",
            ),
            (&["--num-runs", "0"], "--num-runs must be at least 1"),
            (&["--steady-state-threshold", "0"], "(0, 1]"),
            (&["--steady-state-threshold", "1.5"], "(0, 1]"),
            (&["--steady-state-min-window=-1"], ">= 0"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        assert_eq!(parse(&["--no-steady-state"]).unwrap().steady_state, None);
        assert!(parse(&["--dry-run"]).unwrap().dry_run);
    }

    #[test]
    fn semaphore_sizes_past_tokios_limit_are_refused() {
        // These used to pass validation and panic in `Semaphore::new` when the run started.
        let max = usize::MAX.to_string();
        for flag in ["--max-concurrency", "--num-warmups"] {
            let e = parse(&[flag, &max]).unwrap_err();
            assert!(e.starts_with(&format!("{flag} must be at most")), "{e}");
        }
        assert!(parse(&["--max-concurrency", "100000", "--num-warmups", "3"]).is_ok());
    }
}
