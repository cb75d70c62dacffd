//! Hand-worked Responses streams (vLLM 0.32's event shapes, written from its server's source),
//! the same stream framed by the SSE parser split at every byte, the edge cases of vLLM 0.33.0's
//! client rules, and a naive twin on `serde_json::Value` that the decoder must agree with on
//! generated events.

use super::*;
use crate::proto::sse::SseParser;
use bytes::BytesMut;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// An owned view of a decode result.
#[derive(Clone, Debug, PartialEq)]
enum Owned {
    Nothing,
    Output(String),
    Reasoning(String),
    End {
        usage: Option<Usage>,
        incomplete: bool,
    },
    Error(String),
}

fn unescaped(t: Text<'_>) -> String {
    let mut s = String::new();
    t.unescape_into(&mut s).expect("accepted text unescapes");
    s
}

fn own(r: Result<Option<ResponsesEvent<'_>>, OpenAiError>) -> Result<Owned, OpenAiError> {
    Ok(match r? {
        None => Owned::Nothing,
        Some(ResponsesEvent::Delta { kind, text }) => match kind {
            DeltaKind::OutputText => Owned::Output(unescaped(text)),
            DeltaKind::ReasoningText => Owned::Reasoning(unescaped(text)),
        },
        Some(ResponsesEvent::Terminal(t)) => Owned::End {
            usage: t.usage,
            incomplete: t.incomplete,
        },
        Some(ResponsesEvent::Error(e)) => Owned::Error(unescaped(e.message)),
    })
}

fn dec(s: &str) -> Result<Owned, OpenAiError> {
    own(decode(s.as_bytes()))
}

fn usage(input: u64, output: u64, cached: Option<u64>) -> Usage {
    Usage {
        prompt_tokens: input,
        completion_tokens: output,
        total_tokens: input + output,
        cached_tokens: cached,
    }
}

/// A vLLM 0.32 stream of two tokens that hit `max_output_tokens`, as its server writes it
/// (`event:` line, pydantic's field order with `type` last in the OpenAI event models, the
/// `response` objects shortened to the fields that matter).
const VLLM_STREAM: &str = concat!(
    "event: response.created\n",
    "data: {\"response\":{\"id\":\"resp_1\",\"model\":\"m\",\"object\":\"response\",\"output\":[],\"status\":\"in_progress\",\"usage\":null},\"sequence_number\":0,\"type\":\"response.created\"}\n\n",
    "event: response.in_progress\n",
    "data: {\"response\":{\"id\":\"resp_1\",\"output\":[],\"status\":\"in_progress\",\"usage\":null},\"sequence_number\":1,\"type\":\"response.in_progress\"}\n\n",
    "event: response.output_item.added\n",
    "data: {\"item\":{\"id\":\"msg_1\",\"content\":[],\"role\":\"assistant\",\"status\":\"in_progress\",\"type\":\"message\"},\"output_index\":0,\"sequence_number\":2,\"type\":\"response.output_item.added\"}\n\n",
    "event: response.content_part.added\n",
    "data: {\"content_index\":0,\"item_id\":\"msg_1\",\"output_index\":0,\"part\":{\"annotations\":[],\"text\":\"\",\"type\":\"output_text\",\"logprobs\":[]},\"sequence_number\":3,\"type\":\"response.content_part.added\"}\n\n",
    "event: response.output_text.delta\n",
    "data: {\"content_index\":0,\"delta\":\"Hello\",\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":4,\"type\":\"response.output_text.delta\"}\n\n",
    "event: response.output_text.delta\n",
    "data: {\"content_index\":0,\"delta\":\" w\\u00f6rld\\n\",\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":5,\"type\":\"response.output_text.delta\"}\n\n",
    "event: response.output_text.done\n",
    "data: {\"content_index\":0,\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":6,\"text\":\"Hello w\\u00f6rld\\n\",\"type\":\"response.output_text.done\"}\n\n",
    "event: response.content_part.done\n",
    "data: {\"content_index\":0,\"item_id\":\"msg_1\",\"output_index\":0,\"part\":{\"annotations\":[],\"text\":\"Hello w\\u00f6rld\\n\",\"type\":\"output_text\"},\"sequence_number\":7,\"type\":\"response.content_part.done\"}\n\n",
    "event: response.output_item.done\n",
    "data: {\"item\":{\"id\":\"msg_1\",\"content\":[{\"text\":\"Hello w\\u00f6rld\\n\",\"type\":\"output_text\"}],\"role\":\"assistant\",\"status\":\"completed\",\"type\":\"message\"},\"output_index\":0,\"sequence_number\":8,\"type\":\"response.output_item.done\"}\n\n",
    "event: response.completed\n",
    "data: {\"response\":{\"id\":\"resp_1\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"output\":[{\"id\":\"msg_1\",\"content\":[{\"text\":\"Hello w\\u00f6rld\\n\",\"type\":\"output_text\"}],\"type\":\"message\"}],\"status\":\"incomplete\",\"usage\":{\"input_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":3,\"cache_write_tokens\":0,\"input_tokens_per_turn\":[],\"cached_tokens_per_turn\":[]},\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0,\"tool_output_tokens\":0},\"total_tokens\":9}},\"sequence_number\":9,\"type\":\"response.completed\"}\n\n",
);

/// What [`VLLM_STREAM`]'s events mean, in order.
fn vllm_stream_meaning() -> Vec<Owned> {
    let mut v = vec![Owned::Nothing; 4];
    v.push(Owned::Output("Hello".into()));
    v.push(Owned::Output(" wörld\n".into()));
    v.extend([Owned::Nothing, Owned::Nothing, Owned::Nothing]);
    v.push(Owned::End {
        usage: Some(usage(7, 2, Some(3))),
        incomplete: true,
    });
    v
}

/// The stream's events through the SSE parser, the body fed in `parts`, each payload decoded.
fn framed(parts: &[&[u8]]) -> Vec<Result<Owned, OpenAiError>> {
    let mut sse = SseParser::new(1 << 16);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for p in parts {
        buf.extend_from_slice(p);
        while let Some(ev) = sse.next_event(&mut buf).expect("valid SSE") {
            out.push(own(decode(&ev.data)));
        }
    }
    out
}

#[test]
fn a_vllm_stream_is_two_tokens_and_an_incomplete_end_with_its_usage() {
    let want: Vec<_> = vllm_stream_meaning().into_iter().map(Ok).collect();
    assert_eq!(framed(&[VLLM_STREAM.as_bytes()]), want);
}

#[test]
fn the_same_events_whatever_byte_the_stream_is_split_at() {
    let body = VLLM_STREAM.as_bytes();
    let want: Vec<_> = vllm_stream_meaning().into_iter().map(Ok).collect();
    for i in 0..=body.len() {
        assert_eq!(framed(&[&body[..i], &body[i..]]), want, "split at {i}");
    }
    // One byte per read.
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(framed(&bytes), want);
}

/// A stream recorded from vLLM 0.32's CPU server (`vllm serve` of the tiny model of
/// `scripts/vllm-server.sh`, `{"input": "Why is the sky blue?", "max_output_tokens": 6,
/// "stream": true, "store": false, "ignore_eos": true, "temperature": 0}`): six tokens came in
/// four deltas (the server's output loop merged three), the usage says six.
const RECORDED: &[u8] =
    include_bytes!("../../../tests/data/responses/vllm_0.32_responses_length.sse");

#[test]
fn a_recorded_vllm_stream_is_its_deltas_and_its_usage_at_any_split() {
    let whole = framed(&[RECORDED]);
    let mut text = String::new();
    let mut deltas = 0;
    let mut ends = Vec::new();
    for ev in &whole {
        match ev {
            Ok(Owned::Output(t)) => {
                deltas += 1;
                text.push_str(t);
            }
            Ok(Owned::End { usage, incomplete }) => ends.push((*usage, *incomplete)),
            Ok(Owned::Nothing) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(whole.len(), 12, "twelve events");
    assert_eq!(deltas, 4);
    assert_eq!(text, " canal explain canal explain canal explain");
    let usage = Usage {
        prompt_tokens: 17,
        completion_tokens: 6,
        total_tokens: 23,
        cached_tokens: Some(0),
    };
    assert_eq!(ends, [(Some(usage), true)]);
    for i in (0..=RECORDED.len()).step_by(3) {
        assert_eq!(
            framed(&[&RECORDED[..i], &RECORDED[i..]]),
            whole,
            "split at {i}"
        );
    }
}

#[test]
fn a_reasoning_delta_is_a_token_of_its_own_kind() {
    assert_eq!(
        dec(
            r#"{"content_index":0,"delta":"The user asks","item_id":"rs_1","output_index":0,"sequence_number":4,"type":"response.reasoning_text.delta"}"#
        ),
        Ok(Owned::Reasoning("The user asks".into()))
    );
    // Its `.done` repeats the text and is nothing.
    assert_eq!(
        dec(r#"{"type":"response.reasoning_text.done","text":"The user asks"}"#),
        Ok(Owned::Nothing)
    );
}

#[test]
fn a_delta_without_text_is_still_a_token() {
    assert_eq!(
        dec(r#"{"type":"response.output_text.delta"}"#),
        Ok(Owned::Output(String::new()))
    );
    assert_eq!(
        dec(r#"{"type":"response.output_text.delta","delta":null}"#),
        Ok(Owned::Output(String::new()))
    );
    assert_eq!(
        dec(r#"{"type":"response.output_text.delta","delta":7}"#),
        Err(OpenAiError::Field {
            field: "delta",
            expected: "a string or null"
        })
    );
    // Another event's `delta` is not ours to judge.
    assert_eq!(
        dec(r#"{"type":"response.function_call_arguments.delta","delta":{"a":1}}"#),
        Ok(Owned::Nothing)
    );
}

#[test]
fn key_order_does_not_matter() {
    let a = dec(r#"{"type":"response.output_text.delta","delta":"x","sequence_number":4}"#);
    let b = dec(r#"{"sequence_number":4,"delta":"x","type":"response.output_text.delta"}"#);
    assert_eq!(a, Ok(Owned::Output("x".into())));
    assert_eq!(a, b);
}

#[test]
fn terminal_events_end_with_or_without_usage() {
    assert_eq!(
        dec(
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":17,"output_tokens":4,"total_tokens":21}}}"#
        ),
        Ok(Owned::End {
            usage: Some(usage(17, 4, None)),
            incomplete: false
        })
    );
    assert_eq!(
        dec(
            r#"{"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":17,"output_tokens":16}}}"#
        ),
        Ok(Owned::End {
            usage: Some(usage(17, 16, None)),
            incomplete: true
        })
    );
    assert_eq!(
        dec(r#"{"type":"response.completed","response":{"status":"completed"}}"#),
        Ok(Owned::End {
            usage: None,
            incomplete: false
        })
    );
    assert_eq!(
        dec(r#"{"type":"response.completed"}"#),
        Ok(Owned::End {
            usage: None,
            incomplete: false
        })
    );
    // A terminal event wins over an `error` key, as vLLM's client checks it first.
    assert!(matches!(
        dec(r#"{"type":"response.completed","error":{"message":"x"}}"#),
        Ok(Owned::End { .. })
    ));
    assert_eq!(
        dec(r#"{"type":"response.completed","response":{"usage":{"output_tokens":"4"}}}"#),
        Err(OpenAiError::Field {
            field: "usage.output_tokens",
            expected: "a non-negative integer"
        })
    );
}

#[test]
fn errors_in_every_shape_and_falsy_errors_are_nothing() {
    // The spec's `error` event: the message at the top.
    assert_eq!(
        dec(r#"{"type":"error","message":"boom","code":"500","sequence_number":3}"#),
        Ok(Owned::Error("boom".into()))
    );
    // `response.failed`: the message inside the response.
    assert_eq!(
        dec(
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"engine died"}}}"#
        ),
        Ok(Owned::Error("engine died".into()))
    );
    // Any event with a truthy `error` (vLLM's own error body shape mid-stream).
    assert_eq!(
        dec(r#"{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}"#),
        Ok(Owned::Error("boom".into()))
    );
    assert_eq!(dec(r#"{"error":"oops"}"#), Ok(Owned::Error("oops".into())));
    for truthy in ["true", "[1]", "3", "{\"code\":1}"] {
        assert_eq!(
            dec(&format!(r#"{{"type":"x","error":{truthy}}}"#)),
            Ok(Owned::Error(String::new())),
            "{truthy}"
        );
    }
    for falsy in ["null", "false", "\"\"", "{}", "[]", "0", "0.0"] {
        assert_eq!(
            dec(&format!(r#"{{"type":"x","error":{falsy}}}"#)),
            Ok(Owned::Nothing),
            "{falsy}"
        );
    }
    // A token delta is a token even beside an `error` key.
    assert_eq!(
        dec(r#"{"type":"response.output_text.delta","delta":"a","error":"x"}"#),
        Ok(Owned::Output("a".into()))
    );
}

#[test]
fn done_empty_payloads_and_unknown_events_are_nothing() {
    for p in [
        "[DONE]",
        " [DONE] ",
        "",
        "  ",
        r#"{"type":"response.created"}"#,
        "{}",
    ] {
        assert_eq!(dec(p), Ok(Owned::Nothing), "{p:?}");
    }
    // A `type` that is not a string names no event of ours.
    assert_eq!(dec(r#"{"type":5,"delta":"x"}"#), Ok(Owned::Nothing));
}

#[test]
fn malformed_payloads_are_errors() {
    assert_eq!(dec("[1]"), Err(OpenAiError::NotAnObject));
    assert_eq!(dec("\"x\""), Err(OpenAiError::NotAnObject));
    assert!(matches!(
        dec(r#"{"type":"response.output_text.delta","delta":"x""#),
        Err(OpenAiError::Json(_))
    ));
    assert!(matches!(dec("{} x"), Err(OpenAiError::Json(_))));
    assert!(matches!(
        decode(b"{\"delta\":\"\xff\"}"),
        Err(OpenAiError::Json(_))
    ));
}

// ---- the naive twin: vLLM 0.33.0's client rules over a parsed tree ----

fn naive(data: &[u8]) -> Result<Owned, ()> {
    let s = std::str::from_utf8(data).map_err(drop)?;
    let t = s.trim();
    if t.is_empty() || t == "[DONE]" {
        return Ok(Owned::Nothing);
    }
    let v: Value = serde_json::from_str(s).map_err(drop)?;
    let o = v.as_object().ok_or(())?;
    let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
    let truthy = |v: Option<&Value>| match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
    };
    let message = |e: Option<&Value>| match e {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(m)) => m
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    };
    let response = o.get("response").and_then(Value::as_object);
    let usage = response
        .and_then(|r| r.get("usage"))
        .and_then(Value::as_object);
    // The fields the fast decoder reads are held to their types in any event.
    let uint = |v: Option<&Value>| -> Result<Option<u64>, ()> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or(()),
        }
    };
    let usage = match usage {
        Some(u) => {
            let i = uint(u.get("input_tokens"))?.unwrap_or(0);
            let out = uint(u.get("output_tokens"))?.unwrap_or(0);
            let total = uint(u.get("total_tokens"))?.unwrap_or(i + out);
            Some(Usage {
                prompt_tokens: i,
                completion_tokens: out,
                total_tokens: total,
                cached_tokens: None,
            })
        }
        None => None,
    };
    let delta = match o.get("delta") {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    };
    Ok(match ty {
        "response.output_text.delta" => Owned::Output(delta.ok_or(())?),
        "response.reasoning_text.delta" => Owned::Reasoning(delta.ok_or(())?),
        "response.completed" | "response.incomplete" => Owned::End {
            usage,
            incomplete: ty == "response.incomplete"
                || response
                    .and_then(|r| r.get("status"))
                    .and_then(Value::as_str)
                    == Some("incomplete"),
        },
        "error" | "response.failed" => Owned::Error(if truthy(o.get("error")) {
            message(o.get("error"))
        } else if let Some(e) = response
            .and_then(|r| r.get("error"))
            .filter(|e| truthy(Some(e)))
        {
            message(Some(e))
        } else {
            o.get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        }),
        _ if truthy(o.get("error")) => Owned::Error(message(o.get("error"))),
        _ => Owned::Nothing,
    })
}

const TYPES: &[&str] = &[
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.completed",
    "response.incomplete",
    "error",
    "response.failed",
    "response.created",
    "response.output_text.done",
    "response.function_call_arguments.delta",
];

fn pick<'a, T>(rng: &mut StdRng, xs: &'a [T]) -> &'a T {
    &xs[rng.gen_range(0..xs.len())]
}

/// A random event: a known or unknown type, a `delta` of some type, a `response` with or
/// without status and usage, maybe an `error` (truthy or not), keys in random order.
fn gen_event(rng: &mut StdRng) -> String {
    let mut fields: Vec<(String, Value)> = Vec::new();
    if rng.gen_bool(0.95) {
        fields.push(("type".into(), json!(pick(rng, TYPES))));
    }
    if rng.gen_bool(0.7) {
        let texts = [
            json!("tok"),
            json!(""),
            json!("a\"b\\n\u{4e2d}"),
            Value::Null,
        ];
        fields.push(("delta".into(), pick(rng, &texts).clone()));
    }
    if rng.gen_bool(0.5) {
        let mut r = serde_json::Map::new();
        if rng.gen_bool(0.7) {
            r.insert(
                "status".into(),
                json!(pick(rng, &["completed", "incomplete", "in_progress"])),
            );
        }
        match rng.gen_range(0..3) {
            0 => {}
            1 => {
                r.insert("usage".into(), Value::Null);
            }
            _ => {
                r.insert(
                    "usage".into(),
                    json!({"input_tokens": rng.gen_range(0..100u64), "output_tokens": rng.gen_range(0..100u64)}),
                );
            }
        }
        if rng.gen_bool(0.2) {
            r.insert("error".into(), json!({"message": "engine died"}));
        }
        r.insert("output".into(), json!([{"type": "message", "content": []}]));
        fields.push(("response".into(), Value::Object(r)));
    }
    if rng.gen_bool(0.3) {
        let errs = [
            json!({"message": "boom", "code": 500}),
            json!("oops"),
            json!({}),
            Value::Null,
            json!(false),
        ];
        fields.push(("error".into(), pick(rng, &errs).clone()));
    }
    if rng.gen_bool(0.3) {
        fields.push(("message".into(), json!("top")));
    }
    fields.push(("sequence_number".into(), json!(rng.gen_range(0..1000u32))));
    // Random key order, written by hand so the order survives.
    for i in (1..fields.len()).rev() {
        let j = rng.gen_range(0..=i);
        fields.swap(i, j);
    }
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{}", json!(k), v))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn fast(data: &[u8]) -> Result<Owned, ()> {
    own(decode(data)).map_err(drop)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn fast_matches_naive_on_generated_events(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let event = gen_event(&mut rng);
        prop_assert_eq!(fast(event.as_bytes()), naive(event.as_bytes()), "{}", event);
    }

    #[test]
    fn never_accepts_what_serde_rejects(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            "[ {}\\[\\],:\"\\\\a-z0-9.eE+-]{0,48}".prop_map(String::into_bytes),
        ]
    ) {
        let want = naive(&bytes);
        let got = fast(&bytes);
        if want.is_err() {
            prop_assert!(got.is_err(), "accepted {:?} as {:?}", String::from_utf8_lossy(&bytes), got);
        }
    }
}
