//! `llmspeed capacity` against the simulated server, whose capacity under an objective follows
//! from its own settings: the search must find exactly that concurrency (resolution 1).
//!
//! The mock's decode step lasts `base + per_seq x batch` (the context terms set to 0 here, and
//! prefill made nearly free), every running sequence gets one token per step, and at most
//! `max_num_seqs` sequences run; the rest wait, first come first served (`mock::engine`).
//!
//! **ITL.** With C <= max_num_seqs streams the batch is at most C, so every gap is at most
//! step(C) = base + per_seq x C; at C + 1 most steps run the full C + 1 (a slot empties only
//! for the one step after a request ends), so the gaps' upper tail is step(C + 1). With
//! base = 10 ms and per_seq = 10 ms, step(4) = 50 ms and step(5) = 60 ms: `itl_p95=55ms`
//! holds at 4 and fails at 5. The truth is 4.
//!
//! **TTFT.** Below the batch cap no request waits: it arrives during a step, is admitted at the
//! next, and has its first token at that step's end — under two steps (2 x 25 ms with
//! max_num_seqs = 3, base 10 ms, per_seq 5 ms: at most 50 ms). At C = 4 one stream is always
//! queued: by Little's law the mean wait is (C - M) x L x step / M = 1 x 16 x 25 / 3 = 133 ms
//! for L = 16 tokens, and no wait exceeds the L + 1 steps until the next slot frees (425 ms);
//! waits of mean 133 ms bounded by 425 ms put more than 10% of them above 100 ms
//! (P(w > x) >= (133 - x) / (425 - x)), so the TTFT p90 is above 100 ms. A closed loop's
//! queued request waits a fraction of a request (here a third on average), not a whole one,
//! yet that fraction already clears `ttft_p90=80ms`. The truth is max_num_seqs = 3.

mod support;

use llmspeed::capacity::plan::Workload;
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::{Ending, SearchConfig};
use llmspeed::capacity::slo::Slo;
use llmspeed::mock::MockConfig;
use llmspeed::net::Cancel;
use serde_json::Value;
use std::time::Duration;
use support::mock::{
    assert_verdicts_follow_the_server, runtime, server_probes, MockThread, Served, TracedMock,
};

fn mock(max_num_seqs: u32, base_us: f64, per_seq_us: f64) -> MockConfig {
    support::mock::analytic(max_num_seqs, base_us, per_seq_us)
}

fn config(url: String, slo: &[&str], output_len: u32, round: u64) -> CapacityConfig {
    CapacityConfig {
        workload: Workload::random(&url, None, 32, output_len, 1),
        by: llmspeed::capacity::plan::By::Concurrency,
        slo: Slo::parse(slo).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max: 64,
        },
        round,
        max_rounds: 6,
        max_time: Duration::from_secs(240),
        drain_timeout: Duration::from_secs(10),
        settle: Duration::from_millis(100),
        simulated: None,
    }
}

fn schema_errors(v: &Value) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/capacity.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    val.iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// One search at a time: each is a client and a server measuring real time, and two at once on
/// a small machine would make each other's client fall behind (Client-bound, correctly).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the search against a mock with `m`'s settings; returns results.json.
fn search(m: MockConfig, slo: &[&str], output_len: u32, round: u64) -> Value {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = MockThread::start(m);
    let (v, ending, summary) = run_search(&server.url(), slo, output_len, round);
    server.stop();
    assert_eq!(ending, Ending::Resolved, "{summary}");
    v
}

/// [`search`] against the simulated server tracing in memory, without judging the ending:
/// results.json and the requests the server served.
fn search_traced(m: MockConfig, slo: &[&str], output_len: u32, round: u64) -> (Value, Vec<Served>) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TracedMock::with(m);
    let (v, _, _) = run_search(&server.url(), slo, output_len, round);
    (v, server.finish_served())
}

/// One search against the server at `url`: results.json (checked against its schema), the
/// ending and the summary.
fn run_search(url: &str, slo: &[&str], output_len: u32, round: u64) -> (Value, Ending, String) {
    let cfg = config(url.to_string(), slo, output_len, round);
    let dir = tempfile::tempdir().unwrap();
    let run = runtime()
        .block_on(llmspeed::cli::capacity::run_async(
            &cfg,
            dir.path(),
            &Cancel::new(),
        ))
        .map_err(|e| e.message)
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(schema_errors(&v), Vec::<String>::new());
    let summary = llmspeed::capacity::results::summary(&cfg, &run);
    eprintln!("{summary}");
    (v, run.conclusion.ending, summary)
}

/// Each probe's verdict follows what the server did during it (its own trace: the gaps between
/// its token writes, `support::mock::server_probes`); the nominal truth above (4) is asserted
/// where the server kept its nominal schedule, the p95 of its write gaps within 2 ms of its
/// engine's steps' in every probe: on a loaded machine its steps stretch, and a fail at 4 is
/// then correct.
#[test]
fn an_itl_objective_finds_the_batch_whose_step_fits() {
    let (v, served) = search_traced(mock(64, 10_000.0, 10_000.0), &["itl_p95=55ms"], 16, 12);
    let probes = v["probes"].as_array().unwrap();
    let truth = server_probes(&served, probes, 1, 12, 2.0);
    assert_verdicts_follow_the_server(probes, &truth, "itl_p95", 0.95);
    let a = &v["answer"];
    if let Some(s) = truth.iter().find(|s| !s.kept(95.0, 2.0)) {
        eprintln!(
            "the server's own steps stretched at C={}: verdicts checked against its trace only, \
             not the nominal answer 4 (ending {})",
            s.concurrency, a["ending"]
        );
        assert!(
            matches!(a["ending"].as_str(), Some("resolved" | "client_bound")),
            "{a}"
        );
        return;
    }
    assert_eq!(a["ending"], "resolved", "{a}");
    assert_eq!(a["concurrency"], 4, "{a}");
    assert_eq!(a["smallest_failing_concurrency"], 5, "{a}");
    assert_eq!(a["failing_certain"], true);
    assert_eq!(a["failed_objective"], "itl_p95");
    // The probes went 1, 2, 4, 8 (bracket), then 6, 5 (bisect), each drained first; a probe
    // the client could not vouch for is repeated at its load by design (Client-bound once, as
    // a loaded machine's client can be), so the repeats are folded before comparing.
    let mut loads: Vec<u64> = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["concurrency"].as_u64().unwrap())
        .collect();
    loads.dedup();
    assert_eq!(loads, vec![1, 2, 4, 8, 6, 5]);
    let probes = v["probes"].as_array().unwrap();
    assert!(probes[1..].iter().all(|p| p["settled"] == "drained"));
    // At the answer: 4 streams, one token each per 50 ms step: 80 tok/s at most (a slot
    // empties for a step after each request).
    let tok_s = a["output_tok_per_s"].as_f64().unwrap();
    assert!(tok_s > 0.8 * 80.0 && tok_s <= 80.0 * 1.02, "{tok_s}");
}

#[test]
fn a_ttft_objective_finds_the_batch_cap() {
    let v = search(mock(3, 10_000.0, 5_000.0), &["ttft_p90=80ms"], 16, 40);
    let a = &v["answer"];
    assert_eq!(a["concurrency"], 3, "{a}");
    assert_eq!(a["smallest_failing_concurrency"], 4, "{a}");
    assert_eq!(a["failed_objective"], "ttft_p90");
}

#[test]
fn an_error_objective_fails_at_the_first_load_when_a_fifth_of_requests_fail() {
    // The simulated server answers 500 to a fifth of the requests at any load: `errors=5%`
    // fails from the first probe (its Clopper-Pearson interval lies above 5% within a round of
    // 40), so no concurrency passes and the failing objective is named.
    let mut m = mock(64, 2_000.0, 100.0);
    m.faults = vec!["status=500@0.2".parse().unwrap()];
    let v = search(m, &["errors=5%"], 8, 40);
    let a = &v["answer"];
    assert_eq!(a["concurrency"], Value::Null, "{a}");
    assert_eq!(a["smallest_failing_concurrency"], 1, "{a}");
    assert_eq!(a["failed_objective"], "errors");
    let p = &v["probes"][0]["objectives"][0];
    assert!(p["lo"].as_f64().unwrap() > 0.05, "{p}");
    let share = p["estimate"].as_f64().unwrap();
    assert!((0.05..0.45).contains(&share), "{share}");
}

/// **Errors, a fault rate that grows with the load.** The simulated server answers 500 with
/// probability 0.2 per request already in its engine (`--load-fault status=500@0.2`:
/// `mock::faults::pick_loaded`, the count read from the engine when the request arrives). In a
/// closed loop of C streams every other stream's request is in the engine (running; up to
/// `max_num_seqs` 64 nothing waits) except while that stream is between requests: after its
/// last token, and through each failed request (answered at once, so a failing stream spends
/// its failures outside the engine). So a request fails with probability 0.2 x (C - 1) x f,
/// where f is the share of time another stream's request is in the engine: 0 at 1 stream,
/// 20 f % at 2, 40 f % at 3, 60 f % at 4. f is near 1 on a quiet machine and lower on a busy
/// one, whose client takes longer between requests: the CI run of 2026-12-07 measured 17.7% at
/// 2 and 33.5% at 3 with 8-token requests (f about 0.85), where a quiet run measured 37% at 3.
/// The requests here are 16 tokens (80 ms of decode) so the time between them weighs half as
/// much, and the objective `errors=26%` sits between 2 and 3 for any f from 0.8 to 1 (at most
/// 20% at 2, at least 32% at 3): a margin of 6 points or more on either side, which a few
/// hundred requests' Clopper-Pearson interval resolves. The truth is 2.
#[test]
fn an_error_objective_finds_where_a_load_dependent_fault_rate_crosses_it() {
    let mut m = mock(64, 5_000.0, 0.0);
    m.load_faults = vec!["status=500@0.2".parse().unwrap()];
    let v = search(m, &["errors=26%"], 16, 100);
    let a = &v["answer"];
    assert_eq!(a["concurrency"], 2, "{a}");
    assert_eq!(a["smallest_failing_concurrency"], 3, "{a}");
    assert_eq!(a["failing_certain"], true);
    assert_eq!(a["failed_objective"], "errors");
    // Each probe's interval reaches 0.2 x (C - 1) or a little under it (within a fifth).
    for p in v["probes"].as_array().unwrap() {
        let c = p["concurrency"].as_f64().unwrap();
        let o = &p["objectives"][0];
        let want = (0.2 * (c - 1.0)).min(1.0);
        let (lo, hi) = (o["lo"].as_f64().unwrap(), o["hi"].as_f64().unwrap());
        assert!(lo <= want && hi >= 0.8 * want, "{c}: {o}");
    }
}
