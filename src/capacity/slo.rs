//! The service-level objectives of `llmspeed capacity`: one syntax, `NAME=VALUE`, parsed into
//! [`Objective`]s. Pure: no IO, no clock.
//!
//! - `ttft_pQ=DUR`, `itl_pQ=DUR`, `e2e_pQ=DUR`, `tpot_pQ=DUR`: the Q-th percentile (0 < Q < 100,
//!   decimals allowed: `p99.9`) of that latency stays at or under DUR. DUR needs its unit
//!   (`us`, `ms`, `s`): a bare number could be read in either of two units, so it is refused.
//! - `errors=X%`: at most X percent of the requests fail (0 < X < 100).
//! - `attainment=X%`: at least X percent of the requests succeed with their TTFT, E2E and TPOT
//!   each within the threshold of every such objective given (the goodput rule); it needs at
//!   least one of those objectives. ITL is a gap, not a request's figure, so it stays out.

use std::fmt;

/// A latency measured per request (or per gap, ITL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Time to first token.
    Ttft,
    /// Inter-token latency: every gap between consecutive token events.
    Itl,
    /// End-to-end latency of a request.
    E2e,
    /// Time per output token after the first: (E2E - TTFT) / (output tokens - 1).
    Tpot,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Itl => "itl",
            Metric::E2e => "e2e",
            Metric::Tpot => "tpot",
        }
    }

    fn from_name(s: &str) -> Option<Metric> {
        Some(match s {
            "ttft" => Metric::Ttft,
            "itl" => Metric::Itl,
            "e2e" => Metric::E2e,
            "tpot" => Metric::Tpot,
            _ => return None,
        })
    }
}

/// One objective a load must meet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Objective {
    /// The `percent`-th percentile of `metric` is at most `max_ms`.
    Latency {
        metric: Metric,
        percent: f64,
        max_ms: f64,
    },
    /// The share of failed requests is at most `max` (a fraction, 0 < max < 1).
    Errors { max: f64 },
    /// The share of requests within every per-request latency threshold is at least `min`.
    Attainment { min: f64 },
}

impl Objective {
    /// The objective's key as the user spells it (and `results.json` writes it): `ttft_p99`,
    /// `errors`, `attainment`.
    pub fn key(&self) -> String {
        match self {
            Objective::Latency {
                metric, percent, ..
            } => format!("{}_p{}", metric.as_str(), trim_float(*percent)),
            Objective::Errors { .. } => "errors".into(),
            Objective::Attainment { .. } => "attainment".into(),
        }
    }

    /// The threshold: milliseconds for a latency, a fraction for errors and attainment.
    pub fn threshold(&self) -> f64 {
        match *self {
            Objective::Latency { max_ms, .. } => max_ms,
            Objective::Errors { max } => max,
            Objective::Attainment { min } => min,
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Objective::Latency { max_ms, .. } => {
                write!(f, "{} <= {} ms", self.key(), trim_float(max_ms))
            }
            Objective::Errors { max } => write!(f, "errors <= {}%", trim_float(max * 100.0)),
            Objective::Attainment { min } => {
                write!(f, "attainment >= {}%", trim_float(min * 100.0))
            }
        }
    }
}

/// A number without a trailing `.0` (`99`, `99.9`, `0.5`).
fn trim_float(v: f64) -> String {
    let s = format!("{v}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// Every objective of a run, in the order given (the order names the objective that failed
/// first when several fail at once).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slo {
    pub objectives: Vec<Objective>,
}

impl Slo {
    /// Parses every `--slo` value, then checks the set: no objective twice, and `attainment`
    /// only beside a per-request latency objective.
    pub fn parse<S: AsRef<str>>(specs: &[S]) -> Result<Slo, String> {
        if specs.is_empty() {
            return Err("give at least one objective, e.g. --slo ttft_p99=500ms".into());
        }
        let objectives = specs
            .iter()
            .map(|s| parse_objective(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, o) in objectives.iter().enumerate() {
            if objectives[..i].iter().any(|p| p.key() == o.key()) {
                return Err(format!("--slo {} is given twice", o.key()));
            }
        }
        let slo = Slo { objectives };
        let has_attainment = slo
            .objectives
            .iter()
            .any(|o| matches!(o, Objective::Attainment { .. }));
        if has_attainment && slo.request_thresholds().next().is_none() {
            return Err("--slo attainment counts the requests within a ttft, e2e or tpot objective: give one of those too (e.g. --slo ttft_p99=500ms)".into());
        }
        Ok(slo)
    }

    /// The per-request latency thresholds `attainment` holds each request to: every TTFT, E2E
    /// and TPOT objective's (ITL is per gap).
    pub fn request_thresholds(&self) -> impl Iterator<Item = (Metric, f64)> + '_ {
        self.objectives.iter().filter_map(|o| match *o {
            Objective::Latency { metric, max_ms, .. } if metric != Metric::Itl => {
                Some((metric, max_ms))
            }
            _ => None,
        })
    }
}

/// One `--slo` value.
pub fn parse_objective(spec: &str) -> Result<Objective, String> {
    let (name, value) = spec.split_once('=').ok_or_else(|| {
        format!("--slo `{spec}`: expected NAME=VALUE, e.g. ttft_p99=500ms, itl_p99=50ms, errors=1%")
    })?;
    let (name, value) = (name.trim(), value.trim());
    match name {
        "errors" => {
            let max = percent(name, value)?;
            if max <= 0.0 {
                return Err("--slo errors=0%: no number of requests can show a rate of exactly 0 (a rate is certified under a bound above 0); give a bound above 0, e.g. errors=1%".into());
            }
            Ok(Objective::Errors { max })
        }
        "attainment" => {
            let min = percent(name, value)?;
            if min <= 0.0 {
                return Err("--slo attainment=0% holds always; give a share above 0%".into());
            }
            Ok(Objective::Attainment { min })
        }
        _ => latency(spec, name, value),
    }
}

/// `METRIC_pQ=DUR`.
fn latency(spec: &str, name: &str, value: &str) -> Result<Objective, String> {
    let unknown = || {
        format!("--slo `{spec}`: unknown objective `{name}`; expected ttft_pQ, itl_pQ, e2e_pQ, tpot_pQ (Q a percentile, e.g. p99), errors or attainment")
    };
    let (m, q) = name.split_once("_p").ok_or_else(unknown)?;
    let metric = Metric::from_name(m).ok_or_else(unknown)?;
    let percent = number(q)
        .filter(|p| *p > 0.0 && *p < 100.0)
        .ok_or_else(|| {
            format!("--slo `{spec}`: the percentile `p{q}` must be a number above 0 and below 100, e.g. p99 or p99.9")
        })?;
    let max_ms = duration_ms(value).map_err(|e| format!("--slo `{spec}`: {e}"))?;
    Ok(Objective::Latency {
        metric,
        percent,
        max_ms,
    })
}

/// A plain decimal number (digits and at most one point; no sign, exponent, `inf` or `nan`).
fn number(s: &str) -> Option<f64> {
    let ok = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.chars().filter(|&c| c == '.').count() <= 1
        && s.chars().any(|c| c.is_ascii_digit());
    if !ok {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// `X%` as a fraction in [0, 1).
fn percent(name: &str, value: &str) -> Result<f64, String> {
    let digits = value.strip_suffix('%').ok_or_else(|| {
        format!("--slo {name}={value}: give a percentage with its sign, e.g. {name}=1%")
    })?;
    let v = number(digits.trim())
        .filter(|v| *v < 100.0)
        .ok_or_else(|| {
            format!("--slo {name}={value}: the percentage must be a number from 0 to below 100")
        })?;
    Ok(v / 100.0)
}

/// A latency threshold: a number and its unit (`us`, `ms`, `s`), above 0, in milliseconds.
fn duration_ms(value: &str) -> Result<f64, String> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (num, unit) = value.split_at(split);
    let v = number(num).ok_or_else(|| format!("`{value}` is not a duration (e.g. 500ms, 1.5s)"))?;
    let scale = match unit.trim() {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "" => return Err(format!("`{value}` needs a unit: us, ms or s (e.g. 500ms)")),
        u => return Err(format!("unknown unit `{u}`: use us, ms or s (e.g. 500ms)")),
    };
    let ms = v * scale;
    if ms <= 0.0 || !ms.is_finite() {
        return Err(format!("`{value}` must be above 0"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(metric: Metric, percent: f64, max_ms: f64) -> Objective {
        Objective::Latency {
            metric,
            percent,
            max_ms,
        }
    }

    #[test]
    fn every_form_parses_to_its_objective() {
        let cases = [
            ("ttft_p99=500ms", lat(Metric::Ttft, 99.0, 500.0)),
            ("itl_p99=50ms", lat(Metric::Itl, 99.0, 50.0)),
            ("e2e_p90=2.5s", lat(Metric::E2e, 90.0, 2500.0)),
            ("tpot_p50=800us", lat(Metric::Tpot, 50.0, 0.8)),
            ("ttft_p99.9=1s", lat(Metric::Ttft, 99.9, 1000.0)),
            (" itl_p95 = 20ms ", lat(Metric::Itl, 95.0, 20.0)),
            ("errors=1%", Objective::Errors { max: 0.01 }),
            ("errors=0.5%", Objective::Errors { max: 0.005 }),
            ("attainment=99%", Objective::Attainment { min: 0.99 }),
        ];
        for (spec, want) in cases {
            assert_eq!(parse_objective(spec), Ok(want), "{spec}");
        }
    }

    #[test]
    fn keys_and_display_read_back_as_given() {
        let o = parse_objective("ttft_p99.9=500ms").unwrap();
        assert_eq!(o.key(), "ttft_p99.9");
        assert_eq!(o.to_string(), "ttft_p99.9 <= 500 ms");
        assert_eq!(
            parse_objective("errors=1%").unwrap().to_string(),
            "errors <= 1%"
        );
        assert_eq!(
            parse_objective("attainment=99.5%").unwrap().to_string(),
            "attainment >= 99.5%"
        );
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let cases = [
            ("ttft_p99", "NAME=VALUE"),
            ("ttft_p99=500", "needs a unit"),
            ("ttft_p99=500m", "unknown unit `m`"),
            ("ttft_p99=0ms", "above 0"),
            ("ttft_p99=-5ms", "not a duration"),
            ("ttft_p100=5ms", "below 100"),
            ("ttft_p0=5ms", "above 0"),
            ("ttft_pxx=5ms", "must be a number"),
            ("ttft_p1e2=5ms", "must be a number"),
            ("latency_p99=5ms", "unknown objective"),
            ("ttft=5ms", "unknown objective"),
            ("errors=1", "percentage with its sign"),
            ("errors=0%", "above 0"),
            ("errors=100%", "below 100"),
            ("errors=nan%", "number from 0"),
            ("attainment=0%", "above 0%"),
            ("ttft_p99=infms", "not a duration"),
            ("ttft_p99=1.2.3ms", "not a duration"),
        ];
        for (spec, want) in cases {
            let e = parse_objective(spec).unwrap_err();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn the_set_is_checked() {
        assert!(Slo::parse::<&str>(&[])
            .unwrap_err()
            .contains("at least one"));
        let twice = Slo::parse(&["ttft_p99=1s", "ttft_p99=2s"]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
        let alone = Slo::parse(&["attainment=99%", "itl_p99=50ms"]).unwrap_err();
        assert!(alone.contains("ttft, e2e or tpot"), "{alone}");
        let slo = Slo::parse(&[
            "ttft_p99=1s",
            "itl_p99=50ms",
            "e2e_p90=3s",
            "attainment=90%",
        ])
        .unwrap();
        let th: Vec<_> = slo.request_thresholds().collect();
        assert_eq!(th, vec![(Metric::Ttft, 1000.0), (Metric::E2e, 3000.0)]);
    }

    proptest::proptest! {
        /// The fuzz target's properties (`fuzz/fuzz_targets/capacity_slo.rs`) on generated
        /// specs: never a panic, and a latency objective written back parses to itself.
        #[test]
        fn parsing_never_panics_and_latencies_read_back(
            spec in "(ttft|itl|e2e|tpot|errors|attainment|x)(_p[0-9.]{0,6})?=[0-9.]{0,8}(us|ms|s|%|)",
        ) {
            match parse_objective(&spec) {
                Ok(o @ Objective::Latency { max_ms, .. }) => {
                    let again = format!("{}={}ms", o.key(), max_ms);
                    proptest::prop_assert_eq!(parse_objective(&again), Ok(o));
                }
                Ok(Objective::Errors { max: v } | Objective::Attainment { min: v }) => {
                    proptest::prop_assert!(v > 0.0 && v < 1.0);
                }
                Err(e) => proptest::prop_assert!(!e.is_empty()),
            }
        }
    }
}
