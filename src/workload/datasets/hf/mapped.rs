//! llmspeed's own reading of a Hugging Face dataset vLLM does not know: the user names the
//! column holding each prompt (`--hf-prompt-column`) and, optionally, the one whose text's
//! length is each output length (`--hf-output-column`).

use super::{out_len, text_sample, Numbered};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, Sample, Tokens};
use serde_json::Value;

/// The output length without `--hf-output-len` or an output column (vLLM's most common).
const DEFAULT_OUTPUT_LEN: u32 = 256;

/// The first `--num-prompts` rows. The prompt column holds text, or a conversation (a list of
/// `{role, content}` or ShareGPT's `{from, value}` turns), whose first turn is the prompt; it is
/// wrapped in the chat template unless `--skip-chat-template`. The output length is
/// `--hf-output-len`, else the output column's token count (or its value, where it holds a
/// number), else 256. A row whose prompt is empty is passed over.
pub(super) fn samples(
    cfg: &DatasetConfig,
    prompt_col: &str,
    output_col: Option<&str>,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let prompt = match rows.get(&row, prompt_col)? {
            Value::String(s) => s.as_str(),
            Value::Array(turns) => first_turn(turns).ok_or_else(|| {
                rows.bad(format!(
                    "column {prompt_col:?} is a list but not of {{role, content}} or {{from, \
                     value}} turns"
                ))
            })?,
            Value::Null => continue,
            v => {
                return Err(rows.bad(format!(
                    "column {prompt_col:?} is {}, not text or a conversation",
                    super::kind_of(v)
                )))
            }
        };
        if prompt.is_empty() {
            continue;
        }
        let output_len = match (cfg.hf.output_len, output_col) {
            (Some(n), _) => n,
            (None, None) => DEFAULT_OUTPUT_LEN,
            (None, Some(col)) => match rows.get(&row, col)? {
                Value::String(s) => out_len(counted(tokens, s)?)?,
                Value::Number(n) => {
                    n.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            rows.bad(format!("column {col:?} is not a whole number of tokens"))
                        })?
                }
                v => {
                    return Err(rows.bad(format!(
                        "column {col:?} is {}: an output column holds the expected answer's \
                         text or its length in tokens",
                        super::kind_of(v)
                    )))
                }
            },
        };
        let wrap = !cfg.hf.skip_chat_template;
        out.push(text_sample(tokens, prompt, wrap, output_len)?);
    }
    Ok(out)
}

/// The text of a conversation's first turn.
fn first_turn(turns: &[Value]) -> Option<&str> {
    let t = turns.first()?;
    t.get("content")
        .or_else(|| t.get("value"))
        .and_then(Value::as_str)
}
