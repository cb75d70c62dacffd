//! The matrix report: everything a run measured, in the shape written to `results.json`.
//!
//! These are the crate's only `Serialize` types (rule 7: serialise at the edge). Units are in
//! field names. Domain enums from other modules (`CellStatus`, `ErrorKind`, `Channel`, ...) are
//! written through the `with` modules at the bottom of this file, as their stable `as_str`
//! names, so their home modules stay free of serde. The model does no I/O and computes no
//! statistics: the measuring code fills it, the writers read it.

use crate::report::client_lag::ClientLagFigures;
use crate::report::status::{CapacityReason, CellStatus, KvSource, ServerLimits};
use crate::timeline::{Channel, ErrorKind, FinishReason, TokenCountSource};
use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning or disappears (adding optional fields does not).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixReport {
    pub schema_version: u32,
    pub metadata: Metadata,
    /// Plain sentences defining each figure, for readers of the JSON alone.
    pub methodology: Vec<String>,
    pub prefill: Vec<PrefillRow>,
    /// Row-major over (context, concurrency), as planned.
    pub decode: Vec<DecodeCell>,
    /// `matrix --slo`: per context row, the largest measured concurrency within every
    /// objective (`capacity::grid`); absent without `--slo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloTable>,
}

/// `matrix --slo`'s answer: each context row's decode cells judged against the objectives
/// from the cells' own samples, at the grid's resolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloTable {
    /// The objectives as given (`ttft_p99=500ms`), in order.
    pub objectives: Vec<String>,
    /// The confidence of every interval (0.95).
    pub confidence: f64,
    pub rows: Vec<SloRow>,
}

/// One context row's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloRow {
    pub context: u64,
    pub context_label: String,
    /// The largest concurrency that passed, with every smaller measured one passing too;
    /// `None` when the smallest did not pass.
    pub largest_concurrency: Option<u64>,
    /// The next measured concurrency, when it failed (certain at the stated confidence).
    pub smallest_failing_concurrency: Option<u64>,
    /// The first objective, in the order given, that failed there.
    pub failed_objective: Option<String>,
    /// Why the answer stops where it does when no failing cell bounds it (undecided,
    /// Client-bound, not measured, every cell passed).
    pub note: String,
    pub cells: Vec<SloCell>,
}

/// One decode cell judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloCell {
    pub concurrency: u64,
    /// `pass`, `fail`, `not_yet`, `client_bound` (the client's lag over 10% of a threshold:
    /// neither), or `not_measured` (a cell without figures: its status says why).
    pub verdict: String,
    pub objectives: Vec<SloJudged>,
    /// Why the client's lag could have decided the cell (empty: it could not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_bound_reasons: Vec<String>,
}

/// One objective on one cell: the estimate and interval from the cell's samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloJudged {
    pub key: String,
    /// ms, or a fraction for `errors` and `attainment`.
    pub threshold: f64,
    pub samples: u64,
    pub estimate: Option<f64>,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    /// `pass`, `fail`, `not_yet`.
    pub verdict: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub tool: String,
    pub tool_version: String,
    /// RFC 3339 start of the run (UTC).
    pub date: String,
    /// RFC 3339 end of the run (UTC), written when it ends (finished or stopped); absent while
    /// it runs and in files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// When the run stopped early (Ctrl-C, error), why; `None` for a complete run.
    pub interrupted: Option<String>,
    pub base_url: Option<String>,
    /// The built-in simulated server's identity (its profile and parameters) when the run
    /// measured `matrix --mock`: its address changes every run, so `--resume` compares this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_server: Option<String>,
    pub hardware: Hardware,
    pub engine: Engine,
    pub model: ModelInfo,
    pub server_limits: Limits,
    pub settings: Settings,
    pub launch_command: Option<String>,
    pub notes: Option<String>,
}

/// Facts that cannot be probed come from flags (`--gpu`, `--hardware`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// e.g. "Discrete GPU".
    pub kind: Option<String>,
    pub gpu: Option<String>,
    pub vram_gb: Option<f64>,
    pub os: Option<String>,
    /// Free text from `--hardware`.
    pub description: Option<String>,
    /// The machine llmspeed ran on, measured (absent in results written before it was).
    #[serde(default)]
    pub client: Option<ClientMachine>,
    /// GPUs the GPU tool listed on the machine llmspeed ran on, at the start of the run.
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    /// Which tool listed the GPUs ("nvidia-smi"), or why there are none ("absent: ...").
    #[serde(default)]
    pub gpu_source: Option<String>,
}

/// The client machine: `/proc/cpuinfo`, `/proc/meminfo`, `/etc/os-release`, `uname`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientMachine {
    pub cpu_model: Option<String>,
    pub cpu_logical: Option<u64>,
    pub memory_gib: Option<f64>,
    pub os: Option<String>,
    pub kernel: Option<String>,
    pub arch: Option<String>,
}

/// One GPU as its tool lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Position in the tool's list (nvidia-smi lists by index).
    pub index: u32,
    pub name: String,
    pub memory_total_mib: Option<f64>,
}

/// One reading of one GPU during a cell; `None` where the tool said "[N/A]" or "[Not
/// Supported]".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Seconds since the cell started (its streams were started just after).
    pub t_s: f64,
    pub index: u32,
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    /// vllm, sglang, tgi, llama.cpp, ollama, openai.
    pub name: Option<String>,
    pub version: Option<String>,
    pub quantization: Option<String>,
    pub backend: Option<String>,
    pub repository: Option<String>,
    /// `--engine-build`.
    pub build: Option<String>,
    pub commit: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The id requests were sent with (served model name).
    pub id: String,
    /// The full model name where known (e.g. the Hugging Face repository).
    pub name: Option<String>,
    pub revision: Option<String>,
}

/// Server limits as used for the plan, with where the KV figure came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_model_len: Option<u64>,
    pub kv_cache_tokens: Option<u64>,
    #[serde(with = "kv_source::option")]
    pub kv_cache_source: Option<KvSource>,
    pub max_running_requests: Option<u64>,
}

impl From<ServerLimits> for Limits {
    fn from(l: ServerLimits) -> Self {
        Self {
            max_model_len: l.max_model_len,
            kv_cache_tokens: l.kv_tokens.map(|k| k.0),
            kv_cache_source: l.kv_tokens.map(|k| k.1),
            max_running_requests: l.max_running,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillMode {
    /// A cold `max_tokens: 1` scout per context, just before its decode cells.
    DuringDecodeWarmup,
    /// Not measured.
    Off,
}

/// How prompt token counts were made exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptTokens {
    /// Token-id prompts on `/v1/completions`: exact by construction.
    TokenIds,
    /// Binary search against the server's tokenize endpoint: exact within a few tokens.
    TokenizeEndpoint,
    /// A local `tokenizer.json`.
    LocalTokenizer,
    /// Scaled from `usage.prompt_tokens`: approximate.
    UsageEstimate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub duration_s: f64,
    pub max_tokens: u64,
    pub prefill_mode: PrefillMode,
    pub prefill_samples: u32,
    /// Decode contexts in tokens, ascending.
    pub contexts: Vec<u64>,
    pub prefill_contexts: Vec<u64>,
    pub concurrency: Vec<u64>,
    /// "chat" or "completion".
    pub endpoint: String,
    pub prompt_tokens: PromptTokens,
    pub seed: u64,
    pub ignore_eos: bool,
    /// `--insecure`: the server's TLS certificate was not checked. Written only when it was
    /// not (absent: checked, or plain HTTP, or a file from before it was recorded).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The loop detector's thresholds (absent in files from before they were saved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_rule: Option<LoopRule>,
    /// `matrix --images`: the images every prompt carried (absent without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSettings>,
}

/// The images of every matrix prompt (`--images N --image-size WxH`): fresh ones for each
/// prefill sample, one set shared by a context row's decode cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSettings {
    pub per_prompt: u32,
    pub width: u32,
    pub height: u32,
    /// Prompt tokens the images of one prompt take, as the server counts them (its
    /// `usage.prompt_tokens` with them less without); part of every row's context, the text
    /// shortened by it. `None` until measured.
    pub image_tokens_per_prompt: Option<u64>,
}

/// The loop rule a run used (`--loop-min-repeats`, `--loop-min-span`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopRule {
    pub min_repeats: u64,
    pub min_span_chars: u64,
    pub max_period_chars: u64,
}

/// The settings a measurement was taken under, kept on a row or cell that `--resume-force`
/// carried over from a run whose settings differ from the current one's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredUnder {
    pub model: String,
    pub base_url: Option<String>,
    /// See [`Metadata::simulated_server`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_server: Option<String>,
    pub max_tokens: u64,
    pub duration_s: f64,
    pub endpoint: String,
    pub prompt_tokens: PromptTokens,
    pub ignore_eos: bool,
    pub loop_rule: Option<LoopRule>,
    /// `matrix --images` (absent without images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSettings>,
    /// The names of the settings that differ from the report's own.
    pub differs: Vec<String>,
}

/// One prefill measurement (median of its samples).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefillRow {
    pub context: u64,
    pub context_label: String,
    #[serde(with = "status")]
    pub status: CellStatus,
    /// The prompt's size: the server's `usage.prompt_tokens` when it reported one, else the
    /// calibrated count.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens` as the server reported it for the samples (`None`: it reported
    /// none): the independent check of the calibrated size.
    #[serde(default)]
    pub server_prompt_tokens: Option<u64>,
    /// Of `prompt_tokens`, those its images take (`matrix --images`; absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    /// prompt tokens / TTFT.
    pub prefill_tok_per_s: Option<f64>,
    pub samples: u32,
    /// Every sample's TTFT, in order.
    pub ttft_ms_samples: Vec<f64>,
    /// The first message per error kind of the failed samples (or of the prompt).
    #[serde(default)]
    pub error_messages: Vec<ErrorMessage>,
    /// Set when `--resume-force` kept this row from a run with other settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_under: Option<MeasuredUnder>,
}

/// A repetition found in one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopInfo {
    /// How many of the cell's streams looped.
    pub streams: u64,
    #[serde(with = "channel")]
    pub channel: Channel,
    pub period_chars: u64,
    pub repeats: u64,
    /// One period of the repeated text (shortened).
    pub excerpt: String,
}

/// The first message of one kind of failure, so a Failed row explains itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// Always set by this version (`prompt` when the prompt could not be built); `None` only in
    /// files written before every failure had a kind.
    #[serde(with = "error_kind::option")]
    pub kind: Option<ErrorKind>,
    pub http_status: Option<u16>,
    /// One line, at most [`ERROR_MESSAGE_CHARS`] characters: the server's own message or a
    /// body excerpt where there is one.
    pub message: String,
}

/// The longest error message kept per kind (characters).
pub const ERROR_MESSAGE_CHARS: usize = 500;

impl ErrorMessage {
    /// One line of at most [`ERROR_MESSAGE_CHARS`] characters from any text a server sent.
    pub fn new(kind: Option<ErrorKind>, http_status: Option<u16>, message: &str) -> Self {
        let mut one_line = String::with_capacity(message.len().min(ERROR_MESSAGE_CHARS * 4));
        let mut last_space = false;
        for ch in message.chars() {
            let ch = if ch.is_control() || ch.is_whitespace() {
                ' '
            } else {
                ch
            };
            // Collapse runs of whitespace: a pretty-printed JSON body becomes one readable line.
            if ch == ' ' && (last_space || one_line.is_empty()) {
                continue;
            }
            last_space = ch == ' ';
            one_line.push(ch);
        }
        let trimmed = one_line.trim_end();
        let message = if trimmed.chars().count() > ERROR_MESSAGE_CHARS {
            let head: String = trimmed.chars().take(ERROR_MESSAGE_CHARS - 1).collect();
            format!("{head}…")
        } else {
            trimmed.to_string()
        };
        Self {
            kind,
            http_status,
            message,
        }
    }

    /// How a report line shows it: `http_status (HTTP 400): message`.
    pub fn display(&self) -> String {
        let kind = self.kind.map_or("prompt", ErrorKind::as_str);
        match self.http_status {
            Some(s) => format!("{kind} (HTTP {s}): {}", self.message),
            None => format!("{kind}: {}", self.message),
        }
    }
}

/// Keep `e` when it is the first of its kind in `into`.
pub fn push_first_per_kind(into: &mut Vec<ErrorMessage>, e: ErrorMessage) {
    if !into.iter().any(|m| m.kind == e.kind) {
        into.push(e);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCount {
    #[serde(with = "error_kind")]
    pub kind: ErrorKind,
    pub count: u64,
}

/// One sustained-decode cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeCell {
    pub context: u64,
    pub context_label: String,
    pub concurrency: u64,
    #[serde(with = "status")]
    pub status: CellStatus,
    /// Tokens stamped inside the window / window length, all streams together.
    pub output_tok_per_s: Option<f64>,
    /// Median over requests of 1 / time between tokens.
    pub per_request_tok_per_s: Option<f64>,
    /// Median over requests sent inside the window whose first token also came inside it.
    pub ttft_ms_p50: Option<f64>,
    /// Median over requests of (t_last - t_first) / (tokens after the first event), from each
    /// request's token events inside the window.
    pub tbt_ms_p50: Option<f64>,
    /// Server `num_requests_running` sampled at ≥1 Hz, else the client's count.
    pub avg_active_requests: Option<f64>,
    /// Requests that ended on their own inside the window.
    pub completed_requests: Option<u64>,
    /// Output tokens stamped inside the window.
    pub output_tokens: Option<u64>,
    /// The window's real length: the planned `--duration`, shorter only when the run was
    /// stopped or the server died inside it (`interrupted`).
    pub measured_s: Option<f64>,
    /// The run was stopped (Ctrl-C, SIGTERM), or the server died, inside this cell's window:
    /// its figures cover the shortened window of `measured_s` seconds (a note says which). A
    /// later `--resume` measures the cell again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The window's bounds `[start, end)` on the client's clock, in ns since the process's
    /// clock epoch ([`crate::clock::Clock::epoch_ns`]): comparable between the cells of one run
    /// and with anything else the same process stamped (the in-process simulated server's
    /// trace), not across processes. `None` when no window was measured.
    #[serde(default)]
    pub window_start_ns: Option<u64>,
    #[serde(default)]
    pub window_end_ns: Option<u64>,
    #[serde(with = "token_count_source::option")]
    pub token_count_source: Option<TokenCountSource>,
    /// `usage.prompt_tokens` as the server reported it for the cell's requests (the most
    /// common value; they share one prompt): the prompt's measured size, images included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_prompt_tokens: Option<u64>,
    /// The server's generated-token count (`generation_tokens_total`; llama.cpp's
    /// `tokens_predicted_total` plus its busy slots' `n_decoded`) between a read just before the
    /// window opens and one just after it closes, where exposed.
    pub server_output_tokens: Option<u64>,
    /// The client's token count between the moments of those two reads minus the server's.
    pub token_count_diff: Option<i64>,
    /// Why there is no client–server token comparison although the server has a counter (e.g.
    /// llama.cpp counts a request's tokens only when it ends).
    #[serde(default)]
    pub token_count_check: Option<String>,
    pub loop_info: Option<LoopInfo>,
    /// Failed requests by kind (also for cells that are not Failed overall).
    pub errors: Vec<ErrorCount>,
    /// The first message per error kind.
    #[serde(default)]
    pub error_messages: Vec<ErrorMessage>,
    /// Whether the server reported no running or waiting requests after the cell (`None`: the
    /// server has no metrics). `false`: the next cell may have started on a busy server.
    #[serde(default)]
    pub server_drained: Option<bool>,
    /// Facts about how the cell was measured that a reader must know (one sentence each).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The client process's CPU use during the window (100 = one core).
    pub client_cpu_percent: Option<f64>,
    /// How late the client's timers fired during the window (a saturated client shows here).
    pub timer_lag_ms_p99: Option<f64>,
    pub timer_lag_ms_max: Option<f64>,
    /// The client's own lag over the window, the bound it puts on each figure and the
    /// Client-bound verdict with its reasons (`analysis::client_lag`, the same figures `bench
    /// serve` writes under `llmspeed.client_lag`); `None` in files from before it was recorded
    /// and for a cell that measured no window.
    #[serde(default)]
    pub client_lag: Option<ClientLagFigures>,
    pub requests: Vec<RequestSummary>,
    /// GPU readings during the cell, every GPU at each sample (empty without a GPU tool).
    #[serde(default)]
    pub gpu_samples: Vec<GpuSample>,
    /// The server's running and waiting requests sampled from the window's opening to its close
    /// (at most [`MAX_SERVER_SAMPLES`]; empty where the server has no metrics).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_samples: Vec<ServerSample>,
    /// Output tokens over the whole cell (ramp-up, window, drain) in equal time bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_bins: Option<TokenBins>,
    /// Every gap between consecutive token events inside the window, binned (absent in files
    /// from before it was recorded, and where no request had two events inside the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_histogram: Option<GapHistogram>,
    /// Set when `--resume-force` kept this cell from a run with other settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_under: Option<MeasuredUnder>,
}

impl DecodeCell {
    /// A cell with a status and no figures (not run, or not yet run).
    pub fn empty(context: u64, context_label: &str, concurrency: u64, status: CellStatus) -> Self {
        Self {
            context,
            context_label: context_label.to_string(),
            concurrency,
            status,
            output_tok_per_s: None,
            per_request_tok_per_s: None,
            ttft_ms_p50: None,
            tbt_ms_p50: None,
            avg_active_requests: None,
            completed_requests: None,
            output_tokens: None,
            measured_s: None,
            interrupted: false,
            window_start_ns: None,
            window_end_ns: None,
            token_count_source: None,
            server_prompt_tokens: None,
            server_output_tokens: None,
            token_count_diff: None,
            token_count_check: None,
            loop_info: None,
            errors: Vec::new(),
            error_messages: Vec::new(),
            server_drained: None,
            notes: Vec::new(),
            client_cpu_percent: None,
            timer_lag_ms_p99: None,
            timer_lag_ms_max: None,
            client_lag: None,
            requests: Vec::new(),
            gpu_samples: Vec::new(),
            server_samples: Vec::new(),
            token_bins: None,
            gap_histogram: None,
            measured_under: None,
        }
    }

    /// Whether the figures mean anything (a cell that ran and produced tokens).
    pub fn has_figures(&self) -> bool {
        self.output_tok_per_s.is_some()
    }
}

/// The most server samples a cell keeps (a 10-minute window at 1 Hz): the report stays small.
pub const MAX_SERVER_SAMPLES: usize = 600;

/// One `/metrics` sample taken during a decode cell's window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerSample {
    /// Relative to the window start.
    pub t_ms: f64,
    pub running: f64,
    pub waiting: f64,
}

/// The most bins of [`TokenBins`]: wider bins on a long cell keep the report small.
pub const MAX_TOKEN_BINS: usize = 600;

/// Output tokens of every request of a cell counted in equal time bins by their events' stamps,
/// from the first token event to the last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBins {
    /// Start of the first bin relative to the window start (negative: before it).
    pub start_ms: f64,
    pub bin_ms: f64,
    /// At most [`MAX_TOKEN_BINS`].
    pub tokens: Vec<u64>,
}

/// Bins of [`GapHistogram`] per factor of ten.
pub const GAP_BINS_PER_DECADE: u32 = 10;
/// Decades [`GapHistogram`] spans: 1 µs to 100 s.
pub const GAP_DECADES: u32 = 8;
/// The lower edge of the first bin, µs.
pub const GAP_LO_US: f64 = 1.0;

/// The distribution of time between tokens of a decode cell: every gap between two consecutive
/// token events of one request, both stamped inside the window, counted into
/// [`GAP_DECADES`] × [`GAP_BINS_PER_DECADE`] log-spaced bins from 1 µs to 100 s (bin `i` holds
/// `[1 µs × 10^(i/10), 1 µs × 10^((i+1)/10))`; a gap below 1 µs counts in the first bin, one of
/// 100 s or more in the last). The percentiles are exact, from the gaps themselves (numpy's
/// linear rule), not read off the bins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GapHistogram {
    pub lo_us: f64,
    pub bins_per_decade: u32,
    /// `GAP_DECADES × GAP_BINS_PER_DECADE` counts.
    pub counts: Vec<u64>,
    /// Gaps counted (the sum of `counts`).
    pub gaps: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

impl GapHistogram {
    /// The lower edge of bin `i`, in ms.
    pub fn edge_ms(&self, i: usize) -> f64 {
        self.lo_us * 10f64.powf(i as f64 / f64::from(self.bins_per_decade.max(1))) / 1000.0
    }
}

/// One request of a decode cell, summarised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestSummary {
    /// Which of the C streams sent it.
    pub stream: u32,
    /// Start relative to the window start (negative: started before it).
    pub start_ms: f64,
    /// Only for a request sent and answered inside the window.
    pub ttft_ms: Option<f64>,
    /// From the request's token events inside the window.
    pub tbt_ms_mean: Option<f64>,
    /// When the request ended, relative to the window start (absent in files from before it
    /// was saved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    pub output_tokens: u64,
    /// Tokens of this request stamped inside the window.
    pub window_tokens: u64,
    #[serde(with = "finish_reason::option")]
    pub finish_reason: Option<FinishReason>,
    #[serde(with = "error_kind::option")]
    pub error: Option<ErrorKind>,
    pub looped: bool,
    /// The `x-request-id` it was sent with (a UUID naming run, cell, stream and request: see
    /// `workload::request_id`),
    /// to find it in the server's logs; absent in files from before it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// serde for other modules' enums, by their stable names.

macro_rules! by_name {
    ($module:ident, $ty:ty, $all:expr) => {
        // Each type uses the plain form, the `Option` form, or both.
        #[allow(dead_code)]
        pub(crate) mod $module {
            use super::*;
            use serde::de::Error as _;
            use serde::{Deserializer, Serializer};

            const ALL: &[$ty] = &$all;

            pub fn from_name(s: &str) -> Option<$ty> {
                ALL.iter().copied().find(|v| v.as_str() == s)
            }

            pub fn serialize<S: Serializer>(v: &$ty, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(v.as_str())
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                let s = String::deserialize(d)?;
                from_name(&s).ok_or_else(|| {
                    D::Error::custom(format!("unknown {} '{s}'", stringify!($module)))
                })
            }

            pub mod option {
                use super::*;

                pub fn serialize<S: Serializer>(v: &Option<$ty>, s: S) -> Result<S::Ok, S::Error> {
                    match v {
                        Some(v) => s.serialize_some(v.as_str()),
                        None => s.serialize_none(),
                    }
                }

                pub fn deserialize<'de, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<Option<$ty>, D::Error> {
                    match Option::<String>::deserialize(d)? {
                        None => Ok(None),
                        Some(s) => from_name(&s).map(Some).ok_or_else(|| {
                            D::Error::custom(format!("unknown {} '{s}'", stringify!($module)))
                        }),
                    }
                }
            }
        }
    };
}

by_name!(error_kind, ErrorKind, ErrorKind::ALL);
by_name!(kv_source, KvSource, KvSource::ALL);
by_name!(
    channel,
    Channel,
    [
        Channel::Content,
        Channel::Reasoning,
        Channel::ToolCall,
        Channel::Empty
    ]
);
by_name!(
    token_count_source,
    TokenCountSource,
    [
        TokenCountSource::ContinuousUsage,
        TokenCountSource::TokenIds,
        TokenCountSource::Chunks
    ]
);
by_name!(
    finish_reason,
    FinishReason,
    [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::ToolCalls,
        FinishReason::ContentFilter,
        FinishReason::Abort,
        FinishReason::Other
    ]
);

/// `CellStatus` as `{"kind": "...", ...details}`.
pub(crate) mod status {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "limit", rename_all = "snake_case")]
    enum CapacityRepr {
        KvCache { needed_tokens: u64, kv_tokens: u64 },
        RunningLimit { max_running: u64 },
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum StatusRepr {
        Valid,
        Looped,
        OverCapacity { reason: CapacityRepr },
        Failed { errors: Vec<ErrorCount> },
        Queued,
        ClientBound,
        Skipped,
        Pending,
    }

    pub fn serialize<S: Serializer>(v: &CellStatus, s: S) -> Result<S::Ok, S::Error> {
        let repr = match v {
            CellStatus::Valid => StatusRepr::Valid,
            CellStatus::Looped => StatusRepr::Looped,
            CellStatus::OverCapacity(CapacityReason::KvCache {
                needed_tokens,
                kv_tokens,
            }) => StatusRepr::OverCapacity {
                reason: CapacityRepr::KvCache {
                    needed_tokens: *needed_tokens,
                    kv_tokens: *kv_tokens,
                },
            },
            CellStatus::OverCapacity(CapacityReason::RunningLimit { max_running }) => {
                StatusRepr::OverCapacity {
                    reason: CapacityRepr::RunningLimit {
                        max_running: *max_running,
                    },
                }
            }
            CellStatus::Failed(errors) => StatusRepr::Failed {
                errors: errors
                    .iter()
                    .map(|&(kind, count)| ErrorCount { kind, count })
                    .collect(),
            },
            CellStatus::Queued => StatusRepr::Queued,
            CellStatus::ClientBound => StatusRepr::ClientBound,
            CellStatus::Skipped => StatusRepr::Skipped,
            CellStatus::Pending => StatusRepr::Pending,
        };
        repr.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CellStatus, D::Error> {
        Ok(match StatusRepr::deserialize(d)? {
            StatusRepr::Valid => CellStatus::Valid,
            StatusRepr::Looped => CellStatus::Looped,
            StatusRepr::OverCapacity {
                reason:
                    CapacityRepr::KvCache {
                        needed_tokens,
                        kv_tokens,
                    },
            } => CellStatus::OverCapacity(CapacityReason::KvCache {
                needed_tokens,
                kv_tokens,
            }),
            StatusRepr::OverCapacity {
                reason: CapacityRepr::RunningLimit { max_running },
            } => CellStatus::OverCapacity(CapacityReason::RunningLimit { max_running }),
            StatusRepr::Failed { errors } => {
                CellStatus::Failed(errors.into_iter().map(|e| (e.kind, e.count)).collect())
            }
            StatusRepr::Queued => CellStatus::Queued,
            StatusRepr::ClientBound => CellStatus::ClientBound,
            StatusRepr::Skipped => CellStatus::Skipped,
            StatusRepr::Pending => CellStatus::Pending,
        })
    }
}

/// The standard methodology sentences for a report with these settings: every figure's
/// definition, in words a reader of `results.json` alone can follow.
pub fn methodology(s: &Settings) -> Vec<String> {
    let mut m = vec![
        "Prompts are generated English prose with no repeated 8-word sequence, behind a unique first line per run and context, ending with a request for a long, detailed answer.".to_string(),
        match s.prompt_tokens {
            PromptTokens::TokenIds => "Prompt sizes are exact: token-id prompts on /v1/completions.",
            PromptTokens::TokenizeEndpoint => "Prompt sizes are exact within a few tokens: the prose length was binary-searched against the server's tokenize endpoint.",
            PromptTokens::LocalTokenizer => "Prompt sizes are exact within a few tokens: the prose length was binary-searched against a local tokenizer.",
            PromptTokens::UsageEstimate => "Prompt sizes are approximate: scaled from usage.prompt_tokens of a probe request.",
        }
        .to_string(),
    ];
    if s.prefill_mode == PrefillMode::DuringDecodeWarmup {
        m.push(format!(
            "Prefill: per context, {} cold streaming request{} with max_tokens 1, each a prompt the server has never seen (a first line of its own, unlike the one calibration sent; cache_salt on vLLM, cache_prompt false on llama.cpp); prefill tok/s = usage.prompt_tokens / TTFT (median). The decode cells' prompt is then warmed by one hidden request.",
            s.prefill_samples,
            if s.prefill_samples == 1 { "" } else { "s" }
        ));
    }
    m.push(format!(
        "Sustained decode: C streams in a closed loop (each restarted as soon as it ends), max_tokens {}{}. The {} s window opens once every stream has produced a token and, where the server reports it, C requests are running and none waiting.",
        s.max_tokens,
        if s.ignore_eos { " with ignore_eos" } else { "" },
        s.duration_s
    ));
    m.extend(
        [
            "Total tok/s: output tokens stamped inside the window, all streams, divided by the window length (measured_s).",
            "Per request tok/s: median over requests of 1 / time between tokens; time between tokens = (t_last - t_first) / (tokens after the first event), over the request's token events inside the window ((tokens - 1) when each event carries one token).",
            "TTFT: from the request being written to its first token event, for requests sent inside the window whose first token also arrived inside it; median over those requests (none when every request outlasted the window).",
            "Average active requests: the server's running-request count sampled at 1 Hz or faster (the client's own count where the server exposes none).",
            "Over capacity: not run when C × (context + max_tokens) exceeds the server's KV-cache tokens, or C exceeds its running-request limit. Skipped: context + max_tokens exceeds max_model_len.",
            "Looped: a stream's tail repeated one period at least 4 times over at least 4096 characters by default (reasoning and answer checked separately); the cell's figures are kept and marked.",
            "Queued: the server never ran C at once: it reported waiting requests during the window, or some streams never produced a token, or (on a server without metrics) the client never saw all C streams producing tokens at one instant; figures are kept and marked. A cell where no stream produced a token is Failed (timeout_first_token), never Valid.",
        ]
        .map(String::from),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_message_is_one_line_of_at_most_500_characters() {
        let body = "{\n  \"error\": {\n    \"message\": \"prompt is too long\",\r\n\t\"code\": 400\n  }\n}\n";
        let m = ErrorMessage::new(Some(ErrorKind::HttpStatus), Some(400), body);
        assert_eq!(
            m.message,
            r#"{ "error": { "message": "prompt is too long", "code": 400 } }"#
        );
        assert_eq!(
            m.display(),
            format!("http_status (HTTP 400): {}", m.message)
        );
        // Multi-byte text is cut on a character boundary, with the cut marked.
        let long = "é".repeat(2 * ERROR_MESSAGE_CHARS);
        let m = ErrorMessage::new(None, None, &long);
        assert_eq!(m.message.chars().count(), ERROR_MESSAGE_CHARS);
        assert!(m.message.ends_with('…'));
        assert!(m.display().starts_with("prompt: éé"));
        let exact = "x".repeat(ERROR_MESSAGE_CHARS);
        assert_eq!(ErrorMessage::new(None, None, &exact).message, exact);
    }

    #[test]
    fn only_the_first_message_per_kind_is_kept() {
        let mut v = Vec::new();
        let m = |k, s: &str| ErrorMessage::new(Some(k), None, s);
        push_first_per_kind(&mut v, m(ErrorKind::HttpStatus, "first"));
        push_first_per_kind(&mut v, m(ErrorKind::TimeoutGap, "gap"));
        push_first_per_kind(&mut v, m(ErrorKind::HttpStatus, "second"));
        let got: Vec<&str> = v.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(got, ["first", "gap"]);
    }
}
