//! Prefill scouts: cold streaming requests with `max_tokens: 1`; prefill tok/s = prompt tokens /
//! TTFT (median over samples).
//!
//! Every sample is a prompt the server has never seen: the caller's calibrated prompt with a
//! first line (or, for token-id prompts, first ids) unique to the sample, so no prefix cache —
//! vLLM's, SGLang's radix tree, a llama.cpp slot's cached prompt — can hold any of it, whatever
//! calibration or an earlier sample sent. `cache_salt` (vLLM) and `cache_prompt: false`
//! (llama.cpp) are added where the engine has them, as a second guard. The decode cells' prompt
//! is warmed by the caller after the scouts, never by a measured sample.
//!
//! Must never send the same prompt twice, and never report a sample whose request failed.

use crate::analysis::stats;
use crate::matrix::status::CellStatus;
use crate::net::request::{Generation, Prompt};
use crate::net::{Cancel, Client, NoopObserver};
use crate::report::{push_first_per_kind, ErrorMessage, PrefillRow};
use crate::timeline::{ErrorKind, Timeline};
use serde_json::{json, Value};

/// TTFT of one scout: from the request being sent to its first token (or first event, for a
/// server that sends the single token without content).
pub fn scout_ttft_ms(client: &Client, tl: &Timeline) -> Option<f64> {
    let start = tl.send_start.unwrap_or(tl.intended_start);
    let first = tl.first_token.or(tl.first_event)?;
    Some(client.clock().delta_ns(start, first) as f64 / 1e6)
}

/// How many leading ids of a token-id prompt a sample replaces: enough that two samples
/// sharing all of them is out of the question.
pub const FRESH_IDS: usize = 8;

/// What makes a sample's prompt new to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fresh {
    /// Text prompts (completion or chat): the first line `old` becomes `new` (same length in
    /// characters and digits; not always the same token count, see [`pick_fresh`]).
    FirstLine { old: String, new: String },
    /// Token-id prompts: the first ids become these.
    FirstIds(Vec<u32>),
}

/// First lines a prefill sample tries before it settles for the closest count.
pub const FRESH_TRIES: u32 = 16;

/// A sample's fresh start, and its prompt's count where it was counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    pub fresh: Fresh,
    /// `None`: not counted (token ids keep their count; a run whose only counter is a
    /// prefill does not spend one per try).
    pub tokens: Option<u64>,
    /// Starts counted.
    pub tries: u32,
}

/// The first of `candidates` whose prompt counts `want` tokens, else the closest (the first
/// of those). Same width is not same size: a byte-level BPE that merges digit runs splits
/// `48213307` and `90000001` into different numbers of tokens, and a sample must be the size
/// its row says. `count` gives a start's count, or `None` where it does not count (the first
/// candidate is taken as it is).
pub async fn pick_fresh(
    candidates: impl IntoIterator<Item = Fresh>,
    want: u64,
    mut count: impl AsyncFnMut(&Fresh) -> Result<Option<u64>, String>,
) -> Result<Picked, String> {
    let mut best: Option<Picked> = None;
    let mut tries = 0;
    for fresh in candidates {
        let Some(n) = count(&fresh).await? else {
            return Ok(Picked {
                fresh,
                tokens: None,
                tries,
            });
        };
        tries += 1;
        let closer = best
            .as_ref()
            .and_then(|b| b.tokens)
            .is_none_or(|b| n.abs_diff(want) < b.abs_diff(want));
        if closer {
            best = Some(Picked {
                fresh,
                tokens: Some(n),
                tries,
            });
        }
        if n == want {
            break;
        }
    }
    let mut best = best.ok_or("no first line to try")?;
    best.tries = tries;
    Ok(best)
}

/// Engine switches for a cold request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColdSwitches {
    /// vLLM's `cache_salt`: a salted request shares no prefix-cache block with another salt.
    pub cache_salt: bool,
    /// llama.cpp's `cache_prompt: false`: the slot does not reuse its cached prompt.
    pub no_prompt_cache: bool,
}

/// The prompt of one cold sample: `base` with its start replaced per `fresh`, plus the
/// engine's cache switches. An error when `base` does not start the way `fresh` expects (a
/// prompt this module did not build), because a sample that might be warm must not be sent.
pub fn cold_prompt(
    base: &Generation,
    fresh: &Fresh,
    switches: ColdSwitches,
    salt: &str,
) -> Result<Generation, String> {
    let mut g = base.clone();
    g.max_tokens = Some(1);
    g.ignore_eos = false;
    match fresh {
        Fresh::FirstLine { old, new } => {
            let replaced = if g.chat {
                // The chat prompt's messages travel in `extra` (merged last into the body).
                g.extra
                    .get_mut("messages")
                    .and_then(Value::as_array_mut)
                    .and_then(|m| m.first_mut())
                    .and_then(|m| m.get_mut("content"))
                    .is_some_and(|c| replace_start(c, old, new))
            } else {
                match &mut g.prompt {
                    Prompt::Text(t) if t.starts_with(old.as_str()) => {
                        t.replace_range(..old.len(), new);
                        true
                    }
                    _ => false,
                }
            };
            if !replaced {
                return Err(format!(
                    "the prompt does not start with its first line `{old}`, so a cold sample cannot be made"
                ));
            }
        }
        Fresh::FirstIds(ids) => match &mut g.prompt {
            Prompt::TokenIds(p) => {
                let n = ids.len().min(p.len());
                p[..n].copy_from_slice(&ids[..n]);
            }
            _ => return Err("a token-id sample needs a token-id prompt".into()),
        },
    }
    if switches.cache_salt {
        g.extra.insert("cache_salt".into(), json!(salt));
    }
    if switches.no_prompt_cache {
        g.extra.insert("cache_prompt".into(), json!(false));
    }
    Ok(g)
}

fn replace_start(v: &mut Value, old: &str, new: &str) -> bool {
    match v {
        Value::String(s) if s.starts_with(old) => {
            s.replace_range(..old.len(), new);
            true
        }
        // A message with images (`matrix --images`): its text part.
        Value::Array(parts) => parts
            .iter_mut()
            .find(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .and_then(|p| p.get_mut("text"))
            .is_some_and(|t| replace_start(t, old, new)),
        _ => false,
    }
}

/// Send `samples` (each a prompt the server has never seen, see [`cold_prompt`]) and fill
/// `row`. Returns false when the user stopped the run.
pub async fn prefill(
    client: &Client,
    samples: &[Generation],
    row: &mut PrefillRow,
    known_tokens: u64,
    stop: &Cancel,
) -> bool {
    let mut ttfts = Vec::new();
    let mut prompt_tokens = None;
    let mut errors: Vec<(ErrorKind, u64)> = Vec::new();
    let mut count = |k: ErrorKind| match errors.iter_mut().find(|e| e.0 == k) {
        Some(e) => e.1 += 1,
        None => errors.push((k, 1)),
    };
    // Every body is written before the first is sent: a sample's images (megabytes of base64)
    // are copied here, never between its planned and its actual send.
    let requests: Vec<_> = samples
        .iter()
        .map(|g| g.stream_request(Some(false)))
        .collect();
    for req in requests {
        if stop.is_cancelled() {
            return false;
        }
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                count(ErrorKind::Protocol);
                push_first_per_kind(
                    &mut row.error_messages,
                    ErrorMessage::new(
                        Some(ErrorKind::Protocol),
                        None,
                        &format!("request body: {e}"),
                    ),
                );
                continue;
            }
        };
        let tl = client
            .stream(&req, client.clock().raw(), &mut NoopObserver, stop)
            .await;
        match &tl.outcome {
            Err(e) if e.kind == ErrorKind::Cancelled && stop.is_cancelled() => return false,
            Err(e) => {
                count(e.kind);
                push_first_per_kind(
                    &mut row.error_messages,
                    ErrorMessage::new(Some(e.kind), e.status, &e.message),
                );
            }
            Ok(()) => {
                if let Some(t) = scout_ttft_ms(client, &tl) {
                    ttfts.push(t);
                    prompt_tokens = tl.usage.map(|u| u.prompt_tokens).or(prompt_tokens);
                }
            }
        }
    }
    let tokens = prompt_tokens.unwrap_or(known_tokens);
    row.server_prompt_tokens = prompt_tokens;
    row.samples = ttfts.len() as u32;
    row.ttft_ms_samples = ttfts.clone();
    row.prompt_tokens = Some(tokens);
    row.ttft_ms = stats::median(&ttfts);
    row.prefill_tok_per_s = row
        .ttft_ms
        .filter(|t| *t > 0.0)
        .map(|t| tokens as f64 / (t / 1000.0));
    row.status = if ttfts.is_empty() {
        CellStatus::Failed(errors)
    } else {
        CellStatus::Valid
    };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Generation {
        Generation::new("m", Prompt::Text(t.into()))
    }

    #[test]
    fn a_text_sample_gets_its_own_first_line_and_the_engine_switches() {
        let base = text("[run 11111111] body");
        let fresh = Fresh::FirstLine {
            old: "[run 11111111]".into(),
            new: "[run 22222222]".into(),
        };
        let g = cold_prompt(
            &base,
            &fresh,
            ColdSwitches {
                cache_salt: false,
                no_prompt_cache: true,
            },
            "s-1",
        )
        .unwrap();
        assert!(matches!(&g.prompt, Prompt::Text(t) if t == "[run 22222222] body"));
        assert_eq!(g.max_tokens, Some(1));
        assert_eq!(g.extra.get("cache_prompt"), Some(&json!(false)));
        assert!(g.extra.get("cache_salt").is_none());
        // A prompt that does not start with the expected line is refused, never sent warm.
        assert!(cold_prompt(&text("other"), &fresh, ColdSwitches::default(), "s").is_err());
    }

    #[test]
    fn a_chat_sample_changes_the_first_message_and_token_ids_their_start() {
        let mut base = text("");
        base.chat = true;
        base.extra.insert(
            "messages".into(),
            json!([{"role": "user", "content": "[run 1] hello"}, {"role": "user", "content": "[run 1]"}]),
        );
        let fresh = Fresh::FirstLine {
            old: "[run 1]".into(),
            new: "[run 2]".into(),
        };
        let g = cold_prompt(
            &base,
            &fresh,
            ColdSwitches {
                cache_salt: true,
                no_prompt_cache: false,
            },
            "salt-3",
        )
        .unwrap();
        assert_eq!(g.extra["messages"][0]["content"], json!("[run 2] hello"));
        assert_eq!(g.extra["messages"][1]["content"], json!("[run 1]"));
        assert_eq!(g.extra["cache_salt"], json!("salt-3"));

        let ids = Generation::new("m", Prompt::TokenIds((1000..1020).collect()));
        let g = cold_prompt(
            &ids,
            &Fresh::FirstIds(vec![7; FRESH_IDS]),
            ColdSwitches::default(),
            "s",
        )
        .unwrap();
        let Prompt::TokenIds(p) = &g.prompt else {
            panic!("token ids")
        };
        assert_eq!(p.len(), 20);
        assert_eq!(&p[..FRESH_IDS], &[7; FRESH_IDS]);
        assert_eq!(p[FRESH_IDS], 1000 + FRESH_IDS as u32);
    }

    fn line(id: &str) -> Fresh {
        Fresh::FirstLine {
            old: "[run 00000000]".into(),
            new: format!("[run {id}]"),
        }
    }

    /// A hand-worked tokenizer: 100 tokens, and one more per `7` in the run id.
    async fn sevens(f: &Fresh) -> Result<Option<u64>, String> {
        let Fresh::FirstLine { new, .. } = f else {
            return Ok(None);
        };
        Ok(Some(100 + new.matches('7').count() as u64))
    }

    #[tokio::test]
    async fn a_sample_takes_the_first_line_that_keeps_the_count() {
        let ids = ["17777777", "12345678", "11111111", "22222222"];
        let p = pick_fresh(ids.map(line), 100, sevens).await.unwrap();
        assert_eq!(p.fresh, line("11111111"));
        assert_eq!((p.tokens, p.tries), (Some(100), 3));
        // None keeps it: the closest, the first of equals.
        let ids = ["77777777", "17717777", "12045671", "12745677"];
        let p = pick_fresh(ids.map(line), 100, sevens).await.unwrap();
        assert_eq!(p.fresh, line("12045671"));
        assert_eq!((p.tokens, p.tries), (Some(101), 4));
        // Token ids are not counted: the first start stands.
        let ids = [vec![1; FRESH_IDS], vec![2; FRESH_IDS]].map(Fresh::FirstIds);
        let p = pick_fresh(ids.clone(), 100, sevens).await.unwrap();
        assert_eq!((p.fresh, p.tokens, p.tries), (ids[0].clone(), None, 0));
        // A counter's error is the sample's error.
        let err = pick_fresh([line("1")], 100, async |_: &Fresh| {
            Err("tokenize: 500".into())
        })
        .await;
        assert_eq!(err, Err("tokenize: 500".to_string()));
        assert!(pick_fresh([], 100, sevens).await.is_err());
    }
}
