//! Server detection from endpoint bodies (`server::probe::detect`) never panics, whatever the
//! server answers, and its report (`render`, `to_json`, `limits`) never panics either.
//!
//! Input layout: byte 0 says which endpoints answered (bit i) and byte 1 which of those answered
//! with a non-2xx status; the rest is split on 0xFF (never valid UTF-8) into the bodies of
//! `/v1/models`, `/version`, `/metrics`, `/get_server_info`, `/info`, `/props`, `/api/version`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::matrix::status::KvSource;
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
    let c = Collected {
        models,
        version,
        metrics,
        server_info,
        info,
        props,
        api_version,
        tokenize: None,
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
