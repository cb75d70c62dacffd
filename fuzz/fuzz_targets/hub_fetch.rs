//! The text rules of a hub download never panic and never let a server choose a path: the
//! request target of a URL, a `Location` joined to it, and the revision and blob names read
//! from the hub's headers (which become path components in the cache).
//!
//! Input layout: the text (lossy UTF-8) split at the first newline into a base URL and a second
//! string used as a `Location`, and as the values of `X-Repo-Commit` and `ETag`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::net::fetch::{join_location, path_and_query, Fetched};
use llmspeed::workload::hub::revision_of;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (base, other) = text.split_once('\n').unwrap_or((&text, ""));
    assert!(path_and_query(base).starts_with('/'));
    let _ = join_location(base, other);
    let answer = Fetched {
        first_headers: vec![
            ("X-Repo-Commit".into(), other.into()),
            ("ETag".into(), other.into()),
        ],
        final_url: String::new(),
        bytes: 0,
    };
    if let Ok((commit, etag)) = revision_of(&answer) {
        for name in [commit, etag] {
            assert!(!name.is_empty() && !name.starts_with('.'));
            assert!(!name.contains(['/', '\\', '\0']));
        }
    }
});
