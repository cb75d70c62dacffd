//! What several file datasets share: the file read, texts counted and wrapped, SGLang's prompt
//! suffix, and vLLM's oversampling.

use super::{DatasetConfig, DatasetError, Sample, Tokens};
use crate::workload::pyrandom::PyRandom;
use std::path::PathBuf;

/// vLLM's oversampling (unless `--no-oversample`): a set short of `num_prompts` is filled with
/// samples picked at random from it, by Python's `random` seeded again with --seed
/// (`random.choice` each time), then `num_prompts` are kept.
pub(super) fn fill_to(out: &mut Vec<Sample>, cfg: &DatasetConfig) {
    let n = cfg.num_prompts;
    if out.is_empty() || !cfg.oversample {
        out.truncate(n);
        return;
    }
    let have = out.len();
    let mut py = PyRandom::new(cfg.seed);
    while out.len() < n {
        let s = out[py.randbelow(have)].clone();
        out.push(s);
    }
    out.truncate(n);
}

pub(super) fn need_path(cfg: &DatasetConfig) -> Result<&PathBuf, DatasetError> {
    cfg.path
        .as_ref()
        .ok_or(DatasetError::NoPath(cfg.kind.as_str()))
}

pub(super) fn read(path: &PathBuf) -> Result<String, DatasetError> {
    std::fs::read_to_string(path).map_err(|err| DatasetError::Read {
        path: path.display().to_string(),
        err,
    })
}

pub(super) fn counted(tokens: &mut dyn Tokens, text: &str) -> Result<u64, DatasetError> {
    tokens.count(text).map_err(DatasetError::Count)
}

/// SGLang's `--prompt-suffix`: `suffix`, then "Assistant:", after the prompt with its own
/// "Assistant:" taken off its end; the prompt as it is without a suffix.
pub fn with_suffix<'p>(prompt: &'p str, suffix: &str) -> std::borrow::Cow<'p, str> {
    const ASSISTANT: &str = "Assistant:";
    if suffix.is_empty() {
        return std::borrow::Cow::Borrowed(prompt);
    }
    let head = prompt.strip_suffix(ASSISTANT).unwrap_or(prompt);
    std::borrow::Cow::Owned(format!("{head}{suffix}{ASSISTANT}"))
}

/// `prompt` through the chat template's wrap when `tokens` has one, else as it is.
pub(super) fn wrapped<'p>(
    tokens: &mut dyn Tokens,
    prompt: &'p str,
) -> Result<std::borrow::Cow<'p, str>, DatasetError> {
    match tokens.wrap() {
        Some(w) => w(prompt)
            .map(std::borrow::Cow::Owned)
            .map_err(DatasetError::Invalid),
        None => Ok(std::borrow::Cow::Borrowed(prompt)),
    }
}
