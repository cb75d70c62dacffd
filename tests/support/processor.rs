//! A model folder as `bench sglang --tokenizer` names one for a native image run
//! (`--backend sglang`, `--dataset-name image` or `mmmu`): the processor's chat template, its
//! class, the special tokens and a word-level `tokenizer.json`.

use serde_json::json;
use std::path::{Path, PathBuf};

/// The template of [`folder`]: LLaVA-style, each image part `<image>`, the text
/// after them.
pub const LLAVA_SHAPED: &str = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% elif p['type'] == 'image' %}<image>{% endif %}{% endfor %}{% endif %}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

/// A model folder under `dir` as `--tokenizer` names one for a native image run: a word-level
/// `tokenizer.json` (its counts are not what is checked), the special tokens, the processor's
/// class and its chat template ([`LLAVA_SHAPED`]).
pub fn folder(dir: &Path) -> PathBuf {
    let d = dir.join("model");
    std::fs::create_dir_all(&d).unwrap();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1}, "unk_token": "[UNK]"}
    });
    std::fs::write(d.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(
        d.join("tokenizer_config.json"),
        json!({"bos_token": "<s>", "eos_token": "</s>"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        d.join("processor_config.json"),
        json!({"processor_class": "LlavaProcessor"}).to_string(),
    )
    .unwrap();
    std::fs::write(d.join("chat_template.jinja"), LLAVA_SHAPED).unwrap();
    d
}
