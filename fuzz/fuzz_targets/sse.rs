//! SSE parser: never panics, and split reads give the events of the whole payload.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use llmspeed::proto::sse::{SseError, SseParser};
use llmspeed_fuzz::{reads, split_input};

type Ev = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>);

fn run(pieces: &[&[u8]], max: usize) -> (Vec<Ev>, Option<SseError>) {
    let mut p = SseParser::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match p.next_event(&mut buf) {
                Ok(Some(e)) => out.push((
                    e.data.to_vec(),
                    e.event.map(|b| b.to_vec()),
                    e.id.map(|b| b.to_vec()),
                    e.retry,
                )),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    p.finish();
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let (sizes, payload) = split_input(data);
    // A small limit so the too-large path is fuzzed too.
    let max = 256;
    let whole = run(&reads(payload, None), max);
    assert_eq!(run(&reads(payload, Some(&sizes)), max), whole);
});
