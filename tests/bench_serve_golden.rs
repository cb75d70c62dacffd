//! Golden tests: `bench serve`'s per-request figures, chunk by chunk, against vLLM's own
//! definitions in `vllm/benchmarks/lib/endpoint_request_func.py`
//! (`async_request_openai_completions`, `async_request_openai_chat_completions`, current main)
//! and `calculate_metrics` in `vllm/benchmarks/serve.py`:
//!
//! - a message is an SSE `data:` payload; comments (`:`) and `[DONE]` are skipped;
//! - a message with a non-empty `choices` list is a token chunk: the first sets TTFT (even with
//!   empty text: the role-only chat chunk, a special token's empty completion text), every
//!   later one appends `timestamp - previous token chunk` to ITL and moves the request's end;
//! - a message without choices but with `usage` only sets `output_tokens` from
//!   `usage.completion_tokens`; it does not move the end (chat, too, on current main);
//! - success = at least one token chunk; latency = last token chunk - start;
//! - TPOT = (latency - TTFT) / (output_tokens - 1) when output_tokens > 1.
//!
//! vLLM releases before that rule (e.g. the file at commit 3aee4a4f) ended a *chat* request at
//! the last message before `[DONE]`, usage-only chunk included, and never failed a 200 chat
//! stream: `--chat-end last-message` ([`RequestEnd::LastMessage`]), checked last below.
//!
//! Each case feeds a real HTTP/SSE byte stream through the client's decoder, one read per
//! message at a chosen stamp (the mock clock reads nanoseconds), so the whole path from bytes to
//! figures is checked, not only the arithmetic.

use bytes::BytesMut;
use llmspeed::bench::engine::record::{
    FailureKind, LatencyOrigin, RecordOptions, RequestEnd, RequestRecord, TtftPredicate,
};
use llmspeed::bench::vllm::metrics::{compute, MetricsConfig};
use llmspeed::clock::Clock;
use llmspeed::net::{NoopObserver, Progress, StreamDecoder};
use llmspeed::timeline::Timeline;

const MS: u64 = 1_000_000;

/// What vLLM's request function returns for a stream, worked by hand from its definitions.
#[derive(Debug, PartialEq)]
struct Want {
    success: bool,
    ttft_ms: u64,
    itl_ms: Vec<u64>,
    latency_ms: u64,
    output_tokens: u64,
}

/// Feeds `messages` (stamp in ms, SSE payload) as one read each; the response head arrives at
/// 1 ms. Start (the scheduled send) is 0.
fn record(messages: &[(u64, &str)]) -> RequestRecord {
    record_with(messages, RequestEnd::LastChoice)
}

fn record_with(messages: &[(u64, &str)], end: RequestEnd) -> RequestRecord {
    let (clock, _mock) = Clock::mock();
    let mut tl = Timeline::new(0, 64, false);
    let mut d = StreamDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    let r = d.feed(&mut buf, MS, &mut tl, &mut NoopObserver);
    assert_eq!(r, Ok(Progress::NeedMore));
    let n = messages.len();
    for (i, (t_ms, payload)) in messages.iter().enumerate() {
        let ev = if payload.starts_with(':') {
            format!("{payload}\n\n")
        } else {
            format!("data: {payload}\n\n")
        };
        buf.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        if i + 1 == n {
            buf.extend_from_slice(b"0\r\n\r\n");
        }
        let r = d.feed(&mut buf, t_ms * MS, &mut tl, &mut NoopObserver);
        if i + 1 < n {
            assert_eq!(r, Ok(Progress::NeedMore), "message {i}: {payload}");
        } else {
            assert!(
                matches!(r, Ok(Progress::Finished { .. })),
                "stream did not end cleanly: {r:?}"
            );
        }
    }
    let opts = RecordOptions {
        base_raw: 0,
        origin: LatencyOrigin::Sent,
        predicate: TtftPredicate::FirstChoice,
        end,
    };
    RequestRecord::from_timeline(&tl, &clock, &opts, 7, 0)
}

fn got(r: &RequestRecord) -> Want {
    Want {
        success: r.is_success(),
        ttft_ms: r.ttft_ns().unwrap_or(0) / MS,
        itl_ms: r.itls_ns().map(|g| g / MS).collect(),
        latency_ms: r.e2el_ns().unwrap_or(0) / MS,
        output_tokens: r.output_tokens,
    }
}

#[test]
fn chat_role_chunk_is_the_first_token_and_the_usage_chunk_is_not_the_end() {
    let r = record(&[
        // vLLM: choices non-empty -> first token, TTFT 100 (content "" does not matter).
        (
            100,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (
            110,
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#,
        ),
        (
            125,
            r#"{"choices":[{"index":0,"delta":{"content":"b c"},"finish_reason":null}]}"#,
        ),
        // The finish-only chunk still has choices: one more ITL entry, and the end.
        (
            130,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        ),
        // Usage only: output_tokens = 3; the end stays at 130.
        (
            170,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        ),
        (171, "[DONE]"),
    ]);
    let want = Want {
        success: true,
        ttft_ms: 100,
        itl_ms: vec![10, 15, 5],
        latency_ms: 130,
        output_tokens: 3,
    };
    assert_eq!(got(&r), want);
    // TPOT = (130 - 100) / (3 - 1) = 15 ms.
    assert_eq!(r.tpot_ns(), Some(15.0 * MS as f64));
}

#[test]
fn completions_empty_text_counts_comments_and_done_do_not() {
    let r = record(&[
        (40, ": ping"),
        // An empty completion text (a special token) is still a token chunk.
        (
            50,
            r#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#,
        ),
        (58, ": ping"),
        (
            60,
            r#"{"choices":[{"index":0,"text":"x","finish_reason":null}]}"#,
        ),
        (
            75,
            r#"{"choices":[{"index":0,"text":"y","finish_reason":"length"}]}"#,
        ),
        (
            90,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        ),
        (95, "[DONE]"),
    ]);
    let want = Want {
        success: true,
        ttft_ms: 50,
        itl_ms: vec![10, 15],
        latency_ms: 75,
        output_tokens: 3,
    };
    assert_eq!(got(&r), want);
}

#[test]
fn continuous_usage_on_token_chunks_is_ignored_until_the_usage_only_chunk() {
    // vLLM reads usage only from a message without choices (`elif usage`), so the running
    // counts on token chunks change nothing; the final usage-only chunk gives 4.
    let r = record(&[
        (
            20,
            r#"{"choices":[{"index":0,"text":"ab","finish_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
        ),
        (
            30,
            r#"{"choices":[{"index":0,"text":"cd","finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}"#,
        ),
        (
            45,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}"#,
        ),
        (46, "[DONE]"),
    ]);
    let want = Want {
        success: true,
        ttft_ms: 20,
        // A chunk carrying two tokens is one ITL entry.
        itl_ms: vec![10],
        latency_ms: 30,
        output_tokens: 4,
    };
    assert_eq!(got(&r), want);
    // (30 - 20) / (4 - 1)
    assert_eq!(r.tpot_ns(), Some(10.0 * MS as f64 / 3.0));
}

#[test]
fn a_stream_without_token_chunks_fails_on_both_endpoints() {
    // vLLM: "Never received a valid chunk to calculate TTFT" -> success False.
    for usage in [
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}}"#,
        r#"{"usage":{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}}"#,
    ] {
        let r = record(&[(30, usage), (31, "[DONE]")]);
        assert!(!r.is_success());
        assert_eq!(r.failure(), Some(FailureKind::NoOutput));
        assert_eq!(r.ttft_ns(), None);
    }
}

#[test]
fn a_chat_stream_with_choices_but_no_text_succeeds() {
    // Role chunk and finish chunk only (the model stopped at once): vLLM counts it as a
    // success with TTFT at the role chunk and an empty generated text.
    let r = record(&[
        (
            80,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (
            81,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ),
        (
            82,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}"#,
        ),
        (83, "[DONE]"),
    ]);
    let want = Want {
        success: true,
        ttft_ms: 80,
        itl_ms: vec![1],
        latency_ms: 81,
        output_tokens: 1,
    };
    assert_eq!(got(&r), want);
    // One output token: no TPOT.
    assert_eq!(r.tpot_ns(), None);
}

#[test]
fn run_metrics_pool_the_golden_requests_as_vllm_does() {
    let a = record(&[
        (
            10,
            r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
        ),
        (
            20,
            r#"{"choices":[{"index":0,"text":"b","finish_reason":"length"}]}"#,
        ),
        (
            25,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
        ),
        (26, "[DONE]"),
    ]);
    let b = record(&[
        (
            30,
            r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
        ),
        (
            34,
            r#"{"choices":[{"index":0,"text":"b","finish_reason":null}]}"#,
        ),
        (
            40,
            r#"{"choices":[{"index":0,"text":"c","finish_reason":"length"}]}"#,
        ),
        (
            41,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        ),
        (42, "[DONE]"),
    ]);
    let failed = record(&[(5, r#"{"choices":[]}"#), (6, "[DONE]")]);
    let m = compute(
        &[a, b, failed],
        1_000 * MS,
        &MetricsConfig {
            percentiles: vec![50.0],
            goodput: None,
        },
    );
    assert_eq!((m.completed, m.failed), (2, 1));
    // total_input counts successful requests only (vLLM's `total_input += prompt_len`).
    assert_eq!(m.total_input_tokens, 14);
    assert_eq!(m.total_output_tokens, 5);
    // ITL pooled: [10] + [4, 6]; mean 6.667 ms, median 6 ms.
    assert!(
        (m.itl_ms.mean - 20.0 / 3.0).abs() < 1e-9,
        "{}",
        m.itl_ms.mean
    );
    assert!((m.itl_ms.median - 6.0).abs() < 1e-9);
    // TTFT [10, 30]; TPOT [(20-10)/1, (40-30)/2] = [10, 5]; E2EL [20, 40].
    assert!((m.ttft_ms.mean - 20.0).abs() < 1e-9);
    assert!((m.tpot_ms.mean - 7.5).abs() < 1e-9);
    assert!((m.e2el_ms.mean - 30.0).abs() < 1e-9);
}

/// The chat stream of the first test under vLLM's older chat rule: same TTFT and ITL, the end
/// moves to the usage-only chunk (170 ms), so TPOT = (170 - 100) / 2 = 35 ms.
#[test]
fn older_vllm_chat_rule_ends_at_the_usage_chunk() {
    let msgs: &[(u64, &str)] = &[
        (
            100,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (
            110,
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#,
        ),
        (
            125,
            r#"{"choices":[{"index":0,"delta":{"content":"b c"},"finish_reason":null}]}"#,
        ),
        (
            130,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        ),
        (
            170,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        ),
        (171, "[DONE]"),
    ];
    let r = record_with(msgs, RequestEnd::LastMessage);
    let want = Want {
        success: true,
        ttft_ms: 100,
        itl_ms: vec![10, 15, 5],
        latency_ms: 170,
        output_tokens: 3,
    };
    assert_eq!(got(&r), want);
    assert_eq!(r.tpot_ns(), Some(35.0 * MS as f64));
    // The current rule on the same bytes, for contrast.
    assert_eq!(got(&record(msgs)).latency_ms, 130);
}

#[test]
fn older_vllm_chat_rule_does_not_fail_a_stream_without_choices() {
    // vLLM's older chat path: success = True on any 200 stream; TTFT stays 0.0, no ITL, latency
    // = the last message (the usage chunk) - start, output_tokens from usage.
    let r = record_with(
        &[
            (
                30,
                r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}}"#,
            ),
            (31, "[DONE]"),
        ],
        RequestEnd::LastMessage,
    );
    let want = Want {
        success: true,
        ttft_ms: 0,
        itl_ms: vec![],
        latency_ms: 30,
        output_tokens: 0,
    };
    assert_eq!(got(&r), want);
    assert_eq!(r.ttft_ns(), Some(0));
    // It is a completed request in the run's figures, with E2EL 30 ms.
    let m = compute(
        &[r],
        1_000 * MS,
        &MetricsConfig {
            percentiles: vec![50.0],
            goodput: None,
        },
    );
    assert_eq!((m.completed, m.failed), (1, 0));
    assert!((m.e2el_ms.mean - 30.0).abs() < 1e-9);
    assert!((m.ttft_ms.mean - 0.0).abs() < 1e-9);
}
