//! The framing path does not allocate per event in steady state.
//!
//! A counting global allocator (per thread, so parallel tests do not disturb each other) wraps
//! the system allocator; a vLLM-shaped chunked SSE stream is fed in 1–4 KiB reads through buffers
//! that live as long as the connection, and after a warm-up stream the allocation count must
//! stay flat however many events go through.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::BytesMut;
use llmspeed::proto::chunked::{Chunk, ChunkedDecoder};
use llmspeed::proto::sse::SseParser;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

fn stream(events: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..events {
        let ev = format!(
            "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\
             \"choices\":[{{\"index\":0,\"text\":\" t{i}\",\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        );
        out.extend_from_slice(format!("{:x}\r\n", ev.len()).as_bytes());
        out.extend_from_slice(ev.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// One response through the framing path; returns the number of events.
fn run(input: &[u8], raw: &mut BytesMut, body: &mut BytesMut) -> usize {
    let mut dec = ChunkedDecoder::new();
    let mut sse = SseParser::new(1 << 16);
    let mut events = 0;
    let mut pos = 0;
    let mut k = 0;
    while pos < input.len() {
        let n = [1500, 4096, 1024, 3000][k % 4].min(input.len() - pos);
        k += 1;
        raw.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        while let Some(chunk) = dec.decode(raw).unwrap() {
            let Chunk::Data(d) = chunk else { break };
            body.extend_from_slice(&d);
            drop(d);
            while let Some(ev) = sse.next_event(body).unwrap() {
                assert!(ev.data.starts_with(b"{"));
                events += 1;
            }
        }
    }
    events
}

#[test]
fn no_allocation_per_event_in_steady_state() {
    let small = stream(100);
    let large = stream(5000);
    let mut raw = BytesMut::with_capacity(16 * 1024);
    let mut body = BytesMut::with_capacity(16 * 1024);
    assert_eq!(run(&small, &mut raw, &mut body), 100);

    let before = allocs();
    assert_eq!(run(&small, &mut raw, &mut body), 100);
    let per_small = allocs() - before;

    let before = allocs();
    assert_eq!(run(&large, &mut raw, &mut body), 5000);
    let per_large = allocs() - before;

    // 50x the events must not mean more allocations (a few buffer regrowths at most; on this
    // path, with buffers that outlive the response, both counts are 0).
    assert!(
        per_large <= per_small + 4 && per_large <= 4,
        "{per_small} allocations for 100 events, {per_large} for 5000"
    );
}
