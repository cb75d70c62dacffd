//! What a new user meets before any measurement: a server that is not there, and a flag given a
//! value that looks like another flag. The binary runs as a user runs it (`LLMSPEED_BIN` may
//! point at a release build).

mod support;

use support::process::{closed_port, Proc};

/// `bench serve` at a port where nothing listens: as vLLM (`--ready-check-timeout-sec` 0 by
/// default), one attempt and a prompt error, never a silent wait.
#[test]
fn bench_serve_at_a_closed_port_fails_at_once_by_default() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let mut p = Proc::spawn(&["bench", "serve", "--base-url", &url, "--num-prompts", "1"]);
    // Before: the default waited 600 s, printing nothing (this wait gives up after 120 s).
    assert_eq!(p.exit_code(), 1, "{}", p.output());
    let out = p.output();
    assert!(out.contains("--ready-check-timeout-sec 0"), "{out}");
    assert!(
        !out.contains("waiting up to"),
        "no wait, so no wait message: {out}"
    );
}

/// Whenever a ready check waits, in any command, it says for what and for how long, once.
#[test]
fn a_ready_check_that_waits_says_what_it_waits_for() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let commands: [&[&str]; 4] = [
        &["bench", "serve", "--num-prompts", "1"],
        &["stream", "--model", "m", "--prompt", "hi"],
        &["probe"],
        &["matrix", "--contexts", "1k"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.extend(["--base-url", &url, "--ready-check-timeout-sec", "2"]);
        let mut p = Proc::spawn(&args);
        assert_eq!(p.exit_code(), 1, "{cmd:?}: {}", p.output());
        let out = p.output();
        let want = format!("waiting up to 2 s for {url}/v1/models to answer");
        assert_eq!(out.matches(&want).count(), 1, "{cmd:?}: {out}");
        assert!(out.contains("not ready after"), "{cmd:?}: {out}");
    }
}

/// A value flag given a negative number or duration: the error names the flag and what it
/// accepts (before: "unexpected argument '-1' found", naming no flag).
#[test]
fn a_negative_value_is_refused_by_its_own_flag() {
    let cases: [(&[&str], &str, &str); 5] = [
        (
            &["matrix", "--mock", "--duration", "-1"],
            "--duration",
            "try 30s, 500ms, 2m",
        ),
        (
            &["selftest", "--gap", "-30ms"],
            "--gap",
            "try 30s, 500ms, 2m",
        ),
        (
            &["bench", "serve", "--num-prompts", "-5"],
            "--num-prompts",
            "takes a whole number such as 100",
        ),
        (
            &[
                "stream",
                "--base-url",
                "http://127.0.0.1:9",
                "--max-tokens",
                "-3",
            ],
            "--max-tokens",
            "-3 is not in 0..=",
        ),
        (
            &["mock", "--port", "-1"],
            "--port",
            "-1 is not in 0..=65535",
        ),
    ];
    for (args, flag, accepted) in cases {
        let mut p = Proc::spawn(args);
        assert_eq!(p.exit_code(), 2, "{args:?}: {}", p.output());
        let out = p.output();
        assert!(
            out.contains(&format!(
                "invalid value '{}' for '{flag}",
                args.last().unwrap()
            )),
            "{args:?}: {out}"
        );
        assert!(out.contains(accepted), "{args:?}: {out}");
        assert!(!out.contains("unexpected argument"), "{args:?}: {out}");
    }
}

/// `bench serve` of a few 8-token prompts with 4-token answers at `url`, with `extra`.
fn small_bench(url: &str, prompts: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "bench",
        "serve",
        "--base-url",
        url,
        "--num-prompts",
        prompts,
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&args)
}

/// Every request failed (the server serves another model and answers each with its 404): the
/// result is still saved, with the failures and the server's message, and the exit status is
/// non-zero, so a pipeline does not pass a benchmark that measured nothing (before: 0).
#[test]
fn a_run_in_which_every_request_failed_exits_non_zero_after_saving() {
    let (mut server, url) = support::process::mock(&["--profile", "fast"]);
    let dir = tempfile::tempdir().unwrap();
    let dir_s = dir.path().to_str().unwrap();
    let mut p = small_bench(
        &url,
        "4",
        &[
            "--model",
            "not-served",
            "--save-result",
            "--result-dir",
            dir_s,
            "--result-filename",
            "r.json",
        ],
    );
    assert_eq!(p.exit_code(), 1, "{}", p.output());
    let out = p.output();
    assert!(out.contains("completed no request"), "{out}");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(
        (saved["completed"].as_u64(), saved["failed"].as_u64()),
        (Some(0), Some(4))
    );
    // The same server, the served model: the run completes and exits 0.
    let mut ok = small_bench(&url, "2", &[]);
    assert_eq!(ok.exit_code(), 0, "{}", ok.output());
    server.signal(libc::SIGTERM);
    server.wait();
}

/// With a ready-check timeout, `bench serve` sends vLLM's initial test request (the first
/// prompt) until it succeeds; when it never does, the run fails with vLLM's words and the
/// server's own message, after the timeout, and sends no measured request.
#[test]
fn the_initial_test_request_fails_the_run_with_the_servers_message() {
    let (mut server, url) = support::process::mock(&["--profile", "fast"]);
    let mut p = small_bench(
        &url,
        "4",
        &["--model", "not-served", "--ready-check-timeout-sec", "1"],
    );
    assert_eq!(p.exit_code(), 1, "{}", p.output());
    let out = p.output();
    assert!(
        out.contains("Initial test run failed - Please make sure benchmark arguments are correctly specified. Error: "),
        "{out}"
    );
    assert!(
        out.contains("not-served"),
        "the server's message names the model: {out}"
    );
    assert!(
        !out.contains("Serving Benchmark Result"),
        "nothing measured: {out}"
    );
    let mut ok = small_bench(&url, "2", &["--ready-check-timeout-sec", "5"]);
    assert_eq!(ok.exit_code(), 0, "{}", ok.output());
    assert!(
        ok.output().contains("Initial test run completed."),
        "{}",
        ok.output()
    );
    server.signal(libc::SIGTERM);
    server.wait();
}

/// `bench sglang` stops with SGLang's words when no warm-up request succeeds.
#[test]
fn bench_sglang_stops_when_every_warm_up_failed() {
    let (mut server, url) = support::process::mock(&["--profile", "fast"]);
    let mut p = Proc::spawn(&[
        "bench",
        "sglang",
        "--base-url",
        &url,
        "--backend",
        "vllm",
        "--model",
        "not-served",
        "--dataset-name",
        "random",
        "--num-prompts",
        "2",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--ready-check-timeout-sec",
        "5",
    ]);
    assert_eq!(p.exit_code(), 1, "{}", p.output());
    let out = p.output();
    assert!(
        out.contains(
            "Warmup failed - Please make sure benchmark arguments are correctly specified. Error: "
        ),
        "{out}"
    );
    server.signal(libc::SIGTERM);
    server.wait();
}
