//! The matrix's text inputs: `--contexts` / `--concurrency` lists and cached prompt files.
//! Byte 0 picks the parser. Never panics; a prompt file that decodes re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::matrix::plan::{parse_concurrency, parse_contexts};
use llmspeed::workload::prompt_cache::{decode, encode, CacheKey};
use llmspeed::workload::prose::PromptKind;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 3 {
        0 => {
            let _ = parse_contexts("--contexts", text);
        }
        1 => {
            let _ = parse_concurrency(text);
        }
        _ => {
            let kind = if which & 0x80 == 0 {
                PromptKind::Chat
            } else {
                PromptKind::Completion
            };
            let key = CacheKey {
                tokenizer: "llama.cpp tiny vocab 7021",
                model: "m",
                context: 8192,
                seed: 1,
                kind,
            };
            if let Ok(cached) = decode(Path::new("fuzz"), &key, text) {
                assert_eq!(encode(&key, &cached), text);
            }
        }
    }
});
