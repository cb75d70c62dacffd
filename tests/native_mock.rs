//! The engines' native endpoints end to end against the simulated server, with its in-memory
//! trace as ground truth: SGLang's `/generate` (streaming and not), `/get_server_info`,
//! `/server_info` and `/flush_cache`, and TGI's `/generate_stream`, through the client (what
//! `llmspeed stream --api` runs) and through `bench serve --backend sglang|tgi`.
//!
//! Truth, request by request (joined by `x-request-id`): the client's output tokens equal the
//! tokens the server wrote; the k-th token the client recorded is the k-th the server wrote, and
//! its stamp is not before the engine made that token (client and server stamp with one TSC
//! clock in one process, so a stamp taken from the wrong read shows up as a token read before
//! it existed); bench serve's gaps agree with the server's write gaps.

#[path = "support/mock.rs"]
mod mock_server;

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::mock::trace::TraceRec;
use llmspeed::net::request::{Generation, Prompt};
use llmspeed::net::{Cancel, Client, ClientConfig, Dialect, NoopObserver, Target};
use llmspeed::timeline::{FinishReason, Timeline, TokenCountSource};
use mock_server::{runtime, TracedMock};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// A 2 ms decode step: gaps big enough to tell apart, a run in about a second.
const STEP_US: f64 = 2000.0;

fn start_mock() -> TracedMock {
    TracedMock::start(STEP_US)
}

fn client(addr: SocketAddr) -> Client {
    Client::new(
        ClientConfig::new(Target::parse(&format!("http://{addr}")).unwrap()),
        Clock::new(),
    )
    .unwrap()
}

/// The raw stamp at which the engine made token `r` (its step's end), on the test's clock.
fn due_raw(clock: &Clock, r: &TraceRec) -> u64 {
    clock.add_ns(r.arrival_raw, r.due_ns.saturating_sub(r.arrival_ns))
}

/// Calibration differences between two `Clock`s of one process, over a run of seconds.
const SLACK_NS: u64 = 100_000;

/// One timeline against the server's trace of the same request.
fn assert_against_trace(clock: &Clock, what: &str, tl: &Timeline, trace: &[TraceRec]) {
    assert_eq!(tl.outcome, Ok(()), "{what}");
    assert!(tl.done, "{what}");
    assert!(!trace.is_empty(), "{what}: the server traced nothing");
    assert_eq!(
        tl.event_tokens(),
        trace.len() as u64,
        "{what}: per-event tokens"
    );
    assert_eq!(
        tl.output_tokens(),
        trace.len() as u64,
        "{what}: output tokens"
    );
    let token_events: Vec<u64> = tl
        .events
        .iter()
        .flat_map(|e| std::iter::repeat_n(e.t, e.tokens as usize))
        .collect();
    for (k, (t, rec)) in token_events.iter().zip(trace).enumerate() {
        assert_eq!(rec.index as usize, k, "{what}: the trace has token {k}");
        let due = due_raw(clock, rec);
        assert!(
            clock.epoch_ns(*t) + SLACK_NS >= clock.epoch_ns(due),
            "{what}: token {k} stamped {} µs before the engine made it",
            (clock.epoch_ns(due) - clock.epoch_ns(*t)) as f64 / 1e3
        );
    }
    // TTFT's start: the request reached the server before its first token was read.
    let first = tl.first_token.expect("a first token");
    assert!(clock.epoch_ns(first) + SLACK_NS >= clock.epoch_ns(trace[0].arrival_raw));
}

#[test]
fn native_streams_match_the_servers_trace() {
    let mock = start_mock();
    let rt = runtime();
    let c = client(mock.addr);
    const STREAMS: usize = 6;
    const MAX: u32 = 12;
    let timelines: Vec<(String, Dialect, Timeline)> = rt.block_on(async {
        let mut tasks = Vec::new();
        for (d, name) in [(Dialect::Sglang, "sglang"), (Dialect::Tgi, "tgi")] {
            for i in 0..STREAMS {
                let mut g =
                    Generation::new("mock-model", Prompt::Text(format!("the river {i} runs")));
                g.dialect = d;
                g.max_tokens = Some(MAX);
                // TGI has no ignore_eos: its requests may end early, at the engine's own end.
                g.ignore_eos = d == Dialect::Sglang;
                let mut req = g.stream_request(Some(true)).unwrap();
                let id = format!("{name}-{i}");
                req.request_id = Some(id.clone());
                let c = c.clone();
                tasks.push(tokio::spawn(async move {
                    let start = c.clock().raw();
                    let tl = c
                        .stream(&req, start, &mut NoopObserver, &Cancel::new())
                        .await;
                    (id, d, tl)
                }));
            }
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let clock = c.clock().clone();
    let trace = mock.finish();
    assert_eq!(trace.len(), 2 * STREAMS, "one traced request per stream");
    for (id, d, tl) in &timelines {
        assert_against_trace(&clock, id, tl, &trace[id]);
        let usage = tl.usage.expect("usage");
        assert_eq!(usage.completion_tokens, trace[id].len() as u64, "{id}");
        assert!(usage.prompt_tokens > 0, "{id}");
        match d {
            Dialect::Sglang => {
                assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
                assert_eq!(tl.finish_reason, Some(FinishReason::Length), "{id}");
                assert_eq!(trace[id].len(), MAX as usize, "{id}: ignore_eos");
            }
            _ => {
                assert_eq!(tl.token_count_source, TokenCountSource::TokenIds);
                let want = if trace[id].len() == MAX as usize {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                };
                assert_eq!(tl.finish_reason, Some(want), "{id}");
            }
        }
        assert!(!tl.content_text.as_deref().unwrap_or("").is_empty(), "{id}");
    }
}

#[test]
fn sglang_side_endpoints_answer_from_the_same_engine() {
    let mock = start_mock();
    let rt = runtime();
    let c = client(mock.addr);
    rt.block_on(async {
        for path in ["/get_server_info", "/server_info"] {
            let r = c.get(path).await.unwrap();
            assert_eq!(r.status, 200, "{path}");
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            assert!(v["max_total_num_tokens"].as_u64().unwrap() > 0, "{path}: {v}");
            assert_eq!(v["context_length"], 32768, "{path}: {v}");
            assert!(v["version"].is_string());
        }
        // Non-streaming /generate: the whole text, its ids and SGLang's meta_info. The same
        // prompt twice: the second is served from the prefix cache; after /flush_cache it is
        // not any more.
        let body = json!({"text": "a long prompt about rivers ".repeat(8), "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}});
        let gen = |c: Client, body: Value| async move {
            let r = c.post_json("/generate", body.to_string().as_bytes()).await.unwrap();
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            serde_json::from_slice::<Value>(&r.body).unwrap()
        };
        let first = gen(c.clone(), body.clone()).await;
        assert_eq!(first["meta_info"]["completion_tokens"], 5);
        assert_eq!(first["output_ids"].as_array().unwrap().len(), 5);
        assert_eq!(first["meta_info"]["finish_reason"]["type"], "length");
        assert!(!first["text"].as_str().unwrap().is_empty());
        assert_eq!(first["meta_info"]["cached_tokens"], 0);
        let again = gen(c.clone(), body.clone()).await;
        assert!(again["meta_info"]["cached_tokens"].as_u64().unwrap() > 0, "{again}");
        let r = c.post_json("/flush_cache", b"").await.unwrap();
        assert_eq!(r.status, 200);
        assert!(String::from_utf8_lossy(&r.body).starts_with("Cache flushed."));
        let after = gen(c.clone(), body).await;
        assert_eq!(after["meta_info"]["cached_tokens"], 0, "{after}");
        let r = c.get("/flush_cache").await.unwrap();
        assert_eq!(r.status, 200, "GET works too");
    });
    let _ = mock.finish();
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

fn serve_config(addr: SocketAddr, backend: &str, prefix: &str) -> ServeConfig {
    let url = format!("http://{addr}");
    let argv = [
        "x",
        "--base-url",
        &url,
        "--ready-check-timeout-sec",
        "10",
        "--backend",
        backend,
        "--num-prompts",
        "16",
        "--random-input-len",
        "48",
        "--random-output-len",
        "12",
        "--request-rate",
        "40",
        "--seed",
        "5",
        "--request-id-prefix",
        prefix,
    ];
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

#[test]
fn bench_serve_native_backends_match_the_trace() {
    for (backend, endpoint, dialect) in [
        ("sglang", "/generate", Dialect::Sglang),
        ("tgi", "/generate_stream", Dialect::Tgi),
    ] {
        let mock = start_mock();
        let rt = runtime();
        let prefix = format!("{backend}-");
        let cfg = serve_config(mock.addr, backend, &prefix);
        assert_eq!(cfg.conn.endpoint, endpoint);
        assert_eq!(cfg.conn.dialect(), dialect);
        let out = rt
            .block_on(run::run(
                &cfg,
                Clock::new(),
                &Cancel::new(),
                &mut Vec::new(),
            ))
            .expect("run");
        let trace = mock.finish();
        let m = &out.metrics;
        assert_eq!((m.completed, m.failed), (16, 0), "{backend}");
        let d = &out.detailed;
        let mut gap_err_ms = Vec::new();
        let mut total = 0;
        for i in 0..16 {
            let w = &trace[&format!("{prefix}{i}")];
            total += w.len() as u64;
            assert_eq!(d.output_lens[i], w.len() as u64, "{backend} request {i}");
            // One event per token on both engines' streams: one gap per pair of writes.
            assert_eq!(d.itls[i].len(), w.len() - 1, "{backend} request {i}");
            for (c, p) in d.itls[i].iter().zip(w.windows(2)) {
                let s = (p[1].t_ns - p[0].t_ns) as f64 / 1e6;
                gap_err_ms.push((c * 1e3 - s).abs());
            }
        }
        assert_eq!(m.total_output_tokens, total, "{backend}");
        gap_err_ms.sort_by(f64::total_cmp);
        let median = gap_err_ms[gap_err_ms.len() / 2];
        // The gaps are the 2 ms decode step; a loaded 2-core machine still delivers most on time.
        assert!(median < 1.0, "{backend}: median |gap error| {median} ms");
    }
}

/// `llmspeed stream --api sglang|tgi` as a user runs it: the summary's output tokens are the
/// tokens the server wrote, and every event line is a token event.
#[test]
fn stream_cli_speaks_each_native_api() {
    for api in ["sglang", "tgi"] {
        let mock = start_mock();
        let url = format!("http://{}", mock.addr);
        let mut args = vec![
            "stream",
            "--base-url",
            &url,
            "--model",
            "mock-model",
            "--api",
            api,
            "--prompt",
            "the river runs",
            "--max-tokens",
            "10",
            "--json",
        ];
        if api == "sglang" {
            args.push("--ignore-eos");
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(&args)
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let trace = mock.finish();
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = lines.last().unwrap();
        assert_eq!(trace.len(), 1, "{api}: one request");
        let written = trace.values().next().unwrap().len();
        assert_eq!(summary["output_tokens"], written, "{api}: {summary}");
        assert_eq!(summary["events"], written, "{api}: one event per token");
        let tokens: u64 = lines[..lines.len() - 1]
            .iter()
            .map(|e| e["tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(tokens, written as u64, "{api}");
        assert!(summary["error"].is_null(), "{api}: {summary}");
    }
    // --chat belongs to the OpenAI API only.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "stream",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--api",
            "tgi",
            "--chat",
            "--prompt",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--chat"));
}
