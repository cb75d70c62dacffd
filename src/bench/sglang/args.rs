//! `llmspeed bench sglang`'s flags: `python -m sglang.bench_serving`'s names and defaults
//! (SGLang `python/sglang/bench_serving.py`, the `--tag` revision; see `docs/bench-sglang.md`),
//! validated into a [`SglangConfig`].
//!
//! Owns: the flag table, the refusals (a flag we cannot honour fails naming itself; nothing is
//! ignored), and the mapping of SGLang's flags onto the engine's [`Plan`]. It must never run
//! anything.

use super::body::{BodyFlags, SglangBodies};
use super::flags::{refuse, refuse_choice, RefusedFlags};
use super::metrics::Reader;
use super::mooncake::{self, TraceFile};
use super::{cache, goodput};
use crate::bench::engine::lora::LoraAssignment;
use crate::bench::engine::plan::{Plan, Warmup};
use crate::bench::engine::record::{LatencyOrigin, RequestEnd, TtftPredicate};
use crate::bench::engine::session::{self, Sweep};
use crate::bench::engine::shard::ShardFlags;
use crate::net::Dialect;
use crate::workload::chat_template::Wrap;
use crate::workload::datasets::{
    sglang_range, Conversations, DatasetConfig, DatasetKind, PrefixGroups,
};
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::{Draws, ScheduleConfig};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The backends SGLang's `ASYNC_REQUEST_FUNCS` names that speak an HTTP streaming API we read.
const BACKENDS: &str =
    "sglang, sglang-native, sglang-oai, sglang-oai-chat, vllm, vllm-chat, lmdeploy, lmdeploy-chat";

#[derive(Debug, Clone, clap::Args)]
#[command(about = "Drop-in for `python -m sglang.bench_serving`: same flags, same JSONL record")]
pub struct SglangArgs {
    /// sglang/sglang-native: POST /generate; sglang-oai, vllm, lmdeploy: /v1/completions;
    /// sglang-oai-chat, vllm-chat, lmdeploy-chat: /v1/chat/completions.
    #[arg(long, default_value = "sglang")]
    pub backend: String,
    /// Server base URL (overrides --host/--port).
    #[arg(long)]
    pub base_url: Option<String>,
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,
    /// [default: 30000; vllm 8000; lmdeploy 23333]
    #[arg(long)]
    pub port: Option<u16>,
    /// Seconds to wait for GET /v1/models to answer before starting (0: one attempt).
    #[arg(long, default_value_t = 60)]
    pub ready_check_timeout_sec: u64,
    /// llmspeed's own: stamp each event with the arrival of the TCP segment that carried it,
    /// from a packet ring of the client. The default wherever a packet socket opens (Linux,
    /// plain HTTP, root or CAP_NET_RAW: `setcap cap_net_raw+ep` on the binary); elsewhere the
    /// client says why and keeps socket stamps.
    #[arg(long)]
    pub packet_stamps: bool,
    /// llmspeed's own: socket receive stamps instead of packet stamps (no packet ring).
    #[arg(long, conflicts_with = "packet_stamps")]
    pub no_packet_stamps: bool,
    /// llmspeed's own: also trust the certificates in this PEM file: CAs, or the server's own
    /// (a self-signed one from `openssl req -x509`; its host name and validity are still
    /// checked). SGLang's client has no such flag (Python's `SSL_CERT_FILE` plays its part).
    #[arg(long, value_name = "PEM")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// llmspeed's own: accept any TLS certificate (recorded in the result as
    /// `llmspeed.insecure`).
    #[arg(long)]
    pub insecure: bool,
    /// Extra request headers, Key=Value; several may follow one flag.
    #[arg(long, num_args = 1.., value_name = "KEY=VALUE")]
    pub header: Vec<String>,
    /// sharegpt, custom, openai, random, random-ids, generated-shared-prefix or mooncake.
    #[arg(long, default_value = "sharegpt")]
    pub dataset_name: String,
    #[arg(long, default_value = "")]
    pub dataset_path: String,
    /// sharegpt and custom: appended to each prompt, before SGLang's "Assistant:" (taken off the
    /// prompt's end and put back after it).
    #[arg(long, default_value = "")]
    pub prompt_suffix: String,
    /// Rotates SGLang's agentic-trace conversations, a dataset llmspeed does not build; every
    /// other dataset ignores it, in SGLang as here.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub dataset_offset: i64,
    /// Model name [default: the first of GET /v1/models].
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// A local tokenizer.json (or a model in the local Hugging Face cache) to count with;
    /// without one the server's /tokenize counts. image and mmmu on sglang / sglang-native: the
    /// processor whose chat template wraps each prompt, over SGLang's --served-model-name or
    /// --model (a folder or hub id, fetched into the Hugging Face cache if need be).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// sharegpt and custom: wrap each prompt in the tokenizer's chat template (one user
    /// message and the generation prompt, every BOS token taken out) before it is counted and
    /// sent, as SGLang does. Needs --tokenizer (a folder with the template).
    #[arg(long)]
    pub apply_chat_template: bool,
    #[arg(long, default_value_t = 1000)]
    pub num_prompts: usize,
    #[arg(long)]
    pub sharegpt_output_len: Option<u32>,
    /// sharegpt and custom: a conversation whose prompt and output together exceed it is
    /// dropped (0: no limit).
    #[arg(long)]
    pub sharegpt_context_len: Option<u32>,
    #[arg(long, default_value_t = 1024)]
    pub random_input_len: u32,
    #[arg(long, default_value_t = 1024)]
    pub random_output_len: u32,
    /// Input and output lengths are drawn from [max(int(L*r), 1), L]: SGLang's meaning, not
    /// vLLM's.
    #[arg(long, default_value_t = 0.0)]
    pub random_range_ratio: f64,
    /// image: images per request (with --random-image-count, the most).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub image_count: i64,
    /// image: 4k, 1080p, 720p, 360p, HEIGHTxWIDTH (e.g. 1080x1920), or
    /// random:MIN_HxMIN_W-MAX_HxMAX_W (each image's sides drawn between the bounds).
    #[arg(long, default_value = "1080p")]
    pub image_resolution: String,
    /// image: each request's image count drawn from 1 to --image-count.
    #[arg(long)]
    pub random_image_count: bool,
    /// image: jpeg or png.
    #[arg(long, default_value = "jpeg")]
    pub image_format: String,
    /// image: random (noise) or blank (white).
    #[arg(long, default_value = "random")]
    pub image_content: String,
    /// Requests per second (inf: all at once; else Poisson arrivals).
    #[arg(long, default_value = "inf")]
    pub request_rate: f64,
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// The JSONL file one line is appended to [default: SGLang's name from backend, date and
    /// lengths].
    #[arg(long)]
    pub output_file: Option<String>,
    /// Adds input_lens, output_lens, ttfts, itls, generated_texts and errors to the record.
    #[arg(long)]
    pub output_details: bool,
    #[arg(long)]
    pub disable_tqdm: bool,
    #[arg(long)]
    pub return_logprob: bool,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[arg(long)]
    pub disable_ignore_eos: bool,
    /// Sampling temperature of native (/generate) requests; the OpenAI backends send 0.0
    /// unless --extra-request-body says otherwise, as SGLang does.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling of native requests, sent only below 1.0.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Native requests ask for the routed experts.
    #[arg(long)]
    pub return_routed_experts: bool,
    /// Native requests' logprob_start_len.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub logprob_start_len: i64,
    /// Native requests' top_logprobs_num (sent above 0); completions' logprobs with
    /// --return-logprob.
    #[arg(long, default_value_t = 0)]
    pub top_logprobs_num: u32,
    /// Native requests' token_ids_logprob.
    #[arg(long, num_args = 1..)]
    pub token_ids_logprob: Option<Vec<i64>>,
    /// Accepted: llmspeed's client is Rust already, each stream read as it arrives, with the
    /// same metrics and keys.
    #[arg(long)]
    pub rust_client: bool,
    /// A JSON object merged into every request body.
    #[arg(long)]
    pub extra_request_body: Option<String>,
    /// LoRA adapter names; each request names one.
    #[arg(long, num_args = 0..)]
    pub lora_name: Option<Vec<String>>,
    /// uniform or distinct (skewed is refused).
    #[arg(long, default_value = "uniform")]
    pub lora_request_distribution: String,
    #[arg(long, default_value_t = 1.5)]
    pub lora_zipf_alpha: f64,
    /// POST /flush_cache after the warm-up.
    #[arg(long)]
    pub flush_cache: bool,
    #[arg(long, default_value_t = 1)]
    pub warmup_requests: usize,
    /// Send token ids (`input_ids`) instead of text (backend sglang; not with sharegpt, as in
    /// SGLang; llmspeed's synthetic prompts are token ids wherever the server takes them, with
    /// or without it).
    #[arg(long)]
    pub tokenize_prompt: bool,
    #[arg(long, default_value_t = 64)]
    pub gsp_num_groups: u32,
    #[arg(long, default_value_t = 16)]
    pub gsp_prompts_per_group: usize,
    #[arg(long, default_value_t = 2048)]
    pub gsp_system_prompt_len: u32,
    #[arg(long, default_value_t = 128)]
    pub gsp_question_len: u32,
    #[arg(long, default_value_t = 256)]
    pub gsp_output_len: u32,
    #[arg(long, default_value_t = 1.0)]
    pub gsp_range_ratio: f64,
    /// Accepted: preparing the dataset skips no statistic here, so it changes nothing.
    #[arg(long)]
    pub gsp_fast_prepare: bool,
    /// Keep the generated-shared-prefix requests in build order (no shuffle).
    #[arg(long)]
    pub gsp_ordered: bool,
    /// Send each generated-shared-prefix request's group in an `X-SMG-Routing-Key` header
    /// (`{8 hex digits of this run}_{its start, YYYYmmddHHMMSS}_{group}`).
    #[arg(long)]
    pub gsp_send_routing_key: bool,
    /// Turns per generated-shared-prefix prompt: each prompt a conversation whose rounds go one
    /// after another, each with the earlier turns and the server's answers (chat backends).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub gsp_num_turns: i64,
    /// uniform (every group its prompts) or zipf (each prompt's group drawn by rank; needs
    /// --gsp-zipf-alpha).
    #[arg(long, default_value = "uniform")]
    pub gsp_group_distribution: String,
    /// The Zipf exponent of --gsp-group-distribution zipf (finite, above 0).
    #[arg(long)]
    pub gsp_zipf_alpha: Option<f64>,
    /// Replay speed of a mooncake trace (2.0: twice as slow).
    #[arg(long, default_value_t = 1.0)]
    pub mooncake_slowdown_factor: f64,
    #[arg(long, default_value_t = 1)]
    pub mooncake_num_rounds: u32,
    #[arg(long, default_value = "conversation")]
    pub mooncake_workload: String,
    /// Label the rate `trace` in the block and the record (mooncake only; with --backend sglang
    /// the trace's timestamps set the schedule either way, as in SGLang).
    #[arg(long)]
    pub use_trace_timestamps: bool,
    /// A tag recorded in the JSONL record.
    #[arg(long)]
    pub tag: Option<String>,
    /// SLOs for goodput, KEY:VALUE in milliseconds with KEY ttft, tpot or e2el (e.g. ttft:500
    /// tpot:50): a request counts toward goodput when it succeeded and met every one.
    #[arg(long, num_args = 1.., value_name = "KEY:VALUE")]
    pub goodput: Option<Vec<String>>,
    /// Cache hit statistics from each request's cached-token count (native backends; see
    /// docs/bench-sglang.md).
    #[arg(long)]
    pub cache_report: bool,

    // ---- llmspeed's extras, named as in `bench serve` ----
    /// Run once per --max-concurrency value, e.g. 1,8,64: one record per point, in order.
    #[arg(
        long,
        value_name = "N,N,...",
        help_heading = "Sweeps and repeated runs"
    )]
    pub sweep_max_concurrency: Option<String>,
    /// Run once per --request-rate value, e.g. 1,10,inf: one record per point, in order.
    #[arg(
        long,
        value_name = "RATE,RATE,...",
        help_heading = "Sweeps and repeated runs"
    )]
    pub sweep_request_rate: Option<String>,
    /// Run the benchmark N times (at every sweep point): one record per run, then each
    /// figure's mean, standard deviation, coefficient of variation and 95% confidence
    /// interval, printed and appended to `<output file>.runs.jsonl`.
    #[arg(long, default_value_t = 1, help_heading = "Sweeps and repeated runs")]
    pub num_runs: usize,
    #[command(flatten)]
    pub many: ShardFlags,

    // ---- SGLang flags llmspeed refuses (flags.rs: each fails naming itself and why) ----
    #[command(flatten)]
    pub refused: RefusedFlags,
}

/// Inclusive `(input, output)` length bounds of the random datasets.
pub type Bounds = ((u32, u32), (u32, u32));

/// A validated `bench sglang` run.
#[derive(Clone, Debug)]
pub struct SglangConfig {
    /// The backend name as given (the record's `backend`).
    pub backend: String,
    pub reader: Reader,
    /// What the engine runs: server, dataset, schedule, concurrency, SGLang's bodies.
    pub plan: Plan,
    /// The plan's bodies, for a run that completes them (`run`: the processor's chat template
    /// of a native image run, read when the run starts).
    pub bodies: SglangBodies,
    pub dataset_name: String,
    pub num_prompts: usize,
    pub request_rate: f64,
    pub max_concurrency: Option<usize>,
    pub sharegpt_output_len: Option<u32>,
    pub random_input_len: u32,
    pub random_output_len: u32,
    pub random_range_ratio: f64,
    pub output_file: Option<String>,
    pub output_details: bool,
    pub disable_tqdm: bool,
    pub tag: Option<String>,
    /// `--use-trace-timestamps`: the rate reads `trace`.
    pub rate_is_trace: bool,
    /// `--sweep-max-concurrency` / `--sweep-request-rate`.
    pub sweep: Option<Sweep>,
    /// `--num-runs`, at least 1.
    pub num_runs: usize,
    /// `--goodput`'s SLOs, parsed.
    pub goodput: Option<goodput::Slos>,
    /// `--cache-report`.
    pub cache_report: bool,
    /// `--dataset-name mooncake`: the trace, downloaded before the run when it is not there.
    pub mooncake_trace: Option<TraceFile>,
    /// `--dataset-name image`: `--image-count` and `--image-resolution` as given.
    pub image: Option<(i64, String)>,
}

impl SglangConfig {
    /// `--shard K/N`.
    pub fn shard(&self) -> Option<crate::bench::engine::shard::Shard> {
        self.plan.shard
    }
}

/// The reader that reads what `backend` speaks, and its default port.
fn backend_of(b: &str) -> Result<(Reader, u16), String> {
    Ok(match b {
        "sglang" | "sglang-native" => (Reader::Native, 30000),
        "sglang-oai" => (Reader::Completions, 30000),
        "vllm" => (Reader::Completions, 8000),
        "lmdeploy" => (Reader::Completions, 23333),
        "sglang-oai-chat" | "vllm-chat" | "lmdeploy-chat" => (Reader::Chat, 30000),
        _ => {
            refuse_choice("--backend", b)?;
            return Err(format!("unknown --backend {b:?} (supported: {BACKENDS})"));
        }
    })
}

/// SGLang's random length bounds (`compute_random_lens`): each length from
/// `[max(int(L*r), 1), L]`, and 0 when L is 0. An input is at least one token here (SGLang
/// would send an empty prompt).
pub fn sglang_bounds(input_len: u32, output_len: u32, r: f64) -> Bounds {
    let (i_lo, i_hi) = sglang_range(input_len, r);
    ((i_lo.max(1), i_hi.max(1)), sglang_range(output_len, r))
}

impl SglangArgs {
    /// Refuses what cannot be honoured, then maps the rest, as named steps.
    pub fn validate(&self) -> Result<SglangConfig, String> {
        self.refuse_unsupported()?;
        let (reader, default_port) = backend_of(&self.backend)?;
        self.check_tokenize_prompt()?;
        let lora_assignment = self.lora_assignment()?;
        self.check_range_ratio()?;
        let extra = self.extra_body()?;
        let headers = self.headers()?;
        let (dataset, num_prompts) = self.dataset()?;
        let sweep = self.sweep()?;
        let goodput = self.reports()?;
        let turns = self.turns()?;
        let bodies = self.bodies(reader, extra);
        let mut plan = self.plan(reader, default_port, lora_assignment, &bodies, dataset);
        plan.headers = headers;
        (plan.turns, plan.turn_len) = (turns, self.gsp_question_len);
        Ok(SglangConfig {
            backend: self.backend.clone(),
            reader,
            plan,
            bodies,
            dataset_name: self.dataset_name.clone(),
            num_prompts,
            request_rate: self.request_rate,
            max_concurrency: self.max_concurrency,
            sharegpt_output_len: self.sharegpt_output_len,
            random_input_len: self.random_input_len,
            random_output_len: self.random_output_len,
            random_range_ratio: self.random_range_ratio,
            output_file: self.output_file.clone(),
            output_details: self.output_details,
            disable_tqdm: self.disable_tqdm,
            tag: self.tag.clone(),
            rate_is_trace: self.use_trace_timestamps,
            sweep,
            num_runs: self.num_runs,
            goodput,
            cache_report: self.cache_report,
            mooncake_trace: self.mooncake_trace()?,
            image: matches!(self.dataset_name.as_str(), "image" | "mmmu")
                .then(|| (self.image_count, self.image_resolution.clone())),
        })
    }

    /// `--dataset-name mooncake`'s trace file and where it is fetched from when missing.
    fn mooncake_trace(&self) -> Result<Option<TraceFile>, String> {
        if self.dataset_name != "mooncake" {
            return Ok(None);
        }
        let path = (!self.dataset_path.is_empty()).then(|| self.dataset_path.clone().into());
        let base = mooncake::base_from_env();
        TraceFile::for_workload(&self.mooncake_workload, path, base.as_deref()).map(Some)
    }

    /// `--goodput` as SGLang parses it, and `--cache-report`'s backend; neither with `--shard`
    /// (the merge recomputes the metrics from the shards' blocks, which carry neither).
    fn reports(&self) -> Result<Option<goodput::Slos>, String> {
        if self.cache_report {
            cache::check_backend(&self.backend)?;
        }
        if self.many.shard.is_some() && (self.goodput.is_some() || self.cache_report) {
            return Err(
                "--shard: --goodput and --cache-report are figures of the whole run, \
                        which llmspeed merge does not compute; run the shards without them"
                    .into(),
            );
        }
        self.goodput.as_deref().map(goodput::parse).transpose()
    }

    /// The sweep and `--num-runs`, checked as `bench serve` checks them.
    fn sweep(&self) -> Result<Option<Sweep>, String> {
        let sweep = Sweep::parse(
            self.sweep_max_concurrency.as_deref(),
            self.sweep_request_rate.as_deref(),
            None,
        )?;
        session::check_runs(&sweep, self.max_concurrency, self.num_runs)?;
        self.many.check(sweep.is_some(), self.num_runs)?;
        match &sweep {
            Some(Sweep::RequestRate(_))
                if self.dataset_name == "mooncake" && self.backend == "sglang" =>
            {
                Err("--sweep-request-rate: with --backend sglang a mooncake trace sets its own arrival times".into())
            }
            _ => Ok(sweep),
        }
    }

    /// `--gsp-num-turns`: read by generated-shared-prefix alone (1 for any other dataset, as
    /// SGLang ignores it there); above 1, SGLang's limits (a chat backend, no
    /// `--tokenize-prompt`).
    fn turns(&self) -> Result<u32, String> {
        let n = self.gsp_num_turns;
        if self.dataset_name != "generated-shared-prefix" || n == 1 {
            return Ok(1);
        }
        if n < 1 {
            return Err(format!("--gsp-num-turns must be at least 1, got {n}"));
        }
        if self.tokenize_prompt {
            return Err("--tokenize-prompt requires --gsp-num-turns=1 (as in SGLang)".into());
        }
        if !matches!(
            self.backend.as_str(),
            "sglang-oai-chat" | "vllm-chat" | "lmdeploy-chat"
        ) {
            return Err(format!(
                "--gsp-num-turns above 1 sends conversations, on the chat backends only (sglang-oai-chat, vllm-chat, lmdeploy-chat), as in SGLang; got --backend {}",
                self.backend
            ));
        }
        u32::try_from(n).map_err(|_| format!("--gsp-num-turns {n} is too large"))
    }

    /// SGLang's own limits on `--tokenize-prompt`.
    fn check_tokenize_prompt(&self) -> Result<(), String> {
        if self.tokenize_prompt && self.backend != "sglang" {
            return Err("--tokenize-prompt only works with --backend sglang (as in SGLang)".into());
        }
        // SGLang 0.5.23's sharegpt and custom loaders assert it away; random-*,
        // generated-shared-prefix (token-id prompts) and mooncake take it.
        if self.tokenize_prompt && matches!(self.dataset_name.as_str(), "sharegpt" | "custom") {
            return Err(format!(
                "--tokenize-prompt does not work with --dataset-name {} (as in SGLang)",
                self.dataset_name
            ));
        }
        Ok(())
    }

    /// `--lora-request-distribution` as the engine's assignment.
    fn lora_assignment(&self) -> Result<LoraAssignment, String> {
        let a = match self.lora_request_distribution.as_str() {
            "uniform" => LoraAssignment::Random,
            "distinct" => LoraAssignment::RoundRobin,
            d => {
                refuse_choice("--lora-request-distribution", d)?;
                return Err(format!(
                    "unknown --lora-request-distribution {d:?} (uniform, distinct, skewed)"
                ));
            }
        };
        let names = self.lora_name.as_ref().map_or(0, Vec::len);
        if a == LoraAssignment::RoundRobin && names < 2 {
            return Err(
                "--lora-request-distribution distinct needs more than one --lora-name".into(),
            );
        }
        Ok(a)
    }

    fn check_range_ratio(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.random_range_ratio) {
            return Err(format!(
                "--random-range-ratio must be in [0, 1] (lengths come from [L*r, L]), got {}",
                self.random_range_ratio
            ));
        }
        Ok(())
    }

    /// `--header Key=Value`, each checked as a header line. SGLang drops a malformed one
    /// silently; here it is an error naming it.
    fn headers(&self) -> Result<Vec<(String, String)>, String> {
        self.header
            .iter()
            .map(|h| match h.split_once('=') {
                Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                    crate::proto::http1::validate_header(k, v).map_err(|e| e.to_string())?;
                    Ok((k.to_string(), v.to_string()))
                }
                _ => Err(format!(
                    "--header {h:?} must look like Key=Value (both parts non-empty)"
                )),
            })
            .collect()
    }

    /// `--extra-request-body`, a JSON object.
    fn extra_body(&self) -> Result<Map<String, Value>, String> {
        match &self.extra_request_body {
            None => Ok(Map::new()),
            Some(s) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => Ok(m),
                _ => Err(format!(
                    "--extra-request-body must be a JSON object, got {s:?}"
                )),
            },
        }
    }

    /// SGLang's request bodies for `reader`, `extra` merged into each.
    fn bodies(&self, reader: Reader, extra: Map<String, Value>) -> SglangBodies {
        SglangBodies {
            reader,
            lora_names: self.lora_name.clone().unwrap_or_default(),
            flags: BodyFlags {
                ignore_eos: !self.disable_ignore_eos,
                return_logprob: self.return_logprob,
                temperature: self.temperature,
                top_p: (self.top_p < 1.0).then_some(self.top_p),
                return_routed_experts: self.return_routed_experts,
                logprob_start_len: self.logprob_start_len,
                top_logprobs_num: self.top_logprobs_num,
                token_ids_logprob: self.token_ids_logprob.clone(),
                extra,
            },
            native_template: None,
        }
    }

    /// The engine's plan: SGLang's server, bodies, schedule and warm-up.
    fn plan(
        &self,
        reader: Reader,
        default_port: u16,
        lora_assignment: LoraAssignment,
        bodies: &SglangBodies,
        dataset: DatasetConfig,
    ) -> Plan {
        let base_url = match &self.base_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("http://{}:{}", self.host, self.port.unwrap_or(default_port)),
        };
        let (dialect, endpoint) = match reader {
            Reader::Native => (Dialect::Sglang, "/generate"),
            Reader::Completions => (Dialect::OpenAi, "/v1/completions"),
            Reader::Chat => (Dialect::OpenAi, "/v1/chat/completions"),
        };
        let lora_names = self.lora_name.clone().unwrap_or_default();
        Plan {
            base_url,
            headers: Vec::new(),
            // SGLang sends `Authorization: Bearer $OPENAI_API_KEY` when it is set.
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            insecure: self.insecure,
            system_roots: false,
            ca_cert: self.ca_cert.clone(),
            kernel_stamps: true,
            packet_stamps: crate::net::packet_stamps_wanted(
                self.packet_stamps,
                self.no_packet_stamps,
                false,
            ),
            preconnect: false,
            // SGLang polls `/v1/models` up to this long (0: one attempt).
            ready_check_timeout_s: self.ready_check_timeout_sec,
            model: self.model.clone(),
            served_model_name: self.served_model_name.clone(),
            tokenizer: self.tokenizer.clone(),
            endpoint: endpoint.into(),
            dialect,
            // An image row's text goes as text on every backend (SGLang's `text`).
            chat: reader == Reader::Chat || matches!(self.dataset_name.as_str(), "image" | "mmmu"),
            bodies: Arc::new(bodies.clone()),
            // SGLang keeps every generated text: it counts them again.
            keep_text: true,
            request_ids: RequestIds::Uuid {
                run: rand::random(),
            },
            lora_modules: lora_names,
            lora_assignment,
            dataset,
            schedule: ScheduleConfig {
                rate: self.request_rate,
                burstiness: 1.0,
                ramp: None,
                seed: self.seed,
                // The dataset's draws are counted once it is built (`Order`).
                draws: Draws::Sglang { dataset_words: 0 },
            },
            // SGLang replays a mooncake trace on its timestamps only with --backend sglang.
            self_timed: self.dataset_name == "mooncake" && self.backend == "sglang",
            max_concurrency: self.max_concurrency,
            num_warmups: self.warmup_requests,
            // SGLang's warm-up: the first request, at most 32 output tokens, all at once, one
            // must succeed; then `/flush_cache` when asked, and a second's pause either way.
            warmup: Warmup {
                repeat_first: true,
                all_at_once: true,
                max_output: Some(32),
                must_succeed: Some(
                    "Warmup failed - Please make sure benchmark arguments are correctly specified. Error: ",
                ),
                then_post: self.flush_cache.then(|| "/flush_cache".to_string()),
                settle: Duration::from_secs(1),
                // SGLang's warm-up takes the first row's prompt with the run's
                // --extra-request-body only (an openai row's own fields are merged in the
                // measured requests alone).
                without_request_fields: true,
                initial_test: None,
            },
            shard: self.many.shard,
            start_at_unix_ns: self.many.start_at_unix_ns,
            probe_request_rate: 0.0,
            progress_step: "bench sglang",
            routing_key: self.gsp_send_routing_key,
            // Set by `validate` (`turns`).
            turns: 1,
            turn_len: 0,
            // A request starts when it may run (its slot, never before its send time): SGLang's
            // `st`. SGLang's figures are `metrics`' reading of the timelines; the engine's
            // records under these rules serve only the steady-state window.
            latency_origin: LatencyOrigin::Scheduled,
            ttft: TtftPredicate::FirstContent,
            end: RequestEnd::LastChoice,
        }
    }

    /// The dataset, and the number of prompts SGLang sends.
    fn dataset(&self) -> Result<(DatasetConfig, usize), String> {
        let path = (!self.dataset_path.is_empty()).then(|| self.dataset_path.clone().into());
        let mut d = DatasetConfig {
            num_prompts: self.num_prompts,
            seed: self.seed,
            ..DatasetConfig::default()
        };
        match self.dataset_name.as_str() {
            name @ ("sharegpt" | "custom") => {
                let lines = name == "custom";
                d.path = match (lines, path) {
                    (true, None) => {
                        return Err(
                            "--dataset-name custom needs --dataset-path (a JSONL file of \
                                    conversations, as SGLang reads it)"
                                .into(),
                        )
                    }
                    // No sharegpt path: SGLang's ShareGPT file, fetched at run time
                    // (`run::hub_sharegpt`).
                    (_, path) => path,
                };
                if self.sharegpt_output_len.is_some_and(|n| n < 4) {
                    return Err(
                        "--sharegpt-output-len must be at least 4 (SGLang: output_len too small)"
                            .into(),
                    );
                }
                d.kind = DatasetKind::ShareGpt;
                d.chat_template = self.apply_chat_template.then(|| Wrap {
                    strip_bos: true,
                    kwargs: None,
                    required: true,
                    hint: "--apply-chat-template renders it on the client as SGLang does: give \
                           --tokenizer a folder (or hub id) holding the model's chat template, or \
                           leave the flag out"
                        .into(),
                });
                d.sharegpt_output_len = self.sharegpt_output_len;
                d.conversations = Conversations::Sglang {
                    lines,
                    context_len: self.sharegpt_context_len,
                };
                d.prompt_suffix = self.prompt_suffix.clone();
            }
            "openai" => {
                d.path = Some(path.ok_or_else(|| {
                    "--dataset-name openai needs --dataset-path (a JSONL file of chat requests)"
                        .to_string()
                })?);
                d.kind = DatasetKind::ChatRequests;
                d.sharegpt_output_len = self.sharegpt_output_len;
                d.chat_template = Some(Wrap {
                    strip_bos: false,
                    kwargs: None,
                    required: true,
                    hint: "--dataset-name openai counts each request's messages through the \
                           model's chat template on the client, as SGLang does: give --tokenizer \
                           a folder (or hub id) holding it"
                        .into(),
                });
            }
            "random" | "random-ids" => {
                d.kind = DatasetKind::Random;
                d.random_input_len = self.random_input_len.max(1);
                d.random_output_len = self.random_output_len;
                d.random_bounds = Some(sglang_bounds(
                    self.random_input_len,
                    self.random_output_len,
                    self.random_range_ratio,
                ));
                // The tokenizer's vocabulary is read once it is loaded.
                d.random_draws = crate::workload::datasets::RandomDraws::Sglang {
                    vocab: 0,
                    offsets: self.dataset_name == "random-ids",
                    text: !self.tokenize_prompt,
                };
                // SGLang's `random` cuts its ShareGPT file's conversations to the lengths
                // (`--dataset-path`, else fetched at run time: `run::hub_sharegpt`).
                if self.dataset_name == "random" {
                    d.path = path;
                }
            }
            "generated-shared-prefix" => {
                let groups = self.gsp_groups()?;
                d.kind = DatasetKind::PrefixRepetition;
                d.num_prompts = self.gsp_num_groups as usize * self.gsp_prompts_per_group;
                d.prefix_repetition_num_prefixes = self.gsp_num_groups;
                d.prefix_repetition_prefix_len = self.gsp_system_prompt_len;
                d.prefix_repetition_suffix_len = self.gsp_question_len;
                d.prefix_repetition_output_len = self.gsp_output_len;
                d.shuffle = !self.gsp_ordered;
                d.prefix_groups = groups;
            }
            "image" => self.image_dataset(&mut d)?,
            "mmmu" => {
                // The hub's MMMU/MMMU (Math, test), SGLang's backends and checks.
                self.image_backend()?;
                d.kind = DatasetKind::Mmmu;
                d.random_output_len = self.random_output_len;
            }
            "longbench_v2" => {
                // A local .parquet or JSON-lines file, else the hub's THUDM/LongBench-v2.
                d.kind = DatasetKind::LongBenchV2;
                d.path = path;
                d.longbench_v2 = crate::workload::datasets::longbench_v2::Settings {
                    output_len: self.sharegpt_output_len,
                    context_len: self.sharegpt_context_len,
                };
            }
            "mooncake" => {
                // SGLang's file: --dataset-path, else /tmp/<workload>_trace.jsonl, fetched at
                // run time when missing (`run::mooncake_trace`).
                d.path = self.mooncake_trace()?.map(|t| t.path);
                if self.mooncake_num_rounds == 0 {
                    return Err("--mooncake-num-rounds must be at least 1".into());
                }
                d.trace.rounds = self.mooncake_num_rounds;
                if self.mooncake_slowdown_factor.is_nan() || self.mooncake_slowdown_factor <= 0.0 {
                    return Err(format!(
                        "--mooncake-slowdown-factor must be above 0, got {}",
                        self.mooncake_slowdown_factor
                    ));
                }
                d.kind = DatasetKind::TimedTrace;
                // Mooncake's blocks are 512 tokens, its timestamps milliseconds.
                d.trace.chunk_hash_size = 512;
                d.trace.sec_multiplier = 0.001 * self.mooncake_slowdown_factor;
            }
            d => {
                refuse_choice("--dataset-name", d)?;
                return Err(format!(
                    "unknown --dataset-name {d:?} (supported: sharegpt, custom, openai, random, random-ids, generated-shared-prefix, mooncake, image, mmmu, longbench_v2)"
                ));
            }
        }
        let n = d.num_prompts;
        Ok((d, n))
    }

    /// `--dataset-name image`: `random`'s lengths and the `--image-*` flags, checked as SGLang
    /// checks them (its backends, no `--tokenize-prompt`), and a count SGLang would crash on
    /// (below 1) refused.
    fn image_dataset(&self, d: &mut DatasetConfig) -> Result<(), String> {
        use crate::workload::datasets::sglang_image::{
            parse_content, parse_format, parse_resolution, ImageSettings,
        };
        self.image_backend()?;
        if self.image_count < 1 || self.image_count > u32::MAX as i64 {
            return Err(format!(
                "--image-count must be at least 1 (images per request), got {}",
                self.image_count
            ));
        }
        d.kind = DatasetKind::SglangImage;
        d.random_input_len = self.random_input_len;
        d.random_output_len = self.random_output_len;
        d.random_bounds = Some(sglang_bounds(
            self.random_input_len,
            self.random_output_len,
            self.random_range_ratio,
        ));
        d.sglang_image = ImageSettings {
            count: self.image_count as u32,
            random_count: self.random_image_count,
            resolution: parse_resolution(&self.image_resolution)?,
            format: parse_format(&self.image_format)?,
            content: parse_content(&self.image_content)?,
        };
        Ok(())
    }

    /// SGLang's checks for its image datasets (`image`, `mmmu`): its backends, no
    /// `--tokenize-prompt`.
    fn image_backend(&self) -> Result<(), String> {
        let name = &self.dataset_name;
        if !matches!(
            self.backend.as_str(),
            "sglang" | "sglang-native" | "sglang-oai-chat" | "vllm-chat" | "lmdeploy-chat"
        ) {
            return Err(format!(
                "--dataset-name {name} runs on --backend sglang, sglang-native, sglang-oai-chat, \
                 vllm-chat or lmdeploy-chat (as in SGLang), got {}",
                self.backend
            ));
        }
        if self.tokenize_prompt {
            return Err(format!(
                "--tokenize-prompt does not work with --dataset-name {name} (as in SGLang)"
            ));
        }
        Ok(())
    }

    /// `--gsp-range-ratio` and the group distribution, checked as SGLang checks them; `None`
    /// for exact lengths and equal groups (the `prefix_repetition` draw).
    fn gsp_groups(&self) -> Result<Option<PrefixGroups>, String> {
        let r = self.gsp_range_ratio;
        if r.is_nan() || r > 1.0 {
            // SGLang's draw fails on it (numpy: low >= high).
            return Err(format!(
                "--gsp-range-ratio must be at most 1 (lengths come from [max(L*r, 1), L]), got {r}"
            ));
        }
        let zipf_alpha = match (self.gsp_group_distribution.as_str(), self.gsp_zipf_alpha) {
            ("uniform", None) => None,
            ("uniform", Some(_)) => {
                return Err(
                    "--gsp-zipf-alpha is only meaningful with --gsp-group-distribution \
                            zipf (as in SGLang)"
                        .into(),
                )
            }
            ("zipf", Some(a)) if a.is_finite() && a > 0.0 => Some(a),
            ("zipf", Some(a)) => {
                return Err(format!(
                    "--gsp-zipf-alpha must be a finite number above 0, got {a}"
                ))
            }
            ("zipf", None) => {
                return Err(
                    "--gsp-group-distribution zipf needs --gsp-zipf-alpha (a finite \
                            number above 0, as in SGLang)"
                        .into(),
                )
            }
            (d, _) => {
                return Err(format!(
                    "unknown --gsp-group-distribution {d:?} (uniform, zipf)"
                ))
            }
        };
        Ok(Some(PrefixGroups {
            range_ratio: r,
            zipf_alpha,
            turns: self.gsp_num_turns.max(1) as u32,
        }))
    }

    /// Every SGLang flag we cannot honour, named.
    fn refuse_unsupported(&self) -> Result<(), String> {
        self.refused.check()?;
        if self.use_trace_timestamps && self.dataset_name != "mooncake" {
            return Err(refuse("--use-trace-timestamps"));
        }
        if self.warmup_requests > 0 && self.num_prompts == 0 {
            return Err("--num-prompts 0: the warm-up needs a first request".into());
        }
        if self.request_rate.is_nan() || self.request_rate <= 0.0 {
            return Err("--request-rate must be above 0 (or inf)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<SglangConfig, String> {
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: SglangArgs,
        }
        let mut argv = vec!["bench-sglang"];
        argv.extend_from_slice(extra);
        Wrap::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .a
            .validate()
    }

    #[test]
    fn defaults_are_sglangs() {
        let c = parse(&["--dataset-name", "random"]).unwrap();
        assert_eq!(c.backend, "sglang");
        assert_eq!(c.reader, Reader::Native);
        assert_eq!(c.plan.base_url, "http://0.0.0.0:30000");
        assert_eq!(c.plan.endpoint, "/generate");
        assert_eq!(
            (c.num_prompts, c.random_input_len, c.random_output_len),
            (1000, 1024, 1024)
        );
        assert!(c.request_rate.is_infinite());
        assert_eq!((c.plan.num_warmups, c.plan.dataset.seed), (1, 42));
        assert_eq!(c.plan.ready_check_timeout_s, 60);
        assert!(c.plan.warmup.repeat_first && c.plan.warmup.must_succeed.is_some());
        // Ratio 0: inputs and outputs from [1, L] (SGLang 0.5.23 never draws 0 tokens).
        assert_eq!(c.plan.dataset.random_bounds, Some(((1, 1024), (1, 1024))));
    }

    #[test]
    fn backends_pick_their_endpoint_and_port() {
        let c = parse(&["--backend", "vllm-chat", "--dataset-name", "random"]).unwrap();
        assert_eq!(
            (c.reader, c.plan.endpoint.as_str()),
            (Reader::Chat, "/v1/chat/completions")
        );
        let c = parse(&["--backend", "vllm", "--dataset-name", "random"]).unwrap();
        assert_eq!(c.plan.base_url, "http://0.0.0.0:8000");
        assert_eq!(c.plan.endpoint, "/v1/completions");
        let c = parse(&["--backend", "lmdeploy", "--dataset-name", "random"]).unwrap();
        assert_eq!(c.plan.base_url, "http://0.0.0.0:23333");
    }

    #[test]
    fn range_ratio_has_sglangs_meaning() {
        assert_eq!(sglang_bounds(1000, 200, 0.5), ((500, 1000), (100, 200)));
        assert_eq!(sglang_bounds(1000, 200, 1.0), ((1000, 1000), (200, 200)));
        assert_eq!(sglang_bounds(3, 3, 0.1), ((1, 3), (1, 3)));
        assert_eq!(sglang_bounds(0, 0, 0.5), ((1, 1), (0, 0)));
    }

    #[test]
    fn apply_chat_template_wraps_sharegpt_and_custom_only() {
        let wrap = |extra: &[&str]| parse(extra).unwrap().plan.dataset.chat_template;
        let w = wrap(&["--dataset-path", "s.json", "--apply-chat-template"]).unwrap();
        assert!(w.strip_bos && w.required && w.kwargs.is_none());
        assert!(w.hint.contains("--tokenizer"));
        let custom = ["--dataset-name", "custom", "--dataset-path", "c.jsonl"];
        assert!(wrap(&[&custom[..], &["--apply-chat-template"]].concat()).is_some());
        assert!(wrap(&custom).is_none());
        // SGLang's random prompts never pass through the template.
        assert!(wrap(&["--dataset-name", "random-ids", "--apply-chat-template"]).is_none());
        // openai rows are counted through it, whatever --apply-chat-template says; its
        // warm-up sends the first row without the row's own fields, as SGLang's does.
        let c = parse(&["--dataset-name", "openai", "--dataset-path", "o.jsonl"]).unwrap();
        assert_eq!(c.plan.dataset.kind, DatasetKind::ChatRequests);
        assert!(c
            .plan
            .dataset
            .chat_template
            .is_some_and(|w| w.required && !w.strip_bos));
        assert!(c.plan.warmup.without_request_fields);
        let e = parse(&["--dataset-name", "openai"]).unwrap_err();
        assert!(e.contains("needs --dataset-path"), "{e}");
    }

    #[test]
    fn a_prompt_suffix_reaches_sglangs_text_datasets() {
        for name in ["sharegpt", "custom"] {
            let c = parse(&[
                "--dataset-name",
                name,
                "--dataset-path",
                "x.json",
                "--prompt-suffix",
                " Be brief.",
            ])
            .unwrap();
            assert_eq!(c.plan.dataset.prompt_suffix, " Be brief.", "{name}");
        }
        let c = parse(&["--dataset-name", "random-ids", "--prompt-suffix", "x"]).unwrap();
        assert_eq!(c.plan.dataset.prompt_suffix, "");
    }

    #[test]
    fn refused_flags_name_themselves() {
        for (flag, extra) in [
            ("--disable-stream", vec!["--disable-stream"]),
            ("--profile", vec!["--profile"]),
            ("--backend trt", vec!["--backend", "trt"]),
        ] {
            let e = parse(&extra).unwrap_err();
            assert!(e.starts_with(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn gsp_num_turns_makes_rows_on_chat_backends_as_sglang_allows() {
        let gsp = |extra: &[&str]| {
            let mut a = vec!["--dataset-name", "generated-shared-prefix"];
            a.extend_from_slice(extra);
            parse(&a)
        };
        let c = gsp(&[
            "--backend",
            "vllm-chat",
            "--gsp-num-turns",
            "3",
            "--gsp-question-len",
            "9",
        ])
        .unwrap();
        assert_eq!((c.plan.turns, c.plan.turn_len), (3, 9));
        assert_eq!(gsp(&["--backend", "vllm-chat"]).unwrap().plan.turns, 1);
        // Read by generated-shared-prefix alone: SGLang ignores it elsewhere, any value.
        let c = parse(&["--dataset-name", "random", "--gsp-num-turns", "0"]).unwrap();
        assert_eq!(c.plan.turns, 1);
        for (extra, says) in [
            (
                vec!["--backend", "vllm-chat", "--gsp-num-turns", "0"],
                "at least 1",
            ),
            (
                vec!["--backend", "sglang", "--gsp-num-turns", "2"],
                "chat backends only",
            ),
            (
                vec!["--backend", "sglang-oai", "--gsp-num-turns", "2"],
                "chat backends only",
            ),
            (
                vec![
                    "--backend",
                    "sglang",
                    "--tokenize-prompt",
                    "--gsp-num-turns",
                    "2",
                ],
                "--tokenize-prompt requires --gsp-num-turns=1",
            ),
        ] {
            let e = gsp(&extra).unwrap_err();
            assert!(e.contains(says), "{extra:?}: {e}");
        }
    }

    #[test]
    fn tokenize_prompt_takes_sglangs_datasets() {
        let with = |d: &str| {
            let mut a = vec!["--tokenize-prompt", "--dataset-name", d];
            if d == "mooncake" {
                a.extend(["--dataset-path", "t.jsonl"]);
            }
            parse(&a).map(|_| ())
        };
        for ok in [
            "random",
            "random-ids",
            "generated-shared-prefix",
            "mooncake",
        ] {
            assert_eq!(with(ok), Ok(()), "{ok}");
        }
        assert!(with("sharegpt").unwrap_err().contains("sharegpt"));
        let e = parse(&[
            "--tokenize-prompt",
            "--backend",
            "vllm",
            "--dataset-name",
            "random",
        ]);
        assert!(e.unwrap_err().contains("--backend sglang"));
    }

    #[test]
    fn goodput_and_cache_report_are_accepted_with_sglangs_rules() {
        let c = parse(&[
            "--dataset-name",
            "random",
            "--goodput",
            "ttft:500",
            "tpot:50",
        ])
        .unwrap();
        assert_eq!(c.goodput, Some(vec![("ttft", 500.0), ("tpot", 50.0)]));
        assert!(!c.cache_report);
        let e = parse(&["--dataset-name", "random", "--goodput", "itl:5"]).unwrap_err();
        assert!(e.contains("KEY in ttft, tpot, e2el"), "{e}");
        let c = parse(&["--dataset-name", "random", "--cache-report"]).unwrap();
        assert!(c.cache_report && c.goodput.is_none());
        // SGLang warns and reports zeros for a non-SGLang backend; the oai ones are refused
        // until the sglext extension is read.
        assert!(parse(&[
            "--backend",
            "vllm",
            "--dataset-name",
            "random",
            "--cache-report"
        ])
        .is_ok());
        let e = parse(&[
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "random",
            "--cache-report",
        ])
        .unwrap_err();
        assert!(
            e.starts_with("--cache-report with --backend sglang-oai"),
            "{e}"
        );
        let e = parse(&[
            "--dataset-name",
            "random",
            "--goodput",
            "ttft:1",
            "--shard",
            "0/2",
        ])
        .unwrap_err();
        assert!(
            e.starts_with("--shard: --goodput and --cache-report"),
            "{e}"
        );
    }

    #[test]
    fn sweeps_and_repeats_are_bench_serves_flags() {
        let c = parse(&[
            "--dataset-name",
            "random",
            "--sweep-max-concurrency",
            "1,4",
            "--num-runs",
            "2",
        ])
        .unwrap();
        assert_eq!(
            (c.sweep, c.num_runs),
            (Some(Sweep::MaxConcurrency(vec![1, 4])), 2)
        );
        let c = parse(&["--dataset-name", "random", "--sweep-request-rate", "5,inf"]).unwrap();
        assert_eq!(c.sweep, Some(Sweep::RequestRate(vec![5.0, f64::INFINITY])));
        assert_eq!((c.sweep.is_some(), c.num_runs), (true, 1));
        for (extra, says) in [
            (vec!["--num-runs", "0"], "--num-runs must be at least 1"),
            (
                vec!["--sweep-max-concurrency", "2", "--max-concurrency", "2"],
                "leave --max-concurrency out",
            ),
            (
                vec!["--sweep-max-concurrency", "2", "--sweep-request-rate", "1"],
                "cannot be combined",
            ),
            (vec!["--sweep-request-rate", "0"], "must be above 0"),
        ] {
            let mut a = vec!["--dataset-name", "random"];
            a.extend(extra);
            let e = parse(&a).unwrap_err();
            assert!(e.contains(says), "{a:?}: {e}");
        }
        let e = parse(&[
            "--dataset-name",
            "random",
            "--shard",
            "0/2",
            "--num-runs",
            "2",
        ])
        .unwrap_err();
        assert!(e.starts_with("--shard runs one run's share"), "{e}");
        let c = parse(&[
            "--dataset-name",
            "random",
            "--shard",
            "1/2",
            "--start-at",
            "1796050800",
        ])
        .unwrap();
        assert_eq!(c.shard().map(|s| s.to_string()), Some("1/2".into()));
        assert_eq!(c.plan.start_at_unix_ns, Some(1_796_050_800_000_000_000));
        let trace = [
            "--dataset-name",
            "mooncake",
            "--dataset-path",
            "t.jsonl",
            "--sweep-request-rate",
            "1",
        ];
        assert!(parse(&trace).unwrap_err().contains("mooncake"));
    }

    #[test]
    fn mooncake_reads_sglangs_file_for_each_workload() {
        // No --dataset-path: SGLang's /tmp/<workload>_trace.jsonl, fetched when missing.
        let c = parse(&["--dataset-name", "mooncake"]).unwrap();
        let t = c.mooncake_trace.as_ref().unwrap();
        assert_eq!(c.plan.dataset.path.as_ref(), Some(&t.path));
        assert_eq!(
            t.path,
            std::path::PathBuf::from("/tmp/conversation_trace.jsonl")
        );
        assert!(t.url.ends_with("/traces/conversation_trace.jsonl"), "{t:?}");
        for w in ["mooncake", "synthetic", "toolagent"] {
            let c = parse(&["--dataset-name", "mooncake", "--mooncake-workload", w]).unwrap();
            let t = c.mooncake_trace.unwrap();
            assert_eq!(t.path.to_str().unwrap(), format!("/tmp/{w}_trace.jsonl"));
            assert!(t.url.ends_with(&format!("{w}_trace.jsonl")), "{t:?}");
        }
        // A path given is read, and fetched to when missing (as SGLang does).
        let c = parse(&["--dataset-name", "mooncake", "--dataset-path", "t.jsonl"]).unwrap();
        assert_eq!(c.mooncake_trace.unwrap().path.to_str(), Some("t.jsonl"));
        let e = parse(&["--dataset-name", "mooncake", "--mooncake-workload", "x"]);
        assert!(e.unwrap_err().contains("toolagent"));
        // Other datasets fetch no trace.
        assert!(parse(&["--dataset-name", "random"])
            .unwrap()
            .mooncake_trace
            .is_none());
    }

    #[test]
    fn sharegpt_and_custom_follow_sglangs_rules() {
        let c = parse(&["--dataset-path", "d.json", "--sharegpt-context-len", "300"]).unwrap();
        assert_eq!(c.plan.dataset.kind, DatasetKind::ShareGpt);
        assert_eq!(
            c.plan.dataset.conversations,
            Conversations::Sglang {
                lines: false,
                context_len: Some(300)
            }
        );
        let c = parse(&["--dataset-name", "custom", "--dataset-path", "c.jsonl"]).unwrap();
        assert_eq!(
            c.plan.dataset.conversations,
            Conversations::Sglang {
                lines: true,
                context_len: None
            }
        );
        assert_eq!(c.dataset_name, "custom");
        let e = parse(&["--dataset-name", "custom"]).unwrap_err();
        assert!(e.contains("needs --dataset-path"), "{e}");
        let e = parse(&[
            "--dataset-name",
            "custom",
            "--dataset-path",
            "c.jsonl",
            "--tokenize-prompt",
        ])
        .unwrap_err();
        assert!(e.contains("--dataset-name custom"), "{e}");
        // Any offset: SGLang reads it only for agentic-trace, which is refused on its own.
        for off in ["0", "7", "-3"] {
            let c = parse(&["--dataset-name", "random", "--dataset-offset", off]).unwrap();
            assert_eq!(c.plan.dataset.kind, DatasetKind::Random);
        }
    }

    #[test]
    fn gsp_maps_to_prefix_repetition_with_sglangs_count() {
        let c = parse(&[
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            "3",
            "--gsp-prompts-per-group",
            "4",
            "--gsp-system-prompt-len",
            "50",
            "--gsp-question-len",
            "10",
            "--gsp-output-len",
            "7",
        ])
        .unwrap();
        assert_eq!(c.num_prompts, 12);
        let d = &c.plan.dataset;
        assert_eq!(d.num_prompts, 12);
        assert_eq!(
            (
                d.prefix_repetition_num_prefixes,
                d.prefix_repetition_prefix_len,
                d.prefix_repetition_suffix_len,
                d.prefix_repetition_output_len
            ),
            (3, 50, 10, 7)
        );
        // SGLang's own draw, exact lengths and equal groups by default.
        assert_eq!(
            d.prefix_groups,
            Some(PrefixGroups {
                range_ratio: 1.0,
                zipf_alpha: None,
                turns: 1
            })
        );
    }

    #[test]
    fn gsp_ratio_and_zipf_follow_sglangs_rules() {
        let gsp = |extra: &[&str]| {
            parse(&[&["--dataset-name", "generated-shared-prefix"][..], extra].concat())
                .map(|c| c.plan.dataset.prefix_groups)
        };
        assert_eq!(
            gsp(&["--gsp-range-ratio", "0.5"]),
            Ok(Some(PrefixGroups {
                range_ratio: 0.5,
                zipf_alpha: None,
                turns: 1
            }))
        );
        assert_eq!(
            gsp(&[
                "--gsp-group-distribution",
                "zipf",
                "--gsp-zipf-alpha",
                "1.2"
            ]),
            Ok(Some(PrefixGroups {
                range_ratio: 1.0,
                zipf_alpha: Some(1.2),
                turns: 1
            }))
        );
        for (extra, want) in [
            (&["--gsp-range-ratio", "1.5"][..], "at most 1"),
            (
                &["--gsp-group-distribution", "zipf"][..],
                "needs --gsp-zipf-alpha",
            ),
            (&["--gsp-zipf-alpha", "1.2"][..], "only meaningful"),
            (
                &["--gsp-group-distribution", "zipf", "--gsp-zipf-alpha", "0"][..],
                "above 0",
            ),
            (&["--gsp-group-distribution", "pareto"][..], "uniform, zipf"),
        ] {
            let e = gsp(extra).unwrap_err();
            assert!(e.contains(want), "{extra:?}: {e}");
        }
    }
}
