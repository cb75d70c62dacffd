//! HTTP/1.1 request encoding and response-head parsing (RFC 9112), sans-IO.
//!
//! Owns: writing a request head and body into a buffer, finding the end of a response head,
//! parsing it (httparse does the field syntax), skipping 1xx interim responses, and deciding how
//! the body is framed (§6.3). Body bytes are [`crate::proto::body`]'s business.
//!
//! Must never: rescan a partial head (the search for the blank line resumes where it stopped,
//! so a head arriving one byte at a time stays O(n)), accept a head over its size limit, or
//! send `Accept-Encoding` (we time bytes as the server produced them, uncompressed).

use bytes::{Buf, BytesMut};

/// Most response header fields we accept; more is treated as a malformed head.
pub const MAX_HEADERS: usize = 128;

/// What to send. `host` is the Host value: "host" or "host:port".
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub host: &'a str,
    /// Extra fields (API key, user headers). Check user-supplied ones with [`validate_header`].
    pub headers: &'a [(&'a str, &'a str)],
    pub content_type: Option<&'a str>,
    /// `false` adds `Connection: close`.
    pub keep_alive: bool,
}

/// Appends the request head and `body` to `out`. Content-Length is written when the body is
/// non-empty or the method is POST (some servers answer 411 to a POST without it).
pub fn encode_request(out: &mut BytesMut, head: &RequestHead<'_>, body: &[u8]) {
    let extra: usize = head
        .headers
        .iter()
        .map(|(n, v)| n.len() + v.len() + 4)
        .sum();
    out.reserve(head.method.len() + head.path.len() + head.host.len() + extra + 96 + body.len());
    out.extend_from_slice(head.method.as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(head.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(head.host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in head.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(ct) = head.content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || head.method.eq_ignore_ascii_case("POST") {
        out.extend_from_slice(b"Content-Length: ");
        write_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if !head.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

fn write_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Rejects a user-supplied header that would corrupt the request (header injection, bad name).
pub fn validate_header(name: &str, value: &str) -> Result<(), HeadError> {
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let value_ok = value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f));
    if name_ok && value_ok {
        Ok(())
    } else {
        Err(HeadError::InvalidRequestHeader {
            name: name.to_string(),
        })
    }
}

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body: HEAD, 204, 304.
    Empty,
    Length(u64),
    Chunked,
    /// The body runs until the server closes the connection.
    CloseDelimited,
}

/// A parsed response head. Allocated once per response, never per token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: String,
    pub body: BodyKind,
    /// Whether the connection may carry another request after this body.
    pub keep_alive: bool,
    pub content_type: Option<String>,
    /// All fields in order, names as sent. Non-UTF-8 bytes are replaced.
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    /// The first field named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("response head larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("malformed response head: {0}")]
    Malformed(String),
    #[error("response has more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("invalid Content-Length {0:?}")]
    InvalidContentLength(String),
    #[error("conflicting Content-Length values")]
    ConflictingContentLength,
    #[error("unexpected 101 Switching Protocols")]
    SwitchingProtocols,
    #[error("invalid request header {name:?}: names are tokens, values hold no CR, LF or NUL")]
    InvalidRequestHeader { name: String },
}

/// Resumable response-head parser for one connection.
#[derive(Debug, Clone)]
pub struct HeadParser {
    max_head_bytes: usize,
    /// Bytes of `buf` already searched for the blank line ending the head.
    scan: usize,
}

impl HeadParser {
    /// `max_head_bytes` bounds one head (each 1xx interim head counts separately).
    pub fn new(max_head_bytes: usize) -> Self {
        Self {
            max_head_bytes,
            scan: 0,
        }
    }

    /// Parses the final response head for a request sent with `request_method`, consuming it
    /// (and any 1xx heads before it) from `buf`. `Ok(None)`: append more bytes and call again.
    pub fn parse(
        &mut self,
        buf: &mut BytesMut,
        request_method: &str,
    ) -> Result<Option<ResponseHead>, HeadError> {
        loop {
            let Some(end) = self.find_end(buf) else {
                if buf.len() > self.max_head_bytes {
                    return Err(HeadError::TooLarge {
                        limit: self.max_head_bytes,
                    });
                }
                return Ok(None);
            };
            self.scan = 0;
            if end > self.max_head_bytes {
                return Err(HeadError::TooLarge {
                    limit: self.max_head_bytes,
                });
            }
            let head = parse_head(&buf[..end], request_method)?;
            buf.advance(end);
            if let Some(head) = head {
                return Ok(Some(head));
            }
        }
    }

    /// Offset just past the blank line ending the head (CRLF CRLF, or bare LFs), resuming the
    /// search where the last call stopped. Looks back at most two bytes before `scan`.
    fn find_end(&mut self, buf: &[u8]) -> Option<usize> {
        // Clamped so that a caller who cleared the buffer gets a fresh search, not a panic.
        let mut from = self.scan.min(buf.len());
        while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
            let lf = from + i;
            let before = &buf[..lf];
            if before.ends_with(b"\n") || before.ends_with(b"\n\r") {
                return Some(lf + 1);
            }
            from = lf + 1;
        }
        self.scan = buf.len();
        None
    }
}

/// Parses one complete head. `Ok(None)`: it was a 1xx interim response, skip it.
fn parse_head(bytes: &[u8], method: &str) -> Result<Option<ResponseHead>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut fields);
    match res.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(HeadError::Malformed("incomplete head".into()));
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    }
    let status = res.code.unwrap_or(0);
    if status == 101 {
        return Err(HeadError::SwitchingProtocols);
    }
    if (100..200).contains(&status) {
        return Ok(None);
    }
    let http10 = res.version == Some(0);

    let mut chunked = false;
    let mut has_te = false;
    let mut length: Option<u64> = None;
    let mut close = http10;
    let mut content_type = None;
    let mut headers = Vec::with_capacity(res.headers.len());
    for h in res.headers.iter() {
        let value = String::from_utf8_lossy(h.value).trim().to_string();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            has_te = true;
            // Only the last coding decides; `gzip, chunked` is still chunked framing.
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            for part in value.split(',') {
                let part = part.trim();
                let n = parse_length(part)
                    .ok_or_else(|| HeadError::InvalidContentLength(part.to_string()))?;
                if length.is_some_and(|l| l != n) {
                    return Err(HeadError::ConflictingContentLength);
                }
                length = Some(n);
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let token = token.trim();
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    close = false;
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.clone());
        }
        headers.push((h.name.to_string(), value));
    }

    let body = if method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304 {
        BodyKind::Empty
    } else if has_te {
        if chunked {
            BodyKind::Chunked
        } else {
            BodyKind::CloseDelimited
        }
    } else if let Some(n) = length {
        BodyKind::Length(n)
    } else {
        BodyKind::CloseDelimited
    };
    Ok(Some(ResponseHead {
        status,
        reason: res.reason.unwrap_or("").to_string(),
        keep_alive: !close && body != BodyKind::CloseDelimited,
        body,
        content_type,
        headers,
    }))
}

fn parse_length(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(head: RequestHead<'_>, body: &[u8]) -> String {
        let mut out = BytesMut::new();
        encode_request(&mut out, &head, body);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn encodes_requests() {
        let post = RequestHead {
            method: "POST",
            path: "/v1/completions",
            host: "127.0.0.1:8000",
            headers: &[("Authorization", "Bearer k")],
            content_type: Some("application/json"),
            keep_alive: true,
        };
        assert_eq!(
            enc(post, b"{}"),
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAuthorization: Bearer k\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        assert!(enc(post, b"").contains("Content-Length: 0\r\n"));
        let get = RequestHead {
            method: "GET",
            path: "/metrics",
            host: "h",
            headers: &[],
            content_type: None,
            keep_alive: false,
        };
        assert_eq!(
            enc(get, b""),
            "GET /metrics HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        );
        assert!(!enc(post, b"x")
            .to_ascii_lowercase()
            .contains("accept-encoding"));
    }

    #[test]
    fn validates_user_headers() {
        assert_eq!(validate_header("X-Api-Key", "a b\tc"), Ok(()));
        for (n, v) in [
            ("X", "a\r\nEvil: 1"),
            ("", "v"),
            ("Bad Name", "v"),
            ("X", "\0"),
        ] {
            assert!(validate_header(n, v).is_err(), "{n:?}: {v:?}");
        }
    }

    /// Parses `input` whole and one byte at a time; both must give `expected` (the head's
    /// status, body kind, keep-alive, content type, or the error) and leave `rest` in the buffer.
    fn check(
        input: &str,
        method: &str,
        expected: Result<(u16, BodyKind, bool, Option<&str>), HeadError>,
        rest: &str,
    ) {
        for one_byte in [false, true] {
            let mut p = HeadParser::new(1024);
            let mut buf = BytesMut::new();
            let mut got = Ok(None);
            let chunks: Vec<&[u8]> = if one_byte {
                input.as_bytes().chunks(1).collect()
            } else {
                vec![input.as_bytes()]
            };
            for c in chunks {
                buf.extend_from_slice(c);
                got = p.parse(&mut buf, method);
                if !matches!(got, Ok(None)) {
                    break;
                }
            }
            let got = got.map(|h| {
                let h = h.expect("head incomplete");
                (h.status, h.body, h.keep_alive, h.content_type)
            });
            let want = expected
                .clone()
                .map(|(s, b, k, c)| (s, b, k, c.map(String::from)));
            assert_eq!(got, want, "{input:?} one_byte={one_byte}");
            if got.is_ok() && !one_byte {
                assert_eq!(&buf[..], rest.as_bytes(), "{input:?}");
            }
        }
    }

    #[test]
    fn table() {
        use BodyKind::*;
        let sse = Some("text/event-stream; charset=utf-8");
        check(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
             transfer-encoding: chunked\r\n\r\n5\r\n",
            "POST",
            Ok((200, Chunked, true, sse)),
            "5\r\n",
        );
        // 400 with a JSON body and Content-Length
        check(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\
             Content-Length: 17\r\n\r\n{\"error\":\"long\"}",
            "POST",
            Ok((400, Length(17), true, Some("application/json"))),
            "{\"error\":\"long\"}",
        );
        // 100-continue (and other 1xx) skipped
        check(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "POST",
            Ok((200, Length(2), true, None)),
            "ok",
        );
        // chunked wins over Content-Length
        check(
            "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "GET",
            Ok((200, Chunked, true, None)),
            "",
        );
        // non-chunked transfer coding, or no length at all: read to close
        check(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz",
            "GET",
            Ok((200, CloseDelimited, false, None)),
            "zz",
        );
        check(
            "HTTP/1.1 200 OK\r\n\r\n",
            "GET",
            Ok((200, CloseDelimited, false, None)),
            "",
        );
        // HEAD, 204, 304 have no body whatever the fields say
        check(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            "HEAD",
            Ok((200, Empty, true, None)),
            "",
        );
        check(
            "HTTP/1.1 204 No Content\r\n\r\n",
            "GET",
            Ok((204, Empty, true, None)),
            "",
        );
        check(
            "HTTP/1.1 304 Not Modified\r\n\r\n",
            "GET",
            Ok((304, Empty, true, None)),
            "",
        );
        // repeated equal Content-Length is fine, conflicting is not
        check(
            "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc",
            "GET",
            Ok((200, Length(3), true, None)),
            "abc",
        );
        check(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "GET",
            Err(HeadError::ConflictingContentLength),
            "",
        );
        check(
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "GET",
            Err(HeadError::InvalidContentLength("-1".into())),
            "",
        );
        // keep-alive rules
        check(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "GET",
            Ok((200, Length(0), false, None)),
            "",
        );
        check(
            "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
            "GET",
            Ok((200, Length(0), false, None)),
            "",
        );
        check(
            "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
            "GET",
            Ok((200, Length(0), true, None)),
            "",
        );
        // bare LF line endings
        check(
            "HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
            "GET",
            Ok((200, Length(1), true, None)),
            "x",
        );
        // errors
        check(
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "GET",
            Err(HeadError::SwitchingProtocols),
            "",
        );
        check(
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "GET",
            Err(HeadError::Malformed("invalid response status".into())),
            "",
        );
        check(
            "SSH-2.0-OpenSSH\r\n\r\n",
            "GET",
            Err(HeadError::Malformed("invalid HTTP version".into())),
            "",
        );
        let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(1100));
        check(&big, "GET", Err(HeadError::TooLarge { limit: 1024 }), "");
        let big_unterminated = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(1100));
        check(
            &big_unterminated,
            "GET",
            Err(HeadError::TooLarge { limit: 1024 }),
            "",
        );
    }

    #[test]
    fn partial_head_waits_and_keeps_fields() {
        let mut p = HeadParser::new(8192);
        let mut buf = BytesMut::from(&b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n"[..]);
        assert_eq!(p.parse(&mut buf, "POST"), Ok(None));
        buf.extend_from_slice(b"\r");
        assert_eq!(p.parse(&mut buf, "POST"), Ok(None));
        buf.extend_from_slice(b"\n");
        let h = p.parse(&mut buf, "POST").unwrap().unwrap();
        assert_eq!((h.status, h.reason.as_str()), (429, "Too Many Requests"));
        assert_eq!(h.header("retry-after"), Some("1"));
        assert_eq!(h.body, BodyKind::CloseDelimited);
    }
}
