//! vLLM 0.33's `MMStarDataset` (`Lin-Chen/MMStar`): each row's question, without its options,
//! with its image.

use super::row_image::{image, with_images};
use super::{text_sample, Numbered};
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};
use serde_json::Value;

/// The output length without `--hf-output-len` (vLLM's `DEFAULT_OUTPUT_LEN`).
const OUTPUT_LEN: u32 = 128;

/// The first `--num-prompts` rows, none passed over: the prompt is `question` up to its first
/// "Options:", whitespace trimmed as Python's `str.strip` trims it (a row without the column:
/// the empty prompt), sent as written, then the row's `image`; every output length
/// `--hf-output-len`, else 128.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.hf.output_len.unwrap_or(OUTPUT_LEN);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let question = match row.get("question") {
            None => "",
            Some(Value::String(q)) => q.as_str(),
            Some(other) => {
                return Err(rows.bad(format!(
                    "column \"question\" is {}, not text",
                    super::kind_of(other)
                )))
            }
        };
        let head = question.split_once("Options:").map_or(question, |(h, _)| h);
        let prompt = py_strip(head);
        let img = image(rows, "image", "", rows.get(&row, "image")?)?;
        out.push(with_images(
            text_sample(tokens, prompt, false, output_len)?,
            vec![img],
        ));
    }
    Ok(out)
}

/// Python's `str.strip()`: the characters `str.isspace` calls space, which are Unicode's
/// white space and the four ASCII separators (U+001C..U+001F).
fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    #[test]
    fn strips_as_python_strips() {
        assert_eq!(super::py_strip("\u{1f} a b\u{3000}\n"), "a b");
        assert_eq!(super::py_strip("\u{200b}x"), "\u{200b}x");
    }
}
