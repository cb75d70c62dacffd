//! Server detection from endpoint bodies (`server::probe::detect`) never panics, whatever the
//! server answers, and its report (`render`, `to_json`, `limits`) never panics either.
//!
//! Input layout: byte 0 says which endpoints answered (bit i) and byte 1 which of those answered
//! with a non-2xx status; the rest is split on 0xFF (never valid UTF-8) into the bodies of
//! `/v1/models`, `/version`, `/metrics`, `/get_server_info`, `/info`, `/props`, `/api/version`,
//! then one `/tokenize` answer and one `/detokenize` answer, read in every dialect (the status of
//! the `/tokenize` answer is byte 1's top bit: 200 or 500).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::matrix::status::KvSource;
use llmspeed::server::dialect::{verify, Attempt, TokenizeDialect};
use llmspeed::server::probe::{detect, Collected, Fetched, Overrides};

fuzz_target!(|data: &[u8]| {
    let (present, failed, rest) = match data {
        [a, b, rest @ ..] => (*a, *b, rest),
        _ => return,
    };
    let mut bodies = rest.split(|&b| b == 0xFF);
    let mut slots: [Option<Fetched>; 7] = Default::default();
    for (i, slot) in slots.iter_mut().enumerate() {
        let body = bodies.next().unwrap_or_default();
        if present & (1 << i) != 0 {
            *slot = Some(Fetched {
                status: if failed & (1 << i) != 0 { 500 } else { 200 },
                body: String::from_utf8_lossy(body).into_owned(),
            });
        }
    }
    let [models, version, metrics, server_info, info, props, api_version] = slots;
    let tokenize_body = bodies.next().unwrap_or_default();
    let detokenize_body = bodies.next().unwrap_or_default();
    let status = if failed & 0x80 != 0 { 500 } else { 200 };
    let mut attempts = Vec::new();
    for d in TokenizeDialect::ALL {
        let a = verify(d, status, tokenize_body);
        // A verified dialect counted at least one token: the trap of `{"tokens": []}`.
        if let Attempt::Verified { count } = a {
            assert!(count > 0);
        }
        let _ = d.parse_count(tokenize_body);
        let _ = d.parse_detokenized(detokenize_body);
        attempts.push((d, a));
    }
    let c = Collected {
        models,
        version,
        metrics,
        server_info,
        info,
        props,
        api_version,
        tokenize: attempts,
        token_ids: Some(present & 0x80 != 0),
    };
    let found = detect(&c, &Overrides::default());
    let _ = found.render();
    let _ = found.to_json().to_string();
    let _ = found.limits();

    // Flags always win over whatever the endpoints said.
    let o = Overrides {
        kv_budget: Some(7),
        max_model_len: Some(11),
        max_num_seqs: Some(13),
    };
    let forced = detect(&c, &o);
    assert_eq!(forced.kv_tokens, Some((7, KvSource::UserFlag)));
    assert_eq!(forced.max_model_len.map(|f| f.value), Some(11));
    assert_eq!(forced.max_running.map(|f| f.value), Some(13));
    assert_eq!(forced.engine, found.engine);
});
