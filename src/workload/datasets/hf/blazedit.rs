//! vLLM 0.33's `BlazeditDataset` (`vdaita/edit_5k_char`, `vdaita/edit_10k_char`): a file and a
//! change request, kept by the edit's normalised distance.

use super::{text_sample, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// vLLM's output length when `--hf-output-len` is not given (about 10k characters).
const DEFAULT_OUTPUT_LEN: u32 = 4000;

/// Rows in order until `--num-prompts` are kept: those whose `norm_distance` is inside
/// `[--blazedit-min-distance, --blazedit-max-distance]`, each Blazedit's request around `code`
/// and `change_request`, wrapped in the chat template unless `--skip-chat-template`; every
/// output length `--hf-output-len`, else 4000.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.hf.output_len.unwrap_or(DEFAULT_OUTPUT_LEN);
    let (lo, hi) = (cfg.hf.blazedit_min_distance, cfg.hf.blazedit_max_distance);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let code = rows.text(&row, "code")?;
        let change = rows.text(&row, "change_request")?;
        let d = rows.get(&row, "norm_distance")?;
        let Some(d) = d.as_f64() else {
            return Err(rows.bad("column \"norm_distance\" is not a number"));
        };
        // A NaN distance passes both of vLLM's comparisons, as it does here.
        if d < lo || d > hi {
            continue;
        }
        let prompt = format!(
            "Given a code file, please apply the change requests and generate the new file.\n\n\
             Original file:\n```python\n{code}\n```\n\n\
             Change request:\n{change}\n\n\
             Please generate the new code file in the \"New file\" section below."
        );
        let wrap = !cfg.hf.skip_chat_template;
        out.push(text_sample(tokens, &prompt, wrap, output_len)?);
    }
    Ok(out)
}
