//! Descriptive statistics that reproduce numpy's defaults: `np.mean`, `np.median`, `np.std`
//! (population, `ddof=0`) and `np.percentile` with its default `method="linear"`.
//!
//! Owns: the arithmetic only. It must never read a clock, allocate per sample on a hot path
//! (callers collect samples first, then summarise once), or silently invent values: empty input
//! is explicit. numpy answers `nan` plus a warning for an empty array; `vllm bench serve` calls
//! `np.mean(xs or 0)`, i.e. it summarises the one-element array `[0]` and reports zeros. The
//! plain functions return `None` for empty input; [`Summary::or_zero`] gives vLLM's zeros.
//!
//! Exactness: the percentile follows numpy's code path step for step (virtual index
//! `(n - 1) * p / 100`, floor/next index, and numpy's two-sided `_lerp`), so it matches to the
//! last bit. `mean` sums left to right where numpy uses pairwise summation, so a mean of many
//! samples may differ from numpy in the last few ulps; no report prints that many digits.

/// Arithmetic mean; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(values.iter().sum::<f64>() / values.len() as f64)
}

/// Population standard deviation (numpy's default `ddof=0`); `None` when empty.
pub fn std(values: &[f64]) -> Option<f64> {
    let m = mean(values)?;
    let var = values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / values.len() as f64;
    Some(var.sqrt())
}

/// Median (the mean of the two middle values for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let sorted = sorted_copy(values);
    median_sorted(&sorted)
}

/// [`median`] of values already sorted ascending.
pub fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    if n % 2 == 1 {
        Some(sorted[n / 2])
    } else {
        // numpy takes the mean of the two middle elements: (a + b) / 2.
        Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0)
    }
}

/// `np.percentile(values, p)` with linear interpolation, `p` in percent. Sorts a copy.
/// `None` when empty. `p` outside `[0, 100]` is clamped (numpy raises; the CLI validates
/// `--metric-percentiles` before we get here); a NaN `p` is treated as 0.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let sorted = sorted_copy(values);
    percentile_sorted(&sorted, p)
}

/// [`percentile`] of values already sorted ascending (no copy, no allocation).
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    // numpy: quantile = p / 100; virtual index = (n - 1) * quantile.
    let q = p / 100.0;
    let virtual_index = (n - 1) as f64 * q;
    if virtual_index >= (n - 1) as f64 {
        return Some(sorted[n - 1]);
    }
    let prev = virtual_index.floor();
    let lo = prev as usize;
    let hi = (lo + 1).min(n - 1);
    let gamma = virtual_index - prev;
    Some(lerp(sorted[lo], sorted[hi], gamma))
}

/// numpy's `_lerp`: `a + (b - a) * t`, but computed from `b` when `t >= 0.5` so that the result
/// is monotonic in `t` and exact at `t = 1`.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

fn sorted_copy(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// The summary `bench serve` prints per metric: mean, median, population std and the requested
/// percentiles, in the order requested.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    /// `(p, value)` pairs in the order the percentiles were asked for.
    pub percentiles: Vec<(f64, f64)>,
    /// How many samples were summarised (0 for [`Summary::or_zero`] on empty input).
    pub count: usize,
}

impl Summary {
    /// Summarise `values`; `None` when empty.
    pub fn compute(values: &[f64], percentiles: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let sorted = sorted_copy(values);
        Some(Summary {
            mean: mean(&sorted)?,
            median: median_sorted(&sorted)?,
            std: std(&sorted)?,
            percentiles: percentiles
                .iter()
                .map(|&p| (p, percentile_sorted(&sorted, p).unwrap_or(0.0)))
                .collect(),
            count: values.len(),
        })
    }

    /// vLLM's behaviour: summarise `values`, or report zeros everywhere when there are none
    /// (`np.mean(xs or 0)` summarises `[0]`).
    pub fn or_zero(values: &[f64], percentiles: &[f64]) -> Summary {
        Summary::compute(values, percentiles).unwrap_or_else(|| Summary {
            mean: 0.0,
            median: 0.0,
            std: 0.0,
            percentiles: percentiles.iter().map(|&p| (p, 0.0)).collect(),
            count: 0,
        })
    }

    /// Every figure multiplied by `factor` (e.g. seconds -> milliseconds).
    pub fn scaled(&self, factor: f64) -> Summary {
        Summary {
            mean: self.mean * factor,
            median: self.median * factor,
            std: self.std * factor,
            percentiles: self
                .percentiles
                .iter()
                .map(|&(p, v)| (p, v * factor))
                .collect(),
            count: self.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[track_caller]
    fn check(values: &[f64], p: f64, want: f64) {
        let got = percentile(values, p).expect("non-empty");
        assert!(
            close(got, want),
            "percentile({values:?}, {p}) = {got}, numpy gives {want}"
        );
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        // np.percentile([1, 2, 3, 4], 50) = 2.5: index 3 * 0.5 = 1.5 -> 2 + (3 - 2) * 0.5.
        check(&[1.0, 2.0, 3.0, 4.0], 50.0, 2.5);
        // p99 of [1..=4]: index 3 * 0.99 = 2.97 -> 4 - (4 - 3) * 0.03 = 3.97.
        check(&[4.0, 3.0, 2.0, 1.0], 99.0, 3.97);
        // p25 of [10, 20, 30, 40, 50]: index 4 * 0.25 = 1 exactly -> 20.
        check(&[50.0, 10.0, 40.0, 20.0, 30.0], 25.0, 20.0);
        // p90 of [1, 2, 10]: index 2 * 0.9 = 1.8 -> 10 - (10 - 2) * 0.2 = 8.4.
        check(&[1.0, 2.0, 10.0], 90.0, 8.4);
        // p10 of [1, 2, 10]: index 0.2 -> 1 + (2 - 1) * 0.2 = 1.2.
        check(&[1.0, 2.0, 10.0], 10.0, 1.2);
        // p99.9 of 0..=9 (ten values): index 9 * 0.999 = 8.991 -> 9 - 1 * 0.009 = 8.991.
        let ten: Vec<f64> = (0..10).map(f64::from).collect();
        check(&ten, 99.9, 8.991);
        // Edges: p0 is the minimum, p100 the maximum, one sample is itself.
        check(&[3.0, 1.0, 2.0], 0.0, 1.0);
        check(&[3.0, 1.0, 2.0], 100.0, 3.0);
        check(&[7.5], 99.0, 7.5);
    }

    #[test]
    fn percentile_clamps_out_of_range_p() {
        check(&[1.0, 2.0], 150.0, 2.0);
        check(&[1.0, 2.0], -5.0, 1.0);
        check(&[1.0, 2.0], f64::NAN, 1.0);
    }

    #[test]
    fn mean_median_std_match_numpy() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        // np.mean = 40 / 8 = 5; np.std = sqrt(32 / 8) = 2; np.median = (4 + 5) / 2 = 4.5.
        assert_eq!(mean(&v), Some(5.0));
        assert_eq!(std(&v), Some(2.0));
        assert_eq!(median(&v), Some(4.5));
        // Odd count: the middle element.
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        // np.std([1, 2]) = 0.5 (population, not the sample's 0.7071).
        assert_eq!(std(&[1.0, 2.0]), Some(0.5));
    }

    #[test]
    fn empty_input_is_explicit() {
        assert_eq!(mean(&[]), None);
        assert_eq!(median(&[]), None);
        assert_eq!(std(&[]), None);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(Summary::compute(&[], &[99.0]), None);
        let z = Summary::or_zero(&[], &[50.0, 99.0]);
        assert_eq!(z.mean, 0.0);
        assert_eq!(z.percentiles, vec![(50.0, 0.0), (99.0, 0.0)]);
        assert_eq!(z.count, 0);
    }

    #[test]
    fn summary_collects_everything_in_requested_order() {
        let s = Summary::compute(&[0.004, 0.001, 0.003, 0.002], &[99.0, 50.0])
            .expect("non-empty")
            .scaled(1000.0);
        // In ms: [1, 2, 3, 4]: mean 2.5, median 2.5, std sqrt(1.25), p99 3.97, p50 2.5.
        assert!(close(s.mean, 2.5));
        assert!(close(s.median, 2.5));
        assert!(close(s.std, 1.25f64.sqrt()));
        assert_eq!(s.percentiles[0].0, 99.0);
        assert!(close(s.percentiles[0].1, 3.97));
        assert!(close(s.percentiles[1].1, 2.5));
        assert_eq!(s.count, 4);
    }
}
