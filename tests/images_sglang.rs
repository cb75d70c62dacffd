//! `bench sglang --dataset-name image`: for a seed, llmspeed's image dataset is SGLang 0.5.23's
//! own draw — each request's input and output length, image count, each image's width and
//! height, and (read back from llmspeed's lossless PNG) each image's pixels — and numpy's
//! generator is left where SGLang leaves it (its send times come next). SGLang's side is its
//! own `ImageDataset.load`, run by `tests/conformance/sglang_image.py` on the reference Python
//! of `scripts/references.sh`, with the images read before its processor sees them.
//!
//! Without the reference Python (`LLMSPEED_SGLANG_REF_PYTHON`) that test says NOT RUN, or fails
//! under `CI=true`.
//!
//! End to end on the simulated server (127.0.0.1:0, one image token per 16 × 16 patch): each
//! request carries the images drawn for it, in SGLang's body (`image_url` parts before the
//! text on chat, `image_data` on `/generate`), read back by the server's own header reader; the
//! record's vision tokens are the server's analytic count.

#[path = "conformance/reference.rs"]
mod reference;
#[path = "support/hub.rs"]
mod stand_in;
mod support;

use llmspeed::bench::sglang::args::sglang_bounds;
use llmspeed::workload::datasets::sglang_image::{
    self, parse_content, parse_format, parse_resolution, ImageSettings,
};
use llmspeed::workload::datasets::{self, DatasetConfig, DatasetKind, RandomDraws};
use llmspeed::workload::numpy::RandomState;
use llmspeed::workload::sample::PromptSource;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// Runs SGLang's image dataset on each case; its answers.
fn sglang(python: &Path, cases: &Value) -> Vec<Value> {
    let offline = [("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")];
    let answer = reference::run_script(
        python,
        "tests/conformance/sglang_image.py",
        &[],
        &offline,
        cases,
    );
    serde_json::from_value(answer).expect("sglang_image.py answers a JSON list")
}

/// The dataset `bench sglang` builds for these flags.
fn ours(c: &Value) -> DatasetConfig {
    let s = |k: &str| c[k].as_str().unwrap();
    let u = |k: &str| c[k].as_u64().unwrap() as u32;
    DatasetConfig {
        kind: DatasetKind::SglangImage,
        num_prompts: c["n"].as_u64().unwrap() as usize,
        seed: c["seed"].as_u64().unwrap(),
        random_input_len: u("input_len"),
        random_output_len: u("output_len"),
        random_bounds: Some(sglang_bounds(
            u("input_len"),
            u("output_len"),
            c["ratio"].as_f64().unwrap(),
        )),
        random_draws: RandomDraws::Sglang {
            vocab: 0,
            offsets: false,
            text: true,
        },
        sglang_image: ImageSettings {
            count: u("count"),
            random_count: c["random_count"].as_bool().unwrap(),
            resolution: parse_resolution(s("resolution")).unwrap(),
            format: parse_format(s("format")).unwrap(),
            content: parse_content(s("content")).unwrap(),
        },
        ..Default::default()
    }
}

/// An image's data URL back to [width, height, sum of its pixel bytes, first 8 in hex] (PNG:
/// decoded; JPEG: its size from the header only, pixels not compared).
fn read(url: &str) -> (u32, u32, Option<(u64, String)>) {
    use base64::Engine as _;
    let (head, b64) = url.split_once(',').unwrap();
    let file = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    if head == "data:image/png;base64" {
        let mut r = png::Decoder::new(std::io::Cursor::new(&file))
            .read_info()
            .unwrap();
        let mut px = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut px).unwrap();
        let px = &px[..info.buffer_size()];
        let sum = px.iter().map(|&b| b as u64).sum();
        let hex: String = px[..8.min(px.len())]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        return (info.width, info.height, Some((sum, hex)));
    }
    let size = llmspeed::mock::image::url_size(url).unwrap();
    (size.width, size.height, None)
}

#[test]
fn sglang_image_dataset_draws_are_sglangs_own() {
    let Some(py) = reference::SGLANG.python() else {
        return;
    };
    let case = |seed: u64,
                n: u64,
                count: u64,
                random_count: bool,
                res: &str,
                fmt: &str,
                content: &str,
                ratio: f64| {
        json!({"seed": seed, "n": n, "count": count, "random_count": random_count,
               "resolution": res, "format": fmt, "content": content, "ratio": ratio,
               "input_len": 40, "output_len": 12})
    };
    let cases = json!([
        // Random counts and random sizes: every draw depends on the pixels drawn before it.
        case(5, 6, 3, true, "random:4x6-9x12", "png", "random", 0.5),
        case(42, 4, 2, false, "RANDOM:10x3-10x20", "png", "random", 0.0),
        // Fixed size, blank: no pixel draws at all.
        case(7, 5, 4, true, "12x5", "png", "blank", 0.3),
        // JPEG: sizes and counts compared, read from each image's header.
        case(3, 3, 2, false, "random:8x8-24x16", "jpeg", "random", 1.0),
    ]);
    let theirs = sglang(&py, &cases);
    for (c, t) in cases.as_array().unwrap().iter().zip(&theirs) {
        let cfg = ours(c);
        let samples = datasets::load(&cfg, &mut |_: &str| Ok(0)).unwrap();
        let input: Vec<u64> = samples.iter().map(|s| s.prompt_len).collect();
        let output: Vec<u64> = samples.iter().map(|s| s.output_len as u64).collect();
        let want_in: Vec<u64> = serde_json::from_value(t["input"].clone()).unwrap();
        let want_out: Vec<u64> = serde_json::from_value(t["output"].clone()).unwrap();
        assert_eq!(input, want_in, "input lengths, {c}");
        assert_eq!(output, want_out, "output lengths, {c}");
        let rows = t["rows"].as_array().unwrap();
        assert_eq!(samples.len(), rows.len(), "{c}");
        for (i, (s, row)) in samples.iter().zip(rows).enumerate() {
            let PromptSource::Multimodal { images, .. } = &s.prompt else {
                panic!("request {i} has no images")
            };
            let want = row["images"].as_array().unwrap();
            assert_eq!(images.len(), want.len(), "request {i}'s image count, {c}");
            for (k, (img, w)) in images.iter().zip(want).enumerate() {
                let (width, height, px) = read(&img.url);
                assert_eq!(
                    (img.width, img.height),
                    (width, height),
                    "the URL is the image"
                );
                assert_eq!(
                    (width as u64, height as u64),
                    (w[0].as_u64().unwrap(), w[1].as_u64().unwrap()),
                    "request {i} image {k}'s size (width, height), {c}"
                );
                if let Some((sum, hex)) = px {
                    assert_eq!(
                        sum,
                        w[2].as_u64().unwrap(),
                        "request {i} image {k}'s pixels"
                    );
                    assert_eq!(
                        hex,
                        w[3].as_str().unwrap(),
                        "request {i} image {k}'s pixels"
                    );
                }
                let prefix = row["prefix"][k].as_str().unwrap();
                assert!(img.url.starts_with(&format!("{prefix},")), "{prefix}");
            }
        }
        // numpy's generator is where SGLang left it: the next double is the same.
        let mut np = RandomState::new(c["seed"].as_u64().unwrap() as u32);
        np.skip_words(datasets::random_numpy_words(&cfg));
        assert_eq!(
            repr_parse(t["next_double"].as_str().unwrap()).to_bits(),
            np.random().to_bits(),
            "the generator after the dataset, {c}"
        );
        // The pixel-free draw the schedule counts with gives the same sizes.
        let sizes = sglang_image::sizes(&cfg).unwrap();
        for (s, row) in samples.iter().zip(&sizes.images) {
            let got: Vec<(u32, u32)> = llmspeed::workload::datasets::random_mm::images(s)
                .iter()
                .map(|i| (i.width, i.height))
                .collect();
            assert_eq!(&got, row);
        }
    }
}

fn repr_parse(s: &str) -> f64 {
    s.parse().unwrap()
}

#[derive(clap::Parser)]
struct Wrap {
    #[command(flatten)]
    a: llmspeed::bench::sglang::args::SglangArgs,
}

/// Each measured request's images as the server read them, (width, height), by the order the
/// log has them (warm-ups are the first row's).
fn received(log: &str, chat: bool) -> Vec<Vec<(u32, u32)>> {
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| {
            r["method"] == "POST"
                && (r["path"] == "/generate" || r["path"] == "/v1/chat/completions")
        })
        .map(|r| {
            let urls: Vec<String> = match chat {
                true => {
                    let parts = r["body"]["messages"][0]["content"].as_array().unwrap();
                    assert_eq!(parts.last().unwrap()["type"], "text", "the text part last");
                    parts[..parts.len() - 1]
                        .iter()
                        .map(|p| p["image_url"]["url"].as_str().unwrap().to_string())
                        .collect()
                }
                false => {
                    assert!(r["body"]["text"].is_string(), "the text as text");
                    r["body"]["image_data"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|u| u.as_str().unwrap().to_string())
                        .collect()
                }
            };
            urls.iter()
                .map(|u| {
                    let s = llmspeed::mock::image::url_size(u).unwrap();
                    (s.width, s.height)
                })
                .collect()
        })
        .collect()
}

/// Checks that every `/generate` body of the request log `log` sends its text in the
/// template of `support::processor::folder`, one `<image>` per image of its `image_data` before the row's
/// text; returns the placeholders' tokens as the mock counts them, over the measured requests
/// (the log's last six).
fn templated_texts(log: &str) -> u64 {
    let bodies: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] == "POST" && r["path"] == "/generate")
        .map(|r| r["body"].clone())
        .collect();
    let per = llmspeed::mock::tokenizer::Tokenizer::new()
        .encode("<image>")
        .len() as u64;
    let mut total = 0;
    for (i, b) in bodies.iter().enumerate() {
        let k = b["image_data"].as_array().unwrap().len();
        let text = b["text"].as_str().unwrap();
        let head = format!("<s><|user|>\n{}", "<image>".repeat(k));
        assert!(text.starts_with(&head), "{text:?} begins {head:?}");
        assert!(text.ends_with("</s>\n<|assistant|>\n"), "{text:?}");
        let row = &text[head.len()..text.len() - "</s>\n<|assistant|>\n".len()];
        assert!(!row.is_empty() && !row.contains("<image>"), "{text:?}");
        if i + 6 >= bodies.len() {
            total += k as u64 * per;
        }
    }
    total
}

#[test]
fn bench_sglang_image_sends_the_drawn_images_and_counts_the_servers_vision_tokens() {
    use clap::Parser;
    use llmspeed::bench::sglang::run;
    use llmspeed::clock::Clock;
    use llmspeed::mock::image::ImageTokens;
    use llmspeed::mock::{MockConfig, Profile};
    use llmspeed::net::Cancel;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for backend in ["sglang-oai-chat", "sglang"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let file = dir.path().join("out.jsonl");
        let mut mcfg = MockConfig::profile(Profile::Fast);
        mcfg.request_log = Some(log.clone());
        mcfg.image_tokens = ImageTokens::Patches(16);
        let mock = rt.block_on(support::mock::MockServer::start(mcfg));
        let url = format!("http://{}", mock.addr);
        let folder = support::processor::folder(dir.path());
        let mut argv = vec![
            "x",
            "--base-url",
            &url,
            "--backend",
            backend,
            "--dataset-name",
            "image",
            "--num-prompts",
            "6",
            "--random-input-len",
            "24",
            "--random-output-len",
            "4",
            "--random-range-ratio",
            "0.5",
            "--image-count",
            "3",
            "--random-image-count",
            "--image-resolution",
            "random:20x16-70x60",
            "--image-format",
            "png",
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
        ];
        // The native backend sends the processor's chat template: the folder holds it.
        if backend == "sglang" {
            argv.extend(["--tokenizer", folder.to_str().unwrap()]);
        }
        let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
        let done = rt
            .block_on(run::run(
                &cfg,
                Clock::new(),
                &Cancel::new(),
                &mut Vec::new(),
                &mut Vec::new(),
                &mut |_: &str| {},
            ))
            .expect("run");
        rt.block_on(mock.stop());
        assert_eq!(done.metrics.completed, 6, "{backend}");
        // What the server read, request by request, is the draw for these flags.
        let drawn = sglang_image::sizes(&cfg.plan.dataset).unwrap().images;
        let mut got = received(&std::fs::read_to_string(&log).unwrap(), backend != "sglang");
        let mut want = drawn.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{backend}");
        // Vision tokens: ceil(w / 16) * ceil(h / 16) per image, the mock's rule; on the
        // native backend also each image's `<image>` placeholder in the templated text, which
        // the mock counts as text (a real processor turns it into the image's tokens).
        let sent = std::fs::read_to_string(&log).unwrap();
        let placeholders = match backend {
            "sglang" => templated_texts(&sent),
            _ => 0,
        };
        let patches: u64 = drawn
            .iter()
            .flatten()
            .map(|&(w, h)| (w as u64).div_ceil(16) * (h as u64).div_ceil(16))
            .sum::<u64>()
            + placeholders;
        // SGLang's records write Python's NaN and Infinity where JSON has no number.
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("Infinity", "null")
            .replace("NaN", "null");
        let rec: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(rec["dataset_name"], "image");
        assert_eq!(rec["total_input_vision_tokens"], patches, "{backend}");
        assert_eq!(
            rec["total_input_tokens"].as_u64().unwrap(),
            rec["total_input_text_tokens"].as_u64().unwrap() + patches
        );
        let x = &rec["llmspeed"]["images"];
        assert_eq!(x["total_images"], drawn.iter().map(Vec::len).sum::<usize>());
        assert_eq!(
            x["total_pixels"],
            drawn
                .iter()
                .flatten()
                .map(|&(w, h)| w as u64 * h as u64)
                .sum::<u64>()
        );
        assert_eq!(x["vision_tokens_counted_by"], "server_prompt_tokens");
        // Counts vary request to request (1 to 3), as SGLang draws them.
        assert!(drawn.iter().any(|r| r.len() != drawn[0].len()), "{drawn:?}");
    }
}

/// A text-only server (`--image-tokens none`) refuses the first image request: `bench sglang`
/// says the server's own message once, in SGLang's warm-up failure, and sends no measured
/// request.
#[test]
fn a_server_that_refuses_images_is_named_once_and_nothing_else_is_sent() {
    use llmspeed::mock::image::ImageTokens;
    use llmspeed::mock::{MockConfig, Profile};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = Some(log.clone());
    mcfg.image_tokens = ImageTokens::Refused;
    let mock = rt.block_on(support::mock::MockServer::start(mcfg));
    let url = format!("http://{}", mock.addr);
    let out = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "bench",
            "sglang",
            "--base-url",
            &url,
            "--backend",
            "sglang-oai-chat",
        ])
        .args([
            "--dataset-name",
            "image",
            "--num-prompts",
            "40",
            "--random-input-len",
            "8",
        ])
        .args(["--random-output-len", "2", "--image-resolution", "8x8"])
        .arg("--output-file")
        .arg(dir.path().join("out.jsonl"))
        .output()
        .unwrap();
    rt.block_on(mock.stop());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches(llmspeed::mock::image::REFUSED).count(),
        2,
        "the warm-up's line and the run's error, once each: {err}"
    );
    assert!(err.contains("Warmup failed"), "{err}");
    let chats = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("/v1/chat/completions"))
        .count();
    assert_eq!(chats, 1, "the warm-up alone reached the server");
}

/// A copy of the model folder `from` (its weights left out: a processor does not read them)
/// with `change` applied.
fn variant(from: &Path, to: &Path, change: impl FnOnce(&Path)) -> std::path::PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "model.safetensors" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    change(to);
    to.to_path_buf()
}

/// A Qwen2-VL-shaped template: a default system message, a namespace counting the images,
/// `add_vision_id` (undefined, so off), parts told apart by their keys.
const QWEN2VL_SHAPED: &str = "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// `--backend sglang` (native `/generate`, which applies no template): each image row's text is
/// SGLang's own `create_mm_data_row` prompt, compared to the character with what llmspeed sends
/// for the same text and images, on the suite's two tiny vision models as the processor folder
/// and on variants of them: the template in `chat_template.json` (the legacy file), in
/// `processor_config.json` (over `chat_template.jinja`), a Qwen2-VL-shaped template, and no
/// template at all (SGLang's `<image>{text}` fallback); with 1 and 3 images. The text-only
/// prompt (SGLang's `text_prompt_len` is its count) is compared too, and counted with the
/// model's tokenizer and its special tokens (as a server counts a prompt) it is SGLang's
/// `text_prompt_len`; on the LLaVA-style model, the prompt counted so plus 255 per image (each
/// `<image>` becomes 256 tokens) is SGLang's `prompt_len`, so the server's prompt count less the
/// text-only count is the vision tokens SGLang counts. On a chat backend SGLang sends the text
/// alone (llmspeed's chat bodies send the text as a part).
#[test]
fn native_image_prompts_are_sglangs_create_mm_data_row() {
    use llmspeed::workload::chat_template::ChatTemplate;
    use llmspeed::workload::datasets::sglang_image::{native_prompt, text_only_prompt};
    let Some(py) = reference::SGLANG.python() else {
        return;
    };
    let (Some(llava), Some(qwen)) = (
        reference::tiny_vision("LLMSPEED_VLLM_VISION_MODEL"),
        reference::tiny_vision("LLMSPEED_VLLM_QWEN2VL_MODEL"),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let jinja = |d: &Path| std::fs::read_to_string(d.join("chat_template.jinja")).unwrap();
    let other = "{{ bos_token }}[{% for m in messages %}{{ m['role'] }}:{% if m['content'] is string %}{{ m['content'] | trim }}{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] | trim }}{% endif %}{% endfor %}{% endif %}{% endfor %}]{% if add_generation_prompt %} A:{% endif %}";
    let folders: Vec<(&str, std::path::PathBuf)> = vec![
        ("llava", llava.clone()),
        ("qwen2vl", qwen.clone()),
        (
            "legacy-json",
            variant(&llava, &tmp.path().join("legacy"), |d| {
                let t = jinja(d);
                std::fs::remove_file(d.join("chat_template.jinja")).unwrap();
                std::fs::write(
                    d.join("chat_template.json"),
                    json!({"chat_template": format!("{t}[legacy]")}).to_string(),
                )
                .unwrap();
            }),
        ),
        (
            "processor-config",
            variant(&llava, &tmp.path().join("config-key"), |d| {
                let p = d.join("processor_config.json");
                let mut v: Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                v["chat_template"] = json!(other);
                std::fs::write(&p, v.to_string()).unwrap();
            }),
        ),
        (
            "qwen2vl-shaped",
            variant(&qwen, &tmp.path().join("qwen-shaped"), |d| {
                std::fs::write(d.join("chat_template.jinja"), QWEN2VL_SHAPED).unwrap();
            }),
        ),
        (
            "none",
            variant(&llava, &tmp.path().join("none"), |d| {
                std::fs::remove_file(d.join("chat_template.jinja")).unwrap();
            }),
        ),
    ];
    let url = |w: u32, h: u32, k: u8| {
        use base64::Engine as _;
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i as u8).wrapping_mul(k)).collect();
        let png = llmspeed::workload::image::encode_png(w, h, &rgb).unwrap();
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(png)
        )
    };
    let one = vec![url(20, 12, 3)];
    let three = vec![url(8, 8, 5), url(30, 17, 7), url(12, 40, 11)];
    let texts = [
        "the cat sat on the mat",
        "Question: <image 1> Find x. \"quoted\" and {braces}\n\nAnswer: ",
        "  leading and trailing spaces, ünïcode — dashes, image 1  ",
    ];
    let mut cases = Vec::new();
    for (name, dir) in &folders {
        for (t, text) in texts.iter().enumerate() {
            // SGLang's processor call fails when the prompt's placeholders and the images
            // disagree: its fallback has one placeholder, so one image there.
            let sets: Vec<&Vec<String>> = match *name {
                "none" => vec![&one],
                _ => vec![&one, &three],
            };
            for urls in sets {
                let backend = match (*name, t) {
                    ("llava", 0) if urls.len() == 1 => "sglang-oai-chat",
                    _ => "sglang",
                };
                cases.push(json!({"name": name, "model": dir, "backend": backend,
                                  "text": text, "urls": urls}));
            }
        }
    }
    let theirs = reference::run_script(
        &py,
        "tests/conformance/sglang_mm_prompt.py",
        &[],
        &[("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")],
        &Value::Array(cases.clone()),
    );
    let theirs = theirs.as_array().expect("a list");
    assert_eq!(theirs.len(), cases.len());
    for (c, t) in cases.iter().zip(theirs) {
        let dir = Path::new(c["model"].as_str().unwrap());
        let text = c["text"].as_str().unwrap();
        let urls: Vec<&str> = c["urls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        let p = ChatTemplate::load_processor_dir(dir).unwrap();
        assert_eq!(p.class.as_deref(), t["class"].as_str(), "{}", c["name"]);
        if c["backend"] == "sglang-oai-chat" {
            assert_eq!(t["prompt"], text, "SGLang's chat rows send the text alone");
            continue;
        }
        let ours = native_prompt(&p, text, &urls);
        assert_eq!(
            ours.text,
            t["prompt"].as_str().unwrap(),
            "{} with {} images, text {text:?}",
            c["name"],
            urls.len()
        );
        assert_eq!(
            ours.fallback.is_some(),
            c["name"] == "none",
            "{}",
            c["name"]
        );
        let text_only = text_only_prompt(&p, text);
        assert_eq!(text_only, t["text_only"].as_str().unwrap(), "{}", c["name"]);
        let tok =
            llmspeed::workload::tokenizer::LocalTokenizer::load_file(&dir.join("tokenizer.json"))
                .unwrap();
        assert_eq!(
            tok.count_with(&text_only, true).unwrap(),
            t["text_prompt_len"].as_u64().unwrap(),
            "the text part as a server counts it is SGLang's text_prompt_len, {}",
            c["name"]
        );
        if matches!(
            c["name"].as_str(),
            Some("llava" | "legacy-json" | "processor-config")
        ) {
            assert_eq!(
                tok.count_with(&ours.text, true).unwrap() + 255 * urls.len() as u64,
                t["prompt_len"].as_u64().unwrap(),
                "{}",
                c["name"]
            );
        }
    }
}

/// A native image run needs the processor: without `--tokenizer`, `--served-model-name` or
/// `--model` it stops before any request, saying what SGLang does; with a folder whose processor has no chat template it
/// sends SGLang's fallback `<image>{text}` for every request, said in a note.
#[test]
fn a_native_image_run_without_a_processor_stops_and_without_a_template_falls_back() {
    use llmspeed::mock::image::ImageTokens;
    use llmspeed::mock::{MockConfig, Profile};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = Some(log.clone());
    mcfg.image_tokens = ImageTokens::Patches(16);
    let mock = rt.block_on(support::mock::MockServer::start(mcfg));
    let url = format!("http://{}", mock.addr);
    let folder = support::processor::folder(dir.path());
    std::fs::remove_file(folder.join("chat_template.jinja")).unwrap();
    let run = |more: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(["bench", "sglang", "--base-url", &url, "--backend", "sglang"])
            .args(["--dataset-name", "image", "--num-prompts", "3"])
            .args(["--random-input-len", "8", "--random-output-len", "2"])
            .args(["--image-resolution", "8x8", "--warmup-requests", "0"])
            .args(more)
            .arg("--output-file")
            .arg(dir.path().join("out.jsonl"))
            .output()
            .unwrap()
    };
    let generates = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["path"] == "/generate")
            .map(|r| r["body"]["text"].as_str().unwrap().to_string())
            .collect::<Vec<String>>()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no --model"), "{err}");
    assert!(err.contains("SGLang loads the processor"), "{err}");
    assert!(generates().is_empty(), "nothing sent");
    let out = run(&["--tokenizer", folder.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    rt.block_on(mock.stop());
    assert!(out.status.success(), "{err}");
    assert!(err.contains("has no processor chat template"), "{err}");
    assert!(
        err.contains("3 of 3 requests were sent SGLang's fallback prompt"),
        "{err}"
    );
    let sent = generates();
    assert_eq!(sent.len(), 3);
    for t in sent {
        assert!(
            t.starts_with("<image>") && !t[7..].contains("<image>"),
            "{t:?}"
        );
    }
}

/// Without `--tokenizer`, a native image run reads the processor where SGLang's `get_processor`
/// does, from `--model`: a hub id's files are fetched from the stand-in hub (`HF_ENDPOINT`) into
/// a fresh `HF_HOME` in the hub cache's layout, and every `/generate` body carries the same
/// templated text as a run given the folder with `--tokenizer`. A second run with
/// `HF_HUB_OFFLINE=1` reads them from the cache and asks the hub nothing; an id the hub does not
/// have stops before any request, naming the URL and its 404.
#[test]
fn a_native_image_run_fetches_the_models_processor_as_sglang_does() {
    use llmspeed::mock::image::ImageTokens;
    use llmspeed::mock::{MockConfig, Profile};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let folder = support::processor::folder(dir.path());
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let mut repo = stand_in::Repo {
        id: "tiny/vision".into(),
        sha: sha.into(),
        model: true,
        ..stand_in::Repo::default()
    };
    for f in [
        "processor_config.json",
        "chat_template.jinja",
        "tokenizer_config.json",
    ] {
        repo.files
            .insert(f.into(), std::fs::read(folder.join(f)).unwrap());
    }
    let hub = stand_in::StandIn::start(vec![repo]);
    let hf_home = dir.path().join("hf");
    let runs = std::cell::Cell::new(0);
    // One run against a fresh simulated server: its outcome and the `/generate` texts it sent.
    let run = |more: &[&str], offline: bool| {
        runs.set(runs.get() + 1);
        let log = dir.path().join(format!("requests-{}.jsonl", runs.get()));
        let mut mcfg = MockConfig::profile(Profile::Fast);
        mcfg.request_log = Some(log.clone());
        mcfg.image_tokens = ImageTokens::Patches(16);
        let mock = rt.block_on(support::mock::MockServer::start(mcfg));
        let url = format!("http://{}", mock.addr);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_llmspeed"));
        cmd.args(["bench", "sglang", "--base-url", &url, "--backend", "sglang"])
            .args(["--dataset-name", "image", "--num-prompts", "3"])
            .args(["--random-input-len", "8", "--random-output-len", "2"])
            .args(["--image-resolution", "8x8", "--warmup-requests", "0"])
            .args(more)
            .arg("--output-file")
            .arg(dir.path().join("out.jsonl"))
            .env("HF_HOME", &hf_home)
            .env("HF_ENDPOINT", &hub.url)
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE");
        if offline {
            cmd.env("HF_HUB_OFFLINE", "1");
        }
        let out = cmd.output().unwrap();
        rt.block_on(mock.stop());
        let sent: Vec<String> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["path"] == "/generate")
            .map(|r| r["body"]["text"].as_str().unwrap().to_string())
            .collect();
        // In the order the server received them (concurrent requests may cross): sorted.
        let mut sent = sent;
        sent.sort();
        (out, sent)
    };
    let model_asks = || {
        hub.seen()
            .iter()
            .filter(|s| s.path.starts_with("/tiny/"))
            .count()
    };

    let (out, by_folder) = run(&["--tokenizer", folder.to_str().unwrap()], false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(by_folder.len(), 3);
    assert!(by_folder[0].contains("<|assistant|>"), "{:?}", by_folder[0]);
    assert_eq!(model_asks(), 0, "a folder asks the hub nothing");

    let (out, sent) = run(&["--model", "tiny/vision"], false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(sent, by_folder, "the same templated prompts");
    let snap = hf_home.join("hub/models--tiny--vision/snapshots").join(sha);
    for f in [
        "processor_config.json",
        "chat_template.jinja",
        "tokenizer_config.json",
    ] {
        let p = snap.join(f);
        assert!(
            std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{p:?} links to its blob"
        );
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(folder.join(f)).unwrap()
        );
    }
    assert!(!snap.join("chat_template.json").exists());
    assert_eq!(
        std::fs::read_to_string(hf_home.join("hub/models--tiny--vision/refs/main")).unwrap(),
        sha
    );
    let asked = model_asks();
    // Each of the 6 files once (the 3 present are then fetched from the CDN).
    assert_eq!(
        asked,
        6,
        "{:?}",
        hub.seen()
            .iter()
            .map(|s| s.path.clone())
            .collect::<Vec<_>>()
    );

    let (out, sent) = run(&["--model", "tiny/vision"], true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(sent, by_folder, "read from the cache offline");
    assert_eq!(model_asks(), asked, "offline asks the hub nothing");

    let (out, sent) = run(&["--model", "tiny/absent"], false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let url = format!("{}/tiny/absent/resolve/main/processor_config.json", hub.url);
    assert!(err.contains(&url), "{err}");
    assert!(err.contains("404"), "{err}");
    assert!(err.contains("--model tiny/absent"), "{err}");
    assert!(sent.is_empty(), "nothing sent");
}
