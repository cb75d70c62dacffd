//! SGLang's native `/generate` stream.
//!
//! Read from SGLang 0.5.23 (the PyPI wheel `sglang-0.5.23-cp311`):
//! `sglang/srt/entrypoints/http_server.py` (`serve_generate_request`: each output is
//! `data: <orjson>\n\n`, a `ValueError` becomes `data: {"error": {"message", "type", "code",
//! "retryable"}}`, and the stream always ends with `data: [DONE]`),
//! `sglang/srt/managers/tokenizer_manager.py` (`_handle_batch_output`: each output is
//! `{"text", "output_ids", "meta_info"}`; `meta_info` carries `id`, `finish_reason`,
//! `prompt_tokens`, `completion_tokens`, `cached_tokens`, `reasoning_tokens` and more; by default
//! `text` and `output_ids` are *cumulative* — the whole output so far — and with the server's
//! `--incremental-streaming-output` they are deltas, while `completion_tokens` is a running
//! count either way) and `sglang/srt/managers/schedule_batch.py` (`finish_reason` is null until
//! the last event, then `{"type": "stop", "matched": ...}`, `{"type": "length", "length": N}` or
//! `{"type": "abort", "message": ...}`).
//!
//! Cross-checked with the oldest shape in the search index, sgl-project/sglang commit
//! `c60799d0eb1b537e3fa09e45fc5c91b5861de957` (`python/sglang/srt/managers/tokenizer_manager.py`,
//! `handle_loop`): `{"text", "meta_info"}` without `output_ids`, which this decoder reads too
//! (without `output_ids` it takes `text` as cumulative).
//!
//! Token accounting: the growth of `meta_info.completion_tokens` since the previous event
//! (exact, [`TokenCountSource::ContinuousUsage`]); without `meta_info`, one token per event that
//! added text. New text: the part of the cumulative `text` past the previous event's, a slice of
//! the payload (the JSON encoding of a prefix is a prefix of the encoding). The decoder tells the
//! incremental mode from the cumulative one by `output_ids`: cumulative ids are as many as
//! `completion_tokens`, delta ids fewer (the two modes agree on the first event).

use super::{error_value, open_object, running_delta, NativeEvent, NativeItem};
use crate::proto::json::Scanner;
use crate::proto::openai::{self, OpenAiError, Text};
use crate::timeline::{TokenCountSource, Usage};

type Res<T> = Result<T, OpenAiError>;

/// One SGLang stream's state between events.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    /// `completion_tokens` of the previous event.
    completion: u64,
    /// Escaped length of the previous event's cumulative `text`.
    text_len: usize,
    /// The server streams deltas (`--incremental-streaming-output`).
    incremental: bool,
}

/// The fields of one payload before they are set against the previous event.
#[derive(Default)]
struct Raw<'a> {
    text: Option<Text<'a>>,
    output_ids: Option<usize>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    finish_type: Option<&'a [u8]>,
    has_meta: bool,
}

impl Decoder {
    /// Decodes one `data` payload.
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> Res<NativeItem<'a>> {
        if data.trim_ascii() == b"[DONE]" {
            return Ok(NativeItem::Done);
        }
        let mut sc = open_object(data)?;
        let mut raw = Raw::default();
        let mut error = None;
        let mut kb = [0u8; 32];
        let mut first = true;
        while let Some(key) = sc.next_key(&mut first)? {
            match key.key(&mut kb) {
                b"text" => raw.text = openai::opt_text(&mut sc, "text")?,
                b"output_ids" => {
                    raw.output_ids = if openai::enter_opt_array(&mut sc, "output_ids")? {
                        Some(openai::count_elements(&mut sc)?)
                    } else {
                        None
                    }
                }
                b"meta_info" => meta_info(&mut sc, &mut raw)?,
                b"error" => error = error_value(&mut sc)?,
                _ => sc.skip()?,
            }
        }
        sc.finish()?;
        if let Some(e) = error {
            return Ok(NativeItem::Error(e));
        }
        Ok(NativeItem::Event(self.event(raw)))
    }

    fn event<'a>(&mut self, raw: Raw<'a>) -> NativeEvent<'a> {
        if let (Some(ids), Some(c)) = (raw.output_ids, raw.completion_tokens) {
            if ids < c as usize {
                self.incremental = true;
            }
        }
        let text = match raw.text {
            None => Text::default(),
            Some(t) if self.incremental => t,
            Some(t) => {
                let new = t.raw.get(self.text_len..).unwrap_or_default();
                self.text_len = self.text_len.max(t.raw.len());
                Text {
                    raw: new,
                    has_escapes: t.has_escapes,
                }
            }
        };
        let (tokens, source) = match raw.completion_tokens {
            Some(c) => (
                running_delta(&mut self.completion, c),
                TokenCountSource::ContinuousUsage,
            ),
            None => (!text.is_empty() as u64, TokenCountSource::Chunks),
        };
        let usage = raw.has_meta.then(|| {
            let (p, c) = (
                raw.prompt_tokens.unwrap_or(0),
                raw.completion_tokens.unwrap_or(self.completion),
            );
            Usage {
                prompt_tokens: p,
                completion_tokens: c,
                total_tokens: p.saturating_add(c),
                cached_tokens: raw.cached_tokens,
            }
        });
        NativeEvent {
            text,
            tokens,
            source,
            finish_reason: raw.finish_type,
            usage,
            timings: None,
            last: false,
            reasoning: false,
        }
    }
}

fn meta_info<'a>(sc: &mut Scanner<'a>, raw: &mut Raw<'a>) -> Res<()> {
    if !openai::enter_opt_object(sc, "meta_info")? {
        return Ok(());
    }
    raw.has_meta = true;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"prompt_tokens" => raw.prompt_tokens = openai::opt_u64(sc, "meta_info.prompt_tokens")?,
            b"completion_tokens" => {
                raw.completion_tokens = openai::opt_u64(sc, "meta_info.completion_tokens")?
            }
            b"cached_tokens" => raw.cached_tokens = openai::opt_u64(sc, "meta_info.cached_tokens")?,
            b"finish_reason" => raw.finish_type = finish_reason(sc)?,
            _ => sc.skip()?,
        }
    }
    Ok(())
}

/// `null`, `{"type": "stop" | "length" | "abort", ...}`, or (older servers) a bare string.
fn finish_reason<'a>(sc: &mut Scanner<'a>) -> Res<Option<&'a [u8]>> {
    if sc.peek()? == crate::proto::json::Kind::String {
        return Ok(Some(sc.string()?.raw));
    }
    if !openai::enter_opt_object(sc, "meta_info.finish_reason")? {
        return Ok(None);
    }
    let mut kind = None;
    let mut kb = [0u8; 32];
    let mut first = true;
    while let Some(key) = sc.next_key(&mut first)? {
        match key.key(&mut kb) {
            b"type" => kind = openai::opt_text(sc, "meta_info.finish_reason.type")?.map(|t| t.raw),
            _ => sc.skip()?,
        }
    }
    // A finish object without a type still finished the request.
    Ok(Some(kind.unwrap_or(b"unknown")))
}
