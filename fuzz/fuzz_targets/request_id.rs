//! `x-request-id` values (`workload::request_id`): parsing any string never panics, and an id
//! that parses is written back as the same UUID (case aside).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::request_id::{parse_uuid, RequestId};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_uuid(s);
    if let Some(id) = RequestId::parse(s) {
        assert_eq!(id.to_string(), s.to_ascii_lowercase());
        assert_eq!(RequestId::parse(&id.to_string()), Some(id));
    }
});
