//! vLLM's `sonnet`: poem lines after an instruction, a shared prefix of the first lines.

use super::common::{counted, need_path, read};
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The instruction vLLM's sonnet dataset puts before the poem lines.
pub const SONNET_BASE: &str = "Pick as many lines as you can from these poem lines:\n";

/// The `sonnet` dataset: the instruction, the first lines of the file as a shared prefix of
/// about `--sonnet-prefix-len` tokens, then random lines up to `--sonnet-input-len` tokens.
/// vLLM measures lengths through the model's chat template; without a tokenizer we measure the
/// plain prompt, so lengths differ by the template's few tokens.
pub fn sonnet(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let lines: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "the file has no lines".into(),
        });
    }
    let mut total = 0u64;
    for l in &lines {
        total = total.saturating_add(counted(tokens, l)?);
    }
    if total == 0 {
        // A zero average would ask for billions of lines per prompt.
        return Err(DatasetError::Invalid(
            "the token counter gave 0 tokens for every line of the sonnet file".into(),
        ));
    }
    let avg = total as f64 / lines.len() as f64;
    let base = counted(tokens, SONNET_BASE)? as f64;
    let input = cfg.sonnet_input_len as f64;
    if input <= base {
        return Err(DatasetError::Invalid(format!(
            "--sonnet-input-len {} must exceed the instruction's {base} tokens",
            cfg.sonnet_input_len
        )));
    }
    // Every non-blank line is at least one token, so more lines than input tokens never fit
    // (this also bounds the prompt when a counter under-reports).
    let mut n_input = (((input - base) / avg).round() as usize).min(cfg.sonnet_input_len as usize);
    let n_prefix = (((cfg.sonnet_prefix_len as f64 - base) / avg)
        .round()
        .max(0.0) as usize)
        .min(lines.len())
        .min(n_input);
    let mut prefix = String::from(SONNET_BASE);
    for l in &lines[..n_prefix] {
        prefix.push_str(l);
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut out = Vec::with_capacity(cfg.num_prompts);
    let mut misses = 0usize;
    while out.len() < cfg.num_prompts {
        let mut p = prefix.clone();
        for _ in n_prefix..n_input {
            p.push_str(lines[rng.gen_range(0..lines.len())]);
        }
        let len = counted(tokens, &p)?;
        if len <= cfg.sonnet_input_len as u64 {
            misses = 0;
            out.push(Sample {
                group: None,
                prompt: PromptSource::Text(p),
                prompt_len: len,
                output_len: cfg.sonnet_output_len,
            });
            continue;
        }
        // vLLM retries forever when rounding the line count overshoots; after 50 misses in a
        // row we take one line fewer instead.
        misses += 1;
        if misses >= 50 {
            if n_input <= n_prefix {
                return Err(DatasetError::Invalid(format!(
                    "cannot fit sonnet prompts in --sonnet-input-len {}; raise it or lower --sonnet-prefix-len",
                    cfg.sonnet_input_len
                )));
            }
            n_input -= 1;
            misses = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;

    #[test]
    fn sonnet_builds_prompts_within_the_input_length() {
        let poem: String = (0..40)
            .map(|i| format!("line {i} of the poem here\n"))
            .collect();
        let f = file(&poem);
        let cfg = DatasetConfig {
            kind: DatasetKind::Sonnet,
            path: Some(f.path().into()),
            num_prompts: 5,
            sonnet_input_len: 100,
            sonnet_prefix_len: 40,
            ..Default::default()
        };
        let s = load(&cfg, &mut words).unwrap();
        assert_eq!(s.len(), 5);
        for x in &s {
            let PromptSource::Text(t) = &x.prompt else {
                panic!("sonnet prompts are text")
            };
            assert!(t.starts_with(SONNET_BASE));
            assert!(
                t.contains("line 0 of the poem"),
                "the shared prefix comes first"
            );
            assert!(x.prompt_len <= 100 && x.prompt_len > 80, "{}", x.prompt_len);
            assert_eq!(x.output_len, 150);
        }
    }

    #[test]
    fn sonnet_refuses_a_counter_that_says_zero() {
        let f = file("a line\nanother line\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Sonnet,
            path: Some(f.path().into()),
            num_prompts: 2,
            sonnet_input_len: 100,
            sonnet_prefix_len: 10,
            ..Default::default()
        };
        // Before: the average clamped to 1e-9 asked for ~1e11 lines per prompt (OOM).
        let err = load(&cfg, &mut |_: &str| Ok(0)).unwrap_err().to_string();
        assert!(err.contains("0 tokens for every line"), "{err}");
        // A counter that counts the lines but says 0 for whole prompts stays bounded.
        let mut lines_only = |s: &str| Ok(u64::from(s.lines().count() == 1));
        let s = load(&cfg, &mut lines_only).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|x| match &x.prompt {
            PromptSource::Text(t) => t.lines().count() <= 100 + SONNET_BASE.lines().count(),
            _ => false,
        }));
    }
}
