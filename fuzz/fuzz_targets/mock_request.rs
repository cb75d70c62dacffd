//! The mock server's request parsing (OpenAI completions, chat and Responses, SGLang and TGI bodies): any body never panics, and what it accepts respects
//! `max_model_len`; the tokenizer round-trips any text; fault specs parse or fail cleanly; the
//! request log writes any body as one line of JSON holding it (as JSON when it is JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::mock::faults::FaultRule;
use llmspeed::mock::http::parse_request;
use llmspeed::mock::native::Flavor;
use llmspeed::mock::reqlog::{line, RequestRec};
use llmspeed::mock::tokenizer::Tokenizer;
use std::sync::OnceLock;

static TOK: OnceLock<Tokenizer> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let tok = TOK.get_or_init(Tokenizer::new);
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(tok.decode(&tok.encode(text)).as_deref(), Ok(text));
        let _ = text.parse::<FaultRule>();
    }
    let logged = line(&RequestRec {
        arrival_ns: 1,
        method: "POST".into(),
        path: "/v1/completions".into(),
        request_id: std::str::from_utf8(data).ok().map(str::to_owned),
        routing_key: std::str::from_utf8(data).ok().map(str::to_owned),
        status: 200,
        body: bytes::Bytes::copy_from_slice(data),
    });
    assert!(!logged.contains('\n'), "{logged}");
    let logged: serde_json::Value = serde_json::from_str(&logged).expect("a JSON line");
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(logged["routing_key"], text);
    }
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) {
        assert_eq!(logged["body"], body);
        for flavor in [
            Flavor::Completions,
            Flavor::Chat,
            Flavor::Sglang,
            Flavor::Tgi,
            Flavor::Responses,
        ] {
            if let Ok(g) = parse_request(tok, 4096, &body, flavor) {
                for p in &g.prompts {
                    assert!(!p.is_empty());
                    assert!(p.len() as u64 + g.max_tokens.unwrap_or(0) as u64 <= 4096);
                    assert!(p.iter().all(|&t| t < tok.vocab_size()));
                }
            }
        }
    }
});
