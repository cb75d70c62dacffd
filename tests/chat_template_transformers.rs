//! `workload::chat_template` against `transformers` itself: tokenizer folders written here (the
//! tiny test model's `tokenizer.json` with templates of the shapes real models ship: its own
//! `chat_template.jinja`, Llama- and Qwen-shaped ones, named templates, the special-token files)
//! are rendered by `AutoTokenizer.from_pretrained(dir).apply_chat_template(messages,
//! add_generation_prompt=..., tokenize=False, **kwargs)` in the vLLM virtualenv's Python and by
//! llmspeed, and the two texts must be byte-equal; the rendered text's token count (special
//! tokens added, as vLLM and SGLang count a prompt) must be equal too. A template that raises
//! must fail in both.
//!
//! Needs the virtualenv and the tiny model of `scripts/vllm-server.sh` (`LLMSPEED_VLLM`,
//! `LLMSPEED_VLLM_MODEL`): NOT RUN without them, a failure under `CI=true`.
#![cfg(feature = "hf-tokenizer")]

use llmspeed::workload::chat_template::{parse_kwargs, ChatTemplate, Message, Vars};
use llmspeed::workload::tokenizer::LocalTokenizer;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A real component is missing: a failure under `CI=true`, elsewhere a loud NOT RUN.
fn missing<T>(msg: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("NOT RUN: {msg}");
    None
}

/// Llama 3.1's shape: a system block with a date from `strftime_now`, `bos_token`, `trim`,
/// `raise_exception` on an unknown role, a generation prompt.
const LLAMA: &str = r#"{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message['role'] not in ['user', 'assistant'] %}
        {{- raise_exception('Conversation roles must be user or assistant') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"#;

/// Qwen3's shape: a namespace walked backwards, Python string methods, `tojson` of a variable,
/// `loop.last`, a `{% generation %}` block, a macro, `enable_thinking` from the kwargs.
const QWEN: &str = r#"{%- macro header(role) -%}
<|im_start|>{{ role }}
{%- endmacro -%}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- if extra is defined %}
    {{- header('system') + '\n' + (extra | tojson) + ' ' + (extra | tojson(indent=2)) + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- set content = message.content.strip() %}
    {%- if message.role == "assistant" %}
        {{- header(message.role) + '\n' }}
        {%- generation %}
        {{- content.replace('  ', ' ') + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- else %}
        {{- header(message.role) + '\n' + content + (' [last query]' if loop.index0 == ns.last_query_index else '') + '<|im_end|>' + ('\n' if not loop.last else '') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '\n<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"#;

/// No dashes at all: Jinja2's `trim_blocks` and `lstrip_blocks` alone decide the newlines;
/// Python's printing of `True`, `None` and a message's `items()`; loop controls. Tokens that
/// are not in the tokenizer's vocabulary are not printed: `transformers` adds a special token
/// named in the files to its vocabulary (counted as one), which `tokenizer.json` alone does not
/// know (real models list theirs in `tokenizer.json`).
const PLAIN: &str = "{% for m in messages %}\n  {% if m.role == 'system' %}{% continue %}{% endif %}\n{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}\n  {% if loop.index > 3 %}{% break %}{% endif %}\n{% endfor %}\ngen={{ add_generation_prompt }} tools={{ tools }} eos={{ eos_token }} img={{ image_token | default('') | length }} pad={{ pad_token is defined }}\n";

fn python() -> Option<PathBuf> {
    let vllm = std::env::var_os("LLMSPEED_VLLM").map(PathBuf::from);
    match vllm.map(|v| v.with_file_name("python")) {
        Some(p) if p.exists() => Some(p),
        _ => missing(
            "LLMSPEED_VLLM (the vLLM virtualenv of scripts/vllm-server.sh, whose Python has \
             transformers) is not set",
        ),
    }
}

fn tiny_model() -> Option<PathBuf> {
    match std::env::var_os("LLMSPEED_VLLM_MODEL").map(PathBuf::from) {
        Some(m) if m.join("tokenizer.json").exists() => Some(m),
        _ => missing("LLMSPEED_VLLM_MODEL (the tiny model of scripts/vllm-server.sh) is not set"),
    }
}

/// A tokenizer folder: the tiny model's `tokenizer.json`, its `tokenizer_config.json` with
/// `config` merged over it, and the `files` given (relative path, text).
fn folder(root: &Path, name: &str, tiny: &Path, config: Value, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(tiny.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny.join("tokenizer_config.json")).unwrap())
            .unwrap();
    for (k, v) in config.as_object().unwrap() {
        c[k] = v.clone();
    }
    std::fs::write(dir.join("tokenizer_config.json"), c.to_string()).unwrap();
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// One rendering to compare.
struct Case {
    dir: PathBuf,
    messages: Vec<Message>,
    add_generation_prompt: bool,
    /// A JSON object's text, read by both sides in its own key order.
    kwargs: Option<&'static str>,
}

/// `transformers`' rendering and count of every case: `{"text", "count"}` or `{"error"}`.
fn transformers(python: &Path, cases: &[Case]) -> Vec<Value> {
    // Written field by field: a message's keys reach Python in their own order (role, then
    // content, as the reference tools build them), which a `serde_json::Value` would sort.
    let spec: Vec<String> = cases
        .iter()
        .map(|c| {
            format!(
                "{{\"dir\": {}, \"messages\": {}, \"add_generation_prompt\": {}, \"kwargs\": {}}}",
                json!(c.dir),
                serde_json::to_string(&c.messages).unwrap(),
                c.add_generation_prompt,
                json!(c.kwargs.unwrap_or("{}")),
            )
        })
        .collect();
    let script = r#"
import json, sys
from transformers import AutoTokenizer
out = []
for c in json.load(sys.stdin):
    c["kwargs"] = json.loads(c["kwargs"])
    tok = AutoTokenizer.from_pretrained(c["dir"])
    try:
        text = tok.apply_chat_template(c["messages"], add_generation_prompt=c["add_generation_prompt"], tokenize=False, **c["kwargs"])
        out.append({"text": text, "count": len(tok(text).input_ids)})
    except Exception as e:
        out.append({"error": str(e)})
print(json.dumps(out))
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .env("TZ", "UTC")
        .env("HF_HUB_OFFLINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the virtualenv's Python");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("[{}]", spec.join(", ")).as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "transformers failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

#[test]
fn templates_render_byte_equal_to_transformers() {
    let (Some(python), Some(tiny)) = (python(), tiny_model()) else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let own = std::fs::read_to_string(tiny.join("chat_template.jinja")).unwrap();
    let dirs = [
        folder(
            r,
            "tiny",
            &tiny,
            json!({}),
            &[("chat_template.jinja", &own)],
        ),
        folder(r, "llama", &tiny, json!({"chat_template": LLAMA}), &[]),
        folder(
            r,
            "qwen",
            &tiny,
            json!({"chat_template": QWEN, "eos_token": {"__type": "AddedToken", "content": "</s>", "special": true}}),
            &[],
        ),
        // Named templates in the config: the one named "default" is used.
        folder(
            r,
            "named",
            &tiny,
            json!({"chat_template": [
                {"name": "tool_use", "template": "TOOLS {{ messages[0].content }}"},
                {"name": "default", "template": PLAIN}
            ], "image_token": "<img>"}),
            &[],
        ),
        // Template files win over the config; special_tokens_map.json overrides its tokens.
        folder(
            r,
            "files",
            &tiny,
            json!({"chat_template": "never used"}),
            &[
                ("chat_template.jinja", PLAIN),
                ("additional_chat_templates/tool_use.jinja", "TOOLS"),
                (
                    "special_tokens_map.json",
                    r#"{"eos_token": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false}, "pad_token": "<pad>"}"#,
                ),
            ],
        ),
    ];
    let chat = vec![
        msg("system", "  You are terse.  "),
        msg("user", "What is  the sea?\n"),
        msg("assistant", "Salt  water. "),
        msg("user", "And a lake? é ü \"quoted\" \\ <tag>"),
    ];
    let mut cases = Vec::new();
    for dir in &dirs {
        for (messages, gen) in [
            (
                vec![msg("user", "The quick brown fox jumps over the lazy dog.")],
                true,
            ),
            (chat.clone(), true),
            (chat.clone(), false),
        ] {
            cases.push(Case {
                dir: dir.clone(),
                messages,
                add_generation_prompt: gen,
                kwargs: None,
            });
        }
    }
    cases.push(Case {
        dir: dirs[2].clone(),
        messages: chat.clone(),
        add_generation_prompt: true,
        kwargs: Some(
            r#"{"enable_thinking": false, "extra": {"b": [1, 2.5, null, true], "a": "x\ny"}}"#,
        ),
    });
    cases.push(Case {
        dir: dirs[1].clone(),
        messages: vec![msg("user", "hi")],
        add_generation_prompt: true,
        kwargs: Some(r#"{"date_string": "01 Jan 2025", "bos_token": "<BOS>"}"#),
    });
    // A role the Llama template refuses: both must fail, naming its message.
    cases.push(Case {
        dir: dirs[1].clone(),
        messages: vec![msg("tool", "x")],
        add_generation_prompt: true,
        kwargs: None,
    });
    let theirs = transformers(&python, &cases);
    assert_eq!(theirs.len(), cases.len());
    let mut compared = 0;
    for (case, t) in cases.iter().zip(&theirs) {
        let template = ChatTemplate::load_dir(&case.dir).unwrap().unwrap();
        let vars: Option<Vars> = case.kwargs.map(|k| parse_kwargs("kwargs", k).unwrap());
        let ours = template.render(&case.messages, case.add_generation_prompt, vars.as_ref());
        let name = case.dir.file_name().unwrap().to_string_lossy();
        match (t.get("text").and_then(Value::as_str), ours) {
            (Some(text), Ok(mine)) => {
                assert_eq!(mine, text, "{name}: rendered differently");
                let tok = LocalTokenizer::load_file(&case.dir.join("tokenizer.json")).unwrap();
                assert_eq!(
                    Some(tok.count(&mine).unwrap()),
                    t["count"].as_u64(),
                    "{name}: counted differently"
                );
                compared += 1;
            }
            (None, Err(e)) => {
                let theirs = t["error"].as_str().unwrap();
                assert!(e.to_string().contains(theirs), "{name}: {e} vs {theirs}");
            }
            (text, ours) => panic!("{name}: transformers {text:?}, llmspeed {ours:?}"),
        }
    }
    assert_eq!(compared, cases.len() - 1);
}
