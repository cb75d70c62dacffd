//! The seed report's Over-capacity pattern, reproduced from the capacity rule: with the seed
//! server's limits (max_model_len 262144, max_tokens 4096) and any KV capacity in
//! [1,572,864, 2,096,639] tokens — the range the seed's grid implies — the planned grid marks
//! exactly the cells the seed shows as "Over capacity", and the largest-that-fits row is 251K.

use llmspeed::matrix::plan::{Plan, PlanConfig};
use llmspeed::matrix::status::{CellStatus, KvSource, ServerLimits};

/// Seed grid: per row, the concurrency levels shown as "Over capacity".
const SEED_OVER: [(&str, &[u64]); 6] = [
    ("8K", &[]),
    ("16K", &[128]),
    ("32K", &[64, 128]),
    ("64K", &[32, 64, 128]),
    ("128K", &[16, 32, 64, 128]),
    ("251K", &[8, 16, 32, 64, 128]),
];

fn check(kv: u64) {
    let limits = ServerLimits {
        max_model_len: Some(262_144),
        kv_tokens: Some((kv, KvSource::KvCacheSizeTokens)),
        max_running: None,
    };
    let plan = Plan::new(&PlanConfig::default(), limits);
    let labels: Vec<&str> = plan.contexts.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["8K", "16K", "32K", "64K", "128K", "251K"]);
    assert_eq!(plan.concurrency, [1, 2, 4, 8, 16, 32, 64, 128]);
    for (row, (label, over)) in SEED_OVER.iter().enumerate() {
        assert_eq!(plan.contexts[row].label, *label);
        for (col, &c) in plan.concurrency.iter().enumerate() {
            let cell = plan.cell(row, col);
            let is_over = matches!(cell.status, Some(CellStatus::OverCapacity(_)));
            assert_eq!(
                is_over,
                over.contains(&c),
                "kv {kv}: {label} x {c}: {:?}",
                cell.status
            );
        }
    }
}

#[test]
fn seed_grid_at_both_ends_of_the_implied_kv_range() {
    check(1_572_864);
    check(1_833_216);
    check(2_096_639);
}

#[test]
fn just_outside_the_range_the_grid_differs() {
    let grid = |kv: u64| {
        let limits = ServerLimits {
            max_model_len: Some(262_144),
            kv_tokens: Some((kv, KvSource::KvCacheSizeTokens)),
            max_running: None,
        };
        let plan = Plan::new(&PlanConfig::default(), limits);
        plan.cells
            .iter()
            .filter(|c| matches!(c.status, Some(CellStatus::OverCapacity(_))))
            .count()
    };
    let seed: usize = SEED_OVER.iter().map(|(_, o)| o.len()).sum();
    assert_eq!(grid(1_833_216), seed);
    assert_eq!(grid(1_572_863), seed + 1, "8K x 128 goes over");
    assert_eq!(
        grid(2_096_640),
        seed - 1,
        "251K x 8 needs exactly 2,096,640 and fits"
    );
    assert_eq!(grid(2_096_639), seed);
    // The mock's seed profile (1.1M) marks four more: 8K x 128, 16K x 64, 32K x 32, 64K x 16.
    assert_eq!(grid(1_100_000), seed + 4);
}
