//! The repetition detector never panics on arbitrary bytes (invalid UTF-8, sequences cut
//! anywhere), and any split of the input gives the same verdict as the whole, as does a detector
//! reused after `reset`. The same holds for JSON-escaped input (`push_json`, escapes and
//! surrogate pairs cut anywhere), and where serde_json accepts the input as a JSON string's
//! contents, `push_json` of it gives the verdict of `push` on serde_json's decoding.
//!
//! Input layout: bytes 0..3 choose a small config (so loops are reachable in short inputs), the
//! rest is `split_input`'s layout (read sizes, then the text).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::analysis::repetition::{Loop, RepetitionConfig, RepetitionDetector};
use llmspeed_fuzz::{reads, split_input};

fn verdict(det: &mut RepetitionDetector, pieces: &[&[u8]]) -> (Option<Loop>, u64) {
    verdict_with(det, pieces, RepetitionDetector::push)
}

fn verdict_json(det: &mut RepetitionDetector, pieces: &[&[u8]]) -> (Option<Loop>, u64) {
    verdict_with(det, pieces, RepetitionDetector::push_json)
}

fn verdict_with(
    det: &mut RepetitionDetector,
    pieces: &[&[u8]],
    push: fn(&mut RepetitionDetector, &[u8]),
) -> (Option<Loop>, u64) {
    for p in pieces {
        push(det, p);
    }
    let v = det.finish().cloned();
    // Pushes after `finish` are ignored.
    det.push(b"abcabcabcabcabcabc");
    assert_eq!(det.verdict(), v.as_ref());
    (v, det.chars())
}

fuzz_target!(|data: &[u8]| {
    let (cfg_bytes, rest) = match data {
        [a, b, c, rest @ ..] => ([*a, *b, *c], rest),
        _ => return,
    };
    let cfg = RepetitionConfig {
        // Includes 2, which the config check must refuse rather than accept.
        min_repeats: 2 + (cfg_bytes[0] % 5) as usize,
        min_span: 1 + cfg_bytes[1] as usize,
        max_period: 1 + (cfg_bytes[2] % 64) as usize,
    };
    let Ok(mut whole) = RepetitionDetector::new(cfg) else {
        assert!(cfg.min_repeats < 3);
        return;
    };
    let (sizes, payload) = split_input(rest);
    let want = verdict(&mut whole, &reads(payload, None));
    if let Some(l) = &want.0 {
        assert!(l.period_chars >= 1 && l.period_chars <= cfg.max_period);
        assert!(l.span_chars >= cfg.need(l.period_chars));
        assert!(l.detected_at_chars <= want.1);
    }
    let mut split = RepetitionDetector::new(cfg).expect("config accepted above");
    assert_eq!(verdict(&mut split, &reads(payload, Some(&sizes))), want);
    // Reuse after reset behaves like a fresh detector.
    split.reset();
    assert_eq!(verdict(&mut split, &reads(payload, Some(&sizes))), want);

    // The same payload read as JSON string contents.
    split.reset();
    let want_json = verdict_json(&mut split, &reads(payload, None));
    split.reset();
    assert_eq!(
        verdict_json(&mut split, &reads(payload, Some(&sizes))),
        want_json
    );
    let quoted = [&b"\""[..], payload, b"\""].concat();
    if let Ok(decoded) = serde_json::from_slice::<String>(&quoted) {
        split.reset();
        let twin = verdict(&mut split, &[decoded.as_bytes()]);
        assert_eq!(want_json.0, twin.0);
        if twin.0.is_none() {
            assert_eq!(want_json.1, twin.1, "characters counted");
        }
    }
});
