//! `bench serve --dataset-name custom_image` held against vLLM 0.33's own `CustomImageDataset`:
//! a JSONL file (both of vLLM's line forms: `prompt` + `image_files`, and interleaved `content`
//! parts with `image` and `image_url` references, extra `image_url` keys, a data URL and a web
//! URL) and its PNG and JPEG images are written, vLLM's own argument parser and `get_samples`
//! build its samples (`tests/custom_image/vllm_custom_image.py` on the reference Python), and
//! llmspeed builds its samples from the same file and command line. Compared exactly, request by
//! request in order: the chat content sent (text parts to the character, parts in order), each
//! image's URL where vLLM sends a reference (`file://` + path, web URLs, data URLs) and its
//! pixel size (PIL's on vLLM's side; llmspeed's header reader and the mock's on ours), the
//! number of images, the input length (both count words) and the output length; with
//! `--custom-ensure-client-side-data` each image's MIME type and pixel size (vLLM re-encodes
//! as PNG, llmspeed sends the file's own bytes: the bytes differ by design).
//!
//! End to end on the simulated server: each chat body carries the text, then the images, whose
//! sizes the server reads from their headers. A missing image file stops the run before any
//! request is sent, naming the line.
//!
//! Without the reference Python (`LLMSPEED_VLLM_REF_PYTHON`) the comparison says NOT RUN, or
//! fails under `CI=true`.

#[path = "support/mock.rs"]
mod mock_server;
#[path = "conformance/reference.rs"]
mod reference;

use clap::Parser;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::workload::datasets::{self, PromptSource, Sample};
use llmspeed::workload::image::{data_url, encode_jpeg, encode_png};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// Writes `w` × `h` images (PNG or JPEG) into `dir`; their paths.
fn images(dir: &Path) -> Vec<String> {
    let sizes = [
        (32, 24, "png"),
        (17, 40, "jpg"),
        (64, 64, "png"),
        (5, 9, "jpg"),
    ];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &(w, h, ext))| {
            let rgb: Vec<u8> = (0..w * h * 3)
                .map(|k| (k * 7 + i as u32 * 31) as u8)
                .collect();
            let bytes = match ext {
                "png" => encode_png(w, h, &rgb).unwrap(),
                _ => encode_jpeg(w, h, &rgb).unwrap(),
            };
            let p = dir.join(format!("img{i}.{ext}"));
            std::fs::write(&p, bytes).unwrap();
            p.display().to_string()
        })
        .collect()
}

/// The JSONL file: both forms, 9 lines, blank lines between some.
fn jsonl(dir: &Path, img: &[String], web: bool) -> String {
    let data = data_url("image/png", &encode_png(3, 4, &[200; 3 * 4 * 3]).unwrap());
    let mut lines = vec![
        json!({"prompt": "How many red blocks?", "image_files": [img[0]]}),
        json!({"prompt": "Compare  the\ttwo\nimages.", "image_files": [img[1], img[2]]}),
        json!({"prompt": "Three: ünïcode {braces} \"quotes\"", "image_files": [img[3], img[0], img[1]]}),
        json!({"content": [
            {"type": "text", "text": "Compare these images: "},
            {"type": "image", "image": img[2]},
            {"type": "text", "text": " and "},
            {"type": "image_url", "image_url": {"url": format!("file://{}", img[3]), "detail": "low"}},
        ]}),
        json!({"prompt": "A data URL", "image_files": [data]}),
        json!({"content": [{"type": "image_url", "image_url": img[1]}, {"type": "text", "text": "after the image"}]}),
        json!({"prompt": "one two three four", "image_files": [img[2]], "extra": 1}),
        json!({"prompt": "x", "image_files": [img[0], img[0]]}),
    ];
    if web {
        lines.push(json!({"prompt": "on the web", "image_files": ["https://example.com/a.jpg"]}));
    }
    let text: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{l}\n{}", if i % 3 == 1 { "\n" } else { "" }))
        .collect();
    let p = dir.join(if web { "web.jsonl" } else { "local.jsonl" });
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A URL's size as the simulated server's header reader reads it (a `file://` URL: the file's).
fn size_of(url: &str) -> Option<Value> {
    let data;
    let u = match url.strip_prefix("file://") {
        Some(path) => {
            data = data_url("image/x", &std::fs::read(path).unwrap());
            data.as_str()
        }
        None if url.starts_with("data:") => url,
        None => return None,
    };
    let s = llmspeed::mock::image::url_size(u).unwrap();
    Some(json!([s.width, s.height]))
}

/// An image part as the Python side describes it: the URL (a data URL's head alone) and size.
fn described(url: &str, extra: &serde_json::Map<String, Value>) -> Value {
    let mut u = extra.clone();
    let shown = match url.starts_with("data:") {
        true => url.split_once(',').unwrap().0,
        false => url,
    };
    u.insert("url".into(), json!(shown));
    u.insert("size".into(), size_of(url).unwrap_or(Value::Null));
    json!({"type": "image_url", "image_url": u})
}

/// llmspeed's sample as `{content, prompt_len, output_len}` (the chat content it sends).
fn ours(s: &Sample) -> Value {
    let content: Vec<Value> = match &s.prompt {
        PromptSource::Multimodal { text, images } => {
            let PromptSource::Text(t) = &**text else {
                panic!("text")
            };
            let mut v = vec![json!({"type": "text", "text": t})];
            for i in images.iter() {
                // Our own size (from the header) agrees with the server's reader.
                if let Some(sz) = size_of(&i.url) {
                    assert_eq!(sz, json!([i.width, i.height]));
                }
                v.push(described(&i.url, &Default::default()));
            }
            v
        }
        PromptSource::Chat { messages, .. } => messages[0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| match p["type"].as_str() {
                Some("image_url") => {
                    let mut extra = p["image_url"].as_object().unwrap().clone();
                    let url = extra.remove("url").unwrap();
                    described(url.as_str().unwrap(), &extra)
                }
                _ => p.clone(),
            })
            .collect(),
        other => panic!("{other:?}"),
    };
    json!({"content": content, "prompt_len": s.prompt_len, "output_len": s.output_len})
}

fn load(argv: &[String]) -> Result<Vec<Sample>, String> {
    let mut full = vec!["x".to_string(), "--model".into(), "m".into()];
    full.extend(argv.iter().cloned());
    let cfg = Wrap::parse_from(&full).a.validate()?;
    let mut words = |t: &str| Ok(t.split_whitespace().count() as u64);
    datasets::load(&cfg.dataset, &mut words).map_err(|e| e.to_string())
}

fn args(path: &str, extra: &[&str]) -> Vec<String> {
    [
        "--backend",
        "openai-chat",
        "--dataset-name",
        "custom_image",
        "--dataset-path",
        path,
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect()
}

/// `v` with each data URL's head (`data:image/png;base64`) cut to `data:`.
fn without_mime(v: &Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("data:") => json!("data:"),
        Value::Array(a) => Value::Array(a.iter().map(without_mime).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), without_mime(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn custom_image_requests_are_vllms_own() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = images(dir.path());
    let local = jsonl(dir.path(), &img, false);
    let web = jsonl(dir.path(), &img, true);
    let cases: Vec<Vec<String>> = vec![
        args(&local, &["--num-prompts", "8", "--seed", "0"]),
        args(
            &local,
            &[
                "--num-prompts",
                "5",
                "--seed",
                "13",
                "--custom-output-len",
                "40",
            ],
        ),
        // More prompts than lines: vLLM's oversampling.
        args(&local, &["--num-prompts", "12", "--seed", "7"]),
        args(
            &local,
            &[
                "--num-prompts",
                "12",
                "--no-oversample",
                "--disable-shuffle",
            ],
        ),
        args(
            &local,
            &[
                "--num-prompts",
                "8",
                "--enable-multimodal-chat",
                "--seed",
                "2",
            ],
        ),
        args(&web, &["--num-prompts", "9", "--seed", "5"]),
        args(
            &local,
            &[
                "--num-prompts",
                "8",
                "--seed",
                "1",
                "--custom-ensure-client-side-data",
            ],
        ),
    ];
    let input = Value::Array(cases.iter().map(|a| json!({"argv": a})).collect());
    let answers = reference::run_script(
        &python,
        "tests/custom_image/vllm_custom_image.py",
        &[],
        &[("HF_HUB_OFFLINE", "1")],
        &input,
    );
    for (a, answer) in cases.iter().zip(answers.as_array().unwrap()) {
        let want = answer["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("{a:?}: vLLM: {answer}"));
        let got: Vec<Value> = load(a).unwrap().iter().map(ours).collect();
        assert_eq!(got.len(), want.len(), "{a:?}");
        // Client-side data: vLLM re-encodes every file as PNG, llmspeed sends the file (a JPEG
        // stays a JPEG): the MIME type is left out, the size compared.
        let client_side = a.iter().any(|f| f == "--custom-ensure-client-side-data");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w) = match client_side {
                true => (without_mime(g), without_mime(w)),
                false => (g.clone(), w.clone()),
            };
            assert_eq!(g, w, "{a:?} request {i}");
        }
    }
}

/// A missing image file stops the run before anything is sent: the line is named.
#[test]
fn a_missing_image_file_is_named_by_its_line_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let img = images(dir.path());
    let p = dir.path().join("gone.jsonl");
    let missing = dir.path().join("nope.png");
    std::fs::write(
        &p,
        format!(
            "{}\n\n{}\n",
            json!({"prompt": "a", "image_files": [img[0]]}),
            json!({"prompt": "b", "image_files": [missing]})
        ),
    )
    .unwrap();
    let e = load(&args(p.to_str().unwrap(), &["--num-prompts", "2"])).unwrap_err();
    assert!(e.contains("line 3") && e.contains("nope.png"), "{e}");
    // A completions backend carries no images: refused before the run.
    let mut a = args(p.to_str().unwrap(), &[]);
    a[1] = "openai".into();
    let e = load(&a).unwrap_err();
    assert!(e.contains("openai-chat"), "{e}");
}

/// `bench serve --dataset-name custom_image` against the simulated server: each chat body has
/// the text, then the row's images, whose sizes the server reads from their headers.
#[test]
fn bench_serve_custom_image_sends_the_files_images() {
    use llmspeed::bench::vllm::run;
    use llmspeed::clock::Clock;
    use llmspeed::net::Cancel;
    let dir = tempfile::tempdir().unwrap();
    let img = images(dir.path());
    let path = dir.path().join("run.jsonl");
    let rows = [
        json!({"prompt": "first", "image_files": [img[0]]}),
        json!({"prompt": "second", "image_files": [img[1], img[2]]}),
        json!({"prompt": "third", "image_files": [img[3]]}),
    ];
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let argv = [
        "x",
        "--base-url",
        &url,
        "--model",
        "mock",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--dataset-name",
        "custom_image",
        "--dataset-path",
        path.to_str().unwrap(),
        "--custom-ensure-client-side-data",
        "--disable-shuffle",
        "--num-prompts",
        "3",
        "--max-concurrency",
        "1",
        "--custom-output-len",
        "7",
    ];
    let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let rt = mock_server::runtime();
    let r = rt.block_on(run::run(
        &cfg,
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
    ));
    server.stop();
    r.expect("run");
    let bodies: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/chat/completions")
        .map(|r| r["body"].clone())
        .collect();
    // The last three are the measured requests, in the file's order (one at a time); any
    // before them are vLLM's initial test request (the first row).
    assert!(bodies.len() >= 3, "{bodies:?}");
    let measured = &bodies[bodies.len() - 3..];
    let want = [
        ("first", vec![(32, 24)]),
        ("second", vec![(17, 40), (64, 64)]),
        ("third", vec![(5, 9)]),
    ];
    for (b, (text, sizes)) in measured.iter().zip(want) {
        let parts = b["messages"][0]["content"].as_array().unwrap();
        assert_eq!(parts[0], json!({"type": "text", "text": text}));
        let got: Vec<(u32, u32)> = parts[1..]
            .iter()
            .map(|p| {
                let s = llmspeed::mock::image::url_size(p["image_url"]["url"].as_str().unwrap())
                    .unwrap();
                (s.width, s.height)
            })
            .collect();
        assert_eq!(got, sizes, "{text}");
        assert_eq!(b["max_completion_tokens"], 7, "{b}");
    }
}
