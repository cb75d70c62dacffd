//! Conversations for `--multi-turn` (vllm-bench's): synthetic ones or a ShareGPT file's, and
//! the `messages` of each turn. Pure: no IO, no clock; a front end's conversation loop sends
//! them, turn after turn.
//!
//! Every conversation starts with the same system message of `--random-prefix-len` tokens
//! (when > 0): the shared prefix a server's prefix cache can reuse across conversations, and
//! within a conversation each turn's prompt starts with the whole previous turn's prompt and
//! answer.

use crate::workload::datasets;
use crate::workload::prose::{Prompt, PromptBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::Arc;

/// `--multi-turn*` flags, with vllm-bench's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiTurnConfig {
    /// `--multi-turn-num-turns` (3).
    pub num_turns: usize,
    /// `--multi-turn-min-turns` (0: `num_turns`).
    pub min_turns: usize,
    /// `--multi-turn-max-turns` (0: `num_turns`).
    pub max_turns: usize,
    /// `--multi-turn-concurrency` (default `--max-concurrency`, else every conversation).
    pub concurrency: Option<usize>,
    /// `--multi-turn-delay-ms`: think time between a conversation's turns.
    pub delay_ms: u64,
    /// `--multi-turn-prefix-global-ratio`: the share of each user message that is the same in
    /// every conversation. With the next, > 0 turns on vllm-bench's no-history mode.
    pub prefix_global_ratio: f64,
    /// `--multi-turn-prefix-conversation-ratio`: the share the same within a conversation.
    pub prefix_conversation_ratio: f64,
}

impl MultiTurnConfig {
    /// vllm-bench's prefix-sharing mode: each turn sends only its own message (no earlier
    /// turns, no answers), built as `[global][conversation][unique]` parts.
    pub fn no_history(&self) -> bool {
        self.prefix_global_ratio > 0.0 || self.prefix_conversation_ratio > 0.0
    }
}

/// One synthetic conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    pub id: String,
    /// The shared system message (the same `Arc` in every conversation), if any.
    pub system: Option<Arc<str>>,
    /// Each turn's user message and the output tokens to ask for.
    pub turns: Vec<(String, u32)>,
}

/// Words for about `tokens` tokens of prose (1.3 tokens a word, as elsewhere).
pub(crate) fn prose(seed: u64, tokens: u32) -> String {
    let words = ((tokens as f64 / 1.3).round() as usize).max(1);
    match PromptBuilder::bare(seed).build(words) {
        Prompt::Text(t) => t,
        // Bare builders only make text; an empty message is the harmless fallback.
        _ => String::new(),
    }
}

/// `n` conversations: turns per conversation uniform in `[min, max]` turns (seeded), user
/// messages of about `input_len` tokens, `output_len` tokens asked per turn.
pub fn generate(
    mt: &MultiTurnConfig,
    n: usize,
    input_len: u32,
    output_len: u32,
    prefix_len: u32,
    seed: u64,
    id_prefix: &str,
) -> Vec<Conversation> {
    let lo = if mt.min_turns == 0 {
        mt.num_turns
    } else {
        mt.min_turns
    };
    let hi = if mt.max_turns == 0 {
        mt.num_turns
    } else {
        mt.max_turns
    }
    .max(lo);
    let system: Option<Arc<str>> =
        (prefix_len > 0).then(|| prose(seed ^ 0x5359_5354_454D, prefix_len).into());
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4D54_5552_4E53);
    // No-history mode: vllm-bench's part lengths, floors of the message length.
    let (global_len, conv_len) = if mt.no_history() {
        (
            (input_len as f64 * mt.prefix_global_ratio).floor() as u32,
            (input_len as f64 * mt.prefix_conversation_ratio).floor() as u32,
        )
    } else {
        (0, 0)
    };
    let unique_len = input_len.saturating_sub(global_len + conv_len).max(1);
    let part = |s: u64, len: u32| {
        if len > 0 {
            prose(s, len) + " "
        } else {
            String::new()
        }
    };
    let global = part(seed ^ 0x474C_4F42_414C, global_len);
    (0..n)
        .map(|c| {
            let k = rng.gen_range(lo..=hi);
            let shared = format!(
                "{global}{}",
                part(seed ^ 0x434F_4E56 ^ ((c as u64) << 24), conv_len)
            );
            Conversation {
                id: format!("{id_prefix}conv{c}"),
                system: system.clone(),
                turns: (0..k)
                    .map(|t| {
                        let s = seed ^ ((c as u64) << 20 | t as u64).wrapping_mul(0x9E37_79B9);
                        (format!("{shared}{}", prose(s, unique_len)), output_len)
                    })
                    .collect(),
            }
        })
        .collect()
}

/// `n` conversations from a ShareGPT file (vllm-bench's `--dataset-name sharegpt --multi-turn`):
/// entries with at least 4 messages, shuffled (seeded); each human message followed by a
/// reply is a turn (a non-human or empty message is skipped), at most `max_turns` turns; a
/// conversation with fewer than 2 turns is dropped; fewer usable conversations than `n` are
/// repeated at random. The file's replies are never sent (the server's own answers are
/// carried): only their length is used, as the turn's output length, unless `output_len`
/// (`--sharegpt-output-len`) fixes it. That length is [`datasets::estimate_tokens`] (at least
/// 1), where vllm-bench tokenizes: this tool has no local tokenizer.
pub fn sharegpt(
    text: &str,
    n: usize,
    output_len: Option<u32>,
    max_turns: Option<usize>,
    seed: u64,
    id_prefix: &str,
) -> Result<Vec<Conversation>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let list = v
        .as_array()
        .ok_or("expected a JSON list of conversations")?;
    let mut entries: Vec<&Vec<Value>> = list
        .iter()
        .filter_map(|e| e.get("conversations")?.as_array())
        .filter(|c| c.len() >= 4)
        .collect();
    if entries.is_empty() {
        return Err("no entry with at least 4 messages (2 turns)".into());
    }
    let mut rng = StdRng::seed_from_u64(seed);
    rand::seq::SliceRandom::shuffle(entries.as_mut_slice(), &mut rng);
    let field = |m: &Value, k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out: Vec<Conversation> = Vec::new();
    for msgs in entries {
        if out.len() >= n {
            break;
        }
        let mut turns = Vec::new();
        let mut i = 0;
        while i + 1 < msgs.len() && max_turns.is_none_or(|m| turns.len() < m) {
            let user = field(&msgs[i], "value");
            if field(&msgs[i], "from") != "human" || user.is_empty() {
                i += 1;
                continue;
            }
            let reply = field(&msgs[i + 1], "value");
            let len = output_len.unwrap_or_else(|| {
                u32::try_from(datasets::estimate_tokens(&reply))
                    .unwrap_or(u32::MAX)
                    .max(1)
            });
            turns.push((user, len));
            i += 2;
        }
        if turns.len() >= 2 {
            out.push(Conversation {
                id: format!("{id_prefix}conv{}", out.len()),
                system: None,
                turns,
            });
        }
    }
    if out.is_empty() {
        return Err("no conversation with at least 2 human turns followed by a reply".into());
    }
    let have = out.len();
    while out.len() < n {
        let mut c = out[rng.gen_range(0..have)].clone();
        c.id = format!("{id_prefix}conv{}", out.len());
        out.push(c);
    }
    Ok(out)
}

/// The `messages` of a turn: the system message, then each earlier turn's user message and
/// the server's answer, then this turn's user message (vllm-bench's content shapes).
pub fn messages(system: Option<&str>, history: &[(String, String)], user: &str) -> Value {
    let mut m = Vec::with_capacity(2 * history.len() + 2);
    if let Some(s) = system {
        m.push(json!({"role": "system", "content": s}));
    }
    for (u, a) in history {
        m.push(json!({"role": "user", "content": [{"type": "text", "text": u}]}));
        m.push(json!({"role": "assistant", "content": a}));
    }
    m.push(json!({"role": "user", "content": [{"type": "text", "text": user}]}));
    Value::Array(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mt() -> MultiTurnConfig {
        MultiTurnConfig {
            num_turns: 3,
            min_turns: 0,
            max_turns: 0,
            concurrency: None,
            delay_ms: 0,
            prefix_global_ratio: 0.0,
            prefix_conversation_ratio: 0.0,
        }
    }

    #[test]
    fn no_history_messages_share_a_global_and_a_conversation_part() {
        let ps = MultiTurnConfig {
            prefix_global_ratio: 0.25,
            prefix_conversation_ratio: 0.25,
            ..mt()
        };
        assert!(ps.no_history() && !mt().no_history());
        let a = generate(&ps, 3, 80, 8, 0, 7, "");
        // The words common to the start of two messages.
        let common = |x: &str, y: &str| {
            x.split(' ')
                .zip(y.split(' '))
                .take_while(|(p, q)| p == q)
                .count()
        };
        let words = |x: &str| x.split(' ').count();
        let (m00, m01, m10) = (&a[0].turns[0].0, &a[0].turns[1].0, &a[1].turns[0].0);
        // 20 tokens each part at 1.3 tokens a word: about 15 words global, 15 per conversation,
        // 31 unique; the same conversation shares both parts, another only the global one.
        let within = common(m00, m01);
        let across = common(m00, m10);
        assert!((28..=32).contains(&within), "{within}: {m00} / {m01}");
        assert!((13..=17).contains(&across), "{across}: {m00} / {m10}");
        assert!((58..=64).contains(&words(m00)), "{}", words(m00));
        assert_eq!(common(&a[1].turns[0].0, &a[2].turns[1].0), across);
        // Without the ratios, messages share nothing.
        let b = generate(&mt(), 2, 80, 8, 0, 7, "");
        assert!(common(&b[0].turns[0].0, &b[0].turns[1].0) < 3);
    }

    fn msg(from: &str, value: &str) -> Value {
        json!({"from": from, "value": value})
    }

    #[test]
    fn sharegpt_takes_the_human_turns_and_the_reply_lengths() {
        let file = json!([
            // Three turns after a leading system message that is skipped.
            {"conversations": [msg("system", "be brief"), msg("human", "one"),
                msg("gpt", "12345678"), msg("human", "two"), msg("gpt", "123456789012"),
                msg("human", "three"), msg("gpt", "1")]},
            // One usable turn only: dropped.
            {"conversations": [msg("human", "a"), msg("gpt", "b"), msg("gpt", "c"),
                msg("gpt", "d")]},
            // Fewer than 4 messages: filtered out.
            {"conversations": [msg("human", "x"), msg("gpt", "y")]},
            {"no": "conversations"}
        ])
        .to_string();
        let c = sharegpt(&file, 1, None, None, 7, "p-").unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].id, "p-conv0");
        assert_eq!(c[0].system, None);
        // Replies of 8, 12 and 1 bytes: 2, 3 and 1 tokens at 4 bytes a token.
        let want: Vec<(String, u32)> =
            vec![("one".into(), 2), ("two".into(), 3), ("three".into(), 1)];
        assert_eq!(c[0].turns, want);
        // The cap stops the walk; a fixed output length replaces the replies' lengths.
        let c = sharegpt(&file, 1, Some(5), Some(2), 7, "").unwrap();
        assert_eq!(
            c[0].turns,
            vec![("one".to_string(), 5), ("two".to_string(), 5)]
        );
        // Too few conversations are repeated, renumbered.
        let c = sharegpt(&file, 3, None, None, 7, "").unwrap();
        let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["conv0", "conv1", "conv2"]);
        assert!(c.iter().all(|x| x.turns == want));
        assert!(sharegpt("{}", 1, None, None, 0, "").is_err());
        assert!(sharegpt("[{\"conversations\": []}]", 1, None, None, 0, "").is_err());
    }

    #[test]
    fn conversations_are_seeded_and_share_one_system_prefix() {
        let a = generate(&mt(), 4, 40, 8, 30, 7, "p-");
        assert_eq!(a, generate(&mt(), 4, 40, 8, 30, 7, "p-"));
        assert_ne!(a, generate(&mt(), 4, 40, 8, 30, 8, "p-"));
        assert!(a.iter().all(|c| c.turns.len() == 3));
        assert_eq!(a[2].id, "p-conv2");
        let s = a[0].system.clone().unwrap();
        assert!(a.iter().all(|c| c.system.as_deref() == Some(&*s)));
        // User messages differ across turns and conversations.
        assert_ne!(a[0].turns[0].0, a[0].turns[1].0);
        assert_ne!(a[0].turns[0].0, a[1].turns[0].0);
        assert!(generate(&mt(), 2, 40, 8, 0, 7, "")[0].system.is_none());
        let ranged = MultiTurnConfig {
            min_turns: 2,
            max_turns: 5,
            ..mt()
        };
        let lens: Vec<usize> = generate(&ranged, 60, 4, 1, 0, 1, "")
            .iter()
            .map(|c| c.turns.len())
            .collect();
        assert!(lens.iter().all(|l| (2..=5).contains(l)));
        assert!(lens.contains(&2) && lens.contains(&5), "{lens:?}");
    }

    #[test]
    fn a_turn_carries_the_conversation_so_far() {
        let h = vec![
            ("u0".to_string(), "a0".to_string()),
            ("u1".into(), "a1".into()),
        ];
        let m = messages(Some("sys"), &h, "u2");
        assert_eq!(
            m,
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "u0"}]},
                {"role": "assistant", "content": "a0"},
                {"role": "user", "content": [{"type": "text", "text": "u1"}]},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": [{"type": "text", "text": "u2"}]},
            ])
        );
    }
}
