//! Whole-file downloads (the Hugging Face hub's tokenizer and dataset files, `workload::hub`):
//! one blocking `GET` over plain TCP or rustls, redirects followed, the body streamed into a
//! writer.
//!
//! Not a measurement path: nothing here is stamped, and it blocks its thread, so it runs while a
//! command sets up, never beside the benchmark's read loop. It reuses the sans-IO parsers of
//! `proto` (request head, response head, body framing) and the client's rustls configuration
//! (ring, the bundled webpki roots).
//!
//! A bearer token goes to the host the download started at only: the hub redirects file
//! requests to a CDN whose signed URL must not see it.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::BytesMut;
use rustls::pki_types::ServerName;

use super::config::ClientConfig;
use super::target::{Scheme, Target};
use super::tls::tls_config;
use crate::proto::body::{BodyChunk, BodyDecoder};
use crate::proto::http1::{encode_request, HeadParser, RequestHead};

/// Most redirects followed before giving up (the hub uses one).
pub const MAX_REDIRECTS: usize = 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence while the head or the body arrives.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_HEAD_BYTES: usize = 64 << 10;
const READ_CHUNK: usize = 64 << 10;

/// What a finished download was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The headers of the first answer (the hub's own, before any redirect): the hub puts the
    /// file's revision and etag there, and the CDN's answer lacks them.
    pub first_headers: Vec<(String, String)>,
    /// The URL the body came from, after redirects.
    pub final_url: String,
    /// Bytes written.
    pub bytes: u64,
}

impl Fetched {
    /// A header of the first answer, by case-insensitive name.
    pub fn first_header(&self, name: &str) -> Option<&str> {
        self.first_headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a download failed. One line each, naming the URL.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url} is not an http:// or https:// URL ({reason})")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {authority} for {url}: {message}")]
    Connect {
        url: String,
        authority: String,
        message: String,
    },
    #[error("{url} answered {status} {reason}")]
    Status {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("{url} redirected more than {MAX_REDIRECTS} times")]
    TooManyRedirects { url: String },
    #[error("{url}: {message}")]
    Transfer { url: String, message: String },
    #[error("cannot write what {url} sent: {err}")]
    Write { url: String, err: std::io::Error },
}

/// Downloads `url` into `dest`, following redirects; `bearer` is sent as
/// `Authorization: Bearer` to `url`'s own host only.
pub fn fetch(url: &str, bearer: Option<&str>, dest: &mut dyn Write) -> Result<Fetched, FetchError> {
    fetch_from(url, bearer, 0, dest).map(|(f, _)| f)
}

/// [`fetch`] resuming at byte `from` (`Range: bytes={from}-` when above 0, as
/// `huggingface_hub` resumes a `.incomplete` file): `true` with the answer when the server sent
/// the rest (206), `false` when it sent the whole file (200), which `dest` then receives from
/// its first byte.
pub fn fetch_from(
    url: &str,
    bearer: Option<&str>,
    from: u64,
    dest: &mut dyn Write,
) -> Result<(Fetched, bool), FetchError> {
    let origin = target_of(url)?;
    let range = (from > 0).then(|| format!("bytes={from}-"));
    let mut current = url.to_string();
    let mut first_headers = None;
    for _ in 0..=MAX_REDIRECTS {
        let target = target_of(&current)?;
        let token = bearer.filter(|_| same_origin(&target, &origin));
        let mut conn = open(&target, &current)?;
        send(
            &mut *conn,
            &target,
            &path_and_query(&current),
            token,
            range.as_deref(),
            &current,
        )?;
        let (head, mut buf) = read_head(&mut *conn, &current)?;
        let first = first_headers.get_or_insert_with(|| head.headers.clone());
        match head.status {
            200..=299 => {
                let partial = head.status == 206;
                let bytes = read_body(&mut *conn, head.body, &mut buf, dest, &current)?;
                return Ok((
                    Fetched {
                        first_headers: first.clone(),
                        final_url: current,
                        bytes,
                    },
                    partial,
                ));
            }
            301 | 302 | 303 | 307 | 308 => {
                let Some(loc) = head.header("location") else {
                    return Err(transfer(&current, "a redirect without a Location header"));
                };
                current = join_location(&current, loc);
            }
            status => {
                return Err(FetchError::Status {
                    url: current,
                    status,
                    reason: head.reason.clone(),
                })
            }
        }
    }
    Err(FetchError::TooManyRedirects { url: url.into() })
}

fn transfer(url: &str, message: impl Into<String>) -> FetchError {
    FetchError::Transfer {
        url: url.to_string(),
        message: message.into(),
    }
}

fn target_of(url: &str) -> Result<Target, FetchError> {
    Target::parse(url).map_err(|e| FetchError::BadUrl {
        url: url.to_string(),
        reason: e.reason.to_string(),
    })
}

fn same_origin(a: &Target, b: &Target) -> bool {
    a.scheme == b.scheme && a.host.eq_ignore_ascii_case(&b.host) && a.port == b.port
}

/// The request target of an absolute URL: everything from the first `/` after the authority,
/// query included, fragment dropped; `/` when there is no path.
pub fn path_and_query(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split('#').next().unwrap_or("");
    match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => format!("/{}", &rest[i..]),
        Some(i) => rest[i..].to_string(),
        None => "/".to_string(),
    }
}

/// Where a `Location` header points, seen from `base`: absolute URLs as they are, `//host/..`
/// with `base`'s scheme, `/path` on `base`'s origin, anything else beside `base`'s path.
pub fn join_location(base: &str, loc: &str) -> String {
    let loc = loc.trim();
    let lower = loc.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return loc.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(l) = loc.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let origin = format!("{scheme}://{}", &rest[..auth_end]);
    if loc.starts_with('/') {
        return format!("{origin}{loc}");
    }
    let path = path_and_query(base);
    let path = path.split('?').next().unwrap_or("/");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{origin}{dir}{loc}")
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn open(target: &Target, url: &str) -> Result<Box<dyn ReadWrite>, FetchError> {
    let authority = target.authority();
    let connect_err = |message: String| FetchError::Connect {
        url: url.to_string(),
        authority: authority.clone(),
        message,
    };
    let addrs = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| connect_err(format!("cannot resolve host {:?}: {e}", target.host)))?;
    let mut last = None;
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        connect_err(last.map_or_else(|| "no address".to_string(), |e| e.to_string()))
    })?;
    tcp.set_read_timeout(Some(READ_TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(READ_TIMEOUT)))
        .map_err(|e| connect_err(e.to_string()))?;
    if target.scheme == Scheme::Http {
        return Ok(Box::new(tcp));
    }
    let cfg = tls_config(&ClientConfig::new(target.clone())).map_err(|e| connect_err(e.message))?;
    let name = ServerName::try_from(target.host.clone())
        .map_err(|_| connect_err(format!("{:?} is not a valid TLS name", target.host)))?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| connect_err(e.to_string()))?;
    Ok(Box::new(rustls::StreamOwned::new(conn, tcp)))
}

fn send(
    conn: &mut dyn ReadWrite,
    target: &Target,
    path: &str,
    bearer: Option<&str>,
    range: Option<&str>,
    url: &str,
) -> Result<(), FetchError> {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let agent = concat!("llmspeed/", env!("CARGO_PKG_VERSION"));
    let mut headers = vec![("User-Agent", agent), ("Accept-Encoding", "identity")];
    if let Some(a) = auth.as_deref() {
        headers.push(("Authorization", a));
    }
    if let Some(r) = range {
        headers.push(("Range", r));
    }
    let head = RequestHead {
        method: "GET",
        path,
        host: &target.host_header,
        headers: &headers,
        content_type: None,
        keep_alive: false,
    };
    let mut out = BytesMut::new();
    encode_request(&mut out, &head, &[]);
    conn.write_all(&out)
        .and_then(|()| conn.flush())
        .map_err(|e| transfer(url, format!("cannot send the request: {e}")))
}

fn read_more(conn: &mut dyn ReadWrite, buf: &mut BytesMut, url: &str) -> Result<usize, FetchError> {
    let mut chunk = [0u8; READ_CHUNK];
    let n = conn
        .read(&mut chunk)
        .map_err(|e| transfer(url, format!("read failed: {e}")))?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

fn read_head(
    conn: &mut dyn ReadWrite,
    url: &str,
) -> Result<(crate::proto::http1::ResponseHead, BytesMut), FetchError> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut parser = HeadParser::new(MAX_HEAD_BYTES);
    loop {
        match parser.parse(&mut buf, "GET") {
            Ok(Some(h)) => return Ok((h, buf)),
            Ok(None) => {}
            Err(e) => return Err(transfer(url, format!("invalid response head: {e}"))),
        }
        if read_more(conn, &mut buf, url)? == 0 {
            return Err(transfer(url, "connection closed before the response head"));
        }
    }
}

fn read_body(
    conn: &mut dyn ReadWrite,
    kind: crate::proto::http1::BodyKind,
    buf: &mut BytesMut,
    dest: &mut dyn Write,
    url: &str,
) -> Result<u64, FetchError> {
    let mut dec = BodyDecoder::new(kind);
    let mut written = 0u64;
    let mut eof = false;
    loop {
        let next = if eof && buf.is_empty() {
            dec.eof()
        } else {
            dec.decode(buf)
        };
        match next {
            Ok(Some(BodyChunk::Data(d))) => {
                dest.write_all(&d).map_err(|err| FetchError::Write {
                    url: url.to_string(),
                    err,
                })?;
                written += d.len() as u64;
            }
            Ok(Some(BodyChunk::End)) => return Ok(written),
            Ok(None) if eof => {
                return Err(transfer(
                    url,
                    format!("connection closed after {written} bytes, before the body ended"),
                ))
            }
            Ok(None) => eof = read_more(conn, buf, url)? == 0,
            Err(e) => return Err(transfer(url, format!("broken response body: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_targets_keep_the_query_and_drop_the_fragment() {
        for (url, want) in [
            ("https://h/a/b?x=1&y=2#f", "/a/b?x=1&y=2"),
            ("http://h:8/", "/"),
            ("http://h:8", "/"),
            ("http://h?q", "/?q"),
            ("https://cdn.example/f%20x?sig=a/b", "/f%20x?sig=a/b"),
        ] {
            assert_eq!(path_and_query(url), want, "{url}");
        }
    }

    #[test]
    fn locations_are_joined_against_the_request_url() {
        let base = "http://127.0.0.1:9/org/m/resolve/main/tokenizer.json?x=1";
        for (loc, want) in [
            ("https://cdn.test/blob?sig=1", "https://cdn.test/blob?sig=1"),
            ("//cdn.test/b", "http://cdn.test/b"),
            (
                "/api/resolve-cache/abc",
                "http://127.0.0.1:9/api/resolve-cache/abc",
            ),
            (
                "other.json",
                "http://127.0.0.1:9/org/m/resolve/main/other.json",
            ),
        ] {
            assert_eq!(join_location(base, loc), want, "{loc}");
        }
    }

    #[test]
    fn the_token_stays_with_its_origin() {
        let a = Target::parse("http://127.0.0.1:9/x").unwrap();
        assert!(same_origin(
            &a,
            &Target::parse("http://127.0.0.1:9/y?z").unwrap()
        ));
        assert!(!same_origin(
            &a,
            &Target::parse("http://127.0.0.1:10/x").unwrap()
        ));
        assert!(!same_origin(
            &a,
            &Target::parse("https://127.0.0.1:9/x").unwrap()
        ));
        assert!(!same_origin(
            &a,
            &Target::parse("http://localhost:9/x").unwrap()
        ));
    }
}
