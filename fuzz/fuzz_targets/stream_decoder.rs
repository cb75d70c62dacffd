//! The whole client decode path (`net::StreamDecoder`: head, body, SSE, OpenAI fields, timeline):
//! never panics, and split reads record the same timeline and outcome as the whole response.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::net::StreamDecoder;
use llmspeed_fuzz::{decode, reads, split_input, Summary};

fn run(pieces: &[&[u8]]) -> Summary {
    // A small event limit so the too-large path is fuzzed too; the head comes in the payload.
    decode(StreamDecoder::new(512), b"", pieces)
}

fuzz_target!(|data: &[u8]| {
    let (sizes, payload) = split_input(data);
    let whole = run(&reads(payload, None));
    assert_eq!(run(&reads(payload, Some(&sizes))), whole);
});
