//! The Responses API's events: the payload decoder never panics, any text or message it hands
//! out unescapes; and the whole decode path (head, body, SSE, the
//! Responses decoder, timeline) never panics and records from split reads what the whole body
//! records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::net::Dialect;
use llmspeed::proto::responses::{decode, ResponsesEvent};

fuzz_target!(|data: &[u8]| {
    let (_, payload) = llmspeed_fuzz::split_input(data);
    let mut out = String::new();
    match decode(payload) {
        Ok(Some(ResponsesEvent::Delta { text, .. })) => {
            text.unescape_into(&mut out)
                .expect("text from an accepted delta unescapes");
        }
        Ok(Some(ResponsesEvent::Error(e))) => {
            e.message
                .unescape_into(&mut out)
                .expect("an accepted error message unescapes");
        }
        Ok(Some(ResponsesEvent::Terminal(_))) | Ok(None) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
    llmspeed_fuzz::check_native(Dialect::Responses, data)
});
