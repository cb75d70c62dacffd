//! `llmspeed capacity`'s page (`report.html` beside its `results.json`): the run's header, the
//! answer in a sentence, per objective the load–latency curve with its threshold, every probe's
//! estimate with its confidence interval coloured by the probe's verdict and the answer marked
//! ([`charts::intervals`]) — by rate also the keeps-up chart, the completions per second with
//! their interval against the arrivals — then every probe in a table. Pure, no script, no network, built from
//! `results.json` alone (so it shows exactly what the file says); `cli::capacity` writes it and
//! `report::site` draws it into a site.

use crate::report::header::RunHeader;
use crate::report::html::charts::{self, Guide, IntervalPoint};
use crate::report::svg::escape;
use serde_json::Value;
use std::fmt::Write;

/// The load's key in `results.json` (`concurrency`, or `request_rate` with `--by rate`) and its
/// words.
fn load_key(v: &Value) -> (&'static str, &'static str) {
    match v.pointer("/workload/by").and_then(Value::as_str) {
        Some("rate") => ("request_rate", "request rate (req/s)"),
        _ => ("concurrency", "concurrency (streams)"),
    }
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], |a| a.as_slice())
}

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

/// A figure in the objective's display unit: ms as they are, a fraction as a percentage.
fn scaled(v: Option<f64>, unit: &str) -> Option<f64> {
    v.map(|x| if unit == "fraction" { x * 100.0 } else { x })
}

fn text(v: Option<f64>) -> String {
    v.map_or("—".into(), |x| format!("{x:.2}"))
}

/// A load as written (`12`, `3.5`).
fn load_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Null) | None => "none".into(),
        Some(v) => v.to_string(),
    }
}

/// The answer's paragraph: the largest passing load, the smallest failing one and why, how the
/// search ended, and the throughput at the answer.
fn answer_html(v: &Value, key: &str) -> String {
    let a = v.get("answer").unwrap_or(&Value::Null);
    let mut out = String::from("<section id=\"answer\"><h2>Answer</h2><table class=\"kv\">");
    let mut row = |k: &str, id: &str, val: String, data: Option<&Value>| {
        let dv = data.map_or(String::new(), |d| {
            format!(" data-v=\"{}\"", escape(&d.to_string()))
        });
        let _ = write!(
            out,
            "<tr id=\"{id}\"><td>{}</td><td{dv}>{}</td></tr>",
            escape(k),
            escape(&val)
        );
    };
    let pass = a.get(key);
    let fail = a.get(format!("smallest_failing_{key}").as_str());
    row("Largest passing load", "a-pass", load_text(pass), pass);
    let certain = a.get("failing_certain").and_then(Value::as_bool) == Some(true);
    let failed = a.get("failed_objective").and_then(Value::as_str);
    let fail_text = match (fail.filter(|f| !f.is_null()), failed, certain) {
        (None, _, _) => "none found".to_string(),
        (Some(f), Some(o), true) => format!("{} ({o} failed first)", load_text(Some(f))),
        (Some(f), _, true) => load_text(Some(f)),
        (Some(f), _, false) => format!(
            "{} (not certain: its probe ended undecided)",
            load_text(Some(f))
        ),
    };
    row("Smallest failing load", "a-fail", fail_text, fail);
    let ending = a.get("ending").and_then(Value::as_str).unwrap_or("");
    let ending_text = match ending {
        "resolved" => "resolved to the resolution asked for".to_string(),
        "passed_at_max" => "every load up to the largest allowed passed".to_string(),
        "client_bound" => format!(
            "stopped: the client fell behind twice at {} (Client-bound); the figures there are the client's, not the server's",
            load_text(a.get("client_bound_at"))
        ),
        "stopped" => format!(
            "stopped by {} before the search resolved: not certain",
            a.get("stopped_by").and_then(Value::as_str).unwrap_or("a stop")
        ),
        other => other.to_string(),
    };
    row("Ending", "a-ending", ending_text, a.get("ending"));
    for (k, id, f) in [
        ("Output tok/s at the answer", "a-tok", "output_tok_per_s"),
        ("Requests/s at the answer", "a-rps", "requests_per_s"),
        (
            "Goodput requests/s at the answer",
            "a-good",
            "goodput_requests_per_s",
        ),
    ] {
        row(k, id, text(num(a.get(f))), a.get(f));
    }
    out.push_str("</table></section>");
    out
}

/// One chart per objective.
fn charts_html(v: &Value, key: &str, x_label: &str) -> String {
    let answer = num(v.pointer(&format!("/answer/{key}")));
    let probes = arr(v.get("probes"));
    let mut out = String::from(
        "<section id=\"curves\"><h2>Load against each objective</h2><p class=\"muted\">Each mark is a probe's estimate, its bar the confidence interval (dashed where an end is open: too few samples reach it); colour is the probe's outcome: green pass, red fail, orange undecided, blue Client-bound. The grey line joins each load's last probe; the dashed dark line is the threshold, the green vertical line the answer.</p><div class=\"row\">",
    );
    for o in arr(v.get("slo")) {
        let Some(okey) = o.get("key").and_then(Value::as_str) else {
            continue;
        };
        let mut unit = "ms";
        let mut threshold = f64::NAN;
        let points: Vec<IntervalPoint> = probes
            .iter()
            .filter_map(|p| {
                let j = arr(p.get("objectives"))
                    .iter()
                    .find(|j| j.get("key").and_then(Value::as_str) == Some(okey))?;
                unit = if j.get("unit").and_then(Value::as_str) == Some("fraction") {
                    "fraction"
                } else {
                    "ms"
                };
                threshold = scaled(num(j.get("threshold")), unit).unwrap_or(f64::NAN);
                Some(IntervalPoint {
                    x: num(p.get(key))?,
                    estimate: scaled(num(j.get("estimate")), unit),
                    lo: scaled(num(j.get("lo")), unit),
                    hi: scaled(num(j.get("hi")), unit),
                    verdict: p
                        .get("outcome")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    reference: None,
                })
            })
            .collect();
        let y_label = if unit == "fraction" {
            format!("{okey} (%)")
        } else {
            format!("{okey} (ms)")
        };
        let _ = write!(
            out,
            "<div class=\"objective\" id=\"o-{}\">{}</div>",
            escape(okey),
            charts::intervals(
                okey,
                x_label,
                &y_label,
                &points,
                Guide::Threshold(threshold),
                answer
            )
        );
    }
    if key == "request_rate" {
        out.push_str(&keeps_up_chart(probes, x_label, answer));
    }
    out.push_str("</div></section>");
    out
}

/// By rate: each probe's completions per second with their interval, coloured by the
/// keeps-up verdict, the arrivals per second they were held to as an open circle, and the
/// line where the completions equal the offered rate.
fn keeps_up_chart(probes: &[Value], x_label: &str, answer: Option<f64>) -> String {
    let points: Vec<IntervalPoint> = probes
        .iter()
        .filter_map(|p| {
            let k = p.get("keeps_up")?;
            Some(IntervalPoint {
                x: num(p.get("request_rate"))?,
                estimate: num(k.get("completion_per_s")),
                lo: num(k.get("lo")),
                hi: num(k.get("hi")),
                verdict: k
                    .get("verdict")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                reference: num(k.get("arrival_per_s")),
            })
        })
        .collect();
    format!(
        "<div class=\"objective\" id=\"o-keeps_up\">{}</div>",
        charts::intervals(
            "keeps up: completed req/s [interval], ○ arriving",
            x_label,
            "completed req/s",
            &points,
            Guide::Diagonal,
            answer
        )
    )
}

/// Every probe in order: its load, outcome, rounds, how the server was settled, throughput and
/// per objective its estimate, interval and verdict (exact values in `data-*`).
fn table_html(v: &Value, key: &str) -> String {
    let keys: Vec<&str> = arr(v.get("slo"))
        .iter()
        .filter_map(|o| o.get("key").and_then(Value::as_str))
        .collect();
    let mut out = String::from(
        "<section id=\"probes\"><h2>Probes</h2><table><tr><th>#</th><th>Load</th><th>Outcome</th><th>Rounds</th><th>Time (s)</th><th>Server before</th>",
    );
    for k in &keys {
        let _ = write!(out, "<th>{} [interval]</th>", escape(k));
    }
    // By rate: whether the server completed requests as fast as they arrived (docs/capacity.md).
    let by_rate = key == "request_rate";
    if by_rate {
        out.push_str("<th>Keeps up: completed req/s [interval] of arriving</th>");
    }
    out.push_str("<th>Output tok/s</th><th>Requests/s</th><th>Goodput req/s</th></tr>");
    for (i, p) in arr(v.get("probes")).iter().enumerate() {
        let outcome = p.get("outcome").and_then(Value::as_str).unwrap_or("");
        let reasons: Vec<&str> = arr(p.get("client_bound_reasons"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let why = if reasons.is_empty() {
            String::new()
        } else {
            format!(" title=\"{}\"", escape(&reasons.join("; ")))
        };
        let _ = write!(
            out,
            "<tr class=\"probe\" data-load=\"{}\" data-outcome=\"{}\"><td>{}</td><td class=\"num\">{}</td><td{why}><span class=\"badge\" style=\"border-color:{}\">{}</span></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>",
            escape(&load_text(p.get(key))),
            escape(outcome),
            i + 1,
            escape(&load_text(p.get(key))),
            charts::verdict_color(outcome),
            escape(&outcome.replace('_', " ")),
            load_text(p.get("rounds")),
            text(num(p.get("wall_s"))),
            escape(p.get("settled").and_then(Value::as_str).unwrap_or("")),
        );
        for k in &keys {
            let j = arr(p.get("objectives"))
                .iter()
                .find(|j| j.get("key").and_then(Value::as_str) == Some(*k));
            match j {
                Some(j) => {
                    let unit = j.get("unit").and_then(Value::as_str).unwrap_or("ms");
                    let sym = if unit == "fraction" { "%" } else { " ms" };
                    let d = |f: &str| num(j.get(f)).map_or(String::new(), |x| x.to_string());
                    let s = |f: &str| {
                        scaled(num(j.get(f)), unit).map_or("open".into(), |x| format!("{x:.2}"))
                    };
                    let verdict = j.get("verdict").and_then(Value::as_str).unwrap_or("");
                    let _ = write!(
                        out,
                        "<td class=\"judged\" data-key=\"{}\" data-samples=\"{}\" data-estimate=\"{}\" data-lo=\"{}\" data-hi=\"{}\" data-verdict=\"{}\">{}{sym} [{}, {}] {} (n={})</td>",
                        escape(k),
                        load_text(j.get("samples")),
                        d("estimate"),
                        d("lo"),
                        d("hi"),
                        escape(verdict),
                        s("estimate"),
                        s("lo"),
                        s("hi"),
                        escape(&verdict.replace('_', " ")),
                        load_text(j.get("samples")),
                    );
                }
                None => out.push_str("<td>—</td>"),
            }
        }
        if by_rate {
            out.push_str(&keeps_up_cell(p.get("keeps_up")));
        }
        for f in [
            "output_tok_per_s",
            "requests_per_s",
            "goodput_requests_per_s",
        ] {
            let _ = write!(
                out,
                "<td class=\"num\">{}</td>",
                escape(&text(num(p.get(f))))
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</table></section>");
    out
}

/// A rate probe's keeps-up figures: what the server completed per second, its interval, what
/// arrived, and the verdict (exact values in `data-*`).
fn keeps_up_cell(k: Option<&Value>) -> String {
    let Some(k) = k.filter(|k| k.is_object()) else {
        return "<td>—</td>".into();
    };
    let d = |f: &str| num(k.get(f)).map_or(String::new(), |x| x.to_string());
    let s = |f: &str| num(k.get(f)).map_or("open".into(), |x| format!("{x:.2}"));
    let verdict = k.get("verdict").and_then(Value::as_str).unwrap_or("");
    format!(
        "<td class=\"keeps-up\" data-completion=\"{}\" data-lo=\"{}\" data-hi=\"{}\" data-arrival=\"{}\" data-verdict=\"{}\">{} [{}, {}] of {} {}</td>",
        d("completion_per_s"),
        d("lo"),
        d("hi"),
        d("arrival_per_s"),
        escape(verdict),
        s("completion_per_s"),
        s("lo"),
        s("hi"),
        s("arrival_per_s"),
        escape(&verdict.replace('_', " ")),
    )
}

/// The whole page for a capacity `results.json`.
pub fn render(results: &Value, header: &RunHeader) -> String {
    let (key, x_label) = load_key(results);
    let title = escape(&header.title());
    let mut out = String::with_capacity(32 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{title}</title><style>{}</style></head><body><h1>{title}</h1>{}",
        super::style(),
        super::run_header(header, "", "")
    );
    out.push_str(&answer_html(results, key));
    out.push_str(&charts_html(results, key, x_label));
    out.push_str(&table_html(results, key));
    out.push_str("<section id=\"method\"><h2>How to read it</h2><p>A probe passes when every objective's interval lies on the right side of its threshold, fails as soon as one lies wholly on the wrong side, and otherwise runs another round, up to its limit (docs/capacity.md).</p>");
    if key == "request_rate" {
        out.push_str("<p>By rate a probe must also keep up: the requests it completed per second, with their interval (the Poisson one, widened by the arrivals' burstiness below 1), fail it when the whole interval lies under the arrivals per second (the open circle), and pass it when the interval's lower end is within half a step of them.</p>");
    }
    out.push_str("</section></body></html>\n");
    out
}
