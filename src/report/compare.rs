//! `llmspeed report compare A B`: two matrix results (or two `bench serve` result files) side
//! by side — per cell and per metric both values, the difference and the ratio, and whether B
//! is better, worse or about the same; cells present in only one marked.
//!
//! Pure: it builds a [`Comparison`] from values already read; `markdown` writes it for the
//! terminal and `html::write_compare` for `compare.html`.

use crate::report::format::{one_decimal, MISSING};
use crate::report::header::RunHeader;
use crate::report::model::{DecodeCell, MatrixReport, PrefillRow};
use std::io::{self, Write};

/// A change smaller than this share of A counts as the same (noise between runs).
pub const SAME_WITHIN: f64 = 0.02;

/// Which way is better for a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
    /// Neither (a count, a setting): the change is shown but not judged.
    Neither,
}

/// Where a row's key was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Both,
    OnlyA,
    OnlyB,
}

/// The verdict on one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Better,
    Worse,
    Same,
    /// Not judged: a metric without a direction, or a value missing on one side.
    Unjudged,
    OnlyA,
    OnlyB,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::Same => "same",
            Verdict::Unjudged => "",
            Verdict::OnlyA => "only in A",
            Verdict::OnlyB => "only in B",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The cell (`8K × 4`) or the key's group.
    pub item: String,
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    pub better: Better,
    pub presence: Presence,
}

impl Row {
    pub fn diff(&self) -> Option<f64> {
        Some(self.b? - self.a?)
    }

    pub fn ratio(&self) -> Option<f64> {
        let (a, b) = (self.a?, self.b?);
        (a != 0.0).then(|| b / a)
    }

    pub fn verdict(&self) -> Verdict {
        match self.presence {
            Presence::OnlyA => return Verdict::OnlyA,
            Presence::OnlyB => return Verdict::OnlyB,
            Presence::Both => {}
        }
        let Some(r) = self.ratio() else {
            return Verdict::Unjudged;
        };
        if (r - 1.0).abs() <= SAME_WITHIN {
            return Verdict::Same;
        }
        match (self.better, r > 1.0) {
            (Better::Neither, _) => Verdict::Unjudged,
            (Better::Higher, true) | (Better::Lower, false) => Verdict::Better,
            _ => Verdict::Worse,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    pub title: String,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub a_name: String,
    pub b_name: String,
    /// What each run measured, from its own file.
    pub a_header: RunHeader,
    pub b_header: RunHeader,
    pub sections: Vec<Section>,
}

impl Comparison {
    /// The settings that differ between A and B, by name: said before any number.
    pub fn differing_settings(&self) -> Vec<String> {
        RunHeader::differing_settings(&[&self.a_header, &self.b_header])
    }
}

type Metric<T> = (&'static str, Better, fn(&T) -> Option<f64>);

const DECODE_METRICS: [Metric<DecodeCell>; 5] = [
    ("total tok/s", Better::Higher, |c| c.output_tok_per_s),
    ("per-request tok/s", Better::Higher, |c| {
        c.per_request_tok_per_s
    }),
    ("TTFT p50 ms", Better::Lower, |c| c.ttft_ms_p50),
    ("time between tokens p50 ms", Better::Lower, |c| {
        c.tbt_ms_p50
    }),
    ("average active requests", Better::Neither, |c| {
        c.avg_active_requests
    }),
];

const PREFILL_METRICS: [Metric<PrefillRow>; 2] = [
    ("prefill tok/s", Better::Higher, |p| p.prefill_tok_per_s),
    ("TTFT ms", Better::Lower, |p| p.ttft_ms),
];

/// Rows for items keyed by `key` in `a` and `b`, in A's order then B's extras.
fn rows_for<T, K: PartialEq>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> K,
    name: impl Fn(&T) -> String,
    metrics: &[Metric<T>],
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut push = |item: &T, other: Option<&T>, a_side: bool| {
        for (metric, better, get) in metrics {
            let (x, y) = (get(item), other.and_then(get));
            let (va, vb) = if a_side { (x, y) } else { (y, x) };
            rows.push(Row {
                item: name(item),
                metric: (*metric).to_string(),
                a: va,
                b: vb,
                better: *better,
                presence: match (other.is_some(), a_side) {
                    (true, _) => Presence::Both,
                    (false, true) => Presence::OnlyA,
                    (false, false) => Presence::OnlyB,
                },
            });
        }
    };
    for x in a {
        push(x, b.iter().find(|y| key(y) == key(x)), true);
    }
    for y in b.iter().filter(|y| !a.iter().any(|x| key(x) == key(y))) {
        push(y, None, false);
    }
    rows
}

/// Two matrix reports, cell by cell (cells matched by context and concurrency).
pub fn matrices(a_name: &str, a: &MatrixReport, b_name: &str, b: &MatrixReport) -> Comparison {
    let decode = rows_for(
        &a.decode,
        &b.decode,
        |c| (c.context, c.concurrency),
        |c| format!("{} × {}", c.context_label, c.concurrency),
        &DECODE_METRICS,
    );
    let prefill = rows_for(
        &a.prefill,
        &b.prefill,
        |p| p.context,
        |p| p.context_label.clone(),
        &PREFILL_METRICS,
    );
    Comparison {
        a_name: a_name.to_string(),
        b_name: b_name.to_string(),
        a_header: RunHeader::matrix(a),
        b_header: RunHeader::matrix(b),
        sections: vec![
            Section {
                title: "Sustained decode".into(),
                rows: decode,
            },
            Section {
                title: "Prefill".into(),
                rows: prefill,
            },
        ],
    }
}

/// Which way is better for a `bench serve` result key, from vLLM's naming.
fn bench_direction(key: &str) -> Better {
    let lower = ["ttft", "tpot", "itl", "e2el", "duration", "failed"];
    let higher = [
        "throughput",
        "goodput",
        "completed",
        "request_rate_achieved",
    ];
    if lower.iter().any(|k| key.contains(k)) {
        Better::Lower
    } else if higher.iter().any(|k| key.contains(k)) {
        Better::Higher
    } else {
        Better::Neither
    }
}

/// Two `bench serve` result objects: every top-level number, in A's key order then B's extras.
pub fn bench_results(
    a_name: &str,
    a: &serde_json::Map<String, serde_json::Value>,
    b_name: &str,
    b: &serde_json::Map<String, serde_json::Value>,
) -> Comparison {
    let numbers = |m: &serde_json::Map<String, serde_json::Value>| -> Vec<(String, f64)> {
        m.iter()
            .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
            .collect()
    };
    let (na, nb) = (numbers(a), numbers(b));
    let metric: [Metric<(String, f64)>; 1] = [("value", Better::Neither, |p| Some(p.1))];
    let mut rows = rows_for(&na, &nb, |p| p.0.clone(), |p| p.0.clone(), &metric);
    for r in &mut rows {
        r.better = bench_direction(&r.item);
        r.metric = r.item.clone();
        r.item = "result".into();
    }
    Comparison {
        a_name: a_name.to_string(),
        b_name: b_name.to_string(),
        a_header: RunHeader::bench_serve(a),
        b_header: RunHeader::bench_serve(b),
        sections: vec![Section {
            title: "bench serve".into(),
            rows,
        }],
    }
}

/// A value for the tables: two decimals below 10 (milliseconds of TTFT and time between
/// tokens differ in the second), else one, grouped; `—` when missing.
pub fn value_text(v: Option<f64>) -> String {
    v.map_or_else(|| MISSING.to_string(), number)
}

fn number(v: f64) -> String {
    if v.abs() < 10.0 {
        let s = format!("{v:.2}");
        // No "-0.00".
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            "0.00".to_string()
        } else {
            s
        }
    } else {
        one_decimal(v)
    }
}

/// A difference with its sign: `+28.0`, `-0.25`; `0.00` when it rounds to nothing.
pub fn diff_text(v: Option<f64>) -> String {
    match v {
        Some(d) => {
            let s = number(d);
            let zero = s.chars().all(|c| c == '0' || c == '.');
            if d > 0.0 && !zero {
                format!("+{s}")
            } else {
                s
            }
        }
        None => MISSING.to_string(),
    }
}

pub fn ratio_text(v: Option<f64>) -> String {
    v.map_or_else(|| MISSING.to_string(), |r| format!("{r:.3}×"))
}

/// The comparison as markdown tables, one per section.
pub fn markdown(w: &mut impl Write, c: &Comparison) -> io::Result<()> {
    writeln!(w, "# Comparison")?;
    writeln!(w)?;
    writeln!(w, "A: {} ({})  ", c.a_name, c.a_header.title())?;
    writeln!(w, "B: {} ({})", c.b_name, c.b_header.title())?;
    writeln!(w)?;
    let differ = c.differing_settings();
    if !differ.is_empty() {
        writeln!(
            w,
            "**The runs' settings differ: {}.** A difference below may come from them.",
            differ.join(", ")
        )?;
        writeln!(w)?;
    }
    writeln!(
        w,
        "Ratio is B / A; a change within {:.0}% counts as the same.",
        SAME_WITHIN * 100.0
    )?;
    for s in &c.sections {
        writeln!(w)?;
        writeln!(w, "## {}", s.title)?;
        writeln!(w)?;
        writeln!(w, "| Cell | Metric | A | B | B − A | B / A | |")?;
        writeln!(w, "|---|---|---:|---:|---:|---:|---|")?;
        for r in &s.rows {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.item.replace('|', "\\|"),
                r.metric.replace('|', "\\|"),
                value_text(r.a),
                value_text(r.b),
                diff_text(r.diff()),
                ratio_text(r.ratio()),
                r.verdict().as_str()
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(a: Option<f64>, b: Option<f64>, better: Better) -> Row {
        Row {
            item: "x".into(),
            metric: "m".into(),
            a,
            b,
            better,
            presence: Presence::Both,
        }
    }

    #[test]
    fn verdicts_follow_the_metric_direction_and_the_noise_band() {
        assert_eq!(
            row(Some(100.0), Some(110.0), Better::Higher).verdict(),
            Verdict::Better
        );
        assert_eq!(
            row(Some(100.0), Some(110.0), Better::Lower).verdict(),
            Verdict::Worse
        );
        assert_eq!(
            row(Some(100.0), Some(90.0), Better::Lower).verdict(),
            Verdict::Better
        );
        assert_eq!(
            row(Some(100.0), Some(101.9), Better::Higher).verdict(),
            Verdict::Same
        );
        assert_eq!(
            row(Some(100.0), Some(150.0), Better::Neither).verdict(),
            Verdict::Unjudged
        );
        assert_eq!(
            row(None, Some(1.0), Better::Higher).verdict(),
            Verdict::Unjudged
        );
        assert_eq!(row(Some(0.0), Some(1.0), Better::Higher).ratio(), None);
        assert_eq!(diff_text(Some(0.001)), "0.00");
        assert_eq!(diff_text(Some(-0.001)), "0.00");
        assert_eq!(diff_text(Some(0.25)), "+0.25");
        assert_eq!(diff_text(Some(28.04)), "+28.0");
        assert_eq!(value_text(Some(1_279.34)), "1,279.3");
        assert_eq!(value_text(Some(0.6449)), "0.64");
        let r = row(Some(200.0), Some(150.0), Better::Higher);
        assert_eq!(r.diff(), Some(-50.0));
        assert_eq!(r.ratio(), Some(0.75));
    }

    #[test]
    fn bench_keys_are_matched_and_the_extras_marked() {
        let a = serde_json::json!({"output_throughput": 100.0, "mean_ttft_ms": 50.0, "model_id": "m", "num_prompts": 10});
        let b = serde_json::json!({"output_throughput": 120.0, "mean_ttft_ms": 40.0, "p99_itl_ms": 9.0});
        let c = bench_results(
            "a",
            a.as_object().expect("object"),
            "b",
            b.as_object().expect("object"),
        );
        let rows = &c.sections[0].rows;
        let find = |m: &str| rows.iter().find(|r| r.metric == m).expect(m);
        assert_eq!(find("output_throughput").verdict(), Verdict::Better);
        assert_eq!(find("mean_ttft_ms").verdict(), Verdict::Better);
        assert_eq!(find("num_prompts").verdict(), Verdict::OnlyA);
        assert_eq!(find("p99_itl_ms").verdict(), Verdict::OnlyB);
        assert!(
            rows.iter().all(|r| r.metric != "model_id"),
            "strings are not compared"
        );
    }
}
