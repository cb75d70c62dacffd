//! `bench serve --dataset-name hf` end to end against the simulated server: a local copy of a
//! dataset (`--dataset-path FOLDER --hf-name ID`, its split found as the `datasets` library finds
//! a folder's files) is read, built by the id's class and sent; the server's request log shows
//! each body as vLLM's class and chat body make it (InstructCoder's prompt text and output
//! length; BFCL's messages, tools and `tool_choice`). A split that does not exist stops the run
//! before any generation request is sent, naming the splits there are.

#[path = "support/mock.rs"]
mod mock_server;

use clap::Parser;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::net::Cancel;
use mock_server::{runtime, MockThread};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// Runs `bench serve` with `flags` against a fresh simulated server, by the model name it
/// serves; the run's outcome (the requests completed) and the generation requests' bodies the
/// server logged.
fn serve(dir: &Path, flags: &[&str]) -> (Result<usize, String>, Vec<Value>) {
    let log = dir.join("requests.jsonl");
    let _ = std::fs::remove_file(&log);
    let mut mc = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    mc.request_log = Some(log.clone());
    let model = mc.model.clone();
    let server = MockThread::start(mc);
    let url = server.url();
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--model",
        &model,
        "--num-warmups",
        "0",
    ];
    argv.extend_from_slice(flags);
    let outcome = Wrap::try_parse_from(argv)
        .map_err(|e| e.to_string())
        .and_then(|w| w.a.validate())
        .and_then(|cfg| {
            runtime()
                .block_on(run::run(
                    &cfg,
                    Clock::new(),
                    &Cancel::new(),
                    &mut Vec::new(),
                ))
                .map(|out| out.metrics.completed)
                .map_err(|e| e.to_string())
        });
    server.stop();
    let bodies = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["path"] == "/v1/completions" || v["path"] == "/v1/chat/completions")
        .filter(|v| v["body"]["stream"] == true)
        .map(|v| v["body"].clone())
        .collect();
    (outcome, bodies)
}

fn write_lines(path: &Path, rows: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_local_copy_of_instruct_coder_is_sent_as_vllm_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ic");
    let rows: Vec<Value> = (0..6)
        .map(|i| json!({"input": format!("def f{i}(): pass"), "instruction": format!("Rename f{i}."), "output": "x"}))
        .collect();
    write_lines(&data.join("data/train-00000-of-00001.jsonl"), &rows);
    write_lines(&data.join("data/test-00000-of-00001.jsonl"), &rows[..1]);
    let folder = data.to_str().unwrap();
    let (outcome, bodies) = serve(
        dir.path(),
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            folder,
            "--hf-name",
            "likaixin/InstructCoder",
            "--skip-chat-template",
            "--disable-shuffle",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "1",
        ],
    );
    assert_eq!(outcome.expect("the run"), 4, "every request served");
    // The four prompts of the stored order's first four rows, in that order: with
    // --max-concurrency the slots go in sample order, as vLLM's do (bench::engine::slot).
    assert_eq!(
        bodies.len(),
        4,
        "no initial test request without --ready-check-timeout-sec"
    );
    let got: Vec<String> = bodies
        .iter()
        .map(|b| b["prompt"].as_str().expect("a text prompt").to_owned())
        .collect();
    let want: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "def f{i}(): pass\n\nRename f{i}. Just output the code, do not include any \
                 explanation."
            )
        })
        .collect();
    assert_eq!(got, want);
    for b in &bodies {
        assert_eq!(b["max_tokens"], 200, "InstructCoder's output length");
    }
    // A split the folder does not have: stopped before any generation request.
    let (outcome, bodies) = serve(
        dir.path(),
        &[
            "--dataset-name",
            "hf",
            "--dataset-path",
            folder,
            "--hf-name",
            "likaixin/InstructCoder",
            "--hf-split",
            "validation",
            "--num-prompts",
            "2",
        ],
    );
    let e = outcome.unwrap_err();
    assert!(
        e.contains("\"validation\"") && e.contains("test") && e.contains("train"),
        "{e}"
    );
    assert!(bodies.is_empty(), "nothing sent: {bodies:?}");
}

#[test]
fn bfcl_requests_carry_their_messages_and_tools_over_the_run_fields() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bfcl");
    let row = |i: usize| {
        json!({"id": format!("simple_{i}"), "question": [[{"role": "user", "content": format!("Area of circle {i}?")}]],
            "function": [{"name": "area", "description": "d", "parameters": {"type": "dict",
            "properties": {"r": {"type": "float"}}, "required": ["r"]}}]})
    };
    write_lines(&data.join("BFCL_v3_simple.json"), &[row(0), row(1)]);
    let folder = data.to_str().unwrap();
    let (outcome, bodies) = serve(
        dir.path(),
        &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            folder,
            "--hf-name",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
            "--bfcl-categories",
            "simple",
            "--disable-shuffle",
            "--num-prompts",
            "2",
            "--max-concurrency",
            "1",
            "--extra-body",
            "{\"tool_choice\": \"none\", \"top_k\": 5}",
        ],
    );
    assert_eq!(outcome.expect("the run"), 2, "every request served");
    let measured = &bodies[bodies.len() - 2..];
    for (i, b) in measured.iter().enumerate() {
        assert_eq!(b["messages"], row(i)["question"][0]);
        assert_eq!(
            b["tools"],
            json!([{"type": "function", "function": {"name": "area", "description": "d",
                "parameters": {"type": "object", "properties": {"r": {"type": "number"}},
                "required": ["r"]}}}])
        );
        // The request's own tool_choice wins over --extra-body's, as vLLM merges them.
        assert_eq!(b["tool_choice"], "auto");
        assert_eq!(b["top_k"], 5);
        assert_eq!(b["max_completion_tokens"], 512);
    }
    // A category without its file: vLLM's message, nothing sent.
    let (outcome, bodies) = serve(
        dir.path(),
        &[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "hf",
            "--dataset-path",
            folder,
            "--hf-name",
            "gorilla-llm/Berkeley-Function-Calling-Leaderboard",
            "--bfcl-categories",
            "multiple",
        ],
    );
    let e = outcome.unwrap_err();
    assert!(
        e.contains(
            "BFCL category 'multiple' not found: file 'BFCL_v3_multiple.json' does not exist"
        ),
        "{e}"
    );
    assert!(bodies.is_empty(), "nothing sent: {bodies:?}");
}
