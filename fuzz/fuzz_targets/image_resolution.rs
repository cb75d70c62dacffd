//! `--image-resolution` (`workload::datasets::sglang_image::parse_resolution`): any text parses
//! or is refused with a message naming the flag, never a panic; what parses has sides of at
//! least one pixel, a minimum no larger than its maximum, and reads back the same from its
//! `HxW` spelling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::datasets::sglang_image::{parse_resolution, Resolution};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse_resolution(s) {
        Err(e) => assert!(e.starts_with("--image-resolution"), "{e}"),
        Ok(Resolution::Fixed { width, height }) => {
            assert!(width > 0 && height > 0);
            let again = parse_resolution(&format!("{height}x{width}"));
            assert_eq!(again, Ok(Resolution::Fixed { width, height }));
        }
        Ok(Resolution::Random { min, max }) => {
            assert!(min.0 > 0 && min.1 > 0 && min.0 <= max.0 && min.1 <= max.1);
            let again = parse_resolution(&format!(
                "random:{}x{}-{}x{}",
                min.1, min.0, max.1, max.0
            ));
            assert_eq!(again, Ok(Resolution::Random { min, max }));
        }
    }
});
