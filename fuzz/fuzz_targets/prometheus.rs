#![no_main]
//! The Prometheus text parser must never panic, whatever the page holds.

use libfuzzer_sys::fuzz_target;
use llmspeed::proto::prometheus;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match prometheus::parse(text) {
        Ok(samples) => {
            if let Some(first) = samples.first() {
                let _ = prometheus::sum(&samples, &first.name);
                let _ = prometheus::find(&samples, &first.name).count();
                if let Some((k, _)) = first.labels.first() {
                    let _ = first.label(k);
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
