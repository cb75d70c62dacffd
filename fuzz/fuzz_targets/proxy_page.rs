//! A proxy's error page (`net::proxy::page_text`): any bytes read as one line of text, never a
//! panic, never longer than its limit, and no tag's '<' left in it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::net::proxy::page_text;

fuzz_target!(|data: &[u8]| {
    let text = page_text(data);
    assert!(text.chars().count() <= 203, "{text:?}");
    assert!(!text.contains('<'), "{text:?}");
    assert!(!text.contains('\n'), "{text:?}");
});
