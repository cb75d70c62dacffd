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
