//! The `bench serve` sweep's page (`--sweep-max-concurrency`, `--sweep-request-rate`): the
//! run's header, output tok/s against median TTFT and against median TPOT (one mark per point,
//! labelled by its concurrency or rate), tokens/s per user against output tokens/s with the
//! Pareto front drawn through the points the summary flags, and the summary table. Inline SVG
//! from [`charts`], no script, no network. Pure: built from the summary JSON alone (so it shows
//! exactly what the JSON says) and the header; `bench::vllm::sweep_html` writes it next to the
//! summary and `report::site` into a site.

use crate::report::header::RunHeader;
use crate::report::html::charts::{self, Mark};
use crate::report::svg::escape;
use serde_json::Value;
use std::fmt::Write;

/// The table's columns: heading and summary key.
const COLUMNS: [(&str, &str); 8] = [
    ("Prompts", "num_prompts"),
    ("Req/s", "request_throughput"),
    ("Out tok/s", "output_throughput"),
    ("Total tok/s", "total_token_throughput"),
    ("P50 TTFT (ms)", "median_ttft_ms"),
    ("P50 TPOT (ms)", "median_tpot_ms"),
    ("Tok/s per user", "tokens_per_s_per_user"),
    ("Pareto", "pareto"),
];

/// A point's label: its sweep value (`8`, `10.0`, `inf`).
fn label(p: &Value, key: &str) -> String {
    match p.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(v) if !v.is_null() => v.to_string(),
        _ => "?".into(),
    }
}

/// A figure of a point; NaN when absent, so the chart leaves the point out.
fn num(p: &Value, key: &str) -> f64 {
    p.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// The whole page for a sweep summary (`bench serve --sweep-*`'s summary JSON), opened by its
/// run's header.
pub fn render(summary: &Value, header: &RunHeader) -> String {
    let key = summary.get("sweep").and_then(Value::as_str).unwrap_or("");
    let points: &[Value] = summary
        .get("points")
        .and_then(Value::as_array)
        .map_or(&[], |v| v.as_slice());
    let short = if key == "request_rate" {
        "rate"
    } else {
        "concurrency"
    };
    let marks = |x_key: &str, y_key: &str, by_front: bool| -> Vec<Mark> {
        points
            .iter()
            .map(|p| Mark {
                label: label(p, key),
                x: num(p, x_key),
                y: num(p, y_key),
                hollow: by_front && p.get("pareto") != Some(&Value::Bool(true)),
            })
            .collect()
    };
    let mut out = String::with_capacity(16 * 1024);
    let title = escape(&header.title());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{title}</title><style>{}</style></head><body><h1>{title}</h1>{}",
        super::style(),
        super::run_header(header, "", "")
    );
    let _ = write!(
        out,
        "<section id=\"latency\"><h2>Throughput against latency</h2><p>One mark per point, labelled by its {short}.</p>{}{}</section>",
        charts::scatter(
            "Output tok/s against median TTFT",
            "median TTFT (ms)",
            "output tok/s",
            &marks("median_ttft_ms", "output_throughput", false),
            "line"
        ),
        charts::scatter(
            "Output tok/s against median TPOT",
            "median TPOT (ms)",
            "output tok/s",
            &marks("median_tpot_ms", "output_throughput", false),
            "line"
        )
    );
    let _ = write!(
        out,
        "<section id=\"pareto\"><h2>Per-user against total throughput</h2><p>The line joins the Pareto points (no other point is as fast per user and in total); hollow marks are off the front.</p>{}</section>",
        charts::scatter(
            "Tokens/s per user against output tokens/s",
            "output tok/s (total)",
            "tok/s per user",
            &marks("output_throughput", "tokens_per_s_per_user", true),
            "front"
        )
    );
    let _ = write!(
        out,
        "<section id=\"table\"><h2>Summary</h2><table><tr><th>{}</th>",
        escape(short)
    );
    for (h, _) in COLUMNS {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr>");
    for p in points {
        let _ = write!(out, "<tr><td>{}</td>", escape(&label(p, key)));
        for (_, k) in COLUMNS {
            let cell = match p.get(k) {
                Some(Value::Bool(b)) => if *b { "yes" } else { "" }.to_string(),
                Some(v) => match v.as_f64() {
                    Some(f) if k == "num_prompts" => format!("{f:.0}"),
                    Some(f) => format!("{f:.2}"),
                    None => "—".into(),
                },
                None => "—".into(),
            };
            let _ = write!(out, "<td>{}</td>", escape(&cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table></section></body></html>\n");
    out
}
