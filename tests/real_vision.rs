//! llmspeed's image workloads against a real vision-language engine: `vllm serve` (the CPU
//! build of `scripts/vllm-server.sh`) on the script's tiny random-weight LLaVA-style model
//! (`scripts/tiny_vlm.py`), 127.0.0.1 on a kernel-chosen port, at most
//! [`VISION_IMAGE_LIMIT`] images a prompt.
//!
//! What is proven is the image accounting: every image counts (224 / 14)^2 = 256 prompt tokens
//! on this model whatever its size, so for each request the server's own `usage.prompt_tokens`
//! is the tokens of its text alone (the server's `/tokenize` of the same chat without images)
//! plus 256 per image. Both sides are read off the wire by a recording proxy between llmspeed
//! and the server (the request as sent, the answer as streamed), and the images llmspeed says it
//! sent (`llmspeed.images` of the result) must be the wire's, request for request.

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

use real_server::{bench_result, bench_serve, text};
use server::{VISION_IMAGE_LIMIT, VISION_MODEL};
use wire::{check_run, Run};

/// Prompt tokens of one image on the tiny vision model: (224 / 14)^2.
const TOKENS_PER_IMAGE: u64 = 256;
/// The buckets the runs draw from, (height, width) as vLLM's `--random-mm-bucket-config` says
/// them: one at the tower's own size, one larger (downscaled), one smaller (upscaled).
const BUCKETS: &str = "{(224, 224, 1): 0.3, (480, 640, 1): 0.4, (64, 96, 1): 0.3}";
const SIZES: [(u64, u64); 3] = [(224, 224), (640, 480), (96, 64)];

/// `bench serve --dataset-name random-mm` through the recording proxy: 0 to 2 images a request
/// of three sizes, each 256 prompt tokens as the server counts them ([`wire::check_run`]).
#[test]
fn random_mm_image_tokens_are_the_servers_count_less_the_text() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let run = Run {
        n: 12,
        input_len: 32,
        limit: VISION_IMAGE_LIMIT,
        buckets: BUCKETS,
        sizes: &SIZES,
        seed: "7",
    };
    check_run(&s, &run, |_, _| TOKENS_PER_IMAGE);
}

/// Requests of more images than the server takes: each is refused with HTTP 400, and the
/// server's own message is printed once, classified as an HTTP status failure, not once a
/// request.
#[test]
fn more_images_than_the_server_allows_is_its_400_shown_once() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let over = VISION_IMAGE_LIMIT + 1;
    let limits = format!("{{\"image\": {over}, \"video\": 0}}");
    let o = bench_serve(
        &s.url,
        VISION_MODEL,
        dir.path(),
        "6",
        "2",
        &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "random-mm",
            "--random-input-len",
            "32",
            "--random-output-len",
            "4",
            "--random-mm-base-items-per-request",
            &over.to_string(),
            "--random-mm-num-mm-items-range-ratio",
            "0",
            "--random-mm-limit-mm-per-prompt",
            &limits,
            "--random-mm-bucket-config",
            "{(64, 96, 1): 1.0}",
        ],
    );
    let all = text(&o);
    assert!(!o.status.success(), "{all}");
    let r = bench_result(dir.path(), &o);
    assert_eq!(r["completed"], 0, "{all}");
    assert_eq!(r["failed"], 6, "{all}");
    // vLLM's own sentence, as it words it for this limit.
    let message = format!("At most {VISION_IMAGE_LIMIT} image(s) may be provided in one prompt");
    assert_eq!(all.matches(&message).count(), 1, "{all}");
    assert!(
        all.contains("Failed requests by kind: http_status 6"),
        "{all}"
    );
    assert!(all.contains("(HTTP 400)"), "{all}");
}
