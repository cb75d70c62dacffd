//! The server's own timing of each request (vLLM started with `--enable-per-request-metrics`
//! sends `metrics` on the final usage chunk): vLLM 0.33's two per-request lists,
//! `server_queue_times` and `server_ttfts`, and our split of each request's TTFT into the
//! server's queue time, the server's TTFT and the rest, which no other tool gives.
//!
//! Pure: requests in, keys and figures out. It never reads a stream (the decoder put each
//! request's `ServerTiming` on its timeline) and never lays out the result (`result` does).

use crate::analysis::stats;
use crate::timeline::ServerTiming;
use serde_json::{json, Value};

/// vLLM's two lists, one entry per request in request order (failed ones included), in
/// seconds: `None` where the server sent no such figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerLists {
    pub queue_s: Vec<Option<f64>>,
    pub ttft_s: Vec<Option<f64>>,
}

impl ServerLists {
    /// Adds one request's figures (milliseconds on the wire, seconds in the lists, as vLLM).
    pub fn push(&mut self, t: Option<ServerTiming>) {
        let s = |ms: Option<f64>| ms.map(|v| v / 1000.0);
        self.queue_s.push(s(t.and_then(|t| t.queue_ms)));
        self.ttft_s.push(s(t.and_then(|t| t.ttft_ms)));
    }

    /// vLLM's keys: both lists when any request has either figure, else none at all.
    pub fn keys(&self) -> Vec<(String, Value)> {
        let any = self.queue_s.iter().chain(&self.ttft_s).any(Option::is_some);
        if !any {
            return Vec::new();
        }
        vec![
            ("server_queue_times".into(), json!(self.queue_s)),
            ("server_ttfts".into(), json!(self.ttft_s)),
        ]
    }
}

/// One request's TTFT as the client measured it, split: the server's queue time, the server's
/// TTFT (from scheduling to the first token) and the rest — the network both ways, the
/// server's HTTP front end (parsing, tokenizing, detokenizing: outside its engine's clock) and
/// the client. Milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TtftSplit {
    pub ttft_ms: f64,
    pub server_queue_ms: f64,
    pub server_ttft_ms: f64,
    pub rest_ms: f64,
}

/// The split of each successful request that has a client TTFT and both server figures.
/// `ttfts_s` are the client's TTFTs in seconds (`None` for a failed request).
pub fn splits(ttfts_s: &[Option<f64>], lists: &ServerLists) -> Vec<TtftSplit> {
    ttfts_s
        .iter()
        .zip(lists.queue_s.iter().zip(&lists.ttft_s))
        .filter_map(|(t, (q, s))| {
            let (t, q, s) = ((*t)? * 1e3, (*q)? * 1e3, (*s)? * 1e3);
            Some(TtftSplit {
                ttft_ms: t,
                server_queue_ms: q,
                server_ttft_ms: s,
                rest_ms: t - q - s,
            })
        })
        .collect()
}

fn spread(xs: &[f64]) -> Value {
    json!({
        "mean": stats::mean(xs),
        "p50": stats::percentile(xs, 50.0),
        "p99": stats::percentile(xs, 99.0),
        "min": xs.iter().copied().reduce(f64::min),
        "max": xs.iter().copied().reduce(f64::max),
    })
}

/// Our `ttft_split_ms` object: how many requests had the server's figures and each part's
/// spread; `None` when none had them (the key is left out).
pub fn split_json(splits: &[TtftSplit]) -> Option<Value> {
    if splits.is_empty() {
        return None;
    }
    let part = |f: fn(&TtftSplit) -> f64| spread(&splits.iter().map(f).collect::<Vec<f64>>());
    Some(json!({
        "requests": splits.len(),
        "ttft": part(|s| s.ttft_ms),
        "server_queue": part(|s| s.server_queue_ms),
        "server_ttft": part(|s| s.server_ttft_ms),
        "rest": part(|s| s.rest_ms),
    }))
}

/// The console line of `ttft_split_ms` (in `extras`), `None` without it.
pub fn split_line(extras: &Value) -> Option<String> {
    let x = extras.get("ttft_split_ms")?;
    let mean = |k: &str| x[k]["mean"].as_f64().unwrap_or(f64::NAN);
    Some(format!(
        "llmspeed: TTFT split (mean of {} requests with the server's metrics): server queue {:.2} ms + server TTFT {:.2} ms + network, front end and client {:.2} ms = {:.2} ms",
        x["requests"].as_u64().unwrap_or(0),
        mean("server_queue"),
        mean("server_ttft"),
        mean("rest"),
        mean("ttft"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(q: f64, s: f64) -> Option<ServerTiming> {
        Some(ServerTiming {
            queue_ms: Some(q),
            ttft_ms: Some(s),
            ..ServerTiming::default()
        })
    }

    #[test]
    fn lists_keep_request_order_and_gaps_and_vanish_when_empty() {
        let mut l = ServerLists::default();
        l.push(timing(250.0, 1250.0));
        l.push(None);
        l.push(Some(ServerTiming {
            ttft_ms: Some(300.0),
            ..ServerTiming::default()
        }));
        let keys = l.keys();
        assert_eq!(
            keys,
            vec![
                ("server_queue_times".into(), json!([0.25, null, null])),
                ("server_ttfts".into(), json!([1.25, null, 0.3])),
            ]
        );
        let mut none = ServerLists::default();
        none.push(None);
        none.push(Some(ServerTiming::default()));
        assert!(none.keys().is_empty());
    }

    #[test]
    fn the_split_adds_up_to_the_clients_ttft() {
        let mut l = ServerLists::default();
        l.push(timing(2.0, 10.0));
        l.push(timing(0.0, 4.0));
        l.push(None); // no server figures: left out
        l.push(timing(1.0, 1.0)); // a failed request: left out
        let ttfts = [Some(0.0125), Some(0.005), Some(0.009), None];
        let s = splits(&ttfts, &l);
        assert_eq!(s.len(), 2);
        assert!((s[0].rest_ms - 0.5).abs() < 1e-9, "{s:?}");
        assert!((s[1].rest_ms - 1.0).abs() < 1e-9, "{s:?}");
        let v = split_json(&s).unwrap();
        assert_eq!(v["requests"], 2);
        // Means are linear: the parts' means add up to the TTFT's.
        let m = |k: &str| v[k]["mean"].as_f64().unwrap();
        assert!((m("server_queue") + m("server_ttft") + m("rest") - m("ttft")).abs() < 1e-9);
        assert_eq!(v["server_queue"]["max"], 2.0);
        let line = split_line(&json!({ "ttft_split_ms": v })).unwrap();
        assert!(
            line.contains("server queue 1.00 ms + server TTFT 7.00 ms + network, front end and client 0.75 ms = 8.75 ms"),
            "{line}"
        );
        assert_eq!(split_json(&[]), None);
        assert_eq!(split_line(&json!({})), None);
    }
}
