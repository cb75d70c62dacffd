//! vLLM 0.33's `InstructCoderDataset` (`likaixin/InstructCoder`): a code-editing request built
//! from each row's code and instruction.

use super::{text_sample, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// vLLM's output length when `--hf-output-len` is not given.
const DEFAULT_OUTPUT_LEN: u32 = 200;

/// The first `--num-prompts` rows, each `"{input}\n\n{instruction} Just output the code, do not
/// include any explanation."`, wrapped in the chat template unless `--skip-chat-template`;
/// every output length `--hf-output-len`, else 200.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.hf.output_len.unwrap_or(DEFAULT_OUTPUT_LEN);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let prompt = format!(
            "{}\n\n{} Just output the code, do not include any explanation.",
            rows.text(&row, "input")?,
            rows.text(&row, "instruction")?
        );
        let wrap = !cfg.hf.skip_chat_template;
        out.push(text_sample(tokens, &prompt, wrap, output_len)?);
    }
    Ok(out)
}
