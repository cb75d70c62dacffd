//! vLLM's `custom_image` JSONL (`workload::datasets::custom_image::parse`) and its image
//! references (`custom_image::image`, files read from the fuzz input's own bytes): any text
//! parses or is refused with a message, never a panic; every parsed line is a non-blank line of
//! the input (numbered from 1, increasing), and its form holds what the rules require (a
//! `prompt` line at least one image; a `content` line at least one part).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::datasets::custom_image::{image, parse, Item};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(lines) = parse(s) {
        let all: Vec<&str> = s.lines().collect();
        let mut last = 0;
        for l in &lines {
            assert!(l.number > last && l.number <= all.len());
            assert!(!all[l.number - 1].trim().is_empty());
            last = l.number;
            match &l.item {
                Item::Prompt { images, .. } => assert!(!images.is_empty()),
                Item::Content(parts) => assert!(!parts.is_empty()),
            }
        }
    }
    // Any reference, with any file bytes behind it: an image or an error.
    let mut read = |_: &std::path::Path| Ok(data.to_vec());
    for client_side in [false, true] {
        if let Ok(i) = image(s, client_side, &mut read) {
            assert!(!i.url.is_empty());
        }
    }
});
