#![no_main]
//! The OpenAI event decoder must never panic, any text it hands out must unescape, and a
//! `metrics` object it accepts reads (`server_timing`) into finite numbers.

use libfuzzer_sys::fuzz_target;
use llmspeed::proto::openai::{decode, server_timing, StreamItem};
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
            if let Some(raw) = c.metrics {
                let m = server_timing(raw).expect("an accepted metrics object reads");
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
