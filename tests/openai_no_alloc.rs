//! The OpenAI event decoder must not touch the heap: it runs once per event on the read loop.
//! A counting global allocator shows it, in its own test binary so no other test is affected.

use llmspeed::proto::openai::{decode, StreamItem};
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

const EVENTS: [&str; 6] = [
    r#"{"id":"cmpl-8f2c","object":"text_completion","created":1764470000,"model":"m","choices":[{"index":0,"text":" caf\u00e9","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[1,2]}],"usage":{"prompt_tokens":8000,"total_tokens":8003,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}}"#,
    r#"{"id":"chatcmpl-0c6a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hm","tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"stop"}],"timings":{"prompt_n":27,"prompt_ms":35.2,"predicted_n":64,"predicted_ms":910.5,"cache_n":0}}"#,
    r#"{"error":{"message":"bad","type":"BadRequestError","param":null,"code":"400"}}"#,
    r#"{"x":[[[[[[[[[[{"y":"z"}]]]]]]]]]]}"#,
    "[DONE]",
    r#"{"choices":[{"text":"truncated"#,
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
                Ok(StreamItem::Chunk(c)) => seen += c.choices as u64,
                Ok(_) => seen += 1,
                Err(_) => seen += 2,
            }
        }
    }
    let after = allocs();
    assert_eq!(after - before, 0, "decode allocated");
    // Per round: two chunks with one choice, an error, a chunk with none, [DONE], a failure.
    assert_eq!(seen, 1000 * 6);
}
