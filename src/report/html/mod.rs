//! `report.html`: one self-contained page for a matrix run — header and settings, the decode
//! heat map beside total and per-request tok/s curves, prefill against context, every measured
//! cell's details on demand (`<details>`), the client's overhead and lag (the Client-bound
//! verdict with its reasons and the bound on each figure, as `analysis::client_lag` decided
//! them), the methodology and the status legend.
//!
//! The page is laid out by a minijinja template (`report.html` beside this file, HTML
//! auto-escaped) filled with a view built here from the report model; charts are inline SVG
//! drawn by [`charts`] and [`crate::report::svg`]. Nothing on the page loads anything: no
//! scripts, fonts, styles or images from elsewhere, and the one inline script only opens every
//! cell when the address carries `?open`. The server's base URL is shown as text, never a link.
//! Like the other writers it draws what the model holds and decides no verdict.

pub mod bench;
pub mod capacity;
pub mod charts;
pub mod sweep;

use crate::report::client_lag::{BoundedMs, ClientLagFigures, LagSpread};
use crate::report::format::{group_digits, ms, one_decimal, opt, rate, seconds, MISSING};
use crate::report::header::{duration_text, RunHeader};
use crate::report::markdown::row_labels;
use crate::report::model::{DecodeCell, GpuSample, Hardware, MatrixReport};
use crate::report::status::CellStatus;
use charts::{GpuSeries, LogXChart, Series, Span, PALETTE};
use minijinja::{context, Environment, Value};
use std::io::{self, Write};

const REPORT_TEMPLATE: &str = include_str!("report.html");
const COMPARE_TEMPLATE: &str = include_str!("compare.html");
const HEADER_TEMPLATE: &str = include_str!("header.html");
const STYLE: &str = include_str!("style.css");

/// A cell's token count is flagged when the client's differs from the server's by more than
/// this share (a counting disagreement, not the client's lag: that is the Client-bound verdict).
pub const TOKEN_DIFF_LIMIT: f64 = 0.01;

/// The flag on a cell whose client and server counted tokens differently by over
/// [`TOKEN_DIFF_LIMIT`]; `None` when they agree or there is no server count.
pub fn token_count_flag(c: &DecodeCell) -> Option<String> {
    let (diff, server) = (c.token_count_diff?, c.server_output_tokens?);
    (server > 0 && (diff.unsigned_abs() as f64) > TOKEN_DIFF_LIMIT * server as f64).then(|| {
        format!(
            "client counted {diff:+} tokens against the server's {} (over {:.0}%)",
            group_digits(server),
            TOKEN_DIFF_LIMIT * 100.0
        )
    })
}

/// A lag or bound in ms to the µs: `0.020 ms`, `12.345 ms` (grouped from 100 ms up).
fn fine_ms(x: f64) -> String {
    if x.is_finite() && x < 100.0 {
        format!("{x:.3} ms")
    } else {
        ms(x)
    }
}

/// A figure with its bound: `9.900 ± 0.020 ms`.
fn bounded(b: Option<BoundedMs>) -> String {
    opt(b, |b| format!("{:.3} ± {}", b.value, fine_ms(b.bound)))
}

/// The verdict on the client's lag in words, from the cell's figures (`client_lag`): what
/// `analysis::client_lag` decided, never decided here.
fn lag_verdict(l: &ClientLagFigures) -> String {
    if l.client_bound {
        "Client-bound: its figures are not trustworthy at the precision printed".into()
    } else if let Some(why) = &l.upstream_batching_reason {
        format!("upstream batching: {why}")
    } else if let Some(why) = &l.no_bound_reason {
        why.clone()
    } else if l.gaps > 0 && l.bounds_ms.itl_p50.is_none() {
        "no bound: the reads carry the client's own clock (TLS, --no-kernel-stamps, not Linux)"
            .into()
    } else {
        "kept up: each printed figure is known within its bound's share".into()
    }
}

/// The cell's client-lag table: the verdict, the lag figures and the bound on each figure.
fn lag_rows(l: &ClientLagFigures) -> Vec<(&'static str, String)> {
    let us = |v: f64| format!("{} µs", one_decimal(v));
    let pct = |v: f64| format!("{}%", one_decimal(v));
    let spread = |s: Option<LagSpread>, f: &dyn Fn(f64) -> String| {
        opt(s, |s| format!("{} / {} / {}", f(s.p50), f(s.p99), f(s.max)))
    };
    let b = &l.bounds_ms;
    vec![
        ("Verdict", lag_verdict(l)),
        ("Read lag p50 / p99 / max", spread(l.read_lag_us, &us)),
        (
            "Tokens per read, mean / max",
            format!(
                "{} / {}",
                opt(l.tokens_per_read_mean, |v| format!("{v:.2}")),
                opt(l.tokens_per_read_max, |v| format!("{v:.0}"))
            ),
        ),
        (
            "Reads with several tokens",
            opt(l.reads_with_several_tokens_percent, pct),
        ),
        (
            "Reads that left data in the socket",
            opt(l.reads_left_data_percent, pct),
        ),
        (
            "Bytes in the socket at a read, p50 / p99 / max",
            spread(l.socket_bytes_at_read, &|v| format!("{v:.0} B")),
        ),
        (
            "Dispatch lag p50 / p99 / max",
            spread(l.dispatch_lag_ms, &fine_ms),
        ),
        (
            "Late / connection / write, p99",
            format!(
                "{} / {} / {}",
                opt(l.dispatch_late_ms_p99, fine_ms),
                opt(l.dispatch_connect_ms_p99, fine_ms),
                opt(l.dispatch_write_ms_p99, fine_ms)
            ),
        ),
        (
            "Client CPU",
            opt(l.client_cpu_percent_of_cores, |v| {
                format!("{} of {} core(s)", pct(v), l.cores.unwrap_or(0))
            }),
        ),
        (
            "Gaps read apart / merged / unbounded",
            format!(
                "{} / {} / {} of {}",
                opt(l.gaps_apart_percent, pct),
                opt(l.gaps_merged_percent, pct),
                opt(l.gaps_unbounded_percent, pct),
                group_digits(l.gaps)
            ),
        ),
        ("Gap p50 (bound)", bounded(b.itl_p50)),
        ("Gap p99 (bound)", bounded(b.itl_p99)),
        ("Gap mean (bound)", bounded(b.itl_mean)),
        (
            "TTFT p50 from the intended start (bound)",
            bounded(b.ttft_p50),
        ),
        (
            "TTFT p99 from the intended start (bound)",
            bounded(b.ttft_p99),
        ),
        ("Time per token p50 (bound)", bounded(b.tpot_p50)),
        ("Time per token p99 (bound)", bounded(b.tpot_p99)),
        (
            "Total tok/s (bound)",
            opt(l.throughput_bound_percent, |v| format!("± {}", pct(v))),
        ),
    ]
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Templates are compiled in; a syntax error is a bug that the tests catch.
    env.add_template("report.html", REPORT_TEMPLATE)
        .expect("report.html template parses");
    env.add_template("compare.html", COMPARE_TEMPLATE)
        .expect("compare.html template parses");
    env.add_template("header.html", HEADER_TEMPLATE)
        .expect("header.html template parses");
    env
}

fn render(w: &mut impl Write, name: &str, ctx: Value) -> io::Result<()> {
    let env = environment();
    let html = env
        .get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| io::Error::other(format!("rendering {name}: {e:#}")))?;
    w.write_all(html.as_bytes())
}

/// Inline SVG: the namespace attribute is implied inside HTML, and leaving it out keeps the
/// page free of any address at all.
fn inline_svg(svg: String) -> Value {
    Value::from_safe_string(svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", ""))
}

/// `8K`, `128K`, `1M` for a context in tokens (binary thousands, as the labels are).
fn context_tick(x: f64) -> String {
    crate::report::header::context_label(x.round() as u64)
}

fn concurrency_tick(x: f64) -> String {
    format!("{}", x.round() as u64)
}

/// The run's header, the one drawing every page uses: what was measured, then `aside` (a
/// page's own panel, e.g. the measured machine), then the settings. `slot` suffixes its ids
/// (`header`, `run`, `settings`) where a page shows several runs' headers.
pub fn run_header(h: &RunHeader, aside: &str, slot: &str) -> String {
    let not_recorded = |v: &Option<String>| v.clone().unwrap_or_else(|| "not recorded".into());
    let ctx = context! {
        h => context! {
            kind => h.kind, model => h.model, model_detail => h.model_detail,
            engine_detail => h.engine_detail, launch_command => h.launch_command,
            server => h.server, interrupted => h.interrupted, notes => h.notes,
            settings => h.settings,
        },
        engine => not_recorded(&h.engine),
        hardware => not_recorded(&h.hardware),
        tool => not_recorded(&h.tool),
        date => not_recorded(&h.date),
        duration => h.duration_s.map_or_else(|| "not recorded".to_string(), duration_text),
        aside => Value::from_safe_string(aside.to_string()),
        slot => slot,
    };
    environment()
        .get_template("header.html")
        .and_then(|t| t.render(ctx))
        .expect("header.html renders: its context is built here")
}

/// The stylesheet every page shares, for pages drawn outside the templates.
pub fn style() -> &'static str {
    STYLE
}

/// The measured machine panel: the client machine and the GPUs its tool listed, or why none
/// were (`None` for results written before the machine was measured).
fn machine(h: &Hardware) -> Option<Vec<(String, String)>> {
    if h.client.is_none() && h.gpu_source.is_none() && h.gpus.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    if let Some(c) = &h.client {
        let not_reported = || "not reported".to_string();
        out.push((
            "CPU".into(),
            c.cpu_model.clone().unwrap_or_else(not_reported),
        ));
        out.push(("Logical CPUs".into(), opt(c.cpu_logical, group_digits)));
        out.push((
            "Memory".into(),
            opt(c.memory_gib, |g| format!("{} GiB", one_decimal(g))),
        ));
        out.push(("OS".into(), c.os.clone().unwrap_or_else(not_reported)));
        out.push((
            "Kernel".into(),
            [c.kernel.clone(), c.arch.clone()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" · "),
        ));
    }
    for g in &h.gpus {
        out.push((
            format!("GPU {}", g.index),
            match g.memory_total_mib {
                Some(m) => format!("{} · {} GiB", g.name, one_decimal(m / 1024.0)),
                None => g.name.clone(),
            },
        ));
    }
    // "nvidia-smi", or "absent: why" said as it was recorded, never guessed.
    out.push((
        "GPUs listed by".into(),
        h.gpu_source.clone().unwrap_or_else(|| MISSING.to_string()),
    ));
    for (_, v) in out.iter_mut() {
        if v.is_empty() {
            *v = MISSING.to_string();
        }
    }
    Some(out)
}

/// The machine panel as HTML, for the header's aside.
fn machine_panel(h: &Hardware) -> String {
    use crate::report::svg::escape;
    let Some(rows) = machine(h) else {
        return "<p class=\"muted\" id=\"machine\">The machine was not measured (results from an older version).</p>".into();
    };
    let mut out = String::from("<table class=\"kv\" id=\"machine\">\n<tr><th colspan=\"2\">Machine (measured: the machine llmspeed ran on)</th></tr>\n");
    for (k, v) in rows {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td></tr>\n",
            escape(&k),
            escape(&v)
        ));
    }
    out.push_str("</table>");
    out
}

/// One figure of a GPU reading (`None` where the tool did not report it).
type GpuReading = fn(&GpuSample) -> Option<f64>;

/// The GPU readings of a cell as charts (utilisation, memory, power, clock), one line per GPU,
/// on the window's time axis. The sampler's times count from the cell's start, which is just
/// before its streams' first sends: the earliest request start stands for it.
fn gpu_charts(c: &DecodeCell, title: &str, window_ms: f64) -> Vec<Value> {
    if c.gpu_samples.is_empty() {
        return Vec::new();
    }
    let cell_start_ms = c
        .requests
        .iter()
        .map(|q| q.start_ms)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::min);
    let metrics: [(&str, &'static str, GpuReading); 4] = [
        ("GPU utilisation", "utilisation, %", |s| s.utilization_pct),
        ("GPU memory used", "MiB", |s| s.memory_used_mib),
        ("GPU power", "W", |s| s.power_w),
        ("GPU SM clock", "MHz", |s| s.sm_clock_mhz),
    ];
    let mut indexes: Vec<u32> = c.gpu_samples.iter().map(|s| s.index).collect();
    indexes.sort_unstable();
    indexes.dedup();
    metrics
        .iter()
        .filter_map(|(name, unit, f)| {
            let per_gpu: Vec<(u32, Vec<(f64, f64)>)> = indexes
                .iter()
                .map(|&i| {
                    let pts = c
                        .gpu_samples
                        .iter()
                        .filter(|s| s.index == i)
                        .filter_map(|s| f(s).map(|v| (cell_start_ms + s.t_s * 1000.0, v)))
                        .collect();
                    (i, pts)
                })
                .filter(|(_, p): &(u32, Vec<(f64, f64)>)| !p.is_empty())
                .collect();
            // A metric no GPU reported ("[N/A]" throughout) gets no empty chart.
            (!per_gpu.is_empty()).then(|| {
                Value::from_safe_string(charts::gpu_chart(
                    &GpuSeries {
                        title: format!("{name}, {title}"),
                        y_label: unit,
                        per_gpu,
                    },
                    window_ms,
                ))
            })
        })
        .collect()
}

/// Total and per-request tok/s against concurrency, one line per context with figures.
fn decode_curves(r: &MatrixReport) -> (String, String) {
    let rows = row_labels(r);
    let series = |f: fn(&DecodeCell) -> Option<f64>| -> Vec<Series> {
        rows.iter()
            .enumerate()
            .map(|(i, label)| Series {
                name: (*label).to_string(),
                color: PALETTE[i % PALETTE.len()],
                points: r
                    .decode
                    .iter()
                    .filter(|c| c.context_label == *label && c.status.was_run())
                    .filter_map(|c| f(c).map(|v| (c.concurrency as f64, v)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let total = LogXChart {
        title: "Total tok/s against concurrency",
        x_label: "simultaneous requests (log₂)",
        y_label: "output tok/s, all requests",
        series: series(|c| c.output_tok_per_s),
        samples: vec![],
        x_tick: concurrency_tick,
    }
    .render();
    let per = LogXChart {
        title: "Per-request tok/s against concurrency",
        x_label: "simultaneous requests (log₂)",
        y_label: "tok/s per request (median)",
        series: series(|c| c.per_request_tok_per_s),
        samples: vec![],
        x_tick: concurrency_tick,
    }
    .render();
    (total, per)
}

/// Prefill tok/s and TTFT against context; every sample shown where there are several.
fn prefill_curves(r: &MatrixReport) -> (String, String) {
    let run = || r.prefill.iter().filter(|p| p.status.was_run());
    let tps = LogXChart {
        title: "Prefill tok/s against context",
        x_label: "prompt tokens (log₂)",
        y_label: "prompt tok/s (median)",
        series: vec![Series {
            name: "prefill".into(),
            color: PALETTE[0],
            points: run()
                .filter_map(|p| p.prefill_tok_per_s.map(|v| (p.context as f64, v)))
                .collect(),
        }],
        samples: run()
            .filter(|p| p.ttft_ms_samples.len() > 1)
            .flat_map(|p| {
                let n = p.prompt_tokens.unwrap_or(p.context) as f64;
                p.ttft_ms_samples
                    .iter()
                    .filter(|t| **t > 0.0)
                    .map(move |t| (p.context as f64, n / (t / 1000.0)))
            })
            .collect(),
        x_tick: context_tick,
    }
    .render();
    let ttft = LogXChart {
        title: "Cold TTFT against context",
        x_label: "prompt tokens (log₂)",
        y_label: "TTFT, ms (median)",
        series: vec![Series {
            name: "TTFT".into(),
            color: PALETTE[4],
            points: run()
                .filter_map(|p| p.ttft_ms.map(|v| (p.context as f64, v)))
                .collect(),
        }],
        samples: run()
            .filter(|p| p.ttft_ms_samples.len() > 1)
            .flat_map(|p| p.ttft_ms_samples.iter().map(|t| (p.context as f64, *t)))
            .collect(),
        x_tick: context_tick,
    }
    .render();
    (tps, ttft)
}

fn cell_view(c: &DecodeCell) -> Value {
    let title = format!("{} × {}", c.context_label, c.concurrency);
    let ttfts: Vec<f64> = c.requests.iter().filter_map(|q| q.ttft_ms).collect();
    let tbts: Vec<f64> = c.requests.iter().filter_map(|q| q.tbt_ms_mean).collect();
    let spans: Vec<Span> = c
        .requests
        .iter()
        .map(|q| Span {
            stream: q.stream,
            start_ms: q.start_ms,
            first_token_ms: q.ttft_ms.map(|t| q.start_ms + t),
            end_ms: q.end_ms,
            failed: q.error.is_some(),
        })
        .collect();
    let window_ms = c.measured_s.unwrap_or(0.0) * 1000.0;
    let samples: Vec<(f64, f64, f64)> = c
        .server_samples
        .iter()
        .map(|s| (s.t_ms, s.running, s.waiting))
        .collect();
    let mut figures = vec![
        ("Total tok/s", opt(c.output_tok_per_s, rate)),
        ("Per-request tok/s", opt(c.per_request_tok_per_s, rate)),
        ("TTFT p50", opt(c.ttft_ms_p50, ms)),
        ("Time between tokens p50", opt(c.tbt_ms_p50, ms)),
        (
            "Average active requests",
            opt(c.avg_active_requests, one_decimal),
        ),
        (
            "Completed requests",
            opt(c.completed_requests, group_digits),
        ),
        (
            "Output tokens in the window",
            opt(c.output_tokens, group_digits),
        ),
        ("Window", opt(c.measured_s, seconds)),
    ];
    // The prompt's size as the server counted it (images included, with `--images`).
    if let Some(p) = c.server_prompt_tokens {
        figures.push(("Prompt tokens (server usage)", group_digits(p)));
    }
    let overhead = vec![
        (
            "Client CPU",
            opt(c.client_cpu_percent, |v| {
                format!("{}% of one core", one_decimal(v))
            }),
        ),
        (
            "Timer lag p99 / max",
            format!(
                "{} / {}",
                opt(c.timer_lag_ms_p99, ms),
                opt(c.timer_lag_ms_max, ms)
            ),
        ),
        (
            "Token count source",
            opt(c.token_count_source, |s| s.as_str().to_string()),
        ),
        (
            "Server's token count",
            opt(c.server_output_tokens, group_digits),
        ),
        (
            "Client − server tokens",
            opt(c.token_count_diff, |d| format!("{d:+}")),
        ),
    ];
    let errors: Vec<String> = c.error_messages.iter().map(|e| e.display()).collect();
    context! {
        id => format!("cell-{}-{}", c.context, c.concurrency),
        title => title,
        status => if c.interrupted { format!("{} · interrupted", c.status.label()) } else { c.status.label().to_string() },
        status_kind => c.status.as_str(),
        figures => figures,
        overhead => overhead,
        token_count_check => c.token_count_check,
        count_flag => token_count_flag(c),
        client_lag => c.client_lag.as_ref().map(lag_rows),
        client_bound => c.client_lag.as_ref().is_some_and(|l| l.client_bound),
        client_bound_reasons => c.client_lag.as_ref().map(|l| l.client_bound_reasons.clone()).unwrap_or_default(),
        notes => c.notes,
        errors => errors,
        loop_excerpt => c.loop_info.as_ref().map(|l| l.excerpt.clone()),
        requests => c.requests.len(),
        ttft_cdf => Value::from_safe_string(charts::cdf(&format!("TTFT, {title}"), "ms from send to first token", &ttfts)),
        tbt_cdf => Value::from_safe_string(match &c.gap_histogram {
            Some(h) => charts::gap_histogram(&format!("Time between tokens, {title}"), h),
            None => charts::cdf(&format!("Time between tokens, {title}"), "ms per token, per-request mean", &tbts),
        }),
        tbt_is_histogram => c.gap_histogram.is_some(),
        gap_count => c.gap_histogram.as_ref().map(|h| group_digits(h.gaps)),
        gpu => gpu_charts(c, &title, window_ms),
        timeline => Value::from_safe_string(charts::timeline(&format!("Requests over time, {title}"), &spans, window_ms)),
        tokens => c.token_bins.as_ref().map(|b| Value::from_safe_string(charts::token_rate(&format!("Tokens over time, {title}"), b.start_ms, b.bin_ms, &b.tokens, window_ms))),
        server_load => (!samples.is_empty()).then(|| Value::from_safe_string(charts::server_load(&format!("Server load, {title}"), &samples, window_ms))),
    }
}

/// The status legend: every status with what it means.
pub(crate) fn legend() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "valid",
            "Valid",
            "measured at the intended concurrency; figures stand",
        ),
        (
            "looped",
            "Looped",
            "a stream repeated itself; figures kept and marked",
        ),
        (
            "queued",
            "Queued",
            "the server never ran all C requests at once; figures kept and marked",
        ),
        (
            "client_bound",
            "Client-bound",
            "the client's own lag made the figures untrustworthy (the reasons and the bounds are in the cell's details); figures kept and marked",
        ),
        (
            "failed",
            "Failed",
            "requests failed (the first message per kind is listed)",
        ),
        (
            "over_capacity",
            "Over capacity",
            "not run: C × (context + max_tokens) exceeds the KV cache, or C the running limit",
        ),
        (
            "skipped",
            "Skipped",
            "not run: context + max_tokens exceeds max_model_len",
        ),
        ("pending", "Pending", "planned, not run (yet)"),
    ]
}

/// `matrix --slo`'s table as the page shows it.
fn slo_view(t: &crate::report::model::SloTable) -> Value {
    let rows: Vec<Value> = t
        .rows
        .iter()
        .map(|r| {
            let cells: Vec<Value> = r
                .cells
                .iter()
                .map(|c| {
                    let detail: Vec<String> = c
                        .objectives
                        .iter()
                        .map(|j| {
                            let f = |v: Option<f64>| {
                                v.map_or("open".to_string(), |v| format!("{v:.3}"))
                            };
                            format!(
                                "{} {} [{}, {}] {} (n={})",
                                j.key,
                                f(j.estimate),
                                f(j.lo),
                                f(j.hi),
                                j.verdict,
                                j.samples
                            )
                        })
                        .collect();
                    context! {
                        concurrency => c.concurrency,
                        verdict => c.verdict.replace('_', " "),
                        detail => detail.join("; "),
                    }
                })
                .collect();
            context! {
                context => r.context,
                label => r.context_label,
                largest_v => r.largest_concurrency.map_or(String::new(), |v| v.to_string()),
                largest => r.largest_concurrency.map_or("none".to_string(), |v| v.to_string()),
                failing_v => r.smallest_failing_concurrency.map_or(String::new(), |v| v.to_string()),
                failing => r.smallest_failing_concurrency.map_or("none found".to_string(), |v| v.to_string()),
                failed => r.failed_objective,
                note => r.note,
                cells => cells,
            }
        })
        .collect();
    context! {
        objectives => t.objectives.join(", "),
        confidence => crate::report::html::charts::tick_text(t.confidence * 100.0),
        rows => rows,
    }
}

/// Write `report.html` for `r`.
pub fn write(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let mut heat = Vec::with_capacity(16 * 1024);
    crate::report::svg::write_decode(&mut heat, r)?;
    let heat = String::from_utf8(heat).map_err(io::Error::other)?;
    let (total, per) = decode_curves(r);
    let (pre_tps, pre_ttft) = prefill_curves(r);
    let cells: Vec<Value> = r
        .decode
        .iter()
        .filter(|c| c.status.was_run() && !matches!(c.status, CellStatus::Pending))
        .map(cell_view)
        .collect();
    let client_bound = r
        .decode
        .iter()
        .filter(|c| c.client_lag.as_ref().is_some_and(|l| l.client_bound))
        .count();
    let prefill_rows: Vec<Value> = r
        .prefill
        .iter()
        .map(|p| {
            context! {
                label => p.context_label,
                status => p.status.label(),
                status_kind => p.status.as_str(),
                prompt_tokens => opt(p.prompt_tokens, group_digits),
                tps => opt(p.prefill_tok_per_s, rate),
                ttft => opt(p.ttft_ms, ms),
                samples => p.ttft_ms_samples.iter().map(|t| ms(*t)).collect::<Vec<_>>().join(", "),
            }
        })
        .collect();
    let ctx = context! {
        style => Value::from_safe_string(STYLE.to_string()),
        title => RunHeader::matrix(r).title(),
        run_header => Value::from_safe_string(run_header(&RunHeader::matrix(r), &machine_panel(&r.metadata.hardware), "")),
        interrupted => r.metadata.interrupted,
        heatmap => inline_svg(heat),
        total_curve => Value::from_safe_string(total),
        per_request_curve => Value::from_safe_string(per),
        prefill_tps => Value::from_safe_string(pre_tps),
        prefill_ttft => Value::from_safe_string(pre_ttft),
        prefill_rows => prefill_rows,
        has_prefill => !r.prefill.is_empty(),
        cells => cells,
        client_bound_cells => client_bound,
        methodology => r.methodology,
        legend => legend(),
        slo => r.slo.as_ref().map(slo_view),
    };
    render(w, "report.html", ctx)
}

/// Write `compare.html` for a comparison.
pub fn write_compare(w: &mut impl Write, c: &crate::report::compare::Comparison) -> io::Result<()> {
    use crate::report::compare::{diff_text, ratio_text, value_text, Verdict};
    let sections: Vec<Value> = c
        .sections
        .iter()
        .map(|s| {
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|r| {
                    let v = r.verdict();
                    let class = match v {
                        Verdict::Better => "up",
                        Verdict::Worse => "down",
                        Verdict::OnlyA | Verdict::OnlyB => "only",
                        Verdict::Same | Verdict::Unjudged => "",
                    };
                    context! {
                        item => r.item,
                        metric => r.metric,
                        a => value_text(r.a),
                        b => value_text(r.b),
                        diff => diff_text(r.diff()),
                        ratio => ratio_text(r.ratio()),
                        verdict => v.as_str(),
                        class => class,
                    }
                })
                .collect();
            context! { title => s.title, rows => rows }
        })
        .collect();
    let ctx = context! {
        style => Value::from_safe_string(STYLE.to_string()),
        a_name => c.a_name,
        b_name => c.b_name,
        title => format!("Comparison · {} against {}", c.a_header.title(), c.b_header.title()),
        a_header => Value::from_safe_string(run_header(&c.a_header, "", "-a")),
        b_header => Value::from_safe_string(run_header(&c.b_header, "", "-b")),
        differ => c.differing_settings(),
        same_within => format!("{:.0}%", crate::report::compare::SAME_WITHIN * 100.0),
        sections => sections,
    };
    render(w, "compare.html", ctx)
}
