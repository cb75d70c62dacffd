//! The request bodies `sglang.bench_serving` sends, field for field, per reader (SGLang
//! `python/sglang/bench_serving.py`: `async_request_sglang_generate`,
//! `async_request_openai_completions`, `async_request_openai_chat_completions`).
//!
//! Owns the JSON of one request; built once per request before the clock starts. It must never
//! add a field SGLang does not send (a server must see the same request from either tool):
//! no `stream_options`, so OpenAI servers send no usage unless asked through
//! `--extra-request-body`.

use super::metrics::Reader;
use crate::bench::engine::plan::Bodies;
use crate::workload::chat_template::Processor;
use crate::workload::datasets::sglang_image;
use crate::workload::sample::{PromptSource, Sample};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The per-request body settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BodyFlags {
    pub ignore_eos: bool,
    pub return_logprob: bool,
    /// `--temperature`: native requests only (the OpenAI ones send 0.0, as SGLang does).
    pub temperature: f64,
    /// `--top-p` when below 1.0: native requests only.
    pub top_p: Option<f64>,
    pub return_routed_experts: bool,
    pub logprob_start_len: i64,
    /// `--top-logprobs-num`: native requests above 0; completions' `logprobs` with
    /// `--return-logprob`.
    pub top_logprobs_num: u32,
    pub token_ids_logprob: Option<Vec<i64>>,
    /// `--extra-request-body`, merged last.
    pub extra: Map<String, Value>,
}

impl Default for BodyFlags {
    /// SGLang's defaults.
    fn default() -> Self {
        BodyFlags {
            ignore_eos: false,
            return_logprob: false,
            temperature: 0.0,
            top_p: None,
            return_routed_experts: false,
            logprob_start_len: -1,
            top_logprobs_num: 0,
            token_ids_logprob: None,
            extra: Map::new(),
        }
    }
}

/// SGLang's bodies for the engine: the engine names each request's model, an adapter's name
/// when the request goes to one of `lora_names`.
#[derive(Clone, Debug)]
pub struct SglangBodies {
    pub reader: Reader,
    pub lora_names: Vec<String>,
    pub flags: BodyFlags,
    /// The model's processor, for a native image run: each image row's text goes through its
    /// chat template ([`sglang_image::native_prompt`]); `None` sends the text as it is.
    pub native_template: Option<Arc<Processor>>,
}

impl Bodies for SglangBodies {
    fn request_body(
        &self,
        s: &Sample,
        model: &str,
        _ids: &mut Vec<u32>,
    ) -> Result<Vec<u8>, String> {
        let lora = self.lora_names.iter().any(|l| l == model).then_some(model);
        if let Some(templated) = self.templated(s) {
            return body(self.reader, model, &templated, lora, &self.flags);
        }
        body(self.reader, model, s, lora, &self.flags)
    }

    /// A round of a multi-turn row (`--gsp-num-turns`): the chat body with the round's
    /// messages, and `stream_options.include_usage` set unless the extra body sets it (SGLang's
    /// wrapper asks for usage so each round's prompt length is the server's).
    fn round_body(&self, s: &Sample, model: &str, messages: &Value) -> Result<Vec<u8>, String> {
        if self.reader != Reader::Chat {
            return Err("multi-turn rows go to a chat backend".into());
        }
        let round = Sample {
            prompt: PromptSource::Chat {
                messages: Arc::new(messages.clone()),
                extra: Arc::default(),
            },
            ..s.clone()
        };
        let mut flags = self.flags.clone();
        let options = flags
            .extra
            .entry("stream_options")
            .or_insert_with(|| json!({}));
        if !options.is_object() {
            *options = json!({});
        }
        if let Some(o) = options.as_object_mut() {
            o.entry("include_usage").or_insert(json!(true));
        }
        let lora = self.lora_names.iter().any(|l| l == model).then_some(model);
        body(self.reader, model, &round, lora, &flags)
    }
}

impl SglangBodies {
    /// An image row as a native request sends it, its text the processor's chat template
    /// around its images and text (SGLang's prompt for `/generate`, which applies none); `None`
    /// for any other row or reader, or without a processor.
    fn templated(&self, s: &Sample) -> Option<Sample> {
        let (Reader::Native, Some(p)) = (self.reader, &self.native_template) else {
            return None;
        };
        let PromptSource::Multimodal { text, images } = &s.prompt else {
            return None;
        };
        let PromptSource::Text(t) = &**text else {
            return None;
        };
        let urls: Vec<&str> = images.iter().map(|i| &*i.url).collect();
        let mut out = s.clone();
        out.prompt
            .set_text(sglang_image::native_prompt(p, t, &urls).text);
        Some(out)
    }
}

/// The body of one request. `lora` is the adapter this request names, if any.
pub fn body(
    reader: Reader,
    model: &str,
    s: &Sample,
    lora: Option<&str>,
    flags: &BodyFlags,
) -> Result<Vec<u8>, String> {
    let mut m = Map::new();
    let prompt = prompt_value(s, reader)?;
    match reader {
        Reader::Native => {
            let key = if prompt.is_string() {
                "text"
            } else {
                "input_ids"
            };
            m.insert(key.into(), prompt);
            let mut sampling = json!({
                "temperature": flags.temperature,
                "max_new_tokens": s.output_len,
                "ignore_eos": flags.ignore_eos,
            });
            if let Some(p) = flags.top_p {
                sampling["top_p"] = json!(p);
            }
            m.insert("sampling_params".into(), sampling);
            m.insert("stream".into(), json!(true));
            m.insert("lora_path".into(), json!(lora));
            m.insert("return_logprob".into(), json!(flags.return_logprob));
            m.insert(
                "return_routed_experts".into(),
                json!(flags.return_routed_experts),
            );
            m.insert("logprob_start_len".into(), json!(flags.logprob_start_len));
            if flags.top_logprobs_num > 0 {
                m.insert("top_logprobs_num".into(), json!(flags.top_logprobs_num));
            }
            if let Some(ids) = &flags.token_ids_logprob {
                m.insert("token_ids_logprob".into(), json!(ids));
            }
        }
        Reader::Completions => {
            m.insert("model".into(), json!(model));
            m.insert("prompt".into(), prompt);
            m.insert("temperature".into(), json!(0.0));
            m.insert("best_of".into(), json!(1));
            m.insert("max_tokens".into(), json!(s.output_len));
            m.insert("stream".into(), json!(true));
            m.insert("ignore_eos".into(), json!(flags.ignore_eos));
            if flags.return_logprob && flags.top_logprobs_num > 0 {
                m.insert("logprobs".into(), json!(flags.top_logprobs_num));
            }
        }
        Reader::Chat => {
            m.insert("model".into(), json!(model));
            // A chat request's own messages go as they are; a prompt is one user message.
            let messages = match &s.prompt {
                PromptSource::Chat { .. } => prompt,
                // SGLang's image rows: each image an `image_url` part, then the text.
                PromptSource::Multimodal { images, .. } => {
                    let mut content: Vec<Value> = images
                        .iter()
                        .map(|i| json!({"type": "image_url", "image_url": {"url": &*i.url}}))
                        .collect();
                    content.push(json!({"type": "text", "text": prompt}));
                    json!([{"role": "user", "content": content}])
                }
                _ => json!([{"role": "user", "content": prompt}]),
            };
            m.insert("messages".into(), messages);
            m.insert("temperature".into(), json!(0.0));
            m.insert("max_completion_tokens".into(), json!(s.output_len));
            m.insert("stream".into(), json!(true));
            m.insert("ignore_eos".into(), json!(flags.ignore_eos));
        }
    }
    for (k, v) in &flags.extra {
        m.insert(k.clone(), v.clone());
    }
    // SGLang's native and completions readers send a row's images as `image_data`, the data
    // URLs in order, after the extra body.
    if let (PromptSource::Multimodal { images, .. }, Reader::Native | Reader::Completions) =
        (&s.prompt, reader)
    {
        let urls: Vec<&str> = images.iter().map(|i| &*i.url).collect();
        m.insert("image_data".into(), json!(urls));
    }
    // A chat request's own fields over the run's (SGLang merges them so).
    if let PromptSource::Chat { extra, .. } = &s.prompt {
        for (k, v) in extra.iter() {
            m.insert(k.clone(), v.clone());
        }
    }
    // SGLang's OpenAI readers name the adapter twice (vLLM's and SGLang's conventions), after
    // the extra body.
    if let (Some(l), Reader::Completions | Reader::Chat) = (lora, reader) {
        m.insert("model".into(), json!(l));
        m.insert("lora_path".into(), json!(l));
    }
    serde_json::to_vec(&Value::Object(m)).map_err(|e| format!("cannot encode request: {e}"))
}

/// The prompt as sent: text, a chat request's messages, or token ids where the dataset made ids
/// and the endpoint takes them (the native endpoint's `input_ids`, the completions `prompt`).
fn prompt_value(s: &Sample, reader: Reader) -> Result<Value, String> {
    match s.prompt.text_part() {
        PromptSource::Text(t) => Ok(json!(t)),
        // Sent round by round (`round_body`), never as one prompt.
        PromptSource::Turns(_) => Err("a multi-turn row is sent round by round".into()),
        // SGLang sends the message list in the prompt's place whatever the backend.
        PromptSource::Chat { messages, .. } => Ok(messages.as_ref().clone()),
        PromptSource::Multimodal { .. } => Err("an image row's text part has images".into()),
        PromptSource::Synthetic { .. } | PromptSource::Blocks { .. } => {
            if reader == Reader::Chat || matches!(s.prompt, PromptSource::Multimodal { .. }) {
                return Err("token-id prompts cannot go to a chat endpoint".into());
            }
            let mut ids = Vec::with_capacity(s.prompt_len as usize);
            s.write_ids(&mut ids);
            Ok(json!(ids))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, out: u32) -> Sample {
        Sample {
            group: None,
            prompt: PromptSource::Text(text.into()),
            prompt_len: 3,
            output_len: out,
        }
    }

    fn parse(b: Vec<u8>) -> Value {
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn a_round_sends_its_messages_and_asks_for_usage_unless_told_otherwise() {
        let bodies = |extra: Value, reader: Reader| SglangBodies {
            reader,
            lora_names: Vec::new(),
            native_template: None,
            flags: BodyFlags {
                extra: extra.as_object().unwrap().clone(),
                ..BodyFlags::default()
            },
        };
        let msgs = json!([
            {"role": "user", "content": "q0"},
            {"role": "assistant", "content": "a0"},
            {"role": "user", "content": "q1"}
        ]);
        let row = Sample {
            prompt: PromptSource::Turns(vec!["q0".to_string(), "q1".to_string()].into()),
            ..sample("", 6)
        };
        let b = parse(
            bodies(json!({"seed": 1}), Reader::Chat)
                .round_body(&row, "m", &msgs)
                .unwrap(),
        );
        assert_eq!(b["messages"], msgs);
        assert_eq!(b["max_completion_tokens"], 6);
        assert_eq!(b["stream_options"], json!({"include_usage": true}));
        assert_eq!(b["seed"], 1);
        // SGLang's `setdefault`: a user's choice stays, other options are kept beside it.
        let b = parse(
            bodies(
                json!({"stream_options": {"include_usage": false, "x": 1}}),
                Reader::Chat,
            )
            .round_body(&row, "m", &msgs)
            .unwrap(),
        );
        assert_eq!(b["stream_options"], json!({"include_usage": false, "x": 1}));
        let e = bodies(json!({}), Reader::Native)
            .round_body(&row, "m", &msgs)
            .unwrap_err();
        assert!(e.contains("chat backend"), "{e}");
        // A row is never sent whole.
        assert!(bodies(json!({}), Reader::Chat)
            .request_body(&row, "m", &mut Vec::new())
            .is_err());
    }

    #[test]
    fn a_chat_request_sends_its_messages_and_its_fields_over_the_runs() {
        let mut f = BodyFlags::default();
        f.extra.insert("top_p".into(), json!(0.5));
        f.extra.insert("seed".into(), json!(1));
        let extra = json!({"top_p": 0.9, "tools": [{"type": "function"}], "temperature": 0.3});
        let s = Sample {
            group: None,
            prompt: PromptSource::Chat {
                messages: std::sync::Arc::new(
                    json!([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]),
                ),
                extra: std::sync::Arc::new(extra.as_object().unwrap().clone()),
            },
            prompt_len: 5,
            output_len: 7,
        };
        let v = parse(body(Reader::Chat, "m", &s, None, &f).unwrap());
        assert_eq!(
            v,
            json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                "temperature": 0.3, "max_completion_tokens": 7, "stream": true, "ignore_eos": false,
                "top_p": 0.9, "seed": 1, "tools": [{"type": "function"}]})
        );
        // The completions backend puts the list in the prompt's place, as SGLang does.
        let v = parse(body(Reader::Completions, "m", &s, None, &f).unwrap());
        assert_eq!(v["prompt"][1]["content"], "u");
    }

    #[test]
    fn native_body_is_sglangs() {
        let f = BodyFlags {
            ignore_eos: true,
            ..BodyFlags::default()
        };
        let v = parse(body(Reader::Native, "m", &sample("hi", 9), None, &f).unwrap());
        assert_eq!(
            v,
            json!({"text": "hi", "sampling_params": {"temperature": 0.0, "max_new_tokens": 9,
                "ignore_eos": true}, "stream": true, "lora_path": null, "return_logprob": false,
                "return_routed_experts": false, "logprob_start_len": -1})
        );
        let f = BodyFlags {
            temperature: 0.7,
            top_p: Some(0.9),
            top_logprobs_num: 2,
            token_ids_logprob: Some(vec![5, 6]),
            ..f
        };
        let v = parse(body(Reader::Native, "m", &sample("hi", 9), None, &f).unwrap());
        assert_eq!(
            v["sampling_params"],
            json!({"temperature": 0.7, "max_new_tokens": 9, "ignore_eos": true, "top_p": 0.9})
        );
        assert_eq!(
            (
                v["top_logprobs_num"].clone(),
                v["token_ids_logprob"].clone()
            ),
            (json!(2), json!([5, 6]))
        );
        // The OpenAI readers keep SGLang's 0.0 whatever --temperature says.
        let v = parse(body(Reader::Completions, "m", &sample("hi", 9), None, &f).unwrap());
        assert_eq!(v["temperature"], 0.0);
        assert!(v.get("logprobs").is_none(), "only with --return-logprob");
    }

    /// With the processor's template, a native image row sends SGLang's prompt (the template
    /// around its images and text) beside its URLs; a chat row and a text row are unchanged.
    #[test]
    fn native_image_rows_send_the_processors_template() {
        use crate::workload::chat_template::{ChatTemplate, ProcessorFiles, TemplateFiles};
        use crate::workload::image::Image;
        let t = "{% for p in messages[0]['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}|";
        let files = ProcessorFiles {
            tokenizer: TemplateFiles {
                jinja: Some(t),
                ..Default::default()
            },
            ..Default::default()
        };
        let p = Arc::new(ChatTemplate::processor("/m", &files).unwrap());
        let bodies = |reader| SglangBodies {
            reader,
            lora_names: Vec::new(),
            flags: BodyFlags::default(),
            native_template: Some(p.clone()),
        };
        let img = Image {
            width: 1,
            height: 1,
            encoded_bytes: 3,
            url: "data:x".into(),
            recipe: None,
        };
        let s = Sample {
            prompt: PromptSource::Multimodal {
                text: Box::new(PromptSource::Text("look".into())),
                images: vec![img.clone(), img].into(),
            },
            ..sample("", 4)
        };
        let native = bodies(Reader::Native);
        let v = parse(native.request_body(&s, "m", &mut Vec::new()).unwrap());
        assert_eq!(v["text"], "<image><image>look|");
        assert_eq!(v["image_data"], json!(["data:x", "data:x"]));
        let v = parse(
            native
                .request_body(&sample("plain", 4), "m", &mut Vec::new())
                .unwrap(),
        );
        assert_eq!(v["text"], "plain");
        let v = parse(
            bodies(Reader::Chat)
                .request_body(&s, "m", &mut Vec::new())
                .unwrap(),
        );
        assert_eq!(
            v["messages"][0]["content"][2],
            json!({"type": "text", "text": "look"})
        );
    }

    #[test]
    fn image_rows_send_images_before_the_text_on_chat_and_as_image_data_elsewhere() {
        use crate::workload::image::Image;
        let img = |w: u32, url: &str| Image {
            width: w,
            height: 1,
            encoded_bytes: 3,
            url: url.into(),
            recipe: None,
        };
        let s = Sample {
            prompt: PromptSource::Multimodal {
                text: Box::new(PromptSource::Text("look".into())),
                images: vec![img(1, "data:image/png;base64,AA=="), img(2, "data:b")].into(),
            },
            ..sample("", 4)
        };
        let f = BodyFlags::default();
        let v = parse(body(Reader::Chat, "m", &s, None, &f).unwrap());
        assert_eq!(
            v["messages"],
            json!([{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                {"type": "image_url", "image_url": {"url": "data:b"}},
                {"type": "text", "text": "look"}]}])
        );
        assert!(v.get("image_data").is_none());
        let v = parse(body(Reader::Native, "m", &s, None, &f).unwrap());
        assert_eq!(v["text"], "look");
        assert_eq!(
            v["image_data"],
            json!(["data:image/png;base64,AA==", "data:b"])
        );
        // Token ids never go with images: the engine makes the text part text first.
        let ids = Sample {
            prompt: PromptSource::Multimodal {
                text: Box::new(PromptSource::Synthetic {
                    prefix: Vec::new().into(),
                    start: 0,
                    len: 2,
                    ids: crate::workload::sample::IdRange::DEFAULT,
                }),
                images: vec![img(1, "data:x")].into(),
            },
            ..sample("", 4)
        };
        assert!(body(Reader::Native, "m", &ids, None, &f).is_err());
    }

    #[test]
    fn openai_bodies_carry_no_stream_options_and_name_the_adapter_twice() {
        let mut f = BodyFlags::default();
        f.extra.insert("top_p".into(), json!(0.5));
        let v = parse(body(Reader::Completions, "m", &sample("hi", 4), Some("a1"), &f).unwrap());
        assert_eq!(
            v,
            json!({"model": "a1", "prompt": "hi", "temperature": 0.0, "best_of": 1,
                "max_tokens": 4, "stream": true, "ignore_eos": false, "top_p": 0.5,
                "lora_path": "a1"})
        );
        let v = parse(body(Reader::Chat, "m", &sample("hi", 4), None, &f).unwrap());
        assert_eq!(v["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(v["max_completion_tokens"], 4);
        assert!(v.get("stream_options").is_none());
    }
}
