//! `llmspeed matrix --mock` as a user runs it (the README's first command), shrunk to seconds,
//! and the command's usage errors.

use serde_json::Value;
use std::process::Command;

fn llmspeed(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn mock_run_writes_a_report_chat_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = llmspeed(&[
        "matrix",
        "--mock",
        "--chat",
        "--contexts",
        "1k",
        "--prefill-contexts",
        "1k",
        "--concurrency",
        "1,2",
        "--duration",
        "1",
        "--max-tokens",
        "128",
        "--gpu",
        "Test GPU",
        "--out",
        out.to_str().unwrap(),
        "--prompt-cache",
        dir.path().join("cache").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("Plan:"), "{stderr}");
    assert!(stderr.contains("estimate: about"), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("prefill"), "{stdout}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(v["metadata"]["settings"]["endpoint"], "chat");
    assert_eq!(v["metadata"]["hardware"]["gpu"], "Test GPU");
    // As `llmspeed --version` names the binary (tests/version.rs): version, commit, target.
    assert_eq!(v["metadata"]["tool_version"], llmspeed::VERSION);
    for c in v["decode"].as_array().unwrap() {
        // Measured; a loaded machine may find its client behind (Client-bound, figures kept).
        let kind = c["status"]["kind"].as_str();
        assert!(matches!(kind, Some("valid" | "client_bound")), "{c}");
        assert!(c["output_tok_per_s"].as_f64().unwrap() > 0.0);
    }
    let p = &v["prefill"][0];
    assert_eq!(p["status"]["kind"], "valid");
    let n = p["prompt_tokens"].as_u64().unwrap();
    assert!(
        (1000..=1024).contains(&n),
        "chat prompt of {n} tokens for 1K"
    );
    assert!(out.join("report.md").exists() && out.join("results.csv").exists());
    assert!(stderr.contains("calibrated in"), "{stderr}");
    let cached = std::fs::read_dir(dir.path().join("cache")).unwrap().count();
    assert_eq!(cached, 1, "one prompt (1K, chat) in the cache");
}

#[test]
fn usage_errors_are_one_line_with_code_2() {
    for args in [
        vec!["matrix", "--mock", "--contexts", "8q"],
        vec!["matrix", "--mock", "--duration", "0"],
        vec!["matrix", "--mock", "--concurrency", ""],
        vec!["matrix", "--mock", "--max-tokens", "0"],
        vec!["matrix", "--mock", "--max-tokens", "4294967297"],
    ] {
        let o = llmspeed(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
    // Not a duration: refused by the argument parser (clap's own error shape), still code 2.
    let o = llmspeed(&["matrix", "--mock", "--ready-stable", "NaN"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`NaN` is not a duration"));
    let o = llmspeed(&["matrix"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--base-url"));
}
