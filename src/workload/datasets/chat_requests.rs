//! SGLang's `openai`: JSON lines, each a whole chat request, sent with its own fields.

use super::common::{need_path, read};
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use std::sync::Arc;

/// The fields of a chat request row that are not sent with it: the messages go as the request's
/// own, `max_tokens` becomes its output length, and the model is the run's (SGLang's
/// `EXCLUDED_FIELDS`).
const CHAT_REQUEST_OWN: [&str; 4] = ["messages", "max_tokens", "max_completion_tokens", "model"];

/// SGLang 0.5.23's `openai` dataset: JSON lines, each a chat request. Lines are read in file
/// order (never shuffled) until `num_prompts` have parsed (`--num-prompts` 0: all); a line that
/// is not JSON is skipped and not counted. A row whose `messages` is missing or empty is skipped
/// after that; one that is not an object, or whose `messages` is not a list, is an error (SGLang
/// stops on it too). The output length is `--sharegpt-output-len` when above 0, else the row's
/// `max_tokens`, else 256; the input length is `tokens`' `chat_len` of the row; every other field (save
/// `max_completion_tokens` and `model`) is sent with the row.
pub fn chat_requests(
    cfg: &DatasetConfig,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let Some(chat_len) = tokens.chat_len() else {
        return Err(DatasetError::Invalid(
            "a dataset of chat requests needs the model's chat template to count its rows".into(),
        ));
    };
    let path = need_path(cfg)?;
    let text = read(path)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if cfg.num_prompts > 0 && rows.len() >= cfg.num_prompts {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            rows.push((i + 1, line, v));
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for (n, line, row) in rows {
        let fmt = |msg: &str| DatasetError::Format {
            path: format!("{}:{n}", path.display()),
            msg: msg.to_string(),
        };
        let serde_json::Value::Object(mut row) = row else {
            return Err(fmt("a row must be a JSON object (a chat request)"));
        };
        let messages = match row.remove("messages") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Array(m)) if m.is_empty() => continue,
            Some(m @ serde_json::Value::Array(_)) => m,
            Some(_) => return Err(fmt("\"messages\" must be a list of messages")),
        };
        let output_len = match (
            cfg.sharegpt_output_len.filter(|&n| n > 0),
            row.get("max_tokens"),
        ) {
            (Some(n), _) => n,
            (None, None) => 256,
            (None, Some(m)) => m
                .as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .ok_or_else(|| fmt("\"max_tokens\" must be a non-negative integer"))?,
        };
        let prompt_len = chat_len(line).map_err(|e| fmt(&e))?;
        for k in CHAT_REQUEST_OWN {
            row.remove(k);
        }
        out.push(Sample {
            group: None,
            prompt: PromptSource::Chat {
                messages: Arc::new(messages),
                extra: Arc::new(row),
            },
            prompt_len,
            output_len,
        });
    }
    if out.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "no chat request with messages".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::workload::datasets::test_util::*;
    use crate::workload::datasets::*;

    #[test]
    fn chat_requests_read_as_sglang_reads_its_openai_file() {
        let f = file(concat!(
            "{\"messages\": [{\"role\": \"user\", \"content\": \"a b\"}], \"max_tokens\": 7, \"temperature\": 0.5, \"model\": \"x\", \"max_completion_tokens\": 9}\n",
            "not json\n",
            "\n",
            "{\"messages\": []}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}], \"tools\": [1]}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"past the cap\"}]}\n",
        ));
        let cfg = DatasetConfig {
            kind: DatasetKind::ChatRequests,
            path: Some(f.path().into()),
            num_prompts: 3,
            ..Default::default()
        };
        // The row's length: its byte count, to see which rows were measured.
        let len = |row: &str| -> Result<u64, String> { Ok(row.len() as u64) };
        let s = load(&cfg, &mut Templated::measuring(len)).unwrap();
        // Three parsed lines (the one that is not JSON does not count), the empty one dropped.
        assert_eq!(s.len(), 2);
        let PromptSource::Chat { messages, extra } = &s[0].prompt else {
            panic!("{:?}", s[0].prompt)
        };
        assert_eq!(
            messages.as_ref(),
            &serde_json::json!([{"role": "user", "content": "a b"}])
        );
        assert_eq!(
            extra.as_ref(),
            serde_json::json!({"temperature": 0.5}).as_object().unwrap()
        );
        assert_eq!((s[0].output_len, s[1].output_len), (7, 256));
        assert!(s[0].prompt_len > 50 && s[1].prompt_len > 20);
        // --sharegpt-output-len wins over max_tokens; --num-prompts 0 reads every line.
        let all = DatasetConfig {
            num_prompts: 0,
            sharegpt_output_len: Some(4),
            ..cfg.clone()
        };
        let s = load(&all, &mut Templated::measuring(len)).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|x| x.output_len == 4));
        // Without the template's measure the dataset cannot be built.
        assert!(load(&cfg, &mut words).is_err());
        let bad = file("{\"messages\": \"hi\"}\n");
        let e = load(
            &DatasetConfig {
                path: Some(bad.path().into()),
                ..cfg
            },
            &mut Templated::measuring(len),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":1:") && e.contains("list of messages"), "{e}");
    }
}
