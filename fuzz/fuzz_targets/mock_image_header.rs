//! The simulated server's image header reader (`mock::image`): any file or data URL is sized
//! or refused, never a panic; a size read is never zero.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::mock::image::{header_size, url_size};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(s)) = header_size(data) {
        assert!(s.width > 0 && s.height > 0);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(size) = url_size(s) {
            assert!(size.width > 0 && size.height > 0);
        }
    }
});
