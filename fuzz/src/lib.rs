//! Shared by the fuzz targets: how an input chooses its read splits.
//!
//! Input layout: byte 0 holds `k` (its low 3 bits); the next `k` bytes are read sizes
//! (`b % 64 + 1`, cycled); the rest is the payload. `k == 0` means one byte per read.
//! Every target checks that the split reads give exactly what the whole payload gives.

/// Splits a fuzz input into (read sizes, payload).
pub fn split_input(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&c, rest)) = data.split_first() else {
        return (vec![1], data);
    };
    let k = ((c & 7) as usize).min(rest.len());
    let sizes: Vec<usize> = rest[..k].iter().map(|&b| (b % 64) as usize + 1).collect();
    let sizes = if sizes.is_empty() { vec![1] } else { sizes };
    (sizes, &rest[k..])
}

/// The payload cut into reads of the given sizes (cycled); `None` for the whole payload at once.
pub fn reads<'a>(payload: &'a [u8], sizes: Option<&[usize]>) -> Vec<&'a [u8]> {
    let Some(sizes) = sizes else {
        return vec![payload];
    };
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < payload.len() {
        let n = sizes[k % sizes.len()].min(payload.len() - pos);
        out.push(&payload[pos..pos + n]);
        pos += n;
        k += 1;
    }
    out
}

/// What a response decoded to, everything a split could change.
pub type Summary = (
    Vec<(u32, llmspeed::timeline::Channel)>,
    Option<llmspeed::timeline::Usage>,
    Option<llmspeed::timeline::FinishReason>,
    bool,
    Option<String>,
    Result<bool, (llmspeed::timeline::ErrorKind, String)>,
);

/// Runs `head` and then `pieces` through `dec`, keeping text (so every accepted text must
/// unescape). The head is decoded first, on its own: an empty body must be decoded the same
/// whether it came as one empty read or as none.
pub fn decode(mut dec: llmspeed::net::StreamDecoder, head: &[u8], pieces: &[&[u8]]) -> Summary {
    use llmspeed::net::{NoopObserver, Progress};
    use llmspeed::timeline::Timeline;
    let mut tl = Timeline::new(0, 8, true);
    let mut buf = bytes::BytesMut::from(head);
    let mut result = dec.feed(&mut buf, 0, &mut tl, &mut NoopObserver);
    for piece in pieces {
        if result != Ok(Progress::NeedMore) {
            break;
        }
        buf.extend_from_slice(piece);
        result = dec.feed(&mut buf, 0, &mut tl, &mut NoopObserver);
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

/// An SSE body of `dialect` behind a close-delimited 200 head, through the whole decode path
/// (a small event limit so the too-large path is fuzzed too).
pub fn native_stream(dialect: llmspeed::net::Dialect, pieces: &[&[u8]]) -> Summary {
    let dec = llmspeed::net::StreamDecoder::with_dialect(2048, dialect);
    decode(
        dec,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
        pieces,
    )
}

/// The check every native target makes: never a panic, and split reads give what the whole
/// body gives.
pub fn check_native(dialect: llmspeed::net::Dialect, data: &[u8]) {
    let (sizes, payload) = split_input(data);
    let whole = native_stream(dialect, &reads(payload, None));
    assert_eq!(native_stream(dialect, &reads(payload, Some(&sizes))), whole);
}
