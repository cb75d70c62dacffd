//! `bench serve --dataset-name hf` run as vLLM 0.33's own client runs it: one row per dataset
//! class vLLM builds (ConversationDataset, InstructCoder, MT-Bench, HumanEval, GSM8K, AIMO,
//! NextEditPrediction, Blazedit, MLPerf, BFCL), each with the flags that class reads. Each row's
//! dataset is written into a Hugging Face hub cache (`HF_HUB_CACHE`, the layout
//! `huggingface_hub` leaves after a download: blobs, a snapshot linking them, `refs/main`); vLLM's
//! whole `vllm bench serve` runs against one simulated server (`llmspeed mock`) with the
//! `datasets` library reading that cache's snapshot (`tests/conformance/vllm_hf_serve.py`: the
//! one change to vLLM is its `load_dataset` call, which asks the hub even for cached files), and
//! `llmspeed bench serve` runs the same command line against a fresh server of the same
//! settings, offline on the same cache (`HF_HUB_OFFLINE=1`), as a user who fetched the dataset
//! with Python runs it.
//!
//! Compared per row: the exit code; the result file's keys in order (ours adds `llmspeed`, last)
//! and each shared value's JSON type; completed, failed, `total_input_tokens` and
//! `total_output_tokens`; the console block's labels in order and its counts; and what the server
//! received: the same kinds of calls and the generation requests' bodies field by field
//! (`tests/conformance/bodies.rs`), the prompts to the character, chat messages and BFCL's
//! `tools` structure by structure, `max_tokens` per request — as multisets (which request
//! reaches the server first is each tool's scheduling; the samples' order is held to vLLM's by
//! `tests/hf_vllm.rs`). A difference kept on purpose is in [`DELIBERATE`] with its reason.
//!
//! Cost: all rows' vLLM runs share one Python process (torch and vLLM imported once, about
//! 60 s on an idle 2-core machine, up to 150 s on a busy one), then a few seconds a row for
//! each tool: the whole file about 1.5-3 minutes. Needs the vLLM 0.33 reference
//! (`LLMSPEED_VLLM_REF_PYTHON`) and the tiny tokenizer (`LLMSPEED_VLLM_MODEL`): NOT RUN without
//! them, a failure under `CI=true`. `LLMSPEED_CONFORMANCE_ROWS=TEXT` runs only the rows whose
//! name contains TEXT; `LLMSPEED_CONFORMANCE_KEEP=1` keeps the folder (results, console
//! output, request logs, the cache) and prints where.

#[path = "conformance/bodies.rs"]
mod bodies;
#[path = "conformance/reference.rs"]
mod reference;
#[path = "conformance/results.rs"]
mod results;
mod support;

use results::{check, ran_with, tail, Ran};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::mock::MockThread;

/// One dataset in the cache: its hub id, the files of its snapshot (parquet files' rows, or
/// JSON-lines files' rows), and its card (`README.md`) when the row needs its `configs`. With
/// a `folder` (in the test's folder, `{dir}/NAME` in a row), a local copy there instead.
struct Dataset {
    id: &'static str,
    parquet: Vec<(String, Vec<Value>)>,
    jsonl: Vec<(&'static str, Vec<Value>)>,
    card: Option<&'static str>,
    folder: Option<&'static str>,
}

/// One command line, run by both tools (the server, tokenizer and result-file flags are added).
struct Row {
    name: &'static str,
    args: &'static [&'static str],
    /// Body fields the reference must send on this row (what the row is there to exercise).
    sends: &'static [&'static str],
    /// A failure of vLLM's that llmspeed does not copy: (what vLLM's stderr says, why ours
    /// runs). The row then holds vLLM to failing so, sending nothing, and llmspeed to
    /// completing every request.
    vllm_fails: Option<(&'static str, &'static str)>,
}

const ROWS: &[Row] = &[
    Row {
        name: "InstructCoder: the chat template, --hf-output-len, oversampled, --seed",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "likaixin/InstructCoder",
            "--num-prompts",
            "18",
            "--hf-output-len",
            "6",
            "--seed",
            "4",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "InstructCoder: --skip-chat-template, --no-oversample, --disable-shuffle",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "likaixin/InstructCoder",
            "--num-prompts",
            "20",
            "--skip-chat-template",
            "--no-oversample",
            "--disable-shuffle",
            "--hf-output-len",
            "5",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "InstructCoder: --no-stream, --seed (every row of three files shuffled)",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "likaixin/InstructCoder",
            "--no-stream",
            "--num-prompts",
            "6",
            "--seed",
            "8",
            "--hf-output-len",
            "4",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "ShareGPT_Vicuna (ConversationDataset): --hf-output-len, --max-concurrency",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "Aeala/ShareGPT_Vicuna_unfiltered",
            "--hf-split",
            "train",
            "--num-prompts",
            "5",
            "--hf-output-len",
            "3",
            "--max-concurrency",
            "2",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "ShareGPT_Vicuna (ConversationDataset): --hf-split, output lengths from the replies",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "Aeala/ShareGPT_Vicuna_unfiltered",
            "--hf-split",
            "train",
            "--num-prompts",
            "6",
            "--seed",
            "9",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "MT-Bench: the chat template, its output length",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "philschmid/mt-bench",
            "--num-prompts",
            "3",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "HumanEval: split test, --hf-output-len",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "openai/openai_humaneval",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "7",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "MT-Bench with warm-ups: --num-warmups, --hf-output-len",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "philschmid/mt-bench",
            "--num-prompts",
            "3",
            "--num-warmups",
            "2",
            "--hf-output-len",
            "4",
            "--disable-shuffle",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "InstructCoder on chat: the templated prompt as the user message",
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            "likaixin/InstructCoder",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "5",
            "--disable-shuffle",
        ],
        sends: &["messages", "max_completion_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "GSM8K: its default subset (main) and split (test), the chat template",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "openai/gsm8k",
            "--num-prompts",
            "3",
            "--hf-output-len",
            "4",
            "--disable-shuffle",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "GSM8K: --hf-subset and --hf-split from the card's configs",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "openai/gsm8k",
            "--hf-subset",
            "socratic",
            "--hf-split",
            "train",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "5",
            "--skip-chat-template",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "AIMO: output lengths from the solutions, vLLM's length filter",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "AI-MO/aimo-validation-aime",
            "--num-prompts",
            "5",
            "--seed",
            "2",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "NuminaMath-CoT (AIMO): a local copy named by --hf-name, --hf-output-len",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "{dir}/numina",
            "--hf-name",
            "AI-MO/NuminaMath-CoT",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "9",
            "--seed",
            "5",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "zeta (NextEditPrediction): its prompt and output from the edit",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "zed-industries/zeta",
            "--num-prompts",
            "4",
            "--disable-shuffle",
            // Read by no rule of the class: each output length stays the edit's.
            "--hf-output-len",
            "3",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "Blazedit: --blazedit-min-distance and --blazedit-max-distance",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "vdaita/edit_5k_char",
            "--num-prompts",
            "5",
            "--blazedit-min-distance",
            "0.2",
            "--blazedit-max-distance",
            "0.7",
            "--seed",
            "6",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "Blazedit: edit_10k_char, its default distances",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "vdaita/edit_10k_char",
            "--num-prompts",
            "4",
            "--disable-shuffle",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "ShareGPT_Vicuna without --hf-split: vLLM fails, llmspeed reads train",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "Aeala/ShareGPT_Vicuna_unfiltered",
            "--num-prompts",
            "3",
            "--hf-output-len",
            "3",
        ],
        sends: &[],
        vllm_fails: Some((
            "TypeError: string indices must be integers",
            "vLLM 0.33 gives ConversationDataset no default split: `load_dataset(split=None)` \
             returns the dict of splits, whose keys it then reads as rows; llmspeed reads \
             `train`, the split vLLM's documentation passes",
        )),
    },
    Row {
        name: "Blazedit filtered short of --num-prompts: vLLM fails, llmspeed oversamples",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "vdaita/edit_5k_char",
            "--num-prompts",
            "6",
            "--blazedit-min-distance",
            "0.5",
            "--blazedit-max-distance",
            "0.6",
            "--disable-shuffle",
        ],
        sends: &[],
        vllm_fails: Some((
            "Duplicate request_id",
            "vLLM 0.33's Blazedit numbers its requests by row read, so the requests its \
             oversampling adds repeat an id and its own check stops the run; llmspeed \
             oversamples as every other class does",
        )),
    },
    Row {
        name: "MLPerf llama2: --hf-output-len, --seed",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "mgoin/mlperf-inference-llama2-data",
            "--num-prompts",
            "4",
            "--hf-output-len",
            "5",
            "--seed",
            "12",
        ],
        sends: &["prompt"],
        vllm_fails: None,
    },
    Row {
        name: "MLPerf: its chat prompt and reference output lengths",
        args: &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "mgoin/mlperf-inference-llama3.1-data",
            "--num-prompts",
            "5",
            "--disable-shuffle",
        ],
        sends: &["prompt", "max_tokens"],
        vllm_fails: None,
    },
    Row {
        name: "BFCL on chat: its default categories in stored order",
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
            "--num-prompts",
            "9",
            "--disable-shuffle",
            "--temperature",
            "0",
        ],
        sends: &["messages", "tools", "tool_choice", "temperature"],
        vllm_fails: None,
    },
    Row {
        name: "BFCL on chat: its messages and tools, --bfcl-categories, --seed",
        args: &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
            "--bfcl-categories",
            "simple,multiple",
            "--num-prompts",
            "6",
            "--seed",
            "3",
        ],
        sends: &["messages", "tools", "tool_choice"],
        vllm_fails: None,
    },
];

/// Differences kept on purpose: (what, reason). `what` is a result key or console label the
/// comparison then skips, or a request difference by the key `bodies::compare` names it with
/// (docs/migrate-vllm.md lists them).
const DELIBERATE: &[(&str, &str)] = &[
    (
        "GET /version: only llmspeed calls it",
        results::SERVER_PROBE,
    ),
    (
        "POST /tokenize: only llmspeed calls it",
        results::SERVER_PROBE,
    ),
    (
        "POST /v1/completions (not streamed, before the run): only llmspeed calls it",
        results::SERVER_PROBE,
    ),
    ("x-request-id", results::UUID_REQUEST_IDS),
];

fn deliberate(what: &str) -> bool {
    DELIBERATE.iter().any(|(w, _)| *w == what)
}

/// A small deterministic text source: words with non-ASCII letters, braces, quotes and
/// newlines (each must reach the server as read from the parquet file).
struct Words(u64);

impl Words {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    /// Between `lo` and `hi` words.
    fn text(&mut self, lo: u64, hi: u64) -> String {
        const VOCAB: [&str; 10] = [
            "the", "code", "naïve", "日本", "{x}", "return", "\"q\"", "é", "x=1;", "sea",
        ];
        let n = lo + self.below(hi - lo + 1);
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(if self.below(8) == 0 { '\n' } else { ' ' });
            }
            s += VOCAB[self.below(VOCAB.len() as u64) as usize];
        }
        s
    }
}

/// GSM8K's card on the hub: two configs, each with its own files per split.
const GSM8K_CARD: &str =
    "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    \
    path: main/train-*\n  - split: test\n    path: main/test-*\n- config_name: socratic\n  \
    data_files:\n  - split: train\n    path: socratic/train-*\n  - split: test\n    path: \
    socratic/test-*\n---\n# GSM8K\n";

/// The datasets the rows read, with rows shaped as each one's hub files are.
/// `id`'s train split in `n` parquet files, as the hub names them.
fn sharded(id: &'static str, n: usize, rows: Vec<Value>) -> Dataset {
    let per = rows.len().div_ceil(n).max(1);
    Dataset {
        id,
        parquet: rows
            .chunks(per)
            .enumerate()
            .map(|(k, c)| (format!("data/train-{k:05}-of-{n:05}.parquet"), c.to_vec()))
            .collect(),
        jsonl: vec![],
        card: None,
        folder: None,
    }
}

fn datasets() -> Vec<Dataset> {
    let mut w = Words(0x5DEE_CE66_D1CE_4E5B);
    fn rows(w: &mut Words, n: usize, mut f: impl FnMut(usize, &mut Words) -> Value) -> Vec<Value> {
        (0..n).map(|i| f(i, w)).collect()
    }
    let parquet = |id, rows| sharded(id, 1, rows);
    let ic = rows(
        &mut w,
        15,
        |i, w| json!({"input": format!("def f{i}():\n    {}", w.text(2, 12)), "instruction": w.text(3, 9), "output": "o"}),
    );
    let conv = rows(&mut w, 12, |i, w| {
        // Some with one turn (skipped), some replies under 4 tokens (filtered by vLLM's rule).
        let turns = if i % 5 == 4 { 1 } else { 2 + (i % 2) };
        let conv: Vec<Value> = (0..turns)
            .map(|t| {
                let text = if t == 1 && i % 6 == 1 {
                    "ok".to_string()
                } else {
                    w.text(4, 20)
                };
                json!({"from": if t % 2 == 0 { "human" } else { "gpt" }, "value": text})
            })
            .collect();
        json!({"id": format!("c{i}"), "conversations": conv})
    });
    let mt = rows(
        &mut w,
        4,
        |i, w| json!({"question_id": 81 + i, "category": "writing", "turns": [w.text(4, 16), w.text(4, 16)]}),
    );
    let he = rows(
        &mut w,
        5,
        |i, w| json!({"task_id": format!("HumanEval/{i}"), "prompt": format!("def f{i}(x):\n    \"\"\"{}\"\"\"\n", w.text(3, 12)), "entry_point": format!("f{i}")}),
    );
    let gsm = |w: &mut Words, tag: &str| -> Vec<Value> {
        (0..5)
            .map(|i| json!({"question": format!("{tag} {i}: {}", w.text(4, 14)), "answer": "#### 4"}))
            .collect()
    };
    // Each config's every split (the `datasets` library requires the card's files to exist):
    // the row reads one subset's one split, each holding other texts.
    let (gsm_main, gsm_soc) = (gsm(&mut w, "main train"), gsm(&mut w, "socratic train"));
    let (gsm_main_test, gsm_soc_test) = (gsm(&mut w, "main test"), gsm(&mut w, "socratic test"));
    let aimo = rows(&mut w, 8, |i, w| {
        // One solution under 4 tokens: filtered.
        let solution = if i == 2 {
            "4".to_string()
        } else {
            w.text(6, 30)
        };
        json!({"id": i, "problem": w.text(5, 20), "solution": solution, "answer": "4", "url": "u"})
    });
    let zeta = rows(&mut w, 5, |i, w| {
        let output = format!(
            "{} <|editable_region_start|>\n{}\n<|editable_region_end|>",
            w.text(1, 3),
            w.text(3, 10)
        );
        json!({"events": w.text(3, 10), "input": format!("<|editable_region_start|>\n{}", w.text(3, 10)), "output": if i == 3 { w.text(3, 8) } else { output }})
    });
    let blaz = rows(
        &mut w,
        10,
        |i, w| json!({"code": w.text(5, 25), "change_request": w.text(3, 10), "norm_distance": (i as f64) / 10.0}),
    );
    let mlperf = rows(
        &mut w,
        6,
        |i, w| json!({"system_prompt": if i % 2 == 0 { w.text(2, 6) } else { String::new() }, "question": w.text(4, 18), "output": w.text(4, 12)}),
    );
    let bfcl = |cat: &str, n: usize, w: &mut Words| -> Vec<Value> {
        (0..n)
            .map(|i| {
                let f = json!({"name": format!("{cat}_f{i}"), "description": w.text(3, 6),
                    "parameters": {"type": "dict", "properties": {
                        "x": {"type": "float", "description": "x"},
                        "xs": {"type": "tuple", "items": {"type": "any"}},
                        "n": {"type": "integer"}}, "required": ["x"]}});
                let functions = if i % 2 == 0 {
                    json!([f, {"name": "g", "parameters": {"type": "dict", "properties": {}}}])
                } else {
                    f
                };
                json!({"id": format!("{cat}_{i}"), "question": [[
                    {"role": "system", "content": "You call functions."},
                    {"role": "user", "content": w.text(4, 14)}
                ]], "function": functions})
            })
            .collect()
    };
    let (simple, multiple) = (bfcl("simple", 4, &mut w), bfcl("multiple", 3, &mut w));
    let live_simple = bfcl("live_simple", 2, &mut w);
    vec![
        sharded("likaixin/InstructCoder", 3, ic),
        sharded("Aeala/ShareGPT_Vicuna_unfiltered", 3, conv),
        parquet("philschmid/mt-bench", mt),
        Dataset {
            parquet: vec![("openai_humaneval/test-00000-of-00001.parquet".into(), he)],
            ..parquet("openai/openai_humaneval", vec![])
        },
        Dataset {
            id: "openai/gsm8k",
            parquet: vec![
                ("main/train-00000-of-00001.parquet".into(), gsm_main),
                ("main/test-00000-of-00001.parquet".into(), gsm_main_test),
                ("socratic/train-00000-of-00001.parquet".into(), gsm_soc),
                ("socratic/test-00000-of-00001.parquet".into(), gsm_soc_test),
            ],
            jsonl: vec![],
            card: Some(GSM8K_CARD),
            folder: None,
        },
        parquet("AI-MO/aimo-validation-aime", aimo.clone()),
        Dataset {
            folder: Some("numina"),
            ..parquet("AI-MO/NuminaMath-CoT", aimo)
        },
        parquet("zed-industries/zeta", zeta),
        parquet("vdaita/edit_5k_char", blaz.clone()),
        parquet("vdaita/edit_10k_char", blaz),
        parquet("mgoin/mlperf-inference-llama3.1-data", mlperf.clone()),
        parquet("mgoin/mlperf-inference-llama2-data", mlperf),
        Dataset {
            id: "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
            parquet: vec![],
            jsonl: vec![
                ("BFCL_v3_simple.json", simple),
                ("BFCL_v3_multiple.json", multiple),
                ("BFCL_v3_live_simple.json", live_simple),
            ],
            card: None,
            folder: None,
        },
    ]
}

/// The command line of `row` for one tool: the server, the tokenizer, quiet, the result file.
fn argv(row: &Row, url: &str, tokenizer: &Path, dir: &Path, file: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--base-url",
        url,
        "--tokenizer",
        &tokenizer.display().to_string(),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        &dir.display().to_string(),
        "--result-filename",
        file,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let root = dir
        .parent()
        .expect("a row's folder is in the test's")
        .display()
        .to_string();
    a.extend(row.args.iter().map(|s| s.replace("{dir}", &root)));
    a
}

fn server(log: PathBuf) -> MockThread {
    let mut c = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    c.request_log = Some(log);
    MockThread::start(c)
}

/// Every row by vLLM, all in one launcher process, each against its own server; the cache is
/// filled on the way. Returns each row's run and prints the process's wall time.
fn reference_runs(python: &Path, tokenizer: &Path, rows: &[&Row], dir: &Path) -> Vec<Ran> {
    let cache = dir.join("hub");
    let servers: Vec<MockThread> = rows
        .iter()
        .enumerate()
        .map(|(i, _)| {
            std::fs::create_dir_all(dir.join(i.to_string())).unwrap();
            server(dir.join(format!("{i}/ref-requests.jsonl")))
        })
        .collect();
    let runs: Vec<Value> = rows
        .iter()
        .zip(&servers)
        .enumerate()
        .map(|(i, (row, s))| {
            let d = dir.join(i.to_string());
            json!({"argv": argv(row, &s.url(), tokenizer, &d, "ref.json"),
                "stdout": d.join("ref.stdout"), "stderr": d.join("ref.stderr")})
        })
        .collect();
    let datasets: Vec<Value> = datasets()
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let files = |f: Vec<(String, Vec<Value>)>| -> serde_json::Map<String, Value> {
                f.into_iter().map(|(p, r)| (p, json!(r))).collect()
            };
            let jsonl = d
                .jsonl
                .into_iter()
                .map(|(p, r)| (p.to_string(), r))
                .collect();
            json!({"id": d.id, "commit": format!("{:040x}", 0xc0ffee + i), "card": d.card,
                "folder": d.folder.map(|f| dir.join(f)),
                "parquet": files(d.parquet), "jsonl": files(jsonl)})
        })
        .collect();
    let spec = json!({"cache": cache, "datasets": datasets, "runs": runs});
    let started = std::time::Instant::now();
    let mut envs: Vec<(&str, std::ffi::OsString)> = reference::OFFLINE
        .iter()
        .map(|(k, v)| (*k, v.into()))
        .collect();
    envs.push(("HF_HUB_CACHE", cache.clone().into_os_string()));
    envs.push((
        "HF_DATASETS_CACHE",
        dir.join("datasets-cache").into_os_string(),
    ));
    let codes = reference::run_script(
        python,
        "tests/conformance/vllm_hf_serve.py",
        &[],
        &envs,
        &spec,
    );
    let codes = codes.as_array().expect("one exit code per run");
    eprintln!(
        "vLLM {}'s client: {} rows in one process, {:.0} s",
        reference::VLLM.version,
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    servers.into_iter().for_each(MockThread::stop);
    codes
        .iter()
        .enumerate()
        .map(|(i, code)| {
            let d = dir.join(i.to_string());
            let text = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
            ran_with(
                code.as_i64().map(|c| c as i32),
                text("ref.stdout"),
                text("ref.stderr"),
                &d.join("ref.json"),
                &d.join("ref-requests.jsonl"),
            )
        })
        .collect()
}

/// One row by llmspeed against a fresh server, offline on the cache vLLM's run filled.
fn our_run(row: &Row, tokenizer: &Path, dir: &Path, d: &Path) -> Ran {
    let log = d.join("ours-requests.jsonl");
    let s = server(log.clone());
    let out = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(["bench", "serve"])
        .args(argv(row, &s.url(), tokenizer, d, "ours.json"))
        .env("HF_HUB_CACHE", dir.join("hub"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("run llmspeed");
    s.stop();
    results::ran(out, &d.join("ours.json"), &log)
}

/// A row where vLLM fails on purpose ([`Row::vllm_fails`]): vLLM failing as it says, before
/// sending anything; llmspeed completing every request.
fn compare_failing(row: &Row, says: &str, r: &Ran, o: &Ran) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: String| out.push(format!("{}: {what}", row.name));
    let generated = |log: &[bodies::Logged]| {
        log.iter()
            .filter(|q| bodies::GENERATE.contains(&q.path.as_str()))
            .count()
    };
    if r.code == Some(0) || !r.stderr.contains(says) || generated(&r.requests) > 0 {
        differ(format!(
            "vLLM no longer fails with {says:?} before sending (exit {:?}, {} generation \
             requests): compare this row's bodies instead\nreference stderr tail: {}",
            r.code,
            generated(&r.requests),
            tail(&r.stderr)
        ));
    }
    let asked = row
        .args
        .windows(2)
        .find(|w| w[0] == "--num-prompts")
        .and_then(|w| w[1].parse::<u64>().ok());
    let completed = o.result.as_ref().and_then(|v| v["completed"].as_u64());
    if o.code != Some(0) || completed != asked {
        differ(format!(
            "llmspeed: exit {:?}, {completed:?} of {asked:?} requests completed\nstderr: {}",
            o.code,
            tail(&o.stderr)
        ));
    }
    out
}

/// Every difference between the two runs of `row` that is not [`DELIBERATE`], one line each.
fn compare(row: &Row, r: &Ran, o: &Ran) -> Vec<String> {
    if let Some((says, _)) = row.vllm_fails {
        return compare_failing(row, says, r, o);
    }
    let mut out = Vec::new();
    let mut differ = |what: String| out.push(format!("{}: {what}", row.name));
    if let Some(d) = check::exit_codes(r, o, true) {
        differ(d);
        return out;
    }
    let (rv, ov) = match check::results(r, o) {
        Ok(both) => both,
        Err(d) => {
            differ(d);
            return out;
        }
    };
    let steps = [
        check::keys(r, o, &deliberate),
        check::same_values(
            rv,
            ov,
            &[
                "completed",
                "failed",
                "total_input_tokens",
                "total_output_tokens",
            ],
        ),
        check::console(
            r,
            o,
            &deliberate,
            &[
                "Successful requests:",
                "Failed requests:",
                "Total input tokens:",
                "Total generated tokens:",
            ],
        ),
    ];
    steps.into_iter().flatten().for_each(&mut differ);
    let measured = check::measured;
    let (theirs, ours) = (
        bodies::sort(&r.requests, measured(rv)),
        bodies::sort(&o.requests, measured(ov)),
    );
    if theirs.measured.is_empty() {
        differ("the reference sent no measured request: the row compares nothing".into());
    }
    for field in row.sends {
        if !theirs.measured.iter().all(|q| q.body.get(*field).is_some()) {
            differ(format!(
                "the reference's requests lack `{field}`, which this row is there to compare"
            ));
        }
    }
    // The prompts as read from the dataset's files: texts compared as they are.
    for (key, what) in bodies::compare(&theirs, &ours, true) {
        if !deliberate(&key) {
            differ(format!("request bodies: {what}"));
        }
    }
    out
}

#[test]
fn hf_datasets_run_as_vllm_bench_serve_runs_them() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let Some(tokenizer) = reference::tiny_tokenizer() else {
        return;
    };
    let only = std::env::var("LLMSPEED_CONFORMANCE_ROWS").unwrap_or_default();
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|r| r.name.contains(only.as_str()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let theirs = reference_runs(&python, &tokenizer, &rows, dir.path());
    let mut problems = Vec::new();
    for (i, (row, r)) in rows.iter().zip(&theirs).enumerate() {
        let d = dir.path().join(i.to_string());
        let o = our_run(row, &tokenizer, dir.path(), &d);
        let found = compare(row, r, &o);
        if found.is_empty() && row.vllm_fails.is_some() {
            eprintln!("{}: vLLM fails as noted, llmspeed ran", row.name);
        } else if found.is_empty() {
            eprintln!(
                "{}: the same ({} requests)",
                row.name,
                r.result
                    .as_ref()
                    .map_or(Value::Null, |v| v["completed"].clone())
            );
        }
        problems.extend(found);
    }
    if std::env::var_os("LLMSPEED_CONFORMANCE_KEEP").is_some() {
        eprintln!("kept in {}", dir.keep().display());
    }
    assert!(
        problems.is_empty(),
        "vLLM {} and llmspeed differ:\n{}",
        reference::VLLM.version,
        problems.join("\n\n")
    );
}

#[test]
fn the_comparison_names_each_difference_and_each_failure() {
    let row = ROWS
        .iter()
        .find(|r| r.sends == ["prompt", "max_tokens"])
        .unwrap();
    let run = |ours: bool, code: i32, prompt: &str, max_tokens: u64, input: u64| {
        let mut keys: Vec<String> = ["completed", "failed", "total_input_tokens"]
            .map(String::from)
            .to_vec();
        if ours {
            keys.push("llmspeed".into());
        }
        Ran {
            code: Some(code),
            stdout: String::new(),
            stderr: String::new(),
            result: Some(json!({"completed": 1, "failed": 0, "total_input_tokens": input})),
            keys,
            requests: vec![bodies::Logged {
                arrival_ns: 1,
                method: "POST".into(),
                path: "/v1/completions".into(),
                request_id: None,
                routing_key: None,
                status: 200,
                body: json!({"prompt": prompt, "max_tokens": max_tokens, "stream": true}),
            }],
        }
    };
    let theirs = run(false, 0, "def f0(): é", 6, 12);
    assert_eq!(
        compare(row, &theirs, &run(true, 0, "def f0(): é", 6, 12)),
        Vec::<String>::new()
    );
    let named = |ours: Ran, what: &str| {
        let d = compare(row, &theirs, &ours);
        assert!(d.iter().any(|l| l.contains(what)), "{what} not in {d:?}");
    };
    named(run(true, 0, "def f0(): e", 6, 12), "prompts");
    named(run(true, 0, "def f0(): é", 7, 12), "`max_tokens`");
    named(run(true, 0, "def f0(): é", 6, 13), "total_input_tokens");
    named(run(true, 2, "def f0(): é", 6, 12), "exit code");
    named(run(false, 0, "def f0(): é", 6, 12), "`llmspeed`");
    // A row vLLM fails on purpose: its failure, before any request, and all of ours completed.
    let failing = ROWS.iter().find(|r| r.vllm_fails.is_some()).unwrap();
    let (says, _) = failing.vllm_fails.unwrap();
    let asked: u64 = failing
        .args
        .windows(2)
        .find(|w| w[0] == "--num-prompts")
        .map(|w| w[1].parse().unwrap())
        .unwrap();
    let mut ours = run(true, 0, "p", 3, 9);
    ours.result = Some(json!({"completed": asked, "failed": 0}));
    let mut failed = run(false, 1, "p", 3, 9);
    failed.requests.clear();
    failed.stderr = format!("Traceback ...\n{says} ...");
    assert_eq!(compare(failing, &failed, &ours), Vec::<String>::new());
    let d = compare(failing, &run(false, 0, "p", 3, 9), &ours);
    assert!(d[0].contains("no longer fails"), "{d:?}");
    ours.result = Some(json!({"completed": asked - 1, "failed": 1}));
    assert!(!compare(failing, &failed, &ours).is_empty());
}
