//! Golden tests: `bench sglang`'s per-request figures, chunk by chunk, against SGLang's own
//! definitions in `python/sglang/bench_serving.py` (sgl-project/sglang commit
//! `0033168f0f58b2bc05aa0273bd475d9c01bafb1c`; the same readers in the later `--tag` revision):
//!
//! - native `/generate` (`async_request_sglang_generate`): `text` is cumulative; an event counts
//!   once it is non-empty. The first counted event is the first token (TTFT). Each later one
//!   adds `completion_tokens - last counted completion_tokens` tokens: none -> skipped, its stamp
//!   not kept; else the gap since the last counted event is split evenly into that many ITL
//!   entries. Output length = the last `completion_tokens`.
//! - completions (`async_request_openai_completions`): a chunk counts when `choices[0].text` is
//!   non-empty, one ITL entry per counted chunk; output length = `usage.completion_tokens` read
//!   only from counted chunks, else the requested length.
//! - chat (`async_request_openai_chat_completions`): a chunk counts when `delta.content` is
//!   non-empty (the role chunk, reasoning and the finish-only chunk do not); usage is read from
//!   any chunk.
//! - all: latency = the last non-empty line read (`[DONE]` included) - start.
//!
//! Each case feeds a real HTTP/SSE byte stream through the client's decoder, one read per
//! message at a chosen stamp (the mock clock reads nanoseconds), then SGLang's reading.

use bytes::BytesMut;
use llmspeed::bench::sglang::metrics::{self, Reader, RequestInput, RequestOutput};
use llmspeed::clock::Clock;
use llmspeed::net::{Dialect, NoopObserver, Progress, StreamDecoder};
use llmspeed::timeline::Timeline;

const MS: u64 = 1_000_000;
/// The output length every case asks for.
const REQUESTED: u64 = 16;

/// What SGLang's request function returns for a stream, worked by hand.
#[derive(Debug)]
struct Want {
    ttft_ms: f64,
    itl_ms: Vec<f64>,
    latency_ms: f64,
    output_len: u64,
}

/// Feeds `messages` (stamp in ms, SSE payload) as one read each after a 200 head at 1 ms; the
/// request starts at 0.
fn read(reader: Reader, messages: &[(u64, &str)]) -> RequestOutput {
    let (clock, _mock) = Clock::mock();
    let dialect = match reader {
        Reader::Native => Dialect::Sglang,
        _ => Dialect::OpenAi,
    };
    let mut tl = Timeline::new(0, 64, true);
    let mut d = StreamDecoder::with_dialect(1 << 20, dialect);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    assert_eq!(
        d.feed(&mut buf, MS, &mut tl, &mut NoopObserver),
        Ok(Progress::NeedMore)
    );
    let n = messages.len();
    for (i, (t_ms, payload)) in messages.iter().enumerate() {
        let ev = format!("data: {payload}\n\n");
        buf.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        if i + 1 == n {
            buf.extend_from_slice(b"0\r\n\r\n");
        }
        let r = d.feed(&mut buf, t_ms * MS, &mut tl, &mut NoopObserver);
        if i + 1 < n {
            assert_eq!(r, Ok(Progress::NeedMore), "message {i}: {payload}");
        } else {
            assert!(matches!(r, Ok(Progress::Finished { .. })), "{r:?}");
        }
    }
    let input = RequestInput::from_timeline(reader, &tl, &clock, 0, 7, REQUESTED);
    metrics::read(reader, &input)
}

fn check(o: &RequestOutput, w: &Want) {
    assert!(o.success, "{o:?}");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        close(o.ttft_s * 1e3, w.ttft_ms),
        "ttft {} vs {w:?}",
        o.ttft_s
    );
    assert_eq!(o.itl_s.len(), w.itl_ms.len(), "itl {:?} vs {w:?}", o.itl_s);
    for (g, e) in o.itl_s.iter().zip(&w.itl_ms) {
        assert!(close(g * 1e3, *e), "itl {:?} vs {w:?}", o.itl_s);
    }
    assert!(
        close(o.latency_s * 1e3, w.latency_ms),
        "latency {o:?} vs {w:?}"
    );
    assert_eq!(o.output_len, w.output_len, "{o:?}");
}

#[test]
fn native_cumulative_text_splits_each_gap_over_its_new_tokens() {
    let o = read(
        Reader::Native,
        &[
            // A token without text yet (a partial UTF-8 character held back): not counted.
            (
                50,
                r#"{"text":"","meta_info":{"id":"r","prompt_tokens":7,"completion_tokens":1,"cached_tokens":0,"finish_reason":null},"index":0}"#,
            ),
            // First text: TTFT 100, and 3 tokens so far.
            (
                100,
                r#"{"text":"Hel","meta_info":{"id":"r","prompt_tokens":7,"completion_tokens":3,"cached_tokens":0,"finish_reason":null},"index":0}"#,
            ),
            // +2 tokens: the 30 ms gap becomes two entries of 15.
            (
                130,
                r#"{"text":"Hello wor","meta_info":{"id":"r","prompt_tokens":7,"completion_tokens":5,"cached_tokens":0,"finish_reason":null},"index":0}"#,
            ),
            // No new token: skipped, so the next gap runs from 130.
            (
                140,
                r#"{"text":"Hello wor","meta_info":{"id":"r","prompt_tokens":7,"completion_tokens":5,"cached_tokens":0,"finish_reason":null},"index":0}"#,
            ),
            // +1 token after 30 ms; the last event carries the finish reason.
            (
                160,
                r#"{"text":"Hello world!","meta_info":{"id":"r","prompt_tokens":7,"completion_tokens":6,"cached_tokens":0,"finish_reason":{"type":"length","length":6}},"index":0}"#,
            ),
            (170, "[DONE]"),
        ],
    );
    check(
        &o,
        &Want {
            ttft_ms: 100.0,
            itl_ms: vec![15.0, 15.0, 30.0],
            latency_ms: 170.0,
            output_len: 6,
        },
    );
    // TPOT = (latency - TTFT) / (output_len - 1) = 70 / 5.
    let m = metrics::compute(&[o], &[6], 1.0);
    assert!((m.tpot_ms.mean - 14.0).abs() < 1e-9);
}

#[test]
fn completions_count_text_chunks_and_keep_the_requested_length_without_usage() {
    let chunk = |t: &str, f: &str| {
        format!(
            r#"{{"id":"c","object":"text_completion","model":"m","choices":[{{"index":0,"text":"{t}","logprobs":null,"finish_reason":{f}}}]}}"#
        )
    };
    let (a, empty, b, c) = (
        chunk("a", "null"),
        chunk("", "null"),
        chunk("b", "null"),
        chunk("c", "\"length\""),
    );
    let o = read(
        Reader::Completions,
        &[
            (100, &a),
            // A special token's empty text: not a counted chunk.
            (120, &empty),
            (130, &b),
            (150, &c),
            (160, "[DONE]"),
        ],
    );
    // No usage reached a counted chunk: SGLang reports the length it asked for.
    check(
        &o,
        &Want {
            ttft_ms: 100.0,
            itl_ms: vec![30.0, 20.0],
            latency_ms: 160.0,
            output_len: REQUESTED,
        },
    );
}

#[test]
fn completions_with_usage_on_every_chunk_take_the_last_counted_one() {
    let chunk = |t: &str, n: u64| {
        format!(
            r#"{{"choices":[{{"index":0,"text":"{t}","finish_reason":null}}],"usage":{{"prompt_tokens":7,"completion_tokens":{n},"total_tokens":{}}}}}"#,
            7 + n
        )
    };
    let (a, b) = (chunk("a", 2), chunk("b", 5));
    let o = read(
        Reader::Completions,
        &[(100, &a), (140, &b), (150, "[DONE]")],
    );
    // One entry per chunk, whatever it carried (3 tokens in the second).
    check(
        &o,
        &Want {
            ttft_ms: 100.0,
            itl_ms: vec![40.0],
            latency_ms: 150.0,
            output_len: 5,
        },
    );
}

#[test]
fn chat_counts_reasoning_and_content_and_reads_usage_from_any_chunk() {
    let o = read(
        Reader::Chat,
        &[
            // The role chunk: empty content, not the first token (vLLM's rule differs).
            (
                90,
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            ),
            // Reasoning counts as output text (SGLang 0.5.23: thoughts count like content).
            (
                100,
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}"#,
            ),
            (
                110,
                r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#,
            ),
            (
                140,
                r#"{"choices":[{"index":0,"delta":{"content":"b c"},"finish_reason":null}]}"#,
            ),
            (
                150,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            ),
            (
                155,
                r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}"#,
            ),
            (160, "[DONE]"),
        ],
    );
    check(
        &o,
        &Want {
            ttft_ms: 100.0,
            itl_ms: vec![10.0, 30.0],
            latency_ms: 160.0,
            output_len: 4,
        },
    );
    // The same stream read as completions would keep the requested length: usage only counts
    // inside a counted chunk there (and chat chunks carry no `text`).
}

#[test]
fn a_stream_without_text_succeeds_with_zero_ttft() {
    let o = read(
        Reader::Native,
        &[
            (
                40,
                r#"{"text":"","meta_info":{"prompt_tokens":7,"completion_tokens":0,"finish_reason":{"type":"length","length":0}}}"#,
            ),
            (50, "[DONE]"),
        ],
    );
    check(
        &o,
        &Want {
            ttft_ms: 0.0,
            itl_ms: vec![],
            latency_ms: 50.0,
            output_len: REQUESTED,
        },
    );
}
