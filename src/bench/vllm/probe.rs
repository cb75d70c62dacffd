//! `--probe-request-rate`'s figures (vLLM's): the probe outcomes of the engine's probe loop
//! reduced to vLLM's keys (`probe_completed`, `probe_failed`, `probe_median_e2el_ms`,
//! `probe_p99_e2el_ms`, `probe_max_e2el_ms`) and its "Probe Requests" console block. Pure.

use crate::analysis::stats::{median, percentile};
use crate::bench::engine::probe::ProbeOutcome;
use serde_json::{json, Value};
use std::io::Write;

/// vLLM's probe keys, in its order; `None` when no probe succeeded (vLLM then adds none).
pub fn stats(outcomes: &[ProbeOutcome]) -> Option<Vec<(String, Value)>> {
    let ms: Vec<f64> = outcomes.iter().flatten().map(|&n| n as f64 / 1e6).collect();
    if ms.is_empty() {
        return None;
    }
    let max = ms.iter().copied().fold(f64::MIN, f64::max);
    Some(vec![
        ("probe_completed".into(), json!(ms.len())),
        ("probe_failed".into(), json!(outcomes.len() - ms.len())),
        ("probe_median_e2el_ms".into(), json!(median(&ms)?)),
        ("probe_p99_e2el_ms".into(), json!(percentile(&ms, 99.0)?)),
        ("probe_max_e2el_ms".into(), json!(max)),
    ])
}

/// vLLM's "Probe Requests" console block.
pub fn write_block(w: &mut impl Write, keys: &[(String, Value)]) -> std::io::Result<()> {
    let get = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let Some(done) = get("probe_completed") else {
        return Ok(());
    };
    writeln!(w, "{:-^50}", "Probe Requests")?;
    writeln!(w, "{:<40} {:<10}", "Probe requests completed:", done)?;
    if let Some(v) = get("probe_failed") {
        writeln!(w, "{:<40} {:<10}", "Probe requests failed:", v)?;
    }
    for (label, k) in [
        ("Median probe E2EL (ms):", "probe_median_e2el_ms"),
        ("P99 probe E2EL (ms):", "probe_p99_e2el_ms"),
        ("Max probe E2EL (ms):", "probe_max_e2el_ms"),
    ] {
        let v = get(k).and_then(Value::as_f64).unwrap_or(0.0);
        writeln!(w, "{label:<40} {v:<10.2}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_by_hand() {
        // 10, 20, 30, 40 ms and one failure: median 25, p99 = 30 + 0.97 x 10 (linear, numpy's).
        let o = [
            Some(10_000_000),
            None,
            Some(40_000_000),
            Some(20_000_000),
            Some(30_000_000),
        ];
        let s = stats(&o).unwrap();
        let get = |k: &str| s.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(get("probe_completed"), 4);
        assert_eq!(get("probe_failed"), 1);
        assert!((get("probe_median_e2el_ms").as_f64().unwrap() - 25.0).abs() < 1e-9);
        assert!((get("probe_p99_e2el_ms").as_f64().unwrap() - 39.7).abs() < 1e-9);
        assert!((get("probe_max_e2el_ms").as_f64().unwrap() - 40.0).abs() < 1e-9);
        assert_eq!(
            s.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            [
                "probe_completed",
                "probe_failed",
                "probe_median_e2el_ms",
                "probe_p99_e2el_ms",
                "probe_max_e2el_ms"
            ]
        );
        // No success, no keys (vLLM's rule).
        assert!(stats(&[None, None]).is_none());
        assert!(stats(&[]).is_none());
        let mut out = Vec::new();
        write_block(&mut out, &s).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Median probe E2EL (ms):                  25.00"),
            "{text}"
        );
    }
}
