//! The end-of-run summary for the terminal: the decode grid of total tok/s as aligned plain
//! text (no markdown), statuses abbreviated so 8 columns fit 80 characters, then the first
//! message per error kind of every Failed row. Returns a string; printing is the caller's.

use crate::report::format::{rate, MISSING};
use crate::report::model::{DecodeCell, MatrixReport};
use crate::report::status::CellStatus;
use std::fmt::Write as _;

fn short(c: &DecodeCell) -> String {
    let figure = c.output_tok_per_s.map(rate);
    match (&c.status, figure) {
        (CellStatus::Valid, Some(f)) => f,
        (CellStatus::Looped, Some(f)) => format!("{f} L"),
        (CellStatus::Queued, Some(f)) => format!("{f} Q"),
        (CellStatus::Looped, None) => "loop".into(),
        (CellStatus::Queued, None) => "queue".into(),
        (CellStatus::ClientBound, Some(f)) => format!("{f} C"),
        (CellStatus::ClientBound, None) => "client".into(),
        (CellStatus::Valid, None) => MISSING.into(),
        (CellStatus::OverCapacity(_), _) => "over".into(),
        (CellStatus::Failed(_), _) => "FAIL".into(),
        (CellStatus::Skipped, _) => "skip".into(),
        (CellStatus::Pending, _) => "·".into(),
    }
}

/// The decode grid and, above it, one line per prefill context.
pub fn summary(r: &MatrixReport) -> String {
    let mut s = String::new();
    for p in &r.prefill {
        let _ = writeln!(
            s,
            "prefill {:>6}: {:>8} tok/s  TTFT {}  [{}]",
            p.context_label,
            p.prefill_tok_per_s.map_or(MISSING.to_string(), rate),
            p.ttft_ms
                .map_or(MISSING.to_string(), crate::report::format::ms),
            p.status.label()
        );
    }
    let mut rows: Vec<&str> = Vec::new();
    let mut cols: Vec<u64> = Vec::new();
    for c in &r.decode {
        if !rows.contains(&c.context_label.as_str()) {
            rows.push(&c.context_label);
        }
        if !cols.contains(&c.concurrency) {
            cols.push(c.concurrency);
        }
    }
    cols.sort_unstable();
    if rows.is_empty() {
        return s;
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|label| {
            cols.iter()
                .map(|&col| {
                    r.decode
                        .iter()
                        .find(|c| c.context_label == *label && c.concurrency == col)
                        .map_or_else(String::new, short)
                })
                .collect()
        })
        .collect();
    let lw = rows.iter().map(|l| l.len()).max().unwrap_or(0).max(7);
    let cw = cells
        .iter()
        .flatten()
        .map(|c| c.chars().count())
        .chain(cols.iter().map(|c| c.to_string().len()))
        .max()
        .unwrap_or(1);
    let _ = write!(s, "{:<lw$}", "decode");
    for c in &cols {
        let _ = write!(s, " {c:>cw$}");
    }
    s.push('\n');
    for (label, row) in rows.iter().zip(&cells) {
        let _ = write!(s, "{label:<lw$}");
        for c in row {
            // `{:>}` pads by chars, so `·` and `—` align like ASCII.
            let _ = write!(s, " {c:>cw$}");
        }
        s.push('\n');
    }
    s.push_str("total output tok/s; L = looped, Q = queued (figures kept), over = over capacity, skip = does not fit, · = not run\n");
    failures(&mut s, r);
    if let Some(t) = &r.slo {
        let _ = writeln!(s, "within {}:", t.objectives.join(", "));
        for row in &t.rows {
            let _ = writeln!(
                s,
                "  {:<lw$} largest concurrency {}; {}",
                row.context_label,
                row.largest_concurrency
                    .map_or_else(|| "none".to_string(), |c| c.to_string()),
                row.note
            );
        }
    }
    s
}

/// One line per Failed row with the first message of each error kind, so a failing run says
/// why on the terminal, not only in report.md.
fn failures(s: &mut String, r: &MatrixReport) {
    let prefill = r.prefill.iter().map(|p| {
        (
            format!("prefill {}", p.context_label),
            &p.status,
            &p.error_messages,
        )
    });
    let decode = r.decode.iter().map(|c| {
        (
            format!("decode {} x {}", c.context_label, c.concurrency),
            &c.status,
            &c.error_messages,
        )
    });
    for (at, status, msgs) in prefill.chain(decode) {
        if matches!(status, CellStatus::Failed(_)) {
            for m in msgs {
                let _ = writeln!(s, "failed {at}: {}", m.display());
            }
        }
    }
}
