//! `bench serve --dataset-name hf` held against vLLM 0.33's own loader: for each id vLLM knows,
//! rows shaped like the hub's dataset are written to local files, vLLM's own argument parser and
//! `get_samples` build its samples from them (`tests/hf/vllm_hf.py`, on the reference Python,
//! `load_dataset` pointed at those files), and llmspeed builds its samples from the same rows
//! and the same command line. Compared exactly: the same prompts (text to the character; chat
//! messages and tools structure by structure), in the same order, with the same input and
//! output lengths (both tokenizers count words and render one fixed chat format, so the
//! families' rules are what is compared). An id vLLM refuses is refused by both.
//!
//! Without the reference Python (`LLMSPEED_VLLM_REF_PYTHON`) the test says NOT RUN, or fails
//! under `CI=true`.

#[path = "hf/gen.rs"]
mod gen;
#[path = "conformance/reference.rs"]
mod reference;

use clap::Parser;
use gen::Gen;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::workload::datasets::hf::{self, bfcl, Class};
use llmspeed::workload::datasets::{PromptSource, PromptWrap, RenderChat, Sample, Tokens};
use llmspeed::workload::rows::{self, DatasetFiles, FileFormat, Row, RowOrder};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// Counts words and renders the fixed chat format `vllm_hf.py`'s tokenizer renders.
struct Words {
    wrap: Box<PromptWrap<'static>>,
    render: Box<RenderChat<'static>>,
}

impl Words {
    fn new() -> Self {
        Words {
            wrap: Box::new(|p: &str| Ok(format!("<|user|>\n{p}\n<|assistant|>\n"))),
            render: Box::new(|messages: &Value, tools: Option<&Value>| {
                let mut out = String::new();
                if let Some(tools) = tools {
                    let names: Vec<&str> = tools
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["function"]["name"].as_str().unwrap())
                        .collect();
                    out += &format!("<|tools|> {}\n", names.join(" "));
                }
                for m in messages.as_array().ok_or("not a list")? {
                    let role = m["role"].as_str().ok_or("no role")?;
                    let content = m["content"].as_str().ok_or("no content")?;
                    out += &format!("<|{role}|>\n{content}\n");
                }
                Ok(out + "<|assistant|>\n")
            }),
        }
    }
}

impl Tokens for Words {
    fn count(&mut self, text: &str) -> Result<u64, String> {
        Ok(text.split_whitespace().count() as u64)
    }
    fn wrap(&mut self) -> Option<&mut PromptWrap<'_>> {
        Some(&mut *self.wrap)
    }
    fn render(&mut self) -> Option<&mut RenderChat<'_>> {
        Some(&mut *self.render)
    }
}

/// The words of the rows' texts: some non-ASCII, braces or quotes.
const VOCAB: &[&str] = &[
    "the",
    "code",
    "naïve",
    "日本語",
    "{x}",
    "def",
    "return",
    "a,b",
    "\"q\"",
    "é",
    "}{",
    "x=1;",
];

/// What this file draws beyond words.
trait Draw {
    fn len(&mut self) -> usize;
}

impl Draw for Gen {
    /// A length in words: short (some under vLLM's 4), medium, or long (past 1024 / 2048).
    fn len(&mut self) -> usize {
        match self.below(10) {
            0 => self.below(5) as usize,
            1 => 1000 + self.below(200) as usize,
            2 => 1900 + self.below(300) as usize,
            _ => 4 + self.below(60) as usize,
        }
    }
}

fn row(v: Value) -> Row {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// One comparison: vLLM's command line, and the rows of each split, written in `shards` parquet
/// files (or of each BFCL category, one JSON-lines file each).
struct Case {
    name: &'static str,
    argv: Vec<&'static str>,
    rows: Vec<(&'static str, Vec<Row>)>,
    shards: usize,
    bfcl: Vec<(&'static str, Vec<Row>)>,
}

fn case(name: &'static str, argv: &[&'static str], split: &'static str, rows: Vec<Row>) -> Case {
    Case {
        name,
        argv: argv.to_vec(),
        rows: vec![(split, rows)],
        shards: 1,
        bfcl: vec![],
    }
}

/// `c` with its rows in `n` shards.
fn sharded(n: usize, c: Case) -> Case {
    Case { shards: n, ..c }
}

fn instruct_coder(g: &mut Gen) -> Vec<Row> {
    (0..30)
        .map(|_| {
            let (a, b) = (g.len(), g.len());
            row(json!({"input": g.words(a), "instruction": g.words(b), "output": "o"}))
        })
        .collect()
}

fn conversations(g: &mut Gen) -> Vec<Row> {
    (0..60)
        .map(|i| {
            let turns = (g.below(4)) as usize;
            let conv: Vec<Value> = (0..turns)
                .map(|t| {
                    // vLLM asserts every reply counts above 0 tokens.
                    let n = g.len().max(1);
                    json!({"from": if t % 2 == 0 {"human"} else {"gpt"}, "value": g.words(n)})
                })
                .collect();
            row(json!({"id": format!("c{i}"), "conversations": conv}))
        })
        .collect()
}

fn bfcl_rows(g: &mut Gen, cat: &str, n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| {
            let n = 3 + g.below(20) as usize;
            let q = g.words(n);
            let f = json!({
                "name": format!("{cat}_f{i}"),
                "description": g.words(6),
                "parameters": {"type": "dict", "properties": {
                    "x": {"type": "float", "description": "x"},
                    "xs": {"type": "tuple", "items": {"type": "any"}},
                    "n": {"type": "integer"}
                }, "required": ["x"]}
            });
            match i % 7 {
                // Passed over by vLLM: an empty question, a text question, an empty first turn.
                3 => row(json!({"id": i, "question": [], "function": [f]})),
                4 => row(json!({"id": i, "question": "text", "function": [f]})),
                5 => row(json!({"id": i, "question": [[]], "function": [f]})),
                // One function not in a list.
                6 => row(json!({"id": i, "question": [[{"role": "user", "content": q}]], "function": f})),
                _ => row(json!({"id": i, "question": [[
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": q}
                ]], "function": [f, {"name": "g", "parameters": {"type": "dict", "properties": {}}}]})),
            }
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x9E37_79B9_7F4A_7C15, VOCAB);
    let ic = instruct_coder(&mut g);
    let hf = ["--dataset-name", "hf", "--disable-shuffle"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&hf[..], extra].concat() };
    let mt: Vec<Row> = (0..20)
        .map(|i| {
            let (a, b) = (g.len(), g.len());
            row(json!({"question_id": i, "category": "writing", "turns": [g.words(a), g.words(b)]}))
        })
        .collect();
    let he: Vec<Row> = (0..20)
        .map(|i| {
            let n = g.len();
            row(json!({"task_id": format!("HumanEval/{i}"), "prompt": g.words(n), "entry_point": "f"}))
        })
        .collect();
    let gsm: Vec<Row> = (0..20)
        .map(|_| {
            let n = g.len();
            row(json!({"question": g.words(n), "answer": "#### 4"}))
        })
        .collect();
    let conv = conversations(&mut g);
    let aimo: Vec<Row> = (0..40)
        .map(|i| {
            let (a, b) = (g.len(), (g.len() * 3).max(1));
            row(json!({"id": i, "problem": g.words(a), "solution": g.words(b), "answer": "1"}))
        })
        .collect();
    let zeta: Vec<Row> = (0..20)
        .map(|i| {
            let (a, b, c) = (g.len(), g.len(), g.len());
            let output = if i % 3 == 0 {
                g.words(c)
            } else {
                format!("{} <|editable_region_start|>\n{}", g.words(2), g.words(c))
            };
            row(json!({"events": g.words(a), "input": g.words(b), "output": output}))
        })
        .collect();
    let blaz: Vec<Row> = (0..40)
        .map(|_| {
            let (a, b) = (g.len(), g.len());
            let d = g.below(1000) as f64 / 1000.0;
            row(json!({"code": g.words(a), "change_request": g.words(b), "norm_distance": d}))
        })
        .collect();
    let ml: Vec<Row> = (0..40)
        .map(|_| {
            let (a, b, c) = (g.below(8) as usize, g.len(), g.len());
            row(json!({"system_prompt": g.words(a), "question": g.words(b), "output": g.words(c)}))
        })
        .collect();
    let bfcl = vec![
        ("simple", bfcl_rows(&mut g, "simple", 9)),
        ("live_simple", bfcl_rows(&mut g, "live_simple", 4)),
        ("multiple", bfcl_rows(&mut g, "multiple", 7)),
    ];
    let chat = [
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
    ];
    let mut all = vec![
        case(
            "instruct coder",
            &with(&[
                "--dataset-path",
                "likaixin/InstructCoder",
                "--num-prompts",
                "8",
            ]),
            "train",
            ic.clone(),
        ),
        case(
            "instruct coder, no template, --hf-output-len, oversampled",
            &with(&[
                "--dataset-path",
                "likaixin/InstructCoder",
                "--num-prompts",
                "50",
                "--skip-chat-template",
                "--hf-output-len",
                "33",
                "--seed",
                "3",
            ]),
            "train",
            ic.clone(),
        ),
        case(
            "instruct coder, --no-oversample",
            &with(&[
                "--dataset-path",
                "likaixin/InstructCoder",
                "--num-prompts",
                "50",
                "--no-oversample",
            ]),
            "train",
            ic.clone(),
        ),
        case(
            "instruct coder, a local copy named by --hf-name",
            &with(&[
                "--dataset-path",
                "/data/ic",
                "--hf-name",
                "likaixin/InstructCoder",
                "--num-prompts",
                "5",
            ]),
            "train",
            ic,
        ),
        case(
            "mt-bench",
            &with(&[
                "--dataset-path",
                "philschmid/mt-bench",
                "--num-prompts",
                "25",
            ]),
            "train",
            mt,
        ),
        case(
            "humaneval",
            &with(&[
                "--dataset-path",
                "openai/openai_humaneval",
                "--num-prompts",
                "12",
            ]),
            "test",
            he,
        ),
        case(
            "gsm8k",
            &with(&[
                "--dataset-path",
                "openai/gsm8k",
                "--num-prompts",
                "12",
                "--skip-chat-template",
            ]),
            "test",
            gsm,
        ),
        case(
            "sharegpt vicuna",
            &with(&[
                "--dataset-path",
                "Aeala/ShareGPT_Vicuna_unfiltered",
                "--hf-split",
                "train",
                "--num-prompts",
                "40",
                "--seed",
                "5",
            ]),
            "train",
            conv.clone(),
        ),
        case(
            "sharegpt vicuna, --hf-output-len",
            &with(&[
                "--dataset-path",
                "Aeala/ShareGPT_Vicuna_unfiltered",
                "--hf-split",
                "train",
                "--num-prompts",
                "30",
                "--hf-output-len",
                "100",
            ]),
            "train",
            conv,
        ),
        case(
            "aimo",
            &with(&[
                "--dataset-path",
                "AI-MO/aimo-validation-aime",
                "--num-prompts",
                "30",
            ]),
            "train",
            aimo.clone(),
        ),
        case(
            "numinamath by --hf-name",
            &with(&[
                "--dataset-path",
                "/data/nm",
                "--hf-name",
                "AI-MO/NuminaMath-CoT",
                "--num-prompts",
                "10",
                "--hf-output-len",
                "64",
            ]),
            "train",
            aimo,
        ),
        case(
            "zeta",
            &with(&[
                "--dataset-path",
                "zed-industries/zeta",
                "--num-prompts",
                "25",
            ]),
            "train",
            zeta,
        ),
        case(
            "blazedit",
            &with(&[
                "--dataset-path",
                "vdaita/edit_10k_char",
                "--num-prompts",
                "12",
                "--blazedit-min-distance",
                "0.2",
                "--blazedit-max-distance",
                "0.7",
            ]),
            "train",
            blaz.clone(),
        ),
        case(
            "blazedit, defaults",
            &with(&[
                "--dataset-path",
                "vdaita/edit_5k_char",
                "--num-prompts",
                "10",
            ]),
            "train",
            blaz,
        ),
        case(
            "mlperf",
            &with(&[
                "--dataset-path",
                "mgoin/mlperf-inference-llama3.1-data",
                "--num-prompts",
                "40",
            ]),
            "train",
            ml.clone(),
        ),
        case(
            "mlperf, --hf-output-len",
            &with(&[
                "--dataset-path",
                "mgoin/mlperf-inference-llama2-data",
                "--num-prompts",
                "10",
                "--hf-output-len",
                "5",
            ]),
            "train",
            ml,
        ),
        Case {
            name: "bfcl, stored order",
            argv: with(
                &[
                    &chat[..],
                    &[
                        "--dataset-path",
                        "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
                        "--num-prompts",
                        "30",
                    ],
                ]
                .concat(),
            ),
            rows: vec![],
            shards: 1,
            bfcl: bfcl.clone(),
        },
        Case {
            name: "bfcl, shuffled by --seed, two categories",
            argv: [
                &chat[..],
                &[
                    "--dataset-name",
                    "hf",
                    "--dataset-path",
                    "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
                    "--num-prompts",
                    "9",
                    "--seed",
                    "11",
                    "--bfcl-categories",
                    "multiple, simple,",
                ],
            ]
            .concat(),
            rows: vec![],
            shards: 1,
            bfcl,
        },
    ];
    // The datasets library's streamed shuffle for --seed (vLLM's default): shards permuted,
    // a 1,000-row buffer; past the buffer where the rows are many.
    let seeded = |extra: &[&'static str]| -> Vec<&'static str> {
        [&["--dataset-name", "hf"][..], extra].concat()
    };
    let short: Vec<Row> = (0..2500)
        .map(|i| {
            let n = 1 + g.below(8) as usize;
            row(json!({"question": format!("q{i} {}", g.words(n)), "answer": "#### 4"}))
        })
        .collect();
    all.extend([
        sharded(
            3,
            case(
                "instruct coder, seed 0",
                &seeded(&[
                    "--dataset-path",
                    "likaixin/InstructCoder",
                    "--num-prompts",
                    "10",
                ]),
                "train",
                instruct_coder(&mut g),
            ),
        ),
        sharded(
            4,
            case(
                "sharegpt vicuna, seed 42",
                &seeded(&[
                    "--dataset-path",
                    "Aeala/ShareGPT_Vicuna_unfiltered",
                    "--hf-split",
                    "train",
                    "--num-prompts",
                    "20",
                    "--seed",
                    "42",
                ]),
                "train",
                conversations(&mut g),
            ),
        ),
        sharded(
            5,
            case(
                "gsm8k, 2500 rows, seed 13",
                &seeded(&[
                    "--dataset-path",
                    "openai/gsm8k",
                    "--num-prompts",
                    "2500",
                    "--seed",
                    "13",
                ]),
                "test",
                short.clone(),
            ),
        ),
        // --no-stream: loaded whole, so the seed shuffles every row (Dataset.shuffle).
        sharded(
            3,
            case(
                "gsm8k, --no-stream, 2500 rows, seed 7, 40 taken",
                &seeded(&[
                    "--dataset-path",
                    "openai/gsm8k",
                    "--no-stream",
                    "--num-prompts",
                    "40",
                    "--seed",
                    "7",
                ]),
                "test",
                short.clone(),
            ),
        ),
        sharded(
            1,
            case(
                "humaneval, 2500 rows in one file, seed 1, 1200 taken",
                &seeded(&[
                    "--dataset-path",
                    "openai/openai_humaneval",
                    "--num-prompts",
                    "1200",
                    "--seed",
                    "1",
                ]),
                "test",
                short
                    .into_iter()
                    .map(|mut r| {
                        let q = r.remove("question").unwrap();
                        r.insert("prompt".into(), q);
                        r
                    })
                    .collect(),
            ),
        ),
    ]);
    all
}

/// Runs vLLM's loader on each case.
fn vllm(python: &Path, cases: &[Case], dir: &Path) -> Vec<Value> {
    let input: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let rows: serde_json::Map<String, Value> = c
                .rows
                .iter()
                .map(|(s, r)| (s.to_string(), json!(r)))
                .collect();
            let bfcl: serde_json::Map<String, Value> = c
                .bfcl
                .iter()
                .map(|(s, r)| (s.to_string(), json!(r)))
                .collect();
            json!({"argv": c.argv, "dir": dir.join(i.to_string()), "rows": rows, "shards": c.shards,
                "bfcl": bfcl})
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
        "tests/hf/vllm_hf.py",
        &[],
        &envs,
        &Value::Array(input),
    );
    serde_json::from_value(answer).expect("vllm_hf.py answers a JSON list")
}

/// llmspeed's samples for a case: its own flags parsed, its class resolved, the files vLLM read
/// (in `dir`) read by `rows::open` in the order the flags ask (the `datasets` library's streamed
/// shuffle for `--seed`, or stored), its family run.
fn llmspeed_samples(c: &Case, dir: &Path) -> Result<Vec<Sample>, String> {
    let mut argv = vec!["x", "--base-url", "http://127.0.0.1:9"];
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
    let files = |split: &str, format, files: Vec<std::path::PathBuf>| DatasetFiles {
        id: r.id.clone(),
        subset: None,
        split: split.into(),
        format,
        files,
    };
    let rows = if r.class == Class::Bfcl {
        let mut per = Vec::new();
        for cat in bfcl::categories(cfg.hf.bfcl_categories.as_deref()) {
            let f = files(
                "train",
                FileFormat::JsonLines,
                vec![dir.join(bfcl::category_file(&cat))],
            );
            let rows = rows::open(&f, &columns, RowOrder::AsStored).map_err(|e| e.to_string())?;
            per.push(
                rows.collect::<Result<Vec<Row>, _>>()
                    .map_err(|e| e.to_string())?,
            );
        }
        rows::from_vec(bfcl::interleave(per, cfg.shuffle.then_some(cfg.seed)))
    } else {
        let shards = (0..c.shards)
            .map(|k| dir.join(format!("{}-{k:05}-of-{:05}.parquet", r.split, c.shards)))
            .collect();
        rows::open(
            &files(&r.split, FileFormat::Parquet, shards),
            &columns,
            hf::row_order(&cfg),
        )
        .map_err(|e| e.to_string())?
    };
    hf::samples(&cfg, &r.class, rows, &mut Words::new()).map_err(|e| e.to_string())
}

/// One sample of ours against vLLM's.
fn same(name: &str, i: usize, ours: &Sample, theirs: &Value) {
    let at = format!("{name}: sample {i}");
    match (&ours.prompt, &theirs["chat_messages"]) {
        (PromptSource::Text(t), Value::Null) => {
            assert_eq!(Some(t.as_str()), theirs["prompt"].as_str(), "{at}: prompt")
        }
        (PromptSource::Chat { messages, extra }, m) => {
            assert_eq!(&**messages, m, "{at}: messages");
            assert_eq!(
                &Value::Object((**extra).clone()),
                &theirs["overrides"],
                "{at}: tools"
            );
        }
        (p, m) => panic!("{at}: ours {p:?}, vLLM's chat messages {m}"),
    }
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
}

#[test]
fn hf_samples_are_vllms_own() {
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
        let ours = llmspeed_samples(c, &dir.path().join(i.to_string()))
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(ours.len(), theirs.len(), "{}: how many samples", c.name);
        assert!(!ours.is_empty(), "{}: compares something", c.name);
        for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
            same(c.name, i, o, t);
        }
        eprintln!("{}: {} samples the same", c.name, ours.len());
    }
}

#[test]
fn ids_vllm_refuses_are_refused_with_its_message() {
    let Some(python) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unknown = case(
        "unknown id",
        &["--dataset-name", "hf", "--dataset-path", "someone/else"],
        "train",
        vec![],
    );
    let bfcl_completions = Case {
        name: "bfcl on completions",
        argv: vec![
            "--dataset-name",
            "hf",
            "--dataset-path",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
        ],
        rows: vec![],
        shards: 1,
        bfcl: vec![],
    };
    let answers = vllm(&python, &[unknown, bfcl_completions], dir.path());
    let theirs = answers[0]["error"].as_str().expect("vLLM refuses the id");
    let theirs = theirs.strip_prefix("ValueError: ").unwrap();
    let c = case(
        "",
        &["--dataset-name", "hf", "--dataset-path", "someone/else"],
        "train",
        vec![],
    );
    let ours = llmspeed_samples(&c, dir.path()).unwrap_err();
    // The same sentence around the set; the set's members the same (Python orders a set by
    // hash, which changes from run to run).
    let split = |m: &str| -> (String, String, Vec<String>) {
        let (head, rest) = m.split_once('{').unwrap();
        let (set, tail) = rest.split_once('}').unwrap();
        let mut ids: Vec<String> = set.split(", ").map(String::from).collect();
        ids.sort();
        let tail = tail.split(" (llmspeed").next().unwrap().to_string();
        (head.to_string(), tail, ids)
    };
    assert_eq!(split(&ours), split(theirs));
    assert!(ours.contains("--hf-prompt-column"), "{ours}");
    let theirs = answers[1]["error"].as_str().unwrap();
    let c = case(
        "",
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
        ],
        "train",
        vec![],
    );
    let ours = llmspeed_samples(&c, dir.path()).unwrap_err();
    assert_eq!(format!("ValueError: {ours}"), theirs);
}
