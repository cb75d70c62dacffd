//! Engine detection and server limits.
//!
//! [`collect`] fetches the informative endpoints once (a failure or non-2xx answer is simply
//! "absent"); [`detect`] is a pure function from those responses and the user's overrides to a
//! [`ServerInfo`], so every engine's shape is unit-tested from captured bodies. Detection never
//! guesses a number: a limit it cannot find stays `None` and is listed in `missing`.

use crate::net::Client;
use crate::proto::prometheus::{self, Sample};
use crate::report::status::{KvSource, ServerLimits};
use crate::server::dialect::{self, Attempt, TokenizeDialect, VERIFY_TEXT};
use crate::server::engine::EngineKind;
use crate::server::sampler::MetricNames;
use serde_json::Value;

/// One endpoint's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub status: u16,
    pub body: String,
}

impl Fetched {
    pub fn ok(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            body: body.into(),
        }
    }

    fn json(&self) -> Option<Value> {
        if (200..300).contains(&self.status) {
            serde_json::from_str(&self.body).ok()
        } else {
            None
        }
    }
}

/// A `/tokenize` dialect the server proved it speaks: `text` came back as `count` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedTokenize {
    pub dialect: TokenizeDialect,
    pub text: &'static str,
    pub count: u64,
}

/// Everything [`collect`] fetched; `None` = no usable answer.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    pub models: Option<Fetched>,
    pub version: Option<Fetched>,
    pub metrics: Option<Fetched>,
    /// SGLang `/get_server_info`.
    pub server_info: Option<Fetched>,
    /// TGI `/info`.
    pub info: Option<Fetched>,
    /// llama.cpp `/props`.
    pub props: Option<Fetched>,
    /// Ollama `/api/version`.
    pub api_version: Option<Fetched>,
    /// Each `/tokenize` dialect tried with [`VERIFY_TEXT`], in order, and what it showed; the
    /// probe stops at the first verified one.
    pub tokenize: Vec<(TokenizeDialect, Attempt)>,
    /// Whether a token-id prompt on `/v1/completions` (`max_tokens: 1`) was accepted; `None` =
    /// not tried.
    pub token_ids: Option<bool>,
}

impl Collected {
    /// The first answer that says the server is still starting: a 5xx from any endpoint
    /// (llama.cpp answers `503 Loading model` everywhere but `/v1/models` and `/health` while
    /// it loads). Until none is left, what was collected describes a loading server: a
    /// `/tokenize` that failed is not a missing one, and a missing limit may yet appear.
    pub fn not_ready(&self) -> Option<String> {
        let fetched = [
            ("GET /v1/models", &self.models),
            ("GET /version", &self.version),
            ("GET /metrics", &self.metrics),
            ("GET /get_server_info", &self.server_info),
            ("GET /info", &self.info),
            ("GET /props", &self.props),
            ("GET /api/version", &self.api_version),
        ];
        let endpoint = fetched.iter().find_map(|(what, f)| {
            f.as_ref().filter(|f| f.status >= 500).map(|f| {
                format!(
                    "{what} answered HTTP {}: {}",
                    f.status,
                    dialect::excerpt(f.body.as_bytes())
                )
            })
        });
        endpoint.or_else(|| {
            self.tokenize.iter().find_map(|(_, a)| match a {
                Attempt::Error {
                    message,
                    status: Some(s),
                } if *s >= 500 => Some(message.clone()),
                _ => None,
            })
        })
    }
}

/// Limits the user states on the command line; they win over anything probed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub kv_budget: Option<u64>,
    pub max_model_len: Option<u64>,
    pub max_num_seqs: Option<u64>,
}

/// A value and where it came from (an endpoint field, or a flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found<T> {
    pub value: T,
    pub source: &'static str,
}

fn found<T>(value: T, source: &'static str) -> Found<T> {
    Found { value, source }
}

/// What a probe learned.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    pub engine: EngineKind,
    /// First served model id.
    pub model: Option<String>,
    pub models: Vec<String>,
    /// The full model name where the server gives one (vLLM's `root`: the Hugging Face
    /// repository behind a `--served-model-name`).
    pub model_name: Option<String>,
    pub version: Option<String>,
    pub max_model_len: Option<Found<u64>>,
    pub kv_tokens: Option<(u64, KvSource)>,
    pub max_running: Option<Found<u64>>,
    /// `/metrics` answered with samples we recognise (live sampling possible).
    pub has_metrics: bool,
    /// The `/tokenize` dialect that counted a known text as non-empty; `None` when none did.
    pub tokenize: Option<VerifiedTokenize>,
    /// Why no dialect was verified when the server *failed* rather than lacked one (401, 5xx,
    /// network): the server's message, so it is never mistaken for "no /tokenize".
    pub tokenize_error: Option<String>,
    /// Vocabulary size (token ids are `0..n`) and where it came from; `None` = unknown.
    pub vocab: Option<Found<u64>>,
    pub token_ids: Option<bool>,
    /// Things that could not be found, as sentences for the user.
    pub missing: Vec<String>,
}

impl ServerInfo {
    pub fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_model_len: self.max_model_len.map(|f| f.value),
            kv_tokens: self.kv_tokens,
            max_running: self.max_running.map(|f| f.value),
        }
    }

    /// Human-readable lines for `llmspeed probe` and the matrix banner.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let opt = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
        o.push_str(&format!("engine          {}\n", self.engine.as_str()));
        o.push_str(&format!("version         {}\n", opt(self.version.clone())));
        o.push_str(&format!("model           {}\n", opt(self.model.clone())));
        if let Some(n) = &self.model_name {
            o.push_str(&format!("model name      {n}\n"));
        }
        o.push_str(&format!(
            "max_model_len   {}\n",
            opt(self
                .max_model_len
                .map(|f| format!("{} ({})", f.value, f.source)))
        ));
        o.push_str(&format!(
            "KV capacity     {}\n",
            opt(self
                .kv_tokens
                .map(|(n, s)| format!("{n} tokens ({})", s.describe())))
        ));
        o.push_str(&format!(
            "running limit   {}\n",
            opt(self
                .max_running
                .map(|f| format!("{} ({})", f.value, f.source)))
        ));
        o.push_str(&format!(
            "metrics         {}\n",
            if self.has_metrics { "yes" } else { "no" }
        ));
        o.push_str(&format!("tokenize        {}\n", self.tokenize_line()));
        o.push_str(&format!(
            "vocabulary      {}\n",
            match self.vocab {
                Some(f) => format!("{} tokens ({})", f.value, f.source),
                None => "unknown (token-id prompts use ids 1000..8000)".into(),
            }
        ));
        o.push_str(&format!(
            "token-id prompts {}\n",
            match self.token_ids {
                Some(true) => "accepted",
                Some(false) => "refused",
                None => "not tried",
            }
        ));
        for m in &self.missing {
            o.push_str(&format!("not found: {m}\n"));
        }
        o
    }

    fn tokenize_line(&self) -> String {
        match (&self.tokenize, &self.tokenize_error) {
            (Some(t), _) => format!(
                "yes, {} dialect ({}); verified: {:?} -> {} tokens",
                t.dialect.as_str(),
                t.dialect.describe(),
                t.text,
                t.count
            ),
            (None, Some(e)) => format!("unknown: {e}"),
            (None, None) => "no (no dialect counted a known text)".into(),
        }
    }

    /// Who counts tokens for this server, as a cache key: prompts counted by one tokenizer are
    /// never reused for another (engine, model, vocabulary size, dialect).
    pub fn tokenizer_identity(&self, model: &str) -> String {
        format!(
            "{} model={} vocab={} tokenize={}",
            self.engine.as_str(),
            model,
            self.vocab
                .map_or_else(|| "unknown".to_string(), |f| f.value.to_string()),
            self.tokenize.map_or("none", |t| t.dialect.as_str())
        )
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "engine": self.engine.as_str(),
            "version": self.version,
            "model": self.model,
            "models": self.models,
            "model_name": self.model_name,
            "max_model_len": self.max_model_len.map(|f| f.value),
            "max_model_len_source": self.max_model_len.map(|f| f.source),
            "kv_cache_tokens": self.kv_tokens.map(|k| k.0),
            "kv_cache_source": self.kv_tokens.map(|k| k.1.as_str()),
            "max_running_requests": self.max_running.map(|f| f.value),
            "max_running_source": self.max_running.map(|f| f.source),
            "metrics": self.has_metrics,
            "tokenize": self.tokenize.is_some(),
            "tokenize_dialect": self.tokenize.map(|t| t.dialect.as_str()),
            "tokenize_verified_text": self.tokenize.map(|t| t.text),
            "tokenize_verified_count": self.tokenize.map(|t| t.count),
            "tokenize_error": self.tokenize_error,
            "vocab_size": self.vocab.map(|f| f.value),
            "vocab_size_source": self.vocab.map(|f| f.source),
            "token_id_prompts": self.token_ids,
            "missing": self.missing,
        })
    }
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn label_u64(s: &Sample, k: &str) -> Option<u64> {
    s.label(k).and_then(|v| v.trim().parse::<u64>().ok())
}

/// vLLM's KV capacity from `cache_config_info` (or the older `cache_config`).
fn vllm_kv(samples: &[Sample]) -> Option<(u64, KvSource)> {
    let info = prometheus::find(samples, "vllm:cache_config_info")
        .chain(prometheus::find(samples, "vllm:cache_config"))
        .next()?;
    if let Some(n) = label_u64(info, "kv_cache_size_tokens").filter(|&n| n > 0) {
        return Some((n, KvSource::KvCacheSizeTokens));
    }
    let blocks = label_u64(info, "num_gpu_blocks")?;
    let size = label_u64(info, "block_size")?;
    Some((blocks.checked_mul(size)?, KvSource::BlocksTimesBlockSize)).filter(|k| k.0 > 0)
}

/// The pure half of the probe: the pages say which engine answered, then the engine's own
/// pages say its limits, then the user's flags override them, and what is still unknown is
/// listed for the user.
pub fn detect(c: &Collected, o: &Overrides) -> ServerInfo {
    let pages = Pages::read(c);
    let engine = pages.engine();
    let mut info = from_models(engine, &pages, c.token_ids);
    match engine {
        EngineKind::Vllm => info.kv_tokens = vllm_kv(&pages.samples),
        EngineKind::Sglang => from_sglang(&mut info, &pages),
        EngineKind::Tgi => from_tgi(&mut info, &pages),
        EngineKind::LlamaCpp => from_llama_cpp(&mut info, &pages),
        EngineKind::Ollama => info.version = info.version.take().or(pages.ollama),
        EngineKind::OpenAi => {}
    }
    apply_overrides(&mut info, o);
    info.has_metrics = MetricNames::for_engine(engine)
        .map(|n| pages.samples.iter().any(|s| s.name == n.running))
        .unwrap_or(false);
    (info.tokenize, info.tokenize_error) = tokenize_outcome(&c.tokenize);
    info.missing = missing(&info);
    info
}

/// The collected pages, parsed; each engine's own page only where it has that engine's shape.
struct Pages {
    samples: Vec<Sample>,
    /// `/v1/models`'s `data`.
    models: Vec<Value>,
    version: Option<Value>,
    sglang: Option<Value>,
    tgi: Option<Value>,
    props: Option<Value>,
    /// Ollama's version from `/api/version`.
    ollama: Option<String>,
}

impl Pages {
    fn read(c: &Collected) -> Self {
        let samples = c
            .metrics
            .as_ref()
            .filter(|m| (200..300).contains(&m.status))
            .and_then(|m| prometheus::parse(&m.body).ok())
            .unwrap_or_default();
        let models = c
            .models
            .as_ref()
            .and_then(Fetched::json)
            .as_ref()
            .and_then(|v| v.get("data"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let sglang = c.server_info.as_ref().and_then(Fetched::json).filter(|v| {
            v.get("max_total_num_tokens").is_some() || v.get("context_length").is_some()
        });
        let tgi =
            c.info.as_ref().and_then(Fetched::json).filter(|v| {
                v.get("max_batch_total_tokens").is_some() || v.get("model_id").is_some()
            });
        let props = c.props.as_ref().and_then(Fetched::json).filter(|v| {
            v.get("total_slots").is_some() || v.get("default_generation_settings").is_some()
        });
        let ollama = c
            .api_version
            .as_ref()
            .and_then(Fetched::json)
            .and_then(|v| str_of(&v, "version"));
        Self {
            samples,
            models,
            version: c.version.as_ref().and_then(Fetched::json),
            sglang,
            tgi,
            props,
            ollama,
        }
    }

    /// Which engine answered: a metric prefix or an engine's own page, in this order.
    fn engine(&self) -> EngineKind {
        let has_prefix = |p: &str| self.samples.iter().any(|s| s.name.starts_with(p));
        let owned_by = self
            .models
            .first()
            .and_then(|m| str_of(m, "owned_by"))
            .unwrap_or_default();
        if has_prefix("vllm:") {
            EngineKind::Vllm
        } else if self.sglang.is_some() || has_prefix("sglang:") {
            EngineKind::Sglang
        } else if self.tgi.is_some() || has_prefix("tgi_") {
            EngineKind::Tgi
        } else if self.props.is_some() || has_prefix("llamacpp:") || owned_by == "llamacpp" {
            EngineKind::LlamaCpp
        } else if self.ollama.is_some() {
            EngineKind::Ollama
        } else if owned_by == "vllm" {
            EngineKind::Vllm
        } else {
            EngineKind::OpenAi
        }
    }
}

/// What every OpenAI-compatible server says: `/v1/models` and `/version`.
fn from_models(engine: EngineKind, pages: &Pages, token_ids: Option<bool>) -> ServerInfo {
    let first = pages.models.first();
    let models: Vec<String> = pages
        .models
        .iter()
        .filter_map(|m| str_of(m, "id"))
        .collect();
    let model = models.first().cloned();
    let model_name = first
        .and_then(|m| str_of(m, "root"))
        .filter(|r| Some(r) != model.as_ref());
    ServerInfo {
        engine,
        model,
        models,
        model_name,
        version: pages.version.as_ref().and_then(|v| str_of(v, "version")),
        max_model_len: first
            .and_then(|m| u64_of(m, "max_model_len"))
            .map(|n| found(n, "/v1/models max_model_len")),
        kv_tokens: None,
        max_running: None,
        has_metrics: false,
        tokenize: None,
        tokenize_error: None,
        // llama.cpp puts the model's facts under `meta`; `n_vocab` counts every id the model has.
        vocab: first
            .and_then(|m| m.get("meta"))
            .and_then(|m| u64_of(m, "n_vocab"))
            .filter(|&n| n > 0)
            .map(|n| found(n, "/v1/models data[0].meta.n_vocab")),
        token_ids,
        missing: Vec::new(),
    }
}

/// SGLang's `/get_server_info`, and its KV capacity from `/metrics` where the page lacks it.
fn from_sglang(info: &mut ServerInfo, pages: &Pages) {
    if let Some(v) = &pages.sglang {
        info.kv_tokens =
            u64_of(v, "max_total_num_tokens").map(|n| (n, KvSource::SglangMaxTotalNumTokens));
        info.max_running = u64_of(v, "max_running_requests")
            .map(|n| found(n, "/get_server_info max_running_requests"));
        if info.max_model_len.is_none() {
            info.max_model_len =
                u64_of(v, "context_length").map(|n| found(n, "/get_server_info context_length"));
        }
        info.version = info.version.take().or_else(|| str_of(v, "version"));
    }
    if info.kv_tokens.is_none() {
        info.kv_tokens = prometheus::sum(&pages.samples, "sglang:max_total_num_tokens")
            .filter(|f| *f > 0.0)
            .map(|f| (f as u64, KvSource::SglangMaxTotalNumTokens));
    }
}

/// TGI's `/info`.
fn from_tgi(info: &mut ServerInfo, pages: &Pages) {
    let Some(v) = &pages.tgi else { return };
    info.kv_tokens =
        u64_of(v, "max_batch_total_tokens").map(|n| (n, KvSource::TgiMaxBatchTotalTokens));
    info.max_running =
        u64_of(v, "max_concurrent_requests").map(|n| found(n, "/info max_concurrent_requests"));
    if info.max_model_len.is_none() {
        info.max_model_len =
            u64_of(v, "max_total_tokens").map(|n| found(n, "/info max_total_tokens"));
    }
    info.version = info.version.take().or_else(|| str_of(v, "version"));
    info.model = info.model.take().or_else(|| str_of(v, "model_id"));
}

/// llama.cpp's `/props`: slots times the per-slot context.
fn from_llama_cpp(info: &mut ServerInfo, pages: &Pages) {
    let Some(v) = &pages.props else { return };
    let slots = u64_of(v, "total_slots");
    let n_ctx = v
        .get("default_generation_settings")
        .and_then(|g| u64_of(g, "n_ctx"))
        .or_else(|| u64_of(v, "n_ctx"));
    if let (Some(s), Some(n)) = (slots, n_ctx) {
        info.kv_tokens = s
            .checked_mul(n)
            .map(|t| (t, KvSource::LlamaCppSlotsTimesCtx));
    }
    info.max_running = slots.map(|n| found(n, "/props total_slots"));
    if let Some(n) = n_ctx {
        // n_ctx is per slot: one request can never use more.
        info.max_model_len = Some(found(n, "/props n_ctx (per slot)"));
    }
    info.version = info.version.take().or_else(|| str_of(v, "build_info"));
    if info.model.is_none() {
        info.model = str_of(v, "model_alias").or_else(|| str_of(v, "model_path"));
    }
}

/// The user's flags win over anything the server said.
fn apply_overrides(info: &mut ServerInfo, o: &Overrides) {
    if let Some(n) = o.kv_budget {
        info.kv_tokens = Some((n, KvSource::UserFlag));
    }
    if let Some(n) = o.max_model_len {
        info.max_model_len = Some(found(n, "--max-model-len"));
    }
    if let Some(n) = o.max_num_seqs {
        info.max_running = Some(found(n, "--max-num-seqs"));
    }
}

/// The first verified `/tokenize` dialect, or else the first failure's message.
fn tokenize_outcome(
    tried: &[(TokenizeDialect, Attempt)],
) -> (Option<VerifiedTokenize>, Option<String>) {
    let verified = tried.iter().find_map(|(d, a)| match a {
        Attempt::Verified { count } => Some(VerifiedTokenize {
            dialect: *d,
            text: VERIFY_TEXT,
            count: *count,
        }),
        _ => None,
    });
    if verified.is_some() {
        return (verified, None);
    }
    let error = tried.iter().find_map(|(_, a)| match a {
        Attempt::Error { message, .. } => Some(message.clone()),
        _ => None,
    });
    (None, error)
}

/// What could not be found, as sentences for the user.
fn missing(info: &ServerInfo) -> Vec<String> {
    let mut missing = Vec::new();
    if info.model.is_none() {
        missing.push("model id (no /v1/models list; pass --model)".to_string());
    }
    if info.version.is_none() {
        missing.push("engine version".to_string());
    }
    if info.max_model_len.is_none() {
        missing.push(
            "max_model_len (pass --max-model-len; contexts are not checked against it)".into(),
        );
    }
    if info.kv_tokens.is_none() {
        missing
            .push("KV capacity (pass --kv-budget; no cell is marked Over capacity by KV)".into());
    }
    if info.max_running.is_none() {
        missing.push("running-request limit (pass --max-num-seqs if the server has one)".into());
    }
    if !info.has_metrics {
        missing.push("live metrics (/metrics): the readiness gate and average active requests use the client's own count".into());
    }
    missing
}

/// `POST /tokenize` with a body in `dialect`'s shape -> the token count. A non-2xx answer is an
/// error with the server's message.
pub async fn tokenize_count(
    client: &Client,
    dialect: TokenizeDialect,
    body: &Value,
) -> Result<u64, String> {
    dialect.parse_count(&tokenize(client, dialect, body).await?)
}

/// `POST` the dialect's tokenize request; the token ids it answered, in order.
pub async fn tokenize_ids(
    client: &Client,
    dialect: TokenizeDialect,
    body: &Value,
) -> Result<Vec<u32>, String> {
    dialect.parse_ids(&tokenize(client, dialect, body).await?)
}

/// The body of a 2xx answer to the dialect's tokenize request.
async fn tokenize(
    client: &Client,
    dialect: TokenizeDialect,
    body: &Value,
) -> Result<bytes::Bytes, String> {
    post_ok(client, dialect.path(), body.to_string().as_bytes()).await
}

/// `POST` a JSON body; the answer's body when it is 2xx, else an error naming the path, the
/// status and the server's own message.
pub async fn post_ok(client: &Client, path: &str, body: &[u8]) -> Result<bytes::Bytes, String> {
    let r = client
        .post_json(path, body)
        .await
        .map_err(|e| format!("POST {path}: {e}"))?;
    if !r.is_success() {
        return Err(format!(
            "POST {path} answered HTTP {}: {}",
            r.status,
            r.error_message()
        ));
    }
    Ok(r.body)
}

async fn fetch(client: &Client, path: &str) -> Option<Fetched> {
    let r = client.get(path).await.ok()?;
    Some(Fetched {
        status: r.status,
        body: String::from_utf8_lossy(&r.body).into_owned(),
    })
}

/// Ids inside every common vocabulary (and the simulated server's), past special tokens.
pub const SAFE_TOKEN_IDS: std::ops::Range<u32> = 1000..8000;

/// The ids token-id prompts draw from for a vocabulary of `vocab` ids (`None` = unknown):
/// [`SAFE_TOKEN_IDS`] where it fits, else the upper half of the vocabulary minus its last 1/32.
/// Low ids are special and byte-fallback tokens (SentencePiece puts 256 byte pieces after
/// `<unk>`, `<s>`, `</s>`); added special tokens sit at the top end.
pub fn token_id_range(vocab: Option<u64>) -> std::ops::Range<u32> {
    match vocab {
        Some(n) if n < SAFE_TOKEN_IDS.end as u64 => {
            let n = n as u32;
            let lo = (n / 2).min(SAFE_TOKEN_IDS.start);
            let hi = n - (n / 32).max(1);
            lo..hi.max(lo)
        }
        _ => SAFE_TOKEN_IDS,
    }
}

/// Try each `/tokenize` dialect with [`VERIFY_TEXT`], the engine's own first, until one counts
/// it as non-empty.
async fn probe_tokenize(
    client: &Client,
    engine: EngineKind,
    model: &str,
) -> Vec<(TokenizeDialect, Attempt)> {
    let mut out = Vec::new();
    for d in dialect::order_for(engine) {
        let body = d.text_body(model, VERIFY_TEXT).to_string();
        let a = match client.post_json(d.path(), body.as_bytes()).await {
            Ok(r) => dialect::verify(d, r.status, &r.body),
            Err(e) => Attempt::Error {
                message: format!("POST {}: {e}", d.path()),
                status: None,
            },
        };
        let done = matches!(a, Attempt::Verified { .. });
        out.push((d, a));
        if done {
            break;
        }
    }
    out
}

/// [`collect`] until no endpoint answers 5xx ([`Collected::not_ready`]), for at most `timeout`
/// (zero: one probe). `waiting` hears why the server is not ready each time the reason changes.
/// A server still loading after `timeout` is an error naming its last answer, never a server
/// without the endpoint.
pub async fn collect_when_ready(
    client: &Client,
    model_hint: Option<&str>,
    timeout: std::time::Duration,
    waiting: &mut dyn FnMut(&str),
) -> Result<Collected, String> {
    let start = std::time::Instant::now();
    let mut told: Option<String> = None;
    loop {
        let c = collect(client, model_hint).await?;
        let Some(why) = c.not_ready() else {
            return Ok(c);
        };
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(format!(
                "the server is not ready after {:.1} s of waiting (--ready-check-timeout-sec {}): {why}",
                waited.as_secs_f64(),
                timeout.as_secs()
            ));
        }
        if told.as_deref() != Some(why.as_str()) {
            waiting(&format!(
                "waiting for the server to be ready (up to {} s): {why}",
                timeout.as_secs()
            ));
            told = Some(why);
        }
        tokio::time::sleep(PROBE_RETRY_EVERY.min(timeout - waited)).await;
    }
}

/// How often a loading server is probed again.
const PROBE_RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Fetch the informative endpoints. Unreachable servers fail here with the transport error;
/// everything else missing is just absent.
pub async fn collect(client: &Client, model_hint: Option<&str>) -> Result<Collected, String> {
    let models = client
        .get("/v1/models")
        .await
        .map_err(|e| format!("cannot reach the server: {e}"))?;
    let models = Fetched {
        status: models.status,
        body: String::from_utf8_lossy(&models.body).into_owned(),
    };
    let mut c = Collected {
        models: Some(models),
        version: fetch(client, "/version").await,
        metrics: fetch(client, "/metrics").await,
        ..Collected::default()
    };
    let pre = detect(&c, &Overrides::default());
    if pre.engine != EngineKind::Vllm {
        c.server_info = fetch(client, "/get_server_info").await;
        c.info = fetch(client, "/info").await;
        c.props = fetch(client, "/props").await;
        c.api_version = fetch(client, "/api/version").await;
    }
    let model = model_hint
        .map(str::to_owned)
        .or_else(|| detect(&c, &Overrides::default()).model);
    let engine = detect(&c, &Overrides::default()).engine;
    c.tokenize = probe_tokenize(client, engine, model.as_deref().unwrap_or("")).await;
    if let Some(m) = &model {
        let vocab = detect(&c, &Overrides::default()).vocab.map(|f| f.value);
        // Both ends of the range: an accepted request proves every id in it is in the
        // vocabulary (servers check ids against it), not only the first few.
        let r = token_id_range(vocab);
        let ids: Vec<u32> = r.clone().take(4).chain(r.rev().take(4)).collect();
        let body = serde_json::json!({"model": m, "prompt": ids, "max_tokens": 1, "stream": false});
        if let Ok(r) = client
            .post_json("/v1/completions", body.to_string().as_bytes())
            .await
        {
            c.token_ids = Some(r.is_success());
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: Collected, o: Overrides) -> ServerInfo {
        detect(&c, &o)
    }

    const VLLM_METRICS: &str = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
# TYPE vllm:cache_config_info gauge\n\
vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",engine=\"0\",gpu_memory_utilization=\"0.82\",kv_cache_max_concurrency=\"6.99\",kv_cache_size_tokens=\"1833216\",num_cpu_blocks=\"0\",num_gpu_blocks=\"114576\"} 1.0\n\
vllm:num_requests_running{engine=\"0\",model_name=\"gemma\"} 0.0\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"gemma\"} 0.0\n\
vllm:generation_tokens_total{engine=\"0\",model_name=\"gemma\"} 12.0\n";

    fn vllm() -> Collected {
        Collected {
            models: Some(Fetched::ok(
                r#"{"object":"list","data":[{"id":"gemma","object":"model","owned_by":"vllm","root":"RedHatAI/gemma","max_model_len":262144}]}"#,
            )),
            version: Some(Fetched::ok(r#"{"version":"0.30.1rc1.dev452+g73a583112"}"#)),
            metrics: Some(Fetched::ok(VLLM_METRICS)),
            tokenize: vec![(TokenizeDialect::Prompt, Attempt::Verified { count: 11 })],
            token_ids: Some(true),
            ..Collected::default()
        }
    }

    #[test]
    fn vllm_reads_kv_cache_size_tokens() {
        let i = check(vllm(), Overrides::default());
        assert_eq!(i.engine, EngineKind::Vllm);
        assert_eq!(i.model.as_deref(), Some("gemma"));
        assert_eq!(i.model_name.as_deref(), Some("RedHatAI/gemma"));
        assert_eq!(i.version.as_deref(), Some("0.30.1rc1.dev452+g73a583112"));
        assert_eq!(i.max_model_len.map(|f| f.value), Some(262_144));
        assert_eq!(i.kv_tokens, Some((1_833_216, KvSource::KvCacheSizeTokens)));
        assert_eq!(i.max_running, None);
        assert!(i.has_metrics);
        assert_eq!(i.missing.len(), 1, "{:?}", i.missing);
        assert!(i.missing[0].contains("running-request limit"));
    }

    #[test]
    fn vllm_falls_back_to_blocks_times_block_size() {
        let mut c = vllm();
        c.metrics = Some(Fetched::ok(
            "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1.0\nvllm:num_requests_running 0\n",
        ));
        let i = check(c, Overrides::default());
        assert_eq!(i.kv_tokens, Some((16_000, KvSource::BlocksTimesBlockSize)));
    }

    #[test]
    fn overrides_win_and_are_named() {
        let i = check(
            vllm(),
            Overrides {
                kv_budget: Some(500_000),
                max_model_len: Some(32_768),
                max_num_seqs: Some(64),
            },
        );
        assert_eq!(i.kv_tokens, Some((500_000, KvSource::UserFlag)));
        assert_eq!(i.max_model_len, Some(found(32_768, "--max-model-len")));
        assert_eq!(i.max_running, Some(found(64, "--max-num-seqs")));
        assert!(i.missing.is_empty(), "{:?}", i.missing);
        let l = i.limits();
        assert_eq!(l.max_running, Some(64));
    }

    #[test]
    fn sglang_from_get_server_info() {
        let c = Collected {
            models: Some(Fetched::ok(r#"{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","owned_by":"sglang","max_model_len":40960}]}"#)),
            server_info: Some(Fetched::ok(r#"{"model_path":"Qwen/Qwen3-8B","context_length":40960,"max_total_num_tokens":412345,"max_running_requests":256,"version":"0.5.4"}"#)),
            metrics: Some(Fetched::ok("sglang:num_running_reqs{model_name=\"q\"} 0\nsglang:num_queue_reqs{model_name=\"q\"} 0\n")),
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::Sglang);
        assert_eq!(
            i.kv_tokens,
            Some((412_345, KvSource::SglangMaxTotalNumTokens))
        );
        assert_eq!(i.max_running.map(|f| f.value), Some(256));
        assert_eq!(i.max_model_len.map(|f| f.value), Some(40_960));
        assert_eq!(i.version.as_deref(), Some("0.5.4"));
        assert!(i.has_metrics);
    }

    #[test]
    fn tgi_from_info() {
        let c = Collected {
            models: Some(Fetched {
                status: 404,
                body: String::new(),
            }),
            info: Some(Fetched::ok(
                r#"{"model_id":"meta-llama/Llama-3.1-8B-Instruct","max_concurrent_requests":128,"max_total_tokens":8192,"max_batch_total_tokens":262144,"version":"3.3.4"}"#,
            )),
            metrics: Some(Fetched::ok("tgi_queue_size 0\ntgi_batch_current_size 0\n")),
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::Tgi);
        assert_eq!(i.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
        assert_eq!(
            i.kv_tokens,
            Some((262_144, KvSource::TgiMaxBatchTotalTokens))
        );
        assert_eq!(i.max_running.map(|f| f.value), Some(128));
        assert_eq!(i.max_model_len.map(|f| f.value), Some(8192));
        assert!(i.has_metrics);
    }

    #[test]
    fn llamacpp_from_props_slots_times_ctx() {
        let c = Collected {
            models: Some(Fetched::ok(
                r#"{"models":[{"name":"m.gguf","model":"m.gguf"}],"object":"list","data":[{"id":"m.gguf","object":"model","owned_by":"llamacpp","meta":{"n_ctx_train":131072}}]}"#,
            )),
            props: Some(Fetched::ok(
                r#"{"default_generation_settings":{"n_ctx":2048,"params":{}},"total_slots":4,"model_path":"/models/m.gguf","build_info":"b6500-abc"}"#,
            )),
            tokenize: vec![(TokenizeDialect::Content, Attempt::Verified { count: 12 })],
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::LlamaCpp);
        assert_eq!(i.kv_tokens, Some((8192, KvSource::LlamaCppSlotsTimesCtx)));
        assert_eq!(i.max_running.map(|f| f.value), Some(4));
        assert_eq!(i.max_model_len.map(|f| f.value), Some(2048));
        assert_eq!(i.version.as_deref(), Some("b6500-abc"));
        assert!(!i.has_metrics);
        assert!(i.missing.iter().any(|m| m.contains("live metrics")));
    }

    /// llama.cpp as observed: the vLLM dialect answers 200 `{"tokens": []}`, the content
    /// dialect counts, and `/v1/models` carries `meta.n_vocab`.
    #[test]
    fn llamacpp_dialect_is_the_verified_one_and_vocab_comes_from_meta() {
        let c = Collected {
            models: Some(Fetched::ok(
                r#"{"models":[{"name":"tiny.gguf","model":"tiny.gguf"}],"object":"list","data":[{"id":"tiny.gguf","object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,"n_vocab":679,"n_ctx_train":2048,"n_ctx":2048,"n_params":393216,"size":1572864}}]}"#,
            )),
            tokenize: vec![
                (
                    TokenizeDialect::Prompt,
                    dialect::verify(TokenizeDialect::Prompt, 200, br#"{"tokens":[]}"#),
                ),
                (
                    TokenizeDialect::Content,
                    dialect::verify(
                        TokenizeDialect::Content,
                        200,
                        br#"{"tokens":[1,84,104,101,32,113,117,105,99,107]}"#,
                    ),
                ),
            ],
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::LlamaCpp);
        assert_eq!(
            i.tokenize,
            Some(VerifiedTokenize {
                dialect: TokenizeDialect::Content,
                text: VERIFY_TEXT,
                count: 10
            })
        );
        assert_eq!(i.vocab, Some(found(679, "/v1/models data[0].meta.n_vocab")));
        let text = i.render();
        assert!(text.contains("content dialect"), "{text}");
        assert!(text.contains("-> 10 tokens"), "{text}");
        assert!(
            text.contains("vocabulary      679 tokens (/v1/models"),
            "{text}"
        );
        let j = i.to_json();
        assert_eq!(j["tokenize_dialect"], "content");
        assert_eq!(j["tokenize_verified_count"], 10);
        assert_eq!(j["vocab_size"], 679);
        assert!(i.tokenizer_identity("tiny.gguf").contains("vocab=679"));
    }

    /// Only the empty answer: no dialect is trusted (the bug counted this as a tokenizer).
    #[test]
    fn an_empty_token_list_is_never_a_working_tokenizer() {
        let c = Collected {
            models: Some(Fetched::ok(
                r#"{"data":[{"id":"m","owned_by":"llamacpp"}]}"#,
            )),
            tokenize: vec![(
                TokenizeDialect::Prompt,
                dialect::verify(TokenizeDialect::Prompt, 200, br#"{"tokens":[]}"#),
            )],
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.tokenize, None);
        assert_eq!(i.tokenize_error, None);
        assert!(i.render().contains("tokenize        no"), "{}", i.render());
    }

    /// A 401 is reported as the server's refusal, never as "no /tokenize" (issue 9 item 8).
    #[test]
    fn a_refused_tokenize_is_reported_with_the_servers_message() {
        let c = Collected {
            models: Some(Fetched::ok(r#"{"data":[{"id":"m"}]}"#)),
            tokenize: TokenizeDialect::ALL
                .iter()
                .map(|&d| {
                    (
                        d,
                        dialect::verify(d, 401, br#"{"error":"missing bearer token"}"#),
                    )
                })
                .collect(),
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.tokenize, None);
        let e = i.tokenize_error.clone().expect("an error");
        assert!(
            e.contains("401") && e.contains("missing bearer token"),
            "{e}"
        );
        assert!(i
            .render()
            .contains("tokenize        unknown: /tokenize answered HTTP 401"));
    }

    #[test]
    fn token_id_range_fits_the_vocabulary() {
        assert_eq!(token_id_range(None), SAFE_TOKEN_IDS);
        assert_eq!(token_id_range(Some(151_936)), SAFE_TOKEN_IDS);
        assert_eq!(token_id_range(Some(8_000)), SAFE_TOKEN_IDS);
        let r = token_id_range(Some(679));
        // Past SentencePiece's 3 specials and 256 byte pieces, inside the vocabulary.
        assert!(r.start >= 259 && r.end <= 679 && r.len() >= 100, "{r:?}");
        let r = token_id_range(Some(4_000));
        assert!(r.start >= 1000 && r.end < 4_000, "{r:?}");
    }

    #[test]
    fn ollama_from_api_version() {
        let c = Collected {
            models: Some(Fetched::ok(
                r#"{"object":"list","data":[{"id":"llama3.2:3b","object":"model","created":1,"owned_by":"library"}]}"#,
            )),
            api_version: Some(Fetched::ok(r#"{"version":"0.12.3"}"#)),
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::Ollama);
        assert_eq!(i.version.as_deref(), Some("0.12.3"));
        assert_eq!(i.kv_tokens, None);
        assert!(i.missing.iter().any(|m| m.contains("KV capacity")));
        assert!(i.missing.iter().any(|m| m.contains("max_model_len")));
    }

    #[test]
    fn generic_openai_and_garbage_bodies() {
        let c = Collected {
            models: Some(Fetched::ok(r#"{"data":[{"id":"gpt-x"}]}"#)),
            version: Some(Fetched::ok("<html>not json</html>")),
            metrics: Some(Fetched::ok("this is { not prometheus")),
            info: Some(Fetched {
                status: 500,
                body: r#"{"max_batch_total_tokens":5}"#.into(),
            }),
            ..Collected::default()
        };
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::OpenAi);
        assert_eq!(i.model.as_deref(), Some("gpt-x"));
        assert_eq!(i.kv_tokens, None);
        assert!(!i.has_metrics);
        assert_eq!(i.missing.len(), 5, "{:?}", i.missing);
        let text = i.render();
        assert!(text.contains("engine          openai"), "{text}");
        assert!(text.contains("not found: KV capacity"), "{text}");
    }

    #[test]
    fn vllm_recognised_by_owned_by_without_metrics() {
        let mut c = vllm();
        c.metrics = None;
        let i = check(c, Overrides::default());
        assert_eq!(i.engine, EngineKind::Vllm);
        assert_eq!(i.kv_tokens, None);
        assert!(!i.has_metrics);
    }
}
