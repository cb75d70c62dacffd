//! The `/tokenize` and `/detokenize` dialects of the engines we know, as pure request and
//! response shapes (no IO), and the rule that decides whether a dialect really works.
//!
//! Engines answer the *wrong* dialect with a success: llama.cpp takes `{"prompt": …}` and
//! answers 200 `{"tokens": []}`. So a dialect is only trusted after a known non-empty text came
//! back with at least one token ([`verify`]); an empty answer means "not this dialect", and a
//! 401/403/5xx is an error the user must see, never "no /tokenize".
//!
//! Shapes, from each engine's source:
//! - vLLM: `POST /tokenize {model, prompt, add_special_tokens}` or
//!   `{model, messages, add_generation_prompt}` → `{count, max_model_len, tokens}`;
//!   `POST /detokenize {model, tokens}` → `{prompt}`.
//! - SGLang: `POST /tokenize {model, prompt, add_special_tokens}` → `{tokens, count,
//!   max_model_len}` (the vLLM request shape). Its `/detokenize` answer key and chat form are
//!   not confirmed here, so neither is used.
//! - llama.cpp: `POST /tokenize {content, add_special}` → `{tokens}`;
//!   `POST /detokenize {tokens}` → `{content}` (an id outside the vocabulary is a 500).
//! - TGI: `POST /tokenize {inputs}` → `[{id, text, start, stop}, …]`; no `/detokenize`.
//! - llama-cpp-python (`llama_cpp.server`): `POST /extras/tokenize {model, input}` → `{tokens}`
//!   (BOS included, as in a completion prompt), `POST /extras/tokenize/count {model, input}` →
//!   `{count}`; `POST /extras/detokenize {model, tokens}` → `{text}`. Its `/tokenize` is a 404.

use crate::workload::prose::ChatMessage;
use serde_json::{json, Value};

/// A `/tokenize` request and response shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenizeDialect {
    /// vLLM and SGLang: `{model, prompt | messages}` → `{count, tokens}`.
    Prompt,
    /// llama.cpp: `{content, add_special}` → `{tokens}`.
    Content,
    /// TGI: `{inputs}` → a JSON array of tokens.
    Inputs,
    /// llama-cpp-python: `/extras/tokenize {model, input}` → `{tokens}`.
    Input,
}

/// The text every dialect is verified with: several words, so every tokenizer gives more than
/// one token and an empty answer cannot be mistaken for a short one.
pub const VERIFY_TEXT: &str = "The quick brown fox jumps over the lazy dog.";

impl TokenizeDialect {
    pub const ALL: [TokenizeDialect; 4] = [
        TokenizeDialect::Prompt,
        TokenizeDialect::Content,
        TokenizeDialect::Inputs,
        TokenizeDialect::Input,
    ];

    /// The endpoint that tokenizes in this dialect.
    pub fn path(self) -> &'static str {
        match self {
            TokenizeDialect::Input => "/extras/tokenize",
            _ => "/tokenize",
        }
    }

    /// The endpoint that detokenizes in this dialect.
    pub fn detokenize_path(self) -> &'static str {
        match self {
            TokenizeDialect::Input => "/extras/detokenize",
            _ => "/detokenize",
        }
    }

    /// The request keys, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            TokenizeDialect::Prompt => "/tokenize {model, prompt} -> {count, tokens}",
            TokenizeDialect::Content => "/tokenize {content} -> {tokens}",
            TokenizeDialect::Inputs => "/tokenize {inputs} -> [tokens]",
            TokenizeDialect::Input => "/extras/tokenize {model, input} -> {tokens}",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenizeDialect::Prompt => "prompt",
            TokenizeDialect::Content => "content",
            TokenizeDialect::Inputs => "inputs",
            TokenizeDialect::Input => "input",
        }
    }

    /// The body that tokenizes `text` as a completion prompt (special tokens such as BOS
    /// included, as the server adds them to a prompt).
    pub fn text_body(self, model: &str, text: &str) -> Value {
        match self {
            TokenizeDialect::Prompt => {
                json!({"model": model, "prompt": text, "add_special_tokens": true})
            }
            TokenizeDialect::Content => json!({"content": text, "add_special": true}),
            TokenizeDialect::Inputs => json!({"inputs": text}),
            // No switch for BOS: the server always adds it, as to a completion prompt.
            TokenizeDialect::Input => json!({"model": model, "input": text}),
        }
    }

    /// Whether the dialect can count chat messages with the model's chat template.
    pub fn counts_chat(self) -> bool {
        self == TokenizeDialect::Prompt
    }

    /// Whether the engine behind the dialect has a `/detokenize` we rely on.
    pub fn has_detokenize(self) -> bool {
        self != TokenizeDialect::Inputs
    }

    /// The body that tokenizes chat messages with the model's chat template; `None` where the
    /// dialect has no such form (the count of joined texts would miss the template).
    pub fn chat_body(self, model: &str, messages: &[ChatMessage]) -> Option<Value> {
        match self {
            TokenizeDialect::Prompt => Some(json!({
                "model": model,
                "messages": messages
                    .iter()
                    .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
                    .collect::<Vec<_>>(),
                "add_generation_prompt": true
            })),
            TokenizeDialect::Content | TokenizeDialect::Inputs | TokenizeDialect::Input => None,
        }
    }

    /// The token count in a 2xx answer body. An answer without the dialect's keys is an error
    /// naming what came back.
    pub fn parse_count(self, body: &[u8]) -> Result<u64, String> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| format!("/tokenize did not answer JSON ({e}): {}", excerpt(body)))?;
        let n = match self {
            TokenizeDialect::Prompt => v.get("count").and_then(Value::as_u64).or_else(|| {
                v.get("tokens")
                    .and_then(Value::as_array)
                    .map(|a| a.len() as u64)
            }),
            TokenizeDialect::Content | TokenizeDialect::Input => v
                .get("tokens")
                .and_then(Value::as_array)
                .map(|a| a.len() as u64),
            TokenizeDialect::Inputs => v.as_array().map(|a| a.len() as u64),
        };
        n.ok_or_else(|| {
            format!(
                "/tokenize answer has no token count for the {} dialect: {}",
                self.as_str(),
                excerpt(body)
            )
        })
    }

    /// The token ids in a 2xx `/tokenize` answer, in order: `{"tokens": [ids]}` (vLLM,
    /// llama.cpp, llama-cpp-python), or `[{"id": …}, …]` (TGI). An answer without them is an
    /// error naming what came back.
    pub fn parse_ids(self, body: &[u8]) -> Result<Vec<u32>, String> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| format!("/tokenize did not answer JSON ({e}): {}", excerpt(body)))?;
        let list = match self {
            TokenizeDialect::Inputs => v.as_array(),
            _ => v.get("tokens").and_then(Value::as_array),
        };
        let id = |t: &Value| {
            t.as_u64()
                .or_else(|| t.get("id").and_then(Value::as_u64))
                .and_then(|n| u32::try_from(n).ok())
        };
        list.and_then(|l| l.iter().map(id).collect::<Option<Vec<u32>>>())
            .ok_or_else(|| {
                format!(
                    "/tokenize answer has no token ids for the {} dialect: {}",
                    self.as_str(),
                    excerpt(body)
                )
            })
    }

    /// The `/detokenize` request for `ids`; `None` where the engine has none we can rely on.
    pub fn detokenize_body(self, model: &str, ids: &[u32]) -> Option<Value> {
        match self {
            TokenizeDialect::Prompt => Some(json!({"model": model, "tokens": ids})),
            TokenizeDialect::Content => Some(json!({"tokens": ids})),
            TokenizeDialect::Input => Some(json!({"model": model, "tokens": ids})),
            TokenizeDialect::Inputs => None,
        }
    }

    /// The text in a 2xx `/detokenize` answer.
    pub fn parse_detokenized(self, body: &[u8]) -> Result<String, String> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| format!("/detokenize did not answer JSON ({e}): {}", excerpt(body)))?;
        let key = match self {
            TokenizeDialect::Prompt => "prompt",
            TokenizeDialect::Content => "content",
            TokenizeDialect::Input => "text",
            TokenizeDialect::Inputs => return Err("TGI has no /detokenize".into()),
        };
        v.get(key)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| format!("/detokenize answer has no \"{key}\": {}", excerpt(body)))
    }
}

/// What one dialect attempt with [`VERIFY_TEXT`] showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A non-empty count: the dialect works.
    Verified { count: u64 },
    /// The server does not speak this dialect: 404/405/400/422, an empty token list, or an
    /// answer without the dialect's keys. `why` says which.
    NotThisDialect { why: String },
    /// The server refused or failed (401, 403, 429, 5xx) or could not be reached: the endpoint
    /// may well exist; the user must see the message. `status` is the HTTP status, if any (a
    /// 5xx means "not ready yet", see `probe::Collected::not_ready`).
    Error {
        message: String,
        status: Option<u16>,
    },
}

/// Judge one `/tokenize` answer to [`VERIFY_TEXT`] (`status`, `body`).
pub fn verify(dialect: TokenizeDialect, status: u16, body: &[u8]) -> Attempt {
    match status {
        200..=299 => match dialect.parse_count(body) {
            Ok(0) => Attempt::NotThisDialect {
                why: format!(
                    "0 tokens for a {}-byte text ({})",
                    VERIFY_TEXT.len(),
                    excerpt(body)
                ),
            },
            Ok(count) => Attempt::Verified { count },
            Err(why) => Attempt::NotThisDialect { why },
        },
        400 | 404 | 405 | 415 | 422 => Attempt::NotThisDialect {
            why: format!("HTTP {status}: {}", excerpt(body)),
        },
        _ => Attempt::Error {
            status: Some(status),
            message: format!(
                "{} answered HTTP {status}: {}",
                dialect.path(),
                excerpt(body)
            ),
        },
    }
}

/// The order to try dialects in: the detected engine's own first.
pub fn order_for(engine: crate::server::EngineKind) -> [TokenizeDialect; 4] {
    use crate::server::EngineKind as E;
    use TokenizeDialect as D;
    match engine {
        E::LlamaCpp => [D::Content, D::Prompt, D::Inputs, D::Input],
        E::Tgi => [D::Inputs, D::Prompt, D::Content, D::Input],
        _ => [D::Prompt, D::Content, D::Inputs, D::Input],
    }
}

/// At most 300 characters of a body, for messages (cut at a character boundary).
pub fn excerpt(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s = s.trim();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TokenizeDialect as D;

    // Recorded answers to VERIFY_TEXT-like texts.
    const VLLM: &str = r#"{"count":11,"max_model_len":262144,"tokens":[2,818,3823,8864,37423,38167,1024,506,31770,4799,236761],"token_strs":null}"#;
    const LLAMA: &str =
        r#"{"tokens":[1,415,2936,9060,285,1142,461,10575,754,272,17898,3914,28723]}"#;
    /// llama.cpp answering the vLLM dialect: success, and nothing in it.
    const LLAMA_TRAP: &str = r#"{"tokens":[]}"#;
    const SGLANG: &str = r#"{"tokens":[785,3974,13876,38835,34208,916,279,15678,5562,13],"count":10,"max_model_len":40960}"#;
    const TGI: &str = r#"[{"id":1,"text":"","start":0,"stop":0},{"id":415,"text":"The","start":0,"stop":3},{"id":2936,"text":" quick","start":3,"stop":9}]"#;
    /// llama-cpp-python's `/extras/tokenize` (the tiny test model's vocabulary).
    const LLAMA_CPP_PYTHON: &str = r#"{"tokens":[1,52,60,48,77,41,9]}"#;

    #[test]
    fn every_engine_counts_in_its_own_dialect() {
        assert_eq!(
            verify(D::Prompt, 200, VLLM.as_bytes()),
            Attempt::Verified { count: 11 }
        );
        assert_eq!(
            verify(D::Content, 200, LLAMA.as_bytes()),
            Attempt::Verified { count: 13 }
        );
        assert_eq!(
            verify(D::Prompt, 200, SGLANG.as_bytes()),
            Attempt::Verified { count: 10 }
        );
        assert_eq!(
            verify(D::Inputs, 200, TGI.as_bytes()),
            Attempt::Verified { count: 3 }
        );
        assert_eq!(
            verify(D::Input, 200, LLAMA_CPP_PYTHON.as_bytes()),
            Attempt::Verified { count: 7 }
        );
    }

    #[test]
    fn llama_cpp_python_speaks_on_its_own_paths() {
        assert_eq!(D::Input.path(), "/extras/tokenize");
        assert_eq!(D::Input.detokenize_path(), "/extras/detokenize");
        assert_eq!(
            D::Input.text_body("m", "hi"),
            json!({"model": "m", "input": "hi"})
        );
        assert_eq!(
            D::Input.detokenize_body("m", &[5]),
            Some(json!({"model": "m", "tokens": [5]}))
        );
        assert_eq!(
            D::Input.parse_detokenized(br#"{"text":"ab"}"#).unwrap(),
            "ab"
        );
        // Its 404 on the others' path, and their answers on its path, are "not this dialect".
        assert!(matches!(
            verify(D::Input, 404, br#"{"detail":"Not Found"}"#),
            Attempt::NotThisDialect { .. }
        ));
        for d in [D::Prompt, D::Content, D::Inputs] {
            assert_eq!(d.path(), "/tokenize");
        }
    }

    #[test]
    fn llamacpp_empty_answer_to_the_prompt_dialect_is_not_support() {
        let a = verify(D::Prompt, 200, LLAMA_TRAP.as_bytes());
        let Attempt::NotThisDialect { why } = a else {
            panic!("{a:?}")
        };
        assert!(why.contains("0 tokens"), "{why}");
        assert!(why.contains(r#"{"tokens":[]}"#), "{why}");
    }

    #[test]
    fn refusals_and_failures_are_errors_with_the_servers_message() {
        for status in [401u16, 403, 429, 500, 503] {
            let a = verify(D::Prompt, status, br#"{"error":"invalid api key"}"#);
            let Attempt::Error { message, .. } = a else {
                panic!("{status}: {a:?}")
            };
            assert!(message.contains(&status.to_string()), "{message}");
            assert!(message.contains("invalid api key"), "{message}");
        }
        assert!(matches!(
            verify(D::Prompt, 404, b"Not Found"),
            Attempt::NotThisDialect { .. }
        ));
    }

    #[test]
    fn wrong_shapes_are_not_this_dialect() {
        // TGI's array read as llama.cpp's object, and HTML read as JSON.
        assert!(matches!(
            verify(D::Content, 200, TGI.as_bytes()),
            Attempt::NotThisDialect { .. }
        ));
        assert!(matches!(
            verify(D::Inputs, 200, b"<html>ok</html>"),
            Attempt::NotThisDialect { .. }
        ));
    }

    #[test]
    fn request_shapes() {
        assert_eq!(
            D::Prompt.text_body("m", "hi"),
            json!({"model": "m", "prompt": "hi", "add_special_tokens": true})
        );
        assert_eq!(
            D::Content.text_body("m", "hi"),
            json!({"content": "hi", "add_special": true})
        );
        assert_eq!(D::Inputs.text_body("m", "hi"), json!({"inputs": "hi"}));
        assert!(D::Content.chat_body("m", &[]).is_none());
        assert_eq!(
            D::Content.detokenize_body("m", &[5, 6]),
            Some(json!({"tokens": [5, 6]}))
        );
        assert_eq!(
            D::Content
                .parse_detokenized(br#"{"content":"ab"}"#)
                .unwrap(),
            "ab"
        );
        assert_eq!(
            D::Prompt.parse_detokenized(br#"{"prompt":"ab"}"#).unwrap(),
            "ab"
        );
        assert!(D::Prompt.parse_detokenized(br#"{"content":"ab"}"#).is_err());
        assert_eq!(
            D::Prompt.parse_ids(br#"{"count":2,"tokens":[7,300]}"#),
            Ok(vec![7, 300])
        );
        assert_eq!(
            D::Inputs.parse_ids(br#"[{"id":5,"text":"a"},{"id":9,"text":"b"}]"#),
            Ok(vec![5, 9])
        );
        // llama.cpp's pieces form, a negative id, or no list: errors, never a guess.
        assert!(D::Content
            .parse_ids(br#"{"tokens":[{"piece":"a"}]}"#)
            .is_err());
        assert!(D::Prompt.parse_ids(br#"{"tokens":[-1]}"#).is_err());
        assert!(D::Input.parse_ids(br#"{"count":3}"#).is_err());
    }

    #[test]
    fn each_engine_tries_its_own_dialect_first() {
        use crate::server::EngineKind as E;
        assert_eq!(order_for(E::LlamaCpp)[0], D::Content);
        assert_eq!(order_for(E::Tgi)[0], D::Inputs);
        assert_eq!(order_for(E::Vllm)[0], D::Prompt);
        assert_eq!(order_for(E::Sglang)[0], D::Prompt);
        for e in [E::Vllm, E::LlamaCpp, E::Tgi, E::OpenAi] {
            let mut o = order_for(e).to_vec();
            o.sort_by_key(|d| d.as_str());
            o.dedup();
            assert_eq!(
                o.len(),
                D::ALL.len(),
                "every dialect is tried once for {e:?}"
            );
        }
        for d in D::ALL {
            assert_eq!(d.counts_chat(), d.chat_body("m", &[]).is_some());
            assert_eq!(d.has_detokenize(), d.detokenize_body("m", &[1]).is_some());
        }
    }

    #[test]
    fn excerpt_cuts_long_bodies_on_a_char_boundary() {
        let long = "é".repeat(400);
        let e = excerpt(long.as_bytes());
        assert_eq!(e.chars().count(), 301);
    }
}
