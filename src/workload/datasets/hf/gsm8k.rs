//! vLLM 0.33's `GSM8KDataset` (`openai/gsm8k`, subset `main` by default): each `question`.

use super::{single_turn, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// The first `--num-prompts` rows, each `question` wrapped in the chat template unless
/// `--skip-chat-template`; every output length `--hf-output-len`, else 256.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    single_turn(cfg, rows, tokens, |rows, row| {
        rows.text(row, "question").map(str::to_string)
    })
}
