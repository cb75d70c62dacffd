//! What the engine runs: one benchmark run's plan in the engine's own words — which server,
//! which requests, when each is sent, and how each becomes a record. A front end fills it from
//! its tool's flags; the engine never sees a flag.
//!
//! Plain data and the one seam a front end plugs into the requests ([`Bodies`]): no IO, no
//! tool's names.

use crate::bench::engine::lora::LoraAssignment;
use crate::bench::engine::record::{LatencyOrigin, RecordOptions, RequestEnd, TtftPredicate};
use crate::bench::engine::shard::Shard;
use crate::net::Dialect;
use crate::workload::datasets::{DatasetConfig, Sample};
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::ScheduleConfig;
use serde_json::Value;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How a front end writes one request's JSON body: the fields its tool sends on the plan's
/// endpoint (each tool sends its own, and a server must see the same request from either).
pub trait Bodies: Send + Sync {
    /// The body asking `model` for sample `s`. `ids` is scratch space for writing token ids.
    fn request_body(&self, s: &Sample, model: &str, ids: &mut Vec<u32>) -> Result<Vec<u8>, String>;

    /// The body of one round of a multi-turn row (`PromptSource::Turns`, [`Plan::turns`]): the
    /// sample's fields with `messages` as the prompt. A tool that sends no such rows refuses.
    fn round_body(&self, _s: &Sample, _model: &str, _messages: &Value) -> Result<Vec<u8>, String> {
        Err("this tool sends no multi-turn rows".into())
    }
}

/// How the warm-up requests go. The default: [`Plan::num_warmups`] samples in turn, each at
/// its own length within the concurrency cap, a failure only logged, the run right after.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Warmup {
    /// Every warm-up sends the first sample instead of the samples in turn.
    pub repeat_first: bool,
    /// The warm-ups go all at once instead of within the concurrency cap.
    pub all_at_once: bool,
    /// Caps each warm-up's output length.
    pub max_output: Option<u32>,
    /// When every warm-up failed, the run fails with these words (the tool's own) followed
    /// by the first one's error; `None`: a failed warm-up is only logged.
    pub must_succeed: Option<&'static str>,
    /// A ready check by a generation request, before the warm-ups; `None`: none.
    pub initial_test: Option<InitialTest>,
    /// A path POSTed after the warm-ups, before the run (a prefix-cache flush); a failure is
    /// logged, never fatal.
    pub then_post: Option<String>,
    /// A pause after the warm-ups (and the post), before the run starts.
    pub settle: Duration,
    /// A chat request's own fields (`PromptSource::Chat`'s `extra`) stay out of the warm-ups:
    /// they send its messages with the run's fields only.
    pub without_request_fields: bool,
}

/// A ready check by a generation request (vLLM's `--ready-check-timeout-sec`): the first
/// sample, sent until it succeeds, every `retry`, while `within` lasts; then the run fails with
/// `failed` and the last error. The words are the tool's own.
#[derive(Clone, Debug, PartialEq)]
pub struct InitialTest {
    pub within: Duration,
    pub retry: Duration,
    /// Said when it passes.
    pub passed: &'static str,
    /// Said, with the last error after it, when it never passed.
    pub failed: &'static str,
}

/// One benchmark run, as the engine runs it.
#[derive(Clone)]
pub struct Plan {
    // ---- the server ----
    /// `http://host:port` (or `https://`), without a trailing slash.
    pub base_url: String,
    pub headers: Vec<(String, String)>,
    pub api_key: Option<String>,
    pub insecure: bool,
    pub system_roots: bool,
    pub ca_cert: Option<PathBuf>,
    /// Kernel receive stamps on plain connections.
    pub kernel_stamps: bool,
    /// Each event stamped with its own TCP segment's arrival (`--packet-stamps`, `net::packet`).
    pub packet_stamps: bool,
    /// Open the connections the run will use before its start.
    pub preconnect: bool,
    /// How long to wait for `GET /v1/models` to answer before giving up.
    pub ready_check_timeout_s: u64,
    /// The model to ask for; `None`: the first one the server lists.
    pub model: Option<String>,
    /// The name requests carry when it differs from the model id.
    pub served_model_name: Option<String>,
    /// A local tokenizer (path or cached hub id) to count text prompts with.
    pub tokenizer: Option<String>,

    // ---- the requests ----
    /// The path every benchmark request is sent to.
    pub endpoint: String,
    /// The stream the endpoint answers with (OpenAI or an engine's native one).
    pub dialect: Dialect,
    /// The endpoint takes messages, not a prompt: token-id prompts become text.
    pub chat: bool,
    /// Writes each request's body.
    pub bodies: Arc<dyn Bodies>,
    /// Keep each response's generated text in its timeline.
    pub keep_text: bool,
    /// Request i's `x-request-id`.
    pub request_ids: RequestIds,
    /// SGLang's `--gsp-send-routing-key`: a benchmark request whose sample came from
    /// shared-prefix group g carries `X-SMG-Routing-Key: {tag}_{g}`, the tag new for each run
    /// (`engine::run`), so a router sends a group's requests to one worker.
    pub routing_key: bool,
    /// Turns per row (1: a sample is one request). Above 1 every sample becomes a row of that
    /// many turns (`engine::rounds`), the later ones questions of about [`Plan::turn_len`]
    /// tokens, sent one after another in the row's slot on a chat endpoint.
    pub turns: u32,
    pub turn_len: u32,
    /// LoRA adapters benchmark requests name instead of the model (empty: none).
    pub lora_modules: Vec<String>,
    pub lora_assignment: LoraAssignment,
    /// What to send: the dataset, its size and seed.
    pub dataset: DatasetConfig,

    // ---- when ----
    /// Send offsets: rate, burstiness, ramp.
    pub schedule: ScheduleConfig,
    /// Send on a trace dataset's own timestamps instead of the schedule.
    pub self_timed: bool,
    /// At most this many requests in flight; the wait for a slot is queue time.
    pub max_concurrency: Option<usize>,
    /// Requests sent before the measured run, never measured.
    pub num_warmups: usize,
    /// How they are sent, and what follows them.
    pub warmup: Warmup,
    /// Send only this shard's share of the requests.
    pub shard: Option<Shard>,
    /// Wait for this wall-clock time (Unix ns) before the first request.
    pub start_at_unix_ns: Option<u64>,
    /// One-token probe requests per second beside the run; 0: none.
    pub probe_request_rate: f64,
    /// The run's name in the progress display (the command's).
    pub progress_step: &'static str,

    // ---- records ----
    /// Where each request's latency starts.
    pub latency_origin: LatencyOrigin,
    /// Which event is the first token.
    pub ttft: TtftPredicate,
    /// Where a request ends.
    pub end: RequestEnd,
}

impl Plan {
    /// The options that turn a timeline into a record, with times counted from `base_raw`.
    pub fn record_options(&self, base_raw: u64) -> RecordOptions {
        RecordOptions {
            base_raw,
            origin: self.latency_origin,
            predicate: self.ttft,
            end: self.end,
        }
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("base_url", &self.base_url)
            .field("endpoint", &self.endpoint)
            .field("dialect", &self.dialect)
            .field("chat", &self.chat)
            .field("dataset", &self.dataset)
            .field("schedule", &self.schedule)
            .field("max_concurrency", &self.max_concurrency)
            .finish_non_exhaustive()
    }
}
