//! Framing throughput on a realistic vLLM stream, and the cost of one timestamp.
//!
//! The stream is what uvicorn sends for `/v1/completions`: one ~280-byte
//! `data: {completion chunk}\n\n` event per chunk, lowercase hex sizes, `data: [DONE]`, `0\r\n\r\n`.
//! It is fed in reads of 1–4 KiB (a fixed seed), the way the socket hands it to the read loop.

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llmspeed::clock::Clock;
use llmspeed::proto::chunked::{Chunk, ChunkedDecoder};
use llmspeed::proto::sse::SseParser;
use rand::{rngs::StdRng, Rng, SeedableRng};

const EVENTS: usize = 2000;

/// The chunked body and the number of SSE events in it.
fn vllm_stream() -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut push = |event: &[u8]| {
        out.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
        out.extend_from_slice(event);
        out.extend_from_slice(b"\r\n");
    };
    for i in 0..EVENTS {
        let ev = format!(
            "data: {{\"id\":\"cmpl-5f0c1a2b3c4d4e5f8a9b0c1d2e3f4a5b\",\"object\":\"text_completion\",\
             \"created\":1764475200,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\
             \"index\":0,\"text\":\" token{i}\",\"logprobs\":null,\"finish_reason\":null,\
             \"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":128,\"total_tokens\":{},\
             \"completion_tokens\":{}}}}}\n\n",
            129 + i,
            i + 1
        );
        push(ev.as_bytes());
    }
    push(b"data: [DONE]\n\n");
    out.extend_from_slice(b"0\r\n\r\n");
    (out, EVENTS + 1)
}

/// Cuts the stream into reads of 1–4 KiB.
fn reads(stream: &[u8]) -> Vec<&[u8]> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let n = rng.gen_range(1024..=4096).min(stream.len() - pos);
        out.push(&stream[pos..pos + n]);
        pos += n;
    }
    out
}

/// The read loop's framing work: socket bytes -> chunked -> SSE events. Returns events seen.
fn chunked_sse(reads: &[&[u8]], raw: &mut BytesMut, body: &mut BytesMut) -> usize {
    let mut dec = ChunkedDecoder::new();
    let mut sse = SseParser::new(1 << 20);
    let mut events = 0;
    for read in reads {
        raw.extend_from_slice(read);
        while let Some(chunk) = dec.decode(raw).expect("valid stream") {
            match chunk {
                Chunk::Data(d) => {
                    body.extend_from_slice(&d);
                    while let Some(ev) = sse.next_event(body).expect("valid stream") {
                        black_box(&ev.data);
                        events += 1;
                    }
                }
                Chunk::End => return events,
            }
        }
    }
    events
}

fn chunked_only(reads: &[&[u8]], raw: &mut BytesMut) -> usize {
    let mut dec = ChunkedDecoder::new();
    let mut n = 0;
    for read in reads {
        raw.extend_from_slice(read);
        while let Some(Chunk::Data(d)) = dec.decode(raw).expect("valid stream") {
            n += d.len();
        }
    }
    n
}

fn sse_only(reads: &[&[u8]], body: &mut BytesMut) -> usize {
    let mut sse = SseParser::new(1 << 20);
    let mut events = 0;
    for read in reads {
        body.extend_from_slice(read);
        while let Some(ev) = sse.next_event(body).expect("valid stream") {
            black_box(&ev.data);
            events += 1;
        }
    }
    events
}

fn framing(c: &mut Criterion) {
    let (stream, events) = vllm_stream();
    let reads = reads(&stream);
    // The SSE-only case sees the de-chunked body, cut the same way.
    let mut body_bytes = BytesMut::new();
    let mut raw = BytesMut::from(&stream[..]);
    let mut dec = ChunkedDecoder::new();
    while let Ok(Some(Chunk::Data(d))) = dec.decode(&mut raw) {
        body_bytes.extend_from_slice(&d);
    }
    let body_reads = self::reads(&body_bytes);
    let mut raw = BytesMut::with_capacity(8192);
    let mut body = BytesMut::with_capacity(8192);
    assert_eq!(chunked_sse(&reads, &mut raw, &mut body), events);

    let mut g = c.benchmark_group("framing_bytes");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("chunked", |b| {
        b.iter(|| chunked_only(&reads, &mut raw));
    });
    g.throughput(Throughput::Bytes(body_bytes.len() as u64));
    g.bench_function("sse", |b| {
        b.iter(|| sse_only(&body_reads, &mut body));
    });
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("chunked+sse", |b| {
        b.iter(|| chunked_sse(&reads, &mut raw, &mut body));
    });
    g.finish();

    let mut g = c.benchmark_group("framing_events");
    g.throughput(Throughput::Elements(events as u64));
    g.bench_function(BenchmarkId::new("chunked+sse", events), |b| {
        b.iter(|| chunked_sse(&reads, &mut raw, &mut body));
    });
    g.finish();
}

fn timestamps(c: &mut Criterion) {
    let clock = Clock::new();
    let mut g = c.benchmark_group("timestamp");
    g.bench_function("clock.raw()", |b| b.iter(|| black_box(clock.raw())));
    g.bench_function("quanta::Instant::now()", |b| {
        b.iter(|| black_box(quanta::Instant::now()))
    });
    g.bench_function("std::time::Instant::now()", |b| {
        b.iter(|| black_box(std::time::Instant::now()))
    });
    g.finish();
}

criterion_group!(benches, framing, timestamps);
criterion_main!(benches);
