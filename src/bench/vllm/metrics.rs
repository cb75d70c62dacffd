//! `vllm bench serve`'s metrics, computed exactly as its Python code does (definitions in
//! `shared/reference/peers.md`), from plain per-request records.
//!
//! Owns [`compute`] (records -> [`BenchMetrics`], the records being the engine's
//! `RequestRecord`s), the `--percentile-metrics`,
//! `--metric-percentiles` and `--goodput` value parsers, and vLLM's result key names
//! ([`metric_values`]). It must never do IO, read a clock (stamps arrive as data), or serialise:
//! `report` owns the JSON shape.
//!
//! Definitions (all over *successful* requests; failures are only counted, by kind):
//! - TTFT: first counted event - start. The counted events are the choice-carrying ones from the
//!   first one the `TtftPredicate` accepts (vLLM: the first event with a non-empty `choices`,
//!   i.e. the role-only chat chunk; older versions: the first with content).
//! - ITL: every gap between consecutive counted events of every request, pooled into one list.
//!   A chunk carrying several tokens is still one gap.
//! - E2EL: last counted event - start.
//! - TPOT: `(E2EL - TTFT) / (output_tokens - 1)`, only when `output_tokens > 1` (for goodput a
//!   request with one token has TPOT 0, as in vLLM).
//! - Output tokens: `usage.completion_tokens`; when that is missing or 0, the sum of per-event
//!   counts (vLLM retokenises the text instead).
//! - Statistics: mean, median, population std, numpy-linear percentiles; an empty list reports
//!   zeros (vLLM's `np.mean(xs or 0)`).
//! - `max_output_tokens_per_s`: counted events in 1-second buckets measured from the earliest
//!   start of a successful request (vLLM's `min_start_time`, in practice the benchmark start).
//! - `max_concurrent_requests`: the exact peak of overlapping `[start, last event]` intervals
//!   (closed: touching intervals overlap), by a sweep line. vLLM itself counts requests per
//!   1-second bucket, which overstates the peak; that figure is kept as
//!   [`BenchMetrics::max_concurrent_requests_bucketed`] for exact parity.

use std::collections::BTreeMap;

use crate::analysis::stats::Summary;
use crate::bench::engine::record::{FailureKind, RequestRecord};

const NS_PER_S: f64 = 1e9;
const NS_PER_MS: f64 = 1e6;

/// A metric that `--percentile-metrics` can select.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    Ttft,
    Tpot,
    Itl,
    E2el,
    /// Each successful request's wait for a `--max-concurrency` slot (vLLM 0.33 reports it only
    /// with a concurrency limit).
    ClientQueueTime,
    /// E2EL plus that wait (vLLM 0.33: only with a concurrency limit and a finite rate).
    E2elIncludingClientQueue,
}

impl MetricKind {
    /// vLLM's output order, whatever order the flag listed them in.
    pub const ALL: [MetricKind; 6] = [
        MetricKind::Ttft,
        MetricKind::Tpot,
        MetricKind::Itl,
        MetricKind::E2el,
        MetricKind::ClientQueueTime,
        MetricKind::E2elIncludingClientQueue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Ttft => "ttft",
            MetricKind::Tpot => "tpot",
            MetricKind::Itl => "itl",
            MetricKind::E2el => "e2el",
            MetricKind::ClientQueueTime => "client_queue_time",
            MetricKind::E2elIncludingClientQueue => "e2el_including_client_queue",
        }
    }

    /// The console's block header and row name (vLLM's).
    pub fn console(self) -> (&'static str, &'static str) {
        match self {
            MetricKind::Ttft => ("Time to First Token", "TTFT"),
            MetricKind::Tpot => ("Time per Output Token (excl. 1st token)", "TPOT"),
            MetricKind::Itl => ("Inter-token Latency", "ITL"),
            MetricKind::E2el => ("End-to-end Latency", "E2EL"),
            MetricKind::ClientQueueTime => ("Client-side Queueing", "Client Queue Time"),
            MetricKind::E2elIncludingClientQueue => (
                "Queue-inclusive End-to-end Latency",
                "E2EL incl. Client Queue",
            ),
        }
    }

    /// Whether vLLM 0.33 reports this metric for a run with these settings: the queue metrics
    /// need a concurrency limit, the queue-inclusive E2EL a finite rate too.
    pub fn reported(self, max_concurrency: Option<usize>, request_rate: f64) -> bool {
        match self {
            MetricKind::ClientQueueTime => max_concurrency.is_some(),
            MetricKind::E2elIncludingClientQueue => {
                max_concurrency.is_some() && request_rate.is_finite()
            }
            _ => true,
        }
    }

    /// Parses `--percentile-metrics` (`ttft,tpot,itl`, also `e2el`).
    pub fn parse_list(s: &str) -> Result<Vec<MetricKind>, MetricsError> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let kind = MetricKind::ALL
                .into_iter()
                .find(|k| k.as_str() == name)
                .ok_or_else(|| MetricsError::UnknownMetric(name.to_string()))?;
            if !out.contains(&kind) {
                out.push(kind);
            }
        }
        Ok(out)
    }
}

/// Parses `--metric-percentiles` (`99`, `50,90,99.9`): each in `[0, 100]`.
pub fn parse_percentiles(s: &str) -> Result<Vec<f64>, MetricsError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.parse::<f64>() {
            Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
            _ => Err(MetricsError::BadPercentile(p.to_string())),
        })
        .collect()
}

/// The key fragment for percentile `p`: `99`, `99.9`, `50` (an integer when whole, like
/// Python's `str(int(p)) if int(p) == p else str(p)`).
pub fn percentile_label(p: f64) -> String {
    if p.fract() == 0.0 && p.abs() < 1e15 {
        format!("{}", p as i64)
    } else {
        format!("{p}")
    }
}

/// Service level objectives for goodput (`--goodput ttft:MS tpot:MS e2el:MS`), in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GoodputSlo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl GoodputSlo {
    /// Parses the `--goodput` values, each `KEY:VALUE` with KEY one of `ttft`, `tpot`, `e2el`
    /// and VALUE a non-negative number of milliseconds.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<GoodputSlo, MetricsError> {
        let mut slo = GoodputSlo::default();
        for item in items {
            let item = item.as_ref();
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| MetricsError::BadGoodput(item.to_string()))?;
            let ms: f64 = value
                .trim()
                .parse()
                .map_err(|_| MetricsError::BadGoodput(item.to_string()))?;
            if !ms.is_finite() || ms < 0.0 {
                return Err(MetricsError::NegativeGoodput(item.to_string()));
            }
            let slot = match key.trim() {
                "ttft" => &mut slo.ttft_ms,
                "tpot" => &mut slo.tpot_ms,
                "e2el" => &mut slo.e2el_ms,
                other => return Err(MetricsError::UnknownGoodputMetric(other.to_string())),
            };
            *slot = Some(ms);
        }
        Ok(slo)
    }

    pub fn is_empty(&self) -> bool {
        self.ttft_ms.is_none() && self.tpot_ms.is_none() && self.e2el_ms.is_none()
    }

    /// vLLM's rule: good when every given objective is met (`slo >= value`, so equal passes).
    /// A request with one output token has TPOT 0.
    fn is_good(&self, r: &RequestRecord) -> bool {
        let ok = |slo: Option<f64>, value_ns: f64| slo.is_none_or(|ms| ms >= value_ns / NS_PER_MS);
        ok(self.ttft_ms, r.ttft_ns().unwrap_or(0) as f64)
            && ok(self.tpot_ms, r.tpot_ns().unwrap_or(0.0))
            && ok(self.e2el_ms, r.e2el_ns().unwrap_or(0) as f64)
    }
}

/// A bad metrics flag value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("unknown percentile metric {0:?}: expected ttft, tpot, itl or e2el")]
    UnknownMetric(String),
    #[error("invalid percentile {0:?}: expected a number from 0 to 100")]
    BadPercentile(String),
    #[error("invalid goodput objective {0:?}: expected KEY:VALUE, a metric and milliseconds, e.g. ttft:500")]
    BadGoodput(String),
    #[error("unknown goodput metric {0:?}: expected ttft, tpot or e2el")]
    UnknownGoodputMetric(String),
    #[error(
        "invalid goodput objective {0:?}: the value must be a non-negative number of milliseconds"
    )]
    NegativeGoodput(String),
}

/// What to compute.
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// Percentiles for every metric, in the order given (`--metric-percentiles`).
    pub percentiles: Vec<f64>,
    /// `None` without `--goodput`: `request_goodput` is then `None` (JSON null).
    pub goodput: Option<GoodputSlo>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            percentiles: vec![99.0],
            goodput: None,
        }
    }
}

/// `vllm bench serve`'s figures for one run. Plain data; `report` serialises it.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchMetrics {
    pub duration_s: f64,
    pub completed: usize,
    pub failed: usize,
    /// Failures by kind, in `FailureKind` order.
    pub failures: BTreeMap<FailureKind, usize>,
    /// Input tokens of successful requests (as vLLM counts them).
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    /// Good requests per second; `None` without goodput objectives.
    pub request_goodput: Option<f64>,
    pub good_completed: Option<usize>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_output_tokens_per_s: f64,
    /// Exact peak of overlapping requests (sweep line).
    pub max_concurrent_requests: usize,
    /// vLLM's own figure: the most requests active during one 1-second bucket.
    pub max_concurrent_requests_bucketed: usize,
    pub ttft_ms: Summary,
    pub tpot_ms: Summary,
    pub itl_ms: Summary,
    pub e2el_ms: Summary,
    pub client_queue_time_ms: Summary,
    pub e2el_including_client_queue_ms: Summary,
    /// E2EL of each request in request order, in seconds, 0 for a failed one (vLLM's
    /// `latencies`: one entry per request, a failed request's latency left at its default).
    pub latencies_s: Vec<f64>,
    /// Client queue time of each request in request order, failed ones included, in seconds
    /// (vLLM's `queue_times`).
    pub queue_times_s: Vec<f64>,
}

impl BenchMetrics {
    pub fn summary(&self, kind: MetricKind) -> &Summary {
        match kind {
            MetricKind::Ttft => &self.ttft_ms,
            MetricKind::Tpot => &self.tpot_ms,
            MetricKind::Itl => &self.itl_ms,
            MetricKind::E2el => &self.e2el_ms,
            MetricKind::ClientQueueTime => &self.client_queue_time_ms,
            MetricKind::E2elIncludingClientQueue => &self.e2el_including_client_queue_ms,
        }
    }
}

/// Computes every figure. `duration_ns` runs from just before the first dispatch to after the
/// last request ended (the caller measures it); with a zero duration the rates are 0.
pub fn compute(records: &[RequestRecord], duration_ns: u64, cfg: &MetricsConfig) -> BenchMetrics {
    let mut failures = BTreeMap::new();
    let mut completed = 0usize;
    let (mut total_input, mut total_output) = (0u64, 0u64);
    let (mut ttfts, mut tpots, mut itls, mut e2els) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Per successful request (the summaries), and per request (vLLM's lists).
    let mut queue_times_s = Vec::new();
    let (mut latencies_all, mut queue_times_all) = (Vec::new(), Vec::new());
    let mut good = 0usize;
    for r in records {
        queue_times_all.push(r.queue_ns as f64 / NS_PER_S);
        if let Some(f) = r.failure() {
            *failures.entry(f).or_insert(0) += 1;
            latencies_all.push(0.0);
            continue;
        }
        completed += 1;
        // Token counts are the server's `usage` figures: a bogus one must not overflow the sum.
        total_input = total_input.saturating_add(r.input_tokens);
        total_output = total_output.saturating_add(r.output_tokens);
        // Both exist for a successful request (it has at least one counted event).
        ttfts.push(r.ttft_ns().unwrap_or(0) as f64 / NS_PER_S);
        e2els.push(r.e2el_ns().unwrap_or(0) as f64 / NS_PER_S);
        latencies_all.push(r.e2el_ns().unwrap_or(0) as f64 / NS_PER_S);
        if let Some(tpot) = r.tpot_ns() {
            tpots.push(tpot / NS_PER_S);
        }
        itls.extend(r.itls_ns().map(|g| g as f64 / NS_PER_S));
        queue_times_s.push(r.queue_ns as f64 / NS_PER_S);
        if cfg.goodput.is_some_and(|slo| slo.is_good(r)) {
            good += 1;
        }
    }
    let duration_s = duration_ns as f64 / NS_PER_S;
    let rate = |x: f64| {
        if duration_ns == 0 {
            0.0
        } else {
            x / duration_s
        }
    };
    let ms = |xs: &[f64]| Summary::or_zero(xs, &cfg.percentiles).scaled(1000.0);
    let (max_output_tokens_per_s, max_concurrent_requests_bucketed) = per_second_peaks(records);
    BenchMetrics {
        duration_s,
        completed,
        failed: records.len() - completed,
        failures,
        total_input_tokens: total_input,
        total_output_tokens: total_output,
        request_throughput: rate(completed as f64),
        request_goodput: cfg.goodput.map(|_| rate(good as f64)),
        good_completed: cfg.goodput.map(|_| good),
        output_throughput: rate(total_output as f64),
        total_token_throughput: rate(total_input.saturating_add(total_output) as f64),
        max_output_tokens_per_s,
        max_concurrent_requests: peak_concurrency(records),
        max_concurrent_requests_bucketed,
        ttft_ms: ms(&ttfts),
        tpot_ms: ms(&tpots),
        itl_ms: ms(&itls),
        e2el_ms: ms(&e2els),
        client_queue_time_ms: ms(&queue_times_s),
        e2el_including_client_queue_ms: ms(&e2els
            .iter()
            .zip(&queue_times_s)
            .map(|(e, q)| e + q)
            .collect::<Vec<f64>>()),
        latencies_s: latencies_all,
        queue_times_s: queue_times_all,
    }
}

/// vLLM's per-second peaks over successful requests: counted events per 1-s bucket (from the
/// earliest start), and requests active per bucket (a request counts in every bucket from its
/// start's to its end's, inclusive).
fn per_second_peaks(records: &[RequestRecord]) -> (f64, usize) {
    let ok = || records.iter().filter(|r| r.is_success());
    let Some(t0) = ok().map(|r| r.start_ns).min() else {
        return (0.0, 0);
    };
    let t_end = ok()
        .map(RequestRecord::end_time_ns)
        .max()
        .unwrap_or(t0)
        .max(t0);
    // vLLM: int(ceil(max_end - min_start)) + 1 buckets.
    let buckets = (t_end - t0).div_ceil(1_000_000_000) as usize + 1;
    let mut tokens = vec![0u64; buckets];
    let mut active = vec![0usize; buckets];
    let bucket = |t: u64| (t.saturating_sub(t0) / 1_000_000_000) as usize;
    for r in ok() {
        for &t in &r.chunk_times_ns {
            if let Some(b) = tokens.get_mut(bucket(t)) {
                *b += 1;
            }
        }
        let end = r.end_time_ns();
        let first = bucket(r.start_ns).min(buckets - 1);
        let last = bucket(end).clamp(first, buckets - 1);
        for a in &mut active[first..=last] {
            *a += 1;
        }
    }
    let max_tokens = tokens.iter().copied().max().unwrap_or(0) as f64;
    (max_tokens, active.iter().copied().max().unwrap_or(0))
}

/// Exact peak of overlapping closed intervals `[start, last event]` of successful requests.
fn peak_concurrency(records: &[RequestRecord]) -> usize {
    // (time, order, delta): at equal times starts (order 0) come before ends (order 1), so
    // intervals that touch count as overlapping.
    let mut events: Vec<(u64, u8, i64)> = Vec::with_capacity(records.len() * 2);
    for r in records.iter().filter(|r| r.is_success()) {
        let end = r.end_time_ns();
        events.push((r.start_ns, 0, 1));
        events.push((end, 1, -1));
    }
    events.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, _, d) in events {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

/// The selected metrics as vLLM's ordered `(key, value)` pairs: for each metric in vLLM's order
/// (ttft, tpot, itl, e2el) that `selected` contains, `mean_{m}_ms`, `median_{m}_ms`,
/// `std_{m}_ms`, then `p{P}_{m}_ms` per percentile.
pub fn metric_values(m: &BenchMetrics, selected: &[MetricKind]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for kind in MetricKind::ALL.into_iter().filter(|k| selected.contains(k)) {
        let s = m.summary(kind);
        let name = kind.as_str();
        out.push((format!("mean_{name}_ms"), s.mean));
        out.push((format!("median_{name}_ms"), s.median));
        out.push((format!("std_{name}_ms"), s.std));
        for &(p, v) in &s.percentiles {
            out.push((format!("p{}_{name}_ms", percentile_label(p)), v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::record::{LatencyOrigin, RecordOptions, RequestEnd, TtftPredicate};
    use crate::clock::Clock;
    use crate::timeline::{Channel, ErrorKind, Timeline};
    use crate::timeline::{EventRecord, RequestError, Usage};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn ok(start_ms: u64, chunks_ms: &[u64], output_tokens: u64) -> RequestRecord {
        RequestRecord {
            start_ns: start_ms * MS,
            chunk_times_ns: chunks_ms.iter().map(|c| c * MS).collect(),
            output_tokens,
            input_tokens: 100,
            error: None,
            queue_ns: 0,
            end_ns: None,
            empty_is_success: false,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[track_caller]
    fn assert_close(got: f64, want: f64) {
        assert!(close(got, want), "got {got}, want {want}");
    }

    fn cfg() -> MetricsConfig {
        MetricsConfig::default()
    }

    #[test]
    fn multi_token_chunks_are_one_gap_but_tokens_come_from_usage() {
        // Start 0; chunks at 100, 110, 130 ms; usage says 7 tokens (the 130 ms chunk held 5).
        let r = ok(0, &[100, 110, 130], 7);
        let m = compute(&[r], 2 * S, &cfg());
        // TTFT 100 ms; ITLs 10 and 20 ms (two gaps, not six); E2EL 130 ms;
        // TPOT (130 - 100) / (7 - 1) = 5 ms.
        assert_close(m.ttft_ms.mean, 100.0);
        assert_eq!(m.itl_ms.count, 2);
        assert_close(m.itl_ms.mean, 15.0);
        assert_close(m.itl_ms.std, 5.0);
        assert_close(m.e2el_ms.mean, 130.0);
        assert_close(m.tpot_ms.mean, 5.0);
        // Throughput over the 2 s duration: 7 / 2 output tok/s, (100 + 7) / 2 total.
        assert_close(m.output_throughput, 3.5);
        assert_close(m.total_token_throughput, 53.5);
        assert_close(m.request_throughput, 0.5);
        assert_eq!(m.total_output_tokens, 7);
    }

    fn chat_timeline(clock_ns: &[(u64, Channel)], usage_tokens: Option<u64>) -> Timeline {
        let mut t = Timeline::new(1_000, 8, false);
        t.send_start = Some(1_500);
        for &(at, channel) in clock_ns {
            t.events.push(EventRecord {
                t: at,
                tokens: u32::from(channel != Channel::Empty),
                wakeup_ns: 0,
                socket_bytes: 0,
                channel,
            });
        }
        t.usage = usage_tokens.map(|n| Usage {
            prompt_tokens: 10,
            completion_tokens: n,
            total_tokens: 10 + n,
            cached_tokens: None,
        });
        t
    }

    #[test]
    fn role_only_first_chunk_counts_for_ttft_by_default() {
        // Mock-clock stamps are nanoseconds. Base 0, scheduled at 1000, sent at 1500.
        // Events: role-only at 5000, content at 9000 and 12000, finish-only at 13000.
        let (clock, _) = Clock::mock();
        let t = chat_timeline(
            &[
                (5_000, Channel::Empty),
                (9_000, Channel::Content),
                (12_000, Channel::Content),
                (13_000, Channel::Empty),
            ],
            Some(2),
        );
        let opts = RecordOptions {
            base_raw: 0,
            origin: LatencyOrigin::Sent,
            predicate: TtftPredicate::FirstChoice,
            end: RequestEnd::LastChoice,
        };
        let r = RequestRecord::from_timeline(&t, &clock, &opts, 10, 0);
        // TTFT = 5000 - 1500 = 3500; gaps 4000, 3000, 1000; E2EL = 13000 - 1500 = 11500.
        assert_eq!(r.ttft_ns(), Some(3_500));
        assert_eq!(r.itls_ns().collect::<Vec<_>>(), vec![4_000, 3_000, 1_000]);
        assert_eq!(r.e2el_ns(), Some(11_500));
        // TPOT = (11500 - 3500) / (2 - 1) = 8000.
        assert_eq!(r.tpot_ns(), Some(8_000.0));

        // Content predicate, scheduled origin: TTFT = 9000 - 1000 = 8000; the role chunk and
        // its gap drop out: gaps 3000, 1000; E2EL = 13000 - 1000 = 12000.
        let opts = RecordOptions {
            origin: LatencyOrigin::Scheduled,
            predicate: TtftPredicate::FirstContent,
            ..opts
        };
        let r = RequestRecord::from_timeline(&t, &clock, &opts, 10, 0);
        assert_eq!(r.ttft_ns(), Some(8_000));
        assert_eq!(r.itls_ns().collect::<Vec<_>>(), vec![3_000, 1_000]);
        assert_eq!(r.e2el_ns(), Some(12_000));

        // A stream with only a role chunk has no first content token: not completed.
        let empty = chat_timeline(&[(5_000, Channel::Empty)], Some(0));
        let r = RequestRecord::from_timeline(&empty, &clock, &opts, 10, 0);
        assert_eq!(r.failure(), Some(FailureKind::NoOutput));
    }

    #[test]
    fn failed_timeline_keeps_its_error_kind() {
        let (clock, _) = Clock::mock();
        let mut t = chat_timeline(&[(5_000, Channel::Content)], None);
        t.outcome = Err(RequestError::new(
            ErrorKind::TimeoutGap,
            "no event for 30 s",
        ));
        let opts = RecordOptions {
            base_raw: 0,
            origin: LatencyOrigin::Scheduled,
            predicate: TtftPredicate::FirstChoice,
            end: RequestEnd::LastChoice,
        };
        let r = RequestRecord::from_timeline(&t, &clock, &opts, 10, 0);
        assert_eq!(r.failure(), Some(FailureKind::Error(ErrorKind::TimeoutGap)));
        // Without usage, the per-event counts give the tokens.
        assert_eq!(r.output_tokens, 1);
        // A usage of 0 next to output events falls back to the events too (vLLM's `if not`).
        let mut t = chat_timeline(
            &[(5_000, Channel::Content), (6_000, Channel::Content)],
            Some(0),
        );
        t.outcome = Ok(());
        let r = RequestRecord::from_timeline(&t, &clock, &opts, 10, 0);
        assert_eq!((r.output_tokens, r.is_success()), (2, true));
    }

    #[test]
    fn one_output_token_has_no_tpot() {
        // A: 1 token, start 0, one chunk at 50 ms. B: 3 tokens, start 0, chunks 20, 40, 60 ms.
        let m = compute(&[ok(0, &[50], 1), ok(0, &[20, 40, 60], 3)], S, &cfg());
        // TPOT only from B: (60 - 20) / (3 - 1) = 20 ms; a single sample, std 0.
        assert_eq!(m.tpot_ms.count, 1);
        assert_close(m.tpot_ms.mean, 20.0);
        assert_close(m.tpot_ms.std, 0.0);
        // TTFT over both: mean (50 + 20) / 2 = 35, p99 of [20, 50] = 50 - 30 * 0.01 = 49.7.
        assert_close(m.ttft_ms.mean, 35.0);
        assert_close(m.ttft_ms.percentiles[0].1, 49.7);
        // ITLs pool only B's gaps: 20 and 20.
        assert_eq!(m.itl_ms.count, 2);
        assert_close(m.itl_ms.median, 20.0);
    }

    #[test]
    fn failed_requests_are_counted_not_summarised() {
        let mut bad = ok(0, &[10_000], 50);
        bad.error = Some(ErrorKind::HttpStatus);
        bad.queue_ns = 3 * MS;
        let mut bad2 = ok(0, &[], 0);
        bad2.error = Some(ErrorKind::HttpStatus);
        let mut timeout = ok(0, &[], 0);
        timeout.error = Some(ErrorKind::TimeoutTotal);
        let silent = ok(0, &[], 0);
        let good = ok(0, &[100, 200], 2);
        let m = compute(&[bad, bad2, timeout, silent, good], 4 * S, &cfg());
        assert_eq!((m.completed, m.failed), (1, 4));
        let kinds: Vec<_> = m.failures.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(
            kinds,
            vec![("http_status", 2), ("timeout_total", 1), ("no_output", 1)]
        );
        // Only the good request counts: 100 input, 2 output, TTFT 100, E2EL 200.
        assert_eq!((m.total_input_tokens, m.total_output_tokens), (100, 2));
        assert_close(m.ttft_ms.mean, 100.0);
        assert_close(m.e2el_ms.median, 200.0);
        // vLLM's lists hold every request in order, a failed one's latency 0.
        assert_eq!(m.latencies_s, vec![0.0, 0.0, 0.0, 0.0, 0.2]);
        assert_eq!(m.queue_times_s, vec![0.003, 0.0, 0.0, 0.0, 0.0]);
        // The queue-time summary is over the successful request only, as vLLM's.
        assert_eq!(m.client_queue_time_ms.count, 1);
        assert_close(m.client_queue_time_ms.mean, 0.0);
        // 1 completed request in 4 s.
        assert_close(m.request_throughput, 0.25);
    }

    #[test]
    fn no_successful_request_reports_zeros() {
        let mut bad = ok(0, &[], 0);
        bad.error = Some(ErrorKind::Connect);
        let m = compute(&[bad], S, &cfg());
        assert_eq!(m.completed, 0);
        assert_eq!(m.ttft_ms.mean, 0.0);
        assert_eq!(m.itl_ms.percentiles, vec![(99.0, 0.0)]);
        assert_eq!(
            (m.max_output_tokens_per_s, m.max_concurrent_requests),
            (0.0, 0)
        );
        // A zero duration gives zero rates, not NaN.
        let m = compute(&[ok(0, &[1], 1)], 0, &cfg());
        assert_eq!(m.request_throughput, 0.0);
    }

    #[test]
    fn goodput_checks_each_given_slo() {
        // A: TTFT 100, E2EL 1000, 10 tokens -> TPOT (1000 - 100) / 9 = 100 ms.
        // B: TTFT 300, E2EL 500, 5 tokens  -> TPOT (500 - 300) / 4 = 50 ms.
        // C: TTFT 50, E2EL 50, 1 token     -> TPOT counts as 0 for goodput.
        let recs = [
            ok(0, &[100, 1000], 10),
            ok(0, &[300, 500], 5),
            ok(0, &[50], 1),
        ];
        let good = |slo: &[&str]| {
            let cfg = MetricsConfig {
                goodput: Some(GoodputSlo::parse(slo).expect("valid")),
                ..cfg()
            };
            let m = compute(&recs, 2 * S, &cfg);
            (
                m.good_completed.expect("goodput set"),
                m.request_goodput.expect("set"),
            )
        };
        // TTFT <= 100: A (equal passes) and C.
        assert_eq!(good(&["ttft:100"]), (2, 1.0));
        // TPOT <= 60: B and C (C's 0).
        assert_eq!(good(&["tpot:60"]), (2, 1.0));
        // E2EL <= 500: B and C.
        assert_eq!(good(&["e2el:500"]), (2, 1.0));
        // Every SLO at once: only C passes TTFT <= 100, TPOT <= 60 and E2EL <= 500.
        assert_eq!(good(&["ttft:100", "tpot:60", "e2el:500"]), (1, 0.5));
        // Without --goodput the figure is absent (JSON null).
        let m = compute(&recs, 2 * S, &cfg());
        assert_eq!((m.request_goodput, m.good_completed), (None, None));
    }

    #[test]
    fn goodput_parse_errors_are_clear() {
        let err = |s: &str| GoodputSlo::parse(&[s]).expect_err("must fail").to_string();
        assert!(err("ttft").contains("KEY:VALUE"));
        assert!(err("ttft:abc").contains("KEY:VALUE"));
        assert!(err("latency:5").contains("unknown goodput metric"));
        assert!(err("tpot:-1").contains("non-negative"));
        assert_eq!(
            GoodputSlo::parse(&["ttft:1.5", "e2el:20"]),
            Ok(GoodputSlo {
                ttft_ms: Some(1.5),
                tpot_ms: None,
                e2el_ms: Some(20.0)
            })
        );
    }

    #[test]
    fn sweep_line_counts_touching_intervals_as_overlapping() {
        // [0, 100], [100, 200], [200, 300] ms: each touches the next; peak 2 (at 100 and 200).
        let chain = [ok(0, &[100], 1), ok(100, &[200], 1), ok(200, &[300], 1)];
        assert_eq!(compute(&chain, S, &cfg()).max_concurrent_requests, 2);
        // [0, 100] and [101, 200]: disjoint, peak 1.
        let apart = [ok(0, &[100], 1), ok(101, &[200], 1)];
        assert_eq!(compute(&apart, S, &cfg()).max_concurrent_requests, 1);
        // Nested: [0, 1000], [10, 20], [15, 500], [30, 40] -> at 15..20 three are active.
        let nested = [
            ok(0, &[1000], 1),
            ok(10, &[20], 1),
            ok(15, &[500], 1),
            ok(30, &[40], 1),
        ];
        let m = compute(&nested, S, &cfg());
        assert_eq!(m.max_concurrent_requests, 3);
        // vLLM's bucketed count puts all four in second 0.
        assert_eq!(m.max_concurrent_requests_bucketed, 4);
    }

    proptest::proptest! {
        /// The sweep line against its naive twin: the most closed intervals containing any
        /// interval start (a peak is always reached at some start).
        #[test]
        fn sweep_line_matches_naive(
            spans in proptest::collection::vec((0u64..50, 0u64..20), 0..40),
        ) {
            let recs: Vec<_> = spans.iter().map(|&(s, len)| ok(s, &[s + len], 1)).collect();
            let naive = spans
                .iter()
                .map(|&(t, _)| spans.iter().filter(|&&(s, len)| s <= t && t <= s + len).count())
                .max()
                .unwrap_or(0);
            proptest::prop_assert_eq!(peak_concurrency(&recs), naive);
        }
    }

    #[test]
    fn output_tokens_per_second_uses_one_second_buckets() {
        // Earliest start 500 ms. Bucket = floor((t - 500 ms) / 1 s).
        // A (start 500): chunks 600, 900, 1400 -> buckets 0, 0, 0; 1500 -> bucket 1.
        // B (start 700): chunks 1499 -> bucket 0; 1500, 2400 -> 1; 2500 -> 2.
        // Bucket 0: 4 chunks, bucket 1: 3, bucket 2: 1 -> peak 4.
        let recs = [
            ok(500, &[600, 900, 1400, 1500], 40),
            ok(700, &[1499, 1500, 2400, 2500], 40),
        ];
        let m = compute(&recs, 3 * S, &cfg());
        // Chunks, not usage tokens, are counted (vLLM).
        assert_eq!(m.max_output_tokens_per_s, 4.0);
        // Both active in bucket 1: A spans buckets 0..=1, B spans 0..=2.
        assert_eq!(m.max_concurrent_requests_bucketed, 2);
    }

    #[test]
    fn keys_follow_vllm_names_and_order() {
        let cfg = MetricsConfig {
            percentiles: vec![50.0, 99.0, 99.9],
            goodput: None,
        };
        let m = compute(&[ok(0, &[10, 20, 40], 3)], S, &cfg);
        // Flag order does not matter: vLLM prints ttft, tpot, itl, e2el.
        let selected = MetricKind::parse_list("e2el,ttft").expect("valid");
        let keys: Vec<String> = metric_values(&m, &selected)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            [
                "mean_ttft_ms",
                "median_ttft_ms",
                "std_ttft_ms",
                "p50_ttft_ms",
                "p99_ttft_ms",
                "p99.9_ttft_ms",
                "mean_e2el_ms",
                "median_e2el_ms",
                "std_e2el_ms",
                "p50_e2el_ms",
                "p99_e2el_ms",
                "p99.9_e2el_ms",
            ]
        );
        let values = metric_values(&m, &[MetricKind::Itl]);
        // ITLs 10 and 20 ms: mean 15, median 15, std 5, p50 15, p99 10 + 10 * 0.99 = 19.9.
        let want = [15.0, 15.0, 5.0, 15.0, 19.9];
        for ((_, got), want) in values.iter().zip(want) {
            assert_close(*got, want);
        }
    }

    #[test]
    fn flag_values_parse() {
        assert_eq!(
            MetricKind::parse_list("ttft,tpot,itl"),
            Ok(vec![MetricKind::Ttft, MetricKind::Tpot, MetricKind::Itl])
        );
        assert!(MetricKind::parse_list("ttft,foo").is_err());
        assert_eq!(parse_percentiles("99, 99.9,50"), Ok(vec![99.0, 99.9, 50.0]));
        assert!(parse_percentiles("101").is_err());
        assert!(parse_percentiles("p99").is_err());
        assert_eq!(percentile_label(99.0), "99");
        assert_eq!(percentile_label(99.9), "99.9");
        assert_eq!(percentile_label(0.5), "0.5");
    }

    #[test]
    fn bogus_usage_counts_saturate_instead_of_overflowing() {
        // Two requests whose server reported usage.completion_tokens = u64::MAX.
        let records = [ok(0, &[10, 20], u64::MAX), ok(0, &[10, 30], u64::MAX)];
        let m = compute(&records, S, &cfg());
        assert_eq!(m.completed, 2);
        assert_eq!(m.total_output_tokens, u64::MAX);
        assert!(m.total_token_throughput.is_finite());
        // Out-of-order chunk stamps cannot underflow TPOT.
        let odd = RequestRecord {
            chunk_times_ns: vec![30 * MS, 10 * MS],
            ..ok(0, &[], 3)
        };
        assert_eq!(odd.tpot_ns(), Some(0.0));
    }
}
