//! Load from many machines, locally: `bench serve --shard K/3` three times at once against the
//! simulated server on 127.0.0.1:0, merged (in-process and by the `llmspeed merge` binary),
//! against one process sending the same requests.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::analysis::stats::Summary;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::merge::{self, ShardResult};
use llmspeed::bench::vllm::{result, run};
use llmspeed::clock::Clock;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use mock::MockServer;
use serde_json::Value;
use std::time::SystemTime;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

const N: usize = 3;
const PROMPTS: usize = 15;
const PERCENTILES: [f64; 4] = [25.0, 50.0, 90.0, 99.0];

fn config(m: &MockServer, extra: &[&str]) -> ServeConfig {
    let url = m.url();
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--ready-check-timeout-sec",
        "10",
        "--dataset-name",
        "random",
        "--random-input-len",
        "24",
        "--random-output-len",
        "6",
        "--num-prompts",
        "15",
        "--request-rate",
        "60",
        "--seed",
        "11",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "25,50,90,99",
    ];
    argv.extend_from_slice(extra);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

async fn one(cfg: &ServeConfig) -> Value {
    let o = run::run(cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    Value::Object(o.pairs(cfg.save_detailed).into_iter().collect())
}

fn seconds(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_merge_to_the_single_run() {
    let m = MockServer::start(MockConfig::profile(Profile::Fast)).await;
    let single = one(&config(&m, &["--save-detailed"])).await;

    // All three start on one wall-clock second, as the Kubernetes Job's pods do.
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    let at = format!("{}", now.as_secs() + 2);
    let cfgs: Vec<ServeConfig> = (0..N)
        .map(|k| config(&m, &["--shard", &format!("{k}/{N}"), "--start-at", &at]))
        .collect();
    assert!(
        cfgs.iter().all(|c| c.save_detailed),
        "--shard implies --save-detailed"
    );
    let (a, b, c) = tokio::join!(one(&cfgs[0]), one(&cfgs[1]), one(&cfgs[2]));
    m.stop().await;
    let shard_values = [a, b, c];

    // Each shard sent exactly its share: i % 3 == K.
    for (k, v) in shard_values.iter().enumerate() {
        let reqs = v["llmspeed"]["shard"]["requests"].as_array().unwrap();
        let idx: Vec<u64> = reqs.iter().map(|r| r["index"].as_u64().unwrap()).collect();
        let want: Vec<u64> = (k as u64..PROMPTS as u64).step_by(N).collect();
        assert_eq!(idx, want, "shard {k}");
        assert_eq!(v["completed"], want.len());
    }

    let shards: Vec<ShardResult> = shard_values
        .iter()
        .enumerate()
        .map(|(k, v)| ShardResult::from_json(&format!("shard-{k}.json"), v).unwrap())
        .collect();
    let merged = merge::merge(&shards, "d".into()).expect("merge");
    assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
    let mm = &merged.metrics;

    // Same requests as the single process: same count, same tokens.
    assert_eq!(mm.completed, PROMPTS);
    assert_eq!(single["completed"], PROMPTS);
    assert_eq!(mm.failed, 0);
    assert_eq!(single["total_input_tokens"], mm.total_input_tokens);
    assert_eq!(single["total_output_tokens"], mm.total_output_tokens);
    assert_eq!(mm.total_output_tokens, (PROMPTS * 6) as u64);

    // Same schedule: request i was due at the single run's offset, moved by its shard's start
    // on the common base (exact up to the float seconds of the JSON lists).
    let offsets: Vec<f64> = merged.extras["merged_from"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["start_offset_ms"].as_f64().unwrap() / 1e3)
        .collect();
    let single_starts = seconds(&single, "start_times");
    for (i, (&ms, &ss)) in merged
        .detailed
        .start_times
        .iter()
        .zip(&single_starts)
        .enumerate()
    {
        assert!(
            (ms - ss - offsets[i % N]).abs() < 1e-6,
            "request {i}: merged {ms}, single {ss}, shard offset {}",
            offsets[i % N]
        );
    }
    // The shards did start together: the offsets are the timer's, not seconds.
    assert!(offsets.iter().all(|&o| o < 0.1), "{offsets:?}");

    // Pooled, never averaged: the merged percentiles are those of the union of the shards'
    // own per-request values (vLLM's `ttfts` and `itls` lists).
    let ttfts: Vec<f64> = shard_values
        .iter()
        .flat_map(|v| seconds(v, "ttfts"))
        .map(|s| s * 1e3)
        .collect();
    let itls: Vec<f64> = shard_values
        .iter()
        .flat_map(|v| v["itls"].as_array().unwrap().clone())
        .flat_map(|l| {
            l.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() * 1e3)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(ttfts.len(), PROMPTS);
    assert_eq!(itls.len(), PROMPTS * 5);
    for (got, values) in [(&mm.ttft_ms, &ttfts), (&mm.itl_ms, &itls)] {
        let want = Summary::or_zero(values, &PERCENTILES);
        assert!(close(got.mean, want.mean), "{got:?} vs {want:?}");
        for ((p, g), (_, w)) in got.percentiles.iter().zip(&want.percentiles) {
            assert!(close(*g, *w), "p{p}: merged {g}, union {w}");
        }
    }
    // Throughput is over the union of the windows, earliest start to latest end.
    let lo = shards
        .iter()
        .map(|s| s.block.ran.start_unix_ns)
        .min()
        .unwrap();
    let hi = shards
        .iter()
        .map(|s| s.block.ran.end_unix_ns)
        .max()
        .unwrap();
    assert!(close(mm.duration_s, (hi - lo) as f64 / 1e9));
    assert!(close(mm.request_throughput, PROMPTS as f64 / mm.duration_s));

    // The binary merges the saved files to the same figures.
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (k, v) in shard_values.iter().enumerate() {
        let p = dir.path().join(format!("shard-{k}.json"));
        let pairs: Vec<(String, Value)> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        result::save(&p, &pairs, false).unwrap();
        files.push(p);
    }
    let out = dir.path().join("merged.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .arg("merge")
        .args(&files)
        .arg("--save-detailed")
        .arg("--result-filename")
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["completed"], PROMPTS);
    assert_eq!(v["total_output_tokens"], mm.total_output_tokens);
    assert_eq!(
        v["p99_itl_ms"].as_f64().unwrap(),
        mm.itl_ms.percentiles[3].1
    );
    assert_eq!(v["median_ttft_ms"].as_f64().unwrap(), mm.ttft_ms.median);
    assert_eq!(v["ttfts"].as_array().unwrap().len(), PROMPTS);
    assert_eq!(v["llmspeed"]["merged_from"].as_array().unwrap().len(), N);
    // The tool that merged, as `llmspeed --version` names it (tests/version.rs).
    assert_eq!(v["llmspeed"]["version"], llmspeed::VERSION);
    // A missing shard is refused, not merged into a smaller run.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .arg("merge")
        .args(&files[..2])
        .arg("--result-filename")
        .arg(dir.path().join("partial.json"))
        .output()
        .unwrap();
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("missing shard(s) 2/3"));
}

/// One shard of one is the single run: merging it changes no figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shard_merges_to_itself() {
    let m = MockServer::start(MockConfig::profile(Profile::Fast)).await;
    let v = one(&config(&m, &["--shard", "0/1"])).await;
    m.stop().await;
    let merged = merge::merge(&[ShardResult::from_json("s", &v).unwrap()], "d".into()).unwrap();
    let mm = &merged.metrics;
    assert_eq!(v["completed"], mm.completed);
    for (key, got) in [
        ("duration", mm.duration_s),
        ("mean_ttft_ms", mm.ttft_ms.mean),
        ("p99_ttft_ms", mm.ttft_ms.percentiles[3].1),
        ("p90_itl_ms", mm.itl_ms.percentiles[2].1),
        ("median_tpot_ms", mm.tpot_ms.median),
        ("p25_e2el_ms", mm.e2el_ms.percentiles[0].1),
        ("output_throughput", mm.output_throughput),
        ("max_output_tokens_per_s", mm.max_output_tokens_per_s),
    ] {
        assert_eq!(v[key].as_f64().unwrap(), got, "{key}");
    }
}

#[test]
fn shard_flags_are_checked() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["x", "--base-url", "http://127.0.0.1:9"];
        argv.extend_from_slice(extra);
        Wrap::try_parse_from(argv)
            .map_err(|e| e.to_string())
            .and_then(|w| w.a.validate())
    };
    let c = parse(&["--shard", "2/4", "--start-at", "1796050800.25"]).unwrap();
    assert_eq!(c.shard.map(|s| (s.index, s.count)), Some((2, 4)));
    assert_eq!(c.start_at_unix_ns, Some(1_796_050_800_250_000_000));
    assert!(c.save_detailed);
    assert!(!parse(&[]).unwrap().save_detailed);
    for bad in [
        &["--shard", "4/4"][..],
        &["--shard", "1/4", "--num-runs", "2"],
        &["--shard", "1/4", "--sweep-max-concurrency", "1,2"],
        &["--start-at", "tomorrow"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}
