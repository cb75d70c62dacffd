//! What the vision suites (`tests/real_vision*.rs`) share: a `bench serve --dataset-name
//! random-mm` run through a recording proxy in front of a real vision-language server, each
//! request read off the wire (its text, its JPEGs' bytes and sizes from their own headers, the
//! server's `usage.prompt_tokens`), and the check of the server's count against the text's own
//! count plus the model's rule per image, and of llmspeed's result against the wire.
#![allow(dead_code)]

use crate::real_server::{bench_result, bench_serve, check_bench_counts, text};
use crate::recording_proxy::{Exchange, RecordingProxy};
use crate::server::VllmServer;
use base64::Engine as _;
use serde_json::{json, Value};

/// An image as it crossed the wire: its encoded bytes and its size from the JPEG's own header.
#[derive(Debug)]
pub struct WireImage {
    pub bytes: u64,
    pub width: u64,
    pub height: u64,
}

/// A chat request as sent and the prompt tokens the server answered with.
#[derive(Debug)]
pub struct WireRequest {
    pub text: String,
    pub images: Vec<WireImage>,
    pub prompt_tokens: u64,
}

/// The width and height of a baseline or progressive JPEG, from its SOF segment.
pub fn jpeg_size(b: &[u8]) -> (u64, u64) {
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
pub fn wire_request(x: &Exchange) -> WireRequest {
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
pub fn text_chat_tokens(s: &VllmServer, text: &str) -> u64 {
    let (status, body) = s.post(
        "/tokenize",
        &json!({"model": s.name, "messages": [{"role": "user", "content": text}]}),
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["count"]
        .as_u64()
        .unwrap()
}

pub fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect()
}

/// A random-mm run's settings: `n` requests of `input_len` text tokens and 0 to `limit` images
/// (`--random-mm-base-items-per-request` half the limit, at least 1, range ratio 1) from
/// `buckets`, vLLM's `--random-mm-bucket-config`, whose images are `sizes` (width, height).
pub struct Run<'a> {
    pub n: u64,
    pub input_len: u64,
    pub limit: u64,
    pub buckets: &'a str,
    pub sizes: &'a [(u64, u64)],
    pub seed: &'a str,
}

/// `bench serve --dataset-name random-mm` through a recording proxy in front of `s`. Every
/// request succeeds; each one's prompt tokens, as the server counted them, are its text's (the
/// server's `/tokenize` of the same chat without images) plus `image_tokens(width, height)` for
/// each image on the wire; every image count up to the limit and every size is sent; and the
/// images llmspeed reports for each request (count, encoded bytes, pixels) are those on the
/// wire, with the server's count beside them. Returns the wire's requests.
pub fn check_run(
    s: &VllmServer,
    run: &Run,
    image_tokens: impl Fn(u64, u64) -> u64,
) -> Vec<WireRequest> {
    let proxy = RecordingProxy::start(([127, 0, 0, 1], s.port).into());
    let dir = tempfile::tempdir().unwrap();
    let n = run.n;
    let prompt_tokens = || s.metric("vllm:prompt_tokens_total").unwrap();
    let before = prompt_tokens();
    let limits = format!("{{\"image\": {}, \"video\": 0}}", run.limit);
    let (input_len, base) = (
        run.input_len.to_string(),
        (run.limit / 2).max(1).to_string(),
    );
    let o = bench_serve(
        &proxy.url(),
        s.name,
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
            &input_len,
            "--random-output-len",
            "4",
            "--random-mm-base-items-per-request",
            &base,
            "--random-mm-num-mm-items-range-ratio",
            "1.0",
            "--random-mm-limit-mm-per-prompt",
            &limits,
            "--random-mm-bucket-config",
            run.buckets,
            "--seed",
            run.seed,
        ],
    );
    let r = bench_result(dir.path(), &o);
    // Every request done, its usage counted, the server's counter grown by their sum.
    check_bench_counts(&o, &r, n, Some(run.input_len), 4, prompt_tokens() - before);

    let wire: Vec<WireRequest> = proxy
        .exchanges()
        .iter()
        .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
        .map(wire_request)
        .collect();
    assert_eq!(wire.len() as u64, n, "{}", text(&o));
    for w in &wire {
        let text_tokens = text_chat_tokens(s, &w.text);
        let images: u64 = w
            .images
            .iter()
            .map(|i| image_tokens(i.width, i.height))
            .sum();
        assert_eq!(
            w.prompt_tokens,
            text_tokens + images,
            "{} image(s) {:?} beside {text_tokens} text tokens",
            w.images.len(),
            w.images
        );
        assert!(w.images.len() as u64 <= run.limit, "{w:?}");
        for i in &w.images {
            assert!(run.sizes.contains(&(i.width, i.height)), "{i:?}");
        }
    }
    // Every count up to the limit was sent, and every size: the rule is seen at each.
    for k in 0..=run.limit as usize {
        assert!(
            wire.iter().any(|w| w.images.len() == k),
            "no request of {k}"
        );
    }
    for size in run.sizes {
        assert!(
            wire.iter()
                .flat_map(|w| &w.images)
                .any(|i| (i.width, i.height) == *size),
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
    wire
}
