//! `results.csv`: one row per measurement (each prefill context, each decode cell), a header
//! row, RFC 4180 quoting. Raw numbers with units in the column names, empty for missing: this
//! file is for spreadsheets and scripts, not for reading, so nothing is rounded. `interrupted`
//! is `true` on a decode cell whose window was cut short (the JSON's `interrupted`: its figures
//! cover the shortened window of `measured_s` seconds), `false` on every other row.

use crate::report::model::{DecodeCell, MatrixReport, PrefillRow};
use std::io::Write;

pub const COLUMNS: [&str; 25] = [
    "phase",
    "context",
    "context_label",
    "concurrency",
    "status",
    "status_detail",
    "prompt_tokens",
    "prefill_tok_per_s",
    "output_tok_per_s",
    "per_request_tok_per_s",
    "ttft_ms_p50",
    "tbt_ms_p50",
    "avg_active_requests",
    "completed_requests",
    "output_tokens",
    "measured_s",
    "token_count_source",
    "server_output_tokens",
    "token_count_diff",
    "errors",
    "loop_period_chars",
    "loop_excerpt",
    "client_cpu_percent",
    "timer_lag_ms_max",
    "interrupted",
];

/// Quote a field when it holds a comma, a quote or a line break (quotes doubled).
pub fn field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn num<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn row(w: &mut impl Write, cells: &[String]) -> std::io::Result<()> {
    for (i, c) in cells.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(field(c).as_bytes())?;
    }
    w.write_all(b"\r\n")
}

/// Details of a status that the bare word does not carry.
fn status_detail(s: &crate::report::status::CellStatus) -> String {
    use crate::report::status::{CapacityReason, CellStatus};
    match s {
        CellStatus::OverCapacity(CapacityReason::KvCache {
            needed_tokens,
            kv_tokens,
        }) => format!("needs {needed_tokens} KV tokens of {kv_tokens}"),
        CellStatus::OverCapacity(CapacityReason::RunningLimit { max_running }) => {
            format!("server runs at most {max_running} requests")
        }
        CellStatus::Failed(errors) => errors
            .iter()
            .map(|(k, n)| format!("{k}:{n}"))
            .collect::<Vec<_>>()
            .join(";"),
        _ => String::new(),
    }
}

fn prefill_row(p: &PrefillRow) -> Vec<String> {
    let mut r = vec![String::new(); COLUMNS.len()];
    r[0] = "prefill".into();
    r[1] = p.context.to_string();
    r[2] = p.context_label.clone();
    r[3] = "1".into();
    r[4] = p.status.as_str().into();
    r[5] = status_detail(&p.status);
    r[6] = num(p.prompt_tokens);
    r[7] = num(p.prefill_tok_per_s);
    r[10] = num(p.ttft_ms);
    r[13] = p.samples.to_string();
    // A prefill measurement is one request: stopped, it is not kept.
    r[24] = false.to_string();
    r
}

fn decode_row(c: &DecodeCell) -> Vec<String> {
    vec![
        "decode".into(),
        c.context.to_string(),
        c.context_label.clone(),
        c.concurrency.to_string(),
        c.status.as_str().into(),
        status_detail(&c.status),
        String::new(),
        String::new(),
        num(c.output_tok_per_s),
        num(c.per_request_tok_per_s),
        num(c.ttft_ms_p50),
        num(c.tbt_ms_p50),
        num(c.avg_active_requests),
        num(c.completed_requests),
        num(c.output_tokens),
        num(c.measured_s),
        c.token_count_source
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        num(c.server_output_tokens),
        num(c.token_count_diff),
        c.errors
            .iter()
            .map(|e| format!("{}:{}", e.kind, e.count))
            .collect::<Vec<_>>()
            .join(";"),
        num(c.loop_info.as_ref().map(|l| l.period_chars)),
        c.loop_info
            .as_ref()
            .map(|l| l.excerpt.clone())
            .unwrap_or_default(),
        num(c.client_cpu_percent),
        num(c.timer_lag_ms_max),
        c.interrupted.to_string(),
    ]
}

/// Write the header row and one row per measurement, prefill first.
pub fn write(w: &mut impl Write, report: &MatrixReport) -> std::io::Result<()> {
    let header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    row(w, &header)?;
    for p in &report.prefill {
        row(w, &prefill_row(p))?;
    }
    for c in &report.decode {
        row(w, &decode_row(c))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
    }
}
