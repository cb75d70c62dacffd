#![no_main]
//! vLLM's per-request `metrics` object reader (`server_timing`, off the per-token path) must
//! never panic, and whatever it accepts is finite numbers.

use libfuzzer_sys::fuzz_target;
use llmspeed::proto::openai::server_timing;

fuzz_target!(|data: &[u8]| {
    match server_timing(data) {
        Ok(m) => {
            for v in [m.queue_ms, m.ttft_ms, m.generation_ms, m.mean_itl_ms]
                .into_iter()
                .flatten()
            {
                assert!(v.is_finite(), "an accepted metric is a finite number");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
