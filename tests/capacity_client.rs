//! A client that falls behind: `capacity` against the simulated server of the ITL case of
//! `capacity_mock.rs` (truth 4 streams under `itl_p95=55ms`), with the server pinned to one CPU
//! and the client's runtime to another, on which a thread spins for the whole search (the
//! self-test's `--busy-loop`). The client then shares its core with the spinner: its timers
//! fire late and its reads come late and together.
//!
//! What must hold is that the search never reports the client's limit as the server's. Each
//! probe's truth is what the server did during it, read from its own trace (the write time of
//! every token, `support::mock::server_probes`): a probe called a fail never comes where the
//! server's own ITL p95 clearly met the objective, a pass never where it clearly missed, and a
//! probe the client could not vouch for is Client-bound, with its reasons; a search that ends
//! there says so (`ending: client_bound`) instead of naming a capacity. The nominal truth (a
//! pass at <= 4 streams, a fail at >= 5, the answer 4) is asserted of the probes in which the
//! server kept its nominal schedule (the p95 of its write gaps within 2 ms of its engine's steps'): a
//! loaded machine can stretch the server's own steps, and then a fail at 4 is correct.
//! Whether this machine's scheduler lets the client keep up beside the spinner is not asserted
//! (the test prints what happened): either way, no wrong answer.
//! Cost: one search of about six probes, 15-40 s.

mod support;

use llmspeed::capacity::plan::Workload;
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::SearchConfig;
use llmspeed::capacity::slo::Slo;
use llmspeed::mock::MockConfig;
use llmspeed::net::Cancel;
use llmspeed::selftest::pin::{allowed_cpus, BusyLoop, CpuList, Mask};
use serde_json::Value;
use std::time::Duration;
use support::mock::{assert_verdicts_follow_the_server, server_probes, TracedMock};

fn mock() -> MockConfig {
    support::mock::analytic(64, 10_000.0, 10_000.0)
}

#[test]
fn beside_a_busy_loop_on_its_core_the_client_is_never_taken_for_the_server() {
    let cpus = allowed_cpus().expect("the allowed CPUs");
    if cpus.len() < 2 {
        let msg = format!("needs two CPUs to pin the server and the client apart: {cpus:?}");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("\n!!!!!!!! NOT RUN: {msg} !!!!!!!!\n");
        return;
    }
    let one = |c: usize| CpuList::parse(&c.to_string()).unwrap();
    let (server_cpu, client_cpu) = (one(cpus[0]), one(cpus[1]));
    // The server's thread inherits the affinity of the thread that starts it.
    let server = {
        let mask = Mask::of(&server_cpu);
        std::thread::spawn(move || {
            mask.apply().expect("pin the server");
            TracedMock::with(mock())
        })
        .join()
        .unwrap()
    };
    let pin_client = client_cpu.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            Mask::of(&pin_client).apply().expect("pin the client");
        })
        .build()
        .unwrap();
    let cfg = CapacityConfig {
        workload: Workload::random(&server.url(), None, 32, 16, 5),
        by: llmspeed::capacity::plan::By::Concurrency,
        slo: Slo::parse(&["itl_p95=55ms"]).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max: 64,
        },
        round: 12,
        max_rounds: 6,
        max_time: Duration::from_secs(240),
        drain_timeout: Duration::from_secs(10),
        settle: Duration::from_millis(100),
        simulated: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let spin = BusyLoop::start(&client_cpu).expect("the busy loop");
    let run = rt.block_on(async {
        // block_on's own thread is the test's: pin it too.
        Mask::of(&client_cpu).apply().expect("pin the client");
        llmspeed::cli::capacity::run_async(&cfg, dir.path(), &Cancel::new()).await
    });
    drop(spin);
    let served = server.finish_served();
    let run = run.map_err(|e| e.message).unwrap();
    eprintln!("{}", llmspeed::capacity::results::summary(&cfg, &run));
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let probes = v["probes"].as_array().unwrap();
    assert!(!probes.is_empty());
    let truth = server_probes(&served, probes, 5, cfg.round, 2.0);
    assert_verdicts_follow_the_server(probes, &truth, "itl_p95", cfg.confidence);
    // The nominal truth where the server kept its schedule: the p95 of its write gaps within
    // 2 ms of its engine's steps', which sits 5 ms from the threshold on either side (50 ms at
    // 4 streams, 60 ms at 5).
    let mut nominal = true;
    for (p, s) in probes.iter().zip(&truth) {
        let load = p["concurrency"].as_u64().unwrap();
        if !s.kept(95.0, 2.0) {
            nominal = false;
            continue;
        }
        match p["outcome"].as_str().unwrap() {
            "pass" => assert!(load <= 4, "a pass beyond the truth: {p}"),
            "fail" => assert!(load >= 5, "a fail below the truth: {p}"),
            _ => {}
        }
    }
    let a = &v["answer"];
    if !nominal {
        eprintln!(
            "the server's own steps stretched in some probe: each verdict checked against the \
             trace only, not against the nominal answer 4 (ending {})",
            a["ending"]
        );
        assert!(
            matches!(a["ending"].as_str(), Some("resolved" | "client_bound")),
            "{a}"
        );
    } else {
        match a["ending"].as_str().unwrap() {
            "resolved" => {
                assert_eq!(a["concurrency"], 4, "{a}");
                assert_eq!(a["smallest_failing_concurrency"], 5, "{a}");
            }
            "client_bound" => {
                // Named where it stopped; what it claims below that is true.
                assert!(a["client_bound_at"].is_u64(), "{a}");
                assert!(a["concurrency"].as_u64().is_none_or(|c| c <= 4), "{a}");
            }
            other => panic!("ended {other}: {a}"),
        }
    }
    let bound = probes
        .iter()
        .filter(|p| p["outcome"] == "client_bound")
        .count();
    eprintln!(
        "beside the busy loop: {} probes, {bound} Client-bound, ending {}",
        probes.len(),
        a["ending"]
    );
}
