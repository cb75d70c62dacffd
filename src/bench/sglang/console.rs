//! The "Serving Benchmark Result" block `sglang.bench_serving` prints, line for line: the same
//! labels, order, widths (label left in 40, value left in 10, trailing spaces included) and
//! number formats (Python's `str(float)` for the rate, `.2f` elsewhere; `nan`/`inf` spelled as
//! Python spells them).
//!
//! Owns the text only; never computes a figure.

use super::cache::CacheReport;
use super::goodput::{py_g, Goodput};
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
    /// `--goodput`'s figures: their section follows the accept length.
    pub goodput: Option<&'a Goodput>,
    /// `--cache-report`'s figures: their section follows the ITL section.
    pub cache: Option<&'a CacheReport>,
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
    row(w, "Total input text tokens:", m.total_input_text())?;
    if let Some(v) = m.total_input_vision {
        row(w, "Total input vision tokens:", v)?;
    }
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
    if let Some(g) = h.goodput {
        write_goodput(w, g)?;
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
    if let Some(c) = h.cache {
        write_cache(w, c)?;
    }
    writeln!(w, "{}", "=".repeat(50))
}

/// SGLang's `print_goodput`: the SLOs as `name:{slo:g}`, then the figures in percent.
fn write_goodput(w: &mut (impl Write + ?Sized), g: &Goodput) -> io::Result<()> {
    writeln!(w, "{:-^50}", "Goodput")?;
    let slos: Vec<String> = g
        .slos
        .iter()
        .map(|(name, slo)| format!("{name}:{}", py_g(*slo)))
        .collect();
    row(w, "SLOs (ms):", slos.join(" "))?;
    rowf(w, "Request goodput (req/s):", g.request_goodput)?;
    rowf(w, "SLO attainment (%):", g.slo_attainment * 100.0)?;
    for (name, a) in &g.by_metric {
        rowf(
            w,
            &format!("{} SLO attainment (%):", name.to_uppercase()),
            a * 100.0,
        )?;
    }
    Ok(())
}

/// SGLang's "Cache Hit Details" section (without a per-tier breakdown, which is not read).
fn write_cache(w: &mut (impl Write + ?Sized), c: &CacheReport) -> io::Result<()> {
    writeln!(w, "{:-^50}", "Cache Hit Details")?;
    row(w, "Total prompt tokens:", c.total_prompt_tokens)?;
    row(w, "Total cached tokens:", c.total_cached_tokens)?;
    writeln!(w, "{:<40} {}%", "Cache hit rate:", f1(c.hit_rate_pct))
}

/// Python's `f"{x:.1f}"` of a finite number.
fn f1(x: f64) -> String {
    format!("{x:.1}")
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
            goodput: None,
            cache: None,
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
    fn goodput_and_cache_sections_are_sglangs() {
        let g = Goodput {
            slos: vec![("ttft", 500.0), ("e2el", 1.5e6)],
            request_goodput: 2.5,
            slo_attainment: 0.75,
            by_metric: vec![("ttft", 1.0), ("e2el", 0.75)],
        };
        let c = CacheReport {
            total_prompt_tokens: 160,
            total_cached_tokens: 30,
            hit_rate_pct: 18.75,
            per_request: vec![],
        };
        let h = Header {
            backend: "sglang",
            request_rate: Some(f64::INFINITY),
            max_concurrency: None,
            duration_s: 2.0,
            accept_length: Some(2.0),
            goodput: Some(&g),
            cache: Some(&c),
        };
        let mut out = Vec::new();
        write(&mut out, &h, &Metrics::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let at = |l: &str| {
            lines
                .iter()
                .position(|x| *x == l)
                .unwrap_or_else(|| panic!("{l:?} in {text}"))
        };
        // SGLang: the goodput section right after the accept length, before the latencies.
        let goodput = at("---------------------Goodput----------------------");
        assert_eq!(
            goodput,
            at(&format!("{:<40} {:<10}", "Accept length:", "2.00")) + 1
        );
        assert_eq!(
            &lines[goodput + 1..goodput + 6],
            [
                "SLOs (ms):                               ttft:500 e2el:1.5e+06",
                "Request goodput (req/s):                 2.50      ",
                "SLO attainment (%):                      75.00     ",
                "TTFT SLO attainment (%):                 100.00    ",
                "E2EL SLO attainment (%):                 75.00     ",
            ]
        );
        assert_eq!(
            lines[goodput + 6],
            "----------------End-to-End Latency----------------"
        );
        // The cache section after Max ITL, before the closing line; its rate is not padded.
        let cache = at("----------------Cache Hit Details-----------------");
        assert!(lines[cache - 1].starts_with("Max ITL (ms):"));
        assert_eq!(
            &lines[cache + 1..],
            [
                "Total prompt tokens:                     160       ",
                "Total cached tokens:                     30        ",
                "Cache hit rate:                          18.8%",
                "==================================================",
            ]
        );
    }

    #[test]
    fn py_float_spells_like_python() {
        assert_eq!(py_float(10.0), "10.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(f64::INFINITY), "inf");
    }
}
