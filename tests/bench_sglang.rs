//! `llmspeed bench sglang` end to end against the simulated server, with the server's
//! in-memory trace as ground truth (joined by `x-request-id`):
//!
//! - the default backend (`sglang`: native `/generate`): every request's TTFT against the
//!   server's first write, its ITL entries against the true gaps between writes, its output
//!   tokens equal to the tokens written, and the run's totals;
//! - the binary: SGLang's console block (labels, order, widths), the JSONL record's keys, order
//!   and types, a second run appended as a second line, refused flags naming themselves;
//! - `--backend sglang-oai` against `bench serve` on the same server: the same TTFT and ITL
//!   distributions within the two definitions' named differences.

#[path = "support/mock.rs"]
mod mock_server;

use clap::Parser;
use llmspeed::bench::sglang::args::{SglangArgs, SglangConfig};
use llmspeed::bench::sglang::run;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::clock::Clock;
use llmspeed::mock::trace::TraceRec;
use llmspeed::net::Cancel;
use mock_server::{runtime, TracedMock};
use serde_json::Value;

/// A 2 ms decode step: gaps big enough to tell apart, a run in about a second.
const STEP_US: f64 = 2000.0;
/// Calibration differences between two clocks of one process, and scheduling noise on a
/// loaded 2-core machine, for one stamp.
const SLACK_NS: i64 = 100_000;

fn start_mock() -> TracedMock {
    TracedMock::start(STEP_US)
}

fn sglang_config(args: &[&str]) -> Result<SglangConfig, String> {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        a: SglangArgs,
    }
    let mut argv = vec!["bench-sglang"];
    argv.extend_from_slice(args);
    Wrap::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .a
        .validate()
}

/// The raw stamp at which the engine made token `r` (its step's end), on the test's clock.
fn due_raw(clock: &Clock, r: &TraceRec) -> u64 {
    clock.add_ns(r.arrival_raw, r.due_ns.saturating_sub(r.arrival_ns))
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const PROMPTS: usize = 16;

#[test]
fn native_backend_figures_match_the_servers_trace() {
    let mock = start_mock();
    let rt = runtime();
    let dir = tempdir();
    let file = dir.join("native.jsonl");
    let url = format!("http://{}", mock.addr);
    let cfg = sglang_config(&[
        "--base-url",
        &url,
        "--dataset-name",
        "random",
        "--num-prompts",
        "16",
        "--random-input-len",
        "48",
        "--random-output-len",
        "12",
        "--random-range-ratio",
        "0.5",
        "--request-rate",
        "40",
        "--seed",
        "5",
        "--output-file",
        file.to_str().unwrap(),
    ])
    .unwrap();
    let clock = Clock::new();
    let mut out = Vec::new();
    let done = rt
        .block_on(run::run(
            &cfg,
            clock.clone(),
            &Cancel::new(),
            &mut Vec::new(),
            &mut out,
            &mut |_: &str| {},
        ))
        .expect("run");
    let trace = mock.finish();
    let m = &done.metrics;
    assert_eq!(m.completed, PROMPTS as u64);
    let epoch = |raw: u64| clock.epoch_ns(raw) as i64;
    let base = epoch(done.measured.base_raw);
    let (mut ttft_err, mut gap_err) = (Vec::new(), Vec::new());
    let mut total = 0;
    for (f, o) in done.measured.requests.iter().zip(&done.outputs) {
        let id = cfg.plan.request_ids.request(f.index);
        let w = &trace[&id];
        total += w.len() as u64;
        assert!(o.success, "{id}: {}", o.error);
        assert_eq!(o.output_len, w.len() as u64, "{id}: output tokens");
        // One token per native event here, so one ITL entry per later write.
        assert_eq!(o.itl_s.len(), w.len() - 1, "{id}");
        // TTFT against the first write: never before the engine made the token (the server
        // stamps its write after the write returns, so a fast reader can beat that stamp),
        // and close to the write.
        let start = base + o.start_ns as i64;
        let first_read = start + (o.ttft_s * 1e9).round() as i64;
        assert!(
            first_read + SLACK_NS >= epoch(due_raw(&clock, &w[0])),
            "{id}: first token read before it existed"
        );
        ttft_err.push((first_read - epoch(w[0].t_raw)).abs() as f64 / 1e6);
        for (g, p) in o.itl_s.iter().zip(w.windows(2)) {
            let truth = (epoch(p[1].t_raw) - epoch(p[0].t_raw)) as f64 / 1e6;
            gap_err.push((g * 1e3 - truth).abs());
        }
        // Latency ends at [DONE], after the last write.
        let end = start + (o.latency_s * 1e9).round() as i64;
        assert!(
            end + SLACK_NS >= epoch(due_raw(&clock, &w[w.len() - 1])),
            "{id}: latency ends before the last token existed"
        );
    }
    assert_eq!(m.total_output, total);
    // The mock counts generated text with its own /tokenize: one token per written token.
    assert_eq!(m.total_output_retokenized, total);
    let (t, g) = (median(ttft_err), median(gap_err));
    assert!(
        t < 1.0,
        "median first-read delay after the first write {t} ms"
    );
    assert!(g < 1.0, "median |ITL - true gap| {g} ms");
    // The record it appended is one line, for this run.
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1);
    let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["total_output_tokens"], total);
    assert_eq!(v["completed"], PROMPTS);
    assert_eq!(v["server_info"]["model_path"], "mock-model", "{v}");
    assert!(String::from_utf8(out)
        .unwrap()
        .contains(" Serving Benchmark Result "));
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "llmspeed-bench-sglang-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn llmspeed(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

/// SGLang's record keys in its order, each with its JSON type.
const KEYS: &[(&str, &str)] = &[
    ("tag", "string|null"),
    ("backend", "string"),
    ("dataset_name", "string"),
    ("request_rate", "float"),
    ("max_concurrency", "int|null"),
    ("sharegpt_output_len", "int|null"),
    ("random_input_len", "int"),
    ("random_output_len", "int"),
    ("random_range_ratio", "float"),
    ("server_info", "object|null"),
    ("duration", "float"),
    ("completed", "int"),
    ("total_input_tokens", "int"),
    ("total_input_text_tokens", "int"),
    ("total_input_vision_tokens", "int"),
    ("total_output_tokens", "int"),
    ("total_output_tokens_retokenized", "int"),
    ("request_throughput", "float"),
    ("input_throughput", "float"),
    ("output_throughput", "float"),
    ("total_throughput", "float"),
    ("mean_e2e_latency_ms", "float"),
    ("median_e2e_latency_ms", "float"),
    ("std_e2e_latency_ms", "float"),
    ("p90_e2e_latency_ms", "float"),
    ("p95_e2e_latency_ms", "float"),
    ("p99_e2e_latency_ms", "float"),
    ("mean_ttft_ms", "float"),
    ("median_ttft_ms", "float"),
    ("std_ttft_ms", "float"),
    ("p90_ttft_ms", "float"),
    ("p95_ttft_ms", "float"),
    ("p99_ttft_ms", "float"),
    ("mean_tpot_ms", "float"),
    ("median_tpot_ms", "float"),
    ("std_tpot_ms", "float"),
    ("p90_tpot_ms", "float"),
    ("p95_tpot_ms", "float"),
    ("p99_tpot_ms", "float"),
    ("mean_itl_ms", "float"),
    ("median_itl_ms", "float"),
    ("std_itl_ms", "float"),
    ("p90_itl_ms", "float"),
    ("p95_itl_ms", "float"),
    ("p99_itl_ms", "float"),
    ("concurrency", "float"),
    ("accept_length", "float|null"),
    ("max_output_tokens_per_s", "float"),
    ("max_concurrent_requests", "int"),
];

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::String(_) => "string",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
    }
}

/// The labels of SGLang's block, in order (None: a section rule).
const BLOCK: &[&str] = &[
    "Backend:",
    "Traffic request rate:",
    "Max request concurrency:",
    "Successful requests:",
    "Benchmark duration (s):",
    "Total input tokens:",
    "Total input text tokens:",
    "Total generated tokens:",
    "Total generated tokens (retokenized):",
    "Request throughput (req/s):",
    "Input token throughput (tok/s):",
    "Output token throughput (tok/s):",
    "Peak output token throughput (tok/s):",
    "Peak concurrent requests:",
    "Total token throughput (tok/s):",
    "Concurrency:",
    "----------------End-to-End Latency----------------",
    "Mean E2E Latency (ms):",
    "Median E2E Latency (ms):",
    "P90 E2E Latency (ms):",
    "P95 E2E Latency (ms):",
    "P99 E2E Latency (ms):",
    "---------------Time to First Token----------------",
    "Mean TTFT (ms):",
    "Median TTFT (ms):",
    "P90 TTFT (ms):",
    "P95 TTFT (ms):",
    "P99 TTFT (ms):",
    "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):",
    "Median TPOT (ms):",
    "P90 TPOT (ms):",
    "P95 TPOT (ms):",
    "P99 TPOT (ms):",
    "---------------Inter-Token Latency----------------",
    "Mean ITL (ms):",
    "Median ITL (ms):",
    "P90 ITL (ms):",
    "P95 ITL (ms):",
    "P99 ITL (ms):",
    "Max ITL (ms):",
    "==================================================",
];

#[test]
fn binary_prints_sglangs_block_and_appends_typed_records() {
    let mock = start_mock();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();
    let file = dir.join("runs.jsonl");
    let common = [
        "bench",
        "sglang",
        "--base-url",
        &url,
        "--dataset-name",
        "random",
        "--num-prompts",
        "6",
        "--random-input-len",
        "24",
        "--random-output-len",
        "6",
        "--random-range-ratio",
        "1.0",
        "--max-concurrency",
        "3",
        "--output-file",
        file.to_str().unwrap(),
        "--disable-tqdm",
    ];
    let mut first: Vec<&str> = common.to_vec();
    first.extend(["--request-rate", "50", "--tag", "first"]);
    let out = llmspeed(&first);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // llmspeed's own lines follow SGLang's block.
    let lines: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains(" Serving Benchmark Result "))
        .take_while(|l| !l.starts_with("llmspeed: ") && !l.starts_with("WARNING: llmspeed: "))
        .collect();
    assert_eq!(
        lines[0],
        "============ Serving Benchmark Result ============"
    );
    assert_eq!(lines.len(), BLOCK.len() + 1, "{stdout}");
    for (line, label) in lines[1..].iter().zip(BLOCK) {
        if label.starts_with(['-', '=']) {
            assert_eq!(line, label);
        } else {
            // Label left in 40, a space, the value left in 10.
            assert!(line.starts_with(&format!("{label:<40} ")), "{line:?}");
            assert!(line.len() >= 51, "{line:?}: the value is padded to 10");
        }
    }
    assert_eq!(lines[1], format!("{:<40} {:<10}", "Backend:", "sglang"));
    assert_eq!(
        lines[2],
        format!("{:<40} {:<10}", "Traffic request rate:", "50.0")
    );
    assert_eq!(
        lines[3],
        format!("{:<40} {:<10}", "Max request concurrency:", "3")
    );
    assert_eq!(
        lines[4],
        format!("{:<40} {:<10}", "Successful requests:", "6")
    );

    // A second run, default rate (inf): appended as a second line.
    let mut second: Vec<&str> = common.to_vec();
    second.push("--output-details");
    let out = llmspeed(&second);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = mock.finish();
    let text = std::fs::read_to_string(&file).unwrap();
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 2, "{text}");
    // Python's json.dumps writes inf as Infinity; Python reads it back.
    assert!(
        records[1].contains("\"request_rate\": Infinity"),
        "{}",
        records[1]
    );
    for (n, line) in records.iter().enumerate() {
        let parsed: Value = serde_json::from_str(&line.replace(": Infinity", ": 1.0e300")).unwrap();
        let obj = parsed.as_object().unwrap();
        // serde_json's map sorts keys: the order is read from the line itself.
        let mut at = 0;
        for (k, _) in KEYS {
            let pos = line[at..]
                .find(&format!("\"{k}\": "))
                .unwrap_or_else(|| panic!("record {n}: {k} missing or out of order"));
            at += pos + 1;
        }
        let details = if n == 1 { 6 } else { 0 };
        assert_eq!(
            obj.len(),
            KEYS.len() + details + 1,
            "record {n}: other keys"
        );
        for (k, ty) in KEYS {
            let got = type_of(&obj[*k]);
            assert!(
                ty.split('|').any(|t| t == got),
                "record {n}: {k} is {got}, want {ty}"
            );
        }
        let ours = line.rfind("\"llmspeed\": {").expect("our key");
        assert!(
            ours > at && !line[ours..].contains("\"errors\": "),
            "record {n}: ours come last"
        );
        assert_eq!(obj["completed"], 6);
        assert_eq!(
            obj["total_output_tokens"], 36,
            "6 requests x 6 tokens (range ratio 1.0)"
        );
        assert_eq!(obj["total_input_tokens"], 6 * 24);
    }
    let first: Value = serde_json::from_str(records[0]).unwrap();
    assert_eq!(first["tag"], "first");
    assert!(
        first.get("itls").is_none(),
        "no details without --output-details"
    );
    let second: Value =
        serde_json::from_str(&records[1].replace(": Infinity", ": 1.0e300")).unwrap();
    for k in [
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
    ] {
        assert_eq!(second[k].as_array().unwrap().len(), 6, "{k}");
    }
    assert_eq!(second["itls"][0].as_array().unwrap().len(), 5);
    assert!(!second["generated_texts"][0].as_str().unwrap().is_empty());
}

#[test]
fn refused_flags_name_themselves() {
    for (flag, args) in [
        ("--disable-stream", vec!["--disable-stream"]),
        ("--profile", vec!["--profile"]),
        ("--backend trt", vec!["--backend", "trt"]),
        (
            "--dataset-name speed-bench",
            vec!["--dataset-name", "speed-bench"],
        ),
        (
            "--dataset-name agentic-trace",
            vec!["--dataset-name", "agentic-trace", "--dataset-offset", "9"],
        ),
        (
            "--gsp-num-turns",
            vec![
                "--dataset-name",
                "generated-shared-prefix",
                "--gsp-num-turns",
                "3",
            ],
        ),
    ] {
        let mut argv = vec!["bench", "sglang", "--base-url", "http://127.0.0.1:9"];
        argv.extend(args);
        let out = llmspeed(&argv);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}

#[derive(Parser)]
struct ServeWrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// `bench sglang --backend sglang-oai` and `bench serve` (OpenAI completions) on one run of the
/// simulated server, the same prompts' lengths and the same schedule. Their definitions
/// differ in named ways, and only those:
/// 1. which chunk counts: SGLang counts a chunk whose `text` is non-empty; vLLM every chunk with
///    a non-empty `choices` list, so a text-less chunk (the mock's finish-only chunk, if any)
///    adds an ITL entry for vLLM only — counted below, not assumed;
/// 2. where latency ends: SGLang at the `[DONE]` line, vLLM at the last choice chunk;
/// 3. output tokens: SGLang sends no `stream_options`, so it reports the requested length
///    (equal to the written tokens here: `ignore_eos`); vLLM the server's usage;
/// 4. where a request starts: SGLang's `st` is when its request function runs (after its
///    slot); `bench serve` starts at the scheduled send time by default, which on a busy machine
///    adds the dispatcher's wake-up lag to every TTFT. `--latency-from sent` (vLLM's own origin)
///    removes that difference, so the test uses it.
///
/// TTFT is the first chunk for both (the mock's first completions chunk carries text), and
/// ITL entries are gaps between the same chunks, so the two distributions agree within
/// measurement noise.
#[test]
fn sglang_oai_and_bench_serve_agree_on_one_server() {
    let mock = start_mock();
    let rt = runtime();
    let url = format!("http://{}", mock.addr);
    let sg = sglang_config(&[
        "--backend",
        "sglang-oai",
        "--base-url",
        &url,
        "--dataset-name",
        "random",
        "--num-prompts",
        "12",
        "--random-input-len",
        "40",
        "--random-output-len",
        "10",
        "--random-range-ratio",
        "1.0",
        "--request-rate",
        "30",
        "--seed",
        "3",
    ])
    .unwrap();
    let dir = tempdir();
    let mut sg = sg;
    sg.output_file = Some(dir.join("oai.jsonl").to_str().unwrap().into());
    let clock = Clock::new();
    let s = rt
        .block_on(run::run(
            &sg,
            clock.clone(),
            &Cancel::new(),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut |_: &str| {},
        ))
        .expect("bench sglang");
    let serve = ServeWrap::parse_from([
        "x",
        "--base-url",
        &url,
        "--backend",
        "openai",
        "--num-prompts",
        "12",
        "--random-input-len",
        "40",
        "--random-output-len",
        "10",
        "--request-rate",
        "30",
        "--seed",
        "3",
        "--request-id-prefix",
        "serve-",
        // Difference 4: see above.
        "--latency-from",
        "sent",
    ])
    .a
    .validate()
    .unwrap();
    let v = rt
        .block_on(llmspeed::bench::vllm::run::run(
            &serve,
            Clock::new(),
            &Cancel::new(),
            &mut Vec::new(),
        ))
        .expect("bench serve");
    let trace = mock.finish();
    assert_eq!(s.metrics.completed, 12);
    assert_eq!(v.metrics.completed, 12);
    // Difference 3: both equal the written tokens here.
    let written: u64 = (0..12)
        .map(|i| trace[&sg.plan.request_ids.request(i)].len() as u64)
        .sum();
    assert_eq!(s.metrics.total_output, written);
    assert_eq!(v.metrics.total_output_tokens, written);
    // Difference 1, counted: text-less choice chunks are vLLM's extra ITL entries.
    let textless: usize = s
        .measured
        .requests
        .iter()
        .map(|f| {
            f.timeline
                .events
                .iter()
                .skip(1)
                .filter(|e| e.channel != llmspeed::timeline::Channel::Content)
                .count()
        })
        .sum();
    let sg_itls: Vec<f64> = s.outputs.iter().flat_map(|o| o.itl_s.clone()).collect();
    let vl_itls: Vec<f64> = v.detailed.itls.iter().flatten().copied().collect();
    assert_eq!(vl_itls.len(), sg_itls.len() + textless);
    // TTFT: what each tool measured beyond the server's own TTFT of the same request (its
    // first token's write after the request arrived, from the trace). The server's part
    // differs between the two runs by up to a decode step (where each arrival fell in the
    // engine's step), which once made the raw medians differ by 4.5 ms on a loaded machine
    // (4.15 vs 8.67 ms in CI); what the client adds on top is the definition under test.
    let server_ttft_ms = |id: &str| {
        let w = &trace[id];
        (w[0].t_ns as f64 - w[0].arrival_ns as f64) / 1e6
    };
    let sg_added = median(
        s.outputs
            .iter()
            .zip(&s.measured.requests)
            .map(|(o, f)| o.ttft_s * 1e3 - server_ttft_ms(&sg.plan.request_ids.request(f.index)))
            .collect(),
    );
    let vl_added = median(
        v.detailed
            .ttfts
            .iter()
            .enumerate()
            .map(|(i, t)| t * 1e3 - server_ttft_ms(&format!("serve-{i}")))
            .collect(),
    );
    let sg_itl = median(sg_itls.iter().map(|g| g * 1e3).collect());
    let vl_itl = median(vl_itls.iter().map(|g| g * 1e3).collect());
    assert!(
        (sg_added - vl_added).abs() < 1.5,
        "median TTFT beyond the server's own: {sg_added} vs {vl_added} ms"
    );
    assert!(
        (sg_itl - vl_itl).abs() < 0.5,
        "median ITL {sg_itl} vs {vl_itl} ms"
    );
    // Difference 2: SGLang's latency ends at [DONE], never before vLLM's last choice chunk.
    for (o, f) in s.outputs.iter().zip(&s.measured.requests) {
        let last_choice = clock.delta_ns(s.measured.base_raw, f.timeline.events.last().unwrap().t);
        assert!((o.start_ns + (o.latency_s * 1e9) as u64) + 1000 >= last_choice);
    }
}

/// SGLang's warm-up through the engine's `Plan::warmup`: `--warmup-requests` copies of the
/// first request, each capped at 32 output tokens, then `/flush_cache` with `--flush-cache`.
/// The flush shows in the server's prefix cache: the first measured request repeats the
/// warm-up's prompt, so it hits the cache without the flush and misses it after one.
#[test]
fn warm_up_repeats_the_first_request_capped_and_the_flush_empties_the_cache() {
    let mock = start_mock();
    let rt = runtime();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();
    let run = |seed: &str, flush: bool| {
        let file = dir.join(format!("w{seed}.jsonl"));
        let mut args = vec![
            "--base-url",
            &url,
            "--dataset-name",
            "random",
            "--num-prompts",
            "4",
            "--random-input-len",
            "64",
            "--random-output-len",
            "40",
            "--random-range-ratio",
            "1.0",
            "--warmup-requests",
            "3",
            "--max-concurrency",
            "1",
            "--seed",
            seed,
            "--output-file",
            file.to_str().unwrap(),
        ];
        if flush {
            args.push("--flush-cache");
        }
        let cfg = sglang_config(&args).unwrap();
        let out = rt
            .block_on(run::run(
                &cfg,
                Clock::new(),
                &Cancel::new(),
                &mut Vec::new(),
                &mut Vec::new(),
                &mut |_: &str| {},
            ))
            .expect("run");
        let first = out
            .measured
            .requests
            .iter()
            .find(|f| f.index == 0)
            .expect("request 0");
        let cached = first.timeline.usage.and_then(|u| u.cached_tokens);
        (cfg, cached)
    };
    let (flushed_cfg, flushed) = run("11", true);
    let (kept_cfg, kept) = run("12", false);
    let trace = mock.finish();
    assert_eq!(flushed, Some(0), "the flush emptied the prefix cache");
    assert!(
        kept.unwrap_or(0) > 0,
        "without a flush the warm-up's prompt is cached: {kept:?}"
    );
    // Everything the server saw that was not a measured request is a warm-up: three per run,
    // each stopped at 32 tokens.
    let measured: Vec<String> = [&flushed_cfg, &kept_cfg]
        .iter()
        .flat_map(|c| (0..4).map(|i| c.plan.request_ids.request(i)))
        .collect();
    let warmups: Vec<usize> = trace
        .iter()
        .filter(|(id, _)| !measured.contains(id))
        .map(|(_, recs)| recs.len())
        .collect();
    assert_eq!(warmups, vec![32; 6], "{warmups:?}");
}

/// Runs `bench sglang`'s session in process: the console text and the files it wrote.
fn session(args: &[&str]) -> (String, Vec<std::path::PathBuf>) {
    let cfg = sglang_config(args).unwrap();
    let rt = runtime();
    let mut out = Vec::new();
    let files = rt
        .block_on(llmspeed::bench::sglang::session::execute(
            &cfg,
            Clock::new(),
            &Cancel::new(),
            &mut Vec::new(),
            &mut out,
            &mut |_: &str| {},
        ))
        .expect("session");
    (String::from_utf8(out).unwrap(), files)
}

/// The JSONL lines of `path`; Python's `Infinity` is read as the string `"Infinity"`.
fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(&l.replace(": Infinity", ": \"Infinity\"")).unwrap())
        .collect()
}

/// A small random run: 6 prompts of 24 tokens in, 6 out.
fn small_run<'a>(url: &'a str, file: &'a str) -> Vec<&'a str> {
    vec![
        "--base-url",
        url,
        "--dataset-name",
        "random",
        "--num-prompts",
        "6",
        "--random-input-len",
        "24",
        "--random-output-len",
        "6",
        "--random-range-ratio",
        "1.0",
        "--output-file",
        file,
    ]
}

/// `--num-runs 3`: three records appended as three separate invocations would append them,
/// then one line beside them with each figure's spread, checked against a hand computation
/// from the three records (mean, sample std, CV, mean ± t(0.975, 2) x std / sqrt(3)).
#[test]
fn num_runs_append_a_record_per_run_and_their_spread_beside_them() {
    let mock = start_mock();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();
    let file = dir.join("repeat.jsonl");
    let mut args = small_run(&url, file.to_str().unwrap());
    args.extend([
        "--num-runs",
        "3",
        "--max-concurrency",
        "2",
        "--request-rate",
        "100",
    ]);
    let (console, files) = session(&args);
    let _ = mock.finish();
    let spread_file = dir.join("repeat.runs.jsonl");
    assert_eq!(files, [file.clone(), spread_file.clone()]);
    let recs = records(&file);
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r["completed"], 6, "{r}");
        assert_eq!(r["max_concurrency"], 2);
        assert_eq!(r["request_rate"], 100.0);
    }
    assert_eq!(console.matches(" Serving Benchmark Result ").count(), 3);
    assert!(console.contains("-- run 3/3 --"), "{console}");
    assert!(console.contains("Multi-Run Summary (3 runs)"), "{console}");

    let lines = records(&spread_file);
    assert_eq!(lines.len(), 1);
    let s = &lines[0];
    assert_eq!(s["num_runs"], 3);
    assert_eq!(s["max_concurrency"], 2);
    assert_eq!(s["request_rate"], 100.0);
    assert_eq!(
        s["result_files"],
        serde_json::json!([file.to_str().unwrap()])
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    for key in [
        "duration",
        "completed",
        "output_throughput",
        "mean_ttft_ms",
        "median_itl_ms",
        "p99_e2e_latency_ms",
        "concurrency",
    ] {
        let xs: Vec<f64> = recs.iter().map(|r| r[key].as_f64().unwrap()).collect();
        let m = &s["metrics"][key];
        let got: Vec<f64> = m["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{key} missing: {s}"))
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(got, xs, "{key}: the values are the records'");
        let mean = (xs[0] + xs[1] + xs[2]) / 3.0;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0;
        let std = var.sqrt();
        let half = 4.303 * std / 3f64.sqrt();
        let f = |k: &str| m[k].as_f64().unwrap();
        assert!(close(f("mean"), mean), "{key} mean {m}");
        assert!(close(f("std"), std), "{key} std {m}");
        if mean != 0.0 {
            assert!(close(f("cv"), std / mean), "{key} cv {m}");
        }
        assert!(close(f("ci95_low"), mean - half), "{key} ci low {m}");
        assert!(close(f("ci95_high"), mean + half), "{key} ci high {m}");
    }
    // Settings and within-run spreads are not compared across runs.
    for key in ["max_concurrency", "random_input_len", "std_ttft_ms"] {
        assert!(s["metrics"].get(key).is_none(), "{key}");
    }
    assert_eq!(s["metrics"]["completed"]["std"], 0.0);
}

/// The sweeps: one record per point, in order, each run at its point's setting.
#[test]
fn sweeps_append_one_record_per_point_in_order() {
    let mock = start_mock();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();

    let file = dir.join("conc.jsonl");
    let mut args = small_run(&url, file.to_str().unwrap());
    args.extend(["--sweep-max-concurrency", "1,3"]);
    let (console, files) = session(&args);
    assert_eq!(
        files,
        std::slice::from_ref(&file),
        "no spread file for single runs"
    );
    let recs = records(&file);
    let caps: Vec<&Value> = recs.iter().map(|r| &r["max_concurrency"]).collect();
    assert_eq!(caps, [1, 3]);
    for r in &recs {
        assert_eq!(r["completed"], 6, "{r}");
        assert_eq!(r["request_rate"], "Infinity", "{r}");
    }
    // SGLang's concurrency is the summed latencies over the duration: never above the cap,
    // and above 1 only where requests overlapped.
    let conc: Vec<f64> = recs
        .iter()
        .map(|r| r["concurrency"].as_f64().unwrap())
        .collect();
    assert!(conc[0] <= 1.0 + 1e-9, "one at a time: {conc:?}");
    assert!(conc[1] > 1.0 && conc[1] <= 3.0 + 1e-9, "{conc:?}");
    // A closed loop (a cap, rate inf): the engine's steady-state window, under our own key.
    for (r, cap) in recs.iter().zip([1, 3]) {
        let w = &r["llmspeed"]["steady_state"]["window"];
        assert_eq!(w["target_concurrency"], cap, "{r}");
        assert_eq!(w["requests_total"], 6, "{r}");
        assert!(w["observed_peak"].as_u64().unwrap() <= cap, "{w}");
    }
    let first = console.find("-- concurrency=1 --").expect("title 1");
    let second = console.find("-- concurrency=3 --").expect("title 3");
    assert!(first < second, "{console}");
    assert!(!dir.join("conc.runs.jsonl").exists());

    let file = dir.join("rate.jsonl");
    let mut args = small_run(&url, file.to_str().unwrap());
    args.extend(["--sweep-request-rate", "20,200"]);
    let (_, files) = session(&args);
    let _ = mock.finish();
    assert_eq!(files, std::slice::from_ref(&file));
    let recs = records(&file);
    let rates: Vec<&Value> = recs.iter().map(|r| &r["request_rate"]).collect();
    assert_eq!(rates, [20.0, 200.0]);
    assert!(recs
        .iter()
        .all(|r| r["completed"] == 6 && r["max_concurrency"].is_null()));
    // An open loop has no steady-state window.
    assert!(recs
        .iter()
        .all(|r| r["llmspeed"].get("steady_state").is_none()));
    // The same seed draws the same gaps, ten times longer at 20/s than at 200/s.
    let d: Vec<f64> = recs
        .iter()
        .map(|r| r["duration"].as_f64().unwrap())
        .collect();
    assert!(d[0] > d[1], "the rate was applied: durations {d:?}");
}

/// `--shard K/N` on two threads told one `--start-at`, then `llmspeed merge` of their JSONL
/// files: one SGLang record of the whole run, its figures recomputed from the shards'
/// per-request blocks (checked by hand here), its window the union of the shards'.
#[test]
fn shards_merge_into_one_record_of_the_whole_run() {
    let mock = start_mock();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Far enough ahead for both shards' ready checks and warm-ups on a loaded machine.
    let start_at = (now + 8).to_string();
    let files: Vec<std::path::PathBuf> = (0..2)
        .map(|k| dir.join(format!("shard-{k}.jsonl")))
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|k| {
            let (url, file, start_at) = (url.clone(), files[k].clone(), start_at.clone());
            std::thread::spawn(move || {
                let shard = format!("{k}/2");
                let mut args = small_run(&url, file.to_str().unwrap());
                args[5] = "8";
                args.extend([
                    "--shard",
                    &shard,
                    "--start-at",
                    &start_at,
                    "--max-concurrency",
                    "2",
                ]);
                session(&args)
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let merged = dir.join("merged.jsonl");
    let mut argv = vec!["merge"];
    argv.extend(files.iter().map(|f| f.to_str().unwrap()));
    argv.extend(["--result-filename", merged.to_str().unwrap()]);
    let out = llmspeed(&argv);
    let _ = mock.finish();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("warning:"),
        "one --start-at, one machine: {stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(" Serving Benchmark Result "));

    let shards: Vec<Value> = files.iter().map(|f| records(f).remove(0)).collect();
    let merged_records = records(&merged);
    assert_eq!(merged_records.len(), 1);
    let m = &merged_records[0];
    assert_eq!(shards[0]["completed"], 4);
    assert_eq!(shards[1]["completed"], 4);
    assert_eq!(m["completed"], 8, "{m}");
    assert_eq!(m["max_concurrency"], 2);
    let sum = |k: &str| shards.iter().map(|s| s[k].as_u64().unwrap()).sum::<u64>();
    for k in [
        "total_output_tokens",
        "total_output_tokens_retokenized",
        "total_input_tokens",
    ] {
        assert_eq!(m[k].as_u64().unwrap(), sum(k), "{k}");
    }
    // By hand from the blocks: the mean TTFT over all eight requests, and the window.
    let blocks: Vec<&Value> = shards.iter().map(|s| &s["llmspeed"]["shard"]).collect();
    let ttfts: Vec<f64> = blocks
        .iter()
        .flat_map(|b| b["requests"].as_array().unwrap())
        .map(|r| r["ttft_s"].as_f64().unwrap())
        .collect();
    assert_eq!(ttfts.len(), 8);
    let mean_ms = ttfts.iter().sum::<f64>() / 8.0 * 1000.0;
    let got = m["mean_ttft_ms"].as_f64().unwrap();
    assert!((got - mean_ms).abs() < 1e-9, "{got} vs {mean_ms}");
    let ns = |b: &Value, k: &str| b[k].as_u64().unwrap();
    let base = blocks.iter().map(|b| ns(b, "start_unix_ns")).min().unwrap();
    let end = blocks.iter().map(|b| ns(b, "end_unix_ns")).max().unwrap();
    assert_eq!(m["duration"].as_f64().unwrap(), (end - base) as f64 / 1e9);
    assert_eq!(m["llmspeed"]["merged_from"].as_array().unwrap().len(), 2);
    // Every request index of the whole run exactly once, each in its own shard.
    let mut idx: Vec<u64> = blocks
        .iter()
        .flat_map(|b| b["requests"].as_array().unwrap())
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx.iter().filter(|&&i| i % 2 == 1).count(), 4);
    idx.sort_unstable();
    assert_eq!(idx, (0..8).collect::<Vec<u64>>());
}

/// SGLang's custom conversations, filtered by `--sharegpt-context-len` and given a
/// `--dataset-offset` (which only SGLang's agentic-trace reads), through `--num-runs 2` and
/// through two shards merged: every run sends the same three conversations. Worked by hand
/// with the mock's tokenizer (one token per word): prompt + reply of 10, 12, 40 and 8 tokens
/// pass a context of 30 but the third; a single turn and a line that is not JSON are skipped;
/// 10 prompts asked, 3 sent (no oversampling), 5 + 6 + 4 tokens in and as many out.
#[test]
fn custom_conversations_with_a_context_length_repeat_and_merge() {
    let mock = start_mock();
    let url = format!("http://{}", mock.addr);
    let dir = tempdir();
    let words = |n: usize| vec!["word"; n].join(" ");
    let conv = |p: usize, r: usize| {
        serde_json::json!({"conversations": [
            {"role": "user", "content": words(p)},
            {"role": "assistant", "content": words(r)},
        ]})
        .to_string()
    };
    let data = dir.join("conv.jsonl");
    let lines = [
        conv(5, 5),
        conv(6, 6),
        "not json".to_string(),
        conv(20, 20),
        serde_json::json!({"conversation": [{"value": "only one turn"}]}).to_string(),
        conv(4, 4),
    ];
    std::fs::write(&data, lines.join("\n")).unwrap();
    let run = |file: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "--base-url",
            url.as_str(),
            "--dataset-name",
            "custom",
            "--dataset-path",
            data.to_str().unwrap(),
            "--num-prompts",
            "10",
            "--sharegpt-context-len",
            "30",
            "--dataset-offset",
            "7",
            "--output-file",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        session(&args)
    };
    let sent_the_three = |r: &Value| {
        assert_eq!(r["dataset_name"], "custom", "{r}");
        assert_eq!(r["completed"], 3, "{r}");
        assert_eq!(r["total_input_tokens"], 15, "{r}");
        assert_eq!(r["total_output_tokens"], 15, "{r}");
    };
    let repeat = dir.join("repeat.jsonl");
    let (_, files) = run(&repeat, &["--num-runs", "2"]);
    assert_eq!(files.len(), 2, "{files:?}");
    let recs = records(&repeat);
    assert_eq!(recs.len(), 2);
    recs.iter().for_each(sent_the_three);

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start_at = (now + 8).to_string();
    let shard_files: Vec<std::path::PathBuf> = (0..2)
        .map(|k| dir.join(format!("custom-{k}.jsonl")))
        .collect();
    std::thread::scope(|s| {
        for (k, f) in shard_files.iter().enumerate() {
            let (run, start_at) = (&run, &start_at);
            s.spawn(move || {
                let shard = format!("{k}/2");
                run(f, &["--shard", &shard, "--start-at", start_at])
            });
        }
    });
    let merged = dir.join("merged-custom.jsonl");
    let mut argv = vec!["merge"];
    argv.extend(shard_files.iter().map(|f| f.to_str().unwrap()));
    argv.extend(["--result-filename", merged.to_str().unwrap()]);
    let out = llmspeed(&argv);
    let _ = mock.finish();
    assert!(out.status.success(), "{out:?}");
    let shards: Vec<Value> = shard_files.iter().map(|f| records(f).remove(0)).collect();
    assert_eq!(
        (
            shards[0]["completed"].as_u64(),
            shards[1]["completed"].as_u64()
        ),
        (Some(2), Some(1))
    );
    let m = records(&merged).remove(0);
    sent_the_three(&m);
}

/// `--gsp-send-routing-key`, against the simulated server's request log: every measured request
/// names its shared-prefix group in `X-SMG-Routing-Key` as `{run}_{start}_{group}` (one run's
/// tag on all), the requests naming one group share its prefix and no two groups do, each
/// group has its prompts, and the warm-up carries none. Without the flag, no request does.
/// A generated-shared-prefix run on `url` appending its record to `out`: `sizes` are its
/// groups, prompts per group, system prompt, question and output lengths; then `extra` flags.
fn gsp<'a>(
    url: &'a str,
    out: &'a std::path::Path,
    [groups, per_group, system, question, output]: [&'a str; 5],
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "--base-url",
        url,
        "--dataset-name",
        "generated-shared-prefix",
        "--gsp-num-groups",
        groups,
        "--gsp-prompts-per-group",
        per_group,
        "--gsp-system-prompt-len",
        system,
        "--gsp-question-len",
        question,
        "--gsp-output-len",
        output,
        "--output-file",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}

/// A small generated-shared-prefix run whose requests name their groups (2 groups of 2
/// prompts of 16 + 4 token ids), with `extra` flags.
fn routed_gsp<'a>(url: &'a str, out: &'a std::path::Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["--tokenize-prompt", "--gsp-send-routing-key"];
    flags.extend_from_slice(extra);
    gsp(url, out, ["2", "2", "16", "4", "2"], &flags)
}

#[test]
fn routing_keys_name_each_requests_shared_prefix_group() {
    let rt = runtime();
    let dir = tempdir();
    let run = |send: bool| -> Vec<Value> {
        let log = dir.join(format!("requests-{send}.jsonl"));
        let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
        mc.request_log = Some(log.clone());
        let server = mock_server::MockThread::start(mc);
        let url = server.url();
        let out = dir.join(format!("gsp-{send}.jsonl"));
        let mut args = gsp(
            &url,
            &out,
            ["3", "4", "24", "6", "2"],
            &["--tokenize-prompt"],
        );
        if send {
            args.push("--gsp-send-routing-key");
        }
        let cfg = sglang_config(&args).unwrap();
        rt.block_on(run::run(
            &cfg,
            Clock::new(),
            &Cancel::new(),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut |_: &str| {},
        ))
        .expect("run");
        server.stop();
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["path"] == "/generate")
            .collect()
    };
    let plain = run(false);
    assert_eq!(plain.len(), 1 + 12, "a warm-up and 12 measured requests");
    assert!(plain.iter().all(|v| v.get("routing_key").is_none()));

    let sent = run(true);
    assert_eq!(sent.len(), 1 + 12);
    // The warm-up comes first and, as in SGLang, names no group.
    assert!(sent[0].get("routing_key").is_none(), "{}", sent[0]);
    let mut tags = std::collections::BTreeSet::new();
    let mut by_group: std::collections::BTreeMap<u32, Vec<Vec<u64>>> = Default::default();
    for v in &sent[1..] {
        let key = v["routing_key"].as_str().unwrap_or_else(|| panic!("{v}"));
        let (tag, group) = key.rsplit_once('_').unwrap();
        let (run_id, start) = tag.split_once('_').unwrap();
        assert!(
            run_id.len() == 8 && run_id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{key}"
        );
        assert!(
            start.len() == 14 && start.bytes().all(|b| b.is_ascii_digit()),
            "{key}"
        );
        tags.insert(tag.to_string());
        let ids: Vec<u64> = v["body"]["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        by_group
            .entry(group.parse().unwrap())
            .or_default()
            .push(ids[..24].to_vec());
    }
    assert_eq!(tags.len(), 1, "one run, one tag: {tags:?}");
    assert_eq!(by_group.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    let mut prefixes = std::collections::BTreeSet::new();
    for (g, p) in &by_group {
        assert_eq!(p.len(), 4, "group {g}: its 4 prompts");
        assert!(p.iter().all(|x| x == &p[0]), "group {g}: one prefix");
        prefixes.insert(p[0].clone());
    }
    assert_eq!(prefixes.len(), 3, "three groups, three prefixes");

    // `--num-runs 2`: each run makes its tag, as each SGLang invocation does.
    let log = dir.join("requests-two-runs.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let out = dir.join("gsp-two-runs.jsonl");
    session(&routed_gsp(&url, &out, &["--num-runs", "2"]));
    server.stop();
    let mut per_tag: std::collections::BTreeMap<String, usize> = Default::default();
    for l in std::fs::read_to_string(&log).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if let Some(k) = v["routing_key"].as_str() {
            *per_tag
                .entry(k.rsplit_once('_').unwrap().0.to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(
        per_tag.values().copied().collect::<Vec<_>>(),
        [4, 4],
        "two runs, two tags, each on its run's 4 requests: {per_tag:?}"
    );

    // Two shards of one run (`--shard K/2`, one `--start-at`, here already passed so neither
    // waits): one tag over both, so group g keeps one key whichever shard sends its requests.
    // Without `--start-at` each shard makes its own.
    let shards = |start_at: Option<&str>| -> Vec<String> {
        let log = dir.join(format!("requests-shards-{}.jsonl", start_at.is_some()));
        let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
        mc.request_log = Some(log.clone());
        let server = mock_server::MockThread::start(mc);
        let url = server.url();
        for k in ["0/2", "1/2"] {
            let out = dir.join(format!("gsp-shard-{}.jsonl", &k[..1]));
            let mut extra = vec!["--shard", k];
            if let Some(at) = start_at {
                extra.extend(["--start-at", at]);
            }
            session(&routed_gsp(&url, &out, &extra));
        }
        server.stop();
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["routing_key"].as_str().map(str::to_string)
            })
            .collect()
    };
    let keys = shards(Some("1796311800"));
    assert_eq!(keys.len(), 4, "each shard sent its 2 of the 4: {keys:?}");
    let tags: std::collections::BTreeSet<_> =
        keys.iter().map(|k| k.rsplit_once('_').unwrap().0).collect();
    assert_eq!(tags.len(), 1, "one run on two shards, one tag: {keys:?}");
    assert!(
        tags.iter().all(|t| t.ends_with("_20261203153000")),
        "the start named is --start-at's: {tags:?}"
    );
    let keys = shards(None);
    let tags: std::collections::BTreeSet<_> =
        keys.iter().map(|k| k.rsplit_once('_').unwrap().0).collect();
    assert_eq!(tags.len(), 2, "unsynchronised shards, a tag each: {keys:?}");
}

#[test]
fn multi_turn_rows_send_each_round_with_the_answers_before_it() {
    // `--gsp-num-turns 3` on the chat backend: 2 groups x 2 prompts, each a row of 3 rounds
    // sent one after another, round r carrying the row's earlier turns and the answers the
    // server gave; SGLang's record counts each round as a request and, as SGLang, no dataset
    // input for conversations.
    let dir = tempdir();
    let log = dir.join("requests-turns.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let out = dir.join("turns.jsonl");
    let (console, _) = session(&gsp(
        &url,
        &out,
        ["2", "2", "16", "6", "40"],
        &[
            "--backend",
            "sglang-oai-chat",
            "--gsp-num-turns",
            "3",
            "--max-concurrency",
            "2",
            "--output-details",
        ],
    ));
    server.stop();
    let rec = records(&out).pop().unwrap();
    assert_eq!(rec["completed"], 12, "{rec}");
    assert_eq!(rec["total_input_tokens"], 0, "as SGLang: {rec}");
    assert!(console.contains("Total input tokens:"), "{console}");
    let input_lens: Vec<u64> = rec["input_lens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(input_lens.len(), 12);
    assert_eq!(
        rec["llmspeed"]["multi_turn_input_tokens"],
        input_lens.iter().sum::<u64>(),
        "{rec}"
    );
    let answers: std::collections::BTreeSet<String> = rec["generated_texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();

    let logged: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["path"] == "/v1/chat/completions")
        .collect();
    // The warm-up: the first row's 3 rounds at 32 tokens at most, with no request id.
    let (warm, measured): (Vec<&Value>, Vec<&Value>) =
        logged.iter().partition(|v| v["request_id"].is_null());
    assert_eq!((warm.len(), measured.len()), (3, 12), "{logged:?}");
    assert!(warm
        .iter()
        .all(|v| v["body"]["max_completion_tokens"] == 32));
    // Rows by the conversation their request id names (each round its own id); each row's
    // rounds in arrival order.
    let mut rows: std::collections::BTreeMap<u64, Vec<&Value>> = Default::default();
    for v in &measured {
        let body = &v["body"];
        assert_eq!(
            body["stream_options"],
            serde_json::json!({"include_usage": true}),
            "{body}"
        );
        assert_eq!(body["max_completion_tokens"], 40, "{body}");
        let id =
            llmspeed::workload::request_id::RequestId::parse(v["request_id"].as_str().unwrap());
        let Some(llmspeed::workload::request_id::RequestId::Turn {
            conversation, turn, ..
        }) = id
        else {
            panic!("a turn's id: {v}")
        };
        let row = rows.entry(conversation).or_default();
        assert_eq!(turn as usize, row.len(), "rounds in order: {v}");
        row.push(v);
    }
    assert_eq!(rows.len(), 4, "4 rows");
    for (row, rounds) in rows {
        assert_eq!(rounds.len(), 3, "row {row}");
        let arrivals: Vec<u64> = rounds
            .iter()
            .map(|v| v["arrival_ns"].as_u64().unwrap())
            .collect();
        assert!(
            arrivals.is_sorted(),
            "row {row}'s rounds one after another: {arrivals:?}"
        );
        let msgs = |r: usize| rounds[r]["body"]["messages"].as_array().unwrap().clone();
        for r in 0..3 {
            let m = msgs(r);
            assert_eq!(m.len(), 2 * r + 1, "round {r}: {m:?}");
            for (k, x) in m.iter().enumerate() {
                let role = if k % 2 == 0 { "user" } else { "assistant" };
                assert_eq!(x["role"], role, "{m:?}");
            }
            if r > 0 {
                // The earlier round's messages, then the answer the server gave it.
                let before = msgs(r - 1);
                assert_eq!(m[..before.len()], before[..], "round {r}");
                let answer = m[2 * r - 1]["content"].as_str().unwrap();
                assert!(
                    !answer.is_empty() && answers.contains(answer),
                    "round {r}'s history holds an answer the server did not give: {answer:?}"
                );
                assert_ne!(m[2 * r]["content"], m[0]["content"]);
            }
        }
    }
}

#[test]
fn shared_prefix_prompts_on_a_chat_endpoint_share_the_prefix_and_differ_after_it() {
    // On a chat endpoint token-id prompts go as text fitted through /detokenize and /tokenize.
    // The mock's tokenizer re-encodes random ids several times longer (a byte-level BPE about
    // 20%), so a whole prompt fitted at once lost its own ids to the cut and every prompt of a
    // group was one text. Each prompt: its group's prefix text, then text of its own.
    let dir = tempdir();
    let log = dir.join("requests-chat-gsp.jsonl");
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let out = dir.join("chat-gsp.jsonl");
    session(&gsp(
        &url,
        &out,
        ["2", "3", "24", "8", "2"],
        &["--backend", "sglang-oai-chat", "--gsp-send-routing-key"],
    ));
    server.stop();
    let mut by_group: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in std::fs::read_to_string(&log).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let Some(key) = v["routing_key"].as_str() else {
            continue;
        };
        let group = key.rsplit_once('_').unwrap().1.to_string();
        let text = v["body"]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string();
        by_group.entry(group).or_default().push(text);
    }
    assert_eq!(by_group.len(), 2, "{by_group:?}");
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let mut heads = Vec::new();
    for (g, texts) in &by_group {
        assert_eq!(texts.len(), 3, "group {g}");
        let distinct: std::collections::BTreeSet<&String> = texts.iter().collect();
        assert_eq!(
            distinct.len(),
            3,
            "group {g}'s prompts are one text: {texts:?}"
        );
        // The group's prefix: what all three start with, most of each prompt (24 of 32 ids).
        let head = texts.iter().map(|t| common(t, &texts[0])).min().unwrap();
        assert!(
            texts.iter().all(|t| head * 2 > t.chars().count()),
            "group {g} shares {head} characters: {texts:?}"
        );
        heads.push(texts[0].chars().take(head).collect::<String>());
    }
    assert!(
        common(&heads[0], &heads[1]) * 2 < heads[0].chars().count(),
        "{heads:?}"
    );
}

#[test]
fn multi_turn_shards_merge_into_the_rows_rounds() {
    // `--gsp-num-turns 2` across two shards (one --start-at, already passed): each shard sends
    // its rows' rounds; the merge keeps every (row, round) once and, as a single run, counts no
    // dataset input (SGLang's total for conversations) and sums the rounds' own under ours.
    let dir = tempdir();
    let mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    let server = mock_server::MockThread::start(mc);
    let url = server.url();
    let files: Vec<std::path::PathBuf> = (0..2)
        .map(|k| dir.join(format!("turns-shard-{k}.jsonl")))
        .collect();
    for (k, file) in files.iter().enumerate() {
        let shard = format!("{k}/2");
        session(&gsp(
            &url,
            file,
            ["2", "2", "16", "6", "3"],
            &[
                "--backend",
                "vllm-chat",
                "--gsp-num-turns",
                "2",
                "--shard",
                &shard,
                "--start-at",
                "1796311800",
            ],
        ));
    }
    server.stop();
    let merged = dir.join("turns-merged.jsonl");
    let mut argv = vec!["merge"];
    argv.extend(files.iter().map(|f| f.to_str().unwrap()));
    argv.extend(["--result-filename", merged.to_str().unwrap()]);
    let out = llmspeed(&argv);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shards: Vec<Value> = files.iter().map(|f| records(f).remove(0)).collect();
    let m = records(&merged).remove(0);
    // 4 rows of 2 rounds: each shard its 2 rows' 4 rounds.
    assert_eq!(
        (
            shards[0]["completed"].clone(),
            shards[1]["completed"].clone()
        ),
        (4.into(), 4.into())
    );
    assert_eq!(m["completed"], 8, "{m}");
    assert_eq!(m["total_input_tokens"], 0, "{m}");
    let ours = |v: &Value| v["llmspeed"]["multi_turn_input_tokens"].as_u64().unwrap();
    assert!(ours(&shards[0]) > 0);
    assert_eq!(ours(&m), ours(&shards[0]) + ours(&shards[1]), "{m}");
    let mut rounds: Vec<(u64, u64)> = shards
        .iter()
        .flat_map(|s| s["llmspeed"]["shard"]["requests"].as_array().unwrap())
        .map(|r| (r["index"].as_u64().unwrap(), r["round"].as_u64().unwrap()))
        .collect();
    rounds.sort_unstable();
    assert_eq!(
        rounds,
        [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
            (2, 0),
            (2, 1),
            (3, 0),
            (3, 1)
        ]
    );
}
