//! vLLM 0.33's `AIMODataset` (`AI-MO/aimo-validation-aime`, `AI-MO/NuminaMath-1.5`,
//! `AI-MO/NuminaMath-CoT`): each `problem`, its `solution`'s length as the output length.

use super::{out_len, text_sample, valid, Numbered};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// Rows in order until `--num-prompts` are kept: the prompt `problem` as written, the output
/// length `solution`'s token count, kept within vLLM's limits for reasoning (each at least 4
/// tokens, the prompt at most 2048, both at most 32000); `--hf-output-len` sets every output
/// length and turns the limits off.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
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
        let problem = rows.text(&row, "problem")?;
        let solution = rows.text(&row, "solution")?;
        let output_len = match fixed {
            Some(n) => n,
            None => {
                let solution_len = counted(tokens, solution)?;
                if solution_len == 0 {
                    return Err(
                        rows.bad("the solution counts 0 tokens (vLLM asserts it is above 0)")
                    );
                }
                let problem_len = counted(tokens, problem)?;
                if !valid(problem_len, solution_len, 2048, 32000) {
                    continue;
                }
                out_len(solution_len)?
            }
        };
        out.push(text_sample(tokens, problem, false, output_len)?);
    }
    Ok(out)
}
