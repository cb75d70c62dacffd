//! `llmspeed capacity` on the user's own workload and connection, from the command line as
//! `main` parses it, against the simulated server:
//!
//! - over HTTPS with `--ca-cert` (a self-signed certificate the server presents) and the API
//!   key in a `--header`, which the server checks as vLLM's `--api-key` does (a `/v1` request
//!   without it is answered 401): the ITL case of `tests/capacity_mock.rs` finds the same
//!   analytic answer, 4 streams with 5 failing, every request of every round let in; and the
//!   key from `OPENAI_API_KEY`, as vLLM reads it, through the binary;
//! - a dataset file (`--dataset-name custom`) read once: every request the server received
//!   carries one of the file's prompts, and each round's requests take the file's prompts in
//!   order, continuing where the last round stopped and wrapping at the end;
//! - `--context 1.5k` (the matrix's spelling): every prompt the server received is 1,536 token
//!   ids long;
//! - bad input (an unknown dataset, a missing file, a context that does not parse, a context
//!   beside a dataset of its own): a clear error naming the flag, and nothing sent.

mod support;

use llmspeed::cli::capacity::{config, run, run_async};
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use llmspeed::workload::request_id::RequestId;
use serde_json::Value;
use std::path::Path;
use support::mock::{runtime, MockThread};

/// One search at a time: two at once on a small machine make each other's client fall behind.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The ITL case's server (`tests/capacity_mock.rs`): decode steps of 10 ms + 10 ms per
/// sequence, prefill nearly free, no batch cap in reach.
fn itl_mock() -> MockConfig {
    support::mock::analytic(64, 10_000.0, 10_000.0)
}

/// A fast server whose every request is logged to `log`.
fn logged_mock(log: &Path) -> MockConfig {
    let mut c = MockConfig::profile(Profile::Fast);
    c.request_log = Some(log.to_path_buf());
    c
}

/// Parses `args`, runs the search to its end and returns results.json.
fn search(args: &[&str], out: &Path) -> Value {
    let a = support::capacity_args(args).unwrap();
    let cfg = config(&a, String::new()).map_err(|e| e.message).unwrap();
    let run = runtime()
        .block_on(run_async(&cfg, out, &Cancel::new()))
        .map_err(|e| e.message)
        .unwrap();
    eprintln!("{}", llmspeed::capacity::results::summary(&cfg, &run));
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The request log's lines.
fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The streamed generation requests of the log: the rounds' (the engine's checks of what the
/// server accepts, before the first round, are not streamed).
fn generations(log: &Path) -> Vec<Value> {
    logged(log)
        .into_iter()
        .filter(|v| v["path"] == "/v1/completions" && v["body"]["stream"] == true)
        .collect()
}

#[test]
fn over_https_with_a_ca_cert_and_a_key_the_itl_case_finds_its_answer() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (tls, cert_pem) = support::tls_front::self_signed_server_config();
    let ca = dir.path().join("server.pem");
    std::fs::write(&ca, cert_pem).unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut m = itl_mock();
    m.tls = Some(tls);
    m.api_key = Some("sk-capacity".into());
    m.request_log = Some(log.clone());
    let server = MockThread::start(m);
    let url = format!("https://{}", server.addr);
    let out = dir.path().join("out");
    let (ca, out_s) = (ca.to_str().unwrap(), out.to_str().unwrap());
    let v = search(
        &[
            "--base-url",
            &url,
            "--ca-cert",
            ca,
            "--header",
            "Authorization=Bearer sk-capacity",
            "--slo",
            "itl_p95=55ms",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--round",
            "12",
            "--max-rounds",
            "6",
            "--max-concurrency",
            "64",
            "--seed",
            "1",
            "--max-time",
            "240s",
            "--drain-timeout",
            "10s",
            "--settle",
            "100ms",
            "--out",
            out_s,
        ],
        &out,
    );
    // Without the key the server refuses: the answer below was reached with it.
    let a = support::capacity_args(&[
        "--base-url",
        &url,
        "--ca-cert",
        ca,
        "--slo",
        "errors=1%",
        "--out",
        out_s,
    ])
    .unwrap();
    let bare = config(&a, String::new()).map_err(|e| e.message).unwrap();
    let plan = llmspeed::capacity::plan::setup_plan(&bare.workload);
    let client =
        llmspeed::bench::engine::connect::client_for(&plan, llmspeed::clock::Clock::new()).unwrap();
    let refused = runtime().block_on(client.get("/v1/models")).unwrap();
    server.stop();
    assert_eq!(refused.status, 401);
    let ans = &v["answer"];
    assert_eq!(ans["concurrency"], 4, "{ans}");
    assert_eq!(ans["smallest_failing_concurrency"], 5, "{ans}");
    assert_eq!(ans["failed_objective"], "itl_p95");
    assert_eq!(v["server"]["base_url"], url.as_str());
    // Every request of every round reached the server (a round at C streams is C + 12) and
    // was let in with the key.
    let gen = generations(&log);
    let rounds: u64 = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rounds"].as_u64().unwrap() * (p["concurrency"].as_u64().unwrap() + 12))
        .sum();
    assert_eq!(gen.len() as u64, rounds);
    assert!(gen.iter().all(|r| r["status"] == 200));
    let unauthorized = logged(&log).iter().filter(|r| r["status"] == 401).count();
    assert_eq!(unauthorized, 1, "only the bare client's GET");
}

/// `n` prompts, one a line, as vLLM's custom dataset reads them.
fn custom_file(dir: &Path, n: usize) -> (std::path::PathBuf, Vec<String>) {
    let prompts: Vec<String> = (0..n)
        .map(|i| format!("prompt number {i} of the capacity file"))
        .collect();
    let lines: String = prompts
        .iter()
        .map(|p| format!("{}\n", serde_json::json!({ "prompt": p })))
        .collect();
    let path = dir.join("prompts.jsonl");
    std::fs::write(&path, lines).unwrap();
    (path, prompts)
}

/// One round as the server saw it: its run tag, its first arrival, its requests' indexes and
/// prompts.
struct Round {
    run: u32,
    first: u64,
    requests: Vec<(u64, String)>,
}

#[test]
fn a_dataset_file_is_read_once_and_its_prompts_sent_in_order_round_after_round() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (data, prompts) = custom_file(dir.path(), 10);
    let log = dir.path().join("requests.jsonl");
    let server = MockThread::start(logged_mock(&log));
    let out = dir.path().join("out");
    let v = search(
        &[
            "--base-url",
            &server.url(),
            "--dataset-name",
            "custom",
            "--dataset-path",
            data.to_str().unwrap(),
            "--num-prompts",
            "10",
            "--disable-shuffle",
            "--skip-chat-template",
            "--output-len",
            "4",
            "--slo",
            "errors=50%",
            "--round",
            "6",
            "--max-rounds",
            "2",
            "--max-concurrency",
            "2",
            "--settle",
            "50ms",
            "--out",
            out.to_str().unwrap(),
        ],
        &out,
    );
    server.stop();
    let w = &v["workload"];
    assert_eq!(
        (w["dataset"].as_str(), w["dataset_samples"].as_u64()),
        (Some("custom"), Some(10))
    );
    assert_eq!(w["input_len"], Value::Null);
    // Each round is one engine run with its own run tag; its request i carries sample i of
    // the round. Rounds in the order they arrived.
    let mut rounds: Vec<Round> = Vec::new();
    for r in generations(&log) {
        let id = r["request_id"].as_str().unwrap();
        let Some(RequestId::Bench { run, index }) = RequestId::parse(id) else {
            panic!("not a bench request id: {id}");
        };
        let at = r["arrival_ns"].as_u64().unwrap();
        let prompt = r["body"]["prompt"].as_str().unwrap().to_string();
        assert_eq!(r["body"]["max_tokens"], 4);
        match rounds.iter_mut().find(|x| x.run == run) {
            Some(x) => {
                x.first = x.first.min(at);
                x.requests.push((index, prompt));
            }
            None => rounds.push(Round {
                run,
                first: at,
                requests: vec![(index, prompt)],
            }),
        }
    }
    rounds.sort_by_key(|x| x.first);
    let mut next = 0;
    let mut sent = 0;
    for x in &mut rounds {
        x.requests.sort();
        for (k, (index, prompt)) in x.requests.iter().enumerate() {
            assert_eq!(
                *index, k as u64,
                "every request of a round reached the server"
            );
            assert_eq!(*prompt, prompts[(next + k) % 10], "round request {k}");
        }
        next = (next + x.requests.len()) % 10;
        sent += x.requests.len();
    }
    assert!(rounds.len() >= 2, "{} rounds", rounds.len());
    assert!(sent > 10, "the rounds wrapped past the file's end: {sent}");
    assert_eq!(w["dataset_requests"].as_u64(), Some(sent as u64));
}

/// One probe of 6 requests at one stream with `--context context` (4-token outputs) against
/// the logged mock with `max_model_len` (`None`: its own): results.json's input_len, and the
/// length of every prompt the server received.
fn context_run(context: &str, max_model_len: Option<u32>) -> (Value, Vec<usize>) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut m = logged_mock(&log);
    if let Some(len) = max_model_len {
        m.max_model_len = len;
    }
    let server = MockThread::start(m);
    let out = dir.path().join("out");
    let v = search(
        &[
            "--base-url",
            &server.url(),
            "--context",
            context,
            "--output-len",
            "4",
            "--slo",
            "errors=50%",
            "--round",
            "6",
            "--max-rounds",
            "1",
            "--max-concurrency",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        &out,
    );
    server.stop();
    let lens = generations(&log)
        .iter()
        .map(|r| r["body"]["prompt"].as_array().expect("token ids").len())
        .collect();
    (v["workload"]["input_len"].clone(), lens)
}

#[test]
fn a_context_sets_every_prompt_s_length() {
    let (input_len, lens) = context_run("1.5k", None);
    assert_eq!(input_len, 1536);
    assert!(!lens.is_empty());
    assert!(lens.iter().all(|&n| n == 1536), "{lens:?}");
}

/// `--context max`, the matrix's `max`: the largest prompt that fits the server's
/// max_model_len beside the output and the matrix's margin of 64: 2048 - 4 - 64 = 1,980.
#[test]
fn a_context_of_max_is_the_largest_that_fits_the_model() {
    let (input_len, lens) = context_run("max", Some(2048));
    assert_eq!(input_len, 1980);
    assert!(!lens.is_empty());
    assert!(lens.iter().all(|&n| n == 1980), "{lens:?}");
}

#[test]
fn bad_workloads_are_refused_by_name_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = MockThread::start(logged_mock(&log));
    let url = server.url();
    let out = dir.path().join("out");
    let missing = dir.path().join("no-such.json");
    let (data, _) = custom_file(dir.path(), 3);
    let cases: [(&[&str], &str); 5] = [
        (&["--dataset-name", "no-such-set"], "no-such-set"),
        (
            &[
                "--dataset-name",
                "sharegpt",
                "--dataset-path",
                missing.to_str().unwrap(),
            ],
            "no such file",
        ),
        (&["--context", "32Q"], "--context"),
        (&["--context", "8k,16k"], "one context"),
        (
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                data.to_str().unwrap(),
                "--context",
                "8k",
            ],
            "--context",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["--base-url", &url, "--slo", "errors=1%", "--out"];
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        let err = run(support::capacity_args(&args).unwrap()).unwrap_err();
        assert!(err.message.contains(says), "{extra:?}: {}", err.message);
        assert_eq!(err.code, 2, "a usage error");
    }
    server.stop();
    assert_eq!(logged(&log).len(), 0, "nothing was sent");
    assert!(!out.exists());
}

/// The API key from `OPENAI_API_KEY`, as vLLM's client reads it, through the command itself: a
/// server that refuses `/v1` requests without it answers every one of the search's.
#[test]
fn the_api_key_comes_from_openai_api_key_as_in_vllm() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut m = logged_mock(&log);
    m.api_key = Some("sk-from-env".into());
    let server = MockThread::start(m);
    let out = dir.path().join("out");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "capacity",
            "--base-url",
            &server.url(),
            "--slo",
            "errors=50%",
        ])
        .args(["--output-len", "4", "--round", "6", "--max-rounds", "1"])
        .args(["--max-concurrency", "1", "--out", out.to_str().unwrap()])
        .env("OPENAI_API_KEY", "sk-from-env")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    server.stop();
    assert!(status.success(), "{status}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(v["answer"]["concurrency"], 1, "{}", v["answer"]);
    let gen = generations(&log);
    assert!(!gen.is_empty());
    assert!(logged(&log).iter().all(|r| r["status"] == 200));
}
