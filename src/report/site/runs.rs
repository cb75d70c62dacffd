//! One run of the site as values: its id, header, headline figures for the index, its own page
//! and the data the comparison page draws from. Pure: built from what the run's own file holds
//! ([`Source`]); nothing here reads or writes a file.

use super::gather::Source;
use crate::report::header::RunHeader;
use crate::report::model::{DecodeCell, MatrixReport};
use crate::report::status::CellStatus;
use serde_json::{json, Map, Value};

/// A run ready to be written.
#[derive(Clone, Debug)]
pub struct SiteRun {
    /// Stable across re-runs over the same inputs: the origin's name and its hash.
    pub id: String,
    pub origin: String,
    pub header: RunHeader,
    pub headline: Headline,
    /// The run's own page, a whole HTML document.
    pub page: String,
    /// What the comparison draws: decode grid, prefill rows, sweep points, bench figures.
    pub data: Value,
}

/// The index's figures of a run; `None` where the run has no such figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Headline {
    /// Prefill tok/s at the smallest prefill context, and that context's label.
    pub prefill_tok_s: Option<f64>,
    pub prefill_context: Option<String>,
    /// Total decode tok/s at the first decode context with one request (a Valid or Client-bound
    /// cell: measured, its figures kept).
    pub decode_c1_tok_s: Option<f64>,
    /// Total decode tok/s at the first decode context's highest measured (Valid or Client-bound)
    /// concurrency, and it.
    pub decode_top_tok_s: Option<f64>,
    pub decode_top_concurrency: Option<u64>,
    /// The best output tok/s of a bench run (of a sweep's points, the best point's) and the
    /// median TTFT of that run or point.
    pub bench_out_tok_s: Option<f64>,
    pub bench_ttft_ms: Option<f64>,
}

/// A stable id for an origin: its letters and digits (at most 48), then 8 hex digits of its
/// FNV-1a hash, so two origins that read alike still differ.
pub fn run_id(origin: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in origin.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut slug = String::new();
    for c in origin.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    let tail: String = slug
        .chars()
        .rev()
        .take(48)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{}-{h:08x}", tail.trim_matches('-'))
}

/// The site's view of one found run; `page` draws its own page with the run's header.
pub fn site_run(src: &Source, page: impl FnOnce(&Source, &RunHeader) -> String) -> SiteRun {
    let origin = src.origin();
    let (header, headline, data) = match src {
        Source::Matrix { report, .. } => (
            RunHeader::matrix(report),
            matrix_headline(report),
            matrix_data(report),
        ),
        Source::BenchServe { result, .. } => (
            RunHeader::bench_serve(result),
            bench_headline(result),
            json!({"figures": bench_figures(result)}),
        ),
        Source::Sweep {
            summary, points, ..
        } => (
            RunHeader::bench_sweep(summary, points),
            sweep_headline(summary),
            json!({"sweep": sweep_data(summary)}),
        ),
        Source::Capacity { results, .. } => (
            RunHeader::capacity(results),
            Headline::default(),
            json!({"figures": capacity_figures(results)}),
        ),
        Source::Sglang { record, .. } => (
            RunHeader::bench_sglang(record),
            bench_headline(record),
            json!({"figures": bench_figures(record)}),
        ),
    };
    let page = page(src, &header);
    SiteRun {
        id: run_id(&origin),
        origin,
        header,
        headline,
        page,
        data,
    }
}

/// The first decode context's cells (contexts ascending, as planned).
fn first_context_cells(r: &MatrixReport) -> impl Iterator<Item = &DecodeCell> {
    let first = r.decode.iter().map(|c| c.context).min();
    r.decode.iter().filter(move |c| Some(c.context) == first)
}

pub fn matrix_headline(r: &MatrixReport) -> Headline {
    let prefill = r
        .prefill
        .iter()
        .min_by_key(|p| p.context)
        .filter(|p| p.status == CellStatus::Valid);
    // Measured cells: a Client-bound cell keeps its figures (its page says why it is marked).
    let measured = || {
        first_context_cells(r)
            .filter(|c| matches!(c.status, CellStatus::Valid | CellStatus::ClientBound))
    };
    let top = measured().max_by_key(|c| c.concurrency);
    Headline {
        prefill_tok_s: prefill.and_then(|p| p.prefill_tok_per_s),
        prefill_context: prefill.map(|p| p.context_label.clone()),
        decode_c1_tok_s: measured()
            .find(|c| c.concurrency == 1)
            .and_then(|c| c.output_tok_per_s),
        decode_top_tok_s: top.and_then(|c| c.output_tok_per_s),
        decode_top_concurrency: top.map(|c| c.concurrency),
        ..Headline::default()
    }
}

fn bench_headline(m: &Map<String, Value>) -> Headline {
    Headline {
        bench_out_tok_s: m.get("output_throughput").and_then(Value::as_f64),
        bench_ttft_ms: m.get("median_ttft_ms").and_then(Value::as_f64),
        ..Headline::default()
    }
}

fn sweep_headline(summary: &Value) -> Headline {
    let best = summary
        .get("points")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get("output_throughput")?.as_f64()?, p)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    Headline {
        bench_out_tok_s: best.map(|b| b.0),
        bench_ttft_ms: best.and_then(|b| b.1.get("median_ttft_ms")?.as_f64()),
        ..Headline::default()
    }
}

/// The decode grid and prefill rows, as the comparison draws them.
fn matrix_data(r: &MatrixReport) -> Value {
    let cells: Vec<Value> = r
        .decode
        .iter()
        .map(|c| {
            json!({
                "context": c.context, "label": c.context_label, "concurrency": c.concurrency,
                "status": c.status.as_str(), "status_label": c.status.label(),
                "tok_s": c.output_tok_per_s, "per_request_tok_s": c.per_request_tok_per_s,
            })
        })
        .collect();
    let prefill: Vec<Value> = r
        .prefill
        .iter()
        .map(|p| {
            json!({
                "context": p.context, "label": p.context_label, "status": p.status.as_str(),
                "tok_s": p.prefill_tok_per_s, "ttft_ms": p.ttft_ms,
            })
        })
        .collect();
    json!({"decode": cells, "prefill": prefill})
}

/// A capacity search's answer as figures: its numbers under their own keys (`concurrency`,
/// `smallest_failing_concurrency`, the throughput at the answer), for the comparison page.
fn capacity_figures(v: &Value) -> Vec<(String, f64)> {
    v.get("answer")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
        .chain(
            v.get("wall_s")
                .and_then(Value::as_f64)
                .map(|w| ("wall_s".to_string(), w)),
        )
        .collect()
}

/// Every top-level number of a bench result, in its own key order.
fn bench_figures(m: &Map<String, Value>) -> Vec<(String, f64)> {
    m.iter()
        .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
        .collect()
}

fn sweep_data(summary: &Value) -> Value {
    let key = summary.get("sweep").and_then(Value::as_str).unwrap_or("");
    let points: Vec<Value> = summary
        .get("points")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            json!({
                "x": p.get(key).and_then(Value::as_f64),
                "label": p.get(key).map(|v| v.as_str().map_or_else(|| v.to_string(), String::from)),
                "output_throughput": p.get("output_throughput").and_then(Value::as_f64),
                "median_ttft_ms": p.get("median_ttft_ms").and_then(Value::as_f64),
                "median_tpot_ms": p.get("median_tpot_ms").and_then(Value::as_f64),
            })
        })
        .collect();
    json!({"key": key, "points": points})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_readable_and_distinct() {
        let a = run_id("results/h200/vllm-0.11");
        assert_eq!(a, run_id("results/h200/vllm-0.11"));
        assert!(a.starts_with("results-h200-vllm-0-11-"), "{a}");
        assert_ne!(a, run_id("results/h200/vllm_0.11"));
        assert!(run_id(&"x/".repeat(100)).len() <= 48 + 9);
        assert!(run_id("/a/b.jsonl:3")
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn a_sweep_headline_is_its_best_point() {
        let s = json!({"sweep": "max_concurrency", "points": [
            {"max_concurrency": 1, "output_throughput": 100.0, "median_ttft_ms": 20.0},
            {"max_concurrency": 4, "output_throughput": 300.0, "median_ttft_ms": 45.0},
            {"max_concurrency": 8, "output_throughput": 280.0, "median_ttft_ms": 90.0}
        ]});
        let h = sweep_headline(&s);
        assert_eq!(h.bench_out_tok_s, Some(300.0));
        assert_eq!(h.bench_ttft_ms, Some(45.0));
        let d = sweep_data(&s);
        assert_eq!(d["points"][1]["x"], 4.0);
        assert_eq!(d["points"][1]["label"], "4");
    }
}
