//! `llmspeed capacity` against real vLLM (the CPU build and tiny model of
//! `scripts/vllm-server.sh`, the suite's shared server with `--max-num-seqs 4`): under a TTFT
//! objective set between its unqueued and its queued TTFT, the search finds N = 4. The method
//! is `capacity_real_llama.rs`'s, with vLLM's running batch cap in place of llama.cpp's slots.
//!
//! **How the objective is chosen.** The truth is `--max-num-seqs`: with at most N streams every
//! request is admitted at the next engine step, so its TTFT is its wait for that step plus its
//! prefill (on the CPU build a step is long: the unqueued TTFT p90 at 4 was 226 ms); with
//! N + 1 closed-loop streams one request always waits for a running one to end, a fraction of
//! a whole 64-token request (queued p90 766 ms). The test first measures both — the TTFT p90 of
//! one closed-loop round at N and at N + 1, from the requests inside each round's steady
//! window, as a probe takes them — checks that they are well apart (queued at least 2.5 x
//! unqueued: vLLM's unqueued TTFT is a good part of a step, so the gap is narrower than
//! llama.cpp's), and sets `ttft_p90` at their midpoint: here the client's 10% share of it
//! (some 50 ms) is far above a busy client's lag, so the threshold can sit where it leaves the
//! most room on both sides. Then the search, from 1 stream, must answer N with N + 1 failing.
//!
//! Cost: the vLLM start (this binary starts its own: 30-50 s on idle cores, 150 s seen on busy
//! ones), then two measuring rounds and the probes 1, 2, 4, 8, 6, 5: about 60-120 s more.

#[path = "support/real_server.rs"]
mod real_server;
#[path = "real_vllm/server.rs"]
mod server;

use llmspeed::capacity::plan::{round_plan, Workload};
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::{Ending, SearchConfig};
use llmspeed::capacity::slo::Slo;
use llmspeed::clock::Clock;
use llmspeed::net::Cancel;
use serde_json::Value;
use std::time::Duration;

const SLOTS: u64 = server::MAX_NUM_SEQS;
const OUTPUT: u32 = 64;

fn workload(url: &str) -> Workload {
    Workload {
        base_url: url.into(),
        model: Some(server::MODEL.into()),
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
fn a_ttft_objective_between_unqueued_and_queued_finds_max_num_seqs() {
    let Some(s) = server::shared() else {
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
        queued >= 2.5 * unqueued,
        "queued {queued:.1} ms is not well above unqueued {unqueued:.1} ms:\n{}",
        s.log_tail()
    );
    let threshold = ((unqueued + queued) / 2.0).round().max(1.0);
    let spec = format!("ttft_p90={threshold}ms");
    let cfg = CapacityConfig {
        workload: workload(&s.url),
        slo: Slo::parse(&[spec.as_str()]).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max: 32,
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
    // vLLM exposes running/waiting gauges: every probe after the first was drained.
    let probes = v["probes"].as_array().unwrap();
    assert!(
        probes[1..].iter().all(|p| p["settled"] == "drained"),
        "{summary}"
    );
    assert_eq!(v["server"]["engine"], "vllm");
}
