//! `results.csv`: a header and one row per measurement, every row as wide as the header, and
//! fields with commas, quotes and line breaks quoted so a standard reader gets them back.

mod report_common;

use llmspeed::report::csv;

/// A plain RFC 4180 reader (the naive twin of the writer's quoting).
fn parse(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(field.is_empty() && row.is_empty(), "file ends mid-row");
    rows
}

fn render() -> String {
    let mut r = report_common::report();
    r.decode[1].loop_info.as_mut().unwrap().excerpt = "a, \"b\"\nc".into();
    let mut out = Vec::new();
    csv::write(&mut out, &r).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn one_row_per_measurement_with_a_header() {
    let text = render();
    let rows = parse(&text);
    let r = report_common::report();
    assert_eq!(rows.len(), 1 + r.prefill.len() + r.decode.len());
    assert_eq!(rows[0], csv::COLUMNS);
    assert!(rows.iter().all(|row| row.len() == csv::COLUMNS.len()));
    assert!(text.ends_with("\r\n"));
}

#[test]
fn values_are_raw_and_quoted_fields_survive() {
    let rows = parse(&render());
    let col = |name: &str| csv::COLUMNS.iter().position(|c| *c == name).unwrap();
    // Prefill 8K.
    assert_eq!(rows[1][col("phase")], "prefill");
    assert_eq!(rows[1][col("prefill_tok_per_s")], "31379.3");
    assert_eq!(rows[1][col("ttft_ms_p50")], "261");
    // Decode 8K × 2: looped, figures kept, excerpt back intact.
    let looped = &rows[4 + 1];
    assert_eq!(looped[col("status")], "looped");
    assert_eq!(looped[col("output_tok_per_s")], "190.4");
    assert_eq!(looped[col("loop_period_chars")], "41");
    assert_eq!(looped[col("loop_excerpt")], "a, \"b\"\nc");
    // Failed and over-capacity details.
    let failed = &rows[4 + 6];
    assert_eq!(failed[col("status")], "failed");
    assert_eq!(failed[col("status_detail")], "timeout_gap:3;http_status:1");
    assert_eq!(failed[col("errors")], "timeout_gap:3;http_status:1");
    assert_eq!(failed[col("output_tok_per_s")], "");
    let over = &rows[4 + 7];
    assert_eq!(
        over[col("status_detail")],
        "needs 1081344 KV tokens of 1000000"
    );
    assert_eq!(rows[4 + 2][col("token_count_diff")], "-12");
}

#[test]
fn a_cells_client_lag_fills_its_columns_and_a_cell_without_leaves_them_empty() {
    let rows = parse(&render());
    let col = |name: &str| csv::COLUMNS.iter().position(|c| *c == name).unwrap();
    // Decode 8K × 1: valid, its figures from report_common::client_lag(9.9).
    let valid = &rows[4];
    assert_eq!(valid[col("status")], "valid");
    assert_eq!(valid[col("client_lag_client_bound")], "false");
    assert_eq!(valid[col("client_lag_read_lag_us_p99")], "48");
    assert_eq!(valid[col("client_lag_dispatch_connect_ms_p99")], "0.15");
    assert_eq!(valid[col("client_lag_gaps_apart_percent")], "99.9");
    assert_eq!(valid[col("client_lag_bounds_ms_itl_p50_value")], "9.9");
    assert_eq!(valid[col("client_lag_bounds_ms_itl_p50_bound")], "0.02");
    assert_eq!(valid[col("client_lag_bounds_ms_tpot_p99_bound")], "0.0004");
    assert_eq!(valid[col("client_lag_cores")], "2");
    assert_eq!(valid[col("client_lag_stamp_source")], "kernel");
    // Every column of the JSON object has its own column, and nothing else is prefixed so.
    let lag = serde_json::to_value(report_common::client_lag(1.0)).unwrap();
    let mut paths = Vec::new();
    for (k, v) in lag.as_object().unwrap() {
        match v {
            serde_json::Value::Object(inner) if k == "bounds_ms" => {
                for f in inner.keys() {
                    paths.push(format!("client_lag_bounds_ms_{f}_value"));
                    paths.push(format!("client_lag_bounds_ms_{f}_bound"));
                }
            }
            serde_json::Value::Object(inner) => {
                paths.extend(inner.keys().map(|s| format!("client_lag_{k}_{s}")))
            }
            _ => paths.push(format!("client_lag_{k}")),
        }
    }
    let mut ours: Vec<String> = csv::COLUMNS
        .iter()
        .filter(|c| c.starts_with("client_lag_"))
        .map(|c| c.to_string())
        .collect();
    paths.sort();
    ours.sort();
    assert_eq!(ours, paths);
    // A Client-bound cell's reasons, joined; an over-capacity cell has no figures.
    let mut r = report_common::report();
    let lag = r.decode[0].client_lag.as_mut().unwrap();
    lag.client_bound = true;
    lag.client_bound_reasons = vec!["one, \"quoted\"".into(), "two".into()];
    let mut out = Vec::new();
    csv::write(&mut out, &r).unwrap();
    let rows = parse(&String::from_utf8(out).unwrap());
    assert_eq!(rows[4][col("client_lag_client_bound")], "true");
    assert_eq!(
        rows[4][col("client_lag_client_bound_reasons")],
        "one, \"quoted\"; two"
    );
    let over = &rows[4 + 7];
    assert_eq!(over[col("status")], "over_capacity");
    assert!(csv::COLUMNS
        .iter()
        .enumerate()
        .filter(|(_, c)| c.starts_with("client_lag_"))
        .all(|(i, _)| over[i].is_empty()));
}
