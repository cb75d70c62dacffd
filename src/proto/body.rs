//! One response body, whatever its framing: empty, Content-Length, chunked or close-delimited.
//!
//! Owns: handing out body bytes zero-copy (split off the caller's buffer) and saying when the
//! body ended, including what a peer close means for each framing.
//!
//! Must never: consume bytes past the end of the body (they start the next response on a
//! keep-alive connection) or allocate.

use bytes::{Bytes, BytesMut};

use super::chunked::{Chunk, ChunkedDecoder, ChunkedError};
use super::http1::BodyKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyChunk {
    /// Some body bytes, never empty.
    Data(Bytes),
    /// The body is complete.
    End,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Chunked(#[from] ChunkedError),
    #[error("connection closed mid-body ({missing} of {total} bytes missing)")]
    ClosedMidLength { missing: u64, total: u64 },
    #[error("connection closed mid-body (chunked body not finished)")]
    ClosedMidChunked,
}

#[derive(Debug, Clone)]
enum State {
    Length { remaining: u64, total: u64 },
    Chunked(ChunkedDecoder),
    Close,
    Done,
}

/// Resumable decoder for one response body.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    pub fn new(kind: BodyKind) -> Self {
        let state = match kind {
            BodyKind::Empty | BodyKind::Length(0) => State::Done,
            BodyKind::Length(n) => State::Length {
                remaining: n,
                total: n,
            },
            BodyKind::Chunked => State::Chunked(ChunkedDecoder::new()),
            BodyKind::CloseDelimited => State::Close,
        };
        Self { state }
    }

    /// The next piece of the body. `Ok(None)`: feed more bytes. After `End`, returns `End`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BodyChunk>, BodyError> {
        match &mut self.state {
            State::Done => Ok(Some(BodyChunk::End)),
            State::Length { remaining, .. } => {
                if buf.is_empty() {
                    return Ok(None);
                }
                let n = (*remaining).min(buf.len() as u64);
                *remaining -= n;
                let data = buf.split_to(n as usize).freeze();
                if *remaining == 0 {
                    self.state = State::Done;
                }
                Ok(Some(BodyChunk::Data(data)))
            }
            State::Chunked(dec) => match dec.decode(buf)? {
                Some(Chunk::Data(d)) => Ok(Some(BodyChunk::Data(d))),
                Some(Chunk::End) => {
                    self.state = State::Done;
                    Ok(Some(BodyChunk::End))
                }
                None => Ok(None),
            },
            State::Close => {
                if buf.is_empty() {
                    return Ok(None);
                }
                Ok(Some(BodyChunk::Data(buf.split().freeze())))
            }
        }
    }

    /// The peer closed the connection (call after `decode` returned `Ok(None)`): `End` for a
    /// close-delimited or finished body, an error when the framing promised more.
    pub fn eof(&mut self) -> Result<Option<BodyChunk>, BodyError> {
        match &self.state {
            State::Done => Ok(Some(BodyChunk::End)),
            State::Close => {
                self.state = State::Done;
                Ok(Some(BodyChunk::End))
            }
            State::Length { remaining, total } => Err(BodyError::ClosedMidLength {
                missing: *remaining,
                total: *total,
            }),
            State::Chunked(_) => Err(BodyError::ClosedMidChunked),
        }
    }

    /// True once every byte of the body has been consumed (the next call returns `End`), so a
    /// keep-alive connection can carry the next request.
    pub fn is_done(&self) -> bool {
        match &self.state {
            State::Done => true,
            State::Chunked(dec) => dec.is_done(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` whole and one byte at a time, then signals EOF when `eof`; both must give
    /// `body` and then `end` (`Ok(())` for a clean End) and leave `rest` unconsumed.
    fn check(
        kind: BodyKind,
        input: &str,
        eof: bool,
        body: &str,
        end: Result<(), BodyError>,
        rest: &str,
    ) {
        for one_byte in [false, true] {
            let mut dec = BodyDecoder::new(kind);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut result = None;
            let pieces: Vec<&[u8]> = if one_byte {
                input.as_bytes().chunks(1).collect()
            } else {
                vec![input.as_bytes()]
            };
            'feed: for piece in pieces.into_iter().chain(std::iter::once(&[][..])) {
                buf.extend_from_slice(piece);
                loop {
                    match dec.decode(&mut buf) {
                        Ok(Some(BodyChunk::Data(d))) => got.extend_from_slice(&d),
                        Ok(Some(BodyChunk::End)) => {
                            result = Some(Ok(()));
                            break 'feed;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            result = Some(Err(e));
                            break 'feed;
                        }
                    }
                }
            }
            if result.is_none() && eof {
                result = Some(dec.eof().map(|c| assert_eq!(c, Some(BodyChunk::End))));
            }
            assert_eq!(
                (String::from_utf8_lossy(&got).as_ref(), result),
                (body, Some(end.clone())),
                "{kind:?} {input:?} one_byte={one_byte}"
            );
            if end.is_ok() {
                assert!(dec.is_done());
                if !one_byte {
                    assert_eq!(&buf[..], rest.as_bytes());
                }
            }
        }
    }

    #[test]
    fn table() {
        use BodyKind::*;
        check(Empty, "HTTP/1.1 200", false, "", Ok(()), "HTTP/1.1 200");
        check(Length(0), "x", false, "", Ok(()), "x");
        check(Length(5), "helloHTTP", false, "hello", Ok(()), "HTTP");
        check(
            Length(5),
            "hel",
            true,
            "hel",
            Err(BodyError::ClosedMidLength {
                missing: 2,
                total: 5,
            }),
            "",
        );
        check(
            Chunked,
            "2\r\nok\r\n0\r\n\r\nnext",
            false,
            "ok",
            Ok(()),
            "next",
        );
        check(
            Chunked,
            "2\r\nok\r\n",
            true,
            "ok",
            Err(BodyError::ClosedMidChunked),
            "",
        );
        check(
            Chunked,
            "2\r\nokk",
            false,
            "ok",
            Err(BodyError::Chunked(ChunkedError::MissingCrlf { byte: b'k' })),
            "",
        );
        check(
            CloseDelimited,
            "data: x\n\n",
            true,
            "data: x\n\n",
            Ok(()),
            "",
        );
        assert_eq!(
            BodyError::ClosedMidLength {
                missing: 2,
                total: 5
            }
            .to_string(),
            "connection closed mid-body (2 of 5 bytes missing)"
        );
    }
}
