//! Reaching the server before a run: the client a run's settings ask for, the readiness wait
//! with the model the server lists, and vLLM's speculative-decoding counters read from
//! `/metrics`. Shared by the single run (`bench::run`) and the conversation loop
//! (`bench::multiturn`); it never sends a benchmark request.

use crate::bench::args::ServeConfig;
use crate::bench::error::RunError;
use crate::clock::Clock;
use crate::net::{Client, ClientConfig, Target, Timeouts};
use serde_json::Value;
use std::io::Write;
use std::time::Duration;

pub fn client_for(cfg: &ServeConfig, clock: Clock) -> Result<Client, RunError> {
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
pub async fn resolve_model(
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

/// The server's `vllm:spec_decode_*` counters now; `None` without them (or without a
/// `/metrics` answering 200 within 10 s), as vLLM's `fetch_spec_decode_metrics`.
pub async fn spec_decode_counters(client: &Client) -> Option<crate::bench::spec_decode::Counters> {
    let r = tokio::time::timeout(Duration::from_secs(10), client.get("/metrics"))
        .await
        .ok()?
        .ok()?;
    if r.status != 200 {
        return None;
    }
    crate::bench::spec_decode::parse(&String::from_utf8_lossy(&r.body))
}
