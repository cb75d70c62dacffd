//! Chunked decoder: never panics, and split reads give the body and ending of the whole payload.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use llmspeed::proto::chunked::{Chunk, ChunkedDecoder, ChunkedError};
use llmspeed_fuzz::{reads, split_input};

#[derive(Debug, PartialEq)]
enum End {
    Done(usize),
    NeedMore,
    Err(ChunkedError),
}

fn run(pieces: &[&[u8]]) -> (Vec<u8>, End) {
    // Small limits so the limit paths are fuzzed too.
    let mut dec = ChunkedDecoder::with_limits(4096, 32);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    for piece in pieces {
        buf.extend_from_slice(piece);
        fed += piece.len();
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(Chunk::Data(d))) => {
                    assert!(!d.is_empty(), "empty data piece");
                    body.extend_from_slice(&d);
                }
                // Where the body ended, as an offset into the payload.
                Ok(Some(Chunk::End)) => return (body, End::Done(fed - buf.len())),
                Ok(None) => break,
                Err(e) => return (body, End::Err(e)),
            }
        }
    }
    (body, End::NeedMore)
}

fuzz_target!(|data: &[u8]| {
    let (sizes, payload) = split_input(data);
    let whole = run(&reads(payload, None));
    assert_eq!(run(&reads(payload, Some(&sizes))), whole);
});
