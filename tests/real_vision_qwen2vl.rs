//! llmspeed's image workloads against a real vision-language engine whose image token counts
//! follow the image's size: `vllm serve` (the CPU build of `scripts/vllm-server.sh`) on the
//! script's tiny random-weight Qwen2-VL-style model (`scripts/tiny_qwen2vl.py`).
//!
//! Qwen2-VL resizes each image to multiples of 28 pixels (patches of 14 merged 2 × 2): each side
//! rounded to the nearest multiple, the area then brought within [56², 28² × 1,280] keeping the
//! aspect; the image is one token per 28 × 28, between a start and an end token. So the server's
//! count of a request's prompt tokens checks the size of every image it decoded, which
//! `tests/real_vision.rs`'s fixed 256 per image cannot. The rule is worked out here from
//! Qwen2-VL's published resize, independently of llmspeed; the simulated server's
//! `--image-tokens qwen2vl` is held to it on every size sent.

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

use llmspeed::mock::image::ImageTokens;
use real_server::{llmspeed, text};
use recording_proxy::RecordingProxy;
use serde_json::Value;
use server::VISION_IMAGE_LIMIT;
use std::time::Duration;
use wire::{check_run, text_chat_tokens, wire_request, Run};

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
    // The server's counts are the rule's (check_run), and the simulated server's
    // `--image-tokens qwen2vl` counts as the rule does for every size sent.
    check_run(&s, &run, |w, h| {
        let mock = ImageTokens::Qwen2Vl.count(w as u32, h as u32);
        assert_eq!(
            mock,
            qwen2vl_tokens(w, h),
            "the mock's qwen2vl at {w} x {h}"
        );
        mock
    });
}

/// `bench sglang --dataset-name image` (SGLang's draw: 1 or 2 images a request, random sizes
/// from 20 × 16 to 700 × 600) on the chat endpoint through the recording proxy: its record's
/// vision tokens, per request (`llmspeed.images.vision_tokens`, the server's prompt tokens less
/// the text's) and in SGLang's `total_input_vision_tokens`, are [`qwen2vl_tokens`] of the sizes
/// it says it sent; those sizes are the wire's; and each wire request's prompt tokens are its
/// text's plus the rule's for its images.
#[test]
fn bench_sglang_image_vision_tokens_are_the_servers_count() {
    let Some(s) = server::shared_qwen2vl() else {
        return;
    };
    let proxy = RecordingProxy::start(([127, 0, 0, 1], s.port).into());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let n = 8;
    let o = llmspeed(
        &[
            "bench",
            "sglang",
            "--base-url",
            &proxy.url(),
            "--model",
            s.name,
            "--backend",
            "vllm-chat",
            "--dataset-name",
            "image",
            "--num-prompts",
            &n.to_string(),
            "--random-input-len",
            "32",
            "--random-output-len",
            "4",
            "--image-count",
            &VISION_IMAGE_LIMIT.to_string(),
            "--random-image-count",
            "--image-resolution",
            "random:20x16-700x600",
            "--image-format",
            "jpeg",
            "--seed",
            "9",
            "--max-concurrency",
            "2",
            "--warmup-requests",
            "0",
            "--extra-request-body",
            r#"{"stream_options": {"include_usage": true}}"#,
            "--output-file",
            file.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "{}", text(&o));
    // SGLang's records write Python's NaN and Infinity where JSON has no number.
    let record = std::fs::read_to_string(&file)
        .unwrap()
        .replace("Infinity", "null")
        .replace("NaN", "null");
    let rec: Value = serde_json::from_str(record.lines().last().unwrap()).unwrap();
    assert_eq!(rec["completed"], n, "{}", text(&o));
    let images = &rec["llmspeed"]["images"];
    assert_eq!(images["vision_tokens_counted_by"], "server_prompt_tokens");
    let sizes: Vec<Vec<(u64, u64)>> = images["sizes_wh"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|wh| (wh[0].as_u64().unwrap(), wh[1].as_u64().unwrap()))
                .collect()
        })
        .collect();
    assert_eq!(sizes.len() as u64, n, "{images}");
    let vision = wire::numbers(&images["vision_tokens"]);
    let mut total = 0;
    for (req, (sizes, tokens)) in sizes.iter().zip(&vision).enumerate() {
        let want: u64 = sizes.iter().map(|&(w, h)| qwen2vl_tokens(w, h)).sum();
        assert_eq!(*tokens, want, "request {req}: {sizes:?}");
        total += want;
    }
    assert_eq!(rec["total_input_vision_tokens"], total, "{images}");
    assert!(
        sizes.iter().any(|s| s.len() as u64 == VISION_IMAGE_LIMIT),
        "{sizes:?}"
    );

    // The wire: the same images, each request counted by the server as the rule says.
    let mut on_wire: Vec<Vec<(u64, u64)>> = Vec::new();
    for x in proxy
        .exchanges()
        .iter()
        .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
    {
        let w = wire_request(x);
        let wh: Vec<(u64, u64)> = w.images.iter().map(|i| (i.width, i.height)).collect();
        let rule: u64 = wh.iter().map(|&(w, h)| qwen2vl_tokens(w, h)).sum();
        assert_eq!(
            w.prompt_tokens,
            text_chat_tokens(&s, &w.text) + rule,
            "{wh:?}"
        );
        on_wire.push(wh);
    }
    let mut said = sizes.clone();
    said.sort_unstable();
    on_wire.sort_unstable();
    assert_eq!(said, on_wire, "the sizes the record says vs the wire's");
}
