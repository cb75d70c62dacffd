//! Integration tests of `llmspeed mock` over real sockets on 127.0.0.1:0, with a deliberately
//! naive HTTP/1.1 client (Connection: close, read to EOF, de-chunk, split SSE) that shares no
//! code with either the mock or llmspeed's own client.

use llmspeed::mock::faults::FaultRule;
use llmspeed::mock::{MockConfig, Profile};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod support;
use support::mock::MockServer as Server;

/// A fast, small configuration for tests.
fn test_config() -> MockConfig {
    let mut c = MockConfig::profile(Profile::Fast);
    c.engine.decode.base_us = 1000.0;
    c
}

#[derive(Debug)]
struct Resp {
    status: u16,
    head: String,
    /// De-chunked body.
    body: Vec<u8>,
    /// Body chunks as sent (one per SSE event, uvicorn-style).
    chunks: Vec<Vec<u8>>,
    /// The terminating `0\r\n\r\n` arrived.
    complete: bool,
    /// The read ended with an error (e.g. connection reset) rather than EOF.
    read_error: Option<std::io::ErrorKind>,
    /// (time, bytes so far) after each read.
    reads: Vec<(Instant, usize)>,
    raw: Vec<u8>,
    sent_at: Instant,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// SSE `data:` payloads in order.
    fn events(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_owned))
            .collect()
    }

    /// Time from sending the request to the read that completed the first SSE event.
    fn first_event_after(&self) -> Duration {
        let head_end = find(&self.raw, b"\r\n\r\n").unwrap() + 4;
        let first = head_end + find(&self.raw[head_end..], b"\n\n").expect("an event");
        let t = self.reads.iter().find(|(_, n)| *n > first).unwrap().0;
        t - self.sent_at
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// De-chunk `b`; returns (body, chunks, saw the last chunk).
fn dechunk(mut b: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>, bool) {
    let (mut body, mut chunks) = (Vec::new(), Vec::new());
    loop {
        let Some(eol) = find(b, b"\r\n") else {
            return (body, chunks, false);
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return (body, chunks, &b[eol..] == b"\r\n\r\n");
        }
        let data_start = eol + 2;
        if b.len() < data_start + size + 2 {
            // Truncated chunk: keep what arrived.
            body.extend_from_slice(&b[data_start.min(b.len())..]);
            return (body, chunks, false);
        }
        body.extend_from_slice(&b[data_start..data_start + size]);
        chunks.push(b[data_start..data_start + size].to_vec());
        b = &b[data_start + size + 2..];
    }
}

async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", payload.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&payload);
    let sent_at = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let (mut raw, mut reads, mut read_error) = (Vec::new(), Vec::new(), None);
    let mut buf = vec![0u8; 65536];
    loop {
        match s.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                reads.push((Instant::now(), raw.len()));
            }
            Err(e) => {
                read_error = Some(e.kind());
                break;
            }
        }
    }
    let head_end = find(&raw, b"\r\n\r\n").map(|i| i + 4).unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (body, chunks, complete) = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&raw[head_end..])
    } else {
        (raw[head_end..].to_vec(), Vec::new(), true)
    };
    Resp {
        status,
        head,
        body,
        chunks,
        complete,
        read_error,
        reads,
        raw,
        sent_at,
    }
}

async fn post(addr: SocketAddr, path: &str, body: Value) -> Resp {
    request(addr, "POST", path, Some(&body), &[]).await
}

fn token_events(r: &Resp) -> Vec<Value> {
    r.events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|v| {
            v["choices"].as_array().is_some_and(|c| !c.is_empty()) && v.get("error").is_none()
        })
        .filter(|v| {
            let c = &v["choices"][0];
            c.get("text").is_some() || c["delta"].get("content").is_some_and(|x| x != "")
        })
        .collect()
}

fn stream_body(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": "mock-model", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_and_usage_agree() {
    let srv = Server::start(test_config()).await;
    let prompt = " the".repeat(100);
    let t = post(srv.addr, "/tokenize", json!({"prompt": prompt}))
        .await
        .json();
    assert_eq!(t["count"], 100);
    let r = post(srv.addr, "/v1/completions", stream_body(&prompt, 40)).await;
    assert_eq!(r.status, 200);
    assert!(r.complete, "stream must end with the last chunk");
    assert!(r.head.contains("text/event-stream"));
    let ev = r.events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    // One SSE event per HTTP chunk.
    assert_eq!(r.chunks.len(), ev.len());
    let toks = token_events(&r);
    assert_eq!(toks.len(), 40);
    for (i, v) in toks.iter().enumerate() {
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["usage"]["completion_tokens"], i as u64 + 1);
        assert_eq!(v["usage"]["prompt_tokens"], 100);
    }
    assert_eq!(toks[39]["choices"][0]["finish_reason"], "length");
    assert!(toks[38]["choices"][0]["finish_reason"].is_null());
    let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140})
    );
    // The text re-tokenizes to exactly the streamed token count.
    let text: String = toks
        .iter()
        .map(|v| v["choices"][0]["text"].as_str().unwrap())
        .collect();
    let t = post(srv.addr, "/tokenize", json!({"prompt": text}))
        .await
        .json();
    assert_eq!(t["count"], 40);
    let d = post(srv.addr, "/detokenize", json!({"tokens": t["tokens"]}))
        .await
        .json();
    assert_eq!(d["prompt"], text);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_has_vllm_shape() {
    let srv = Server::start(test_config()).await;
    let messages = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "the house"}]);
    let count = post(srv.addr, "/tokenize", json!({"messages": messages}))
        .await
        .json()["count"]
        .as_u64()
        .unwrap();
    let body = json!({"messages": messages, "max_completion_tokens": 5, "ignore_eos": true, "stream": true,
        "return_token_ids": true, "stream_options": {"include_usage": true}});
    let r = post(srv.addr, "/v1/chat/completions", body).await;
    let ev: Vec<Value> = r
        .events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(ev.len(), 1 + 5 + 1, "role chunk, 5 tokens, usage");
    assert_eq!(ev[0]["object"], "chat.completion.chunk");
    assert_eq!(
        ev[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    for v in &ev[1..6] {
        assert_eq!(v["choices"][0]["token_ids"].as_array().unwrap().len(), 1);
    }
    assert_eq!(ev[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[6]["choices"], json!([]));
    assert_eq!(ev[6]["usage"]["prompt_tokens"], count);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
    // Non-streaming: one JSON body with usage.
    let full = post(
        srv.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 7, "ignore_eos": true}),
    )
    .await
    .json();
    assert_eq!(full["object"], "chat.completion");
    assert_eq!(full["usage"]["completion_tokens"], 7);
    assert_eq!(full["usage"]["prompt_tokens"], count);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_forms_and_eos() {
    let srv = Server::start(test_config()).await;
    // Token ids, list of strings (two choices), and an early stop without ignore_eos.
    let ids = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": [300, 301, 302], "max_tokens": 3}),
    )
    .await
    .json();
    assert_eq!(ids["usage"]["prompt_tokens"], 3);
    let two = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": [" the", " the house"], "max_tokens": 4, "ignore_eos": true}),
    )
    .await
    .json();
    assert_eq!(two["choices"].as_array().unwrap().len(), 2);
    assert_eq!(
        two["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}})
    );
    let stop = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": "the", "max_tokens": 5000}),
    )
    .await
    .json();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert!(stop["usage"]["completion_tokens"].as_u64().unwrap() < 5000);
    let bad = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": [1, 99999999]}),
    )
    .await;
    assert_eq!(bad.status, 400);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_look_like_vllm() {
    let srv = Server::start(test_config()).await;
    let r = post(
        srv.addr,
        "/v1/completions",
        json!({"model": "other", "prompt": "x", "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 404);
    let e = &r.json()["error"];
    assert_eq!(e["code"], 404);
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error.{k}");
    }
    let r = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": " the".repeat(30000), "max_tokens": 3000}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 32768"));
    assert!(r.head.to_ascii_lowercase().contains("content-length"));
    let m = request(srv.addr, "GET", "/v1/models", None, &[])
        .await
        .json();
    assert_eq!(m["data"][0]["max_model_len"], 32768);
    assert_eq!(
        request(srv.addr, "GET", "/health", None, &[]).await.status,
        200
    );
    assert!(request(srv.addr, "GET", "/version", None, &[]).await.json()["version"].is_string());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_makes_the_repeat_fast() {
    let mut cfg = MockConfig::profile(Profile::Seed);
    cfg.engine.time_scale = 0.5;
    let srv = Server::start(cfg).await;
    let body =
        json!({"prompt": " the".repeat(8192), "max_tokens": 1, "stream": true, "ignore_eos": true});
    let cold = post(srv.addr, "/v1/completions", body.clone()).await;
    let warm = post(srv.addr, "/v1/completions", body.clone()).await;
    let (c, w) = (cold.first_event_after(), warm.first_event_after());
    // Seed curve: 8192 tokens take 260 ms (130 ms at scale 0.5); the repeat prefills 16 tokens.
    assert!(c > Duration::from_millis(100), "cold TTFT {c:?}");
    assert!(w * 3 < c, "warm TTFT {w:?} vs cold {c:?}");
    let mut salted = body.clone();
    salted["cache_salt"] = json!("nonce-1");
    let s = post(srv.addr, "/v1/completions", salted)
        .await
        .first_event_after();
    assert!(
        s > Duration::from_millis(100),
        "salted TTFT {s:?} must miss"
    );
    let metrics =
        String::from_utf8(request(srv.addr, "GET", "/metrics", None, &[]).await.body).unwrap();
    assert!(
        metrics.contains(
            "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"mock-model\"} 24576.0"
        ),
        "{metrics}"
    );
    assert!(metrics
        .contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"mock-model\"} 8176.0"));
    srv.stop().await;
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_kv_capacity_wait() {
    let mut cfg = test_config();
    cfg.engine.kv_tokens = 4096;
    cfg.engine.decode.base_us = 2000.0;
    let srv = Server::start(cfg).await;
    // Each needs 1800 + 200 = 2000 tokens of KV: two fit, two wait. Distinct salts keep the
    // prefix cache from sharing the prompt blocks.
    let reqs: Vec<_> = (0..4)
        .map(|i| {
            let body = json!({"prompt": " the".repeat(1800), "max_tokens": 200, "ignore_eos": true, "cache_salt": format!("s{i}")});
            tokio::spawn(post(srv.addr, "/v1/completions", body))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = (0.0, 0.0, 0.0);
    while Instant::now() < deadline {
        let m =
            String::from_utf8(request(srv.addr, "GET", "/metrics", None, &[]).await.body).unwrap();
        // Arrivals join at step boundaries, so early snapshots may show 3 waiting and 1 running.
        seen = (
            metric(&m, "vllm:num_requests_waiting"),
            metric(&m, "vllm:num_requests_running"),
            metric(&m, "vllm:kv_cache_usage_perc"),
        );
        if seen.0 == 2.0 && seen.1 == 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        (seen.0, seen.1),
        (2.0, 2.0),
        "never saw two running and two waiting"
    );
    assert!(seen.2 > 0.9);
    for r in reqs {
        assert_eq!(r.await.unwrap().json()["usage"]["completion_tokens"], 200);
    }
    srv.stop().await;
}

async fn faulted(addr: SocketAddr, fault: &str, tokens: u32) -> Resp {
    let body = stream_body(" the", tokens);
    request(
        addr,
        "POST",
        "/v1/completions",
        Some(&body),
        &[("x-mock-fault", fault)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_produce_the_expected_bytes() {
    let srv = Server::start(test_config()).await;
    for code in [500u16, 429, 503] {
        let r = faulted(srv.addr, &format!("status={code}"), 5).await;
        assert_eq!(r.status, code);
        assert_eq!(r.json()["error"]["code"], code);
    }
    // Reset: three tokens, then RST (or EOF) with no terminating chunk.
    let r = faulted(srv.addr, "reset-after=3", 20).await;
    assert_eq!(r.status, 200);
    assert!(!r.complete);
    assert_eq!(token_events(&r).len(), 3);
    assert!(matches!(
        r.read_error,
        None | Some(std::io::ErrorKind::ConnectionReset)
    ));
    // Error event inside a 200 stream, then [DONE] and a clean end.
    let r = faulted(srv.addr, "error-after=2", 20).await;
    assert!(r.complete);
    let ev = r.events();
    assert_eq!(token_events(&r).len(), 2);
    let err: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert!(err["error"]["message"].is_string());
    assert_eq!(ev.last().unwrap(), "[DONE]");
    // Malformed JSON once, then the stream carries on to the end.
    let r = faulted(srv.addr, "malformed-after=1", 5).await;
    assert!(r.complete);
    let bad = r
        .events()
        .iter()
        .filter(|e| *e != "[DONE]" && serde_json::from_str::<Value>(e).is_err())
        .count();
    assert_eq!(bad, 1);
    assert_eq!(token_events(&r).len(), 5);
    // Truncated chunk: two whole token chunks, then part of one, then the connection ends.
    let r = faulted(srv.addr, "truncate-after=2", 20).await;
    assert!(!r.complete);
    assert_eq!(token_events(&r).len(), 2);
    let tail = String::from_utf8_lossy(&r.body)
        .rsplit("\n\n")
        .next()
        .unwrap()
        .to_string();
    assert!(
        tail.starts_with("data: {") && serde_json::from_str::<Value>(&tail[6..]).is_err(),
        "tail {tail:?}"
    );
    // Stall: a gap of at least the stall after token 2.
    let r = faulted(srv.addr, "stall-after=2:300", 4).await;
    assert!(r.complete);
    let t: Vec<Instant> = {
        let head_end = find(&r.raw, b"\r\n\r\n").unwrap();
        let mut ends = Vec::new();
        let mut off = head_end;
        while let Some(i) = find(&r.raw[off..], b"\"text\"") {
            off += i + 1;
            ends.push(r.reads.iter().find(|(_, n)| *n > off).unwrap().0);
        }
        ends
    };
    assert!(
        t[2] - t[1] >= Duration::from_millis(250),
        "stall gap {:?}",
        t[2] - t[1]
    );
    // Drip: the whole response arrives in many tiny reads.
    let r = faulted(srv.addr, "drip", 2).await;
    assert!(r.complete);
    assert_eq!(token_events(&r).len(), 2);
    assert!(
        r.reads.len() > r.raw.len() / 4,
        "{} reads for {} bytes",
        r.reads.len(),
        r.raw.len()
    );
    // Bad header spelling is a 400, not a silent no-op.
    assert_eq!(faulted(srv.addr, "explode", 2).await.status, 400);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_probabilities_from_config() {
    let mut cfg = test_config();
    cfg.faults = vec!["status=503@0.5".parse::<FaultRule>().unwrap()];
    let srv = Server::start(cfg).await;
    let mut n503 = 0;
    for _ in 0..40 {
        let r = post(
            srv.addr,
            "/v1/completions",
            json!({"prompt": "the", "max_tokens": 1}),
        )
        .await;
        assert!(r.status == 200 || r.status == 503);
        n503 += (r.status == 503) as u32;
    }
    assert!((8..=32).contains(&n503), "{n503} of 40");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_matches_what_was_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let mut cfg = test_config();
    cfg.trace = Some(path.clone());
    let srv = Server::start(cfg).await;
    let (ba, bb) = (stream_body(" the", 30), stream_body(" a", 20));
    let a = request(
        srv.addr,
        "POST",
        "/v1/completions",
        Some(&ba),
        &[("x-request-id", "req-a")],
    );
    let b = request(
        srv.addr,
        "POST",
        "/v1/completions",
        Some(&bb),
        &[("x-request-id", "req-b")],
    );
    let (a, b) = tokio::join!(a, b);
    assert_eq!((token_events(&a).len(), token_events(&b).len()), (30, 20));
    srv.stop().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 50);
    for (id, n) in [("req-a", 30u64), ("req-b", 20)] {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["request_id"] == id).collect();
        let idx: Vec<u64> = mine.iter().map(|l| l["index"].as_u64().unwrap()).collect();
        assert_eq!(idx, (0..n).collect::<Vec<_>>());
        for w in mine.windows(2) {
            assert!(w[1]["t_ns"].as_u64() >= w[0]["t_ns"].as_u64());
        }
        for l in &mine {
            assert!(l["t_ns"].as_u64().unwrap() >= l["due_ns"].as_u64().unwrap());
        }
        // One arrival per request, on every line, before the engine made its first token.
        let arrival = mine[0]["arrival_ns"].as_u64().expect("arrival_ns");
        assert!(mine
            .iter()
            .all(|l| l["arrival_ns"].as_u64() == Some(arrival)));
        assert!(arrival <= mine[0]["due_ns"].as_u64().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_after_repeats_in_the_stream() {
    let mut cfg = test_config();
    cfg.loop_after = Some(50);
    let srv = Server::start(cfg).await;
    let r = post(
        srv.addr,
        "/v1/completions",
        json!({"prompt": "the", "max_tokens": 200, "ignore_eos": true, "return_token_ids": true}),
    )
    .await
    .json();
    let ids: Vec<u64> = r["choices"][0]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 200);
    let p = llmspeed::mock::text::LOOP_PERIOD;
    assert!((50 + p..200).all(|i| ids[i] == ids[i - p]));
    srv.stop().await;
}

/// As vLLM: a request naming a LoRA adapter gets that name back in `model`, streamed or not;
/// one naming the base model (or none) gets the base model's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_name_the_requested_lora_adapter() {
    let mut cfg = test_config();
    cfg.lora_modules = vec!["sql-lora".into()];
    let srv = Server::start(cfg).await;
    for (asked, want) in [
        (Some("sql-lora"), "sql-lora"),
        (Some("mock-model"), "mock-model"),
        (None, "mock-model"),
    ] {
        let mut stream = stream_body("the house", 3);
        let mut chat =
            json!({"messages": [{"role": "user", "content": "the house"}], "max_tokens": 3});
        match asked {
            Some(m) => chat["model"] = json!(m),
            None => {
                if let Some(o) = stream.as_object_mut() {
                    o.remove("model");
                }
            }
        }
        if let Some(m) = asked {
            stream["model"] = json!(m);
        }
        let r = post(srv.addr, "/v1/completions", stream).await;
        let toks = token_events(&r);
        assert_eq!(toks.len(), 3, "{asked:?}");
        assert!(
            toks.iter().all(|v| v["model"] == want),
            "{asked:?}: {toks:?}"
        );
        let full = post(srv.addr, "/v1/chat/completions", chat).await.json();
        assert_eq!(full["model"], want, "{asked:?}: {full}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_log_holds_each_request_as_received() {
    let dir = tempfile::tempdir().unwrap();
    let (log, trace) = (
        dir.path().join("requests.jsonl"),
        dir.path().join("t.jsonl"),
    );
    let mut cfg = test_config();
    cfg.request_log = Some(log.clone());
    cfg.trace = Some(trace.clone());
    let srv = Server::start(cfg).await;
    let chat = json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi there"}],
        "max_completion_tokens": 3, "temperature": 0.0, "top_p": 1.0, "stream": false});
    let native = json!({"input_ids": [5, 6, 7, 8], "stream": true,
        "sampling_params": {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": true}});
    let refused = json!({"model": "no-such-model", "prompt": "x", "max_tokens": 2});
    // (method, path, request id, body, status the server answers)
    type Sent = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<Value>,
        u16,
    );
    let sent: [Sent; 5] = [
        (
            "POST",
            "/v1/completions",
            Some("req-a"),
            Some(stream_body(" the", 5)),
            200,
        ),
        (
            "POST",
            "/v1/chat/completions",
            Some("req-chat"),
            Some(chat),
            200,
        ),
        ("POST", "/generate", None, Some(native), 200),
        (
            "POST",
            "/v1/completions",
            Some("req-404"),
            Some(refused),
            404,
        ),
        ("GET", "/v1/models", None, None, 200),
    ];
    for (method, path, id, body, status) in &sent {
        let headers: Vec<(&str, &str)> = id.iter().map(|id| ("x-request-id", *id)).collect();
        let r = request(srv.addr, method, path, body.as_ref(), &headers).await;
        assert_eq!(r.status, *status, "{method} {path}");
    }
    srv.stop().await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), sent.len(), "{text}");
    for (line, (method, path, id, body, status)) in lines.iter().zip(&sent) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            (&v["method"], &v["path"], &v["request_id"], &v["status"]),
            (&json!(method), &json!(path), &json!(id), &json!(status)),
            "{line}"
        );
        assert_eq!(v["body"], body.clone().unwrap_or(Value::Null), "{line}");
        // The bytes as sent, key order included.
        if let Some(b) = body {
            assert!(line.ends_with(&format!("\"body\":{b}}}")), "{line}");
        }
    }
    // Arrival in the trace's base: the streamed request's is the trace's own.
    let traced: Value = serde_json::from_str(
        std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .find(|l| l.contains("\"req-a\""))
            .expect("req-a in the trace"),
    )
    .unwrap();
    let logged: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(logged["arrival_ns"], traced["arrival_ns"]);
    let arrivals: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["arrival_ns"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(arrivals.windows(2).all(|w| w[0] < w[1]), "{arrivals:?}");
}

/// vLLM's `--api-key`: a `/v1` request needs `Authorization: Bearer KEY` (no header or a wrong
/// key: 401 `{"error": "Unauthorized"}`); `/health`, `/metrics` and `/tokenize` stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_guards_the_v1_paths_as_vllm_does() {
    let mut c = test_config();
    c.api_key = Some("sk-mock".into());
    let srv = Server::start(c).await;
    let get = |path: &'static str, auth: Option<&'static str>| {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        async move { request(srv.addr, "GET", path, None, &headers).await }
    };
    let r = get("/v1/models", None).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json(), json!({"error": "Unauthorized"}));
    assert_eq!(get("/v1/models", Some("Bearer sk-other")).await.status, 401);
    assert_eq!(get("/v1/models", Some("sk-mock")).await.status, 401);
    assert_eq!(get("/v1/models", Some("Bearer sk-mock")).await.status, 200);
    assert_eq!(get("/health", None).await.status, 200);
    assert_eq!(get("/metrics", None).await.status, 200);
    let body = stream_body("hello", 2);
    let auth = [("Authorization", "Bearer sk-mock")];
    let r = request(srv.addr, "POST", "/v1/completions", Some(&body), &[]).await;
    assert_eq!(r.status, 401);
    let r = request(srv.addr, "POST", "/v1/completions", Some(&body), &auth).await;
    assert_eq!(r.status, 200);
    let tok = json!({"model": "mock-model", "prompt": "hello"});
    assert_eq!(post(srv.addr, "/tokenize", tok).await.status, 200);
    srv.stop().await;
}
