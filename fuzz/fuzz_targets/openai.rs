#![no_main]
//! The OpenAI event decoder must never panic, any text it hands out must unescape, and any
//! server metric it accepts is a finite number.

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
            if let Some(m) = c.metrics {
                for v in [m.queue_ms, m.ttft_ms, m.generation_ms, m.mean_itl_ms]
                    .into_iter()
                    .flatten()
                {
                    assert!(v.is_finite(), "an accepted metric is a finite number");
                }
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
