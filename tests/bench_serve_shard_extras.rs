//! llmspeed's extras keep vLLM 0.33's newer keys: a run with a ramp-up, `--goodput`, every
//! `--percentile-metrics` metric and a server sending its per-request metrics goes through
//! `--num-runs 2`, and through `--shard K/3` three times at once merged by `llmspeed merge`,
//! each run by the binary against the simulated server on 127.0.0.1:0. The merged result has a
//! single run's keys in a single run's order, and its values are the shards' own: the server's
//! lists are the shards' lists put back in request order, the ramp's rates are the single run's,
//! the TTFT split and the goodput are recomputed from the pooled requests, and each shard's
//! client lag is kept under its shard.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;
use support::mock::MockThread;

const PROMPTS: usize = 12;
const N: usize = 3;

/// The run: a linear ramp from 20 to 60 requests/s, a concurrency limit (vLLM reports the
/// client queue time only under one), goodput SLOs every request meets on the fast mock, every
/// metric vLLM 0.33 knows, the per-request lists.
const FLAGS: &[&str] = &[
    "--dataset-name",
    "random",
    "--num-prompts",
    "12",
    "--random-input-len",
    "16",
    "--random-output-len",
    "4",
    "--seed",
    "5",
    "--ramp-up-strategy",
    "linear",
    "--ramp-up-start-rps",
    "20",
    "--ramp-up-end-rps",
    "60",
    "--max-concurrency",
    "4",
    "--goodput",
    "ttft:60000",
    "e2el:60000",
    "--percentile-metrics",
    "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue",
    "--metric-percentiles",
    "50,99",
    "--save-detailed",
    "--ready-check-timeout-sec",
    "10",
];

fn mock() -> MockThread {
    let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    cfg.per_request_metrics = true;
    MockThread::start(cfg)
}

fn bench(url: &str, dir: &Path, file: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_llmspeed"));
    c.args(["bench", "serve", "--base-url", url])
        .args(FLAGS)
        .args(["--save-result", "--result-dir"])
        .arg(dir)
        .args(["--result-filename", file])
        .args(extra);
    c
}

fn read(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// The top-level keys of a result file in the order written.
fn keys(p: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(p).unwrap();
    let v: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    // serde_json keeps file order with its `preserve_order` feature only; find each key's
    // position in the text instead.
    let mut k: Vec<(usize, String)> = v
        .keys()
        .map(|k| (text.find(&format!("\"{k}\":")).unwrap(), k.clone()))
        .collect();
    k.sort();
    k.into_iter().map(|(_, k)| k).collect()
}

fn floats(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("{key}: {x}")))
        .collect()
}

fn rates(v: &Value) -> Vec<i64> {
    v["rps_change_events"]
        .as_array()
        .expect("rps_change_events")
        .iter()
        .map(|e| e["rps"].as_i64().unwrap())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// What every result of this run must carry, whichever way it was run.
fn has_the_newer_keys(v: &Value, what: &str) {
    assert_eq!(v["completed"], PROMPTS, "{what}");
    for k in ["server_queue_times", "server_ttfts"] {
        assert_eq!(floats(v, k).len(), PROMPTS, "{what}: {k}");
    }
    // A linear ramp over 12 requests from 20 to 60 passes every whole rate between.
    assert_eq!(rates(v), (20..=60).collect::<Vec<i64>>(), "{what}");
    // Every request meets SLOs of a minute: goodput is the request throughput.
    let (good, done, dur) = (
        v["request_goodput"].as_f64().unwrap(),
        v["completed"].as_f64().unwrap(),
        v["duration"].as_f64().unwrap(),
    );
    assert!(close(good, done / dur), "{what}: goodput {good}");
    for k in [
        "p99_ttft_ms",
        "p99_tpot_ms",
        "p99_itl_ms",
        "p99_e2el_ms",
        "p99_client_queue_time_ms",
    ] {
        assert!(v[k].is_number(), "{what}: {k} is {}", v[k]);
    }
    // vLLM writes the queue-inclusive E2EL only at a finite --request-rate, which a ramp
    // leaves at inf.
    assert!(
        v.get("p99_e2el_including_client_queue_ms").is_none(),
        "{what}"
    );
    // Our split of each TTFT, over every request (the mock reports both figures for each).
    let split = &v["llmspeed"]["ttft_split_ms"];
    assert_eq!(split["requests"], PROMPTS, "{what}: {split}");
    let queue_ms: Vec<f64> = floats(v, "server_queue_times")
        .iter()
        .map(|s| s * 1e3)
        .collect();
    let mean = queue_ms.iter().sum::<f64>() / PROMPTS as f64;
    let got = split["server_queue"]["mean"].as_f64().unwrap();
    assert!((got - mean).abs() < 1e-9, "{what}: {got} vs {mean}");
}

#[test]
fn two_runs_keep_vllms_newer_keys() {
    let m = mock();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&m.url(), dir.path(), "r.json", &["--num-runs", "2"])
        .output()
        .unwrap();
    m.stop();
    assert!(out.status.success(), "{out:?}");
    let files: Vec<PathBuf> = ["r-run1.json", "r-run2.json"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    for f in &files {
        has_the_newer_keys(&read(f), &f.display().to_string());
    }
    assert_eq!(keys(&files[0]), keys(&files[1]));
    let s = read(&dir.path().join("r-runs.json"));
    assert_eq!(s["num_runs"], 2);
    let g = floats(&s["metrics"]["request_goodput"], "values");
    let want: Vec<f64> = files
        .iter()
        .map(|f| read(f)["request_goodput"].as_f64().unwrap())
        .collect();
    assert_eq!(g, want);
}

#[test]
fn shards_merge_with_vllms_newer_keys() {
    let m = mock();
    let dir = tempfile::tempdir().unwrap();
    let single = bench(&m.url(), dir.path(), "single.json", &[])
        .output()
        .unwrap();
    assert!(single.status.success(), "{single:?}");
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2;
    let at = at.to_string();
    let children: Vec<_> = (0..N)
        .map(|k| {
            bench(
                &m.url(),
                dir.path(),
                &format!("shard-{k}.json"),
                &["--shard", &format!("{k}/{N}"), "--start-at", &at],
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    m.stop();
    let shard_files: Vec<PathBuf> = (0..N)
        .map(|k| dir.path().join(format!("shard-{k}.json")))
        .collect();
    let merged_file = dir.path().join("merged.json");
    let out = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .arg("merge")
        .args(&shard_files)
        .arg("--save-detailed")
        .arg("--result-filename")
        .arg(&merged_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let merged = read(&merged_file);
    has_the_newer_keys(&merged, "merged");
    // A single run's keys, in its order.
    assert_eq!(keys(&merged_file), keys(&dir.path().join("single.json")));

    let shards: Vec<Value> = shard_files.iter().map(|f| read(f)).collect();
    let sum = |k: &str| -> u64 { shards.iter().map(|s| s[k].as_u64().unwrap()).sum() };
    for k in ["completed", "total_input_tokens", "total_output_tokens"] {
        assert_eq!(merged[k].as_u64(), Some(sum(k)), "{k}");
    }
    // The server's lists: each shard's entries, by the request numbers its block records,
    // land at those numbers in the merged lists, unchanged.
    for k in ["server_queue_times", "server_ttfts"] {
        let pooled = floats(&merged, k);
        let mut seen = 0;
        for s in &shards {
            let own = floats(s, k);
            let reqs = s["llmspeed"]["shard"]["requests"].as_array().unwrap();
            assert_eq!(own.len(), reqs.len());
            for (x, r) in own.iter().zip(reqs) {
                assert_eq!(pooled[r["index"].as_u64().unwrap() as usize], *x, "{k}");
                seen += 1;
            }
        }
        assert_eq!(seen, PROMPTS);
    }
    // By hand: request 4 is shard 1's second request (4 % 3 == 1).
    assert_eq!(
        floats(&merged, "server_ttfts")[4],
        floats(&shards[1], "server_ttfts")[1]
    );
    // The ramp's events are stamped on the merged run's clock, in time order.
    let stamps: Vec<&str> = merged["rps_change_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    // Each shard's own client lag, by shard.
    let lag = merged["llmspeed"]["client_lag_by_shard"]
        .as_array()
        .unwrap();
    assert_eq!(lag.len(), N);
    for (k, (l, s)) in lag.iter().zip(&shards).enumerate() {
        assert_eq!(l["shard"], format!("{k}/{N}"));
        assert!(s["llmspeed"]["client_lag"].is_object(), "{s}");
        assert_eq!(l["client_lag"], s["llmspeed"]["client_lag"]);
    }
}
