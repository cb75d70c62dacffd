//! Sweeps (`--sweep-max-concurrency`, `--sweep-request-rate`) and the names of the files a
//! session of several runs writes.
//!
//! Owns: the points of a sweep ([`points`]: one checked single-run config per value), the file
//! name of each run and summary ([`file_name`]), and the sweep summary (JSON and console
//! table) built from each point's result figures. Pure: it never runs a benchmark or touches
//! a file (`bench::vllm::session` does).

use crate::bench::engine::multi_run::Spread;
use crate::bench::engine::session::{self, Setting};
use crate::bench::vllm::args::{ServeConfig, Sweep};
use serde_json::{json, Map, Value};
use std::io::{self, Write};

/// One sweep point: the single-run config it runs with, and how it is named.
pub type Point = session::Point<ServeConfig>;

/// The runs of a session: every sweep value as its own config (`--max-concurrency` or
/// `--request-rate` set, `--num-prompts` = concurrency x `--sweep-num-prompts-factor` when
/// given), or the one config as it is.
pub fn points(cfg: &ServeConfig) -> Vec<Point> {
    session::points(
        cfg,
        cfg.sweep.as_ref(),
        cfg.sweep_num_prompts_factor,
        |c, s| match s {
            Setting::MaxConcurrency { n, num_prompts } => {
                c.max_concurrency = Some(n);
                if let Some(p) = num_prompts {
                    c.dataset.num_prompts = p;
                }
            }
            Setting::RequestRate(r) => {
                c.request_rate = r;
                c.schedule.rate = r;
            }
        },
    )
}

/// `base` with `tag` and `-run{k}` (1-based) inserted before its `.json` (or at its end).
pub fn file_name(base: &str, tag: &str, run: Option<usize>) -> String {
    let (stem, ext) = match base.strip_suffix(".json") {
        Some(stem) => (stem, ".json"),
        None => (base, ""),
    };
    let run = run.map(|k| format!("-run{k}")).unwrap_or_default();
    format!("{stem}{tag}{run}{ext}")
}

/// One point's line of the summary: its figures (the mean across runs with `--num-runs`).
#[derive(Clone, Debug)]
pub struct PointResult {
    pub label: String,
    pub value: Value,
    pub num_prompts: usize,
    pub figures: Vec<(String, f64)>,
    /// Figures whose CV across runs is above 5% (empty for a single run).
    pub unstable: Vec<String>,
    pub result_files: Vec<String>,
}

impl PointResult {
    /// From the runs' spreads (one run: each spread holds its one value).
    pub fn new(point: &Point, spreads: &[Spread], result_files: Vec<String>) -> PointResult {
        PointResult {
            label: point.label.clone(),
            value: point.value.clone(),
            num_prompts: point.cfg.dataset.num_prompts,
            figures: spreads.iter().map(|s| (s.key.clone(), s.mean)).collect(),
            unstable: spreads
                .iter()
                .filter(|s| s.unstable)
                .map(|s| s.key.clone())
                .collect(),
            result_files,
        }
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Output tokens per second seen by one user: `1000 / mean TPOT (ms)`; `None` without a
    /// TPOT (a run with single-token outputs, or TPOT not among the selected metrics).
    pub fn tokens_per_s_per_user(&self) -> Option<f64> {
        self.get("mean_tpot_ms")
            .filter(|&t| t > 0.0)
            .map(|t| 1000.0 / t)
    }
}

/// The point with the highest `request_throughput` (the first of equals).
fn best(points: &[PointResult]) -> Option<&PointResult> {
    points
        .iter()
        .filter(|p| p.get("request_throughput").is_some())
        .fold(None, |best: Option<&PointResult>, p| match best {
            Some(b) if b.get("request_throughput") >= p.get("request_throughput") => Some(b),
            _ => Some(p),
        })
}

/// Which points are on the Pareto front of output tok/s per user against output tok/s in
/// total: no other point is at least as good on both and better on one. A point without a
/// per-user rate (no TPOT) is never on it.
pub fn pareto_front(points: &[PointResult]) -> Vec<bool> {
    let xy: Vec<Option<(f64, f64)>> = points
        .iter()
        .map(|p| Some((p.tokens_per_s_per_user()?, p.get("output_throughput")?)))
        .collect();
    xy.iter()
        .map(|a| {
            let Some((ax, ay)) = *a else { return false };
            !xy.iter()
                .flatten()
                .any(|&(bx, by)| bx >= ax && by >= ay && (bx > ax || by > ay))
        })
        .collect()
}

/// The sweep summary saved with `--save-result`.
pub fn summary_json(sweep: &Sweep, num_runs: usize, points: &[PointResult]) -> Value {
    let key = sweep.key();
    let front = pareto_front(points);
    let rows: Vec<Value> = points
        .iter()
        .zip(front)
        .map(|(p, on_front)| {
            let mut m = Map::new();
            m.insert(key.into(), p.value.clone());
            m.insert("num_prompts".into(), json!(p.num_prompts));
            for (k, v) in &p.figures {
                m.insert(k.clone(), json!(v));
            }
            m.insert(
                "tokens_per_s_per_user".into(),
                json!(p.tokens_per_s_per_user()),
            );
            m.insert("pareto".into(), json!(on_front));
            m.insert("unstable".into(), json!(p.unstable));
            m.insert("result_files".into(), json!(p.result_files));
            Value::Object(m)
        })
        .collect();
    json!({
        "sweep": key,
        "values": points.iter().map(|p| p.value.clone()).collect::<Vec<_>>(),
        "num_runs": num_runs,
        "best_request_throughput": best(points).map(|b| json!({
            key: b.value,
            "request_throughput": b.get("request_throughput"),
        })),
        "points": rows,
    })
}

/// The console table, one row per point; `p` is the `--metric-percentiles` label shown next
/// to the median (`99`).
pub fn write_table(w: &mut impl Write, points: &[PointResult], p: &str) -> io::Result<()> {
    let cols: [(String, String); 9] = [
        ("Req/s".into(), "request_throughput".into()),
        ("Out tok/s".into(), "output_throughput".into()),
        ("Total tok/s".into(), "total_token_throughput".into()),
        ("SS req/s".into(), "steady_state.request_throughput".into()),
        (
            "SS out tok/s".into(),
            "steady_state.output_throughput".into(),
        ),
        ("P50 TTFT(ms)".into(), "median_ttft_ms".into()),
        (format!("P{p} TTFT(ms)"), format!("p{p}_ttft_ms")),
        ("P50 TPOT(ms)".into(), "median_tpot_ms".into()),
        (format!("P{p} TPOT(ms)"), format!("p{p}_tpot_ms")),
    ];
    let first = points
        .iter()
        .map(|x| x.label.len())
        .max()
        .unwrap_or(0)
        .max(18);
    let width = first + cols.len() * 14;
    writeln!(w, "{:=^width$}", " Sweep Summary ")?;
    write!(w, "{:<first$}", "Point")?;
    for (h, _) in &cols {
        write!(w, " {h:>13}")?;
    }
    writeln!(w)?;
    for pt in points {
        write!(w, "{:<first$}", pt.label)?;
        for (_, k) in &cols {
            match pt.get(k) {
                Some(v) => write!(w, " {v:>13.2}")?,
                None => write!(w, " {:>13}", "-")?,
            }
        }
        writeln!(w)?;
    }
    writeln!(w, "{}", "=".repeat(width))?;
    if let Some(b) = best(points) {
        writeln!(
            w,
            "Best throughput: {:.2} req/s at {}",
            b.get("request_throughput").unwrap_or(0.0),
            b.label
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: crate::bench::vllm::args::ServeArgs,
    }

    fn cfg(args: &[&str]) -> ServeConfig {
        T::parse_from(std::iter::once("x").chain(args.iter().copied()))
            .a
            .validate()
            .unwrap()
    }

    #[test]
    fn concurrency_points_set_the_cap_and_scale_the_prompts() {
        let p = points(&cfg(&[
            "--sweep-max-concurrency",
            "1,8,64",
            "--sweep-num-prompts-factor",
            "5",
        ]));
        let got: Vec<(Option<usize>, usize, &str, &str)> = p
            .iter()
            .map(|x| {
                (
                    x.cfg.max_concurrency,
                    x.cfg.dataset.num_prompts,
                    x.label.as_str(),
                    x.file_tag.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(1), 5, "concurrency=1", "-concurrency1"),
                (Some(8), 40, "concurrency=8", "-concurrency8"),
                (Some(64), 320, "concurrency=64", "-concurrency64")
            ]
        );
        // Without a factor every point keeps --num-prompts.
        let p = points(&cfg(&[
            "--sweep-max-concurrency",
            "2,4",
            "--num-prompts",
            "7",
        ]));
        assert!(p.iter().all(|x| x.cfg.dataset.num_prompts == 7));
    }

    #[test]
    fn rate_points_set_the_rate_and_the_schedule() {
        let p = points(&cfg(&["--sweep-request-rate", "1,10,inf"]));
        let rates: Vec<(f64, f64)> = p
            .iter()
            .map(|x| (x.cfg.request_rate, x.cfg.schedule.rate))
            .collect();
        assert_eq!(
            rates,
            vec![(1.0, 1.0), (10.0, 10.0), (f64::INFINITY, f64::INFINITY)]
        );
        assert_eq!(p[2].label, "rate=inf");
        assert_eq!(p[2].value, json!("inf"));
        assert_eq!(p[1].file_tag, "-10.0qps");
        assert_eq!(points(&cfg(&[])).len(), 1);
    }

    #[test]
    fn file_names() {
        assert_eq!(
            file_name("r.json", "-concurrency8", None),
            "r-concurrency8.json"
        );
        assert_eq!(file_name("r.json", "", Some(2)), "r-run2.json");
        assert_eq!(file_name("out", "-1.0qps", Some(1)), "out-1.0qps-run1");
    }

    fn point(label: &str, v: Value, figs: &[(&str, f64)]) -> PointResult {
        PointResult {
            label: label.into(),
            value: v,
            num_prompts: 10,
            figures: figs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            unstable: vec![],
            result_files: vec![],
        }
    }

    #[test]
    fn pareto_front_keeps_the_points_nothing_beats_on_both_axes() {
        // (per-user tok/s = 1000 / TPOT ms, total output tok/s):
        // a (250, 100), b (125, 800), c (100, 700) beaten by b, d (125, 800) ties b (both
        // stay: neither is better on either axis), e without TPOT.
        let p = |tpot: Option<f64>, out: f64| {
            let mut f = vec![("output_throughput", out)];
            if let Some(t) = tpot {
                f.push(("mean_tpot_ms", t));
            }
            point("x", json!(1), &f)
        };
        let pts = [
            p(Some(4.0), 100.0),
            p(Some(8.0), 800.0),
            p(Some(10.0), 700.0),
            p(Some(8.0), 800.0),
            p(None, 900.0),
        ];
        assert_eq!(pareto_front(&pts), [true, true, false, true, false]);
    }

    #[test]
    fn summary_and_table() {
        let pts = vec![
            point(
                "concurrency=1",
                json!(1),
                &[
                    ("request_throughput", 2.0),
                    ("mean_tpot_ms", 4.0),
                    ("median_ttft_ms", 10.0),
                ],
            ),
            point(
                "concurrency=8",
                json!(8),
                &[
                    ("request_throughput", 9.5),
                    ("mean_tpot_ms", 8.0),
                    ("steady_state.request_throughput", 9.75),
                ],
            ),
        ];
        let v = summary_json(&Sweep::MaxConcurrency(vec![1, 8]), 1, &pts);
        assert_eq!(v["values"], json!([1, 8]));
        assert_eq!(v["points"][0]["max_concurrency"], 1);
        assert_eq!(v["points"][0]["tokens_per_s_per_user"], 250.0);
        assert_eq!(v["points"][1]["tokens_per_s_per_user"], 125.0);
        // No output_throughput in these rows: nothing is on the front.
        assert_eq!(v["points"][0]["pareto"], false);
        assert_eq!(
            v["best_request_throughput"],
            json!({"max_concurrency": 8, "request_throughput": 9.5})
        );
        let mut out = Vec::new();
        write_table(&mut out, &pts, "99").unwrap();
        let t = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[1].starts_with("Point") && lines[1].contains("P99 TPOT(ms)"),
            "{t}"
        );
        // Row 1: 2.00 req/s, no steady state ("-"), median TTFT 10.00.
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "concurrency=1",
                "2.00",
                "-",
                "-",
                "-",
                "-",
                "10.00",
                "-",
                "-",
                "-"
            ]
        );
        assert_eq!(lines[3].split_whitespace().nth(4), Some("9.75"));
        assert_eq!(
            *lines.last().unwrap(),
            "Best throughput: 9.50 req/s at concurrency=8"
        );
    }
}
