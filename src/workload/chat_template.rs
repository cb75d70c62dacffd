//! Hugging Face chat templates, rendered on the client as `transformers`' `apply_chat_template`
//! renders them with `tokenize=False`, so a prompt that a reference tool wraps in the model's
//! template before sending is wrapped byte for byte the same here.
//!
//! Owns: finding the template among a tokenizer folder's files as `transformers` 5 does
//! (`chat_template.jinja` and `additional_chat_templates/*.jinja`, else `tokenizer_config.json`'s
//! `chat_template`, a string or a list of named templates; among named ones the `default`), the
//! special-token variables `transformers` gives a template (`bos_token`, `eos_token`, ..., the
//! model's own `*_token` keys; from `tokenizer_config.json`, `special_tokens_map.json`
//! overriding where the config has no `added_tokens_decoder`), the rule a front end gives for
//! wrapping dataset prompts ([`Wrap`]), a processor's template as `transformers` 5's
//! `ProcessorMixin` finds it ([`ChatTemplate::processor`]: `processor_config.json`'s
//! `chat_template`, else `chat_template.json`, else `chat_template.jinja` and the named ones;
//! never `tokenizer_config.json`'s) with a user message of image and text parts ([`Part`]), and
//! rendering messages through it with minijinja set up as `transformers` sets up
//! Jinja2: blocks trimmed and left-stripped, loop controls, Python's string and dict methods
//! (minijinja-contrib's `pycompat`), `raise_exception`, `strftime_now`, a `tojson` that writes
//! what Python's `json.dumps(ensure_ascii=False)` writes, and `True`/`False`/`None` printed as
//! Python prints them.
//!
//! Must never: run on the per-token path (templates are rendered with the dataset, before the
//! run, or once per request as its body is built: SGLang's native image prompts), or reach the
//! network (the caller resolves the files; `workload::tokenizer` does that for
//! `--tokenizer`). [`ChatTemplate::parse`] is pure; [`ChatTemplate::load_dir`] is the one reader.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// The file `transformers` saves a lone template to (it wins over `tokenizer_config.json`'s).
pub const TEMPLATE_FILE: &str = "chat_template.jinja";
/// The tokenizer's settings, `chat_template` and the special tokens among them.
pub const CONFIG_FILE: &str = "tokenizer_config.json";
/// The special tokens as an older `transformers` saved them apart; they override the config's.
pub const SPECIAL_TOKENS_FILE: &str = "special_tokens_map.json";

/// The folder of named templates beside `chat_template.jinja` (`<name>.jinja` each).
pub const TEMPLATE_DIR: &str = "additional_chat_templates";

/// The special-token keys every tokenizer may have; `transformers` passes those set to a
/// template, with the model's own `*_token` keys.
const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The name the template gets inside minijinja (also in its error messages).
const NAME: &str = "chat_template";

/// The instructions one rendering may run: a long conversation through a tool-calling template
/// takes some hundred thousand; a template that loops without end stops here with an error.
const FUEL: u64 = 50_000_000;

/// Why a template cannot be had or rendered. One line each, naming the file it came from.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{origin}: {message}")]
    Format { origin: String, message: String },
    #[error("{origin} has several chat templates ({names}) and none named \"default\"")]
    NoDefault { origin: String, names: String },
    #[error("the chat template of {origin} does not compile: {message}")]
    Compile { origin: String, message: String },
    #[error("the chat template of {origin} failed to render: {message}")]
    Render { origin: String, message: String },
    #[error("{0}")]
    Kwargs(String),
}

/// Extra template variables, a JSON object read in its own key order (as Python's `json.loads`
/// keeps it, so a template's `tojson` of one writes the keys as `transformers` does).
#[derive(Clone, Debug, PartialEq)]
pub struct Vars(Value);

/// One chat message, as the template sees it (`message['role']`, `message['content']`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn user(content: &str) -> Self {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }
}

/// How a front end asks for each dataset prompt to be wrapped in the model's chat template, as
/// one user message with the generation prompt (the rule; the template itself comes from the
/// local tokenizer when the dataset is loaded).
#[derive(Clone, Debug, PartialEq)]
pub struct Wrap {
    /// Remove every occurrence of the tokenizer's `bos_token` from the rendered text (SGLang's
    /// `--apply-chat-template` does, since its servers add the BOS themselves).
    pub strip_bos: bool,
    /// Extra template variables (vLLM's `--chat-template-kwargs`).
    pub kwargs: Option<Vars>,
    /// Without a local tokenizer: `true` stops the run, `false` sends the prompts as written
    /// with a note.
    pub required: bool,
    /// The front end's words on how to turn the rendering off or give a template, appended to
    /// the error or note.
    pub hint: String,
}

/// The raw texts of a tokenizer folder's template files, each `None` where the file is absent.
#[derive(Clone, Debug, Default)]
pub struct TemplateFiles<'a> {
    /// `chat_template.jinja`.
    pub jinja: Option<&'a str>,
    /// `additional_chat_templates/<name>.jinja`: each name and text.
    pub named: Vec<(&'a str, &'a str)>,
    /// `tokenizer_config.json`.
    pub config: Option<&'a str>,
    /// `special_tokens_map.json`.
    pub special_tokens_map: Option<&'a str>,
}

/// A compiled chat template with the tokenizer's special tokens.
pub struct ChatTemplate {
    /// The file the template was read from (for messages).
    origin: String,
    env: Environment<'static>,
    /// `bos_token` and the others the tokenizer has, and the model's own `*_token` keys.
    tokens: BTreeMap<String, Value>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template of the tokenizer folder `dir`, or `None` when it has none. Reads the files
    /// of [`TemplateFiles`] that exist; everything else is [`ChatTemplate::parse`].
    pub fn load_dir(dir: &Path) -> Result<Option<ChatTemplate>, ChatTemplateError> {
        let files = FolderFiles::read(dir)?;
        Self::parse(&dir.display().to_string(), &files.template_files())
    }

    /// The template among `files` of the folder `dir` (named in messages), compiled, or `None`
    /// when there is none. As `transformers` 5 chooses: template files win over the config's
    /// `chat_template`; `chat_template.jinja` alone is the template; with named ones beside it
    /// (or a config list of `{name, template}`), the one named `default` (`chat_template.jinja`
    /// is named so), and no `default` is an error.
    pub fn parse(
        dir: &str,
        files: &TemplateFiles<'_>,
    ) -> Result<Option<ChatTemplate>, ChatTemplateError> {
        let config_origin = format!("{dir}/{CONFIG_FILE}");
        let config = match files.config {
            Some(t) => Some(json_object(&config_origin, t)?),
            None => None,
        };
        let from_files = match (files.jinja, files.named.as_slice()) {
            (Some(j), _) => Some((format!("{dir}/{TEMPLATE_FILE}"), j.to_string())),
            (None, []) => None,
            (None, named) => match named.iter().find(|(n, _)| *n == "default") {
                Some((_, t)) => {
                    Some((format!("{dir}/{TEMPLATE_DIR}/default.jinja"), t.to_string()))
                }
                None => {
                    let mut names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
                    names.sort_unstable();
                    return Err(ChatTemplateError::NoDefault {
                        origin: format!("{dir}/{TEMPLATE_DIR}"),
                        names: names.join(", "),
                    });
                }
            },
        };
        let (origin, source) = match (from_files, &config) {
            (Some(f), _) => f,
            (None, Some(c)) => match template_in_config(&config_origin, c)? {
                Some(s) => (config_origin.clone(), s),
                None => return Ok(None),
            },
            (None, None) => return Ok(None),
        };
        let tokens = tokens(dir, config.as_ref(), files.special_tokens_map)?;
        let env = environment(source).map_err(|e| ChatTemplateError::Compile {
            origin: origin.clone(),
            message: one_line(&e),
        })?;
        Ok(Some(ChatTemplate {
            origin,
            env,
            tokens,
        }))
    }

    /// The file the template came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// `messages` rendered as `apply_chat_template(messages, add_generation_prompt=...,
    /// tokenize=False, **kwargs)` renders them: the variables are `messages`, `tools` and
    /// `documents` (both `None`), `add_generation_prompt`, the special tokens, then `kwargs`
    /// (which may override any of them but `messages`, as in `transformers`).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        kwargs: Option<&Vars>,
    ) -> Result<String, ChatTemplateError> {
        self.render_value(
            Value::from_serialize(messages),
            add_generation_prompt,
            kwargs,
        )
    }

    /// Messages of any shape (a JSON list, as a dataset row holds them) rendered with the
    /// generation prompt, `tools` given to the template where `Some` (`apply_chat_template(
    /// messages, tools=tools, add_generation_prompt=True, tokenize=False)`).
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatTemplateError> {
        let mut vars = BTreeMap::new();
        if let Some(t) = tools {
            vars.insert("tools".to_string(), Value::from_serialize(t));
        }
        let vars = Vars(Value::from(vars));
        self.render_value(Value::from_serialize(messages), true, Some(&vars))
    }

    /// [`ChatTemplate::render`] of messages of any shape (a list, as a request carries it).
    fn render_value(
        &self,
        messages: Value,
        add_generation_prompt: bool,
        kwargs: Option<&Vars>,
    ) -> Result<String, ChatTemplateError> {
        let mut ctx: BTreeMap<String, Value> = self.tokens.clone();
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        if let Some(Vars(vars)) = kwargs {
            for k in vars.try_iter().into_iter().flatten() {
                if let (Some(name), Ok(v)) = (k.as_str(), vars.get_item(&k)) {
                    ctx.insert(name.to_string(), v);
                }
            }
        }
        ctx.insert("messages".into(), messages);
        let render_err = |e: Error| ChatTemplateError::Render {
            origin: self.origin.clone(),
            message: one_line(&e),
        };
        self.env
            .get_template(NAME)
            .and_then(|t| t.render(ctx))
            .map_err(render_err)
    }
}

impl ChatTemplate {
    /// `prompt` as the one user message, rendered with the generation prompt by `wrap`'s rule.
    pub fn wrap_user(&self, wrap: &Wrap, prompt: &str) -> Result<String, ChatTemplateError> {
        let text = self.render(&[Message::user(prompt)], true, wrap.kwargs.as_ref())?;
        match (
            wrap.strip_bos,
            self.tokens.get("bos_token").and_then(Value::as_str),
        ) {
            (true, Some(bos)) if !bos.is_empty() => Ok(text.replace(bos, "")),
            _ => Ok(text),
        }
    }
}

impl ChatTemplate {
    /// SGLang 0.5.23's input length of a chat request (`row`, a JSON object's text, as its
    /// `openai` dataset counts it): the `messages` rendered with the generation prompt and
    /// counted without special tokens (`apply_chat_template(tokenize=True)`), plus, where the
    /// row has `tools`, their JSON as Python's `json.dumps` writes it, counted with them
    /// (`tokenizer.encode`). `count(text, add_special_tokens)` counts.
    pub fn chat_request_len(
        &self,
        row: &str,
        count: &mut dyn FnMut(&str, bool) -> Result<u64, String>,
    ) -> Result<u64, String> {
        let row: Value = serde_json::from_str(row).map_err(|e| format!("not valid JSON: {e}"))?;
        let field = |k: &str| {
            row.get_item(&Value::from(k))
                .ok()
                .filter(|v| !v.is_undefined())
        };
        let messages = field("messages").ok_or("no \"messages\"")?;
        let text = self
            .render_value(messages, true, None)
            .map_err(|e| e.to_string())?;
        let mut n = count(&text, false)?;
        if let Some(tools) = field("tools") {
            let style = JsonStyle {
                indent: None,
                item: ", ",
                key: ": ",
                sort_keys: false,
                ensure_ascii: true,
            };
            let mut json = String::new();
            style
                .write(&mut json, &tools, 0)
                .map_err(|e| one_line(&e))?;
            n += count(&json, true)?;
        }
        Ok(n)
    }
}

/// A processor's settings (`transformers`' `ProcessorMixin`): `processor_class`, and a
/// `chat_template` key that wins over every template file.
pub const PROCESSOR_FILE: &str = "processor_config.json";
/// A processor's template as older `transformers` saved it: `{"chat_template": "..."}`. It wins
/// over `chat_template.jinja`.
pub const PROCESSOR_TEMPLATE_FILE: &str = "chat_template.json";

/// The raw texts of a model folder's files a processor reads its chat template from.
#[derive(Clone, Debug, Default)]
pub struct ProcessorFiles<'a> {
    /// `processor_config.json`.
    pub processor: Option<&'a str>,
    /// `chat_template.json`.
    pub legacy: Option<&'a str>,
    /// `chat_template.jinja`, `additional_chat_templates/*.jinja` and the tokenizer's files
    /// (their special tokens; `tokenizer_config.json`'s `chat_template` is the tokenizer's
    /// alone: a processor never reads it).
    pub tokenizer: TemplateFiles<'a>,
}

/// A model folder's processor as `processor.apply_chat_template` sees it.
#[derive(Debug)]
pub struct Processor {
    /// `processor_config.json`'s `processor_class` (the class `AutoProcessor` makes).
    pub class: Option<String>,
    /// The template, or the reason `apply_chat_template` raises: the processor has none,
    /// several without a `default`, or one that does not compile (Jinja2 compiles it then).
    pub template: Result<ChatTemplate, String>,
}

/// One part of a message's content, as a list content holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// `{"type": "image", "image": {"url": url}}`.
    Image(&'a str),
    /// `{"type": "text", "text": text}`.
    Text(&'a str),
}

impl ChatTemplate {
    /// One user message whose content is `parts` (a list, as `transformers` passes a list
    /// content: each part a dict, keys in the order written above), rendered with the
    /// generation prompt.
    pub fn render_user_parts(&self, parts: &[Part<'_>]) -> Result<String, ChatTemplateError> {
        let map = |pairs: Vec<(&str, Value)>| Value::from_iter(pairs);
        let content: Vec<Value> = parts
            .iter()
            .map(|p| match *p {
                Part::Image(url) => map(vec![
                    ("type", Value::from("image")),
                    ("image", map(vec![("url", Value::from(url))])),
                ]),
                Part::Text(t) => map(vec![
                    ("type", Value::from("text")),
                    ("text", Value::from(t)),
                ]),
            })
            .collect();
        let message = map(vec![
            ("role", Value::from("user")),
            ("content", Value::from(content)),
        ]);
        self.render_value(Value::from(vec![message]), true, None)
    }

    /// The processor of the model folder `dir`: reads the files of [`ProcessorFiles`] that
    /// exist; everything else is [`ChatTemplate::processor`].
    pub fn load_processor_dir(dir: &Path) -> Result<Processor, ChatTemplateError> {
        let processor = read_optional(&dir.join(PROCESSOR_FILE))?;
        let legacy = read_optional(&dir.join(PROCESSOR_TEMPLATE_FILE))?;
        let tokenizer = FolderFiles::read(dir)?;
        let files = ProcessorFiles {
            processor: processor.as_deref(),
            legacy: legacy.as_deref(),
            tokenizer: tokenizer.template_files(),
        };
        Self::processor(&dir.display().to_string(), &files)
    }

    /// The processor among `files` of the folder `dir`, as `transformers` 5
    /// (`ProcessorMixin.from_pretrained`, then `apply_chat_template`) finds its template: the
    /// legacy `chat_template.json`'s as the `default` (beside named templates: an error, as
    /// loading fails there), else `chat_template.jinja` as the `default` with the named ones;
    /// `processor_config.json`'s own `chat_template` over all of them. One template, or the
    /// `default` of several, is it; several without a `default`, or none, is the reason
    /// `apply_chat_template` raises. Errors: a file that is not what it should be (loading the
    /// processor fails on it).
    pub fn processor(
        dir: &str,
        files: &ProcessorFiles<'_>,
    ) -> Result<Processor, ChatTemplateError> {
        let processor_origin = format!("{dir}/{PROCESSOR_FILE}");
        let settings = match files.processor {
            Some(t) => Some(json_object(&processor_origin, t)?),
            None => None,
        };
        let class = settings
            .as_ref()
            .and_then(|s| s.get("processor_class"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let t = &files.tokenizer;
        // Each candidate: (name, origin, source), in the order transformers lists them.
        let mut found: Vec<(String, String, String)> = Vec::new();
        if let Some(text) = files.legacy {
            let origin = format!("{dir}/{PROCESSOR_TEMPLATE_FILE}");
            let fmt = |m: &str| ChatTemplateError::Format {
                origin: origin.clone(),
                message: m.to_string(),
            };
            let source = match json_object(&origin, text)?.get("chat_template") {
                Some(serde_json::Value::String(s)) => s.clone(),
                _ => return Err(fmt("\"chat_template\" must be the template's text")),
            };
            if !t.named.is_empty() {
                return Err(fmt(&format!(
                    "it cannot stand beside templates in {TEMPLATE_DIR}/ (transformers refuses the \
                     pair: replace it with chat_template.jinja)"
                )));
            }
            found.push(("default".into(), origin, source));
        } else {
            for (name, text) in &t.named {
                let origin = format!("{dir}/{TEMPLATE_DIR}/{name}.jinja");
                found.push((name.to_string(), origin, text.to_string()));
            }
            if let Some(j) = t.jinja {
                found.retain(|(n, _, _)| n != "default");
                found.push(("default".into(), format!("{dir}/{TEMPLATE_FILE}"), j.into()));
            }
        }
        match settings.as_ref().and_then(|s| s.get("chat_template")) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) => {
                found = vec![("default".into(), processor_origin.clone(), s.clone())];
            }
            Some(serde_json::Value::Object(m)) => {
                found = Vec::new();
                for (name, v) in m {
                    let Some(s) = v.as_str() else {
                        return Err(ChatTemplateError::Format {
                            origin: processor_origin,
                            message: format!("chat_template.{name} is not a template's text"),
                        });
                    };
                    found.push((name.clone(), processor_origin.clone(), s.to_string()));
                }
            }
            Some(_) => {
                return Err(ChatTemplateError::Format {
                    origin: processor_origin,
                    message: "chat_template must be a template's text or named templates".into(),
                })
            }
        }
        let chosen = match found.len() {
            0 => Err(format!(
                "{dir} has no processor chat template (no {PROCESSOR_TEMPLATE_FILE}, \
                 {TEMPLATE_FILE}, or chat_template in {PROCESSOR_FILE})"
            )),
            _ => match found.iter().position(|(n, _, _)| n == "default") {
                Some(i) => Ok(found.swap_remove(i)),
                None => {
                    let names: Vec<&str> = found.iter().map(|(n, _, _)| n.as_str()).collect();
                    Err(format!(
                        "the processor of {dir} has several chat templates ({}) and none named \
                         \"default\"",
                        names.join(", ")
                    ))
                }
            },
        };
        let template = match chosen {
            Err(why) => Err(why),
            Ok((_, origin, source)) => {
                let config_origin = format!("{dir}/{CONFIG_FILE}");
                let config = match t.config {
                    Some(c) => Some(json_object(&config_origin, c)?),
                    None => None,
                };
                let tokens = tokens(dir, config.as_ref(), t.special_tokens_map)?;
                match environment(source) {
                    Ok(env) => Ok(ChatTemplate {
                        origin,
                        env,
                        tokens,
                    }),
                    Err(e) => Err(format!(
                        "the chat template of {origin} does not compile: {}",
                        one_line(&e)
                    )),
                }
            }
        };
        Ok(Processor { class, template })
    }
}

/// `--chat-template-kwargs`: a JSON object of extra template variables.
pub fn parse_kwargs(flag: &str, text: &str) -> Result<Vars, ChatTemplateError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.kind() == ValueKind::Map => Ok(Vars(v)),
        Ok(_) => Err(ChatTemplateError::Kwargs(format!(
            "{flag} must be a JSON object, got {text}"
        ))),
        Err(e) => Err(ChatTemplateError::Kwargs(format!(
            "{flag} is not valid JSON: {e}"
        ))),
    }
}

/// The special tokens a template sees: the config's, then (for a config without
/// `added_tokens_decoder`, as `transformers` reads the old file only then) the special-tokens
/// map's over them.
fn tokens(
    dir: &str,
    config: Option<&serde_json::Map<String, serde_json::Value>>,
    special_tokens_map: Option<&str>,
) -> Result<BTreeMap<String, Value>, ChatTemplateError> {
    let mut tokens = BTreeMap::new();
    if let Some(c) = config {
        special_tokens(c, true, &mut tokens);
    }
    let legacy = config.is_none_or(|c| !c.contains_key("added_tokens_decoder"));
    if let (Some(t), true) = (special_tokens_map, legacy) {
        let origin = format!("{dir}/{SPECIAL_TOKENS_FILE}");
        special_tokens(&json_object(&origin, t)?, false, &mut tokens);
    }
    Ok(tokens)
}

fn json_object(
    origin: &str,
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, ChatTemplateError> {
    let fmt = |message: String| ChatTemplateError::Format {
        origin: origin.to_string(),
        message,
    };
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(fmt("expected a JSON object".into())),
        Err(e) => Err(fmt(format!("not valid JSON: {e}"))),
    }
}

/// `chat_template` of a tokenizer config: a string, or a list of `{"name", "template"}` of which
/// the one named `default` is taken (as `transformers` does without tools or a name); absent or
/// null: none.
fn template_in_config(
    origin: &str,
    config: &serde_json::Map<String, serde_json::Value>,
) -> Result<Option<String>, ChatTemplateError> {
    use serde_json::Value as J;
    let fmt = |message: &str| ChatTemplateError::Format {
        origin: origin.to_string(),
        message: message.to_string(),
    };
    match config.get("chat_template") {
        None | Some(J::Null) => Ok(None),
        Some(J::String(s)) => Ok(Some(s.clone())),
        Some(J::Array(list)) => {
            let mut names = Vec::new();
            for t in list {
                let (Some(name), Some(template)) = (
                    t.get("name").and_then(J::as_str),
                    t.get("template").and_then(J::as_str),
                ) else {
                    return Err(fmt(
                        "chat_template: each entry of the list needs a string \"name\" and \"template\"",
                    ));
                };
                if name == "default" {
                    return Ok(Some(template.to_string()));
                }
                names.push(name);
            }
            Err(ChatTemplateError::NoDefault {
                origin: origin.to_string(),
                names: names.join(", "),
            })
        }
        Some(_) => Err(fmt(
            "chat_template must be a string or a list of named templates",
        )),
    }
}

/// The special tokens of a config or special-tokens map into `out` (later files override
/// earlier ones key by key): a token is a string or an `AddedToken` object whose `content` is the
/// string. The seven common keys always; with `model_keys` (the config) also the model's own
/// `*_token` keys and the `extra_special_tokens` object's, as `transformers` 5 adds them to the
/// named tokens a template sees.
fn special_tokens(
    map: &serde_json::Map<String, serde_json::Value>,
    model_keys: bool,
    out: &mut BTreeMap<String, Value>,
) {
    use serde_json::Value as J;
    let text = |v: &J| match v {
        J::String(s) => Some(s.clone()),
        J::Object(o) => o.get("content").and_then(J::as_str).map(str::to_string),
        _ => None,
    };
    for (key, v) in map {
        let named =
            SPECIAL_TOKENS.contains(&key.as_str()) || (model_keys && key.ends_with("_token"));
        if let (true, Some(t)) = (named, text(v)) {
            out.insert(key.clone(), Value::from(t));
        }
    }
    if let Some(J::Object(extra)) = map.get("extra_special_tokens") {
        for (key, v) in extra {
            if let Some(t) = text(v) {
                out.insert(key.clone(), Value::from(t));
            }
        }
    }
}

/// minijinja set up as `transformers` sets up Jinja2 for chat templates, holding `source`.
/// A file's text, or `None` when it does not exist; any other failure to read it is an error
/// naming it.
fn read_optional(path: &Path) -> Result<Option<String>, ChatTemplateError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ChatTemplateError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// The template files a tokenizer folder may hold (those of [`TemplateFiles`]), as read: the
/// named templates of `additional_chat_templates/` in name order.
struct FolderFiles {
    jinja: Option<String>,
    config: Option<String>,
    special: Option<String>,
    named: Vec<(String, String)>,
}

impl FolderFiles {
    fn read(dir: &Path) -> Result<FolderFiles, ChatTemplateError> {
        let mut named = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir.join(TEMPLATE_DIR)) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(stem) = name.strip_suffix(".jinja") {
                    if let Some(text) = read_optional(&e.path())? {
                        named.push((stem.to_string(), text));
                    }
                }
            }
        }
        named.sort();
        Ok(FolderFiles {
            jinja: read_optional(&dir.join(TEMPLATE_FILE))?,
            config: read_optional(&dir.join(CONFIG_FILE))?,
            special: read_optional(&dir.join(SPECIAL_TOKENS_FILE))?,
            named,
        })
    }

    fn template_files(&self) -> TemplateFiles<'_> {
        TemplateFiles {
            jinja: self.jinja.as_deref(),
            named: self
                .named
                .iter()
                .map(|(n, t)| (n.as_str(), t.as_str()))
                .collect(),
            config: self.config.as_deref(),
            special_tokens_map: self.special.as_deref(),
        }
    }
}

fn environment(source: String) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(NAME, generation_as_if(&source))?;
    Ok(env)
}

/// `transformers`' `{% generation %}...{% endgeneration %}` block (it marks the assistant's
/// tokens for training and renders its body unchanged) as `{% if true %}...{% endif %}`, which
/// minijinja knows, keeping the tags' whitespace markers so the output is the same.
fn generation_as_if(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        // The tag closes at the first `%}` after its `{%` (in `{%}` the `%` opens it and cannot
        // close it too: found by the fuzzer, a slice [2..1] that panicked).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        let word = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match word {
            Some(w) => {
                out.push_str("{%");
                out.push_str(open);
                out.push(' ');
                out.push_str(w);
                out.push(' ');
                out.push_str(close);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Prints a value as Jinja2 on Python does where minijinja differs: booleans as `True`/`False`,
/// none as `None`. No auto-escaping (a template is not HTML).
fn python_formatter(
    out: &mut minijinja::Output<'_>,
    state: &State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Bool if value.is_true() => out.write_str("True").map_err(Error::from),
        ValueKind::Bool => out.write_str("False").map_err(Error::from),
        ValueKind::None => out.write_str("None").map_err(Error::from),
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// `raise_exception(message)`: the template refuses its input, as `transformers`' helper does.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time in Python's `strftime` format (the directives
/// chat templates use: `%d %m %Y %y %b %B %a %A %H %M %S %j %%`).
fn strftime_now(format: String) -> Result<Value, Error> {
    strftime(
        &crate::sys::UtcDateTime::from_unix(crate::sys::unix_now()),
        &format,
    )
    .map(Value::from)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Python's `strftime` for the directives listed at [`strftime_now`]; any other is an error.
fn strftime(t: &crate::sys::UtcDateTime, format: &str) -> Result<String, Error> {
    let month = MONTHS[(t.month as usize).clamp(1, 12) - 1];
    let days_before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let leap = (t.year % 4 == 0 && t.year % 100 != 0) || t.year % 400 == 0;
    let yday =
        days_before[(t.month as usize).clamp(1, 12) - 1] + t.day + u32::from(leap && t.month > 2);
    // Days since 1970-01-01 (a Thursday) by the civil calendar, for the weekday.
    let weekday = {
        let (y, m) = if t.month <= 2 {
            (t.year - 1, t.month + 9)
        } else {
            (t.year, t.month - 3)
        };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * i64::from(m) + 2) / 5 + i64::from(t.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        DAYS[(days + 3).rem_euclid(7) as usize]
    };
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('d') => write!(out, "{:02}", t.day),
            Some('m') => write!(out, "{:02}", t.month),
            Some('Y') => write!(out, "{}", t.year),
            Some('y') => write!(out, "{:02}", t.year.rem_euclid(100)),
            Some('b') => write!(out, "{}", &month[..3]),
            Some('B') => write!(out, "{month}"),
            Some('a') => write!(out, "{}", &weekday[..3]),
            Some('A') => write!(out, "{weekday}"),
            Some('H') => write!(out, "{:02}", t.hour),
            Some('M') => write!(out, "{:02}", t.minute),
            Some('S') => write!(out, "{:02}", t.second),
            Some('j') => write!(out, "{yday:03}"),
            Some('%') => write!(out, "%"),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: the directive %{} is not supported",
                        other.map(String::from).unwrap_or_default()
                    ),
                ))
            }
        };
    }
    Ok(out)
}

/// `tojson` as `transformers` defines it: `json.dumps(value, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`, without HTML escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v).unwrap_or(0))),
        },
    };
    let (item, key) = match separators {
        Some(s) if !s.is_none() => (
            s.get_item(&Value::from(0))?.to_string(),
            s.get_item(&Value::from(1))?.to_string(),
        ),
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        indent: indent.as_deref(),
        item: &item,
        key: &key,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, &value, 0)?;
    Ok(Value::from_safe_string(out))
}

/// How Python's `json.dumps` lays a value out.
struct JsonStyle<'a> {
    indent: Option<&'a str>,
    item: &'a str,
    key: &'a str,
    sort_keys: bool,
    /// Non-ASCII characters as `\uXXXX` escapes (Python's default; `transformers`' `tojson`
    /// turns it off).
    ensure_ascii: bool,
}

impl JsonStyle<'_> {
    /// Writes `v`, maps in their own order (a message's keys as Python's dict keeps them).
    fn write(&self, out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&python_number(v)),
            ValueKind::String => {
                python_string(out, v.as_str().unwrap_or_default(), self.ensure_ascii)
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    self.separate(out, i, depth + 1);
                    python_string(out, &k.to_string(), self.ensure_ascii);
                    out.push_str(self.key);
                    self.write(out, &v.get_item(k)?, depth + 1)?;
                }
                self.close(out, depth);
                out.push('}');
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    self.separate(out, i, depth + 1);
                    self.write(out, x, depth + 1)?;
                }
                self.close(out, depth);
                out.push(']');
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a {} is not JSON serializable", v.kind()),
                ))
            }
        }
        Ok(())
    }

    fn separate(&self, out: &mut String, i: usize, depth: usize) {
        if i > 0 {
            out.push_str(self.item);
        }
        if let Some(ind) = self.indent {
            out.push('\n');
            out.push_str(&ind.repeat(depth));
        }
    }

    fn close(&self, out: &mut String, depth: usize) {
        if let Some(ind) = self.indent {
            out.push('\n');
            out.push_str(&ind.repeat(depth));
        }
    }
}

/// A number as Python writes it: integers as they are, floats by `repr` (`1.0`, `2.5`).
fn python_number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) if f.is_finite() && f == f.trunc() && f.abs() < 1e16 => format!("{f:.1}"),
        Ok(f) if f.is_nan() => "NaN".into(),
        Ok(f) if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        Ok(f) => format!("{f:?}"),
        Err(_) => v.to_string(),
    }
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`: every character past ASCII
/// as `\uXXXX`, a surrogate pair past the first plane).
fn python_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A minijinja error on one line: its message, the line it points at, and its cause.
fn one_line(e: &Error) -> String {
    let mut s = e.to_string();
    if let Some(line) = e.line() {
        if !s.contains("line ") {
            let _ = write!(s, " (line {line})");
        }
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let _ = write!(s, ": {c}");
        cause = c.source();
    }
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Qwen2.5-shaped template: dash-trimmed blocks, `loop.first`, a Python `.strip()`, a
    /// default system message.
    const QWEN: &str = "{%- for message in messages %}\n    {%- if loop.first and messages[0]['role'] != 'system' %}\n        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n    {{- '<|im_start|>' + message.role + '\\n' + message.content.strip() + '<|im_end|>' + '\\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";

    /// A Llama-3-shaped template: `bos_token`, a `trim` filter, `raise_exception` on a bad role.
    const LLAMA: &str = "{{- bos_token }}\n{%- for message in messages %}\n    {%- if message['role'] not in ['system', 'user', 'assistant'] %}\n        {{- raise_exception('Unknown role: ' + message['role']) }}\n    {%- endif %}\n    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";

    /// The tiny test model's template (scripts/tiny_hf_llama.py): no dashes, so Jinja2's
    /// `trim_blocks` and `lstrip_blocks` decide the newlines.
    const TINY: &str = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}\n";

    fn config(template: &str) -> String {
        serde_json::json!({
            "bos_token": "<|begin_of_text|>",
            "eos_token": {"__type": "AddedToken", "content": "<|eot_id|>", "special": true},
            "unk_token": null,
            "image_token": "<|image|>",
            "chat_template": template,
        })
        .to_string()
    }

    fn config_of(template: &str) -> String {
        config(template)
    }

    fn from_config(template: &str) -> ChatTemplate {
        let c = config(template);
        let files = TemplateFiles {
            config: Some(&c),
            ..Default::default()
        };
        ChatTemplate::parse("/m", &files).unwrap().unwrap()
    }

    fn user(t: &ChatTemplate, text: &str) -> String {
        t.render(&[Message::user(text)], true, None).unwrap()
    }

    fn processor(files: &ProcessorFiles<'_>) -> Processor {
        ChatTemplate::processor("/m", files).unwrap()
    }

    fn origin(p: &Processor) -> &str {
        p.template.as_ref().map(ChatTemplate::origin).unwrap()
    }

    /// transformers 5.19's `ProcessorMixin.from_pretrained` and `apply_chat_template`, worked
    /// by hand: the legacy JSON over the `.jinja`, the processor config's key over both, a
    /// named `default`, the tokenizer config's template never.
    #[test]
    fn a_processors_template_is_found_as_transformers_finds_it() {
        let legacy = r#"{"chat_template": "L"}"#;
        let config = r#"{"processor_class": "LlavaProcessor", "chat_template": "C"}"#;
        let tok = config_of("T");
        let base = TemplateFiles {
            jinja: Some("J"),
            config: Some(&tok),
            ..Default::default()
        };
        let p = processor(&ProcessorFiles {
            tokenizer: base.clone(),
            ..Default::default()
        });
        assert_eq!(
            (origin(&p), p.class.as_deref()),
            ("/m/chat_template.jinja", None)
        );
        let p = processor(&ProcessorFiles {
            legacy: Some(legacy),
            tokenizer: base.clone(),
            ..Default::default()
        });
        assert_eq!(origin(&p), "/m/chat_template.json");
        let p = processor(&ProcessorFiles {
            processor: Some(config),
            legacy: Some(legacy),
            tokenizer: base.clone(),
        });
        assert_eq!(origin(&p), "/m/processor_config.json");
        assert_eq!(p.class.as_deref(), Some("LlavaProcessor"));
        let rendered = p.template.unwrap().render_user_parts(&[]).unwrap();
        assert_eq!(rendered, "C");
        // Named templates: the `default` (the .jinja is it where present), else none usable.
        let named = TemplateFiles {
            named: vec![("default", "D"), ("tool_use", "U")],
            ..Default::default()
        };
        let p = processor(&ProcessorFiles {
            tokenizer: named,
            ..Default::default()
        });
        assert_eq!(origin(&p), "/m/additional_chat_templates/default.jinja");
        let p = processor(&ProcessorFiles {
            tokenizer: TemplateFiles {
                named: vec![("tool_use", "U")],
                ..Default::default()
            },
            ..Default::default()
        });
        let e = p.template.unwrap_err();
        assert!(e.contains("(tool_use) and none named \"default\""), "{e}");
        // The tokenizer's own template is not the processor's.
        let p = processor(&ProcessorFiles {
            tokenizer: TemplateFiles {
                config: Some(&tok),
                ..Default::default()
            },
            ..Default::default()
        });
        let e = p.template.unwrap_err();
        assert!(e.starts_with("/m has no processor chat template"), "{e}");
        // A template that does not compile is apply_chat_template's error, not the load's.
        let p = processor(&ProcessorFiles {
            tokenizer: TemplateFiles {
                jinja: Some("{% if %}"),
                ..Default::default()
            },
            ..Default::default()
        });
        assert!(p.template.unwrap_err().contains("does not compile"));
        // Loading fails: the legacy file beside named ones, or files that are not JSON objects.
        for files in [
            ProcessorFiles {
                legacy: Some(legacy),
                tokenizer: TemplateFiles {
                    named: vec![("a", "A")],
                    ..Default::default()
                },
                ..Default::default()
            },
            ProcessorFiles {
                legacy: Some(r#"{"template": "x"}"#),
                ..Default::default()
            },
            ProcessorFiles {
                processor: Some("[1]"),
                ..Default::default()
            },
            ProcessorFiles {
                processor: Some(r#"{"chat_template": 3}"#),
                ..Default::default()
            },
        ] {
            assert!(ChatTemplate::processor("/m", &files).is_err(), "{files:?}");
        }
    }

    /// A list content reaches the template as `transformers` passes it: each part a dict in
    /// Python's key order (its `tojson` writes them so), the special tokens beside it.
    #[test]
    fn a_list_content_is_the_parts_in_order() {
        let tok = config_of("");
        let t = "{{ bos_token }}{{ messages[0]['content'] | tojson }}{% for p in messages[0]['content'] %}{% if p.type == 'image' %}<IMG:{{ p.image.url }}>{% else %}{{ p.text }}{% endif %}{% endfor %}";
        let p = processor(&ProcessorFiles {
            tokenizer: TemplateFiles {
                jinja: Some(t),
                config: Some(&tok),
                ..Default::default()
            },
            ..Default::default()
        });
        let out = p
            .template
            .unwrap()
            .render_user_parts(&[Part::Image("u1"), Part::Image("u2"), Part::Text("hi \"x\"")])
            .unwrap();
        assert_eq!(
            out,
            "<|begin_of_text|>[{\"type\": \"image\", \"image\": {\"url\": \"u1\"}}, \
             {\"type\": \"image\", \"image\": {\"url\": \"u2\"}}, \
             {\"type\": \"text\", \"text\": \"hi \\\"x\\\"\"}]<IMG:u1><IMG:u2>hi \"x\""
        );
    }

    #[test]
    fn a_qwen_template_renders_as_worked_by_hand() {
        let t = from_config(QWEN);
        assert_eq!(
            user(&t, "  Hi there \n"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
        let sys = [
            Message {
                role: "system".into(),
                content: "Be brief.".into(),
            },
            Message::user("Hi"),
        ];
        assert_eq!(
            t.render(&sys, false, None).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn a_llama_template_gets_the_special_tokens_and_raises() {
        let t = from_config(LLAMA);
        assert_eq!(t.origin(), "/m/tokenizer_config.json");
        assert_eq!(
            user(&t, " What is 2+2? "),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\
             What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let bad = [Message {
            role: "robot".into(),
            content: "x".into(),
        }];
        let e = t.render(&bad, true, None).unwrap_err().to_string();
        assert!(
            e.starts_with("the chat template of /m/tokenizer_config.json failed to render"),
            "{e}"
        );
        assert!(e.contains("Unknown role: robot"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn trim_and_lstrip_blocks_are_on_as_in_transformers() {
        let t = from_config(TINY);
        assert_eq!(
            user(&t, "Hello"),
            "<|begin_of_text|><|user|>\nHello<|eot_id|>\n<|assistant|>\n"
        );
        let t = from_config("  {% if true %}\nA\n  {% endif %}\nB");
        assert_eq!(user(&t, ""), "A\nB");
    }

    #[test]
    fn variables_are_the_ones_transformers_passes() {
        let t = from_config(
            "{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ image_token }}|{{ unk_token is defined }}|{{ pad_token is defined }}|{{ enable_thinking }}",
        );
        assert_eq!(user(&t, ""), "None|None|True|<|image|>|False|False|");
        let kw = parse_kwargs(
            "--chat-template-kwargs",
            r#"{"enable_thinking": false, "bos_token": "B"}"#,
        )
        .unwrap();
        let t2 = from_config("{{ bos_token }}{{ enable_thinking }}");
        assert_eq!(
            t2.render(&[Message::user("")], true, Some(&kw)).unwrap(),
            "BFalse"
        );
        assert!(parse_kwargs("--f", "[1]")
            .unwrap_err()
            .to_string()
            .contains("JSON object"));
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let t = from_config(
            "{{ messages[0] | tojson }}|{{ {'a': [1, 2.5, none, true], 'b': '<é\"\\n>'} | tojson }}|{{ [1, {'k': 'v'}] | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
        );
        assert_eq!(
            user(&t, "x"),
            "{\"role\": \"user\", \"content\": \"x\"}|{\"a\": [1, 2.5, null, true], \"b\": \"<é\\\"\\n>\"}|[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]|{\"a\":2,\"b\":1}"
        );
    }

    #[test]
    fn generation_blocks_render_their_body() {
        let t = from_config("{% for m in messages %}{%- generation -%}\n [{{ m.content }}] \n{%- endgeneration %}{% endfor %}");
        assert_eq!(user(&t, "x"), "[x]");
        assert_eq!(
            generation_as_if("a{%+ generation %}b{% endgeneration -%}c{% if x %}"),
            "a{%+ if true %}b{% endif -%}c{% if x %}"
        );
        // `{%}` opens a tag that the next `%}` closes, as Jinja's lexer reads it (before: a
        // panic slicing [2..1]); such text is passed on for minijinja to judge.
        assert_eq!(
            generation_as_if("x{%}}y{% generation %}z{% generation %}"),
            "x{%}}y{% generation %}z{% if true %}"
        );
        assert_eq!(generation_as_if("x{%}"), "x{%}");
        assert_eq!(generation_as_if("{%"), "{%");
    }

    #[test]
    fn template_files_win_over_the_config_and_named_ones_need_a_default() {
        let c = config("from config");
        let files = TemplateFiles {
            jinja: Some("from jinja"),
            config: Some(&c),
            ..Default::default()
        };
        let t = ChatTemplate::parse("/m", &files).unwrap().unwrap();
        assert_eq!(
            (user(&t, ""), t.origin()),
            ("from jinja".into(), "/m/chat_template.jinja")
        );
        let files = TemplateFiles {
            named: vec![("tool_use", "tools"), ("rag", "rag")],
            config: Some(&c),
            ..Default::default()
        };
        let e = ChatTemplate::parse("/m", &files).unwrap_err().to_string();
        assert_eq!(
            e,
            "/m/additional_chat_templates has several chat templates (rag, tool_use) and none named \"default\""
        );
        let list = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})
        .to_string();
        let files = TemplateFiles {
            config: Some(&list),
            ..Default::default()
        };
        assert_eq!(
            user(&ChatTemplate::parse("/m", &files).unwrap().unwrap(), ""),
            "D"
        );
        let none = r#"{"bos_token": "<s>"}"#;
        let files = TemplateFiles {
            config: Some(none),
            ..Default::default()
        };
        assert!(ChatTemplate::parse("/m", &files).unwrap().is_none());
        assert!(ChatTemplate::parse("/m", &TemplateFiles::default())
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_old_special_tokens_file_overrides_only_without_added_tokens_decoder() {
        let map = r#"{"bos_token": {"content": "<B>"}, "pad_token": "<P>"}"#;
        let cfg = r#"{"bos_token": "<s>", "chat_template": "{{ bos_token }}{{ pad_token }}"}"#;
        let files = TemplateFiles {
            config: Some(cfg),
            special_tokens_map: Some(map),
            ..Default::default()
        };
        assert_eq!(
            user(&ChatTemplate::parse("/m", &files).unwrap().unwrap(), ""),
            "<B><P>"
        );
        let cfg = r#"{"bos_token": "<s>", "added_tokens_decoder": {}, "chat_template": "{{ bos_token }}{{ pad_token }}"}"#;
        let files = TemplateFiles {
            config: Some(cfg),
            special_tokens_map: Some(map),
            ..Default::default()
        };
        assert_eq!(
            user(&ChatTemplate::parse("/m", &files).unwrap().unwrap(), ""),
            "<s>"
        );
    }

    #[test]
    fn broken_templates_and_files_are_named_in_one_line() {
        let c = config("{% for m in messages %}");
        let files = TemplateFiles {
            config: Some(&c),
            ..Default::default()
        };
        let e = ChatTemplate::parse("/m", &files).unwrap_err().to_string();
        assert!(
            e.starts_with("the chat template of /m/tokenizer_config.json does not compile"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let files = TemplateFiles {
            config: Some("{"),
            ..Default::default()
        };
        let e = ChatTemplate::parse("/m", &files).unwrap_err().to_string();
        assert!(
            e.starts_with("/m/tokenizer_config.json: not valid JSON"),
            "{e}"
        );
        let files = TemplateFiles {
            config: Some(r#"{"chat_template": 3}"#),
            ..Default::default()
        };
        assert!(ChatTemplate::parse("/m", &files).is_err());
        // An unknown method is an error, not an empty string.
        let t = from_config("{{ messages[0].content.casefold() }}");
        assert!(t.render(&[Message::user("x")], true, None).is_err());
    }

    #[test]
    fn a_chat_requests_length_is_its_rendering_plus_its_tools_json() {
        let t = from_config(TINY);
        // Words as tokens; a special-token count adds one.
        let mut count = |s: &str, special: bool| -> Result<u64, String> {
            Ok(s.split_whitespace().count() as u64 + u64::from(special))
        };
        // "<|begin_of_text|><|system|>\nBe brief.<|eot_id|>\n<|user|>\nHi there<|eot_id|>\n<|assistant|>\n":
        // 7 words, none special.
        let row = r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}], "max_tokens": 3}"#;
        assert_eq!(t.chat_request_len(row, &mut count), Ok(7));
        // "<|begin_of_text|><|user|>\nHi<|eot_id|>\n<|assistant|>\n" is 3 words; the tools as
        // json.dumps writes them, non-ASCII escaped, `[{"name": "f", "d": "\u00e9t\u00e9"}]`,
        // 4 words + 1 special.
        let row = r#"{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "f", "d": "été"}]}"#;
        let mut seen = Vec::new();
        let mut log = |s: &str, special: bool| -> Result<u64, String> {
            seen.push((s.to_string(), special));
            count(s, special)
        };
        assert_eq!(t.chat_request_len(row, &mut log), Ok(3 + 5));
        assert_eq!(
            seen[1],
            (r#"[{"name": "f", "d": "\u00e9t\u00e9"}]"#.to_string(), true)
        );
        assert!(
            !seen[0].1,
            "the rendering is counted without special tokens"
        );
        assert!(t
            .chat_request_len("{}", &mut count)
            .unwrap_err()
            .contains("messages"));
    }

    #[test]
    fn strftime_knows_the_directives_templates_use() {
        let t = crate::sys::UtcDateTime::from_unix(1_721_952_000); // 2024-07-26 00:00:00
        assert_eq!(strftime(&t, "%d %b %Y").unwrap(), "26 Jul 2024");
        assert_eq!(
            strftime(&t, "%A %a %B %m/%d/%y %H:%M:%S %j %%").unwrap(),
            "Friday Fri July 07/26/24 00:00:00 208 %"
        );
        let t = crate::sys::UtcDateTime::from_unix(0);
        assert_eq!(strftime(&t, "%A %j").unwrap(), "Thursday 001");
        assert!(strftime(&t, "%Z").is_err());
        let tmpl = from_config("{{ strftime_now('%Y') | length }}");
        assert_eq!(user(&tmpl, ""), "4");
    }

    #[test]
    fn load_dir_reads_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ChatTemplate::load_dir(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(CONFIG_FILE), r#"{"bos_token": "<s>"}"#).unwrap();
        std::fs::write(dir.path().join(TEMPLATE_FILE), TINY).unwrap();
        let t = ChatTemplate::load_dir(dir.path()).unwrap().unwrap();
        assert_eq!(user(&t, "Hi"), "<s><|user|>\nHi\n<|assistant|>\n");
        std::fs::create_dir(dir.path().join(TEMPLATE_DIR)).unwrap();
        std::fs::write(dir.path().join(TEMPLATE_DIR).join("tool_use.jinja"), "T").unwrap();
        // chat_template.jinja is the default beside named ones.
        let t = ChatTemplate::load_dir(dir.path()).unwrap().unwrap();
        assert!(user(&t, "Hi").starts_with("<s><|user|>"));
    }
}
