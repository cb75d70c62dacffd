//! vLLM's `burstgpt`: the BurstGPT trace's CSV, its GPT-4 rows' lengths, picked as pandas picks
//! them (numpy's legacy generator).

use super::common::{need_path, read};
use super::{DatasetConfig, DatasetError, PromptSource, Sample};
use crate::workload::numpy::RandomState;
use std::sync::Arc;

/// vLLM 0.33's `burstgpt`: the BurstGPT trace's CSV (`--dataset-path`), its rows whose `Model`
/// is `GPT-4` and whose `Response tokens` are above 0; `num_prompts` of them picked as pandas'
/// `DataFrame.sample(n, random_state=--seed)` picks them (numpy's legacy `choice`: a permutation's
/// first n, with replacement when more are asked than there are rows); request i a token-id
/// prompt of the row's `Request tokens` (`(i + j) mod V`, as vLLM's) asking for its `Response
/// tokens`.
pub(super) fn burstgpt(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let fmt = |msg: String| DatasetError::Format {
        path: path.display().to_string(),
        msg,
    };
    let rows = burstgpt_rows(&text).map_err(fmt)?;
    if rows.is_empty() {
        return Err(fmt(
            "no row to send: none has Model GPT-4 and Response tokens above 0 (vLLM's filter)"
                .into(),
        ));
    }
    let n = cfg.num_prompts;
    let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
    let picked = np
        .choice(rows.len(), n, n > rows.len())
        .ok_or_else(|| DatasetError::Invalid("no rows to pick from".into()))?;
    let ids = cfg.ids;
    Ok(picked
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let (input, output) = rows[r];
            Sample {
                group: None,
                prompt: PromptSource::Synthetic {
                    prefix: Arc::from(Vec::new()),
                    start: (i as u64 % ids.span as u64) as u32,
                    len: input,
                    ids,
                },
                prompt_len: input as u64,
                output_len: output,
            }
        })
        .collect())
}

/// The (request, response) token counts of a BurstGPT CSV's rows that vLLM keeps, in file
/// order; the columns found by their header names.
pub fn burstgpt_rows(text: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| format!("not CSV: {e}"))?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h.trim() == name).ok_or_else(|| {
            format!("no {name:?} column (BurstGPT's CSV has Model, Request tokens and Response tokens)")
        })
    };
    let (model, request, response) = (
        col("Model")?,
        col("Request tokens")?,
        col("Response tokens")?,
    );
    let mut rows = Vec::new();
    for (i, record) in rdr.records().enumerate() {
        let line = i + 2;
        let record = record.map_err(|e| format!("line {line}: {e}"))?;
        let tokens = |c: usize, name: &str| -> Result<i64, String> {
            let v = record.get(c).unwrap_or("").trim();
            v.parse::<i64>()
                .map_err(|_| format!("line {line}: {name} is {v:?}, not a whole number"))
        };
        if record.get(model).map(str::trim) != Some("GPT-4") {
            continue;
        }
        let out = tokens(response, "Response tokens")?;
        if out <= 0 {
            continue;
        }
        let input = tokens(request, "Request tokens")?;
        let fit = |v: i64, name: &str| {
            u32::try_from(v).map_err(|_| format!("line {line}: {name} {v} is out of range"))
        };
        rows.push((fit(input, "Request tokens")?, fit(out, "Response tokens")?));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burstgpt_keeps_gpt4_rows_with_a_response_by_column_name() {
        // Columns in another order than the trace's, a ChatGPT row, a failed GPT-4 row.
        let csv = "Response tokens,Model,Timestamp,Request tokens\n\
                   12,GPT-4,0,100\n\
                   30,ChatGPT,1,7\n\
                   0,GPT-4,2,55\n\
                   5,GPT-4,3,9\n";
        assert_eq!(burstgpt_rows(csv), Ok(vec![(100, 12), (9, 5)]));
        let no_col = burstgpt_rows("Model,Request tokens\nGPT-4,3\n").unwrap_err();
        assert!(no_col.contains("\"Response tokens\""), "{no_col}");
        let bad = burstgpt_rows("Model,Request tokens,Response tokens\nGPT-4,3.5,2\n").unwrap_err();
        assert!(
            bad.contains("line 2") && bad.contains("Request tokens"),
            "{bad}"
        );
    }
}
