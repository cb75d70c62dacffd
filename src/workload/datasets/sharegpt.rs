//! `sharegpt`, by vLLM's rules or SGLang's (its `sharegpt` and `custom`): a prompt and its reply
//! from each conversation, counted, filtered and shuffled (Python's `random`).

use super::common::{counted, fill_to, need_path, read, with_suffix, wrapped};
use super::{Conversations, DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::pyrandom::PyRandom;

/// The `sharegpt` dataset: a prompt and its reply from each conversation, counted, filtered
/// and shuffled by [`DatasetConfig::conversations`]' rules. The output length is the reply's
/// token count, or `--sharegpt-output-len`.
pub fn sharegpt(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    sharegpt_text(cfg, &path.display().to_string(), &text, tokens)
}

/// [`sharegpt`] on a file's text, `name` naming it in errors (the parser the fuzz target
/// drives). `tokens`' wrap turns each prompt into the text sent before it is counted (SGLang's
/// `--apply-chat-template`).
pub fn sharegpt_text(
    cfg: &DatasetConfig,
    name: &str,
    text: &str,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let fmt = |msg: String| DatasetError::Format {
        path: name.to_string(),
        msg,
    };
    let list: Vec<serde_json::Value> = match cfg.conversations {
        // SGLang's custom file: JSON lines, a line that does not parse skipped.
        Conversations::Sglang { lines: true, .. } => text
            .lines()
            .filter_map(|l| serde_json::from_str(l.trim()).ok())
            .collect(),
        _ => match serde_json::from_str(text) {
            Ok(serde_json::Value::Array(list)) => list,
            Ok(_) => return Err(fmt("expected a JSON list of conversations".into())),
            Err(e) => return Err(fmt(format!("not valid JSON: {e}"))),
        },
    };
    let mut pairs = match cfg.conversations {
        Conversations::Vllm => vllm_pairs(&list).map_err(fmt)?,
        Conversations::Sglang { lines, .. } => sglang_pairs(&list, lines).map_err(fmt)?,
    };
    // Both tools shuffle with Python's `random` seeded by --seed (vLLM just before, SGLang at
    // the start of the run, with nothing drawn in between).
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut pairs);
    }
    let mut out = Vec::with_capacity(cfg.num_prompts);
    for (prompt, reply) in pairs {
        if out.len() >= cfg.num_prompts {
            break;
        }
        let prompt = with_suffix(prompt, &cfg.prompt_suffix);
        let prompt = wrapped(tokens, &prompt)?;
        let prompt_len = counted(tokens, &prompt)?;
        let output_len = match cfg.sharegpt_output_len {
            Some(n) => n as u64,
            None => counted(tokens, reply)?,
        };
        // Counts come from the server's `/tokenize`: a huge one must be filtered, not overflow.
        let total = prompt_len.saturating_add(output_len);
        let keep = match cfg.conversations {
            Conversations::Vllm => {
                prompt_len >= 4
                    && (cfg.sharegpt_output_len.is_some() || output_len >= 4)
                    && prompt_len <= 1024
                    && total <= 2048
            }
            Conversations::Sglang { context_len, .. } => {
                prompt_len >= 2
                    && output_len >= 2
                    && context_len.is_none_or(|c| c == 0 || total <= c as u64)
            }
        };
        if !keep {
            continue;
        }
        out.push(Sample {
            group: None,
            prompt: PromptSource::Text(prompt.into_owned()),
            prompt_len,
            output_len: output_len.min(u32::MAX as u64) as u32,
        });
    }
    if out.is_empty() {
        let rules = match cfg.conversations {
            Conversations::Vllm => "a human turn followed by a reply, within vLLM's length limits",
            Conversations::Sglang { .. } => {
                "two turns, each at least 2 tokens, within --sharegpt-context-len"
            }
        };
        return Err(fmt(format!("no usable conversation ({rules})")));
    }
    match cfg.conversations {
        Conversations::Vllm => fill_to(&mut out, cfg),
        Conversations::Sglang { .. } => out.truncate(cfg.num_prompts),
    }
    Ok(out)
}

/// vLLM 0.33's pairs: turns 0 and 1 of each entry whose `conversations` list has two or more,
/// whatever their roles; a turn without a string `value` is an error (vLLM stops on it too).
fn vllm_pairs(list: &[serde_json::Value]) -> Result<Vec<(&str, &str)>, String> {
    let mut pairs = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let conv = entry.get("conversations").and_then(|c| c.as_array());
        let Some([first, second, ..]) = conv.map(Vec::as_slice) else {
            continue;
        };
        match (turn(first).1, turn(second).1) {
            (Some(p), Some(r)) => pairs.push((p, r)),
            _ => {
                return Err(format!(
                    "conversation {} has a turn without a text (a string under \"value\")",
                    i + 1
                ))
            }
        }
    }
    Ok(pairs)
}

/// SGLang's pairs: turns 0 and 1 of each entry with two or more. A sharegpt turn without a
/// string `value` is an error (SGLang stops on it too); a custom turn's text is its `content`,
/// else its `value`, else empty.
pub(super) fn sglang_pairs(
    list: &[serde_json::Value],
    lines: bool,
) -> Result<Vec<(&str, &str)>, String> {
    let mut pairs = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let conv = entry
            .get("conversations")
            .or_else(|| entry.get("conversation"))
            .and_then(|c| c.as_array());
        let Some([first, second, ..]) = conv.map(Vec::as_slice) else {
            continue;
        };
        match (sglang_text(first, lines), sglang_text(second, lines)) {
            (Some(p), Some(r)) => pairs.push((p, r)),
            _ => {
                return Err(format!(
                    "conversation {} has a turn without a text (a string under {})",
                    i + 1,
                    if lines {
                        "\"content\" or \"value\""
                    } else {
                        "\"value\""
                    }
                ))
            }
        }
    }
    Ok(pairs)
}

/// A turn's text by SGLang's rule (see [`sglang_pairs`]); `None`: not a string.
fn sglang_text(t: &serde_json::Value, lines: bool) -> Option<&str> {
    let v = match lines {
        true => t.get("content").or_else(|| t.get("value")),
        false => t.get("value"),
    };
    match v {
        None if lines => Some(""),
        v => v.and_then(|v| v.as_str()),
    }
}

fn turn(t: &serde_json::Value) -> (&str, Option<&str>) {
    (
        t.get("from").and_then(|f| f.as_str()).unwrap_or(""),
        t.get("value").and_then(|f| f.as_str()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;

    #[test]
    fn a_prompt_suffix_goes_before_sglangs_assistant_tag() {
        assert_eq!(
            with_suffix("Hello.", " Be brief."),
            "Hello. Be brief.Assistant:"
        );
        // A prompt ending in the tag has it taken off first, so it appears once, last.
        assert_eq!(
            with_suffix("Hello.\nAssistant:", "\nBe brief.\n"),
            "Hello.\n\nBe brief.\nAssistant:"
        );
        // No suffix: the prompt as it is, tag and all.
        assert_eq!(with_suffix("Hi Assistant:", ""), "Hi Assistant:");
        // SGLang's sharegpt applies it before counting (one token a word here).
        let f =
            file(r#"[{"conversations": [{"value": "one two three"}, {"value": "four five"}]}]"#);
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 1,
            conversations: Conversations::Sglang {
                lines: false,
                context_len: None,
            },
            prompt_suffix: " six seven".into(),
            ..Default::default()
        };
        let s = load(&cfg, &mut words).unwrap();
        assert_eq!(
            s[0].prompt,
            PromptSource::Text("one two three six sevenAssistant:".into())
        );
        assert_eq!(s[0].prompt_len, 5);
    }

    #[test]
    fn sharegpt_takes_turns_zero_and_one_whatever_their_roles() {
        // vLLM 0.33 reads turns 0 and 1 of an entry with at least two: a system turn 0 is the
        // prompt (here 2 words, under the 4-token minimum, so the entry is dropped).
        let f = file(
            r#"[
            {"conversations": [{"from": "system", "value": "be nice"},
                               {"from": "human", "value": "seven eight nine ten eleven twelve"},
                               {"from": "gpt", "value": "g h i j k l m"}]},
            {"conversations": [{"from": "human", "value": "one two three four five"},
                               {"from": "gpt", "value": "a b c d e f"},
                               {"from": "human", "value": "a later turn nobody reads"}]},
            {"conversations": [{"from": "human", "value": "too short"}, {"from": "gpt", "value": "x y z w v"}]},
            {"conversations": [{"from": "human", "value": "lonely turn"}]},
            {"id": 3}
        ]"#,
        );
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 3,
            ..Default::default()
        };
        let s = load(&cfg, &mut words).unwrap();
        // Only the first conversation passes the 4-token minimum; it is oversampled to 3.
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(
            |x| x.prompt == PromptSource::Text("one two three four five".into())
                && x.prompt_len == 5
                && x.output_len == 6
        ));
        let fixed = DatasetConfig {
            sharegpt_output_len: Some(9),
            ..cfg.clone()
        };
        assert!(load(&fixed, &mut words)
            .unwrap()
            .iter()
            .all(|x| x.output_len == 9));
        let none = DatasetConfig { path: None, ..cfg };
        assert!(load(&none, &mut words)
            .unwrap_err()
            .to_string()
            .contains("--dataset-path"));
    }

    /// SGLang's rules, worked by hand with the word counter: prompt and output at least 2,
    /// prompt + output at most the context length, turns 0 and 1 whatever their roles.
    #[test]
    fn sglang_sharegpt_filters_by_context_length_and_never_oversamples() {
        let f = file(
            r#"[
            {"conversations": [{"from": "system", "value": "be nice to me"},
                               {"from": "human", "value": "one two three"}]},
            {"conversation": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "x y z"}]},
            {"conversations": [{"from": "human", "value": "short"}, {"from": "gpt", "value": "p q"}]},
            {"conversations": [{"from": "human", "value": "k l"}, {"from": "gpt", "value": "m n"}]},
            {"conversations": [{"from": "human", "value": "lonely turn"}]}
        ]"#,
        );
        let lens = |context_len: Option<u32>, fixed: Option<u32>| -> Vec<(u64, u32)> {
            let cfg = DatasetConfig {
                kind: DatasetKind::ShareGpt,
                path: Some(f.path().into()),
                num_prompts: 10,
                sharegpt_output_len: fixed,
                conversations: Conversations::Sglang {
                    lines: false,
                    context_len,
                },
                ..Default::default()
            };
            let mut s: Vec<(u64, u32)> = load(&cfg, &mut words)
                .unwrap()
                .iter()
                .map(|x| (x.prompt_len, x.output_len))
                .collect();
            s.sort();
            s
        };
        // (4, 3) is turn 0 (system) and turn 1; "short" is 1 token and dropped; (5, 3) comes
        // from the `conversation` key. Three pass, and three are sent although 10 were asked.
        assert_eq!(lens(None, None), [(2, 2), (4, 3), (5, 3)]);
        assert_eq!(lens(Some(0), None), [(2, 2), (4, 3), (5, 3)]);
        // prompt + output > 7 is dropped; exactly 7 is kept.
        assert_eq!(lens(Some(7), None), [(2, 2), (4, 3)]);
        // With a fixed output length the sum uses it.
        assert_eq!(lens(Some(8), Some(4)), [(2, 4), (4, 4)]);
        // Nothing passes: an error naming SGLang's rules, not an empty run.
        let none = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            sharegpt_output_len: Some(4),
            conversations: Conversations::Sglang {
                lines: false,
                context_len: Some(5),
            },
            ..Default::default()
        };
        let e = load(&none, &mut words).unwrap_err().to_string();
        assert!(e.contains("--sharegpt-context-len"), "{e}");
    }

    #[test]
    fn sglang_custom_reads_json_lines_with_content_or_value() {
        let f = file(concat!(
            "{\"conversations\": [{\"role\": \"user\", \"content\": \"a b c\"}, {\"role\": \"assistant\", \"content\": \"d e\"}]}\n",
            "not json at all\n",
            "\n",
            "{\"conversation\": [{\"value\": \"f g h i\"}, {\"value\": \"j k l\"}]}\n",
            "{\"conversations\": [{\"content\": \"m n\"}, {\"other\": 1}]}\n",
            "{\"conversations\": [{\"content\": \"only one\"}]}\n",
        ));
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 10,
            conversations: Conversations::Sglang {
                lines: true,
                context_len: None,
            },
            ..Default::default()
        };
        let mut s: Vec<(u64, u32)> = load(&cfg, &mut words)
            .unwrap()
            .iter()
            .map(|x| (x.prompt_len, x.output_len))
            .collect();
        s.sort();
        // The bad line is skipped; a turn with neither key is empty text (0 words: dropped).
        assert_eq!(s, [(3, 2), (4, 3)]);
        // The same file read as SGLang's sharegpt is not one JSON list.
        let as_list = DatasetConfig {
            conversations: Conversations::Sglang {
                lines: false,
                context_len: None,
            },
            ..cfg
        };
        assert!(load(&as_list, &mut words)
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
    }

    #[test]
    fn a_huge_token_count_from_the_server_is_filtered_not_overflowed() {
        let f = file(
            r#"[{"conversations": [{"from": "human", "value": "one two three four five"},
                                  {"from": "gpt", "value": "REPLY"}]}]"#,
        );
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 2,
            ..Default::default()
        };
        // A `/tokenize` answer of u64::MAX for the reply: prompt + output must not wrap below
        // 2048 (which would keep the sample with a truncated output length).
        let mut bogus = |s: &str| Ok(if s == "REPLY" { u64::MAX } else { 5 });
        let err = load(&cfg, &mut bogus).unwrap_err().to_string();
        assert!(err.contains("no usable conversation"), "{err}");
    }
}
