//! Cost of decoding one OpenAI stream event: our scanner against serde_json into a borrowed
//! struct (the "std alternative"), on realistic vLLM chunks.
//!
//! Time is this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: the development
//! machine is a shared 2-core VM, and wall time there mostly measures the neighbours.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use llmspeed::proto::openai::{decode, StreamItem};
use serde::Deserialize;
use std::borrow::Cow;
use std::time::Duration;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `f` `iters` times and reports the thread CPU time it took.
fn cpu_time(iters: u64, data: &[u8], f: fn(&[u8]) -> u64) -> Duration {
    let t0 = thread_cpu_ns();
    for _ in 0..iters {
        black_box(f(black_box(data)));
    }
    Duration::from_nanos(thread_cpu_ns() - t0)
}

const COMPLETIONS: &str = r#"{"id":"cmpl-8f2c9a7e4b1d4e2f9a6c3b5d7e8f0a1b","object":"text_completion","created":1764470000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null}],"usage":null}"#;
const CHAT_USAGE: &str = r#"{"id":"chatcmpl-0c6a4e1d9b2f4a7c8e3d5b6a7f8e9d0c","object":"chat.completion.chunk","created":1764470000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":8000,"total_tokens":8003,"completion_tokens":3}}"#;
const USAGE_ONLY: &str = r#"{"id":"chatcmpl-0c6a4e1d9b2f4a7c8e3d5b6a7f8e9d0c","object":"chat.completion.chunk","created":1764470000,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":8000,"total_tokens":12096,"completion_tokens":4096,"prompt_tokens_details":{"cached_tokens":7984}}}"#;

#[derive(Deserialize)]
struct SChunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<SChoice<'a>>,
    #[serde(default)]
    usage: Option<SUsage>,
}

#[derive(Deserialize)]
struct SChoice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<SDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct SDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct SUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

/// What a consumer reads from each event, so neither decoder's work is optimised away.
fn ours(data: &[u8]) -> u64 {
    match decode(data) {
        Ok(StreamItem::Chunk(c)) => {
            c.choices as u64
                + c.content.or(c.reasoning).map_or(0, |t| t.raw.len() as u64)
                + c.finish_reason.is_some() as u64
                + c.usage.map_or(0, |u| u.prompt_tokens + u.completion_tokens)
        }
        _ => u64::MAX,
    }
}

fn serde_borrowed(data: &[u8]) -> u64 {
    match serde_json::from_slice::<SChunk<'_>>(data) {
        Ok(c) => {
            let content = c.choices.first().map_or(0, |ch| {
                let d = ch.delta.as_ref();
                let t = d.and_then(|d| d.content.as_ref().or(d.reasoning.as_ref()));
                t.or(ch.text.as_ref()).map_or(0, |t| t.len()) + ch.finish_reason.is_some() as usize
            });
            c.choices.len() as u64
                + content as u64
                + c.usage.map_or(0, |u| u.prompt_tokens + u.completion_tokens)
        }
        Err(_) => u64::MAX,
    }
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("vllm_completions", COMPLETIONS),
        ("vllm_chat_continuous_usage", CHAT_USAGE),
        ("vllm_usage_only", USAGE_ONLY),
    ];
    for (_, data) in cases {
        assert_eq!(ours(data.as_bytes()), serde_borrowed(data.as_bytes()));
    }

    // Sanity line for the note: one million decodes timed both ways, so a reader can see how
    // far wall time and CPU time diverge on a loaded machine.
    let n = 1_000_000;
    let wall = std::time::Instant::now();
    let cpu = cpu_time(n, CHAT_USAGE.as_bytes(), ours);
    eprintln!(
        "sanity: {n} chat decodes: {:.1} ns/event CPU, {:.1} ns/event wall",
        cpu.as_nanos() as f64 / n as f64,
        wall.elapsed().as_nanos() as f64 / n as f64
    );

    let mut g = c.benchmark_group("openai_decode_events");
    g.throughput(Throughput::Elements(1));
    for (name, data) in cases {
        g.bench_function(format!("llmspeed/{name}"), |b| {
            b.iter_custom(|iters| cpu_time(iters, data.as_bytes(), ours))
        });
        g.bench_function(format!("serde_json_borrowed/{name}"), |b| {
            b.iter_custom(|iters| cpu_time(iters, data.as_bytes(), serde_borrowed))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("openai_decode_bytes");
    for (name, data) in cases {
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function(format!("llmspeed/{name}"), |b| {
            b.iter_custom(|iters| cpu_time(iters, data.as_bytes(), ours))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
