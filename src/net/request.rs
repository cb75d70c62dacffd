//! Request bodies for the OpenAI-compatible streaming endpoints (completions, chat, Responses)
//! and the engines' native ones (SGLang `/generate`, TGI `/generate_stream`, llama.cpp
//! `/completion`), and synthetic prompts.
//!
//! Built once per request, before the clock starts: this is the only place JSON is written.

use super::client::StreamRequest;
use crate::proto::native::Dialect;
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// What to send as the prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    /// Token ids (completions only): the exact prompt length without a tokenizer.
    TokenIds(Vec<u32>),
}

/// One generation request, any endpoint.
#[derive(Clone, Debug)]
pub struct Generation {
    pub model: String,
    pub prompt: Prompt,
    /// The API to speak: OpenAI (`chat` picks the endpoint) or an engine's native one.
    pub dialect: Dialect,
    /// `/v1/chat/completions` with one user message instead of `/v1/completions`.
    pub chat: bool,
    pub max_tokens: Option<u32>,
    pub ignore_eos: bool,
    /// Ask for `usage` on every chunk (`continuous_usage_stats`); some OpenAI-compatible
    /// servers reject the field.
    pub continuous_usage: bool,
    /// Extra top-level fields (e.g. `cache_salt`, `temperature`; inside `parameters` for TGI),
    /// merged last.
    pub extra: Map<String, Value>,
}

impl Generation {
    pub fn new(model: impl Into<String>, prompt: Prompt) -> Self {
        Self {
            model: model.into(),
            prompt,
            dialect: Dialect::OpenAi,
            chat: false,
            max_tokens: None,
            ignore_eos: false,
            continuous_usage: true,
            extra: Map::new(),
        }
    }

    pub fn path(&self) -> &'static str {
        if let Some(p) = self.dialect.native_path() {
            return p;
        }
        if self.chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        }
    }

    /// The JSON body. Fails only for a prompt or option the endpoint has no field for (token
    /// ids on the chat endpoint or TGI's, `ignore_eos` on TGI's).
    pub fn body(&self) -> Result<Vec<u8>, String> {
        let m = match self.dialect {
            Dialect::OpenAi => self.openai_body()?,
            Dialect::Sglang => self.sglang_body(),
            Dialect::Tgi => self.tgi_body()?,
            Dialect::LlamaCpp => self.llamacpp_body(),
            Dialect::Responses => self.responses_body()?,
        };
        serde_json::to_vec(&Value::Object(m)).map_err(|e| format!("cannot encode request: {e}"))
    }

    fn prompt_json(&self) -> Value {
        match &self.prompt {
            Prompt::Text(t) => json!(t),
            Prompt::TokenIds(ids) => json!(ids),
        }
    }

    /// Merges the extra fields last, so they win.
    fn with_extra(&self, mut m: Map<String, Value>) -> Map<String, Value> {
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        m
    }

    /// SGLang `/generate` (`GenerateReqInput`): `text` or `input_ids`, the length and
    /// `ignore_eos` inside `sampling_params`.
    fn sglang_body(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let key = match self.prompt {
            Prompt::Text(_) => "text",
            Prompt::TokenIds(_) => "input_ids",
        };
        m.insert(key.into(), self.prompt_json());
        let mut sp = Map::new();
        if let Some(n) = self.max_tokens {
            sp.insert("max_new_tokens".into(), json!(n));
        }
        if self.ignore_eos {
            sp.insert("ignore_eos".into(), json!(true));
        }
        m.insert("sampling_params".into(), Value::Object(sp));
        m.insert("stream".into(), json!(true));
        self.with_extra(m)
    }

    /// TGI `/generate_stream` (`GenerateRequest`): `inputs` text only, `parameters` with
    /// `max_new_tokens`, `details` (the last event's finish reason and token count come only
    /// when asked for) and the extra fields. TGI has no `ignore_eos`.
    fn tgi_body(&self) -> Result<Map<String, Value>, String> {
        let Prompt::Text(t) = &self.prompt else {
            return Err("TGI's /generate_stream takes text prompts only, not token ids".into());
        };
        if self.ignore_eos {
            return Err("TGI's /generate_stream has no ignore_eos".into());
        }
        let mut params = Map::new();
        if let Some(n) = self.max_tokens {
            params.insert("max_new_tokens".into(), json!(n));
        }
        params.insert("details".into(), json!(true));
        // TGI reads every generation option inside `parameters`.
        let params = self.with_extra(params);
        let mut m = Map::new();
        m.insert("inputs".into(), json!(t));
        m.insert("parameters".into(), Value::Object(params));
        Ok(m)
    }

    /// llama.cpp `/completion`: `prompt` (text or token ids), `n_predict`, `ignore_eos`.
    fn llamacpp_body(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("prompt".into(), self.prompt_json());
        if let Some(n) = self.max_tokens {
            m.insert("n_predict".into(), json!(n));
        }
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        m.insert("stream".into(), json!(true));
        self.with_extra(m)
    }

    /// The Responses API (`/v1/responses`): `input` text, `max_output_tokens`, `stream`, and
    /// `store: false` (a server that stores responses would keep every one of a long run).
    fn responses_body(&self) -> Result<Map<String, Value>, String> {
        let Prompt::Text(t) = &self.prompt else {
            return Err("the Responses API takes text prompts only, not token ids".into());
        };
        let mut m = Map::new();
        m.insert("model".into(), json!(self.model));
        m.insert("input".into(), json!(t));
        if let Some(n) = self.max_tokens {
            m.insert("max_output_tokens".into(), json!(n));
        }
        m.insert("stream".into(), json!(true));
        m.insert("store".into(), json!(false));
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        Ok(self.with_extra(m))
    }

    fn openai_body(&self) -> Result<Map<String, Value>, String> {
        let mut m = Map::new();
        m.insert("model".into(), json!(self.model));
        if self.chat {
            let text = match &self.prompt {
                Prompt::Text(t) => t,
                Prompt::TokenIds(_) => {
                    return Err(
                        "token-id prompts work only on /v1/completions (drop --chat)".into(),
                    )
                }
            };
            m.insert(
                "messages".into(),
                json!([{ "role": "user", "content": text }]),
            );
            if let Some(n) = self.max_tokens {
                // Current servers read max_completion_tokens; older ones only the deprecated alias.
                m.insert("max_completion_tokens".into(), json!(n));
                m.insert("max_tokens".into(), json!(n));
            }
        } else {
            m.insert("prompt".into(), self.prompt_json());
            if let Some(n) = self.max_tokens {
                m.insert("max_tokens".into(), json!(n));
            }
        }
        m.insert("stream".into(), json!(true));
        let mut opts = Map::new();
        opts.insert("include_usage".into(), json!(true));
        if self.continuous_usage {
            opts.insert("continuous_usage_stats".into(), json!(true));
        }
        m.insert("stream_options".into(), Value::Object(opts));
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        Ok(self.with_extra(m))
    }

    /// The ready-to-send request, with room for `max_tokens` events.
    pub fn stream_request(&self, keep_text: Option<bool>) -> Result<StreamRequest, String> {
        Ok(StreamRequest {
            header: None,
            path: self.path().to_string(),
            body: Bytes::from(self.body()?),
            dialect: self.dialect,
            expected_events: self.max_tokens.unwrap_or(256) as usize + 4,
            keep_text,
            request_id: None,
        })
    }
}

/// `n` deterministic token ids from a range that is ordinary vocabulary in every tokenizer we
/// meet (ids 1000..8000: past the special and byte tokens of real vocabularies, and inside the
/// ~8.4K-token vocabulary of our own simulated server).
pub fn synthetic_token_ids(n: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| 1000 + ((i * 7919 + 13) % 7_000) as u32)
        .collect()
}

/// Text of `n` ordinary words; about one token each for most tokenizers (approximate).
pub fn synthetic_words(n: usize) -> String {
    const WORDS: [&str; 16] = [
        "river", "stone", "garden", "light", "paper", "window", "music", "orange", "winter",
        "table", "forest", "silver", "doctor", "market", "yellow", "bridge",
    ];
    let mut s = String::with_capacity(n * 7);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[(i * 7 + i / 16) % WORDS.len()]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(g: &Generation) -> Value {
        serde_json::from_slice(&g.body().unwrap()).unwrap()
    }

    #[test]
    fn completions_body() {
        let mut g = Generation::new("m", Prompt::TokenIds(vec![1000, 1001]));
        g.max_tokens = Some(8);
        g.ignore_eos = true;
        let v = body(&g);
        assert_eq!(g.path(), "/v1/completions");
        assert_eq!(v["prompt"], json!([1000, 1001]));
        assert_eq!(v["max_tokens"], 8);
        assert_eq!(v["stream"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(
            v["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": true})
        );
    }

    #[test]
    fn chat_body() {
        let mut g = Generation::new("m", Prompt::Text("hi".into()));
        g.chat = true;
        g.max_tokens = Some(4);
        g.continuous_usage = false;
        g.extra.insert("cache_salt".into(), json!("s"));
        let v = body(&g);
        assert_eq!(g.path(), "/v1/chat/completions");
        assert_eq!(v["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(v["max_completion_tokens"], 4);
        assert_eq!(v["max_tokens"], 4);
        assert_eq!(v["stream_options"], json!({"include_usage": true}));
        assert_eq!(v["cache_salt"], "s");
        assert!(v.get("ignore_eos").is_none());
        g.prompt = Prompt::TokenIds(vec![1]);
        assert!(g.body().is_err());
    }

    #[test]
    fn native_bodies_use_each_engines_field_names() {
        let mut g = Generation::new("m", Prompt::Text("hi".into()));
        g.max_tokens = Some(9);
        g.ignore_eos = true;
        g.extra.insert("temperature".into(), json!(0.0));

        g.dialect = Dialect::Sglang;
        assert_eq!(g.path(), "/generate");
        assert_eq!(
            body(&g),
            json!({"text": "hi", "sampling_params": {"max_new_tokens": 9, "ignore_eos": true}, "stream": true, "temperature": 0.0})
        );
        g.prompt = Prompt::TokenIds(vec![5, 6]);
        assert_eq!(body(&g)["input_ids"], json!([5, 6]));

        g.dialect = Dialect::LlamaCpp;
        assert_eq!(g.path(), "/completion");
        assert_eq!(
            body(&g),
            json!({"prompt": [5, 6], "n_predict": 9, "ignore_eos": true, "stream": true, "temperature": 0.0})
        );

        g.dialect = Dialect::Tgi;
        assert_eq!(g.path(), "/generate_stream");
        assert!(g.body().unwrap_err().contains("token ids"));
        g.prompt = Prompt::Text("hi".into());
        assert!(g.body().unwrap_err().contains("ignore_eos"));
        g.ignore_eos = false;
        assert_eq!(
            body(&g),
            json!({"inputs": "hi", "parameters": {"max_new_tokens": 9, "details": true, "temperature": 0.0}})
        );
        let req = g.stream_request(None).unwrap();
        assert_eq!(
            (req.path.as_str(), req.dialect),
            ("/generate_stream", Dialect::Tgi)
        );
    }

    #[test]
    fn synthetic_prompts_are_deterministic_and_in_range() {
        let ids = synthetic_token_ids(5000);
        assert_eq!(ids.len(), 5000);
        assert!(ids.iter().all(|&i| (1000..8000).contains(&i)));
        assert!(ids.windows(2).all(|w| w[0] != w[1]), "no runs of one token");
        assert_eq!(ids, synthetic_token_ids(5000));
        assert_eq!(synthetic_words(300).split(' ').count(), 300);
        assert_eq!(synthetic_words(0), "");
    }
}
