//! SGLang 0.5.23's `mmmu` dataset (`bench sglang --dataset-name mmmu`): the MMMU benchmark's
//! Math questions, each sent with its first image, as SGLang's `sample_mmmu_requests` builds
//! them.
//!
//! Owns the dataset's rule ([`samples`], pure): the rows of the hub's `MMMU/MMMU`, subset
//! `Math`, split `test`, in stored order (`workload::hub` finds them, the cache first;
//! `workload::rows` reads them); with more rows than `--num-prompts`, the rows
//! `random.sample(range(rows), num_prompts)` picks (Python's `random` seeded with `--seed`, as
//! SGLang seeds it at the start of the run), in the order drawn; else every row in order. A row
//! without an `image_1` is skipped, as SGLang skips it. Each request is the text
//! `Question: {question}\n\nAnswer: ` with the row's `image_1`, asking for
//! `--random-output-len` tokens. On the native backends the text is sent through the model's
//! processor's chat template, as SGLang's `create_mm_data_row` makes it
//! (`sglang_image::native_prompt`, applied as each body is built).
//!
//! The image is the row's file sent as its own bytes (`workload::image::Image::from_file`);
//! SGLang re-encodes it as PNG (RGBA flattened to RGB): the same pixel size, other bytes. The
//! text's length is counted by the run's tokenizer; the vision tokens are the server's count,
//! as for SGLang's `image` dataset (SGLang counts both with the model's processor).

use super::common::counted;
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::hub;
use crate::workload::image::Image;
use crate::workload::pyrandom::PyRandom;
use crate::workload::rows::{self, Row, RowOrder};
use serde_json::Value;

/// The hub id, subset and split SGLang loads.
pub const REPO_ID: &str = "MMMU/MMMU";
pub const SUBSET: &str = "Math";
pub const SPLIT: &str = "test";

/// The columns read.
pub const COLUMNS: [&str; 2] = ["question", "image_1"];

/// The row's image, or `None` where it has none (SGLang skips the row).
fn image(row: &Row, n: usize) -> Result<Option<Image>, DatasetError> {
    let bad = |m: String| DatasetError::Invalid(format!("mmmu row {n}: column \"image_1\": {m}"));
    match row.get("image_1") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => match m.get("bytes") {
            Some(Value::String(b64)) => {
                use base64::Engine as _;
                let file = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| bad(format!("its bytes are not base64 ({e})")))?;
                Image::from_file(&file)
                    .map(Some)
                    .map_err(|e| bad(format!("its bytes are not an image ({e})")))
            }
            Some(Value::Null) | None => Ok(None),
            Some(other) => Err(bad(format!("its \"bytes\" is {other}, not a file's bytes"))),
        },
        Some(other) => Err(bad(format!(
            "{other} is not an image struct ({{bytes, path}}, the hub's layout)"
        ))),
    }
}

/// The samples of `rows` (the split's, in stored order), by SGLang's rule.
pub fn samples(
    cfg: &DatasetConfig,
    rows: Vec<Row>,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let picked: Vec<usize> = if rows.len() > cfg.num_prompts {
        PyRandom::new(cfg.seed).sample_indices(rows.len(), cfg.num_prompts)
    } else {
        (0..rows.len()).collect()
    };
    let mut out = Vec::with_capacity(picked.len());
    for n in picked {
        let row = &rows[n];
        let Some(img) = image(row, n)? else {
            continue;
        };
        let question = match row.get("question") {
            Some(Value::String(q)) => q,
            other => {
                return Err(DatasetError::Invalid(format!(
                    "mmmu row {n}: column \"question\" is {}, not text",
                    other.map_or("missing".to_string(), |v| v.to_string())
                )))
            }
        };
        let text = format!("Question: {question}\n\nAnswer: ");
        out.push(Sample {
            prompt_len: counted(tokens, &text)?,
            prompt: PromptSource::Multimodal {
                text: Box::new(PromptSource::Text(text)),
                images: vec![img].into(),
            },
            output_len: cfg.random_output_len,
            group: None,
        });
    }
    if out.is_empty() && cfg.num_prompts > 0 {
        return Err(DatasetError::Invalid(format!(
            "mmmu: none of the {} rows taken has an image_1",
            rows.len().min(cfg.num_prompts)
        )));
    }
    Ok(out)
}

/// The family's entry: the hub's split (cache first), every row held as SGLang holds them,
/// then [`samples`].
pub fn load(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let files = hub::dataset_files(REPO_ID, Some(SUBSET), SPLIT, None)
        .map_err(|e| DatasetError::Invalid(e.to_string()))?;
    let rows = rows::open(&files, &COLUMNS, RowOrder::AsStored)
        .map_err(|e| DatasetError::Invalid(e.0))?
        .collect::<Result<Vec<Row>, _>>()
        .map_err(|e| DatasetError::Invalid(e.0))?;
    samples(cfg, rows, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::test_util::words;
    use crate::workload::datasets::DatasetKind;
    use serde_json::json;

    fn row(i: usize, img: bool) -> Row {
        use base64::Engine as _;
        let png =
            crate::workload::image::encode_png(4 + i as u32, 3, &vec![7; (4 + i) * 9]).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(png);
        let v = json!({
            "question": format!("q{i} <image 1> x"),
            "image_1": if img { json!({"bytes": b64, "path": null}) } else { Value::Null },
        });
        v.as_object().unwrap().clone()
    }

    #[test]
    fn rows_are_pythons_sample_and_rows_without_images_are_skipped() {
        let rows: Vec<Row> = (0..12).map(|i| row(i, i != 3)).collect();
        let cfg = DatasetConfig {
            kind: DatasetKind::Mmmu,
            num_prompts: 5,
            seed: 11,
            random_output_len: 64,
            ..Default::default()
        };
        let s = samples(&cfg, rows.clone(), &mut words).unwrap();
        let picked: Vec<usize> = PyRandom::new(11)
            .sample_indices(12, 5)
            .into_iter()
            .filter(|&i| i != 3)
            .collect();
        assert_eq!(s.len(), picked.len());
        for (s, i) in s.iter().zip(picked) {
            let PromptSource::Multimodal { text, images } = &s.prompt else {
                panic!()
            };
            assert_eq!(
                **text,
                PromptSource::Text(format!("Question: q{i} <image 1> x\n\nAnswer: "))
            );
            assert_eq!((images[0].width, images[0].height), (4 + i as u32, 3));
            assert_eq!((s.prompt_len, s.output_len), (6, 64));
        }
        // Fewer rows than prompts: every row, in order.
        let all = samples(
            &DatasetConfig {
                num_prompts: 50,
                ..cfg
            },
            rows,
            &mut words,
        )
        .unwrap();
        assert_eq!(all.len(), 11);
    }
}
