//! Request bodies for the OpenAI-compatible streaming endpoints, and synthetic prompts.
//!
//! Built once per request, before the clock starts: this is the only place JSON is written.

use super::client::StreamRequest;
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// What to send as the prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    /// Token ids (completions only): the exact prompt length without a tokenizer.
    TokenIds(Vec<u32>),
}

/// One generation request, either endpoint.
#[derive(Clone, Debug)]
pub struct Generation {
    pub model: String,
    pub prompt: Prompt,
    /// `/v1/chat/completions` with one user message instead of `/v1/completions`.
    pub chat: bool,
    pub max_tokens: Option<u32>,
    pub ignore_eos: bool,
    /// Ask for `usage` on every chunk (`continuous_usage_stats`); some OpenAI-compatible
    /// servers reject the field.
    pub continuous_usage: bool,
    /// Extra top-level fields (e.g. `cache_salt`, `temperature`), merged last.
    pub extra: Map<String, Value>,
}

impl Generation {
    pub fn new(model: impl Into<String>, prompt: Prompt) -> Self {
        Self {
            model: model.into(),
            prompt,
            chat: false,
            max_tokens: None,
            ignore_eos: false,
            continuous_usage: true,
            extra: Map::new(),
        }
    }

    pub fn path(&self) -> &'static str {
        if self.chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        }
    }

    /// The JSON body. Fails only for token ids on the chat endpoint, which has no such field.
    pub fn body(&self) -> Result<Vec<u8>, String> {
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
            let prompt = match &self.prompt {
                Prompt::Text(t) => json!(t),
                Prompt::TokenIds(ids) => json!(ids),
            };
            m.insert("prompt".into(), prompt);
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
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        serde_json::to_vec(&Value::Object(m)).map_err(|e| format!("cannot encode request: {e}"))
    }

    /// The ready-to-send request, with room for `max_tokens` events.
    pub fn stream_request(&self, keep_text: Option<bool>) -> Result<StreamRequest, String> {
        Ok(StreamRequest {
            path: self.path().to_string(),
            body: Bytes::from(self.body()?),
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
