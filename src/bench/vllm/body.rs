//! The request bodies `vllm bench serve` sends: its OpenAI completions, chat and Responses
//! payloads and its TGI payload, field for field, and the native bodies of SGLang and llama.cpp for its old
//! backend names. The engine asks for them through [`Bodies`].

use crate::bench::engine::plan::Bodies;
use crate::workload::datasets::{PromptSource, Sample};
use serde_json::{json, Map, Value};

/// Decimal digits of 0..100, two bytes each, so a number is written two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `n` in decimal (a 4,000-token prompt is 4,000 of these per request body).
fn push_u32(out: &mut Vec<u8>, mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// Builds request bodies as vLLM's backends send them (OpenAI and TGI), and the native ones of
/// SGLang and llama.cpp.
pub struct BodyBuilder {
    pub model: String,
    /// The API spoken (OpenAI: `chat` picks the endpoint).
    pub dialect: crate::net::Dialect,
    pub chat: bool,
    pub ignore_eos: bool,
    pub continuous_usage: bool,
    /// Sampling fields and `--extra-body` (merged last, so they win).
    pub extra: Map<String, Value>,
}

impl BodyBuilder {
    /// The JSON body for one sample. Token ids are written straight into the buffer.
    pub fn body(&self, s: &Sample, ids: &mut Vec<u32>) -> Result<Vec<u8>, String> {
        self.body_as(s, ids, &self.model)
    }

    /// [`BodyBuilder::body`] naming `model` (a LoRA adapter) instead of the builder's.
    pub fn body_as(&self, s: &Sample, ids: &mut Vec<u32>, model: &str) -> Result<Vec<u8>, String> {
        if self.dialect == crate::net::Dialect::Responses {
            return self.responses_body(s, model);
        }
        if self.dialect != crate::net::Dialect::OpenAi {
            return self.native_body(s, ids);
        }
        let mut m = Map::new();
        m.insert("model".into(), json!(model));
        // A dataset's own conversation and fields (the `hf` dataset's BFCL: its messages, with
        // `tools` and `tool_choice` over the sampling fields and `--extra-body`, as vLLM
        // merges a request's overrides).
        if let (true, PromptSource::Chat { messages, extra }) = (self.chat, &s.prompt) {
            m.insert("messages".into(), messages.as_ref().clone());
            m.insert("max_completion_tokens".into(), json!(s.output_len));
            m.insert("stream".into(), json!(true));
            let mut so = Map::new();
            so.insert("include_usage".into(), json!(true));
            if self.continuous_usage {
                so.insert("continuous_usage_stats".into(), json!(true));
            }
            m.insert("stream_options".into(), Value::Object(so));
            if self.ignore_eos {
                m.insert("ignore_eos".into(), json!(true));
            }
            m.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
            m.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
            return serde_json::to_vec(&Value::Object(m)).map_err(|e| e.to_string());
        }
        let text = match s.prompt.text_part() {
            PromptSource::Text(t) => Some(t.as_str()),
            PromptSource::Synthetic { .. } | PromptSource::Blocks { .. } => None,
            PromptSource::Chat { .. }
            | PromptSource::Turns(_)
            | PromptSource::Multimodal { .. } => return Err(CHAT_REQUESTS.into()),
        };
        let images = crate::workload::datasets::random_mm::images(s);
        if !images.is_empty() && !self.chat {
            return Err(
                "a prompt with images goes to the chat endpoint (--backend openai-chat)".into(),
            );
        }
        // The fields vLLM's `async_request_openai_completions` / `..._chat_completions` send,
        // no more: a server must see the same request from either tool.
        if self.chat {
            let t = text.ok_or("token-id prompts need /v1/completions")?;
            // vLLM's `_get_chat_content`: the text part, then each image (its mm_position
            // "last").
            let mut content = vec![json!({"type": "text", "text": t})];
            content.extend(
                images
                    .iter()
                    .map(|i| json!({"type": "image_url", "image_url": {"url": &*i.url}})),
            );
            m.insert(
                "messages".into(),
                json!([{"role": "user", "content": content}]),
            );
            m.insert("max_completion_tokens".into(), json!(s.output_len));
        } else {
            if let Some(t) = text {
                m.insert("prompt".into(), json!(t));
            }
            m.insert("repetition_penalty".into(), json!(1.0));
            m.insert("max_tokens".into(), json!(s.output_len));
            // `--logprobs` is refused, so this is always vLLM's default: an explicit null.
            m.insert("logprobs".into(), Value::Null);
        }
        m.insert("stream".into(), json!(true));
        let mut so = Map::new();
        so.insert("include_usage".into(), json!(true));
        // Not sent by vLLM; only `--continuous-usage` (exact per-event token counts for our
        // `token_count_source`) adds it, since some servers reject the field.
        if self.continuous_usage {
            so.insert("continuous_usage_stats".into(), json!(true));
        }
        m.insert("stream_options".into(), Value::Object(so));
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        let rest = serde_json::to_vec(&Value::Object(m)).map_err(|e| e.to_string())?;
        // `--extra-body` wins over everything, the prompt included: never write a second key.
        if self.chat || text.is_some() || self.extra.contains_key("prompt") {
            return Ok(rest);
        }
        ids.clear();
        s.write_ids(ids);
        let mut out = Vec::with_capacity(rest.len() + 16 + ids.len() * 6);
        out.extend_from_slice(b"{\"prompt\":[");
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_u32(&mut out, id);
        }
        out.extend_from_slice(b"],");
        out.extend_from_slice(&rest[1..]);
        Ok(out)
    }
}

/// vLLM's datasets make no whole chat requests (only SGLang's `openai` does).
const CHAT_REQUESTS: &str =
    "a dataset of whole chat requests or multi-turn rows is SGLang's (bench sglang)";

impl BodyBuilder {
    /// vLLM 0.33's `async_request_openai_responses` payload, field for field: `model`, the
    /// prompt text as `input`, `max_output_tokens`, `stream`, `store: false`, then `ignore_eos`
    /// and the sampling fields and `--extra-body` (merged last, so they win).
    fn responses_body(&self, s: &Sample, model: &str) -> Result<Vec<u8>, String> {
        let PromptSource::Text(t) = &s.prompt else {
            return Err("the Responses API takes text prompts only, not token ids".into());
        };
        let mut m = Map::new();
        m.insert("model".into(), json!(model));
        m.insert("input".into(), json!(t));
        m.insert("max_output_tokens".into(), json!(s.output_len));
        m.insert("stream".into(), json!(true));
        m.insert("store".into(), json!(false));
        if self.ignore_eos {
            m.insert("ignore_eos".into(), json!(true));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        serde_json::to_vec(&Value::Object(m)).map_err(|e| e.to_string())
    }

    /// The body of a native endpoint. TGI's is vLLM's `async_request_tgi` payload plus
    /// `details` (the last event's finish reason and token count; it does not change what is
    /// generated); like vLLM's, it leaves the sampling flags and `--extra-body` out. SGLang's
    /// puts the sampling fields in `sampling_params` and `--extra-body` at the top, as SGLang's
    /// own `bench_serving` does; llama.cpp's takes them all at the top.
    fn native_body(&self, s: &Sample, ids: &mut Vec<u32>) -> Result<Vec<u8>, String> {
        use crate::net::Dialect;
        let prompt = match &s.prompt {
            PromptSource::Text(t) => json!(t),
            PromptSource::Chat { .. } | PromptSource::Turns(_) => return Err(CHAT_REQUESTS.into()),
            PromptSource::Multimodal { .. } => {
                return Err(
                    "a prompt with images goes to the chat endpoint (--backend openai-chat)".into(),
                )
            }
            PromptSource::Synthetic { .. } | PromptSource::Blocks { .. } => {
                ids.clear();
                s.write_ids(ids);
                json!(ids)
            }
        };
        let body = match self.dialect {
            Dialect::Tgi => {
                let PromptSource::Text(t) = &s.prompt else {
                    return Err("TGI's /generate_stream takes text prompts only".into());
                };
                json!({"inputs": t, "parameters": {
                    "max_new_tokens": s.output_len,
                    "do_sample": true,
                    "temperature": 0.01,
                    "top_p": 0.99,
                    "truncate": s.prompt_len,
                    "ignore_eos_token": self.ignore_eos,
                    "details": true,
                }})
            }
            Dialect::Sglang => {
                let key = if prompt.is_string() {
                    "text"
                } else {
                    "input_ids"
                };
                let mut sp = json!({"max_new_tokens": s.output_len, "ignore_eos": self.ignore_eos});
                let mut m = Map::new();
                m.insert(key.into(), prompt);
                for (k, v) in &self.extra {
                    if SAMPLING_KEYS.contains(&k.as_str()) {
                        sp[k.as_str()] = v.clone();
                    } else {
                        m.insert(k.clone(), v.clone());
                    }
                }
                m.insert("sampling_params".into(), sp);
                m.insert("stream".into(), json!(true));
                Value::Object(m)
            }
            Dialect::LlamaCpp | Dialect::OpenAi | Dialect::Responses => {
                let mut m = Map::new();
                m.insert("prompt".into(), prompt);
                m.insert("n_predict".into(), json!(s.output_len));
                if self.ignore_eos {
                    m.insert("ignore_eos".into(), json!(true));
                }
                m.insert("stream".into(), json!(true));
                m.extend(self.extra.clone());
                Value::Object(m)
            }
        };
        serde_json::to_vec(&body).map_err(|e| e.to_string())
    }
}

/// The sampling flags' fields, which SGLang reads inside `sampling_params`.
const SAMPLING_KEYS: [&str; 7] = [
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
];

/// The engine names the model each request asks for (the resolved model or a LoRA adapter);
/// `model` is only [`BodyBuilder::body`]'s.
impl Bodies for BodyBuilder {
    fn request_body(&self, s: &Sample, model: &str, ids: &mut Vec<u32>) -> Result<Vec<u8>, String> {
        self.body_as(s, ids, model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::{random, DatasetConfig};

    fn builder(chat: bool) -> BodyBuilder {
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0.0));
        BodyBuilder {
            model: "m".into(),
            dialect: crate::net::Dialect::OpenAi,
            chat,
            ignore_eos: true,
            continuous_usage: false,
            extra,
        }
    }

    /// A prompt with images: vLLM's `_get_chat_content` order, the text part then one
    /// `image_url` part per image, each its data URL as made; no other endpoint takes them.
    #[test]
    fn images_follow_the_text_as_image_url_parts() {
        use crate::workload::image::Image;
        let img = |w: u32, url: &str| Image {
            width: w,
            height: 2,
            encoded_bytes: 3,
            url: url.into(),
            recipe: None,
        };
        let s = Sample {
            group: None,
            prompt: PromptSource::Multimodal {
                text: Box::new(PromptSource::Text("hi".into())),
                images: vec![img(1, "data:image/jpeg;base64,AA=="), img(4, "data:x")].into(),
            },
            prompt_len: 1,
            output_len: 5,
        };
        let body: Value =
            serde_json::from_slice(&builder(true).body(&s, &mut Vec::new()).unwrap()).unwrap();
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}},
                {"type": "image_url", "image_url": {"url": "data:x"}}]}])
        );
        let e = builder(false).body(&s, &mut Vec::new()).unwrap_err();
        assert!(e.contains("chat endpoint"), "{e}");
    }

    /// The whole body, field for field, as vLLM's request functions build it (their payload
    /// dict, then `ignore_eos`, then the sampling fields and `--extra-body`).
    #[test]
    fn bodies_are_vllms_payloads_exactly() {
        let s = Sample {
            group: None,
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 5,
        };
        let body = |b: &BodyBuilder| -> Value {
            serde_json::from_slice(&b.body(&s, &mut Vec::new()).unwrap()).unwrap()
        };
        assert_eq!(
            body(&builder(false)),
            json!({"model": "m", "prompt": "hi", "repetition_penalty": 1.0, "max_tokens": 5,
                   "logprobs": null, "stream": true, "stream_options": {"include_usage": true},
                   "ignore_eos": true, "temperature": 0.0})
        );
        assert_eq!(
            body(&builder(true)),
            json!({"model": "m",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "max_completion_tokens": 5, "stream": true,
                   "stream_options": {"include_usage": true},
                   "ignore_eos": true, "temperature": 0.0})
        );
        // Our extra, only when asked for.
        let mut b = builder(true);
        b.continuous_usage = true;
        assert_eq!(
            body(&b)["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": true})
        );
    }

    /// `openai-responses`: vLLM 0.33's `async_request_openai_responses` payload; a token-id
    /// prompt has no field there.
    #[test]
    fn responses_body_is_vllms_payload() {
        let s = Sample {
            group: None,
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 5,
        };
        let mut b = builder(false);
        b.dialect = crate::net::Dialect::Responses;
        let body: Value =
            serde_json::from_slice(&b.body_as(&s, &mut Vec::new(), "lora-a").unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"model": "lora-a", "input": "hi", "max_output_tokens": 5, "stream": true,
                   "store": false, "ignore_eos": true, "temperature": 0.0})
        );
        let ids = random(&DatasetConfig {
            num_prompts: 1,
            random_input_len: 8,
            ..Default::default()
        })
        .unwrap();
        let e = b.body(&ids[0], &mut Vec::new()).unwrap_err();
        assert!(e.contains("text prompts only"), "{e}");
    }

    /// The native backends' bodies: TGI's is vLLM's `async_request_tgi` payload plus
    /// `details`; SGLang's puts the sampling fields in `sampling_params`, as its own
    /// `bench_serving` does; llama.cpp's takes them at the top.
    #[test]
    fn native_backend_bodies() {
        use crate::net::Dialect;
        let s = Sample {
            group: None,
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 3,
            output_len: 5,
        };
        let body = |d: Dialect| -> Value {
            let mut b = builder(false);
            b.dialect = d;
            b.extra.insert("top_k".into(), json!(4));
            b.extra.insert("lora_path".into(), json!("a"));
            serde_json::from_slice(&b.body(&s, &mut Vec::new()).unwrap()).unwrap()
        };
        assert_eq!(
            body(Dialect::Tgi),
            json!({"inputs": "hi", "parameters": {"max_new_tokens": 5, "do_sample": true,
                   "temperature": 0.01, "top_p": 0.99, "truncate": 3,
                   "ignore_eos_token": true, "details": true}})
        );
        assert_eq!(
            body(Dialect::Sglang),
            json!({"text": "hi", "sampling_params": {"max_new_tokens": 5, "ignore_eos": true,
                   "temperature": 0.0, "top_k": 4}, "lora_path": "a", "stream": true})
        );
        assert_eq!(
            body(Dialect::LlamaCpp),
            json!({"prompt": "hi", "n_predict": 5, "ignore_eos": true, "stream": true,
                   "temperature": 0.0, "top_k": 4, "lora_path": "a"})
        );
    }

    #[test]
    fn token_id_body_matches_serde_json() {
        let s = random(&DatasetConfig {
            num_prompts: 3,
            random_input_len: 50,
            random_prefix_len: 3,
            ..Default::default()
        })
        .unwrap();
        let mut ids = Vec::new();
        for x in &s {
            let body = builder(false).body(x, &mut ids).unwrap();
            let v: Value = serde_json::from_slice(&body).unwrap();
            let mut want = Vec::new();
            x.write_ids(&mut want);
            // The hand-written id array is the naive serde_json encoding, number for number.
            assert_eq!(v["prompt"], json!(want));
            assert_eq!(v["max_tokens"], 128);
            assert_eq!(v["stream"], true);
            assert_eq!(v["ignore_eos"], true);
            assert_eq!(v["temperature"], 0.0);
            assert_eq!(v["stream_options"]["include_usage"], true);
        }
        let mut n = Vec::new();
        for k in [0u32, 7, 10, 99, 100, 1000, 7999, 12_345, 4_294_967_295] {
            n.clear();
            push_u32(&mut n, k);
            assert_eq!(n, k.to_string().as_bytes());
        }
    }

    proptest::proptest! {
        #[test]
        fn push_u32_matches_to_string(n: u32) {
            let mut out = Vec::new();
            push_u32(&mut out, n);
            proptest::prop_assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn extra_body_prompt_replaces_the_token_ids_without_a_second_key() {
        let s = random(&DatasetConfig {
            num_prompts: 1,
            random_input_len: 8,
            ..Default::default()
        })
        .unwrap();
        let mut b = builder(false);
        b.extra.insert("prompt".into(), json!("from --extra-body"));
        let body = b.body(&s[0], &mut Vec::new()).unwrap();
        let text = String::from_utf8(body).unwrap();
        assert_eq!(text.matches("\"prompt\"").count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["prompt"], "from --extra-body");
    }

    #[test]
    fn chat_body_uses_messages_and_max_completion_tokens() {
        let s = Sample {
            group: None,
            prompt: PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 5,
        };
        let v: Value =
            serde_json::from_slice(&builder(true).body(&s, &mut Vec::new()).unwrap()).unwrap();
        assert_eq!(
            v["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        );
        assert_eq!(v["max_completion_tokens"], 5);
        assert!(v.get("prompt").is_none());
    }
}
