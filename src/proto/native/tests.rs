//! Each decoder on the recorded bodies in `tests/data/native/` (written from each engine's source,
//! see the module docs) and on hand-made edge cases.

use super::*;
use crate::timeline::FinishReason;

/// The `data` payloads of an SSE body (single-line events only, comments skipped).
fn payloads(body: &[u8]) -> Vec<&[u8]> {
    let s = std::str::from_utf8(body).unwrap();
    s.split("\n\n")
        .filter(|e| e.starts_with("data:"))
        .map(|e| {
            let d = &e["data:".len()..];
            d.strip_prefix(' ').unwrap_or(d).as_bytes()
        })
        .collect()
}

/// One decoded payload: its text (or error message), its tokens and what else it was.
type Decoded = Result<(String, u64, Option<NativeItemKind>), OpenAiError>;

/// Decodes every payload, unescaping the text of each event.
fn run(d: Dialect, body: &[u8]) -> Vec<Decoded> {
    let mut dec = NativeDecoder::new(d).unwrap();
    payloads(body)
        .into_iter()
        .map(|p| {
            dec.decode(p).map(|item| match item {
                NativeItem::Event(e) => {
                    let mut text = String::new();
                    e.text.unescape_into(&mut text).unwrap();
                    (text, e.tokens, None)
                }
                NativeItem::Done => (String::new(), 0, Some(NativeItemKind::Done)),
                NativeItem::Ignore => (String::new(), 0, Some(NativeItemKind::Ignore)),
                NativeItem::End { .. } => (String::new(), 0, Some(NativeItemKind::End)),
                NativeItem::Error(e) => {
                    let mut m = String::new();
                    e.message.unescape_into(&mut m).unwrap();
                    (m, 0, Some(NativeItemKind::Error))
                }
            })
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
enum NativeItemKind {
    Done,
    Ignore,
    End,
    Error,
}

fn ok(t: &str, n: u64) -> Decoded {
    Ok((t.to_string(), n, None))
}

/// The last event's facts (finish reason word, usage, last flag).
fn last_event(d: Dialect, body: &[u8]) -> NativeEvent<'static> {
    let leaked: &'static [u8] = Box::leak(body.to_vec().into_boxed_slice());
    let mut dec = NativeDecoder::new(d).unwrap();
    let mut last = None;
    for p in payloads(leaked) {
        if let Ok(NativeItem::Event(e)) = dec.decode(p) {
            last = Some(e);
        }
    }
    last.unwrap()
}

const SGLANG: &[u8] = include_bytes!("../../../tests/data/native/sglang_generate.sse");
const SGLANG_INC: &[u8] =
    include_bytes!("../../../tests/data/native/sglang_generate_incremental.sse");
const SGLANG_ERR: &[u8] = include_bytes!("../../../tests/data/native/sglang_generate_error.sse");
const TGI: &[u8] = include_bytes!("../../../tests/data/native/tgi_generate_stream.sse");
const TGI_ERR: &[u8] = include_bytes!("../../../tests/data/native/tgi_generate_stream_error.sse");
const LLAMA: &[u8] = include_bytes!("../../../tests/data/native/llamacpp_completion.sse");
const LLAMA_ERR: &[u8] = include_bytes!("../../../tests/data/native/llamacpp_completion_error.sse");

#[test]
fn sglang_cumulative_text_becomes_deltas_and_tokens_come_from_completion_tokens() {
    let got = run(Dialect::Sglang, SGLANG);
    assert_eq!(
        got,
        vec![
            ok("The", 1),
            ok(" \"r", 2),
            ok("iver\"", 1),
            ok("\nflows", 3),
            ok(" é", 1),
            Ok((String::new(), 0, Some(NativeItemKind::Done))),
        ]
    );
    let e = last_event(Dialect::Sglang, SGLANG);
    assert_eq!(e.finish_reason, Some(&b"length"[..]));
    assert_eq!(
        FinishReason::parse(e.finish_reason.unwrap()),
        FinishReason::Length
    );
    assert_eq!(e.source, TokenCountSource::ContinuousUsage);
    let u = e.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.total_tokens,
            u.cached_tokens
        ),
        (6, 8, 14, Some(2))
    );
}

#[test]
fn sglang_incremental_output_is_told_apart_by_output_ids() {
    let got = run(Dialect::Sglang, SGLANG_INC);
    assert_eq!(
        got[..3],
        [ok("A", 1), ok(" b", 1), ok(" c\\", 2)],
        "deltas are whole, not cut against the previous length"
    );
    let e = last_event(Dialect::Sglang, SGLANG_INC);
    assert_eq!(
        FinishReason::parse(e.finish_reason.unwrap()),
        FinishReason::Stop
    );
}

#[test]
fn sglang_error_event_keeps_the_servers_message() {
    let got = run(Dialect::Sglang, SGLANG_ERR);
    assert_eq!(
        got[1],
        Ok((
            "The request was aborted: out of memory".to_string(),
            0,
            Some(NativeItemKind::Error)
        ))
    );
}

#[test]
fn sglang_without_meta_info_counts_events_with_new_text() {
    let mut d = NativeDecoder::new(Dialect::Sglang).unwrap();
    let Ok(NativeItem::Event(e)) = d.decode(br#"{"text":"ab"}"#) else {
        panic!()
    };
    assert_eq!(
        (e.tokens, e.source, e.usage),
        (1, TokenCountSource::Chunks, None)
    );
    let Ok(NativeItem::Event(e)) = d.decode(br#"{"text":"ab"}"#) else {
        panic!()
    };
    assert_eq!(e.tokens, 0, "no new text, no token");
    // A count that goes backwards adds nothing.
    let mut d = NativeDecoder::new(Dialect::Sglang).unwrap();
    for (body, want) in [
        (
            &br#"{"text":"a","meta_info":{"completion_tokens":5}}"#[..],
            5,
        ),
        (br#"{"text":"ab","meta_info":{"completion_tokens":3}}"#, 0),
        (br#"{"text":"abc","meta_info":{"completion_tokens":6}}"#, 1),
    ] {
        let Ok(NativeItem::Event(e)) = d.decode(body) else {
            panic!()
        };
        assert_eq!(e.tokens, want);
    }
}

#[test]
fn tgi_one_token_per_event_special_tokens_add_no_text() {
    let got = run(Dialect::Tgi, TGI);
    assert_eq!(
        got,
        vec![
            ok(" The", 1),
            ok(" \"river\"", 1),
            ok("\n", 1),
            ok(" é", 1),
            ok("", 1)
        ]
    );
    let e = last_event(Dialect::Tgi, TGI);
    assert!(e.last);
    assert_eq!(
        FinishReason::parse(e.finish_reason.unwrap()),
        FinishReason::Stop
    );
    let u = e.usage.unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens), (6, 5));
    assert_eq!(e.source, TokenCountSource::TokenIds);
}

#[test]
fn tgi_error_event_keeps_message_and_type() {
    let mut d = NativeDecoder::new(Dialect::Tgi).unwrap();
    let p = payloads(TGI_ERR);
    assert!(matches!(d.decode(p[0]), Ok(NativeItem::Event(_))));
    let Ok(NativeItem::Error(e)) = d.decode(p[1]) else {
        panic!()
    };
    assert!(std::str::from_utf8(e.message.raw)
        .unwrap()
        .contains("CUDA out of memory"));
    assert_eq!(e.kind, Some(&b"generation"[..]));
}

#[test]
fn llamacpp_tokens_predicted_deltas_cover_tokens_without_an_event() {
    let got = run(Dialect::LlamaCpp, LLAMA);
    assert_eq!(
        got,
        vec![
            ok(" The", 1),
            ok(" \"river\"", 1),
            ok("\n", 1),
            ok(" é", 2),
            ok("", 0)
        ]
    );
    let e = last_event(Dialect::LlamaCpp, LLAMA);
    assert!(e.last);
    assert_eq!(e.finish_reason, Some(&b"limit"[..]));
    assert_eq!(FinishReason::parse(b"limit"), FinishReason::Length);
    let u = e.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (6, 5, Some(2))
    );
    let t = e.timings.unwrap();
    assert_eq!((t.predicted_n, t.prompt_n), (Some(5), Some(4)));
}

#[test]
fn llamacpp_error_and_progress_events() {
    let got = run(Dialect::LlamaCpp, LLAMA_ERR);
    assert_eq!(
        got[1],
        Ok((
            "failed to decode the batch".to_string(),
            0,
            Some(NativeItemKind::Error)
        ))
    );
    let mut d = NativeDecoder::new(Dialect::LlamaCpp).unwrap();
    let progress = br#"{"index":0,"content":"","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":0,"tokens_evaluated":6,"prompt_progress":{"total":6,"cache":0,"processed":3,"time_ms":1}}"#;
    assert_eq!(d.decode(progress), Ok(NativeItem::Ignore));
    // Without tokens_predicted, the tokens array counts.
    let Ok(NativeItem::Event(e)) = d.decode(br#"{"content":"x","tokens":[1,2]}"#) else {
        panic!()
    };
    assert_eq!((e.tokens, e.source), (2, TokenCountSource::TokenIds));
}

#[test]
fn wrong_types_and_bad_json_are_errors_not_guesses() {
    let cases: [(Dialect, &[u8], &str); 8] = [
        (Dialect::Sglang, br#"{"text":5}"#, "`text`"),
        (
            Dialect::Sglang,
            br#"{"meta_info":{"completion_tokens":-1}}"#,
            "completion_tokens",
        ),
        (Dialect::Sglang, br#"{"meta_info":[]}"#, "meta_info"),
        (
            Dialect::Tgi,
            br#"{"token":{"special":"no"}}"#,
            "token.special",
        ),
        (
            Dialect::Tgi,
            br#"{"details":{"generated_tokens":"5"}}"#,
            "generated_tokens",
        ),
        (Dialect::LlamaCpp, br#"{"stop":1}"#, "`stop`"),
        (Dialect::LlamaCpp, br#"{"content":"a""#, "JSON"),
        (Dialect::LlamaCpp, b"[1,2]", "neither"),
    ];
    for (d, body, needle) in cases {
        let e = NativeDecoder::new(d).unwrap().decode(body).unwrap_err();
        assert!(e.to_string().contains(needle), "{body:?}: {e}");
    }
    // [DONE] means the end only where the dialect sends it; elsewhere it is not JSON.
    assert!(NativeDecoder::new(Dialect::Tgi)
        .unwrap()
        .decode(b"[DONE]")
        .is_err());
    assert!(NativeDecoder::new(Dialect::OpenAi).is_none());
}
