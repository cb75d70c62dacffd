//! `--random-mm-limit-mm-per-prompt` (`workload::datasets::random_mm::parse_limits`): any text parses or
//! is refused with a message naming the flag, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::datasets::random_mm::parse_limits;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = parse_limits(s) {
        assert!(e.starts_with("--random-mm-limit-mm-per-prompt"));
    }
});
