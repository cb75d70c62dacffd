//! report.html for a full 8 × 8 grid (issue 10: "well under a second"): every cell a copy of a
//! real `matrix --mock` cell (its requests, server samples and token bins), so each of the 64
//! details carries all five charts.

use criterion::{criterion_group, criterion_main, Criterion};
use llmspeed::report::{html, json, MatrixReport};
use std::hint::black_box;

const RECORDED: &str = include_str!("../tests/data/matrix_mock_results.json");

fn eight_by_eight() -> MatrixReport {
    let mut r = json::read(RECORDED.as_bytes()).expect("the recorded run reads");
    let cell = r
        .decode
        .iter()
        .max_by_key(|c| c.requests.len())
        .expect("the recorded run has cells")
        .clone();
    let contexts: Vec<u64> = (0..8).map(|i| 1024 << i).collect();
    let concurrency: Vec<u64> = (0..8).map(|i| 1 << i).collect();
    r.decode.clear();
    for &ctx in &contexts {
        for &c in &concurrency {
            let mut x = cell.clone();
            x.context = ctx;
            x.context_label = format!("{}K", ctx / 1024);
            x.concurrency = c;
            r.decode.push(x);
        }
    }
    r.metadata.settings.contexts = contexts;
    r.metadata.settings.concurrency = concurrency;
    r
}

fn bench(c: &mut Criterion) {
    let r = eight_by_eight();
    let mut out = Vec::with_capacity(4 << 20);
    c.bench_function("report_html_8x8", |b| {
        b.iter(|| {
            out.clear();
            html::write(&mut out, black_box(&r)).expect("renders");
            black_box(out.len())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
