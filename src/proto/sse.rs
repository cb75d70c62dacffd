//! Server-sent events framing (WHATWG HTML §9.2 "event stream interpretation"), sans-IO.
//!
//! Owns: cutting a decoded response body into [`Event`]s. Lines end in CRLF, LF or CR; lines
//! starting with `:` are comments; `field:value` strips exactly one leading space; `data` lines
//! are joined with LF; `id` holding NUL is ignored; `retry` must be all digits; a BOM is
//! stripped only at the very start; a blank line dispatches; an event with no `data` is dropped.
//!
//! Must never: rescan a byte (a scan offset survives `Ok(None)`), allocate per event in steady
//! state (a single-line event's `data` is a zero-copy slice of the caller's buffer; only
//! multi-line data is joined into a fresh allocation), or let one event grow the buffer without
//! bound ([`SseError::EventTooLarge`]).
//!
//! A CR at the end of a read ends its line at once and the parser remembers to swallow a LF
//! that may follow in the next read. The alternative, holding the line until the next byte,
//! gives the same events but would stamp every event of a CR-only stream one gap late.

use bytes::{Buf, Bytes, BytesMut};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched event. Slices share the connection buffer's allocation; drop them promptly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `data` lines joined by LF (without the trailing LF).
    pub data: Bytes,
    /// The last `event` field of this event's block, if any.
    pub event: Option<Bytes>,
    /// The last valid `id` field of this event's block, if any. Carrying the last event id over
    /// to later events (for reconnection) is the caller's business; we never reconnect.
    pub id: Option<Bytes>,
    /// The last valid `retry` field of this event's block, in milliseconds.
    pub retry: Option<u64>,
}

/// Why a stream could not be framed. After an error the parser must not be reused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("server-sent event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
}

/// Resumable SSE parser over a growing buffer.
///
/// Bytes of the event being assembled stay at the front of the buffer until it is dispatched,
/// so that its data can be handed out as a slice; everything before the current event has been
/// split off. Offsets below are relative to the buffer's start.
#[derive(Debug)]
pub struct SseParser {
    max_event_bytes: usize,
    /// Nothing examined yet: a BOM may still have to be stripped.
    at_stream_start: bool,
    /// The previous line ended in CR at the end of the buffer: a LF next is its second half.
    skip_lf: bool,
    /// Start of the line being scanned.
    line_start: usize,
    /// Where the search for a line end resumes; bytes in `line_start..scan` hold no CR or LF.
    scan: usize,
    /// Value range of the first `data` line.
    data: Option<(usize, usize)>,
    /// Set once a second `data` line arrives: the joined data so far.
    joined: Option<Vec<u8>>,
    event: Option<(usize, usize)>,
    id: Option<(usize, usize)>,
    retry: Option<u64>,
}

impl SseParser {
    /// `max_event_bytes`: how many bytes one event may span, from its first field line to the
    /// end of its last line (comment lines before the first field do not count).
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            at_stream_start: true,
            skip_lf: false,
            line_start: 0,
            scan: 0,
            data: None,
            joined: None,
            event: None,
            id: None,
            retry: None,
        }
    }

    /// End of stream: an unterminated event is discarded and the parser is ready for a new
    /// stream. The caller drops whatever is left in its buffer.
    pub fn finish(&mut self) {
        *self = Self::new(self.max_event_bytes);
    }

    /// The next complete event. `Ok(None)`: feed more bytes into `buf` (appending) and call
    /// again; bytes of dispatched events, comments and dropped events are consumed from `buf`.
    /// Between calls the caller may only append to `buf`: the parser keeps offsets into it.
    pub fn next_event(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, SseError> {
        debug_assert!(self.scan <= buf.len(), "SSE buffer shrank between calls");
        if self.at_stream_start {
            let n = buf.len().min(BOM.len());
            if buf[..n] != BOM[..n] {
                self.at_stream_start = false;
            } else if n < BOM.len() {
                return Ok(None);
            } else {
                buf.advance(BOM.len());
                self.at_stream_start = false;
            }
        }
        loop {
            if self.skip_lf {
                let Some(&b) = buf.get(self.scan) else {
                    return Ok(None);
                };
                self.skip_lf = false;
                if b == b'\n' {
                    self.scan += 1;
                    self.line_start = self.scan;
                    self.drop_if_fresh(buf);
                }
            }
            let Some(i) = memchr::memchr2(b'\n', b'\r', &buf[self.scan..]) else {
                self.scan = buf.len();
                if buf.len() > self.max_event_bytes {
                    return Err(self.too_large());
                }
                return Ok(None);
            };
            let end = self.scan + i;
            if end > self.max_event_bytes {
                return Err(self.too_large());
            }
            let next = if buf[end] == b'\n' {
                end + 1
            } else if end + 1 == buf.len() {
                self.skip_lf = true;
                end + 1
            } else if buf[end + 1] == b'\n' {
                end + 2
            } else {
                end + 1
            };
            let start = self.line_start;
            self.line_start = next;
            self.scan = next;
            if start == end {
                if let Some(ev) = self.dispatch(buf, next) {
                    return Ok(Some(ev));
                }
            } else {
                self.field(buf, start, end);
                self.drop_if_fresh(buf);
            }
        }
    }

    fn too_large(&self) -> SseError {
        SseError::EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    /// Before an event's first field, comment and unknown lines are consumed at once, so
    /// keep-alive pings never accumulate and never count against the event size.
    fn drop_if_fresh(&mut self, buf: &mut BytesMut) {
        if self.data.is_none()
            && self.joined.is_none()
            && self.event.is_none()
            && self.id.is_none()
            && self.retry.is_none()
        {
            buf.advance(self.line_start);
            self.scan -= self.line_start;
            self.line_start = 0;
        }
    }

    fn field(&mut self, buf: &[u8], start: usize, end: usize) {
        let line = &buf[start..end];
        if line[0] == b':' {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let v = if line.get(c + 1) == Some(&b' ') {
                    c + 2
                } else {
                    c + 1
                };
                (&line[..c], (start + v, end))
            }
            None => (line, (end, end)),
        };
        match name {
            b"data" => match (&mut self.joined, self.data) {
                (Some(joined), _) => {
                    joined.push(b'\n');
                    joined.extend_from_slice(&buf[value.0..value.1]);
                }
                (None, Some((a, b))) => {
                    let mut joined = Vec::with_capacity(b - a + 1 + value.1 - value.0);
                    joined.extend_from_slice(&buf[a..b]);
                    joined.push(b'\n');
                    joined.extend_from_slice(&buf[value.0..value.1]);
                    self.joined = Some(joined);
                }
                (None, None) => self.data = Some(value),
            },
            b"event" => self.event = Some(value),
            b"id" if memchr::memchr(0, &buf[value.0..value.1]).is_none() => self.id = Some(value),
            b"retry" => {
                if let Some(ms) = parse_digits(&buf[value.0..value.1]) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    /// A blank line ended at `end`: split the event's bytes off `buf` and reset.
    fn dispatch(&mut self, buf: &mut BytesMut, end: usize) -> Option<Event> {
        let data = self.data.take();
        let joined = self.joined.take();
        let event = self.event.take();
        let id = self.id.take();
        let retry = self.retry.take();
        self.line_start = 0;
        self.scan = 0;
        if data.is_none() {
            buf.advance(end);
            return None;
        }
        let raw = buf.split_to(end).freeze();
        let slice = |r: (usize, usize)| raw.slice(r.0..r.1);
        Some(Event {
            data: match joined {
                Some(j) => Bytes::from(j),
                None => data.map(slice).unwrap_or_default(),
            },
            event: event.map(slice),
            id: id.map(slice),
            retry,
        })
    }
}

/// `retry` takes ASCII digits only; anything else (or a value past u64) is ignored.
fn parse_digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add((b - b'0') as u64)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact view of an event for table tests: `data` plus `|event=..|id=..|retry=..`.
    fn show(ev: &Event) -> String {
        let mut s = String::from_utf8_lossy(&ev.data).into_owned();
        if let Some(e) = &ev.event {
            s += &format!("|event={}", String::from_utf8_lossy(e));
        }
        if let Some(i) = &ev.id {
            s += &format!("|id={}", String::from_utf8_lossy(i));
        }
        if let Some(r) = ev.retry {
            s += &format!("|retry={r}");
        }
        s
    }

    /// Feeds `input` in reads of the given sizes (then the rest); returns events and error.
    fn run(input: &[u8], reads: &[usize], max: usize) -> (Vec<String>, Option<SseError>) {
        let mut p = SseParser::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut reads = reads.iter().copied().chain(std::iter::once(usize::MAX));
        while pos < input.len() {
            let n = reads.next().unwrap_or(usize::MAX).max(1);
            let end = input.len().min(pos.saturating_add(n));
            buf.extend_from_slice(&input[pos..end]);
            pos = end;
            loop {
                match p.next_event(&mut buf) {
                    Ok(Some(ev)) => out.push(show(&ev)),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        p.finish();
        (out, None)
    }

    /// The whole buffer, one byte per read, and two bytes per read all give `expected`.
    fn check(input: impl AsRef<[u8]>, expected: &[&str]) {
        let input = input.as_ref();
        for reads in [vec![], vec![1; input.len()], vec![2; input.len()]] {
            let (got, err) = run(input, &reads, 1 << 16);
            assert_eq!(err, None);
            assert_eq!(
                got,
                expected,
                "input {:?}, reads {reads:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn table() {
        // vLLM: `data: ` with one space
        check(
            "data: {\"a\":1}\n\ndata: [DONE]\n\n",
            &["{\"a\":1}", "[DONE]"],
        );
        // TGI: no space, keep-alive comments
        check(":\n\ndata:{\"t\":1}\n\n:\n\n", &["{\"t\":1}"]);
        // exactly one space is stripped
        check("data:  x\n\n", &[" x"]);
        check("data:\n\n", &[""]);
        check("data\n\n", &[""]);
        // CRLF and CR line endings, mixed
        check("data: a\r\n\r\ndata: b\r\rdata: c\n\r\n", &["a", "b", "c"]);
        check("data: a\r\n\rdata: b\r\n\n", &["a", "b"]);
        // multi-line data is joined with LF; the trailing LF is removed
        check("data: a\ndata: b\ndata\ndata: c\n\n", &["a\nb\n\nc"]);
        check("data: a\r\ndata: b\r\n\r\n", &["a\nb"]);
        // comments anywhere, unknown fields ignored
        check(": hi\ndata: a\n: mid\nfoo: bar\ndata: b\n\n", &["a\nb"]);
        // an event with no data is dropped
        check("event: x\n\nid: 1\n\n\n\ndata: y\n\n", &["y"]);
        // event / id / retry
        check(
            "event: delta\nid: 7\nretry: 1500\ndata: d\n\n",
            &["d|event=delta|id=7|retry=1500"],
        );
        check("id: a\0b\ndata: d\n\n", &["d"]);
        check("retry: 12a\ndata: d\n\nretry:\ndata: e\n\n", &["d", "e"]);
        check("retry: 99999999999999999999999\ndata: d\n\n", &["d"]);
        check("data: d\nevent: a\nevent: b\n\n", &["d|event=b"]);
        // the BOM is stripped at stream start only
        check("\u{feff}data: a\n\n\u{feff}data: b\n\n", &["a"]);
        check("\u{feff}\u{feff}data: a\n\n", &[]);
        // an unterminated event at the end is discarded
        check("data: a\n\ndata: b\n", &["a"]);
        check("data: a", &[]);
        // [DONE] is not JSON, and error events are just data here
        check(
            "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n",
            &["{\"error\":{\"message\":\"boom\"}}", "[DONE]"],
        );
        // split multibyte UTF-8 is just bytes
        check("data: h\u{e9}\u{1f600}\n\n", &["h\u{e9}\u{1f600}"]);
        // a colon in the value stays
        check("data: a:b\n\n", &["a:b"]);
    }

    #[test]
    fn cr_at_end_of_read_dispatches_now_and_swallows_the_lf() {
        let mut p = SseParser::new(1024);
        let mut buf = BytesMut::from(&b"data: a\r\n\r"[..]);
        let ev = p
            .next_event(&mut buf)
            .unwrap()
            .expect("event complete at the CR");
        assert_eq!(&ev.data[..], b"a");
        buf.extend_from_slice(b"\ndata: b\r");
        assert_eq!(p.next_event(&mut buf), Ok(None));
        buf.extend_from_slice(b"\n\r\n");
        assert_eq!(&p.next_event(&mut buf).unwrap().unwrap().data[..], b"b");
        assert!(buf.is_empty());
    }

    #[test]
    fn single_line_data_is_a_slice_of_the_buffer() {
        let mut p = SseParser::new(1024);
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"data: xyz\n\ndata: q\n");
        let base = buf.as_ptr();
        let ev = p.next_event(&mut buf).unwrap().unwrap();
        assert_eq!(ev.data.as_ptr(), base.wrapping_add(6));
        assert_eq!(&buf[..], b"data: q\n");
    }

    #[test]
    fn event_too_large() {
        let line = format!("data: {}\n\n", "x".repeat(100));
        for reads in [vec![], vec![1; 200], vec![7; 200]] {
            let (got, err) = run(line.as_bytes(), &reads, 64);
            assert_eq!(got, Vec::<String>::new());
            assert_eq!(err, Some(SseError::EventTooLarge { limit: 64 }));
            let (got, err) = run(line.as_bytes(), &reads, 200);
            assert_eq!((got.len(), err), (1, None));
        }
        assert_eq!(
            SseError::EventTooLarge { limit: 64 }.to_string(),
            "server-sent event larger than 64 bytes"
        );
        // keep-alive comments before an event never count against it
        let pings = ":\n".repeat(100) + "data: a\n\n";
        assert_eq!(run(pings.as_bytes(), &[], 16), (vec!["a".into()], None));
    }

    #[test]
    fn finish_resets_for_a_new_stream() {
        let mut p = SseParser::new(1024);
        let mut buf = BytesMut::from(&b"data: partial"[..]);
        assert_eq!(p.next_event(&mut buf), Ok(None));
        p.finish();
        let mut buf = BytesMut::from(&b"\xEF\xBB\xBFdata: b\n\n"[..]);
        assert_eq!(&p.next_event(&mut buf).unwrap().unwrap().data[..], b"b");
    }
}
