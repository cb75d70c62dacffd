//! llmspeed's image workloads against a real vision-language engine whose image token counts
//! follow the image's size: `vllm serve` (the CPU build of `scripts/vllm-server.sh`) on the
//! script's tiny random-weight Qwen2-VL-style model (`scripts/tiny_qwen2vl.py`).
//!
//! Qwen2-VL resizes each image to multiples of 28 pixels (patches of 14 merged 2 × 2): each side
//! rounded to the nearest multiple, the area then brought within [56², 28² × 1,280] keeping the
//! aspect; the image is one token per 28 × 28, between a start and an end token. So the server's
//! count of a request's prompt tokens checks the size of every image it decoded, which
//! `tests/real_vision.rs`'s fixed 256 per image cannot. The rule is worked out here from
//! Qwen2-VL's published resize, independently of llmspeed (which has no such rule).

#[path = "support/real_server.rs"]
mod real_server;
#[path = "support/recording_proxy.rs"]
mod recording_proxy;
#[path = "support/relay.rs"]
mod relay;
#[path = "real_vllm/server.rs"]
mod server;
#[path = "real_vision/wire.rs"]
mod wire;

use server::VISION_IMAGE_LIMIT;
use wire::{check_run, Run};

/// Pixels per merged token side: patch 14 × merge 2.
const FACTOR: f64 = 28.0;
const MIN_PIXELS: f64 = 56.0 * 56.0;
const MAX_PIXELS: f64 = 28.0 * 28.0 * 1280.0;

/// Qwen2-VL's prompt tokens for a `width` × `height` image: its `smart_resize` (Python's
/// `round`, which rounds halves to even), one token per 28 × 28 of the result, plus
/// `<|vision_start|>` and `<|vision_end|>`.
fn qwen2vl_tokens(width: u64, height: u64) -> u64 {
    let (h, w) = (height as f64, width as f64);
    let round = |x: f64| (x / FACTOR).round_ties_even().max(1.0) * FACTOR;
    let (mut hb, mut wb) = (round(h), round(w));
    if hb * wb > MAX_PIXELS {
        let beta = (h * w / MAX_PIXELS).sqrt();
        hb = ((h / beta / FACTOR).floor() * FACTOR).max(FACTOR);
        wb = ((w / beta / FACTOR).floor() * FACTOR).max(FACTOR);
    } else if hb * wb < MIN_PIXELS {
        let beta = (MIN_PIXELS / (h * w)).sqrt();
        hb = (h * beta / FACTOR).ceil() * FACTOR;
        wb = (w * beta / FACTOR).ceil() * FACTOR;
    }
    (hb / FACTOR) as u64 * (wb / FACTOR) as u64 + 2
}

/// The rule, worked by hand for the sizes below: 640 × 480 rounds to 644 × 476 (23 × 17 = 391;
/// a ceiling rule would say 23 × 18 = 414); 96 × 64 to 84 × 56 (3 × 2); 20 × 20 to 28 × 28,
/// under the minimum, so 56 × 56 (2 × 2); 2000 × 1500 over the maximum, scaled by
/// sqrt(3,000,000 / 1,003,520) = 1.729 and floored to 1148 × 840 (41 × 30 = 1,230).
#[test]
fn the_rule_by_hand() {
    assert_eq!(qwen2vl_tokens(640, 480), 391 + 2);
    assert_eq!(qwen2vl_tokens(96, 64), 6 + 2);
    assert_eq!(qwen2vl_tokens(20, 20), 4 + 2);
    assert_eq!(qwen2vl_tokens(2000, 1500), 1230 + 2);
    assert_eq!(qwen2vl_tokens(224, 224), 64 + 2);
}

/// `bench serve --dataset-name random-mm` of 0 to 2 images of four sizes (rounded down and up,
/// under the minimum area, over the maximum) through the recording proxy: each request's prompt
/// tokens, as the server counts them, are its text's plus [`qwen2vl_tokens`] of each image on
/// the wire, and llmspeed's per-request image figures are the wire's ([`wire::check_run`]).
#[test]
fn random_mm_image_tokens_follow_each_images_size() {
    let Some(s) = server::shared_qwen2vl() else {
        return;
    };
    let run = Run {
        n: 16,
        input_len: 32,
        limit: VISION_IMAGE_LIMIT,
        buckets: "{(480, 640, 1): 0.3, (64, 96, 1): 0.25, (20, 20, 1): 0.2, (1500, 2000, 1): 0.25}",
        sizes: &[(640, 480), (96, 64), (20, 20), (2000, 1500)],
        seed: "11",
    };
    check_run(&s, &run, qwen2vl_tokens);
}
