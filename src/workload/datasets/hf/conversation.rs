//! vLLM 0.33's `ConversationDataset` (`Aeala/ShareGPT_Vicuna_unfiltered`): each row's first two
//! `conversations` turns as prompt and reply, the prompt sent as written.

use super::{out_len, text_sample, valid, Numbered};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};
use crate::workload::rows::Row;

/// Rows with fewer than two turns are passed over; the prompt is turn 0's `value`, the output
/// length turn 1's token count, the pair kept only within vLLM's limits (each at least 4
/// tokens, the prompt at most 1024, both at most 2048); `--hf-output-len` sets every output
/// length and turns the limits off. Rows are taken until `--num-prompts` are kept.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    take(cfg, rows, tokens, |_, _, s| Ok(s))
}

/// [`samples`]' rule, each kept row's sample passed through `finish` with its row
/// (`MultiModalConversationDataset` adds the row's image there).
pub(super) fn take(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
    mut finish: impl FnMut(&Numbered, &Row, Sample) -> Result<Sample, DatasetError>,
) -> Result<Vec<Sample>, DatasetError> {
    let fixed = cfg.hf.output_len;
    if fixed == Some(0) {
        return Err(DatasetError::Invalid(
            "--hf-output-len must be above 0 for this dataset (vLLM asserts it)".into(),
        ));
    }
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let turns = rows.get(&row, "conversations")?;
        let Some(turns) = turns.as_array() else {
            return Err(rows.bad("column \"conversations\" is not a list of turns"));
        };
        if turns.len() < 2 {
            continue;
        }
        let value = |i: usize| {
            turns[i]
                .get("value")
                .and_then(|v| v.as_str())
                .ok_or_else(|| rows.bad(format!("turn {i} has no text \"value\"")))
        };
        let (prompt, reply) = (value(0)?, value(1)?);
        let output_len = match fixed {
            Some(n) => n,
            None => {
                let reply_len = counted(tokens, reply)?;
                if reply_len == 0 {
                    return Err(rows.bad("the reply counts 0 tokens (vLLM asserts it is above 0)"));
                }
                let prompt_len = counted(tokens, prompt)?;
                if !valid(prompt_len, reply_len, 1024, 2048) {
                    continue;
                }
                out_len(reply_len)?
            }
        };
        let sample = text_sample(tokens, prompt, false, output_len)?;
        out.push(finish(rows, &row, sample)?);
    }
    Ok(out)
}
