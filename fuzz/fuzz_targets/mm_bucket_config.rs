//! `--random-mm-bucket-config` (`workload::datasets::random_mm::parse_buckets`): any text parses or is
//! refused with a message naming the flag, never a panic; a config that parses is checked by
//! the draw without a panic either, and what the check keeps sums to 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::datasets::random_mm::{parse_buckets, ItemDraw, MmSettings};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse_buckets(s) {
        Err(e) => assert!(e.starts_with("--random-mm-bucket-config")),
        Ok(buckets) => {
            let settings = MmSettings {
                buckets,
                ..MmSettings::default()
            };
            if let Ok(d) = ItemDraw::new(&settings) {
                let total: f64 = d.buckets.iter().map(|b| b.p).sum();
                assert!((total - 1.0).abs() < 1e-9, "{total}");
            }
        }
    }
});
