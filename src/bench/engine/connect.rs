//! Reaching the server before a run: the client a plan asks for, the readiness wait with the
//! model the server lists, and the server's `/metrics` page (read just before and just after a
//! measured run, for the figures a front end takes from it). Shared by the runner and any
//! front end's own loop; it never sends a benchmark request.

use crate::bench::engine::error::RunError;
use crate::bench::engine::plan::Plan;
use crate::clock::Clock;
use crate::net::{Client, ClientConfig, Target, Timeouts};
use serde_json::Value;
use std::io::Write;
use std::time::Duration;

/// The client for `plan`'s server: its headers, key and TLS settings, a keep-alive pool sized
/// for its concurrency.
pub fn client_for(plan: &Plan, clock: Clock) -> Result<Client, RunError> {
    let target = Target::parse(&plan.base_url).map_err(|e| RunError::Setup(e.to_string()))?;
    let mut cc = ClientConfig::new(target);
    cc.headers = plan.headers.clone();
    cc.api_key = plan.api_key.clone();
    cc.insecure = plan.insecure;
    cc.system_roots = plan.system_roots;
    cc.ca_file = plan.ca_cert.clone();
    cc.kernel_stamps = plan.kernel_stamps;
    cc.packet_stamps = plan.packet_stamps;
    cc.keep_text = plan.keep_text;
    cc.max_idle = plan.max_concurrency.unwrap_or(1024).max(16);
    // The Python tools' only limit is aiohttp's 6-hour total: at an infinite request rate the
    // last requests of a big run wait minutes in the server's queue before their first byte,
    // and that is a measurement, not a failure.
    cc.timeouts = Timeouts {
        connect: Some(Duration::from_secs(60)),
        first_byte: None,
        gap: None,
        total: Some(Duration::from_secs(6 * 3600)),
    };
    Client::new(cc, clock).map_err(|e| RunError::Setup(e.to_string()))
}

/// Waits for `GET /v1/models` to answer 200 (retrying refused connections and 5xx until
/// the plan's ready-check timeout) and returns the model ids.
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

/// The ready check, then the plan's model or the first model the server lists.
pub async fn resolve_model(
    plan: &Plan,
    client: &Client,
    log: &mut (dyn Write + Send),
) -> Result<String, RunError> {
    let models = ready_models(client, plan.ready_check_timeout_s, log).await?;
    match &plan.model {
        Some(m) => Ok(m.clone()),
        None => models
            .first()
            .cloned()
            .ok_or_else(|| RunError::Setup("GET /v1/models listed no model; pass --model".into())),
    }
}

/// The server's `/metrics` page now; `None` without one answering 200 within 10 s.
pub async fn metrics_page(client: &Client) -> Option<String> {
    let r = tokio::time::timeout(Duration::from_secs(10), client.get("/metrics"))
        .await
        .ok()?
        .ok()?;
    if r.status != 200 {
        return None;
    }
    Some(String::from_utf8_lossy(&r.body).into_owned())
}
