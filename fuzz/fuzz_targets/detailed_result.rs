//! A benchmark client's per-request result as `selftest --external` reads it
//! (`selftest::external::parse_detailed`): vLLM's `--save-detailed` JSON or SGLang's JSON lines
//! with Python's bare `NaN`/`Infinity`. Any text is an error or records, never a panic, and
//! every time read is finite.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::selftest::external::parse_detailed;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(records) = parse_detailed(s) {
        for r in records {
            assert!(r.ttft_s.is_finite());
            assert!(r.itls_s.iter().all(|x| x.is_finite()));
            assert!(r.latency_s.is_none_or(f64::is_finite));
        }
    }
});
