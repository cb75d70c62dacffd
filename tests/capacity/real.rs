//! What the capacity tests against real engines share: the TTFT p90 a probe would read at a
//! load, and the search that must find the engine's slot count under a TTFT objective.

use llmspeed::capacity::plan::{round_plan, Workload};
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::{Ending, SearchConfig};
use llmspeed::capacity::slo::Slo;
use llmspeed::clock::Clock;
use llmspeed::net::Cancel;
use serde_json::Value;
use std::time::Duration;

/// The TTFT p90 (ms) of one closed-loop round of 40 requests of `w` at `c` streams, from the
/// requests inside its steady window.
pub async fn ttft_p90(w: &Workload, c: u64) -> f64 {
    let plan = round_plan(w, c, 40, 1_000 + c);
    let m = llmspeed::bench::engine::run(
        &plan,
        Clock::new(),
        &Cancel::new(),
        &mut std::io::sink(),
        &mut |_: &str| {},
    )
    .await
    .expect("the round runs");
    let records: Vec<_> = m.requests.iter().map(|f| (f.index, &f.record)).collect();
    let slo = Slo::parse(&["ttft_p90=1s"]).unwrap();
    let (s, _) =
        llmspeed::capacity::samples::of_round(&slo, &records, c, m.duration_ns as f64 / 1e9);
    let mut v = s.ttft_ms;
    assert!(v.len() >= 20, "too few samples at {c}: {}", v.len());
    v.sort_by(f64::total_cmp);
    llmspeed::analysis::stats::percentile_sorted(&v, 90.0).unwrap()
}

/// The search of `w` under `spec`, from 1 stream up to `max` at a resolution of 1: it must
/// answer `slots` with `slots + 1` failing on `ttft_p90`, every probe after the first drained
/// by the server's own gauges, and name `engine` as the server.
pub fn finds_slots(
    rt: &tokio::runtime::Runtime,
    w: Workload,
    spec: &str,
    max: u64,
    slots: u64,
    engine: &str,
) {
    let cfg = CapacityConfig {
        workload: w,
        by: llmspeed::capacity::plan::By::Concurrency,
        slo: Slo::parse(&[spec]).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max,
        },
        round: 40,
        max_rounds: 4,
        max_time: Duration::from_secs(300),
        drain_timeout: Duration::from_secs(30),
        settle: Duration::from_millis(200),
        simulated: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let run = rt
        .block_on(llmspeed::cli::capacity::run_async(
            &cfg,
            dir.path(),
            &Cancel::new(),
        ))
        .map_err(|e| e.message)
        .unwrap();
    let summary = llmspeed::capacity::results::summary(&cfg, &run);
    eprintln!("{summary}");
    assert_eq!(run.conclusion.ending, Ending::Resolved, "{summary}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let a = &v["answer"];
    assert_eq!(a["concurrency"], slots, "{summary}");
    assert_eq!(a["smallest_failing_concurrency"], slots + 1, "{summary}");
    assert_eq!(a["failed_objective"], "ttft_p90", "{summary}");
    let probes = v["probes"].as_array().unwrap();
    assert!(
        probes[1..].iter().all(|p| p["settled"] == "drained"),
        "{summary}"
    );
    assert_eq!(v["server"]["engine"], engine);
}
