//! Prefill scouts: cold streaming requests with `max_tokens: 1`; prefill tok/s = prompt tokens /
//! TTFT (median over samples). The first sample is sent without a cache salt so it leaves the
//! prompt in the server's prefix cache for the decode cells that follow; further samples carry a
//! unique `cache_salt` so each is a genuine miss.
//!
//! Must never reuse a salt, and never report a sample whose request failed.

use crate::analysis::stats;
use crate::matrix::status::CellStatus;
use crate::net::request::Generation;
use crate::net::{Cancel, Client, NoopObserver};
use crate::report::PrefillRow;
use crate::timeline::{ErrorKind, Timeline};
use serde_json::json;

/// TTFT of one scout: from the request being sent to its first token (or first event, for a
/// server that sends the single token without content).
pub fn scout_ttft_ms(client: &Client, tl: &Timeline) -> Option<f64> {
    let start = tl.send_start.unwrap_or(tl.intended_start);
    let first = tl.first_token.or(tl.first_event)?;
    Some(client.clock().delta_ns(start, first) as f64 / 1e6)
}

/// Run `samples` scouts of `base` and fill `row`. `salt` must be unique to the run and context.
/// Returns false when the user stopped the run.
pub async fn prefill(
    client: &Client,
    base: &Generation,
    samples: u32,
    salt: &str,
    row: &mut PrefillRow,
    known_tokens: u64,
    stop: &Cancel,
) -> bool {
    let mut ttfts = Vec::new();
    let mut prompt_tokens = None;
    let mut errors: Vec<(ErrorKind, u64)> = Vec::new();
    for i in 0..samples.max(1) {
        if stop.is_cancelled() {
            return false;
        }
        let mut g = base.clone();
        g.max_tokens = Some(1);
        g.ignore_eos = false;
        if i > 0 {
            g.extra
                .insert("cache_salt".into(), json!(format!("{salt}-{i}")));
        }
        let req = match g.stream_request(Some(false)) {
            Ok(r) => r,
            Err(_) => break,
        };
        let tl = client
            .stream(&req, client.clock().raw(), &mut NoopObserver, stop)
            .await;
        match tl.error_kind() {
            Some(ErrorKind::Cancelled) if stop.is_cancelled() => return false,
            Some(k) => match errors.iter_mut().find(|e| e.0 == k) {
                Some(e) => e.1 += 1,
                None => errors.push((k, 1)),
            },
            None => {
                if let Some(t) = scout_ttft_ms(client, &tl) {
                    ttfts.push(t);
                    prompt_tokens = tl.usage.map(|u| u.prompt_tokens).or(prompt_tokens);
                }
            }
        }
    }
    let tokens = prompt_tokens.unwrap_or(known_tokens);
    row.samples = ttfts.len() as u32;
    row.ttft_ms_samples = ttfts.clone();
    row.prompt_tokens = Some(tokens);
    row.ttft_ms = stats::median(&ttfts);
    row.prefill_tok_per_s = row
        .ttft_ms
        .filter(|t| *t > 0.0)
        .map(|t| tokens as f64 / (t / 1000.0));
    row.status = if ttfts.is_empty() {
        CellStatus::Failed(errors)
    } else {
        CellStatus::Valid
    };
    true
}
