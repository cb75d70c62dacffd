//! A probe's decision: for each objective, its estimate and confidence interval from the
//! probe's samples, and pass, fail or not yet; then the probe's verdict. Pure.
//!
//! The rule, per objective at confidence c (α = 1 - c), from a two-sided interval [lo, hi]:
//! - a latency percentile `metric_pQ <= T`: **pass** when hi <= T, **fail** when lo > T;
//! - `errors <= e` (Clopper-Pearson on the failed share): pass when hi <= e, fail when lo > e;
//! - `attainment >= a` (Clopper-Pearson on the attaining share): pass when lo >= a, fail when
//!   hi < a;
//! - otherwise **not yet**: the interval still straddles the threshold (or has no end on the
//!   side that decides), and more samples may settle it.
//!
//! Each ruling is wrong with probability at most α/2 (the one tail of the interval it uses).
//! The probe fails as soon as any objective fails, passes once every objective passes, and is
//! otherwise not yet decided.

use crate::analysis::stats;
use crate::capacity::interval::{clopper_pearson, percentile_interval};
use crate::capacity::slo::{Metric, Objective, Slo};

/// One objective's ruling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    NotYet,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::NotYet => "not yet",
        }
    }
}

/// One request's figures, as the samples take them (milliseconds).
#[derive(Clone, Copy, Debug)]
pub struct RequestFigures<'a> {
    /// The request succeeded (a failure counts toward `errors` and against `attainment`).
    pub ok: bool,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Only with more than one output token.
    pub tpot_ms: Option<f64>,
    /// Its gaps between token events.
    pub itl_ms: &'a [f64],
}

/// A probe's samples so far: every latency in milliseconds, request counts for the shares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples {
    pub ttft_ms: Vec<f64>,
    pub itl_ms: Vec<f64>,
    pub e2e_ms: Vec<f64>,
    pub tpot_ms: Vec<f64>,
    pub requests: u64,
    pub failed: u64,
    /// Successful requests within every per-request threshold of the SLO.
    pub attained: u64,
}

impl Samples {
    /// Adds one ended request. A failed request adds no latency: its figures are not the
    /// server's service (they count as its error).
    pub fn push(&mut self, slo: &Slo, r: &RequestFigures) {
        self.requests += 1;
        if !r.ok {
            self.failed += 1;
            return;
        }
        self.ttft_ms.extend(r.ttft_ms);
        self.e2e_ms.extend(r.e2e_ms);
        self.tpot_ms.extend(r.tpot_ms);
        self.itl_ms.extend_from_slice(r.itl_ms);
        let within = attains(slo, r);
        if within {
            self.attained += 1;
        }
    }

    /// Adds another probe round's samples.
    pub fn extend(&mut self, other: Samples) {
        self.ttft_ms.extend(other.ttft_ms);
        self.itl_ms.extend(other.itl_ms);
        self.e2e_ms.extend(other.e2e_ms);
        self.tpot_ms.extend(other.tpot_ms);
        self.requests += other.requests;
        self.failed += other.failed;
        self.attained += other.attained;
    }

    fn of(&self, m: Metric) -> &[f64] {
        match m {
            Metric::Ttft => &self.ttft_ms,
            Metric::Itl => &self.itl_ms,
            Metric::E2e => &self.e2e_ms,
            Metric::Tpot => &self.tpot_ms,
        }
    }
}

/// Whether a request counts toward `attainment` (and goodput): it succeeded, and its TTFT,
/// E2E and TPOT are each within every such objective's threshold.
pub fn attains(slo: &Slo, r: &RequestFigures) -> bool {
    r.ok && slo.request_thresholds().all(|(m, max)| {
        let v = match m {
            Metric::Ttft => r.ttft_ms,
            Metric::E2e => r.e2e_ms,
            // One token: no TPOT, nothing to exceed.
            Metric::Tpot => r.tpot_ms.or(Some(0.0)),
            Metric::Itl => Some(0.0),
        };
        v.is_some_and(|v| v <= max)
    })
}

/// One objective judged on a probe's samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub objective: Objective,
    /// How many samples the interval was built on (latencies, or requests for a share).
    pub n: u64,
    /// The estimate: the percentile (numpy's linear rule) or the observed share.
    pub estimate: Option<f64>,
    /// The interval's ends, `None` where unbounded.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub verdict: Verdict,
}

/// Judges one objective.
pub fn judge(objective: &Objective, s: &Samples, confidence: f64) -> Judged {
    match *objective {
        Objective::Latency {
            metric,
            percent,
            max_ms,
        } => {
            let mut v = s.of(metric).to_vec();
            v.sort_by(f64::total_cmp);
            let i = percentile_interval(&v, percent, confidence);
            let verdict = if i.hi.is_some_and(|hi| hi <= max_ms) {
                Verdict::Pass
            } else if i.lo.is_some_and(|lo| lo > max_ms) {
                Verdict::Fail
            } else {
                Verdict::NotYet
            };
            Judged {
                objective: *objective,
                n: v.len() as u64,
                estimate: stats::percentile_sorted(&v, percent),
                lo: i.lo,
                hi: i.hi,
                verdict,
            }
        }
        Objective::Errors { max } => {
            share(objective, s.failed, s.requests, confidence, |lo, hi| {
                if hi <= max {
                    Verdict::Pass
                } else if lo > max {
                    Verdict::Fail
                } else {
                    Verdict::NotYet
                }
            })
        }
        Objective::Attainment { min } => {
            share(objective, s.attained, s.requests, confidence, |lo, hi| {
                if lo >= min {
                    Verdict::Pass
                } else if hi < min {
                    Verdict::Fail
                } else {
                    Verdict::NotYet
                }
            })
        }
    }
}

/// A share `k / n` with its Clopper-Pearson interval, ruled by `rule(lo, hi)`.
fn share(
    objective: &Objective,
    k: u64,
    n: u64,
    confidence: f64,
    rule: impl Fn(f64, f64) -> Verdict,
) -> Judged {
    let ci = clopper_pearson(k, n, confidence);
    Judged {
        objective: *objective,
        n,
        estimate: (n > 0).then(|| k as f64 / n as f64),
        lo: ci.map(|c| c.0),
        hi: ci.map(|c| c.1),
        verdict: ci.map_or(Verdict::NotYet, |(lo, hi)| rule(lo, hi)),
    }
}

/// Every objective judged, in the SLO's order, and the probe's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub judged: Vec<Judged>,
    pub verdict: Verdict,
}

impl Decision {
    /// The first objective (in the order given) that failed.
    pub fn first_failed(&self) -> Option<&Judged> {
        self.judged.iter().find(|j| j.verdict == Verdict::Fail)
    }
}

/// Judges every objective of `slo` on `s`.
pub fn decide(slo: &Slo, s: &Samples, confidence: f64) -> Decision {
    let judged: Vec<Judged> = slo
        .objectives
        .iter()
        .map(|o| judge(o, s, confidence))
        .collect();
    let verdict = if judged.iter().any(|j| j.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if judged.iter().all(|j| j.verdict == Verdict::Pass) {
        Verdict::Pass
    } else {
        Verdict::NotYet
    };
    Decision { judged, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slo(specs: &[&str]) -> Slo {
        Slo::parse(specs).unwrap()
    }

    fn ok(ttft: f64, e2e: f64, itl: &[f64]) -> RequestFigures<'_> {
        RequestFigures {
            ok: true,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            tpot_ms: Some(10.0),
            itl_ms: itl,
        }
    }

    #[test]
    fn a_percentile_passes_fails_or_waits_by_its_interval() {
        let s = slo(&["ttft_p50=50.5ms"]);
        // TTFTs 1..=100 ms: the median's 95% interval is [X(40), X(61)] = [40, 61] ms.
        let mut samples = Samples::default();
        for t in 1..=100 {
            samples.push(&s, &ok(f64::from(t), 100.0, &[]));
        }
        let d = decide(&s, &samples, 0.95);
        assert_eq!((d.judged[0].lo, d.judged[0].hi), (Some(40.0), Some(61.0)));
        assert_eq!(d.judged[0].estimate, Some(50.5));
        assert_eq!(d.verdict, Verdict::NotYet);
        // Thresholds at the interval's ends: 61 passes (hi <= T), 39.9 fails (lo > T).
        assert_eq!(
            decide(&slo(&["ttft_p50=61ms"]), &samples, 0.95).verdict,
            Verdict::Pass
        );
        assert_eq!(
            decide(&slo(&["ttft_p50=60.9ms"]), &samples, 0.95).verdict,
            Verdict::NotYet
        );
        assert_eq!(
            decide(&slo(&["ttft_p50=39.9ms"]), &samples, 0.95).verdict,
            Verdict::Fail
        );
        assert_eq!(
            decide(&slo(&["ttft_p50=40ms"]), &samples, 0.95).verdict,
            Verdict::NotYet
        );
    }

    #[test]
    fn too_few_samples_for_a_p99_never_pass() {
        let s = slo(&["itl_p99=1s"]);
        let mut samples = Samples::default();
        let gaps = vec![1.0; 367];
        samples.push(&s, &ok(1.0, 1.0, &gaps));
        assert_eq!(decide(&s, &samples, 0.95).verdict, Verdict::NotYet);
        samples.push(&s, &ok(1.0, 1.0, &[1.0]));
        assert_eq!(decide(&s, &samples, 0.95).verdict, Verdict::Pass);
    }

    #[test]
    fn errors_and_attainment_use_clopper_pearson() {
        let s = slo(&["ttft_p50=100ms", "errors=5%", "attainment=50%"]);
        let mut samples = Samples::default();
        // 20 requests: 5 failed, 10 within 100 ms, 5 over.
        for i in 0..20 {
            if i < 5 {
                samples.push(
                    &s,
                    &RequestFigures {
                        ok: false,
                        ttft_ms: None,
                        e2e_ms: None,
                        tpot_ms: None,
                        itl_ms: &[],
                    },
                );
            } else {
                samples.push(&s, &ok(if i < 15 { 50.0 } else { 500.0 }, 600.0, &[]));
            }
        }
        assert_eq!(
            (samples.requests, samples.failed, samples.attained),
            (20, 5, 10)
        );
        let d = decide(&s, &samples, 0.95);
        // 5 of 20 failed: CP [0.0866, 0.4910] lies above 5%: fail, and the first to fail.
        let errors = &d.judged[1];
        assert_eq!(errors.verdict, Verdict::Fail);
        assert!((errors.lo.unwrap() - 0.086_571_469).abs() < 1e-8);
        assert_eq!(errors.estimate, Some(0.25));
        // 10 of 20 attained: [0.272, 0.728] straddles 50%.
        assert_eq!(d.judged[2].verdict, Verdict::NotYet);
        assert_eq!(d.verdict, Verdict::Fail);
        assert_eq!(d.first_failed().unwrap().objective.key(), "errors");
    }

    #[test]
    fn no_samples_is_not_yet() {
        let s = slo(&["ttft_p99=1s", "errors=1%"]);
        let d = decide(&s, &Samples::default(), 0.95);
        assert_eq!(d.verdict, Verdict::NotYet);
        assert!(d
            .judged
            .iter()
            .all(|j| j.estimate.is_none() && j.lo.is_none()));
    }

    #[test]
    fn attainment_holds_each_request_to_every_per_request_threshold() {
        let s = slo(&[
            "ttft_p99=100ms",
            "e2e_p99=1s",
            "itl_p99=1ms",
            "attainment=90%",
        ]);
        let mut samples = Samples::default();
        samples.push(&s, &ok(50.0, 900.0, &[5.0])); // ITL over 1 ms: still attained
        samples.push(&s, &ok(150.0, 900.0, &[])); // TTFT over
        samples.push(&s, &ok(50.0, 1100.0, &[])); // E2E over
        assert_eq!(samples.attained, 1);
    }
}
