//! vLLM 0.33's `VisionArenaDataset` (`lmarena-ai/VisionArena-Chat`,
//! `lmarena-ai/vision-arena-bench-v0.1`): each row's first user message with its first image.

use super::row_image::{image, with_images};
use super::{text_sample, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};
use serde_json::Value;

/// The output length without `--hf-output-len` (vLLM's `DEFAULT_OUTPUT_LEN`).
const OUTPUT_LEN: u32 = 128;

/// The column holding each row's turns for the id vLLM reads it by (`--hf-name`, else
/// `--dataset-path`): `conversation` for VisionArena-Chat, `turns` for the bench set.
pub(super) fn turns_column(id: &str) -> Option<&'static str> {
    match id {
        "lmarena-ai/VisionArena-Chat" => Some("conversation"),
        "lmarena-ai/vision-arena-bench-v0.1" => Some("turns"),
        _ => None,
    }
}

/// The first `--num-prompts` rows, none passed over: the prompt is the first turn's first
/// message's `content`, sent as written (no chat template), then the row's first image
/// (`images[0]`); every output length `--hf-output-len`, else 128.
pub(super) fn samples(
    cfg: &DatasetConfig,
    id: &str,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let Some(col) = turns_column(id) else {
        // vLLM picks the class by --dataset-path and the rule by --hf-name.
        return Err(DatasetError::Invalid(format!(
            "Unsupported dataset path: {id}"
        )));
    };
    let output_len = cfg.hf.output_len.unwrap_or(OUTPUT_LEN);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let prompt = rows
            .get(&row, col)?
            .get(0)
            .and_then(|t| t.get(0))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                rows.bad(format!(
                    "column {col:?} has no first turn with a first message's text \"content\""
                ))
            })?;
        let first = rows
            .get(&row, "images")?
            .get(0)
            .ok_or_else(|| rows.bad("column \"images\" holds no image"))?;
        let img = image(rows, "images", "[0]", first)?;
        out.push(with_images(
            text_sample(tokens, prompt, false, output_len)?,
            vec![img],
        ));
    }
    Ok(out)
}
