//! vLLM 0.33's `MLPerfDataset` (`mgoin/mlperf-inference-llama2-data`, `...-llama3.1-data`): a
//! system prompt and a question through the model's chat template, the reference answer's
//! length as the output length.

use super::{out_len, Numbered};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use serde_json::json;

/// Rows in order until `--num-prompts` are kept: the prompt is `[system: system_prompt, user:
/// question]` rendered through the chat template with the generation prompt (always: vLLM has
/// no flag to skip it here); the output length `--hf-output-len`, else `output`'s token count
/// without special tokens; kept within vLLM's limits (each at least 4 tokens, the prompt at most
/// 1024, both at most 2048).
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let system = rows.text(&row, "system_prompt")?;
        let question = rows.text(&row, "question")?;
        let answer = rows.text(&row, "output")?;
        let messages = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ]);
        let Some(render) = tokens.render() else {
            return Err(DatasetError::Invalid(
                "MLPerf's prompts are the model's chat template around a system and a user \
                 message (vLLM renders them always): give --tokenizer a folder holding the \
                 model's chat template"
                    .into(),
            ));
        };
        let prompt = render(&messages, None).map_err(|e| rows.bad(e))?;
        let prompt_len = counted(tokens, &prompt)?;
        let output_len = match cfg.hf.output_len {
            Some(n) => u64::from(n),
            None => {
                // vLLM counts the answer without special tokens.
                let special = tokens
                    .tokenizer()
                    .map_or(0, |t| u64::from(t.special_tokens()));
                counted(tokens, answer)?.saturating_sub(special)
            }
        };
        if !super::valid(prompt_len, output_len, 1024, 2048) {
            continue;
        }
        out.push(Sample {
            prompt: PromptSource::Text(prompt),
            prompt_len,
            output_len: out_len(output_len)?,
            group: None,
        });
    }
    Ok(out)
}
