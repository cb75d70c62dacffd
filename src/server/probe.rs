//! Engine detection and server limits.
//!
//! [`collect`] fetches the informative endpoints once (a failure or non-2xx answer is simply
//! "absent"); [`detect`] is a pure function from those responses and the user's overrides to a
//! [`ServerInfo`], so every engine's shape is unit-tested from captured bodies. Detection never
//! guesses a number: a limit it cannot find stays `None` and is listed in `missing`.

use crate::matrix::status::{KvSource, ServerLimits};
use crate::net::Client;
use crate::proto::prometheus::{self, Sample};
use serde_json::Value;

/// The server software, as far as its endpoints tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    Vllm,
    Sglang,
    Tgi,
    LlamaCpp,
    Ollama,
    /// An OpenAI-compatible server we could not name.
    OpenAi,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Tgi => "tgi",
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::Ollama => "ollama",
            EngineKind::OpenAi => "openai",
        }
    }

    pub fn repository(self) -> Option<&'static str> {
        match self {
            EngineKind::Vllm => Some("github.com/vllm-project/vllm"),
            EngineKind::Sglang => Some("github.com/sgl-project/sglang"),
            EngineKind::Tgi => Some("github.com/huggingface/text-generation-inference"),
            EngineKind::LlamaCpp => Some("github.com/ggml-org/llama.cpp"),
            EngineKind::Ollama => Some("github.com/ollama/ollama"),
            EngineKind::OpenAi => None,
        }
    }
}

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

/// How the server counts tokens for us, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizeStyle {
    /// vLLM / SGLang: `POST /tokenize {model, prompt | messages}` -> `{count, tokens}`.
    PromptCount,
    /// llama.cpp: `POST /tokenize {content}` -> `{tokens}`.
    Content,
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
    /// Whether a one-word `/tokenize` worked, and in which dialect.
    pub tokenize: Option<TokenizeStyle>,
    /// Whether a token-id prompt on `/v1/completions` (`max_tokens: 1`) was accepted; `None` =
    /// not tried.
    pub token_ids: Option<bool>,
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
    pub tokenize: Option<TokenizeStyle>,
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
        o.push_str(&format!(
            "tokenize        {}\n",
            match self.tokenize {
                Some(TokenizeStyle::PromptCount) => "yes (/tokenize prompt -> count)",
                Some(TokenizeStyle::Content) => "yes (/tokenize content -> tokens)",
                None => "no",
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

/// The pure half of the probe.
pub fn detect(c: &Collected, o: &Overrides) -> ServerInfo {
    let samples: Vec<Sample> = c
        .metrics
        .as_ref()
        .filter(|m| (200..300).contains(&m.status))
        .and_then(|m| prometheus::parse(&m.body).ok())
        .unwrap_or_default();
    let has_prefix = |p: &str| samples.iter().any(|s| s.name.starts_with(p));
    let models_json = c.models.as_ref().and_then(Fetched::json);
    let model_entries: Vec<Value> = models_json
        .as_ref()
        .and_then(|v| v.get("data"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let owned_by = model_entries
        .first()
        .and_then(|m| str_of(m, "owned_by"))
        .unwrap_or_default();
    let sgl =
        c.server_info.as_ref().and_then(Fetched::json).filter(|v| {
            v.get("max_total_num_tokens").is_some() || v.get("context_length").is_some()
        });
    let tgi = c
        .info
        .as_ref()
        .and_then(Fetched::json)
        .filter(|v| v.get("max_batch_total_tokens").is_some() || v.get("model_id").is_some());
    let props = c.props.as_ref().and_then(Fetched::json).filter(|v| {
        v.get("total_slots").is_some() || v.get("default_generation_settings").is_some()
    });
    let ollama = c
        .api_version
        .as_ref()
        .and_then(Fetched::json)
        .and_then(|v| str_of(&v, "version"));
    let version_json = c.version.as_ref().and_then(Fetched::json);

    let engine = if has_prefix("vllm:") {
        EngineKind::Vllm
    } else if sgl.is_some() || has_prefix("sglang:") {
        EngineKind::Sglang
    } else if tgi.is_some() || has_prefix("tgi_") {
        EngineKind::Tgi
    } else if props.is_some() || has_prefix("llamacpp:") || owned_by == "llamacpp" {
        EngineKind::LlamaCpp
    } else if ollama.is_some() {
        EngineKind::Ollama
    } else if owned_by == "vllm" {
        EngineKind::Vllm
    } else {
        EngineKind::OpenAi
    };

    let models: Vec<String> = model_entries
        .iter()
        .filter_map(|m| str_of(m, "id"))
        .collect();
    let mut model = models.first().cloned();
    let model_name = model_entries
        .first()
        .and_then(|m| str_of(m, "root"))
        .filter(|r| Some(r) != model.as_ref());
    let mut version = version_json.as_ref().and_then(|v| str_of(v, "version"));
    let mut max_model_len = model_entries
        .first()
        .and_then(|m| u64_of(m, "max_model_len"))
        .map(|n| found(n, "/v1/models max_model_len"));
    let mut kv = None;
    let mut max_running = None;

    match engine {
        EngineKind::Vllm => kv = vllm_kv(&samples),
        EngineKind::Sglang => {
            if let Some(v) = &sgl {
                kv = u64_of(v, "max_total_num_tokens")
                    .map(|n| (n, KvSource::SglangMaxTotalNumTokens));
                max_running = u64_of(v, "max_running_requests")
                    .map(|n| found(n, "/get_server_info max_running_requests"));
                if max_model_len.is_none() {
                    max_model_len = u64_of(v, "context_length")
                        .map(|n| found(n, "/get_server_info context_length"));
                }
                version = version.or_else(|| str_of(v, "version"));
            }
            if kv.is_none() {
                kv = prometheus::sum(&samples, "sglang:max_total_num_tokens")
                    .filter(|f| *f > 0.0)
                    .map(|f| (f as u64, KvSource::SglangMaxTotalNumTokens));
            }
        }
        EngineKind::Tgi => {
            if let Some(v) = &tgi {
                kv = u64_of(v, "max_batch_total_tokens")
                    .map(|n| (n, KvSource::TgiMaxBatchTotalTokens));
                max_running = u64_of(v, "max_concurrent_requests")
                    .map(|n| found(n, "/info max_concurrent_requests"));
                if max_model_len.is_none() {
                    max_model_len =
                        u64_of(v, "max_total_tokens").map(|n| found(n, "/info max_total_tokens"));
                }
                version = version.or_else(|| str_of(v, "version"));
                model = model.or_else(|| str_of(v, "model_id"));
            }
        }
        EngineKind::LlamaCpp => {
            if let Some(v) = &props {
                let slots = u64_of(v, "total_slots");
                let n_ctx = v
                    .get("default_generation_settings")
                    .and_then(|g| u64_of(g, "n_ctx"))
                    .or_else(|| u64_of(v, "n_ctx"));
                if let (Some(s), Some(n)) = (slots, n_ctx) {
                    kv = s
                        .checked_mul(n)
                        .map(|t| (t, KvSource::LlamaCppSlotsTimesCtx));
                }
                max_running = slots.map(|n| found(n, "/props total_slots"));
                if let Some(n) = n_ctx {
                    // n_ctx is per slot: one request can never use more.
                    max_model_len = Some(found(n, "/props n_ctx (per slot)"));
                }
                version = version.or_else(|| str_of(v, "build_info"));
                if model.is_none() {
                    model = str_of(v, "model_alias").or_else(|| str_of(v, "model_path"));
                }
            }
        }
        EngineKind::Ollama => version = version.or(ollama),
        EngineKind::OpenAi => {}
    }

    if let Some(n) = o.kv_budget {
        kv = Some((n, KvSource::UserFlag));
    }
    if let Some(n) = o.max_model_len {
        max_model_len = Some(found(n, "--max-model-len"));
    }
    if let Some(n) = o.max_num_seqs {
        max_running = Some(found(n, "--max-num-seqs"));
    }

    let has_metrics = MetricNames::for_engine(engine)
        .map(|n| samples.iter().any(|s| s.name == n.running))
        .unwrap_or(false);
    let mut missing = Vec::new();
    if model.is_none() {
        missing.push("model id (no /v1/models list; pass --model)".to_string());
    }
    if version.is_none() {
        missing.push("engine version".to_string());
    }
    if max_model_len.is_none() {
        missing.push(
            "max_model_len (pass --max-model-len; contexts are not checked against it)".into(),
        );
    }
    if kv.is_none() {
        missing
            .push("KV capacity (pass --kv-budget; no cell is marked Over capacity by KV)".into());
    }
    if max_running.is_none() {
        missing.push("running-request limit (pass --max-num-seqs if the server has one)".into());
    }
    if !has_metrics {
        missing.push("live metrics (/metrics): the readiness gate and average active requests use the client's own count".into());
    }
    ServerInfo {
        engine,
        model,
        models,
        model_name,
        version,
        max_model_len,
        kv_tokens: kv,
        max_running,
        has_metrics,
        tokenize: c.tokenize,
        token_ids: c.token_ids,
        missing,
    }
}

use super::sampler::MetricNames;

async fn fetch(client: &Client, path: &str) -> Option<Fetched> {
    let r = client.get(path).await.ok()?;
    Some(Fetched {
        status: r.status,
        body: String::from_utf8_lossy(&r.body).into_owned(),
    })
}

/// Ids inside every common vocabulary (and the simulated server's), past special tokens.
pub const SAFE_TOKEN_IDS: std::ops::Range<u32> = 1000..8000;

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
    let model_json = model.as_deref().map(Value::from).unwrap_or(Value::Null);
    // Tokenize: vLLM/SGLang dialect first, then llama.cpp's.
    let body = serde_json::json!({"model": model_json, "prompt": "hello world"});
    if let Ok(r) = client
        .post_json("/tokenize", body.to_string().as_bytes())
        .await
    {
        let v: Option<Value> = serde_json::from_slice(&r.body).ok();
        if r.is_success() && v.as_ref().and_then(|v| v.get("tokens")).is_some() {
            c.tokenize = Some(TokenizeStyle::PromptCount);
        }
    }
    if c.tokenize.is_none() {
        let body = serde_json::json!({"content": "hello world"});
        if let Ok(r) = client
            .post_json("/tokenize", body.to_string().as_bytes())
            .await
        {
            let v: Option<Value> = serde_json::from_slice(&r.body).ok();
            if r.is_success() && v.as_ref().and_then(|v| v.get("tokens")).is_some() {
                c.tokenize = Some(TokenizeStyle::Content);
            }
        }
    }
    if let Some(m) = &model {
        let ids: Vec<u32> = SAFE_TOKEN_IDS.take(8).collect();
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
            tokenize: Some(TokenizeStyle::PromptCount),
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
            tokenize: Some(TokenizeStyle::Content),
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
