//! vLLM's own parameter sweep driving llmspeed: `vllm bench sweep serve` (vLLM 0.33.0, the
//! reference of `scripts/references.sh`) starts `llmspeed mock` as its server, waits for its
//! `/health`, and runs `llmspeed bench serve` as its bench command once per run and per bench
//! parameter, appending `--percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir D
//! --result-filename run=N.json`; then it reads every result file back, adds its own keys and
//! writes the combination's summary and the sweep's summary.csv. Everything it reads must be
//! where and what vLLM's own bench would have written.
//!
//! Needs the reference (`.ci/run` exports `LLMSPEED_VLLM_REF_PYTHON`) and the tiny tokenizer
//! of `scripts/vllm-server.sh` (`LLMSPEED_VLLM_MODEL`): NOT RUN without them, a failure under
//! `CI=true`.

#[path = "conformance/reference.rs"]
mod reference;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// A port the OS hands out for 127.0.0.1 (bound on port 0, then let go). The sweep polls the
/// `--host` and `--port` written in its serve command, so the mock's port must be in it.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn tail(s: &[u8]) -> String {
    let s = String::from_utf8_lossy(s);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[test]
fn vllm_bench_sweep_serve_runs_llmspeed_as_its_server_and_its_bench() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let Some(tokenizer) = reference::tiny_tokenizer() else {
        return;
    };
    let llmspeed = env!("CARGO_BIN_EXE_llmspeed");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = free_port().to_string();
    let params = dir.join("bench-params.json");
    std::fs::write(
        &params,
        r#"[{"max_concurrency": 1}, {"max_concurrency": 3}]"#,
    )
    .unwrap();
    const PROMPTS: u64 = 5;
    let serve = format!("{llmspeed} mock --host 127.0.0.1 --port {port} --profile fast");
    // As a user writes it for vLLM's bench: --host and --port, not a URL.
    let bench = format!(
        "{llmspeed} bench serve --host 127.0.0.1 --port {port} --tokenizer {} \
         --dataset-name random --random-input-len 16 --random-output-len 4 \
         --num-prompts {PROMPTS} --disable-tqdm",
        tokenizer.display()
    );
    let out = Command::new(&python)
        .args(["-m", "vllm.entrypoints.cli.main", "bench", "sweep", "serve"])
        .args(["--serve-cmd", &serve, "--bench-cmd", &bench])
        // The sweep resets caches only for a server command ending in `vllm`; the mock has
        // none to reset, so the after-bench step is a no-op command (as for any other server).
        .args(["--after-bench-cmd", "true"])
        .args(["--bench-params", params.to_str().unwrap()])
        .args(["--num-runs", "2", "--server-ready-timeout", "60"])
        .args([
            "--output-dir",
            dir.to_str().unwrap(),
            "--experiment-name",
            "e",
        ])
        .env("HF_HUB_OFFLINE", "1")
        .env("VLLM_NO_USAGE_STATS", "1")
        .env("PYTHONWARNINGS", "ignore")
        .output()
        .expect("run the reference's sweep");
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
    assert!(out.status.success(), "the sweep failed\n{said}");

    let experiment = dir.join("e");
    let mut combos: Vec<PathBuf> = std::fs::read_dir(&experiment)
        .unwrap_or_else(|e| panic!("{}: {e}\n{said}", experiment.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    combos.sort();
    assert_eq!(combos.len(), 2, "{combos:?}\n{said}");
    let mut seen = Vec::new();
    for combo in &combos {
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(combo.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary.as_array().map(Vec::len), Some(2), "{summary}");
        for run in 0..2u64 {
            let file = combo.join(format!("run={run}.json"));
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            // Our result, as vLLM's bench writes it: its keys with their meaning...
            assert_eq!(v["completed"], PROMPTS, "{}", file.display());
            assert_eq!(v["failed"], 0, "{}", file.display());
            assert_eq!(v["num_prompts"], PROMPTS, "{}", file.display());
            // ...the percentile metrics the sweep appended (e2el is not in the default)...
            for key in ["p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"] {
                assert!(v[key].is_number(), "{key} in {}", file.display());
            }
            // ...our own figures under our one key, and what the sweep added after the run.
            assert!(v["llmspeed"].is_object(), "{}", file.display());
            assert_eq!(v["run_number"], run, "{}", file.display());
            // The bench parameter reached our command line and our result.
            let mc = v["max_concurrency"].as_u64().expect("max_concurrency");
            assert_eq!(
                v["max_concurrency"],
                summary[run as usize]["max_concurrency"]
            );
            seen.push(mc);
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, [1, 1, 3, 3], "{said}");
    // The sweep's table over all runs (pandas): a header and one row per run.
    let csv = std::fs::read_to_string(experiment.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    let header = csv.lines().next().unwrap_or("");
    for col in [
        "completed",
        "request_throughput",
        "mean_ttft_ms",
        "max_concurrency",
        "run_number",
    ] {
        assert!(header.split(',').any(|h| h == col), "{col} not in {header}");
    }
}
