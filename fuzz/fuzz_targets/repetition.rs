//! The repetition detector never panics on arbitrary bytes (invalid UTF-8, sequences cut
//! anywhere), and any split of the input gives the same verdict as the whole, as does a detector
//! reused after `reset`.
//!
//! Input layout: bytes 0..3 choose a small config (so loops are reachable in short inputs), the
//! rest is `split_input`'s layout (read sizes, then the text).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::analysis::repetition::{Loop, RepetitionConfig, RepetitionDetector};
use llmspeed_fuzz::{reads, split_input};

fn verdict(det: &mut RepetitionDetector, pieces: &[&[u8]]) -> (Option<Loop>, u64) {
    for p in pieces {
        det.push(p);
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
});
