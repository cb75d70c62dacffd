//! When each request should be sent: the reference tools' arrival processes, as pure data.
//!
//! Owns the send-time offsets for a run: `--request-rate inf` (everything at once), a finite rate
//! with gamma-distributed gaps (`--burstiness` is the shape, the mean gap is `1/rate`; shape 1 is
//! a Poisson process), and linear or exponential ramp-up of the rate across the requests.
//! It must never sleep, read a clock or touch a socket: the runner turns offsets into deadlines.
//!
//! The draws are numpy's own (`workload::numpy`), from the legacy generator the tools seed with
//! `np.random.seed(--seed)`, so a seed gives the reference's send times to the nanosecond:
//! - [`Draws::Vllm`] (vLLM 0.33's `get_request`): every request `i`, the first included, waits
//!   a gap drawn from `Gamma(shape = burstiness, scale = 1 / (rate_i * burstiness))` after the
//!   one before it (the first after the start), where `rate_i` is the rate in force for request
//!   `i` (`start + (end - start) * p` or `start * (end / start)^p`, with `p = i / (n - 1)`);
//!   `--burstiness inf` makes every gap `1/rate_i`. Without a ramp the send times are then
//!   scaled so the last one falls at exactly `n / rate`.
//! - [`Draws::Sglang`] (SGLang 0.5.23's `get_request`): request 0 at once, each later one an
//!   exponential gap of mean `1/rate` after the one before, drawn from the generator the
//!   dataset drew from first (its random lengths; `Plan` passes the draws already taken).

use crate::workload::numpy::RandomState;

/// Whose arrival process, and so whose draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Draws {
    /// vLLM 0.33's: a gap before every request, scaled to `n / rate` without a ramp.
    #[default]
    Vllm,
    /// SGLang 0.5.23's: request 0 at once, then exponential gaps; the generator has already
    /// given this many 32-bit words to the dataset.
    Sglang { dataset_words: u64 },
}

/// How the request rate changes over the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RampStrategy {
    Linear,
    Exponential,
}

impl std::str::FromStr for RampStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linear" => Ok(RampStrategy::Linear),
            "exponential" => Ok(RampStrategy::Exponential),
            _ => Err(format!(
                "unknown ramp-up strategy {s:?}: expected linear or exponential"
            )),
        }
    }
}

/// A rate ramp from `start_rps` to `end_rps` over the requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ramp {
    pub strategy: RampStrategy,
    pub start_rps: f64,
    pub end_rps: f64,
}

/// Everything that decides the send times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduleConfig {
    /// Requests per second; `f64::INFINITY` sends everything at once. Ignored under a ramp.
    pub rate: f64,
    /// Gamma shape: 1.0 = Poisson, below 1 burstier, above 1 more regular.
    pub burstiness: f64,
    pub ramp: Option<Ramp>,
    pub seed: u64,
    /// Whose arrival process (and draws) the offsets follow.
    pub draws: Draws,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            rate: f64::INFINITY,
            burstiness: 1.0,
            ramp: None,
            seed: 0,
            draws: Draws::Vllm,
        }
    }
}

/// A schedule setting that cannot produce send times.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("--request-rate must be a positive number or inf, got {0}")]
    BadRate(f64),
    #[error("--burstiness must be a positive number, got {0}")]
    BadBurstiness(f64),
    #[error("{0}")]
    BadSeed(String),
    #[error("--ramp-up-start-rps and --ramp-up-end-rps must be finite and non-negative (got {0} and {1})")]
    BadRamp(f64, f64),
    #[error(
        "exponential ramp-up needs --ramp-up-start-rps above 0 (it multiplies from the start rate)"
    )]
    ExponentialFromZero,
}

impl ScheduleConfig {
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if self.rate.is_nan() || self.rate <= 0.0 {
            return Err(ScheduleError::BadRate(self.rate));
        }
        // vLLM takes `--burstiness inf` (constant gaps); SGLang has no burstiness.
        if self.burstiness.is_nan() || self.burstiness <= 0.0 {
            return Err(ScheduleError::BadBurstiness(self.burstiness));
        }
        RandomState::from_seed(self.seed).map_err(ScheduleError::BadSeed)?;
        if let Some(r) = self.ramp {
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !ok(r.start_rps) || !ok(r.end_rps) {
                return Err(ScheduleError::BadRamp(r.start_rps, r.end_rps));
            }
            if r.strategy == RampStrategy::Exponential && r.start_rps == 0.0 {
                return Err(ScheduleError::ExponentialFromZero);
            }
        }
        Ok(())
    }

    /// The rate in force for request `index` of `total`.
    pub fn rate_at(&self, index: usize, total: usize) -> f64 {
        let Some(r) = self.ramp else {
            return self.rate;
        };
        let p = index as f64 / (total.saturating_sub(1).max(1)) as f64;
        match r.strategy {
            RampStrategy::Linear => r.start_rps + (r.end_rps - r.start_rps) * p,
            RampStrategy::Exponential => r.start_rps * (r.end_rps / r.start_rps).powf(p),
        }
    }

    /// This schedule once the dataset has taken `words` 32-bit words from the generator
    /// (SGLang's draws continue after them; vLLM's schedule has its own).
    pub fn after_dataset(&self, words: u64) -> ScheduleConfig {
        let draws = match self.draws {
            Draws::Vllm => Draws::Vllm,
            Draws::Sglang { .. } => Draws::Sglang {
                dataset_words: words,
            },
        };
        ScheduleConfig { draws, ..*self }
    }

    /// Send offsets in nanoseconds from the start of the run, one per request, non-decreasing.
    pub fn offsets_ns(&self, total: usize) -> Result<Vec<u64>, ScheduleError> {
        self.validate()?;
        let mut np = RandomState::from_seed(self.seed).map_err(ScheduleError::BadSeed)?;
        let at_s = match self.draws {
            Draws::Vllm => self.vllm_seconds(&mut np, total),
            Draws::Sglang { dataset_words } => {
                np.skip_words(dataset_words);
                self.sglang_seconds(&mut np, total)
            }
        };
        Ok(at_s.iter().map(|t| (t * 1e9).round() as u64).collect())
    }

    /// The gap before a request at `rate` in vLLM's process (at a rate of 0, which vLLM
    /// refuses, llmspeed waits a whole second rather than forever).
    fn vllm_gap(&self, np: &mut RandomState, rate: f64) -> f64 {
        if rate.is_infinite() {
            0.0
        } else if rate <= 0.0 {
            1.0
        } else if self.burstiness.is_infinite() {
            1.0 / rate
        } else {
            np.gamma(self.burstiness, 1.0 / (rate * self.burstiness))
        }
    }

    fn vllm_seconds(&self, np: &mut RandomState, total: usize) -> Vec<f64> {
        let mut at = Vec::with_capacity(total);
        let mut sum = 0.0f64;
        for i in 0..total {
            sum += self.vllm_gap(np, self.rate_at(i, total));
            at.push(sum);
        }
        // Without a ramp the last send falls at exactly n / rate (vLLM: the drawn gaps' sum is
        // a few percent off it, which would make throughput depend on the seed).
        if self.ramp.is_none() && sum != 0.0 {
            let factor = (total as f64 / self.rate) / sum;
            for t in &mut at {
                *t *= factor;
            }
        }
        at
    }

    fn sglang_seconds(&self, np: &mut RandomState, total: usize) -> Vec<f64> {
        let mut at = Vec::with_capacity(total);
        let mut t = 0.0f64;
        for i in 0..total {
            at.push(t);
            if i + 1 < total && self.rate.is_finite() {
                t += np.exponential(1.0 / self.rate);
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: f64, burstiness: f64, seed: u64) -> ScheduleConfig {
        ScheduleConfig {
            rate,
            burstiness,
            ramp: None,
            seed,
            draws: Draws::Vllm,
        }
    }

    fn gaps_s(off: &[u64]) -> Vec<f64> {
        off.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e9).collect()
    }

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        (m, xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
    }

    #[test]
    fn infinite_rate_sends_everything_at_zero() {
        let off = cfg(f64::INFINITY, 1.0, 0).offsets_ns(5).unwrap();
        assert_eq!(off, vec![0; 5]);
    }

    #[test]
    fn same_seed_same_schedule_other_seed_differs() {
        let a = cfg(10.0, 1.0, 7).offsets_ns(200).unwrap();
        assert_eq!(a, cfg(10.0, 1.0, 7).offsets_ns(200).unwrap());
        assert_ne!(a, cfg(10.0, 1.0, 8).offsets_ns(200).unwrap());
        // vLLM: a gap before the first request too, and the last one at exactly 200 / 10 s.
        assert!(a[0] > 0);
        assert_eq!(a[199], 20_000_000_000);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn infinite_burstiness_is_vllms_constant_gap() {
        let off = cfg(4.0, f64::INFINITY, 0).offsets_ns(8).unwrap();
        let want: Vec<u64> = (1..=8).map(|i| i * 250_000_000).collect();
        assert_eq!(off, want);
    }

    #[test]
    fn sglang_sends_the_first_at_once_then_exponential_gaps() {
        let sg = |rate: f64, words: u64| ScheduleConfig {
            draws: Draws::Sglang {
                dataset_words: words,
            },
            ..cfg(rate, 1.0, 42)
        };
        assert_eq!(sg(f64::INFINITY, 0).offsets_ns(4).unwrap(), vec![0; 4]);
        let off = sg(20.0, 0).offsets_ns(20_001).unwrap();
        assert_eq!(off[0], 0);
        let (m, v) = mean_var(&gaps_s(&off));
        // Exponential of mean 1/20: variance 1/400; 20,000 gaps, bounds as above.
        assert!((m / 0.05 - 1.0).abs() < 0.05, "mean {m}");
        assert!((v / 0.0025 - 1.0).abs() < 0.15, "var {v}");
        // The dataset's draws come first: other words taken, other gaps.
        let after = sg(20.0, 3).offsets_ns(50).unwrap();
        assert_ne!(after, off[..50]);
    }

    #[test]
    fn mean_gap_is_one_over_rate_and_variance_follows_the_shape() {
        // Gamma(k, 1/(r k)): mean 1/r, variance 1/(r^2 k). 20,000 gaps: the sample mean is
        // within ~1% (k = 1) of the truth; bounds of 5% on the mean and 15% on the variance
        // leave a wide margin.
        for &(rate, k) in &[(20.0, 1.0), (20.0, 0.25), (5.0, 4.0)] {
            let off = cfg(rate, k, 42).offsets_ns(20_001).unwrap();
            let (m, v) = mean_var(&gaps_s(&off));
            let (want_m, want_v) = (1.0 / rate, 1.0 / (rate * rate * k));
            assert!(
                (m / want_m - 1.0).abs() < 0.05,
                "rate {rate} k {k}: mean {m}"
            );
            assert!(
                (v / want_v - 1.0).abs() < 0.15,
                "rate {rate} k {k}: var {v}"
            );
        }
    }

    #[test]
    fn ramps_follow_their_shapes() {
        let lin = ScheduleConfig {
            ramp: Some(Ramp {
                strategy: RampStrategy::Linear,
                start_rps: 1.0,
                end_rps: 11.0,
            }),
            ..cfg(f64::INFINITY, 1.0, 0)
        };
        assert_eq!(lin.rate_at(0, 11), 1.0);
        assert_eq!(lin.rate_at(5, 11), 6.0);
        assert_eq!(lin.rate_at(10, 11), 11.0);
        let exp = ScheduleConfig {
            ramp: Some(Ramp {
                strategy: RampStrategy::Exponential,
                start_rps: 1.0,
                end_rps: 100.0,
            }),
            ..lin
        };
        assert!((exp.rate_at(5, 11) - 10.0).abs() < 1e-9);
        assert!((exp.rate_at(10, 11) - 100.0).abs() < 1e-9);
        // Gaps shrink as the rate grows: compare the mean gap of the first and last fifths.
        let off = lin.offsets_ns(5_000).unwrap();
        let g = gaps_s(&off);
        let (first, _) = mean_var(&g[..1000]);
        let (last, _) = mean_var(&g[g.len() - 1000..]);
        assert!(first > 3.0 * last, "first {first} last {last}");
        assert!(exp.validate().is_ok());
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(cfg(0.0, 1.0, 0).offsets_ns(1).is_err());
        assert!(cfg(f64::NAN, 1.0, 0).offsets_ns(1).is_err());
        assert!(cfg(1.0, 0.0, 0).offsets_ns(1).is_err());
        // numpy's legacy seed is 32 bits.
        let big = cfg(1.0, 1.0, 1 << 32)
            .offsets_ns(1)
            .unwrap_err()
            .to_string();
        assert!(big.contains("2**32 - 1"), "{big}");
        let bad = ScheduleConfig {
            ramp: Some(Ramp {
                strategy: RampStrategy::Exponential,
                start_rps: 0.0,
                end_rps: 5.0,
            }),
            ..cfg(1.0, 1.0, 0)
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("exponential"));
    }
}
