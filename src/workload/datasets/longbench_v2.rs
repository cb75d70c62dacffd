//! SGLang 0.5.23's `longbench_v2` dataset (`bench sglang --dataset-name longbench_v2`): the
//! LongBench v2 multiple-choice questions, each sent as its long context, the question and the
//! four choices, asking for a short answer.
//!
//! Owns the dataset's rule, as SGLang's `sample_longbench_v2_requests` applies it: the rows of
//! `--dataset-path` (a `.parquet` file, any other name read as JSON lines, blank lines skipped)
//! or else of the hub's `THUDM/LongBench-v2`, split `train` (through `workload::hub`, the cache
//! first); every row held, in stored order, then shuffled by Python's `random` seeded with
//! `--seed` (SGLang seeds it at the start of the run and draws nothing before); rows taken in
//! that order, each one's prompt built ([`prompt`]) and counted, one whose prompt and output
//! together exceed `--sharegpt-context-len` skipped, until `--num-prompts` are taken (a short
//! dataset sends what it has, never oversampled). Every output length is `--sharegpt-output-len`,
//! else 10.
//!
//! The rows come from `workload::rows` (no second reader here); a column that is not text is
//! an error naming the row (SGLang would format Python's `str` of it).

use super::common::counted;
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::hub;
use crate::workload::pyrandom::PyRandom;
use crate::workload::rows::{self, DatasetFiles, FileFormat, Row, RowOrder};
use std::path::Path;

/// The hub id SGLang loads without `--dataset-path`.
pub const REPO_ID: &str = "THUDM/LongBench-v2";

/// The output length without `--sharegpt-output-len` (SGLang: the answer letter and a short
/// explanation).
pub const DEFAULT_OUTPUT_LEN: u32 = 10;

/// The columns a row must have, in the order the prompt uses them.
pub const COLUMNS: [&str; 6] = [
    "context", "question", "choice_A", "choice_B", "choice_C", "choice_D",
];

/// The flags SGLang's `LongBenchV2Dataset` reads besides the path, number and seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `--sharegpt-output-len`: every output length (`None`: [`DEFAULT_OUTPUT_LEN`]).
    pub output_len: Option<u32>,
    /// `--sharegpt-context-len`: a row whose prompt and output tokens together exceed it is
    /// skipped (`None`: none is).
    pub context_len: Option<u32>,
}

/// The prompt SGLang builds from a row: the context, a blank line, the question, the four
/// lettered choices, each on its own line, and "Answer:".
pub fn prompt(row: &Row, n: usize) -> Result<String, DatasetError> {
    let mut f = [""; 6];
    for (slot, col) in f.iter_mut().zip(COLUMNS) {
        *slot = match row.get(col) {
            Some(serde_json::Value::String(s)) => s,
            other => {
                return Err(DatasetError::Invalid(format!(
                    "longbench_v2 row {n}: column {col:?} is {}, not text (SGLang's rows have \
                     context, question and choice_A..choice_D as text)",
                    match other {
                        None => "missing".to_string(),
                        Some(v) => v.to_string(),
                    }
                )))
            }
        };
    }
    let [context, question, a, b, c, d] = f;
    Ok(format!(
        "{context}\n\nQuestion: {question}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer:"
    ))
}

/// The samples from `rows` (in stored order): shuffled for `cfg.seed`, then taken by SGLang's
/// rule (see the module doc).
pub fn samples(
    cfg: &DatasetConfig,
    mut rows: Vec<Row>,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let s = cfg.longbench_v2;
    let output_len = s.output_len.unwrap_or(DEFAULT_OUTPUT_LEN);
    // SGLang numbers nothing; the row named in a message is its place in the shuffled order.
    PyRandom::new(cfg.seed).shuffle(&mut rows);
    let mut out = Vec::with_capacity(cfg.num_prompts.min(rows.len()));
    let mut skipped = 0usize;
    for (n, row) in rows.iter().enumerate() {
        if out.len() >= cfg.num_prompts {
            break;
        }
        let text = prompt(row, n)?;
        let prompt_len = counted(tokens, &text)?;
        if s.context_len
            .is_some_and(|c| prompt_len.saturating_add(output_len as u64) > c as u64)
        {
            skipped += 1;
            continue;
        }
        out.push(Sample {
            prompt: PromptSource::Text(text),
            prompt_len,
            output_len,
            group: None,
        });
    }
    if out.is_empty() && cfg.num_prompts > 0 {
        return Err(DatasetError::Invalid(format!(
            "longbench_v2: no prompt from {} rows ({skipped} longer than --sharegpt-context-len \
             with the output)",
            rows.len()
        )));
    }
    Ok(out)
}

/// The family's entry: the rows of `--dataset-path`, else of the hub's dataset (the cache
/// first), then [`samples`].
pub fn load(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let files = match &cfg.path {
        Some(p) => local_files(p)?,
        None => hub::dataset_files(REPO_ID, None, "train", None)
            .map_err(|e| DatasetError::Invalid(e.to_string()))?,
    };
    let rows = rows::open(&files, &COLUMNS, RowOrder::AsStored)
        .map_err(|e| DatasetError::Invalid(e.0))?
        .collect::<Result<Vec<Row>, _>>()
        .map_err(|e| DatasetError::Invalid(e.0))?;
    samples(cfg, rows, tokens)
}

/// `--dataset-path`, read as SGLang reads it: parquet by its `.parquet` name, else JSON lines.
fn local_files(path: &Path) -> Result<DatasetFiles, DatasetError> {
    if !path.is_file() {
        return Err(DatasetError::Invalid(format!(
            "--dataset-path {}: no such file (longbench_v2 reads a .parquet file or JSON lines; \
             leave --dataset-path out to read {REPO_ID} from the Hugging Face hub)",
            path.display()
        )));
    }
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("parquet") => FileFormat::Parquet,
        _ => FileFormat::JsonLines,
    };
    Ok(DatasetFiles {
        id: path.display().to_string(),
        subset: None,
        split: "train".into(),
        format,
        files: vec![path.to_path_buf()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::{file, words};
    use crate::workload::datasets::DatasetKind;
    use serde_json::json;

    fn row(i: usize, context_words: usize) -> Row {
        let context = vec!["w"; context_words].join(" ");
        let v = json!({
            "_id": format!("id{i}"),
            "context": context,
            "question": format!("q{i}?"),
            "choice_A": "a", "choice_B": "b", "choice_C": "c", "choice_D": "d",
            "answer": "A",
        });
        v.as_object().unwrap().clone()
    }

    fn cfg(n: usize, s: Settings) -> DatasetConfig {
        DatasetConfig {
            kind: DatasetKind::LongBenchV2,
            num_prompts: n,
            seed: 42,
            longbench_v2: s,
            ..Default::default()
        }
    }

    /// Worked by hand from SGLang's f-string.
    #[test]
    fn prompt_is_sglangs_layout() {
        let r = row(3, 2);
        assert_eq!(
            prompt(&r, 0).unwrap(),
            "w w\n\nQuestion: q3?\nA. a\nB. b\nC. c\nD. d\nAnswer:"
        );
        let mut bad = r.clone();
        bad.insert("choice_C".into(), json!(7));
        let err = prompt(&bad, 5).unwrap_err().to_string();
        assert!(err.contains("row 5") && err.contains("choice_C"), "{err}");
    }

    #[test]
    fn shuffled_by_pythons_random_and_cut_by_context_len() {
        let rows: Vec<Row> = (0..10).map(|i| row(i, i * 10)).collect();
        let all = samples(&cfg(10, Settings::default()), rows.clone(), &mut words).unwrap();
        assert_eq!(all.len(), 10);
        let mut order: Vec<usize> = (0..10).collect();
        PyRandom::new(42).shuffle(&mut order);
        for (s, &i) in all.iter().zip(&order) {
            // prompt words: context + "Question:" q + 4 * 2 + "Answer:".
            assert_eq!(s.prompt_len, (i * 10 + 2 + 8 + 1) as u64);
            assert_eq!(s.output_len, DEFAULT_OUTPUT_LEN);
        }
        let cut = Settings {
            output_len: Some(5),
            context_len: Some(60),
        };
        let kept = samples(&cfg(3, cut), rows.clone(), &mut words).unwrap();
        let want: Vec<u64> = order
            .iter()
            .map(|&i| (i * 10 + 11) as u64)
            .filter(|l| l + 5 <= 60)
            .take(3)
            .collect();
        let got: Vec<u64> = kept.iter().map(|s| s.prompt_len).collect();
        assert_eq!(got, want);
        assert!(kept.iter().all(|s| s.output_len == 5));
        // A short dataset sends what it has.
        assert_eq!(samples(&cfg(50, cut), rows, &mut words).unwrap().len(), 5);
    }

    #[test]
    fn local_file_errors_name_the_problem() {
        let mut c = cfg(2, Settings::default());
        c.path = Some("/nonexistent/lb.jsonl".into());
        let err = load(&c, &mut words).unwrap_err().to_string();
        assert!(err.contains("no such file"), "{err}");
        let f = file("{\"context\": \"x\"}\n");
        c.path = Some(f.path().into());
        let err = load(&c, &mut words).unwrap_err().to_string();
        assert!(err.contains("question"), "{err}");
        let f = file("{\"context\": \"x\"}\nnot json\n");
        c.path = Some(f.path().into());
        assert!(load(&c, &mut words).is_err());
    }
}
