//! Response-head parser: never panics, and split reads give the head (or error) of the whole
//! payload and consume the same bytes. Also drives the body decoder the head selects.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use llmspeed::proto::body::{BodyChunk, BodyDecoder};
use llmspeed::proto::http1::HeadParser;
use llmspeed_fuzz::{reads, split_input};

fn run(pieces: &[&[u8]]) -> String {
    let mut p = HeadParser::new(1024);
    let mut buf = BytesMut::new();
    let mut pieces = pieces.iter();
    let head = loop {
        match p.parse(&mut buf, "POST") {
            Ok(Some(h)) => break h,
            Err(e) => return format!("error: {e}"),
            Ok(None) => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return "incomplete".into(),
            },
        }
    };
    let mut body = Vec::new();
    let mut dec = BodyDecoder::new(head.body);
    let end = loop {
        match dec.decode(&mut buf) {
            Ok(Some(BodyChunk::Data(d))) => body.extend_from_slice(&d),
            Ok(Some(BodyChunk::End)) => {
                // What follows the body (the next response) must be left alone, whatever the split.
                let unread: usize = pieces.map(|p| p.len()).sum();
                break format!("end, {} left", buf.len() + unread);
            }
            Ok(None) => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => break format!("eof: {:?}", dec.eof()),
            },
            Err(e) => break format!("error: {e}"),
        }
    };
    format!("{head:?}\n{body:?}\n{end}")
}

fuzz_target!(|data: &[u8]| {
    let (sizes, payload) = split_input(data);
    let whole = run(&reads(payload, None));
    assert_eq!(run(&reads(payload, Some(&sizes))), whole);
});
