//! The client's own lag, and the error bound it puts on each figure: the one definition that
//! `bench serve`, `bench sglang`, every matrix cell and `selftest` compute from the timelines
//! (docs/methodology.md, "The client's lag and the error bounds").
//!
//! - **Read lag**: per read that completed events, the kernel's receive stamp → the read
//!   returning (the wake-up latency the read loop already takes out of the stamp), and how
//!   many tokens that read held.
//! - **Dispatch lag**: per request, its intended start (the schedule's instant; the moment a
//!   closed loop's slot was taken up) → the request written, split into how late the runner
//!   got to it, taking a connection (pooled or new) and writing it.
//! - **Arrival bounds**: the kernel keeps one stamp per read, that of its newest data
//!   (segments waiting together are coalesced and keep the newest stamp). So the read's last
//!   event arrived at its stamp, to the stamp's resolution; an earlier event of the same read
//!   arrived at some moment after the previous read's stamp (a read that did not fill its
//!   buffer took all there was; earlier still when it did fill it: what it left may be as old
//!   as its own data). Each token
//!   event's true arrival lies in `[t - early, t]`, and every figure built on stamps gets an
//!   interval: a gap whose two ends were read apart is known to [`STAMP_RESOLUTION_NS`]; a gap
//!   with an end in a read that held several events is known to that read's spread.
//! - **Verdict**: [`verdict`] says when those bounds, or the dispatch lag, make a run's
//!   figures untrustworthy (the run is Client-bound).
//!
//! Pure: timelines in, figures out; the [`Clock`] given only converts stamps to nanoseconds
//! (it is never read). Nothing here runs on the per-token path.

use crate::analysis::batching::{BatchSamples, Batching};
use crate::analysis::stats;
use crate::clock::Clock;
use crate::timeline::{StampSource, Timeline};
use std::ops::Range;

/// What a stamp that is the data's arrival is known to: the kernel stamp's move onto the TSC
/// clock (a realtime reading between two TSC readings, read again when a pause split them:
/// `net::stamp::clock_pair`) and the spread of delivery on the same host. Checked against the
/// simulated server's trace by `selftest` (docs/selftest.md).
pub const STAMP_RESOLUTION_NS: u64 = 20_000;

/// A run is Client-bound when the bound on a printed gap percentile (p50, p99) exceeds this
/// share of the percentile measured.
pub const GAP_BOUND_SHARE: f64 = 0.10;
/// ... or when the median dispatch lag exceeds this share of the median TTFT (both from the
/// intended start).
pub const DISPATCH_SHARE: f64 = 0.10;
/// ... or when the bound on the median TTFT exceeds this share of it.
pub const TTFT_BOUND_SHARE: f64 = 0.10;

/// A token event's arrival, as its read bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// The read's stamp: the event had arrived by then.
    pub t: u64,
    pub tokens: u32,
    /// How much earlier than `t` it may have arrived, ns: 0 when it is its read's newest
    /// data; `None` when the stamp is the client's own (the wake-up is unknown, so is the
    /// arrival).
    pub early_ns: Option<u64>,
}

/// Each token event's arrival bounds, in order (see the module docs).
///
/// A read that did not fill its buffer took everything the socket held when it took it, so
/// its stamp is that of its last event (its newest data), and whatever the next read holds
/// came after it: after this read's stamp, and no later bound is known (the stamp of the
/// moment the read took the data is not kept: the read lag runs to when it returned, and a
/// client preempted between the two returns late from a read that was on time). A read that
/// filled its buffer may have left data that waited since before its own stamp (segments
/// waiting together keep the newest one's stamp), so neither its last event nor the next
/// read's are known better than its own first data. A read on the client's own clock is
/// stamped when it returned, after data it did not take may have come: no bound from it.
///
/// Under `--packet-stamps` (every read of the timeline took its events' times from the packet
/// ring: [`StampSource::Packet`]) each event's stamp is the arrival of the segment that carried
/// it, whatever else the read held: events stamped alike came in one segment, together. Every
/// event is then known to the stamp's resolution. A timeline where the ring missed a read is
/// `Mixed` and gets the rule above for all of its reads.
pub fn arrivals(tl: &Timeline, clock: &Clock) -> Vec<Arrival> {
    let mut out = Vec::with_capacity(tl.events.len());
    let own_segments = tl.stamp_source() == StampSource::Packet;
    // The response cannot have arrived before the request left.
    let mut since = tl.send_start.unwrap_or(tl.intended_start);
    for r in tl.reads() {
        let full = tl.read_was_full(r.end);
        let spread = clock.delta_ns(since, r.t);
        for i in r.first..r.end {
            let e = tl.events[i];
            if e.tokens == 0 {
                continue;
            }
            let newest = own_segments || (i + 1 == r.end && !full);
            out.push(Arrival {
                t: r.t,
                tokens: e.tokens,
                early_ns: r.lag_ns.map(|_| if newest { 0 } else { spread }),
            });
        }
        if !full && r.lag_ns.is_some() {
            since = since.max(r.t);
        }
    }
    out
}

/// How well the client knows a gap between two consecutive token events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GapKind {
    /// Both ends were their reads' newest data: known to the stamp's resolution.
    Apart,
    /// An end shared its read with earlier data (or came in a read that left data waiting):
    /// known to that read's spread.
    Merged,
    /// An end carries the client's own stamp: no bound.
    Unbounded,
}

/// One gap between consecutive token events, with its bound: the true gap lies in
/// `[measured - below, measured + above]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub measured_ns: i64,
    pub kind: GapKind,
    pub below_ns: u64,
    pub above_ns: u64,
}

impl Gap {
    /// Between consecutive arrivals `a` and `b`.
    pub fn between(a: &Arrival, b: &Arrival, clock: &Clock) -> Gap {
        let measured_ns = clock.signed_delta_ns(a.t, b.t);
        match (a.early_ns, b.early_ns) {
            (Some(ea), Some(eb)) => Gap {
                measured_ns,
                kind: if ea == 0 && eb == 0 {
                    GapKind::Apart
                } else {
                    GapKind::Merged
                },
                // `b` may have come up to `eb` earlier (gap shorter), `a` up to `ea` (longer).
                below_ns: eb + STAMP_RESOLUTION_NS,
                above_ns: ea + STAMP_RESOLUTION_NS,
            },
            _ => Gap {
                measured_ns,
                kind: GapKind::Unbounded,
                below_ns: 0,
                above_ns: 0,
            },
        }
    }

    /// The stated bound on this gap's error, ns; `None` without one.
    pub fn bound_ns(&self) -> Option<u64> {
        (self.kind != GapKind::Unbounded).then_some(self.below_ns.max(self.above_ns))
    }

    /// Whether a true gap known to lie in `[lo_ns, hi_ns]` may lie inside the bound (the two
    /// meet; `lo_ns == hi_ns` for a truth known exactly).
    pub fn covers(&self, lo_ns: i64, hi_ns: i64) -> bool {
        self.kind != GapKind::Unbounded
            && hi_ns >= self.measured_ns.saturating_sub(self.below_ns as i64)
            && lo_ns <= self.measured_ns.saturating_add(self.above_ns as i64)
    }
}

/// A figure in ms and the bound on its error (ms): the truth lies within `value ± bound`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounded {
    pub value: f64,
    pub bound: f64,
}

/// p50, p99 and max.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        let s = stats::Summary::compute(v, &[50.0, 99.0])?;
        Some(Spread {
            p50: s.percentiles[0].1,
            p99: s.percentiles[1].1,
            max: v.iter().copied().fold(f64::MIN, f64::max),
        })
    }
}

/// Samples of one measurement (a bench run, a matrix cell's window, a self-test), gathered
/// timeline by timeline and summarised once.
#[derive(Clone, Debug, Default)]
pub struct LagSamples {
    read_lag_us: Vec<f64>,
    tokens_per_read: Vec<f64>,
    reads_several: u64,
    /// Reads (that completed token events) which filled the read buffer.
    reads_left: u64,
    /// Per read the kernel counted it for: the bytes the socket held when the read took them.
    socket_bytes: Vec<f64>,
    dispatch_ms: Vec<f64>,
    late_ms: Vec<f64>,
    connect_ms: Vec<f64>,
    write_ms: Vec<f64>,
    /// Gaps with a bound: (measured, below, above), ms.
    gaps: Vec<(f64, f64, f64)>,
    gaps_apart: u64,
    gaps_merged: u64,
    gaps_unbounded: u64,
    /// Per request, TTFT from the intended start: (measured, below, above), ms.
    ttft: Vec<(f64, f64, f64)>,
    /// Per request, time per output token after the first: (measured, below, above), ms.
    tpot: Vec<(f64, f64, f64)>,
    tokens: u64,
    /// Tokens whose arrival interval crosses an edge of the window (counted on the wrong
    /// side, perhaps), and tokens without a bound.
    edge_tokens: u64,
    unbounded_tokens: u64,
    /// Which clock stamped the reads counted, over every request that had one.
    source: Option<StampSource>,
    /// How the tokens came: batched upstream or one by one (`analysis::batching`).
    batching: BatchSamples,
}

impl LagSamples {
    /// One request's timeline; only what was stamped inside `window` counts (a matrix
    /// cell's window; `0..u64::MAX` for a whole run).
    pub fn add(&mut self, tl: &Timeline, clock: &Clock, window: Range<u64>) {
        self.add_reads(tl, &window);
        self.add_dispatch(tl, clock, &window);
        let arr = arrivals(tl, clock);
        self.add_arrivals(tl, clock, &arr, &window);
        self.batching.add(tl, clock, window);
    }

    fn add_reads(&mut self, tl: &Timeline, window: &Range<u64>) {
        if tl.reads().any(|r| window.contains(&r.t)) {
            let s = tl.stamp_source();
            self.source = Some(self.source.map_or(s, |a| a.combine(s)));
        }
        for r in tl.reads().filter(|r| window.contains(&r.t)) {
            if let Some(lag) = r.lag_ns {
                self.read_lag_us.push(f64::from(lag) / 1e3);
            }
            if r.tokens > 0 {
                self.tokens_per_read.push(f64::from(r.tokens));
                self.reads_several += u64::from(r.tokens > 1);
                self.reads_left += u64::from(tl.read_was_full(r.end));
            }
            let held = tl.events[r.first].socket_bytes;
            if held > 0 {
                self.socket_bytes.push(f64::from(held));
            }
        }
    }

    fn add_dispatch(&mut self, tl: &Timeline, clock: &Clock, window: &Range<u64>) {
        let (Some(sent), Some(written)) = (tl.send_start, tl.write_done) else {
            return;
        };
        if !window.contains(&written) {
            return;
        }
        let ms = |a: u64, b: u64| clock.delta_ns(a, b) as f64 / 1e6;
        let taken = tl.connect_start.unwrap_or(sent);
        self.dispatch_ms.push(ms(tl.intended_start, written));
        self.late_ms.push(ms(tl.intended_start, taken));
        self.connect_ms.push(ms(taken, sent));
        self.write_ms.push(ms(sent, written));
    }

    fn add_arrivals(&mut self, tl: &Timeline, clock: &Clock, arr: &[Arrival], w: &Range<u64>) {
        let res = STAMP_RESOLUTION_NS as f64 / 1e6;
        let ms = |ns: u64| ns as f64 / 1e6;
        for a in arr {
            let inside = w.contains(&a.t);
            self.tokens += if inside { u64::from(a.tokens) } else { 0 };
            match a.early_ns {
                None if inside => self.unbounded_tokens += u64::from(a.tokens),
                None => {}
                Some(e) => {
                    let from = clock.sub_ns(a.t, e);
                    let crosses = (inside && from < w.start) || (a.t >= w.end && from < w.end);
                    self.edge_tokens += if crosses { u64::from(a.tokens) } else { 0 };
                }
            }
        }
        for pair in arr
            .windows(2)
            .filter(|p| w.contains(&p[0].t) && w.contains(&p[1].t))
        {
            let g = Gap::between(&pair[0], &pair[1], clock);
            match g.kind {
                GapKind::Apart => self.gaps_apart += 1,
                GapKind::Merged => self.gaps_merged += 1,
                GapKind::Unbounded => {
                    self.gaps_unbounded += 1;
                    continue;
                }
            }
            self.gaps
                .push((g.measured_ns as f64 / 1e6, ms(g.below_ns), ms(g.above_ns)));
        }
        let (Some(first), Some(last)) = (arr.first(), arr.last()) else {
            return;
        };
        if !w.contains(&first.t) {
            return;
        }
        let (Some(e_first), Some(e_last)) = (first.early_ns, last.early_ns) else {
            return;
        };
        let ttft = clock.delta_ns(tl.intended_start, first.t) as f64 / 1e6;
        self.ttft.push((ttft, ms(e_first) + res, res));
        let n: u64 = arr.iter().map(|a| u64::from(a.tokens)).sum();
        if n >= 2 {
            let per = (n - 1) as f64;
            let span = clock.delta_ns(first.t, last.t) as f64 / 1e6;
            self.tpot.push((
                span / per,
                (ms(e_last) + res) / per,
                (ms(e_first) + res) / per,
            ));
        }
    }

    /// The figures, with the client's CPU as the caller measured it.
    pub fn summary(&self, cpu: Option<Cpu>) -> ClientLag {
        let share = |n: u64, of: u64| (of > 0).then(|| 100.0 * n as f64 / of as f64);
        let reads = self.tokens_per_read.len() as u64;
        ClientLag {
            read_lag_us: Spread::of(&self.read_lag_us),
            reads,
            tokens_per_read_mean: stats::mean(&self.tokens_per_read),
            tokens_per_read_max: self.tokens_per_read.iter().copied().reduce(f64::max),
            reads_with_several_tokens_percent: share(self.reads_several, reads),
            reads_left_data_percent: share(self.reads_left, reads),
            socket_bytes: Spread::of(&self.socket_bytes),
            dispatch_lag_ms: Spread::of(&self.dispatch_ms),
            dispatch_late_ms_p99: stats::percentile(&self.late_ms, 99.0),
            dispatch_connect_ms_p99: stats::percentile(&self.connect_ms, 99.0),
            dispatch_write_ms_p99: stats::percentile(&self.write_ms, 99.0),
            gaps: self.gaps_apart + self.gaps_merged + self.gaps_unbounded,
            gaps_apart: self.gaps_apart,
            gaps_merged: self.gaps_merged,
            gaps_unbounded: self.gaps_unbounded,
            itl_ms_p50: percentile_bound(&self.gaps, 50.0),
            itl_ms_p99: percentile_bound(&self.gaps, 99.0),
            itl_ms_mean: mean_bound(&self.gaps),
            ttft_ms_p50: percentile_bound(&self.ttft, 50.0),
            ttft_ms_p99: percentile_bound(&self.ttft, 99.0),
            tpot_ms_p50: percentile_bound(&self.tpot, 50.0),
            tpot_ms_p99: percentile_bound(&self.tpot, 99.0),
            throughput_bound_percent: (self.unbounded_tokens == 0 && self.tokens > 0)
                .then(|| 100.0 * self.edge_tokens as f64 / self.tokens as f64),
            tokens_unbounded: self.unbounded_tokens,
            cpu,
            stamp_source: self.source,
            batching: self.batching.summary(),
        }
    }
}

/// The client's CPU over the measurement, as the caller measured it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cpu {
    /// CPU time over wall time, in percent of one core.
    pub percent_of_one_core: f64,
    /// Cores the process may run on.
    pub cores: usize,
}

impl Cpu {
    /// `cpu_s` of CPU over `wall_s`, on the cores this process may use.
    pub fn over(cpu_s: f64, wall_s: f64) -> Option<Cpu> {
        (wall_s > 0.0).then(|| Cpu {
            percent_of_one_core: 100.0 * cpu_s / wall_s,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
        })
    }

    /// The share of the process's cores used, percent.
    pub fn percent_of_cores(&self) -> f64 {
        self.percent_of_one_core / self.cores.max(1) as f64
    }
}

/// The `p`th percentile of samples `(measured, below, above)` and its bound: every true value
/// lies in its interval, so the true percentile lies between the percentiles of the lower ends
/// and of the upper ends (a percentile never decreases when any sample grows).
pub fn percentile_bound(samples: &[(f64, f64, f64)], p: f64) -> Option<Bounded> {
    let pick = |f: fn(&(f64, f64, f64)) -> f64| {
        let v: Vec<f64> = samples.iter().map(f).collect();
        stats::percentile(&v, p)
    };
    let value = pick(|s| s.0)?;
    let lo = pick(|s| s.0 - s.1)?;
    let hi = pick(|s| s.0 + s.2)?;
    Some(Bounded {
        value,
        bound: (value - lo).max(hi - value),
    })
}

/// The mean of samples `(measured, below, above)` and its bound.
pub fn mean_bound(samples: &[(f64, f64, f64)]) -> Option<Bounded> {
    let n = samples.len() as f64;
    let value = stats::mean(&samples.iter().map(|s| s.0).collect::<Vec<_>>())?;
    let below = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let above = samples.iter().map(|s| s.2).sum::<f64>() / n;
    Some(Bounded {
        value,
        bound: below.max(above),
    })
}

/// Every figure of the client's lag over one measurement. ms unless the name says otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientLag {
    /// Reads that completed token events, and how late the client woke up to them (µs; `None`
    /// when no read carried the kernel's stamp).
    pub reads: u64,
    pub read_lag_us: Option<Spread>,
    pub tokens_per_read_mean: Option<f64>,
    pub tokens_per_read_max: Option<f64>,
    pub reads_with_several_tokens_percent: Option<f64>,
    /// Reads that filled the read buffer, so may have left data waiting in the socket (the
    /// rule the bounds use; the kernel's own count is in `socket_bytes`).
    pub reads_left_data_percent: Option<f64>,
    /// The bytes the socket held when each read took its data (what it read and what it left),
    /// over the reads the kernel counted them for; `None` without such reads.
    pub socket_bytes: Option<Spread>,
    /// Intended start → request written, and its parts' p99.
    pub dispatch_lag_ms: Option<Spread>,
    pub dispatch_late_ms_p99: Option<f64>,
    pub dispatch_connect_ms_p99: Option<f64>,
    pub dispatch_write_ms_p99: Option<f64>,
    /// Gaps between consecutive token events, by how well they are known.
    pub gaps: u64,
    pub gaps_apart: u64,
    pub gaps_merged: u64,
    pub gaps_unbounded: u64,
    /// Gap (ITL) percentiles and mean over bounded gaps, with their bounds.
    pub itl_ms_p50: Option<Bounded>,
    pub itl_ms_p99: Option<Bounded>,
    pub itl_ms_mean: Option<Bounded>,
    /// TTFT from the intended start, per request.
    pub ttft_ms_p50: Option<Bounded>,
    pub ttft_ms_p99: Option<Bounded>,
    /// (last token − first token) / (tokens − 1), per request.
    pub tpot_ms_p50: Option<Bounded>,
    pub tpot_ms_p99: Option<Bounded>,
    /// Output throughput's bound, percent of it: tokens that may have arrived on the other
    /// side of the window's edges. `None` when some token has no bound.
    pub throughput_bound_percent: Option<f64>,
    /// Tokens whose arrival has no bound (their reads carry the client's own stamp).
    pub tokens_unbounded: u64,
    pub cpu: Option<Cpu>,
    /// Which clock stamped the reads (`None`: no read was counted).
    pub stamp_source: Option<StampSource>,
    /// How the tokens came: batched upstream or one by one (`analysis::batching`).
    pub batching: Batching,
}

impl ClientLag {
    /// Percent of gaps of a kind.
    pub fn gap_percent(&self, kind: GapKind) -> Option<f64> {
        let n = match kind {
            GapKind::Apart => self.gaps_apart,
            GapKind::Merged => self.gaps_merged,
            GapKind::Unbounded => self.gaps_unbounded,
        };
        (self.gaps > 0).then(|| 100.0 * n as f64 / self.gaps as f64)
    }
}

/// Why figures lack their bounds, so the stamp half of the verdict cannot judge them: some
/// tokens' reads carry the client's own stamp, and the stamp source says why (TLS, stamps
/// disabled, not Linux, ...). `None` when every token has its bound (or none was counted).
/// Said on the console and in the results instead of a bare "n/a".
pub fn no_bound_reason(lag: &ClientLag) -> Option<String> {
    if lag.tokens_unbounded == 0 && lag.gaps_unbounded == 0 {
        return None;
    }
    let source = lag.stamp_source?;
    let why = source.fallback()?.why_no_bound();
    Some(match source {
        StampSource::ClientClock(_) => format!(
            "no bounds, so no Client-bound verdict from them (the dispatch lag is still judged): {why}"
        ),
        _ => format!(
            "{:.1}% of gaps have no bound, and the bounds and the verdict cover the rest only: {why}",
            lag.gap_percent(GapKind::Unbounded).unwrap_or(0.0)
        ),
    })
}

/// Which gap percentiles a measurement prints, so which the verdict holds to their bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Printed {
    /// The median only (the matrix's time between tokens).
    Median,
    /// The median and the p99 (`bench serve`'s and `bench sglang`'s ITL).
    MedianAndP99,
}

/// Why the client limited a measurement, one phrase per reason (empty: it did not, as far as
/// its own figures tell): [`stamp_reasons`], then [`dispatch_reasons`].
pub fn verdict(lag: &ClientLag, printed: Printed) -> Vec<String> {
    let mut why = stamp_reasons(lag, printed);
    why.extend(dispatch_reasons(lag));
    why
}

/// How every reason [`dispatch_reasons`] gives begins.
const DISPATCH_REASON: &str = "requests were written ";

/// Whether a verdict's reasons say the requests were written late and nothing else: the one
/// thing per-segment (packet) stamps cannot vouch for, since each token's arrival is still
/// known. `false` for no reasons.
pub fn late_writes_alone<S: AsRef<str>>(reasons: &[S]) -> bool {
    !reasons.is_empty()
        && reasons
            .iter()
            .all(|r| r.as_ref().starts_with(DISPATCH_REASON))
}

/// The requests left late: the median dispatch lag over [`DISPATCH_SHARE`] of the median
/// TTFT. Both are the client's own clock readings, exact: no bound needed.
pub fn dispatch_reasons(lag: &ClientLag) -> Vec<String> {
    let mut why = Vec::new();
    if let (Some(d), Some(t)) = (lag.dispatch_lag_ms, lag.ttft_ms_p50) {
        if d.p50 > DISPATCH_SHARE * t.value {
            why.push(format!(
                "{DISPATCH_REASON}{:.3} ms after their intended start at p50, over {:.0}% of the TTFT p50 of {:.3} ms",
                d.p50,
                DISPATCH_SHARE * 100.0,
                t.value
            ));
        }
    }
    why
}

/// A bound wider than the stamps themselves know a figure to ([`STAMP_RESOLUTION_NS`], the
/// bound of a gap read apart). A figure known that well is not the client's doing, however
/// small it is: a server that writes several tokens at once has gaps of 0 ms, which no bound
/// is 10% of. (1 ps of slack for the float sums the bounds are.)
fn beyond_stamps(b: &Bounded) -> bool {
    b.bound > STAMP_RESOLUTION_NS as f64 / 1e6 + 1e-9
}

/// The stamps are too loose for the figures: the bound on a printed gap percentile over
/// [`GAP_BOUND_SHARE`] of it, or the bound on the TTFT p50 over [`TTFT_BOUND_SHARE`] of it.
pub fn stamp_reasons(lag: &ClientLag, printed: Printed) -> Vec<String> {
    let mut why = Vec::new();
    let p99 = (printed == Printed::MedianAndP99)
        .then_some(lag.itl_ms_p99)
        .flatten();
    for (name, b) in [("p50", lag.itl_ms_p50), ("p99", p99)] {
        if let Some(b) = b.filter(|b| b.bound > GAP_BOUND_SHARE * b.value && beyond_stamps(b)) {
            why.push(format!(
                "the gap {name} of {:.3} ms is known only to ±{:.3} ms (over {:.0}%): {:.0}% of gaps had an end read together with other tokens",
                b.value,
                b.bound,
                GAP_BOUND_SHARE * 100.0,
                lag.gap_percent(GapKind::Merged).unwrap_or(0.0)
            ));
        }
    }
    if let Some(t) = lag
        .ttft_ms_p50
        .filter(|t| t.bound > TTFT_BOUND_SHARE * t.value && beyond_stamps(t))
    {
        why.push(format!(
            "the TTFT p50 of {:.3} ms is known only to ±{:.3} ms (over {:.0}%)",
            t.value,
            t.bound,
            TTFT_BOUND_SHARE * 100.0
        ));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Channel, EventRecord, StampFallback};

    const RES: u64 = STAMP_RESOLUTION_NS;

    /// A timeline sent at 0 whose reads are `(stamp, lag ns, tokens per event...)`.
    fn timeline(reads: &[(u64, u32, &[u32])]) -> Timeline {
        let mut tl = Timeline::new(0, 16, false);
        tl.connect_start = Some(100);
        tl.send_start = Some(1_000);
        tl.write_done = Some(3_000);
        for &(t, lag, events) in reads {
            for &tokens in events {
                tl.events.push(EventRecord {
                    t,
                    tokens,
                    wakeup_ns: lag,
                    socket_bytes: 0,
                    channel: Channel::Content,
                });
            }
        }
        tl
    }

    /// A timeline of three one-token reads, each noted with `fallback` (`None`: a kernel stamp).
    fn noted(fallbacks: [Option<StampFallback>; 3]) -> Timeline {
        let mut tl = Timeline::new(0, 8, false);
        tl.send_start = Some(1_000);
        for (i, f) in fallbacks.into_iter().enumerate() {
            tl.events.push(EventRecord {
                t: 1_000_000 * (i as u64 + 1),
                tokens: 1,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            });
            tl.note_read(f, if f.is_none() { 5_000 } else { 0 }, i);
        }
        tl
    }

    fn lag_of(tl: &Timeline) -> ClientLag {
        let (clock, _h) = Clock::mock();
        let mut s = LagSamples::default();
        s.add(tl, &clock, 0..u64::MAX);
        s.summary(None)
    }

    #[test]
    fn figures_without_bounds_say_why() {
        // Kernel stamps: every figure has its bound, nothing to explain.
        let kernel = lag_of(&noted([None; 3]));
        assert!(kernel.itl_ms_p50.is_some());
        assert_eq!(no_bound_reason(&kernel), None);
        // TLS: no bound at all, and the reason names TLS instead of a bare "n/a".
        let tls = lag_of(&noted([Some(StampFallback::Tls); 3]));
        assert_eq!((tls.itl_ms_p50, tls.ttft_ms_p50), (None, None));
        assert_eq!(tls.tokens_unbounded, 3);
        let why = no_bound_reason(&tls).unwrap();
        assert!(
            why.starts_with("no bounds, so no Client-bound verdict"),
            "{why}"
        );
        assert!(why.contains("over TLS"), "{why}");
        assert!(verdict(&tls, Printed::MedianAndP99).is_empty());
        let off = lag_of(&noted([Some(StampFallback::Disabled); 3]));
        assert!(no_bound_reason(&off)
            .unwrap()
            .contains("--no-kernel-stamps"));
        // One of three reads on the client's clock: its two gaps of two lack a bound.
        let mixed = lag_of(&noted([None, Some(StampFallback::NoStamp), None]));
        assert_eq!((mixed.gaps, mixed.gaps_unbounded), (2, 2));
        let why = no_bound_reason(&mixed).unwrap();
        assert!(why.starts_with("100.0% of gaps have no bound"), "{why}");
        assert!(why.contains("without the kernel's receive stamp"), "{why}");
    }

    #[test]
    fn packet_stamps_know_every_event_even_in_one_read_or_one_segment() {
        let (clock, _h) = Clock::mock();
        // Two events in one segment (one stamp), then a read whose two events came in two
        // segments, then a read that filled its buffer.
        let reads: &[(u64, u32, &[u32])] = &[
            (1_000_000, 5_000, &[1, 1]),
            (2_000_000, 9_000, &[1]),
            (2_500_000, 4_000, &[1]),
            (3_000_000, 5_000, &[1]),
        ];
        let mut kernel = timeline(reads);
        kernel.full_reads.push(5);
        let arr = arrivals(&kernel, &clock);
        // Socket stamps: the first event of the shared stamp and the full read's are uncertain.
        assert_eq!(arr[0].early_ns, Some(1_000_000 - 1_000));
        assert_eq!(arr[4].early_ns, Some(500_000));
        let mut packet = timeline(reads);
        packet.full_reads.push(5);
        packet.note_packet_read(true, 0, None, 0, |_| 5_000);
        assert_eq!(packet.stamp_source(), StampSource::Packet);
        let arr = arrivals(&packet, &clock);
        assert!(arr.iter().all(|a| a.early_ns == Some(0)), "{arr:?}");
        let mut s = LagSamples::default();
        s.add(&packet, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!((lag.gaps, lag.gaps_apart, lag.gaps_merged), (4, 4, 0));
        // One read the ring missed: the whole timeline is Mixed, and the socket rule holds.
        packet.note_packet_read(false, 0, None, packet.events.len(), |_| 0);
        assert!(matches!(packet.stamp_source(), StampSource::Mixed(_)));
        assert_eq!(
            arrivals(&packet, &clock)[0].early_ns,
            Some(1_000_000 - 1_000)
        );
    }

    #[test]
    fn a_read_the_ring_saw_in_part_is_bounded_as_one_socket_stamped_read() {
        let (clock, _h) = Clock::mock();
        // Sent at 1 us. One read, kernel-stamped 1 ms (its newest data), returned 5 us later,
        // completed three events whose data truly arrived at 0.8, 0.9 and 1.0 ms: the ring
        // missed the first (it keeps the read's stamp) and holds the other two.
        let mut tl = timeline(&[
            (1_000_000, 0, &[1]),
            (900_000, 0, &[1]),
            (1_000_000, 0, &[1]),
        ]);
        let (read_t, returned) = (1_000_000, 1_005_000);
        tl.note_packet_read(false, read_t, None, 0, |t| (returned - t) as u32);
        // The read counts by its own stamp (beside packet-stamped reads, `mixed`).
        assert_eq!(tl.stamp_source(), StampSource::Kernel);
        let arr = arrivals(&tl, &clock);
        // One read, one stamp: its last event is its newest data; the earlier two came after
        // the send, by the read's stamp: [1 us, 1 ms].
        let bounds: Vec<(u64, u64)> = arr
            .iter()
            .map(|a| (a.t - a.early_ns.unwrap(), a.t))
            .collect();
        assert_eq!(
            bounds,
            vec![
                (1_000, 1_000_000),
                (1_000, 1_000_000),
                (1_000_000, 1_000_000)
            ]
        );
        // Every true arrival inside its bound (before, the first event stood alone at the
        // read's stamp as its own newest data: [1 ms, 1 ms], 0.2 ms off its truth).
        for (&(lo, hi), truth) in bounds.iter().zip([800_000, 900_000, 1_000_000]) {
            assert!(lo <= truth && truth <= hi, "{truth} outside [{lo}, {hi}]");
        }
        // The first gap measures 0 and is 0.1 ms in truth: inside its bound.
        let g = Gap::between(&arr[0], &arr[1], &clock);
        assert_eq!((g.measured_ns, g.kind), (0, GapKind::Merged));
        assert!(g.covers(100_000, 100_000), "{g:?}");
        assert!(tl.events.iter().all(|e| e.wakeup_ns == 5_000));
    }

    #[test]
    fn gaps_of_zero_known_to_the_stamps_resolution_are_not_the_clients_doing() {
        let (clock, _h) = Clock::mock();
        // The server wrote three tokens in one segment, then one more 1 ms later: gaps 0, 0
        // and 1 ms, each known to the stamps' resolution (packet stamps).
        let mut tl = timeline(&[(1_000_000, 5_000, &[1, 1, 1]), (2_000_000, 5_000, &[1])]);
        tl.note_packet_read(true, 0, None, 0, |_| 5_000);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        let p50 = lag.itl_ms_p50.unwrap();
        assert_eq!(p50.value, 0.0);
        assert!((p50.bound - RES as f64 / 1e6).abs() < 1e-12, "{p50:?}");
        assert!(
            verdict(&lag, Printed::MedianAndP99).is_empty(),
            "{:?}",
            verdict(&lag, Printed::MedianAndP99)
        );
        // The same gaps read with socket stamps: the first two tokens' arrivals are known only
        // to the read's spread, which is the client's doing.
        let tl = timeline(&[(1_000_000, 5_000, &[1, 1, 1]), (2_000_000, 5_000, &[1])]);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        assert!(!verdict(&s.summary(None), Printed::MedianAndP99).is_empty());
    }

    #[test]
    fn one_token_per_read_is_known_to_the_resolution() {
        let (clock, _h) = Clock::mock();
        // Three reads 1 ms apart, each woken 5 us after its data: every token its read's newest.
        let tl = timeline(&[
            (1_000_000, 5_000, &[1]),
            (2_000_000, 5_000, &[1]),
            (3_000_000, 5_000, &[1]),
        ]);
        let arr = arrivals(&tl, &clock);
        assert!(arr.iter().all(|a| a.early_ns == Some(0)), "{arr:?}");
        let g = Gap::between(&arr[0], &arr[1], &clock);
        assert_eq!(
            g,
            Gap {
                measured_ns: 1_000_000,
                kind: GapKind::Apart,
                below_ns: RES,
                above_ns: RES
            }
        );
        let at = |ns: i64| g.covers(ns, ns);
        assert!(at(1_000_000 + RES as i64) && !at(1_000_000 + RES as i64 + 1));
        assert!(at(1_000_000 - RES as i64) && !at(1_000_000 - RES as i64 - 1));
        // A truth known to a span is covered when the span meets the bound.
        assert!(g.covers(1_000_000 + RES as i64, 2_000_000));
        assert!(!g.covers(1_000_000 + RES as i64 + 1, 2_000_000));
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!(lag.reads, 3);
        assert_eq!(lag.read_lag_us.unwrap().p50, 5.0);
        assert_eq!(lag.tokens_per_read_mean, Some(1.0));
        assert_eq!(lag.reads_with_several_tokens_percent, Some(0.0));
        assert_eq!((lag.gaps, lag.gaps_apart, lag.gaps_merged), (2, 2, 0));
        let p50 = lag.itl_ms_p50.unwrap();
        assert_eq!(p50.value, 1.0);
        assert!((p50.bound - 0.02).abs() < 1e-12);
        // TTFT from the intended start (0) to 1 ms, known to the resolution.
        let ttft = lag.ttft_ms_p50.unwrap();
        assert_eq!(ttft.value, 1.0);
        assert!((ttft.bound - 0.02).abs() < 1e-12);
        // Dispatch: late 100 ns, connection 900 ns, write 2 us: 3 us in all.
        assert_eq!(lag.dispatch_lag_ms.unwrap().p50, 0.003);
        assert_eq!(lag.dispatch_late_ms_p99, Some(0.0001));
        assert_eq!(lag.dispatch_connect_ms_p99, Some(0.0009));
        assert_eq!(lag.dispatch_write_ms_p99, Some(0.002));
        assert_eq!(lag.throughput_bound_percent, Some(0.0));
        assert!(
            verdict(&lag, Printed::MedianAndP99).is_empty(),
            "{:?}",
            verdict(&lag, Printed::MedianAndP99)
        );
    }

    #[test]
    fn several_tokens_per_read_are_known_to_the_time_since_the_previous_read() {
        let (clock, _h) = Clock::mock();
        // Read 1 at 1 ms, woken 10 us late, took all there was. Read 2 stamped 4 ms (its
        // newest data), woken 2 ms late, holds three tokens: the first two arrived somewhere
        // in (1 ms, 4 ms]. Read 3 at 7 ms alone.
        let tl = timeline(&[
            (1_000_000, 10_000, &[1]),
            (4_000_000, 2_000_000, &[1, 1, 1]),
            (7_000_000, 10_000, &[1]),
        ]);
        let arr = arrivals(&tl, &clock);
        let early: Vec<Option<u64>> = arr.iter().map(|a| a.early_ns).collect();
        assert_eq!(
            early,
            vec![Some(0), Some(3_000_000), Some(3_000_000), Some(0), Some(0)]
        );
        let gaps: Vec<Gap> = arr
            .windows(2)
            .map(|p| Gap::between(&p[0], &p[1], &clock))
            .collect();
        // Into the merged read: measured 3 ms, the token may have come 3 ms earlier.
        assert_eq!(gaps[0].kind, GapKind::Merged);
        assert_eq!(gaps[0].below_ns, 3_000_000 + RES);
        assert_eq!(gaps[0].above_ns, RES);
        // Inside the read: measured 0; the truth is up to 3 ms either way.
        assert_eq!(gaps[1].measured_ns, 0);
        assert_eq!(gaps[1].bound_ns(), Some(3_000_000 + RES));
        assert!(gaps[1].covers(1_000_000, 1_000_000) && !gaps[1].covers(3_100_000, 3_200_000));
        // The read's last token closes a merged gap, then the next one is read apart.
        assert_eq!(gaps[2].kind, GapKind::Merged);
        assert_eq!(gaps[3].kind, GapKind::Apart);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!(lag.tokens_per_read_max, Some(3.0));
        assert!((lag.reads_with_several_tokens_percent.unwrap() - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!((lag.gaps_apart, lag.gaps_merged), (1, 3));
        // Gaps measured 3, 0, 0, 3 ms: the median (1.5 ms) is known to about ±3 ms.
        let p50 = lag.itl_ms_p50.unwrap();
        assert_eq!(p50.value, 1.5);
        // The median of the lower ends is -0.02 ms, of the upper ends 3.02 ms.
        assert!((p50.bound - 1.52).abs() < 1e-9, "{p50:?}");
        let why = verdict(&lag, Printed::MedianAndP99);
        assert!(why[0].contains("gap p50 of 1.500 ms"), "{why:?}");
        // TPOT: 6 ms over 4 gaps, the ends' reads both the newest: known to the resolution / 4.
        let tpot = lag.tpot_ms_p50.unwrap();
        assert_eq!(tpot.value, 1.5);
        assert!((tpot.bound - 0.005).abs() < 1e-12);
    }

    #[test]
    fn a_read_stamped_before_its_predecessor_returned_leaves_both_exact() {
        let (clock, _h) = Clock::mock();
        // Read 1 at 1 ms returns at 1.5 ms; read 2 is stamped 2 ms, returns 2.5 ms; read 3 is
        // stamped 2.1 ms, before read 2 returned. Read 2 did not fill its buffer, so it took
        // all the socket held when it took it: read 3's data came after that, and read 2 was
        // late only in returning (preempted after its recvmsg, say). Read 2's token is its
        // newest data; read 3's first token came after read 2's stamp.
        let tl = timeline(&[
            (1_000_000, 500_000, &[1]),
            (2_000_000, 500_000, &[1]),
            (2_100_000, 10_000, &[1, 1]),
        ]);
        let early: Vec<Option<u64>> = arrivals(&tl, &clock).iter().map(|a| a.early_ns).collect();
        assert_eq!(early, vec![Some(0), Some(0), Some(100_000), Some(0)]);
    }

    #[test]
    fn a_client_that_returns_late_from_reads_it_took_on_time_is_not_client_bound() {
        let (clock, _h) = Clock::mock();
        // A token every 1 ms, each read alone (the client took each before the next came), but
        // every read returned 1.5 ms after its data: the thread ran late after its recvmsg
        // (a loaded machine preempts it there), so each next token is stamped before its
        // predecessor returned. Each read is its own newest data: every gap is known to the
        // resolution, and nothing is wrong with the figures. (Holding such reads to a bound
        // that runs back to before the previous one chained their spreads over every read
        // and called the run Client-bound.)
        let reads: Vec<(u64, u32, &[u32])> = (1..=40)
            .map(|k| (k * 1_000_000, 1_500_000, &[1u32][..]))
            .collect();
        let tl = timeline(&reads);
        let arr = arrivals(&tl, &clock);
        assert!(arr.iter().all(|a| a.early_ns == Some(0)), "{arr:?}");
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!((lag.gaps_apart, lag.gaps_merged), (39, 0));
        assert_eq!(lag.read_lag_us.unwrap().p99, 1_500.0);
        let p99 = lag.itl_ms_p99.unwrap();
        assert_eq!(p99.value, 1.0);
        assert!((p99.bound - 0.02).abs() < 1e-12, "{p99:?}");
        let ttft = lag.ttft_ms_p50.unwrap();
        assert!((ttft.bound - 0.02).abs() < 1e-12, "{ttft:?}");
        assert_eq!(verdict(&lag, Printed::MedianAndP99), Vec::<String>::new());
    }

    #[test]
    fn a_burst_read_after_a_prompt_one_is_bounded_from_that_reads_stamp_only() {
        let (clock, _h) = Clock::mock();
        // The server fell behind and wrote three tokens at once at 5 ms, after one at 1 ms
        // that the client read at once. The client cannot tell a burst from tokens that
        // waited: the first two may have come any time after 1 ms, never before it, however
        // late the reads returned.
        let tl = timeline(&[
            (1_000_000, 3_500_000, &[1]),
            (5_000_000, 20_000, &[1, 1, 1]),
        ]);
        let early: Vec<Option<u64>> = arrivals(&tl, &clock).iter().map(|a| a.early_ns).collect();
        assert_eq!(
            early,
            vec![Some(0), Some(4_000_000), Some(4_000_000), Some(0)]
        );
    }

    /// Hand-worked: four reads. The first took everything (the kernel said nothing); the
    /// kernel said the second found 300 bytes and left some; the third filled its buffer where
    /// the kernel did not say; the fourth found 120 bytes and left none. Half the reads left
    /// data; the bytes held are the two counts.
    #[test]
    fn reads_that_left_data_and_the_bytes_the_socket_held() {
        let (clock, _h) = Clock::mock();
        let mut tl = timeline(&[
            (1_000_000, 10_000, &[1]),
            (2_000_000, 10_000, &[1, 1]),
            (3_000_000, 10_000, &[1]),
            (4_000_000, 10_000, &[1]),
        ]);
        tl.note_socket_bytes(1, 300);
        tl.full_reads.push(3);
        tl.full_reads.push(4);
        tl.note_socket_bytes(4, 120);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!(lag.reads, 4);
        assert_eq!(lag.reads_left_data_percent, Some(50.0));
        // numpy's linear percentiles of [120, 300].
        let held = lag.socket_bytes.unwrap();
        assert_eq!((held.p50, held.max), (210.0, 300.0));
        assert!((held.p99 - 298.2).abs() < 1e-9, "{held:?}");
        // The reads that left data keep the next reads' data as old as theirs (since 1 ms);
        // the last read took everything, so its one event is its newest data.
        let early: Vec<Option<u64>> = arrivals(&tl, &clock).iter().map(|a| a.early_ns).collect();
        assert_eq!(
            early,
            vec![
                Some(0),
                Some(1_000_000),
                Some(1_000_000),
                Some(2_000_000),
                Some(0)
            ]
        );
        // Nothing counted: no figure.
        let none = timeline(&[(1_000_000, 10_000, &[1])]);
        let mut s = LagSamples::default();
        s.add(&none, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!(
            (lag.reads_left_data_percent, lag.socket_bytes),
            (Some(0.0), None)
        );
    }

    #[test]
    fn a_read_that_filled_its_buffer_keeps_the_next_reads_data_as_old_as_its_own() {
        let (clock, _h) = Clock::mock();
        // Read 1 at 1 ms took all there was. Read 2 stamped 5 ms, woken 1 ms late, filled its
        // buffer: its last token may not be its newest data, and what it left may have waited
        // since 1 ms. Read 3 stamped 6.5 ms, after read 2 returned (6 ms), still holds such
        // data.
        let mut tl = timeline(&[
            (1_000_000, 10_000, &[1]),
            (5_000_000, 1_000_000, &[1, 1]),
            (6_500_000, 10_000, &[1, 1]),
        ]);
        tl.full_reads.push(3);
        assert!(tl.read_was_full(3) && !tl.read_was_full(5));
        let early: Vec<Option<u64>> = arrivals(&tl, &clock).iter().map(|a| a.early_ns).collect();
        assert_eq!(
            early,
            vec![
                Some(0),
                Some(4_000_000),
                Some(4_000_000),
                Some(5_500_000),
                Some(0)
            ]
        );
        // Recording never grows the vector: past its capacity it says so instead.
        let mut small = Timeline::new(0, 0, false);
        let cap = small.full_reads.capacity();
        for i in 0..=cap {
            small.events.push(EventRecord {
                t: i as u64,
                tokens: 1,
                wakeup_ns: 1,
                socket_bytes: 0,
                channel: Channel::Content,
            });
            small.note_full_read();
            small.note_full_read();
        }
        assert_eq!(small.full_reads.len(), cap);
        assert_eq!(small.full_reads.capacity(), cap);
        assert!(small.full_reads_overflowed && small.read_was_full(1));
    }

    #[test]
    fn the_clients_own_stamps_give_no_bound() {
        let (clock, _h) = Clock::mock();
        let tl = timeline(&[(1_000_000, 0, &[1]), (2_000_000, 0, &[1])]);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!(lag.read_lag_us, None);
        assert_eq!((lag.gaps, lag.gaps_unbounded), (1, 1));
        assert_eq!(lag.itl_ms_p50, None);
        assert_eq!(lag.throughput_bound_percent, None);
        assert!(verdict(&lag, Printed::MedianAndP99).is_empty());
    }

    #[test]
    fn a_few_merged_gaps_loosen_the_p99_only_and_the_matrix_prints_no_p99() {
        let (clock, _h) = Clock::mock();
        // 98 reads 1 ms apart with one token each, then one read 3 ms later with three.
        let mut reads: Vec<(u64, u32, &[u32])> = (1..=98)
            .map(|i| (i * 1_000_000, 5_000, &[1u32][..]))
            .collect();
        reads.push((101_000_000, 5_000, &[1, 1, 1]));
        let tl = timeline(&reads);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let lag = s.summary(None);
        assert_eq!((lag.gaps_apart, lag.gaps_merged), (97, 3));
        let why = verdict(&lag, Printed::MedianAndP99);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].starts_with("the gap p99"), "{why:?}");
        assert!(
            !late_writes_alone(&why),
            "a stamp bound is not a late write"
        );
        assert!(verdict(&lag, Printed::Median).is_empty());
    }

    #[test]
    fn a_late_dispatch_is_a_reason() {
        let (clock, _h) = Clock::mock();
        let mut tl = timeline(&[(10_000_000, 5_000, &[1]), (11_000_000, 5_000, &[1])]);
        // Written 2 ms after the intended start; the first token came 10 ms after it.
        tl.write_done = Some(2_000_000);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let why = verdict(&s.summary(None), Printed::MedianAndP99);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("requests were written 2.000 ms after"),
            "{why:?}"
        );
        assert!(late_writes_alone(&why));
        // With a stamp reason beside it, or with no reason at all, it is not late writes alone.
        let mut both = why.clone();
        both.insert(
            0,
            "the gap p50 of 1.000 ms is known only to ±0.500 ms".to_string(),
        );
        assert!(!late_writes_alone(&both));
        assert!(!late_writes_alone::<String>(&[]));
    }

    #[test]
    fn tokens_whose_arrival_may_lie_across_the_window_edge_bound_the_throughput() {
        let (clock, _h) = Clock::mock();
        // Read at 5 ms holds two tokens, the first of which may have come from 1.01 ms on;
        // with the window opening at 3 ms it may belong before it.
        let tl = timeline(&[(1_000_000, 10_000, &[1]), (5_000_000, 10_000, &[1, 1])]);
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 3_000_000..10_000_000);
        let lag = s.summary(None);
        assert_eq!(lag.throughput_bound_percent, Some(50.0));
    }

    #[test]
    fn percentile_bounds_hold_the_percentile_of_any_truth_inside_the_intervals() {
        // Samples (measured, below, above); a truth at either end of every interval.
        let s = [
            (1.0, 0.5, 0.1),
            (2.0, 0.1, 1.0),
            (3.0, 0.0, 0.0),
            (0.0, 0.0, 2.0),
        ];
        for p in [0.0, 25.0, 50.0, 90.0, 100.0] {
            let b = percentile_bound(&s, p).unwrap();
            for pick in 0..16u32 {
                let truth: Vec<f64> = s
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        if pick >> i & 1 == 1 {
                            x.0 + x.2
                        } else {
                            x.0 - x.1
                        }
                    })
                    .collect();
                let tp = stats::percentile(&truth, p).unwrap();
                assert!(
                    (tp - b.value).abs() <= b.bound + 1e-12,
                    "p{p} {truth:?} {b:?}"
                );
            }
        }
        assert_eq!(percentile_bound(&[], 50.0), None);
        let m = mean_bound(&s).unwrap();
        assert_eq!(m.value, 1.5);
        assert_eq!(m.bound, 0.775);
    }
}
