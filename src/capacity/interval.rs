//! Confidence intervals, both built on one exact binomial distribution function: the
//! distribution-free interval of a percentile from the order statistics of the samples, and
//! the Clopper-Pearson interval of a proportion (the error rate, the attainment).
//!
//! Why these two: neither assumes a shape for the latencies, and both are exact — their
//! coverage is at least the confidence asked for at every sample size and every true value,
//! never only asymptotically. That matters at the tails an SLO lives in (p99, errors of 1%),
//! where a normal approximation (Wald) or Wilson's score interval can cover less than stated.
//! The price is width: a p99 needs at least 368 samples before its interval has an upper end
//! at 95%, and an error rate of 0 out of n is certified under 1% only from n = 368.
//!
//! Pure arithmetic: no IO, no clock, no allocation.

/// P(X <= k) for X ~ Binomial(n, p), summed exactly term by term in log space (so no term
/// under- or overflows however large n is), 0 < p < 1. O(min(k, n) + 1).
pub fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if k >= n {
        return 1.0;
    }
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    // ln pmf(0) = n ln(1 - p); ln pmf(i + 1) = ln pmf(i) + ln((n - i) / (i + 1)) + ln(p / q).
    let mut ln_pmf = n as f64 * lq;
    let mut sum = ln_pmf.exp();
    for i in 0..k {
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + lp - lq;
        sum += ln_pmf.exp();
    }
    sum.min(1.0)
}

/// The 1-based order statistics bounding the `q` quantile (0 < q < 1) of `n` samples with
/// confidence at least `confidence`: `lower` is the largest l with P(X(l) > quantile) <= α/2,
/// `upper` the smallest u with P(X(u) < quantile) <= α/2 (α = 1 - confidence). `None` where
/// no order statistic of n samples is far enough out: that end is unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderBounds {
    pub lower: Option<u64>,
    pub upper: Option<u64>,
}

/// X(l) <= quantile exactly when at least l samples fall at or under it, so
/// P(X(l) > quantile) = P(B <= l - 1) with B ~ Binomial(n, q); likewise
/// P(X(u) < quantile) = P(B >= u) = 1 - P(B <= u - 1). One walk up the distribution function
/// finds both.
pub fn order_bounds(n: u64, q: f64, confidence: f64) -> OrderBounds {
    let half = (1.0 - confidence) / 2.0;
    let mut lower = None;
    let mut upper = None;
    if n == 0 {
        return OrderBounds { lower, upper };
    }
    let (lp, lq) = (q.ln(), (-q).ln_1p());
    let mut ln_pmf = n as f64 * lq;
    let mut cdf = ln_pmf.exp(); // P(B <= 0)
                                // i: cdf = P(B <= i) = the miss probability of X(i + 1) on the low side.
    for i in 0..n {
        if cdf <= half {
            lower = Some(i + 1);
        }
        if cdf >= 1.0 - half {
            upper = Some(i + 1);
            break;
        }
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + lp - lq;
        cdf += ln_pmf.exp();
    }
    OrderBounds { lower, upper }
}

/// An interval of a percentile: the order statistics' values, `None` for an unbounded end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub lo: Option<f64>,
    pub hi: Option<f64>,
}

/// The percentile interval of samples already sorted ascending (`percent` in (0, 100)).
pub fn percentile_interval(sorted: &[f64], percent: f64, confidence: f64) -> Interval {
    let b = order_bounds(sorted.len() as u64, percent / 100.0, confidence);
    let at = |i: u64| sorted[(i - 1) as usize];
    Interval {
        lo: b.lower.map(at),
        hi: b.upper.map(at),
    }
}

/// The Clopper-Pearson interval of a proportion after `k` successes in `n` trials: `lo` solves
/// P(B >= k; lo) = α/2 (0 when k = 0), `hi` solves P(B <= k; hi) = α/2 (1 when k = n). Found by
/// bisection on the binomial distribution function, which is monotone in p, to 1e-12.
/// `None` when n = 0.
pub fn clopper_pearson(k: u64, n: u64, confidence: f64) -> Option<(f64, f64)> {
    if n == 0 || k > n {
        return None;
    }
    let half = (1.0 - confidence) / 2.0;
    let lo = if k == 0 {
        0.0
    } else {
        // 1 - P(B <= k - 1; p) grows with p.
        solve(|p| 1.0 - binomial_cdf(k - 1, n, p) >= half)
    };
    let hi = if k == n {
        1.0
    } else {
        // P(B <= k; p) falls as p grows.
        solve(|p| binomial_cdf(k, n, p) <= half)
    };
    Some((lo, hi))
}

/// P(X <= k) for X ~ Poisson(m), m > 0, summed term by term in log space.
pub fn poisson_cdf(k: u64, m: f64) -> f64 {
    let lm = m.ln();
    // ln pmf(0) = -m; ln pmf(i + 1) = ln pmf(i) + ln m - ln(i + 1).
    let mut ln_pmf = -m;
    let mut sum = ln_pmf.exp();
    for i in 0..k {
        ln_pmf += lm - ((i + 1) as f64).ln();
        sum += ln_pmf.exp();
    }
    sum.min(1.0)
}

/// The exact (Garwood) interval of a Poisson mean after `k` events: `lo` solves
/// P(X >= k; lo) = α/2 (0 when k = 0), `hi` solves P(X <= k; hi) = α/2, each by bisection on
/// the distribution function, which falls as the mean grows. Like Clopper-Pearson's, its
/// coverage is at least the confidence asked for at every true mean.
pub fn poisson_interval(k: u64, confidence: f64) -> (f64, f64) {
    let half = (1.0 - confidence) / 2.0;
    // Every end lies under k + 10 sqrt(k + 1) + 10 for any confidence under 1 - 1e-15.
    let top = k as f64 + 10.0 * ((k + 1) as f64).sqrt() + 10.0;
    let root = |reached: &dyn Fn(f64) -> bool| {
        let (mut a, mut b) = (0.0f64, top);
        while b - a > 1e-10 * top {
            let m = 0.5 * (a + b);
            if reached(m) {
                b = m;
            } else {
                a = m;
            }
        }
        0.5 * (a + b)
    };
    let lo = if k == 0 {
        0.0
    } else {
        root(&|m| 1.0 - poisson_cdf(k - 1, m) >= half)
    };
    let hi = root(&|m| poisson_cdf(k, m) <= half);
    (lo, hi)
}

/// The smallest p in (0, 1) where `reached` turns true (it is false below, true above).
fn solve(reached: impl Fn(f64) -> bool) -> f64 {
    let (mut a, mut b) = (0.0f64, 1.0f64);
    while b - a > 1e-12 {
        let m = 0.5 * (a + b);
        if reached(m) {
            b = m;
        } else {
            a = m;
        }
    }
    0.5 * (a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Reference values computed independently with exact rational arithmetic (Python's
    /// `fractions.Fraction`, the binomial terms summed as fractions):
    /// `tests/capacity/reference.py`.
    #[test]
    fn the_distribution_function_matches_exact_sums() {
        let cases = [
            (39, 100, 0.5, 0.017_600_100_108_852_407),
            (40, 100, 0.5, 0.028_443_966_820_490_395),
            (59, 100, 0.5, 0.971_556_033_179_509_6),
            (60, 100, 0.5, 0.982_399_899_891_147_6),
            (0, 10, 0.3, 0.028_247_524_9),
            (3, 10, 0.3, 0.649_610_718_4),
            (0, 367, 0.01, 0.025_010_156_959_690_614),
            (366, 367, 0.99, 0.974_989_843_040_309_3),
        ];
        for (k, n, p, want) in cases {
            let got = binomial_cdf(k, n, p);
            assert!(
                close(got, want, 1e-12),
                "F({k}; {n}, {p}) = {got}, want {want}"
            );
        }
        // Far past where (1 - p)^n underflows in linear space, the sum is still right.
        assert!(close(binomial_cdf(50_000, 100_000, 0.5), 0.501_261_5, 1e-6));
    }

    #[test]
    fn the_median_of_100_lies_between_the_40th_and_61st() {
        // The textbook case: n = 100, 95%: F(39) = 0.0176 <= 0.025 < F(40) = 0.0284, so
        // l = 40; F(59) = 0.9716 < 0.975 <= F(60) = 0.9824, so u = 61.
        let b = order_bounds(100, 0.5, 0.95);
        assert_eq!(b.lower, Some(40));
        assert_eq!(b.upper, Some(61));
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        let i = percentile_interval(&sorted, 50.0, 0.95);
        assert_eq!((i.lo, i.hi), (Some(40.0), Some(61.0)));
    }

    #[test]
    fn a_p99_needs_368_samples_for_an_upper_end() {
        // X(n) >= the p99 with probability 1 - 0.99^n, which first reaches 0.975 at n = 368
        // (0.99^367 = 0.025010, 0.99^368 = 0.024760).
        assert_eq!(order_bounds(367, 0.99, 0.95).upper, None);
        assert_eq!(order_bounds(368, 0.99, 0.95).upper, Some(368));
        // The lower end is there from n = 1: P(X(1) > p99) = 0.01 <= 0.025.
        assert_eq!(order_bounds(1, 0.99, 0.95).lower, Some(1));
        assert_eq!(
            order_bounds(0, 0.99, 0.95),
            OrderBounds {
                lower: None,
                upper: None
            }
        );
        // And the median of 5 has no 95% lower end: P(X(1) > median) = 1/32 > 0.025.
        assert_eq!(order_bounds(5, 0.5, 0.95).lower, None);
        assert_eq!(order_bounds(6, 0.5, 0.95).lower, Some(1));
    }

    #[test]
    fn p99_of_1000_samples() {
        // From exact sums (tests/capacity/reference.py) with B ~ Bin(1000, 0.99).
        let b = order_bounds(1000, 0.99, 0.95);
        assert_eq!(
            b,
            OrderBounds {
                lower: Some(983),
                upper: Some(997)
            }
        );
    }

    #[test]
    fn clopper_pearson_matches_closed_forms_and_exact_inversions() {
        // k = 0: hi = 1 - (α/2)^(1/n); k = n: lo = (α/2)^(1/n).
        let (lo, hi) = clopper_pearson(0, 10, 0.95).unwrap();
        assert_eq!(lo, 0.0);
        assert!(close(hi, 1.0 - 0.025f64.powf(0.1), 1e-10), "{hi}");
        let (lo, hi) = clopper_pearson(10, 10, 0.95).unwrap();
        assert!(close(lo, 0.025f64.powf(0.1), 1e-10), "{lo}");
        assert_eq!(hi, 1.0);
        // Exact inversions (rational sums, bisected): 1 of 100, and 5 of 20.
        let (lo, hi) = clopper_pearson(1, 100, 0.95).unwrap();
        assert!(close(lo, 0.000_253_146_033_0, 1e-9), "{lo}");
        assert!(close(hi, 0.054_459_385_4, 1e-9), "{hi}");
        let (lo, hi) = clopper_pearson(5, 20, 0.95).unwrap();
        assert!(close(lo, 0.086_571_469_1, 1e-9), "{lo}");
        assert!(close(hi, 0.491_045_871_7, 1e-9), "{hi}");
        assert_eq!(clopper_pearson(0, 0, 0.95), None);
        assert_eq!(clopper_pearson(3, 2, 0.95), None);
    }

    #[test]
    fn zero_errors_certify_1_percent_from_368_requests() {
        assert!(clopper_pearson(0, 367, 0.95).unwrap().1 > 0.01);
        assert!(clopper_pearson(0, 368, 0.95).unwrap().1 <= 0.01);
    }

    #[test]
    fn the_poisson_interval_matches_the_chi_square_tables() {
        // Garwood's interval is [chi2(α/2; 2k) / 2, chi2(1 - α/2; 2k + 2) / 2]; at 95%:
        // k = 0: [0, ln 40 = 3.6889]; k = 1: [0.0253, 5.5716]; k = 10: [4.7954, 18.3904];
        // k = 100: [81.364, 121.627] (the tables' values, to their printed digits).
        let (lo, hi) = poisson_interval(0, 0.95);
        assert_eq!(lo, 0.0);
        assert!(close(hi, 40f64.ln(), 1e-8), "{hi}");
        for (k, want_lo, want_hi, tol) in [
            (1, 0.0253, 5.5716, 1e-4),
            (10, 4.7954, 18.3904, 1e-4),
            (100, 81.364, 121.627, 1e-3),
        ] {
            let (lo, hi) = poisson_interval(k, 0.95);
            assert!(
                close(lo, want_lo, tol) && close(hi, want_hi, tol),
                "{k}: [{lo}, {hi}]"
            );
        }
    }
}
