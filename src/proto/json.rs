//! A small borrowed JSON scanner: walks objects and arrays, hands out string slices that are
//! still escaped, and skips whatever the caller does not ask for.
//!
//! It owns JSON *validation* for the per-event path: everything it accepts is valid JSON by
//! RFC 8259 (UTF-8, string escapes including paired surrogates, no raw control characters,
//! number grammar, finite numbers, nothing after the top-level value), so the OpenAI decoder never
//! silently accepts a truncated or corrupted event.
//!
//! It must never allocate, build a tree, recurse without bound or panic on input: nesting is
//! limited to [`MAX_DEPTH`] and skipping is iterative, tracking open containers in a bit stack.

use std::fmt;

/// Deepest container nesting accepted. serde_json stops at 127, so everything we accept it
/// accepts too; real stream chunks nest at most ~6 deep (logprobs).
pub const MAX_DEPTH: u32 = 64;

/// Why the bytes are not valid JSON. Offsets are byte positions in the scanned buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonError {
    /// The input ended inside a value.
    Eof,
    Unexpected {
        at: usize,
        found: u8,
        expected: Expected,
    },
    TooDeep {
        at: usize,
    },
    BadEscape {
        at: usize,
    },
    BadNumber {
        at: usize,
    },
    ControlChar {
        at: usize,
    },
    InvalidUtf8 {
        at: usize,
    },
    Trailing {
        at: usize,
    },
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            JsonError::Eof => f.write_str("JSON ends early (truncated event?)"),
            JsonError::Unexpected {
                at,
                found,
                expected,
            } => write!(
                f,
                "unexpected {} at byte {at}, expected {}",
                std::ascii::escape_default(found),
                expected.as_str()
            ),
            JsonError::TooDeep { at } => {
                write!(f, "JSON nested deeper than {MAX_DEPTH} at byte {at}")
            }
            JsonError::BadEscape { at } => write!(f, "invalid string escape at byte {at}"),
            JsonError::BadNumber { at } => write!(f, "invalid or out-of-range number at byte {at}"),
            JsonError::ControlChar { at } => {
                write!(f, "raw control character in string at byte {at}")
            }
            JsonError::InvalidUtf8 { at } => write!(f, "invalid UTF-8 at byte {at}"),
            JsonError::Trailing { at } => write!(f, "trailing bytes after JSON value at byte {at}"),
        }
    }
}

impl std::error::Error for JsonError {}

/// What the scanner wanted where it found something else. A byte-sized enum rather than a
/// string keeps `Result`s small on the per-event path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    Value,
    ObjectOpen,
    ArrayOpen,
    Key,
    Colon,
    CommaOrBrace,
    CommaOrBracket,
    String,
}

impl Expected {
    pub fn as_str(self) -> &'static str {
        match self {
            Expected::Value => "a JSON value",
            Expected::ObjectOpen => "'{'",
            Expected::ArrayOpen => "'['",
            Expected::Key => "a key string",
            Expected::Colon => "':'",
            Expected::CommaOrBrace => "',' or '}'",
            Expected::CommaOrBracket => "',' or ']'",
            Expected::String => "a string",
        }
    }
}

/// What the next value is, judged by its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

/// A JSON string's contents between the quotes, still escaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Str<'a> {
    pub raw: &'a [u8],
    pub has_escapes: bool,
}

impl<'a> Str<'a> {
    /// The unescaped bytes for comparing against a key we know. Keys are almost never escaped;
    /// when they are, they are unescaped into `buf` (too long for `buf` means "not a key we
    /// know", since all of ours are short).
    #[inline(always)]
    pub fn key<'b>(&self, buf: &'b mut [u8; 32]) -> &'b [u8]
    where
        'a: 'b,
    {
        if !self.has_escapes {
            return self.raw;
        }
        self.key_slow(buf)
    }

    #[cold]
    fn key_slow<'b>(&self, buf: &'b mut [u8; 32]) -> &'b [u8]
    where
        'a: 'b,
    {
        let mut n = 0;
        let mut ok = true;
        unescape(self.raw, |piece| {
            if n + piece.len() > buf.len() {
                ok = false;
            } else {
                buf[n..n + piece.len()].copy_from_slice(piece);
                n += piece.len();
            }
        })
        .map_or(&[][..], |()| if ok { &buf[..n] } else { &[][..] })
    }
}

/// Unescapes JSON string contents, handing out borrowed runs and unescaped characters in order.
/// Fails on a malformed escape or an unpaired surrogate.
pub fn unescape(raw: &[u8], mut emit: impl FnMut(&[u8])) -> Result<(), JsonError> {
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'\\', &raw[i..]) {
        let bs = i + off;
        emit(&raw[i..bs]);
        let (ch, len) = decode_escape(raw, bs)?;
        let mut tmp = [0u8; 4];
        emit(ch.encode_utf8(&mut tmp).as_bytes());
        i = bs + len;
    }
    emit(&raw[i..]);
    Ok(())
}

/// Decodes the escape starting at `buf[at] == b'\\'`: the character and the escape's length.
fn decode_escape(buf: &[u8], at: usize) -> Result<(char, usize), JsonError> {
    let err = JsonError::BadEscape { at };
    let c = match buf.get(at + 1) {
        None => return Err(JsonError::Eof),
        Some(&c) => c,
    };
    let simple = match c {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let hi = hex4(buf, at + 2, at)?;
            if (0xDC00..0xE000).contains(&hi) {
                return Err(err);
            }
            if !(0xD800..0xDC00).contains(&hi) {
                return char::from_u32(hi).map(|ch| (ch, 6)).ok_or(err);
            }
            // A leading surrogate must be followed by `\u` and a trailing one.
            match (buf.get(at + 6), buf.get(at + 7)) {
                (Some(b'\\'), Some(b'u')) => {}
                (None, _) | (Some(b'\\'), None) => return Err(JsonError::Eof),
                _ => return Err(err),
            }
            let lo = hex4(buf, at + 8, at)?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(err);
            }
            let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
            return char::from_u32(cp).map(|ch| (ch, 12)).ok_or(err);
        }
        _ => return Err(err),
    };
    Ok((simple, 2))
}

/// Four hex digits at `buf[at..]`, for the escape starting at `esc`.
fn hex4(buf: &[u8], at: usize, esc: usize) -> Result<u32, JsonError> {
    let digits = buf.get(at..at + 4).ok_or(JsonError::Eof)?;
    let mut v = 0u32;
    for &d in digits {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(JsonError::BadEscape { at: esc }),
        };
        v = v << 4 | n as u32;
    }
    Ok(v)
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes that end a fast run inside a string: the closing quote, a backslash, or a raw control
/// character (invalid JSON).
#[inline(always)]
fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Index of the first special byte in `s`, eight bytes at a time. For each test the lowest
/// flagged byte is exact (false positives only appear above a true hit, through the borrow),
/// so the lowest bit of the union is the first special byte.
#[inline(always)]
pub fn find_special(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 8 <= s.len() {
        let mut a = [0u8; 8];
        a.copy_from_slice(&s[i..i + 8]);
        let w = u64::from_le_bytes(a);
        let q = w ^ (LO * b'"' as u64);
        let b = w ^ (LO * b'\\' as u64);
        let m = (w.wrapping_sub(LO * 0x20) & !w)
            | (q.wrapping_sub(LO) & !q)
            | (b.wrapping_sub(LO) & !b);
        let m = m & HI;
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    s[i..].iter().position(|&b| is_special(b)).map(|p| i + p)
}

/// A cursor over one JSON document.
pub struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: u32,
}

impl<'a> Scanner<'a> {
    /// Fails when `buf` is not UTF-8: outside strings JSON is ASCII anyway, and inside strings
    /// this is the check that keeps `Str` contents valid text. One pass, fast on ASCII.
    pub fn new(buf: &'a [u8]) -> Result<Self, JsonError> {
        if let Err(e) = std::str::from_utf8(buf) {
            return Err(JsonError::InvalidUtf8 {
                at: e.valid_up_to(),
            });
        }
        Ok(Self {
            buf,
            pos: 0,
            depth: 0,
        })
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    #[inline(always)]
    fn skip_ws(&mut self) {
        while let Some(&b) = self.buf.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.pos += 1;
        }
    }

    #[inline(always)]
    fn peek_ws(&mut self) -> Result<u8, JsonError> {
        self.skip_ws();
        self.buf.get(self.pos).copied().ok_or(JsonError::Eof)
    }

    #[cold]
    fn unexpected(&self, found: u8, expected: Expected) -> JsonError {
        JsonError::Unexpected {
            at: self.pos,
            found,
            expected,
        }
    }

    /// The kind of the next value (skipping whitespace), without consuming it.
    #[inline(always)]
    pub fn peek(&mut self) -> Result<Kind, JsonError> {
        let b = self.peek_ws()?;
        Ok(match b {
            b'{' => Kind::Object,
            b'[' => Kind::Array,
            b'"' => Kind::String,
            b'-' | b'0'..=b'9' => Kind::Number,
            b't' | b'f' => Kind::Bool,
            b'n' => Kind::Null,
            _ => return Err(self.unexpected(b, Expected::Value)),
        })
    }

    fn push(&mut self) -> Result<(), JsonError> {
        if self.depth >= MAX_DEPTH {
            return Err(JsonError::TooDeep { at: self.pos });
        }
        self.depth += 1;
        Ok(())
    }

    /// Consumes `{`. Follow with [`Scanner::next_key`] until it returns `None`.
    pub fn enter_object(&mut self) -> Result<(), JsonError> {
        let b = self.peek_ws()?;
        if b != b'{' {
            return Err(self.unexpected(b, Expected::ObjectOpen));
        }
        self.push()?;
        self.pos += 1;
        Ok(())
    }

    /// The next key of the object being walked (the scanner then sits before its value), or
    /// `None` after consuming the closing `}`. `first` starts `true` for each object; the caller
    /// must consume every value (read or [`Scanner::skip`]) before asking for the next key.
    #[inline(always)]
    pub fn next_key(&mut self, first: &mut bool) -> Result<Option<Str<'a>>, JsonError> {
        let mut b = self.peek_ws()?;
        if *first {
            *first = false;
            if b == b'}' {
                self.pos += 1;
                self.depth -= 1;
                return Ok(None);
            }
        } else {
            match b {
                b',' => {
                    self.pos += 1;
                    b = self.peek_ws()?;
                }
                b'}' => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(None);
                }
                _ => return Err(self.unexpected(b, Expected::CommaOrBrace)),
            }
        }
        if b != b'"' {
            return Err(self.unexpected(b, Expected::Key));
        }
        let key = self.string_body()?;
        let b = self.peek_ws()?;
        if b != b':' {
            return Err(self.unexpected(b, Expected::Colon));
        }
        self.pos += 1;
        Ok(Some(key))
    }

    /// Consumes `[`. Follow with [`Scanner::next_element`] until it returns `false`.
    pub fn enter_array(&mut self) -> Result<(), JsonError> {
        let b = self.peek_ws()?;
        if b != b'[' {
            return Err(self.unexpected(b, Expected::ArrayOpen));
        }
        self.push()?;
        self.pos += 1;
        Ok(())
    }

    /// `true` when another element follows (the scanner sits before it), `false` after consuming
    /// the closing `]`.
    #[inline(always)]
    pub fn next_element(&mut self, first: &mut bool) -> Result<bool, JsonError> {
        let b = self.peek_ws()?;
        if *first {
            *first = false;
            if b == b']' {
                self.pos += 1;
                self.depth -= 1;
                return Ok(false);
            }
            return Ok(true);
        }
        match b {
            b',' => {
                self.pos += 1;
                Ok(true)
            }
            b']' => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            _ => Err(self.unexpected(b, Expected::CommaOrBracket)),
        }
    }

    /// Reads a string value.
    #[inline(always)]
    pub fn string(&mut self) -> Result<Str<'a>, JsonError> {
        let b = self.peek_ws()?;
        if b != b'"' {
            return Err(self.unexpected(b, Expected::String));
        }
        self.string_body()
    }

    /// `self.pos` is at the opening quote.
    #[inline(always)]
    fn string_body(&mut self) -> Result<Str<'a>, JsonError> {
        let start = self.pos + 1;
        let mut i = start;
        let mut has_escapes = false;
        loop {
            let off = find_special(&self.buf[i..]).ok_or(JsonError::Eof)?;
            i += off;
            match self.buf[i] {
                b'"' => {
                    self.pos = i + 1;
                    return Ok(Str {
                        raw: &self.buf[start..i],
                        has_escapes,
                    });
                }
                b'\\' => {
                    has_escapes = true;
                    let (_, len) = decode_escape(self.buf, i)?;
                    i += len;
                }
                _ => return Err(JsonError::ControlChar { at: i }),
            }
        }
    }

    /// Reads a number as a non-negative integer. `Ok(None)` when it is a valid JSON number but
    /// not one that fits a `u64` (negative, fractional, exponent, too large).
    #[inline]
    pub fn u64(&mut self) -> Result<Option<u64>, JsonError> {
        let b = self.peek_ws()?;
        if b.is_ascii_digit() {
            // Fast path for the common case, a plain integer of at most 19 digits (cannot
            // overflow): one pass that validates and accumulates.
            let buf = self.buf;
            let mut i = self.pos;
            let mut v: u64 = 0;
            let end = buf.len().min(self.pos + 19);
            while i < end {
                let d = buf[i].wrapping_sub(b'0');
                if d > 9 {
                    break;
                }
                v = v * 10 + d as u64;
                i += 1;
            }
            let digits = i - self.pos;
            let delimited = matches!(
                buf.get(i),
                Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            );
            if digits <= 19 && (b != b'0' || digits == 1) && delimited {
                self.pos = i;
                return Ok(Some(v));
            }
        }
        let text = self.number_text(b)?;
        let mut v: u64 = 0;
        for &d in text {
            if !d.is_ascii_digit() {
                return Ok(None);
            }
            v = match v
                .checked_mul(10)
                .and_then(|v| v.checked_add((d - b'0') as u64))
            {
                Some(v) => v,
                None => return Ok(None),
            };
        }
        Ok(Some(v))
    }

    /// Reads a number as a signed integer. `Ok(None)` when it is a valid JSON number but not an
    /// integer that fits an `i64` (serde_json reads `-0` as a float, and so do we).
    pub fn i64(&mut self) -> Result<Option<i64>, JsonError> {
        let b = self.peek_ws()?;
        let text = self.number_text(b)?;
        let v = std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse::<i64>().ok());
        Ok(v.filter(|&v| !(v == 0 && text[0] == b'-')))
    }

    /// Reads a number as `f64`.
    pub fn f64(&mut self) -> Result<f64, JsonError> {
        let b = self.peek_ws()?;
        let start = self.pos;
        let text = self.number_text(b)?;
        // Validated by `number_text`: ASCII digits, sign, dot and exponent only.
        std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or(JsonError::BadNumber { at: start })
    }

    /// Consumes one number (first byte `b`) after checking the JSON grammar, and returns its text.
    /// Numbers that could overflow `f64` (an exponent, or hundreds of digits) are parsed to reject
    /// infinities, as serde_json does.
    #[inline]
    fn number_text(&mut self, b: u8) -> Result<&'a [u8], JsonError> {
        let start = self.pos;
        let buf = self.buf;
        let bad = JsonError::BadNumber { at: start };
        let mut i = start;
        if b == b'-' {
            i += 1;
        }
        let int_start = i;
        match buf.get(i) {
            None => return Err(JsonError::Eof),
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(buf.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            Some(_) => return Err(bad),
        }
        let int_digits = i - int_start;
        if buf.get(i) == Some(&b'.') {
            i += 1;
            let f = i;
            while matches!(buf.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            if i == f {
                return Err(if i == buf.len() { JsonError::Eof } else { bad });
            }
        }
        let mut has_exp = false;
        if matches!(buf.get(i), Some(b'e' | b'E')) {
            has_exp = true;
            i += 1;
            if matches!(buf.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let e = i;
            while matches!(buf.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            if i == e {
                return Err(if i == buf.len() { JsonError::Eof } else { bad });
            }
        }
        // A number must be followed by a delimiter; `01` or `1x` are not numbers.
        if let Some(&n) = buf.get(i) {
            if !matches!(n, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                return Err(bad);
            }
        }
        let text = &buf[start..i];
        if has_exp || int_digits > 300 {
            let finite = std::str::from_utf8(text)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .is_some_and(f64::is_finite);
            if !finite {
                return Err(bad);
            }
        }
        self.pos = i;
        Ok(text)
    }

    /// `true`, `false` or `null`.
    fn literal(&mut self, word: &'static [u8]) -> Result<(), JsonError> {
        let end = self.pos + word.len();
        match self.buf.get(self.pos..end) {
            Some(w) if w == word => {
                self.pos = end;
                Ok(())
            }
            Some(_) => Err(self.unexpected(self.buf[self.pos], Expected::Value)),
            None => {
                // Truncated `nul` is EOF; `nux` is garbage.
                let rest = &self.buf[self.pos..];
                if word.starts_with(rest) {
                    Err(JsonError::Eof)
                } else {
                    Err(self.unexpected(self.buf[self.pos], Expected::Value))
                }
            }
        }
    }

    /// Consumes `null` if that is what comes next.
    #[inline(always)]
    pub fn eat_null(&mut self) -> Result<bool, JsonError> {
        if self.peek_ws()? == b'n' {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Skips one complete value of any kind, without recursion.
    #[inline(always)]
    pub fn skip(&mut self) -> Result<(), JsonError> {
        // Scalars are most of what chunks carry that we do not read: keep them off the
        // general container loop.
        match self.peek_ws()? {
            b'"' => self.string_body().map(drop),
            b @ (b'-' | b'0'..=b'9') => self.number_text(b).map(drop),
            b'n' => self.literal(b"null"),
            _ => self.skip_any(),
        }
    }

    fn skip_any(&mut self) -> Result<(), JsonError> {
        // Bit k set: the container opened at relative depth k is an object.
        let mut stack: u64 = 0;
        let mut level: u32 = 0;
        // Whether the scanner sits right after `{`/`[` (so `}`/`]` may close it at once).
        let mut fresh = false;
        loop {
            // Expect a value here (or, when fresh, possibly the close of an empty container).
            let b = self.peek_ws()?;
            if fresh && ((b == b'}' && stack & 1 == 1) || (b == b']' && stack & 1 == 0)) {
                // handled below as a close
            } else {
                match b {
                    b'{' | b'[' => {
                        self.push()?;
                        self.pos += 1;
                        stack = stack << 1 | (b == b'{') as u64;
                        level += 1;
                        fresh = true;
                        if b == b'{' {
                            let c = self.peek_ws()?;
                            if c != b'}' {
                                if c != b'"' {
                                    return Err(self.unexpected(c, Expected::Key));
                                }
                                self.key_colon()?;
                                fresh = false;
                            }
                        }
                        continue;
                    }
                    b'"' => {
                        self.string_body()?;
                    }
                    b'-' | b'0'..=b'9' => {
                        self.number_text(b)?;
                    }
                    b't' => self.literal(b"true")?,
                    b'f' => self.literal(b"false")?,
                    b'n' => self.literal(b"null")?,
                    _ => return Err(self.unexpected(b, Expected::Value)),
                }
                if level == 0 {
                    return Ok(());
                }
            }
            fresh = false;
            // After a value inside a container: `,` and the next member, or the close.
            loop {
                let c = self.peek_ws()?;
                let in_object = stack & 1 == 1;
                match c {
                    b',' => {
                        self.pos += 1;
                        if in_object {
                            let k = self.peek_ws()?;
                            if k != b'"' {
                                return Err(self.unexpected(k, Expected::Key));
                            }
                            self.key_colon()?;
                        }
                        break;
                    }
                    b'}' if in_object => {}
                    b']' if !in_object => {}
                    _ => {
                        return Err(self.unexpected(
                            c,
                            if in_object {
                                Expected::CommaOrBrace
                            } else {
                                Expected::CommaOrBracket
                            },
                        ))
                    }
                }
                self.pos += 1;
                self.depth -= 1;
                stack >>= 1;
                level -= 1;
                if level == 0 {
                    return Ok(());
                }
            }
        }
    }

    /// At a key's opening quote: consumes the key and the colon.
    fn key_colon(&mut self) -> Result<(), JsonError> {
        self.string_body()?;
        let b = self.peek_ws()?;
        if b != b':' {
            return Err(self.unexpected(b, Expected::Colon));
        }
        self.pos += 1;
        Ok(())
    }

    /// `true` or `false`; `None` (nothing consumed) when the next value is another kind.
    pub fn bool(&mut self) -> Result<Option<bool>, JsonError> {
        match self.peek_ws()? {
            b't' => self.literal(b"true").map(|()| Some(true)),
            b'f' => self.literal(b"false").map(|()| Some(false)),
            _ => Ok(None),
        }
    }

    /// Only whitespace may follow the top-level value.
    pub fn finish(&mut self) -> Result<(), JsonError> {
        self.skip_ws();
        if self.pos != self.buf.len() {
            return Err(JsonError::Trailing { at: self.pos });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_find_special(s: &[u8]) -> Option<usize> {
        s.iter().position(|&b| is_special(b))
    }

    proptest! {
        #[test]
        fn find_special_matches_naive(s in proptest::collection::vec(
            prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..=0xff, Just(b'a')], 0..40)) {
            prop_assert_eq!(find_special(&s), naive_find_special(&s));
        }

        #[test]
        fn skip_agrees_with_serde(s in "[\\[\\]{}\",:0-9a-z\\\\ .eE+-]{0,24}") {
            let serde_ok = serde_json::from_slice::<serde_json::Value>(s.as_bytes()).is_ok();
            let ours = Scanner::new(s.as_bytes()).and_then(|mut sc| { sc.skip()?; sc.finish() });
            if !serde_ok {
                prop_assert!(ours.is_err(), "accepted invalid JSON {:?}", s);
            }
        }
    }

    fn skip_all(s: &str) -> Result<(), JsonError> {
        let mut sc = Scanner::new(s.as_bytes())?;
        sc.skip()?;
        sc.finish()
    }

    #[test]
    fn skip_cases() {
        let cases: &[(&str, bool)] = &[
            (r#"{}"#, true),
            (r#"[]"#, true),
            (
                r#" { "a" : [ 1 , -2.5e3 , "x\"y" , { } , [ [ ] ] , null , true , false ] } "#,
                true,
            ),
            (r#"{"a":1,}"#, false),
            (r#"[1,]"#, false),
            (r#"[1 2]"#, false),
            (r#"{"a" 1}"#, false),
            (r#"{"a":1"#, false),
            (r#"{"a":[1}"#, false),
            (r#"["a]"#, false),
            (r#"01"#, false),
            (r#"1."#, false),
            (r#"-"#, false),
            (r#"1e400"#, false),
            (r#"1e-400"#, true),
            (r#""\ud83d\ude00""#, true),
            (r#""\ud83d""#, false),
            (r#""\ude00""#, false),
            (r#""\ud83d\u0041""#, false),
            (r#""\x""#, false),
            ("\"a\tb\"", false),
            (r#"nul"#, false),
            (r#"nulx"#, false),
            (r#"{} x"#, false),
            (r#"{"a":{"b":{"c":[{"d":null}]}}}"#, true),
        ];
        for &(input, ok) in cases {
            assert_eq!(skip_all(input).is_ok(), ok, "{input}");
            let serde_ok = serde_json::from_str::<serde_json::Value>(input).is_ok();
            assert_eq!(serde_ok, ok, "serde disagrees on {input}");
        }
    }

    #[test]
    fn depth_is_limited_without_recursion() {
        let deep = "[".repeat(100_000);
        assert_eq!(skip_all(&deep), Err(JsonError::TooDeep { at: 64 }));
        let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(skip_all(&ok), Ok(()));
        let over = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(skip_all(&over), Err(JsonError::TooDeep { .. })));
    }

    #[test]
    fn escaped_keys_compare_unescaped() {
        let mut buf = [0u8; 32];
        let s = Str {
            raw: br"con\u0074ent",
            has_escapes: true,
        };
        assert_eq!(s.key(&mut buf), b"content");
        let long = Str {
            raw: br"\u0061aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            has_escapes: true,
        };
        assert_eq!(long.key(&mut buf), b"");
    }
}
