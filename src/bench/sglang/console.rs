//! The "Serving Benchmark Result" block `sglang.bench_serving` prints, line for line: the same
//! labels, order, widths (label left in 40, value left in 10, trailing spaces included) and
//! number formats (Python's `str(float)` for the rate, `.2f` elsewhere; `nan`/`inf` spelled as
//! Python spells them).
//!
//! Owns the text only; never computes a figure.

use super::metrics::Metrics;
use std::io::{self, Write};

/// What the block shows besides the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Header<'a> {
    pub backend: &'a str,
    /// `--request-rate`, or `None` when the requests followed a trace's timestamps ("trace").
    pub request_rate: Option<f64>,
    pub max_concurrency: Option<usize>,
    pub duration_s: f64,
    /// The server's speculative-decoding accept length, shown when non-zero.
    pub accept_length: Option<f64>,
}

pub use crate::bench::engine::session::py_float;

/// Python's `f"{x:.2f}"`.
fn f2(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:.2}")
    }
}

fn row(
    w: &mut (impl Write + ?Sized),
    label: &str,
    value: impl std::fmt::Display,
) -> io::Result<()> {
    writeln!(w, "{label:<40} {value:<10}")
}

fn rowf(w: &mut (impl Write + ?Sized), label: &str, value: f64) -> io::Result<()> {
    row(w, label, f2(value))
}

/// Writes the block (it starts with an empty line, as SGLang's does).
pub fn write(w: &mut (impl Write + ?Sized), h: &Header<'_>, m: &Metrics) -> io::Result<()> {
    writeln!(w, "\n{:=^50}", " Serving Benchmark Result ")?;
    row(w, "Backend:", h.backend)?;
    row(
        w,
        "Traffic request rate:",
        h.request_rate.map_or("trace".into(), py_float),
    )?;
    row(
        w,
        "Max request concurrency:",
        h.max_concurrency
            .filter(|&c| c > 0)
            .map_or("not set".into(), |c| c.to_string()),
    )?;
    row(w, "Successful requests:", m.completed)?;
    rowf(w, "Benchmark duration (s):", h.duration_s)?;
    row(w, "Total input tokens:", m.total_input)?;
    row(w, "Total input text tokens:", m.total_input)?;
    row(w, "Total generated tokens:", m.total_output)?;
    row(
        w,
        "Total generated tokens (retokenized):",
        m.total_output_retokenized,
    )?;
    rowf(w, "Request throughput (req/s):", m.request_throughput)?;
    rowf(w, "Input token throughput (tok/s):", m.input_throughput)?;
    rowf(w, "Output token throughput (tok/s):", m.output_throughput)?;
    rowf(
        w,
        "Peak output token throughput (tok/s):",
        m.max_output_tokens_per_s,
    )?;
    row(w, "Peak concurrent requests:", m.max_concurrent_requests)?;
    rowf(w, "Total token throughput (tok/s):", m.total_throughput)?;
    rowf(w, "Concurrency:", m.concurrency)?;
    if let Some(a) = h.accept_length.filter(|&a| a != 0.0) {
        rowf(w, "Accept length:", a)?;
    }
    for (header, name, s) in [
        ("End-to-End Latency", "E2E Latency", &m.e2e_latency_ms),
        ("Time to First Token", "TTFT", &m.ttft_ms),
        (
            "Time per Output Token (excl. 1st token)",
            "TPOT",
            &m.tpot_ms,
        ),
        ("Inter-Token Latency", "ITL", &m.itl_ms),
    ] {
        writeln!(w, "{header:-^50}")?;
        rowf(w, &format!("Mean {name} (ms):"), s.mean)?;
        rowf(w, &format!("Median {name} (ms):"), s.median)?;
        rowf(w, &format!("P90 {name} (ms):"), s.p90)?;
        rowf(w, &format!("P95 {name} (ms):"), s.p95)?;
        rowf(w, &format!("P99 {name} (ms):"), s.p99)?;
    }
    rowf(w, "Max ITL (ms):", m.itl_ms.max)?;
    writeln!(w, "{}", "=".repeat(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_matches_sglangs_layout() {
        let mut m = Metrics {
            completed: 3,
            total_input: 30,
            total_output: 12,
            request_throughput: 1.5,
            ..Metrics::default()
        };
        m.ttft_ms.mean = 12.345;
        m.e2e_latency_ms.mean = f64::NAN;
        let h = Header {
            backend: "sglang",
            request_rate: Some(f64::INFINITY),
            max_concurrency: None,
            duration_s: 2.0,
            accept_length: None,
        };
        let mut out = Vec::new();
        write(&mut out, &h, &m).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "");
        assert_eq!(
            lines[1],
            "============ Serving Benchmark Result ============"
        );
        assert_eq!(lines[2], format!("{:<40} {:<10}", "Backend:", "sglang"));
        assert_eq!(
            lines[3],
            "Traffic request rate:                    inf       "
        );
        assert_eq!(
            lines[4],
            "Max request concurrency:                 not set   "
        );
        assert_eq!(
            lines[6],
            "Benchmark duration (s):                  2.00      "
        );
        assert!(lines.contains(&"----------------End-to-End Latency----------------"));
        assert!(lines.contains(&"---------------Time to First Token----------------"));
        assert!(lines.contains(&"-----Time per Output Token (excl. 1st token)------"));
        assert!(lines.contains(&"Mean TTFT (ms):                          12.35     "));
        assert!(lines.contains(&"Mean E2E Latency (ms):                   nan       "));
        assert!(!text.contains("Accept length"));
        assert_eq!(*lines.last().unwrap(), "=".repeat(50));
        // SGLang 0.5.23: no vision-token row for text datasets; each latency block has mean,
        // median, P90, P95 and P99 (ITL then max).
        assert!(!text.contains("vision"));
        assert!(lines.iter().any(|l| l.starts_with("P90 E2E Latency (ms):")));
        assert!(lines.iter().any(|l| l.starts_with("P95 TPOT (ms):")));
        assert!(lines.iter().any(|l| l.starts_with("P90 ITL (ms):")));
        assert_eq!(lines.len(), 2 + 16 + 6 + 6 + 6 + 7 + 1);
    }

    #[test]
    fn py_float_spells_like_python() {
        assert_eq!(py_float(10.0), "10.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(f64::INFINITY), "inf");
    }
}
