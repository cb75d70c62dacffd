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
#[path = "conformance/reference.rs"]
mod reference;
#[path = "support/relay.rs"]
mod relay;
#[path = "real_vllm/server.rs"]
mod server;
#[path = "real_vision/wire.rs"]
mod wire;

use real_server::{bench_result, bench_serve, matrix, text};
use recording_proxy::RecordingProxy;
use server::{VISION_IMAGE_LIMIT, VISION_MODEL};
use wire::{check_run, text_chat_tokens, wire_request, Run, WireRequest};

/// Prompt tokens of one image on the tiny vision model: (224 / 14)^2.
const TOKENS_PER_IMAGE: u64 = 256;
/// The buckets the runs draw from, (height, width) as vLLM's `--random-mm-bucket-config` says
/// them: one at the tower's own size, one larger (downscaled), one smaller (upscaled).
const BUCKETS: &str = "{(224, 224, 1): 0.3, (480, 640, 1): 0.4, (64, 96, 1): 0.3}";
/// The tests here share one vision server: they run side by side (read), but the matrix's
/// decode cell must have the server to itself (write), or another test's requests wait in its
/// queue and the cell is rightly Queued.
static SHARED: std::sync::RwLock<()> = std::sync::RwLock::new(());

const SIZES: [(u64, u64); 3] = [(224, 224), (640, 480), (96, 64)];

/// `bench serve --dataset-name random-mm` through the recording proxy: 0 to 2 images a request
/// of three sizes, each 256 prompt tokens as the server counts them ([`wire::check_run`]).
#[test]
fn random_mm_image_tokens_are_the_servers_count_less_the_text() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let _shared = SHARED.read().unwrap_or_else(|e| e.into_inner());
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
    let _shared = SHARED.read().unwrap_or_else(|e| e.into_inner());
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

/// vLLM 0.33's own client (`vllm bench serve`, the reference of `tests/conformance_*.rs`) and
/// ours, with the same random-mm flags and seed, each through a recording proxy to the real
/// model: the same requests carry the same images (count and sizes per request, read from the
/// JPEGs on the wire; the pixels are each tool's own noise), and the server counts their images
/// the same (prompt tokens less the text's). Each tool's text is its own (vLLM decodes its ids
/// locally, llmspeed fits them through the server), so the text is compared to nothing.
#[test]
fn vllms_own_client_sends_the_same_images_and_the_server_counts_them_the_same() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let _shared = SHARED.read().unwrap_or_else(|e| e.into_inner());
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let n = 8;
    let limits = format!("{{\"image\": {VISION_IMAGE_LIMIT}, \"video\": 0}}");
    let flags = [
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
        "5",
    ];
    let backend = ([127, 0, 0, 1], s.port).into();
    let (ours_proxy, theirs_proxy) = (
        RecordingProxy::start(backend),
        RecordingProxy::start(backend),
    );
    let dir = tempfile::tempdir().unwrap();
    let o = bench_serve(
        &ours_proxy.url(),
        VISION_MODEL,
        dir.path(),
        &n.to_string(),
        "2",
        &flags,
    );
    assert!(o.status.success(), "{}", text(&o));
    let theirs_dir = tempfile::tempdir().unwrap();
    let out = reference::VLLM
        .command(&python)
        .args(["--base-url", &theirs_proxy.url(), "--model", VISION_MODEL])
        .arg("--tokenizer")
        .arg(&s.model_dir)
        .args(["--num-prompts", &n.to_string(), "--max-concurrency", "2"])
        .args(["--ignore-eos", "--save-result", "--save-detailed"])
        .arg("--result-dir")
        .arg(theirs_dir.path())
        .args(["--result-filename", "r.json"])
        .args(flags)
        .output()
        .expect("run vllm bench serve");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    let theirs_result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(theirs_dir.path().join("r.json")).unwrap())
            .unwrap();
    assert_eq!(theirs_result["completed"], n, "{said}");

    // Each request's images (sizes, in order) and their tokens as the server counted them.
    let images = |proxy: &RecordingProxy| -> Vec<(Vec<(u64, u64)>, u64)> {
        let chats: Vec<_> = proxy
            .exchanges()
            .into_iter()
            .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
            .collect();
        // vLLM's initial test request is its first prompt once more: left out.
        assert!(chats.len() >= n, "{} chat requests", chats.len());
        let extra = chats.len() - n;
        for x in &chats[..extra] {
            assert_eq!(
                x.body, chats[extra].body,
                "an extra request that is not the first's"
            );
        }
        let mut v: Vec<_> = chats[extra..]
            .iter()
            .map(wire_request)
            .map(|w: WireRequest| {
                let sizes = w.images.iter().map(|i| (i.width, i.height)).collect();
                (sizes, w.prompt_tokens - text_chat_tokens(&s, &w.text))
            })
            .collect();
        v.sort_unstable();
        v
    };
    let (ours, theirs) = (images(&ours_proxy), images(&theirs_proxy));
    assert_eq!(
        ours, theirs,
        "(image sizes, image tokens) per request: ours vs vLLM's"
    );
    for (sizes, tokens) in &ours {
        assert_eq!(*tokens, TOKENS_PER_IMAGE * sizes.len() as u64, "{sizes:?}");
    }
    assert!(
        ours.iter()
            .any(|(s, _)| s.len() as u64 == VISION_IMAGE_LIMIT),
        "{ours:?}"
    );
}

/// `bench serve --dataset-name hf` with a VisionArena-shaped local file (`--hf-name
/// lmarena-ai/VisionArena-Chat`) whose rows hold image files PIL wrote in the formats datasets
/// hold (`tests/data/images`: JPEG baseline, progressive, grey and CMYK; PNG RGB, RGBA and
/// palette; WebP lossy and lossless; GIF; BMP), sent as their own bytes: the real server takes
/// every one (status 200), the bytes on the wire are the file's under its format's MIME type,
/// and the server counts each image as the model's 256 tokens (its `usage.prompt_tokens` less
/// its count of the text alone), as for the JPEGs vLLM's client would send instead.
#[test]
fn hf_vision_rows_send_their_own_image_files_and_the_server_counts_them() {
    use base64::Engine as _;
    let Some(s) = server::shared_vision() else {
        return;
    };
    let _shared = SHARED.read().unwrap_or_else(|e| e.into_inner());
    let files = [
        ("rgb.jpg", "jpeg"),
        ("progressive.jpg", "jpeg"),
        ("gray.jpg", "jpeg"),
        ("cmyk.jpg", "jpeg"),
        ("rgb.png", "png"),
        ("rgba.png", "png"),
        ("palette.png", "png"),
        ("lossy.webp", "webp"),
        ("lossless.webp", "webp"),
        ("static.gif", "gif"),
        ("rgb.bmp", "bmp"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let images = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/images");
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut lines = String::new();
    let mut want = Vec::new();
    for (i, (f, _)) in files.iter().enumerate() {
        let bytes = std::fs::read(images.join(f)).unwrap();
        let row = serde_json::json!({
            "conversation": [[{"role": "user", "content": format!("what is in picture {i}?")}]],
            "images": [{"bytes": b64.encode(&bytes), "path": f}],
        });
        lines += &format!("{row}\n");
        want.push(bytes);
    }
    let data = dir.path().join("va.jsonl");
    std::fs::write(&data, lines).unwrap();
    let proxy = RecordingProxy::start(([127, 0, 0, 1], s.port).into());
    let n = files.len().to_string();
    let o = bench_serve(
        &proxy.url(),
        VISION_MODEL,
        dir.path(),
        &n,
        "2",
        &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            data.to_str().unwrap(),
            "--hf-name",
            "lmarena-ai/VisionArena-Chat",
            "--disable-shuffle",
            "--hf-output-len",
            "4",
        ],
    );
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    let r = bench_result(dir.path(), &o);
    assert_eq!(
        (r["completed"].as_u64(), r["failed"].as_u64()),
        (Some(files.len() as u64), Some(0)),
        "{all}"
    );
    let mut seen = vec![false; files.len()];
    for x in proxy
        .exchanges()
        .iter()
        .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
    {
        assert_eq!(x.status, 200, "{}", String::from_utf8_lossy(&x.answer));
        let body: serde_json::Value = serde_json::from_slice(&x.body).unwrap();
        let parts = body["messages"][0]["content"].as_array().unwrap();
        let text = parts[0]["text"].as_str().unwrap();
        let i: usize = text
            .trim_start_matches("what is in picture ")
            .trim_end_matches('?')
            .parse()
            .unwrap();
        assert_eq!(parts.len(), 2, "one image: {body}");
        let url = parts[1]["image_url"]["url"].as_str().unwrap();
        let (head, data) = url.split_once(";base64,").unwrap();
        assert_eq!(head, format!("data:image/{}", files[i].1), "{}", files[i].0);
        assert_eq!(
            b64.decode(data).unwrap(),
            want[i],
            "{}: the file's own bytes",
            files[i].0
        );
        let answer = String::from_utf8_lossy(&x.answer);
        let prompt_tokens = answer
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .find_map(|v| v["usage"]["prompt_tokens"].as_u64())
            .expect("a usage chunk");
        assert_eq!(
            prompt_tokens - wire::text_chat_tokens(&s, text),
            TOKENS_PER_IMAGE,
            "{}",
            files[i].0
        );
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s), "{seen:?}");
}

/// The chat exchanges of a matrix run that carried images, each as (images, the server's
/// `usage.prompt_tokens`, the messages with the image parts taken out); streamed answers
/// (prefill samples, decode requests) and plain ones (the image-token probe) alike.
fn image_exchanges(proxy: &RecordingProxy) -> Vec<(u64, u64, serde_json::Value)> {
    use serde_json::Value;
    proxy
        .exchanges()
        .into_iter()
        .filter(|x| x.method == "POST" && x.path == "/v1/chat/completions")
        .filter_map(|x| {
            let answer = String::from_utf8_lossy(&x.answer).to_string();
            assert_eq!(x.status, 200, "every request succeeds: {answer}");
            let mut body: Value = serde_json::from_slice(&x.body).unwrap();
            let mut images = 0;
            for m in body["messages"].as_array_mut().unwrap() {
                if let Some(parts) = m["content"].as_array_mut() {
                    let before = parts.len();
                    parts.retain(|p| p["type"] != "image_url");
                    images += (before - parts.len()) as u64;
                }
            }
            // A request cut at its cell's window end has no usage: not one to account.
            let usage = answer
                .lines()
                .rev()
                .map(|l| l.strip_prefix("data: ").unwrap_or(l))
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .find_map(|v| v["usage"]["prompt_tokens"].as_u64())?;
            (images > 0).then(|| (images, usage, body["messages"].clone()))
        })
        .collect()
}

/// `matrix --chat --images 2 --image-size 224x224` through the recording proxy: every request
/// succeeds, and for every request with images the server's `usage.prompt_tokens` less its
/// `/tokenize` of the same messages without the images is the matrix's image tokens (2 × 256);
/// the prefill row's measured size is that plus its text, within 1% under the context.
/// A small grid: one 1,024-token context, 2 prefill samples, one 2 s cell at concurrency 1.
#[test]
fn a_matrix_with_images_counts_them_as_the_server_does() {
    let Some(s) = server::shared_vision() else {
        return;
    };
    let _alone = SHARED.write().unwrap_or_else(|e| e.into_inner());
    let proxy = RecordingProxy::start(([127, 0, 0, 1], s.port).into());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (o, r) = matrix(
        &proxy.url(),
        &out,
        &[
            "--model",
            VISION_MODEL,
            "--chat",
            "--images",
            "2",
            "--image-size",
            "224x224",
            "--contexts",
            "1024",
            "--prefill-contexts",
            "1024",
            "--concurrency",
            "1",
            "--prefill-samples",
            "2",
            "--max-tokens",
            "16",
            "--no-prompt-cache",
            "--no-progress",
        ],
        std::time::Duration::from_secs(240),
    );
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    let per_prompt = 2 * TOKENS_PER_IMAGE;
    assert_eq!(
        r["metadata"]["settings"]["images"]["image_tokens_per_prompt"], per_prompt,
        "{all}"
    );
    let row = &r["prefill"][0];
    assert_eq!(row["status"]["kind"], "valid", "{row}");
    assert_eq!(row["image_tokens"], per_prompt);
    let measured = row["server_prompt_tokens"].as_u64().unwrap();
    assert!(
        measured <= 1024 && (1024 - measured) * 100 <= 1024,
        "{measured}"
    );
    let cell = &r["decode"][0];
    assert_eq!(cell["status"]["kind"], "valid", "{cell}");
    assert!(cell["errors"].as_array().unwrap().is_empty(), "{cell}");
    let seen = image_exchanges(&proxy);
    // The probe's, the two samples', the warm-up's and the cell's at least.
    assert!(seen.len() >= 4, "{} requests with images", seen.len());
    for (images, usage, text_only) in &seen {
        assert_eq!(*images, 2);
        let (status, body) = s.post(
            "/tokenize",
            &serde_json::json!({"model": s.name, "messages": text_only}),
        );
        assert_eq!(status, 200, "{body}");
        let text_tokens = serde_json::from_str::<serde_json::Value>(&body).unwrap()["count"]
            .as_u64()
            .unwrap();
        assert_eq!(usage - text_tokens, per_prompt, "{usage} - {text_tokens}");
    }
}
