//! Our own figures of a run, beside whatever a front end's tool reports: how prompts were
//! counted, where input lengths came from, send and timer lag, the client's CPU time, which
//! clock stamped the reads and how late the client woke up to them, the first message of each
//! failure kind, and a stop's toll. A front end writes [`ours`] under its one extra key and may
//! print [`stamps_line`] and [`one_read_line`]. The client's lag, the bounds on the figures and
//! the Client-bound verdict are [`client_lag`] (in [`ours`]) and [`client_lag_lines`]. Pure,
//! but for the count of Client-bound runs `--fail-on-client-bound` reads ([`client_bound_runs`]).

use crate::analysis::client_lag::{self, ClientLag};
use crate::analysis::stats::Summary;
use crate::bench::engine::plan::Plan;
use crate::bench::engine::run::Measured;
use crate::report::client_lag::ClientLagFigures;
use crate::timeline::{StampFallback, StampSource, Timeline};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Client-bound runs this process has written the figures of (each counted once, by
/// [`client_lag`]); `--fail-on-client-bound` reads it when the session ends.
static CLIENT_BOUND_RUNS: AtomicUsize = AtomicUsize::new(0);

/// How many runs of this process were Client-bound.
pub fn client_bound_runs() -> usize {
    CLIENT_BOUND_RUNS.load(Ordering::Relaxed)
}

/// Upstream-batched runs this process has written the figures of; `--fail-on-upstream-batching`
/// reads it when the session ends.
static UPSTREAM_BATCHED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// How many runs of this process were upstream-batched (`analysis::batching`).
pub fn upstream_batched_runs() -> usize {
    UPSTREAM_BATCHED_RUNS.load(Ordering::Relaxed)
}

/// The `client_lag` object: the client's read lag, tokens per read, dispatch lag, CPU, the
/// gaps by how well they are known, the bound on each figure (ms: `value` ± `bound`) and the
/// verdict with its reasons (`analysis::client_lag`). Counts a Client-bound run once.
pub fn client_lag(lag: &ClientLag) -> Value {
    let reasons = client_lag::verdict(lag, client_lag::Printed::MedianAndP99);
    if !reasons.is_empty() {
        CLIENT_BOUND_RUNS.fetch_add(1, Ordering::Relaxed);
    }
    let figures = ClientLagFigures::new(lag, reasons);
    if figures.upstream_batched {
        UPSTREAM_BATCHED_RUNS.fetch_add(1, Ordering::Relaxed);
    }
    // The one shape a matrix cell's `client_lag` has too.
    serde_json::to_value(figures).unwrap_or(Value::Null)
}

/// The console block of `client_lag` (in `extras`): one line of the client's lag and the
/// bounds, and a warning line when the run was Client-bound. Empty without the key.
pub fn client_lag_lines(extras: &Value) -> Vec<String> {
    let x = &extras["client_lag"];
    if x.is_null() {
        return Vec::new();
    }
    let f = |v: &Value, digits: usize| match v.as_f64() {
        Some(n) => format!("{n:.digits$}"),
        None => "n/a".into(),
    };
    let b = |k: &str| {
        let v = &x["bounds_ms"][k];
        if v.is_null() {
            "n/a".to_string()
        } else {
            format!("{} ± {} ms", f(&v["value"], 3), f(&v["bound"], 3))
        }
    };
    let mut lines = vec![
        format!(
            "llmspeed: client lag: read lag {} us p50, {} us p99, {} tokens per read, {}% of reads left data in the socket (held {} bytes p99); dispatch lag {} ms p50, {} ms p99; client CPU {}% of {} core(s)",
            f(&x["read_lag_us"]["p50"], 0),
            f(&x["read_lag_us"]["p99"], 0),
            f(&x["tokens_per_read_mean"], 2),
            f(&x["reads_left_data_percent"], 1),
            f(&x["socket_bytes_at_read"]["p99"], 0),
            f(&x["dispatch_lag_ms"]["p50"], 3),
            f(&x["dispatch_lag_ms"]["p99"], 3),
            f(&x["client_cpu_percent_of_cores"], 0),
            x["cores"].as_u64().unwrap_or(0),
        ),
        format!(
            "llmspeed: bounds: ITL p50 {}, p99 {}; TTFT p50 {}; TPOT p50 {}; {}% of gaps read apart, {}% with an end read together with others",
            b("itl_p50"),
            b("itl_p99"),
            b("ttft_p50"),
            b("tpot_p50"),
            f(&x["gaps_apart_percent"], 1),
            f(&x["gaps_merged_percent"], 1),
        ),
    ];
    if let Some(why) = x["no_bound_reason"].as_str() {
        // Said instead of the bounds where none could be had, beside them where some could.
        let none = x["bounds_ms"]
            .as_object()
            .is_some_and(|b| b.values().all(Value::is_null));
        let line = format!("llmspeed: bounds: {why}");
        if none {
            lines[1] = line;
        } else {
            lines.push(line);
        }
    }
    if x["client_bound"].as_bool() == Some(true) {
        let why: Vec<&str> = x["client_bound_reasons"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        lines.push(format!(
            "WARNING: llmspeed: Client-bound: {}. These figures say as much about this client as about the server (--fail-on-client-bound makes this an error).",
            why.join("; ")
        ));
    }
    if let Some(why) = x["upstream_batching_reason"].as_str() {
        lines.push(format!(
            "WARNING: llmspeed: upstream batching: {why} (--fail-on-upstream-batching makes this an error)."
        ));
    }
    lines
}

/// Why a request that ended cleanly still failed (the Python tools: "Never received a valid
/// chunk to calculate TTFT").
pub const NO_TOKEN_CHUNK: &str = "the stream ended without a chunk carrying choices";

/// Longest server message kept per failure kind, in characters.
pub const MESSAGE_MAX_CHARS: usize = 500;

/// `{"status": 503 | null, "message": "..."}`: the first message of one failure kind, cut to
/// [`MESSAGE_MAX_CHARS`] characters (never inside a character).
pub fn failure_message(status: Option<u16>, message: &str) -> Value {
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
pub struct StampSummary {
    source: Option<StampSource>,
    wakeup_us: Vec<f64>,
    /// Token gaps, and those whose two tokens came in one read (see
    /// [`Timeline::token_gaps_in_one_read`]).
    gaps: u64,
    gaps_in_one_read: u64,
}

impl StampSummary {
    pub fn add(&mut self, tl: &Timeline) {
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
    pub fn write(&self, extras: &mut Value) {
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
pub fn one_read_line(x: &Value) -> Option<String> {
    let g = &x["token_gaps_in_one_read"];
    let count = g["count"].as_u64().filter(|&n| n > 0)?;
    Some(format!(
        "llmspeed: {count} of {} token gaps ({:.2}%) came in one read with the token before: they are 0 in ITL (the client fell behind, or the server wrote them together)",
        g["of"].as_u64().unwrap_or(0),
        g["percent"].as_f64().unwrap_or(0.0)
    ))
}

/// The console line for the `stamp_source` and `client_wakeup_us` keys of `extras`.
pub fn stamps_line(x: &Value) -> String {
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

/// Our own figures of a measured run, as one JSON object (its keys sort: no order to keep).
pub fn ours(plan: &Plan, m: &Measured) -> Value {
    let mut sources: BTreeMap<&'static str, usize> = BTreeMap::new();
    let (mut input_from_server, mut input_len_differs) = (0usize, 0usize);
    let mut send_lag_ns = Vec::with_capacity(m.requests.len());
    let mut stamps = StampSummary::default();
    for f in &m.requests {
        stamps.add(&f.timeline);
        *sources
            .entry(f.timeline.token_count_source.as_str())
            .or_default() += 1;
        send_lag_ns.push(f.send_lag_ns);
        if f.input_len_from_server {
            input_from_server += 1;
            // A row's later rounds carry history the dataset did not count.
            if f.round == 0 && f.input_len != m.samples[f.index].prompt_len {
                input_len_differs += 1;
            }
        }
    }
    let (cpu_u, cpu_s) = (
        m.client_cpu.user_ns as f64 / 1e9,
        m.client_cpu.system_ns as f64 / 1e9,
    );
    let mut x = json!({
        "version": crate::VERSION,
        "latency_from": plan.latency_origin.as_str(),
        "ttft_from": plan.ttft.as_str(),
        "chat_end": plan.end.as_str(),
        "prompt_token_counting": m.counting.as_str(),
        "prompt_source": m.prompt_kind.as_str(),
        "input_lens_from_server_usage": input_from_server,
        "input_lens_differing_from_dataset": input_len_differs,
        "token_count_source": sources,
        "num_warmups": plan.num_warmups,
        "send_lag_ms": lag_summary(&send_lag_ns),
        "timer_lag_ms": lag_summary(&m.timer_lag_ns),
        "client_cpu_user_s": cpu_u,
        "client_cpu_sys_s": cpu_s,
        "client_cpu_percent_of_one_core": if m.wall_s > 0.0 { 100.0 * (cpu_u + cpu_s) / m.wall_s } else { 0.0 },
    });
    stamps.write(&mut x);
    x["client_lag"] = client_lag(&m.client_lag);
    x["preconnected"] = json!(m.preconnected);
    // `--insecure`: the server's certificate was not checked; said wherever the run is kept.
    x["insecure"] = json!(plan.insecure);
    if m.stopped {
        x["interrupted"] = json!({
            "signal": m.stop_reason,
            "requests_planned": m.planned,
            "requests_unsent": m.unsent,
            "requests_cut": m.cut,
        });
    }
    x["start_unix_ns"] = json!(m.start_unix_ns);
    x["end_unix_ns"] = json!(m.start_unix_ns + m.duration_ns);
    x
}

/// The log line of a run a stop ended early, `None` for a run that ran to its end.
pub fn stop_line(m: &Measured) -> Option<String> {
    m.stopped.then(|| {
        format!(
            "interrupted: {} requests cut short and {} never sent are left out of the figures",
            m.cut, m.unsent
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_summary_writes_the_source_and_the_wakeup_figures() {
        use crate::timeline::{Channel, EventRecord};
        let mut kernel = Timeline::new(0, 4, false);
        for (i, w) in [1_000u32, 3_000].into_iter().enumerate() {
            kernel.events.push(EventRecord {
                t: i as u64,
                tokens: 1,
                wakeup_ns: 0,
                socket_bytes: 0,
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
                socket_bytes: 0,
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

    #[test]
    fn failure_messages_keep_the_status_and_at_most_500_characters() {
        let long = "é".repeat(700);
        let v = failure_message(Some(503), &long);
        assert_eq!(v["status"], 503);
        assert_eq!(v["message"].as_str().unwrap().chars().count(), 500);
        let v = failure_message(None, "connection refused");
        assert_eq!(v, json!({"status": null, "message": "connection refused"}));
    }
}
