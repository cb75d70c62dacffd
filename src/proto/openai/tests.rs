//! Table-driven cases from captured server shapes, and a naive twin on `serde_json::Value` that
//! the fast decoder must agree with on generated chunks, mutated chunks and arbitrary bytes.

use super::*;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// An owned, unescaped view of a decode result, comparable across both decoders.
#[derive(Clone, Debug, Default, PartialEq)]
struct Chunk {
    choices: usize,
    content: Option<String>,
    reasoning: Option<String>,
    tool_calls: bool,
    finish: Option<String>,
    token_ids: Option<u32>,
    usage: Option<Usage>,
    timings: Option<Timings>,
    metrics: Option<ServerTiming>,
}

// Test values, compared and dropped: their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
enum Owned {
    Done,
    Chunk(Chunk),
    Error {
        message: String,
        kind: Option<String>,
        code: Option<i64>,
    },
}

fn unescaped(t: Text<'_>) -> String {
    let mut s = String::new();
    t.unescape_into(&mut s)
        .expect("text the decoder accepted must unescape");
    s
}

fn raw_string(raw: &[u8]) -> String {
    unescaped(Text {
        raw,
        has_escapes: raw.contains(&b'\\'),
    })
}

fn own(item: StreamItem<'_>) -> Owned {
    match item {
        StreamItem::Done => Owned::Done,
        StreamItem::Chunk(c) => Owned::Chunk(Chunk {
            choices: c.choices,
            content: c.content.map(unescaped),
            reasoning: c.reasoning.map(unescaped),
            tool_calls: c.tool_calls,
            finish: c.finish_reason.map(raw_string),
            token_ids: c.token_ids,
            usage: c.usage,
            timings: c.timings,
            metrics: c
                .metrics
                .map(|raw| server_timing(raw).expect("an accepted metrics object reads")),
        }),
        StreamItem::Error(e) => Owned::Error {
            message: unescaped(e.message),
            kind: e.kind.map(raw_string),
            code: e.code,
        },
    }
}

fn fast(data: &[u8]) -> Result<Owned, OpenAiError> {
    decode(data).map(own)
}

// ---- the naive twin: the same rules, written plainly over a full serde_json tree ----

fn n_str(v: Option<&Value>) -> Result<Option<String>, ()> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

fn n_u64(v: Option<&Value>) -> Result<Option<u64>, ()> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or(()),
        Some(_) => Err(()),
    }
}

fn n_f64(v: Option<&Value>) -> Result<Option<f64>, ()> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_f64().map(Some).ok_or(()),
        Some(_) => Err(()),
    }
}

fn n_code(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

fn n_lenient(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

fn naive(data: &[u8]) -> Result<Owned, ()> {
    if data.trim_ascii() == b"[DONE]" {
        return Ok(Owned::Done);
    }
    let v: Value = serde_json::from_slice(data).map_err(|_| ())?;
    let obj = v.as_object().ok_or(())?;
    let mut c = Chunk::default();
    match obj.get("choices") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            c.choices = a.len();
            if let Some(first) = a.first() {
                let ch = first.as_object().ok_or(())?;
                let text = n_str(ch.get("text"))?;
                let mut content = None;
                match ch.get("delta") {
                    None | Some(Value::Null) => {}
                    Some(Value::Object(d)) => {
                        content = n_str(d.get("content"))?;
                        let r = n_str(d.get("reasoning"))?;
                        let rc = n_str(d.get("reasoning_content"))?;
                        c.reasoning = r.or(rc);
                        c.tool_calls = match d.get("tool_calls") {
                            None | Some(Value::Null) => false,
                            Some(Value::Array(t)) => !t.is_empty(),
                            Some(_) => return Err(()),
                        };
                    }
                    Some(_) => return Err(()),
                }
                c.content = content.or(text);
                c.finish = n_str(ch.get("finish_reason"))?;
                c.token_ids = match ch.get("token_ids") {
                    None | Some(Value::Null) => None,
                    Some(Value::Array(t)) => Some(t.len() as u32),
                    Some(_) => return Err(()),
                };
            }
        }
        Some(_) => return Err(()),
    }
    c.usage = match obj.get("usage") {
        None | Some(Value::Null) => None,
        Some(Value::Object(u)) => {
            let prompt = n_u64(u.get("prompt_tokens"))?.unwrap_or(0);
            let completion = n_u64(u.get("completion_tokens"))?.unwrap_or(0);
            let total = n_u64(u.get("total_tokens"))?.unwrap_or(prompt.saturating_add(completion));
            let cached = match u.get("prompt_tokens_details") {
                None | Some(Value::Null) => None,
                Some(Value::Object(d)) => n_u64(d.get("cached_tokens"))?,
                Some(_) => return Err(()),
            };
            Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: total,
                cached_tokens: cached,
            })
        }
        Some(_) => return Err(()),
    };
    c.timings = match obj.get("timings") {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => Some(Timings {
            prompt_n: n_u64(t.get("prompt_n"))?,
            prompt_ms: n_f64(t.get("prompt_ms"))?,
            predicted_n: n_u64(t.get("predicted_n"))?,
            predicted_ms: n_f64(t.get("predicted_ms"))?,
            cache_n: n_u64(t.get("cache_n"))?,
        }),
        Some(_) => return Err(()),
    };
    // vLLM's client reads `metrics` only when it is an object, and a field only when it is a
    // number.
    c.metrics = match obj.get("metrics") {
        Some(Value::Object(m)) => {
            let num = |k: &str| m.get(k).and_then(Value::as_f64);
            Some(ServerTiming {
                queue_ms: num("queue_time_ms"),
                ttft_ms: num("time_to_first_token_ms"),
                generation_ms: num("generation_time_ms"),
                mean_itl_ms: num("mean_itl_ms"),
            })
        }
        _ => None,
    };
    match obj.get("error") {
        Some(Value::Object(e)) => {
            return Ok(Owned::Error {
                message: n_lenient(e.get("message")).unwrap_or_default(),
                kind: n_lenient(e.get("type")),
                code: n_code(e.get("code")),
            })
        }
        Some(Value::String(m)) => {
            return Ok(Owned::Error {
                message: m.clone(),
                kind: n_lenient(obj.get("error_type")),
                code: n_code(obj.get("code")),
            })
        }
        _ => {}
    }
    if obj.get("object").and_then(Value::as_str) == Some("error") {
        return Ok(Owned::Error {
            message: n_lenient(obj.get("message")).unwrap_or_default(),
            kind: n_lenient(obj.get("type")),
            code: n_code(obj.get("code")),
        });
    }
    Ok(Owned::Chunk(c))
}

// ---- table-driven cases ----

/// What a case should decode to; errors are matched by class.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Want {
    Is(Owned),
    JsonError,
    NotAnObject,
    Field(&'static str),
}

fn check(input: &str, want: Want) {
    let got = fast(input.as_bytes());
    match (&want, &got) {
        (Want::Is(w), Ok(g)) => assert_eq!(g, w, "{input}"),
        (Want::JsonError, Err(OpenAiError::Json(_))) => {}
        (Want::NotAnObject, Err(OpenAiError::NotAnObject)) => {}
        (Want::Field(f), Err(OpenAiError::Field { field, .. })) if f == field => {}
        _ => panic!("{input}\n want {want:?}\n got {got:?}"),
    }
    // The table doubles as a check of the twin itself.
    let twin = naive(input.as_bytes());
    match &want {
        Want::Is(w) => assert_eq!(twin.as_ref(), Ok(w), "twin on {input}"),
        _ => assert!(twin.is_err(), "twin accepted {input}"),
    }
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn one() -> Chunk {
    Chunk {
        choices: 1,
        ..Chunk::default()
    }
}

fn usage(prompt: u64, completion: u64, cached: Option<u64>) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        cached_tokens: cached,
    })
}

fn is(c: Chunk) -> Want {
    Want::Is(Owned::Chunk(c))
}

fn server_error(message: &str, kind: Option<&str>, code: Option<i64>) -> Want {
    Want::Is(Owned::Error {
        message: message.into(),
        kind: kind.map(str::to_owned),
        code,
    })
}

#[test]
fn vllm_completions() {
    check(
        r#"{"id":"cmpl-8f2c9a7e4b1d4e2f9a6c3b5d7e8f0a1b","object":"text_completion","created":1764470000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
        is(Chunk {
            content: s(" the"),
            ..one()
        }),
    );
    check(
        r#"{"id":"cmpl-1","object":"text_completion","created":1764470000,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}"#,
        is(Chunk {
            content: s(""),
            finish: s("length"),
            ..one()
        }),
    );
    // return_token_ids: several tokens merged into one chunk.
    check(
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" quick brown","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[4062,14198]}]}"#,
        is(Chunk {
            content: s(" quick brown"),
            token_ids: Some(2),
            ..one()
        }),
    );
    // Continuous usage on every chunk, with cached prompt tokens.
    check(
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" fox","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":8000,"total_tokens":8003,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":7984}}}"#,
        is(Chunk {
            content: s(" fox"),
            usage: usage(8000, 3, Some(7984)),
            ..one()
        }),
    );
    // Usage-only final chunk.
    check(
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":140,"completion_tokens":128,"prompt_tokens_details":null}}"#,
        is(Chunk {
            usage: usage(12, 128, None),
            ..Chunk::default()
        }),
    );
}

#[test]
fn vllm_chat() {
    let head = r#"{"id":"chatcmpl-0c6a","object":"chat.completion.chunk","created":1764470000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":"#;
    let tail = r#","logprobs":null,"finish_reason":null}]}"#;
    let cases: Vec<(&str, Chunk)> = vec![
        (
            r#"{"role":"assistant","content":""}"#,
            Chunk {
                content: s(""),
                ..one()
            },
        ),
        (
            r#"{"content":"Hello"}"#,
            Chunk {
                content: s("Hello"),
                ..one()
            },
        ),
        (
            r#"{"reasoning":"Let me think"}"#,
            Chunk {
                reasoning: s("Let me think"),
                ..one()
            },
        ),
        (
            r#"{"content":null,"reasoning_content":"step 1"}"#,
            Chunk {
                reasoning: s("step 1"),
                ..one()
            },
        ),
        (
            r#"{"reasoning":null,"reasoning_content":"old"}"#,
            Chunk {
                reasoning: s("old"),
                ..one()
            },
        ),
        (
            r#"{"tool_calls":[{"index":0,"id":"chatcmpl-tool-9b1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
            Chunk {
                tool_calls: true,
                ..one()
            },
        ),
        (
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Par"}}]}"#,
            Chunk {
                tool_calls: true,
                ..one()
            },
        ),
        (r#"{"tool_calls":[]}"#, one()),
        (r#"{}"#, one()),
    ];
    for (delta, want) in cases {
        check(&format!("{head}{delta}{tail}"), is(want));
    }
    check(
        r#"{"id":"chatcmpl-0c6a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27}}"#,
        is(Chunk {
            content: s(""),
            finish: s("stop"),
            usage: usage(20, 7, None),
            ..one()
        }),
    );
}

#[test]
fn vllm_per_request_metrics() {
    // `--enable-per-request-metrics`: the final usage chunk carries the server's own timing
    // (pydantic drops the fields that are None, e.g. `mean_itl_ms` for one output token).
    check(
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":9,"completion_tokens":4},"metrics":{"time_to_first_token_ms":12.5,"generation_time_ms":30.0,"queue_time_ms":0.25,"mean_itl_ms":10.0,"tokens_per_second":94.1,"speculative_decoding":{"num_drafts":3}}}"#,
        is(Chunk {
            usage: usage(5, 4, None),
            metrics: Some(ServerTiming {
                queue_ms: Some(0.25),
                ttft_ms: Some(12.5),
                generation_ms: Some(30.0),
                mean_itl_ms: Some(10.0),
            }),
            ..Chunk::default()
        }),
    );
    check(
        r#"{"choices":[],"metrics":{"queue_time_ms":0,"time_to_first_token_ms":1250}}"#,
        is(Chunk {
            metrics: Some(ServerTiming {
                queue_ms: Some(0.0),
                ttft_ms: Some(1250.0),
                ..ServerTiming::default()
            }),
            ..Chunk::default()
        }),
    );
    // What vLLM's client tolerates, we do too: no metrics, never an error.
    for lenient in [
        r#"{"choices":[],"metrics":null}"#,
        r#"{"choices":[],"metrics":"invalid"}"#,
        r#"{"choices":[],"metrics":[1,2]}"#,
    ] {
        check(lenient, is(Chunk::default()));
    }
    check(
        r#"{"choices":[],"metrics":{"queue_time_ms":null,"time_to_first_token_ms":"3","mean_itl_ms":true}}"#,
        is(Chunk {
            metrics: Some(ServerTiming::default()),
            ..Chunk::default()
        }),
    );
    // Malformed JSON inside it is still malformed.
    check(
        r#"{"choices":[],"metrics":{"queue_time_ms":1e999}}"#,
        Want::JsonError,
    );
}

#[test]
fn sglang_tgi_llamacpp() {
    check(
        r#"{"id":"6c1e0b7f","object":"chat.completion.chunk","created":1764470000,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":" world","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
        is(Chunk {
            content: s(" world"),
            ..one()
        }),
    );
    check(
        r#"{"id":"6c1e0b7f","object":"chat.completion.chunk","created":1,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"hmm","tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0}}"#,
        is(Chunk {
            reasoning: s("hmm"),
            finish: s("stop"),
            usage: usage(9, 3, None),
            ..one()
        }),
    );
    check(
        r#"{"object":"chat.completion.chunk","id":"","created":1764470000,"model":"tgi","system_fingerprint":"3.3.4-native","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        is(Chunk {
            content: s("Hello"),
            ..one()
        }),
    );
    check(
        r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1764470000,"id":"chatcmpl-XYZ","model":"gpt-3.5-turbo","system_fingerprint":"b6500-abc","object":"chat.completion.chunk","usage":{"completion_tokens":64,"prompt_tokens":27,"total_tokens":91},"timings":{"cache_n":0,"prompt_n":27,"prompt_ms":35.2,"prompt_per_token_ms":1.3037,"prompt_per_second":767.04,"predicted_n":64,"predicted_ms":910.5,"predicted_per_token_ms":14.22,"predicted_per_second":70.29}}"#,
        is(Chunk {
            finish: s("stop"),
            usage: usage(27, 64, None),
            timings: Some(Timings {
                prompt_n: Some(27),
                prompt_ms: Some(35.2),
                predicted_n: Some(64),
                predicted_ms: Some(910.5),
                cache_n: Some(0),
            }),
            ..one()
        }),
    );
    check(
        r#"{"choices":[{"text":"!","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"x","object":"text_completion","id":"cmpl-abc"}"#,
        is(Chunk {
            content: s("!"),
            ..one()
        }),
    );
}

#[test]
fn errors_both_shapes() {
    check(
        r#"{"error":{"message":"The decoder prompt (length 9000) is longer than the maximum model length of 8192.","type":"BadRequestError","param":null,"code":400}}"#,
        server_error(
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
            Some("BadRequestError"),
            Some(400),
        ),
    );
    check(
        r#"{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}"#,
        server_error(
            "The model `x` does not exist.",
            Some("NotFoundError"),
            Some(404),
        ),
    );
    check(
        r#"{"error":{"code":400,"message":"request (3024 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3024,"n_ctx":2048}}"#,
        server_error(
            "request (3024 tokens) exceeds the available context size (2048 tokens), try increasing it",
            Some("exceed_context_size_error"),
            Some(400),
        ),
    );
    check(
        r#"{"error":"Input validation error: `inputs` must have less than 4096 tokens","error_type":"validation"}"#,
        server_error(
            "Input validation error: `inputs` must have less than 4096 tokens",
            Some("validation"),
            None,
        ),
    );
    check(
        r#"{"error":{"message":"slow down","type":null,"code":"503"}}"#,
        server_error("slow down", None, Some(503)),
    );
    check(
        r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#,
        server_error("slow down", None, None),
    );
    check(
        r#"{"error":{"message":"x","code":1.5}}"#,
        server_error("x", None, None),
    );
    check(r#"{"error":{}}"#, server_error("", None, None));
    // `"error": null` is not an error event.
    check(
        r#"{"error":null,"choices":[{"text":"a"}]}"#,
        is(Chunk {
            content: s("a"),
            ..one()
        }),
    );
}

#[test]
fn done_and_whitespace() {
    check("[DONE]", Want::Is(Owned::Done));
    check(" \t[DONE]\r\n", Want::Is(Owned::Done));
    check("[DONE", Want::JsonError);
    check("[DONE]x", Want::JsonError);
    check(
        " {\n \"choices\" : [ { \"delta\" :\t{ \"content\" : \"a\" } } ] ,\r\n \"usage\" : null } \n",
        is(Chunk {
            content: s("a"),
            ..one()
        }),
    );
}

#[test]
fn escapes() {
    check(
        r#"{"choices":[{"text":"line\nnext \"q\" caf\u00e9 \ud83d\ude00 \\ \/ \t"}]}"#,
        is(Chunk {
            content: s("line\nnext \"q\" café 😀 \\ / \t"),
            ..one()
        }),
    );
    check(
        r#"{"choices":[{"text":"já 😀 raw"}]}"#,
        is(Chunk {
            content: s("já 😀 raw"),
            ..one()
        }),
    );
    // An escaped key still names the field.
    check(
        r#"{"choices":[{"te\u0078t":"hi"}]}"#,
        is(Chunk {
            content: s("hi"),
            ..one()
        }),
    );
    check(r#"{"choices":[{"text":"\ud83d"}]}"#, Want::JsonError);
    check(r#"{"choices":[{"text":"\ude00x"}]}"#, Want::JsonError);
    check(r#"{"choices":[{"text":"\u00zz"}]}"#, Want::JsonError);
    check(r#"{"choices":[{"text":"\q"}]}"#, Want::JsonError);
    check("{\"choices\":[{\"text\":\"a\u{1}b\"}]}", Want::JsonError);
    assert!(matches!(
        decode(b"{\"choices\":[{\"text\":\"\xff\"}]}"),
        Err(OpenAiError::Json(JsonError::InvalidUtf8 { .. }))
    ));
}

#[test]
fn nulls_and_wrong_types() {
    check(
        r#"{"choices":null,"usage":null,"timings":null}"#,
        is(Chunk::default()),
    );
    check(
        r#"{"choices":[{"text":null,"delta":null,"finish_reason":null,"token_ids":null}]}"#,
        is(one()),
    );
    check(
        r#"{"choices":[{"text":"a"},{"text":"b"},7]}"#,
        is(Chunk {
            choices: 3,
            content: s("a"),
            ..one()
        }),
    );
    check(
        r#"{"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":null}}"#,
        is(Chunk {
            usage: usage(1, 2, None),
            ..Chunk::default()
        }),
    );
    check(r#"{"choices":{}}"#, Want::Field("choices"));
    check(r#"{"choices":[null]}"#, Want::Field("choices[0]"));
    check(
        r#"{"choices":[{"text":5}]}"#,
        Want::Field("choices[0].text"),
    );
    check(
        r#"{"choices":[{"delta":[]}]}"#,
        Want::Field("choices[0].delta"),
    );
    check(
        r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
        Want::Field("delta.tool_calls"),
    );
    check(
        r#"{"choices":[{"finish_reason":1}]}"#,
        Want::Field("choices[0].finish_reason"),
    );
    check(r#"{"usage":[]}"#, Want::Field("usage"));
    check(
        r#"{"usage":{"prompt_tokens":-1}}"#,
        Want::Field("usage.prompt_tokens"),
    );
    check(
        r#"{"usage":{"completion_tokens":1.5}}"#,
        Want::Field("usage.completion_tokens"),
    );
    check(
        r#"{"usage":{"completion_tokens":18446744073709551616}}"#,
        Want::Field("usage.completion_tokens"),
    );
    check(
        r#"{"usage":{"completion_tokens":"3"}}"#,
        Want::Field("usage.completion_tokens"),
    );
    check(
        r#"{"usage":{"prompt_tokens_details":{"cached_tokens":-2}}}"#,
        Want::Field("usage.cached_tokens"),
    );
    check(
        r#"{"timings":{"prompt_ms":"fast"}}"#,
        Want::Field("timings.prompt_ms"),
    );
    check(r#"{"usage":{"prompt_tokens":01}}"#, Want::JsonError);
    check(r#"{"usage":{"prompt_tokens":1x}}"#, Want::JsonError);
    check(r#"{"usage":{"prompt_tokens":1"#, Want::JsonError);
    check(
        r#"{"usage":{"prompt_tokens":0,"completion_tokens":9999999999999999999}}"#,
        is(Chunk {
            usage: usage(0, 9_999_999_999_999_999_999, None),
            ..Chunk::default()
        }),
    );
    check(
        r#"{"usage":{"completion_tokens":18446744073709551615}}"#,
        is(Chunk {
            usage: Some(Usage {
                prompt_tokens: 0,
                completion_tokens: u64::MAX,
                total_tokens: u64::MAX,
                cached_tokens: None,
            }),
            ..Chunk::default()
        }),
    );
}

#[test]
fn malformed_and_truncated() {
    let full = r#"{"id":"c","choices":[{"index":0,"delta":{"content":"ab"},"finish_reason":null}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
    // Every strict prefix of a valid chunk is an error, never a partial chunk.
    for end in 0..full.len() {
        let got = fast(&full.as_bytes()[..end]);
        assert!(got.is_err(), "prefix {end} accepted: {got:?}");
    }
    check(
        full,
        is(fast(full.as_bytes()).map_or_else(
            |e| panic!("{e}"),
            |o| match o {
                Owned::Chunk(c) => c,
                other => panic!("{other:?}"),
            },
        )),
    );
    check("", Want::JsonError);
    check("   ", Want::JsonError);
    check(r#"{"a":1,}"#, Want::JsonError);
    check(r#"{"a":1}}"#, Want::JsonError);
    check(r#"{"a" 1}"#, Want::JsonError);
    check(r#"{a:1}"#, Want::JsonError);
    check(r#"{'a':1}"#, Want::JsonError);
    check(r#"{"a":01}"#, Want::JsonError);
    check(r#"{"a":NaN}"#, Want::JsonError);
    check(r#"{"a":tru}"#, Want::JsonError);
    check(r#"{"a":[1,2,]}"#, Want::JsonError);
    check(r#"{"a":1e999}"#, Want::JsonError);
    check(r#"{"a":1} {"b":2}"#, Want::JsonError);
    check(r#"[1,2]"#, Want::NotAnObject);
    check(r#""str""#, Want::NotAnObject);
    check("null", Want::NotAnObject);
    check("data: {}", Want::JsonError);
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let hostile = format!(r#"{{"x":{}"#, "[".repeat(1_000_000));
    check(&hostile, Want::JsonError);
    let hostile_obj = format!(r#"{{"x":{}"#, r#"{"a":"#.repeat(200_000));
    check(&hostile_obj, Want::JsonError);
    // Deep but within the limit is fine.
    let ok = format!(
        r#"{{"x":{}1{},"choices":[{{"text":"t"}}]}}"#,
        "[".repeat(60),
        "]".repeat(60)
    );
    check(
        &ok,
        is(Chunk {
            content: s("t"),
            ..one()
        }),
    );
    let too_deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(70), "]".repeat(70));
    assert!(matches!(
        decode(too_deep.as_bytes()),
        Err(OpenAiError::Json(JsonError::TooDeep { .. }))
    ));
}

#[test]
fn error_messages_are_one_line() {
    let cases = [
        decode(b"{\"a\":").unwrap_err(),
        decode(b"{\"choices\":{}}").unwrap_err(),
        decode(b"[]").unwrap_err(),
        decode(b"{\"a\":\x01}").unwrap_err(),
    ];
    for e in cases {
        let m = e.to_string();
        assert!(!m.contains('\n') && !m.is_empty(), "{m}");
    }
    assert_eq!(
        decode(b"{\"choices\":{}}").unwrap_err().to_string(),
        "stream event field `choices` is not an array or null"
    );
}

// ---- generated chunks for the property tests ----

const CHARS: &[char] = &[
    'a', 'b', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\r', '\u{1}', '\u{1f}', 'é', '中', '😀', '0',
];

fn gen_text(rng: &mut StdRng) -> String {
    let n = rng.gen_range(0..10);
    (0..n)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())])
        .collect()
}

/// JSON string literal for `s`, escaped one of several valid ways.
fn quote(rng: &mut StdRng, s: &str) -> String {
    if rng.gen_bool(0.5) {
        return serde_json::to_string(s).expect("strings serialise");
    }
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if rng.gen_bool(0.5) => out.push_str("\\/"),
            c if (c as u32) < 0x20 || !c.is_ascii() || rng.gen_bool(0.2) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if rng.gen_bool(0.5) {
                        out.push_str(&format!("\\u{u:04x}"));
                    } else {
                        out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn ws(rng: &mut StdRng) -> &'static str {
    const WS: [&str; 8] = ["", "", "", "", "", " ", "\n", " \r\n\t"];
    WS[rng.gen_range(0..WS.len())]
}

/// Renders an object with its fields shuffled and whitespace sprinkled; keys are sometimes
/// escaped.
fn object(rng: &mut StdRng, mut fields: Vec<(String, String)>) -> String {
    for i in (1..fields.len()).rev() {
        let j = rng.gen_range(0..=i);
        fields.swap(i, j);
    }
    let mut out = format!("{{{}", ws(rng));
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(&format!(",{}", ws(rng)));
        }
        let key = if rng.gen_bool(0.05) {
            quote(rng, k)
        } else {
            format!("\"{k}\"")
        };
        out.push_str(&format!("{key}{}:{}{v}{}", ws(rng), ws(rng), ws(rng)));
    }
    out.push('}');
    out
}

fn array(rng: &mut StdRng, items: Vec<String>) -> String {
    let mut out = format!("[{}", ws(rng));
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&format!("{},{}", ws(rng), ws(rng)));
        }
        out.push_str(v);
    }
    out.push_str(&format!("{}]", ws(rng)));
    out
}

/// Any JSON value, nested up to `depth`: what unknown fields carry.
fn junk(rng: &mut StdRng, depth: u32) -> String {
    match rng.gen_range(0..if depth == 0 { 6 } else { 8 }) {
        0 => "null".into(),
        1 => "true".into(),
        2 => "false".into(),
        3 => format!("{}", rng.gen_range(-1000i64..1000)),
        4 => format!(
            "{:.3}e{}",
            rng.gen_range(-10.0f64..10.0),
            rng.gen_range(-20..20)
        ),
        5 => {
            let t = gen_text(rng);
            quote(rng, &t)
        }
        6 => {
            let items = (0..rng.gen_range(0..4))
                .map(|_| junk(rng, depth - 1))
                .collect();
            array(rng, items)
        }
        _ => {
            let fields = (0..rng.gen_range(0..4))
                .map(|i| (format!("k{i}"), junk(rng, depth - 1)))
                .collect();
            object(rng, fields)
        }
    }
}

fn opt_string(rng: &mut StdRng) -> String {
    if rng.gen_bool(0.2) {
        "null".into()
    } else {
        let t = gen_text(rng);
        quote(rng, &t)
    }
}

fn gen_choice(rng: &mut StdRng) -> String {
    let mut f = vec![("index".to_string(), "0".to_string())];
    if rng.gen_bool(0.4) {
        f.push(("text".into(), opt_string(rng)));
    } else if rng.gen_bool(0.95) {
        let mut d = Vec::new();
        if rng.gen_bool(0.3) {
            d.push(("role".into(), "\"assistant\"".into()));
        }
        for key in ["content", "reasoning", "reasoning_content"] {
            if rng.gen_bool(0.5) {
                d.push((key.into(), opt_string(rng)));
            }
        }
        if rng.gen_bool(0.3) {
            let calls = (0..rng.gen_range(0..3)).map(|_| junk(rng, 3)).collect();
            let v = if rng.gen_bool(0.2) {
                "null".into()
            } else {
                array(rng, calls)
            };
            d.push(("tool_calls".into(), v));
        }
        if rng.gen_bool(0.2) {
            d.push(("extra".into(), junk(rng, 3)));
        }
        f.push(("delta".into(), object(rng, d)));
    } else {
        f.push(("delta".into(), "null".into()));
    }
    if rng.gen_bool(0.7) {
        let v = ["null", "\"stop\"", "\"length\"", "\"tool_calls\""][rng.gen_range(0..4)];
        f.push(("finish_reason".into(), v.into()));
    }
    if rng.gen_bool(0.3) {
        f.push(("logprobs".into(), junk(rng, 4)));
    }
    if rng.gen_bool(0.3) {
        let ids = (0..rng.gen_range(0..5))
            .map(|_| rng.gen_range(0..150_000u32).to_string())
            .collect();
        f.push(("token_ids".into(), array(rng, ids)));
    }
    if rng.gen_bool(0.3) {
        f.push(("stop_reason".into(), junk(rng, 1)));
    }
    object(rng, f)
}

fn gen_usage(rng: &mut StdRng) -> String {
    let p = rng.gen_range(0..1_000_000u64);
    let c = rng.gen_range(0..100_000u64);
    let mut f = vec![
        ("prompt_tokens".to_string(), p.to_string()),
        ("completion_tokens".to_string(), c.to_string()),
    ];
    if rng.gen_bool(0.8) {
        f.push(("total_tokens".into(), (p + c).to_string()));
    }
    if rng.gen_bool(0.3) {
        let d = if rng.gen_bool(0.3) {
            "null".into()
        } else {
            let v = if rng.gen_bool(0.2) {
                "null".to_string()
            } else {
                rng.gen_range(0..p + 1).to_string()
            };
            object(rng, vec![("cached_tokens".into(), v)])
        };
        f.push(("prompt_tokens_details".into(), d));
    }
    if rng.gen_bool(0.2) {
        f.push(("reasoning_tokens".into(), junk(rng, 1)));
    }
    object(rng, f)
}

fn gen_timings(rng: &mut StdRng) -> String {
    let mut f = Vec::new();
    for key in ["prompt_n", "predicted_n", "cache_n"] {
        if rng.gen_bool(0.8) {
            f.push((key.to_string(), rng.gen_range(0..100_000u32).to_string()));
        }
    }
    for key in ["prompt_ms", "predicted_ms", "prompt_per_second"] {
        if rng.gen_bool(0.8) {
            let v = format!(
                "{}.{:03}",
                rng.gen_range(0..100_000u32),
                rng.gen_range(0..1000u32)
            );
            f.push((key.to_string(), v));
        }
    }
    object(rng, f)
}

fn gen_metrics(rng: &mut StdRng) -> String {
    match rng.gen_range(0..6) {
        0 => return "null".into(),
        1 => return "\"invalid\"".into(),
        2 => return junk(rng, 2),
        _ => {}
    }
    let mut f = Vec::new();
    for key in [
        "time_to_first_token_ms",
        "generation_time_ms",
        "queue_time_ms",
        "mean_itl_ms",
        "tokens_per_second",
    ] {
        match rng.gen_range(0..6) {
            0 => {}
            1 => f.push((key.to_string(), "null".into())),
            2 => f.push((key.to_string(), junk(rng, 1))),
            3 => f.push((key.to_string(), rng.gen_range(0..100_000u32).to_string())),
            _ => f.push((
                key.to_string(),
                format!(
                    "{}.{:03}",
                    rng.gen_range(0..100_000u32),
                    rng.gen_range(0..1000u32)
                ),
            )),
        }
    }
    if rng.gen_bool(0.2) {
        f.push(("speculative_decoding".into(), junk(rng, 2)));
    }
    object(rng, f)
}

fn gen_event(rng: &mut StdRng) -> String {
    let mut f: Vec<(String, String)> = Vec::new();
    match rng.gen_range(0..20) {
        0 => {
            let mut e = Vec::new();
            e.push(("message".to_string(), opt_string(rng)));
            if rng.gen_bool(0.7) {
                e.push(("type".into(), "\"BadRequestError\"".into()));
            }
            let code = ["400", "null", "\"503\"", "\"rate_limit\"", "-1"][rng.gen_range(0..5)];
            e.push(("code".into(), code.into()));
            e.push(("param".into(), junk(rng, 2)));
            f.push(("error".into(), object(rng, e)));
        }
        1 => {
            f.push(("object".into(), "\"error\"".into()));
            f.push(("message".into(), opt_string(rng)));
            f.push(("type".into(), "\"NotFoundError\"".into()));
            f.push(("code".into(), "404".into()));
        }
        2 => {
            let t = gen_text(rng);
            f.push(("error".into(), quote(rng, &t)));
            f.push(("error_type".into(), "\"validation\"".into()));
        }
        _ => {
            let object_name = if rng.gen_bool(0.5) {
                "\"chat.completion.chunk\""
            } else {
                "\"text_completion\""
            };
            f.push(("object".into(), object_name.into()));
        }
    }
    f.push(("id".into(), "\"chatcmpl-8f2c9a7e\"".into()));
    f.push((
        "created".into(),
        rng.gen_range(0..2_000_000_000u64).to_string(),
    ));
    f.push((
        "model".into(),
        "\"meta-llama/Llama-3.1-8B-Instruct\"".into(),
    ));
    match rng.gen_range(0..10) {
        0 => f.push(("choices".into(), "null".into())),
        1 | 2 => f.push(("choices".into(), array(rng, vec![]))),
        3 => {}
        _ => {
            let n = rng.gen_range(1..3);
            let items = (0..n).map(|_| gen_choice(rng)).collect();
            f.push(("choices".into(), array(rng, items)));
        }
    }
    match rng.gen_range(0..4) {
        0 => f.push(("usage".into(), "null".into())),
        1 => {}
        _ => f.push(("usage".into(), gen_usage(rng))),
    }
    if rng.gen_bool(0.2) {
        f.push(("timings".into(), gen_timings(rng)));
    }
    if rng.gen_bool(0.2) {
        f.push(("metrics".into(), gen_metrics(rng)));
    }
    for i in 0..rng.gen_range(0..3) {
        f.push((format!("x_unknown_{i}"), junk(rng, 4)));
    }
    format!("{}{}{}", ws(rng), object(rng, f), ws(rng))
}

/// Small edits that turn valid events into near-misses.
fn mutate(rng: &mut StdRng, mut b: Vec<u8>) -> Vec<u8> {
    const BYTES: &[u8] = b"{}[]\",:\\ 0-e.nu\x00\x1f\xc3\xff";
    for _ in 0..rng.gen_range(1..4) {
        if b.is_empty() {
            break;
        }
        let at = rng.gen_range(0..b.len());
        match rng.gen_range(0..4) {
            0 => b.truncate(at),
            1 => b[at] = BYTES[rng.gen_range(0..BYTES.len())],
            2 => b.insert(at, BYTES[rng.gen_range(0..BYTES.len())]),
            _ => {
                b.remove(at);
            }
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn fast_matches_naive_on_generated_events(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let event = gen_event(&mut rng);
        let want = naive(event.as_bytes());
        prop_assert!(want.is_ok(), "generator made an invalid event: {}", event);
        prop_assert_eq!(fast(event.as_bytes()).map_err(|_| ()), want, "{}", event);
    }

    #[test]
    fn never_accepts_what_serde_rejects_in_mutated_events(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let valid = gen_event(&mut rng).into_bytes();
        let event = mutate(&mut rng, valid);
        let want = naive(&event);
        let got = fast(&event);
        match (&want, &got) {
            (Err(()), Ok(g)) => prop_assert!(false, "accepted {:?} as {:?}", String::from_utf8_lossy(&event), g),
            (Ok(w), Ok(g)) => prop_assert_eq!(w, g, "{:?}", String::from_utf8_lossy(&event)),
            _ => {}
        }
    }

    #[test]
    fn never_accepts_what_serde_rejects_in_arbitrary_bytes(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            "[ {}\\[\\],:\"\\\\a-z0-9.eE+-]{0,48}".prop_map(String::into_bytes),
        ]
    ) {
        if naive(&bytes).is_err() {
            prop_assert!(fast(&bytes).is_err(), "accepted {:?}", String::from_utf8_lossy(&bytes));
        }
    }
}
