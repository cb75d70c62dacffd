//! Two pictures for the results folder, as hand-written SVG: `decode.svg` (the decode grid as a
//! heatmap of total tok/s, one cell per measured or planned cell, coloured by status) and
//! `prefill.svg` (prefill tok/s and TTFT per context, as bars).
//!
//! Like the other writers it draws what the model holds and never computes a figure or a
//! verdict; the only arithmetic is geometry and colour. Every piece of text from the report
//! goes through [`escape`], so a label cannot break the XML.

use crate::report::format::{group_digits, ms, rate, MISSING};
use crate::report::markdown::row_labels;
use crate::report::model::{DecodeCell, MatrixReport};
use crate::report::status::CellStatus;
use std::io::{self, Write};

const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// Text for XML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `#rrggbb` between `lo` and `hi` at `t` in 0..=1.
fn blend(lo: [u8; 3], hi: [u8; 3], t: f64) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let c = |i: usize| (lo[i] as f64 + (hi[i] as f64 - lo[i] as f64) * t).round() as u8;
    format!("#{:02x}{:02x}{:02x}", c(0), c(1), c(2))
}

const VALID_LO: [u8; 3] = [0xe5, 0xf5, 0xe0];
const VALID_HI: [u8; 3] = [0x1b, 0x6e, 0x3a];

/// Fill of a cell that has no tok/s shade, and its legend text.
fn status_fill(s: &CellStatus) -> &'static str {
    match s {
        CellStatus::Valid => "#e5f5e0",
        CellStatus::Looped => "#f6c96b",
        CellStatus::Queued => "#c9b6e4",
        CellStatus::ClientBound => "#9fc5e8",
        CellStatus::Failed(_) => "#e57373",
        CellStatus::OverCapacity(_) => "#d0d0d0",
        CellStatus::Skipped => "#ececec",
        CellStatus::Pending => "#ffffff",
    }
}

/// Width of one status in the decode legend, and the height of a legend line.
const LEGEND_ITEM_W: f64 = 118.0;
const LEGEND_LINE_H: f64 = 20.0;

/// Every status but Valid, in the order the legend lists them.
const LEGEND_STATUSES: [CellStatus; 7] = [
    CellStatus::Looped,
    CellStatus::Queued,
    CellStatus::ClientBound,
    CellStatus::Failed(Vec::new()),
    CellStatus::OverCapacity(crate::report::status::CapacityReason::RunningLimit {
        max_running: 0,
    }),
    CellStatus::Skipped,
    CellStatus::Pending,
];

/// The decode grid as a heatmap: rows are contexts, columns concurrency; a Valid cell is
/// shaded by its total tok/s relative to the best Valid cell of the run.
pub fn write_decode(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let rows = row_labels(r);
    let mut cols: Vec<u64> = r.decode.iter().map(|c| c.concurrency).collect();
    cols.sort_unstable();
    cols.dedup();
    let best = r
        .decode
        .iter()
        .filter(|c| c.status == CellStatus::Valid)
        .filter_map(|c| c.output_tok_per_s)
        .fold(0.0f64, f64::max);
    let (left, top, cw, ch) = (80.0, 78.0, 118.0, 46.0);
    let width = left + cw * cols.len().max(1) as f64 + 20.0;
    let legend_y = top + ch * rows.len() as f64 + 24.0;
    // The legend: "Valid" on its own line, then every other status, wrapped to the width.
    let per_line = (((width - left) / LEGEND_ITEM_W).floor() as usize).max(1);
    let status_lines = LEGEND_STATUSES.len().div_ceil(per_line);
    let height = legend_y + LEGEND_LINE_H * (1 + status_lines) as f64 + 12.0;
    writeln!(
        w,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" {FONT} font-size=\"12\">"
    )?;
    writeln!(
        w,
        "<title>Sustained decode: total tok/s, {}</title>",
        escape(&r.metadata.model.id)
    )?;
    writeln!(
        w,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    )?;
    writeln!(
        w,
        "<text x=\"{left}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Sustained decode · total tok/s</text>"
    )?;
    writeln!(
        w,
        "<text x=\"{left}\" y=\"40\" fill=\"#555555\">{} · rows: context, columns: simultaneous requests</text>",
        escape(&r.metadata.model.id)
    )?;
    for (j, c) in cols.iter().enumerate() {
        let x = left + cw * j as f64 + cw / 2.0;
        writeln!(
            w,
            "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{c}</text>",
            top - 10.0
        )?;
    }
    for (i, label) in rows.iter().enumerate() {
        let y = top + ch * i as f64;
        writeln!(
            w,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-weight=\"bold\">{}</text>",
            left - 10.0,
            y + ch / 2.0 + 4.0,
            escape(label)
        )?;
        for (j, &col) in cols.iter().enumerate() {
            let Some(cell) = r
                .decode
                .iter()
                .find(|c| c.context_label == *label && c.concurrency == col)
            else {
                continue;
            };
            decode_cell(w, cell, best, left + cw * j as f64, y, cw, ch)?;
        }
    }
    // Legend.
    writeln!(
        w,
        "<rect x=\"{left}\" y=\"{legend_y}\" width=\"40\" height=\"12\" fill=\"{}\" stroke=\"#999999\"/>",
        blend(VALID_LO, VALID_HI, 1.0)
    )?;
    writeln!(
        w,
        "<text x=\"{}\" y=\"{}\">Valid (darker = more tok/s, best {})</text>",
        left + 46.0,
        legend_y + 10.0,
        if best > 0.0 {
            rate(best)
        } else {
            MISSING.into()
        }
    )?;
    for (i, s) in LEGEND_STATUSES.iter().enumerate() {
        let x = left + LEGEND_ITEM_W * (i % per_line) as f64;
        let y = legend_y + LEGEND_LINE_H * (1 + i / per_line) as f64;
        writeln!(
            w,
            "<rect x=\"{x}\" y=\"{y}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#999999\"/>",
            status_fill(s)
        )?;
        writeln!(
            w,
            "<text x=\"{}\" y=\"{}\">{}</text>",
            x + 16.0,
            y + 10.0,
            s.label()
        )?;
    }
    writeln!(w, "</svg>")
}

fn decode_cell(
    w: &mut impl Write,
    c: &DecodeCell,
    best: f64,
    x: f64,
    y: f64,
    cw: f64,
    ch: f64,
) -> io::Result<()> {
    let (fill, dark) = match (&c.status, c.output_tok_per_s) {
        (CellStatus::Valid, Some(t)) if best > 0.0 => {
            let f = t / best;
            (blend(VALID_LO, VALID_HI, f), f > 0.55)
        }
        (s, _) => (status_fill(s).to_string(), false),
    };
    let dash = if c.status == CellStatus::Pending {
        " stroke-dasharray=\"4 3\""
    } else {
        ""
    };
    writeln!(
        w,
        "<g data-context=\"{}\" data-concurrency=\"{}\" data-status=\"{}\">",
        escape(&c.context_label),
        c.concurrency,
        c.status.as_str()
    )?;
    writeln!(
        w,
        "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"2\"{dash}/>",
        x,
        y,
        cw,
        ch
    )?;
    // Two lines: the figure (or the status) and what qualifies it.
    let (first, second) = match (&c.status, c.output_tok_per_s) {
        (CellStatus::Valid, Some(t)) => (rate(t), c.ttft_ms_p50.map(|v| format!("{} TTFT", ms(v)))),
        (s @ (CellStatus::Looped | CellStatus::Queued | CellStatus::ClientBound), Some(t)) => {
            (rate(t), Some(s.label().to_string()))
        }
        (CellStatus::Failed(errors), _) => (
            "Failed".to_string(),
            errors.first().map(|(k, n)| format!("{k} ×{n}")),
        ),
        (s, _) => (s.label().to_string(), None),
    };
    let color = if dark { "#ffffff" } else { "#222222" };
    let cx = x + cw / 2.0;
    let first_y = if second.is_some() {
        y + 20.0
    } else {
        y + ch / 2.0 + 4.0
    };
    writeln!(
        w,
        "<text x=\"{cx}\" y=\"{first_y}\" text-anchor=\"middle\" fill=\"{color}\" font-weight=\"bold\">{}</text>",
        escape(&first)
    )?;
    if let Some(s) = second {
        writeln!(
            w,
            "<text x=\"{cx}\" y=\"{}\" text-anchor=\"middle\" fill=\"{color}\" font-size=\"10\">{}</text>",
            y + 35.0,
            escape(&s)
        )?;
    }
    writeln!(w, "</g>")
}

/// Prefill per context: tok/s bars on the left, TTFT bars on the right, each scaled to its own
/// largest value; a row without figures shows its status.
pub fn write_prefill(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let (left, top, rh, bar) = (80.0, 64.0, 30.0, 240.0);
    let gap = 110.0;
    let width = left + bar + gap + bar + 100.0;
    let height = top + rh * r.prefill.len() as f64 + 20.0;
    let max_of = |f: fn(&crate::report::PrefillRow) -> Option<f64>| {
        r.prefill
            .iter()
            .filter_map(f)
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
    };
    let max_tps = max_of(|p| p.prefill_tok_per_s);
    let max_ttft = max_of(|p| p.ttft_ms);
    writeln!(
        w,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" {FONT} font-size=\"12\">"
    )?;
    writeln!(
        w,
        "<title>Prefill: prompt tok/s and TTFT by context, {}</title>",
        escape(&r.metadata.model.id)
    )?;
    writeln!(
        w,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    )?;
    writeln!(
        w,
        "<text x=\"{left}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Prefill · cold prompt, max_tokens 1</text>"
    )?;
    let right = left + bar + gap;
    writeln!(
        w,
        "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">Prompt tok/s</text>",
        top - 12.0
    )?;
    writeln!(
        w,
        "<text x=\"{right}\" y=\"{}\" font-weight=\"bold\">TTFT</text>",
        top - 12.0
    )?;
    for (i, p) in r.prefill.iter().enumerate() {
        let y = top + rh * i as f64;
        writeln!(
            w,
            "<g data-context=\"{}\" data-status=\"{}\">",
            escape(&p.context_label),
            p.status.as_str()
        )?;
        // A tooltip: the counted size behind the label.
        if let Some(n) = p.prompt_tokens {
            writeln!(
                w,
                "<title>{}: {} prompt tokens</title>",
                escape(&p.context_label),
                group_digits(n)
            )?;
        }
        writeln!(
            w,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-weight=\"bold\">{}</text>",
            left - 10.0,
            y + rh / 2.0 + 4.0,
            escape(&p.context_label)
        )?;
        let bars = [
            (
                left,
                p.prefill_tok_per_s,
                max_tps,
                "#3b7dd8",
                rate as fn(f64) -> String,
            ),
            (
                right,
                p.ttft_ms,
                max_ttft,
                "#d8843b",
                ms as fn(f64) -> String,
            ),
        ];
        for (x, v, max, fill, fmt) in bars {
            let len = match v {
                Some(v) if max > 0.0 && v.is_finite() => (v / max).clamp(0.0, 1.0) * bar,
                _ => 0.0,
            };
            writeln!(
                w,
                "<rect class=\"bar\" x=\"{x}\" y=\"{}\" width=\"{len:.1}\" height=\"{}\" fill=\"{fill}\"/>",
                y + 5.0,
                rh - 10.0
            )?;
            let text = match v {
                Some(v) if p.status == CellStatus::Valid => fmt(v),
                Some(v) => format!("{} ({})", fmt(v), p.status.label()),
                None => p.status.label().to_string(),
            };
            writeln!(
                w,
                "<text x=\"{:.1}\" y=\"{}\">{}</text>",
                x + len + 6.0,
                y + rh / 2.0 + 4.0,
                escape(&text)
            )?;
        }
        writeln!(w, "</g>")?;
    }
    writeln!(w, "</svg>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_controls() {
        assert_eq!(escape("a<b>&\"c'\u{1}"), "a&lt;b&gt;&amp;&quot;c&apos; ");
    }

    #[test]
    fn blend_ends_and_bad_input() {
        assert_eq!(blend([0, 0, 0], [255, 255, 255], 0.0), "#000000");
        assert_eq!(blend([0, 0, 0], [255, 255, 255], 1.0), "#ffffff");
        assert_eq!(blend([0, 0, 0], [255, 255, 255], 7.0), "#ffffff");
        assert_eq!(blend([0, 0, 0], [255, 255, 255], f64::NAN), "#000000");
    }
}
