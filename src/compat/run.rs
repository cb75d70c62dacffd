//! The `bench serve` runner: prepares prompts, sends them on the schedule, collects timelines
//! and turns them into vLLM's metrics plus our own figures.
//!
//! Owns the one dispatch loop (generic over the schedule's offsets: `inf`, gamma arrivals and
//! ramps are all just offsets), the `--max-concurrency` slots, warm-ups, request bodies, and the
//! client-side measurements vLLM lacks (send lag, timer lag, client CPU time). It must never
//! parse server bytes (that is `net`/`proto`), compute vLLM's metrics itself (that is
//! `compat::metrics`), or format results (that is `compat::result`). Nothing here runs per
//! token: each request is one spawned task around `Client::stream`.

use crate::analysis::stats::Summary;
use crate::clock::Clock;
use crate::compat::args::{ChatEnd, LatencyFrom, ServeConfig, TtftFrom};
use crate::compat::metrics::{
    compute, BenchMetrics, LatencyOrigin, MetricsConfig, RecordOptions, RequestEnd, RequestRecord,
    TtftPredicate,
};
use crate::compat::result::{self, Detailed, RunInfo};
use crate::compat::shard::{RunInfoData, ShardBlock};
use crate::compat::steady::{self, SteadyState};
use crate::compat::timeline_html;
use crate::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target, Timeouts};
use crate::progress::{Event, Phase, Progress};
use crate::server::diagnose;
use crate::server::probe::token_id_range;
use crate::server::{collect, detect, Overrides, TokenizeDialect};
use crate::timeline::{ErrorKind, StampFallback, StampSource, Timeline};
use crate::workload::datasets::{self, PromptSource, Sample};
use crate::workload::tokenizer::LocalTokenizer;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Above this many prompt tokens in total, bodies are built just before each send instead of
/// all up front (8K x 100K token-id prompts would need ~5 GB of JSON).
const PREBUILD_MAX_TOKENS: u64 = 64 << 20;

/// A run that could not be done, as one line.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    NotReady(#[from] crate::server::NotReady),
    #[error("{0}")]
    Dataset(#[from] datasets::DatasetError),
    #[error("cannot save the result to {0}: {1}")]
    Save(String, std::io::Error),
}

/// How text prompts were measured in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCounting {
    /// Token-id prompts: exact by construction.
    Exact,
    /// The server's `/tokenize`, in the dialect the probe verified.
    Server(TokenizeDialect),
    /// No `/tokenize`: bytes / 4.
    Estimate,
    /// `--tokenizer`: a local tokenizer.json.
    Local,
    /// Neither: each request's input length is the `usage.prompt_tokens` the server returned.
    Usage,
}

impl TokenCounting {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenCounting::Exact => "exact",
            TokenCounting::Server(_) => "server_tokenize",
            TokenCounting::Estimate => "estimate_bytes_div_4",
            TokenCounting::Local => "local_tokenizer",
            TokenCounting::Usage => "usage_prompt_tokens",
        }
    }
}

/// What the prompts sent were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptKind {
    /// Token ids, within the server's vocabulary.
    TokenIds,
    /// Token ids turned into text by the server's `/detokenize` (chat endpoint).
    Detokenized,
    /// Token-id datasets sent as natural text of a measured length (ids could not be used).
    Text,
    /// The dataset's own texts (sharegpt, sonnet, custom).
    DatasetText,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::TokenIds => "token_ids",
            PromptKind::Detokenized => "detokenized_token_ids",
            PromptKind::Text => "text",
            PromptKind::DatasetText => "dataset_text",
        }
    }
}

/// Everything a finished run produced.
#[derive(Debug)]
pub struct RunOutput {
    pub info: RunInfo,
    pub metrics: BenchMetrics,
    pub detailed: Detailed,
    /// The `llmspeed` key of the result JSON.
    pub extras: Value,
    /// `None` outside a closed loop or with `--no-steady-state` (no `steady_state` key);
    /// `Some(None)` when the slots never got busy enough (`"steady_state": null`).
    pub steady_state: Option<Option<SteadyState>>,
    /// Keys vLLM adds only for features in use: `--probe-request-rate`'s `probe_*` and the
    /// server's `spec_decode_*` figures. Empty otherwise.
    pub vllm_extra: Vec<(String, Value)>,
}

impl RunOutput {
    /// The result JSON as ordered pairs (`--save-detailed` decides the per-request lists).
    pub fn pairs(&self, detailed: bool) -> Vec<(String, Value)> {
        let mut pairs = result::result_pairs(
            &self.info,
            &self.metrics,
            detailed.then_some(&self.detailed),
            self.extras.clone(),
        );
        // vllm-bench's top-level key, just before ours (`llmspeed` stays last). Only closed-loop
        // runs carry it, so every other run keeps exactly vLLM's keys.
        // vLLM's own optional keys, after its standard ones (its order: probes, then
        // speculative decoding).
        for kv in &self.vllm_extra {
            pairs.insert(pairs.len() - 1, kv.clone());
        }
        if let Some(ss) = &self.steady_state {
            let v = ss.as_ref().map_or(Value::Null, SteadyState::to_json);
            pairs.insert(pairs.len() - 1, ("steady_state".into(), v));
        }
        pairs
    }
}

pub(crate) fn client_for(cfg: &ServeConfig, clock: Clock) -> Result<Client, RunError> {
    let target = Target::parse(&cfg.base_url).map_err(|e| RunError::Setup(e.to_string()))?;
    let mut cc = ClientConfig::new(target);
    cc.headers = cfg.headers.clone();
    cc.api_key = cfg.api_key.clone();
    cc.insecure = cfg.insecure;
    cc.system_roots = cfg.system_roots;
    cc.ca_file = cfg.ca_cert.clone();
    cc.kernel_stamps = cfg.kernel_stamps;
    cc.keep_text = cfg.save_detailed;
    cc.max_idle = cfg.max_concurrency.unwrap_or(1024).max(16);
    // vLLM's only limit is aiohttp's 6-hour total: at `--request-rate inf` the last requests
    // of a big run wait minutes in the server's queue before their first byte, and that is a
    // measurement, not a failure.
    cc.timeouts = Timeouts {
        connect: Some(Duration::from_secs(60)),
        first_byte: None,
        gap: None,
        total: Some(Duration::from_secs(6 * 3600)),
    };
    Client::new(cc, clock).map_err(|e| RunError::Setup(e.to_string()))
}

/// Waits for `GET /v1/models` to answer 200 (retrying refused connections and 5xx until
/// `--ready-check-timeout-sec`) and returns the model ids.
async fn ready_models(
    client: &Client,
    timeout_s: u64,
    log: &mut (dyn Write + Send),
) -> Result<Vec<String>, RunError> {
    let mut say = |line: &str| {
        let _ = writeln!(log, "{line}");
    };
    let r = crate::server::wait_ready(client, "/v1/models", timeout_s, &mut say).await?;
    let v: Value = serde_json::from_slice(&r.body)
        .map_err(|e| RunError::Setup(format!("GET /v1/models did not return JSON: {e}")))?;
    Ok(v.get("data")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

/// The ready check, then `--model` or the first model the server lists.
pub(crate) async fn resolve_model(
    cfg: &ServeConfig,
    client: &Client,
    log: &mut (dyn Write + Send),
) -> Result<String, RunError> {
    let models = ready_models(client, cfg.ready_check_timeout_s, log).await?;
    match &cfg.model {
        Some(m) => Ok(m.clone()),
        None => models
            .first()
            .cloned()
            .ok_or_else(|| RunError::Setup("GET /v1/models listed no model; pass --model".into())),
    }
}

/// `POST /tokenize` of `text` in the verified `dialect` -> its token count (without special
/// tokens where the dialect has the switch, as before).
pub(crate) async fn server_count(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    text: &str,
) -> Result<u64, String> {
    let mut body = dialect.text_body(model, text);
    for k in ["add_special_tokens", "add_special"] {
        if let Some(v) = body.get_mut(k) {
            *v = json!(false);
        }
    }
    crate::server::probe::tokenize_count(client, dialect, &body).await
}

/// `POST /detokenize` of token ids -> text (random prompts on the chat endpoint), in the
/// verified dialect's shape.
async fn detokenize(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    ids: &[u32],
) -> Result<String, String> {
    let body = dialect
        .detokenize_body(model, ids)
        .ok_or_else(|| format!("no /detokenize in the {} dialect", dialect.as_str()))?
        .to_string();
    let path = dialect.detokenize_path();
    let r = client
        .post_json(path, body.as_bytes())
        .await
        .map_err(|e| format!("POST {path}: {e}"))?;
    if !r.is_success() {
        return Err(format!(
            "POST {path} answered HTTP {}: {}",
            r.status,
            r.error_message()
        ));
    }
    dialect.parse_detokenized(&r.body)
}

/// The `--tokenizer` to count with locally: a path (which must load), or a model id found in the
/// local Hugging Face cache. `None` when there is none to use: no flag, a build without the
/// `hf-tokenizer` feature, or a hub id not in the cache (vLLM's flag names a hub id, so that is
/// the common case, and the server counts).
pub(crate) fn local_tokenizer(spec: Option<&str>) -> Result<Option<LocalTokenizer>, RunError> {
    let Some(spec) = spec else { return Ok(None) };
    if !LocalTokenizer::AVAILABLE {
        return Ok(None);
    }
    match crate::workload::tokenizer::resolve(spec) {
        Ok(path) => LocalTokenizer::load_file(&path)
            .map(Some)
            .map_err(|e| RunError::Setup(e.to_string())),
        Err(e) if std::path::Path::new(spec).exists() => Err(RunError::Setup(e.to_string())),
        Err(_) => Ok(None),
    }
}

/// Loads the dataset. Texts are measured with `--tokenizer` or the server's verified
/// `/tokenize`. Token ids stay inside the server's vocabulary and are sent only where the probe
/// saw the server accept ids from both ends of that range; on the chat endpoint they become
/// text through the server's `/detokenize`. Where ids cannot be used, prompts are natural text
/// sized by the same counters, or by each request's `usage.prompt_tokens` when there is none.
pub(crate) async fn load_samples(
    cfg: &ServeConfig,
    client: &Client,
    model: &str,
    log: &mut (dyn Write + Send),
) -> Result<(Vec<Sample>, TokenCounting, PromptKind), RunError> {
    use crate::workload::datasets::DatasetKind;
    let collected = collect(client, Some(model))
        .await
        .map_err(RunError::Setup)?;
    let info = detect(&collected, &Overrides::default());
    let ids_dataset = matches!(
        cfg.dataset.kind,
        DatasetKind::Random | DatasetKind::PrefixRepetition | DatasetKind::TimedTrace
    );
    let local = local_tokenizer(cfg.tokenizer.as_deref())?;
    let dialect = info.tokenize.map(|t| t.dialect);
    if let (None, Some(e)) = (dialect, &info.tokenize_error) {
        let _ = writeln!(log, "note: the server's /tokenize failed: {e}");
    }
    let counter = match (&local, dialect) {
        (Some(_), _) => Some(TokenCounting::Local),
        (None, Some(d)) => Some(TokenCounting::Server(d)),
        (None, None) => None,
    };
    let mut dcfg = cfg.dataset.clone();
    if let Some(r) = datasets::IdRange::from_range(token_id_range(info.vocab.map(|f| f.value))) {
        dcfg.ids = r;
    }
    let handle = tokio::runtime::Handle::current();
    let count_with = {
        let (client, model) = (client.clone(), model.to_string());
        move |how: TokenCounting, t: &str| -> Result<u64, String> {
            match how {
                TokenCounting::Server(d) => handle.block_on(server_count(&client, d, &model, t)),
                TokenCounting::Local => match &local {
                    Some(tok) => tok.count(t).map_err(|e| e.to_string()),
                    None => Err("no local tokenizer loaded".to_string()),
                },
                _ => Ok(datasets::estimate_tokens(t)),
            }
        }
    };
    // TGI's /generate_stream takes text only, as the chat endpoint does.
    let chat =
        cfg.backend.is_chat() || cfg.backend.dialect(&cfg.endpoint) == crate::net::Dialect::Tgi;
    let ids_ok = !chat && info.token_ids == Some(true);
    // Dataset loading is synchronous; its token counter calls back into the runtime from a
    // blocking thread (only before the measured run).
    let (mut samples, count_with) = tokio::task::spawn_blocking(move || {
        let how = counter.unwrap_or(TokenCounting::Estimate);
        let mut count = |t: &str| count_with(how, t);
        datasets::load(&dcfg, &mut count).map(|s| (s, count_with))
    })
    .await
    .map_err(|e| RunError::Setup(format!("dataset loading failed: {e}")))??;
    if !ids_dataset {
        return Ok((
            samples,
            counter.unwrap_or(TokenCounting::Estimate),
            PromptKind::DatasetText,
        ));
    }
    if ids_ok {
        return Ok((samples, TokenCounting::Exact, PromptKind::TokenIds));
    }
    if chat {
        if let Some(d) = dialect.filter(|d| d.has_detokenize()) {
            match detokenize_all(client, d, model, &mut samples).await {
                Ok(()) => return Ok((samples, TokenCounting::Exact, PromptKind::Detokenized)),
                Err(e) => {
                    let _ = writeln!(
                        log,
                        "note: {e}; sending natural text of a measured length instead"
                    );
                }
            }
        }
    }
    let why = if chat {
        "the chat endpoint takes no token ids"
    } else {
        "the server did not accept token ids from the range probed"
    };
    let seed = cfg.dataset.seed;
    let counting = counter.unwrap_or(TokenCounting::Usage);
    let _ = writeln!(
        log,
        "note: {why}; prompts are natural text sized by {}",
        counting.as_str()
    );
    let samples = tokio::task::spawn_blocking(move || {
        let mut count = |t: &str| count_with(counting, t);
        let c: Option<&mut datasets::TokenCounter<'_>> = match counting {
            TokenCounting::Usage => None,
            _ => Some(&mut count),
        };
        datasets::to_text(&mut samples, seed, c).map(|()| samples)
    })
    .await
    .map_err(|e| RunError::Setup(format!("dataset loading failed: {e}")))??;
    Ok((samples, counting, PromptKind::Text))
}

/// Every token-id prompt through `/detokenize`, fitted to its length ([`fit_detokenized`]);
/// all or nothing (the first failure is the error, and the samples are left as they were).
async fn detokenize_all(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    samples: &mut [Sample],
) -> Result<(), String> {
    let mut ids = Vec::new();
    let mut texts = Vec::with_capacity(samples.len());
    for s in samples.iter() {
        ids.clear();
        texts.push(if s.write_ids(&mut ids) {
            Some(fit_detokenized(client, dialect, model, &mut ids, s.prompt_len).await?)
        } else {
            None
        });
    }
    for (s, t) in samples.iter_mut().zip(texts) {
        if let Some((text, len)) = t {
            s.prompt = PromptSource::Text(text);
            s.prompt_len = len;
        }
    }
    Ok(())
}

/// Rounds of fitting a detokenized prompt to its length, as vLLM's
/// `gen_prompt_decode_to_target_len` does.
const FIT_ROUNDS: usize = 10;

/// The text of `ids` that the server counts (without special tokens) as `target` tokens, and
/// its count. Random ids rarely come back as many tokens once decoded: on a byte-level BPE
/// vocabulary 200 random ids re-tokenize as about 240 (pieces merge across id boundaries, bytes
/// that are not valid UTF-8 alone are replaced). Ids are dropped from the end, or the sample's
/// own ids appended again, until the count is the target; after [`FIT_ROUNDS`] the closest text
/// is kept with its true count (as vLLM keeps its mismatch).
async fn fit_detokenized(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    ids: &mut Vec<u32>,
    target: u64,
) -> Result<(String, u64), String> {
    let pool = ids.clone();
    let mut best: Option<(String, u64)> = None;
    for _ in 0..FIT_ROUNDS {
        let text = detokenize(client, dialect, model, ids).await?;
        let n = server_count(client, dialect, model, &text).await?;
        if best
            .as_ref()
            .is_none_or(|(_, b)| n.abs_diff(target) < b.abs_diff(target))
        {
            best = Some((text, n));
        }
        if n == target || pool.is_empty() {
            break;
        }
        if n > target {
            let keep = ids.len().saturating_sub((n - target) as usize).max(1);
            ids.truncate(keep);
        } else {
            for _ in 0..target - n {
                ids.push(pool[ids.len() % pool.len()]);
            }
        }
    }
    best.ok_or_else(|| "no /detokenize round ran".to_string())
}

/// Decimal digits of 0..100, two bytes each, so a number is written two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `n` in decimal (a 4,000-token prompt is 4,000 of these per request body).
fn push_u32(out: &mut Vec<u8>, mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// Builds request bodies as vLLM's backends send them (OpenAI and TGI), and the native ones of
/// SGLang and llama.cpp.
pub struct BodyBuilder {
    pub model: String,
    /// The API spoken (OpenAI: `chat` picks the endpoint).
    pub dialect: crate::net::Dialect,
    pub chat: bool,
    pub ignore_eos: bool,
    pub continuous_usage: bool,
    /// Sampling fields and `--extra-body` (merged last, so they win).
    pub extra: Map<String, Value>,
}

impl BodyBuilder {
    /// The JSON body for one sample. Token ids are written straight into the buffer.
    pub fn body(&self, s: &Sample, ids: &mut Vec<u32>) -> Result<Vec<u8>, String> {
        self.body_as(s, ids, &self.model)
    }

    /// [`BodyBuilder::body`] naming `model` (a LoRA adapter) instead of the builder's.
    pub fn body_as(&self, s: &Sample, ids: &mut Vec<u32>, model: &str) -> Result<Vec<u8>, String> {
        if self.dialect != crate::net::Dialect::OpenAi {
            return self.native_body(s, ids);
        }
        let mut m = Map::new();
        m.insert("model".into(), json!(model));
        let text = match &s.prompt {
            PromptSource::Text(t) => Some(t.as_str()),
            PromptSource::Synthetic { .. } | PromptSource::Blocks { .. } => None,
        };
        // The fields vLLM's `async_request_openai_completions` / `..._chat_completions` send,
        // no more: a server must see the same request from either tool.
        if self.chat {
            let t = text.ok_or("token-id prompts need /v1/completions")?;
            m.insert(
                "messages".into(),
                json!([{"role": "user", "content": [{"type": "text", "text": t}]}]),
            );
            m.insert("max_completion_tokens".into(), json!(s.output_len));
        } else {
            if let Some(t) = text {
                m.insert("prompt".into(), json!(t));
            }
            m.insert("repetition_penalty".into(), json!(1.0));
            m.insert("max_tokens".into(), json!(s.output_len));
            // `--logprobs` is refused, so this is always vLLM's default: an explicit null.
            m.insert("logprobs".into(), Value::Null);
        }
        m.insert("stream".into(), json!(true));
        let mut so = Map::new();
        so.insert("include_usage".into(), json!(true));
        // Not sent by vLLM; only `--continuous-usage` (exact per-event token counts for our
        // `token_count_source`) adds it, since some servers reject the field.
        if self.continuous_usage {
            so.insert("continuous_usage_stats".into(), json!(true));
        }
        m.insert("stream_options".into(), Value::Object(so));
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        let rest = serde_json::to_vec(&Value::Object(m)).map_err(|e| e.to_string())?;
        // `--extra-body` wins over everything, the prompt included: never write a second key.
        if self.chat || text.is_some() || self.extra.contains_key("prompt") {
            return Ok(rest);
        }
        ids.clear();
        s.write_ids(ids);
        let mut out = Vec::with_capacity(rest.len() + 16 + ids.len() * 6);
        out.extend_from_slice(b"{\"prompt\":[");
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_u32(&mut out, id);
        }
        out.extend_from_slice(b"],");
        out.extend_from_slice(&rest[1..]);
        Ok(out)
    }
}

impl BodyBuilder {
    /// The body of a native endpoint. TGI's is vLLM's `async_request_tgi` payload plus
    /// `details` (the last event's finish reason and token count; it does not change what is
    /// generated); like vLLM's, it leaves the sampling flags and `--extra-body` out. SGLang's
    /// puts the sampling fields in `sampling_params` and `--extra-body` at the top, as SGLang's
    /// own `bench_serving` does; llama.cpp's takes them all at the top.
    fn native_body(&self, s: &Sample, ids: &mut Vec<u32>) -> Result<Vec<u8>, String> {
        use crate::net::Dialect;
        let prompt = match &s.prompt {
            PromptSource::Text(t) => json!(t),
            PromptSource::Synthetic { .. } | PromptSource::Blocks { .. } => {
                ids.clear();
                s.write_ids(ids);
                json!(ids)
            }
        };
        let body = match self.dialect {
            Dialect::Tgi => {
                let PromptSource::Text(t) = &s.prompt else {
                    return Err("TGI's /generate_stream takes text prompts only".into());
                };
                json!({"inputs": t, "parameters": {
                    "max_new_tokens": s.output_len,
                    "do_sample": true,
                    "temperature": 0.01,
                    "top_p": 0.99,
                    "truncate": s.prompt_len,
                    "ignore_eos_token": self.ignore_eos,
                    "details": true,
                }})
            }
            Dialect::Sglang => {
                let key = if prompt.is_string() {
                    "text"
                } else {
                    "input_ids"
                };
                let mut sp = json!({"max_new_tokens": s.output_len, "ignore_eos": self.ignore_eos});
                let mut m = Map::new();
                m.insert(key.into(), prompt);
                for (k, v) in &self.extra {
                    if SAMPLING_KEYS.contains(&k.as_str()) {
                        sp[k.as_str()] = v.clone();
                    } else {
                        m.insert(k.clone(), v.clone());
                    }
                }
                m.insert("sampling_params".into(), sp);
                m.insert("stream".into(), json!(true));
                Value::Object(m)
            }
            Dialect::LlamaCpp | Dialect::OpenAi => {
                let mut m = Map::new();
                m.insert("prompt".into(), prompt);
                m.insert("n_predict".into(), json!(s.output_len));
                if self.ignore_eos {
                    m.insert("ignore_eos".into(), json!(true));
                }
                m.insert("stream".into(), json!(true));
                m.extend(self.extra.clone());
                Value::Object(m)
            }
        };
        serde_json::to_vec(&body).map_err(|e| e.to_string())
    }
}

/// The sampling flags' fields, which SGLang reads inside `sampling_params`.
const SAMPLING_KEYS: [&str; 7] = [
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
];

/// Why a request that ended cleanly still failed (vLLM: "Never received a valid chunk to
/// calculate TTFT").
const NO_TOKEN_CHUNK: &str = "the stream ended without a chunk carrying choices";

/// Longest server message kept per failure kind, in characters.
const MESSAGE_MAX_CHARS: usize = 500;

/// `{"status": 503 | null, "message": "..."}`: the first message of one failure kind, cut to
/// [`MESSAGE_MAX_CHARS`] characters (never inside a character).
/// A server that refuses the run's first request with `400` and an empty body says nothing
/// about why: the checks of `server::diagnose` name the cause and the flag to try.
async fn first_request_hint(
    client: &Client,
    chosen: &[usize],
    done: &[Option<Done>],
    rebuild: impl FnOnce(usize) -> Result<StreamRequest, RunError>,
) -> Result<Option<String>, RunError> {
    let Some(&first) = chosen.first() else {
        return Ok(None);
    };
    match done.get(first).and_then(Option::as_ref) {
        Some(d) if diagnose::is_empty_400(&d.timeline) => {
            let req = rebuild(first)?;
            let cause = diagnose::empty_400(client, &req).await;
            Ok(Some(diagnose::explain(
                &cause,
                diagnose::Command::BenchServe,
            )))
        }
        _ => Ok(None),
    }
}

fn failure_message(status: Option<u16>, message: &str) -> Value {
    let cut = match message.char_indices().nth(MESSAGE_MAX_CHARS) {
        Some((i, _)) => &message[..i],
        None => message,
    };
    json!({"status": status, "message": cut})
}

fn lag_summary(ns: &[u64]) -> Value {
    let ms: Vec<f64> = ns.iter().map(|&n| n as f64 / 1e6).collect();
    let s = Summary::or_zero(&ms, &[50.0, 99.0]);
    let max = ms.iter().copied().fold(0.0, f64::max);
    json!({"mean": s.mean, "p50": s.percentiles[0].1, "p99": s.percentiles[1].1, "max": max})
}

/// Which clock stamped the run's reads, and how late the client woke up to them.
#[derive(Default)]
struct StampSummary {
    source: Option<StampSource>,
    wakeup_us: Vec<f64>,
    /// Token gaps, and those whose two tokens came in one read (see
    /// [`Timeline::token_gaps_in_one_read`]).
    gaps: u64,
    gaps_in_one_read: u64,
}

impl StampSummary {
    fn add(&mut self, tl: &Timeline) {
        let s = tl.stamp_source();
        self.source = Some(self.source.map_or(s, |a| a.combine(s)));
        self.wakeup_us.extend(tl.token_wakeups_us(0..u64::MAX));
        let (same, gaps) = tl.token_gaps_in_one_read(0..u64::MAX);
        self.gaps += gaps;
        self.gaps_in_one_read += same;
    }

    /// `stamp_source` (`kernel`, `client_clock`, `mixed`), `stamp_fallback` (why any read used
    /// the client's clock, or null) and `client_wakeup_us` {mean, p50, p99, max} over token
    /// events with a kernel stamp (zeros without any).
    fn write(&self, extras: &mut Value) {
        let source = self
            .source
            .unwrap_or(StampSource::ClientClock(StampFallback::NoStamp));
        extras["stamp_source"] = json!(source.as_str());
        extras["stamp_fallback"] = json!(source.fallback().map(StampFallback::as_str));
        let s = Summary::or_zero(&self.wakeup_us, &[50.0, 99.0]);
        let max = self.wakeup_us.iter().copied().fold(0.0, f64::max);
        extras["client_wakeup_us"] = json!({"mean": s.mean, "p50": s.percentiles[0].1, "p99": s.percentiles[1].1, "max": max});
        extras["token_gaps_in_one_read"] = json!({
            "count": self.gaps_in_one_read,
            "of": self.gaps,
            "percent": if self.gaps == 0 { 0.0 } else { 100.0 * self.gaps_in_one_read as f64 / self.gaps as f64 },
        });
    }
}

/// The console line for `token_gaps_in_one_read`, when any gap came in one read.
fn one_read_line(x: &Value) -> Option<String> {
    let g = &x["token_gaps_in_one_read"];
    let count = g["count"].as_u64().filter(|&n| n > 0)?;
    Some(format!(
        "llmspeed: {count} of {} token gaps ({:.2}%) came in one read with the token before: they are 0 in ITL (the client fell behind, or the server wrote them together)",
        g["of"].as_u64().unwrap_or(0),
        g["percent"].as_f64().unwrap_or(0.0)
    ))
}

/// The console line for the `stamp_source` and `client_wakeup_us` keys of `extras`.
fn stamps_line(x: &Value) -> String {
    let source = x["stamp_source"].as_str().unwrap_or("client_clock");
    let why = x["stamp_fallback"]
        .as_str()
        .map_or(String::new(), |f| format!(" ({f})"));
    if source == "client_clock" {
        return format!(
            "llmspeed: stamps client_clock{why}: each read stamped when the client woke up"
        );
    }
    let w = &x["client_wakeup_us"];
    let f = |k: &str| w[k].as_f64().unwrap_or(0.0);
    format!(
        "llmspeed: stamps {source}{why}: the client woke up {:.0} us p50, {:.0} us p99, {:.0} us max after the data arrived (not in the timings)",
        f("p50"),
        f("p99"),
        f("max")
    )
}

/// The timer wheel's resolution is 1 ms: sleeping to the deadline would start requests up to
/// a millisecond late, and that lateness lands in TTFT (latency runs from the schedule). So we
/// sleep to just before the deadline and yield (letting other tasks run) for the rest.
const SPIN_NS: u64 = 1_500_000;

pub(crate) async fn wait_until(
    clock: &Clock,
    base: tokio::time::Instant,
    off_ns: u64,
    scheduled_raw: u64,
) {
    if off_ns > SPIN_NS {
        tokio::time::sleep_until(base + Duration::from_nanos(off_ns - SPIN_NS)).await;
    }
    while clock.raw() < scheduled_raw {
        tokio::task::yield_now().await;
    }
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// Sleeps until the wall clock reads `at_unix_ns` (`--start-at`); returns at once when that is
/// past (a shard that starts late is reported by `llmspeed merge`, not refused here).
async fn wait_for_wall_clock(at_unix_ns: u64, log: &mut (dyn Write + Send)) {
    let now = unix_ns(SystemTime::now());
    if now >= at_unix_ns {
        let _ = writeln!(
            log,
            "--start-at passed {:.3} s ago: starting now",
            (now - at_unix_ns) as f64 / 1e9
        );
        return;
    }
    let _ = writeln!(
        log,
        "waiting {:.3} s for --start-at",
        (at_unix_ns - now) as f64 / 1e9
    );
    // Coarse sleep, then re-read the wall clock: the timer runs on the monotonic clock, which
    // need not advance with the wall clock (NTP slews it).
    tokio::time::sleep(
        Duration::from_nanos(at_unix_ns - now).saturating_sub(Duration::from_millis(2)),
    )
    .await;
    while unix_ns(SystemTime::now()) < at_unix_ns {
        tokio::task::yield_now().await;
    }
}

/// How a stop left a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopFate {
    /// It ran to its own end (success or the server's failure).
    Ran,
    /// Cancelled before its first byte was written: never a request.
    Unsent,
    /// Sent, then cut short by the stop: not the server's failure.
    Cut,
}

/// Only our own cancel (the stop) ends a request as `cancelled` in `bench serve`.
fn stop_fate(t: &Timeline) -> StopFate {
    match &t.outcome {
        Err(e) if e.kind == ErrorKind::Cancelled => match t.send_start {
            None => StopFate::Unsent,
            Some(_) => StopFate::Cut,
        },
        _ => StopFate::Ran,
    }
}

/// What one request task hands back.
struct Done {
    index: usize,
    timeline: Timeline,
    queue_ns: u64,
    /// Request start (scheduled, or slot granted) -> first byte written: timer lag, dispatch
    /// and connecting.
    send_lag_ns: u64,
}

/// Runs the whole benchmark: ready check, model, dataset, warm-ups, the measured run. Progress
/// lines go to `log`. Cancelling `cancel` (Ctrl-C) stops dispatching, ends the requests in
/// flight as `cancelled`, and still reports what was measured.
pub async fn run(
    cfg: &ServeConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<RunOutput, RunError> {
    run_shown(cfg, clock, cancel, log, &mut |_: &str| {}).await
}

/// [`run`], telling `progress` how many requests have completed (vLLM's progress bar).
pub async fn run_shown(
    cfg: &ServeConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<RunOutput, RunError> {
    let client = client_for(cfg, clock.clone())?;
    let model = resolve_model(cfg, &client, log).await?;
    let request_model = cfg
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.clone());
    let (samples, counting, prompt_kind) = load_samples(cfg, &client, &request_model, log).await?;
    if counting == TokenCounting::Estimate {
        let _ = writeln!(
            log,
            "note: the server has no /tokenize; prompt lengths are estimated as bytes/4"
        );
    }
    let dialect = cfg.backend.dialect(&cfg.endpoint);
    let builder = Arc::new(BodyBuilder {
        model: request_model.clone(),
        dialect,
        chat: cfg.backend.is_chat(),
        ignore_eos: cfg.ignore_eos,
        continuous_usage: cfg.continuous_usage,
        extra: cfg.extra.clone(),
    });
    let path = cfg.endpoint.clone();
    // `--lora-modules`: benchmark request i names adapter lora[i]; warm-ups and probes keep
    // the model, as vLLM's.
    let lora = crate::compat::lora::assign(
        cfg.lora_modules.len(),
        cfg.lora_assignment,
        samples.len(),
        cfg.dataset.seed,
    );
    // `index` is the sample's position, which names the request as vLLM does; warm-ups are
    // not benchmark requests and carry no id.
    let make =
        |s: &Sample, index: Option<usize>, ids: &mut Vec<u32>| -> Result<StreamRequest, RunError> {
            Ok(StreamRequest {
                path: path.clone(),
                body: Bytes::from(
                    match index.and_then(|i| lora.get(i)) {
                        Some(&k) => builder.body_as(s, ids, &cfg.lora_modules[k]),
                        None => builder.body(s, ids),
                    }
                    .map_err(RunError::Setup)?,
                ),
                dialect,
                expected_events: s.output_len as usize + 8,
                keep_text: Some(cfg.save_detailed),
                request_id: index.map(|i| cfg.request_ids.request(i)),
            })
        };
    let mut ids = Vec::new();

    if cfg.num_warmups > 0 {
        let _ = writeln!(log, "warming up with {} request(s)", cfg.num_warmups);
        let slots = Arc::new(Semaphore::new(
            cfg.max_concurrency.unwrap_or(cfg.num_warmups),
        ));
        let mut set = JoinSet::new();
        for i in 0..cfg.num_warmups {
            let req = make(&samples[i % samples.len()], None, &mut ids)?;
            let (c, slots, cancel) = (client.clone(), slots.clone(), cancel.clone());
            set.spawn(async move {
                let _permit = slots.acquire_owned().await;
                let start = c.clock().raw();
                c.stream(&req, start, &mut NoopObserver, &cancel).await
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(t) = r {
                if let Err(e) = &t.outcome {
                    let _ = writeln!(log, "warm-up request failed: {e}");
                }
            }
        }
    }

    let offsets = if cfg.self_timed {
        self_timed_offsets(cfg, samples.len())?
    } else {
        cfg.schedule
            .offsets_ns(samples.len())
            .map_err(|e| RunError::Setup(e.to_string()))?
    };
    // `--shard K/N`: the whole dataset and schedule were built above, so the requests kept
    // here carry their single-run index (request id) and send offset.
    let chosen: Vec<usize> = match cfg.shard {
        Some(sh) => sh.indices(samples.len()),
        None => (0..samples.len()).collect(),
    };
    let total_tokens: u64 = chosen.iter().map(|&i| samples[i].prompt_len).sum();
    let mut prebuilt = Vec::new();
    if total_tokens <= PREBUILD_MAX_TOKENS {
        for &i in &chosen {
            prebuilt.push(make(&samples[i], Some(i), &mut ids)?);
        }
    }
    if let Some(sh) = cfg.shard {
        let _ = writeln!(
            log,
            "shard {sh}: {} of the run's {} requests",
            chosen.len(),
            samples.len()
        );
    }
    let preconnected = if cfg.preconnect {
        let n = chosen
            .len()
            .min(cfg.max_concurrency.unwrap_or(usize::MAX))
            .min(client.config().max_idle);
        let idle = client
            .preconnect(n)
            .await
            .map_err(|e| RunError::Setup(format!("--preconnect: {e}")))?;
        let _ = writeln!(
            log,
            "--preconnect: {idle} connections open before the start"
        );
        Some(idle)
    } else {
        None
    };
    let _ = writeln!(
        log,
        "sending {} requests to {}{} (model {request_model}, rate {}, max concurrency {})",
        chosen.len(),
        cfg.base_url,
        cfg.endpoint,
        result::py_float(cfg.request_rate),
        cfg.max_concurrency
            .map(|n| n.to_string())
            .unwrap_or_else(|| "none".into())
    );
    progress.event(&Event::Start {
        total: chosen.len() as u64,
        done: 0,
        estimate_s: 0.0,
    });
    progress.event(&Event::Phase {
        step: "bench serve",
        phase: Phase::Requests,
    });
    let opts = RecordOptions {
        base_raw: 0,
        origin: match cfg.latency_from {
            LatencyFrom::Scheduled => LatencyOrigin::Scheduled,
            LatencyFrom::Sent => LatencyOrigin::Sent,
        },
        predicate: match cfg.ttft_from {
            TtftFrom::Choice => TtftPredicate::FirstChoice,
            TtftFrom::Content => TtftPredicate::FirstContent,
        },
        end: match cfg.chat_end {
            ChatEnd::LastChoice => RequestEnd::LastChoice,
            ChatEnd::LastMessage => RequestEnd::LastMessage,
        },
    };
    // As vLLM: the server's speculative-decoding counters just before the first request...
    let spec_before = spec_decode_counters(&client).await;
    // ...and one-token probes beside the run, outside the concurrency cap.
    let probe_stop = Cancel::new();
    let probes = if cfg.probe_request_rate > 0.0 {
        let _ = writeln!(log, "probe request rate: {} req/s", cfg.probe_request_rate);
        let hi = Sample {
            prompt: PromptSource::Text("Hi".into()),
            prompt_len: 1,
            output_len: 1,
        };
        let req = StreamRequest {
            path: path.clone(),
            body: Bytes::from(builder.body(&hi, &mut ids).map_err(RunError::Setup)?),
            dialect,
            expected_events: 9,
            keep_text: Some(false),
            request_id: None,
        };
        Some(tokio::spawn(crate::compat::probe::run_probes(
            client.clone(),
            req,
            cfg.probe_request_rate,
            RecordOptions {
                base_raw: clock.raw(),
                ..opts
            },
            probe_stop.clone(),
            cancel.clone(),
        )))
    } else {
        None
    };
    let slots = cfg.max_concurrency.map(|n| Arc::new(Semaphore::new(n)));
    let mut timer_lag_ns = Vec::with_capacity(samples.len());
    let mut set: JoinSet<Done> = JoinSet::new();
    if let Some(at) = cfg.start_at_unix_ns {
        wait_for_wall_clock(at, log).await;
    }
    let cpu0 = crate::sys::client_cpu().unwrap_or_default();
    let wall0 = std::time::Instant::now();
    // Everything is measured from here: vLLM's "just before the first dispatch".
    let base_raw = clock.raw();
    // The run's start on the wall clock (UTC), for merging shards run on other machines.
    let start_unix_ns = unix_ns(SystemTime::now());
    let base_instant = tokio::time::Instant::now();
    let mut prebuilt = prebuilt.into_iter();
    for (sent, &i) in chosen.iter().enumerate() {
        let s = &samples[i];
        let req = match prebuilt.next() {
            Some(r) => r,
            None => make(s, Some(i), &mut ids)?,
        };
        let off = offsets[i];
        let scheduled = clock.add_ns(base_raw, off);
        if off > 0 {
            // A stop must not wait for the next send time (minutes apart at a low rate).
            tokio::select! {
                _ = wait_until(&clock, base_instant, off, scheduled) => {}
                _ = cancel.cancelled() => {}
            }
        }
        if cancel.is_cancelled() {
            let _ = writeln!(
                log,
                "interrupted: {sent} of {} requests were dispatched",
                chosen.len()
            );
            break;
        }
        timer_lag_ns.push(clock.delta_ns(scheduled, clock.raw()));
        let (c, slots, cancel) = (client.clone(), slots.clone(), cancel.clone());
        set.spawn(async move {
            let _permit = match &slots {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            let clock = c.clock().clone();
            // With a concurrency limit, the request's own clock starts when it gets a slot;
            // the wait is queue time, reported separately (vLLM's split).
            let (intended, queue_ns) = if slots.is_some() {
                let now = clock.raw();
                (now.max(scheduled), clock.delta_ns(scheduled, now))
            } else {
                (scheduled, 0)
            };
            let timeline = c.stream(&req, intended, &mut NoopObserver, &cancel).await;
            // Lag behind the request's own start (the slot wait is queue time, not lag).
            let send_lag_ns = timeline
                .send_start
                .map(|t| clock.delta_ns(intended, t))
                .unwrap_or(0);
            Done {
                index: i,
                timeline,
                queue_ns,
                send_lag_ns,
            }
        });
    }
    let dispatched = set.len();
    let mut done: Vec<Option<Done>> = (0..samples.len()).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(d) => {
                let i = d.index;
                done[i] = Some(d);
                progress.event(&Event::StepDone { estimate_s: 0.0 });
            }
            Err(e) => return Err(RunError::Setup(format!("a request task failed: {e}"))),
        }
    }
    // vLLM's order: the probe in flight finishes, then the duration ends.
    probe_stop.cancel();
    let probe_outcomes = match probes {
        Some(h) => h
            .await
            .map_err(|e| RunError::Setup(format!("the probe task failed: {e}")))?,
        None => Vec::new(),
    };
    let end_raw = clock.raw();
    let wall_s = wall0.elapsed().as_secs_f64();
    let cpu1 = crate::sys::client_cpu().unwrap_or_default();
    let mut vllm_extra = crate::compat::probe::stats(&probe_outcomes).unwrap_or_default();
    if let (Some(b), Some(a)) = (spec_before, spec_decode_counters(&client).await) {
        vllm_extra.extend(crate::compat::spec_decode::keys(&b, &a).unwrap_or_default());
    }

    let empty_400 = first_request_hint(&client, &chosen, &done, |i| {
        make(&samples[i], Some(i), &mut Vec::new())
    })
    .await?;
    if let Some(h) = &empty_400 {
        let _ = writeln!(log, "the first request was refused: {h}");
    }

    let opts = RecordOptions { base_raw, ..opts };
    let mut records = Vec::with_capacity(samples.len());
    let mut detailed = Detailed::default();
    let mut send_lag_ns = Vec::with_capacity(samples.len());
    let mut sources: std::collections::BTreeMap<&'static str, usize> = Default::default();
    let mut first_failures = std::collections::BTreeMap::new();
    let (mut input_from_server, mut input_len_differs) = (0usize, 0usize);
    let mut dataset_input_lens = Vec::new();
    let mut indices = Vec::new();
    let mut stamps = StampSummary::default();
    // Requests never sent and requests the stop cut short are not the server's results: they
    // are counted apart (`llmspeed.interrupted`), never as completed or failed.
    let (mut unsent, mut cut) = (chosen.len() - dispatched, 0usize);
    for (s, d) in samples.iter().zip(done) {
        let Some(d) = d else { continue };
        match stop_fate(&d.timeline) {
            StopFate::Ran => {}
            StopFate::Unsent => {
                unsent += 1;
                continue;
            }
            StopFate::Cut => {
                cut += 1;
                continue;
            }
        }
        indices.push(d.index);
        stamps.add(&d.timeline);
        // As vLLM does now: the server's own count of what it received (`usage.prompt_tokens`)
        // when it reports one, else the dataset's length.
        let server_len = d.timeline.usage.map(|u| u.prompt_tokens).filter(|&n| n > 0);
        let input_len = server_len.unwrap_or(s.prompt_len);
        if server_len.is_some() {
            input_from_server += 1;
        }
        if server_len.is_some_and(|n| n != s.prompt_len) {
            input_len_differs += 1;
        }
        dataset_input_lens.push(s.prompt_len);
        let rec = RequestRecord::from_timeline(&d.timeline, &clock, &opts, input_len, d.queue_ns);
        send_lag_ns.push(d.send_lag_ns);
        *sources
            .entry(d.timeline.token_count_source.as_str())
            .or_default() += 1;
        detailed.input_lens.push(input_len);
        detailed.output_lens.push(if rec.is_success() {
            rec.output_tokens
        } else {
            0
        });
        detailed.ttfts.push(rec.ttft_ns().unwrap_or(0) as f64 / 1e9);
        detailed
            .itls
            .push(rec.itls_ns().map(|g| g as f64 / 1e9).collect());
        detailed.start_times.push(rec.start_ns as f64 / 1e9);
        detailed
            .generated_texts
            .push(d.timeline.content_text.clone().unwrap_or_default());
        detailed.errors.push(match rec.failure() {
            None => String::new(),
            Some(f) => {
                let (status, message) = match &d.timeline.outcome {
                    Err(e) => (e.status, e.message.as_str()),
                    Ok(()) => (d.timeline.status, NO_TOKEN_CHUNK),
                };
                first_failures.entry(f).or_insert_with(|| match &empty_400 {
                    Some(h) if status == Some(400) => {
                        failure_message(status, &format!("{message}: {h}"))
                    }
                    _ => failure_message(status, message),
                });
                match &d.timeline.outcome {
                    Err(e) => e.to_string(),
                    Ok(()) => format!("{f}: {NO_TOKEN_CHUNK}"),
                }
            }
        });
        records.push(rec);
    }
    let metrics = compute(
        &records,
        clock.delta_ns(base_raw, end_raw),
        &MetricsConfig {
            percentiles: cfg.percentiles.clone(),
            goodput: cfg.goodput,
        },
    );
    let steady_state = steady_state_of(cfg, &records, metrics.duration_s);
    let failures: Map<String, Value> = metrics
        .failures
        .iter()
        .map(|(k, n)| (k.as_str().to_string(), json!(n)))
        .collect();
    let cpu = cpu1.since(cpu0);
    let (cpu_u, cpu_s) = (cpu.user_ns as f64 / 1e9, cpu.system_ns as f64 / 1e9);
    let mut extras = json!({
        "version": crate::VERSION,
        "latency_from": match cfg.latency_from { LatencyFrom::Scheduled => "scheduled", LatencyFrom::Sent => "sent" },
        "ttft_from": match cfg.ttft_from { TtftFrom::Choice => "first_choice", TtftFrom::Content => "first_content" },
        "chat_end": match cfg.chat_end { ChatEnd::LastChoice => "last_choice", ChatEnd::LastMessage => "last_message" },
        "prompt_token_counting": counting.as_str(),
        "prompt_source": prompt_kind.as_str(),
        "input_lens_from_server_usage": input_from_server,
        "input_lens_differing_from_dataset": input_len_differs,
        "token_count_source": sources,
        "num_warmups": cfg.num_warmups,
        "failures_by_kind": failures,
        "first_failure_by_kind": first_failures
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.clone()))
            .collect::<Map<String, Value>>(),
        "max_concurrent_requests_vllm_bucketed": metrics.max_concurrent_requests_bucketed,
        "send_lag_ms": lag_summary(&send_lag_ns),
        "timer_lag_ms": lag_summary(&timer_lag_ns),
        "client_cpu_user_s": cpu_u,
        "client_cpu_sys_s": cpu_s,
        "client_cpu_percent_of_one_core": if wall_s > 0.0 { 100.0 * (cpu_u + cpu_s) / wall_s } else { 0.0 },
    });
    stamps.write(&mut extras);
    extras["preconnected"] = json!(preconnected);
    if cfg.save_detailed {
        // Beside vLLM's `input_lens` (the server's counts): what the dataset asked for.
        extras["dataset_input_lens"] = json!(dataset_input_lens);
    }
    let mut num_prompts = cfg.dataset.num_prompts;
    if cancel.is_cancelled() {
        let _ = writeln!(
            log,
            "interrupted: {cut} requests cut short and {unsent} never sent are left out of the figures"
        );
        extras["interrupted"] = json!({
            "signal": cancel.reason(),
            "requests_planned": chosen.len(),
            "requests_unsent": unsent,
            "requests_cut": cut,
        });
        num_prompts = num_prompts.saturating_sub(unsent + cut);
    }
    let duration_ns = clock.delta_ns(base_raw, end_raw);
    extras["start_unix_ns"] = json!(start_unix_ns);
    extras["end_unix_ns"] = json!(start_unix_ns + duration_ns);
    let info = RunInfo {
        date: result::format_date(SystemTime::now()),
        backend: cfg.backend.as_str().to_string(),
        label: cfg.label.clone(),
        model_id: model.clone(),
        tokenizer_id: cfg.tokenizer.clone().unwrap_or(model),
        num_prompts,
        metadata: cfg.metadata.clone(),
        request_rate: cfg.request_rate,
        burstiness: cfg.schedule.burstiness,
        max_concurrency: cfg.max_concurrency,
        ramp: cfg.schedule.ramp,
        selected: cfg.metrics.clone(),
        goodput: cfg.goodput.is_some(),
    };
    if let Some(sh) = cfg.shard {
        let block = ShardBlock {
            shard: sh,
            seed: cfg.dataset.seed,
            start_at_unix_ns: cfg.start_at_unix_ns,
            start_unix_ns,
            end_unix_ns: start_unix_ns + duration_ns,
            info: RunInfoData::new(&info, &cfg.percentiles, cfg.goodput),
            requests: indices.into_iter().zip(records).collect(),
        };
        extras["shard"] = block.to_json();
    }
    Ok(RunOutput {
        info,
        metrics,
        detailed,
        extras,
        steady_state,
        vllm_extra,
    })
}

/// The server's `vllm:spec_decode_*` counters now; `None` without them (or without a
/// `/metrics` answering 200 within 10 s), as vLLM's `fetch_spec_decode_metrics`.
pub(crate) async fn spec_decode_counters(
    client: &Client,
) -> Option<crate::compat::spec_decode::Counters> {
    let r = tokio::time::timeout(Duration::from_secs(10), client.get("/metrics"))
        .await
        .ok()?
        .ok()?;
    if r.status != 200 {
        return None;
    }
    crate::compat::spec_decode::parse(&String::from_utf8_lossy(&r.body))
}

/// `--self-timed`: the trace's own send offsets (the same rows the dataset was built from).
pub(crate) fn self_timed_offsets(cfg: &ServeConfig, n: usize) -> Result<Vec<u64>, RunError> {
    let path = cfg
        .dataset
        .path
        .as_deref()
        .ok_or(datasets::DatasetError::NoPath("timed_trace"))?;
    let rows = crate::workload::trace::read(path, &cfg.dataset.trace, n)?;
    if rows.len() != n {
        return Err(RunError::Setup(format!(
            "the trace changed while it was read: {} rows, then {n}",
            rows.len()
        )));
    }
    Ok(crate::workload::trace::offsets_ns(&rows))
}

/// The steady-state window and its figures where vllm-bench computes them: a closed loop
/// (`--max-concurrency` with `--request-rate inf`, no ramp) without `--no-steady-state`.
fn steady_state_of(
    cfg: &ServeConfig,
    records: &[RequestRecord],
    duration_s: f64,
) -> Option<Option<SteadyState>> {
    let ss = cfg.steady_state?;
    let target = cfg.max_concurrency?;
    if cfg.request_rate.is_finite() || cfg.schedule.ramp.is_some() {
        return None;
    }
    let min_window = ss
        .min_window_s
        .unwrap_or_else(|| steady::default_min_window_s(duration_s));
    Some(
        steady::detect_window(records, target, ss.threshold, min_window, duration_s)
            .map(|w| steady::compute(records, &w, &cfg.percentiles)),
    )
}

/// The steady-state block printed after vLLM's summary.
fn write_steady_state(w: &mut impl Write, ss: Option<&SteadyState>) -> std::io::Result<()> {
    let Some(ss) = ss else {
        return writeln!(
            w,
            "Steady state: no window (the busy slots never reached the threshold)"
        );
    };
    let win = &ss.window;
    writeln!(w, "{:-^50}", "Steady State")?;
    writeln!(
        w,
        "{:<40} {:.2}-{:.2} ({:.2})",
        "Window (s after start, duration):", win.start_s, win.end_s, win.duration_s
    )?;
    writeln!(
        w,
        "{:<40} {} of {} ({:.0}%)",
        "Busy slots needed:",
        win.threshold_abs,
        win.target_concurrency,
        100.0 * win.threshold
    )?;
    for (label, v) in [
        ("Request throughput (req/s):", ss.request_throughput),
        ("Output token throughput (tok/s):", ss.output_throughput),
        ("Total Token throughput (tok/s):", ss.total_token_throughput),
        ("Mean TTFT (ms):", ss.ttft_ms.mean),
        ("Mean TPOT (ms):", ss.tpot_ms.mean),
        ("Mean ITL (ms):", ss.itl_ms.mean),
    ] {
        writeln!(w, "{label:<40} {v:<10.2}")?;
    }
    if let Some(warn) = &win.warning {
        writeln!(w, "warning: {warn}")?;
    }
    writeln!(w, "{}", "=".repeat(50))
}

/// Where `--save-result` writes: `--result-dir` joined with `--result-filename` or vLLM's name.
pub fn result_path(cfg: &ServeConfig, info: &RunInfo) -> PathBuf {
    let name = cfg
        .result_filename
        .clone()
        .unwrap_or_else(|| result::default_filename(info));
    match &cfg.result_dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    }
}

/// Prints vLLM's summary (and failures by kind) and saves the JSON when asked; returns the
/// saved path.
pub fn report(
    cfg: &ServeConfig,
    out: &RunOutput,
    w: &mut impl Write,
) -> Result<Option<PathBuf>, RunError> {
    let io = |e: std::io::Error| RunError::Save("stdout".into(), e);
    if !out.metrics.failures.is_empty() {
        let kinds: Vec<String> = out
            .metrics
            .failures
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(w, "Failed requests by kind: {}", kinds.join(", ")).map_err(io)?;
        if let Some(first) = out.extras["first_failure_by_kind"].as_object() {
            for (kind, m) in first {
                let status = match m["status"].as_u64() {
                    Some(s) => format!(" (HTTP {s})"),
                    None => String::new(),
                };
                let msg = m["message"].as_str().unwrap_or("");
                writeln!(w, "First {kind}{status}: {msg}").map_err(io)?;
            }
        }
    }
    result::write_summary(w, &out.info, &out.metrics).map_err(io)?;
    crate::compat::probe::write_block(w, &out.vllm_extra).map_err(io)?;
    crate::compat::spec_decode::write_block(w, &out.vllm_extra).map_err(io)?;
    if let Some(ss) = &out.steady_state {
        write_steady_state(w, ss.as_ref()).map_err(io)?;
    }
    let x = &out.extras;
    writeln!(
        w,
        "llmspeed: send lag p99 {:.2} ms, timer lag p99 {:.2} ms, client CPU {:.2} s ({:.0}% of one core)",
        x["send_lag_ms"]["p99"].as_f64().unwrap_or(0.0),
        x["timer_lag_ms"]["p99"].as_f64().unwrap_or(0.0),
        x["client_cpu_user_s"].as_f64().unwrap_or(0.0) + x["client_cpu_sys_s"].as_f64().unwrap_or(0.0),
        x["client_cpu_percent_of_one_core"].as_f64().unwrap_or(0.0),
    )
    .map_err(io)?;
    writeln!(w, "{}", stamps_line(x)).map_err(io)?;
    if let Some(line) = one_read_line(x) {
        writeln!(w, "{line}").map_err(io)?;
    }
    let path = result_path(cfg, &out.info);
    if let Some(th) = cfg.plot_timeline {
        // Where vLLM puts it, also when the JSON itself is not saved.
        let html_path = timeline_html::path_for(&path);
        let title = format!("bench serve timeline: {}", out.info.model_id);
        let html = timeline_html::render(&timeline_html::requests(&out.detailed), th, &title);
        std::fs::write(&html_path, html)
            .map_err(|e| RunError::Save(html_path.display().to_string(), e))?;
        writeln!(w, "Timeline plot saved to: {}", html_path.display()).map_err(io)?;
    }
    if !(cfg.save_result || cfg.append_result) {
        return Ok(None);
    }
    result::save(&path, &out.pairs(cfg.save_detailed), cfg.append_result)
        .map_err(|e| RunError::Save(path.display().to_string(), e))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::{random, DatasetConfig};

    #[test]
    fn a_stop_leaves_requests_unsent_or_cut_and_nothing_else_changes() {
        use crate::timeline::RequestError;
        let tl = |sent: bool, kind: Option<ErrorKind>| {
            let mut t = Timeline::new(0, 1, false);
            t.send_start = sent.then_some(5);
            t.outcome = match kind {
                Some(k) => Err(RequestError::new(k, "x")),
                None => Ok(()),
            };
            t
        };
        assert_eq!(
            stop_fate(&tl(false, Some(ErrorKind::Cancelled))),
            StopFate::Unsent
        );
        assert_eq!(
            stop_fate(&tl(true, Some(ErrorKind::Cancelled))),
            StopFate::Cut
        );
        assert_eq!(stop_fate(&tl(true, None)), StopFate::Ran);
        // The server's own failures stay failures, sent or not (a refused connection).
        assert_eq!(
            stop_fate(&tl(false, Some(ErrorKind::Connect))),
            StopFate::Ran
        );
        assert_eq!(
            stop_fate(&tl(true, Some(ErrorKind::HttpStatus))),
            StopFate::Ran
        );
    }

    #[test]
    fn stamp_summary_writes_the_source_and_the_wakeup_figures() {
        use crate::timeline::{Channel, EventRecord};
        let mut kernel = Timeline::new(0, 4, false);
        for (i, w) in [1_000u32, 3_000].into_iter().enumerate() {
            kernel.events.push(EventRecord {
                t: i as u64,
                tokens: 1,
                wakeup_ns: 0,
                channel: Channel::Content,
            });
            kernel.note_read(None, w, i);
        }
        let mut x = json!({});
        let mut s = StampSummary::default();
        s.add(&kernel);
        s.write(&mut x);
        assert_eq!(x["stamp_source"], "kernel");
        assert_eq!(x["stamp_fallback"], Value::Null);
        assert_eq!(x["client_wakeup_us"]["max"], 3.0);
        assert_eq!(x["client_wakeup_us"]["p50"], 2.0);
        assert!(stamps_line(&x).contains("stamps kernel: the client woke up 2 us p50"));
        // Stamps 0 and 1: one gap, timed apart.
        assert_eq!(
            x["token_gaps_in_one_read"],
            json!({"count": 0, "of": 1, "percent": 0.0})
        );
        assert_eq!(one_read_line(&x), None);
        let mut together = Timeline::new(0, 3, false);
        for t in [5u64, 9, 9] {
            together.events.push(EventRecord {
                t,
                tokens: 1,
                wakeup_ns: 0,
                channel: Channel::Content,
            });
        }
        let mut s2 = StampSummary::default();
        s2.add(&kernel);
        s2.add(&together);
        let mut z = json!({});
        s2.write(&mut z);
        assert_eq!(
            z["token_gaps_in_one_read"],
            json!({"count": 1, "of": 3, "percent": 100.0 / 3.0})
        );
        assert!(one_read_line(&z)
            .unwrap()
            .starts_with("llmspeed: 1 of 3 token gaps (33.33%) came in one read"));
        // A TLS stream beside it: mixed, and why.
        let mut tls = Timeline::new(0, 1, false);
        tls.note_read(Some(StampFallback::Tls), 0, 0);
        s.add(&tls);
        s.write(&mut x);
        assert_eq!(x["stamp_source"], "mixed");
        assert_eq!(x["stamp_fallback"], "tls");
        let mut only_tls = StampSummary::default();
        only_tls.add(&tls);
        let mut y = json!({});
        only_tls.write(&mut y);
        assert_eq!(
            stamps_line(&y),
            "llmspeed: stamps client_clock (tls): each read stamped when the client woke up"
        );
    }

    fn builder(chat: bool) -> BodyBuilder {
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0.0));
        BodyBuilder {
            model: "m".into(),
            dialect: crate::net::Dialect::OpenAi,
            chat,
            ignore_eos: true,
            continuous_usage: false,
            extra,
        }
    }

    /// The whole body, field for field, as vLLM's request functions build it (their payload
    /// dict, then `ignore_eos`, then the sampling fields and `--extra-body`).
    #[test]
    fn bodies_are_vllms_payloads_exactly() {
        let s = Sample {
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 5,
        };
        let body = |b: &BodyBuilder| -> Value {
            serde_json::from_slice(&b.body(&s, &mut Vec::new()).unwrap()).unwrap()
        };
        assert_eq!(
            body(&builder(false)),
            json!({"model": "m", "prompt": "hi", "repetition_penalty": 1.0, "max_tokens": 5,
                   "logprobs": null, "stream": true, "stream_options": {"include_usage": true},
                   "ignore_eos": true, "temperature": 0.0})
        );
        assert_eq!(
            body(&builder(true)),
            json!({"model": "m",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "max_completion_tokens": 5, "stream": true,
                   "stream_options": {"include_usage": true},
                   "ignore_eos": true, "temperature": 0.0})
        );
        // Our extra, only when asked for.
        let mut b = builder(true);
        b.continuous_usage = true;
        assert_eq!(
            body(&b)["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": true})
        );
    }

    /// The native backends' bodies: TGI's is vLLM's `async_request_tgi` payload plus
    /// `details`; SGLang's puts the sampling fields in `sampling_params`, as its own
    /// `bench_serving` does; llama.cpp's takes them at the top.
    #[test]
    fn native_backend_bodies() {
        use crate::net::Dialect;
        let s = Sample {
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 3,
            output_len: 5,
        };
        let body = |d: Dialect| -> Value {
            let mut b = builder(false);
            b.dialect = d;
            b.extra.insert("top_k".into(), json!(4));
            b.extra.insert("lora_path".into(), json!("a"));
            serde_json::from_slice(&b.body(&s, &mut Vec::new()).unwrap()).unwrap()
        };
        assert_eq!(
            body(Dialect::Tgi),
            json!({"inputs": "hi", "parameters": {"max_new_tokens": 5, "do_sample": true,
                   "temperature": 0.01, "top_p": 0.99, "truncate": 3,
                   "ignore_eos_token": true, "details": true}})
        );
        assert_eq!(
            body(Dialect::Sglang),
            json!({"text": "hi", "sampling_params": {"max_new_tokens": 5, "ignore_eos": true,
                   "temperature": 0.0, "top_k": 4}, "lora_path": "a", "stream": true})
        );
        assert_eq!(
            body(Dialect::LlamaCpp),
            json!({"prompt": "hi", "n_predict": 5, "ignore_eos": true, "stream": true,
                   "temperature": 0.0, "top_k": 4, "lora_path": "a"})
        );
    }

    #[test]
    fn failure_messages_keep_the_status_and_at_most_500_characters() {
        let long = "é".repeat(700);
        let v = failure_message(Some(503), &long);
        assert_eq!(v["status"], 503);
        assert_eq!(v["message"].as_str().unwrap().chars().count(), 500);
        let v = failure_message(None, "connection refused");
        assert_eq!(v, json!({"status": null, "message": "connection refused"}));
    }

    #[test]
    fn token_id_body_matches_serde_json() {
        let s = random(&DatasetConfig {
            num_prompts: 3,
            random_input_len: 50,
            random_prefix_len: 3,
            ..Default::default()
        })
        .unwrap();
        let mut ids = Vec::new();
        for x in &s {
            let body = builder(false).body(x, &mut ids).unwrap();
            let v: Value = serde_json::from_slice(&body).unwrap();
            let mut want = Vec::new();
            x.write_ids(&mut want);
            // The hand-written id array is the naive serde_json encoding, number for number.
            assert_eq!(v["prompt"], json!(want));
            assert_eq!(v["max_tokens"], 128);
            assert_eq!(v["stream"], true);
            assert_eq!(v["ignore_eos"], true);
            assert_eq!(v["temperature"], 0.0);
            assert_eq!(v["stream_options"]["include_usage"], true);
        }
        let mut n = Vec::new();
        for k in [0u32, 7, 10, 99, 100, 1000, 7999, 12_345, 4_294_967_295] {
            n.clear();
            push_u32(&mut n, k);
            assert_eq!(n, k.to_string().as_bytes());
        }
    }

    proptest::proptest! {
        #[test]
        fn push_u32_matches_to_string(n: u32) {
            let mut out = Vec::new();
            push_u32(&mut out, n);
            proptest::prop_assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn extra_body_prompt_replaces_the_token_ids_without_a_second_key() {
        let s = random(&DatasetConfig {
            num_prompts: 1,
            random_input_len: 8,
            ..Default::default()
        })
        .unwrap();
        let mut b = builder(false);
        b.extra.insert("prompt".into(), json!("from --extra-body"));
        let body = b.body(&s[0], &mut Vec::new()).unwrap();
        let text = String::from_utf8(body).unwrap();
        assert_eq!(text.matches("\"prompt\"").count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["prompt"], "from --extra-body");
    }

    #[test]
    fn chat_body_uses_messages_and_max_completion_tokens() {
        let s = Sample {
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 5,
        };
        let v: Value =
            serde_json::from_slice(&builder(true).body(&s, &mut Vec::new()).unwrap()).unwrap();
        assert_eq!(
            v["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        );
        assert_eq!(v["max_completion_tokens"], 5);
        assert!(v.get("prompt").is_none());
    }
}
