//! `--num-runs N`: the spread of every figure across repeated runs of the same benchmark.
//!
//! Owns the statistics across runs ([`spread`]), the two-sided 95% Student t critical values
//! they use ([`t_critical_95`]), and the summary's JSON and console table. Pure: it takes each
//! run's figures as `(key, value)` pairs (the result JSON's own keys) and never runs, reads or
//! writes anything itself.
//!
//! Definitions:
//! - `mean`: the arithmetic mean of the N values.
//! - `std`: the *sample* standard deviation (divisor N - 1), the one the t interval is built
//!   on. (vllm-bench's multi-run console prints the population one, divisor N.)
//! - `cv`: `std / mean` (a fraction; `null` when the mean is 0).
//! - `ci95`: `mean ± t(0.975, N - 1) x std / sqrt(N)`; `null` for a single run.
//! - `unstable`: `cv > 0.05`, the runs disagree by more than 5%.

use serde_json::{json, Value};
use std::io::{self, Write};

/// A coefficient of variation above this flags the figure as unstable across runs.
pub const CV_FLAG: f64 = 0.05;

/// Two-sided 95% critical values of Student's t for 1 to 30 degrees of freedom (the 0.975
/// quantile), as printed in every statistics table to three decimals.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The 0.975 quantile of Student's t with `df` degrees of freedom (`df >= 1`): the table up to
/// 30, then the Cornish-Fisher expansion around the normal quantile, which is within 0.001 of
/// the exact value from 30 on.
pub fn t_critical_95(df: usize) -> f64 {
    if df == 0 {
        return f64::NAN;
    }
    if df <= T_975.len() {
        return T_975[df - 1];
    }
    let z = 1.959_963_984_540_054_f64;
    let n = df as f64;
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * n)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * n * n)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * n * n * n)
}

/// One figure across the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    pub key: String,
    pub values: Vec<f64>,
    pub mean: f64,
    pub std: f64,
    pub cv: Option<f64>,
    pub ci95: Option<(f64, f64)>,
    pub unstable: bool,
}

impl Spread {
    /// The statistics of `values` (at least one).
    pub fn of(key: &str, values: Vec<f64>) -> Spread {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = if n > 1 {
            let ss: f64 = values.iter().map(|x| (x - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let cv = (mean != 0.0).then(|| std / mean.abs());
        let ci95 = (n > 1).then(|| {
            let h = t_critical_95(n - 1) * std / (n as f64).sqrt();
            (mean - h, mean + h)
        });
        Spread {
            key: key.to_string(),
            values,
            mean,
            std,
            cv,
            ci95,
            unstable: cv.is_some_and(|c| c > CV_FLAG),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "mean": self.mean,
            "std": self.std,
            "cv": self.cv,
            "ci95_low": self.ci95.map(|c| c.0),
            "ci95_high": self.ci95.map(|c| c.1),
            "unstable": self.unstable,
            "values": self.values,
        })
    }
}

/// Every figure present in every run, in the first run's order. A figure missing from some
/// run (a steady-state window one run did not find) is left out rather than averaged over
/// fewer runs unsaid.
pub fn spread(runs: &[Vec<(String, f64)>]) -> Vec<Spread> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .filter_map(|(key, _)| {
            let values: Option<Vec<f64>> = runs
                .iter()
                .map(|r| r.iter().find(|(k, _)| k == key).map(|(_, v)| *v))
                .collect();
            values.map(|v| Spread::of(key, v))
        })
        .collect()
}

/// The figures of one run's result JSON that are compared across runs: every top-level number
/// of vLLM's result (throughputs, the selected latency statistics, counts, duration) and the
/// steady-state throughputs and latencies (`llmspeed.steady_state`) as `steady_state.KEY`. Within-run standard
/// deviations (`std_*`) are left out: the spread of a spread flags noise, not instability.
pub fn figures(result: &[(String, Value)]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (k, v) in result {
        match (k.as_str(), v) {
            ("num_prompts" | "burstiness" | "max_concurrency" | "request_rate" | "rtfx", _) => {}
            (k, _) if k.starts_with("std_") => {}
            ("llmspeed", Value::Object(x)) => {
                let Some(Value::Object(m)) = x.get("steady_state") else {
                    continue;
                };
                for (sk, sv) in m.iter().filter(|(sk, _)| !sk.starts_with("std_")) {
                    if let Some(x) = sv.as_f64() {
                        out.push((format!("steady_state.{sk}"), x));
                    }
                }
            }
            (_, Value::Number(n)) => {
                if let Some(x) = n.as_f64() {
                    out.push((k.clone(), x));
                }
            }
            _ => {}
        }
    }
    out
}

/// The summary saved with `--save-result`: `{"num_runs": N, "cv_flag": 0.05, "unstable": [...],
/// "metrics": {KEY: {mean, std, cv, ci95_low, ci95_high, unstable, values}}}`.
pub fn summary_json(spreads: &[Spread], num_runs: usize, result_files: &[String]) -> Value {
    let metrics: serde_json::Map<String, Value> = spreads
        .iter()
        .map(|s| (s.key.clone(), s.to_json()))
        .collect();
    let unstable: Vec<&str> = spreads
        .iter()
        .filter(|s| s.unstable)
        .map(|s| s.key.as_str())
        .collect();
    json!({
        "num_runs": num_runs,
        "cv_flag": CV_FLAG,
        "unstable": unstable,
        "result_files": result_files,
        "metrics": metrics,
    })
}

/// The console table: one row per figure, `!` after the CV of an unstable one.
pub fn write_table(w: &mut impl Write, spreads: &[Spread], num_runs: usize) -> io::Result<()> {
    let width = 36 + 5 * 13;
    writeln!(
        w,
        "{:=^width$}",
        format!(" Multi-Run Summary ({num_runs} runs) ")
    )?;
    writeln!(
        w,
        "{:<36}{:>13}{:>13}{:>13}{:>13}{:>13}",
        "Metric", "Mean", "Std", "CV %", "95% CI low", "95% CI high"
    )?;
    for s in spreads {
        let cv = match s.cv {
            Some(c) => format!("{:.2}{}", 100.0 * c, if s.unstable { "!" } else { " " }),
            None => "-".into(),
        };
        let (lo, hi) = match s.ci95 {
            Some((l, h)) => (format!("{l:.2}"), format!("{h:.2}")),
            None => ("-".into(), "-".into()),
        };
        writeln!(
            w,
            "{:<36}{:>13.2}{:>13.2}{:>13}{:>13}{:>13}",
            s.key, s.mean, s.std, cv, lo, hi
        )?;
    }
    writeln!(w, "{}", "=".repeat(width))?;
    let flagged: Vec<&str> = spreads
        .iter()
        .filter(|s| s.unstable)
        .map(|s| s.key.as_str())
        .collect();
    if !flagged.is_empty() {
        writeln!(
            w,
            "unstable across runs (CV > {:.0}%): {}",
            100.0 * CV_FLAG,
            flagged.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Three runs, worked by hand.
    /// request_throughput 10, 12, 14: mean 12; deviations -2, 0, 2; sum of squares 8;
    /// sample variance 8 / 2 = 4, std 2; CV 2 / 12 = 0.1667 (> 5%: flagged);
    /// t(0.975, 2) = 4.303; half-width 4.303 x 2 / sqrt(3) = 4.96867; CI [7.03133, 16.96867].
    /// mean_ttft_ms 100, 101, 102: mean 101, std 1, CV 0.0099 (not flagged);
    /// half-width 4.303 / sqrt(3) = 2.48434; CI [98.51566, 103.48434].
    #[test]
    fn three_runs_by_hand() {
        let run = |tp: f64, ttft: f64| {
            vec![
                ("request_throughput".to_string(), tp),
                ("mean_ttft_ms".to_string(), ttft),
            ]
        };
        let s = spread(&[run(10.0, 100.0), run(12.0, 101.0), run(14.0, 102.0)]);
        assert_eq!(s.len(), 2);
        let tp = &s[0];
        assert_eq!(tp.key, "request_throughput");
        assert!(close(tp.mean, 12.0, 1e-12));
        assert!(close(tp.std, 2.0, 1e-12));
        assert!(close(tp.cv.unwrap(), 1.0 / 6.0, 1e-12));
        let (lo, hi) = tp.ci95.unwrap();
        assert!(
            close(lo, 7.031_33, 1e-5) && close(hi, 16.968_67, 1e-5),
            "{lo} {hi}"
        );
        assert!(tp.unstable);
        let ttft = &s[1];
        assert!(close(ttft.mean, 101.0, 1e-12) && close(ttft.std, 1.0, 1e-12));
        assert!(close(ttft.cv.unwrap(), 1.0 / 101.0, 1e-12));
        let (lo, hi) = ttft.ci95.unwrap();
        assert!(
            close(lo, 98.515_66, 1e-5) && close(hi, 103.484_34, 1e-5),
            "{lo} {hi}"
        );
        assert!(!ttft.unstable);
    }

    #[test]
    fn edge_cases_one_run_zero_mean_and_missing_figures() {
        let one = Spread::of("x", vec![5.0]);
        assert_eq!((one.mean, one.std, one.ci95), (5.0, 0.0, None));
        assert_eq!(one.cv, Some(0.0));
        let zero = Spread::of("failed", vec![0.0, 0.0, 0.0]);
        assert_eq!((zero.cv, zero.unstable), (None, false));
        // A figure only some runs have is left out.
        let a = vec![("a".to_string(), 1.0), ("ss".to_string(), 2.0)];
        let b = vec![("a".to_string(), 3.0)];
        let s = spread(&[a, b]);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].key, "a");
    }

    /// Values from a t table (two-sided 95%), and the expansion past the table against the
    /// exact quantiles for 40, 60 and 120 degrees of freedom (2.0211, 2.0003, 1.9799).
    #[test]
    fn t_critical_values() {
        assert_eq!(t_critical_95(1), 12.706);
        assert_eq!(t_critical_95(2), 4.303);
        assert_eq!(t_critical_95(4), 2.776);
        assert_eq!(t_critical_95(9), 2.262);
        assert_eq!(t_critical_95(30), 2.042);
        assert!(close(t_critical_95(31), 2.0395, 0.0005));
        assert!(close(t_critical_95(40), 2.0211, 0.0005));
        assert!(close(t_critical_95(60), 2.0003, 0.0005));
        assert!(close(t_critical_95(120), 1.9799, 0.0005));
        assert!(close(t_critical_95(1_000_000), 1.96, 0.0001));
        assert!(t_critical_95(0).is_nan());
    }

    #[test]
    fn figures_take_result_numbers_and_steady_state() {
        let r = vec![
            ("date".to_string(), json!("x")),
            ("num_prompts".to_string(), json!(10)),
            ("completed".to_string(), json!(10)),
            ("request_throughput".to_string(), json!(2.5)),
            ("std_ttft_ms".to_string(), json!(3.0)),
            ("request_goodput".to_string(), Value::Null),
            ("latencies".to_string(), json!([1.0])),
            (
                "llmspeed".to_string(),
                json!({"steady_state": {"window": {}, "output_throughput": 7.0, "std_itl_ms": 1.0}}),
            ),
        ];
        assert_eq!(
            figures(&r),
            vec![
                ("completed".to_string(), 10.0),
                ("request_throughput".to_string(), 2.5),
                ("steady_state.output_throughput".to_string(), 7.0)
            ]
        );
    }

    #[test]
    fn table_flags_unstable_figures() {
        let s = vec![
            Spread::of("request_throughput", vec![10.0, 12.0, 14.0]),
            Spread::of("mean_ttft_ms", vec![100.0, 101.0, 102.0]),
        ];
        let mut out = Vec::new();
        write_table(&mut out, &s, 3).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("16.67!"), "{text}");
        assert!(text.contains("0.99 "), "{text}");
        assert!(
            text.ends_with("unstable across runs (CV > 5%): request_throughput\n"),
            "{text}"
        );
        let v = summary_json(&s, 3, &[]);
        assert_eq!(v["unstable"], json!(["request_throughput"]));
        assert_eq!(v["metrics"]["mean_ttft_ms"]["unstable"], false);
    }
}
