//! `--slo` values (`capacity::slo`): parsing any string never panics, a latency objective
//! written back as its key and milliseconds parses to the same objective, and a share lies in (0, 1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::capacity::slo::{parse_objective, Objective, Slo};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let specs: Vec<&str> = s.split('\n').collect();
    let _ = Slo::parse(&specs);
    match parse_objective(s) {
        Ok(o @ Objective::Latency { max_ms, .. }) => {
            assert!(max_ms > 0.0 && max_ms.is_finite());
            let again = format!("{}={}ms", o.key(), max_ms);
            let back = parse_objective(&again).expect("a parsed objective written back parses");
            assert_eq!(back, o, "{again}");
        }
        Ok(Objective::Errors { max: v } | Objective::Attainment { min: v }) => {
            assert!(v > 0.0 && v < 1.0, "{s}: {v}");
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
