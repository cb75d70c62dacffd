//! The JSONL record `sglang.bench_serving` appends per run: its keys in its order, its types
//! (ints stay ints, floats are written with a fraction, a missing figure is `null`), Python's
//! `json.dumps` spelling (`", "` and `": "`, and `Infinity`/`NaN` for non-finite floats, which
//! Python writes and reads), then `--output-details`' lists, then our own figures under the one
//! extra key `llmspeed`.
//!
//! Owns the record's shape and its file name; never computes a figure.

use super::cache::{self, CacheReport};
use super::goodput::Goodput;
use super::metrics::{Metrics, RequestOutput};
use serde_json::Value;
use std::io::{self, Write};

/// A record value: JSON, or a float that may be non-finite.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    Json(Value),
    Float(f64),
    /// An object whose keys keep their order (Python's `dict`; a `serde_json` map sorts them).
    Object(Vec<(&'static str, Field)>),
}

impl From<Value> for Field {
    fn from(v: Value) -> Self {
        Field::Json(v)
    }
}

impl From<f64> for Field {
    fn from(x: f64) -> Self {
        Field::Float(x)
    }
}

/// The run's arguments the record repeats.
#[derive(Clone, Debug, PartialEq)]
pub struct RunArgs<'a> {
    pub tag: Option<&'a str>,
    pub backend: &'a str,
    pub dataset_name: &'a str,
    /// `None`: the requests followed a trace's timestamps (`"trace"`).
    pub request_rate: Option<f64>,
    pub max_concurrency: Option<usize>,
    pub sharegpt_output_len: Option<u32>,
    pub random_input_len: u32,
    pub random_output_len: u32,
    pub random_range_ratio: f64,
    pub num_prompts: usize,
    /// `--image-count` and `--image-resolution` as given (the image dataset's file name).
    pub image: Option<(i64, &'a str)>,
}

/// The figures the record carries besides the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Extra<'a> {
    /// The server's accept length (`null` when absent).
    pub accept_length: Option<f64>,
    /// `--goodput`: its keys follow `max_concurrent_requests`.
    pub goodput: Option<&'a Goodput>,
    /// `--cache-report`: `cache_report` after them, and two lists with `--output-details`.
    pub cache: Option<&'a CacheReport>,
}

/// The record's pairs. `details`: the per-request outputs and texts for `--output-details`.
pub fn pairs(
    a: &RunArgs<'_>,
    server_info: Option<Value>,
    duration_s: f64,
    m: &Metrics,
    extra: &Extra<'_>,
    details: Option<(&[RequestOutput], &[String])>,
    llmspeed: Value,
) -> Vec<(&'static str, Field)> {
    let accept_length = extra.accept_length;
    use serde_json::json;
    let f = |x: f64| Field::Float(x);
    let j = |v: Value| Field::Json(v);
    let mut out: Vec<(&'static str, Field)> = vec![
        ("tag", j(json!(a.tag))),
        ("backend", j(json!(a.backend))),
        ("dataset_name", j(json!(a.dataset_name))),
        (
            "request_rate",
            a.request_rate.map_or(j(json!("trace")), Field::Float),
        ),
        ("max_concurrency", j(json!(a.max_concurrency))),
        ("sharegpt_output_len", j(json!(a.sharegpt_output_len))),
        ("random_input_len", j(json!(a.random_input_len))),
        ("random_output_len", j(json!(a.random_output_len))),
        ("random_range_ratio", f(a.random_range_ratio)),
        ("server_info", j(server_info.unwrap_or(Value::Null))),
        ("duration", f(duration_s)),
        ("completed", j(json!(m.completed))),
        ("total_input_tokens", j(json!(m.total_input))),
        ("total_input_text_tokens", j(json!(m.total_input_text()))),
        (
            "total_input_vision_tokens",
            j(json!(m.total_input_vision.unwrap_or(0))),
        ),
        ("total_output_tokens", j(json!(m.total_output))),
        (
            "total_output_tokens_retokenized",
            j(json!(m.total_output_retokenized)),
        ),
        ("request_throughput", f(m.request_throughput)),
        ("input_throughput", f(m.input_throughput)),
        ("output_throughput", f(m.output_throughput)),
        ("total_throughput", f(m.total_throughput)),
        ("mean_e2e_latency_ms", f(m.e2e_latency_ms.mean)),
        ("median_e2e_latency_ms", f(m.e2e_latency_ms.median)),
        ("std_e2e_latency_ms", f(m.e2e_latency_ms.std)),
        ("p90_e2e_latency_ms", f(m.e2e_latency_ms.p90)),
        ("p95_e2e_latency_ms", f(m.e2e_latency_ms.p95)),
        ("p99_e2e_latency_ms", f(m.e2e_latency_ms.p99)),
        ("mean_ttft_ms", f(m.ttft_ms.mean)),
        ("median_ttft_ms", f(m.ttft_ms.median)),
        ("std_ttft_ms", f(m.ttft_ms.std)),
        ("p90_ttft_ms", f(m.ttft_ms.p90)),
        ("p95_ttft_ms", f(m.ttft_ms.p95)),
        ("p99_ttft_ms", f(m.ttft_ms.p99)),
        ("mean_tpot_ms", f(m.tpot_ms.mean)),
        ("median_tpot_ms", f(m.tpot_ms.median)),
        ("std_tpot_ms", f(m.tpot_ms.std)),
        ("p90_tpot_ms", f(m.tpot_ms.p90)),
        ("p95_tpot_ms", f(m.tpot_ms.p95)),
        ("p99_tpot_ms", f(m.tpot_ms.p99)),
        ("mean_itl_ms", f(m.itl_ms.mean)),
        ("median_itl_ms", f(m.itl_ms.median)),
        ("std_itl_ms", f(m.itl_ms.std)),
        ("p90_itl_ms", f(m.itl_ms.p90)),
        ("p95_itl_ms", f(m.itl_ms.p95)),
        ("p99_itl_ms", f(m.itl_ms.p99)),
        ("concurrency", f(m.concurrency)),
        (
            "accept_length",
            accept_length.map_or(j(Value::Null), Field::Float),
        ),
        ("max_output_tokens_per_s", f(m.max_output_tokens_per_s)),
        (
            "max_concurrent_requests",
            j(json!(m.max_concurrent_requests)),
        ),
    ];
    if let Some(g) = extra.goodput {
        out.extend(goodput_pairs(g));
    }
    if let Some(c) = extra.cache {
        out.push(("cache_report", cache_object(c)));
    }
    if let Some((outputs, texts)) = details {
        let lens = super::metrics::output_lens(outputs);
        out.push((
            "input_lens",
            j(json!(outputs
                .iter()
                .map(|o| o.prompt_len)
                .collect::<Vec<_>>())),
        ));
        out.push(("output_lens", j(json!(lens))));
        out.push((
            "ttfts",
            j(json!(outputs.iter().map(|o| o.ttft_s).collect::<Vec<_>>())),
        ));
        out.push((
            "itls",
            j(json!(outputs.iter().map(|o| &o.itl_s).collect::<Vec<_>>())),
        ));
        out.push(("generated_texts", j(json!(texts))));
        out.push((
            "errors",
            j(json!(outputs.iter().map(|o| &o.error).collect::<Vec<_>>())),
        ));
        if let Some(c) = extra.cache {
            out.push(("cached_tokens", j(json!(c.per_request))));
            let none: Vec<Value> = vec![Value::Null; c.per_request.len()];
            out.push(("cached_tokens_details", j(json!(none))));
        }
    }
    out.push(("llmspeed", j(llmspeed)));
    out
}

/// `msgspec.structs.asdict(GoodputMetrics)`: four keys, the SLOs and attainments as objects in
/// the SLOs' order.
fn goodput_pairs(g: &Goodput) -> Vec<(&'static str, Field)> {
    let object = |kv: &[(&'static str, f64)]| {
        Field::Object(kv.iter().map(|&(k, v)| (k, Field::Float(v))).collect())
    };
    vec![
        ("goodput_slos_ms", object(&g.slos)),
        ("request_goodput", Field::Float(g.request_goodput)),
        ("slo_attainment", Field::Float(g.slo_attainment)),
        ("slo_attainment_by_metric", object(&g.by_metric)),
    ]
}

/// SGLang's `cache_report` object, in its key order; the per-tier keys are `null` (no
/// breakdown is read).
fn cache_object(c: &CacheReport) -> Field {
    let null = || Field::Json(Value::Null);
    Field::Object(vec![
        (
            "total_prompt_tokens",
            Field::Json(c.total_prompt_tokens.into()),
        ),
        (
            "total_cached_tokens",
            Field::Json(c.total_cached_tokens.into()),
        ),
        (
            "cache_hit_rate_pct",
            Field::Float(cache::round2(c.hit_rate_pct)),
        ),
        ("device_cached_tokens", null()),
        ("host_cached_tokens", null()),
        ("storage_cached_tokens", null()),
        ("storage_backend", null()),
    ])
}

/// The record's keys that repeat the run's settings rather than measure it.
const SETTINGS: &[&str] = &[
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
];

/// The figures of a record compared across repeated runs: every finite number it measured
/// (duration, counts, throughputs, the latency statistics, concurrency, peaks), in its order.
/// Settings, within-run standard deviations (`std_*`: the spread of a spread flags noise, not
/// instability), `--output-details`' lists and the objects are left out.
pub fn figures(pairs: &[(&'static str, Field)]) -> Vec<(String, f64)> {
    pairs
        .iter()
        .filter(|(k, _)| !SETTINGS.contains(k) && !k.starts_with("std_"))
        .filter_map(|(k, v)| {
            let x = match v {
                Field::Float(x) => Some(*x),
                Field::Json(Value::Number(n)) => n.as_f64(),
                Field::Json(_) | Field::Object(_) => None,
            };
            x.filter(|x| x.is_finite()).map(|x| (k.to_string(), x))
        })
        .collect()
}

fn write_float(w: &mut impl Write, x: f64) -> io::Result<()> {
    if x.is_nan() {
        w.write_all(b"NaN")
    } else if x.is_infinite() {
        w.write_all(if x > 0.0 { b"Infinity" } else { b"-Infinity" })
    } else {
        serde_json::to_writer(w, &x).map_err(io::Error::other)
    }
}

/// One record, one line (with its newline), as `json.dumps(...) + "\n"`.
pub fn write_line(w: &mut impl Write, pairs: &[(&'static str, Field)]) -> io::Result<()> {
    write_object(w, pairs)?;
    w.write_all(b"\n")
}

fn write_object(w: &mut impl Write, pairs: &[(&'static str, Field)]) -> io::Result<()> {
    w.write_all(b"{")?;
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            w.write_all(b", ")?;
        }
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b": ")?;
        match v {
            Field::Json(v) => serde_json::to_writer(&mut *w, v)?,
            Field::Float(x) => write_float(w, *x)?,
            Field::Object(o) => write_object(w, o)?,
        }
    }
    w.write_all(b"}")
}

/// Appends the record to `path` (created when missing), as SGLang's `open(name, "a")`.
pub fn append(path: &std::path::Path, pairs: &[(&'static str, Field)]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    write_line(&mut buf, pairs)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(&buf)
}

/// SGLang's default file name: `{backend}_{MMDD}_{num_prompts}_{in}_{out}.jsonl` for the random
/// datasets, `..._{in}_{out}_{count}imgs_{resolution}.jsonl` for `image`,
/// `{backend}_{MMDD}_{num_prompts}_{dataset}.jsonl` otherwise. `mmdd` is the date.
pub fn default_file_name(a: &RunArgs<'_>, mmdd: &str) -> String {
    if let (Some((count, resolution)), "image") = (a.image, a.dataset_name) {
        return format!(
            "{}_{mmdd}_{}_{}_{}_{count}imgs_{resolution}.jsonl",
            a.backend, a.num_prompts, a.random_input_len, a.random_output_len
        );
    }
    if a.dataset_name.starts_with("random") {
        format!(
            "{}_{mmdd}_{}_{}_{}.jsonl",
            a.backend, a.num_prompts, a.random_input_len, a.random_output_len
        )
    } else {
        format!(
            "{}_{mmdd}_{}_{}.jsonl",
            a.backend, a.num_prompts, a.dataset_name
        )
    }
}

/// Where the spread of repeated runs goes: next to the records, `out.jsonl` ->
/// `out.runs.jsonl` (SGLang's readers of the records never meet a line of another shape).
pub fn runs_file(records: &std::path::Path) -> std::path::PathBuf {
    let name = records
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    records.with_file_name(format!("{stem}.runs.jsonl"))
}

/// The line of the spread file for one point's runs: the settings that name the point (as the
/// records write them), then `summary` (`multi_run::summary_json`'s keys).
pub fn spread_pairs(a: &RunArgs<'_>, summary: Value) -> Vec<(&'static str, Field)> {
    use serde_json::json;
    let mut out: Vec<(&'static str, Field)> = vec![
        ("tag", Field::Json(json!(a.tag))),
        ("backend", Field::Json(json!(a.backend))),
        ("dataset_name", Field::Json(json!(a.dataset_name))),
        (
            "request_rate",
            a.request_rate
                .map_or(Field::Json(json!("trace")), Field::Float),
        ),
        ("max_concurrency", Field::Json(json!(a.max_concurrency))),
        ("num_prompts", Field::Json(json!(a.num_prompts))),
    ];
    for key in ["num_runs", "cv_flag", "unstable", "result_files", "metrics"] {
        out.push((
            key,
            Field::Json(summary.get(key).cloned().unwrap_or(Value::Null)),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args() -> RunArgs<'static> {
        RunArgs {
            tag: None,
            backend: "sglang",
            dataset_name: "random",
            request_rate: Some(f64::INFINITY),
            max_concurrency: Some(4),
            sharegpt_output_len: None,
            random_input_len: 32,
            random_output_len: 8,
            random_range_ratio: 0.0,
            num_prompts: 5,
            image: None,
        }
    }

    #[test]
    fn floats_keep_a_fraction_and_non_finite_ones_are_pythons() {
        let mut out = Vec::new();
        write_line(
            &mut out,
            &[
                ("a", Field::Float(f64::INFINITY)),
                ("b", Field::Float(1.0)),
                ("c", Field::Float(f64::NAN)),
                ("d", Field::Json(json!(3))),
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\": Infinity, \"b\": 1.0, \"c\": NaN, \"d\": 3}\n"
        );
    }

    #[test]
    fn keys_come_in_sglangs_order_with_details_then_ours() {
        let p = pairs(
            &args(),
            None,
            1.0,
            &Metrics::default(),
            &Extra::default(),
            Some((&[], &[])),
            json!({}),
        );
        let keys: Vec<&str> = p.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            &keys[..4],
            ["tag", "backend", "dataset_name", "request_rate"]
        );
        assert_eq!(keys[9], "server_info");
        // SGLang 0.5.23's p90/p95 of E2E latency, TTFT and TPOT and p90 of ITL.
        for k in [
            "p90_e2e_latency_ms",
            "p95_e2e_latency_ms",
            "p90_ttft_ms",
            "p95_ttft_ms",
            "p90_tpot_ms",
            "p95_tpot_ms",
            "p90_itl_ms",
        ] {
            assert!(keys.contains(&k), "{k}");
        }
        assert_eq!(keys[48], "max_concurrent_requests");
        assert_eq!(
            &keys[49..],
            [
                "input_lens",
                "output_lens",
                "ttfts",
                "itls",
                "generated_texts",
                "errors",
                "llmspeed"
            ]
        );
    }

    #[test]
    fn goodput_and_cache_report_keys_follow_sglangs_update_order() {
        let g = Goodput {
            slos: vec![("tpot", 50.0), ("ttft", 500.0)],
            request_goodput: 1.5,
            slo_attainment: 0.75,
            by_metric: vec![("tpot", 1.0), ("ttft", 0.75)],
        };
        let c = CacheReport {
            total_prompt_tokens: 160,
            total_cached_tokens: 30,
            hit_rate_pct: 100.0 / 3.0,
            per_request: vec![30, 0],
        };
        let extra = Extra {
            accept_length: None,
            goodput: Some(&g),
            cache: Some(&c),
        };
        let outputs = [RequestOutput::default(), RequestOutput::default()];
        let texts = [String::new(), String::new()];
        let p = pairs(
            &args(),
            None,
            1.0,
            &Metrics::default(),
            &extra,
            Some((&outputs, &texts)),
            json!({}),
        );
        let keys: Vec<&str> = p.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            &keys[48..],
            [
                "max_concurrent_requests",
                "goodput_slos_ms",
                "request_goodput",
                "slo_attainment",
                "slo_attainment_by_metric",
                "cache_report",
                "input_lens",
                "output_lens",
                "ttfts",
                "itls",
                "generated_texts",
                "errors",
                "cached_tokens",
                "cached_tokens_details",
                "llmspeed"
            ]
        );
        let mut out = Vec::new();
        write_line(&mut out, &p).unwrap();
        let line = String::from_utf8(out).unwrap();
        // Python's dicts keep the SLOs' order (tpot before ttft), with its spacing.
        for want in [
            "\"goodput_slos_ms\": {\"tpot\": 50.0, \"ttft\": 500.0}, \"request_goodput\": 1.5, \"slo_attainment\": 0.75, \"slo_attainment_by_metric\": {\"tpot\": 1.0, \"ttft\": 0.75}",
            "\"cache_report\": {\"total_prompt_tokens\": 160, \"total_cached_tokens\": 30, \"cache_hit_rate_pct\": 33.33, \"device_cached_tokens\": null, \"host_cached_tokens\": null, \"storage_cached_tokens\": null, \"storage_backend\": null}",
            "\"cached_tokens\": [30,0], \"cached_tokens_details\": [null,null]",
        ] {
            assert!(line.contains(want), "{want}\nin {line}");
        }
        let f = figures(&p);
        assert!(f.contains(&("request_goodput".to_string(), 1.5)));
        assert!(!f
            .iter()
            .any(|(k, _)| k == "cache_report" || k == "goodput_slos_ms"));
    }

    #[test]
    fn figures_are_the_measured_numbers_only() {
        let m = Metrics {
            completed: 5,
            request_throughput: 2.5,
            ..Metrics::default()
        };
        let p = pairs(
            &args(),
            Some(json!({"x": 1})),
            2.0,
            &m,
            &Extra::default(),
            Some((&[], &[])),
            json!({"n": 1}),
        );
        let f = figures(&p);
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(&keys[..3], ["duration", "completed", "total_input_tokens"]);
        assert!(!keys.iter().any(|k| k.starts_with("std_")), "{keys:?}");
        for gone in [
            "max_concurrency",
            "random_input_len",
            "request_rate",
            "accept_length",
            "llmspeed",
        ] {
            assert!(!keys.contains(&gone), "{gone}");
        }
        assert!(keys.contains(&"max_concurrent_requests") && keys.contains(&"p99_itl_ms"));
        assert_eq!(f[0], ("duration".into(), 2.0));
        assert_eq!(f[1], ("completed".into(), 5.0));
        let rt = f.iter().find(|(k, _)| k == "request_throughput").unwrap();
        assert_eq!(rt.1, 2.5);
    }

    #[test]
    fn spread_lines_go_beside_the_records() {
        let p = std::path::Path::new("/tmp/x/out.jsonl");
        assert_eq!(runs_file(p), std::path::Path::new("/tmp/x/out.runs.jsonl"));
        assert_eq!(
            runs_file(std::path::Path::new("r")),
            std::path::Path::new("r.runs.jsonl")
        );
        let s = json!({"num_runs": 3, "cv_flag": 0.05, "unstable": [], "result_files": ["a"], "metrics": {}});
        let keys: Vec<&str> = spread_pairs(&args(), s).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "tag",
                "backend",
                "dataset_name",
                "request_rate",
                "max_concurrency",
                "num_prompts",
                "num_runs",
                "cv_flag",
                "unstable",
                "result_files",
                "metrics"
            ]
        );
    }

    #[test]
    fn default_names_follow_the_dataset() {
        assert_eq!(
            default_file_name(&args(), "1201"),
            "sglang_1201_5_32_8.jsonl"
        );
        let a = RunArgs {
            dataset_name: "sharegpt",
            ..args()
        };
        assert_eq!(
            default_file_name(&a, "1201"),
            "sglang_1201_5_sharegpt.jsonl"
        );
    }
}
