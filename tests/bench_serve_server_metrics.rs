//! The server's own timing of each request (vLLM's `--enable-per-request-metrics`) through
//! `bench serve`, against the simulated server's ground truth: the mock sends `metrics` made of
//! its engine's queued, scheduled and token times and writes the same times into its trace;
//! the result's `server_queue_times` and `server_ttfts` must be those times, request by request
//! (matched through `x-request-id`), and our split of each TTFT must add up with a rest that is
//! never negative (the server's part of a request lies inside the client's).

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::mock::{serve, MockConfig, Profile};
use llmspeed::net::Cancel;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

const N: usize = 12;

/// Runs `bench serve` against a mock that holds two sequences at a time (so most requests
/// queue in its engine); returns the run's result object and the trace's lines.
async fn run_against_mock(metrics: bool, trace: &Path, extra: &[&str]) -> (run::RunOutput, Value) {
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 2000.0;
    cfg.engine.max_num_seqs = 2;
    cfg.per_request_metrics = metrics;
    cfg.trace = Some(trace.to_path_buf());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, cfg, async move {
        let _ = rx.await;
    }));
    let n = N.to_string();
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--num-prompts",
        &n,
        "--random-input-len",
        "32",
        "--random-output-len",
        "6",
        "--request-id-prefix",
        "sm-",
    ];
    argv.extend_from_slice(extra);
    let serve_cfg: ServeConfig = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let out = run::run(&serve_cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("mock did not stop")
        .unwrap()
        .expect("mock failed");
    let v = Value::Object(out.pairs(true).into_iter().collect());
    (out, v)
}

/// The engine's times of each request by id: (queued, scheduled, first token due), ns.
fn engine_times(trace: &Path) -> BTreeMap<String, (u64, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["request_id"].as_str().unwrap().to_string();
        let (q, s, due) = (
            v["queued_ns"].as_u64().unwrap(),
            v["scheduled_ns"].as_u64().unwrap(),
            v["due_ns"].as_u64().unwrap(),
        );
        let e = out.entry(id).or_insert((q, s, due));
        assert_eq!(
            (e.0, e.1),
            (q, s),
            "one queued and scheduled time per request"
        );
        e.2 = e.2.min(due);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_lists_are_the_engines_times_and_the_ttft_split_adds_up() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let (out, v) = run_against_mock(true, &trace, &[]).await;
    assert_eq!(v["completed"], N);
    let truth = engine_times(&trace);
    assert_eq!(truth.len(), N);
    let queue = v["server_queue_times"]
        .as_array()
        .expect("server_queue_times");
    let sttft = v["server_ttfts"].as_array().expect("server_ttfts");
    assert_eq!((queue.len(), sttft.len()), (N, N));
    let mut queued = 0;
    for i in 0..N {
        // Request i went out as `sm-{i}`; vLLM's lists are in request order, in seconds.
        let (q, s, first) = truth[&format!("sm-{i}")];
        let want_q = (s - q) as f64 / 1e9;
        let want_s = (first - s) as f64 / 1e9;
        let got_q = queue[i].as_f64().unwrap();
        let got_s = sttft[i].as_f64().unwrap();
        assert!(
            (got_q - want_q).abs() < 1e-12,
            "request {i}: queue {got_q} vs {want_q}"
        );
        assert!(
            (got_s - want_s).abs() < 1e-12,
            "request {i}: TTFT {got_s} vs {want_s}"
        );
        if want_q > 0.005 {
            queued += 1;
        }
        // The server's queue and TTFT lie inside the client's TTFT of the same request.
        let ttft = out.detailed.ttfts[i];
        assert!(
            ttft >= got_q + got_s,
            "request {i}: client TTFT {ttft} s < server queue {got_q} + server TTFT {got_s}"
        );
    }
    // Twelve at once into two engine slots: most of them waited in the engine's queue.
    assert!(queued >= 6, "{queue:?}");
    // Our split: every request, parts that add up to the client's TTFT.
    let split = &v["llmspeed"]["ttft_split_ms"];
    assert_eq!(split["requests"], N, "{split}");
    let mean = |k: &str| split[k]["mean"].as_f64().unwrap();
    assert!(
        (mean("server_queue") + mean("server_ttft") + mean("rest") - mean("ttft")).abs() < 1e-6,
        "{split}"
    );
    let ttft_mean_ms = out.detailed.ttfts.iter().sum::<f64>() / N as f64 * 1e3;
    assert!((mean("ttft") - ttft_mean_ms).abs() < 1e-6, "{split}");
    let want_queue_ms = queue.iter().map(|x| x.as_f64().unwrap()).sum::<f64>() / N as f64 * 1e3;
    assert!(
        (mean("server_queue") - want_queue_ms).abs() < 1e-6,
        "{split}"
    );
    assert!(split["rest"]["min"].as_f64().unwrap() >= 0.0, "{split}");
    // vLLM writes the lists only with --save-detailed: right after rtfx.
    let keys: Vec<String> = out.pairs(true).into_iter().map(|(k, _)| k).collect();
    let at = keys.iter().position(|k| k == "rtfx").unwrap();
    assert_eq!(keys[at + 1..at + 3], ["server_queue_times", "server_ttfts"]);
    assert!(out
        .pairs(false)
        .iter()
        .all(|(k, _)| k != "server_queue_times" && k != "server_ttfts"));
    // The console says it in one line.
    let mut console = Vec::new();
    let cfg_for_report = {
        let argv = ["x", "--base-url", "http://127.0.0.1:9"];
        Wrap::parse_from(argv).a.validate().unwrap()
    };
    run::report(&cfg_for_report, &out, &mut console).unwrap();
    let console = String::from_utf8(console).unwrap();
    assert!(
        console.contains(&format!(
            "llmspeed: TTFT split (mean of {N} requests with the server's metrics): server queue {:.2} ms",
            mean("server_queue")
        )),
        "{console}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_servers_metrics_nothing_is_added() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let (out, v) = run_against_mock(false, &trace, &[]).await;
    assert_eq!(v["completed"], N);
    assert!(v.get("server_queue_times").is_none() && v.get("server_ttfts").is_none());
    assert!(v["llmspeed"].get("ttft_split_ms").is_none());
    assert!(out.server_lists.is_empty());
}
