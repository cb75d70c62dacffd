//! Decodes one SSE `data` payload of the OpenAI Responses API stream (`POST /v1/responses` with
//! `stream: true`) into the few facts the timeline needs: a token-bearing delta (answer or
//! reasoning text), the terminal event with its usage, or an error.
//!
//! The stream, as vLLM's server writes it (0.32, `entrypoints/openai/responses/`): each event is
//! `event: <type>\ndata: <json>\n\n`, the JSON carrying the same `type`, with no `[DONE]`:
//! `response.created`, `response.in_progress`, then per output item `response.output_item.added`
//! and `response.content_part.added`, one `response.output_text.delta` (or
//! `response.reasoning_text.delta`) per decoding step that produced text (several tokens in one
//! when the server's output loop falls behind: `tests/data/responses/` holds a recording with
//! six tokens in four deltas), then
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done`, and
//! last `response.completed` whose `response` holds `status` (`incomplete` when the output hit
//! `max_output_tokens`) and `usage` (`input_tokens`, `output_tokens`, `total_tokens`,
//! `input_tokens_details.cached_tokens`).
//!
//! What counts is vLLM 0.33.0's benchmark client (`async_request_openai_responses`): the event's
//! JSON `type` decides (the SSE `event:` line is not read, so a proxy that drops it changes
//! nothing). Both delta types are tokens (TTFT, ITL and the request's end); only
//! `response.completed` and `response.incomplete` end a response (usage from their `response`);
//! `error`, `response.failed`, or any other event with a truthy `error` fails it; every other
//! event (metadata, the `.done` family that repeats the text, `[DONE]`, an empty payload) is
//! nothing. Keys may come in any order (vLLM's events put `type` last), so the payload is walked
//! once and judged at its end.
//!
//! Like [`super::openai`], it runs once per event on the read loop: no allocation, no tree, text
//! borrowed and still escaped. Malformed JSON or a field of the wrong type where it is read is an
//! [`OpenAiError`], never a guess or a panic.

use super::json::{Kind, Scanner};
use super::openai::{self, OpenAiError, ServerError, Text};
use crate::timeline::Usage;

type Res<T> = Result<T, OpenAiError>;

/// Which text a token-bearing delta carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaKind {
    /// `response.output_text.delta`: the answer.
    OutputText,
    /// `response.reasoning_text.delta`: the model's reasoning (timed as a token, not kept as
    /// the answer).
    ReasoningText,
}

/// The terminal event's facts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terminal {
    /// `response.usage` when it is an object (`completion_tokens` is `output_tokens`).
    pub usage: Option<Usage>,
    /// `response.status` is `incomplete` (the output hit `max_output_tokens`), or the event is
    /// `response.incomplete`.
    pub incomplete: bool,
}

/// What one payload meant to the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResponsesEvent<'a> {
    /// One token-bearing event; `text` is its `delta` (empty when absent or null).
    Delta { kind: DeltaKind, text: Text<'a> },
    /// `response.completed` or `response.incomplete`: the response is over.
    Terminal(Terminal),
    /// `error`, `response.failed`, or an event with a truthy `error`.
    Error(ServerError<'a>),
}

/// The event types this decoder tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    OutputDelta,
    ReasoningDelta,
    Completed,
    Incomplete,
    Error,
    Failed,
    Other,
}

impl Type {
    fn of(word: &[u8]) -> Type {
        match word {
            b"response.output_text.delta" => Type::OutputDelta,
            b"response.reasoning_text.delta" => Type::ReasoningDelta,
            b"response.completed" => Type::Completed,
            b"response.incomplete" => Type::Incomplete,
            b"error" => Type::Error,
            b"response.failed" => Type::Failed,
            _ => Type::Other,
        }
    }
}

/// `delta` as read before the type is known: a string, null/absent, or some other value (an
/// error only if the event turns out to be a text delta).
#[derive(Clone, Copy, Default)]
enum Delta<'a> {
    #[default]
    Absent,
    Text(Text<'a>),
    NotText,
}

/// The `response` object's fields we read.
#[derive(Clone, Copy, Default)]
struct Response<'a> {
    incomplete: bool,
    usage: Option<Usage>,
    error: Option<ServerError<'a>>,
}

/// Decodes one SSE `data` payload: `Ok(None)` for an event that is neither a token, the end nor
/// an error.
pub fn decode(data: &[u8]) -> Result<Option<ResponsesEvent<'_>>, OpenAiError> {
    let trimmed = data.trim_ascii();
    if trimmed.is_empty() || trimmed == b"[DONE]" {
        return Ok(None);
    }
    let mut sc = Scanner::new(data)?;
    if sc.peek()? != Kind::Object {
        sc.skip()?;
        sc.finish()?;
        return Err(OpenAiError::NotAnObject);
    }
    sc.enter_object()?;
    let mut ty = Type::Other;
    let mut delta = Delta::Absent;
    let mut response: Option<Response<'_>> = None;
    let mut error: Option<ServerError<'_>> = None;
    let mut message = None;
    let mut code = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"type" => {
                ty = if sc.peek()? == Kind::String {
                    let mut vb = [0u8; 32];
                    Type::of(sc.string()?.key(&mut vb))
                } else {
                    sc.skip()?;
                    Type::Other
                }
            }
            b"delta" => {
                delta = match sc.peek()? {
                    Kind::String => Delta::Text(sc.string()?.into()),
                    Kind::Null => {
                        sc.eat_null()?;
                        Delta::Absent
                    }
                    _ => {
                        sc.skip()?;
                        Delta::NotText
                    }
                }
            }
            b"response" => response = response_object(&mut sc)?,
            b"error" => error = truthy_error(&mut sc)?,
            b"message" => message = openai::lenient_text(&mut sc)?,
            b"code" => code = openai::lenient_code(&mut sc)?,
            _ => sc.skip()?,
        }
    }
    sc.finish()?;
    let item = match ty {
        Type::OutputDelta | Type::ReasoningDelta => {
            let text = match delta {
                Delta::Text(t) => t,
                Delta::Absent => Text::default(),
                Delta::NotText => return Err(openai::wrong("delta", "a string or null")),
            };
            let kind = if ty == Type::OutputDelta {
                DeltaKind::OutputText
            } else {
                DeltaKind::ReasoningText
            };
            ResponsesEvent::Delta { kind, text }
        }
        Type::Completed | Type::Incomplete => {
            let r = response.unwrap_or_default();
            ResponsesEvent::Terminal(Terminal {
                usage: r.usage,
                incomplete: r.incomplete || ty == Type::Incomplete,
            })
        }
        Type::Error | Type::Failed => {
            ResponsesEvent::Error(error.or_else(|| response.and_then(|r| r.error)).unwrap_or(
                ServerError {
                    message: message.unwrap_or_default(),
                    kind: None,
                    code,
                },
            ))
        }
        Type::Other => match error {
            Some(e) => ResponsesEvent::Error(e),
            None => return Ok(None),
        },
    };
    Ok(Some(item))
}

/// `response`: an object's `status`, `usage` and `error`; any other value is nothing (vLLM's
/// client reads `usage` only from an object).
fn response_object<'a>(sc: &mut Scanner<'a>) -> Res<Option<Response<'a>>> {
    if sc.peek()? != Kind::Object {
        sc.skip()?;
        return Ok(None);
    }
    sc.enter_object()?;
    let mut r = Response::default();
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"status" => {
                r.incomplete = openai::lenient_text(sc)?.is_some_and(|s| s.raw == b"incomplete")
            }
            b"usage" => r.usage = usage(sc)?,
            b"error" => r.error = truthy_error(sc)?,
            _ => sc.skip()?,
        }
    }
    Ok(Some(r))
}

/// `usage`: `{input_tokens, output_tokens, total_tokens, input_tokens_details: {cached_tokens}}`
/// or null.
fn usage(sc: &mut Scanner<'_>) -> Res<Option<Usage>> {
    if !openai::enter_opt_object(sc, "response.usage")? {
        return Ok(None);
    }
    let mut u = Usage::default();
    let mut total = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"input_tokens" => {
                u.prompt_tokens = openai::opt_u64(sc, "usage.input_tokens")?.unwrap_or(0)
            }
            b"output_tokens" => {
                u.completion_tokens = openai::opt_u64(sc, "usage.output_tokens")?.unwrap_or(0)
            }
            b"total_tokens" => total = openai::opt_u64(sc, "usage.total_tokens")?,
            b"input_tokens_details" => {
                u.cached_tokens = None;
                if openai::enter_opt_object(sc, "usage.input_tokens_details")? {
                    let mut first = true;
                    while let Some(key) = sc.next_key(&mut first)? {
                        match key.key(&mut kb) {
                            b"cached_tokens" => {
                                u.cached_tokens = openai::opt_u64(sc, "usage.cached_tokens")?
                            }
                            _ => sc.skip()?,
                        }
                    }
                }
            }
            _ => sc.skip()?,
        }
    }
    u.total_tokens = total.unwrap_or(u.prompt_tokens.saturating_add(u.completion_tokens));
    Ok(Some(u))
}

/// An `error` value that Python would call true (vLLM's client tests `data.get("error")`): a
/// non-empty object (its `message`, `type` and `code` read), a non-empty string (the message),
/// `true`, a non-empty array or a non-zero number. `None` for null, `false`, `""`, `{}`, `[]`
/// and `0`.
fn truthy_error<'a>(sc: &mut Scanner<'a>) -> Res<Option<ServerError<'a>>> {
    match sc.peek()? {
        Kind::Object => {
            sc.enter_object()?;
            let mut e = ServerError::default();
            let mut keys = 0usize;
            let mut kb = [0u8; 32];
            let mut first = true;
            while let Some(key) = sc.next_key(&mut first)? {
                keys += 1;
                match key.key(&mut kb) {
                    b"message" => e.message = openai::lenient_text(sc)?.unwrap_or_default(),
                    b"type" => e.kind = openai::lenient_text(sc)?.map(|t| t.raw),
                    b"code" => e.code = openai::lenient_code(sc)?,
                    _ => sc.skip()?,
                }
            }
            Ok((keys > 0).then_some(e))
        }
        Kind::String => {
            let s = sc.string()?;
            Ok((!s.raw.is_empty()).then(|| ServerError {
                message: s.into(),
                ..ServerError::default()
            }))
        }
        Kind::Bool => Ok(sc.bool()?.filter(|&b| b).map(|_| ServerError::default())),
        Kind::Array => {
            sc.enter_array()?;
            let n = openai::count_elements(sc)?;
            Ok((n > 0).then(ServerError::default))
        }
        Kind::Number => Ok((sc.f64()? != 0.0).then(ServerError::default)),
        Kind::Null => {
            sc.eat_null()?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests;
