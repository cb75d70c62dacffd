//! The online repetition ("loop") detector: one per stream and per channel (the caller keeps
//! one for reasoning and one for the answer), fed decoded text as it arrives.
//!
//! Streams hand over text still JSON-escaped (`\n` is two bytes there, `\u4e2d` six):
//! [`RepetitionDetector::push_json`] unescapes on the way in ([`JsonUnescape`]), so the rule
//! counts the characters the model wrote, not their spelling in the wire format. Escapes may be
//! cut anywhere between pushes, and a surrogate pair may even span two events.
//!
//! Owns: the loop rule and its exact, incremental evaluation. It must never allocate per push in
//! steady state, keep memory proportional to the stream, read a clock, or do IO.
//!
//! # The rule
//! Text is counted in **characters** (Unicode scalar values), not bytes, so the thresholds mean
//! the same for English and for CJK output. Input bytes may split a UTF-8 sequence anywhere; the
//! decoder carries the partial sequence over. Invalid UTF-8 becomes U+FFFD, one per maximal
//! invalid subpart (the same substitution as `String::from_utf8_lossy`).
//!
//! With `t` the characters seen so far and `need(p) = max(min_span, min_repeats * p)`, the
//! stream is flagged at the first length `n` at which, for some period `1 <= p <= max_period`,
//! the last `need(p)` characters of `t[..n]` are `p`-periodic (`t[i] == t[i - p]`) and the last
//! `p` characters are not all whitespace. The reported period is the smallest such `p` at that
//! first `n`. Once flagged it stays flagged; afterwards only the flagged run is followed, so
//! `span_chars` grows while the loop goes on and freezes when it breaks.
//!
//! # How it is evaluated in O(1) amortised work per character
//! Every `K` characters (the check interval, computed from the config) one check looks for a
//! rule match that first happened since the previous check at `last`:
//! 1. **Candidate periods.** If `p` first matched at `n0` in `(last, last + K]`, the block
//!    `B_j = t[last - j, last)` with `j = need(p) - K` lies inside the periodic tail, and `K` is
//!    chosen so that `j >= 2p` for every `p`. By Fine and Wilf, the smallest period `q` of `B_j`
//!    then divides `p`, and the whole tail is `q`-periodic, so `q` matched no later than `p`. One
//!    prefix-function (KMP failure) pass over the *reversed* region before `last` gives the
//!    smallest period of every `B_j` at once; the candidates are the distinct values `q <= j/2`.
//!    For a loop there is typically one. Before that pass a cheap necessary test runs: the last
//!    few (up to 32) characters before `last` must recur `p <= max_period` characters earlier.
//!    Varied prose fails it, so on prose a check costs ~1 comparison per character.
//! 2. **Verification.** For each candidate, one pass over the last `need(q) + K` characters
//!    counts consecutive matches `t[i] == t[i - q]` and finds the first `n` where the run reaches
//!    `need(q)` with a non-whitespace period. The earliest `n` (then the smallest `q`) wins,
//!    which is exactly the rule above.
//!
//! A full check costs `O(need_max)` for the prefix function plus `O(need_max + K)` per
//! candidate, once per `K` characters. With the defaults (`min_span` 4096, `min_repeats` 4,
//! `max_period` 2048) `K` is 2048 and a full check reads about 6K characters: ~3 comparisons per
//! character. `min_repeats >= 3` is required: with 2, `need(p) - 2p` reaches 0 and no `K` works.
//! The characters live in a `Vec<u32>` of `2 * (need_max + K)` slots (~80 KB by default),
//! compacted in place when full; runs of ASCII are widened into it in bulk.
//!
//! A verdict therefore appears up to `K` characters after the rule was first met (the verdict
//! itself is exact: the same period and position as checking every character).
//! [`RepetitionDetector::finish`] runs the last check at the end of a stream.

use std::fmt;

/// Thresholds of the loop rule. Defaults match the seed tool: 4 repeats over 4096 characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepetitionConfig {
    /// Full repetitions of the period the tail must hold (at least 3).
    pub min_repeats: usize,
    /// Characters the periodic tail must span.
    pub min_span: usize,
    /// Longest period considered, in characters.
    pub max_period: usize,
}

impl Default for RepetitionConfig {
    fn default() -> Self {
        Self {
            min_repeats: 4,
            min_span: 4096,
            max_period: 2048,
        }
    }
}

/// The upper bound on `min_span` and `min_repeats * max_period`: keeps the window (and memory,
/// 4 bytes per character) bounded even for a mistyped flag.
pub const MAX_NEED: usize = 1 << 22;

/// An invalid [`RepetitionConfig`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RepetitionConfigError {
    #[error("loop detection: min_repeats must be at least 3 (got {0})")]
    TooFewRepeats(usize),
    #[error("loop detection: min_span and max_period must be at least 1")]
    Zero,
    #[error("loop detection: min_span and min_repeats x max_period must not exceed {MAX_NEED} characters")]
    TooLarge,
}

impl RepetitionConfig {
    /// Characters the periodic tail must span for period `p`.
    #[inline]
    pub fn need(&self, p: usize) -> usize {
        self.min_span.max(self.min_repeats.saturating_mul(p))
    }

    /// Checks the thresholds and returns the check interval `K`: the largest value with
    /// `need(p) - K >= 2p` for every period (see the module doc).
    pub fn check_interval(&self) -> Result<usize, RepetitionConfigError> {
        if self.min_repeats < 3 {
            return Err(RepetitionConfigError::TooFewRepeats(self.min_repeats));
        }
        if self.min_span == 0 || self.max_period == 0 {
            return Err(RepetitionConfigError::Zero);
        }
        if self.min_span > MAX_NEED || self.min_repeats.saturating_mul(self.max_period) > MAX_NEED {
            return Err(RepetitionConfigError::TooLarge);
        }
        // need(p) - 2p = max(S - 2p, (r - 2) p): falling then rising in p, so the minimum is at
        // the crossing or at the end of the range. Scanning is simplest and runs once.
        let k = (1..=self.max_period)
            .map(|p| self.need(p) - 2 * p)
            .min()
            .unwrap_or(1);
        // r >= 3 makes every term >= p >= 1.
        Ok(k.max(1))
    }
}

/// A detected loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    /// Length of the repeating unit, in characters.
    pub period_chars: usize,
    /// Full repetitions in the periodic run so far (`span_chars / period_chars`).
    pub repeats: usize,
    /// Length of the periodic run, in characters: `need(period)` when first met, then growing
    /// while the stream keeps repeating.
    pub span_chars: usize,
    /// Characters of the stream when the rule was first met.
    pub detected_at_chars: u64,
    /// The repeating unit as it first appeared in the run that met the rule, cut to
    /// [`EXCERPT_CHARS`] characters.
    pub excerpt: String,
}

/// Longest excerpt kept in a [`Loop`].
pub const EXCERPT_CHARS: usize = 200;

impl fmt::Display for Loop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "repeats a {}-character unit {} times over {} characters: {:?}",
            self.period_chars, self.repeats, self.span_chars, self.excerpt
        )
    }
}

const REPLACEMENT: u32 = 0xFFFD;

/// One piece of unescaped JSON string contents, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes that stand for themselves (UTF-8, possibly cut at either end).
    Raw(&'a [u8]),
    /// A character written as an escape; U+FFFD for a malformed escape or a lone surrogate.
    Char(u32),
}

/// Where an escape stands between two bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Esc {
    None,
    /// After `\`.
    Backslash,
    /// After `\u` and `digits` hex digits worth `value`.
    Hex {
        digits: u8,
        value: u16,
    },
}

/// Incremental unescaping of JSON string contents fed in arbitrary pieces: constant state, no
/// allocation, constant work per byte (runs without a backslash are found with memchr and
/// handed out whole).
///
/// Valid input gives exactly what a JSON parser gives (surrogate pairs joined). Input no parser
/// would accept is still decoded, never refused: a malformed escape becomes one U+FFFD and the
/// byte that broke it is read afresh; a surrogate without its other half becomes U+FFFD.
#[derive(Clone, Copy, Debug)]
pub struct JsonUnescape {
    esc: Esc,
    /// A leading surrogate waiting for its trailing half (which may come in the next push).
    high: Option<u16>,
}

impl Default for JsonUnescape {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonUnescape {
    pub const fn new() -> Self {
        Self {
            esc: Esc::None,
            high: None,
        }
    }

    /// Unescapes the next bytes, handing the pieces to `emit` in order.
    pub fn feed<'a>(&mut self, input: &'a [u8], mut emit: impl FnMut(Piece<'a>)) {
        let mut i = 0;
        while i < input.len() {
            match self.esc {
                Esc::None => {
                    let run = memchr::memchr(b'\\', &input[i..]).unwrap_or(input.len() - i);
                    if run > 0 {
                        self.lone_high(&mut emit);
                        emit(Piece::Raw(&input[i..i + run]));
                        i += run;
                    }
                    if i < input.len() {
                        self.esc = Esc::Backslash;
                        i += 1;
                    }
                }
                Esc::Backslash => {
                    let c = match input[i] {
                        b'"' => Some(u32::from(b'"')),
                        b'\\' => Some(u32::from(b'\\')),
                        b'/' => Some(u32::from(b'/')),
                        b'b' => Some(0x08),
                        b'f' => Some(0x0C),
                        b'n' => Some(u32::from(b'\n')),
                        b'r' => Some(u32::from(b'\r')),
                        b't' => Some(u32::from(b'\t')),
                        b'u' => None,
                        _ => {
                            // Not an escape: the byte is read again as ordinary text.
                            self.malformed(&mut emit);
                            continue;
                        }
                    };
                    i += 1;
                    match c {
                        Some(c) => {
                            self.lone_high(&mut emit);
                            self.esc = Esc::None;
                            emit(Piece::Char(c));
                        }
                        None => {
                            self.esc = Esc::Hex {
                                digits: 0,
                                value: 0,
                            }
                        }
                    }
                }
                Esc::Hex { digits, value } => {
                    let d = match input[i] {
                        b @ b'0'..=b'9' => b - b'0',
                        b @ b'a'..=b'f' => b - b'a' + 10,
                        b @ b'A'..=b'F' => b - b'A' + 10,
                        _ => {
                            self.malformed(&mut emit);
                            continue;
                        }
                    };
                    i += 1;
                    let value = value << 4 | u16::from(d);
                    if digits < 3 {
                        self.esc = Esc::Hex {
                            digits: digits + 1,
                            value,
                        };
                    } else {
                        self.esc = Esc::None;
                        self.unit(value, &mut emit);
                    }
                }
            }
        }
    }

    /// End of the text: an unfinished escape or a waiting surrogate becomes U+FFFD.
    pub fn finish(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        self.lone_high(&mut emit);
        if self.esc != Esc::None {
            self.esc = Esc::None;
            emit(Piece::Char(REPLACEMENT));
        }
    }

    /// A complete `\uXXXX` code unit.
    fn unit<'a>(&mut self, u: u16, emit: &mut impl FnMut(Piece<'a>)) {
        match (self.high.take(), u) {
            (Some(hi), 0xDC00..=0xDFFF) => {
                let cp = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(u) - 0xDC00);
                emit(Piece::Char(cp));
            }
            (hi, _) => {
                if hi.is_some() {
                    emit(Piece::Char(REPLACEMENT));
                }
                match u {
                    0xD800..=0xDBFF => self.high = Some(u),
                    0xDC00..=0xDFFF => emit(Piece::Char(REPLACEMENT)),
                    _ => emit(Piece::Char(u32::from(u))),
                }
            }
        }
    }

    /// Anything but a trailing surrogate's escape after a leading surrogate orphans it.
    #[inline]
    fn lone_high<'a>(&mut self, emit: &mut impl FnMut(Piece<'a>)) {
        if self.high.take().is_some() {
            emit(Piece::Char(REPLACEMENT));
        }
    }

    fn malformed<'a>(&mut self, emit: &mut impl FnMut(Piece<'a>)) {
        self.lone_high(emit);
        self.esc = Esc::None;
        emit(Piece::Char(REPLACEMENT));
    }
}

/// Incremental UTF-8 decoding state (the WHATWG decoder: maximal-subpart replacement).
#[derive(Clone, Copy, Debug)]
struct Utf8 {
    cp: u32,
    needed: u8,
    lower: u8,
    upper: u8,
}

impl Utf8 {
    const fn new() -> Self {
        Self {
            cp: 0,
            needed: 0,
            lower: 0x80,
            upper: 0xBF,
        }
    }
}

/// After a loop is flagged: the flagged run being followed.
#[derive(Clone, Copy, Debug)]
struct Track {
    period: usize,
    alive: bool,
}

/// The online detector. Create one per stream and channel; feed it with [`push`], ask
/// [`verdict`], call [`finish`] at the end of the stream.
///
/// [`push`]: RepetitionDetector::push
/// [`verdict`]: RepetitionDetector::verdict
/// [`finish`]: RepetitionDetector::finish
#[derive(Clone, Debug)]
pub struct RepetitionDetector {
    cfg: RepetitionConfig,
    /// Check interval `K`.
    interval: usize,
    /// `need(max_period)`, the longest tail the rule can ask for.
    need_max: usize,
    /// Characters kept after a compaction.
    keep: usize,
    /// Length of the recurrence probe (see `probe_recurs`).
    probe_len: usize,
    /// Window of characters; `buf[0]` is character number `base` of the stream.
    buf: Vec<u32>,
    base: u64,
    /// Characters seen.
    consumed: u64,
    /// Stream position of the previous check.
    last_check: u64,
    since_check: usize,
    utf8: Utf8,
    /// Escape state of [`RepetitionDetector::push_json`] between pushes.
    json: JsonUnescape,
    /// Scratch for the prefix function and the reversed block (capacity `need_max` once used).
    prefix: Vec<u32>,
    reversed: Vec<u32>,
    /// Scratch for candidate periods.
    candidates: Vec<usize>,
    verdict: Option<Loop>,
    track: Option<Track>,
    finished: bool,
}

impl RepetitionDetector {
    /// A detector for `cfg`, or the reason the thresholds cannot work.
    pub fn new(cfg: RepetitionConfig) -> Result<Self, RepetitionConfigError> {
        let interval = cfg.check_interval()?;
        let need_max = cfg.need(cfg.max_period);
        let keep = need_max + interval + 1;
        // probe_len <= need(p) - K - p for every p; that bound is >= p >= 1 by the choice of K.
        let probe_len = (1..=cfg.max_period)
            .map(|p| cfg.need(p) - interval - p)
            .min()
            .unwrap_or(1)
            .clamp(1, 32);
        Ok(Self {
            cfg,
            interval,
            need_max,
            keep,
            probe_len,
            buf: Vec::with_capacity(2 * keep),
            base: 0,
            consumed: 0,
            last_check: 0,
            since_check: 0,
            utf8: Utf8::new(),
            json: JsonUnescape::new(),
            // Only suspicious text needs these: allocated on the first full check.
            prefix: Vec::new(),
            reversed: Vec::new(),
            candidates: Vec::with_capacity(64),
            verdict: None,
            track: None,
            finished: false,
        })
    }

    /// Ready for a new stream, keeping the buffers (a closed loop restarts streams constantly).
    pub fn reset(&mut self) {
        self.buf.clear();
        self.base = 0;
        self.consumed = 0;
        self.last_check = 0;
        self.since_check = 0;
        self.utf8 = Utf8::new();
        self.json = JsonUnescape::new();
        self.verdict = None;
        self.track = None;
        self.finished = false;
    }

    pub fn config(&self) -> &RepetitionConfig {
        &self.cfg
    }

    /// The check interval `K` in characters: the most a verdict can lag the text.
    pub fn check_interval(&self) -> usize {
        self.interval
    }

    /// Characters seen so far.
    pub fn chars(&self) -> u64 {
        self.consumed
    }

    /// The loop found so far, if any. Once `Some` it stays `Some`.
    pub fn verdict(&self) -> Option<&Loop> {
        self.verdict.as_ref()
    }

    pub fn is_looping(&self) -> bool {
        self.verdict.is_some()
    }

    /// Feed the next bytes of decoded text (any split, UTF-8 sequences may be cut).
    pub fn push(&mut self, text: &[u8]) {
        let mut i = 0;
        while i < text.len() {
            if self.finished {
                return;
            }
            if self.utf8.needed == 0 && self.track.is_none() {
                let n = self.push_ascii_run(&text[i..]);
                if n > 0 {
                    i += n;
                    continue;
                }
            }
            let b = text[i];
            let u = &mut self.utf8;
            if u.needed == 0 {
                i += 1;
                if b < 0x80 {
                    self.on_char(u32::from(b));
                    continue;
                }
                let (needed, bits, lower, upper) = match b {
                    0xC2..=0xDF => (1, b & 0x1F, 0x80, 0xBF),
                    0xE0 => (2, b & 0x0F, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE | 0xEF => (2, b & 0x0F, 0x80, 0xBF),
                    0xED => (2, b & 0x0F, 0x80, 0x9F),
                    0xF0 => (3, b & 0x07, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, b & 0x07, 0x80, 0xBF),
                    0xF4 => (3, b & 0x07, 0x80, 0x8F),
                    _ => {
                        self.on_char(REPLACEMENT);
                        continue;
                    }
                };
                *u = Utf8 {
                    cp: u32::from(bits),
                    needed,
                    lower,
                    upper,
                };
            } else if (u.lower..=u.upper).contains(&b) {
                i += 1;
                u.cp = (u.cp << 6) | u32::from(b & 0x3F);
                u.needed -= 1;
                u.lower = 0x80;
                u.upper = 0xBF;
                if u.needed == 0 {
                    let cp = u.cp;
                    self.on_char(cp);
                }
            } else {
                // The sequence broke: one replacement for it, then read `b` afresh.
                *u = Utf8::new();
                self.on_char(REPLACEMENT);
            }
        }
    }

    /// Feed the next bytes of JSON string contents as they appear between the quotes (escapes
    /// intact, cut anywhere): they are unescaped first, so `\n` counts as one (whitespace)
    /// character and `\u4e2d` as one CJK character. Don't mix with [`push`] on one stream.
    ///
    /// [`push`]: RepetitionDetector::push
    pub fn push_json(&mut self, escaped: &[u8]) {
        let mut json = self.json;
        json.feed(escaped, |piece| self.on_piece(piece));
        self.json = json;
    }

    fn on_piece(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Raw(bytes) => self.push(bytes),
            Piece::Char(c) => {
                if self.finished {
                    return;
                }
                // An escape can't continue a UTF-8 sequence: one cut before it is invalid.
                if self.utf8.needed != 0 {
                    self.utf8 = Utf8::new();
                    self.on_char(REPLACEMENT);
                    if self.finished {
                        return;
                    }
                }
                self.on_char(c);
            }
        }
    }

    /// End of stream: a cut-off UTF-8 sequence or escape counts as U+FFFD, and the last check
    /// runs so the verdict covers every character. Later pushes are ignored.
    pub fn finish(&mut self) -> Option<&Loop> {
        if !self.finished {
            let mut json = self.json;
            json.finish(|piece| self.on_piece(piece));
            self.json = json;
            if self.finished {
                return self.verdict.as_ref();
            }
            if self.utf8.needed != 0 {
                self.utf8 = Utf8::new();
                self.on_char(REPLACEMENT);
            }
            if self.track.is_none() && self.consumed > self.last_check {
                self.check();
            }
            self.finished = true;
        }
        self.verdict.as_ref()
    }

    /// The fast path for the common case: widens a run of ASCII bytes into the window in one
    /// go, stopping at the next check or compaction. Returns the bytes consumed.
    #[inline]
    fn push_ascii_run(&mut self, text: &[u8]) -> usize {
        let mut done = 0;
        loop {
            if self.buf.len() == self.buf.capacity() {
                self.compact();
            }
            let room = (self.interval - self.since_check).min(self.buf.capacity() - self.buf.len());
            let rest = &text[done..];
            let limit = rest.len().min(room);
            let run = rest[..limit]
                .iter()
                .position(|&b| b >= 0x80)
                .unwrap_or(limit);
            if run == 0 {
                return done;
            }
            self.buf.extend(rest[..run].iter().map(|&b| u32::from(b)));
            self.consumed += run as u64;
            self.since_check += run;
            done += run;
            if self.since_check == self.interval {
                self.check();
                if self.track.is_some() {
                    return done;
                }
            }
            if run < limit || done == text.len() {
                return done;
            }
        }
    }

    #[inline]
    fn on_char(&mut self, c: u32) {
        if self.buf.len() == self.buf.capacity() {
            self.compact();
        }
        self.buf.push(c);
        self.consumed += 1;
        if let Some(track) = &mut self.track {
            let len = self.buf.len();
            if self.buf[len - 1] == self.buf[len - 1 - track.period] {
                if let Some(v) = &mut self.verdict {
                    v.span_chars += 1;
                    v.repeats = v.span_chars / v.period_chars;
                }
            } else {
                track.alive = false;
                // Nothing can change any more.
                self.finished = true;
            }
            return;
        }
        self.since_check += 1;
        if self.since_check == self.interval {
            self.check();
        }
    }

    /// Keeps the last `keep` characters: enough for the next check and for tracking.
    fn compact(&mut self) {
        let len = self.buf.len();
        let drop = len.saturating_sub(self.keep);
        if drop == 0 {
            // Only when capacity < keep, which `new` rules out; grow rather than lose data.
            self.buf.reserve(self.keep);
            return;
        }
        self.buf.copy_within(drop.., 0);
        self.buf.truncate(len - drop);
        self.base += drop as u64;
    }

    /// Index in `buf` of stream position `pos` (which must still be in the window).
    #[inline]
    fn idx(&self, pos: u64) -> usize {
        debug_assert!(
            pos >= self.base,
            "position {pos} left the window at {}",
            self.base
        );
        (pos - self.base) as usize
    }

    /// Looks for a first rule match in `(last_check, consumed]` (see the module doc).
    fn check(&mut self) {
        let last = self.last_check;
        let c = self.consumed;
        self.last_check = c;
        self.since_check = 0;
        let k = self.interval;
        let j_min = self.cfg.need(1) - k;
        let j_max = ((self.need_max - k) as u64).min(last) as usize;
        if j_max < j_min || !self.probe_recurs(last) {
            return;
        }
        self.collect_candidates(last, j_min, j_max);
        let mut best: Option<(u64, usize, Run)> = None;
        for ci in 0..self.candidates.len() {
            let q = self.candidates[ci];
            if let Some(run) = self.scan(q, last, c) {
                let better = match &best {
                    None => true,
                    Some((n, bq, _)) => (run.first, q) < (*n, *bq),
                };
                if better {
                    best = Some((run.first, q, run));
                }
            }
        }
        if let Some((n0, q, run)) = best {
            let start = self.idx(n0 - self.cfg.need(q) as u64);
            let excerpt: String = self.buf[start..start + q.min(EXCERPT_CHARS)]
                .iter()
                .map(|&u| char::from_u32(u).unwrap_or('\u{FFFD}'))
                .collect();
            self.verdict = Some(Loop {
                period_chars: q,
                repeats: run.span / q,
                span_chars: run.span,
                detected_at_chars: n0,
                excerpt,
            });
            self.track = Some(Track {
                period: q,
                alive: run.alive,
            });
            if !run.alive {
                self.finished = true;
            }
        }
    }

    /// A necessary condition for any candidate, cheap enough to run on every check: the last
    /// `probe_len` characters before `last` occur again `p <= max_period` characters earlier.
    /// (If `p` matched since `last`, `B_{j_p}` is `p`-periodic and `probe_len <= j_p - p`.)
    /// Varied prose fails it at once, so the prefix-function pass runs only on suspicious text.
    fn probe_recurs(&self, last: u64) -> bool {
        let l = self.probe_len;
        let e = self.idx(last);
        let probe = &self.buf[e - l..e];
        let tail = probe[l - 1];
        let max_p = self.cfg.max_period.min(e - l);
        // `ends[k]` is the character `p = max_p - k` places before the probe's last one.
        let ends = &self.buf[e - 1 - max_p..e - 1];
        ends.iter().enumerate().any(|(k, &u)| {
            let p = max_p - k;
            u == tail && self.buf[e - l - p..e - p] == *probe
        })
    }

    /// Smallest periods of the blocks `t[last - j, last)` for `j` in `[j_min, j_max]` that are
    /// at least doubled (`2q <= j`) and within `max_period`, deduplicated, ascending.
    fn collect_candidates(&mut self, last: u64, j_min: usize, j_max: usize) {
        self.candidates.clear();
        let end = self.idx(last);
        // Reversed copy: a prefix of `r` of length j is B_j reversed, and a string and its
        // reverse have the same periods.
        let r = &mut self.reversed;
        r.clear();
        r.reserve_exact(self.need_max);
        self.prefix.reserve_exact(self.need_max);
        r.extend(self.buf[end - j_max..end].iter().rev());
        let pi = &mut self.prefix;
        pi.clear();
        pi.push(0);
        let mut kk = 0usize;
        for &ri in &r[1..] {
            while kk > 0 && r[kk] != ri {
                kk = pi[kk - 1] as usize;
            }
            if r[kk] == ri {
                kk += 1;
            }
            pi.push(kk as u32);
        }
        for j in j_min..=j_max {
            let q = j - pi[j - 1] as usize;
            if 2 * q <= j && q <= self.cfg.max_period && self.candidates.last() != Some(&q) {
                self.candidates.push(q);
            }
        }
    }

    /// The first position in `(last, c]` where the `q`-periodic run reaches `need(q)` with a
    /// non-whitespace period, and how that run stands at `c`.
    fn scan(&self, q: usize, last: u64, c: u64) -> Option<Run> {
        let need = self.cfg.need(q);
        let threshold = (need - q) as u64;
        // Runs that start before `i0` reached the threshold at or before `last`.
        let i0 = (q as u64).max((last + 1 + q as u64).saturating_sub(need as u64));
        if i0 >= c {
            return None;
        }
        let lo = self.idx(i0 - q as u64);
        let w = &self.buf[lo..self.idx(c)];
        let mut m = 0u64;
        let mut found: Option<u64> = None;
        // w[k + q] is character i0 + k, w[k] the one a period earlier.
        for (k, (a, b)) in w[q..].iter().zip(w).enumerate() {
            if a == b {
                m += 1;
                if found.is_none() && m == threshold {
                    // The period ending at n = i0 + k + 1 is w[k + 1..k + 1 + q].
                    let blank = w[k + 1..k + 1 + q]
                        .iter()
                        .all(|&u| char::from_u32(u).is_some_and(char::is_whitespace));
                    if !blank {
                        found = Some(i0 + k as u64 + 1);
                    }
                }
            } else {
                if let Some(n) = found {
                    let i = i0 + k as u64;
                    return Some(Run {
                        first: n,
                        span: need + (i - n) as usize,
                        alive: false,
                    });
                }
                m = 0;
            }
        }
        found.map(|n| Run {
            first: n,
            span: need + (c - n) as usize,
            alive: true,
        })
    }
}

/// A verified run: first position where it met the rule and its span at the end of the scan.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: u64,
    span: usize,
    alive: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(min_repeats: usize, min_span: usize, max_period: usize) -> RepetitionConfig {
        RepetitionConfig {
            min_repeats,
            min_span,
            max_period,
        }
    }

    /// The naive twin: at every length `n`, every period, straight from the rule's wording.
    /// Returns the verdict on the whole text, with the run followed to its end.
    fn naive(text: &str, cfg: &RepetitionConfig) -> Option<Loop> {
        let t: Vec<char> = text.chars().collect();
        for n in 1..=t.len() {
            for p in 1..=cfg.max_period.min(n) {
                let need = cfg.need(p);
                if need > n {
                    continue;
                }
                let tail = &t[n - need..n];
                let periodic = tail[p..] == tail[..need - p];
                let blank = t[n - p..n].iter().all(|c| c.is_whitespace());
                if periodic && !blank {
                    let mut e = n;
                    while e < t.len() && t[e] == t[e - p] {
                        e += 1;
                    }
                    let span = need + (e - n);
                    return Some(Loop {
                        period_chars: p,
                        repeats: span / p,
                        span_chars: span,
                        detected_at_chars: n as u64,
                        excerpt: t[n - need..n - need + p.min(EXCERPT_CHARS)]
                            .iter()
                            .collect(),
                    });
                }
            }
        }
        None
    }

    fn run_fast(text: &[u8], splits: &[usize], cfg: RepetitionConfig) -> Option<Loop> {
        let mut d = RepetitionDetector::new(cfg).expect("valid config");
        let mut at = 0;
        for &s in splits {
            let s = s.min(text.len());
            if s > at {
                d.push(&text[at..s]);
                at = s;
            }
        }
        d.push(&text[at..]);
        d.finish().cloned()
    }

    /// JSON string contents for `text`, escaped the ways servers do, chosen per character by
    /// `seed`: raw UTF-8, short escapes, `\uXXXX` (surrogate pairs above the BMP, hex digits in
    /// either case) — what `json.dumps` with and without `ensure_ascii` and serde_json write.
    fn escape_json(text: &str, seed: u64) -> Vec<u8> {
        let mut rng = seed | 1;
        let mut out = Vec::new();
        for c in text.chars() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let short = match c {
                '"' => Some(b'"'),
                '\\' => Some(b'\\'),
                '\n' => Some(b'n'),
                '\r' => Some(b'r'),
                '\t' => Some(b't'),
                '\u{8}' => Some(b'b'),
                '\u{c}' => Some(b'f'),
                '/' if rng % 2 == 0 => Some(b'/'),
                _ => None,
            };
            let must = (c as u32) < 0x20 || c == '"' || c == '\\';
            if let (Some(e), true) = (short, must || rng % 3 == 0) {
                out.extend([b'\\', e]);
            } else if must || rng % 3 == 1 {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let hex = if rng % 5 == 0 {
                        format!("\\u{:04X}", u)
                    } else {
                        format!("\\u{:04x}", u)
                    };
                    out.extend(hex.bytes());
                }
            } else {
                let mut b = [0u8; 4];
                out.extend(c.encode_utf8(&mut b).bytes());
            }
        }
        out
    }

    /// Unescaper output, cut at `splits`, as the pieces joined into one list of characters
    /// (raw pieces decoded as one UTF-8 stream, lossily).
    fn unescape_pieces(bytes: &[u8], splits: &[usize]) -> Vec<char> {
        let mut u = JsonUnescape::new();
        let mut raw: Vec<u8> = Vec::new();
        let mut chars = Vec::new();
        let flush = |raw: &mut Vec<u8>, chars: &mut Vec<char>| {
            chars.extend(String::from_utf8_lossy(raw).chars());
            raw.clear();
        };
        let on = |p: Piece<'_>, raw: &mut Vec<u8>, chars: &mut Vec<char>| match p {
            Piece::Raw(b) => raw.extend_from_slice(b),
            Piece::Char(c) => {
                flush(raw, chars);
                chars.push(char::from_u32(c).expect("a scalar value"));
            }
        };
        let mut cuts: Vec<usize> = splits.iter().map(|&s| s.min(bytes.len())).collect();
        cuts.sort_unstable();
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            u.feed(&bytes[at..c], |p| on(p, &mut raw, &mut chars));
            at = c;
        }
        u.finish(|p| on(p, &mut raw, &mut chars));
        flush(&mut raw, &mut chars);
        chars
    }

    fn unescape_split(bytes: &[u8], splits: &[usize]) -> String {
        unescape_pieces(bytes, splits).into_iter().collect()
    }

    #[test]
    fn unescape_examples() {
        let u = |s: &str| unescape_split(s.as_bytes(), &[]);
        assert_eq!(u(r"a\nb"), "a\nb");
        assert_eq!(u(r"\u4e2d\u6587"), "中文");
        assert_eq!(u(r"\ud83d\ude00!"), "😀!");
        assert_eq!(u(r#"\"\\\/\b\f\r\t"#), "\"\\/\u{8}\u{c}\r\t");
        // Malformed: one U+FFFD per broken escape, the breaking byte read afresh.
        assert_eq!(u(r"\x"), "\u{FFFD}x");
        assert_eq!(u(r"\u12g4"), "\u{FFFD}g4");
        assert_eq!(u(r"\ud800x"), "\u{FFFD}x");
        assert_eq!(u(r"\udc00"), "\u{FFFD}");
        assert_eq!(u(r"\ud800\u0041"), "\u{FFFD}A");
        assert_eq!(u(r"\ud800\n"), "\u{FFFD}\n");
        assert_eq!(u(r"ab\u00"), "ab\u{FFFD}");
        assert_eq!(u(r"\"), "\u{FFFD}");
        // A surrogate pair cut between two events, and every other cut point.
        let pair = br"x\ud83d\ude00y";
        for cut in 0..=pair.len() {
            assert_eq!(unescape_split(pair, &[cut]), "x😀y", "cut at {cut}");
        }
    }

    #[test]
    fn escaped_blank_lines_are_whitespace_not_a_loop() {
        // 3000 blank lines as a server sends them: `\n` is two bytes on the wire. Read as raw
        // bytes that is a 2-character non-blank period (the old behaviour: a false loop);
        // unescaped it is whitespace, which the rule ignores.
        let cfg = RepetitionConfig::default();
        let wire = r"\n".repeat(3000);
        let mut raw = RepetitionDetector::new(cfg).expect("valid");
        raw.push(wire.as_bytes());
        assert_eq!(raw.finish().map(|l| l.period_chars), Some(2));
        let mut json = RepetitionDetector::new(cfg).expect("valid");
        for piece in wire.as_bytes().chunks(3) {
            json.push_json(piece);
        }
        assert_eq!(json.finish(), None);
        assert_eq!(json.chars(), 3000);
    }

    #[test]
    fn escaped_cjk_counts_one_character_per_ideograph() {
        // A 10-ideograph unit repeated, sent as \uXXXX escapes (6 bytes per character): the
        // thresholds (4096 characters) must be met by characters, not by escape bytes.
        let cfg = RepetitionConfig::default();
        let unit: String = "天地玄黄宇宙洪荒日月".to_string();
        let wire: String = unit
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect::<String>();
        let mut d = RepetitionDetector::new(cfg).expect("valid");
        // 400 repeats = 4000 characters: below min_span, no loop yet (24000 escape bytes).
        for _ in 0..400 {
            d.push_json(wire.as_bytes());
        }
        assert!(d.verdict().is_none());
        assert_eq!(d.chars(), 4000);
        for _ in 0..100 {
            d.push_json(wire.as_bytes());
        }
        let l = d.finish().expect("a loop").clone();
        assert_eq!(l.period_chars, 10);
        assert_eq!(l.detected_at_chars, 4096);
        assert_eq!(l.excerpt, unit);
    }

    #[test]
    fn push_json_keeps_its_window_buffer() {
        let mut d = RepetitionDetector::new(RepetitionConfig::default()).expect("valid");
        let cap = d.buf.capacity();
        let text = prose(3, 100_000);
        let wire = escape_json(&text, 99);
        for piece in wire.chunks(5) {
            d.push_json(piece);
        }
        assert_eq!(d.chars(), text.chars().count() as u64);
        assert!(d.finish().is_none());
        assert_eq!(d.buf.capacity(), cap);
    }

    #[track_caller]
    fn check(text: &str, cfg: RepetitionConfig, want_period: Option<usize>) {
        let got = run_fast(text.as_bytes(), &[], cfg);
        assert_eq!(got.as_ref().map(|l| l.period_chars), want_period, "{got:?}");
        assert_eq!(got, naive(text, &cfg));
    }

    const PROSE: &[&str] = &[
        "The",
        "model",
        "answered",
        "with",
        "a",
        "long",
        "and",
        "careful",
        "explanation",
        "of",
        "how",
        "caches",
        "work,",
        "then",
        "moved",
        "on",
        "to",
        "examples.",
        "Each",
        "section",
        "covered",
        "latency",
        "throughput",
        "memory",
        "and",
        "scheduling",
        "in",
        "turn;",
        "café",
        "naïve",
        "日本語",
        "の",
        "説明",
        "🙂",
        "über",
        "façade",
        "x",
        "I",
        "will",
        "now",
        "repeat.",
    ];

    /// Varied prose from a seeded generator (no repeated tail long enough to matter).
    fn prose(seed: u64, chars: usize) -> String {
        let mut s = String::new();
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut count = 0;
        while count < chars {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let w = PROSE[(x % PROSE.len() as u64) as usize];
            s.push_str(w);
            s.push(if x % 11 == 0 { '\n' } else { ' ' });
            count += w.chars().count() + 1;
        }
        s
    }

    #[test]
    fn looped_answer_is_flagged_with_its_period() {
        let text = format!(
            "Sure, here is the article you asked for.\n{}",
            "I will now repeat. ".repeat(300)
        );
        let cfg = RepetitionConfig::default();
        let got = run_fast(text.as_bytes(), &[7, 300, 5000], cfg).expect("a loop");
        assert_eq!(got.period_chars, 19);
        // The run covers the 300 copies (5700 characters) plus the characters of the prefix
        // that happen to continue it backwards: none here ('\n' != ' ').
        assert_eq!(got.span_chars, 19 * 300);
        assert_eq!(got.repeats, 300);
        assert_eq!(got.excerpt.chars().count(), 19);
        assert_eq!(got.excerpt, "I will now repeat. ");
        assert_eq!(Some(got), naive(&text, &cfg));
    }

    #[test]
    fn varied_prose_does_not_trigger() {
        check(&prose(1, 20_000), RepetitionConfig::default(), None);
        check(&prose(2, 3_000), cfg(4, 256, 64), None);
    }

    #[test]
    fn loop_shorter_than_the_span_does_not_trigger() {
        // 100 repeats of a 19-character unit = 1900 characters < 4096.
        let text = format!("{}{}", prose(3, 500), "I will now repeat. ".repeat(100));
        check(&text, RepetitionConfig::default(), None);
        // Enough characters but too few repeats: a 1500-character unit three times.
        let unit = prose(4, 1500);
        let unit: String = unit.chars().take(1500).collect();
        check(&unit.repeat(3), RepetitionConfig::default(), None);
        // The same unit four times is a loop (6000 characters >= max(4096, 4 * 1500)).
        check(&unit.repeat(4), RepetitionConfig::default(), Some(1500));
    }

    #[test]
    fn whitespace_only_period_is_ignored() {
        // The naive twin is cubic on long blank runs, so it checks a scaled-down rule; the
        // default rule is checked on the fast detector alone.
        for blank in [" \n\t".repeat(3000), " ".repeat(9000)] {
            let text = format!("{}{}", prose(5, 200), blank);
            assert_eq!(
                run_fast(text.as_bytes(), &[3], RepetitionConfig::default()),
                None
            );
            let short = format!("{}{}", prose(5, 200), &blank[..600]);
            check(&short, cfg(4, 128, 32), None);
        }
        // Blank runs between non-blank copies do not hide a loop.
        check(&"ab \n   ".repeat(100), cfg(4, 128, 32), Some(7));
    }

    #[test]
    fn characters_not_bytes() {
        // 3-byte characters: 1400 characters of a 2-character unit is 4200 bytes but below the
        // 4096-character span; 2100 such units (4200 characters) loop.
        check(&"日本".repeat(1400), RepetitionConfig::default(), None);
        let got = run_fast(
            "日本".repeat(2100).as_bytes(),
            &[1, 2, 4, 5],
            Default::default(),
        );
        assert_eq!(
            got.map(|l| (l.period_chars, l.detected_at_chars)),
            Some((2, 4096))
        );
    }

    #[test]
    fn verdict_appears_within_one_interval_and_then_stays() {
        let cfg = RepetitionConfig::default();
        let mut d = RepetitionDetector::new(cfg).expect("valid");
        d.push(prose(6, 1000).as_bytes());
        let unit = "All work and no play makes a dull model. ";
        let mut pushed = 0;
        while !d.is_looping() {
            d.push(unit.as_bytes());
            pushed += unit.len();
            assert!(
                pushed < 4096 + 1000 + d.check_interval() + unit.len(),
                "too late"
            );
        }
        let at = d.verdict().map(|l| l.detected_at_chars);
        d.push(b"something else entirely");
        d.push(prose(7, 5000).as_bytes());
        let v = d.finish().expect("still flagged");
        assert_eq!(Some(v.detected_at_chars), at);
        assert_eq!(v.period_chars, unit.len());
    }

    #[test]
    fn a_run_that_broke_before_the_check_stops_growing() {
        // K = 8 for this rule; the 2-periodic run meets need = 16 at character 19, breaks at
        // the 'c' (character 20), and the check at 24 finds it already over. The "ab" after the
        // 'c' must not extend it, whether it arrives in the same push or later.
        let c = cfg(3, 16, 4);
        assert_eq!(c.check_interval(), Ok(8));
        let text = format!("xyz{}c{}", "ab".repeat(8), "ab".repeat(10));
        for splits in [vec![], vec![24], vec![20, 25, 26]] {
            let got = run_fast(text.as_bytes(), &splits, c).expect("a loop");
            assert_eq!(
                (got.period_chars, got.span_chars, got.detected_at_chars),
                (2, 16, 19)
            );
            assert_eq!(Some(got), naive(&text, &c));
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_like_from_utf8_lossy() {
        let mut bytes = Vec::new();
        for _ in 0..300 {
            bytes.extend_from_slice(b"ab\xE6\x97cd\xFF\xF0\x9F\x99");
        }
        let lossy = String::from_utf8_lossy(&bytes).into_owned();
        let c = cfg(3, 64, 16);
        let got = run_fast(&bytes, &[1, 3, 4, 9, 10, 11], c);
        assert_eq!(got, naive(&lossy, &c));
        assert!(got.is_some());
        let mut d = RepetitionDetector::new(c).expect("valid");
        d.push(&bytes);
        d.finish();
        assert_eq!(d.chars(), lossy.chars().count() as u64);
    }

    #[test]
    fn bad_configs_are_refused() {
        assert_eq!(
            RepetitionDetector::new(cfg(2, 4096, 2048)).err(),
            Some(RepetitionConfigError::TooFewRepeats(2))
        );
        assert_eq!(
            RepetitionDetector::new(cfg(4, 0, 10)).err(),
            Some(RepetitionConfigError::Zero)
        );
        assert_eq!(
            RepetitionDetector::new(cfg(4, 10, MAX_NEED)).err(),
            Some(RepetitionConfigError::TooLarge)
        );
        assert_eq!(RepetitionConfig::default().check_interval(), Ok(2048));
    }

    #[test]
    fn reset_starts_a_fresh_stream() {
        let c = cfg(3, 64, 16);
        let mut d = RepetitionDetector::new(c).expect("valid");
        d.push("loop ".repeat(100).as_bytes());
        assert!(d.finish().is_some());
        d.reset();
        assert!(d.verdict().is_none());
        let text = format!("{}{}", prose(9, 300), "xyz!".repeat(40));
        d.push(text.as_bytes());
        assert_eq!(d.finish().cloned(), naive(&text, &c));
        assert_eq!(d.chars(), text.chars().count() as u64);
    }

    #[test]
    fn memory_stays_bounded_on_a_long_stream() {
        let mut d = RepetitionDetector::new(RepetitionConfig::default()).expect("valid");
        let cap = d.buf.capacity();
        let text = prose(8, 200_000);
        for piece in text.as_bytes().chunks(7) {
            d.push(piece);
        }
        assert!(d.finish().is_none());
        assert_eq!(d.buf.capacity(), cap);
        assert!(d.prefix.capacity() <= d.need_max && d.reversed.capacity() <= d.need_max);
    }

    /// A text that may hold a loop: prose, then `copies` of a unit (optionally whitespace), then
    /// maybe more prose.
    fn planted() -> impl Strategy<Value = String> {
        (
            0u64..1000,
            0usize..400,
            prop_oneof![
                (0u64..1000, 1usize..80).prop_map(|(s, n)| prose(s, n).chars().take(n).collect()),
                "[ab ]{1,12}",
                "[ \n\t]{1,4}",
                "[a-c日]{1,40}",
            ],
            1usize..120,
            proptest::option::of((0u64..1000, 1usize..300)),
        )
            .prop_map(
                |(seed, pre, unit, copies, post): (u64, usize, String, usize, _)| {
                    let mut s: String = prose(seed, pre).chars().take(pre).collect();
                    s.push_str(&unit.repeat(copies));
                    if let Some((seed, n)) = post {
                        s.push_str(&prose(seed, n));
                    }
                    s
                },
            )
    }

    fn texts() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => planted(),
            1 => "[ab]{0,1500}",
            1 => "(ab|aba|b|abab |ba){0,400}",
            1 => (0u64..1000, 0usize..1500).prop_map(|(s, n)| prose(s, n)),
        ]
    }

    fn configs() -> impl Strategy<Value = RepetitionConfig> {
        (3usize..7, 16usize..256, 1usize..96).prop_map(|(r, s, p)| cfg(r, s, p))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn fast_matches_naive(
            text in texts(),
            cfg in configs(),
            splits in proptest::collection::vec(0usize..4000, 0..40),
        ) {
            let mut splits = splits;
            splits.sort_unstable();
            let want = naive(&text, &cfg);
            let got = run_fast(text.as_bytes(), &splits, cfg);
            prop_assert_eq!(got, want);
        }

        #[test]
        fn verdict_mid_stream_is_exact_and_never_early(
            text in planted(),
            cfg in configs(),
            piece in 1usize..30,
        ) {
            let want = naive(&text, &cfg);
            let mut d = RepetitionDetector::new(cfg).expect("valid");
            let bytes = text.as_bytes();
            for chunk in bytes.chunks(piece) {
                d.push(chunk);
                let n = d.chars();
                match (d.verdict(), &want) {
                    (Some(v), Some(w)) => {
                        prop_assert_eq!(v.period_chars, w.period_chars);
                        prop_assert_eq!(v.detected_at_chars, w.detected_at_chars);
                        let grown = (w.span_chars as u64).min(
                            cfg.need(w.period_chars) as u64 + n - w.detected_at_chars);
                        prop_assert_eq!(v.span_chars as u64, grown);
                    }
                    (Some(v), None) => prop_assert!(false, "flagged {v:?}, naive says no loop"),
                    (None, Some(w)) => prop_assert!(
                        n < w.detected_at_chars + d.check_interval() as u64,
                        "not flagged {} characters after {w:?}", n - w.detected_at_chars.min(n)),
                    (None, None) => {}
                }
            }
        }

        /// The naive twin of the unescaper is serde_json: any valid JSON string, escaped any
        /// way a server may choose and cut anywhere, unescapes to what serde_json reads.
        #[test]
        fn unescape_matches_serde_json(
            text in texts(),
            escape_seed in any::<u64>(),
            splits in proptest::collection::vec(0usize..4000, 0..8),
        ) {
            let escaped = escape_json(&text, escape_seed);
            let want: String = serde_json::from_slice(&[b"\"", &escaped[..], b"\""].concat())
                .expect("valid JSON string");
            prop_assert_eq!(&want, &text);
            prop_assert_eq!(unescape_split(&escaped, &splits), want);
        }

        /// The detector fed escaped text in pieces reaches the verdict of the decoded text.
        #[test]
        fn push_json_matches_the_naive_rule_on_decoded_text(
            text in texts(),
            cfg in configs(),
            escape_seed in any::<u64>(),
            piece in 1usize..40,
        ) {
            let escaped = escape_json(&text, escape_seed);
            let mut d = RepetitionDetector::new(cfg).expect("valid");
            for chunk in escaped.chunks(piece) {
                d.push_json(chunk);
            }
            let got = d.finish().cloned();
            // Characters, not escape bytes (a broken loop stops the count; nothing changes then).
            if got.is_none() {
                prop_assert_eq!(d.chars(), text.chars().count() as u64);
            }
            prop_assert_eq!(got, naive(&text, &cfg));
        }

        /// Anything at all (bad escapes, lone surrogates, invalid UTF-8): no panic, and the
        /// same characters however it is cut.
        #[test]
        fn unescape_any_bytes_is_split_independent(
            bytes in proptest::collection::vec(
                prop_oneof![any::<u8>(), Just(b'\\'), Just(b'u'), Just(b'd'), Just(b'8')], 0..400),
            splits in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let whole = unescape_pieces(&bytes, &[]);
            prop_assert_eq!(unescape_pieces(&bytes, &splits), whole);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..3000),
            cfg in configs(),
        ) {
            let lossy = String::from_utf8_lossy(&bytes).into_owned();
            let got = run_fast(&bytes, &[bytes.len() / 3, bytes.len() / 2], cfg);
            prop_assert_eq!(got, naive(&lossy, &cfg));
        }
    }
}
