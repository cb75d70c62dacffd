//! Token-id prompts turned into natural prose of their lengths (for servers where ids cannot be
//! sent), and the byte estimate of a text's tokens where nothing can count them.

use super::common::counted;
use super::{DatasetError, PromptSource, Sample, Tokens};
use std::collections::HashMap;
use std::sync::Arc;

/// A token count without a tokenizer: one token per 4 bytes, rounded up (the usual English
/// average). Used only when the server has no `/tokenize`, and reported as an estimate.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Replace every token-id prompt with natural prose of the same length, for servers where ids
/// cannot be sent (the chat endpoint, an unknown vocabulary, no working `/detokenize`).
///
/// With a counter (the server's `/tokenize`, a local tokenizer) each text is calibrated and
/// `prompt_len` becomes the counter's figure for the text actually sent; a shared prefix
/// (`prefix_repetition`, `--random-prefix-len`) stays one shared text. Without one, the text is
/// sized at 1.3 tokens per word and `prompt_len` keeps the asked length until the server's
/// `usage.prompt_tokens` replaces it (the runner does that).
pub fn to_text(
    samples: &mut [Sample],
    seed: u64,
    mut count: Option<&mut dyn Tokens>,
) -> Result<(), DatasetError> {
    // One text per distinct prefix (by identity: samples share the `Arc`).
    let mut prefixes: Vec<(*const u32, String)> = Vec::new();
    // A trace block's text by hash id (see `trace_text`).
    let mut blocks: HashMap<u64, String> = HashMap::new();
    for (i, s) in samples.iter_mut().enumerate() {
        let text = match s.prompt.text_part() {
            PromptSource::Blocks {
                hash_ids,
                block,
                len,
                tail_seed,
                rounds,
                answer,
                ..
            } => {
                let one = trace_text(hash_ids, *block, *len, *tail_seed, seed, &mut blocks);
                rounds_text(&one, *rounds, *answer)
            }
            PromptSource::Synthetic { prefix, len, .. } => {
                let sample_seed = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let prefix = shared_prefix_text(prefix, seed, &mut prefixes, &mut count)?;
                let (suffix, _) = sized_text(*len as u64, sample_seed, &mut count)?;
                match prefix {
                    Some(p) => format!("{p}\n\n{suffix}"),
                    None => suffix,
                }
            }
            PromptSource::Text(_)
            | PromptSource::Chat { .. }
            | PromptSource::Turns(_)
            | PromptSource::Multimodal { .. } => continue,
        };
        // The whole text once more: a prefix and a suffix counted apart can differ from the
        // two together (BOS, merges at the seam).
        if let Some(c) = count.as_deref_mut() {
            s.prompt_len = counted(c, &text)?;
        }
        s.prompt.set_text(text);
    }
    Ok(())
}

/// Words for `n` tokens at 1.3 tokens per word (at least one).
fn words_for(n: u32) -> usize {
    ((n as f64 / 1.3).round() as usize).max(1)
}

/// Bare prose of `words` words from `seed`.
fn bare_text(seed: u64, words: usize) -> String {
    match crate::workload::prose::PromptBuilder::bare(seed).build(words) {
        crate::workload::prose::Prompt::Text(t) => t,
        _ => unreachable!("bare prompts are text"),
    }
}

/// Prose of `n` tokens from `seed` and its size: calibrated with `count` (the closest text
/// where none is exact, with its true size), else at 1.3 tokens per word with `n` as its size.
fn sized_text(
    n: u64,
    seed: u64,
    count: &mut Option<&mut dyn Tokens>,
) -> Result<(String, u64), DatasetError> {
    use crate::workload::prose::{CalibrateError, Prompt, PromptBuilder};
    let Some(count) = count.as_deref_mut() else {
        return Ok((bare_text(seed, (n as f64 / 1.3).round() as usize), n));
    };
    let c = match PromptBuilder::bare(seed).calibrate(n, |p| count.count(prompt_text(p)), 20) {
        Ok(c) => c,
        // The closest text: its true size is reported, not the asked one.
        Err(CalibrateError::NotExact { best, .. }) => *best,
        Err(CalibrateError::TooSmall { overhead, .. }) => {
            return Err(DatasetError::Count(format!(
                "an empty text already counts {overhead} tokens, more than the {n} asked for"
            )))
        }
        Err(e) => return Err(DatasetError::Count(e.to_string())),
    };
    let Prompt::Text(t) = c.prompt else {
        unreachable!("bare prompts are text")
    };
    Ok((t, c.tokens))
}

/// The text of a shared prefix of token ids, made once per distinct prefix; `None` for none.
fn shared_prefix_text(
    prefix: &Arc<[u32]>,
    seed: u64,
    prefixes: &mut Vec<(*const u32, String)>,
    count: &mut Option<&mut dyn Tokens>,
) -> Result<Option<String>, DatasetError> {
    if prefix.is_empty() {
        return Ok(None);
    }
    let key = prefix.as_ptr();
    if let Some((_, t)) = prefixes.iter().find(|(k, _)| *k == key) {
        return Ok(Some(t.clone()));
    }
    let (t, _) = sized_text(prefix.len() as u64, seed ^ prefixes.len() as u64, count)?;
    prefixes.push((key, t.clone()));
    Ok(Some(t))
}

/// A session round's text: `one` `rounds` times, a placeholder answer of about `answer` tokens
/// ("story" repeated, as SGLang's) between each two.
fn rounds_text(one: &str, rounds: u32, answer: u32) -> String {
    if rounds <= 1 {
        return one.to_string();
    }
    let between = format!("\n\n{}\n\n", vec!["story"; answer as usize].join(" "));
    let mut text = one.to_string();
    for _ in 1..rounds {
        text.push_str(&between);
        text.push_str(one);
    }
    text
}

/// A trace prompt's text: each block by hash id the same words wherever it is used, so the
/// trace's prefix sharing survives as shared leading text (not calibrated block by block: a
/// Mooncake trace names ~180K blocks; the whole prompt is counted once instead), a partial
/// block its first words, and what the blocks leave of `len` prose of its own.
fn trace_text(
    hash_ids: &[u64],
    block: u32,
    len: u32,
    tail_seed: u64,
    seed: u64,
    blocks: &mut HashMap<u64, String>,
) -> String {
    let mut text = String::new();
    let mut push = |part: &str| {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(part);
    };
    let mut left = len;
    for &h in hash_ids {
        if left == 0 {
            break;
        }
        let full = blocks
            .entry(h)
            .or_insert_with(|| bare_text(seed ^ h.rotate_left(17), words_for(block)));
        let n = left.min(block);
        if n == block {
            push(full);
        } else {
            let words: Vec<&str> = full.split(' ').take(words_for(n)).collect();
            push(&words.join(" "));
        }
        left -= n;
    }
    if left > 0 {
        push(&bare_text(tail_seed, words_for(left)));
    }
    text
}

fn prompt_text(p: &crate::workload::prose::Prompt) -> &str {
    match p {
        crate::workload::prose::Prompt::Text(t) => t,
        // `PromptBuilder::bare` builds text only.
        crate::workload::prose::Prompt::Chat(m) => m.first().map_or("", |m| m.content.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;

    /// A stand-in tokenizer with BOS: one token per word plus one.
    fn counted_words(s: &str) -> Result<u64, String> {
        Ok(1 + s.split_whitespace().count() as u64)
    }

    /// A session's later round as text: the first round's text, then a placeholder answer of
    /// the row's output length in words, then the first round's text again.
    #[test]
    fn a_trace_rounds_text_repeats_the_first_round_around_a_placeholder_answer() {
        let rows = crate::workload::trace::parse(
            "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [1]}\n",
            &crate::workload::trace::TraceConfig::default(),
            10,
        )
        .unwrap();
        let mut s = crate::workload::trace::rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 2);
        to_text(&mut s, 3, None).unwrap();
        let text = |x: &Sample| match &x.prompt {
            PromptSource::Text(t) => t.clone(),
            other => panic!("text expected, got {other:?}"),
        };
        let one = text(&s[0]);
        assert!(!one.is_empty() && !one.contains("story"), "{one}");
        assert_eq!(text(&s[1]), format!("{one}\n\nstory story story\n\n{one}"));
    }

    /// Trace prompts as text (chat endpoint): rows with the same leading hash ids start with
    /// the same text, rows without share none of it, and each is counted once in full.
    #[test]
    fn trace_blocks_become_text_that_keeps_the_shared_prefix() {
        let rows = crate::workload::trace::parse(
            "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n\
             {\"timestamp\": 0, \"input_length\": 48, \"output_length\": 1, \"hash_ids\": [1, 2, 9]}\n\
             {\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [5, 6, 7]}\n",
            &crate::workload::trace::TraceConfig::default(),
            10,
        )
        .unwrap();
        let mut s = crate::workload::trace::rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 1);
        let mut count = counted_words;
        to_text(&mut s, 3, Some(&mut count)).unwrap();
        let t: Vec<String> = s
            .iter()
            .map(|x| match &x.prompt {
                PromptSource::Text(t) => t.clone(),
                other => panic!("text expected, got {other:?}"),
            })
            .collect();
        let words = |x: &str| x.split(' ').map(String::from).collect::<Vec<_>>();
        let common = |a: &str, b: &str| {
            words(a)
                .iter()
                .zip(words(b))
                .take_while(|(x, y)| **x == *y)
                .count()
        };
        // Blocks 1 and 2 (16 tokens each, 12 words each at 1.3 tokens a word) are shared.
        assert_eq!(common(&t[0], &t[1]), 24, "{t:?}");
        assert_eq!(common(&t[0], &t[2]), 0, "{t:?}");
        for (x, text) in s.iter().zip(&t) {
            assert_eq!(x.prompt_len, counted_words(text).unwrap());
        }
    }

    #[test]
    fn token_id_prompts_become_text_of_the_counted_length() {
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: 12,
            prefix_repetition_prefix_len: 60,
            prefix_repetition_suffix_len: 40,
            prefix_repetition_num_prefixes: 3,
            ..Default::default()
        };
        let mut samples = load(&cfg, &mut words).unwrap();
        let mut count = counted_words;
        to_text(&mut samples, 5, Some(&mut count)).unwrap();
        let mut firsts = std::collections::HashMap::new();
        for s in &samples {
            let PromptSource::Text(t) = &s.prompt else {
                panic!("text expected")
            };
            // The counter's figure for the text sent, within 1% of the 100 asked for.
            assert_eq!(s.prompt_len, counted_words(t).unwrap());
            assert!((99..=101).contains(&s.prompt_len), "{}", s.prompt_len);
            // Prefixes stay shared: three distinct openings of 60 tokens' worth.
            let head: String = t.split_whitespace().take(40).collect::<Vec<_>>().join(" ");
            *firsts.entry(head).or_insert(0) += 1;
        }
        assert_eq!(firsts.len(), 3, "{:?}", firsts.values());
    }

    #[test]
    fn without_a_counter_text_is_estimated_and_marked_for_usage() {
        let cfg = DatasetConfig {
            num_prompts: 3,
            random_input_len: 130,
            ..Default::default()
        };
        let mut samples = load(&cfg, &mut words).unwrap();
        to_text(&mut samples, 1, None).unwrap();
        for s in &samples {
            let PromptSource::Text(t) = &s.prompt else {
                panic!("text expected")
            };
            // ~1.3 tokens per word of English: 100 words for 130 tokens.
            assert_eq!(t.split_whitespace().count(), 100);
            assert_eq!(s.prompt_len, 130);
        }
    }
}
