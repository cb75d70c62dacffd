//! vLLM 0.33's `BFCLDataset` (`gorilla-llm/Berkeley-Function-Calling-Leaderboard`): each
//! question's first turn, sent as chat messages with its functions as OpenAI tools.
//!
//! Its rows are not a split: one JSON-lines file per category (`BFCL_v3_<category>.json`), read
//! whole, interleaved round-robin and shuffled with Python's `random` for `--seed`
//! ([`interleave`]), before [`samples`] takes them in order.

use super::{Numbered, Row};
use crate::workload::datasets::common::counted;
use crate::workload::datasets::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::pyrandom::PyRandom;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// vLLM's output length when `--hf-output-len` is not given.
const DEFAULT_OUTPUT_LEN: u32 = 512;

/// The categories read without `--bfcl-categories`.
pub const BFCL_DEFAULT_CATEGORIES: [&str; 3] = ["simple", "live_simple", "multiple"];

/// The categories to read: `--bfcl-categories` (blank names dropped), else the defaults.
pub fn categories(given: Option<&[String]>) -> Vec<String> {
    let given: Vec<String> = given
        .unwrap_or_default()
        .iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    if given.is_empty() {
        BFCL_DEFAULT_CATEGORIES.map(String::from).to_vec()
    } else {
        given
    }
}

/// A category's file in the repository.
pub fn category_file(category: &str) -> String {
    format!("BFCL_v3_{category}.json")
}

/// The rows of each category, interleaved round-robin (row 0 of each category in order, then
/// row 1, ...), then shuffled by Python's `random.Random(seed)` unless `seed` is `None`
/// (`--disable-shuffle`).
pub fn interleave(per_category: Vec<Vec<Row>>, seed: Option<u64>) -> Vec<Row> {
    let longest = per_category.iter().map(Vec::len).max().unwrap_or(0);
    let mut iters: Vec<_> = per_category.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    for _ in 0..longest {
        out.extend(iters.iter_mut().filter_map(Iterator::next));
    }
    if let Some(seed) = seed {
        PyRandom::new(seed).shuffle(&mut out);
    }
    out
}

/// BFCL's schema dialect translated to JSON Schema as vLLM translates it: every object's
/// `type` of `dict`, `float`, `tuple` or `any` becomes `object`, `number`, `array`, `string`.
pub fn translate_schema(node: &Value) -> Value {
    match node {
        Value::Object(m) => {
            let mut out: Map<String, Value> = m
                .iter()
                .map(|(k, v)| (k.clone(), translate_schema(v)))
                .collect();
            let remap = match out.get("type").and_then(Value::as_str) {
                Some("dict") => Some("object"),
                Some("float") => Some("number"),
                Some("tuple") => Some("array"),
                Some("any") => Some("string"),
                _ => None,
            };
            if let Some(t) = remap {
                out.insert("type".into(), json!(t));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(translate_schema).collect()),
        v => v.clone(),
    }
}

/// Python's truth of a JSON value (`not x`).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Rows in order until `--num-prompts` are kept; a row without a `question` list whose first
/// turn is a non-empty list of messages, or without functions, is passed over. Each request is
/// that turn's messages with `tools` (each function translated, [`translate_schema`]) and
/// `tool_choice: "auto"`; its length is the messages and tools rendered through the chat
/// template, counted (without a template, or where it fails: the messages' contents joined by
/// newlines, counted, as vLLM falls back); its output length `--hf-output-len`, else 512.
pub(super) fn samples(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.hf.output_len.unwrap_or(DEFAULT_OUTPUT_LEN);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let (Some(question), Some(functions)) = (row.get("question"), row.get("function")) else {
            continue;
        };
        if !truthy(question) || !truthy(functions) {
            continue;
        }
        let Some(Value::Array(first)) = question.as_array().and_then(|q| q.first()) else {
            continue;
        };
        if first.is_empty() {
            continue;
        }
        let messages = Value::Array(first.clone());
        let tools: Vec<Value> = match functions {
            Value::Array(f) => f.iter(),
            one => std::slice::from_ref(one).iter(),
        }
        .map(|f| json!({"type": "function", "function": translate_schema(f)}))
        .collect();
        let tools = Value::Array(tools);
        let rendered = match tokens.render() {
            Some(render) => render(&messages, Some(&tools)).ok(),
            None => None,
        };
        let text = match rendered {
            Some(t) => t,
            None => joined_contents(first).map_err(|e| rows.bad(e))?,
        };
        let prompt_len = counted(tokens, &text)?;
        let mut extra = Map::new();
        extra.insert("tools".into(), tools);
        extra.insert("tool_choice".into(), json!("auto"));
        out.push(Sample {
            prompt: PromptSource::Chat {
                messages: Arc::new(messages),
                extra: Arc::new(extra),
            },
            prompt_len,
            output_len,
            group: None,
        });
    }
    Ok(out)
}

/// The messages' `content`s joined by newlines (a missing one empty), vLLM's fallback text.
fn joined_contents(messages: &[Value]) -> Result<String, String> {
    let mut parts = Vec::with_capacity(messages.len());
    for m in messages {
        match m.get("content") {
            None => parts.push(""),
            Some(Value::String(s)) => parts.push(s),
            Some(_) => return Err("a message's content is not text".into()),
        }
    }
    Ok(parts.join("\n"))
}
