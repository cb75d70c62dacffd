//! The whole client decode path (`net::StreamDecoder`: head, body, SSE, OpenAI fields, timeline):
//! never panics, and split reads record the same timeline and outcome as the whole response.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use llmspeed::net::{NoopObserver, Progress, StreamDecoder};
use llmspeed::timeline::{Channel, ErrorKind, FinishReason, Timeline, Usage};
use llmspeed_fuzz::{reads, split_input};

type Summary = (
    Vec<(u32, Channel)>,
    Option<Usage>,
    Option<FinishReason>,
    bool,
    Option<String>,
    Result<bool, (ErrorKind, String)>,
);

fn run(pieces: &[&[u8]]) -> Summary {
    let mut tl = Timeline::new(0, 8, true);
    // A small event limit so the too-large path is fuzzed too.
    let mut dec = StreamDecoder::new(512);
    let mut buf = BytesMut::new();
    let mut result = Ok(Progress::NeedMore);
    for piece in pieces {
        buf.extend_from_slice(piece);
        result = dec.feed(&mut buf, 0, &mut tl, &mut NoopObserver);
        if result != Ok(Progress::NeedMore) {
            break;
        }
    }
    if result == Ok(Progress::NeedMore) {
        result = dec.eof(0, &mut tl);
    }
    let outcome = match result {
        Ok(Progress::Finished { .. }) => Ok(true),
        Ok(_) => Ok(false),
        Err(e) => Err((e.kind, e.message)),
    };
    (
        tl.events.iter().map(|e| (e.tokens, e.channel)).collect(),
        tl.usage,
        tl.finish_reason,
        tl.done,
        tl.content_text,
        outcome,
    )
}

fuzz_target!(|data: &[u8]| {
    let (sizes, payload) = split_input(data);
    let whole = run(&reads(payload, None));
    assert_eq!(run(&reads(payload, Some(&sizes))), whole);
});
