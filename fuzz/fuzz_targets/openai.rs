#![no_main]
//! The OpenAI event decoder must never panic, and any text it hands out must unescape.

use libfuzzer_sys::fuzz_target;
use llmspeed::proto::openai::{decode, StreamItem};
use llmspeed::timeline::FinishReason;

fuzz_target!(|data: &[u8]| {
    let mut out = String::new();
    match decode(data) {
        Ok(StreamItem::Chunk(c)) => {
            for text in [c.content, c.reasoning].into_iter().flatten() {
                text.unescape_into(&mut out)
                    .expect("text from an accepted event unescapes");
            }
            if let Some(f) = c.finish_reason {
                let _ = FinishReason::parse(f);
            }
        }
        Ok(StreamItem::Error(e)) => {
            e.message
                .unescape_into(&mut out)
                .expect("an accepted error message unescapes");
        }
        Ok(StreamItem::Done) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
