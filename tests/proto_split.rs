//! Split-invariance of the framing parsers, checked against naive twins.
//!
//! For every input and every way of cutting it into reads, the fast parsers must give what they
//! give on the whole buffer, and that must equal a naive reference written here from the rules
//! alone (whole input, line by line, allocating freely, no resumable state).

use bytes::BytesMut;
use llmspeed::proto::chunked::{Chunk, ChunkedDecoder, ChunkedError, MAX_TRAILER_BYTES};
use llmspeed::proto::http1::HeadParser;
use llmspeed::proto::sse::{SseError, SseParser};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// SSE

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    data: Vec<u8>,
    event: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
    retry: Option<u64>,
}

/// Feeds `input` in reads of `sizes` (cycled); stops at the first error.
fn fast_sse(input: &[u8], sizes: &[usize], max: usize) -> (Vec<Ev>, Option<SseError>) {
    let mut p = SseParser::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < input.len() {
        let n = if sizes.is_empty() {
            input.len()
        } else {
            sizes[k % sizes.len()].max(1)
        };
        k += 1;
        let end = input.len().min(pos + n);
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
        loop {
            match p.next_event(&mut buf) {
                Ok(Some(e)) => out.push(Ev {
                    data: e.data.to_vec(),
                    event: e.event.map(|b| b.to_vec()),
                    id: e.id.map(|b| b.to_vec()),
                    retry: e.retry,
                }),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    p.finish();
    (out, None)
}

/// The WHATWG algorithm read straight off the page, on the whole input.
fn naive_sse(input: &[u8], max: usize) -> (Vec<Ev>, Option<SseError>) {
    let s = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let too_large = Some(SseError::EventTooLarge { limit: max });
    let mut out = Vec::new();
    let mut data: Vec<Vec<u8>> = Vec::new();
    let (mut event, mut id, mut retry) = (None, None, None);
    // Where the current event's bytes begin (lines before its first field are not counted).
    let mut event_start = 0;
    let mut start = 0;
    loop {
        let Some(end) = (start..s.len()).find(|&i| s[i] == b'\n' || s[i] == b'\r') else {
            if s.len() - event_start > max {
                return (out, too_large);
            }
            return (out, None);
        };
        if end - event_start > max {
            return (out, too_large);
        }
        let next = if s[end] == b'\r' && s.get(end + 1) == Some(&b'\n') {
            end + 2
        } else {
            end + 1
        };
        let line = &s[start..end];
        start = next;
        if line.is_empty() {
            if !data.is_empty() {
                out.push(Ev {
                    data: data.join(&b'\n'),
                    event: event.take(),
                    id: id.take(),
                    retry: retry.take(),
                });
            }
            (data, event, id, retry) = (Vec::new(), None, None, None);
            event_start = next;
            continue;
        }
        if line[0] != b':' {
            let (name, mut value) = match line.iter().position(|&b| b == b':') {
                Some(c) => (&line[..c], &line[c + 1..]),
                None => (line, &b""[..]),
            };
            if value.first() == Some(&b' ') {
                value = &value[1..];
            }
            match name {
                b"data" => data.push(value.to_vec()),
                b"event" => event = Some(value.to_vec()),
                b"id" if !value.contains(&0) => id = Some(value.to_vec()),
                // Too many digits for u64: ignored like any other invalid value.
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    if let Ok(ms) = std::str::from_utf8(value).unwrap().parse() {
                        retry = Some(ms);
                    }
                }
                _ => {}
            }
        }
        if data.is_empty() && event.is_none() && id.is_none() && retry.is_none() {
            event_start = next;
        }
    }
}

fn sse_piece() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"data: {\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        b"data:{\"token\":{\"id\":5,\"text\":\"a\"}}\n\n",
        b":\n\n",
        b": ping\r\n",
        b"data: [DONE]\n\n",
        b"data: {\"error\":{\"message\":\"boom\",\"type\":\"x\"}}\n\n",
        b"event: delta\n",
        b"id: 5\r",
        b"id: a\0b\n",
        b"retry: 100\n",
        b"retry: 1x\n",
        b"data: line1\ndata: line2\n\n",
        b"data:  two spaces\r\n\r\n",
        b"data\n",
        b"data:\n",
        b"h\xc3\xa9\xf0\x9f\x98\x80",
        b"\xEF\xBB\xBF",
        b"\r\n",
        b"\r",
        b"\n",
        b"data: ",
        b"x",
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(|b| b.to_vec()),
        1 => prop::collection::vec(
            prop::sample::select(b"da:t \r\n\0x\xEF\xBB\xBF1".to_vec()),
            0..12
        ),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

fn sse_input() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), prop::collection::vec(sse_piece(), 0..24)).prop_map(|(bom, pieces)| {
        let mut v = if bom {
            b"\xEF\xBB\xBF".to_vec()
        } else {
            vec![]
        };
        pieces.iter().for_each(|p| v.extend_from_slice(p));
        v
    })
}

fn read_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![1]),
        Just(vec![2]),
        prop::collection::vec(1usize..40, 1..32),
    ]
}

/// Reads that end right after every CR, so that each CRLF is split across reads.
fn cut_after_cr(input: &[u8]) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut last = 0;
    for (i, &b) in input.iter().enumerate() {
        if b == b'\r' {
            sizes.push(i + 1 - last);
            last = i + 1;
        }
    }
    sizes.push(input.len().saturating_sub(last).max(1));
    sizes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn sse_split_invariant_and_matches_naive(
        input in sse_input(),
        sizes in read_sizes(),
        max in prop_oneof![Just(1usize << 20), 8usize..200],
    ) {
        let whole = fast_sse(&input, &[], max);
        prop_assert_eq!(&whole, &naive_sse(&input, max));
        prop_assert_eq!(&fast_sse(&input, &sizes, max), &whole);
        prop_assert_eq!(&fast_sse(&input, &cut_after_cr(&input), max), &whole);
    }
}

// ---------------------------------------------------------------------------------------------
// Chunked

#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Done,
    NeedMore,
    Err(ChunkedError),
}

fn fast_chunked(input: &[u8], sizes: &[usize], limits: (u64, usize)) -> (Vec<u8>, End) {
    let mut dec = ChunkedDecoder::with_limits(limits.0, limits.1);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    loop {
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(Chunk::Data(d))) => {
                    assert!(!d.is_empty());
                    body.extend_from_slice(&d)
                }
                Ok(Some(Chunk::End)) => return (body, End::Done),
                Ok(None) => break,
                Err(e) => return (body, End::Err(e)),
            }
        }
        if pos == input.len() {
            return (body, End::NeedMore);
        }
        let n = if sizes.is_empty() {
            input.len()
        } else {
            sizes[k % sizes.len()].max(1)
        };
        k += 1;
        let end = input.len().min(pos + n);
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
    }
}

/// RFC 9112 §7.1 on the whole input, one line at a time. A line's first offending byte decides
/// its error; the length limit is checked before a byte's meaning, as the decoder does.
fn naive_chunked(input: &[u8], (max_chunk, max_line): (u64, usize)) -> (Vec<u8>, End) {
    let mut body = Vec::new();
    let mut s = input;
    loop {
        let lf = s.iter().position(|&b| b == b'\n');
        let line = &s[..lf.unwrap_or(s.len())];
        // (position in line, error) candidates; the earliest wins.
        let mut errs: Vec<(usize, ChunkedError)> = Vec::new();
        if line.len() > max_line {
            errs.push((max_line, ChunkedError::LineTooLong { limit: max_line }));
        }
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        let zeros = line[..digits].iter().take_while(|&&b| b == b'0').count();
        if digits > zeros + 16 {
            errs.push((zeros + 16, ChunkedError::SizeOverflow));
        }
        let mut complete = lf.is_some();
        if digits == 0 {
            match (line.first(), lf) {
                (Some(&b), _) => errs.push((0, ChunkedError::InvalidSize { byte: b })),
                (None, Some(_)) => errs.push((0, ChunkedError::InvalidSize { byte: b'\n' })),
                (None, None) => {}
            }
        } else if let Some(&c) = line.get(digits) {
            if c == b'\r' || c == b';' || c == b' ' || c == b'\t' {
                // After a CR only the LF may follow.
                if let Some(cr) = line[digits..].iter().position(|&b| b == b'\r') {
                    let cr = digits + cr;
                    match line.get(cr + 1) {
                        // Keyed at the CR: the byte after it is judged before it is counted.
                        Some(&b) => errs.push((cr, ChunkedError::BareCr { byte: b })),
                        None if lf.is_none() => complete = false,
                        None => {}
                    }
                }
            } else {
                errs.push((digits, ChunkedError::InvalidSize { byte: c }));
            }
        }
        if let Some((_, e)) = errs.into_iter().min_by_key(|(p, _)| *p) {
            return (body, End::Err(e));
        }
        if !complete {
            return (body, End::NeedMore);
        }
        let size = u64::from_str_radix(
            std::str::from_utf8(&line[zeros..digits]).unwrap().trim(),
            16,
        )
        .unwrap_or(0);
        s = &s[line.len() + 1..];
        if size == 0 {
            return naive_trailers(s, body);
        }
        if size > max_chunk {
            return (
                body,
                End::Err(ChunkedError::ChunkTooLarge {
                    size,
                    limit: max_chunk,
                }),
            );
        }
        let size = size as usize;
        if s.len() < size {
            body.extend_from_slice(s);
            return (body, End::NeedMore);
        }
        body.extend_from_slice(&s[..size]);
        s = &s[size..];
        s = match s {
            [] | [b'\r'] => return (body, End::NeedMore),
            [b'\r', b'\n', rest @ ..] | [b'\n', rest @ ..] => rest,
            [b'\r', b, ..] | [b, ..] => {
                return (body, End::Err(ChunkedError::MissingCrlf { byte: *b }))
            }
        };
    }
}

fn naive_trailers(mut s: &[u8], body: Vec<u8>) -> (Vec<u8>, End) {
    let mut total = 0;
    loop {
        match s {
            [] | [b'\r'] => return (body, End::NeedMore),
            [b'\n', ..] | [b'\r', b'\n', ..] => return (body, End::Done),
            [b'\r', b, ..] => return (body, End::Err(ChunkedError::BareCr { byte: *b })),
            _ => {}
        }
        let line_len = s
            .iter()
            .position(|&b| b == b'\n')
            .map_or(s.len(), |i| i + 1);
        total += line_len;
        if total > MAX_TRAILER_BYTES {
            let e = ChunkedError::TrailersTooLong {
                limit: MAX_TRAILER_BYTES,
            };
            return (body, End::Err(e));
        }
        if line_len == s.len() && s.last() != Some(&b'\n') {
            return (body, End::NeedMore);
        }
        s = &s[line_len..];
    }
}

/// A body cut into chunks the way servers do it, with optional uppercase hex, leading zeros,
/// extensions, trailers and a final CRLF, then possibly corrupted at one byte.
fn chunked_encoded() -> impl Strategy<Value = Vec<u8>> {
    (
        sse_input(),
        prop::collection::vec(1usize..300, 1..16),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec!["", ";ext", "; a=b ; c=\"d\"", " ;x"]),
        prop::sample::select(vec!["", "X-Trailer: 1\r\n", "A: b\r\nC: d\r\n"]),
        prop_oneof![Just(""), Just("\r\n"), Just("\r")],
    )
        .prop_map(|(body, sizes, upper, zeros, ext, trailers, tail)| {
            let mut out = Vec::new();
            let mut pos = 0;
            let mut k = 0;
            while pos < body.len() {
                let n = sizes[k % sizes.len()].min(body.len() - pos);
                k += 1;
                let hex = if upper {
                    format!("{n:X}")
                } else {
                    format!("{n:x}")
                };
                let pad = if zeros { "00" } else { "" };
                out.extend_from_slice(format!("{pad}{hex}{ext}\r\n").as_bytes());
                out.extend_from_slice(&body[pos..pos + n]);
                out.extend_from_slice(b"\r\n");
                pos += n;
            }
            out.extend_from_slice(format!("0{ext}\r\n{trailers}{tail}").as_bytes());
            out
        })
}

fn chunked_input() -> impl Strategy<Value = Vec<u8>> {
    let encoded = chunked_encoded();
    let corrupted = (chunked_encoded(), any::<prop::sample::Index>(), any::<u8>()).prop_map(
        |(mut v, at, b)| {
            if !v.is_empty() {
                let i = at.index(v.len());
                v[i] = b;
            }
            v
        },
    );
    // A connection closing mid-body leaves any prefix.
    let truncated = (chunked_encoded(), any::<prop::sample::Index>())
        .prop_map(|(v, at)| v[..at.index(v.len() + 1)].to_vec());
    prop_oneof![
        3 => encoded,
        2 => corrupted,
        2 => truncated,
        1 => prop::collection::vec(
            prop::sample::select(b"0123456789abcdefABCDEF;\r\n xz\t".to_vec()),
            0..40
        ),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn chunked_split_invariant_and_matches_naive(
        input in chunked_input(),
        sizes in read_sizes(),
        limits in prop_oneof![
            Just((1u64 << 30, 4096usize)),
            (1u64..200, 1usize..12),
        ],
    ) {
        let whole = fast_chunked(&input, &[], limits);
        prop_assert_eq!(&whole, &naive_chunked(&input, limits));
        prop_assert_eq!(&fast_chunked(&input, &sizes, limits), &whole);
    }
}

// ---------------------------------------------------------------------------------------------
// Response heads

fn parse_head(input: &[u8], sizes: &[usize]) -> (String, usize) {
    let mut p = HeadParser::new(512);
    let mut buf = BytesMut::new();
    let mut pos = 0;
    let mut k = 0;
    loop {
        match p.parse(&mut buf, "POST") {
            Ok(Some(h)) => {
                let shown = format!("{:?}", h);
                return (shown, input.len() - pos + buf.len());
            }
            Err(e) => return (format!("error: {e}"), 0),
            Ok(None) if pos == input.len() => return ("incomplete".into(), 0),
            Ok(None) => {}
        }
        let n = if sizes.is_empty() {
            input.len()
        } else {
            sizes[k % sizes.len()].max(1)
        };
        k += 1;
        let end = input.len().min(pos + n);
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
    }
}

fn head_input() -> impl Strategy<Value = Vec<u8>> {
    let line = prop::sample::select(vec![
        "Content-Type: text/event-stream\r\n",
        "Transfer-Encoding: chunked\r\n",
        "Content-Length: 17\r\n",
        "Content-Length: 18\r\n",
        "Connection: close\r\n",
        "Server: uvicorn\r\n",
        "X-Big: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        "Bad Header\r\n",
        "date: Mon, 30 Nov 2026 04:00:00 GMT\n",
    ]);
    (
        prop::sample::select(vec![
            "",
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
        ]),
        prop::sample::select(vec![
            "HTTP/1.1 200 OK\r\n",
            "HTTP/1.1 400 Bad Request\r\n",
            "HTTP/1.0 204 No Content\r\n",
            "HTTP/1.1 200 OK\n",
            "HTP/1.1 200\r\n",
        ]),
        prop::collection::vec(line, 0..10),
        prop::sample::select(vec!["\r\n", "\n", ""]),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(interim, status, lines, blank, body)| {
            let mut v = format!("{interim}{status}{}{blank}", lines.concat()).into_bytes();
            v.extend_from_slice(&body);
            v
        })
}

proptest! {
    #[test]
    fn head_split_invariant(input in head_input(), sizes in read_sizes()) {
        let whole = parse_head(&input, &[]);
        prop_assert_eq!(parse_head(&input, &sizes), whole);
    }
}

// ---------------------------------------------------------------------------------------------
// Chunked then SSE, as the read loop runs them: events may span chunks, chunks may hold several.

fn encode_chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < body.len() {
        let n = sizes[k % sizes.len()].min(body.len() - pos);
        k += 1;
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&body[pos..pos + n]);
        out.extend_from_slice(b"\r\n");
        pos += n;
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

fn chunked_then_sse(input: &[u8], reads: &[usize]) -> Vec<Ev> {
    let mut dec = ChunkedDecoder::new();
    let mut sse = SseParser::new(1 << 20);
    let (mut raw, mut body) = (BytesMut::new(), BytesMut::new());
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < input.len() {
        let n = reads[k % reads.len()].max(1).min(input.len() - pos);
        k += 1;
        raw.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        while let Some(Chunk::Data(d)) = dec.decode(&mut raw).unwrap() {
            body.extend_from_slice(&d);
            while let Some(e) = sse.next_event(&mut body).unwrap() {
                out.push(Ev {
                    data: e.data.to_vec(),
                    event: e.event.map(|b| b.to_vec()),
                    id: e.id.map(|b| b.to_vec()),
                    retry: e.retry,
                });
            }
        }
    }
    assert!(dec.is_done());
    out
}

proptest! {
    #[test]
    fn sse_over_chunked_matches_naive(
        stream in sse_input(),
        chunk_sizes in prop::collection::vec(1usize..400, 1..8),
        reads in read_sizes(),
    ) {
        let input = encode_chunked(&stream, &chunk_sizes);
        prop_assert_eq!(chunked_then_sse(&input, &reads), naive_sse(&stream, 1 << 20).0);
    }
}

// ---------------------------------------------------------------------------------------------
// One byte per read stays linear: with a rescan these would take minutes, not milliseconds.

#[test]
fn byte_at_a_time_is_linear() {
    let mut line = b"data: ".to_vec();
    line.extend(std::iter::repeat_n(b'x', 512 * 1024));
    line.extend_from_slice(b"\r\n\r\n");
    let mut p = SseParser::new(1 << 20);
    let mut buf = BytesMut::new();
    let mut got = None;
    for &b in &line {
        buf.extend_from_slice(&[b]);
        if let Some(e) = p.next_event(&mut buf).unwrap() {
            got = Some(e.data.len());
        }
    }
    assert_eq!(got, Some(512 * 1024));

    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..2000 {
        head.extend_from_slice(format!("X-Filler-{i}: abcdefghijklmnopqrstuvwxyz\r\n").as_bytes());
    }
    head.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    // More fields than httparse takes: the head is found in linear time, then rejected.
    let mut p = HeadParser::new(1 << 20);
    let mut buf = BytesMut::new();
    let mut result = Ok(None);
    for &b in &head {
        buf.extend_from_slice(&[b]);
        result = p.parse(&mut buf, "GET");
        if !matches!(result, Ok(None)) {
            break;
        }
    }
    assert_eq!(
        result.map(|h| h.map(|h| h.status)),
        Err(llmspeed::proto::http1::HeadError::TooManyHeaders)
    );
}
