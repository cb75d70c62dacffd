//! An open-loop round (`capacity --by rate`: Poisson arrivals at a request rate) -> the
//! decision's samples, the round's throughput, and the count the **keeps-up** rule reads. Pure.
//!
//! Which requests speak for the rate. A round starts from an idle server (the last round, or
//! the last probe, was drained), sends its arrivals at their scheduled times, and ends when the
//! last request ends. Its window is [open, close]: `close` the last scheduled arrival (after
//! it the load is no longer offered: the server only drains), `open` the scheduled arrival of
//! request ⌈[`WARM_SHARE`] · n⌉ in arrival order (the first tenth arrived at a server still
//! filling from empty, and waited less than the load makes anyone wait). A request counts —
//! its latencies, and its success or failure — when it *arrived* inside the window, measured to
//! its own end however long that took: nothing is cut at `close`, so a request stuck behind a
//! backlog carries the backlog's whole wait into its TTFT. (A closed loop's window cuts at its
//! end instead; an open loop must not, or an over-capacity probe would lose exactly the
//! requests that show it.) The requests that arrived late in the window decode while the
//! batch drains, so their gaps are a little shorter than the load's: at most the last
//! request-lifetime of arrivals, against rounds of many lifetimes.
//!
//! **Keeps up.** A server past its capacity μ completes requests at μ while they arrive at
//! λ > μ: its queue grows by (λ − μ) every second and nothing in a finite round bounds it, so
//! a latency objective alone fails it only once the round is long enough for the wait to
//! climb past the threshold — near the knee, never within a probe. So the completions are
//! counted: D = requests that ended inside the window (successes by their last token,
//! failures by their start), against A arrivals in it, over T = close − open seconds. While
//! the server keeps up, A − D is the change of the number in the system over the window, which
//! does not grow with T, so D / T is the arrival rate A / T up to noise; past capacity
//! D / T is μ. D is treated as a Poisson count and its exact (Garwood) interval [lo, hi] / T
//! decides, at the probe's confidence:
//! - **fail** when hi < A / T: the server certainly completes fewer requests per second than
//!   arrive (it fell behind);
//! - **pass** when lo ≥ A / T − [`SLACK_STEPS`] · step, `step` the search's resolution: it
//!   completes within half a step of the arrival rate;
//! - otherwise **not yet**: more rounds narrow the interval (its half-width is about
//!   2 √(λ / T), so passing takes T > 16 λ / step² seconds of window: 40 s at 10 req/s in
//!   steps of 2; the price of certainty with Poisson arrivals, which no shorter probe avoids).
//!
//! Some slack is unavoidable — below capacity the completions equal the arrivals, so no
//! interval can ever show them *at least* equal — and it has a cost: a server whose capacity
//! μ is less than half a step under a probed rate can pass it. So the rate found is at most
//! half a step past the knee and less than one step under it. Why half a step, not one: with a
//! whole step a probe at λ passes for any μ above λ − step, so the answer could sit a whole
//! step past the knee — a rate whose queue grows without bound, reported as carried; half a
//! step bounds that overreach to half the resolution while a probe below the knee still
//! passes in a window of 16 λ / step² seconds rather than 4 λ / step².

use crate::bench::engine::record::RequestRecord;
use crate::capacity::decide::{attains, Samples, Verdict};
use crate::capacity::interval::poisson_interval;
use crate::capacity::samples::{figures, Throughput};
use crate::capacity::slo::Slo;

/// The share of a round's arrivals, the first ones, left out while the server fills.
pub const WARM_SHARE: f64 = 0.10;

/// How far under the arrival rate, in steps of the resolution, the completions may be and
/// still pass.
pub const SLACK_STEPS: f64 = 0.5;

/// What the keeps-up rule counts, summed over a probe's rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Flow {
    /// Requests that arrived inside the windows.
    pub arrivals: u64,
    /// Requests that ended inside them.
    pub completions: u64,
    /// The windows' length, seconds.
    pub window_s: f64,
}

impl Flow {
    pub fn add(&mut self, o: Flow) {
        self.arrivals += o.arrivals;
        self.completions += o.completions;
        self.window_s += o.window_s;
    }
}

/// The keeps-up rule judged on a probe's flow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeepsUp {
    /// A / T and D / T, requests per second (`None` before any window).
    pub arrival_per_s: Option<f64>,
    pub completion_per_s: Option<f64>,
    /// D / T's interval.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    /// The pass line: the arrival rate less half a step.
    pub floor_per_s: Option<f64>,
    pub verdict: Verdict,
}

/// Judges whether the server kept up with the arrivals (see the module's rule).
pub fn keeps_up(flow: &Flow, step_per_s: f64, confidence: f64) -> KeepsUp {
    if flow.window_s <= 0.0 || flow.arrivals == 0 {
        return KeepsUp {
            arrival_per_s: None,
            completion_per_s: None,
            lo: None,
            hi: None,
            floor_per_s: None,
            verdict: Verdict::NotYet,
        };
    }
    let t = flow.window_s;
    let arrival = flow.arrivals as f64 / t;
    let (lo, hi) = poisson_interval(flow.completions, confidence);
    let (lo, hi) = (lo / t, hi / t);
    let floor = (arrival - SLACK_STEPS * step_per_s).max(0.0);
    let verdict = if hi < arrival {
        Verdict::Fail
    } else if lo >= floor {
        Verdict::Pass
    } else {
        Verdict::NotYet
    };
    KeepsUp {
        arrival_per_s: Some(arrival),
        completion_per_s: Some(flow.completions as f64 / t),
        lo: Some(lo),
        hi: Some(hi),
        floor_per_s: Some(floor),
        verdict,
    }
}

/// The samples, throughput and flow of one open-loop round; `records` in any order, each
/// `start_ns` its scheduled arrival (`LatencyOrigin::Scheduled`).
pub fn of_open_round(slo: &Slo, records: &[&RequestRecord]) -> (Samples, Throughput, Flow) {
    let mut starts: Vec<u64> = records.iter().map(|r| r.start_ns).collect();
    starts.sort_unstable();
    let mut samples = Samples::default();
    let mut through = Throughput::default();
    let mut flow = Flow::default();
    let (Some(&close), false) = (starts.last(), starts.is_empty()) else {
        return (samples, through, flow);
    };
    let warm = (WARM_SHARE * starts.len() as f64).ceil() as usize;
    let open = starts[warm.min(starts.len() - 1)];
    let window_s = close.saturating_sub(open) as f64 / 1e9;
    through.window_s = window_s;
    flow.window_s = window_s;
    let mut gaps = Vec::new();
    for r in records {
        let f = figures(r, &mut gaps);
        let ended = if r.is_success() {
            r.end_time_ns()
        } else {
            r.start_ns
        };
        if open < ended && ended <= close {
            flow.completions += 1;
            if r.is_success() {
                through.completed += 1;
                through.output_tokens += r.output_tokens;
                through.good += u64::from(attains(slo, &f));
            }
        }
        if open <= r.start_ns {
            samples.push(slo, &f);
            if open < r.start_ns {
                flow.arrivals += 1;
            }
        }
    }
    (samples, through, flow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::ErrorKind;

    const MS: u64 = 1_000_000;

    /// A successful request arriving at `start` ms, its first token `ttft` ms later and its
    /// last `e2e` ms later.
    fn req(start: u64, ttft: u64, e2e: u64) -> RequestRecord {
        RequestRecord {
            start_ns: start * MS,
            chunk_times_ns: vec![(start + ttft) * MS, (start + e2e) * MS],
            output_tokens: 2,
            input_tokens: 10,
            ..RequestRecord::default()
        }
    }

    /// A server that serves one request per `service` ms in arrival order, one at a time,
    /// with arrivals every `gap` ms: below capacity when gap > service.
    fn fifo(n: u64, gap: u64, service: u64) -> Vec<RequestRecord> {
        let mut free = 0;
        (0..n)
            .map(|i| {
                let arrive = i * gap;
                let begin = free.max(arrive);
                free = begin + service;
                req(arrive, begin - arrive + 1, free - arrive)
            })
            .collect()
    }

    fn run(recs: &[RequestRecord], slo: &Slo) -> (Samples, Throughput, Flow) {
        let refs: Vec<&RequestRecord> = recs.iter().collect();
        of_open_round(slo, &refs)
    }

    #[test]
    fn the_first_tenth_is_left_out_and_nothing_is_cut_at_the_close() {
        let slo = Slo::parse(&["ttft_p90=1s"]).unwrap();
        // 100 arrivals every 10 ms, each served in 20 ms: the queue grows by one request every
        // 20 ms, and the last arrival (at 990 ms) waits 990 ms for its turn.
        let recs = fifo(100, 10, 20);
        let (s, t, f) = run(&recs, &slo);
        // Arrivals 10..=99 count (from the 11th, at 100 ms), each to its own end: the last
        // one's TTFT is its whole wait, though it ended long after the last arrival.
        assert_eq!(s.requests, 90);
        assert_eq!(s.ttft_ms.iter().cloned().fold(0.0, f64::max), 991.0);
        // The window is (100, 990] ms: 89 arrivals after its opening one; the server
        // completed one request per 20 ms in it (ends at 120, 140, ..., 980): 44.
        assert_eq!((f.arrivals, f.completions), (89, 44));
        assert!((f.window_s - 0.89).abs() < 1e-12);
        assert_eq!(t.completed, 44);
    }

    #[test]
    fn a_server_that_keeps_up_passes_and_one_that_falls_behind_fails() {
        let slo = Slo::parse(&["ttft_p90=1s"]).unwrap();
        // Keeps up: arrivals every 10 ms served in 8 ms (100 req/s offered, 125 possible).
        let (_, _, f) = run(&fifo(400, 10, 8), &slo);
        let k = keeps_up(&f, 40.0, 0.95);
        assert_eq!(k.verdict, Verdict::Pass, "{k:?}");
        assert!((k.arrival_per_s.unwrap() - 100.0).abs() < 0.5, "{k:?}");
        // Falls behind: 100 req/s offered, 80 served (12.5 ms each): D/T is 80 and its
        // interval lies under 100.
        let (_, _, f) = run(&fifo(400, 10, 12), &slo);
        let k = keeps_up(&f, 20.0, 0.95);
        assert_eq!(k.verdict, Verdict::Fail, "{k:?}");
        assert!(
            (k.completion_per_s.unwrap() - 1000.0 / 12.0).abs() < 1.0,
            "{k:?}"
        );
        // The same server over a tenth of the time: too few completions to tell yet.
        let (_, _, f) = run(&fifo(40, 10, 12), &slo);
        assert_eq!(keeps_up(&f, 20.0, 0.95).verdict, Verdict::NotYet);
        // No window at all: not yet.
        assert_eq!(
            keeps_up(&Flow::default(), 1.0, 0.95).verdict,
            Verdict::NotYet
        );
    }

    #[test]
    fn a_failure_is_disposed_of_at_its_start_and_counts_as_an_error() {
        let slo = Slo::parse(&["errors=50%"]).unwrap();
        let mut recs = fifo(20, 10, 5);
        recs[15].error = Some(ErrorKind::HttpStatus);
        recs[15].chunk_times_ns.clear();
        let (s, _, f) = run(&recs, &slo);
        assert_eq!((s.requests, s.failed), (18, 1));
        // Ends in (20, 190] ms: requests 2..=18 (the failed one by its start).
        assert_eq!(f.completions, 17);
    }
}
