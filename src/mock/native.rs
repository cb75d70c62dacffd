//! SGLang's and TGI's native endpoints on the mock, over the same engine as its OpenAI ones:
//! request validation (pure, fuzzed with the OpenAI parser in `fuzz/fuzz_targets/mock_request.rs`)
//! and the event lines of their streams, in the shapes `crate::proto::native` documents
//! (SGLang 0.5.23's `/generate`, TGI's `/generate_stream` at db931fcf).
//!
//! It must never use the client's code (`crate::net`, `crate::proto`): the client's decoders are
//! checked against what is written here, which follows the engines' sources independently.

use super::engine::Finish;
use super::request::GenRequest;
use super::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// SGLang's default `max_new_tokens` (`SamplingParams`).
const SGLANG_MAX_NEW_TOKENS: u32 = 128;
/// TGI's default `max_new_tokens` when the request names none (its router's default).
const TGI_MAX_NEW_TOKENS: u32 = 100;

/// The API a generation request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Completions,
    Chat,
    /// SGLang `/generate`.
    Sglang,
    /// TGI `/generate_stream`.
    Tgi,
    /// The OpenAI Responses API, `/v1/responses` ([`super::responses`]).
    Responses,
}

fn u32_field(obj: Option<&Value>, key: &str) -> Result<Option<u32>, String> {
    match obj.and_then(|o| o.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

fn bool_field(obj: Option<&Value>, key: &str) -> bool {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The context check every engine makes, with SGLang's wording.
fn check_context(prompt: usize, max_new: u32, mml: u32) -> Result<(), String> {
    if prompt as u64 + max_new as u64 > mml as u64 || prompt as u64 >= mml as u64 {
        return Err(format!(
            "Requested token count exceeds the model's maximum context length of {mml} tokens. \
             You requested a total of {} tokens: {prompt} tokens from the input messages and \
             {max_new} tokens for the completion.",
            prompt as u64 + max_new as u64
        ));
    }
    Ok(())
}

/// SGLang `/generate` (`GenerateReqInput`): `text` or `input_ids`, `sampling_params`
/// (`max_new_tokens`, `min_new_tokens`, `ignore_eos`), `stream`, `image_data` (one image URL
/// or a list of them, as SGLang's benchmark sends them).
pub fn parse_sglang(tok: &Tokenizer, mml: u32, body: &Value) -> Result<GenRequest, String> {
    let prompt = match (body.get("text"), body.get("input_ids")) {
        (Some(Value::String(s)), None) => tok.encode(s),
        (None, Some(Value::Array(a))) => a
            .iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&id| id < tok.vocab_size() as u64)
                    .map(|id| id as u32)
                    .ok_or_else(|| format!("input id {v} is outside the vocabulary"))
            })
            .collect::<Result<Vec<u32>, String>>()?,
        (Some(_), Some(_)) => {
            return Err("Either text or input_ids should be provided, not both".into())
        }
        _ => return Err("Either text or input_ids should be provided".into()),
    };
    if prompt.is_empty() {
        return Err("the prompt must have at least one token".into());
    }
    let sp = body.get("sampling_params");
    if sp.is_some_and(|v| !v.is_object() && !v.is_null()) {
        return Err("`sampling_params` must be an object".into());
    }
    let max_new = u32_field(sp, "max_new_tokens")?.unwrap_or(SGLANG_MAX_NEW_TOKENS);
    if max_new == 0 {
        return Err("max_new_tokens must be at least 1 on the mock".into());
    }
    check_context(prompt.len(), max_new, mml)?;
    Ok(GenRequest {
        prompts: vec![prompt],
        max_tokens: Some(max_new),
        min_tokens: u32_field(sp, "min_new_tokens")?.unwrap_or(0),
        stream: bool_field(Some(body), "stream"),
        include_usage: false,
        continuous: false,
        return_token_ids: false,
        ignore_eos: bool_field(sp, "ignore_eos"),
        salt: None,
        user_seed: sp
            .and_then(|s| s.get("sampling_seed"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        details: false,
        images: super::image::image_data(body.get("image_data"))?,
    })
}

/// TGI `/generate_stream` (`GenerateRequest`): `inputs` text, `parameters` (`max_new_tokens`,
/// `details`, `seed`). TGI has no `ignore_eos`; it always streams.
pub fn parse_tgi(tok: &Tokenizer, mml: u32, body: &Value) -> Result<GenRequest, String> {
    let Some(Value::String(inputs)) = body.get("inputs") else {
        return Err("Failed to deserialize the JSON body: missing field `inputs`".into());
    };
    let prompt = tok.encode(inputs);
    if prompt.is_empty() {
        return Err("Input validation error: `inputs` cannot be empty".into());
    }
    let p = body.get("parameters");
    if p.is_some_and(|v| !v.is_object() && !v.is_null()) {
        return Err("`parameters` must be an object".into());
    }
    let max_new = u32_field(p, "max_new_tokens")?.unwrap_or(TGI_MAX_NEW_TOKENS);
    if max_new == 0 {
        return Err("Input validation error: `max_new_tokens` must be strictly positive".into());
    }
    check_context(prompt.len(), max_new, mml)?;
    Ok(GenRequest {
        prompts: vec![prompt],
        max_tokens: Some(max_new),
        min_tokens: 0,
        stream: true,
        include_usage: false,
        continuous: false,
        return_token_ids: false,
        ignore_eos: false,
        salt: None,
        user_seed: p
            .and_then(|s| s.get("seed"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        details: bool_field(p, "details"),
        images: Vec::new(),
    })
}

/// `GET /get_server_info` and `/server_info`: the fields the probe and SGLang's own tools read.
pub fn server_info(
    model: &str,
    version: &str,
    mml: u32,
    kv_tokens: u64,
    page_size: u32,
    max_running: u32,
) -> Value {
    json!({
        "model_path": model,
        "served_model_name": model,
        "context_length": mml,
        "max_total_num_tokens": kv_tokens,
        "page_size": page_size,
        "max_running_requests": max_running,
        "internal_states": [{"last_gen_throughput": 0.0}],
        "version": format!("{version}-mock"),
        "frontend": "python",
    })
}

/// SGLang's `meta_info.finish_reason` for a finished sequence (`schedule_batch.py`).
fn sglang_finish(out: &mut String, finish: Option<Finish>, last_token: u32, completion: u64) {
    match finish {
        None => out.push_str("null"),
        Some(Finish::Stop) => {
            let _ = write!(out, "{{\"type\":\"stop\",\"matched\":{last_token}}}");
        }
        Some(Finish::Length) => {
            let _ = write!(out, "{{\"type\":\"length\",\"length\":{completion}}}");
        }
    }
}

/// One sequence's cumulative output, for SGLang's cumulative events and TGI's last one.
#[derive(Debug, Default)]
pub struct Output {
    pub text: String,
    pub ids: Vec<u32>,
}

/// The facts one event line needs besides the output so far.
pub struct EventFacts<'a> {
    pub rid: &'a str,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub token: u32,
    pub piece: &'a str,
    pub finish: Option<Finish>,
    pub details: bool,
}

/// SGLang's stream event after `out` grew by one token, without the closing `}\n\n`:
/// `data: {"text": <cumulative>, "output_ids": [...], "meta_info": {...}`.
pub fn sglang_event(line: &mut String, out: &Output, f: &EventFacts<'_>) {
    line.clear();
    line.push_str("data: {\"text\":");
    line.push_str(&json!(out.text).to_string());
    line.push_str(",\"output_ids\":[");
    for (i, id) in out.ids.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let _ = write!(line, "{id}");
    }
    line.push_str("],\"meta_info\":{\"id\":");
    line.push_str(&json!(f.rid).to_string());
    line.push_str(",\"finish_reason\":");
    let completion = out.ids.len() as u64;
    sglang_finish(line, f.finish, f.token, completion);
    let _ = write!(
        line,
        ",\"prompt_tokens\":{},\"weight_version\":\"default\",\"num_retractions\":0,\"reasoning_tokens\":0,\"completion_tokens\":{completion},\"cached_tokens\":{}}}",
        f.prompt_tokens, f.cached_tokens
    );
}

/// SGLang's non-streaming answer.
pub fn sglang_full(
    text: &str,
    ids: &[u32],
    rid: &str,
    prompt: u64,
    cached: u64,
    finish: Finish,
) -> Value {
    let last = ids.last().copied().unwrap_or(0);
    let mut fin = String::new();
    sglang_finish(&mut fin, Some(finish), last, ids.len() as u64);
    json!({"text": text, "output_ids": ids, "meta_info": {
        "id": rid, "finish_reason": serde_json::from_str::<Value>(&fin).unwrap_or(Value::Null),
        "prompt_tokens": prompt, "weight_version": "default", "completion_tokens": ids.len(),
        "cached_tokens": cached}})
}

/// TGI's stream event for token number `index` (1-based), without the closing `}\n\n`:
/// axum's `data:{json}` with no space; the last one carries `generated_text` and, when asked
/// for, `details`.
pub fn tgi_event(line: &mut String, index: u64, out: &Output, f: &EventFacts<'_>) {
    line.clear();
    let _ = write!(
        line,
        "data:{{\"index\":{index},\"token\":{{\"id\":{},\"text\":{},\"logprob\":-0.5,\"special\":false}},\"generated_text\":",
        f.token,
        json!(f.piece)
    );
    match f.finish {
        None => line.push_str("null,\"details\":null"),
        Some(fin) => {
            line.push_str(&json!(out.text).to_string());
            line.push_str(",\"details\":");
            if f.details {
                let reason = match fin {
                    Finish::Stop => "eos_token",
                    Finish::Length => "length",
                };
                let _ = write!(
                    line,
                    "{{\"finish_reason\":\"{reason}\",\"generated_tokens\":{},\"seed\":null,\"input_length\":{}}}",
                    out.ids.len(),
                    f.prompt_tokens
                );
            } else {
                line.push_str("null");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> Tokenizer {
        Tokenizer::new()
    }

    #[test]
    fn sglang_image_data_is_the_requests_images() {
        let t = Tokenizer::new();
        let url = |w: u32, h: u32| {
            let rgb = vec![9u8; (w * h * 3) as usize];
            crate::workload::image::Image::jpeg(w, h, &rgb).unwrap().url
        };
        let (a, b) = (url(8, 4), url(3, 5));
        let g = parse_sglang(&t, 4096, &json!({"text": "hi", "image_data": [&*a, &*b]})).unwrap();
        let sizes: Vec<(u32, u32)> = g
            .images
            .iter()
            .map(|i| (i.size.width, i.size.height))
            .collect();
        assert_eq!(sizes, vec![(8, 4), (3, 5)]);
        let g = parse_sglang(&t, 4096, &json!({"text": "hi", "image_data": &*a})).unwrap();
        assert_eq!(g.images.len(), 1);
        let g = parse_sglang(&t, 4096, &json!({"text": "hi", "image_data": null})).unwrap();
        assert!(g.images.is_empty());
        let e = parse_sglang(&t, 4096, &json!({"text": "hi", "image_data": [1]})).unwrap_err();
        assert!(e.contains("image_data"), "{e}");
    }

    #[test]
    fn sglang_requests_parse_like_sglang() {
        let t = tok();
        let g = parse_sglang(
            &t,
            4096,
            &json!({"text": "hello world", "sampling_params": {"max_new_tokens": 7, "ignore_eos": true}, "stream": true}),
        )
        .unwrap();
        assert_eq!(
            (g.max_tokens, g.ignore_eos, g.stream),
            (Some(7), true, true)
        );
        assert_eq!(g.prompts, vec![t.encode("hello world")]);
        let g = parse_sglang(&t, 4096, &json!({"input_ids": [1000, 1001]})).unwrap();
        assert_eq!(
            (g.prompts[0].len(), g.max_tokens, g.stream),
            (2, Some(128), false)
        );
        for (body, needle) in [
            (json!({}), "Either text or input_ids"),
            (json!({"text": "a", "input_ids": [1]}), "not both"),
            (json!({"input_ids": [99999999]}), "outside the vocabulary"),
            (
                json!({"text": "a", "sampling_params": 3}),
                "must be an object",
            ),
            (
                json!({"text": "a", "sampling_params": {"max_new_tokens": -1}}),
                "non-negative",
            ),
            (
                json!({"text": "a", "sampling_params": {"max_new_tokens": 5000}}),
                "maximum context length",
            ),
        ] {
            let e = parse_sglang(&t, 4096, &body).unwrap_err();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn tgi_requests_parse_like_tgi() {
        let t = tok();
        let g = parse_tgi(
            &t,
            4096,
            &json!({"inputs": "hello", "parameters": {"max_new_tokens": 9, "details": true}}),
        )
        .unwrap();
        assert_eq!(
            (g.max_tokens, g.details, g.stream, g.ignore_eos),
            (Some(9), true, true, false)
        );
        assert_eq!(
            parse_tgi(&t, 4096, &json!({"inputs": "x"}))
                .unwrap()
                .max_tokens,
            Some(100)
        );
        assert!(parse_tgi(&t, 4096, &json!({"prompt": "x"}))
            .unwrap_err()
            .contains("inputs"));
        assert!(parse_tgi(
            &t,
            4096,
            &json!({"inputs": "x", "parameters": {"max_new_tokens": 0}})
        )
        .unwrap_err()
        .contains("strictly positive"));
    }

    #[test]
    fn event_lines_are_the_engines_shapes() {
        let out = Output {
            text: "Hi \"there\"".into(),
            ids: vec![5, 6],
        };
        let f = EventFacts {
            rid: "r1",
            prompt_tokens: 3,
            cached_tokens: 1,
            token: 6,
            piece: " \"there\"",
            finish: Some(Finish::Length),
            details: true,
        };
        let mut line = String::new();
        sglang_event(&mut line, &out, &f);
        line.push('}');
        let v: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["text"], "Hi \"there\"");
        assert_eq!(v["output_ids"], json!([5, 6]));
        assert_eq!(v["meta_info"]["completion_tokens"], 2);
        assert_eq!(v["meta_info"]["cached_tokens"], 1);
        assert_eq!(
            v["meta_info"]["finish_reason"],
            json!({"type": "length", "length": 2})
        );
        tgi_event(&mut line, 2, &out, &f);
        line.push('}');
        let v: Value = serde_json::from_str(line.strip_prefix("data:").unwrap()).unwrap();
        assert_eq!(v["token"]["text"], " \"there\"");
        assert_eq!(v["generated_text"], "Hi \"there\"");
        assert_eq!(v["details"]["generated_tokens"], 2);
        assert_eq!(v["details"]["finish_reason"], "length");
        let mid = EventFacts { finish: None, ..f };
        tgi_event(&mut line, 1, &out, &mid);
        line.push('}');
        let v: Value = serde_json::from_str(line.strip_prefix("data:").unwrap()).unwrap();
        assert!(v["generated_text"].is_null() && v["details"].is_null());
    }
}
