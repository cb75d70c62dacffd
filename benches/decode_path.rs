//! The whole per-event decode path (chunked + SSE + OpenAI fields + timeline append) on a
//! realistic vLLM completions stream, driven through `StreamDecoder` without sockets.
//! Target: >= 1,000,000 events/s on one core.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llmspeed::net::{NoopObserver, Progress, StreamDecoder};
use llmspeed::proto::openai;
use llmspeed::timeline::Timeline;
use std::hint::black_box;

const HEAD: &str = "HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 04:00:00 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";

/// `tokens` vLLM completion chunks with continuous usage, the usage chunk, `[DONE]`, and the
/// last chunk, as uvicorn frames them (one SSE event per chunk, lowercase hex).
fn vllm_stream(tokens: u64) -> Vec<u8> {
    let mut events = Vec::new();
    for n in 1..=tokens {
        let finish = if n == tokens { "\"length\"" } else { "null" };
        events.push(format!(
            "data: {{\"id\":\"cmpl-5c1b7a0e9d2f4b1c8e3a6f7d9b0c2e4a\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\"index\":0,\"text\":\" word{}\",\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":1000,\"total_tokens\":{},\"completion_tokens\":{n}}}}}\n\n",
            n % 97,
            1000 + n
        ));
    }
    events.push(format!("data: {{\"id\":\"cmpl-5c1b7a0e9d2f4b1c8e3a6f7d9b0c2e4a\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\"usage\":{{\"prompt_tokens\":1000,\"total_tokens\":{},\"completion_tokens\":{tokens}}}}}\n\n", 1000 + tokens));
    events.push("data: [DONE]\n\n".to_string());
    let mut out = HEAD.as_bytes().to_vec();
    for e in events {
        out.extend_from_slice(format!("{:x}\r\n", e.len()).as_bytes());
        out.extend_from_slice(e.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Splits `input` into reads: `per_read` events' worth of bytes each (0 = the whole stream).
fn reads(input: &[u8], read_len: usize) -> Vec<&[u8]> {
    if read_len == 0 {
        return vec![input];
    }
    input.chunks(read_len).collect()
}

fn decode_all(reads: &[&[u8]], tokens: usize) -> Timeline {
    let mut tl = Timeline::new(0, tokens + 8, false);
    let mut dec = StreamDecoder::new(1 << 20);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    for (i, r) in reads.iter().enumerate() {
        if buf.capacity() - buf.len() < r.len() {
            buf.reserve(r.len().max(8 * 1024));
        }
        buf.extend_from_slice(r);
        match dec.feed(&mut buf, i as u64, &mut tl, &mut NoopObserver) {
            Ok(Progress::NeedMore) | Ok(Progress::Finished { .. }) => {}
            other => panic!("bench stream failed: {other:?}"),
        }
    }
    tl
}

fn bench(c: &mut Criterion) {
    const TOKENS: u64 = 1024;
    let input = vllm_stream(TOKENS);
    let event_len = input.len() / TOKENS as usize;
    let check = decode_all(&reads(&input, 0), TOKENS as usize);
    assert!(check.done && check.events.len() == TOKENS as usize && check.outcome.is_ok());

    let mut g = c.benchmark_group("decode_path");
    // Events: the SSE events of the stream (token chunks + usage + [DONE]).
    let events = TOKENS + 2;
    for (name, read_len) in [
        ("one_event_per_read", event_len),
        ("16k_reads", 16 * 1024),
        ("whole_stream", 0),
    ] {
        let rs = reads(&input, read_len);
        g.throughput(Throughput::Elements(events));
        g.bench_with_input(BenchmarkId::new("events", name), &rs, |b, rs| {
            b.iter(|| black_box(decode_all(black_box(rs), TOKENS as usize)))
        });
    }
    let rs = reads(&input, 16 * 1024);
    g.throughput(Throughput::Bytes(input.len() as u64));
    g.bench_with_input(BenchmarkId::new("bytes", "16k_reads"), &rs, |b, rs| {
        b.iter(|| black_box(decode_all(black_box(rs), TOKENS as usize)))
    });
    // The OpenAI field extraction alone, on the same event payloads: the rest of the path
    // (chunked + SSE + timeline) costs the difference.
    let payloads = sse_payloads(&input);
    assert_eq!(payloads.len() as u64, events);
    g.throughput(Throughput::Elements(events));
    g.bench_function("parts/openai_decode_only", |b| {
        b.iter(|| {
            for p in &payloads {
                let _ = black_box(openai::decode(black_box(p)));
            }
        })
    });
    g.finish();
}

/// The `data` payloads of every event in the stream (naively cut, for the parts bench).
fn sse_payloads(input: &[u8]) -> Vec<Vec<u8>> {
    let text = std::str::from_utf8(input).expect("ascii stream");
    text.split("data: ")
        .skip(1)
        .map(|s| s.as_bytes()[..s.find("\n\n").expect("event end")].to_vec())
        .collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
