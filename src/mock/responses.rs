//! The OpenAI Responses API on the mock (`POST /v1/responses`), over the same engine as its
//! other endpoints: request validation (pure, fuzzed with the others in
//! `fuzz/fuzz_targets/mock_request.rs`) and the events of its stream, in the shapes and order
//! vLLM 0.32's server writes (`vllm/entrypoints/openai/responses/`: `api_router.py`,
//! `serving.py`'s `responses_stream_generator`, `streaming_events.py`'s simple, non-Harmony
//! path, `protocol.py`):
//!
//! - each event is `event: <type>\ndata: <json>\n\n`, the JSON carrying `type` and a
//!   `sequence_number` that counts every event of the stream from 0; there is no `[DONE]`;
//! - `response.created` and `response.in_progress` (the response so far, `status:
//!   "in_progress"`, `usage: null`) as soon as the request is accepted;
//! - with the first token, `response.output_item.added` (an assistant message, `msg_…`) and
//!   `response.content_part.added` (an empty `output_text` part);
//! - one `response.output_text.delta` per token (vLLM sends one per output it hands its API
//!   loop, which merges tokens when that loop falls behind: the recording in
//!   `tests/data/responses/` has six tokens in four deltas; `tests/responses_mock.rs` holds this
//!   stream to that recording's shape);
//! - after the last token `response.output_text.done`, `response.content_part.done` and
//!   `response.output_item.done`, each repeating the whole text, then `response.completed`: the
//!   response with `status` `completed`, or `incomplete` with `incomplete_details.reason:
//!   "max_output_tokens"` when the output hit its limit, and `usage` (`input_tokens`,
//!   `input_tokens_details.cached_tokens`, `output_tokens`, `total_tokens`).
//!
//! A request: `input` (text, or a list of messages with text content), `instructions` (a system
//! message before them), `max_output_tokens` (clamped to what the context leaves, as vLLM's
//! `to_sampling_params` does), `stream`, `ignore_eos`, `seed`; the prompt is the chat template
//! over those messages, as vLLM renders a Responses input.
//!
//! It must never use the client's code (`crate::net`, `crate::proto`).

use super::request::GenRequest;
use super::tokenizer::{apply_chat_template, content_text, ChatMessage, Tokenizer};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// `input`, `instructions` -> the messages' text through the fixed chat template.
fn prompt_text(body: &Value) -> Result<String, String> {
    let mut msgs: Vec<(String, String)> = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => msgs.push(("system".into(), s.clone())),
        Some(_) => return Err("`instructions` must be a string".into()),
    }
    match body.get("input") {
        Some(Value::String(s)) => msgs.push(("user".into(), s.clone())),
        Some(Value::Array(items)) if !items.is_empty() => {
            for item in items {
                let role = item
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or("every `input` item needs a string `role`")?;
                let content = item
                    .get("content")
                    .and_then(content_text)
                    .ok_or("an `input` item's `content` must be a string or a list of parts")?;
                msgs.push((role.to_owned(), content));
            }
        }
        _ => return Err("`input` is required: a string or a non-empty list of messages".into()),
    }
    let parts: Vec<ChatMessage<'_>> = msgs
        .iter()
        .map(|(role, content)| ChatMessage { role, content })
        .collect();
    Ok(apply_chat_template(&parts, true))
}

/// Validates a Responses request body. Every error is a 400 with this message.
pub fn parse_responses(tok: &Tokenizer, mml: u32, body: &Value) -> Result<GenRequest, String> {
    let prompt = tok.encode(&prompt_text(body)?);
    if prompt.len() as u64 >= mml as u64 {
        return Err(format!(
            "This model's maximum context length is {mml} tokens. However, your request has {} input tokens. Please reduce the length of the input messages.",
            prompt.len()
        ));
    }
    let max_output = match body.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or("`max_output_tokens` must be a non-negative integer")?,
        ),
    };
    if max_output == Some(0) {
        return Err("`max_output_tokens` must be at least 1".into());
    }
    let room = mml - prompt.len() as u32;
    let flag = |k: &str| body.get(k).and_then(Value::as_bool).unwrap_or(false);
    Ok(GenRequest {
        prompts: vec![prompt],
        // vLLM: min(max_output_tokens, max_model_len - prompt), never a refusal.
        max_tokens: Some(max_output.map_or(room, |m| m.min(room))),
        min_tokens: 0,
        stream: flag("stream"),
        include_usage: false,
        continuous: false,
        return_token_ids: false,
        ignore_eos: flag("ignore_eos"),
        salt: body
            .get("cache_salt")
            .and_then(Value::as_str)
            .map(str::to_owned),
        user_seed: body.get("seed").and_then(Value::as_u64).unwrap_or(0),
        details: false,
        images: Vec::new(),
    })
}

/// What every event of one response names.
#[derive(Clone, Debug)]
pub struct Facts {
    /// `resp_…`.
    pub id: String,
    pub model: String,
    pub created: u64,
    /// The limit the request runs with (vLLM echoes its sampling `max_tokens`).
    pub max_output_tokens: u32,
    pub prompt_tokens: u64,
}

/// The counts of a finished response.
#[derive(Clone, Copy, Debug, Default)]
pub struct Done {
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Stopped at `max_output_tokens`.
    pub incomplete: bool,
}

/// One stream's writer: the sequence numbers, the message item and its text so far.
#[derive(Debug)]
pub struct Writer {
    facts: Facts,
    item_id: String,
    seq: u64,
    opened: bool,
    text: String,
}

/// `event: <type>\ndata: <json>\n\n`.
fn frame(ty: &str, v: &Value) -> String {
    format!("event: {ty}\ndata: {v}\n\n")
}

fn usage(prompt: u64, d: &Done) -> Value {
    json!({
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": d.cached_tokens, "cache_write_tokens": 0,
            "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
        "output_tokens": d.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
            "output_tokens_per_turn": [], "tool_output_tokens_per_turn": []},
        "total_tokens": prompt + d.output_tokens,
    })
}

/// The response object (`ResponsesResponse`): `status`, the output items, the usage once done.
fn response(f: &Facts, status: &str, output: Value, done: Option<&Done>) -> Value {
    let incomplete_details = if done.is_some_and(|d| d.incomplete) {
        json!({"reason": "max_output_tokens"})
    } else {
        Value::Null
    };
    let used = done.map(|d| usage(f.prompt_tokens, d));
    json!({
        "id": f.id, "created_at": f.created,
        "incomplete_details": incomplete_details,
        "instructions": null, "metadata": null, "model": f.model, "object": "response",
        "output": output, "parallel_tool_calls": true, "temperature": 1.0, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "background": false, "max_output_tokens": f.max_output_tokens,
        "max_tool_calls": null, "previous_response_id": null, "prompt": null, "reasoning": null,
        "service_tier": "auto", "status": status, "text": null, "top_logprobs": null,
        "truncation": "disabled", "usage": used, "user": null,
    })
}

fn message(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status == "in_progress" {
        json!([])
    } else {
        json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": null}])
    };
    json!({"id": id, "type": "message", "role": "assistant", "content": content, "status": status})
}

/// A whole (not streamed) answer.
pub fn full(f: &Facts, item_id: &str, text: &str, done: &Done) -> Value {
    let output = json!([message(item_id, text, "completed")]);
    let status = if done.incomplete {
        "incomplete"
    } else {
        "completed"
    };
    response(f, status, output, Some(done))
}

impl Writer {
    /// `item_id`: the message's `msg_…` id.
    pub fn new(facts: Facts, item_id: String) -> Self {
        Writer {
            facts,
            item_id,
            seq: 0,
            opened: false,
            text: String::new(),
        }
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    fn event(&mut self, ty: &str, mut v: Value) -> String {
        v["sequence_number"] = json!(self.next());
        v["type"] = json!(ty);
        frame(ty, &v)
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> [String; 2] {
        let r = response(&self.facts, "in_progress", json!([]), None);
        [
            self.event("response.created", json!({"response": r.clone()})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    /// The message item and its text part, before the first token (empty after it).
    pub fn open(&mut self) -> Vec<String> {
        if std::mem::replace(&mut self.opened, true) {
            return Vec::new();
        }
        let item = message(&self.item_id, "", "in_progress");
        let id = self.item_id.clone();
        vec![
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ),
            self.event(
                "response.content_part.added",
                json!({"output_index": 0, "item_id": id, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
            ),
        ]
    }

    /// One token's `response.output_text.delta`, written without a JSON tree (one per token).
    pub fn delta(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        let seq = self.next();
        let mut s = String::with_capacity(160 + piece.len());
        let _ = write!(
            s,
            "event: response.output_text.delta\ndata: {{\"content_index\":0,\"delta\":{},\"item_id\":\"{}\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":{seq},\"type\":\"response.output_text.delta\"}}\n\n",
            json!(piece),
            self.item_id
        );
        s
    }

    /// The `.done` events that repeat the text, then `response.completed`.
    pub fn finish(&mut self, done: &Done) -> [String; 4] {
        let text = std::mem::take(&mut self.text);
        let id = self.item_id.clone();
        let part =
            json!({"type": "output_text", "text": text, "annotations": [], "logprobs": null});
        let item = message(&id, &text, "completed");
        let status = if done.incomplete {
            "incomplete"
        } else {
            "completed"
        };
        let r = response(&self.facts, status, json!([item.clone()]), Some(done));
        [
            self.event(
                "response.output_text.done",
                json!({"output_index": 0, "content_index": 0, "item_id": id, "text": text, "logprobs": []}),
            ),
            self.event(
                "response.content_part.done",
                json!({"output_index": 0, "content_index": 0, "item_id": id, "part": part}),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            ),
            self.event("response.completed", json!({"response": r})),
        ]
    }

    /// The spec's `error` event (vLLM 0.32's own streaming error path fails to build one and
    /// cuts the stream; other Responses servers send this).
    pub fn error(&mut self, message: &str) -> String {
        self.event(
            "error",
            json!({"code": "500", "message": message, "param": null}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_like_vllms_responses_request() {
        let t = Tokenizer::new();
        let g = parse_responses(
            &t,
            4096,
            &json!({"model": "m", "input": "hello world", "max_output_tokens": 7, "stream": true, "store": false, "ignore_eos": true}),
        )
        .unwrap();
        assert_eq!(
            (g.max_tokens, g.ignore_eos, g.stream),
            (Some(7), true, true)
        );
        let one_user = apply_chat_template(
            &[ChatMessage {
                role: "user",
                content: "hello world",
            }],
            true,
        );
        assert_eq!(g.prompts, vec![t.encode(&one_user)]);
        // A list of messages and instructions render as chat messages.
        let g = parse_responses(
            &t,
            4096,
            &json!({"instructions": "be brief", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
        )
        .unwrap();
        let want = apply_chat_template(
            &[
                ChatMessage {
                    role: "system",
                    content: "be brief",
                },
                ChatMessage {
                    role: "user",
                    content: "hi",
                },
            ],
            true,
        );
        assert_eq!(g.prompts, vec![t.encode(&want)]);
        // A limit past the context, or none: what the context leaves.
        let n = parse_responses(&t, 64, &json!({"input": "hi"})).unwrap();
        let room = 64 - n.prompts[0].len() as u32;
        assert_eq!(n.max_tokens, Some(room));
        let g =
            parse_responses(&t, 64, &json!({"input": "hi", "max_output_tokens": 5000})).unwrap();
        assert_eq!(g.max_tokens, Some(room), "clamped");
        assert!(!g.stream);
        for (body, needle) in [
            (json!({}), "`input` is required"),
            (json!({"input": []}), "`input` is required"),
            (json!({"input": [{"content": "x"}]}), "`role`"),
            (json!({"input": "x", "max_output_tokens": 0}), "at least 1"),
            (
                json!({"input": "x", "max_output_tokens": -1}),
                "non-negative",
            ),
            (json!({"input": "x", "instructions": 3}), "`instructions`"),
            (
                json!({"input": "word ".repeat(5000)}),
                "maximum context length",
            ),
        ] {
            let e = parse_responses(&t, 4096, &body).unwrap_err();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    /// A two-token stream that hits its limit, event by event, as vLLM writes it.
    #[test]
    fn a_stream_is_vllms_event_sequence() {
        let facts = Facts {
            id: "resp_1".into(),
            model: "m".into(),
            created: 5,
            max_output_tokens: 2,
            prompt_tokens: 9,
        };
        let mut w = Writer::new(facts, "msg_1".into());
        let mut lines: Vec<String> = w.start().into();
        lines.extend(w.open());
        lines.push(w.delta("Hi"));
        assert!(w.open().is_empty(), "the item opens once");
        lines.push(w.delta(" \"x\"\n"));
        lines.extend(w.finish(&Done {
            output_tokens: 2,
            cached_tokens: 4,
            incomplete: true,
        }));
        let events: Vec<(String, Value)> = lines
            .iter()
            .map(|l| {
                let (head, data) = l.split_once('\n').unwrap();
                assert!(l.ends_with("\n\n"), "{l:?}");
                let ty = head.strip_prefix("event: ").unwrap().to_string();
                let v: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap().trim_end()).unwrap();
                assert_eq!(v["type"], ty.as_str());
                (ty, v)
            })
            .collect();
        let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (_, v)) in events.iter().enumerate() {
            assert_eq!(v["sequence_number"], i, "{v}");
        }
        assert_eq!(events[0].1["response"]["status"], "in_progress");
        assert!(events[0].1["response"]["usage"].is_null());
        assert_eq!(events[5].1["delta"], " \"x\"\n");
        assert_eq!(events[6].1["text"], "Hi \"x\"\n");
        let done = &events[9].1["response"];
        assert_eq!(done["status"], "incomplete");
        assert_eq!(done["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hi \"x\"\n");
        assert_eq!(
            (
                &done["usage"]["input_tokens"],
                &done["usage"]["output_tokens"],
                &done["usage"]["total_tokens"],
                &done["usage"]["input_tokens_details"]["cached_tokens"]
            ),
            (&json!(9), &json!(2), &json!(11), &json!(4))
        );
    }
}
