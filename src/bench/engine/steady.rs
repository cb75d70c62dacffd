//! The steady-state window of a closed-loop run (`--max-concurrency` with `--request-rate inf`)
//! and every throughput and latency figure recomputed inside it, in vllm-bench's shape (its
//! `metrics/steady_state.rs`: a `window` object plus flat figures).
//!
//! Owns: [`detect_window`] (records -> the window, or `None`) and [`compute`] (records and a
//! window -> [`SteadyState`]). Pure: no IO, no clock (stamps arrive as data in
//! [`RequestRecord`]s), no serialisation beyond [`SteadyState::to_json`].
//!
//! Definitions, as vllm-bench's (facts matched, not code):
//! - Busy slots: successful requests as intervals `[start, start + E2EL)`; a sweep line over
//!   starts and ends, an end before a start at the same instant (a slot handed straight on does
//!   not count twice).
//! - `threshold_abs = max(1, ceil(threshold x target))`. The window opens at the first start
//!   that lifts the count to `threshold_abs` and closes at the last end that drops it below;
//!   times are seconds after the earliest successful start.
//! - A request is "in the window" when its start lies in `[open, close)`; TTFT, TPOT, ITL and
//!   E2EL are summarised over those requests, input tokens are theirs, completed requests are
//!   those whose end lies in `[open, close)`.
//! - Output tokens: each counted event inside `[open, close)` carries
//!   `output_tokens / events` of its request's tokens. vllm-bench counts one token per event;
//!   the two agree whenever every chunk carries one token, and ours stays right when a chunk
//!   carries several (speculative decoding).
//! - A window shorter than the minimum (`--steady-state-min-window`, default
//!   `max(10 s, 10% of the run)`) is still reported, with a `warning`.

use crate::analysis::stats::Summary;
use crate::bench::engine::record::RequestRecord;
use serde_json::{json, Value};

const NS_PER_S: f64 = 1e9;

/// Bounds of the window and how it was found (vllm-bench's `SteadyStateWindow`).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Seconds after the earliest successful start.
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    pub target_concurrency: usize,
    pub threshold: f64,
    pub threshold_abs: usize,
    /// The most successful requests ever in flight at once (exact).
    pub observed_peak: usize,
    pub requests_started_in_window: usize,
    pub requests_completed_in_window: usize,
    /// Successful requests in the run.
    pub requests_total: usize,
    pub warning: Option<String>,
    /// The window's bounds on the records' own base, in ns (not serialised).
    pub open_ns: u64,
    pub close_ns: u64,
}

/// Finds the window; `None` when there are no successful requests, the count of busy slots
/// never reaches `threshold_abs`, or no request starts or ends inside the window.
pub fn detect_window(
    records: &[RequestRecord],
    target: usize,
    threshold: f64,
    min_window_s: f64,
    run_duration_s: f64,
) -> Option<Window> {
    let threshold_abs = ((threshold * target as f64).ceil() as usize).max(1);
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let mut starts: Vec<u64> = ok.iter().map(|r| r.start_ns).collect();
    let mut ends: Vec<u64> = ok.iter().map(|r| end_ns(r)).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let base = *starts.first()?;
    let (mut i, mut j, mut busy, mut peak) = (0, 0, 0usize, 0usize);
    let (mut open, mut close) = (None, None);
    while i < starts.len() || j < ends.len() {
        let end_next = match (starts.get(i), ends.get(j)) {
            (Some(s), Some(e)) => e <= s,
            (None, Some(_)) => true,
            _ => false,
        };
        if end_next {
            if busy == threshold_abs {
                close = Some(ends[j]);
            }
            busy = busy.saturating_sub(1);
            j += 1;
        } else {
            busy += 1;
            peak = peak.max(busy);
            if busy == threshold_abs && open.is_none() {
                open = Some(starts[i]);
            }
            i += 1;
        }
    }
    let open_ns = open?;
    // Every start has its end, so the count always falls back below the threshold once it
    // reached it: `close` is set whenever `open` is.
    let close_ns = close?;
    let inside = |t: u64| t >= open_ns && t < close_ns;
    let started = ok.iter().filter(|r| inside(r.start_ns)).count();
    let completed = ok.iter().filter(|r| inside(end_ns(r))).count();
    if started == 0 && completed == 0 {
        return None;
    }
    // Saturating: a zero-length request (an end sorted before its own start) must not wrap.
    let s = |t: u64| t.saturating_sub(base) as f64 / NS_PER_S;
    let duration_s = close_ns.saturating_sub(open_ns) as f64 / NS_PER_S;
    let warning = (duration_s < min_window_s).then(|| {
        format!(
            "steady-state window is {duration_s:.1}s ({:.1}% of run); may not be representative",
            100.0 * duration_s / run_duration_s.max(1e-9)
        )
    });
    Some(Window {
        start_s: s(open_ns),
        end_s: s(close_ns),
        duration_s,
        target_concurrency: target,
        threshold,
        threshold_abs,
        observed_peak: peak,
        requests_started_in_window: started,
        requests_completed_in_window: completed,
        requests_total: ok.len(),
        warning,
        open_ns,
        close_ns,
    })
}

/// vllm-bench's default minimum window: `max(10 s, 10% of the run)`.
pub fn default_min_window_s(run_duration_s: f64) -> f64 {
    (0.1 * run_duration_s).max(10.0)
}

fn end_ns(r: &RequestRecord) -> u64 {
    r.start_ns + r.e2el_ns().unwrap_or(0)
}

/// Figures inside the window. Latencies in ms; rates per second of window.
#[derive(Clone, Debug, PartialEq)]
pub struct SteadyState {
    pub window: Window,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub ttft_ms: Summary,
    pub tpot_ms: Summary,
    pub itl_ms: Summary,
    pub e2el_ms: Summary,
    /// TPOT at p90 and p99, which vllm-bench always reports whatever `--metric-percentiles` say.
    pub p90_tpot_ms: f64,
    pub p99_tpot_ms: f64,
}

/// Recomputes the figures inside `w`; `percentiles` are `--metric-percentiles`.
pub fn compute(records: &[RequestRecord], w: &Window, percentiles: &[f64]) -> SteadyState {
    let inside = |t: u64| t >= w.open_ns && t < w.close_ns;
    let (mut completed, mut input, mut output) = (0usize, 0u64, 0f64);
    let (mut ttft, mut tpot, mut itl, mut e2el) = (vec![], vec![], vec![], vec![]);
    for r in records.iter().filter(|r| r.is_success()) {
        if inside(end_ns(r)) {
            completed += 1;
        }
        if inside(r.start_ns) {
            input = input.saturating_add(r.input_tokens);
            ttft.push(r.ttft_ns().unwrap_or(0) as f64 / 1e6);
            e2el.push(r.e2el_ns().unwrap_or(0) as f64 / 1e6);
            if let Some(t) = r.tpot_ns() {
                tpot.push(t / 1e6);
            }
            itl.extend(r.itls_ns().map(|g| g as f64 / 1e6));
        }
        let events = r.chunk_times_ns.len();
        if events > 0 {
            let per_event = r.output_tokens as f64 / events as f64;
            let n = r.chunk_times_ns.iter().filter(|&&t| inside(t)).count();
            output += per_event * n as f64;
        }
    }
    let d = w.duration_s.max(1e-9);
    let sum = |xs: &[f64], ps: &[f64]| Summary::or_zero(xs, ps);
    let tpot90 = sum(&tpot, &[90.0, 99.0]);
    SteadyState {
        window: w.clone(),
        request_throughput: completed as f64 / d,
        input_throughput: input as f64 / d,
        output_throughput: output / d,
        total_token_throughput: (input as f64 + output) / d,
        ttft_ms: sum(&ttft, percentiles),
        tpot_ms: sum(&tpot, percentiles),
        itl_ms: sum(&itl, percentiles),
        e2el_ms: sum(&e2el, percentiles),
        p90_tpot_ms: tpot90.percentiles[0].1,
        p99_tpot_ms: tpot90.percentiles[1].1,
    }
}

impl SteadyState {
    /// vllm-bench's `steady_state` object (its keys first, in its order), then the same
    /// figures for ITL and E2EL and the standard deviations, which it does not report.
    pub fn to_json(&self) -> Value {
        let w = &self.window;
        let pct =
            |s: &Summary| -> Value { s.percentiles.iter().map(|&(p, v)| json!([p, v])).collect() };
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put(
            "window",
            json!({
                "start_s": w.start_s,
                "end_s": w.end_s,
                "duration_s": w.duration_s,
                "target_concurrency": w.target_concurrency,
                "threshold": w.threshold,
                "threshold_abs": w.threshold_abs,
                "observed_peak": w.observed_peak,
                "requests_started_in_window": w.requests_started_in_window,
                "requests_completed_in_window": w.requests_completed_in_window,
                "requests_total": w.requests_total,
                "warning": w.warning,
            }),
        );
        put("request_throughput", json!(self.request_throughput));
        put("input_throughput", json!(self.input_throughput));
        put("output_throughput", json!(self.output_throughput));
        put("total_token_throughput", json!(self.total_token_throughput));
        put("mean_ttft_ms", json!(self.ttft_ms.mean));
        put("median_ttft_ms", json!(self.ttft_ms.median));
        put("percentiles_ttft_ms", pct(&self.ttft_ms));
        put("mean_tpot_ms", json!(self.tpot_ms.mean));
        put("median_tpot_ms", json!(self.tpot_ms.median));
        put("p90_tpot_ms", json!(self.p90_tpot_ms));
        put("p99_tpot_ms", json!(self.p99_tpot_ms));
        put("std_ttft_ms", json!(self.ttft_ms.std));
        put("std_tpot_ms", json!(self.tpot_ms.std));
        put("percentiles_tpot_ms", pct(&self.tpot_ms));
        for (name, s) in [("itl", &self.itl_ms), ("e2el", &self.e2el_ms)] {
            put(&format!("mean_{name}_ms"), json!(s.mean));
            put(&format!("median_{name}_ms"), json!(s.median));
            put(&format!("std_{name}_ms"), json!(s.std));
            put(&format!("percentiles_{name}_ms"), pct(s));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A successful request from `start` to `end` (ms) with one-token events at `events` (ms).
    fn req(start: u64, end: u64, events: &[u64]) -> RequestRecord {
        let mut chunk_times_ns: Vec<u64> = events.iter().map(|&t| t * MS).collect();
        chunk_times_ns.push(end * MS);
        RequestRecord {
            start_ns: start * MS,
            output_tokens: chunk_times_ns.len() as u64,
            chunk_times_ns,
            input_tokens: 100,
            ..Default::default()
        }
    }

    /// Two slots, threshold 0.95 -> both must be busy. Hand-built timeline (ms):
    ///   A [0, 100)   B [40, 140)   C [100, 200)   D [140, 230)   E [200, 250)
    /// B's start at 40 fills both slots: the window opens. At each hand-over (A->C at 100,
    /// B->D at 140, C->E at 200) the end comes first, so the count dips to 1 for an instant;
    /// the window closes at the *last* dip, D's end at 230 (E alone is left).
    fn timeline() -> Vec<RequestRecord> {
        vec![
            req(0, 100, &[10, 50]),
            req(40, 140, &[60, 90]),
            req(100, 200, &[120, 150]),
            req(140, 230, &[160, 220]),
            req(200, 250, &[210, 240]),
        ]
    }

    #[test]
    fn window_opens_at_the_first_full_house_and_closes_at_the_last_drop() {
        let w = detect_window(&timeline(), 2, 0.95, 0.0, 0.25).unwrap();
        assert_eq!((w.open_ns, w.close_ns), (40 * MS, 230 * MS));
        assert_eq!(w.threshold_abs, 2);
        assert_eq!(w.observed_peak, 2);
        assert!((w.start_s - 0.040).abs() < 1e-12 && (w.end_s - 0.230).abs() < 1e-12);
        assert!((w.duration_s - 0.190).abs() < 1e-12);
        // Starts in [40, 230): B, C, D, E. Ends in [40, 230): A (100), B (140), C (200).
        assert_eq!(w.requests_started_in_window, 4);
        assert_eq!(w.requests_completed_in_window, 3);
        assert_eq!(w.requests_total, 5);
        assert!(w.warning.is_none());
        // Below the minimum: still reported, with a warning naming the share of the run.
        let w = detect_window(&timeline(), 2, 0.95, 10.0, 0.25).unwrap();
        assert_eq!(
            w.warning.as_deref(),
            Some("steady-state window is 0.2s (76.0% of run); may not be representative")
        );
    }

    #[test]
    fn threshold_is_a_ceiling_of_the_target_share() {
        // 4 slots at 0.5 -> 2 busy is enough; at 0.95 -> 4 needed, never reached here.
        let w = detect_window(&timeline(), 4, 0.5, 0.0, 0.25).unwrap();
        assert_eq!(w.threshold_abs, 2);
        assert_eq!((w.open_ns, w.close_ns), (40 * MS, 230 * MS));
        assert!(detect_window(&timeline(), 4, 0.95, 0.0, 0.25).is_none());
        // A tiny share still needs one busy slot: the window is the whole busy span.
        let w = detect_window(&timeline(), 2, 0.01, 0.0, 0.25).unwrap();
        assert_eq!(w.threshold_abs, 1);
        assert_eq!((w.open_ns, w.close_ns), (0, 250 * MS));
    }

    #[test]
    fn failed_requests_hold_no_slot_and_no_success_means_no_window() {
        let mut t = timeline();
        // B failed: without it only one slot is ever busy until C and D overlap at 140.
        t[1].error = Some(crate::timeline::ErrorKind::TimeoutTotal);
        let w = detect_window(&t, 2, 0.95, 0.0, 0.25).unwrap();
        assert_eq!((w.open_ns, w.close_ns), (140 * MS, 230 * MS));
        for r in &mut t {
            r.error = Some(crate::timeline::ErrorKind::TimeoutTotal);
        }
        assert!(detect_window(&t, 2, 0.95, 0.0, 0.25).is_none());
        assert!(detect_window(&[], 2, 0.95, 0.0, 0.25).is_none());
    }

    #[test]
    fn figures_inside_the_window_by_hand() {
        let t = timeline();
        let w = detect_window(&t, 2, 0.95, 0.0, 0.25).unwrap();
        let s = compute(&t, &w, &[50.0]);
        let d = 0.190;
        // Completed inside: A, B, C -> 3 / 0.19 s.
        assert!((s.request_throughput - 3.0 / d).abs() < 1e-9);
        // Input of the 4 requests started inside.
        assert!((s.input_throughput - 400.0 / d).abs() < 1e-9);
        // Events in [40, 230): A 50, 100; B 60, 90, 140; C 120, 150, 200; D 160, 220;
        // E 210 (230 is out, 240 and 250 too) -> 11 one-token events.
        assert!((s.output_throughput - 11.0 / d).abs() < 1e-9);
        assert!((s.total_token_throughput - 411.0 / d).abs() < 1e-9);
        // TTFT of B, C, D, E: 20, 20, 20, 10 ms.
        assert!((s.ttft_ms.mean - 17.5).abs() < 1e-9);
        assert_eq!(s.ttft_ms.percentiles, vec![(50.0, 20.0)]);
        // E2EL of B, C, D, E: 100, 100, 90, 50.
        assert!((s.e2el_ms.mean - 85.0).abs() < 1e-9);
        // TPOT = (E2EL - TTFT) / 2: 40, 40, 35, 20.
        assert!((s.tpot_ms.mean - 33.75).abs() < 1e-9);
        // ITL of B, C, D, E: 30 50 | 30 50 | 60 10 | 30 10.
        assert!((s.itl_ms.mean - 270.0 / 8.0).abs() < 1e-9);
        let v = s.to_json();
        assert_eq!(v["window"]["threshold_abs"], 2);
        assert_eq!(v["percentiles_ttft_ms"], json!([[50.0, 20.0]]));
        assert!(v["window"]["warning"].is_null());
    }

    /// The naive twin: the window from counts taken afresh at every start and end, with the
    /// sweep line's tie rule (at one instant, ends before starts) written out as sets.
    fn naive(iv: &[(u64, u64)], need: usize) -> Option<(u64, u64)> {
        let count = |f: &dyn Fn(u64, u64) -> bool| iv.iter().filter(|&&(s, e)| f(s, e)).count();
        // After every event at t: started at or before t, not yet ended.
        let after = |t: u64| count(&|s, e| s <= t && e > t);
        let open = iv.iter().map(|x| x.0).filter(|&t| after(t) >= need).min()?;
        let close = iv
            .iter()
            .map(|x| x.1)
            .filter(|&t| {
                // Before the ends at t (started earlier, ending at or after t) and after them.
                count(&|s, e| s < t && e >= t) >= need && count(&|s, e| s < t && e > t) < need
            })
            .max()?;
        Some((open, close))
    }

    proptest::proptest! {
        #[test]
        fn sweep_line_matches_the_naive_count(
            raw in proptest::collection::vec((0u64..40, 1u64..25), 1..24),
            need in 1usize..6,
        ) {
            // Small integer times: plenty of ties between starts and ends.
            let iv: Vec<(u64, u64)> = raw.iter().map(|&(s, d)| (s, s + d)).collect();
            let recs: Vec<RequestRecord> = iv
                .iter()
                .map(|&(s, e)| RequestRecord {
                    start_ns: s,
                    chunk_times_ns: vec![e],
                    output_tokens: 1,
                    ..Default::default()
                })
                .collect();
            let got = detect_window(&recs, need, 1.0, 0.0, 1.0);
            let want = naive(&iv, need).and_then(|(o, c)| {
                let started = iv.iter().filter(|x| x.0 >= o && x.0 < c).count();
                let completed = iv.iter().filter(|x| x.1 >= o && x.1 < c).count();
                (started + completed > 0).then_some((o, c, started, completed))
            });
            let got = got.map(|w| (
                w.open_ns,
                w.close_ns,
                w.requests_started_in_window,
                w.requests_completed_in_window,
            ));
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn multi_token_events_carry_their_share_of_the_tokens() {
        let mut t = timeline();
        // A's three events carried 6 tokens: its two inside (50, 100) count 4.
        t[0].output_tokens = 6;
        let w = detect_window(&t, 2, 0.95, 0.0, 0.25).unwrap();
        let s = compute(&t, &w, &[50.0]);
        assert!((s.output_throughput - 13.0 / 0.190).abs() < 1e-9);
    }
}
