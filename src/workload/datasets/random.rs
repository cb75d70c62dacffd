//! `random` (vLLM's), `random` and `random-ids` (SGLang's): token-id prompts of lengths drawn
//! as the reference draws them (numpy's generators, in the reference's order), and SGLang's
//! `random` that cuts its ShareGPT file's texts to those lengths with the model's tokenizer.
//!
//! Random prompts are token ids built arithmetically from a per-prompt offset, as vLLM does
//! (`(offset + i + j) mod vocab`), so a prompt costs one pass over its ids, and a [`Sample`]
//! only stores `(offset, length)` until [`Sample::write_ids`] materialises it: 100,000 prompts
//! of 8K tokens never need 3 GB of ids at once.

use super::sharegpt::sglang_pairs;
use super::{DatasetConfig, DatasetError, IdRange, PromptSource, RandomDraws, Sample};
use super::{Tokenizer, Tokens};
use crate::workload::numpy::{Generator, RandomState};
use crate::workload::pyrandom::PyRandom;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::sync::Arc;

/// `[floor(L(1-r)), ceil(L(1+r))]`, at least 1 token: Python's reading of the range ratio.
pub fn range_bounds(len: u32, ratio: f64) -> (u32, u32) {
    let lo = (len as f64 * (1.0 - ratio)).floor().max(1.0) as u32;
    let hi = (len as f64 * (1.0 + ratio)).ceil().max(lo as f64) as u32;
    (lo, hi)
}

/// The `random` family: SGLang's `random` cuts its ShareGPT file (`--dataset-path`) with the
/// model's tokenizer where `tokens` has one ([`sglang_sharegpt_cuts`]); every other `random`
/// (and SGLang's without a tokenizer) is token ids of the drawn lengths ([`random`]).
pub(super) fn load(
    cfg: &DatasetConfig,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    match (
        cfg.cuts_sharegpt() && cfg.path.is_some(),
        tokens.tokenizer(),
    ) {
        (true, Some(tok)) => sharegpt_cuts(cfg, tok),
        _ => random(cfg),
    }
}

/// [`sglang_sharegpt_cuts`] of the file at `--dataset-path`; a file with no conversation to
/// cut is an error.
fn sharegpt_cuts(cfg: &DatasetConfig, tok: &dyn Tokenizer) -> Result<Vec<Sample>, DatasetError> {
    let path = cfg.path.as_deref().unwrap_or(std::path::Path::new(""));
    let file = std::fs::read_to_string(path).map_err(|e| {
        DatasetError::Invalid(format!(
            "--dataset-name random reads SGLang's ShareGPT file {}: {e}",
            path.display()
        ))
    })?;
    let samples = sglang_sharegpt_cuts(cfg, &file, tok)?;
    if samples.is_empty() {
        return Err(DatasetError::Invalid(format!(
            "--dataset-name random: {} has no conversation to cut (entries with two turns and a \
             non-empty first one)",
            path.display()
        )));
    }
    Ok(samples)
}

/// The `random` dataset's token ids.
pub fn random(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    random_then(cfg).map(|(samples, _)| samples)
}

/// The `random` dataset and, for vLLM's draws, the generator they leave (`random-mm` goes on
/// drawing from it).
pub fn random_then(cfg: &DatasetConfig) -> Result<(Vec<Sample>, Option<Generator>), DatasetError> {
    let mut drawn = random_lengths(cfg)?;
    // The ids themselves are llmspeed's (a range every tokenizer shares, sent as ids): the
    // references decode theirs to text, so only the lengths can be the same.
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let ids = cfg.ids;
    let prefix: Arc<[u32]> = random_ids(&mut rng, cfg.random_prefix_len as usize, ids).into();
    let out = (0..cfg.num_prompts)
        .map(|i| {
            let len = drawn.input[i];
            // vLLM and SGLang: (offset + i + arange(len)) % vocab.
            let start =
                ((drawn.offsets[i] % ids.span as u64) as u32 + i as u32 % ids.span) % ids.span;
            Sample {
                group: None,
                prompt: PromptSource::Synthetic {
                    prefix: prefix.clone(),
                    start,
                    len,
                    ids,
                },
                prompt_len: prefix.len() as u64 + len as u64,
                output_len: drawn.output[i],
            }
        })
        .collect();
    Ok((out, drawn.rest.take()))
}

/// Each request's drawn lengths and offset, and how many 32-bit words the draws took.
struct Drawn {
    input: Vec<u32>,
    output: Vec<u32>,
    offsets: Vec<u64>,
    words: u64,
    /// vLLM's generator after the draws.
    rest: Option<Generator>,
}

fn random_lengths(cfg: &DatasetConfig) -> Result<Drawn, DatasetError> {
    let n = cfg.num_prompts;
    match cfg.random_draws {
        RandomDraws::Vllm { special } => {
            let ri = cfg.random_range_ratio;
            let ro = cfg.random_output_range_ratio.unwrap_or(ri);
            for r in [ri, ro] {
                if !(0.0..1.0).contains(&r) {
                    return Err(DatasetError::Invalid(format!(
                        "--random-range-ratio must be in [0, 1), got {r}"
                    )));
                }
            }
            // vLLM: [floor(L(1-r)), ceil(L(1+r))], the input's L less the special tokens, the
            // output's at least 1.
            let span = |l: u32, r: f64| {
                let l = l as f64;
                (
                    (l * (1.0 - r)).floor() as u32,
                    (l * (1.0 + r)).ceil() as u32,
                )
            };
            let real = cfg.random_input_len.saturating_sub(special);
            let (in_lo, in_hi) = span(real, ri);
            let (out_lo, out_hi) = span(cfg.random_output_len, ro);
            let (out_lo, out_hi) = (out_lo.max(1), out_hi.max(1));
            // vLLM's refusal: no drawn prompt may be empty before the special tokens.
            if cfg.random_prefix_len + in_lo == 0 {
                return Err(DatasetError::Invalid(format!(
                    "--random-input-len {} is too small: less the tokenizer's {special} special \
                     tokens and with input range ratio {ri}, the shortest prompt would be empty; \
                     raise --random-input-len or --random-prefix-len, or lower the ratio",
                    cfg.random_input_len
                )));
            }
            let mut g = Generator::new(cfg.seed);
            let mut draw = |lo: u32, hi: u32| -> Vec<u32> {
                (0..n)
                    .map(|_| g.integers(lo as i64, hi as i64 + 1) as u32)
                    .collect()
            };
            let input = draw(in_lo, in_hi)
                .into_iter()
                .map(|l| l + special)
                .collect();
            let output = draw(out_lo, out_hi);
            let offsets = (0..n)
                .map(|_| g.integers(0, cfg.ids.span as i64) as u64)
                .collect();
            Ok(Drawn {
                input,
                output,
                offsets,
                words: 0,
                rest: Some(g),
            })
        }
        RandomDraws::Sglang { vocab, offsets, .. } => {
            let ((in_lo, in_hi), (out_lo, out_hi)) = cfg.random_bounds.unwrap_or((
                range_bounds(cfg.random_input_len, cfg.random_range_ratio),
                range_bounds(cfg.random_output_len, cfg.random_range_ratio),
            ));
            let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
            let input = sglang_lens(&mut np, (in_lo, in_hi), n);
            let output = sglang_lens(&mut np, (out_lo, out_hi), n);
            let offsets = match offsets {
                true => (0..n)
                    .map(|_| np.randint(0, vocab.max(1) as i64) as u64)
                    .collect(),
                // SGLang's ShareGPT cuts take no offset: llmspeed's come from its own generator.
                false => {
                    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x00ff_5e75);
                    (0..n)
                        .map(|_| rng.gen_range(0..cfg.ids.span) as u64)
                        .collect()
                }
            };
            Ok(Drawn {
                input,
                output,
                offsets,
                words: np.words(),
                rest: None,
            })
        }
    }
}

/// SGLang 0.5.23's `random` (`sample_random_requests` with `random_sample`): turn 0 of each
/// ShareGPT entry with at least two turns (`conversations`, else `conversation`), the list
/// shuffled by Python's `random` seeded with --seed; in that order each prompt encoded with the
/// model's tokenizer (`tok`'s `encode`, special tokens added; an empty one skipped) and its ids
/// cut, or repeated and cut, to the next drawn length ([`random_lengths`], numpy's, as for
/// `random-ids` but without offsets); as text (`RandomDraws::Sglang`'s `text`: SGLang's text
/// prompts, no `--tokenize-prompt`) each length first shortened by the tokenizer's special
/// tokens (at least 1) and the ids decoded to the text sent, counted again by `encode` for the
/// prompt's length; else the ids themselves are sent, the drawn length. A file with fewer usable
/// entries sends fewer prompts, as SGLang's.
pub fn sglang_sharegpt_cuts(
    cfg: &DatasetConfig,
    file: &str,
    tok: &dyn Tokenizer,
) -> Result<Vec<Sample>, DatasetError> {
    let as_text = matches!(cfg.random_draws, RandomDraws::Sglang { text: true, .. });
    let fmt = |msg: String| DatasetError::Format {
        path: cfg
            .path
            .as_ref()
            .map_or("the ShareGPT file".into(), |p| p.display().to_string()),
        msg,
    };
    let drawn = random_lengths(cfg)?;
    let list: Vec<Value> = serde_json::from_str(file)
        .map_err(|e| fmt(format!("not a JSON list of conversations: {e}")))?;
    // The pairs SGLang's sharegpt reads too, of which `random` keeps the prompt.
    let mut prompts: Vec<&str> = sglang_pairs(&list, false)
        .map_err(fmt)?
        .into_iter()
        .map(|(prompt, _)| prompt)
        .collect();
    PyRandom::new(cfg.seed).shuffle(&mut prompts);
    let n = cfg.num_prompts.min(drawn.input.len());
    let mut out = Vec::with_capacity(n);
    for prompt in prompts {
        let i = out.len();
        if i == n {
            break;
        }
        let ids = tok.encode(prompt).map_err(DatasetError::Invalid)?;
        if ids.is_empty() {
            continue;
        }
        let want = match as_text {
            true => drawn.input[i].saturating_sub(tok.special_tokens()).max(1),
            false => drawn.input[i],
        } as usize;
        let cut: Vec<u32> = ids.iter().copied().cycle().take(want).collect();
        let (prompt, prompt_len) = match as_text {
            true => {
                let text = tok.decode(&cut).map_err(DatasetError::Invalid)?;
                let len = tok.encode(&text).map_err(DatasetError::Invalid)?.len() as u64;
                (PromptSource::Text(text), len)
            }
            false => (
                PromptSource::Synthetic {
                    prefix: cut.into(),
                    start: 0,
                    len: 0,
                    ids: cfg.ids,
                },
                want as u64,
            ),
        };
        out.push(Sample {
            prompt,
            prompt_len,
            output_len: drawn.output[i],
            group: None,
        });
    }
    Ok(out)
}

/// How many 32-bit words SGLang's `random` takes from numpy's legacy generator for `cfg`
/// (0 where the settings are refused).
pub(super) fn numpy_words(cfg: &DatasetConfig) -> u64 {
    random_lengths(cfg).map_or(0, |d| d.words)
}

/// SGLang 0.5.23's inclusive bounds for a length `l` and range ratio `r`:
/// `[max(int(l*r), 1), l]`, and `(0, 0)` for 0 (its `compute_random_lens`).
pub fn sglang_range(l: u32, r: f64) -> (u32, u32) {
    match l {
        0 => (0, 0),
        _ => (((l as f64 * r) as u32).clamp(1, l), l),
    }
}

/// SGLang's `compute_random_lens`: `n` lengths drawn from the inclusive bounds by numpy's legacy
/// generator, or `n` zeros with no draw when the upper bound is 0.
pub(super) fn sglang_lens(np: &mut RandomState, (lo, hi): (u32, u32), n: usize) -> Vec<u32> {
    if hi == 0 {
        return vec![0; n];
    }
    (0..n)
        .map(|_| np.randint(lo as i64, hi as i64 + 1) as u32)
        .collect()
}

pub(super) fn random_ids(rng: &mut StdRng, n: usize, ids: IdRange) -> Vec<u32> {
    (0..n)
        .map(|_| ids.lo + rng.gen_range(0..ids.span))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;
    // The one entry, not this family's own `load`.
    use crate::workload::datasets::load;

    /// A tokenizer of one id a byte, with one special token (never added).
    struct Bytes;

    impl Tokenizer for Bytes {
        fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
            Ok(text.bytes().map(u32::from).collect())
        }

        fn decode(&self, ids: &[u32]) -> Result<String, String> {
            Ok(ids.iter().map(|&b| char::from(b as u8)).collect())
        }

        fn special_tokens(&self) -> u32 {
            1
        }
    }

    /// A caller with the model's tokenizer and nothing that counts.
    struct WithBytes;

    impl Tokens for WithBytes {
        fn count(&mut self, _: &str) -> Result<u64, String> {
            Err("no text is counted by SGLang's cuts".into())
        }

        fn tokenizer(&self) -> Option<&dyn Tokenizer> {
            Some(&Bytes)
        }
    }

    /// SGLang's `random` with its ShareGPT file: cut with the caller's tokenizer where it has
    /// one (as ids, or as text four less the special token), else token ids of the drawn
    /// lengths; a file with nothing to cut is an error naming SGLang's rule.
    #[test]
    fn sglangs_random_cuts_its_sharegpt_file_only_given_a_tokenizer() {
        let f = file(r#"[{"conversations": [{"value": "abcdef"}, {"value": "x"}]}]"#);
        let draws = |text| RandomDraws::Sglang {
            vocab: 256,
            offsets: false,
            text,
        };
        let cfg = DatasetConfig {
            path: Some(f.path().into()),
            num_prompts: 1,
            random_bounds: Some(((4, 4), (2, 2))),
            random_draws: draws(false),
            ..Default::default()
        };
        let s = load(&cfg, &mut WithBytes).unwrap();
        let mut ids = Vec::new();
        assert!(s[0].write_ids(&mut ids));
        assert_eq!(ids, b"abcd".map(u32::from));
        assert_eq!((s[0].prompt_len, s[0].output_len), (4, 2));
        let text = DatasetConfig {
            random_draws: draws(true),
            ..cfg.clone()
        };
        let s = load(&text, &mut WithBytes).unwrap();
        assert_eq!(s[0].prompt, PromptSource::Text("abc".into()));
        assert_eq!(s[0].prompt_len, 3);
        // Without a tokenizer: token ids of the drawn length, from llmspeed's range.
        let s = load(&cfg, &mut words).unwrap();
        assert!(matches!(
            s[0].prompt,
            PromptSource::Synthetic { len: 4, .. }
        ));
        let none = file("[]");
        let e = load(
            &DatasetConfig {
                path: Some(none.path().into()),
                ..cfg
            },
            &mut WithBytes,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("has no conversation to cut"), "{e}");
    }

    #[test]
    fn random_lengths_are_exact_and_deterministic() {
        let cfg = DatasetConfig {
            num_prompts: 50,
            random_input_len: 300,
            random_prefix_len: 7,
            ..Default::default()
        };
        let a = random(&cfg).unwrap();
        assert_eq!(a, random(&cfg).unwrap());
        let mut ids = Vec::new();
        for s in &a {
            ids.clear();
            assert!(s.write_ids(&mut ids));
            assert_eq!(ids.len() as u64, s.prompt_len);
            assert_eq!(s.prompt_len, 307);
            assert_eq!(s.output_len, 128);
            assert!(ids
                .iter()
                .all(|&i| (VOCAB_LO..VOCAB_LO + VOCAB_SPAN).contains(&i)));
            if let PromptSource::Synthetic {
                prefix,
                start,
                len,
                ids: r,
            } = &s.prompt
            {
                assert_eq!(ids, naive_ids(prefix, *start, *len, *r));
            }
        }
        let other = random(&DatasetConfig { seed: 1, ..cfg }).unwrap();
        assert_ne!(a, other);
    }

    #[test]
    fn explicit_bounds_replace_the_ratios() {
        let cfg = DatasetConfig {
            num_prompts: 2000,
            random_input_len: 100,
            random_output_len: 40,
            random_bounds: Some(((50, 100), (0, 40))),
            random_draws: RandomDraws::Sglang {
                vocab: 8460,
                offsets: true,
                text: false,
            },
            ..Default::default()
        };
        let s = random(&cfg).unwrap();
        assert!(s.iter().all(|x| (50..=100).contains(&x.prompt_len)));
        assert!(s.iter().all(|x| x.output_len <= 40));
        // 2000 uniform draws reach both ends' neighbourhoods.
        assert!(s.iter().any(|x| x.prompt_len <= 52) && s.iter().any(|x| x.output_len <= 1));
        assert!(s.iter().any(|x| x.prompt_len >= 98) && s.iter().any(|x| x.output_len >= 39));
    }

    #[test]
    fn vllms_special_tokens_come_off_the_drawn_range_and_back_onto_each_prompt() {
        // Input 100 with one special token: vLLM draws from [99, 99] and the server adds the
        // BOS to its text; llmspeed's ids are 100 long.
        let cfg = DatasetConfig {
            num_prompts: 20,
            random_input_len: 100,
            random_draws: RandomDraws::Vllm { special: 1 },
            ..Default::default()
        };
        assert!(random(&cfg).unwrap().iter().all(|s| s.prompt_len == 100));
        // Ratio 0.5: [floor(99 * 0.5), ceil(99 * 1.5)] = [49, 149], each plus the one token.
        let s = random(&DatasetConfig {
            num_prompts: 2000,
            random_range_ratio: 0.5,
            ..cfg.clone()
        })
        .unwrap();
        let lens: Vec<u64> = s.iter().map(|x| x.prompt_len).collect();
        assert_eq!(lens.iter().min(), Some(&50));
        assert_eq!(lens.iter().max(), Some(&150));
        // One token less the special one is nothing: refused, as vLLM refuses it.
        let one = DatasetConfig {
            random_input_len: 1,
            ..cfg
        };
        let e = random(&one).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
        assert!(random(&DatasetConfig {
            random_prefix_len: 4,
            ..one
        })
        .is_ok());
    }

    #[test]
    fn range_ratio_has_pythons_meaning() {
        assert_eq!(range_bounds(1000, 0.25), (750, 1250));
        assert_eq!(range_bounds(10, 0.0), (10, 10));
        assert_eq!(range_bounds(1, 0.99), (1, 2));
        let cfg = DatasetConfig {
            num_prompts: 2000,
            random_input_len: 100,
            random_output_len: 40,
            random_range_ratio: 0.5,
            ..Default::default()
        };
        let s = random(&cfg).unwrap();
        let (lo, hi) = (
            s.iter().map(|x| x.prompt_len).min().unwrap(),
            s.iter().map(|x| x.prompt_len).max().unwrap(),
        );
        // Uniform over [50, 150]: 2000 draws reach both ends' neighbourhoods.
        assert!(
            (50..=55).contains(&lo) && (145..=150).contains(&hi),
            "{lo} {hi}"
        );
        assert!(s.iter().all(|x| (20..=60).contains(&x.output_len)));
        assert!(random(&DatasetConfig {
            random_range_ratio: 1.0,
            ..cfg
        })
        .is_err());
    }
}
