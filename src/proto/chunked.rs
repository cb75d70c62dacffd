//! The `Transfer-Encoding: chunked` body decoder (RFC 9112 §7.1), sans-IO.
//!
//! Owns: turning a chunked byte stream into data pieces and one `End`. Chunk data is split off
//! the caller's buffer zero-copy; a chunk's data may come out in several pieces as bytes arrive,
//! so callers must never assume one piece == one chunk == one SSE event.
//!
//! Must never: rescan bytes (every byte is examined once and consumed; the state enum remembers
//! where a size line or CRLF was interrupted), allocate, or touch bytes after the final CRLF
//! (they belong to the next response on a keep-alive connection).
//!
//! Leniency, on purpose: a bare LF is accepted wherever CRLF ends a line (RFC 9112 §2.2 allows
//! it), chunk extensions and trailers are skipped unread. Strictness, on purpose: anything but
//! CR or LF right after chunk data is [`ChunkedError::MissingCrlf`], because it means our
//! framing and the server's disagree and every later byte would be misread.

use bytes::{Buf, Bytes, BytesMut};

/// Default bound on one chunk's declared size. The data is streamed in pieces, so this bounds
/// nothing in memory; it only rejects absurd sizes (a misframed stream read as hex).
pub const DEFAULT_MAX_CHUNK_SIZE: u64 = 1 << 30;
/// Default bound on one size line or trailer line, extensions included.
pub const DEFAULT_MAX_LINE: usize = 4096;
/// Bound on the whole trailer section, so a server cannot feed us trailers forever.
pub const MAX_TRAILER_BYTES: usize = 64 * 1024;

/// One step of a chunked body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Some body bytes (never empty). Possibly only part of a chunk.
    Data(Bytes),
    /// The last chunk and its trailers were read; the body is complete.
    End,
}

/// Why a chunked body could not be decoded. After an error the decoder must not be reused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("invalid chunk size line: unexpected byte 0x{byte:02x}")]
    InvalidSize { byte: u8 },
    #[error("chunk size does not fit in 64 bits")]
    SizeOverflow,
    #[error("chunk of {size} bytes exceeds the limit of {limit} bytes")]
    ChunkTooLarge { size: u64, limit: u64 },
    #[error("chunk size line longer than {limit} bytes")]
    LineTooLong { limit: usize },
    #[error("missing CRLF after chunk data (found byte 0x{byte:02x})")]
    MissingCrlf { byte: u8 },
    #[error("bare CR in chunked framing (followed by byte 0x{byte:02x})")]
    BareCr { byte: u8 },
    #[error("chunked trailer section longer than {limit} bytes")]
    TrailersTooLong { limit: usize },
}

/// What walking the framing bytes reached.
enum Progress {
    NeedMore,
    Data { remaining: u64 },
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a size line; `digits` so far.
    Size {
        value: u64,
        digits: u32,
    },
    /// Past the digits: skipping whitespace and `;ext` up to the line end.
    Ext {
        value: u64,
    },
    /// Saw CR ending a size line; expect LF.
    SizeLf {
        value: u64,
    },
    /// Inside chunk data.
    Data {
        remaining: u64,
    },
    /// Chunk data done; expect CR or LF.
    DataCr,
    /// Saw CR after chunk data; expect LF.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a non-empty trailer line.
    TrailerLine,
    /// Saw CR at the start of a trailer line: the final empty line; expect LF.
    TrailerEndLf,
    Done,
}

/// Resumable chunked decoder. Feed it the connection's read buffer; it consumes what it decodes.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    max_chunk_size: u64,
    max_line: usize,
    /// Bytes of the current size line, or of the trailer section, consumed so far.
    line_len: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_MAX_CHUNK_SIZE, DEFAULT_MAX_LINE)
    }

    /// `max_chunk_size`: largest declared chunk size accepted. `max_line`: longest size line
    /// (bytes before its LF, extensions and CR included) and longest trailer line.
    pub fn with_limits(max_chunk_size: u64, max_line: usize) -> Self {
        Self {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            max_chunk_size,
            max_line,
            line_len: 0,
        }
    }

    /// True once the final chunk and trailers have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decode the next piece. `Ok(None)`: `buf` is used up, feed more bytes. After `End`, every
    /// call returns `End` again and `buf` is left untouched.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Chunk>, ChunkedError> {
        // Framing bytes are walked one at a time with a local index and consumed in one
        // `advance`, so the size line of a 280-byte chunk costs a handful of branches.
        let mut i = 0;
        let progress = self.step(buf, &mut i);
        buf.advance(i);
        match progress? {
            Progress::NeedMore => Ok(None),
            Progress::End => Ok(Some(Chunk::End)),
            Progress::Data { remaining } => {
                let n = remaining.min(buf.len() as u64) as usize;
                if n == 0 {
                    return Ok(None);
                }
                let data = buf.split_to(n).freeze();
                let left = remaining - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data { remaining: left }
                };
                Ok(Some(Chunk::Data(data)))
            }
        }
    }

    /// Walks framing bytes from `buf[*i..]` until data starts, the body ends or bytes run out.
    fn step(&mut self, buf: &[u8], i: &mut usize) -> Result<Progress, ChunkedError> {
        macro_rules! byte {
            () => {
                match buf.get(*i) {
                    Some(&b) => {
                        *i += 1;
                        b
                    }
                    None => return Ok(Progress::NeedMore),
                }
            };
        }
        loop {
            self.state = match self.state {
                State::Done => return Ok(Progress::End),
                State::Data { remaining } => return Ok(Progress::Data { remaining }),
                State::Size { value, digits } => {
                    let b = byte!();
                    if b != b'\n' {
                        self.count_line_byte()?;
                    }
                    match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            if value >> 60 != 0 {
                                return Err(ChunkedError::SizeOverflow);
                            }
                            State::Size {
                                value: (value << 4) | hex_val(b),
                                digits: digits + 1,
                            }
                        }
                        _ if digits == 0 => return Err(ChunkedError::InvalidSize { byte: b }),
                        b'\r' => State::SizeLf { value },
                        b'\n' => self.size_line_done(value)?,
                        b';' | b' ' | b'\t' => State::Ext { value },
                        _ => return Err(ChunkedError::InvalidSize { byte: b }),
                    }
                }
                State::Ext { value } => {
                    let b = byte!();
                    if b != b'\n' {
                        self.count_line_byte()?;
                    }
                    match b {
                        b'\r' => State::SizeLf { value },
                        b'\n' => self.size_line_done(value)?,
                        _ => State::Ext { value },
                    }
                }
                State::SizeLf { value } => match byte!() {
                    b'\n' => self.size_line_done(value)?,
                    b => return Err(ChunkedError::BareCr { byte: b }),
                },
                State::DataCr => match byte!() {
                    b'\r' => State::DataLf,
                    b'\n' => State::Size {
                        value: 0,
                        digits: 0,
                    },
                    b => return Err(ChunkedError::MissingCrlf { byte: b }),
                },
                State::DataLf => match byte!() {
                    b'\n' => State::Size {
                        value: 0,
                        digits: 0,
                    },
                    b => return Err(ChunkedError::MissingCrlf { byte: b }),
                },
                State::TrailerStart => match byte!() {
                    b'\r' => State::TrailerEndLf,
                    b'\n' => State::Done,
                    _ => {
                        self.count_trailer_byte()?;
                        State::TrailerLine
                    }
                },
                State::TrailerLine => {
                    let b = byte!();
                    self.count_trailer_byte()?;
                    if b == b'\n' {
                        State::TrailerStart
                    } else {
                        State::TrailerLine
                    }
                }
                State::TrailerEndLf => match byte!() {
                    b'\n' => State::Done,
                    b => return Err(ChunkedError::BareCr { byte: b }),
                },
            };
        }
    }

    #[inline]
    fn count_line_byte(&mut self) -> Result<(), ChunkedError> {
        self.line_len += 1;
        if self.line_len > self.max_line {
            return Err(ChunkedError::LineTooLong {
                limit: self.max_line,
            });
        }
        Ok(())
    }

    #[inline]
    fn count_trailer_byte(&mut self) -> Result<(), ChunkedError> {
        self.line_len += 1;
        if self.line_len > MAX_TRAILER_BYTES {
            return Err(ChunkedError::TrailersTooLong {
                limit: MAX_TRAILER_BYTES,
            });
        }
        Ok(())
    }

    /// The LF of a size line was read (it is not counted against `max_line`).
    fn size_line_done(&mut self, value: u64) -> Result<State, ChunkedError> {
        self.line_len = 0;
        if value == 0 {
            return Ok(State::TrailerStart);
        }
        if value > self.max_chunk_size {
            return Err(ChunkedError::ChunkTooLarge {
                size: value,
                limit: self.max_chunk_size,
            });
        }
        Ok(State::Data { remaining: value })
    }
}

#[inline]
fn hex_val(b: u8) -> u64 {
    match b {
        b'0'..=b'9' => (b - b'0') as u64,
        b'a'..=b'f' => (b - b'a' + 10) as u64,
        _ => (b - b'A' + 10) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a whole input decodes to: the body bytes, then how it ended.
    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        End,
        NeedMore,
        Err(ChunkedError),
    }

    fn run(input: &[u8], reads: &[usize], dec: &mut ChunkedDecoder) -> (Vec<u8>, Outcome, usize) {
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut pos = 0;
        let mut cuts: Vec<usize> = reads.to_vec();
        cuts.push(usize::MAX);
        for cut in cuts {
            let end = input.len().min(pos + cut.max(1));
            buf.extend_from_slice(&input[pos..end]);
            pos = end;
            loop {
                match dec.decode(&mut buf) {
                    Ok(Some(Chunk::Data(d))) => {
                        assert!(!d.is_empty(), "empty data piece");
                        body.extend_from_slice(&d)
                    }
                    Ok(Some(Chunk::End)) => return (body, Outcome::End, buf.len()),
                    Ok(None) => break,
                    Err(e) => return (body, Outcome::Err(e), buf.len()),
                }
            }
            if pos == input.len() {
                break;
            }
        }
        (body, Outcome::NeedMore, buf.len())
    }

    /// Whole buffer and one byte per read must both give `body` and `outcome`.
    fn check(input: impl AsRef<[u8]>, body: &str, outcome: Outcome) {
        let input = input.as_ref();
        for reads in [vec![], vec![1; input.len()]] {
            let (got, out, _) = run(input, &reads, &mut ChunkedDecoder::new());
            assert_eq!(
                (got.as_slice(), &out),
                (body.as_bytes(), &outcome),
                "input {:?} reads {reads:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn table() {
        use Outcome::*;
        let e = Outcome::Err;
        check("5\r\nhello\r\n0\r\n\r\n", "hello", End);
        check("5\r\nhel", "hel", NeedMore);
        check("", "", NeedMore);
        // uppercase and lowercase hex, leading zeros
        check("A\r\n0123456789\r\n0\r\n\r\n", "0123456789", End);
        check("a\r\n0123456789\r\n000\r\n\r\n", "0123456789", End);
        check("0001\r\nx\r\n0\r\n\r\n", "x", End);
        // extensions and whitespace before them are skipped
        check("3;name=val\r\nabc\r\n0;x\r\n\r\n", "abc", End);
        check("3 ; q=\"a;b\"\r\nabc\r\n0\r\n\r\n", "abc", End);
        // several chunks, several events per chunk
        check(
            "d\r\ndata: a\n\ndata\r\n6\r\n: b\n\n\n\r\n0\r\n\r\n",
            "data: a\n\ndata: b\n\n\n",
            End,
        );
        // trailers are skipped
        check("1\r\nx\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n", "x", End);
        // bare LF line ends accepted
        check("1\nx\n0\n\n", "x", End);
        // missing final CRLF: incomplete, not an error
        check("1\r\nx\r\n0\r\n", "x", NeedMore);
        // split multibyte UTF-8 across chunks is just bytes
        check(b"1\r\n\xc3\r\n1\r\n\xa9\r\n0\r\n\r\n", "\u{e9}", End);
        // errors
        check(
            "1\r\nxy\r\n",
            "x",
            e(ChunkedError::MissingCrlf { byte: b'y' }),
        );
        check(
            "1\r\nx\rz",
            "x",
            e(ChunkedError::MissingCrlf { byte: b'z' }),
        );
        check("g\r\n", "", e(ChunkedError::InvalidSize { byte: b'g' }));
        check("\r\n", "", e(ChunkedError::InvalidSize { byte: b'\r' }));
        check(";x\r\n", "", e(ChunkedError::InvalidSize { byte: b';' }));
        check("1x\r\n", "", e(ChunkedError::InvalidSize { byte: b'x' }));
        check("1\rx", "", e(ChunkedError::BareCr { byte: b'x' }));
        check(
            "1\r\nx\r\n0\r\n\rx",
            "x",
            e(ChunkedError::BareCr { byte: b'x' }),
        );
        check("10000000000000000\r\n", "", e(ChunkedError::SizeOverflow));
        check(
            "40000001\r\n",
            "",
            e(ChunkedError::ChunkTooLarge {
                size: 0x4000_0001,
                limit: DEFAULT_MAX_CHUNK_SIZE,
            }),
        );
        let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(5000));
        check(&long_ext, "", e(ChunkedError::LineTooLong { limit: 4096 }));
    }

    #[test]
    fn end_leaves_the_next_response_alone() {
        let mut dec = ChunkedDecoder::new();
        let (body, out, left) = run(b"2\r\nok\r\n0\r\n\r\nHTTP/1.1 200", &[], &mut dec);
        assert_eq!((body.as_slice(), out, left), (&b"ok"[..], Outcome::End, 12));
        assert!(dec.is_done());
        let mut buf = BytesMut::from(&b"more"[..]);
        assert_eq!(dec.decode(&mut buf), Ok(Some(Chunk::End)));
        assert_eq!(&buf[..], b"more");
    }

    #[test]
    fn data_is_zero_copy_and_may_come_in_pieces() {
        let mut dec = ChunkedDecoder::new();
        let mut buf = BytesMut::from(&b"a\r\n01234"[..]);
        let ptr = buf.as_ptr();
        let Ok(Some(Chunk::Data(d))) = dec.decode(&mut buf) else {
            panic!("expected data");
        };
        assert_eq!((&d[..], d.as_ptr()), (&b"01234"[..], ptr.wrapping_add(3)));
        assert_eq!(dec.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"56789\r\n");
        assert_eq!(
            dec.decode(&mut buf),
            Ok(Some(Chunk::Data(Bytes::from_static(b"56789"))))
        );
        assert_eq!(dec.decode(&mut buf), Ok(None));
        assert!(buf.is_empty());
    }

    #[test]
    fn custom_limits() {
        let mut dec = ChunkedDecoder::with_limits(4, 3);
        let (_, out, _) = run(b"5\r\nhello\r\n", &[], &mut dec);
        assert_eq!(
            out,
            Outcome::Err(ChunkedError::ChunkTooLarge { size: 5, limit: 4 })
        );
        let mut dec = ChunkedDecoder::with_limits(4, 3);
        let (_, out, _) = run(b"4;x\r\nabcd\r\n", &[], &mut dec);
        assert_eq!(out, Outcome::Err(ChunkedError::LineTooLong { limit: 3 }));
    }
}
