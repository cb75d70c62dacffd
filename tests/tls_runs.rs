//! `bench sglang` and `matrix` over TLS, against the simulated server speaking TLS itself
//! (`MockConfig::tls`; its certificate is its own CA, as `openssl req -x509` makes one, given
//! as `--ca-cert`): the reads are the kernel's (or, where a packet socket opens, the packet
//! ring's) stamps of the reads that completed each record, so the runs state their bounds and
//! their Client-bound verdict as plain ones do — never "n/a". `bench serve`'s case is in
//! tests/bench_client_lag.rs; the stamps' truth over TLS against the trace in tests/tls.rs
//! (`selftest` over TLS).
//!
//! Cost: about 12 s on the shared 2-core machine in a debug build (three small runs).

mod support;

use llmspeed::mock::{MockConfig, Profile};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use support::mock::MockThread;

/// The simulated server over TLS (2 ms a token) and the `--ca-cert` file that trusts it.
struct TlsMock {
    mock: MockThread,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsMock {
    fn start() -> TlsMock {
        let (tls, pem) = support::tls_front::self_signed_server_config();
        let mut cfg = MockConfig::profile(Profile::Fast);
        cfg.engine.decode.base_us = 2000.0;
        cfg.tls = Some(tls);
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("cert.pem");
        std::fs::write(&ca, pem).unwrap();
        TlsMock {
            mock: MockThread::start(cfg),
            ca,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("https://{}", self.mock.addr)
    }

    fn ca(&self) -> &str {
        self.ca.to_str().unwrap()
    }
}

fn llmspeed(args: &[&str]) -> Output {
    std::process::Command::new(support::process::bin())
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

/// A run's client lag over TLS: stamped by the kernel or the packet ring (what the machine
/// allows, as over plain), its bounds stated, and a verdict with its reasons exactly when
/// Client-bound.
fn check_lag(what: &str, lag: &Value) {
    assert!(lag["client_bound"].is_boolean(), "{what}: {lag}");
    assert_eq!(
        lag["client_bound_reasons"].as_array().unwrap().is_empty(),
        lag["client_bound"] == false,
        "{what}: {lag}"
    );
    if !cfg!(target_os = "linux") {
        return;
    }
    assert_eq!(
        lag["stamp_source"],
        support::mock::default_stamp_source(),
        "{what}: {lag}"
    );
    assert_eq!(lag["no_bound_reason"], Value::Null, "{what}: {lag}");
    for figure in ["itl_p50", "itl_p99", "ttft_p50"] {
        let b = &lag["bounds_ms"][figure];
        // Stated: a figure and its bound, in numbers (how wide the bound is, and whether the
        // figure is a true gap or tokens read together, depends on how busy the machine is:
        // the verdict's business, checked above).
        let bound = b["bound"]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no {figure} bound: {lag}"));
        assert!(bound.is_finite() && bound >= 0.0, "{what}: {figure} {b}");
        let value = b["value"].as_f64().unwrap_or(f64::NAN);
        assert!(value.is_finite() && value >= 0.0, "{what}: {figure} {b}");
    }
    assert!(
        lag["read_lag_us"]["p50"].as_f64().unwrap() > 0.0,
        "{what}: {lag}"
    );
}

/// The console lines: the bounds stated in figures (no "n/a", no reason in their place), and
/// nothing said about TLS taking them away.
fn check_console(what: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("over TLS"), "{what}: {stderr}");
    if !cfg!(target_os = "linux") {
        return;
    }
    let bounds = stdout
        .lines()
        .find(|l| l.contains("llmspeed: bounds: "))
        .unwrap_or_else(|| panic!("{what}: no bounds line: {stdout}"));
    assert!(
        bounds.contains("ITL p50 ") && !bounds.contains("n/a"),
        "{what}: {bounds}"
    );
}

/// `bench sglang` at the TLS mock (random prompts of 32 tokens, `output` tokens each, at 100
/// requests a second: SGLang's record writes an infinite rate as Python does, `Infinity`) with
/// `flags`; its last record and the process's output.
fn bench_sglang(flags: &[&str], prompts: u32, output: u32) -> (Value, Output) {
    let server = TlsMock::start();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("out.jsonl");
    let url = server.url();
    let (prompts, output) = (prompts.to_string(), output.to_string());
    let mut args = vec!["bench", "sglang", "--base-url", &url];
    args.extend_from_slice(flags);
    let ca = ["--ca-cert", server.ca()];
    if !flags.contains(&"--insecure") {
        args.extend_from_slice(&ca);
    }
    args.extend_from_slice(&[
        "--dataset-name",
        "random",
        "--num-prompts",
        &prompts,
        "--random-input-len",
        "32",
        "--random-output-len",
        &output,
        "--request-rate",
        "100",
        "--output-file",
        file.to_str().unwrap(),
        "--disable-tqdm",
    ]);
    let out = llmspeed(&args);
    server.mock.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let last = text.lines().last().unwrap();
    let v = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    (v, out)
}

#[test]
fn bench_sglang_over_tls_states_its_bounds_and_verdict() {
    let (v, out) = bench_sglang(&["--max-concurrency", "4"], 12, 24);
    assert_eq!(v["completed"], 12, "{v}");
    assert_eq!(v["llmspeed"]["insecure"], false, "{}", v["llmspeed"]);
    let lag = &v["llmspeed"]["client_lag"];
    check_lag("bench sglang", lag);
    check_console("bench sglang", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.contains("WARNING: llmspeed: Client-bound: "),
        lag["client_bound"] == true,
        "{stdout}"
    );
}

#[test]
fn bench_sglang_records_insecure_when_it_skipped_the_check() {
    let (v, _) = bench_sglang(&["--insecure"], 2, 4);
    assert_eq!(v["completed"], 2, "{v}");
    assert_eq!(v["llmspeed"]["insecure"], true, "{}", v["llmspeed"]);
}

/// The decode cells of a matrix's `results.json` in `out`.
fn decode_cells(out: &Path) -> Vec<Value> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    v["decode"].as_array().expect("decode cells").clone()
}

#[test]
fn matrix_over_tls_states_each_cells_bounds_and_verdict() {
    let server = TlsMock::start();
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("m");
    let out = llmspeed(&[
        "matrix",
        "--base-url",
        &server.url(),
        "--ca-cert",
        server.ca(),
        "--contexts",
        "1k",
        "--prefill-contexts",
        "1k",
        "--concurrency",
        "1,4",
        "--duration",
        "1",
        "--max-tokens",
        "64",
        "--out",
        out_dir.to_str().unwrap(),
        "--prompt-cache",
        tmp.path().join("cache").to_str().unwrap(),
    ]);
    server.mock.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("over TLS"), "{stderr}");
    let cells = decode_cells(&out_dir);
    assert_eq!(cells.len(), 2, "{cells:?}");
    for cell in &cells {
        let what = format!("matrix cell C={}", cell["concurrency"]);
        let lag = &cell["client_lag"];
        check_lag(&what, lag);
        // The verdict is the cell's status: Client-bound exactly when its lag says so.
        let status = cell["status"]["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {cell}"));
        assert!(
            status == "valid" || status == "client_bound",
            "{what}: {cell}"
        );
        assert_eq!(
            status == "client_bound",
            lag["client_bound"] == true,
            "{what}: {status} {lag}"
        );
    }
}
