//! vLLM 0.33's `MTBenchDataset` (`philschmid/mt-bench`): each question's first turn.

use super::{single_turn, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// The first `--num-prompts` rows, each `turns[0]` wrapped in the chat template unless
/// `--skip-chat-template`; every output length `--hf-output-len`, else 256.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    single_turn(cfg, rows, tokens, |rows, row| {
        let turns = rows.get(row, "turns")?;
        turns
            .get(0)
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| rows.bad("column \"turns\" is not a list starting with a text"))
    })
}
