//! TGI's native `/generate_stream`.
//!
//! Read from text-generation-inference at commit `db931fcf42da018a3657580c64bf2720f167f9ab`
//! (2026-01-08): `router/src/server.rs` (`generate_stream` sends each `StreamResponse` with
//! axum's `Event::json_data`, i.e. `data:{json}\n\n` without a space, with keep-alive comments;
//! `generate_stream_internal` yields one event per generated token and the last one with
//! `generated_text` set; an error becomes `data:{"error": "...", "error_type": "..."}`; there is
//! no `[DONE]`) and `router/src/lib.rs` (`StreamResponse {index, token, top_tokens (omitted when
//! empty), generated_text, details}`, `Token {id, text, logprob, special}`, `StreamDetails
//! {finish_reason, generated_tokens, seed, input_length}` present only when the request asked
//! for `parameters.details`, and `FinishReason` serialised as `length`, `eos_token` or
//! `stop_sequence`).
//!
//! Token accounting: one token per event that carries a `token` object (the protocol's own
//! unit, [`TokenCountSource::TokenIds`]); `details.generated_tokens` on the last event is the
//! total. New text: `token.text` unless the token is `special` (TGI leaves special tokens out
//! of `generated_text`).

use super::{error_value, open_object, opt_bool, NativeEvent, NativeItem};
use crate::proto::json::Scanner;
use crate::proto::openai::{self, OpenAiError, ServerError, Text};
use crate::timeline::{TokenCountSource, Usage};

type Res<T> = Result<T, OpenAiError>;

/// One TGI stream's state between events (none is needed: every event stands alone).
#[derive(Clone, Debug, Default)]
pub struct Decoder;

#[derive(Default)]
struct Token<'a> {
    text: Option<Text<'a>>,
    special: bool,
}

impl Decoder {
    /// Decodes one `data` payload.
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> Res<NativeItem<'a>> {
        let mut sc = open_object(data)?;
        let mut token: Option<Token<'a>> = None;
        let mut last = false;
        let mut details = None;
        let mut error: Option<ServerError<'a>> = None;
        let mut error_type = None;
        let mut kb = [0u8; 32];
        let mut first = true;
        while let Some(key) = sc.next_key(&mut first)? {
            match key.key(&mut kb) {
                b"token" => token = token_object(&mut sc)?,
                b"generated_text" => last = openai::opt_text(&mut sc, "generated_text")?.is_some(),
                b"details" => details = stream_details(&mut sc)?,
                b"error" => error = error_value(&mut sc)?,
                b"error_type" => error_type = openai::lenient_text(&mut sc)?.map(|t| t.raw),
                _ => sc.skip()?,
            }
        }
        sc.finish()?;
        if let Some(mut e) = error {
            e.kind = e.kind.or(error_type);
            return Ok(NativeItem::Error(e));
        }
        let (finish_reason, usage) = details.unwrap_or_default();
        let text = match &token {
            Some(t) if !t.special => t.text.unwrap_or_default(),
            _ => Text::default(),
        };
        Ok(NativeItem::Event(NativeEvent {
            text,
            tokens: token.is_some() as u64,
            source: TokenCountSource::TokenIds,
            finish_reason,
            usage,
            timings: None,
            last,
            reasoning: false,
        }))
    }
}

fn token_object<'a>(sc: &mut Scanner<'a>) -> Res<Option<Token<'a>>> {
    if !openai::enter_opt_object(sc, "token")? {
        return Ok(None);
    }
    let mut t = Token::default();
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"text" => t.text = openai::opt_text(sc, "token.text")?,
            b"special" => t.special = opt_bool(sc, "token.special")?.unwrap_or(false),
            _ => sc.skip()?,
        }
    }
    Ok(Some(t))
}

type Details<'a> = (Option<&'a [u8]>, Option<Usage>);

/// `details`: null, or `{finish_reason, generated_tokens, seed, input_length}`.
fn stream_details<'a>(sc: &mut Scanner<'a>) -> Res<Option<Details<'a>>> {
    if !openai::enter_opt_object(sc, "details")? {
        return Ok(None);
    }
    let mut finish = None;
    let mut generated = None;
    let mut input = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"finish_reason" => {
                finish = openai::opt_text(sc, "details.finish_reason")?.map(|t| t.raw)
            }
            b"generated_tokens" => generated = openai::opt_u64(sc, "details.generated_tokens")?,
            b"input_length" => input = openai::opt_u64(sc, "details.input_length")?,
            _ => sc.skip()?,
        }
    }
    let usage = generated.map(|c| {
        let p = input.unwrap_or(0);
        Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p.saturating_add(c),
            cached_tokens: None,
        }
    });
    Ok(Some((finish, usage)))
}
