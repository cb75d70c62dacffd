//! For a seed, llmspeed draws what the reference tools draw: numpy's generators bit for bit
//! (`workload::numpy`), vLLM 0.33's send times and random lengths, SGLang 0.5.23's random-ids
//! lengths and the send times it draws after them, and Python's `random` shuffles and picks
//! (both tools' ShareGPT prompts in their order). Each figure is computed by numpy and by the
//! tools' own functions (`tests/conformance/draws.py`, on the reference Python of
//! `scripts/references.sh`) and compared exactly: the same integers, the same doubles, the same
//! nanosecond.
//!
//! Without the reference Pythons (`LLMSPEED_VLLM_REF_PYTHON`, `LLMSPEED_SGLANG_REF_PYTHON`) a
//! test says NOT RUN, or fails under `CI=true`.

#[path = "conformance/reference.rs"]
mod reference;

use llmspeed::bench::sglang::args::sglang_bounds;
use llmspeed::workload::datasets::{
    self, Conversations, DatasetConfig, DatasetKind, PrefixGroups, RandomDraws,
};
use llmspeed::workload::numpy::{self, Generator, RandomState};
use llmspeed::workload::pyrandom::PyRandom;
use llmspeed::workload::sample::PromptSource;
use llmspeed::workload::schedule::{Draws, Ramp, RampStrategy, ScheduleConfig};
use llmspeed::workload::tokenizer::LocalTokenizer;
use serde_json::{json, Value};
use std::io::{BufRead as _, Write as _};
use std::path::Path;

/// Asks `python`'s `draws.py serve` process for `which` on `cases`; its answer, one entry per
/// case. One process per Python answers every test of this binary (started by the first test
/// that asks, ended when the binary closes its stdin on exit): the reference tools' imports
/// cost 5-25 s each, paid once per tool instead of once per test. Tests asking the same
/// Python take turns; the two tools' Pythons run side by side.
fn draws(python: &Path, which: &str, cases: &Value) -> Vec<Value> {
    let server = draws_server(python);
    let mut server = server.lock().unwrap_or_else(|e| e.into_inner());
    let DrawsServer {
        stdin,
        stdout,
        stderr_file,
        ..
    } = &mut *server;
    let request = json!({ "which": which, "cases": cases }).to_string();
    let mut line = String::new();
    let sent = writeln!(stdin, "{request}").and_then(|()| stdin.flush());
    let read = sent.and_then(|()| stdout.read_line(&mut line));
    let stderr = || std::fs::read_to_string(&*stderr_file).unwrap_or_default();
    match read {
        Ok(n) if n > 0 => {}
        other => panic!("draws.py serve ({which}) ended ({other:?}): {}", stderr()),
    }
    let mut msg: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("draws.py answers no JSON ({e}): {line}"));
    if let Some(err) = msg.get("error") {
        panic!(
            "draws.py {which} failed: {}",
            err.as_str().unwrap_or_default()
        );
    }
    serde_json::from_value(msg["answer"].take()).expect("draws.py answers a JSON list")
}

struct DrawsServer {
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// The tools print as they draw: kept in a file, shown when the process ends early.
    stderr_file: std::path::PathBuf,
    /// Never waited for: it ends when the binary exits and its stdin closes.
    _child: std::process::Child,
}

type Shared = std::sync::Arc<std::sync::Mutex<DrawsServer>>;

/// The `draws.py serve` process of `python`, started on first use.
fn draws_server(python: &Path) -> Shared {
    static SERVERS: std::sync::Mutex<Vec<(std::path::PathBuf, Shared)>> =
        std::sync::Mutex::new(Vec::new());
    let mut servers = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, s)) = servers.iter().find(|(p, _)| p == python) {
        return s.clone();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/draws.py");
    let stderr_file = std::env::temp_dir().join(format!(
        "llmspeed-draws-{}-{}.stderr",
        std::process::id(),
        servers.len()
    ));
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .arg("serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&stderr_file).expect("a file for draws.py's stderr"))
        .spawn()
        .expect("run the reference Python");
    let server = std::sync::Arc::new(std::sync::Mutex::new(DrawsServer {
        stdin: child.stdin.take().unwrap(),
        stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
        stderr_file,
        _child: child,
    }));
    servers.push((python.to_path_buf(), server.clone()));
    server
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// Python's `repr` of each double, read back to the same double.
fn doubles(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().parse().unwrap())
        .collect()
}

fn bits(xs: &[f64]) -> Vec<u64> {
    xs.iter().map(|x| x.to_bits()).collect()
}

/// What the legacy generator is asked, in order: (call, arguments).
fn legacy_calls() -> Value {
    json!([
        ["randint", 1, 8, 50],
        ["randint", 0, 8460, 50],
        ["randint", 0, 151_643, 20],
        ["randint", 7, 7 + (1u64 << 33), 5],
        ["random", 5],
        // An odd count leaves the polar method's second value for the gamma of shape 4.
        ["normal", 7],
        ["gamma", 0.25, 0.1, 20],
        ["gamma", 1.0, 0.05, 20],
        ["gamma", 4.0, 0.02, 20],
        ["exponential", 0.1, 10],
        ["randint", 100, 101, 3]
    ])
}

fn legacy_ours(seed: u32, calls: &Value) -> Vec<Value> {
    let mut r = RandomState::new(seed);
    let mut out = Vec::new();
    for call in calls.as_array().unwrap() {
        let c = call.as_array().unwrap();
        let f = |i: usize| c[i].as_f64().unwrap();
        let n = |i: usize| c[i].as_u64().unwrap() as usize;
        let v = match c[0].as_str().unwrap() {
            "randint" => {
                let (lo, hi) = (c[1].as_i64().unwrap(), c[2].as_i64().unwrap());
                json!((0..n(3)).map(|_| r.randint(lo, hi)).collect::<Vec<_>>())
            }
            "random" => json!(bits(&(0..n(1)).map(|_| r.random()).collect::<Vec<_>>())),
            "normal" => json!(bits(&(0..n(1)).map(|_| r.gauss()).collect::<Vec<_>>())),
            "gamma" => json!(bits(
                &(0..n(3)).map(|_| r.gamma(f(1), f(2))).collect::<Vec<_>>()
            )),
            "exponential" => json!(bits(
                &(0..n(2)).map(|_| r.exponential(f(1))).collect::<Vec<_>>()
            )),
            other => panic!("{other}"),
        };
        out.push(v);
    }
    out
}

/// numpy's answer in the shape [`legacy_ours`] gives: integers as they are, doubles as bits.
fn legacy_theirs(calls: &Value, answer: &Value) -> Vec<Value> {
    calls
        .as_array()
        .unwrap()
        .iter()
        .zip(answer.as_array().unwrap())
        .map(|(call, a)| match call[0].as_str().unwrap() {
            "randint" => json!(ints(a)),
            _ => json!(bits(&doubles(a))),
        })
        .collect()
}

#[test]
fn numpys_generators_are_drawn_bit_for_bit() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let generator = json!([
        [1, 8, 50],
        [0, 32_000, 50],
        [100, 201, 20],
        [0, 1u64 << 40, 5],
        [5, 6, 3],
        [0, 1u64 << 32, 4]
    ]);
    let mut cases = Vec::new();
    for seed in [0u64, 1, 42, 1_234_567, u32::MAX as u64] {
        cases.push(json!({"seed": seed, "legacy": legacy_calls(), "generator": generator}));
    }
    // default_rng takes seeds of any size (two 32-bit words here).
    let big = (1u64 << 40) + 3;
    cases.push(json!({"seed": big, "legacy": [], "generator": generator}));
    let answers = draws(&py, "numpy", &json!(cases));
    for (case, answer) in cases.iter().zip(&answers) {
        let seed = case["seed"].as_u64().unwrap();
        if seed <= u32::MAX as u64 {
            assert_eq!(
                legacy_ours(seed as u32, &case["legacy"]),
                legacy_theirs(&case["legacy"], &answer["legacy"]),
                "np.random.seed({seed})"
            );
        }
        let mut g = Generator::new(seed);
        for (range, theirs) in generator
            .as_array()
            .unwrap()
            .iter()
            .zip(answer["generator"].as_array().unwrap())
        {
            let r = ints(range);
            let ours: Vec<i64> = (0..r[2]).map(|_| g.integers(r[0], r[1])).collect();
            assert_eq!(ours, ints(theirs), "default_rng({seed}).integers{r:?}");
        }
    }
}

/// `np.sum` of float arrays of every size class numpy's pairwise summation treats apart (under
/// 8, up to 128, halves above it), values of mixed magnitudes so that the order of additions
/// shows in the last bits.
#[test]
fn numpys_sum_is_summed_in_numpys_order() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let mut g = Generator::new(7);
    let arrays: Vec<Vec<f64>> = [1usize, 5, 8, 9, 100, 128, 129, 1000, 4099]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| g.random() * 10f64.powi(g.integers(-3, 4) as i32))
                .collect()
        })
        .collect();
    let answers = draws(
        &py,
        "numpy",
        &json!([{"seed": 0, "legacy": [], "generator": [], "sums": arrays}]),
    );
    let theirs = doubles(&answers[0]["sums"]);
    for (a, t) in arrays.iter().zip(theirs) {
        assert_eq!(
            numpy::sum(a).to_bits(),
            t.to_bits(),
            "np.sum of {} values",
            a.len()
        );
    }
    // A plain loop rounds differently on some of them: the test can tell the two apart.
    let plain_differs = arrays
        .iter()
        .any(|a| a.iter().sum::<f64>().to_bits() != numpy::sum(a).to_bits());
    assert!(plain_differs);
}

/// llmspeed's send times for SGLang at `rate` for `seed`, after `dataset_words` the dataset
/// drew from numpy's legacy generator.
fn sglang_send_times(rate: f64, seed: u64, dataset_words: u64, n: usize) -> Vec<u64> {
    ScheduleConfig {
        rate,
        burstiness: 1.0,
        ramp: None,
        seed,
        draws: Draws::Sglang { dataset_words },
    }
    .offsets_ns(n)
    .unwrap()
}

/// The reference's send times in seconds, as the nanoseconds llmspeed schedules.
fn as_ns(v: &Value) -> Vec<u64> {
    doubles(v)
        .iter()
        .map(|t| (t * 1e9).round() as u64)
        .collect()
}

#[test]
fn vllm_send_times_are_vllms_own() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let ramp = |strategy, start_rps, end_rps| {
        Some(Ramp {
            strategy,
            start_rps,
            end_rps,
        })
    };
    // (seed, requests, rate, burstiness, ramp)
    let rows: Vec<(u64, usize, f64, f64, Option<Ramp>)> = vec![
        (0, 50, 10.0, 1.0, None),
        (7, 40, 5.0, 0.5, None),
        (42, 30, 50.0, 3.0, None),
        (3, 20, 8.0, f64::INFINITY, None),
        (1, 10, f64::INFINITY, 1.0, None),
        (
            5,
            30,
            f64::INFINITY,
            1.0,
            ramp(RampStrategy::Linear, 1.0, 20.0),
        ),
        (
            9,
            25,
            f64::INFINITY,
            2.0,
            ramp(RampStrategy::Exponential, 2.0, 30.0),
        ),
    ];
    let text = |x: f64| x.to_string(); // "inf" reads in Python's float()
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, rate, b, ramp)| {
            let ramp = ramp.map(|r| {
                let s = match r.strategy {
                    RampStrategy::Linear => "linear",
                    RampStrategy::Exponential => "exponential",
                };
                json!([s, r.start_rps as u64, r.end_rps as u64])
            });
            json!({"seed": seed, "n": n, "rate": text(*rate), "burstiness": text(*b), "ramp": ramp})
        })
        .collect();
    let answers = draws(&py, "vllm", &json!(cases));
    for ((seed, n, rate, b, ramp), answer) in rows.iter().zip(&answers) {
        let ours = ScheduleConfig {
            rate: *rate,
            burstiness: *b,
            ramp: *ramp,
            seed: *seed,
            draws: Draws::Vllm,
        }
        .offsets_ns(*n)
        .unwrap();
        assert_eq!(
            ours,
            as_ns(&answer["at_s"]),
            "seed {seed}, rate {rate}, burstiness {b}, ramp {ramp:?}"
        );
    }
}

#[test]
fn vllm_random_lengths_are_vllms_own() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    // (seed, requests, input, output, input ratio, output ratio, special tokens)
    let rows = [
        (0u64, 64usize, 100u32, 20u32, 0.5, 0.5, 1u32),
        (9, 64, 1024, 128, 0.9, 0.9, 0),
        (123, 40, 300, 50, 0.3, 0.7, 2),
        (1u64 << 40, 16, 64, 8, 0.25, 0.25, 1),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, i, o, ri, ro, special)| {
            let ratio = if ri == ro {
                json!(ri)
            } else {
                json!({"input": ri, "output": ro})
            };
            json!({"seed": seed, "n": n, "input_len": i, "output_len": o, "ratio": ratio, "special": special})
        })
        .collect();
    let answers = draws(&py, "vllm", &json!(cases));
    for ((seed, n, i, o, ri, ro, special), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::Random,
            num_prompts: *n,
            seed: *seed,
            random_input_len: *i,
            random_output_len: *o,
            random_range_ratio: *ri,
            random_output_range_ratio: Some(*ro),
            random_draws: RandomDraws::Vllm { special: *special },
            ..DatasetConfig::default()
        };
        let samples = datasets::random(&cfg).unwrap();
        // vLLM draws the input range less the special tokens a server adds to its text;
        // llmspeed's ids carry them, so each of ours is vLLM's draw plus them.
        let theirs_in: Vec<i64> = ints(&answer["input"])
            .iter()
            .map(|l| l + *special as i64)
            .collect();
        let ours_in: Vec<i64> = samples.iter().map(|s| s.prompt_len as i64).collect();
        let ours_out: Vec<i64> = samples.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(ours_in, theirs_in, "input lengths, seed {seed}");
        assert_eq!(
            ours_out,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
        // The draws are spread: a ratio of 0.3 or more over 16+ requests never draws one value.
        assert!(ours_in.iter().any(|l| *l != ours_in[0]), "{ours_in:?}");
    }
}

#[test]
fn sglang_random_ids_lengths_and_send_times_are_sglangs_own() {
    let Some(py) = reference::SGLANG.python() else {
        return;
    };
    // (seed, requests, input, output, ratio, tokenizer vocabulary, rate)
    let rows = [
        (42u64, 40usize, 100u32, 20u32, 0.5, 8460u32, 10.0),
        (1, 30, 512, 64, 0.0, 151_643, 3.5),
        (5, 20, 64, 0, 0.25, 32_000, 40.0),
        (7, 12, 16, 16, 1.0, 50_257, f64::INFINITY),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, i, o, r, vocab, rate)| {
            json!({"seed": seed, "n": n, "input_len": i, "output_len": o, "ratio": r,
                   "vocab": vocab, "rate": rate.to_string()})
        })
        .collect();
    let answers = draws(&py, "sglang", &json!(cases));
    for ((seed, n, i, o, r, vocab, rate), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::Random,
            num_prompts: *n,
            seed: *seed,
            random_input_len: (*i).max(1),
            random_output_len: *o,
            random_bounds: Some(sglang_bounds(*i, *o, *r)),
            random_draws: RandomDraws::Sglang {
                vocab: *vocab,
                offsets: true,
                text: false,
            },
            ..DatasetConfig::default()
        };
        let samples = datasets::random(&cfg).unwrap();
        let ours_in: Vec<i64> = samples.iter().map(|s| s.prompt_len as i64).collect();
        let ours_out: Vec<i64> = samples.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(
            ours_in,
            ints(&answer["input"]),
            "input lengths, seed {seed}"
        );
        assert_eq!(
            ours_out,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
        let words = datasets::random_numpy_words(&cfg);
        // At least one word for each request's offset.
        assert!(words >= *n as u64, "{words} words for {n} requests");
        assert_eq!(
            sglang_send_times(*rate, *seed, words, *n),
            as_ns(&answer["at_s"]),
            "send times, seed {seed}"
        );
    }
}

/// A ShareGPT file for SGLang's `random`: short prompts (repeated to length) and long ones (cut),
/// punctuation and contractions, multi-byte text (a cut can split a character), an entry under
/// `conversation`, an empty first turn, and entries SGLang passes over (one turn, no turns).
fn cuts_file() -> String {
    let mut entries = vec![
        json!({"conversations": [{"from": "human", "value": "only one turn"}]}),
        json!({"id": "none"}),
        json!({"conversation": [{"value": "Under the other key: isn't it?"}, {"value": "yes"}]}),
        json!({"conversations": [{"value": ""}, {"value": "an empty prompt still has its BOS"}]}),
        json!({"conversations": [{"value": "Grüße aus Köln — naïve café, 東京 and ✓ marks."}, {"value": "ok"}]}),
    ];
    let words = "the quick brown fox jumps over the lazy dog , they 're sure it 's fine ! ";
    for k in 0..40 {
        let prompt = match k % 4 {
            0 => format!("Question {k}: why?"),
            1 => words.repeat(1 + k / 3),
            2 => format!("{k} apples, {} pears; {k}% of them aren't ripe.", k * 7),
            _ => format!("Résumé #{k}: naïve coöperation → ünïcödé"),
        };
        entries.push(json!({"conversations": [
            {"from": "human", "value": prompt},
            {"from": "gpt", "value": format!("answer {k}")}
        ]}));
    }
    Value::Array(entries).to_string()
}

#[test]
fn sglang_random_cuts_sharegpt_as_sglang_does() {
    let (Some(py), Some(tok_dir)) = (reference::SGLANG.python(), reference::tiny_tokenizer())
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sharegpt.json");
    std::fs::write(&path, cuts_file()).unwrap();
    let tok = LocalTokenizer::load(tok_dir.to_str().unwrap()).unwrap();
    // (seed, requests, input, output, ratio, text, rate): more requests than entries in one.
    let rows = [
        (42u64, 12usize, 40u32, 8u32, 0.5, true, 10.0),
        (7, 30, 9, 4, 0.0, true, 25.0),
        (3, 50, 64, 16, 1.0, true, f64::INFINITY),
        (42, 12, 40, 8, 0.5, false, 10.0),
        (11, 20, 5, 3, 0.2, false, 5.0),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, i, o, r, text, rate)| {
            json!({"seed": seed, "n": n, "input_len": i, "output_len": o, "ratio": r,
                   "cuts": path, "tokenizer": tok_dir, "text": text, "rate": rate.to_string()})
        })
        .collect();
    let answers = draws(&py, "sglang", &json!(cases));
    for ((seed, n, i, o, r, text, rate), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::Random,
            path: Some(path.clone()),
            num_prompts: *n,
            seed: *seed,
            random_input_len: (*i).max(1),
            random_output_len: *o,
            random_bounds: Some(sglang_bounds(*i, *o, *r)),
            random_draws: RandomDraws::Sglang {
                vocab: tok.vocab_size(),
                offsets: false,
                text: *text,
            },
            ..DatasetConfig::default()
        };
        let file = std::fs::read_to_string(&path).unwrap();
        let samples = datasets::sglang_sharegpt_cuts(&cfg, &file, &tok).unwrap();
        let theirs = answer["prompts"].as_array().unwrap();
        assert_eq!(samples.len(), theirs.len(), "prompts, seed {seed}");
        for (k, (s, t)) in samples.iter().zip(theirs).enumerate() {
            match (&s.prompt, text) {
                (PromptSource::Text(ours), true) => {
                    assert_eq!(ours, t.as_str().unwrap(), "prompt {k}, seed {seed}");
                    // Its length is the tokenizer's count of the text sent.
                    assert_eq!(s.prompt_len, tok.count(ours).unwrap());
                }
                (p @ PromptSource::Synthetic { .. }, false) => {
                    let mut ids = Vec::new();
                    let sample = llmspeed::workload::datasets::Sample {
                        prompt: p.clone(),
                        prompt_len: s.prompt_len,
                        output_len: s.output_len,
                        group: None,
                    };
                    assert!(sample.write_ids(&mut ids));
                    let theirs: Vec<u32> = ints(t).iter().map(|&x| x as u32).collect();
                    assert_eq!(ids, theirs, "prompt {k}, seed {seed}");
                    assert_eq!(s.prompt_len, ids.len() as u64);
                }
                (p, _) => panic!("prompt {k}: {p:?} (text {text})"),
            }
        }
        let output: Vec<i64> = samples.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(
            output,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
        if !text {
            let input: Vec<i64> = samples.iter().map(|s| s.prompt_len as i64).collect();
            assert_eq!(input, ints(&answer["input"]), "input lengths, seed {seed}");
        }
        assert_eq!(
            sglang_send_times(
                *rate,
                *seed,
                datasets::random_numpy_words(&cfg),
                samples.len()
            ),
            as_ns(&answer["at_s"]),
            "send times, seed {seed}"
        );
    }
}

#[test]
fn pythons_random_shuffles_and_picks_bit_for_bit() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let rows = [
        (0u64, 10usize, 7usize, 20usize),
        (3, 1000, 3, 50),
        (1 << 33, 77, 1000, 30),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, m, k)| json!({"seed": seed, "shuffle": n, "choices": [m, k]}))
        .collect();
    let answers = draws(&py, "python", &json!(cases));
    for ((seed, n, m, k), answer) in rows.iter().zip(&answers) {
        let mut x: Vec<i64> = (0..*n as i64).collect();
        PyRandom::new(*seed).shuffle(&mut x);
        assert_eq!(x, ints(&answer["shuffle"]), "random.seed({seed}); shuffle");
        let mut r = PyRandom::new(*seed);
        let picks: Vec<i64> = (0..*k).map(|_| r.randbelow(*m) as i64).collect();
        assert_eq!(
            picks,
            ints(&answer["choices"]),
            "random.seed({seed}); choice"
        );
    }
}

/// A ShareGPT file whose conversations pass and fail each tool's rules: prompts of 2 to 41
/// words (vLLM keeps 4 or more, SGLang 2 or more), replies of 2 to 30, an entry of one turn
/// (both skip it), one under `conversation` (SGLang's alternative key), one whose first turn
/// is not the human's (both take turns 0 and 1 whatever their roles).
fn sharegpt_file() -> String {
    let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"];
    let text = |n: usize, salt: usize| -> String {
        (0..n)
            .map(|j| words[(j * 3 + salt) % words.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let list: Vec<Value> = (0..30)
        .map(|i| {
            let prompt = format!("p{i} {}", text([1, 3, 5, 8, 12, 20, 40][i % 7], i));
            let reply = text([2, 6, 3, 10, 30][i % 5], i + 1);
            match i % 10 {
                7 => json!({"conversations": [{"from": "human", "value": prompt}]}),
                8 => json!({"conversation": [{"from": "human", "value": prompt},
                                              {"from": "gpt", "value": reply}]}),
                4 => json!({"conversations": [{"from": "gpt", "value": prompt},
                                               {"from": "human", "value": reply}]}),
                _ => json!({"conversations": [{"from": "human", "value": prompt},
                                               {"from": "gpt", "value": reply},
                                               {"from": "human", "value": "and more"}]}),
            }
        })
        .collect();
    Value::Array(list).to_string()
}

#[test]
fn sharegpt_prompts_are_the_references_own_in_their_order() {
    let (Some(vllm), Some(sglang)) = (reference::VLLM.python(), reference::SGLANG.python()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sharegpt.json");
    let text = sharegpt_file();
    std::fs::write(&path, &text).unwrap();
    let file = path.display().to_string();
    let mut words = |t: &str| -> Result<u64, String> { Ok(t.split_whitespace().count() as u64) };
    // (tool, seed, prompts asked): fewer than pass (the shuffle picks which), and more than
    // pass (vLLM oversamples with random.choice; SGLang sends what passed).
    for (tool, seed, n) in [
        ("vllm", 0u64, 6usize),
        ("vllm", 3, 40),
        ("sglang", 42, 6),
        ("sglang", 7, 40),
    ] {
        let python = if tool == "vllm" { &vllm } else { &sglang };
        let answer = draws(
            python,
            tool,
            &json!([{"seed": seed, "n": n, "sharegpt": file}]),
        );
        let theirs: Vec<String> = answer[0]["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            num_prompts: n,
            seed,
            conversations: match tool {
                "vllm" => Conversations::Vllm,
                _ => Conversations::Sglang {
                    lines: false,
                    context_len: None,
                },
            },
            ..DatasetConfig::default()
        };
        let ours: Vec<String> = datasets::sharegpt_text(&cfg, "sharegpt.json", &text, &mut words)
            .unwrap()
            .into_iter()
            .map(|s| match s.prompt {
                PromptSource::Text(t) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ours, theirs, "{tool}, seed {seed}, {n} prompts");
    }
}

#[test]
fn generated_shared_prefix_prompts_and_send_times_are_sglangs_own() {
    let Some(py) = reference::SGLANG.python() else {
        return;
    };
    // (seed, [groups, per group, system, question, output], ratio, turns, rate, zipf alpha):
    // under zipf, 9 and 12 groups take numpy's pairwise sum past its plain loop of 8.
    let rows = [
        (42u64, [3u32, 4, 20, 5, 6], 0.5, 1u32, 10.0, None),
        (1, [2, 3, 10, 4, 5], 1.0, 2, f64::INFINITY, None),
        (7, [4, 5, 30, 12, 0], 0.2, 1, 25.0, None),
        (3, [2, 6, 16, 8, 8], 0.75, 3, 5.0, None),
        (42, [5, 8, 6, 4, 3], 0.5, 1, 10.0, Some(1.1)),
        (9, [9, 6, 4, 3, 2], 1.0, 2, 20.0, Some(0.8)),
        (5, [12, 10, 3, 2, 2], 0.5, 1, 40.0, Some(1.7)),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, l, r, turns, rate, zipf)| {
            json!({"seed": seed, "gsp": [l[0], l[1], l[2], l[3], l[4], r, turns],
                   "rate": rate.to_string(), "zipf": zipf})
        })
        .collect();
    // (With routing keys SGLang neither reads nor writes its cache of generated prompts.)
    let answers = draws(&py, "sglang", &json!(cases));
    for ((seed, l, r, turns, rate, zipf), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: (l[0] * l[1]) as usize,
            seed: *seed,
            prefix_repetition_num_prefixes: l[0],
            prefix_repetition_prefix_len: l[2],
            prefix_repetition_suffix_len: l[3],
            prefix_repetition_output_len: l[4],
            prefix_groups: Some(PrefixGroups {
                range_ratio: *r,
                zipf_alpha: *zipf,
                turns: *turns,
            }),
            ..DatasetConfig::default()
        };
        let samples = datasets::prefix_repetition(&cfg).unwrap();
        let group: Vec<i64> = samples.iter().map(|s| s.group.unwrap() as i64).collect();
        let input: Vec<i64> = samples.iter().map(|s| s.prompt_len as i64).collect();
        let output: Vec<i64> = samples.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(
            group,
            ints(&answer["group"]),
            "groups in order, seed {seed}"
        );
        assert_eq!(input, ints(&answer["input"]), "input lengths, seed {seed}");
        assert_eq!(
            output,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
        assert_eq!(
            sglang_send_times(
                *rate,
                *seed,
                datasets::random_numpy_words(&cfg),
                samples.len()
            ),
            as_ns(&answer["at_s"]),
            "send times, seed {seed}"
        );
    }
}

/// A BurstGPT CSV: the trace's columns, GPT-4 rows among ChatGPT ones, failed requests (0
/// response tokens) among them; lengths that tell the rows apart.
fn burstgpt_file() -> String {
    let mut csv =
        String::from("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n");
    for i in 0..40u32 {
        let model = if i % 3 == 0 { "ChatGPT" } else { "GPT-4" };
        let request = 10 + i * 7;
        let response = if i % 5 == 4 { 0 } else { 3 + i };
        csv.push_str(&format!(
            "{},{model},{request},{response},{},Conversation log\n",
            i * 11,
            request + response
        ));
    }
    csv
}

#[test]
fn burstgpt_rows_are_vllms_own_in_their_order() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burstgpt.csv");
    std::fs::write(&path, burstgpt_file()).unwrap();
    // 21 rows pass vLLM's filter: fewer asked (a permutation's first), and more (drawn with
    // replacement).
    let rows = [(0u64, 5usize), (42, 21), (7, 60)];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n)| json!({"seed": seed, "n": n, "burstgpt": path.display().to_string()}))
        .collect();
    let answers = draws(&py, "vllm", &json!(cases));
    for ((seed, n), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::BurstGpt,
            path: Some(path.clone()),
            num_prompts: *n,
            seed: *seed,
            ..DatasetConfig::default()
        };
        let samples = datasets::load(&cfg, &mut |_: &str| Ok(0)).unwrap();
        let input: Vec<i64> = samples.iter().map(|s| s.prompt_len as i64).collect();
        let output: Vec<i64> = samples.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(input, ints(&answer["input"]), "input lengths, seed {seed}");
        assert_eq!(
            output,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
    }
}

/// vLLM's `random-mm`: for a seed, each request's lengths, image count, sizes and the pixels
/// themselves are those of vLLM's own `RandomMultiModalDataset.sample` (a tokenizer whose
/// decode and encode round-trip, so its text draws take no extra words): across a cap reached
/// mid-request, a video bucket that can hold nothing, a shared prefix and a range of counts.
#[test]
fn random_mm_items_are_vllms_own() {
    use llmspeed::workload::datasets::random_mm::{self, Bucket, Limits, MmSettings};
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    let bucket = |height, width, frames, p| Bucket {
        height,
        width,
        frames,
        p,
    };
    // (seed, requests, prefix, special, settings)
    let rows = [
        (0u64, 6usize, 0u32, 0u32, MmSettings::default()),
        (
            7,
            40,
            5,
            1,
            MmSettings {
                base_items: 3,
                items_range_ratio: 1.0,
                limits: Limits {
                    image: Some(4),
                    video: Some(0),
                },
                buckets: vec![
                    bucket(16, 24, 1, 0.2),
                    bucket(7, 5, 1, 0.5),
                    bucket(9, 9, 4, 0.3),
                    bucket(3, 3, 1, 0.0),
                ],
                ..MmSettings::default()
            },
        ),
        (
            1 << 33,
            30,
            0,
            0,
            MmSettings {
                base_items: 4,
                items_range_ratio: 0.5,
                limits: Limits {
                    image: Some(3),
                    video: None,
                },
                buckets: vec![bucket(1, 1, 1, 3.0), bucket(2, 33, 1, 1.0)],
                ..MmSettings::default()
            },
        ),
    ];
    let cases: Vec<Value> = rows
        .iter()
        .map(|(seed, n, prefix, special, mm)| {
            let mut limits = serde_json::Map::new();
            if let Some(i) = mm.limits.image {
                limits.insert("image".into(), json!(i));
            }
            if let Some(v) = mm.limits.video {
                limits.insert("video".into(), json!(v));
            }
            let buckets: Vec<Value> = mm
                .buckets
                .iter()
                .map(|b| json!([b.height, b.width, b.frames, b.p]))
                .collect();
            json!({"seed": seed, "n": n, "input_len": 40, "output_len": 9, "ratio": 0.5,
                   "prefix": prefix, "special": special, "vocab": 32000,
                   "mm": {"base": mm.base_items, "ratio": mm.items_range_ratio,
                          "limits": limits, "buckets": buckets}})
        })
        .collect();
    let answers = draws(&py, "vllm", &json!(cases));
    for ((seed, n, prefix, special, mm), answer) in rows.iter().zip(&answers) {
        let cfg = DatasetConfig {
            kind: DatasetKind::RandomMm,
            num_prompts: *n,
            seed: *seed,
            random_input_len: 40,
            random_output_len: 9,
            random_range_ratio: 0.5,
            random_prefix_len: *prefix,
            random_draws: RandomDraws::Vllm { special: *special },
            // vLLM's offsets and prefix are drawn below the vocabulary's size.
            ids: datasets::IdRange { lo: 0, span: 32000 },
            random_mm: mm.clone(),
            ..DatasetConfig::default()
        };
        let (texts, pixels) = random_mm::draw(&cfg, mm, |g, b| {
            let mut px = vec![0u8; (b.height * b.width * 3) as usize];
            g.fill_u8(&mut px);
            let sum: u64 = px.iter().map(|&x| x as u64).sum();
            let head: String = px.iter().take(8).map(|x| format!("{x:02x}")).collect();
            Ok(json!([b.height, b.width, sum, head]))
        })
        .unwrap();
        let theirs: Vec<Vec<Value>> = answer["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().clone())
            .collect();
        assert_eq!(pixels, theirs, "images, seed {seed}");
        let ours_in: Vec<i64> = texts
            .iter()
            .map(|s| s.prompt_len as i64 - *special as i64)
            .collect();
        assert_eq!(
            ours_in,
            ints(&answer["input"]),
            "input lengths, seed {seed}"
        );
        let ours_out: Vec<i64> = texts.iter().map(|s| s.output_len as i64).collect();
        assert_eq!(
            ours_out,
            ints(&answer["output"]),
            "output lengths, seed {seed}"
        );
        // The dataset as loaded carries those sizes, encoded.
        let loaded = datasets::load(&cfg, &mut |_: &str| Ok(0)).unwrap();
        let sizes: Vec<Vec<(u32, u32)>> = loaded
            .iter()
            .map(|s| {
                random_mm::images(s)
                    .iter()
                    .map(|i| (i.height, i.width))
                    .collect()
            })
            .collect();
        let want: Vec<Vec<(u32, u32)>> = theirs
            .iter()
            .map(|r| {
                r.iter()
                    .map(|i| (i[0].as_u64().unwrap() as u32, i[1].as_u64().unwrap() as u32))
                    .collect()
            })
            .collect();
        assert_eq!(sizes, want, "sizes, seed {seed}");
        // The draws spread: counts differ between requests where the range allows it (the
        // third case's [2, 6] is capped to [2, 3] by its limit).
        if mm.items_range_ratio > 0.0 {
            assert!(want.iter().any(|r| r.len() != want[0].len()), "{want:?}");
        }
    }
}
