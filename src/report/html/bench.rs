//! A `bench serve` result's or a `bench sglang` record's page: the run's header, then every
//! top-level figure of the result in its own key order, as the file holds it. Pure, no script,
//! no network; the results site writes one per bench run.

use crate::report::compare::value_text;
use crate::report::header::RunHeader;
use crate::report::svg::escape;
use std::fmt::Write;

/// The whole page. `figures` are the result's numbers, in the file's order.
pub fn render(header: &RunHeader, figures: &[(String, f64)]) -> String {
    let title = escape(&header.title());
    let mut out = String::with_capacity(8 * 1024 + figures.len() * 96);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{title}</title><style>{}</style></head><body><h1>{title}</h1>{}",
        super::style(),
        super::run_header(header, "", "")
    );
    out.push_str("<section id=\"figures\"><h2>Figures</h2><p class=\"muted\">Every number of the result, under the result's own keys.</p><table>\n<tr><th>Key</th><th>Value</th></tr>\n");
    for (k, v) in figures {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\" data-v=\"{v}\">{}</td></tr>",
            escape(k),
            escape(&value_text(Some(*v)))
        );
    }
    out.push_str("</table></section></body></html>\n");
    out
}
