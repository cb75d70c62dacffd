//! An open-loop round (`capacity --by rate`: gamma arrivals at a request rate, Poisson by default) -> the
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
//! D / T is μ. D's interval [lo, hi] / T ([`count_interval`], below) decides, at the probe's
//! confidence:
//! - **fail** when hi < A / T: the server certainly completes fewer requests per second than
//!   arrive (it fell behind);
//! - **pass** when lo ≥ A / T − [`SLACK_STEPS`] · step, `step` the search's resolution: it
//!   completes within half a step of the arrival rate;
//! - otherwise **not yet**: more rounds narrow the interval (its half-width is about
//!   2 √(φ λ / T), so passing takes T > 16 φ λ / step² seconds of window: 40 s at 10 req/s in
//!   steps of 2 with Poisson arrivals; the price of certainty, which no shorter probe avoids).
//!
//! **D's interval, and the arrivals' burstiness.** The arrivals' gaps are gamma-distributed
//! with shape B (`--burstiness`, vLLM's `--burstiness`) and mean 1/λ: their variance is
//! 1/(B λ²), so their squared coefficient of variation is CV² = 1/B (B = 1: exponential gaps,
//! a Poisson process). The count of such a renewal process over a window of T seconds is,
//! for T of many gaps, normal with mean λT and variance λT · CV² = λT / B (the renewal
//! central limit theorem). The departures of a stable queue inherit it: D = A − (N(close) −
//! N(open)), N the number in the system, and that difference stays bounded in distribution as
//! T grows, so Var(D) / T → λ / B too. D is then an *overdispersed* count, its variance
//! φ = 1/B times its mean where a Poisson count's equals it; D / φ has variance equal to its
//! mean, a Poisson count's shape (the quasi-Poisson scaling), and D's interval is φ times the
//! exact (Garwood) interval of D / φ. Garwood's interval is for whole counts, so the lower end
//! is taken from ⌊D / φ⌋ and the upper from ⌈D / φ⌉: each moves outward, by less than one
//! scaled count, never inward. With B < 1 the Poisson interval (φ = 1) is √(1/B) times too
//! narrow, and a server that keeps up near its knee is failed more often than the stated
//! α/2 (`tests/capacity_search.rs` shows it at B = 0.5).
//!
//! The dispersion used is φ = max(1, 1/B) ([`dispersion`]). For B > 1 the arrivals alone would
//! allow a narrower interval (φ = 1/B), but that is right only for a server whose own
//! completions add no variance: past the knee D is the server's own service count, and a real
//! engine's varies (batch composition, lengths, its scheduler). The Poisson width is kept as
//! the floor: at B > 1 it covers the arrivals' λT / B and leaves λT (1 − 1/B) for the server's
//! own noise — slower to pass than the arrivals alone would need, never less sound. With
//! `--burstiness inf` (every gap exactly 1/λ) the arrivals' count has no variance at all (a
//! window holds λT of them to within one), so a stable queue's D differs from A only by the
//! change in the number in the system, and the Poisson width stands for the server's own
//! noise alone. What the rule assumes, then: the server's completions while it is busy vary
//! no more than that floor leaves room for — nothing beyond the arrivals' at B ≤ 1. A server
//! with very irregular service near its knee (exponential service times, CV² = 1) can be
//! failed falsely more often than α/2 at any B (15-36% of seeds at ρ = 0.97, measured in
//! docs/capacity.md); the rule is exact for the arrivals' part only.
//!
//! Some slack is unavoidable — below capacity the completions equal the arrivals, so no
//! interval can ever show them *at least* equal — and it has a cost: a server whose capacity
//! μ is less than half a step under a probed rate can pass it. So the rate found is at most
//! half a step past the knee and less than one step under it. Why half a step, not one: with a
//! whole step a probe at λ passes for any μ above λ − step, so the answer could sit a whole
//! step past the knee — a rate whose queue grows without bound, reported as carried; half a
//! step bounds that overreach to half the resolution while a probe below the knee still
//! passes in a window of 16 φ λ / step² seconds rather than 4 φ λ / step².

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

/// The dispersion φ of the completion count for arrivals with gamma gaps of shape
/// `burstiness` (`f64::INFINITY`: constant gaps): how many times a Poisson count's variance
/// D's is taken to have, max(1, 1/B) (see the module's derivation).
pub fn dispersion(burstiness: f64) -> f64 {
    if burstiness < 1.0 {
        1.0 / burstiness
    } else {
        1.0
    }
}

/// The interval of the mean of a count `d` whose variance is `phi` (>= 1) times its mean: φ
/// times the Garwood interval of d / φ, its lower end from ⌊d / φ⌋ and its upper from
/// ⌈d / φ⌉ (Garwood's is for whole counts; each end moves outward). φ = 1 is Garwood's own.
pub fn count_interval(d: u64, phi: f64, confidence: f64) -> (f64, f64) {
    let scaled = d as f64 / phi;
    let (lo, _) = poisson_interval(scaled.floor() as u64, confidence);
    let (_, hi) = poisson_interval(scaled.ceil() as u64, confidence);
    (phi * lo, phi * hi)
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
    /// φ, the completion count's variance over its mean the interval was built for.
    pub dispersion: f64,
    pub verdict: Verdict,
}

/// Judges whether the server kept up with the arrivals (see the module's rule), D's interval
/// built at dispersion `phi` ([`dispersion`] of the arrivals' burstiness).
pub fn keeps_up(flow: &Flow, step_per_s: f64, confidence: f64, phi: f64) -> KeepsUp {
    if flow.window_s <= 0.0 || flow.arrivals == 0 {
        return KeepsUp {
            arrival_per_s: None,
            completion_per_s: None,
            lo: None,
            hi: None,
            floor_per_s: None,
            dispersion: phi,
            verdict: Verdict::NotYet,
        };
    }
    let t = flow.window_s;
    let arrival = flow.arrivals as f64 / t;
    let (lo, hi) = count_interval(flow.completions, phi, confidence);
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
        dispersion: phi,
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
        let k = keeps_up(&f, 40.0, 0.95, 1.0);
        assert_eq!(k.verdict, Verdict::Pass, "{k:?}");
        assert!((k.arrival_per_s.unwrap() - 100.0).abs() < 0.5, "{k:?}");
        // Falls behind: 100 req/s offered, 80 served (12.5 ms each): D/T is 80 and its
        // interval lies under 100.
        let (_, _, f) = run(&fifo(400, 10, 12), &slo);
        let k = keeps_up(&f, 20.0, 0.95, 1.0);
        assert_eq!(k.verdict, Verdict::Fail, "{k:?}");
        assert!(
            (k.completion_per_s.unwrap() - 1000.0 / 12.0).abs() < 1.0,
            "{k:?}"
        );
        // The same server over a tenth of the time: too few completions to tell yet.
        let (_, _, f) = run(&fifo(40, 10, 12), &slo);
        assert_eq!(keeps_up(&f, 20.0, 0.95, 1.0).verdict, Verdict::NotYet);
        // No window at all: not yet.
        assert_eq!(
            keeps_up(&Flow::default(), 1.0, 0.95, 1.0).verdict,
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

    #[test]
    fn the_dispersion_widens_for_bursty_arrivals_only() {
        assert_eq!(dispersion(0.5), 2.0);
        assert_eq!(dispersion(0.25), 4.0);
        assert_eq!((dispersion(1.0), dispersion(4.0)), (1.0, 1.0));
        assert_eq!(dispersion(f64::INFINITY), 1.0);
    }

    #[test]
    fn the_scaled_interval_is_phi_times_garwoods_of_the_scaled_count() {
        // φ = 1: Garwood's own (the chi-square tables: k = 100 -> [81.364, 121.627]).
        assert_eq!(count_interval(100, 1.0, 0.95), poisson_interval(100, 0.95));
        // φ = 2, D = 200: 2 × Garwood(100), whole, so both ends from 100.
        let (lo, hi) = count_interval(200, 2.0, 0.95);
        assert!((lo - 2.0 * 81.364).abs() < 2e-3 && (hi - 2.0 * 121.627).abs() < 2e-3);
        // D = 201 at φ = 2: 100.5 scaled, the lower end from 100 and the upper from 101 —
        // outward of both neighbours' ends, so never narrower than the whole-count intervals.
        let (lo1, hi1) = count_interval(201, 2.0, 0.95);
        assert_eq!(lo1, lo);
        assert_eq!(hi1, 2.0 * poisson_interval(101, 0.95).1);
        // Its half-width is about √φ times the Poisson one's: 2 √(φ D) for large D.
        let (lo, hi) = count_interval(10_000, 2.0, 0.95);
        let (plo, phi_) = poisson_interval(10_000, 0.95);
        let ratio = (hi - lo) / (phi_ - plo);
        assert!((ratio - 2f64.sqrt()).abs() < 0.01, "{ratio}");
    }

    #[test]
    fn a_bursty_round_that_kept_up_is_not_yet_rather_than_failed() {
        // 400 arrived and 360 ended in 10 s: the Poisson interval of 360, [323.77, 399.18]
        // / 10, lies under 40 arriving a second (fail), while at φ = 2 (B = 0.5) it is
        // 2 × Garwood(180) = [309.33, 416.61] / 10, reaching 40: not yet.
        let f = Flow {
            arrivals: 400,
            completions: 360,
            window_s: 10.0,
        };
        let old = keeps_up(&f, 4.0, 0.95, 1.0);
        assert_eq!(old.verdict, Verdict::Fail, "{old:?}");
        let new = keeps_up(&f, 4.0, 0.95, dispersion(0.5));
        assert_eq!(new.verdict, Verdict::NotYet, "{new:?}");
        assert_eq!(new.dispersion, 2.0);
        assert!((old.hi.unwrap() - 39.918).abs() < 1e-3, "{old:?}");
        assert!((new.lo.unwrap() - 30.933).abs() < 1e-3, "{new:?}");
        assert!((new.hi.unwrap() - 41.661).abs() < 1e-3, "{new:?}");
    }
}
