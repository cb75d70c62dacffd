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

use base64::Engine as _;
use real_server::{bench_result, bench_serve, check_bench_counts, text};
use recording_proxy::{Exchange, RecordingProxy};
use serde_json::{json, Value};
use server::{VllmServer, VISION_IMAGE_LIMIT, VISION_MODEL};

/// Prompt tokens of one image on the tiny vision model: (224 / 14)^2.
const TOKENS_PER_IMAGE: u64 = 256;
/// The buckets the runs draw from, (height, width) as vLLM's `--random-mm-bucket-config` says
/// them: one at the tower's own size, one larger (downscaled), one smaller (upscaled).
const BUCKETS: &str = "{(224, 224, 1): 0.3, (480, 640, 1): 0.4, (64, 96, 1): 0.3}";
const SIZES: [(u64, u64); 3] = [(224, 224), (640, 480), (96, 64)];

/// An image as it crossed the wire: its encoded bytes and its size from the JPEG's own header.
#[derive(Debug)]
struct WireImage {
    bytes: u64,
    width: u64,
    height: u64,
}

/// A chat request as sent and the prompt tokens the server answered with.
#[derive(Debug)]
struct WireRequest {
    text: String,
    images: Vec<WireImage>,
    prompt_tokens: u64,
}

/// The width and height of a baseline or progressive JPEG, from its SOF segment.
fn jpeg_size(b: &[u8]) -> (u64, u64) {
    assert_eq!(&b[..2], b"\xff\xd8", "not a JPEG");
    let mut at = 2;
    while at + 9 < b.len() {
        assert_eq!(b[at], 0xff, "no JPEG marker at byte {at}");
        let marker = b[at + 1];
        let len = u16::from_be_bytes([b[at + 2], b[at + 3]]) as usize;
        if (0xc0..=0xcf).contains(&marker) && ![0xc4, 0xc8, 0xcc].contains(&marker) {
            let h = u16::from_be_bytes([b[at + 5], b[at + 6]]);
            let w = u16::from_be_bytes([b[at + 7], b[at + 8]]);
            return (w as u64, h as u64);
        }
        at += 2 + len;
    }
    panic!("a JPEG without a frame header")
}

/// The chat request of an exchange, its images decoded from their data URLs, and the
/// `usage.prompt_tokens` of the stream's usage chunk.
fn wire_request(x: &Exchange) -> WireRequest {
    let body: Value = serde_json::from_slice(&x.body).unwrap();
    assert_eq!(x.status, 200, "{}", String::from_utf8_lossy(&x.answer));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{body}");
    let (mut text, mut images) = (String::new(), Vec::new());
    let content = &messages[0]["content"];
    match content {
        Value::String(s) => text.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                match p["type"].as_str() {
                    Some("text") => text.push_str(p["text"].as_str().unwrap()),
                    Some("image_url") => {
                        let url = p["image_url"]["url"].as_str().unwrap();
                        let b64 = url
                            .strip_prefix("data:image/jpeg;base64,")
                            .unwrap_or_else(|| panic!("not a JPEG data URL: {:.60}", url));
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(b64)
                            .unwrap();
                        let (width, height) = jpeg_size(&bytes);
                        images.push(WireImage {
                            bytes: bytes.len() as u64,
                            width,
                            height,
                        });
                    }
                    other => panic!("a part of type {other:?}: {p}"),
                }
            }
        }
        other => panic!("content {other}"),
    }
    let answer = String::from_utf8_lossy(&x.answer);
    let usage: Vec<u64> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.starts_with('{'))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["usage"]["prompt_tokens"].as_u64())
        .collect();
    assert_eq!(usage.len(), 1, "one usage chunk in {answer}");
    WireRequest {
        text,
        images,
        prompt_tokens: usage[0],
    }
}

/// The server's own count of a chat whose one user message is `text` alone.
fn text_chat_tokens(s: &VllmServer, text: &str) -> u64 {
    let (status, body) = s.post(
        "/tokenize",
        &json!({"model": VISION_MODEL, "messages": [{"role": "user", "content": text}]}),
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["count"]
        .as_u64()
        .unwrap()
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect()
}

/// `bench serve --dataset-name random-mm` through the recording proxy: 0 to 2 images a request
/// from three sizes. Every request succeeds; each one's prompt tokens, as the server counted
/// them, are its text's plus 256 per image on the wire; and the images llmspeed reports for each
/// request (count, encoded bytes, pixels) are those on the wire, with the server's count beside
/// them.
#[test]
fn random_mm_image_tokens_are_the_servers_count_less_the_text() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let proxy = RecordingProxy::start(([127, 0, 0, 1], s.port).into());
    let dir = tempfile::tempdir().unwrap();
    let n = 12;
    let prompt_tokens = || s.metric("vllm:prompt_tokens_total").unwrap();
    let before = prompt_tokens();
    let limits = format!("{{\"image\": {VISION_IMAGE_LIMIT}, \"video\": 0}}");
    let o = bench_serve(
        &proxy.url(),
        VISION_MODEL,
        dir.path(),
        &n.to_string(),
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
            "1",
            "--random-mm-num-mm-items-range-ratio",
            "1.0",
            "--random-mm-limit-mm-per-prompt",
            &limits,
            "--random-mm-bucket-config",
            BUCKETS,
            "--seed",
            "7",
        ],
    );
    let r = bench_result(dir.path(), &o);
    // Every request done, its usage counted, the server's counter grown by their sum.
    check_bench_counts(&o, &r, n, Some(32), 4, prompt_tokens() - before);

    let wire: Vec<WireRequest> = proxy
        .exchanges()
        .iter()
        .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
        .map(wire_request)
        .collect();
    assert_eq!(wire.len() as u64, n, "{}", text(&o));
    for w in &wire {
        let text_tokens = text_chat_tokens(&s, &w.text);
        assert_eq!(
            w.prompt_tokens,
            text_tokens + TOKENS_PER_IMAGE * w.images.len() as u64,
            "{} image(s) {:?} beside {text_tokens} text tokens",
            w.images.len(),
            w.images
        );
        assert!(w.images.len() as u64 <= VISION_IMAGE_LIMIT, "{w:?}");
        for i in &w.images {
            assert!(SIZES.contains(&(i.width, i.height)), "{i:?}");
        }
    }
    // Every count up to the limit was sent, and every size: the rule is seen at each.
    for k in 0..=VISION_IMAGE_LIMIT as usize {
        assert!(
            wire.iter().any(|w| w.images.len() == k),
            "no request of {k}"
        );
    }
    for size in SIZES {
        assert!(
            wire.iter()
                .flat_map(|w| &w.images)
                .any(|i| (i.width, i.height) == size),
            "no image of {size:?}"
        );
    }

    // Ours, request for request: (server prompt tokens, images, bytes, pixels) as the result
    // lists them equal the wire's, as multisets (the result's order is its own).
    let images = &r["llmspeed"]["images"];
    let ours_lists = [
        numbers(&r["input_lens"]),
        numbers(&images["images"]),
        numbers(&images["encoded_bytes"]),
        numbers(&images["pixels"]),
    ];
    let mut ours: Vec<[u64; 4]> = (0..n as usize)
        .map(|i| ours_lists.each_ref().map(|l| l[i]))
        .collect();
    let mut theirs: Vec<[u64; 4]> = wire
        .iter()
        .map(|w| {
            [
                w.prompt_tokens,
                w.images.len() as u64,
                w.images.iter().map(|i| i.bytes).sum(),
                w.images.iter().map(|i| i.width * i.height).sum(),
            ]
        })
        .collect();
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(
        ours, theirs,
        "ours (prompt tokens, images, bytes, pixels) vs the wire's"
    );
    let total = |k: usize| theirs.iter().map(|t| t[k]).sum::<u64>();
    assert_eq!(images["total_images"], total(1), "{images}");
    assert_eq!(images["total_encoded_bytes"], total(2), "{images}");
    assert_eq!(images["total_pixels"], total(3), "{images}");
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
