//! Speculative-decoding acceptance from the server's `/metrics`, read just before the measured
//! run and just after it, as vLLM's `bench serve` does (`fetch_spec_decode_metrics`), and
//! reported under vLLM's keys: `spec_decode_acceptance_rate` (accepted / draft tokens, in %),
//! `spec_decode_acceptance_length` (1 + accepted / drafts), `spec_decode_num_drafts`,
//! `spec_decode_draft_tokens`, `spec_decode_accepted_tokens`,
//! `spec_decode_per_position_acceptance_rates` (accepted at each draft position / drafts).
//!
//! Owns picking vLLM's `vllm:spec_decode_*_total` counters out of `/metrics` (parsed by
//! `proto::prometheus`) and the before/after arithmetic; both pure. A server without those counters (or without `/metrics`)
//! gives no keys at all, so every other run keeps exactly vLLM's keys.

use crate::proto::prometheus::Sample;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;

/// vLLM's counters at one moment, summed over engines and label sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    pub accepted_per_pos: BTreeMap<u64, u64>,
}

/// The counters in a `/metrics` text; `None` when it has no `vllm:spec_decode*_total` series
/// (speculative decoding off, or not vLLM), or when the page is not valid exposition text (the
/// project's parser never guesses at half a page).
pub fn parse(text: &str) -> Option<Counters> {
    from_samples(&crate::proto::prometheus::parse(text).ok()?)
}

/// The server's counters now, as vLLM's `fetch_spec_decode_metrics` reads them: `None` without
/// them (or without a `/metrics` answering 200 within 10 s).
pub async fn counters(client: &crate::net::Client) -> Option<Counters> {
    parse(&crate::bench::engine::connect::metrics_page(client).await?)
}

/// [`parse`] on samples already parsed: vLLM's counters summed over engines and label sets.
pub fn from_samples(samples: &[Sample]) -> Option<Counters> {
    let mut c = Counters::default();
    let mut found = false;
    for s in samples {
        if !(s.name.starts_with("vllm:spec_decode") && s.name.ends_with("_total")) {
            continue;
        }
        found = true;
        if !(s.value.is_finite() && s.value >= 0.0) {
            continue;
        }
        let v = s.value as u64;
        match s.name.as_str() {
            "vllm:spec_decode_num_drafts_total" => c.num_drafts += v,
            "vllm:spec_decode_num_draft_tokens_total" => c.num_draft_tokens += v,
            "vllm:spec_decode_num_accepted_tokens_total" => c.num_accepted_tokens += v,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total" => {
                if let Some(p) = s.label("position").and_then(|p| p.parse::<u64>().ok()) {
                    *c.accepted_per_pos.entry(p).or_default() += v;
                }
            }
            _ => {}
        }
    }
    found.then_some(c)
}

/// vLLM's keys for the run between `before` and `after`, in its order; `None` when no draft
/// token was proposed in between (vLLM then adds none). Counters that went backwards (a server
/// restart) count as no drafts.
pub fn keys(before: &Counters, after: &Counters) -> Option<Vec<(String, Value)>> {
    let drafts = after.num_drafts.checked_sub(before.num_drafts)?;
    let draft_tokens = after
        .num_draft_tokens
        .checked_sub(before.num_draft_tokens)?;
    let accepted = after
        .num_accepted_tokens
        .checked_sub(before.num_accepted_tokens)?;
    if draft_tokens == 0 {
        return None;
    }
    let mut per_pos = Vec::new();
    if drafts > 0 {
        let positions: std::collections::BTreeSet<u64> = before
            .accepted_per_pos
            .keys()
            .chain(after.accepted_per_pos.keys())
            .copied()
            .collect();
        for p in positions {
            let b = before.accepted_per_pos.get(&p).copied().unwrap_or(0);
            let a = after.accepted_per_pos.get(&p).copied().unwrap_or(b);
            per_pos.push(a.saturating_sub(b) as f64 / drafts as f64);
        }
    }
    let length = if drafts > 0 {
        1.0 + accepted as f64 / drafts as f64
    } else {
        0.0
    };
    Some(vec![
        (
            "spec_decode_acceptance_rate".into(),
            json!(accepted as f64 / draft_tokens as f64 * 100.0),
        ),
        ("spec_decode_acceptance_length".into(), json!(length)),
        ("spec_decode_num_drafts".into(), json!(drafts)),
        ("spec_decode_draft_tokens".into(), json!(draft_tokens)),
        ("spec_decode_accepted_tokens".into(), json!(accepted)),
        (
            "spec_decode_per_position_acceptance_rates".into(),
            json!(per_pos),
        ),
    ])
}

/// vLLM's "Speculative Decoding" console block.
pub fn write_block(w: &mut impl Write, keys: &[(String, Value)]) -> std::io::Result<()> {
    let get = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let Some(rate) = get("spec_decode_acceptance_rate").and_then(Value::as_f64) else {
        return Ok(());
    };
    let f = |k: &str| get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let n = |k: &str| get(k).and_then(Value::as_u64).unwrap_or(0);
    writeln!(w, "{:-^50}", "Speculative Decoding")?;
    writeln!(w, "{:<40} {:<10.2}", "Acceptance rate (%):", rate)?;
    writeln!(
        w,
        "{:<40} {:<10.2}",
        "Acceptance length:",
        f("spec_decode_acceptance_length")
    )?;
    writeln!(w, "{:<40} {:<10}", "Drafts:", n("spec_decode_num_drafts"))?;
    writeln!(
        w,
        "{:<40} {:<10}",
        "Draft tokens:",
        n("spec_decode_draft_tokens")
    )?;
    writeln!(
        w,
        "{:<40} {:<10}",
        "Accepted tokens:",
        n("spec_decode_accepted_tokens")
    )?;
    if let Some(Value::Array(per)) = get("spec_decode_per_position_acceptance_rates") {
        if !per.is_empty() {
            writeln!(w, "Per-position acceptance (%):")?;
            for (i, r) in per.iter().enumerate() {
                let label = format!("  Position {i}:");
                writeln!(w, "{label:<40} {:<10.2}", r.as_f64().unwrap_or(0.0) * 100.0)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(drafts: u64, tokens: u64, accepted: u64, per: [u64; 2]) -> String {
        format!(
            "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.\n\
             # TYPE vllm:spec_decode_num_drafts counter\n\
             vllm:spec_decode_num_drafts_total{{engine=\"0\",model_name=\"m x\"}} {drafts}.0\n\
             vllm:spec_decode_num_draft_tokens_total{{engine=\"0\",model_name=\"m\"}} {tokens}.0\n\
             vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\",model_name=\"m\"}} {accepted}.0\n\
             vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",model_name=\"m\",position=\"0\"}} {}.0\n\
             vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",model_name=\"m\",position=\"1\"}} {}.0\n\
             vllm:spec_decode_num_drafts_created{{engine=\"0\"}} 99.0\n\
             vllm:num_requests_running{{engine=\"0\"}} 3.0\n",
            per[0], per[1]
        )
    }

    #[test]
    fn counters_parse_with_labels_and_skip_non_totals() {
        let c = parse(&text(10, 20, 15, [9, 6])).unwrap();
        assert_eq!(
            (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens),
            (10, 20, 15)
        );
        assert_eq!(c.accepted_per_pos, BTreeMap::from([(0, 9), (1, 6)]));
        assert!(parse("vllm:num_requests_running 1.0\n").is_none());
        // A page that is not valid exposition text gives no figures (and no panic).
        assert!(parse("vllm:spec_decode_num_drafts_total{engine=\"0\"} x\n").is_none());
    }

    #[test]
    fn before_and_after_by_hand() {
        let b = parse(&text(10, 20, 15, [9, 6])).unwrap();
        let a = parse(&text(110, 220, 165, [89, 76])).unwrap();
        let k = keys(&b, &a).unwrap();
        let get = |n: &str| k.iter().find(|(x, _)| x == n).unwrap().1.clone();
        // 150 of 200 draft tokens in 100 drafts: 75%, 2.5 tokens a step, 80% and 70% by position.
        assert_eq!(get("spec_decode_acceptance_rate"), 75.0);
        assert_eq!(get("spec_decode_acceptance_length"), 2.5);
        assert_eq!(get("spec_decode_num_drafts"), 100);
        assert_eq!(get("spec_decode_draft_tokens"), 200);
        assert_eq!(get("spec_decode_accepted_tokens"), 150);
        assert_eq!(
            get("spec_decode_per_position_acceptance_rates"),
            json!([0.8, 0.7])
        );
        // Nothing drafted in between: no keys.
        assert!(keys(&a, &a).is_none());
        // A restarted server (counters went down): no keys, no underflow.
        assert!(keys(&a, &b).is_none());
        let mut out = Vec::new();
        write_block(&mut out, &k).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("Acceptance rate (%):                     75.00"),
            "{s}"
        );
        assert!(
            s.lines()
                .any(|l| l.starts_with("  Position 1:") && l.trim_end().ends_with(" 70.00")),
            "{s}"
        );
    }
}
