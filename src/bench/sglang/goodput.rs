//! `--goodput KEY:VALUE ...`: SGLang 0.5.23's SLO goodput (`sglang/benchmark/goodput.py`), the
//! requests that succeeded and met every given latency SLO.
//!
//! Owns the flag's syntax ([`parse`]: `ttft`, `tpot` or `e2el`, then `:`, then a finite number
//! of milliseconds above 0; a key given twice keeps its first place and its last value, as
//! Python's `dict` of the pairs does) and the figures ([`compute`]). Pure: `console` and
//! `record` write what it computes.
//!
//! The figures, as SGLang defines them: a request counts for a metric when it succeeded and its
//! observed value is at most the SLO (`<=`); TPOT is `(latency - ttft) / (output_len - 1)`, and
//! 0 for a request of one token; `request_goodput` is the good requests per second of the
//! benchmark's duration; `slo_attainment` and each metric's attainment divide by every request
//! sent, failures included.

use super::metrics::RequestOutput;

/// The metrics an SLO may name, in SGLang's order.
pub const METRICS: [&str; 3] = ["ttft", "tpot", "e2el"];

/// The SLOs as given: `(metric, milliseconds)` in first-given order.
pub type Slos = Vec<(&'static str, f64)>;

/// One `KEY:VALUE` entry, checked as SGLang's `_goodput_slo` checks it.
pub fn parse_one(pair: &str) -> Result<(&'static str, f64), String> {
    let (name, value) = pair.split_once(':').unwrap_or((pair, ""));
    let Some(metric) = METRICS.iter().find(|m| **m == name) else {
        return Err(format!(
            "--goodput: expected KEY:VALUE with KEY in {}, got {pair:?}",
            METRICS.join(", ")
        ));
    };
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok((metric, v)),
        _ => Err(format!(
            "--goodput: expected a finite float > 0, got {value:?}"
        )),
    }
}

/// Every entry, a repeated key keeping its first place and taking its last value.
pub fn parse(pairs: &[String]) -> Result<Slos, String> {
    let mut slos: Slos = Vec::with_capacity(pairs.len());
    for p in pairs {
        let (name, v) = parse_one(p)?;
        match slos.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = v,
            None => slos.push((name, v)),
        }
    }
    Ok(slos)
}

/// SGLang's `GoodputMetrics`.
#[derive(Clone, Debug, PartialEq)]
pub struct Goodput {
    /// `goodput_slos_ms`.
    pub slos: Slos,
    /// Good requests per second.
    pub request_goodput: f64,
    /// Good requests / requests sent.
    pub slo_attainment: f64,
    /// Per metric, the requests that met its SLO / requests sent, in the SLOs' order.
    pub by_metric: Vec<(&'static str, f64)>,
}

/// The goodput of `outputs` (every request sent, failures included) over `duration_s`.
pub fn compute(outputs: &[RequestOutput], slos: &Slos, duration_s: f64) -> Goodput {
    let mut good = 0u64;
    let mut met = vec![0u64; slos.len()];
    for o in outputs.iter().filter(|o| o.success) {
        let tpot = if o.output_len > 1 {
            (o.latency_s - o.ttft_s) / (o.output_len - 1) as f64
        } else {
            0.0
        };
        let mut all = true;
        for (i, (name, slo)) in slos.iter().enumerate() {
            let observed_ms = match *name {
                "ttft" => o.ttft_s,
                "tpot" => tpot,
                _ => o.latency_s,
            } * 1000.0;
            if observed_ms <= *slo {
                met[i] += 1;
            } else {
                all = false;
            }
        }
        good += all as u64;
    }
    let sent = outputs.len() as f64;
    Goodput {
        slos: slos.clone(),
        request_goodput: good as f64 / duration_s,
        slo_attainment: good as f64 / sent,
        by_metric: slos
            .iter()
            .zip(&met)
            .map(|((name, _), &n)| (*name, n as f64 / sent))
            .collect(),
    }
}

/// Python's `f"{x:g}"` for a finite number: six significant digits, trailing zeros dropped,
/// exponent form below 1e-4 and from 1e6 on (`500`, `0.5`, `1e+06`, `1.5e-05`).
pub fn py_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..6).contains(&exp) {
        trim(&format!("{x:.*}", (5 - exp).max(0) as usize))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(success: bool, ttft: f64, latency: f64, output_len: u64) -> RequestOutput {
        RequestOutput {
            success,
            ttft_s: ttft,
            latency_s: latency,
            output_len,
            ..RequestOutput::default()
        }
    }

    #[test]
    fn parse_follows_sglangs_argparse_type_and_dict() {
        assert_eq!(parse_one("ttft:500"), Ok(("ttft", 500.0)));
        assert_eq!(parse_one("e2el:0.5"), Ok(("e2el", 0.5)));
        for bad in [
            "itl:5", "ttft", "ttft:", "ttft:0", "ttft:-1", "ttft:inf", "ttft:nan", "TTFT:1",
        ] {
            assert!(parse_one(bad).is_err(), "{bad}");
        }
        let s = parse(&["ttft:1".into(), "tpot:2".into(), "ttft:3".into()]).unwrap();
        assert_eq!(s, vec![("ttft", 3.0), ("tpot", 2.0)]);
    }

    #[test]
    fn a_request_is_good_when_it_succeeded_and_met_every_slo() {
        // TTFT 100 ms; TPOT (1.1 - 0.1) / 10 = 100 ms; E2E 1100 ms.
        let a = out(true, 0.1, 1.1, 11);
        // TTFT 300 ms; one token: TPOT 0; E2E 300 ms.
        let b = out(true, 0.3, 0.3, 1);
        // Would meet everything, but failed: never good, still counted as sent.
        let failed = out(false, 0.0, 0.0, 0);
        let slos = vec![("ttft", 200.0), ("tpot", 100.0)];
        let g = compute(&[a, b, failed], &slos, 2.0);
        // a meets both (100 <= 100 is met), b misses TTFT.
        assert_eq!(g.request_goodput, 0.5);
        assert_eq!(g.slo_attainment, 1.0 / 3.0);
        assert_eq!(g.by_metric, vec![("ttft", 1.0 / 3.0), ("tpot", 2.0 / 3.0)]);
        let e2el = compute(&[out(true, 0.1, 1.1, 11)], &vec![("e2el", 1099.0)], 1.0);
        assert_eq!((e2el.request_goodput, e2el.slo_attainment), (0.0, 0.0));
    }

    #[test]
    fn py_g_spells_as_python() {
        for (x, s) in [
            (500.0, "500"),
            (0.5, "0.5"),
            (50.25, "50.25"),
            (1e6, "1e+06"),
            (123456789.0, "1.23457e+08"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (999999.5, "1e+06"),
            (2.0 / 3.0, "0.666667"),
        ] {
            assert_eq!(py_g(x), s, "{x}");
        }
    }
}
