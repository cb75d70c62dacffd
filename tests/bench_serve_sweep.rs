//! `bench serve` sessions end to end against the simulated server on 127.0.0.1:0: sweep points
//! and their files, `--num-runs` and its spread, the steady-state window against the run's own
//! per-request intervals and the engine's timing, and `--dry-run` sending nothing.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::{run, session};
use llmspeed::clock::Clock;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use mock::MockServer;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Sub-millisecond prefill and a 2 ms decode step (the engine model the timing checks use).
async fn start_mock() -> MockServer {
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 2000.0;
    MockServer::start(cfg).await
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

fn config(m: &MockServer, extra: &[&str]) -> ServeConfig {
    let url = m.url();
    let mut argv = vec!["x", "--base-url", &url];
    argv.extend_from_slice(extra);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

async fn execute(cfg: &ServeConfig) -> (Vec<PathBuf>, String) {
    let mut out = Vec::new();
    let mut no_progress = |_: &str| {};
    let files = session::execute(
        cfg,
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
        &mut out,
        &mut no_progress,
    )
    .await
    .expect("session");
    (files, String::from_utf8(out).unwrap())
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn name(p: &Path) -> &str {
    p.file_name().unwrap().to_str().unwrap()
}

/// vLLM's single-run keys (tests/data/bench_serve_keys.txt): a closed loop's steady state is
/// under `llmspeed` (vLLM 0.33 writes none), so every run has exactly these.
fn want_keys() -> Vec<String> {
    include_str!("data/bench_serve_keys.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

/// Keys in file order (serde_json's `preserve_order` is off, so read them by hand).
fn keys_in_order(p: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(p).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<(usize, String)> = v
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (text.find(&format!("\"{k}\": ")).unwrap(), k.clone()))
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, k)| k).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_sweep_writes_one_result_per_point_and_a_summary() {
    let m = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let cfg = config(
        &m,
        &[
            "--sweep-max-concurrency",
            "1,4",
            "--sweep-num-prompts-factor",
            "3",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--save-result",
            "--result-dir",
            &d,
        ],
    );
    let (files, console) = execute(&cfg).await;
    m.stop().await;
    assert_eq!(files.len(), 4, "{files:?}");
    let (c1, c4, summary) = (&files[0], &files[1], &files[2]);
    // The sweep's page lies next to the summary, under the same name.
    assert_eq!(files[3], summary.with_extension("html"));
    let page = std::fs::read_to_string(&files[3]).expect("the sweep page was written");
    assert!(page.contains("<section id=\"pareto\">"), "{page}");
    assert!(
        name(c1).starts_with("openai-infqps-concurrency1-mock-model-"),
        "{c1:?}"
    );
    assert!(
        name(c4).starts_with("openai-infqps-concurrency4-mock-model-"),
        "{c4:?}"
    );
    assert!(
        name(summary).starts_with("openai-sweep-max_concurrency-mock-model-"),
        "{summary:?}"
    );
    // One date names the whole session.
    let date = |p: &Path| name(p).rsplit('-').take(2).collect::<Vec<_>>().join("-");
    assert_eq!(date(c1), date(summary));
    let s = read(summary);
    assert_eq!(s["values"], serde_json::json!([1, 4]));
    for (i, (file, n, prompts)) in [(c1, 1, 3), (c4, 4, 12)].into_iter().enumerate() {
        assert_eq!(keys_in_order(file), want_keys(), "{file:?}");
        let v = read(file);
        assert_eq!(
            (v["max_concurrency"].as_u64(), v["completed"].as_u64()),
            (Some(n), Some(prompts))
        );
        assert_eq!(v["num_prompts"], prompts);
        assert_eq!(v["total_output_tokens"], prompts * 8);
        let p = &s["points"][i];
        assert_eq!(p["max_concurrency"], n);
        assert_eq!(p["num_prompts"], prompts);
        assert_eq!(p["request_throughput"], v["request_throughput"]);
        assert_eq!(p["median_ttft_ms"], v["median_ttft_ms"]);
        assert_eq!(p["result_files"][0], file.to_str().unwrap());
    }
    assert!(console.contains("Sweep Summary"), "{console}");
    assert!(console.contains("\nconcurrency=4 "), "{console}");
    assert!(console.contains("Best throughput: "), "{console}");
    // Four slots serve twelve requests faster than one slot serves three... per request: the
    // request rate of the wider point is higher (each request ~8 decode steps either way).
    let rt = |i: usize| s["points"][i]["request_throughput"].as_f64().unwrap();
    assert!(rt(1) > rt(0), "{} vs {}", rt(1), rt(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_sweep_points_keep_vllms_keys_exactly() {
    let m = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let cfg = config(
        &m,
        &[
            "--sweep-request-rate",
            "50,inf",
            "--num-prompts",
            "6",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--save-result",
            "--result-dir",
            &d,
            "--result-filename",
            "r.json",
        ],
    );
    let (files, _) = execute(&cfg).await;
    m.stop().await;
    let names: Vec<&str> = files.iter().map(|p| name(p)).collect();
    assert_eq!(
        names,
        [
            "r-50.0qps.json",
            "r-infqps.json",
            "r-sweep.json",
            "r-sweep.html"
        ]
    );
    // Each chart marks both points (three charts), labelled by their rate.
    let page = std::fs::read_to_string(&files[3]).expect("the sweep page was written");
    assert_eq!(page.matches("<circle class=\"pt").count(), 6, "{page}");
    assert!(page.contains(">inf</text>"), "{page}");
    for f in &files[..2] {
        // No --max-concurrency: exactly vLLM's keys, no steady_state.
        assert_eq!(keys_in_order(f), want_keys(), "{f:?}");
        assert_eq!(read(f)["completed"], 6);
    }
    assert_eq!(read(&files[0])["request_rate"], 50.0);
    assert_eq!(read(&files[1])["request_rate"], "inf");
    let s = read(&files[2]);
    assert_eq!(s["sweep"], "request_rate");
    assert_eq!(s["values"], serde_json::json!([50.0, "inf"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runs_report_their_spread() {
    let m = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let cfg = config(
        &m,
        &[
            "--num-runs",
            "3",
            "--num-prompts",
            "8",
            "--max-concurrency",
            "2",
            "--random-input-len",
            "16",
            "--random-output-len",
            "6",
            "--save-result",
            "--result-dir",
            &d,
            "--result-filename",
            "r.json",
        ],
    );
    let (files, console) = execute(&cfg).await;
    m.stop().await;
    let names: Vec<&str> = files.iter().map(|p| name(p)).collect();
    assert_eq!(
        names,
        ["r-run1.json", "r-run2.json", "r-run3.json", "r-runs.json"]
    );
    let runs: Vec<Value> = files[..3].iter().map(|f| read(f)).collect();
    let s = read(&files[3]);
    assert_eq!(s["num_runs"], 3);
    // The spread is over exactly the three saved results, recomputed here from them.
    let tp = &s["metrics"]["request_throughput"];
    let xs: Vec<f64> = runs
        .iter()
        .map(|r| r["request_throughput"].as_f64().unwrap())
        .collect();
    assert_eq!(tp["values"], serde_json::json!(xs));
    let mean = xs.iter().sum::<f64>() / 3.0;
    let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let close = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(&tp["mean"], mean) && close(&tp["std"], std), "{tp}");
    assert!(close(&tp["cv"], std / mean), "{tp}");
    let half = 4.303 * std / 3f64.sqrt();
    assert!(
        close(&tp["ci95_low"], mean - half) && close(&tp["ci95_high"], mean + half),
        "{tp}"
    );
    assert_eq!(tp["unstable"], std / mean > 0.05);
    // Identical counts every run: no spread, not flagged.
    let c = &s["metrics"]["completed"];
    assert_eq!(
        (
            c["mean"].as_f64(),
            c["std"].as_f64(),
            c["unstable"].as_bool()
        ),
        (Some(8.0), Some(0.0), Some(false))
    );
    assert!(console.contains("Multi-Run Summary (3 runs)"), "{console}");
    assert_eq!(console.matches("Serving Benchmark Result").count(), 3);
}

/// The window, computed naively from the run's own intervals `[start, start + E2EL)`: busy
/// slots counted afresh at every start and end.
fn naive_window(intervals: &[(f64, f64)], need: usize) -> (f64, f64) {
    let busy_at = |t: f64| intervals.iter().filter(|(s, e)| *s <= t && t < *e).count();
    let busy_before = |t: f64| intervals.iter().filter(|(s, e)| *s < t && t <= *e).count();
    let open = intervals
        .iter()
        .map(|iv| iv.0)
        .filter(|&t| busy_at(t) >= need)
        .fold(f64::MAX, f64::min);
    let close = intervals
        .iter()
        .map(|iv| iv.1)
        .filter(|&t| busy_before(t) >= need && busy_at(t) < need)
        .fold(f64::MIN, f64::max);
    (open, close)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_window_matches_the_requests_and_the_engine() {
    let m = start_mock().await;
    let cfg = config(
        &m,
        &[
            "--num-prompts",
            "16",
            "--max-concurrency",
            "4",
            "--random-input-len",
            "16",
            "--random-output-len",
            "20",
            "--save-detailed",
        ],
    );
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    let mut no_ss = cfg.clone();
    no_ss.steady_state = None;
    let out_off = run::run(&no_ss, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    m.stop().await;
    assert_eq!(out.metrics.completed, 16);
    let pairs = out.pairs(true);
    assert!(
        pairs.iter().all(|(k, _)| k != "steady_state"),
        "not vLLM's key"
    );
    let ours = &pairs.last().expect("llmspeed").1;
    let ss = &ours["steady_state"];
    let w = &ss["window"];
    assert_eq!(
        (
            w["target_concurrency"].as_u64(),
            w["threshold_abs"].as_u64()
        ),
        (Some(4), Some(4))
    );
    assert_eq!(w["requests_total"], 16);
    assert_eq!(w["observed_peak"], 4);
    // Against the run's own per-request intervals (start_times and latencies are in request
    // order; every request succeeded), counted naively.
    let d = &out.detailed;
    let iv: Vec<(f64, f64)> = d
        .start_times
        .iter()
        .zip(&out.metrics.latencies_s)
        .map(|(&s, &l)| (s, s + l))
        .collect();
    let base = iv.iter().map(|x| x.0).fold(f64::MAX, f64::min);
    let (open, close) = naive_window(&iv, 4);
    let (ws, we) = (w["start_s"].as_f64().unwrap(), w["end_s"].as_f64().unwrap());
    assert!(
        (ws - (open - base)).abs() < 1e-6,
        "open {ws} vs {}",
        open - base
    );
    assert!(
        (we - (close - base)).abs() < 1e-6,
        "close {we} vs {}",
        close - base
    );
    let started = iv.iter().filter(|x| x.0 >= open && x.0 < close).count();
    let completed = iv.iter().filter(|x| x.1 >= open && x.1 < close).count();
    assert_eq!(w["requests_started_in_window"], started);
    assert_eq!(w["requests_completed_in_window"], completed);
    // The engine: all 16 are due at once and 4 slots open at t = 0, so the window opens with
    // the 4th dispatch (a few ms in at most); each request is 19 decode gaps of >= 2 ms, and
    // the slots stay full for at least three rounds of them.
    assert!(ws < 0.05, "opened at {ws} s");
    assert!(we - ws >= 3.0 * 19.0 * 0.002, "window {ws}..{we} s");
    // Inside the window, requests finish at about 4 slots / E2EL.
    let e2el_s = ss["mean_e2el_ms"].as_f64().unwrap() / 1e3;
    let rt = ss["request_throughput"].as_f64().unwrap();
    assert!(
        (rt * e2el_s / 4.0 - 1.0).abs() < 0.35,
        "{rt} req/s, E2EL {e2el_s} s"
    );
    assert!(ss["output_throughput"].as_f64().unwrap() > 0.0);
    // --no-steady-state: no steady state at all.
    assert!(out_off.extras.get("steady_state").is_none());
    assert!(out_off.steady_state.is_none());
    let mut console = Vec::new();
    run::report(&cfg, &out, &mut console).unwrap();
    assert!(String::from_utf8(console)
        .unwrap()
        .contains("Busy slots needed:                       4 of 4 (95%)"));
}

#[test]
fn dry_run_prints_dataset_statistics_and_sends_nothing() {
    // A listener nobody accepts on: any connection attempt would queue on it.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(["bench", "serve", "--dry-run", "--base-url"])
        .arg(format!("http://{}", l.local_addr().unwrap()))
        .args([
            "--num-prompts",
            "5",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    for line in [
        "Dry run stats:",
        "  Total prompts: 5",
        "  Total input tokens: 160",
        "  Total expected output tokens: 40",
        "  Avg input tokens: 32.0",
        "  Prompt token counting: exact (token ids)",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    assert!(!out.contains("Serving Benchmark Result"));
    // BurstGPT's prompts are token ids too (the dry run called them an estimate).
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("burstgpt.csv");
    std::fs::write(
        &csv,
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
         0,GPT-4,12,5,17,Conversation log\n\
         1,GPT-4,20,7,27,Conversation log\n",
    )
    .unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(["bench", "serve", "--dry-run", "--base-url"])
        .arg(format!("http://{}", l.local_addr().unwrap()))
        .args(["--num-prompts", "2", "--dataset-name", "burstgpt"])
        .arg("--dataset-path")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.contains("  Prompt token counting: exact (token ids)"),
        "{out}"
    );
    assert_eq!(
        l.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}
