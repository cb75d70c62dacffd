//! vLLM's optional result keys against the simulated server on 127.0.0.1:0:
//! `--probe-request-rate` probes (outside the concurrency cap, reported apart) and the
//! `spec_decode_*` figures from `/metrics` before and after the run.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::bench::vllm::session;
use llmspeed::clock::Clock;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use mock::MockServer;
use serde_json::Value;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

async fn run(m: &MockServer, dir: &std::path::Path, extra: &[&str]) -> (Value, String) {
    let url = m.url();
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--ready-check-timeout-sec",
        "10",
        "--num-prompts",
        "16",
        "--random-input-len",
        "16",
        "--random-output-len",
        "32",
        "--max-concurrency",
        "2",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ];
    argv.extend_from_slice(extra);
    let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let mut out = Vec::new();
    let files = session::execute(
        &cfg,
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
        &mut out,
        &mut |_: &str| {},
    )
    .await
    .expect("session");
    let v = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    (v, String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_spec_decode_figures_are_reported_apart_under_vllms_keys() {
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 2000.0;
    cfg.spec_decode_acceptance = vec![0.8, 0.5];
    let m = MockServer::start(cfg).await;
    let dir = tempfile::tempdir().unwrap();
    let (v, console) = run(&m, dir.path(), &["--probe-request-rate", "20"]).await;
    m.stop().await;

    // Probes are not benchmark requests.
    assert_eq!(v["completed"], 16, "{v}");
    assert_eq!(v["total_output_tokens"], 16 * 32);
    let probes = v["probe_completed"].as_u64().unwrap();
    assert!(probes >= 2, "{probes} probes in {} s", v["duration"]);
    assert_eq!(v["probe_failed"], 0);
    // Outside the cap of 2: a one-token probe does not wait for a 32-token request's slot,
    // so it takes a fraction of a request's latency.
    let (median, p99, max) = (
        v["probe_median_e2el_ms"].as_f64().unwrap(),
        v["probe_p99_e2el_ms"].as_f64().unwrap(),
        v["probe_max_e2el_ms"].as_f64().unwrap(),
    );
    assert!(
        median > 0.0 && median <= p99 && p99 <= max,
        "{median} {p99} {max}"
    );
    let req_ttft = v["mean_ttft_ms"].as_f64().unwrap();
    let req_tpot = v["mean_tpot_ms"].as_f64().unwrap();
    let req_e2el = req_ttft + 31.0 * req_tpot;
    assert!(
        median < req_e2el / 2.0,
        "probe {median} ms vs request {req_e2el} ms"
    );
    assert!(console.contains("Probe Requests"), "{console}");

    // One fake draft per generated token (the run's and the probes'), two tokens a draft,
    // positions accepted 80% and 50% of the time.
    let drafts = v["spec_decode_num_drafts"].as_u64().unwrap();
    assert_eq!(drafts, 16 * 32 + probes);
    assert_eq!(v["spec_decode_draft_tokens"].as_u64().unwrap(), 2 * drafts);
    let per: Vec<f64> = v["spec_decode_per_position_acceptance_rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(per.len(), 2);
    assert!(
        (per[0] - 0.8).abs() < 0.01 && (per[1] - 0.5).abs() < 0.01,
        "{per:?}"
    );
    let rate = v["spec_decode_acceptance_rate"].as_f64().unwrap();
    assert!((rate - 65.0).abs() < 1.0, "{rate}");
    let len = v["spec_decode_acceptance_length"].as_f64().unwrap();
    assert!((len - 2.3).abs() < 0.02, "{len}");
    let accepted = v["spec_decode_accepted_tokens"].as_u64().unwrap();
    assert!((rate - accepted as f64 / (2 * drafts) as f64 * 100.0).abs() < 1e-9);
    assert!(console.contains("Speculative Decoding"), "{console}");

    // Without either feature, none of their keys.
    let m = MockServer::start(MockConfig::profile(Profile::Fast)).await;
    let (v, _) = run(&m, dir.path(), &[]).await;
    m.stop().await;
    let o = v.as_object().unwrap();
    assert!(
        !o.keys()
            .any(|k| k.starts_with("probe_") || k.starts_with("spec_decode_")),
        "{:?}",
        o.keys()
    );
}

/// `--lora-modules` with `--lora-assignment`: the benchmark requests name the adapters (the
/// server counts them by name), round-robin exactly, random seeded and covering both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_modules_are_named_by_the_requests() {
    for (how, want) in [("round-robin", Some((8, 8))), ("random", None)] {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Default::default()));
        let mut cfg = MockConfig::profile(Profile::Fast);
        cfg.lora_modules = vec!["lora-a".into(), "lora-b".into()];
        cfg.model_calls = Some(calls.clone());
        let m = MockServer::start(cfg).await;
        let dir = tempfile::tempdir().unwrap();
        let (v, _) = run(
            &m,
            dir.path(),
            &[
                "--model",
                "mock-model",
                "--lora-modules",
                "lora-a",
                "lora-b",
                "--lora-assignment",
                how,
            ],
        )
        .await;
        m.stop().await;
        assert_eq!(v["completed"], 16, "{v}");
        let c: std::collections::BTreeMap<String, u64> = calls.lock().unwrap().clone();
        let (a, b) = (
            c.get("lora-a").copied().unwrap_or(0),
            c.get("lora-b").copied().unwrap_or(0),
        );
        assert_eq!(a + b, 16, "{how}: {c:?}");
        match want {
            Some(w) => assert_eq!((a, b), w, "{how}"),
            None => assert!(a > 0 && b > 0, "{how}: {c:?}"),
        }
    }
}
