//! vLLM 0.33's `MultiModalConversationDataset` (`lmms-lab/LLaVA-OneVision-Data`):
//! `ConversationDataset`'s rule, each kept row with its `image`.

use super::conversation;
use super::row_image::{image, with_images};
use super::Numbered;
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};

/// `ConversationDataset`'s rows, prompts, lengths and limits; each row kept sends its `image`
/// after the prompt (a row passed over by the limits never has its image read, as in vLLM).
/// The dataset's rows all hold the column; one whose image is null is refused, as vLLM's
/// `process_image` refuses it.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    conversation::take(cfg, rows, tokens, |rows, row, sample| {
        match row.get("image") {
            // vLLM reads the image only where the column is there.
            None => Ok(sample),
            Some(v) => Ok(with_images(sample, vec![image(rows, "image", "", v)?])),
        }
    })
}
