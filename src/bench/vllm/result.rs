//! `bench serve` output: vLLM's console summary, its result JSON (same keys, order and value
//! types), and its result file name.
//!
//! Owns the shape of what `bench serve` prints and saves. It must never measure or compute
//! metrics (that is `bench::vllm::metrics`) and never reorder vLLM's keys: the JSON is written from
//! an ordered list of pairs, so no map type can sort them. Our own figures go under one last
//! key, `llmspeed`, so existing consumers see exactly vLLM's object plus one key. The keys vLLM
//! adds only for features in use (the server's per-request lists, probes, the ramp's rate
//! changes, speculative decoding) come in after `rtfx`, where vLLM puts them.

use crate::bench::vllm::metrics::{metric_values, percentile_label, BenchMetrics, MetricKind};
use crate::workload::schedule::{Ramp, RampStrategy};
use serde_json::{json, Value};
use std::io::{self, Write};
use std::time::SystemTime;

/// What the run was, as the result JSON's header records it.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// `%Y%m%d-%H%M%S`, UTC (vLLM uses local time).
    pub date: String,
    pub backend: String,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: String,
    pub num_prompts: usize,
    pub metadata: Vec<(String, Value)>,
    /// `f64::INFINITY` for `inf`.
    pub request_rate: f64,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub ramp: Option<Ramp>,
    pub selected: Vec<MetricKind>,
    /// Whether `--goodput` was given (the console then prints the goodput row).
    pub goodput: bool,
}

/// vLLM's per-request lists (`--save-detailed`), one entry per request, failed ones included.
#[derive(Clone, Debug, Default)]
pub struct Detailed {
    pub input_lens: Vec<u64>,
    pub output_lens: Vec<u64>,
    pub ttfts: Vec<f64>,
    pub itls: Vec<Vec<f64>>,
    pub start_times: Vec<f64>,
    pub generated_texts: Vec<String>,
    pub errors: Vec<String>,
}

/// The `llmspeed.images` block of an image dataset (vLLM writes no image keys): each request's
/// image count, pixels and encoded bytes (the files, before base64), in the order of vLLM's
/// `input_lens`, and their totals over the run.
pub fn images_json<'a>(
    per_request: impl Iterator<Item = &'a [crate::workload::image::Image]>,
) -> Value {
    let (mut count, mut pixels, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for images in per_request {
        count.push(images.len() as u64);
        pixels.push(images.iter().map(|i| i.pixels()).sum::<u64>());
        bytes.push(images.iter().map(|i| i.encoded_bytes).sum::<u64>());
    }
    json!({
        "total_images": count.iter().sum::<u64>(),
        "total_pixels": pixels.iter().sum::<u64>(),
        "total_encoded_bytes": bytes.iter().sum::<u64>(),
        "images": count,
        "pixels": pixels,
        "encoded_bytes": bytes,
    })
}

/// Python's `str(float)` for the rates in names and the console: `10.0`, `0.5`, `inf`.
pub use crate::bench::engine::session::py_float;

/// `%Y%m%d-%H%M%S` of a time, in UTC.
pub fn format_date(t: SystemTime) -> String {
    crate::sys::UtcDateTime::from_unix(crate::sys::unix_secs(t)).compact()
}

/// vLLM's default result file name:
/// `{label or backend}-{rate}qps[-concurrency{N}]-{model basename}-{date}.json`, with a ramp
/// `{label or backend}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrency{N}]-…`.
pub fn default_filename(info: &RunInfo) -> String {
    let label = info.label.as_deref().unwrap_or(&info.backend);
    let conc = info
        .max_concurrency
        .map(|n| format!("-concurrency{n}"))
        .unwrap_or_default();
    let base = info.model_id.rsplit('/').next().unwrap_or(&info.model_id);
    let rate = match info.ramp {
        Some(r) => format!(
            "ramp-up-{}-{}qps-{}qps",
            ramp_name(r.strategy),
            py_number(r.start_rps),
            py_number(r.end_rps)
        ),
        None => format!("{}qps", py_float(info.request_rate)),
    };
    format!("{label}-{rate}{conc}-{base}-{}.json", info.date)
}

/// A whole number as a JSON integer (as Python writes an int), else as a float.
fn whole(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        json!(x as i64)
    } else {
        num(x)
    }
}

fn ramp_name(s: RampStrategy) -> &'static str {
    match s {
        RampStrategy::Linear => "linear",
        RampStrategy::Exponential => "exponential",
    }
}

fn num(x: f64) -> Value {
    // serde_json writes non-finite floats as null; vLLM would write NaN, which is not JSON.
    json!(x)
}

/// The result object as ordered pairs: vLLM's keys in vLLM's order, then `llmspeed`.
/// `optional` are vLLM's keys for features in use, already in vLLM's order: they follow `rtfx`,
/// before the latency statistics.
pub fn result_pairs(
    info: &RunInfo,
    m: &BenchMetrics,
    detailed: Option<&Detailed>,
    optional: &[(String, Value)],
    extras: Value,
) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::with_capacity(64);
    let mut put = |k: &str, v: Value| out.push((k.to_string(), v));
    put("date", json!(info.date));
    put("endpoint_type", json!(info.backend));
    put("backend", json!(info.backend));
    put("label", json!(info.label));
    put("model_id", json!(info.model_id));
    put("tokenizer_id", json!(info.tokenizer_id));
    put("num_prompts", json!(info.num_prompts));
    for (k, v) in &info.metadata {
        put(k, v.clone());
    }
    put(
        "request_rate",
        if info.request_rate.is_finite() {
            num(info.request_rate)
        } else {
            json!("inf")
        },
    );
    put("burstiness", num(info.burstiness));
    put("max_concurrency", json!(info.max_concurrency));
    if let Some(r) = info.ramp {
        put("ramp_up_strategy", json!(ramp_name(r.strategy)));
        // vLLM's ramp rates are integers (argparse `type=int`).
        put("ramp_up_start_rps", whole(r.start_rps));
        put("ramp_up_end_rps", whole(r.end_rps));
    }
    put("duration", num(m.duration_s));
    put("completed", json!(m.completed));
    put("failed", json!(m.failed));
    put("total_input_tokens", json!(m.total_input_tokens));
    put("total_output_tokens", json!(m.total_output_tokens));
    put("request_throughput", num(m.request_throughput));
    put("request_goodput", json!(m.request_goodput));
    put("output_throughput", num(m.output_throughput));
    put("total_token_throughput", num(m.total_token_throughput));
    // vLLM 0.33's order: the per-request lists sit among the totals and peaks.
    if let Some(d) = detailed {
        put("input_lens", json!(d.input_lens));
        put("output_lens", json!(d.output_lens));
        put("ttfts", json!(d.ttfts));
        put("itls", json!(d.itls));
    }
    put("latencies", json!(m.latencies_s));
    if let Some(d) = detailed {
        put("start_times", json!(d.start_times));
    }
    put("queue_times", json!(m.queue_times_s));
    if let Some(d) = detailed {
        put("generated_texts", json!(d.generated_texts));
        put("errors", json!(d.errors));
    }
    put("max_output_tokens_per_s", num(m.max_output_tokens_per_s));
    // vLLM's definition under vLLM's key: the most requests active in one 1-second bucket. Our
    // exact peak is `llmspeed.max_concurrent_requests_exact`.
    put(
        "max_concurrent_requests",
        json!(m.max_concurrent_requests_bucketed),
    );
    // Real-time factor is for audio; text runs report 0.0 as vLLM does.
    put("rtfx", json!(0.0));
    for (k, v) in optional {
        put(k, v.clone());
    }
    for (k, v) in metric_values(m, &info.selected) {
        out.push((k, num(v)));
    }
    out.push(("llmspeed".into(), extras));
    out
}

/// Writes ordered pairs as one JSON object on one line (no trailing newline).
pub fn write_object(w: &mut impl Write, pairs: &[(String, Value)]) -> io::Result<()> {
    w.write_all(b"{")?;
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            w.write_all(b", ")?;
        }
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b": ")?;
        serde_json::to_writer(&mut *w, v)?;
    }
    w.write_all(b"}")
}

/// Saves the result: replaces the file, or with `append` adds it as a new line (vLLM's
/// `--append-result` writes a newline before the object when the file is not empty).
pub fn save(path: &std::path::Path, pairs: &[(String, Value)], append: bool) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut buf = Vec::with_capacity(4096);
    let non_empty = append
        && std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
    if non_empty {
        buf.push(b'\n');
    }
    write_object(&mut buf, pairs)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)?;
    f.write_all(&buf)
}

fn row(w: &mut impl Write, label: &str, value: impl std::fmt::Display) -> io::Result<()> {
    writeln!(w, "{label:<40} {value:<10}")
}

fn row_f(w: &mut impl Write, label: &str, value: f64) -> io::Result<()> {
    writeln!(w, "{label:<40} {value:<10.2}")
}

/// The lines vLLM 0.33 prints about the traffic just before the run starts (after its own
/// status lines, which are not ours to copy): the rate or ramp, the burstiness and its
/// distribution, the concurrency limit; nothing for a self-timed trace replay.
pub fn write_lead_in(w: &mut impl Write, info: &RunInfo, self_timed: bool) -> io::Result<()> {
    if self_timed {
        return Ok(());
    }
    match info.ramp {
        Some(r) => {
            writeln!(w, "Traffic ramp-up strategy: {}.", ramp_name(r.strategy))?;
            writeln!(
                w,
                "Will increase RPS from {} to {} RPS over the duration of the benchmark.",
                py_number(r.start_rps),
                py_number(r.end_rps)
            )?;
        }
        None => writeln!(w, "Traffic request rate: {}", py_float(info.request_rate))?,
    }
    let distribution = if info.burstiness == 1.0 {
        "Poisson process"
    } else {
        "Gamma distribution"
    };
    writeln!(
        w,
        "Burstiness factor: {} ({distribution})",
        py_float(info.burstiness)
    )?;
    match info.max_concurrency {
        Some(n) => writeln!(w, "Maximum request concurrency: {n}"),
        None => writeln!(w, "Maximum request concurrency: None"),
    }
}

/// A whole number as Python prints an int (vLLM's ramp rates are ints), else as a float.
fn py_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        py_float(x)
    }
}

/// The console block, row for row as `vllm bench serve` prints it.
pub fn write_summary(w: &mut impl Write, info: &RunInfo, m: &BenchMetrics) -> io::Result<()> {
    writeln!(w, "{:=^50}", " Serving Benchmark Result ")?;
    row(w, "Successful requests:", m.completed)?;
    row(w, "Failed requests:", m.failed)?;
    if let Some(c) = info.max_concurrency {
        row(w, "Maximum request concurrency:", c)?;
    }
    if info.request_rate.is_finite() {
        row_f(w, "Request rate configured (RPS):", info.request_rate)?;
    }
    row_f(w, "Benchmark duration (s):", m.duration_s)?;
    row(w, "Total input tokens:", m.total_input_tokens)?;
    row(w, "Total generated tokens:", m.total_output_tokens)?;
    row_f(w, "Request throughput (req/s):", m.request_throughput)?;
    if let (true, Some(g)) = (info.goodput, m.request_goodput) {
        row_f(w, "Request goodput (req/s):", g)?;
    }
    row_f(w, "Output token throughput (tok/s):", m.output_throughput)?;
    row_f(
        w,
        "Peak output token throughput (tok/s):",
        m.max_output_tokens_per_s,
    )?;
    // vLLM's bucketed figure, under vLLM's label (our exact peak is in the llmspeed block).
    row_f(
        w,
        "Peak concurrent requests:",
        m.max_concurrent_requests_bucketed as f64,
    )?;
    row_f(
        w,
        "Total token throughput (tok/s):",
        m.total_token_throughput,
    )?;
    for kind in MetricKind::ALL
        .into_iter()
        .filter(|k| info.selected.contains(k))
    {
        let (header, name) = kind.console();
        let s = m.summary(kind);
        writeln!(w, "{header:-^50}")?;
        row_f(w, &format!("Mean {name} (ms):"), s.mean)?;
        row_f(w, &format!("Median {name} (ms):"), s.median)?;
        for &(p, v) in &s.percentiles {
            row_f(w, &format!("P{} {name} (ms):", percentile_label(p)), v)?;
        }
    }
    writeln!(w, "{}", "=".repeat(50))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::record::RequestRecord;
    use crate::bench::vllm::metrics::{compute, MetricsConfig};

    fn info() -> RunInfo {
        RunInfo {
            date: "20261130-051500".into(),
            backend: "openai".into(),
            label: None,
            model_id: "org/My-Model".into(),
            tokenizer_id: "org/My-Model".into(),
            num_prompts: 2,
            metadata: vec![("gpu".into(), json!("H200"))],
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            max_concurrency: None,
            ramp: None,
            selected: vec![MetricKind::Ttft, MetricKind::Tpot, MetricKind::Itl],
            goodput: false,
        }
    }

    fn metrics() -> BenchMetrics {
        let r = RequestRecord::succeeded;
        compute(
            &[
                r(0, &[50_000_000, 60_000_000]),
                r(0, &[70_000_000, 90_000_000]),
            ],
            1_000_000_000,
            &MetricsConfig::default(),
        )
    }

    #[test]
    fn dates_and_names() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_796_022_900);
        assert_eq!(format_date(t), "20261130-071500");
        assert_eq!(format_date(SystemTime::UNIX_EPOCH), "19700101-000000");
        // 2000-02-29 12:00:00 (a leap day in a century leap year).
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_825_600);
        assert_eq!(format_date(leap), "20000229-120000");
        let mut i = info();
        assert_eq!(
            default_filename(&i),
            "openai-infqps-My-Model-20261130-051500.json"
        );
        i.request_rate = 10.0;
        i.max_concurrency = Some(8);
        i.label = Some("run".into());
        assert_eq!(
            default_filename(&i),
            "run-10.0qps-concurrency8-My-Model-20261130-051500.json"
        );
        i.ramp = Some(Ramp {
            strategy: RampStrategy::Linear,
            start_rps: 20.0,
            end_rps: 60.0,
        });
        assert_eq!(
            default_filename(&i),
            "run-ramp-up-linear-20qps-60qps-concurrency8-My-Model-20261130-051500.json"
        );
        assert_eq!(py_float(0.5), "0.5");
    }

    #[test]
    fn summary_has_vllms_rows() {
        let mut out = Vec::new();
        write_summary(&mut out, &info(), &metrics()).unwrap();
        let s = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "============ Serving Benchmark Result ============"
        );
        assert_eq!(
            lines[1],
            "Successful requests:                     2         "
        );
        assert!(s.contains("\nBenchmark duration (s):                  1.00      \n"));
        assert!(s.contains("\n---------------Time to First Token----------------\n"));
        assert!(s.contains("\n-----Time per Output Token (excl. 1st token)------\n"));
        assert!(s.contains("\nMean TTFT (ms):                          60.00     \n"));
        assert!(s.contains("\nP99 ITL (ms):"));
        assert!(!s.contains("E2EL"));
        assert_eq!(*lines.last().unwrap(), "=".repeat(50));
    }

    #[test]
    fn json_keeps_order_and_appends_lines() {
        let optional = [("rps_change_events".to_string(), json!([]))];
        let pairs = result_pairs(&info(), &metrics(), None, &optional, json!({"x": 1}));
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            &keys[..9],
            [
                "date",
                "endpoint_type",
                "backend",
                "label",
                "model_id",
                "tokenizer_id",
                "num_prompts",
                "gpu",
                "request_rate"
            ]
        );
        assert_eq!(*keys.last().unwrap(), "llmspeed");
        // vLLM's optional keys follow rtfx, before the latency statistics.
        let at = keys.iter().position(|k| *k == "rtfx").unwrap();
        assert_eq!(keys[at + 1..at + 3], ["rps_change_events", "mean_ttft_ms"]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/r.json");
        save(&p, &pairs, true).unwrap();
        save(&p, &pairs, true).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
        let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(v["request_rate"], "inf");
        save(&p, &pairs, false).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 1);
    }
}
