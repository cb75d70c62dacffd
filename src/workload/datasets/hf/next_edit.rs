//! vLLM 0.33's `NextEditPredictionDataset` (`zed-industries/zeta`): Zed's edit-prediction
//! prompt around each row's edit events and excerpt.

use super::{out_len, text_sample, Numbered};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// Where the expected output starts in a row's `output`.
const REGION_START: &str = "<|editable_region_start|>";

/// The first `--num-prompts` rows: the prompt is Zeta's instruction around `events` and
/// `input`, sent as written; the output length is the token count of `output` from its
/// editable-region marker on (where the marker is missing: its last character alone, as Python slices `output[-1:]` when `find` gives -1).
/// `--hf-output-len` is not used (vLLM's rule).
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let events = rows.text(&row, "events")?;
        let input = rows.text(&row, "input")?;
        let output = rows.text(&row, "output")?;
        let prompt = format!(
            "### Instruction:\nYou are a code completion assistant and your task is to analyze \
             user edits and then rewrite an excerpt that the user provides, suggesting the \
             appropriate edits within the excerpt, taking into account the cursor location.\n\n\
             ### User Edits:\n\n{events}\n\n### User Excerpt:\n\n{input}\n\n### Response:\n\n"
        );
        let expected = match output.find(REGION_START) {
            Some(i) => &output[i..],
            // `output[-1:]`: the last character.
            None => output
                .char_indices()
                .next_back()
                .map_or("", |(i, _)| &output[i..]),
        };
        let output_len = out_len(counted(tokens, expected)?)?;
        out.push(text_sample(tokens, &prompt, false, output_len)?);
    }
    Ok(out)
}
