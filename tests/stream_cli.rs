//! The built `llmspeed stream` binary against the scripted server: JSON lines, exit statuses,
//! one-line errors.

mod support;

use serde_json::Value;
use std::process::{Command, Output};
use support::*;

async fn llmspeed(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(&args)
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("run llmspeed")
    })
    .await
    .unwrap()
}

fn args(base_url: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["stream", "--base-url", base_url, "--model", "m"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_for_a_good_stream() {
    let server = Server::start(vec![respond(vllm_writes(4, 16))]).await;
    let out = llmspeed(args(
        &server.base_url(),
        &[
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "4",
            "--json",
            "--api-key",
            "k1",
        ],
    ))
    .await;
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = lines(&out);
    assert_eq!(v.len(), 5, "4 events + summary");
    for e in &v[..4] {
        assert_eq!(e["type"], "event");
        assert!(e["t_ms"].as_f64().is_some());
        assert_eq!(e["tokens"], 1);
        assert_eq!(e["channel"], "content");
    }
    assert!(v[0]["gap_ms"].is_null());
    assert!(v[1]["gap_ms"].as_f64().is_some());
    let s = &v[4];
    for key in [
        "ttft_ms",
        "events",
        "output_tokens",
        "token_count_source",
        "finish_reason",
        "usage",
        "error",
    ] {
        assert!(s.get(key).is_some(), "summary lacks {key}: {s}");
    }
    assert!(s["ttft_ms"].as_f64().is_some());
    assert_eq!(s["events"], 4);
    assert_eq!(s["output_tokens"], 4);
    assert_eq!(s["token_count_source"], "continuous_usage");
    assert_eq!(s["finish_reason"], "length");
    assert_eq!(s["usage"]["prompt_tokens"], 16);
    assert!(s["error"].is_null());
    let req = &server.requests()[0];
    assert!(req.contains("authorization: Bearer k1") || req.contains("Authorization: Bearer k1"));
    let body: Value = serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["prompt"].as_array().map(|a| a.len()), Some(16));
    assert_eq!(body["max_tokens"], 4);
    assert_eq!(body["stream_options"]["continuous_usage_stats"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_output_and_chat() {
    let server = Server::start(vec![respond(vllm_writes(3, 5))]).await;
    let out = llmspeed(args(
        &server.base_url(),
        &[
            "--prompt",
            "hello",
            "--chat",
            "--show-text",
            "--no-continuous-usage",
        ],
    ))
    .await;
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "TTFT",
        "decode",
        "usage: prompt 5 + completion 3",
        "finish reason: length",
        " tok1 tok2 tok3",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
    let req = &server.requests()[0];
    assert!(req.starts_with("POST /v1/chat/completions "), "{req}");
    assert!(!req.contains("continuous_usage_stats"), "{req}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_400_fails_with_the_server_message() {
    let body = r#"{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}"#;
    let server = Server::start(vec![respond(vec![Step::Write(json_response(
        "400 Bad Request",
        body,
    ))])])
    .await;
    let out = llmspeed(args(&server.base_url(), &["--prompt", "x", "--json"])).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(error_lines(&stderr), 1, "{stderr}");
    assert!(
        stderr.contains("maximum context length is 2048"),
        "{stderr}"
    );
    let v = lines(&out);
    let s = v.last().unwrap();
    assert_eq!(s["error"]["kind"], "http_status");
    assert_eq!(s["error"]["status"], 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_and_malformed_stream() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = llmspeed(args(
        &format!("http://127.0.0.1:{port}"),
        &["--prompt", "x"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("connection refused by 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert_eq!(error_lines(&stderr), 1, "{stderr}");

    let writes = vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Write(chunk(b"data: {\"choices\":[{\"text\":\n\n")),
        Step::Write(LAST_CHUNK.to_vec()),
    ];
    let server = Server::start(vec![respond(writes)]).await;
    let out = llmspeed(args(&server.base_url(), &["--prompt", "x", "--json"])).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("malformed stream event"), "{stderr}");
    assert_eq!(lines(&out).last().unwrap()["error"]["kind"], "protocol");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    let out = llmspeed(args("localhost:8000", &["--prompt", "x"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http:// or https://"));
    let out = llmspeed(args(
        "http://127.0.0.1:1",
        &["--prompt", "x", "--header", "bad"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
}

/// stderr's lines but the one that says which stamps the client uses (packet stamps by
/// default where a packet socket opens, or why not).
fn error_lines(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| !l.starts_with("llmspeed: stamps: "))
        .count()
}
