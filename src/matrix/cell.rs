//! One sustained-decode cell: C streams in a closed loop sharing one warm prompt, a readiness
//! gate, a fixed window, then cancel and drain. Produces a [`DecodeCell`] with its verdict.
//!
//! Owns the window arithmetic (tokens stamped inside `[open, close)`), the per-stream loop
//! detectors (run live through the stream observer, one per channel) and the client's own
//! CPU/timer-lag figures. It must never format, lock or allocate per token: the observer only
//! bumps counters and feeds the detectors; everything else is computed after the window.

use crate::analysis::repetition::{Loop, RepetitionConfig, RepetitionDetector};
use crate::analysis::{client_lag, stats};
use crate::clock::Clock;
use crate::matrix::status::{post_run, CellObservation, WindowQueue};
use crate::net::{Cancel, Client, Flow, StreamObserver, StreamRequest};
use crate::progress::{Event, Headroom, Phase, Progress};
use crate::report::client_lag::ClientLagFigures;
use crate::report::{
    push_first_per_kind, DecodeCell, ErrorCount, ErrorMessage, GapHistogram, LoopInfo,
    RequestSummary, ServerSample, TokenBins, GAP_BINS_PER_DECADE, GAP_DECADES, GAP_LO_US,
    MAX_SERVER_SAMPLES, MAX_TOKEN_BINS,
};
use crate::server::sampler::{
    mean_queue_wait_ms, sample_once, unreachable, wait_drained, Drain, MetricNames, MetricsSample,
    Sampler,
};
use crate::timeline::{Channel, ErrorKind, EventRecord, Timeline, TokenCountSource};
use crate::workload::request_id::RequestId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often live figures go to the progress display during a window (plain mode prints
/// fewer of them).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How a cell runs.
#[derive(Clone, Debug)]
pub struct CellConfig {
    pub concurrency: u32,
    pub duration: Duration,
    /// Longest wait for the readiness gate before the window opens anyway (the cell is then at
    /// best Queued), or, when no stream has produced a token, the cell is Failed unmeasured.
    pub ready_timeout: Duration,
    /// The server's metrics must show the gate condition in consecutive samples spanning this
    /// long before the window opens (zero: the first qualifying sample opens it).
    pub ready_stable: Duration,
    pub drain_timeout: Duration,
    pub repetition: RepetitionConfig,
    /// `/metrics` polling period during the cell (≤ 1 s).
    pub sample_period: Duration,
    /// When set, request `n` of stream `s` carries `x-request-id:` the UUID
    /// [`RequestId::Matrix`] of this run tag and attempt, the cell, `s` and `n`, so the server's
    /// logs and traces can be joined to the report's requests (and servers that validate the
    /// header as a UUID accept it).
    pub request_ids: Option<CellIds>,
}

/// What a cell's request ids carry besides the cell and the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellIds {
    /// [`crate::workload::request_id::run_tag`] of the run id.
    pub run: u32,
    /// The cell's retry (0 first): a retry's requests never reuse the first attempt's ids.
    pub attempt: u8,
}

/// One finished request of the cell.
struct Finished {
    stream: u32,
    tl: Timeline,
    request_id: Option<String>,
    looped: Option<(Channel, Loop)>,
}

/// The live observer of one stream: first-token readiness and loop detection.
struct Watch {
    content: RepetitionDetector,
    reasoning: RepetitionDetector,
    looped: Option<(Channel, Loop)>,
    saw_token: bool,
    shared: Arc<Counters>,
}

/// Counters every stream of a cell bumps.
#[derive(Default)]
struct Counters {
    /// Streams that have produced a token.
    ready: AtomicU64,
    /// Failed requests (not our own cancellations).
    failures: AtomicU64,
    /// Requests refused a connection since the last request that was not (set once per
    /// request): a server that died refuses every stream's every attempt.
    refused_in_a_row: AtomicU64,
    /// Streams whose latest attempt was refused a connection (the server is gone for them),
    /// and the latest moment one of them last heard from the server (the end of its last
    /// attempt that was not refused: the reset, or its last request). All C lost: the server
    /// died, and that moment ends the window. `lost` wakes the window at each new loss.
    lost_streams: AtomicU64,
    lost_at: AtomicU64,
    lost: tokio::sync::Notify,
    /// All streams' tokens so far, for the live progress line only (one relaxed add per event).
    tokens: AtomicU64,
    /// Streams inside a request now (one add and one subtract per request, not per token).
    active: AtomicU64,
    /// The kernel-stamped reads of the requests that ended since the live display last took
    /// them: how many, their read lags' sum and largest (ns). Added once per request, when it
    /// ends ([`Counters::note_reads`]), never per token.
    lag_reads: AtomicU64,
    lag_sum_ns: AtomicU64,
    lag_max_ns: AtomicU64,
}

impl Counters {
    /// A finished request's read lags (the read lag of `analysis::client_lag`).
    fn note_reads(&self, tl: &Timeline) {
        let (mut n, mut sum, mut max) = (0u64, 0u64, 0u64);
        for lag in tl.reads().filter_map(|r| r.lag_ns) {
            n += 1;
            sum += u64::from(lag);
            max = max.max(u64::from(lag));
        }
        if n > 0 {
            self.lag_reads.fetch_add(n, Ordering::Relaxed);
            self.lag_sum_ns.fetch_add(sum, Ordering::Relaxed);
            self.lag_max_ns.fetch_max(max, Ordering::Relaxed);
        }
    }

    /// The read lags noted since the last call (count, sum, max), starting afresh. A request
    /// ending between the three swaps lands in this second or the next, never lost.
    fn take_reads(&self) -> (u64, u64, u64) {
        (
            self.lag_reads.swap(0, Ordering::Relaxed),
            self.lag_sum_ns.swap(0, Ordering::Relaxed),
            self.lag_max_ns.swap(0, Ordering::Relaxed),
        )
    }
}

impl StreamObserver for Watch {
    fn on_event(&mut self, rec: &EventRecord, text: Option<&[u8]>) -> Flow {
        if rec.tokens > 0 && !self.saw_token {
            self.saw_token = true;
            self.shared.ready.fetch_add(1, Ordering::Relaxed);
        }
        self.shared
            .tokens
            .fetch_add(rec.tokens as u64, Ordering::Relaxed);
        if let (Some(t), None) = (text, &self.looped) {
            let det = match rec.channel {
                Channel::Content => &mut self.content,
                Channel::Reasoning => &mut self.reasoning,
                _ => return Flow::Continue,
            };
            det.push_json(t);
            if let Some(l) = det.verdict() {
                // Once per request: the clone happens at most once.
                self.looped = Some((rec.channel, l.clone()));
            }
        }
        // A looping stream keeps running: its figures are kept and marked, not thrown away.
        Flow::Continue
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;

    fn watch() -> Watch {
        let det = || RepetitionDetector::new(RepetitionConfig::default()).unwrap();
        Watch {
            content: det(),
            reasoning: det(),
            looped: None,
            saw_token: false,
            shared: Arc::new(Counters::default()),
        }
    }

    fn feed(w: &mut Watch, text: &[u8], times: usize) {
        let rec = EventRecord {
            t: 0,
            tokens: 1,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel: Channel::Content,
        };
        for _ in 0..times {
            w.on_event(&rec, Some(text));
        }
    }

    #[test]
    fn observer_text_is_unescaped_before_the_loop_rule() {
        // Blank lines arrive as `\n` escapes: whitespace, never a loop (read raw, they were a
        // 2-character loop).
        let mut w = watch();
        feed(&mut w, br"\n\n", 3000);
        assert!(w.looped.is_none(), "{:?}", w.looped);
        // Two ideographs as \uXXXX escapes: a 2-character period, not a 12-byte one.
        let mut w = watch();
        feed(&mut w, br"\u4e2d\u6587", 3000);
        let (_, l) = w.looped.expect("a loop");
        assert_eq!((l.period_chars, l.excerpt.as_str()), (2, "中文"));
    }
}

async fn worker(
    stream: u32,
    client: Client,
    req: Arc<StreamRequest>,
    ids: Option<(CellIds, u64, u32)>,
    cancel: Cancel,
    shared: Arc<Counters>,
    rep: RepetitionConfig,
) -> Vec<Finished> {
    let mut out = Vec::new();
    // This stream's own copy, whose id changes per request (once per request, never per token).
    let mut req = StreamRequest::clone(&req);
    let mut n = 0u64;
    // The end of this stream's last attempt that was not refused, and whether it counts as
    // lost (its latest attempt was refused).
    let (mut last_heard, mut lost) = (client.clock().raw(), false);
    let det = || RepetitionDetector::new(rep);
    let (Ok(content), Ok(reasoning)) = (det(), det()) else {
        return out;
    };
    let mut w = Watch {
        content,
        reasoning,
        looped: None,
        saw_token: false,
        shared,
    };
    while !cancel.is_cancelled() {
        w.content.reset();
        w.reasoning.reset();
        w.looped = None;
        req.request_id = ids.map(|(i, context, concurrency)| {
            RequestId::Matrix {
                run: i.run,
                attempt: i.attempt,
                context,
                concurrency,
                stream,
                n,
            }
            .to_string()
        });
        n += 1;
        let intended = client.clock().raw();
        w.shared.active.fetch_add(1, Ordering::Relaxed);
        let tl = client.stream(&req, intended, &mut w, &cancel).await;
        w.shared.active.fetch_sub(1, Ordering::Relaxed);
        w.shared.note_reads(&tl);
        let failed = matches!(tl.error_kind(), Some(k) if k != ErrorKind::Cancelled);
        match &tl.outcome {
            Err(e) if unreachable(e) => w.shared.refused_in_a_row.fetch_add(1, Ordering::Relaxed),
            _ => w.shared.refused_in_a_row.swap(0, Ordering::Relaxed),
        };
        let refused = matches!(&tl.outcome, Err(e) if unreachable(e));
        if !refused {
            last_heard = tl.end.unwrap_or_else(|| client.clock().raw());
        }
        if refused != lost {
            lost = refused;
            let s = &w.shared;
            if lost {
                s.lost_at.fetch_max(last_heard, Ordering::Relaxed);
                s.lost_streams.fetch_add(1, Ordering::Relaxed);
                s.lost.notify_one();
            } else {
                s.lost_streams.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // The detectors check at intervals; run the last check on what the stream left.
        if w.looped.is_none() {
            if let Some(l) = w.content.finish() {
                w.looped = Some((Channel::Content, l.clone()));
            } else if let Some(l) = w.reasoning.finish() {
                w.looped = Some((Channel::Reasoning, l.clone()));
            }
        }
        out.push(Finished {
            stream,
            tl,
            request_id: req.request_id.take(),
            looped: w.looped.take(),
        });
        if failed {
            w.shared.failures.fetch_add(1, Ordering::Relaxed);
            // A refusing server must not be hammered in a tight loop.
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
    out
}

/// Measures how late a 10 ms timer fires while the cell runs (a saturated client shows here).
fn lag_probe(clock: Clock, cancel: Cancel) -> tokio::task::JoinHandle<Vec<f64>> {
    tokio::spawn(async move {
        let period = Duration::from_millis(10);
        let mut lags = Vec::with_capacity(4096);
        while !cancel.is_cancelled() {
            let t0 = clock.raw();
            tokio::time::sleep(period).await;
            let slept = clock.delta_ns(t0, clock.raw()) as f64 / 1e6;
            lags.push((slept - 10.0).max(0.0));
        }
        lags
    })
}

/// The pure half: figures of a cell from its requests and the window bounds.
pub struct WindowInput<'a> {
    pub clock: &'a Clock,
    pub open: u64,
    pub close: u64,
    /// Server running-request samples inside the window.
    pub running: &'a [f64],
}

/// What the window showed besides the figures, for the verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowFacts {
    /// Distinct streams with tokens stamped inside the window.
    pub streams_with_tokens: u64,
    /// The most requests that were between their first token and their end at one instant of
    /// the window (the client's view of how many the server ran at once).
    pub peak_decoding: u64,
}

/// TTFT and time between tokens of one request, from its events inside `[open, close)` only.
/// TTFT counts only a request sent inside the window whose first token is also inside it; time
/// between tokens is (last − first inside event) / tokens after the first inside event.
fn in_window_latencies(
    c: &Clock,
    tl: &Timeline,
    open: u64,
    close: u64,
) -> (Option<f64>, Option<f64>) {
    let inside = |t: u64| t >= open && t < close;
    let start = tl.send_start.unwrap_or(tl.intended_start);
    let ttft = match tl.first_token {
        Some(t) if start >= open && inside(t) => Some(c.delta_ns(start, t) as f64 / 1e6),
        _ => None,
    };
    let mut first = None;
    let mut last = 0u64;
    let mut after_first = 0u64;
    for e in tl.events.iter().filter(|e| e.tokens > 0 && inside(e.t)) {
        match first {
            None => first = Some(e.t),
            Some(_) => after_first += e.tokens as u64,
        }
        last = e.t;
    }
    let tbt = first
        .filter(|_| after_first > 0)
        .map(|f| c.delta_ns(f, last) as f64 / 1e6 / after_first as f64)
        .filter(|t| *t > 0.0);
    (ttft, tbt)
}

/// The most of `spans` (half-open `[a, b)`) that overlap at one instant.
fn peak_overlap(spans: &mut [(u64, u64)]) -> u64 {
    let mut edges: Vec<(u64, i64)> = spans
        .iter()
        .filter(|(a, b)| b > a)
        .flat_map(|&(a, b)| [(a, 1), (b, -1)])
        .collect();
    // An end and a start at the same stamp do not overlap: ends sort first.
    edges.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as u64
}

/// Per-request and whole-window figures. Tokens count when their event is stamped inside
/// `[open, close)`; requests that straddle the window contribute only their inside part, and
/// TTFT and time between tokens use only events inside the window (ramp-up before it and the
/// drain after it never leak in).
pub fn window_figures(
    cell: &mut DecodeCell,
    input: &WindowInput,
    requests: &[(u32, &Timeline)],
) -> WindowFacts {
    let c = input.clock;
    let window_s = c.delta_ns(input.open, input.close) as f64 / 1e9;
    let mut total = 0u64;
    let mut ttfts = Vec::new();
    let mut rates = Vec::new();
    let mut tbts = Vec::new();
    let mut completed = 0u64;
    let mut active_ns = 0f64;
    let mut streams: Vec<u32> = Vec::new();
    let mut decoding: Vec<(u64, u64)> = Vec::new();
    for &(stream, tl) in requests {
        let inside: u64 = tl
            .events
            .iter()
            .filter(|e| e.t >= input.open && e.t < input.close)
            .map(|e| e.tokens as u64)
            .sum();
        total += inside;
        if inside > 0 {
            streams.push(stream);
        }
        let start = tl.send_start.unwrap_or(tl.intended_start);
        let (ttft, tbt) = in_window_latencies(c, tl, input.open, input.close);
        if let Some(t) = ttft {
            ttfts.push(t);
        }
        if let Some(t) = tbt {
            tbts.push(t);
            rates.push(1000.0 / t);
        }
        let end = tl.end.unwrap_or(input.close);
        if tl.is_ok() && end >= input.open && end < input.close {
            completed += 1;
        }
        let (a, b) = (start.max(input.open), end.min(input.close));
        if b > a {
            active_ns += c.delta_ns(a, b) as f64;
        }
        if let Some(f) = tl.first_token {
            decoding.push((f.max(input.open), end.min(input.close)));
        }
        cell.requests.push(RequestSummary {
            stream,
            start_ms: c.signed_delta_ns(input.open, start) as f64 / 1e6,
            ttft_ms: ttft,
            tbt_ms_mean: tbt,
            end_ms: tl
                .end
                .map(|e| c.signed_delta_ns(input.open, e) as f64 / 1e6),
            output_tokens: tl.output_tokens(),
            window_tokens: inside,
            finish_reason: tl.finish_reason,
            error: tl.error_kind().filter(|k| *k != ErrorKind::Cancelled),
            looped: false,
            request_id: None,
        });
    }
    cell.token_bins = token_bins(c, input.open, requests);
    cell.gap_histogram = gap_histogram(c, input.open, input.close, requests);
    cell.measured_s = Some(window_s);
    cell.window_start_ns = Some(c.epoch_ns(input.open));
    cell.window_end_ns = Some(c.epoch_ns(input.close));
    cell.output_tokens = Some(total);
    cell.output_tok_per_s = (window_s > 0.0).then(|| total as f64 / window_s);
    cell.ttft_ms_p50 = stats::median(&ttfts);
    cell.tbt_ms_p50 = stats::median(&tbts);
    cell.per_request_tok_per_s = stats::median(&rates);
    cell.completed_requests = Some(completed);
    cell.avg_active_requests =
        stats::mean(input.running).or_else(|| (window_s > 0.0).then(|| active_ns / 1e9 / window_s));
    streams.sort_unstable();
    streams.dedup();
    WindowFacts {
        streams_with_tokens: streams.len() as u64,
        peak_decoding: peak_overlap(&mut decoding),
    }
}

/// Every token event of the cell counted into equal bins (100 ms, wider when the cell is long
/// enough to need more than [`MAX_TOKEN_BINS`]); `None` when no event carried tokens.
fn token_bins(c: &Clock, open: u64, requests: &[(u32, &Timeline)]) -> Option<TokenBins> {
    let stamps = || {
        requests
            .iter()
            .flat_map(|(_, tl)| tl.events.iter())
            .filter(|e| e.tokens > 0)
    };
    let first = stamps().map(|e| e.t).min()?;
    let last = stamps().map(|e| e.t).max()?;
    let span_ns = c.delta_ns(first, last);
    let bin_ns = (span_ns / MAX_TOKEN_BINS as u64 + 1).max(100_000_000);
    let n = (span_ns / bin_ns + 1) as usize;
    let mut tokens = vec![0u64; n];
    for e in stamps() {
        let i = ((c.delta_ns(first, e.t) / bin_ns) as usize).min(n - 1);
        tokens[i] += e.tokens as u64;
    }
    Some(TokenBins {
        start_ms: c.signed_delta_ns(open, first) as f64 / 1e6,
        bin_ms: bin_ns as f64 / 1e6,
        tokens,
    })
}

/// Every gap between consecutive token events of one request, both inside `[open, close)`,
/// binned log-spaced and with exact percentiles; `None` when there is no such gap. Runs once
/// after the window (the gaps are collected into one vector here, never on the token path).
/// An event carrying several tokens is one gap, as vLLM's inter-token latency counts chunks.
fn gap_histogram(
    c: &Clock,
    open: u64,
    close: u64,
    requests: &[(u32, &Timeline)],
) -> Option<GapHistogram> {
    let inside = |t: u64| t >= open && t < close;
    let mut gaps_ms: Vec<f64> = Vec::new();
    for (_, tl) in requests {
        let mut prev: Option<u64> = None;
        for e in tl.events.iter().filter(|e| e.tokens > 0 && inside(e.t)) {
            if let Some(p) = prev {
                gaps_ms.push(c.delta_ns(p, e.t) as f64 / 1e6);
            }
            prev = Some(e.t);
        }
    }
    if gaps_ms.is_empty() {
        return None;
    }
    let n = (GAP_DECADES * GAP_BINS_PER_DECADE) as usize;
    let mut counts = vec![0u64; n];
    for &g in &gaps_ms {
        counts[gap_bin(g * 1000.0, n)] += 1;
    }
    gaps_ms.sort_by(f64::total_cmp);
    let p = |q: f64| stats::percentile_sorted(&gaps_ms, q).unwrap_or(0.0);
    Some(GapHistogram {
        lo_us: GAP_LO_US,
        bins_per_decade: GAP_BINS_PER_DECADE,
        counts,
        gaps: gaps_ms.len() as u64,
        p50_ms: p(50.0),
        p90_ms: p(90.0),
        p99_ms: p(99.0),
    })
}

/// The bin of a gap of `us` microseconds among `n` (clamped to the first and last).
fn gap_bin(us: f64, n: usize) -> usize {
    if us.is_nan() || us < GAP_LO_US {
        return 0;
    }
    let mut i = ((us / GAP_LO_US).log10() * f64::from(GAP_BINS_PER_DECADE)).floor() as usize;
    // log10 of an exact edge can land a hair below it (10^0.3 * 10 → 2.9999…); the edge itself
    // belongs to the bin it opens.
    let edge = |k: usize| GAP_LO_US * 10f64.powf(k as f64 / f64::from(GAP_BINS_PER_DECADE));
    if i + 1 < n && us >= edge(i + 1) {
        i += 1;
    } else if i > 0 && us < edge(i) {
        i -= 1;
    }
    i.min(n - 1)
}

/// The token-count source of a cell from every request that counted tokens: one source, or
/// the most frequent with a note naming the mix.
fn token_source(sources: &[TokenCountSource]) -> (Option<TokenCountSource>, Option<String>) {
    let mut counts: Vec<(TokenCountSource, u64)> = Vec::new();
    for &s in sources {
        match counts.iter_mut().find(|c| c.0 == s) {
            Some(c) => c.1 += 1,
            None => counts.push((s, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.as_str().cmp(b.0.as_str())));
    let note = (counts.len() > 1).then(|| {
        let parts: Vec<String> = counts
            .iter()
            .map(|(s, n)| format!("{} ×{n}", s.as_str()))
            .collect();
        format!(
            "requests counted tokens from mixed sources ({}): the server sent per-chunk usage to some requests only",
            parts.join(", ")
        )
    });
    (counts.first().map(|c| c.0), note)
}

/// Readings of the server's generation-token counter at each end of a window; the one with the
/// shortest round trip sets the bound.
const COUNTER_READINGS: usize = 3;

/// The server's generation-token counter and the stamp a window bound takes from its reading:
/// the middle of the `/metrics` round trip. Where inside the round trip the server read its
/// counters is unknown (vLLM's frontend, busy with streams, answers tens of ms late); a bound at
/// the middle of both readings' round trips gives back at one end what it takes at the other
/// (a bound after the first answer and before the second request gave the server both round
/// trips' tokens), and of [`COUNTER_READINGS`] readings the shortest round trip leaves the
/// least doubt. A failed reading is `None` with the stamp of the last attempt.
async fn read_generation_tokens(
    client: &Client,
    names: &MetricNames,
    clock: &Clock,
) -> (Option<f64>, u64) {
    let mut best: Option<(u64, f64, u64)> = None;
    let mut last = clock.raw();
    for _ in 0..COUNTER_READINGS {
        let sent = clock.raw();
        let count = sample_once(client, names)
            .await
            .and_then(|s| s.generated(names));
        let back = clock.raw();
        let rtt = back.saturating_sub(sent);
        last = sent + rtt / 2;
        if let Some(v) = count {
            if best.is_none_or(|(r, _, _)| rtt < r) {
                best = Some((rtt, v, last));
            }
        }
    }
    match best {
        Some((_, v, at)) => (Some(v), at),
        None => (None, last),
    }
}

/// The client–server token comparison over the window: `(server tokens, client − server,
/// why unavailable)`. `counter` is `MetricsSample::generated` before and after the window: a
/// counter that moves only when a request ends (llama.cpp) measures a window only with the
/// tokens of the requests in flight from `/slots`, so without them no difference is drawn.
fn token_check(
    names: &MetricNames,
    counter: (Option<f64>, Option<f64>),
    client_tokens: Option<u64>,
) -> (Option<u64>, Option<i64>, Option<String>) {
    let Some(name) = names.generation_tokens else {
        return (None, None, None);
    };
    if names.generation_counted_at_end && (counter.0.is_none() || counter.1.is_none()) {
        return (
            None,
            None,
            Some(format!(
                "unavailable: {name} counts a request's tokens only when it ends, and /slots (each busy slot's n_decoded) could not be read consistently with it before and after the window (is llama-server running with --no-slots?)"
            )),
        );
    }
    match (counter, client_tokens) {
        ((Some(a), Some(b)), Some(client)) => {
            let server = (b - a).max(0.0) as u64;
            (Some(server), Some(client as i64 - server as i64), None)
        }
        _ => (
            None,
            None,
            Some(format!(
                "unavailable: {name} could not be read before and after the window"
            )),
        ),
    }
}

/// Tokens the client received in `[from, to)` over every request of the cell, for the
/// comparison with the server's count. The server counts every token; chunks can carry two
/// (llama.cpp sends a byte-fallback piece that is not UTF-8 on its own with the next one), which
/// on a small vocabulary reads as a ~1.5% difference. So each request's share is scaled by its
/// usage total over its chunk count, and a request without usage (one cut at the window's end)
/// by the ratio of the cell's requests that have one.
fn client_tokens_between(finished: &[Finished], from: u64, to: u64) -> u64 {
    let (mut counted, mut chunked) = (0u64, 0u64);
    for f in finished.iter().filter(|f| f.tl.usage.is_some()) {
        counted += f.tl.output_tokens();
        chunked += f.tl.event_tokens();
    }
    let cell_ratio = if chunked > 0 && counted > chunked {
        counted as f64 / chunked as f64
    } else {
        1.0
    };
    let mut total = 0.0;
    for f in finished {
        let inside: u64 =
            f.tl.events
                .iter()
                .filter(|e| e.t >= from && e.t < to)
                .map(|e| e.tokens as u64)
                .sum();
        let events = f.tl.event_tokens();
        let ratio = match f.tl.usage {
            Some(u) if events > 0 && u.completion_tokens > events => {
                u.completion_tokens as f64 / events as f64
            }
            Some(_) => 1.0,
            None => cell_ratio,
        };
        total += inside as f64 * ratio;
    }
    total.round() as u64
}

/// The workers' requests; a worker that panicked (a bug of ours) lost its requests, and is
/// counted as one failed request with its message rather than vanishing.
async fn gather(
    workers: Vec<tokio::task::JoinHandle<Vec<Finished>>>,
) -> (Vec<Finished>, Vec<String>) {
    let mut finished = Vec::new();
    let mut panics = Vec::new();
    for w in workers {
        match w.await {
            Ok(v) => finished.extend(v),
            Err(e) => panics.push(match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a stream worker panicked".into()),
                Err(e) => format!("a stream worker ended abnormally: {e}"),
            }),
        }
    }
    (finished, panics)
}

/// What the caller gets back besides the cell: whether the user stopped the run mid-cell, and
/// the connection error when the server could no longer be reached at the cell's end.
pub struct CellRun {
    pub cell: DecodeCell,
    pub interrupted: bool,
    pub unreachable: Option<crate::timeline::RequestError>,
}

/// The stability half of the readiness gate: it opens once qualifying `/metrics` samples have
/// held, without a failing one between, from the first of them to one at least `need_ns` later.
/// Works on sample times in nanoseconds, so it is tested without a clock.
#[derive(Clone, Copy, Debug)]
pub struct StableGate {
    need_ns: u64,
    /// Time of the first qualifying sample of the current unbroken run.
    since: Option<u64>,
    /// The last sample seen; the sampler's latest may be read many times.
    last: Option<u64>,
    open: bool,
}

impl StableGate {
    pub fn new(need: Duration) -> Self {
        Self {
            need_ns: need.as_nanos().min(u64::MAX as u128) as u64,
            since: None,
            last: None,
            open: false,
        }
    }

    /// Feed the sample at `t_ns` (whether it met the condition); true once the gate is open.
    /// A sample seen before (same time) is not counted again.
    pub fn observe(&mut self, t_ns: u64, qualifies: bool) -> bool {
        if self.open || self.last.is_some_and(|l| t_ns <= l) {
            return self.open;
        }
        self.last = Some(t_ns);
        if !qualifies {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(t_ns);
        self.open = t_ns - since >= self.need_ns;
        self.open
    }
}

/// Run one decode cell. `cell` arrives with its context, label and concurrency filled.
pub async fn run_cell(
    client: &Client,
    req: &StreamRequest,
    names: Option<MetricNames>,
    cfg: &CellConfig,
    mut cell: DecodeCell,
    stop: &Cancel,
    progress: &mut dyn Progress,
) -> CellRun {
    let streams = Streams::start(client, req, names, cfg, &cell);
    streams.phase(progress, Phase::WaitingReady);
    let gate = wait_ready(&streams, cfg, stop).await;
    let mut server_queued = note_gate(&mut cell, &gate, &streams, names.is_some());
    let window = if gate.opens_window() {
        streams.phase(progress, Phase::Measuring);
        measure_window(client, names, cfg, &streams, stop, progress).await
    } else {
        Window::default()
    };
    streams.phase(progress, Phase::Draining);
    let clock = streams.clock.clone();
    let c = streams.c;
    let ended = drain(streams, client, names, cfg, &mut cell).await;
    let in_window = keep_server_samples(&mut cell, &ended.samples, &window, &clock);
    let facts = note_window(&mut cell, &window, &ended, &clock, names.is_none(), c);
    if window.server_died {
        // Cut short as a stop cuts it: kept, marked, measured again by --resume.
        cell.interrupted = true;
        cell.notes.push(format!(
            "the server died inside this cell's window (every stream's reconnect was refused): its figures cover the {:.1} s up to the last moment a stream heard from it, of the planned {:.1} s",
            cell.measured_s.unwrap_or(0.0),
            cfg.duration.as_secs_f64()
        ));
    }
    server_queued |= note_queue(&mut cell, &in_window);
    let errors = count_errors(&mut cell, &ended);
    let looped_streams = note_loops(&mut cell, &ended.finished);
    note_token_counts(&mut cell, names, &window, &ended.finished);
    let client_bound = note_client_cost(&mut cell, &window, &ended.finished, &clock);
    let ok_requests = cell
        .requests
        .iter()
        .filter(|r| r.error.is_none() && r.window_tokens > 0)
        .count() as u64;
    cell.status = post_run(&CellObservation {
        looped_streams,
        errors,
        ok_requests,
        server_queued,
        concurrency: c as u64,
        streams_measured: facts.streams_with_tokens,
        never_all_at_once: window.opened && names.is_none() && facts.peak_decoding < c as u64,
        client_bound,
    });
    CellRun {
        cell,
        interrupted: gate.interrupted || window.interrupted,
        unreachable: ended.server_unreachable,
    }
}

/// A cell's running parts: its C streams, the counters they bump and the server's sampler.
struct Streams {
    clock: Clock,
    c: u32,
    shared: Arc<Counters>,
    cancel: Cancel,
    sampler: Option<Sampler>,
    workers: Vec<tokio::task::JoinHandle<Vec<Finished>>>,
    /// The progress display's name of the cell.
    step: String,
}

impl Streams {
    /// Start the sampler and the C stream workers.
    fn start(
        client: &Client,
        req: &StreamRequest,
        names: Option<MetricNames>,
        cfg: &CellConfig,
        cell: &DecodeCell,
    ) -> Self {
        let c = cfg.concurrency.max(1);
        let shared = Arc::new(Counters::default());
        let cancel = Cancel::new();
        let req = Arc::new(req.clone());
        let sampler = names.map(|n| Sampler::start(client.clone(), n, cfg.sample_period));
        let ids = cfg.request_ids.map(|i| (i, cell.context, c));
        let workers = (0..c)
            .map(|i| {
                tokio::spawn(worker(
                    i,
                    client.clone(),
                    req.clone(),
                    ids,
                    cancel.clone(),
                    shared.clone(),
                    cfg.repetition,
                ))
            })
            .collect();
        Self {
            clock: client.clock().clone(),
            c,
            shared,
            cancel,
            sampler,
            workers,
            step: format!("cell {} x {c}", cell.context_label),
        }
    }

    fn phase(&self, progress: &mut dyn Progress, phase: Phase) {
        progress.event(&Event::Phase {
            step: &self.step,
            phase,
        });
    }
}

/// How the readiness gate ended.
struct Gate {
    /// The user stopped the run while the cell waited.
    interrupted: bool,
    /// The gate gave up (timeout, every stream failing, or the server refusing).
    timed_out: bool,
    /// Every stream's connection was refused twice over: the server is gone.
    refused: bool,
    /// Streams that had produced a token when the gate ended.
    ready: u64,
    waited_s: f64,
}

impl Gate {
    /// A window is measured unless the user stopped, the server is gone, or no stream ever
    /// produced a token.
    fn opens_window(&self) -> bool {
        !self.interrupted && !self.refused && self.ready > 0
    }
}

/// Readiness gate: every stream has a token and (where metrics exist) the server runs C with
/// none waiting.
async fn wait_ready(streams: &Streams, cfg: &CellConfig, stop: &Cancel) -> Gate {
    let (clock, c, shared) = (&streams.clock, streams.c as u64, &streams.shared);
    let (ready, failures) = (&shared.ready, &shared.failures);
    let gate_start = clock.raw();
    let mut stable = StableGate::new(cfg.ready_stable);
    let mut gate = Gate {
        interrupted: false,
        timed_out: false,
        refused: false,
        ready: 0,
        waited_s: 0.0,
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => { gate.interrupted = true; break; }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        let all_ready = ready.load(Ordering::Relaxed) >= c;
        let server_ready = match &streams.sampler {
            Some(s) => s.latest().filter(|m| m.t > gate_start).is_some_and(|m| {
                stable.observe(
                    clock.delta_ns(gate_start, m.t),
                    m.running >= c as f64 && m.waiting <= 0.0,
                )
            }),
            None => true,
        };
        if all_ready && server_ready {
            break;
        }
        let waited = clock.delta_ns(gate_start, clock.raw());
        // Every stream failing before any token: the cell cannot measure anything.
        if ready.load(Ordering::Relaxed) == 0 && failures.load(Ordering::Relaxed) >= 2 * c {
            gate.timed_out = true;
            break;
        }
        // Every stream's connection refused twice over: the server is gone, whatever tokens
        // came before; no window is opened on it.
        if shared.refused_in_a_row.load(Ordering::Relaxed) >= 2 * c {
            gate.timed_out = true;
            gate.refused = true;
            break;
        }
        if waited >= cfg.ready_timeout.as_nanos() as u64 {
            gate.timed_out = true;
            break;
        }
    }
    gate.ready = ready.load(Ordering::Relaxed);
    gate.waited_s = clock.delta_ns(gate_start, clock.raw()) as f64 / 1e9;
    gate
}

/// What the cell says of a gate that gave up; true where the server held streams back
/// (queued).
fn note_gate(cell: &mut DecodeCell, gate: &Gate, streams: &Streams, has_metrics: bool) -> bool {
    let (c, waited_s, ready) = (streams.c, gate.waited_s, gate.ready);
    if gate.interrupted {
        return false;
    }
    if gate.refused {
        cell.notes.push(format!(
            "the server refused every stream's connection while the cell waited for its readiness gate ({waited_s:.1} s): nothing was measured"
        ));
        return false;
    }
    if !gate.timed_out {
        return false;
    }
    if ready == 0 && streams.shared.failures.load(Ordering::Relaxed) == 0 {
        // Nothing failed and nothing came: a stalled server. Say so instead of a blank cell.
        cell.error_messages.push(ErrorMessage::new(
            Some(ErrorKind::TimeoutFirstToken),
            None,
            &format!(
                "no stream produced a token within {waited_s:.1} s (--ready-timeout); nothing was measured"
            ),
        ));
        false
    } else if ready > 0 && ready < c as u64 {
        // Streams that never produced a token: the server held them back (silently, on
        // llama.cpp beyond its slots).
        cell.notes.push(format!(
            "the readiness gate gave up after {waited_s:.1} s with only {ready} of {c} streams producing tokens; the window was measured anyway"
        ));
        true
    } else if ready > 0 && has_metrics {
        cell.notes.push(format!(
            "the readiness gate gave up after {waited_s:.1} s: the server never reported {c} requests running with none waiting"
        ));
        true
    } else {
        false
    }
}

/// The measured window: its bounds and what was read at each end. All zero and `None` where
/// no window was opened.
#[derive(Default)]
struct Window {
    opened: bool,
    /// The user stopped the run inside the window.
    interrupted: bool,
    /// The server died inside the window (every stream's reconnect refused): it closed at the
    /// last moment a stream heard from the server.
    server_died: bool,
    open: u64,
    close: u64,
    /// The server's generated-token count read just before the window opens and just after it
    /// closes, with the moments it describes.
    gen: (Option<f64>, Option<f64>),
    gen_t: (Option<u64>, Option<u64>),
    /// The client's CPU seconds at each end.
    cpu: (Option<f64>, Option<f64>),
    /// The timer-lag probe's readings (ms).
    lags: Vec<f64>,
}

/// Open the window, hold it for the cell's duration with live figures, and close it.
async fn measure_window(
    client: &Client,
    names: Option<MetricNames>,
    cfg: &CellConfig,
    streams: &Streams,
    stop: &Cancel,
    progress: &mut dyn Progress,
) -> Window {
    let clock = &streams.clock;
    let mut w = Window {
        opened: true,
        ..Window::default()
    };
    (w.gen.0, w.open) = match &names {
        Some(n) => read_generation_tokens(client, n, clock).await,
        None => (None, clock.raw()),
    };
    w.cpu.0 = crate::sys::client_cpu().map(crate::sys::CpuTime::total_s);
    let lag_cancel = Cancel::new();
    let lag = lag_probe(clock.clone(), lag_cancel.clone());
    let held = hold_window(cfg.duration, streams, stop, progress).await;
    w.interrupted = held == Held::Stopped;
    (w.gen.1, w.close) = match &names {
        Some(n) => read_generation_tokens(client, n, clock).await,
        None => (None, clock.raw()),
    };
    if let Held::ServerDied(at) = held {
        // Nothing came after it; the server's count cannot be read.
        (w.server_died, w.gen.1, w.close) = (true, None, at.max(w.open));
    }
    w.cpu.1 = crate::sys::client_cpu().map(crate::sys::CpuTime::total_s);
    lag_cancel.cancel();
    w.lags = lag.await.unwrap_or_default();
    // The server's reads bound the window, so both counts cover the same span.
    w.gen_t = (w.gen.0.map(|_| w.open), w.gen.1.map(|_| w.close));
    w
}

/// How the window ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Held {
    /// Its whole duration.
    Full,
    /// The user stopped the run.
    Stopped,
    /// Every stream lost the server; the last moment one heard from it (raw stamp).
    ServerDied(u64),
}

/// Wait out the window, sending live figures to the progress display (tokens per second and
/// the client's headroom, once a second), until its end, the user's stop, or the server's death
/// (every stream's latest attempt refused a connection).
async fn hold_window(
    duration: Duration,
    streams: &Streams,
    stop: &Cancel,
    progress: &mut dyn Progress,
) -> Held {
    let (clock, shared) = (&streams.clock, &streams.shared);
    let end = tokio::time::Instant::now() + duration;
    let (mut last_t, mut last_n) = (clock.raw(), shared.tokens.load(Ordering::Relaxed));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let cpu_now = || crate::sys::client_cpu().map(crate::sys::CpuTime::total_s);
    let mut last_cpu = cpu_now();
    shared.take_reads();
    loop {
        if shared.lost_streams.load(Ordering::Relaxed) >= streams.c as u64 {
            return Held::ServerDied(shared.lost_at.load(Ordering::Relaxed));
        }
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Held::Full;
        }
        tokio::select! {
            _ = stop.cancelled() => { return Held::Stopped; }
            _ = shared.lost.notified() => { continue; }
            _ = tokio::time::sleep(left.min(PROGRESS_EVERY)) => {}
        }
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if !left.is_zero() {
            let (t, n) = (clock.raw(), shared.tokens.load(Ordering::Relaxed));
            let s = clock.delta_ns(last_t, t) as f64 / 1e9;
            if s > 0.0 {
                let cpu = cpu_now();
                let (reads, sum, max) = shared.take_reads();
                let used = cpu.zip(last_cpu).map(|(b, a)| b - a);
                progress.event(&Event::Headroom(Headroom::of(
                    reads, sum, max, used, s, cores,
                )));
                last_cpu = cpu;
                progress.event(&Event::Live {
                    tok_per_s: n.saturating_sub(last_n) as f64 / s,
                    active: shared.active.load(Ordering::Relaxed),
                    left_s: left.as_secs_f64(),
                });
            }
            (last_t, last_n) = (t, n);
        }
    }
}

/// What the cell's streams and the server left when they stopped.
struct Ended {
    finished: Vec<Finished>,
    /// Messages of the workers that panicked.
    panics: Vec<String>,
    samples: Vec<MetricsSample>,
    /// The connection error when the server could no longer be reached.
    server_unreachable: Option<crate::timeline::RequestError>,
}

/// Cancel the streams, gather their requests and the sampler's readings, and wait for the
/// server to drain.
async fn drain(
    streams: Streams,
    client: &Client,
    names: Option<MetricNames>,
    cfg: &CellConfig,
    cell: &mut DecodeCell,
) -> Ended {
    streams.cancel.cancel();
    let (finished, panics) = gather(streams.workers).await;
    let samples = match streams.sampler {
        Some(s) => s.stop().await,
        None => Vec::new(),
    };
    // A server that refused the cell's last connections is gone: it cannot drain.
    let mut server_unreachable = finished
        .iter()
        .rev()
        .find_map(|f| f.tl.outcome.as_ref().err().filter(|e| unreachable(e)))
        .cloned();
    if let Some(n) = &names {
        // The next cell must start on an idle server; when it cannot, the report says so.
        match wait_drained(client, n, cfg.drain_timeout, &streams.clock).await {
            Drain::Drained => {
                cell.server_drained = Some(true);
                server_unreachable = None;
            }
            Drain::Busy => {
                cell.server_drained = Some(false);
                cell.notes.push(format!(
                    "the server still reported running or waiting requests {:.1} s after the cell ended: the next cell may have started on a busy server",
                    cfg.drain_timeout.as_secs_f64()
                ));
            }
            Drain::Unreachable(e) => {
                cell.server_drained = Some(false);
                cell.notes.push(format!(
                    "server unreachable after the cell (its /metrics refused the connection: {}); nothing could drain",
                    e.message
                ));
                server_unreachable = Some(e);
            }
        }
    }
    Ended {
        finished,
        panics,
        samples,
        server_unreachable,
    }
}

/// Keep the server's samples inside the window for the report's chart (strided down), and
/// return them all for the queueing verdict.
fn keep_server_samples(
    cell: &mut DecodeCell,
    samples: &[MetricsSample],
    w: &Window,
    clock: &Clock,
) -> Vec<MetricsSample> {
    let in_window: Vec<MetricsSample> = samples
        .iter()
        .filter(|s| s.t >= w.open && s.t <= w.close)
        .copied()
        .collect();
    // Kept for the HTML report's chart of the server's load; strided down to a bounded count.
    let stride = in_window.len().div_ceil(MAX_SERVER_SAMPLES).max(1);
    cell.server_samples = in_window
        .iter()
        .step_by(stride)
        .map(|s| ServerSample {
            t_ms: clock.signed_delta_ns(w.open, s.t) as f64 / 1e6,
            running: s.running,
            waiting: s.waiting,
        })
        .collect();
    in_window
}

/// Whether the server queued requests inside the window (see [`WindowQueue::queued`]), with a
/// note where its queue-time histogram decided it. Needs the window's time between tokens.
fn note_queue(cell: &mut DecodeCell, in_window: &[MetricsSample]) -> bool {
    let q = WindowQueue {
        samples: in_window.len(),
        waiting_samples: in_window.iter().filter(|s| s.waiting > 0.0).count(),
        mean_wait_ms: mean_queue_wait_ms(in_window),
        step_ms: cell.tbt_ms_p50,
    };
    cell.notes.extend(q.note());
    q.queued()
}

/// The window's figures and each request's summary; nothing where no window was opened.
fn note_window(
    cell: &mut DecodeCell,
    w: &Window,
    ended: &Ended,
    clock: &Clock,
    no_metrics: bool,
    c: u32,
) -> WindowFacts {
    if !w.opened {
        return WindowFacts::default();
    }
    let running: Vec<f64> = ended
        .samples
        .iter()
        .filter(|s| s.t >= w.open && s.t <= w.close)
        .map(|s| s.running)
        .collect();
    let reqs: Vec<(u32, &Timeline)> = ended.finished.iter().map(|f| (f.stream, &f.tl)).collect();
    let facts = window_figures(
        cell,
        &WindowInput {
            clock,
            open: w.open,
            close: w.close,
            running: &running,
        },
        &reqs,
    );
    for (r, f) in cell.requests.iter_mut().zip(&ended.finished) {
        r.looped = f.looped.is_some();
        r.request_id.clone_from(&f.request_id);
    }
    // Only without metrics: where the server reports running and waiting requests, that
    // is the better witness (a stream restarting waits a moment for its first token, so at
    // high C with short requests the client may never see all C decoding at one instant
    // on a server that ran them all).
    if no_metrics && facts.peak_decoding < c as u64 {
        cell.notes.push(format!(
            "at most {} of {c} requests were producing tokens at once inside the window",
            facts.peak_decoding
        ));
    }
    facts
}

/// Failed requests (not our cancellations) and panicked workers, counted per kind with the
/// first message of each kind kept.
fn count_errors(cell: &mut DecodeCell, ended: &Ended) -> Vec<(ErrorKind, u64)> {
    let mut errors: Vec<(ErrorKind, u64)> = Vec::new();
    let mut count = |k: ErrorKind| match errors.iter_mut().find(|e| e.0 == k) {
        Some(e) => e.1 += 1,
        None => errors.push((k, 1)),
    };
    for f in &ended.finished {
        if let Err(e) = &f.tl.outcome {
            if e.kind != ErrorKind::Cancelled {
                count(e.kind);
                push_first_per_kind(
                    &mut cell.error_messages,
                    ErrorMessage::new(Some(e.kind), e.status, &e.message),
                );
            }
        }
    }
    for p in &ended.panics {
        count(ErrorKind::ClientPanic);
        push_first_per_kind(
            &mut cell.error_messages,
            ErrorMessage::new(Some(ErrorKind::ClientPanic), None, p),
        );
    }
    cell.errors = errors
        .iter()
        .map(|&(kind, count)| ErrorCount { kind, count })
        .collect();
    errors
}

/// The first loop seen, with the count of streams that looped; returns that count.
fn note_loops(cell: &mut DecodeCell, finished: &[Finished]) -> u64 {
    let mut looped_streams: Vec<u32> = finished
        .iter()
        .filter(|f| f.looped.is_some())
        .map(|f| f.stream)
        .collect();
    looped_streams.sort_unstable();
    looped_streams.dedup();
    if let Some((channel, l)) = finished.iter().find_map(|f| f.looped.as_ref()) {
        cell.loop_info = Some(LoopInfo {
            streams: looped_streams.len() as u64,
            channel: *channel,
            period_chars: l.period_chars as u64,
            repeats: l.repeats as u64,
            excerpt: l.excerpt.clone(),
        });
    }
    looped_streams.len() as u64
}

/// Where the token counts came from, and the client's count over the window against the
/// server's.
fn note_token_counts(
    cell: &mut DecodeCell,
    names: Option<MetricNames>,
    w: &Window,
    finished: &[Finished],
) {
    // Every request that counted tokens, not the first one: a server may send per-chunk usage
    // to some requests only.
    let sources: Vec<TokenCountSource> = finished
        .iter()
        .filter(|f| f.tl.event_tokens() > 0)
        .map(|f| f.tl.token_count_source)
        .collect();
    let (source, mixed) = token_source(&sources);
    cell.token_count_source = source;
    cell.notes.extend(mixed);
    // The prompt's size as the server counted it (images included), from the requests that
    // reported usage: they all sent the one prompt.
    let prompts: Vec<u64> = finished
        .iter()
        .filter_map(|f| f.tl.usage.map(|u| u.prompt_tokens))
        .collect();
    cell.server_prompt_tokens = super::prompts::typical(&prompts).map(|i| prompts[i]);
    if let (Some(n), true) = (&names, w.opened) {
        // Ours over the same span as the server's two reads (they sit a few ms outside the
        // window, which at thousands of tokens per second is more than 1%).
        let ours = match w.gen_t {
            (Some(a), Some(b)) => Some(client_tokens_between(finished, a, b)),
            _ => cell.output_tokens,
        };
        let (server, diff, why) = token_check(n, w.gen, ours);
        cell.server_output_tokens = server;
        cell.token_count_diff = diff;
        cell.token_count_check = why;
    }
}

/// The client's own cost over the window: its CPU and timer lag, and its lag by
/// `analysis::client_lag` (the one definition `bench` and `selftest` use): read lag, tokens
/// per read, dispatch lag, the bound on each figure and the verdict, whose reasons say why the
/// window is Client-bound. Returns whether it is.
fn note_client_cost(
    cell: &mut DecodeCell,
    w: &Window,
    finished: &[Finished],
    clock: &Clock,
) -> bool {
    let window_s = clock.delta_ns(w.open, w.close) as f64 / 1e9;
    let cpu = match w.cpu {
        (Some(a), Some(b)) => client_lag::Cpu::over(b - a, window_s),
        _ => None,
    };
    cell.client_cpu_percent = cpu.map(|c| c.percent_of_one_core);
    cell.timer_lag_ms_p99 = stats::percentile(&w.lags, 99.0);
    cell.timer_lag_ms_max = w.lags.iter().copied().reduce(f64::max);
    let mut lag = client_lag::LagSamples::default();
    for f in finished {
        lag.add(&f.tl, clock, w.open..w.close);
    }
    let lag = lag.summary(cpu);
    let why = cell_verdict(&lag);
    let bound = !why.is_empty();
    cell.client_lag = Some(ClientLagFigures::new(&lag, why));
    bound
}

/// The verdict on a cell's window: the cell prints the median time between tokens (no p99),
/// and its TTFT runs from the request's send, so the runner's lateness and the connection are
/// not in it: only the stamps' reasons apply.
fn cell_verdict(lag: &client_lag::ClientLag) -> Vec<String> {
    client_lag::stamp_reasons(lag, client_lag::Printed::Median)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::matrix::status::CellStatus;

    const MS: u64 = 1_000_000;

    /// Feed (time in ms, qualifies) samples; the time (ms) at which the gate opened.
    fn opens_at(need_ms: u64, samples: &[(u64, bool)]) -> Option<u64> {
        let mut g = StableGate::new(Duration::from_millis(need_ms));
        samples
            .iter()
            .find(|&&(t, ok)| g.observe(t * MS, ok))
            .map(|&(t, _)| t)
    }

    #[test]
    fn stable_gate_needs_the_condition_held_for_the_whole_span() {
        let every_500 = |oks: &[bool]| -> Vec<(u64, bool)> {
            oks.iter()
                .enumerate()
                .map(|(i, &ok)| (500 + 500 * i as u64, ok))
                .collect()
        };
        // Zero: the first qualifying sample.
        assert_eq!(opens_at(0, &every_500(&[false, true, true])), Some(1000));
        // 3 s: seven qualifying samples, the first at 1000 ms, the last at 4000 ms.
        assert_eq!(
            opens_at(
                3000,
                &every_500(
                    &[false; 1]
                        .iter()
                        .chain(&[true; 8])
                        .copied()
                        .collect::<Vec<_>>()
                )
            ),
            Some(4000)
        );
        // A failing sample restarts the span.
        let mut oks = vec![true; 4];
        oks.push(false);
        oks.extend([true; 8]);
        assert_eq!(opens_at(3000, &every_500(&oks)), Some(6000));
        // Never held long enough.
        assert_eq!(
            opens_at(3000, &every_500(&[true, true, false, true, true, true])),
            None
        );
    }

    #[test]
    fn stable_gate_counts_a_repeated_sample_once_and_stays_open() {
        let mut g = StableGate::new(Duration::from_millis(1000));
        assert!(!g.observe(100 * MS, true));
        // The sampler's latest read again and again is still one sample.
        for _ in 0..10 {
            assert!(!g.observe(100 * MS, true));
        }
        // An older sample (out of order) is ignored too.
        assert!(!g.observe(50 * MS, false));
        assert!(g.observe(1100 * MS, true));
        assert!(g.observe(1200 * MS, false), "an open gate stays open");
    }

    /// A request sent at `sent` ms whose reads are (stamp ms, wake-up µs, tokens per event).
    fn stamped(clock: &Clock, sent: u64, reads: &[(u64, u32, &[u32])]) -> Finished {
        let at = |ms: u64| clock.add_ns(0, ms * MS);
        let mut t = Timeline::new(at(sent), 8, false);
        t.send_start = Some(at(sent));
        t.write_done = Some(at(sent));
        for &(ms, us, events) in reads {
            for &tokens in events {
                t.events.push(EventRecord {
                    t: at(ms),
                    tokens,
                    wakeup_ns: us * 1_000,
                    socket_bytes: 0,
                    channel: Channel::Content,
                });
            }
        }
        Finished {
            stream: 0,
            tl: t,
            request_id: None,
            looped: None,
        }
    }

    #[test]
    fn the_live_read_lag_is_each_finished_requests_reads_taken_once() {
        let (clock, _h) = Clock::mock();
        let c = Counters::default();
        // Reads woken 20 us and 40 us late, and one on the client's own clock (no lag known).
        let f = stamped(
            &clock,
            0,
            &[(5, 20, &[1]), (15, 40, &[1, 1]), (25, 0, &[1])],
        );
        c.note_reads(&f.tl);
        let g = stamped(&clock, 0, &[(30, 10, &[1])]);
        c.note_reads(&g.tl);
        assert_eq!(c.take_reads(), (3, 70_000, 40_000));
        assert_eq!(c.take_reads(), (0, 0, 0), "taken afresh each second");
    }

    #[test]
    fn the_cells_client_lag_is_the_analysis_over_its_window_and_its_verdict() {
        let (clock, _h) = Clock::mock();
        let w = |open: u64, close: u64| Window {
            opened: true,
            open: clock.add_ns(0, open * MS),
            close: clock.add_ns(0, close * MS),
            cpu: (Some(1.0), Some(1.5)),
            ..Window::default()
        };
        // One token per read, 10 ms apart, woken 20 us late: every gap read apart. The read
        // at 5 ms lies before the window (100 ms long, opening at 10 ms).
        let apart = stamped(
            &clock,
            0,
            &[
                (5, 20, &[1]),
                (15, 20, &[1]),
                (25, 20, &[1]),
                (35, 20, &[1]),
            ],
        );
        let mut cell = DecodeCell::empty(1024, "1K", 1, CellStatus::Pending);
        assert!(!note_client_cost(&mut cell, &w(10, 110), &[apart], &clock));
        let lag = cell.client_lag.clone().expect("figures");
        assert!(!lag.client_bound && lag.client_bound_reasons.is_empty());
        // Reads at 15, 25 and 35 ms inside; gaps 15→25 and 25→35.
        assert_eq!((lag.reads, lag.gaps), (3, 2));
        assert_eq!(lag.read_lag_us.unwrap().max, 20.0);
        assert_eq!(lag.gaps_apart_percent, Some(100.0));
        let p50 = lag.bounds_ms.itl_p50.unwrap();
        assert_eq!(p50.value, 10.0);
        assert!((p50.bound - 0.02).abs() < 1e-12, "{p50:?}");
        // 0.5 s of CPU over the 0.1 s window: five cores' worth, as CPU share and as before.
        assert!((cell.client_cpu_percent.unwrap() - 500.0).abs() < 1e-9);
        let cores = lag.cores.unwrap() as f64;
        assert!((lag.client_cpu_percent_of_cores.unwrap() - 500.0 / cores).abs() < 1e-9);

        // Three tokens in each read 10 ms apart: two of every three gaps sit inside a read and
        // measure 0, known only to the 10 ms since the previous read (15 ms for the first): the
        // median is Client-bound, and so is the TTFT, whose first token may have come at once.
        let merged = stamped(
            &clock,
            0,
            &[
                (15, 20, &[1, 1, 1]),
                (25, 20, &[1, 1, 1]),
                (35, 20, &[1, 1, 1]),
            ],
        );
        let mut cell = DecodeCell::empty(1024, "1K", 1, CellStatus::Pending);
        assert!(note_client_cost(&mut cell, &w(10, 110), &[merged], &clock));
        let lag = cell.client_lag.expect("figures");
        assert!(lag.client_bound);
        let why = &lag.client_bound_reasons;
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].starts_with("the gap p50 of 0.000 ms"), "{why:?}");
        assert!(why[1].starts_with("the TTFT p50 of 15.000 ms"), "{why:?}");
        assert_eq!(lag.tokens_per_read_mean, Some(3.0));
        // The reasons are the figures', not a note's.
        assert!(cell.notes.is_empty(), "{:?}", cell.notes);
    }

    fn tl(clock: &Clock, start_ms: u64, token_ms: &[u64]) -> Timeline {
        let at = |ms: u64| clock.add_ns(0, ms * 1_000_000);
        let mut t = Timeline::new(at(start_ms), 8, false);
        t.send_start = Some(at(start_ms));
        for &ms in token_ms {
            t.events.push(EventRecord {
                t: at(ms),
                tokens: 1,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            });
        }
        t.first_token = token_ms.first().map(|&ms| at(ms));
        t.end = token_ms.last().map(|&ms| at(ms + 1));
        t
    }

    #[test]
    fn only_events_inside_the_window_count() {
        let (clock, _h) = Clock::mock();
        // Window 200..1200 ms. a and b were sent before it (ramp-up), c inside it, d near its
        // end with its first token after the close (drain).
        let a = tl(&clock, 0, &[100, 200, 300, 400, 500]);
        let b = tl(&clock, 150, &[250, 350, 1500]);
        let c = tl(&clock, 300, &[450, 650]);
        let d = tl(&clock, 1100, &[1300, 1400]);
        let mut cell = DecodeCell::empty(1024, "1K", 4, CellStatus::Pending);
        let open = clock.add_ns(0, 200_000_000);
        let close = clock.add_ns(0, 1_200_000_000);
        let facts = window_figures(
            &mut cell,
            &WindowInput {
                clock: &clock,
                open,
                close,
                running: &[],
            },
            &[(0, &a), (1, &b), (2, &c), (3, &d)],
        );
        // a: 200, 300, 400, 500; b: 250, 350; c: 450, 650; 100 (before) and 1500, 1300, 1400
        // (after) do not count.
        assert_eq!(cell.output_tokens, Some(8));
        let tps = cell.output_tok_per_s.unwrap();
        assert!((tps - 8.0).abs() < 1e-6, "{tps}");
        assert_eq!(cell.measured_s, Some(1.0));
        // TTFT only from c (sent and answered inside): 150 ms. Counting a, b (sent before the
        // window) and d (answered after it) would give a median of 125 ms.
        assert_eq!(cell.ttft_ms_p50, Some(150.0));
        assert_eq!(cell.requests[0].ttft_ms, None);
        assert_eq!(cell.requests[3].ttft_ms, None);
        // Time between tokens from inside events: a (500-200)/3 = 100, b (350-250)/1 = 100,
        // c (650-450)/1 = 200, d none inside; median 100 ms. With b's 1500 ms event after the
        // close it would be 625 ms and the median 200 ms.
        assert!((cell.tbt_ms_p50.unwrap() - 100.0).abs() < 1e-6);
        assert_eq!(cell.requests[1].tbt_ms_mean, Some(100.0));
        assert_eq!(cell.requests[3].tbt_ms_mean, None);
        assert_eq!(cell.completed_requests, Some(2));
        assert_eq!(cell.requests.len(), 4);
        assert_eq!(cell.requests[1].window_tokens, 2);
        // Every token of the cell, window or not, in 100 ms bins from the first event (100 ms,
        // 100 ms before the window opened) to the last (1500 ms).
        // Every inside gap: a 200→300→400→500, b 250→350, c 450→650; b's 350→1500 and a's
        // 100→200 straddle an edge and do not count. numpy: p90 of [100 ×4, 200] is 160.
        let h = cell.gap_histogram.as_ref().unwrap();
        assert_eq!(h.gaps, 5);
        assert_eq!((h.p50_ms, h.p90_ms, h.p99_ms), (100.0, 160.0, 196.0));
        // 100 ms = 10^5 µs opens bin 50; 200 ms = 10^5.301 µs is in bin 53.
        let mut want = vec![0u64; 80];
        want[50] = 4;
        want[53] = 1;
        assert_eq!(h.counts, want);
        assert_eq!(h.edge_ms(50), 100.0);
        let bins = cell.token_bins.as_ref().unwrap();
        assert_eq!((bins.start_ms, bins.bin_ms), (-100.0, 100.0));
        assert_eq!(bins.tokens, [1, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
        // Client count of active requests: a 200..501, b 200..1200, c 300..651, d 1100..1200.
        let active = cell.avg_active_requests.unwrap();
        assert!((active - 1.752).abs() < 1e-3, "{active}");
        // d produced nothing inside; a, b and c decoded together from 450 to 501 ms.
        assert_eq!(
            facts,
            WindowFacts {
                streams_with_tokens: 3,
                peak_decoding: 3
            }
        );
    }

    #[test]
    fn a_long_cell_gets_wider_bins_never_more_than_the_cap() {
        let (clock, _h) = Clock::mock();
        // Tokens every 10 ms for 600 s: 100 ms bins would be 6,001.
        let times: Vec<u64> = (0..60_000).map(|i| i * 10).collect();
        let a = tl(&clock, 0, &times);
        let bins = token_bins(&clock, 0, &[(0, &a)]).unwrap();
        assert!(bins.tokens.len() <= MAX_TOKEN_BINS, "{}", bins.tokens.len());
        assert!(bins.bin_ms > 100.0);
        assert_eq!(bins.tokens.iter().sum::<u64>(), 60_000);
        assert_eq!(token_bins(&clock, 0, &[]), None);
    }

    #[test]
    fn gap_bins_are_log_spaced_with_edges_in_the_bin_they_open() {
        let n = 80;
        assert_eq!(gap_bin(0.0, n), 0);
        assert_eq!(gap_bin(0.5, n), 0);
        assert_eq!(gap_bin(1.0, n), 0);
        assert_eq!(gap_bin(1.2, n), 0);
        // 10^0.1 µs opens bin 1; every exact edge 10^(k/10) lands in bin k.
        for k in 0..n {
            let edge = 10f64.powf(k as f64 / 10.0);
            assert_eq!(gap_bin(edge, n), k, "edge {edge}");
            assert_eq!(gap_bin(edge * 1.0001, n), k, "just above {edge}");
            if k > 0 {
                assert_eq!(gap_bin(edge * 0.9999, n), k - 1, "just below {edge}");
            }
        }
        // 100 s and beyond: the last bin.
        assert_eq!(gap_bin(1e8, n), n - 1);
        assert_eq!(gap_bin(1e12, n), n - 1);
        assert_eq!(gap_bin(f64::NAN, n), 0);
    }

    #[test]
    fn gap_histogram_counts_sub_millisecond_gaps_and_exact_percentiles() {
        let (clock, _h) = Clock::mock();
        // Gaps of 5 µs, 50 µs, 500 µs, 5 ms and 50 ms in one request, 20 ms in another.
        let at = |ns: u64| clock.add_ns(0, ns);
        let mut a = Timeline::new(at(0), 8, false);
        let mut b = Timeline::new(at(0), 8, false);
        let push = |t: &mut Timeline, ns: u64, tokens: u32| {
            t.events.push(EventRecord {
                t: at(ns),
                tokens,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            })
        };
        let mut t = 1_000_000;
        push(&mut a, t, 1);
        for gap in [5_000, 50_000, 500_000, 5_000_000, 50_000_000] {
            t += gap;
            push(&mut a, t, 1);
        }
        // An event with no tokens (a role chunk) is not a token event.
        push(&mut b, 2_000_000, 0);
        push(&mut b, 3_000_000, 2);
        push(&mut b, 23_000_000, 1);
        let h = gap_histogram(&clock, 0, 1_000_000_000, &[(0, &a), (1, &b)]).unwrap();
        assert_eq!(h.gaps, 6);
        // 5 µs → bin 6 (10^0.699), 50 µs → 16, 500 µs → 26, 5 ms → 36, 20 ms → 43, 50 ms → 46.
        let filled: Vec<(usize, u64)> = h
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (i, *c))
            .collect();
        assert_eq!(
            filled,
            [(6, 1), (16, 1), (26, 1), (36, 1), (43, 1), (46, 1)]
        );
        // Sorted ms: 0.005 0.05 0.5 5 20 50; numpy p50 = (0.5 + 5) / 2, p90 = 20 + 0.5 × 30.
        assert!((h.p50_ms - 2.75).abs() < 1e-9, "{}", h.p50_ms);
        assert!((h.p90_ms - 35.0).abs() < 1e-9, "{}", h.p90_ms);
        assert!((h.p99_ms - 48.5).abs() < 1e-9, "{}", h.p99_ms);
        // No request with two inside events: no histogram.
        assert_eq!(gap_histogram(&clock, 0, 1_004_000, &[(0, &a)]), None);
    }

    #[test]
    fn peak_overlap_counts_touching_spans_apart() {
        assert_eq!(peak_overlap(&mut []), 0);
        assert_eq!(peak_overlap(&mut [(0, 10), (10, 20), (20, 30)]), 1);
        assert_eq!(peak_overlap(&mut [(0, 10), (5, 20), (9, 30), (25, 26)]), 3);
        // Empty and reversed spans (clipped to the window) count for nothing.
        assert_eq!(peak_overlap(&mut [(5, 5), (9, 3), (0, 1)]), 1);
    }

    #[test]
    fn token_source_is_taken_from_every_request() {
        use TokenCountSource::*;
        assert_eq!(token_source(&[]), (None, None));
        assert_eq!(token_source(&[Chunks, Chunks]), (Some(Chunks), None));
        // The first request alone would say Chunks.
        let (s, note) = token_source(&[Chunks, ContinuousUsage, ContinuousUsage]);
        assert_eq!(s, Some(ContinuousUsage));
        let note = note.expect("a mix is said");
        assert!(
            note.contains("continuous_usage ×2") && note.contains("chunks ×1"),
            "{note}"
        );
    }

    #[test]
    fn llama_cpp_counter_needs_the_slots_for_a_window_difference() {
        use crate::server::EngineKind;
        let vllm = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        assert_eq!(
            token_check(&vllm, (Some(100.0), Some(350.0)), Some(260)),
            (Some(250), Some(10), None)
        );
        let (server, diff, why) = token_check(&vllm, (Some(100.0), None), Some(260));
        assert_eq!((server, diff), (None, None));
        assert!(why.unwrap().contains("could not be read"));
        // llama.cpp counts at request end: without /slots (the samples' `generated` is then
        // `None`) a window's whole output would show as a difference, so none is drawn...
        let llama = MetricNames::for_engine(EngineKind::LlamaCpp).unwrap();
        let (server, diff, why) = token_check(&llama, (None, Some(0.0)), Some(5000));
        assert_eq!((server, diff), (None, None));
        let why = why.unwrap();
        assert!(
            why.contains("only when it ends") && why.contains("/slots"),
            "{why}"
        );
        // ...with it, the live count is compared like any other.
        assert_eq!(
            token_check(&llama, (Some(120.0), Some(5110.0)), Some(5000)),
            (Some(4990), Some(10), None)
        );
        let tgi = MetricNames::for_engine(EngineKind::Tgi).unwrap();
        assert_eq!(token_check(&tgi, (None, None), Some(1)), (None, None, None));
    }

    #[tokio::test]
    async fn a_panicked_worker_is_counted_not_lost() {
        let ok = tokio::spawn(async { Vec::new() });
        let bad = tokio::spawn(async {
            if std::hint::black_box(true) {
                panic!("worker bug");
            }
            Vec::new()
        });
        let (finished, panics) = gather(vec![ok, bad]).await;
        assert!(finished.is_empty());
        assert_eq!(panics, vec!["worker bug".to_string()]);
    }

    #[test]
    fn server_samples_win_for_average_active() {
        let (clock, _h) = Clock::mock();
        let a = tl(&clock, 0, &[10, 20]);
        let mut cell = DecodeCell::empty(1024, "1K", 4, CellStatus::Pending);
        window_figures(
            &mut cell,
            &WindowInput {
                clock: &clock,
                open: 0,
                close: clock.add_ns(0, 1_000_000_000),
                running: &[4.0, 3.0],
            },
            &[(0, &a)],
        );
        assert_eq!(cell.avg_active_requests, Some(3.5));
    }
}
