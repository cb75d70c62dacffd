//! `llmspeed capacity` against a real llama.cpp `llama-server` with N = 2 slots (`-np 2`, one
//! thread, the tiny model of `scripts/llama-server.sh`): under a TTFT objective set between its
//! unqueued and its queued TTFT, the search finds N.
//!
//! **How the objective is chosen.** The truth is the server's slot count: with at most N
//! requests there is a free slot for each, and a request's first token comes after its own
//! prefill and one decode step (a few ms here); with N + 1 closed-loop streams one request always
//! waits for a slot, a fraction of a whole request (512 tokens, some 0.2-0.5 s here).
//! The test first measures both — the TTFT p90 of one closed-loop round at N (unqueued) and at
//! N + 1 (queued), from the requests inside each round's steady window, as a probe takes them —
//! checks that they are well apart (queued at least 4 x unqueued), and sets `ttft_p90` a third
//! of the way from unqueued to queued. Not the geometric mean: 10% of the threshold is the share
//! of it the client's own lag may take before a probe is Client-bound, and it must stay well
//! above what a busy 2-core machine's client lag reaches (16 ms seen). Not the midpoint: the
//! queued p90 of one round varies with how the streams' phases fall (357 to 714 ms in five
//! runs), and a probe at N + 1 must still lie wholly above the threshold. Then the search, from
//! 1 stream, must answer N with N + 1 failing on `ttft_p90`.
//!
//! Cost: 30-60 s on 2 busy cores (two measuring rounds, then the probes 1, 2, 4, 3).

#[path = "support/real_server.rs"]
mod real_server;
#[path = "real_llama/server.rs"]
mod server;

use llmspeed::capacity::plan::{round_plan, Workload};
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::{Ending, SearchConfig};
use llmspeed::capacity::slo::Slo;
use llmspeed::clock::Clock;
use llmspeed::net::Cancel;
use serde_json::Value;
use server::LlamaServer;
use std::time::Duration;

const SLOTS: u64 = 2;
const OUTPUT: u32 = 512;

fn workload(url: &str) -> Workload {
    Workload {
        base_url: url.into(),
        model: Some("tiny".into()),
        input_len: 32,
        output_len: OUTPUT,
        seed: 11,
    }
}

/// The TTFT p90 (ms) of one closed-loop round of 40 requests at `c` streams, from the requests
/// inside its steady window.
async fn ttft_p90(url: &str, c: u64) -> f64 {
    let plan = round_plan(&workload(url), c, 40, 1_000 + c);
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

#[test]
fn a_ttft_objective_between_unqueued_and_queued_finds_the_slot_count() {
    // 2 slots of 1,024 tokens: room for the prompt and the 512-token output.
    let Some(s) = LlamaServer::start(SLOTS, 2 * 1024) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (unqueued, queued) = rt.block_on(async {
        (
            ttft_p90(&s.url, SLOTS).await,
            ttft_p90(&s.url, SLOTS + 1).await,
        )
    });
    eprintln!(
        "TTFT p90: {unqueued:.1} ms at {SLOTS} streams, {queued:.1} ms at {}",
        SLOTS + 1
    );
    assert!(
        queued >= 4.0 * unqueued,
        "queued {queued:.1} ms is not well above unqueued {unqueued:.1} ms:\n{}",
        s.log()
    );
    let threshold = (unqueued + (queued - unqueued) / 3.0).round().max(1.0);
    let spec = format!("ttft_p90={threshold}ms");
    let cfg = CapacityConfig {
        workload: workload(&s.url),
        slo: Slo::parse(&[spec.as_str()]).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max: 16,
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
    assert_eq!(a["concurrency"], SLOTS, "{summary}");
    assert_eq!(a["smallest_failing_concurrency"], SLOTS + 1, "{summary}");
    assert_eq!(a["failed_objective"], "ttft_p90", "{summary}");
    // llama.cpp exposes running/waiting gauges: every probe after the first was drained.
    let probes = v["probes"].as_array().unwrap();
    assert!(
        probes[1..].iter().all(|p| p["settled"] == "drained"),
        "{summary}"
    );
    assert_eq!(v["server"]["engine"], "llama.cpp");
}
