//! The HTML report's charts as inline SVG, drawn by our own code (no charting dependency, no
//! script): line charts over a log x axis, cumulative distributions with percentiles marked,
//! and a per-request timeline with the measurement window shaded.
//!
//! Only geometry here: every value comes from the report model (percentile marks use
//! `analysis::stats`, the same function as the report's own figures). Text goes through
//! [`escape`], so a label from a server cannot break the markup.

use crate::analysis::stats;
use crate::report::svg::escape;
use crate::report::GapHistogram;
use std::fmt::Write as _;

/// Colours for series, distinguishable in print and for the common colour-blindnesses.
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

const W: f64 = 440.0;
const H: f64 = 260.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 26.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 46.0;

/// One line of a chart: points in data units, drawn in order.
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A chart of lines (and optional loose sample dots) over a logarithmic x axis whose ticks are
/// the distinct x values of the data, labelled by `x_tick`.
pub struct LogXChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series>,
    /// Individual samples, drawn as small hollow dots (e.g. every prefill sample).
    pub samples: Vec<(f64, f64)>,
    pub x_tick: fn(f64) -> String,
}

/// A round number at or above `v` (1, 2, 2.5, 5 × a power of ten) for the top of a y axis.
pub fn nice_ceil(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v * 0.999_999 {
            return m * p;
        }
    }
    10.0 * p
}

/// `v` with as many decimals as a quarter of `range` needs to show two significant digits, so
/// ticks and marks over a narrow range stay distinct.
fn fixed(v: f64, range: f64) -> String {
    let step = range / 4.0;
    let decimals = if step.is_finite() && step > 0.0 {
        (1.0 - step.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        1
    };
    format!("{v:.decimals$}")
}

/// A tick label without needless decimals: `1,000`, `2.5`, `0.25`.
pub fn tick_text(v: f64) -> String {
    // -0.0 (a rounded small negative) prints as "-0".
    let v = if v == 0.0 { 0.0 } else { v };
    if v >= 1000.0 {
        crate::report::format::group_digits(v.round() as u64)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_string()
    }
}

fn open(out: &mut String, class: &str, title: &str) {
    let _ = write!(
        out,
        "<svg class=\"chart {class}\" role=\"img\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\"><title>{}</title>",
        escape(title)
    );
    let _ = write!(
        out,
        "<text x=\"{LEFT}\" y=\"18\" class=\"ct\">{}</text>",
        escape(title)
    );
}

/// Axes frame, y grid with `n` ticks from 0 to `y_max`, and the axis titles.
fn y_axis(out: &mut String, y_max: f64, y_label: &str, x_label: &str, fmt: fn(f64) -> String) {
    let n = 5;
    for i in 0..=n {
        let v = y_max * i as f64 / n as f64;
        let y = TOP + (H - TOP - BOTTOM) * (1.0 - i as f64 / n as f64);
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tk\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            escape(&fmt(v))
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{:.1}\" class=\"axis\"/><line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" class=\"axis\"/>",
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"al\">{}</text>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 8.0,
        escape(x_label)
    );
    let _ = write!(
        out,
        "<text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" class=\"al\">{}</text>",
        TOP + (H - TOP - BOTTOM) / 2.0,
        escape(y_label)
    );
}

fn y_pos(v: f64, y_max: f64) -> f64 {
    TOP + (H - TOP - BOTTOM) * (1.0 - (v / y_max).clamp(0.0, 1.0))
}

/// An empty chart that says why it is empty (no figures yet, or none measured).
fn empty(out: &mut String, note: &str) {
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"none\">{}</text></svg>",
        W / 2.0,
        H / 2.0,
        escape(note)
    );
}

impl LogXChart<'_> {
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        open(&mut out, "logx", self.title);
        let finite = |p: &&(f64, f64)| p.0 > 0.0 && p.0.is_finite() && p.1.is_finite();
        let all: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .chain(self.samples.iter())
            .filter(finite)
            .copied()
            .collect();
        if all.is_empty() {
            empty(&mut out, "no measured figures");
            return out;
        }
        let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let (lo, hi) = (xs[0].log2(), xs[xs.len() - 1].log2());
        let plot_w = W - LEFT - RIGHT - 24.0;
        let x_pos = |x: f64| {
            if hi > lo {
                LEFT + 12.0 + plot_w * (x.log2() - lo) / (hi - lo)
            } else {
                LEFT + 12.0 + plot_w / 2.0
            }
        };
        let y_max = nice_ceil(all.iter().map(|p| p.1).fold(0.0, f64::max));
        y_axis(&mut out, y_max, self.y_label, self.x_label, tick_text);
        let texts: Vec<String> = xs.iter().map(|&x| (self.x_tick)(x)).collect();
        let centres: Vec<f64> = xs.iter().map(|&x| x_pos(x)).collect();
        let widths: Vec<f64> = texts.iter().map(|t| tick_width(t)).collect();
        let shown = labels_that_fit(&centres, &widths);
        for ((px, text), show) in centres.iter().zip(&texts).zip(shown) {
            let _ = write!(
                out,
                "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" class=\"axis\"/>",
                H - BOTTOM,
                H - BOTTOM + 4.0,
            );
            // A tick too close to a labelled one keeps its line; its point's tooltip names it.
            if show {
                let _ = write!(
                    out,
                    "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
                    H - BOTTOM + 16.0,
                    escape(text)
                );
            }
        }
        for s in &self.series {
            let pts: Vec<(f64, f64)> = s.points.iter().filter(finite).copied().collect();
            if pts.len() > 1 {
                let _ = write!(out, "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"", s.color);
                for (x, y) in &pts {
                    let _ = write!(out, "{:.1},{:.1} ", x_pos(*x), y_pos(*y, y_max));
                }
                out.push_str("\"/>");
            }
            for (x, y) in &pts {
                let _ = write!(
                    out,
                    "<circle class=\"pt\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{}\"><title>{}: {} → {}</title></circle>",
                    x_pos(*x),
                    y_pos(*y, y_max),
                    s.color,
                    escape(&s.name),
                    escape(&(self.x_tick)(*x)),
                    escape(&tick_text((*y * 10.0).round() / 10.0))
                );
            }
        }
        for (x, y) in self.samples.iter().filter(finite) {
            let _ = write!(
                out,
                "<circle class=\"sample\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"none\" stroke=\"#555\"/>",
                x_pos(*x),
                y_pos(*y, y_max)
            );
        }
        // Legend, top right, one line per series.
        if self.series.len() > 1 {
            for (i, s) in self.series.iter().enumerate() {
                let y = TOP + 4.0 + 14.0 * i as f64;
                let x = W - RIGHT - 90.0;
                let _ = write!(
                    out,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tk\">{}</text>",
                    s.color,
                    x + 14.0,
                    y + 5.0,
                    escape(&s.name)
                );
            }
        }
        out.push_str("</svg>");
        out
    }
}

/// A tick label's width in px at the charts' 10 px tick font (about 6 px a character), with
/// room on each side.
fn tick_width(text: &str) -> f64 {
    6.0 * text.chars().count() as f64 + 6.0
}

/// Which tick labels, centred at `centres` (ascending, px) and `widths` wide, are printed so
/// that none overlaps another: left to right, each that clears the one before; the last always,
/// taking the place of those it would overlap (the first excepted: two that collide keep the
/// first). Where contexts are close (28K and 32K) they printed over each other as "28K32K".
fn labels_that_fit(centres: &[f64], widths: &[f64]) -> Vec<bool> {
    let n = centres.len();
    let mut shown = vec![false; n];
    let (left, right) = (
        |i: usize| centres[i] - widths[i] / 2.0,
        |i: usize| centres[i] + widths[i] / 2.0,
    );
    let mut last: Option<usize> = None;
    for (i, show) in shown.iter_mut().enumerate() {
        if last.is_none_or(|j| left(i) >= right(j)) {
            *show = true;
            last = Some(i);
        }
    }
    if n > 1 && !shown[n - 1] {
        let end = n - 1;
        let clashes = |j: usize| right(j) > left(end);
        if !clashes(0) {
            for (j, show) in shown.iter_mut().enumerate().take(end).skip(1) {
                if *show && clashes(j) {
                    *show = false;
                }
            }
            shown[end] = true;
        }
    }
    shown
}

/// The cumulative distribution of `values` (ms) as a step line, with p50, p90 and p99 marked.
pub fn cdf(title: &str, x_label: &str, values: &[f64]) -> String {
    let mut out = String::with_capacity(4096);
    open(&mut out, "cdf", title);
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        empty(&mut out, "no request in the window has this figure");
        return out;
    }
    // Zoomed to the data: requests of one cell often differ by a fraction of a millisecond.
    let (min, max) = (v[0], v[v.len() - 1]);
    let span = if max > min {
        max - min
    } else {
        (max.abs() * 0.1).max(0.1)
    };
    let (lo, hi) = ((min - span * 0.1).max(0.0), max + span * 0.1);
    let plot_w = W - LEFT - RIGHT;
    let x_pos = |x: f64| LEFT + plot_w * ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
    y_axis(&mut out, 1.0, "fraction of requests", x_label, tick_text);
    for i in 0..=4 {
        let x = lo + (hi - lo) * i as f64 / 4.0;
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
            x_pos(x),
            H - BOTTOM + 16.0,
            escape(&fixed(x, hi - lo))
        );
    }
    let n = v.len() as f64;
    let _ = write!(
        out,
        "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{:.1},{:.1} ",
        PALETTE[0],
        x_pos(v[0]),
        y_pos(0.0, 1.0)
    );
    for (i, x) in v.iter().enumerate() {
        let _ = write!(
            out,
            "{:.1},{:.1} {:.1},{:.1} ",
            x_pos(*x),
            y_pos(i as f64 / n, 1.0),
            x_pos(*x),
            y_pos((i + 1) as f64 / n, 1.0)
        );
    }
    out.push_str("\"/>");
    let marks = PERCENTILE_COLORS.iter().filter_map(|&(p, color)| {
        let q = stats::percentile_sorted(&v, p as f64)?;
        Some((x_pos(q), format!("p{p} {}", fixed(q, hi - lo)), color))
    });
    percentile_marks(&mut out, marks, 7.0);
    out.push_str("</svg>");
    out
}

/// Five x-axis ticks from `lo` to `hi` milliseconds, labelled in seconds (one decimal), on the
/// charts over a cell's time.
fn seconds_ticks(out: &mut String, lo: f64, hi: f64, x_pos: impl Fn(f64) -> f64) {
    for i in 0..=4 {
        let x = lo + (hi - lo) * i as f64 / 4.0;
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
            x_pos(x),
            H - BOTTOM + 16.0,
            escape(&tick_text((x / 100.0).round() / 10.0))
        );
    }
}

/// p50, p90 and p99 and the colour each is marked in, on every distribution chart.
const PERCENTILE_COLORS: [(u32, &str); 3] = [(50, "#2ca02c"), (90, "#ff7f0e"), (99, "#d62728")];

/// Dashed vertical lines at each `(x, label, colour)`, their labels in one line under the
/// title (so close percentiles stay legible), advancing `char_w` per label character.
fn percentile_marks<'a>(
    out: &mut String,
    marks: impl Iterator<Item = (f64, String, &'a str)>,
    char_w: f64,
) {
    let mut label_x = LEFT + 4.0;
    for (x, text, color) in marks {
        let _ = write!(
            out,
            "<line class=\"pct\" x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"4 3\"/><text x=\"{label_x:.1}\" y=\"{:.1}\" class=\"tk\" fill=\"{color}\">{}</text>",
            H - BOTTOM,
            TOP + 10.0,
            escape(&text)
        );
        label_x += char_w * text.chars().count() as f64 + 10.0;
    }
}

/// A time on the gap chart's ticks in its own unit: `5 µs`, `20 ms`, `1 s`.
fn time_text(us: f64) -> String {
    // Rounded first, so 999.99… µs from a power of ten reads as 1 ms.
    let us = (us * 1e6).round() / 1e6;
    let (v, unit) = if us < 1e3 {
        (us, "µs")
    } else if us < 1e6 {
        (us / 1e3, "ms")
    } else {
        (us / 1e6, "s")
    };
    format!("{} {unit}", tick_text((v * 1e3).round() / 1e3))
}

/// Time between tokens of a cell: the histogram of every inside-the-window gap on a log time
/// axis (bars: each bin's share of the gaps), its cumulative share as a step line (right
/// scale), and the exact p50, p90 and p99 (from the gaps, not the bins) marked.
pub fn gap_histogram(title: &str, h: &GapHistogram) -> String {
    let mut out = String::with_capacity(8192);
    open(&mut out, "gaps", title);
    let filled: Vec<usize> = (0..h.counts.len()).filter(|&i| h.counts[i] > 0).collect();
    let total: u64 = h.counts.iter().sum();
    let (Some(&first), Some(&last)) = (filled.first(), filled.last()) else {
        empty(&mut out, "no gap inside the window");
        return out;
    };
    // One empty bin each side, and at least a decade shown, so a single spike has context.
    let per = h.bins_per_decade.max(1) as usize;
    let lo_bin = first.saturating_sub(1);
    let hi_bin = (last + 2).max(lo_bin + per).min(h.counts.len());
    let (lo_ms, hi_ms) = (h.edge_ms(lo_bin), h.edge_ms(hi_bin));
    let plot_w = W - LEFT - RIGHT;
    let x_pos = |ms: f64| {
        let f = (ms.max(1e-12).log10() - lo_ms.log10()) / (hi_ms.log10() - lo_ms.log10());
        LEFT + plot_w * f.clamp(0.0, 1.0)
    };
    let share = |c: u64| c as f64 / total.max(1) as f64 * 100.0;
    let y_max = nice_ceil(
        filled
            .iter()
            .map(|&i| share(h.counts[i]))
            .fold(0.0, f64::max),
    );
    y_axis(
        &mut out,
        y_max,
        "share of gaps, % per bin",
        "time between tokens (log scale)",
        tick_text,
    );
    // Decade ticks inside the shown range, with 2 and 5 between them when it spans under
    // three decades (a cell's gaps often sit within one).
    let (lo_us, hi_us) = (lo_ms * 1000.0, hi_ms * 1000.0);
    let steps: &[f64] = if hi_us / lo_us < 1000.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    let mut d = 10f64.powf(lo_us.log10().floor());
    while d <= hi_us * 1.000_001 {
        ticks.extend(
            steps
                .iter()
                .map(|m| m * d)
                .filter(|t| *t >= lo_us * 0.999_999 && *t <= hi_us * 1.000_001),
        );
        d *= 10.0;
    }
    for t in ticks {
        let x = x_pos(t / 1000.0);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" class=\"axis\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0,
            escape(&time_text(t))
        );
    }
    for &i in &filled {
        let (x0, x1) = (x_pos(h.edge_ms(i)), x_pos(h.edge_ms(i + 1)));
        let y = y_pos(share(h.counts[i]), y_max);
        let _ = write!(
            out,
            "<rect class=\"bar\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" fill-opacity=\"0.7\"><title>{} – {} ms: {} gaps</title></rect>",
            (x1 - x0 - 0.5).max(0.5),
            (H - BOTTOM - y).max(0.0),
            PALETTE[0],
            escape(&tick_text(h.edge_ms(i))),
            escape(&tick_text(h.edge_ms(i + 1))),
            h.counts[i]
        );
    }
    // Cumulative share, right scale 0–100 %.
    let _ = write!(
        out,
        "<polyline class=\"line cum\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.5\" points=\"{:.1},{:.1} ",
        x_pos(lo_ms),
        y_pos(0.0, 1.0)
    );
    let mut run = 0u64;
    for i in lo_bin..hi_bin {
        let before = run as f64 / total.max(1) as f64;
        run += h.counts[i];
        let after = run as f64 / total.max(1) as f64;
        let _ = write!(
            out,
            "{:.1},{:.1} {:.1},{:.1} ",
            x_pos(h.edge_ms(i)),
            y_pos(before, 1.0),
            x_pos(h.edge_ms(i + 1)),
            y_pos(after, 1.0)
        );
    }
    out.push_str("\"/>");
    for (v, t) in [(0.0, "0%"), (0.5, "50%"), (1.0, "100%")] {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tk\">{t}</text>",
            W - RIGHT + 2.0,
            y_pos(v, 1.0) + 4.0
        );
    }
    let quantiles = [h.p50_ms, h.p90_ms, h.p99_ms];
    let marks = PERCENTILE_COLORS
        .iter()
        .zip(quantiles)
        .map(|(&(p, color), q)| (x_pos(q), format!("p{p} {} ms", significant(q)), color));
    percentile_marks(&mut out, marks, 6.5);
    out.push_str("</svg>");
    out
}

/// `v` with three significant digits (gaps span microseconds to seconds).
fn significant(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return "0".into();
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

/// One GPU reading series: per GPU index, `(ms from the window start, value)`.
pub struct GpuSeries {
    pub title: String,
    pub y_label: &'static str,
    pub per_gpu: Vec<(u32, Vec<(f64, f64)>)>,
}

/// A GPU metric over the cell, one line per GPU, window shaded.
pub fn gpu_chart(s: &GpuSeries, window_ms: f64) -> String {
    let series: Vec<Series> = s
        .per_gpu
        .iter()
        .enumerate()
        .map(|(i, (index, points))| Series {
            name: format!("GPU {index}"),
            color: PALETTE[i % PALETTE.len()],
            points: points.clone(),
        })
        .collect();
    linear_time_chart("gpu", &s.title, s.y_label, &series, window_ms)
}

/// One request on the timeline: its stream (row), start, first token and end (ms from the
/// window start; `None` where unknown).
pub struct Span {
    pub stream: u32,
    pub start_ms: f64,
    pub first_token_ms: Option<f64>,
    pub end_ms: Option<f64>,
    pub failed: bool,
}

/// Requests over time, one row per stream: waiting for the first token (light) then producing
/// tokens (dark), with the measurement window `[0, window_ms)` shaded. A request whose end was
/// not recorded (files from older versions) is drawn to the window's end, hatched.
pub fn timeline(title: &str, spans: &[Span], window_ms: f64) -> String {
    let mut out = String::with_capacity(8192);
    open(&mut out, "timeline", title);
    if spans.is_empty() || !window_ms.is_finite() || window_ms <= 0.0 {
        empty(&mut out, "no requests recorded");
        return out;
    }
    let lo = spans
        .iter()
        .map(|s| s.start_ms)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::min);
    let hi = spans
        .iter()
        .filter_map(|s| s.end_ms)
        .filter(|v| v.is_finite())
        .fold(window_ms, f64::max);
    let rows = spans.iter().map(|s| s.stream).max().unwrap_or(0) as f64 + 1.0;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let x_pos = |x: f64| LEFT + plot_w * ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
    let row_h = plot_h / rows;
    let _ = write!(
        out,
        "<rect class=\"window\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{plot_h:.1}\" fill=\"#fff3c4\"/>",
        x_pos(0.0),
        x_pos(window_ms) - x_pos(0.0)
    );
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tk\">measurement window</text>",
        x_pos(window_ms) - 3.0,
        TOP - 3.0
    );
    for s in spans {
        let y = TOP + row_h * s.stream as f64 + row_h * 0.15;
        let h = (row_h * 0.7).max(1.0);
        let end = s.end_ms.unwrap_or(hi);
        let first = s.first_token_ms.unwrap_or(s.start_ms).min(end);
        let (wait_fill, tok_fill) = if s.failed {
            ("#f4b6b6", "#d62728")
        } else {
            ("#c6dbef", "#1f77b4")
        };
        let _ = write!(
            out,
            "<rect class=\"req\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{wait_fill}\"/><rect class=\"req\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{tok_fill}\"{}/>",
            x_pos(s.start_ms),
            (x_pos(first) - x_pos(s.start_ms)).max(0.0),
            x_pos(first),
            (x_pos(end) - x_pos(first)).max(0.5),
            if s.end_ms.is_none() { " fill-opacity=\"0.45\"" } else { " fill-opacity=\"0.8\"" }
        );
    }
    for edge in [0.0, window_ms] {
        let x = x_pos(edge);
        let _ = write!(
            out,
            "<line class=\"edge\" x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#b8860b\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>",
            H - BOTTOM
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" class=\"axis\"/>",
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    seconds_ticks(&mut out, lo, hi, x_pos);
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"al\">s from window start · a row per stream · light: before the first token</text>",
        LEFT + plot_w / 2.0,
        H - 8.0
    );
    out.push_str("</svg>");
    out
}

/// The server's running and waiting requests over the cell, window shaded.
pub fn server_load(title: &str, samples: &[(f64, f64, f64)], window_ms: f64) -> String {
    let running: Vec<(f64, f64)> = samples.iter().map(|s| (s.0, s.1)).collect();
    let waiting: Vec<(f64, f64)> = samples.iter().map(|s| (s.0, s.2)).collect();
    linear_time_chart(
        "load",
        title,
        "requests",
        &[
            Series {
                name: "running".into(),
                color: PALETTE[0],
                points: running,
            },
            Series {
                name: "waiting".into(),
                color: PALETTE[1],
                points: waiting,
            },
        ],
        window_ms,
    )
}

/// Output tokens per second over the whole cell (each bin's tokens / its width), window shaded.
pub fn token_rate(
    title: &str,
    start_ms: f64,
    bin_ms: f64,
    tokens: &[u64],
    window_ms: f64,
) -> String {
    let points = if bin_ms > 0.0 && bin_ms.is_finite() {
        tokens
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                (
                    start_ms + (i as f64 + 0.5) * bin_ms,
                    n as f64 / (bin_ms / 1000.0),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    linear_time_chart(
        "tokens",
        title,
        "output tok/s, all requests",
        &[Series {
            name: "tok/s".into(),
            color: PALETTE[2],
            points,
        }],
        window_ms,
    )
}

fn linear_time_chart(
    class: &str,
    title: &str,
    y_label: &str,
    series: &[Series],
    window_ms: f64,
) -> String {
    let mut out = String::with_capacity(4096);
    open(&mut out, class, title);
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.is_empty() {
        empty(&mut out, "nothing recorded");
        return out;
    }
    let lo = pts.iter().map(|p| p.0).fold(0.0, f64::min);
    let hi = pts.iter().map(|p| p.0).fold(window_ms.max(1.0), f64::max);
    let y_max = nice_ceil(pts.iter().map(|p| p.1).fold(1.0, f64::max));
    let plot_w = W - LEFT - RIGHT;
    let x_pos = |x: f64| LEFT + plot_w * ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
    let _ = write!(
        out,
        "<rect class=\"window\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#fff3c4\"/>",
        x_pos(0.0),
        x_pos(window_ms) - x_pos(0.0),
        H - TOP - BOTTOM
    );
    y_axis(
        &mut out,
        y_max,
        y_label,
        "seconds from the window start",
        tick_text,
    );
    seconds_ticks(&mut out, lo, hi, x_pos);
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            out,
            "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"",
            s.color
        );
        for (x, y) in &s.points {
            let _ = write!(out, "{:.1},{:.1} ", x_pos(*x), y_pos(*y, y_max));
        }
        out.push_str("\"/>");
        let _ = write!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tk\">{}</text>",
            W - RIGHT - 70.0,
            TOP + 4.0 + 14.0 * i as f64,
            s.color,
            W - RIGHT - 56.0,
            TOP + 9.0 + 14.0 * i as f64,
            escape(&s.name)
        );
    }
    out.push_str("</svg>");
    out
}

/// One labelled point of a [`scatter`] chart, in data units.
pub struct Mark {
    pub label: String,
    pub x: f64,
    pub y: f64,
    /// Drawn as an outline: a point off the line (e.g. not on a Pareto front).
    pub hollow: bool,
}

/// Labelled points over linear axes from 0, with a line (class `line_class`) through the filled
/// marks in order of x; hollow marks stand alone. A mark with a non-finite or negative figure
/// (a point without that metric) is left out rather than drawn at a made-up place.
pub fn scatter(
    title: &str,
    x_label: &str,
    y_label: &str,
    marks: &[Mark],
    line_class: &str,
) -> String {
    let mut out = String::with_capacity(4096);
    open(&mut out, "scatter", title);
    let ok = |m: &&Mark| m.x.is_finite() && m.y.is_finite() && m.x >= 0.0 && m.y >= 0.0;
    let shown: Vec<&Mark> = marks.iter().filter(ok).collect();
    if shown.is_empty() {
        empty(&mut out, "no measured figures");
        return out;
    }
    let x_max = nice_ceil(shown.iter().map(|m| m.x).fold(0.0, f64::max));
    let y_max = nice_ceil(shown.iter().map(|m| m.y).fold(0.0, f64::max));
    y_axis(&mut out, y_max, y_label, x_label, tick_text);
    let plot_w = W - LEFT - RIGHT;
    let x_pos = |x: f64| LEFT + plot_w * (x / x_max).clamp(0.0, 1.0);
    for i in 0..=4 {
        let v = x_max * i as f64 / 4.0;
        let px = x_pos(v);
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" class=\"axis\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0,
            escape(&tick_text(v))
        );
    }
    let mut on_line: Vec<&&Mark> = shown.iter().filter(|m| !m.hollow).collect();
    on_line.sort_by(|a, b| a.x.total_cmp(&b.x));
    if on_line.len() > 1 {
        let _ = write!(
            out,
            "<polyline class=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"",
            escape(line_class),
            PALETTE[0]
        );
        for m in &on_line {
            let _ = write!(out, "{:.1},{:.1} ", x_pos(m.x), y_pos(m.y, y_max));
        }
        out.push_str("\"/>");
    }
    for m in &shown {
        let (cx, cy) = (x_pos(m.x), y_pos(m.y, y_max));
        let (class, fill) = if m.hollow {
            ("pt hollow", "none")
        } else {
            ("pt", PALETTE[0])
        };
        let _ = write!(
            out,
            "<circle class=\"{class}\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"4\" fill=\"{fill}\" stroke=\"{}\" stroke-width=\"1.5\"><title>{}: {}, {}</title></circle><text x=\"{:.1}\" y=\"{:.1}\" class=\"tk lbl\">{}</text>",
            PALETTE[0],
            escape(&m.label),
            escape(&tick_text((m.x * 100.0).round() / 100.0)),
            escape(&tick_text((m.y * 10.0).round() / 10.0)),
            cx + 6.0,
            cy - 6.0,
            escape(&m.label)
        );
    }
    out.push_str("</svg>");
    out
}

/// One probe of a load–latency chart: a load, the objective's estimate there and its
/// confidence interval (an end `None` is open: no sample reaches it), and the probe's verdict
/// (`pass`, `fail`, `not_yet`, `client_bound`).
pub struct IntervalPoint {
    pub x: f64,
    pub estimate: Option<f64>,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub verdict: String,
    /// A second figure at the load, drawn as an open circle: the figure the estimate is held
    /// to there (by rate, the arrivals per second the completions are held to).
    pub reference: Option<f64>,
}

/// The line an interval chart's estimates are held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Guide {
    /// One threshold at every load: a dashed horizontal line.
    Threshold(f64),
    /// The load itself (y = x): completions per second against the offered rate.
    Diagonal,
}

/// A verdict's colour: pass green, fail red, client-bound blue, undecided orange.
pub fn verdict_color(v: &str) -> &'static str {
    match v {
        "pass" => PALETTE[2],
        "fail" => PALETTE[1],
        "client_bound" => PALETTE[0],
        _ => PALETTE[4],
    }
}

/// An objective against the load over linear axes from 0: the curve through each load's last
/// estimate, every probe's estimate with its interval as a bar coloured by its verdict (an
/// open end drawn to the frame, dashed) and its reference figure as an open circle, the guide
/// (a threshold, or y = x) as a dashed line, and the answer (the largest passing load) as a
/// vertical line. Each probe is a `<g class="probe">` carrying its figures as `data-*`
/// attributes, exactly as given.
pub fn intervals(
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[IntervalPoint],
    guide: Guide,
    answer: Option<f64>,
) -> String {
    let mut out = String::with_capacity(4096);
    open(&mut out, "intervals", title);
    let fin = |v: Option<f64>| v.filter(|v| v.is_finite());
    let shown: Vec<&IntervalPoint> = points
        .iter()
        .filter(|p| p.x.is_finite() && p.x >= 0.0)
        .collect();
    if shown.is_empty() {
        empty(&mut out, "no probe");
        return out;
    }
    let x_max = nice_ceil(shown.iter().map(|p| p.x).fold(0.0, f64::max));
    let guide_top = match guide {
        Guide::Threshold(t) => t * 1.25,
        Guide::Diagonal => x_max,
    };
    let y_top = shown
        .iter()
        .flat_map(|p| [fin(p.estimate), fin(p.hi), fin(p.lo), fin(p.reference)])
        .flatten()
        .chain([guide_top])
        .fold(0.0, f64::max);
    let y_max = nice_ceil(y_top);
    y_axis(&mut out, y_max, y_label, x_label, tick_text);
    let plot_w = W - LEFT - RIGHT;
    let x_pos = |x: f64| LEFT + plot_w * (x / x_max).clamp(0.0, 1.0);
    for i in 0..=4 {
        let v = x_max * i as f64 / 4.0;
        let px = x_pos(v);
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" class=\"axis\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tk\">{}</text>",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0,
            escape(&tick_text(v))
        );
    }
    // The guide, then the answer, under the points.
    match guide {
        Guide::Threshold(threshold) => {
            let ty = y_pos(threshold, y_max);
            let _ = write!(
                out,
                "<line class=\"threshold\" x1=\"{LEFT}\" y1=\"{ty:.1}\" x2=\"{:.1}\" y2=\"{ty:.1}\" stroke=\"#444\" stroke-dasharray=\"6 4\" data-v=\"{threshold}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tk\">threshold {}</text>",
                W - RIGHT,
                W - RIGHT,
                ty - 4.0,
                escape(&tick_text(threshold))
            );
        }
        Guide::Diagonal => {
            // y_max >= x_max, so the line ends at the right edge, inside the frame.
            let (x1, y1) = (x_pos(x_max), y_pos(x_max, y_max));
            let _ = write!(
                out,
                "<line class=\"diagonal\" x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{y1:.1}\" stroke=\"#444\" stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tk\">as offered</text>",
                H - BOTTOM,
                x1,
                y1 - 4.0,
            );
        }
    }
    if let Some(a) = answer.filter(|a| a.is_finite()) {
        let ax = x_pos(a);
        let _ = write!(
            out,
            "<line class=\"answer\" x1=\"{ax:.1}\" y1=\"{TOP}\" x2=\"{ax:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\" data-v=\"{a}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tk\">answer {}</text>",
            H - BOTTOM,
            PALETTE[2],
            ax + 4.0,
            TOP + 10.0,
            escape(&tick_text(a))
        );
    }
    // The curve: each load's last estimate (a repeated probe speaks for its load), by load.
    let mut curve: Vec<(f64, f64)> = Vec::new();
    for p in &shown {
        if let Some(e) = fin(p.estimate) {
            curve.retain(|c| c.0 != p.x);
            curve.push((p.x, e));
        }
    }
    curve.sort_by(|a, b| a.0.total_cmp(&b.0));
    if curve.len() > 1 {
        let _ = write!(
            out,
            "<polyline class=\"line\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.5\" points=\""
        );
        for (x, y) in &curve {
            let _ = write!(out, "{:.1},{:.1} ", x_pos(*x), y_pos(*y, y_max));
        }
        out.push_str("\"/>");
    }
    let attr = |v: Option<f64>| fin(v).map_or(String::new(), |v| v.to_string());
    for p in &shown {
        let color = verdict_color(&p.verdict);
        let px = x_pos(p.x);
        let reference =
            fin(p.reference).map_or(String::new(), |r| format!(" data-reference=\"{r}\""));
        let _ = write!(
            out,
            "<g class=\"probe\" data-x=\"{}\" data-estimate=\"{}\" data-lo=\"{}\" data-hi=\"{}\" data-verdict=\"{}\"{reference}>",
            p.x,
            attr(p.estimate),
            attr(p.lo),
            attr(p.hi),
            escape(&p.verdict)
        );
        if let Some(r) = fin(p.reference) {
            let _ = write!(
                out,
                "<circle class=\"ref\" cx=\"{px:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"none\" stroke=\"#444\" stroke-width=\"1.5\"><title>{} at {}</title></circle>",
                y_pos(r, y_max),
                escape(&tick_text((r * 100.0).round() / 100.0)),
                escape(&tick_text(p.x)),
            );
        }
        let (lo, hi) = (fin(p.lo), fin(p.hi));
        if lo.is_some() || hi.is_some() {
            let y1 = y_pos(lo.unwrap_or(0.0), y_max);
            let y2 = y_pos(hi.unwrap_or(y_max), y_max);
            let dash = if lo.is_none() || hi.is_none() {
                " stroke-dasharray=\"3 2\""
            } else {
                ""
            };
            let _ = write!(
                out,
                "<line class=\"ci\" x1=\"{px:.1}\" y1=\"{y1:.1}\" x2=\"{px:.1}\" y2=\"{y2:.1}\" stroke=\"{color}\" stroke-width=\"1.5\"{dash}/>"
            );
            for (end, y) in [(lo, y1), (hi, y2)] {
                if end.is_some() {
                    let _ = write!(
                        out,
                        "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"1.5\"/>",
                        px - 4.0,
                        px + 4.0
                    );
                }
            }
        }
        if let Some(e) = fin(p.estimate) {
            let text = |v: Option<f64>| {
                fin(v).map_or("open".to_string(), |v| {
                    tick_text((v * 100.0).round() / 100.0)
                })
            };
            let _ = write!(
                out,
                "<circle class=\"pt\" cx=\"{px:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{color}\"><title>{} at {}: {} [{}, {}]</title></circle>",
                y_pos(e, y_max),
                escape(&p.verdict),
                escape(&tick_text(p.x)),
                escape(&text(Some(e))),
                escape(&text(p.lo)),
                escape(&text(p.hi))
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_that_would_overlap_are_left_out() {
        // 28K and 32K side by side (the prefill chart's contexts): 100 px apart suits all,
        // 10 px apart prints one.
        let w = [30.0; 4];
        assert_eq!(
            labels_that_fit(&[0.0, 100.0, 200.0, 300.0], &w),
            [true, true, true, true]
        );
        assert_eq!(
            labels_that_fit(&[0.0, 100.0, 290.0, 300.0], &w),
            [true, true, false, true],
            "the last is kept, the one it would overlap is not"
        );
        assert_eq!(
            labels_that_fit(&[0.0, 10.0, 20.0, 100.0], &w),
            [true, false, false, true]
        );
        // Exactly touching is allowed: edges at 15.
        assert_eq!(labels_that_fit(&[0.0, 30.0], &[30.0, 30.0]), [true, true]);
        assert_eq!(labels_that_fit(&[0.0, 29.0], &[30.0, 30.0]), [true, false]);
        assert_eq!(labels_that_fit(&[5.0], &[30.0]), [true]);
        assert_eq!(labels_that_fit(&[], &[]), Vec::<bool>::new());
        // The last replaces two it overlaps, not one before them that it clears.
        assert_eq!(
            labels_that_fit(&[0.0, 40.0, 80.0, 100.0, 105.0], &[30.0; 5]),
            [true, true, false, false, true]
        );
    }

    #[test]
    fn nice_ceil_rounds_up_to_a_round_number() {
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(7.0), 10.0);
        assert_eq!(nice_ceil(10.0), 10.0);
        assert_eq!(nice_ceil(11.0), 20.0);
        assert_eq!(nice_ceil(2_300.0), 2_500.0);
        assert_eq!(nice_ceil(0.3), 0.5);
        assert_eq!(nice_ceil(f64::NAN), 1.0);
    }

    #[test]
    fn the_cdf_marks_numpy_percentiles() {
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        let svg = cdf("t", "ms", &v);
        // numpy: p50 of 1..=101 is 51, p90 is 91, p99 is 100.
        assert!(svg.contains(">p50 51<"), "{svg}");
        assert!(svg.contains(">p90 91<"));
        assert!(svg.contains(">p99 100<"));
        // A narrow range keeps the marks apart: numpy's p50 of these is 1.655, p99 1.6599.
        let narrow = cdf("t", "ms", &[1.650, 1.652, 1.655, 1.658, 1.660]);
        assert!(narrow.contains(">p50 1.6550<"), "{narrow}");
        assert!(narrow.contains(">p99 1.6599<"), "{narrow}");
        assert_eq!(svg.matches("class=\"pct\"").count(), 3);
    }

    #[test]
    fn the_gap_histogram_draws_each_filled_bin_and_the_exact_percentiles() {
        let mut counts = vec![0u64; 80];
        counts[50] = 4;
        counts[53] = 1;
        let h = GapHistogram {
            lo_us: 1.0,
            bins_per_decade: 10,
            counts,
            gaps: 5,
            p50_ms: 100.0,
            p90_ms: 160.0,
            p99_ms: 196.0,
        };
        let svg = gap_histogram("t", &h);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2, "{svg}");
        assert!(svg.contains("100 – 125.89 ms: 4 gaps"), "{svg}");
        assert!(
            svg.contains(">p50 100 ms<") && svg.contains(">p90 160 ms<"),
            "{svg}"
        );
        assert!(svg.contains(">p99 196 ms<"), "{svg}");
        assert_eq!(svg.matches("class=\"pct\"").count(), 3);
        // Decade ticks in their own unit.
        assert!(
            svg.contains(">100 ms<") && svg.contains(">200 ms<"),
            "ticks: {svg}"
        );
        let none = gap_histogram(
            "t",
            &GapHistogram {
                counts: vec![0; 80],
                gaps: 0,
                ..h
            },
        );
        assert!(none.contains("no gap inside the window"));
    }

    #[test]
    fn gap_ticks_read_in_their_unit() {
        assert_eq!(time_text(1.0), "1 µs");
        assert_eq!(time_text(100.0), "100 µs");
        assert_eq!(time_text(1000.0), "1 ms");
        assert_eq!(time_text(999.999_999_9), "1 ms");
        assert_eq!(time_text(20_000.0), "20 ms");
        assert_eq!(time_text(1e5), "100 ms");
        assert_eq!(time_text(1e6), "1 s");
        assert_eq!(time_text(5e6), "5 s");
        assert_eq!(time_text(1e8), "100 s");
        assert_eq!(significant(0.01234), "0.0123");
        assert_eq!(significant(12.345), "12.3");
        assert_eq!(significant(1234.6), "1235");
    }

    #[test]
    fn a_log_chart_ticks_every_x_and_escapes_names() {
        let c = LogXChart {
            title: "a<b",
            x_label: "x",
            y_label: "y",
            series: vec![Series {
                name: "<ctx>".into(),
                color: PALETTE[0],
                points: vec![(1.0, 100.0), (2.0, 200.0), (8.0, 150.0)],
            }],
            samples: vec![],
            x_tick: |x| format!("{x}"),
        }
        .render();
        assert!(c.contains("a&lt;b") && !c.contains("a<b"));
        assert!(!c.contains("<ctx>"));
        assert_eq!(c.matches("class=\"pt\"").count(), 3);
        // 1, 2 and 8 ticked; 4 not (ticks are the data's own x values).
        for t in [">1<", ">2<", ">8<"] {
            assert!(c.contains(t), "{t}");
        }
        assert!(!c.contains(">4<"));
    }
}
