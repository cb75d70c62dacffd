//! `bench sglang --dataset-name longbench_v2` held against SGLang 0.5.23's own loader: rows
//! shaped like the hub's `THUDM/LongBench-v2` (its `_id`, `context`, `question`, `choice_A`..
//! `choice_D`, `answer` and the other columns) are written to local files, SGLang's own
//! argument parser and `get_dataset` build its rows from them (`tests/sglang_hub/longbench_v2.py`,
//! on the reference Python, `load_dataset` pointed at those files for the hub case), and
//! llmspeed builds its samples from the same rows and the same command line. Compared exactly:
//! the same prompts (text to the character), in the same order, with the same input lengths
//! (both tokenizers count words) and output lengths, for several seeds, `--sharegpt-output-len`
//! and `--sharegpt-context-len`.
//!
//! End to end: `llmspeed bench sglang` without `--dataset-path` fetches the dataset from a
//! stand-in hub (into a fresh Hugging Face cache) and sends it to the simulated server, whose
//! request log shows each prompt and `max_tokens` — the prompts SGLang builds from the same
//! `data.json`.
//!
//! Without the reference Python (`LLMSPEED_SGLANG_REF_PYTHON`) the comparisons say NOT RUN, or
//! fail under `CI=true`.

#[path = "support/mock.rs"]
mod mock_server;
#[path = "conformance/reference.rs"]
mod reference;
#[path = "support/hub.rs"]
mod stand_in;

use clap::Parser;
use llmspeed::bench::sglang::args::SglangArgs;
use llmspeed::workload::datasets::{self, PromptSource};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: SglangArgs,
}

/// A small deterministic generator of texts.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` words, with the characters a real context has (newlines, quotes, braces, accents).
    fn text(&mut self, n: usize) -> String {
        const WORDS: &[&str] = &[
            "the",
            "contract",
            "§4.2",
            "\"quoted\"",
            "{braces}",
            "naïve",
            "东京",
            "line\nbreak",
            "tab\there",
            "50%",
            "C:\\path",
            "end.",
        ];
        (0..n)
            .map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `n` rows in the hub dataset's shape, contexts of 5 to 400 words.
fn rows(n: usize) -> Vec<Value> {
    let mut g = Gen(0x1b_2025);
    (0..n)
        .map(|i| {
            let len = 5 + (g.next() % 396) as usize;
            json!({
                "_id": format!("66f36490821e116aacb2{i:04x}"),
                "domain": "Single-Document QA",
                "sub_domain": "Legal",
                "difficulty": if i % 2 == 0 { "easy" } else { "hard" },
                "length": "short",
                "question": format!("Which clause {}?", g.text(3)),
                "choice_A": g.text(2),
                "choice_B": g.text(4),
                "choice_C": g.text(1),
                "choice_D": g.text(3),
                "answer": "B",
                "context": g.text(len),
            })
        })
        .collect()
}

/// Runs SGLang's loader on each case; its answers.
fn sglang(python: &Path, cases: &Value) -> Vec<Value> {
    let offline = [("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")];
    let answer = reference::run_script(
        python,
        "tests/sglang_hub/longbench_v2.py",
        &[],
        &offline,
        cases,
    );
    serde_json::from_value(answer).expect("longbench_v2.py answers a JSON list")
}

/// llmspeed's samples for `argv` (bench sglang's flags), as `{prompt, prompt_len, output_len}`.
fn ours(argv: &[String]) -> Vec<Value> {
    let mut full = vec!["x".to_string()];
    full.extend(argv.iter().cloned());
    let cfg = Wrap::parse_from(&full).a.validate().expect("valid flags");
    let mut words = |t: &str| Ok(t.split_whitespace().count() as u64);
    datasets::load(&cfg.plan.dataset, &mut words)
        .expect("samples")
        .into_iter()
        .map(|s| {
            let PromptSource::Text(p) = s.prompt else {
                panic!("a text prompt")
            };
            json!({"prompt": p, "prompt_len": s.prompt_len, "output_len": s.output_len})
        })
        .collect()
}

/// SGLang's flags for a case: the dataset, 12 prompts, and `flags`.
fn argv(flags: &[&str]) -> Vec<String> {
    ["--dataset-name", "longbench_v2", "--num-prompts", "12"]
        .iter()
        .chain(flags)
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn longbench_v2_samples_are_sglangs_own() {
    let Some(python) = reference::SGLANG.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = rows(40);
    let flag_sets: Vec<Vec<&str>> = vec![
        vec!["--seed", "42"],
        vec!["--seed", "0", "--sharegpt-output-len", "64"],
        vec!["--seed", "7", "--sharegpt-context-len", "200"],
        vec![
            "--seed",
            "4000000007",
            "--sharegpt-output-len",
            "30",
            "--sharegpt-context-len",
            "150",
        ],
    ];
    let mut cases = Vec::new();
    for (k, flags) in flag_sets.iter().enumerate() {
        for source in ["parquet", "jsonl"] {
            cases.push(json!({
                "argv": argv(flags),
                "dir": dir.path().join(format!("{k}-{source}")),
                "rows": data,
                "source": source,
            }));
        }
    }
    let answers = sglang(&python, &Value::Array(cases.clone()));
    for (case, answer) in cases.iter().zip(&answers) {
        let file = match case["source"].as_str().unwrap() {
            "parquet" => "data.parquet",
            _ => "data.jsonl",
        };
        let path = Path::new(case["dir"].as_str().unwrap()).join(file);
        let mut a: Vec<String> = serde_json::from_value(case["argv"].clone()).unwrap();
        a.extend(["--dataset-path".into(), path.display().to_string()]);
        let want = answer["samples"].as_array().unwrap();
        let got = ours(&a);
        assert!(!want.is_empty(), "{a:?}");
        assert_eq!(got.len(), want.len(), "{a:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "{a:?} sample {i}");
        }
    }
    // The cases differ: the seed reorders, the context limit drops rows.
    let first = |i: usize| answers[i]["samples"][0]["prompt"].clone();
    assert_ne!(first(0), first(2));
    assert!(answers[4]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["prompt_len"].as_u64().unwrap() + 10 <= 200));
}

/// The hub's `data.json` for the stand-in: one JSON list, as THUDM/LongBench-v2 holds it.
fn hub_repo(data: &[Value]) -> stand_in::Repo {
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        "data.json".to_string(),
        serde_json::to_vec(&Value::Array(data.to_vec())).unwrap(),
    );
    files.insert(
        "README.md".to_string(),
        b"---\nlicense: apache-2.0\n---\n# LongBench v2\n".to_vec(),
    );
    stand_in::Repo {
        id: "THUDM/LongBench-v2".into(),
        sha: "2b48e49c0d8e4e6b9a1a8c1f7e3d4c5b6a798877".into(),
        files,
        configs: Value::Null,
        token: None,
        revision: None,
        model: false,
    }
}

/// `bench sglang --dataset-name longbench_v2` with no path: the rows come from the (stand-in)
/// hub into a fresh cache, and the server receives SGLang's prompts with `max_tokens` 10.
#[test]
fn bench_sglang_longbench_v2_fetches_the_hub_dataset_and_sends_sglangs_prompts() {
    let data = rows(16);
    let hub = stand_in::StandIn::start(vec![hub_repo(&data)]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "bench",
            "sglang",
            "--base-url",
            &server.url(),
            "--backend",
            "sglang-oai",
            "--dataset-name",
            "longbench_v2",
            "--num-prompts",
            "6",
            "--seed",
            "5",
            "--warmup-requests",
            "0",
            "--max-concurrency",
            "1",
        ])
        // SGLang's default result file lands in the working directory: the test's own.
        .current_dir(dir.path())
        .env("HF_ENDPOINT", &hub.url)
        .env("HF_HUB_CACHE", dir.path().join("hub"))
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    server.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The dataset landed in the Hugging Face cache layout, where Python finds it.
    assert!(dir
        .path()
        .join("hub/datasets--THUDM--LongBench-v2/snapshots")
        .is_dir());
    let sent: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/completions")
        .map(|r| r["body"].clone())
        // The engine's probe of the server (one token, a prompt of token ids) is not a sample.
        .filter(|b| b["prompt"].is_string())
        .collect();
    assert_eq!(sent.len(), 6, "{sent:?}");
    assert!(sent.iter().all(|b| b["max_tokens"] == 10), "{sent:?}");
    let got: Vec<String> = sent
        .iter()
        .map(|b| b["prompt"].as_str().unwrap().to_string())
        .collect();
    // Every prompt is a row's, in SGLang's layout, sent in the samples' order (one at a time).
    for p in &got {
        assert!(p.ends_with("\nAnswer:") && p.contains("\n\nQuestion: Which clause"));
    }
    let Some(python) = reference::SGLANG.python() else {
        return;
    };
    let case = json!([{
        "argv": ["--dataset-name", "longbench_v2", "--num-prompts", "6", "--seed", "5"],
        "dir": dir.path().join("ref"),
        "rows": data,
        "source": "hub",
    }]);
    let answer = &sglang(&python, &case)[0];
    let want: Vec<String> = answer["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["prompt"].as_str().unwrap().to_string())
        .collect();
    assert!(answer["samples"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["output_len"] == 10));
    assert_eq!(got, want);
}

/// A local file that is not there, or rows without the dataset's columns, stop the run before
/// anything is sent, naming the problem.
#[test]
fn bad_longbench_v2_files_are_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let cfg = Wrap::parse_from([
        "x",
        "--dataset-name",
        "longbench_v2",
        "--dataset-path",
        missing.to_str().unwrap(),
    ])
    .a
    .validate()
    .unwrap();
    let mut words = |t: &str| Ok(t.split_whitespace().count() as u64);
    let e = datasets::load(&cfg.plan.dataset, &mut words)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nope.jsonl") && e.contains("no such file"),
        "{e}"
    );
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"context\": \"c\", \"question\": \"q\"}\n").unwrap();
    let cfg = Wrap::parse_from([
        "x",
        "--dataset-name",
        "longbench_v2",
        "--dataset-path",
        bad.to_str().unwrap(),
    ])
    .a
    .validate()
    .unwrap();
    let e = datasets::load(&cfg.plan.dataset, &mut words)
        .unwrap_err()
        .to_string();
    assert!(e.contains("choice_A"), "{e}");
}

/// `bench sglang --dataset-name mmmu` held against SGLang's own `sample_mmmu_requests`: the
/// same parquet file (a `{bytes, path}` struct per image, as the hub's MMMU/MMMU holds it,
/// decoded by the `datasets` library's Image feature on SGLang's side; one row without an
/// image), the same command lines. Compared exactly: each
/// request's text, its image's pixel size (PIL's on SGLang's side, the header's on ours), the
/// output length, the order (Python's `random.sample` for the seed) and the count. Not
/// compared: the image bytes (SGLang re-encodes each as PNG; llmspeed sends the row's file).
#[test]
fn mmmu_requests_are_sglangs_own() {
    use llmspeed::workload::datasets::mmmu;
    use llmspeed::workload::image::{encode_jpeg, encode_png};
    use llmspeed::workload::rows::{self, DatasetFiles, FileFormat, Row, RowOrder};
    let Some(python) = reference::SGLANG.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut g = Gen(0x3a3a);
    let data: Vec<Value> = (0..30)
        .map(|i| {
            let (w, h) = (8 + (g.next() % 40) as u32, 6 + (g.next() % 30) as u32);
            let rgb: Vec<u8> = (0..w * h * 3).map(|k| (k * 13 + i) as u8).collect();
            let (bytes, ext) = match i % 3 {
                0 => (encode_jpeg(w, h, &rgb).unwrap(), "jpg"),
                _ => (encode_png(w, h, &rgb).unwrap(), "png"),
            };
            let p = dir.path().join(format!("m{i}.{ext}"));
            std::fs::write(&p, bytes).unwrap();
            json!({
                "question": format!("<image 1> Find x. {}", g.text(4)),
                "image_1": if i == 4 { Value::Null } else { json!(p) },
            })
        })
        .collect();
    let base = ["--backend", "sglang-oai-chat", "--dataset-name", "mmmu"];
    let flag_sets: Vec<Vec<&str>> = vec![
        vec!["--num-prompts", "10", "--seed", "42"],
        vec![
            "--num-prompts",
            "25",
            "--seed",
            "3",
            "--random-output-len",
            "77",
        ],
        vec!["--num-prompts", "40", "--seed", "1"],
    ];
    let parquet = dir.path().join("math-test.parquet");
    let mut cases: Vec<Value> = flag_sets
        .iter()
        .map(|f| {
            let argv: Vec<&str> = base.iter().chain(f).copied().collect();
            json!({"argv": argv, "parquet": parquet, "rows": data})
        })
        .collect();
    // The native backend, with the suite's tiny vision models as the processor: SGLang's
    // prompt is the processor's chat template around the image and the text.
    for var in ["LLMSPEED_VLLM_VISION_MODEL", "LLMSPEED_VLLM_QWEN2VL_MODEL"] {
        let Some(model) = reference::tiny_vision(var) else {
            continue;
        };
        let argv = [
            "--backend",
            "sglang",
            "--dataset-name",
            "mmmu",
            "--num-prompts",
            "10",
        ];
        cases.push(json!({"argv": argv, "parquet": parquet, "rows": data, "processor": model}));
    }
    let answer = reference::run_script(
        &python,
        "tests/sglang_hub/mmmu.py",
        &[],
        &[("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")],
        &Value::Array(cases.clone()),
    );
    for (case, answer) in cases.iter().zip(answer.as_array().unwrap()) {
        let argv: Vec<String> = serde_json::from_value(case["argv"].clone()).unwrap();
        let mut full = vec!["x".to_string()];
        full.extend(argv.iter().cloned());
        let cfg = Wrap::parse_from(&full).a.validate().expect("valid flags");
        let files = DatasetFiles {
            id: "MMMU/MMMU".into(),
            subset: Some("Math".into()),
            split: "test".into(),
            format: FileFormat::Parquet,
            files: vec![parquet.clone()],
        };
        let rows: Vec<Row> = rows::open(&files, &mmmu::COLUMNS, RowOrder::AsStored)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut words = |t: &str| Ok(t.split_whitespace().count() as u64);
        let got: Vec<Value> = mmmu::samples(&cfg.plan.dataset, rows, &mut words)
            .unwrap()
            .iter()
            .map(|s| {
                let PromptSource::Multimodal { text, images } = &s.prompt else {
                    panic!("images")
                };
                let PromptSource::Text(t) = &**text else {
                    panic!("text")
                };
                json!({
                    "text": t,
                    "sizes": images.iter().map(|i| json!([i.width, i.height])).collect::<Vec<_>>(),
                    "output_len": s.output_len,
                })
            })
            .collect();
        let want: Vec<Value> = answer["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| json!({"text": r["text"], "sizes": r["sizes"], "output_len": r["output_len"]}))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got, want, "{argv:?}");
        // The native backend: the text each request sends is SGLang's prompt, to the
        // character (for SGLang's data URL of the image: the template does not print it).
        if let Some(model) = case["processor"].as_str() {
            use llmspeed::workload::chat_template::ChatTemplate;
            use llmspeed::workload::datasets::sglang_image::native_prompt;
            let p = ChatTemplate::load_processor_dir(Path::new(model)).unwrap();
            for (g, r) in got.iter().zip(answer["requests"].as_array().unwrap()) {
                let urls: Vec<&str> = r["urls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|u| u.as_str().unwrap())
                    .collect();
                let ours = native_prompt(&p, g["text"].as_str().unwrap(), &urls);
                assert_eq!(ours.fallback, None);
                assert_eq!(ours.text, r["prompt"].as_str().unwrap(), "{model}");
            }
        }
    }
    mmmu_end_to_end(&std::fs::read(&parquet).unwrap(), &answer[0]["requests"]);
}

/// `bench sglang --dataset-name mmmu` (the first case's flags) with the parquet file served by
/// the stand-in hub as MMMU/MMMU's `Math/test-*` into a fresh cache: the simulated server
/// receives SGLang's requests in order (one at a time), each chat body the row's image (its size
/// read by the server) before the text, with SGLang's output length.
fn mmmu_end_to_end(parquet: &[u8], sglang: &Value) {
    let readme = "---\nconfigs:\n- config_name: Math\n  data_files:\n  - split: test\n    \
                  path: Math/test-*\n---\n# MMMU\n";
    let mut files = std::collections::BTreeMap::new();
    files.insert("README.md".to_string(), readme.as_bytes().to_vec());
    files.insert(
        "Math/test-00000-of-00001.parquet".to_string(),
        parquet.to_vec(),
    );
    let repo = stand_in::Repo {
        id: "MMMU/MMMU".into(),
        sha: "5a7a1c6e3f0b9d8c7b6a5f4e3d2c1b0a99887766".into(),
        files,
        configs: json!([{"config_name": "Math", "data_files": [
            {"split": "test", "path": "Math/test-*"}]}]),
        token: None,
        revision: None,
        model: false,
    };
    let hub = stand_in::StandIn::start(vec![repo]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "bench",
            "sglang",
            "--base-url",
            &server.url(),
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "mmmu",
            "--num-prompts",
            "10",
            "--seed",
            "42",
            "--warmup-requests",
            "0",
            "--max-concurrency",
            "1",
            "--output-file",
            dir.path().join("out.jsonl").to_str().unwrap(),
        ])
        .env("HF_ENDPOINT", &hub.url)
        .env("HF_HUB_CACHE", dir.path().join("hub"))
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    server.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/chat/completions")
        .map(|r| r["body"].clone())
        .collect();
    let want = sglang.as_array().unwrap();
    assert_eq!(sent.len(), want.len());
    for (b, w) in sent.iter().zip(want) {
        let parts = b["messages"][0]["content"].as_array().unwrap();
        let url = parts[0]["image_url"]["url"].as_str().unwrap();
        let size = llmspeed::mock::image::url_size(url).unwrap();
        assert_eq!(json!([size.width, size.height]), w["sizes"][0]);
        assert_eq!(parts[1], json!({"type": "text", "text": w["text"]}));
        assert_eq!(b["max_completion_tokens"], w["output_len"]);
    }
}
