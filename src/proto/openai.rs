//! Decodes one SSE `data` payload of an OpenAI-compatible stream (vLLM, SGLang, TGI, llama.cpp,
//! Ollama) into the few facts the timeline needs: output text per channel, tool calls, finish
//! reason, token counts (`usage`, `token_ids`, llama.cpp `timings`), the server's own timing of
//! the request (vLLM's `metrics`, on the final usage chunk), `[DONE]` and error events.
//!
//! It runs once per event on the read loop, so it must never allocate, build a JSON tree or
//! deserialise whole chunks: it walks the bytes once with [`super::json::Scanner`], reads the
//! keys it knows and skips the rest. Text stays borrowed and escaped until a caller that keeps
//! text asks for it ([`Text::unescape_into`]). Malformed JSON is an error, never a guess.
//!
//! The input is one complete SSE `data` payload (the SSE parser has already framed it), so unlike
//! the framing parsers there is no "need more bytes" state: a truncated payload is an error.
//! Servers never repeat a key; if one does, the later value wins for scalar fields.

use super::json::{self, JsonError, Kind, Scanner, Str};
use crate::timeline::{ServerTiming, Usage};
use std::fmt;

/// What one `data` payload meant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamItem<'a> {
    /// `data: [DONE]`: the server ended the stream.
    Done,
    Chunk(ChunkInfo<'a>),
    /// An error event (sent with HTTP 200 after streaming began, or as an error body).
    Error(ServerError<'a>),
}

/// A JSON string from the payload, still escaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Text<'a> {
    /// The bytes between the quotes.
    pub raw: &'a [u8],
    pub has_escapes: bool,
}

impl Text<'_> {
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Appends the unescaped text to `out` (`\uXXXX` escapes, surrogate pairs included). On error
    /// `out` is left as it was.
    pub fn unescape_into(&self, out: &mut String) -> Result<(), OpenAiError> {
        let len = out.len();
        let mut bad_utf8 = false;
        let res = json::unescape(self.raw, |piece| match std::str::from_utf8(piece) {
            Ok(s) => out.push_str(s),
            Err(_) => bad_utf8 = true,
        });
        match (res, bad_utf8) {
            (Ok(()), false) => Ok(()),
            (Err(e), _) => {
                out.truncate(len);
                Err(OpenAiError::Json(e))
            }
            (Ok(()), true) => {
                out.truncate(len);
                Err(OpenAiError::Json(JsonError::InvalidUtf8 { at: 0 }))
            }
        }
    }
}

impl<'a> From<Str<'a>> for Text<'a> {
    fn from(s: Str<'a>) -> Self {
        Text {
            raw: s.raw,
            has_escapes: s.has_escapes,
        }
    }
}

/// llama.cpp's per-request `timings` (sent on the last chunk): the server's own prefill and
/// decode accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    pub prompt_n: Option<u64>,
    pub prompt_ms: Option<f64>,
    pub predicted_n: Option<u64>,
    pub predicted_ms: Option<f64>,
    /// Prompt tokens served from the slot's cache.
    pub cache_n: Option<u64>,
}

/// The facts of one stream chunk. Only `choices[0]` is read: we always request `n = 1`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChunkInfo<'a> {
    /// Number of entries in `choices` (0 for a usage-only chunk).
    pub choices: usize,
    /// Completions `choices[0].text` or chat `choices[0].delta.content` (null -> `None`).
    pub content: Option<Text<'a>>,
    /// Chat `delta.reasoning` (current vLLM) or `delta.reasoning_content` (older vLLM, SGLang).
    pub reasoning: Option<Text<'a>>,
    /// `delta.tool_calls` is present and non-empty.
    pub tool_calls: bool,
    /// Raw `finish_reason` (null -> `None`); see [`crate::timeline::FinishReason::parse`].
    pub finish_reason: Option<&'a [u8]>,
    /// Length of `choices[0].token_ids` (vLLM `return_token_ids`).
    pub token_ids: Option<u32>,
    /// Top-level `usage` when non-null (final, or on every chunk with `continuous_usage_stats`).
    pub usage: Option<Usage>,
    /// llama.cpp `timings`.
    pub timings: Option<Timings>,
    /// vLLM's `metrics` object (`--enable-per-request-metrics`; the final usage chunk only), as
    /// raw JSON: skipped like any other value on the per-token path and read by
    /// [`server_timing`] only where it is present. A value that is not an object is `None`, as
    /// vLLM's benchmark client ignores it.
    pub metrics: Option<&'a [u8]>,
}

/// An error event: `{"error":{"message","type","param","code"}}`, the older
/// `{"object":"error","message",...}`, or TGI's `{"error":"...","error_type":"..."}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerError<'a> {
    pub message: Text<'a>,
    /// `type` (TGI: `error_type`).
    pub kind: Option<&'a [u8]>,
    /// `code` when it is an integer or a string holding one.
    pub code: Option<i64>,
}

/// Why a payload could not be decoded. Messages are one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenAiError {
    Json(JsonError),
    /// Valid JSON, but not an object (and not `[DONE]`).
    NotAnObject,
    /// A field we read had the wrong JSON type or an out-of-range number.
    Field {
        field: &'static str,
        expected: &'static str,
    },
}

impl fmt::Display for OpenAiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenAiError::Json(e) => write!(f, "malformed JSON in stream event: {e}"),
            OpenAiError::NotAnObject => {
                f.write_str("stream event is neither [DONE] nor a JSON object")
            }
            OpenAiError::Field { field, expected } => {
                write!(f, "stream event field `{field}` is not {expected}")
            }
        }
    }
}

impl std::error::Error for OpenAiError {}

impl From<JsonError> for OpenAiError {
    fn from(e: JsonError) -> Self {
        OpenAiError::Json(e)
    }
}

pub(super) type Res<T> = Result<T, OpenAiError>;

pub(super) fn wrong(field: &'static str, expected: &'static str) -> OpenAiError {
    OpenAiError::Field { field, expected }
}

/// Decodes one SSE `data` payload.
pub fn decode(data: &[u8]) -> Result<StreamItem<'_>, OpenAiError> {
    if data.trim_ascii() == b"[DONE]" {
        return Ok(StreamItem::Done);
    }
    let mut sc = Scanner::new(data)?;
    if sc.peek()? != Kind::Object {
        // Still reject invalid JSON as such, so the message says what is wrong.
        sc.skip()?;
        sc.finish()?;
        return Err(OpenAiError::NotAnObject);
    }
    sc.enter_object()?;

    let mut chunk = ChunkInfo::default();
    let mut error_obj: Option<ServerError<'_>> = None;
    let mut error_str: Option<Text<'_>> = None;
    let mut object_is_error = false;
    // Top-level fields of the older error shape and TGI's.
    let mut message: Option<Text<'_>> = None;
    let mut kind: Option<&[u8]> = None;
    let mut error_type: Option<&[u8]> = None;
    let mut code: Option<i64> = None;

    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"choices" => choices(&mut sc, &mut chunk)?,
            b"usage" => chunk.usage = usage(&mut sc)?,
            b"timings" => chunk.timings = timings(&mut sc)?,
            b"metrics" => chunk.metrics = raw_object(&mut sc, data)?,
            b"error" => match sc.peek()? {
                Kind::Object => error_obj = Some(error_object(&mut sc)?),
                Kind::String => error_str = Some(sc.string()?.into()),
                _ => sc.skip()?,
            },
            b"object" => {
                if sc.peek()? == Kind::String {
                    let mut vb = [0u8; 32];
                    object_is_error = sc.string()?.key(&mut vb) == b"error";
                } else {
                    sc.skip()?;
                }
            }
            b"message" => message = lenient_text(&mut sc)?,
            b"type" => kind = lenient_text(&mut sc)?.map(|t| t.raw),
            b"error_type" => error_type = lenient_text(&mut sc)?.map(|t| t.raw),
            b"code" => code = lenient_code(&mut sc)?,
            _ => sc.skip()?,
        }
    }
    sc.finish()?;

    if let Some(e) = error_obj {
        return Ok(StreamItem::Error(e));
    }
    if let Some(m) = error_str {
        return Ok(StreamItem::Error(ServerError {
            message: m,
            kind: error_type,
            code,
        }));
    }
    if object_is_error {
        return Ok(StreamItem::Error(ServerError {
            message: message.unwrap_or_default(),
            kind,
            code,
        }));
    }
    Ok(StreamItem::Chunk(chunk))
}

/// A string, or `None` for anything else (error fields come in many shapes; we never fail an
/// error event over them).
pub(super) fn lenient_text<'a>(sc: &mut Scanner<'a>) -> Res<Option<Text<'a>>> {
    if sc.peek()? == Kind::String {
        return Ok(Some(sc.string()?.into()));
    }
    sc.skip()?;
    Ok(None)
}

/// `code`: an integer, or a string holding one (`"400"`), else `None`.
pub(super) fn lenient_code(sc: &mut Scanner<'_>) -> Res<Option<i64>> {
    match sc.peek()? {
        Kind::Number => Ok(sc.i64()?),
        Kind::String => {
            let s = sc.string()?;
            let mut vb = [0u8; 32];
            let digits = if s.has_escapes { s.key(&mut vb) } else { s.raw };
            Ok(std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok()))
        }
        _ => {
            sc.skip()?;
            Ok(None)
        }
    }
}

/// A string or null; any other type is an error naming `field`.
#[inline]
pub(super) fn opt_text<'a>(sc: &mut Scanner<'a>, field: &'static str) -> Res<Option<Text<'a>>> {
    match sc.peek()? {
        Kind::String => Ok(Some(sc.string()?.into())),
        Kind::Null => {
            sc.eat_null()?;
            Ok(None)
        }
        _ => Err(wrong(field, "a string or null")),
    }
}

/// A non-negative integer or null; anything else is an error naming `field`.
#[inline]
pub(super) fn opt_u64(sc: &mut Scanner<'_>, field: &'static str) -> Res<Option<u64>> {
    match sc.peek()? {
        Kind::Number => match sc.u64()? {
            Some(v) => Ok(Some(v)),
            None => Err(wrong(field, "a non-negative integer that fits 64 bits")),
        },
        Kind::Null => {
            sc.eat_null()?;
            Ok(None)
        }
        _ => Err(wrong(field, "a non-negative integer")),
    }
}

pub(super) fn opt_f64(sc: &mut Scanner<'_>, field: &'static str) -> Res<Option<f64>> {
    match sc.peek()? {
        Kind::Number => Ok(Some(sc.f64()?)),
        Kind::Null => {
            sc.eat_null()?;
            Ok(None)
        }
        _ => Err(wrong(field, "a number")),
    }
}

/// Sits before a value that must be an object or null: `true` when an object was entered.
#[inline]
pub(super) fn enter_opt_object(sc: &mut Scanner<'_>, field: &'static str) -> Res<bool> {
    match sc.peek()? {
        Kind::Object => {
            sc.enter_object()?;
            Ok(true)
        }
        Kind::Null => {
            sc.eat_null()?;
            Ok(false)
        }
        _ => Err(wrong(field, "an object or null")),
    }
}

pub(super) fn enter_opt_array(sc: &mut Scanner<'_>, field: &'static str) -> Res<bool> {
    match sc.peek()? {
        Kind::Array => {
            sc.enter_array()?;
            Ok(true)
        }
        Kind::Null => {
            sc.eat_null()?;
            Ok(false)
        }
        _ => Err(wrong(field, "an array or null")),
    }
}

/// Counts the elements of an entered array, skipping them.
pub(super) fn count_elements(sc: &mut Scanner<'_>) -> Res<usize> {
    let mut n = 0;
    let mut first = true;
    while sc.next_element(&mut first)? {
        sc.skip()?;
        n += 1;
    }
    Ok(n)
}

fn choices<'a>(sc: &mut Scanner<'a>, chunk: &mut ChunkInfo<'a>) -> Res<()> {
    if !enter_opt_array(sc, "choices")? {
        return Ok(());
    }
    let mut first = true;
    let mut n = 0;
    while sc.next_element(&mut first)? {
        if n == 0 {
            choice(sc, chunk)?;
        } else {
            sc.skip()?;
        }
        n += 1;
    }
    chunk.choices = n;
    Ok(())
}

fn choice<'a>(sc: &mut Scanner<'a>, chunk: &mut ChunkInfo<'a>) -> Res<()> {
    if sc.peek()? != Kind::Object {
        return Err(wrong("choices[0]", "an object"));
    }
    sc.enter_object()?;
    let mut text = None;
    let mut content = None;
    let mut reasoning = None;
    let mut reasoning_content = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"text" => text = opt_text(sc, "choices[0].text")?,
            b"delta" => {
                if enter_opt_object(sc, "choices[0].delta")? {
                    let mut first = true;
                    while let Some(key) = sc.next_key(&mut first)? {
                        match key.key(&mut kb) {
                            b"content" => content = opt_text(sc, "delta.content")?,
                            b"reasoning" => reasoning = opt_text(sc, "delta.reasoning")?,
                            b"reasoning_content" => {
                                reasoning_content = opt_text(sc, "delta.reasoning_content")?
                            }
                            b"tool_calls" => {
                                chunk.tool_calls = enter_opt_array(sc, "delta.tool_calls")?
                                    && count_elements(sc)? > 0
                            }
                            _ => sc.skip()?,
                        }
                    }
                }
            }
            b"finish_reason" => {
                chunk.finish_reason = opt_text(sc, "choices[0].finish_reason")?.map(|t| t.raw)
            }
            b"token_ids" => {
                chunk.token_ids = if enter_opt_array(sc, "choices[0].token_ids")? {
                    Some(u32::try_from(count_elements(sc)?).unwrap_or(u32::MAX))
                } else {
                    None
                }
            }
            _ => sc.skip()?,
        }
    }
    chunk.content = content.or(text);
    chunk.reasoning = reasoning.or(reasoning_content);
    Ok(())
}

fn usage(sc: &mut Scanner<'_>) -> Res<Option<Usage>> {
    if !enter_opt_object(sc, "usage")? {
        return Ok(None);
    }
    let mut u = Usage::default();
    let mut total = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"prompt_tokens" => u.prompt_tokens = opt_u64(sc, "usage.prompt_tokens")?.unwrap_or(0),
            b"completion_tokens" => {
                u.completion_tokens = opt_u64(sc, "usage.completion_tokens")?.unwrap_or(0)
            }
            b"total_tokens" => total = opt_u64(sc, "usage.total_tokens")?,
            b"prompt_tokens_details" => {
                u.cached_tokens = None;
                if enter_opt_object(sc, "usage.prompt_tokens_details")? {
                    let mut first = true;
                    while let Some(key) = sc.next_key(&mut first)? {
                        match key.key(&mut kb) {
                            b"cached_tokens" => {
                                u.cached_tokens = opt_u64(sc, "usage.cached_tokens")?
                            }
                            _ => sc.skip()?,
                        }
                    }
                }
            }
            _ => sc.skip()?,
        }
    }
    // Some servers omit the total; it is the sum by definition.
    u.total_tokens = total.unwrap_or(u.prompt_tokens.saturating_add(u.completion_tokens));
    Ok(Some(u))
}

pub(super) fn timings(sc: &mut Scanner<'_>) -> Res<Option<Timings>> {
    if !enter_opt_object(sc, "timings")? {
        return Ok(None);
    }
    let mut t = Timings::default();
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"prompt_n" => t.prompt_n = opt_u64(sc, "timings.prompt_n")?,
            b"prompt_ms" => t.prompt_ms = opt_f64(sc, "timings.prompt_ms")?,
            b"predicted_n" => t.predicted_n = opt_u64(sc, "timings.predicted_n")?,
            b"predicted_ms" => t.predicted_ms = opt_f64(sc, "timings.predicted_ms")?,
            b"cache_n" => t.cache_n = opt_u64(sc, "timings.cache_n")?,
            _ => sc.skip()?,
        }
    }
    Ok(Some(t))
}

/// The bytes of the object at the scanner (of `data`), skipped; `None` for any other value.
fn raw_object<'a>(sc: &mut Scanner<'a>, data: &'a [u8]) -> Res<Option<&'a [u8]>> {
    if sc.peek()? != Kind::Object {
        sc.skip()?;
        return Ok(None);
    }
    let start = sc.pos();
    sc.skip()?;
    Ok(data.get(start..sc.pos()))
}

/// Reads vLLM's per-request `metrics` object (the raw bytes of [`ChunkInfo::metrics`]) as
/// vLLM 0.33's benchmark client does: a field that is not a number (null, a string, a bool) is
/// absent, never an error; only malformed JSON or a value that is not an object is an error.
pub fn server_timing(raw: &[u8]) -> Result<ServerTiming, OpenAiError> {
    let mut sc = Scanner::new(raw)?;
    if sc.peek()? != Kind::Object {
        return Err(wrong("metrics", "an object"));
    }
    sc.enter_object()?;
    let mut m = ServerTiming::default();
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        let slot = match key.key(&mut kb) {
            b"queue_time_ms" => &mut m.queue_ms,
            b"time_to_first_token_ms" => &mut m.ttft_ms,
            b"generation_time_ms" => &mut m.generation_ms,
            b"mean_itl_ms" => &mut m.mean_itl_ms,
            _ => {
                sc.skip()?;
                continue;
            }
        };
        *slot = lenient_f64(&mut sc)?;
    }
    sc.finish()?;
    Ok(m)
}

/// A number, or `None` for any other value.
fn lenient_f64(sc: &mut Scanner<'_>) -> Res<Option<f64>> {
    if sc.peek()? == Kind::Number {
        return Ok(Some(sc.f64()?));
    }
    sc.skip()?;
    Ok(None)
}

/// `{"message","type","param","code"}`.
pub(super) fn error_object<'a>(sc: &mut Scanner<'a>) -> Res<ServerError<'a>> {
    sc.enter_object()?;
    let mut e = ServerError::default();
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"message" => e.message = lenient_text(sc)?.unwrap_or_default(),
            b"type" => e.kind = lenient_text(sc)?.map(|t| t.raw),
            b"code" => e.code = lenient_code(sc)?,
            _ => sc.skip()?,
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests;
