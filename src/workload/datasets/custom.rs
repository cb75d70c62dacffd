//! vLLM's `custom`: JSON lines with a `prompt`, shuffled (Python's `random`) and oversampled.

use super::common::{counted, fill_to, need_path, read, wrapped};
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::pyrandom::PyRandom;

/// The `custom` dataset: JSON lines with `prompt` and, read only when `--custom-output-len` is
/// -1, `output_tokens` (vLLM's rule: the flag, 256 by default, sets every row's length),
/// shuffled by the seed.
pub fn custom(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fmt = |msg: String| DatasetError::Format {
            path: format!("{}:{}", path.display(), i + 1),
            msg,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| fmt(format!("not valid JSON: {e}")))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .ok_or_else(|| fmt("needs a string field \"prompt\"".into()))?
            .to_string();
        let output = match (cfg.custom_output_len, v.get("output_tokens")) {
            (Some(n), _) => n,
            (None, None | Some(serde_json::Value::Null)) => {
                return Err(fmt(
                    "needs \"output_tokens\" when --custom-output-len is -1".into(),
                ))
            }
            (None, Some(o)) => o
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| fmt("\"output_tokens\" must be a non-negative integer".into()))?,
        };
        rows.push((prompt, output));
    }
    if rows.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "no prompts".into(),
        });
    }
    // vLLM: Python's `random` seeded by --seed shuffles the rows.
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut rows);
    }
    rows.truncate(cfg.num_prompts);
    let mut out = Vec::with_capacity(cfg.num_prompts);
    for (prompt, output_len) in rows {
        let prompt = wrapped(tokens, &prompt)?.into_owned();
        let prompt_len = counted(tokens, &prompt)?;
        out.push(Sample {
            group: None,
            prompt: PromptSource::Text(prompt),
            prompt_len,
            output_len,
        });
    }
    fill_to(&mut out, cfg);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;

    #[test]
    fn the_wrap_runs_before_counting_and_its_text_is_sent() {
        // Wrapping adds two words around each prompt: the count is the wrapped text's.
        let wrap = |p: &str| -> Result<String, String> { Ok(format!("<u> {p} <a>")) };
        let f = file("{\"prompt\": \"a b c\"}\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 1,
            ..Default::default()
        };
        let s = load(&cfg, &mut Templated::wrapping(wrap)).unwrap();
        assert_eq!(s[0].prompt_len, 5);
        assert!(matches!(&s[0].prompt, PromptSource::Text(t) if t == "<u> a b c <a>"));
        let g = file("[{\"conversations\": [{\"value\": \"d e\"}, {\"value\": \"f g h\"}]}]");
        let sg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(g.path().into()),
            num_prompts: 1,
            conversations: Conversations::Sglang {
                lines: false,
                context_len: Some(7),
            },
            ..Default::default()
        };
        // The reply is not wrapped; the context limit sees the wrapped prompt (4 + 3 = 7).
        let s = load(&sg, &mut Templated::wrapping(wrap)).unwrap();
        assert_eq!((s[0].prompt_len, s[0].output_len), (4, 3));
        let failing = |_: &str| -> Result<String, String> { Err("the template raised".into()) };
        let e = load(&cfg, &mut Templated::wrapping(failing))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the template raised"), "{e}");
    }

    #[test]
    fn disable_shuffle_keeps_file_order_and_no_oversample_keeps_the_short_file() {
        let rows: String = (1..=6)
            .map(|n| format!("{{\"prompt\": \"{}\"}}\n", vec!["w"; n].join(" ")))
            .collect();
        let f = file(&rows);
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 10,
            ..Default::default()
        };
        let lens = |cfg: &DatasetConfig| -> Vec<u64> {
            load(cfg, &mut words)
                .unwrap()
                .iter()
                .map(|s| s.prompt_len)
                .collect()
        };
        let shuffled = lens(&cfg);
        assert_eq!(shuffled.len(), 10, "oversampled to --num-prompts");
        assert_ne!(shuffled[..6], [1, 2, 3, 4, 5, 6], "shuffled by the seed");
        let kept = lens(&DatasetConfig {
            shuffle: false,
            oversample: false,
            ..cfg.clone()
        });
        assert_eq!(kept, [1, 2, 3, 4, 5, 6]);
        let first = lens(&DatasetConfig {
            shuffle: false,
            num_prompts: 3,
            ..cfg
        });
        assert_eq!(first, [1, 2, 3]);
    }

    #[test]
    fn custom_reads_prompts_and_optional_output_tokens() {
        let f = file("{\"prompt\": \"a b c\", \"output_tokens\": 7}\n\n{\"prompt\": \"d e\"}\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 2,
            ..Default::default()
        };
        // The flag (256 by default) sets every row's length, output_tokens or not (vLLM).
        let mut s = load(&cfg, &mut words).unwrap();
        s.sort_by_key(|x| x.prompt_len);
        assert_eq!((s[0].prompt_len, s[0].output_len), (2, 256));
        assert_eq!((s[1].prompt_len, s[1].output_len), (3, 256));
        // -1: each row's output_tokens, which every row must have.
        let from_rows = DatasetConfig {
            custom_output_len: None,
            ..cfg.clone()
        };
        let err = load(&from_rows, &mut words).unwrap_err().to_string();
        assert!(
            err.contains(":3:") && err.contains("output_tokens"),
            "{err}"
        );
        let g = file("{\"prompt\": \"a b c\", \"output_tokens\": 7}\n");
        let s = load(
            &DatasetConfig {
                path: Some(g.path().into()),
                num_prompts: 1,
                ..from_rows
            },
            &mut words,
        )
        .unwrap();
        assert_eq!((s[0].prompt_len, s[0].output_len), (3, 7));
        let bad = file("{\"text\": \"x\"}\n");
        let err = load(
            &DatasetConfig {
                path: Some(bad.path().into()),
                ..cfg
            },
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(":1:") && err.contains("\"prompt\""), "{err}");
    }
}
