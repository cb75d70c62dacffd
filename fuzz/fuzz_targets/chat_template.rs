//! Tokenizer folders' chat-template files (`workload::chat_template`): any `tokenizer_config.json`
//! text, any `chat_template.jinja` and `special_tokens_map.json` (the input split at NUL bytes)
//! are parsed, compiled and rendered without a panic; a bad file or template is an error value,
//! and a template that runs away stops at its fuel. The same texts read as a processor's
//! files (`processor_config.json`, `chat_template.json`) are found and rendered with a list
//! content of image and text parts the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::chat_template::{
    ChatTemplate, Message, Part, ProcessorFiles, TemplateFiles,
};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // minijinja's string repetition (each string capped at 100 MB) can build outputs past the
    // fuzzer's memory limit within the template's fuel: that is the template engine's limit,
    // not these files' parsing.
    if s.contains('*') {
        return;
    }
    let mut parts = s.splitn(3, '\0');
    let config = parts.next();
    let jinja = parts.next().filter(|j| !j.is_empty());
    let special = parts.next();
    let files = TemplateFiles {
        jinja,
        named: Vec::new(),
        config,
        special_tokens_map: special,
    };
    if let Ok(Some(t)) = ChatTemplate::parse("fuzz", &files) {
        let messages = [
            Message::user("Hello  there "),
            Message {
                role: "assistant".into(),
                content: "Hi.".into(),
            },
        ];
        let _ = t.render(&messages, true, None);
    }
    let processor = ProcessorFiles {
        processor: config,
        legacy: special,
        tokenizer: files,
    };
    if let Ok(p) = ChatTemplate::processor("fuzz", &processor) {
        if let Ok(t) = p.template {
            let _ = t.render_user_parts(&[Part::Image("data:x"), Part::Text("Hi.")]);
        }
    }
});
