//! The site's own pages: the index (one row per run, its headline figures, the in-page sort,
//! filter, grouping and selection) and the comparison page (which draws the chosen runs from
//! their data files, `runs/<id>.js`). Pure: templates compiled in, filled from [`SiteRun`]s.

use super::runs::{Headline, SiteRun};
use crate::report::format::{ms, rate, MISSING};
use crate::report::header::sortable_date;
use crate::report::html::{self, charts::PALETTE};
use minijinja::{context, Environment, Value};
use serde_json::json;
use std::io::{self, Write};

const INDEX_TEMPLATE: &str = include_str!("../html/site_index.html");
const COMPARE_TEMPLATE: &str = include_str!("../html/site_compare.html");

fn render(name: &str, source: &str, ctx: Value) -> String {
    let mut env = Environment::new();
    env.add_template(name, source)
        .and_then(|()| env.get_template(name))
        .and_then(|t| t.render(ctx))
        // The templates are compiled in and their contexts built here: the tests render both.
        .unwrap_or_else(|e| panic!("{name} renders: {e:#}"))
}

/// One headline figure for the index: its key, the exact value (empty when none) and its text.
fn figure(k: &str, v: Option<f64>, text: impl Fn(f64) -> String) -> Value {
    context! {
        k => k,
        v => v.map(|v| v.to_string()).unwrap_or_default(),
        text => v.map_or_else(|| MISSING.to_string(), text),
    }
}

fn figures(h: &Headline) -> Vec<Value> {
    let ctx = h.prefill_context.clone().unwrap_or_default();
    let top_c = h.decode_top_concurrency;
    vec![
        figure("prefill", h.prefill_tok_s, |v| {
            format!("{} @ {ctx}", rate(v))
        }),
        figure("c1", h.decode_c1_tok_s, rate),
        figure("top", h.decode_top_tok_s, |v| {
            format!("{} @ C={}", rate(v), top_c.unwrap_or(0))
        }),
        figure("bench", h.bench_out_tok_s, rate),
        figure("ttft", h.bench_ttft_ms, ms),
    ]
}

fn not_recorded(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "not recorded".into())
}

/// `index.html` for the site's runs, with the inputs it was built from and what was skipped.
pub fn index(site: &[SiteRun], skipped: &[String], inputs: &str) -> String {
    let rows: Vec<Value> = site
        .iter()
        .map(|r| {
            let h = &r.header;
            let text = [
                h.model.as_str(),
                h.model_detail.as_deref().unwrap_or(""),
                h.kind.as_str(),
                h.engine.as_deref().unwrap_or(""),
                h.hardware.as_deref().unwrap_or(""),
                h.date.as_deref().unwrap_or(""),
                r.origin.as_str(),
            ]
            .join(" ")
            .to_lowercase();
            context! {
                id => r.id,
                title => h.title(),
                model => h.model,
                model_detail => h.model_detail,
                kind => h.kind,
                interrupted => h.interrupted.is_some(),
                engine => not_recorded(&h.engine),
                hardware => not_recorded(&h.hardware),
                date => Some(sortable_date(h.date.as_deref())).filter(|d| !d.is_empty()).unwrap_or_else(|| "not recorded".into()),
                text => text,
                figures => figures(&r.headline),
            }
        })
        .collect();
    render(
        "site_index.html",
        INDEX_TEMPLATE,
        context! {
            style => Value::from_safe_string(html::style().to_string()),
            runs => rows,
            skipped => skipped,
            inputs => inputs,
            version => crate::report::header::tool_version(),
        },
    )
}

/// `compare.html`: the same page for any choice; the address names the runs.
pub fn compare() -> String {
    render(
        "site_compare.html",
        COMPARE_TEMPLATE,
        context! {
            style => Value::from_safe_string(html::style().to_string()),
            palette => Value::from_safe_string(json!(PALETTE).to_string()),
            same_within => crate::report::compare::SAME_WITHIN,
        },
    )
}

/// `runs/<id>.js`: the run's data for the comparison page, added to `LLMSPEED_RUNS`.
pub fn write_data(w: &mut impl Write, r: &SiteRun) -> io::Result<()> {
    let h = &r.header;
    let mut data = json!({
        "id": r.id,
        "origin": r.origin,
        "page": format!("runs/{}.html", r.id),
        "title": h.title(),
        "kind": h.kind,
        "model": h.model,
        "engine": not_recorded(&h.engine),
        "hardware": not_recorded(&h.hardware),
        "date": sortable_date(h.date.as_deref()),
        "settings": h.settings,
        "header_html": html::run_header(h, "", &format!("-{}", r.id)),
    });
    if let (Some(d), Some(extra)) = (data.as_object_mut(), r.data.as_object()) {
        d.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    write!(
        w,
        "window.LLMSPEED_RUNS = window.LLMSPEED_RUNS || {{}};\nwindow.LLMSPEED_RUNS[{}] = {};\n",
        json!(r.id),
        data
    )
}
