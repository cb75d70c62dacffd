//! The OpenAI event decoder must not touch the heap: it runs once per event on the read loop.
//! A counting global allocator shows it, in its own test binary so no other test is affected.

use llmspeed::proto::openai::{decode, server_timing, StreamItem};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

// Per thread: the test harness's own threads allocate too, and must not be counted.
thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the slot may be gone while the thread is being torn down.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const EVENTS: [&str; 7] = [
    r#"{"id":"cmpl-8f2c","object":"text_completion","created":1764470000,"model":"m","choices":[{"index":0,"text":" caf\u00e9","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[1,2]}],"usage":{"prompt_tokens":8000,"total_tokens":8003,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}}"#,
    r#"{"id":"chatcmpl-0c6a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hm","tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"stop"}],"timings":{"prompt_n":27,"prompt_ms":35.2,"predicted_n":64,"predicted_ms":910.5,"cache_n":0}}"#,
    r#"{"error":{"message":"bad","type":"BadRequestError","param":null,"code":"400"}}"#,
    r#"{"x":[[[[[[[[[[{"y":"z"}]]]]]]]]]]}"#,
    "[DONE]",
    r#"{"choices":[{"text":"truncated"#,
    // vLLM's final usage chunk with the server's per-request metrics.
    r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":9,"completion_tokens":4},"metrics":{"time_to_first_token_ms":12.5,"generation_time_ms":30.0,"queue_time_ms":0.25,"mean_itl_ms":10.0,"tokens_per_second":94.1}}"#,
];

#[test]
fn decoding_events_does_not_allocate() {
    // Warm anything lazily initialised (there should be nothing, but be fair).
    for e in EVENTS {
        let _ = decode(e.as_bytes());
    }
    let before = allocs();
    let mut seen = 0u64;
    for _ in 0..1000 {
        for e in EVENTS {
            match decode(e.as_bytes()) {
                Ok(StreamItem::Chunk(c)) => {
                    let timing = c.metrics.and_then(|raw| server_timing(raw).ok());
                    seen += c.choices as u64 + timing.map_or(0, |m| m.queue_ms.is_some() as u64)
                }
                Ok(_) => seen += 1,
                Err(_) => seen += 2,
            }
        }
    }
    let after = allocs();
    assert_eq!(after - before, 0, "decode allocated");
    // Per round: two chunks with one choice, an error, a chunk with none, [DONE], a failure,
    // and the usage chunk whose metrics were read.
    assert_eq!(seen, 1000 * 7);
}

/// The `data` payloads of a recorded native stream (single-line events, comments skipped).
fn payloads(body: &'static str) -> Vec<&'static [u8]> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d).as_bytes())
        .collect()
}

#[test]
fn native_decoders_do_not_allocate() {
    use llmspeed::proto::native::{Dialect, NativeDecoder, NativeItem};
    let streams = [
        (
            Dialect::Sglang,
            include_str!("data/native/sglang_generate.sse"),
        ),
        (
            Dialect::Sglang,
            include_str!("data/native/sglang_generate_error.sse"),
        ),
        (
            Dialect::Tgi,
            include_str!("data/native/tgi_generate_stream.sse"),
        ),
        (
            Dialect::Tgi,
            include_str!("data/native/tgi_generate_stream_error.sse"),
        ),
        (
            Dialect::LlamaCpp,
            include_str!("data/native/llamacpp_completion.sse"),
        ),
        (
            Dialect::LlamaCpp,
            include_str!("data/native/llamacpp_completion_error.sse"),
        ),
    ];
    let streams: Vec<(Dialect, Vec<&[u8]>)> =
        streams.iter().map(|(d, b)| (*d, payloads(b))).collect();
    let mut decoders: Vec<NativeDecoder> = streams
        .iter()
        .map(|(d, _)| NativeDecoder::new(*d).unwrap())
        .collect();
    let before = allocs();
    let mut tokens = 0u64;
    let mut others = 0u64;
    for _ in 0..1000 {
        for ((d, events), dec) in streams.iter().zip(decoders.iter_mut()) {
            *dec = NativeDecoder::new(*d).unwrap();
            for e in events {
                match dec.decode(e) {
                    Ok(NativeItem::Event(ev)) => tokens += ev.tokens,
                    Ok(_) => others += 1,
                    Err(_) => others += 100,
                }
            }
        }
    }
    assert_eq!(allocs() - before, 0, "a native decoder allocated");
    // Per round: 8 + 1 (SGLang), 5 + 1 (TGI), 5 + 1 (llama.cpp) tokens; [DONE] twice and an
    // error event in each error stream, no failure.
    assert_eq!(tokens, 1000 * (8 + 1 + 5 + 1 + 5 + 1));
    assert_eq!(others, 1000 * (2 + 3));
}
