//! The engines' native streaming APIs, beside the OpenAI one: SGLang `/generate`, TGI
//! `/generate_stream` and llama.cpp's `/completion`; and the OpenAI Responses API, whose typed
//! events ([`super::responses`]) come through the same [`NativeItem`]s. Each is a small per-stream decoder that
//! turns one SSE `data` payload into a [`NativeItem`]: the facts the timeline keeps (new output
//! text, tokens added, finish reason, usage), whatever shape the engine sends them in.
//!
//! Like [`super::openai`], a decoder runs once per event on the read loop: it walks the payload
//! once with [`super::json::Scanner`], never builds a tree, never allocates, and keeps only a few
//! integers between events (the running token count, the length of cumulative text). The SSE
//! framing below it is what makes a stream resumable at any byte; a decoder sees whole payloads
//! and never looks at one twice. Malformed JSON or a field of the wrong type is an
//! [`OpenAiError`] (the error type of every stream-event decoder), never a guess or a panic.

pub mod llamacpp;
pub mod sglang;
pub mod tgi;

use super::json::{Kind, Scanner};
use super::openai::{self, OpenAiError, ServerError, Text, Timings};
use super::responses::{DeltaKind, ResponsesEvent};
use crate::timeline::{TokenCountSource, Usage};

/// The streaming API a request speaks: which decoder reads its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// `/v1/completions` and `/v1/chat/completions` (vLLM, SGLang, TGI, llama.cpp, Ollama).
    #[default]
    OpenAi,
    /// SGLang's native `/generate`: cumulative `text`, `meta_info`, `data: [DONE]`.
    Sglang,
    /// TGI's `/generate_stream`: one `token` per event, `details` on the last one, no `[DONE]`.
    Tgi,
    /// llama.cpp's native `/completion`: `content` deltas, `stop: true` on the last event.
    LlamaCpp,
    /// The OpenAI Responses API, `/v1/responses`: typed events, one delta per token,
    /// `response.completed` with the usage last, no `[DONE]` ([`super::responses`]).
    Responses,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Sglang => "sglang",
            Dialect::Tgi => "tgi",
            Dialect::LlamaCpp => "llama.cpp",
            Dialect::Responses => "responses",
        }
    }

    /// The dialect's one path for a streaming generation (`None` for OpenAI: two endpoints).
    pub fn native_path(self) -> Option<&'static str> {
        match self {
            Dialect::OpenAi => None,
            Dialect::Sglang => Some("/generate"),
            Dialect::Tgi => Some("/generate_stream"),
            Dialect::LlamaCpp => Some("/completion"),
            Dialect::Responses => Some("/v1/responses"),
        }
    }

    /// Whether the endpoint takes text only (no token-id prompts): TGI's `inputs`, the
    /// Responses API's `input`.
    pub fn text_only(self) -> bool {
        matches!(self, Dialect::Tgi | Dialect::Responses)
    }
}

/// One generation event of a native stream, in the timeline's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NativeEvent<'a> {
    /// The output text this event added, still escaped (empty when it added none).
    pub text: Text<'a>,
    /// Output tokens this event added.
    pub tokens: u64,
    /// Where `tokens` came from.
    pub source: TokenCountSource,
    /// The engine's finish reason, normalised to a word [`crate::timeline::FinishReason::parse`]
    /// knows where the engine uses its own (SGLang's `{"type": ...}`, llama.cpp's `stop_type`).
    pub finish_reason: Option<&'a [u8]>,
    /// Running usage where the event carries it.
    pub usage: Option<Usage>,
    /// llama.cpp `timings`.
    pub timings: Option<Timings>,
    /// The engine's last event of the stream (TGI: `generated_text` set; llama.cpp:
    /// `stop: true`). SGLang ends with `[DONE]` instead.
    pub last: bool,
    /// `text` is the model's reasoning, not its answer (a Responses `reasoning_text` delta).
    pub reasoning: bool,
}

/// What one native `data` payload meant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NativeItem<'a> {
    /// `data: [DONE]` (SGLang).
    Done,
    Event(NativeEvent<'a>),
    /// An error event: `{"error": {...}}` (SGLang, llama.cpp) or `{"error": "...",
    /// "error_type": "..."}` (TGI).
    Error(ServerError<'a>),
    /// An event that is not generation (llama.cpp's prompt-progress events): not recorded.
    Ignore,
    /// The end of the stream in an event that is no token (the Responses API's
    /// `response.completed`): its usage and finish reason, no record.
    End {
        usage: Option<Usage>,
        finish_reason: &'static [u8],
    },
}

/// The stateful decoder of one stream, any dialect but OpenAI's.
#[derive(Clone, Debug)]
pub enum NativeDecoder {
    Sglang(sglang::Decoder),
    Tgi(tgi::Decoder),
    LlamaCpp(llamacpp::Decoder),
    Responses,
}

impl NativeDecoder {
    /// `None` for [`Dialect::OpenAi`], which `openai::decode` reads without state.
    pub fn new(d: Dialect) -> Option<Self> {
        match d {
            Dialect::OpenAi => None,
            Dialect::Sglang => Some(NativeDecoder::Sglang(sglang::Decoder::default())),
            Dialect::Tgi => Some(NativeDecoder::Tgi(tgi::Decoder)),
            Dialect::LlamaCpp => Some(NativeDecoder::LlamaCpp(llamacpp::Decoder::default())),
            Dialect::Responses => Some(NativeDecoder::Responses),
        }
    }

    /// Decodes the next `data` payload of the stream.
    #[inline]
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> Result<NativeItem<'a>, OpenAiError> {
        match self {
            NativeDecoder::Sglang(d) => d.decode(data),
            NativeDecoder::Tgi(d) => d.decode(data),
            NativeDecoder::LlamaCpp(d) => d.decode(data),
            NativeDecoder::Responses => responses_item(data),
        }
    }
}

/// A Responses event in the timeline's terms: each delta one token (the protocol's unit, as
/// vLLM's client counts them), the terminal event the end with the usage (`incomplete` is the
/// Responses form of finish reason `length`), anything else nothing.
#[inline]
fn responses_item(data: &[u8]) -> Result<NativeItem<'_>, OpenAiError> {
    Ok(match super::responses::decode(data)? {
        None => NativeItem::Ignore,
        Some(ResponsesEvent::Delta { kind, text }) => NativeItem::Event(NativeEvent {
            text,
            tokens: 1,
            source: TokenCountSource::Chunks,
            reasoning: kind == DeltaKind::ReasoningText,
            ..NativeEvent::default()
        }),
        Some(ResponsesEvent::Terminal(t)) => NativeItem::End {
            usage: t.usage,
            finish_reason: if t.incomplete {
                &b"length"[..]
            } else {
                &b"stop"[..]
            },
        },
        Some(ResponsesEvent::Error(e)) => NativeItem::Error(e),
    })
}

/// Opens the payload's top-level object; anything else is an error that names what is wrong.
fn open_object(data: &[u8]) -> Result<Scanner<'_>, OpenAiError> {
    let mut sc = Scanner::new(data)?;
    if sc.peek()? != Kind::Object {
        sc.skip()?;
        sc.finish()?;
        return Err(OpenAiError::NotAnObject);
    }
    sc.enter_object()?;
    Ok(sc)
}

/// The top-level `error` of an error event, object or string.
fn error_value<'a>(sc: &mut Scanner<'a>) -> Result<Option<ServerError<'a>>, OpenAiError> {
    match sc.peek()? {
        Kind::Object => Ok(Some(openai::error_object(sc)?)),
        Kind::String => Ok(Some(ServerError {
            message: sc.string()?.into(),
            ..ServerError::default()
        })),
        _ => {
            sc.skip()?;
            Ok(None)
        }
    }
}

/// `true`, `false` or null (`None`); anything else is an error naming `field`.
fn opt_bool(sc: &mut Scanner<'_>, field: &'static str) -> Result<Option<bool>, OpenAiError> {
    if sc.eat_null()? {
        return Ok(None);
    }
    match sc.bool()? {
        Some(b) => Ok(Some(b)),
        None => Err(openai::wrong(field, "a boolean")),
    }
}

/// The tokens an event added, from a running count: the growth since the last event (a count
/// that goes backwards adds nothing and does not move the mark).
#[inline]
fn running_delta(last: &mut u64, now: u64) -> u64 {
    let d = now.saturating_sub(*last);
    *last = (*last).max(now);
    d
}

#[cfg(test)]
mod tests;
