//! `bench serve --dataset-name hf` for vLLM 0.33's vision ids, held against vLLM's own loader:
//! rows shaped like each hub dataset, their images made and saved by PIL (JPEG, PNG with and
//! without alpha, grey, WebP, GIF) and written as the hub writes them (a parquet `{bytes, path}`
//! struct under the `datasets` library's `Image` feature), are read by vLLM's own argument
//! parser and `get_samples` (`tests/hf/vllm_hf_vision.py`, on the reference Python) and by
//! llmspeed from the same parquet file. Compared exactly: the same prompts (text to the
//! character), in the same order for the seed, the same prompt and output lengths, the same
//! number of images per request and the same pixel size of each (vLLM re-encodes every image
//! as a JPEG, so its bytes are not the row's; llmspeed sends the row's own bytes, checked here
//! byte for byte against the parquet file's). URL strings are passed through as vLLM passes
//! them, compared as text.
//!
//! End to end, on the simulated server: each request's image count and pixels, as the server's
//! trace records them, are vLLM's sample's; a row whose image bytes are no image stops the run
//! before any request is sent, naming the row and column.
//!
//! Without the reference Python (`LLMSPEED_VLLM_REF_PYTHON`) the tests say NOT RUN, or fail
//! under `CI=true`.

#[path = "hf/gen.rs"]
mod gen;
#[path = "support/mock.rs"]
mod mock_server;
#[path = "conformance/reference.rs"]
mod reference;

use clap::Parser;
use gen::Gen;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::workload::datasets::hf;
use llmspeed::workload::datasets::{PromptSource, Sample, Tokens};
use llmspeed::workload::request_id::RequestId;
use llmspeed::workload::rows::{self, DatasetFiles, FileFormat};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// Counts words, as `vllm_hf_vision.py`'s tokenizer does.
struct Words;

impl Tokens for Words {
    fn count(&mut self, text: &str) -> Result<u64, String> {
        Ok(text.split_whitespace().count() as u64)
    }
}

/// The words of the rows' texts, some non-ASCII.
const VOCAB: &[&str] = &[
    "what", "is", "naïve", "図", "<image>", "color", "Options:", "A.", "é",
];

/// What this file draws beyond words.
trait Draw {
    fn some(&mut self, lo: usize, span: u64) -> String;
    fn image(&mut self) -> Value;
}

impl Draw for Gen {
    /// `lo` words and up to `span - 1` more.
    fn some(&mut self, lo: usize, span: u64) -> String {
        let n = lo + self.below(span) as usize;
        self.words(n)
    }

    /// An image PIL makes: a size and one of the formats and modes datasets hold.
    fn image(&mut self) -> Value {
        const KINDS: [(&str, &str); 7] = [
            ("JPEG", "RGB"),
            ("JPEG", "L"),
            ("PNG", "RGB"),
            ("PNG", "RGBA"),
            ("PNG", "P"),
            ("WEBP", "RGB"),
            ("GIF", "RGB"),
        ];
        let (format, mode) = KINDS[self.below(KINDS.len() as u64) as usize];
        json!({"__pil__": {"w": 1 + self.below(90), "h": 1 + self.below(70), "format": format,
            "mode": mode}})
    }
}

/// One comparison: vLLM's command line and the rows of its split.
struct Case {
    name: &'static str,
    argv: Vec<&'static str>,
    split: &'static str,
    rows: Vec<Value>,
    /// Columns cast to the `datasets` library's Image feature: "one" or "list".
    image_columns: Value,
}

fn vision_arena_rows(g: &mut Gen, n: usize, turns_col: &str) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let first = g.some(1, 30);
            let images: Vec<Value> = (0..1 + g.below(3)).map(|_| g.image()).collect();
            json!({
                "conversation_id": format!("c{i}"),
                turns_col: [[{"role": "user", "content": first},
                            {"role": "assistant", "content": g.words(5)}],
                           [{"role": "user", "content": g.words(3)}]],
                "images": images,
            })
        })
        .collect()
}

fn llava_rows(g: &mut Gen, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            // Some rows fail vLLM's limits (under 4 tokens either side, or one turn only):
            // their images are never read, so one of them holds none.
            let short = i % 5 == 2;
            let one_turn = i % 7 == 3;
            let prompt = format!(
                "<image>\n{}",
                if short { g.words(1) } else { g.some(4, 40) }
            );
            let mut conv = vec![json!({"from": "human", "value": prompt})];
            if !one_turn {
                conv.push(json!({"from": "gpt", "value": g.some(4, 30)}));
            }
            let image = if one_turn { Value::Null } else { g.image() };
            json!({"id": format!("r{i}"), "image": image, "conversations": conv,
                "data_source": "clevr"})
        })
        .collect()
}

fn mmstar_rows(g: &mut Gen, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let q = format!(
                "  {}\nOptions: A: {}, B: {}\u{3000}",
                g.some(2, 20),
                g.words(2),
                g.words(2)
            );
            let q = if i % 6 == 5 { g.words(5) } else { q };
            json!({"index": i, "question": q, "image": g.image(), "answer": "A",
                "category": "coarse perception", "l2_category": "x", "meta_info": {"source": "s"}})
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x5eed_1a2b, VOCAB);
    let one = json!({"image": "one"});
    vec![
        Case {
            name: "VisionArena-Chat, seed 3, 25 of 40",
            argv: vec![
                "--dataset-path",
                "lmarena-ai/VisionArena-Chat",
                "--num-prompts",
                "25",
                "--seed",
                "3",
            ],
            split: "train",
            rows: vision_arena_rows(&mut g, 40, "conversation"),
            image_columns: json!({"images": "list"}),
        },
        Case {
            name: "vision-arena-bench by --hf-name, stored order, 30 of 12 (oversampled), \
                   --hf-output-len 50, --enable-multimodal-chat",
            argv: vec![
                "--dataset-path",
                "/data/vab",
                "--hf-name",
                "lmarena-ai/vision-arena-bench-v0.1",
                "--disable-shuffle",
                "--num-prompts",
                "30",
                "--hf-output-len",
                "50",
                "--enable-multimodal-chat",
            ],
            split: "train",
            rows: vision_arena_rows(&mut g, 12, "turns"),
            image_columns: json!({"images": "list"}),
        },
        Case {
            name: "LLaVA-OneVision-Data, seed 0, 20 of 40 (vLLM's limits filter)",
            argv: vec![
                "--dataset-path",
                "lmms-lab/LLaVA-OneVision-Data",
                "--hf-split",
                "train",
                "--num-prompts",
                "20",
            ],
            split: "train",
            rows: llava_rows(&mut g, 40),
            image_columns: one.clone(),
        },
        Case {
            name: "MMStar, seed 7, 30 of 18 (oversampled), --no-oversample off",
            argv: vec![
                "--dataset-path",
                "Lin-Chen/MMStar",
                "--num-prompts",
                "30",
                "--seed",
                "7",
            ],
            split: "val",
            rows: mmstar_rows(&mut g, 18),
            image_columns: one,
        },
        Case {
            name: "MMStar with URL strings (http, a path, a data URL), --no-oversample",
            argv: vec![
                "--dataset-path",
                "Lin-Chen/MMStar",
                "--disable-shuffle",
                "--num-prompts",
                "5",
                "--no-oversample",
            ],
            split: "val",
            rows: vec![
                json!({"question": "a b Options: c", "image": "https://example.invalid/a.jpg"}),
                json!({"question": "d e f", "image": "images/b.png"}),
                json!({"question": "g", "image": "file:///srv/c.webp"}),
                json!({"question": "h i", "image": gif_data_url()}),
            ],
            image_columns: json!({}),
        },
    ]
}

/// A 3 × 2 GIF as a data URL (made by hand: header and logical screen).
fn gif_data_url() -> String {
    use base64::Engine as _;
    let mut f = b"GIF89a".to_vec();
    f.extend_from_slice(&[3, 0, 2, 0, 0x80, 0, 0, 0, 0, 0, 255, 255, 255]);
    f.extend_from_slice(&[0x2C, 0, 0, 0, 0, 3, 0, 2, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3B]);
    format!(
        "data:image/gif;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(f)
    )
}

/// Runs vLLM's loader on each case (each written into `dir/<i>`).
fn vllm(python: &Path, cases: &[Case], dir: &Path) -> Vec<Value> {
    let input: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut argv = vec!["--dataset-name", "hf", "--backend", "openai-chat"];
            argv.extend(&c.argv);
            json!({"argv": argv, "dir": dir.join(i.to_string()), "split": c.split,
                "rows": c.rows, "image_columns": c.image_columns})
        })
        .collect();
    let envs = [
        ("HF_HUB_OFFLINE", std::ffi::OsString::from("1")),
        (
            "HF_DATASETS_CACHE",
            dir.join("datasets-cache").into_os_string(),
        ),
    ];
    let answer = reference::run_script(
        python,
        "tests/hf/vllm_hf_vision.py",
        &[],
        &envs,
        &Value::Array(input),
    );
    serde_json::from_value(answer).expect("vllm_hf_vision.py answers a JSON list")
}

/// The parquet file the script wrote for a case.
fn parquet(dir: &Path, split: &str) -> PathBuf {
    dir.join(format!("{split}-00000-of-00001.parquet"))
}

/// llmspeed's samples for a case: its flags parsed, its class resolved, the file vLLM read
/// read in the order the flags ask, its family run.
fn llmspeed_samples(c: &Case, dir: &Path) -> Result<Vec<Sample>, String> {
    let mut argv = vec![
        "x",
        "--base-url",
        "http://127.0.0.1:9",
        "--dataset-name",
        "hf",
        "--backend",
        "openai-chat",
    ];
    argv.extend(&c.argv);
    let cfg = Wrap::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .a
        .validate()?
        .dataset;
    let path = cfg.path.as_ref().map(|p| p.to_string_lossy().into_owned());
    let r = hf::resolve(path.as_deref(), &cfg.hf)?;
    let columns = r.class.columns();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let files = DatasetFiles {
        id: r.id.clone(),
        subset: None,
        split: r.split.clone(),
        format: FileFormat::Parquet,
        files: vec![parquet(dir, &r.split)],
    };
    let rows = rows::open(&files, &columns, hf::row_order(&cfg)).map_err(|e| e.to_string())?;
    hf::samples(&cfg, &r.class, rows, &mut Words).map_err(|e| e.to_string())
}

/// A sample's text and images.
fn parts(s: &Sample) -> (&str, &[llmspeed::workload::image::Image]) {
    match &s.prompt {
        PromptSource::Multimodal { text, images } => match &**text {
            PromptSource::Text(t) => (t.as_str(), images),
            p => panic!("a text part, not {p:?}"),
        },
        p => panic!("a prompt with images, not {p:?}"),
    }
}

/// One sample of ours against vLLM's: text, lengths, each image's size (or URL).
fn same(at: &str, ours: &Sample, theirs: &Value) {
    let (text, images) = parts(ours);
    assert_eq!(Some(text), theirs["prompt"].as_str(), "{at}: prompt");
    assert_eq!(
        json!(ours.prompt_len),
        theirs["prompt_len"],
        "{at}: prompt_len"
    );
    assert_eq!(
        json!(ours.output_len),
        theirs["output_len"],
        "{at}: output_len"
    );
    let sent: Vec<Value> = images
        .iter()
        .map(|i| {
            if i.url.starts_with("data:") {
                json!({"size": [i.width, i.height]})
            } else {
                json!({"url": &*i.url})
            }
        })
        .collect();
    let vllm: Vec<Value> = theirs["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| match i.get("size") {
            Some(s) => json!({"size": s}),
            None => i.clone(),
        })
        .collect();
    assert_eq!(sent, vllm, "{at}: images");
}

/// Every image file the parquet file holds in `col` (base64 as `workload::rows` gives it).
fn files_in(path: &Path, col: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let files = DatasetFiles {
        id: "x".into(),
        subset: None,
        split: "s".into(),
        format: FileFormat::Parquet,
        files: vec![path.to_path_buf()],
    };
    let mut out = Vec::new();
    for row in rows::open(&files, &[col], rows::RowOrder::AsStored).unwrap() {
        let row = row.unwrap();
        let v = &row[col];
        let structs: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for s in structs {
            if let Some(b) = s.get("bytes").and_then(Value::as_str) {
                out.push(base64::engine::general_purpose::STANDARD.decode(b).unwrap());
            }
        }
    }
    out
}

#[test]
fn vision_samples_are_vllms_own() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let answers = vllm(&python, &cases, dir.path());
    for (i, (c, a)) in cases.iter().zip(&answers).enumerate() {
        let theirs = a["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: vLLM failed: {}", c.name, a["error"]));
        let cdir = dir.path().join(i.to_string());
        let ours = llmspeed_samples(c, &cdir).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(ours.len(), theirs.len(), "{}: how many samples", c.name);
        assert!(!ours.is_empty(), "{}: compares something", c.name);
        for (k, (o, t)) in ours.iter().zip(theirs).enumerate() {
            same(&format!("{}: sample {k}", c.name), o, t);
        }
        // Our data URLs carry the row's own bytes: each is one of the file's images, whole.
        let col = if c.image_columns.get("images").is_some() {
            "images"
        } else {
            "image"
        };
        let held = files_in(&parquet(&cdir, c.split), col);
        for s in &ours {
            for img in parts(s).1 {
                let Some(b64) = img.url.split_once(";base64,").map(|(_, b)| b) else {
                    continue;
                };
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap();
                assert_eq!(img.encoded_bytes, bytes.len() as u64);
                if !held.is_empty() {
                    assert!(
                        held.contains(&bytes),
                        "{}: an image not in the file",
                        c.name
                    );
                }
            }
        }
        let images: usize = ours.iter().map(|s| parts(s).1.len()).sum();
        eprintln!(
            "{}: {} samples, {images} images the same",
            c.name,
            ours.len()
        );
    }
}

#[test]
fn mmvu_and_a_text_backend_are_refused_as_vllm_refuses_them() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let answers = vllm(
        &python,
        &[Case {
            name: "",
            argv: vec!["--dataset-path", "Lin-Chen/MMStar", "--backend", "openai"],
            split: "val",
            rows: vec![json!({"question": "q", "image": "https://x.invalid/i.png"})],
            image_columns: json!({}),
        }],
        dir.path(),
    );
    let theirs = answers[0]["error"].as_str().expect("vLLM refuses it");
    let ours = Wrap::try_parse_from([
        "x",
        "--base-url",
        "http://127.0.0.1:9",
        "--dataset-name",
        "hf",
        "--dataset-path",
        "Lin-Chen/MMStar",
        "--backend",
        "openai",
    ])
    .unwrap()
    .a
    .validate();
    let Err(ours) = ours else {
        panic!("MMStar on --backend openai is refused")
    };
    assert_eq!(format!("ValueError: {ours}"), theirs);
    let e = hf::resolve(Some("yale-nlp/MMVU"), &Default::default()).unwrap_err();
    assert!(e.contains("video") && e.contains("MMVU"), "{e}");
}

/// Per request traced: its index, image count and image tokens.
type Traced = Vec<(u64, u32, u64)>;

/// Runs `bench serve` with `flags` against a fresh simulated server whose images cost one
/// token per pixel (`--image-tokens patch:1`): the outcome, and each request's image count
/// and image tokens (its pixels) as the server's trace records them, by request index.
fn serve(dir: &Path, flags: &[&str]) -> (Result<(), String>, Traced) {
    use llmspeed::bench::vllm::run;
    use llmspeed::clock::Clock;
    use llmspeed::net::Cancel;
    let trace = dir.join("trace.jsonl");
    let log = dir.join("requests.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.trace = Some(trace.clone());
    mc.request_log = Some(log.clone());
    mc.image_tokens = llmspeed::mock::image::ImageTokens::Patches(1);
    let model = mc.model.clone();
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--model",
        &model,
        "--num-warmups",
        "0",
        "--dataset-name",
        "hf",
        "--backend",
        "openai-chat",
        "--max-concurrency",
        "2",
    ];
    argv.extend_from_slice(flags);
    let outcome = Wrap::try_parse_from(argv)
        .map_err(|e| e.to_string())
        .and_then(|w| w.a.validate())
        .and_then(|cfg| {
            mock_server::runtime()
                .block_on(run::run(
                    &cfg,
                    Clock::new(),
                    &Cancel::new(),
                    &mut Vec::new(),
                ))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    server.stop();
    let mut per: std::collections::BTreeMap<u64, (u32, u64)> = Default::default();
    for l in std::fs::read_to_string(&trace).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let Some(RequestId::Bench { index, .. }) =
            RequestId::parse(v["request_id"].as_str().unwrap_or(""))
        else {
            continue;
        };
        let got = (
            v["images"].as_u64().unwrap_or(0) as u32,
            v["image_tokens"].as_u64().unwrap_or(0),
        );
        // Every line of a request says the same.
        assert_eq!(*per.entry(index).or_insert(got), got, "request {index}");
    }
    let statuses: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["path"] == "/v1/chat/completions")
        .map(|v| v["status"].clone())
        .collect();
    assert!(statuses.iter().all(|s| s == 200), "{statuses:?}");
    assert_eq!(statuses.len(), per.len(), "each request traced its tokens");
    (
        outcome,
        per.into_iter().map(|(i, (n, t))| (i, n, t)).collect(),
    )
}

#[test]
fn the_server_sees_each_rows_images_and_a_bad_image_stops_the_run_first() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut g = Gen::new(77, VOCAB);
    let mut rows = vision_arena_rows(&mut g, 9, "conversation");
    let case = Case {
        name: "e2e",
        argv: vec![
            "--dataset-path",
            "lmarena-ai/VisionArena-Chat",
            "--num-prompts",
            "12",
        ],
        split: "train",
        rows: rows.clone(),
        image_columns: json!({"images": "list"}),
    };
    // A copy whose row 4 (stored order) holds bytes that are no image.
    rows[4]["images"][0] = json!({"__bytes__": "PGh0bWw+bm90IGZvdW5kPC9odG1sPg=="});
    let bad = Case {
        name: "bad",
        rows,
        ..Case {
            argv: vec![
                "--dataset-path",
                "lmarena-ai/VisionArena-Chat",
                "--disable-shuffle",
            ],
            ..case_clone(&case)
        }
    };
    let answers = vllm(&python, &[case_clone(&case), bad], dir.path());
    let theirs = answers[0]["samples"].as_array().expect("vLLM's samples");
    let file = parquet(&dir.path().join("0"), "train");
    let (outcome, seen) = serve(
        dir.path(),
        &[
            "--dataset-path",
            file.to_str().unwrap(),
            "--hf-name",
            "lmarena-ai/VisionArena-Chat",
            "--num-prompts",
            "12",
        ],
    );
    outcome.expect("the run");
    assert_eq!(seen.len(), 12, "{seen:?}");
    for (i, n, tokens) in seen {
        let want = &theirs[i as usize]["images"];
        let pixels: u64 = want
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["size"][0].as_u64().unwrap() * s["size"][1].as_u64().unwrap())
            .sum();
        assert_eq!(
            (n as usize, tokens),
            (want.as_array().unwrap().len(), pixels),
            "request {i}: images and pixels"
        );
    }
    // vLLM's loader fails on the bad row too (PIL cannot open it); ours names it, before any
    // request is sent.
    assert!(answers[1]["error"].is_string(), "{}", answers[1]);
    let bad_file = parquet(&dir.path().join("1"), "train");
    let run_dir = dir.path().join("bad-run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let (outcome, seen) = serve(
        &run_dir,
        &[
            "--dataset-path",
            bad_file.to_str().unwrap(),
            "--hf-name",
            "lmarena-ai/VisionArena-Chat",
            "--disable-shuffle",
            "--num-prompts",
            "9",
        ],
    );
    let e = outcome.expect_err("the bad row stops the run");
    assert!(
        e.contains("row 4") && e.contains("column \"images\"[0]") && e.contains("not an image"),
        "{e}"
    );
    assert!(seen.is_empty(), "nothing sent: {seen:?}");
}

fn case_clone(c: &Case) -> Case {
    Case {
        name: c.name,
        argv: c.argv.clone(),
        split: c.split,
        rows: c.rows.clone(),
        image_columns: c.image_columns.clone(),
    }
}
