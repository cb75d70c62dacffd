//! `results.csv`: one row per measurement (each prefill context, each decode cell), a header
//! row, RFC 4180 quoting. Raw numbers with units in the column names, empty for missing: this
//! file is for spreadsheets and scripts, not for reading, so nothing is rounded. `interrupted`
//! is `true` on a decode cell whose window was cut short (the JSON's `interrupted`: its figures
//! cover the shortened window of `measured_s` seconds), `false` on every other row. The
//! `client_lag_*` columns are a decode cell's `client_lag` object of the JSON, each named by its
//! path there (`client_lag_bounds_ms_itl_p50_bound` is `client_lag.bounds_ms.itl_p50.bound`; the
//! reasons joined by `; `), empty where the cell has none.

use crate::report::client_lag::{BoundedMs, ClientLagFigures, LagSpread};
use crate::report::model::{DecodeCell, MatrixReport, PrefillRow};
use std::io::Write;

pub const COLUMNS: [&str; 79] = [
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
    "client_lag_client_bound",
    "client_lag_client_bound_reasons",
    "client_lag_reads",
    "client_lag_read_lag_us_p50",
    "client_lag_read_lag_us_p99",
    "client_lag_read_lag_us_max",
    "client_lag_tokens_per_read_mean",
    "client_lag_tokens_per_read_max",
    "client_lag_reads_with_several_tokens_percent",
    "client_lag_dispatch_lag_ms_p50",
    "client_lag_dispatch_lag_ms_p99",
    "client_lag_dispatch_lag_ms_max",
    "client_lag_dispatch_late_ms_p99",
    "client_lag_dispatch_connect_ms_p99",
    "client_lag_dispatch_write_ms_p99",
    "client_lag_gaps",
    "client_lag_gaps_apart_percent",
    "client_lag_gaps_merged_percent",
    "client_lag_gaps_unbounded_percent",
    "client_lag_bounds_ms_itl_p50_value",
    "client_lag_bounds_ms_itl_p50_bound",
    "client_lag_bounds_ms_itl_p99_value",
    "client_lag_bounds_ms_itl_p99_bound",
    "client_lag_bounds_ms_itl_mean_value",
    "client_lag_bounds_ms_itl_mean_bound",
    "client_lag_bounds_ms_ttft_p50_value",
    "client_lag_bounds_ms_ttft_p50_bound",
    "client_lag_bounds_ms_ttft_p99_value",
    "client_lag_bounds_ms_ttft_p99_bound",
    "client_lag_bounds_ms_tpot_p50_value",
    "client_lag_bounds_ms_tpot_p50_bound",
    "client_lag_bounds_ms_tpot_p99_value",
    "client_lag_bounds_ms_tpot_p99_bound",
    "client_lag_throughput_bound_percent",
    "client_lag_client_cpu_percent_of_cores",
    "client_lag_cores",
    "client_lag_stamp_source",
    "client_lag_reads_left_data_percent",
    "client_lag_socket_bytes_at_read_p50",
    "client_lag_socket_bytes_at_read_p99",
    "client_lag_socket_bytes_at_read_max",
    "client_lag_no_bound_reason",
    "client_lag_upstream_batched",
    "client_lag_upstream_batching_reason",
    "client_lag_upstream_batching_cause",
    "client_lag_tokens_batched_percent",
    "client_lag_tokens_in_multi_token_events_percent",
    "client_lag_batch_tokens_p50",
    "client_lag_batch_period_ms_p50",
    "images_per_prompt",
    "image_width",
    "image_height",
    "image_tokens",
    "server_prompt_tokens",
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

/// The last columns, [`image_fields`]'s, which [`write`] appends to every row.
const IMAGE_COLUMNS: usize = 5;

fn prefill_row(p: &PrefillRow) -> Vec<String> {
    let mut r = vec![String::new(); COLUMNS.len() - IMAGE_COLUMNS];
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
    let mut row = vec![
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
    ];
    row.extend(client_lag_fields(c.client_lag.as_ref()));
    row
}

/// The `client_lag_*` columns, in [`COLUMNS`]' order (all empty without figures).
fn client_lag_fields(lag: Option<&ClientLagFigures>) -> Vec<String> {
    let Some(l) = lag else {
        return vec![String::new(); COLUMNS.len() - 25 - IMAGE_COLUMNS];
    };
    let spread = |s: Option<LagSpread>| {
        [
            num(s.map(|s| s.p50)),
            num(s.map(|s| s.p99)),
            num(s.map(|s| s.max)),
        ]
    };
    let mut out = vec![
        l.client_bound.to_string(),
        l.client_bound_reasons.join("; "),
        l.reads.to_string(),
    ];
    out.extend(spread(l.read_lag_us));
    out.extend([
        num(l.tokens_per_read_mean),
        num(l.tokens_per_read_max),
        num(l.reads_with_several_tokens_percent),
    ]);
    out.extend(spread(l.dispatch_lag_ms));
    out.extend([
        num(l.dispatch_late_ms_p99),
        num(l.dispatch_connect_ms_p99),
        num(l.dispatch_write_ms_p99),
        l.gaps.to_string(),
        num(l.gaps_apart_percent),
        num(l.gaps_merged_percent),
        num(l.gaps_unbounded_percent),
    ]);
    let b = &l.bounds_ms;
    for f in [
        b.itl_p50, b.itl_p99, b.itl_mean, b.ttft_p50, b.ttft_p99, b.tpot_p50, b.tpot_p99,
    ] {
        out.extend([num(f.map(|f: BoundedMs| f.value)), num(f.map(|f| f.bound))]);
    }
    out.extend([
        num(l.throughput_bound_percent),
        num(l.client_cpu_percent_of_cores),
        num(l.cores),
    ]);
    out.push(l.stamp_source.clone().unwrap_or_default());
    out.push(num(l.reads_left_data_percent));
    out.extend(spread(l.socket_bytes_at_read));
    out.push(l.no_bound_reason.clone().unwrap_or_default());
    out.push(l.upstream_batched.to_string());
    out.push(l.upstream_batching_reason.clone().unwrap_or_default());
    out.push(l.upstream_batching_cause.clone().unwrap_or_default());
    out.push(num(l.tokens_batched_percent));
    out.push(num(l.tokens_in_multi_token_events_percent));
    out.push(num(l.batch_tokens_p50));
    out.push(num(l.batch_period_ms_p50));
    out
}

/// Write the header row and one row per measurement, prefill first.
pub fn write(w: &mut impl Write, report: &MatrixReport) -> std::io::Result<()> {
    let header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    row(w, &header)?;
    let images = report.metadata.settings.images;
    for p in &report.prefill {
        let mut r = prefill_row(p);
        r.extend(image_fields(images, p.image_tokens, p.server_prompt_tokens));
        row(w, &r)?;
    }
    let image_tokens = images.and_then(|i| i.image_tokens_per_prompt);
    for c in &report.decode {
        let mut r = decode_row(c);
        r.extend(image_fields(images, image_tokens, c.server_prompt_tokens));
        row(w, &r)?;
    }
    Ok(())
}

/// The `images_*`, `image_*` and `server_prompt_tokens` columns (`matrix --images`; the image
/// columns empty without images).
fn image_fields(
    images: Option<crate::report::model::ImageSettings>,
    image_tokens: Option<u64>,
    server_prompt_tokens: Option<u64>,
) -> [String; IMAGE_COLUMNS] {
    [
        num(images.map(|i| i.per_prompt)),
        num(images.map(|i| i.width)),
        num(images.map(|i| i.height)),
        num(images.and(image_tokens)),
        num(server_prompt_tokens),
    ]
}

/// `slo.csv` (`matrix --slo`): one row per context with its answer, then one row per judged
/// objective of each cell; empty fields where there is no value.
pub const SLO_COLUMNS: [&str; 11] = [
    "context",
    "context_label",
    "largest_concurrency",
    "smallest_failing_concurrency",
    "failed_objective",
    "concurrency",
    "cell_verdict",
    "objective",
    "estimate",
    "lo",
    "hi",
];

pub fn write_slo(w: &mut impl Write, t: &crate::report::model::SloTable) -> std::io::Result<()> {
    let header: Vec<String> = SLO_COLUMNS.iter().map(|c| c.to_string()).collect();
    row(w, &header)?;
    for r in &t.rows {
        let head = vec![
            r.context.to_string(),
            r.context_label.clone(),
            num(r.largest_concurrency),
            num(r.smallest_failing_concurrency),
            r.failed_objective.clone().unwrap_or_default(),
        ];
        let mut line = head.clone();
        line.extend(std::iter::repeat_n(String::new(), 6));
        row(w, &line)?;
        for c in &r.cells {
            for j in &c.objectives {
                let mut line = head.clone();
                line.extend([
                    c.concurrency.to_string(),
                    c.verdict.clone(),
                    j.key.clone(),
                    num(j.estimate),
                    num(j.lo),
                    num(j.hi),
                ]);
                row(w, &line)?;
            }
        }
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
