//! llmspeed against llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`,
//! built by `scripts/llama-cpp-python.sh`), the generic "OpenAI-compatible" case: no `/metrics`,
//! no `/props`, its own tokenize endpoint (`/extras/tokenize`), one request at a time, and an
//! `x-request-id` that must parse as a UUID. It serves the tiny GGUF model of
//! `scripts/llama-server.sh` on 127.0.0.1:0 (uvicorn prints the port it bound).
//!
//! `matrix` needs no flag beyond `--max-model-len`, `bench serve` none (besides the test's own
//! grid, windows, dataset and output folder); their figures are checked against what the server itself
//! reports: its `/extras/tokenize` counts and the `usage` of the same requests sent again
//! without streaming (greedy sampling, so the same tokens).

#[path = "real_llama/server.rs"]
mod llama;
#[path = "support/real_server.rs"]
mod real_server;

use real_server::{llmspeed, missing, scripts_cache, spawn_logged, text, Spawned};

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The folder the script builds into: its release and build settings (keep in step with
/// scripts/llama-cpp-python.sh).
const VERSION: &str = "0.3.36-nocommon";
/// The server's context (`--n_ctx`); it reports it nowhere, so the user passes it.
const N_CTX: u64 = 2048;

/// The virtualenv's interpreter, or `None` (loudly) when it is not built; a failure under
/// `CI=true`.
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("LLMSPEED_LLAMA_CPP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            scripts_cache().join(format!("llama-cpp-python-{VERSION}/venv/bin/python"))
        });
    if p.is_file() {
        return Some(p);
    }
    missing(&format!(
        "llama-cpp-python not available ({}): run scripts/llama-cpp-python.sh",
        p.display()
    ))
}

/// One server at a time (they share two cores with the client).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Server {
    child: Child,
    url: String,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Server {
    fn start() -> Option<Server> {
        let python = python()?;
        // The model alone is needed (the llama-server binary is another suite's).
        let model = match std::env::var_os("LLMSPEED_LLAMA_MODEL").map(PathBuf::from) {
            Some(m) if m.is_file() => m,
            _ => llama::paths()?.model,
        };
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new(python);
        cmd.args(["-m", "llama_cpp.server", "--model"])
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--n_ctx", &N_CTX.to_string(), "--n_threads", "1"])
            .args(["--model_alias", "tiny"]);
        let Spawned { child, port, log } = spawn_logged(
            &mut cmd,
            "llama_cpp.server",
            uvicorn_port,
            Duration::from_secs(120),
        );
        let s = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
            log,
            _turn: turn,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while s.get("/v1/models").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "llama_cpp.server never answered /v1/models:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(s)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn get(&self, path: &str) -> (u16, String) {
        real_server::raw_request(self.port, "GET", path, None)
    }

    /// An independent request (not llmspeed's client); the body parsed.
    fn post(&self, path: &str, body: &Value) -> Value {
        let (status, text) =
            real_server::raw_request(self.port, "POST", path, Some(&body.to_string()));
        assert_eq!(status, 200, "{path} {body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// The server's own count of `text` (`/extras/tokenize`, BOS included).
    fn count(&self, text: &str) -> u64 {
        let v = self.post("/extras/tokenize", &json!({"input": text}));
        v["tokens"].as_array().unwrap().len() as u64
    }
}

/// The port of uvicorn's `Uvicorn running on http://127.0.0.1:PORT (Press CTRL+C to quit)`.
fn uvicorn_port(line: &str) -> Option<u16> {
    let rest = &line[line.find("running on http://127.0.0.1:")? + 28..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn probe_verifies_the_extras_tokenize_dialect() {
    let Some(s) = Server::start() else { return };
    let o = llmspeed(
        &["probe", "--base-url", &s.url, "--json"],
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}\n{}", text(&o), s.log());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["engine"], "openai", "{v}");
    assert_eq!(v["model"], "tiny", "{v}");
    assert_eq!(v["tokenize_dialect"], "input", "{v}");
    // The verified count is the server's own count of the same text.
    let sentence = v["tokenize_verified_text"].as_str().unwrap();
    assert_eq!(v["tokenize_verified_count"], s.count(sentence), "{v}");
    // It reports no context length and no metrics: nothing is guessed.
    assert!(v["max_model_len"].is_null(), "{v}");
    assert_eq!(s.get("/metrics").0, 404);
}

#[test]
fn matrix_and_bench_serve_need_only_the_context_length() {
    let Some(s) = Server::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    matrix_is_valid(&s, &dir.path().join("matrix"));
    bench_serve_agrees_with_the_servers_usage(&s, dir.path());
}

fn matrix_is_valid(s: &Server, out: &Path) {
    let o = llmspeed(
        &[
            "matrix",
            "--base-url",
            &s.url,
            "--max-model-len",
            &N_CTX.to_string(),
            "--out",
            out.to_str().unwrap(),
            "--contexts",
            "256",
            "--prefill-contexts",
            "256",
            "--concurrency",
            "1",
            "--max-tokens",
            "64",
            "--duration",
            "3",
            "--ready-stable",
            "0",
        ],
        Duration::from_secs(240),
    );
    assert!(o.status.success(), "{}\n{}", text(&o), s.log());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let cell = &r["decode"][0];
    // Measured: a client sharing this machine's cores with the server may be marked
    // Client-bound (its figures kept, the reason in its notes).
    let kind = cell["status"]["kind"].as_str();
    assert!(
        matches!(kind, Some("valid" | "client_bound")),
        "{cell}\n{}",
        text(&o)
    );
    assert!(cell["output_tok_per_s"].as_f64().unwrap() > 0.0, "{cell}");
    for q in cell["requests"].as_array().unwrap() {
        let id = q["request_id"].as_str().unwrap();
        assert!(
            llmspeed::workload::request_id::RequestId::parse(id).is_some(),
            "{id}"
        );
    }
    // The prompts were sized by the server's /extras/tokenize: the prefill row's prompt is 256
    // tokens (±1%) by the server's own usage where it reports one, else by its tokenizer.
    let row = &r["prefill"][0];
    assert_eq!(row["status"]["kind"], "valid", "{row}\n{}", text(&o));
    let tokens = row["prompt_tokens"].as_f64().unwrap();
    assert!((tokens - 256.0).abs() <= 2.56, "{row}");
}

/// `bench serve` on a custom dataset: every request completes, and the totals are the server's
/// own `usage` for the same requests sent again without streaming.
fn bench_serve_agrees_with_the_servers_usage(s: &Server, dir: &Path) {
    let data = dir.join("prompts.jsonl");
    let prompts: Vec<String> = (0..6)
        .map(|i| {
            format!(
                "Question {i}: how fast is a server that reads {} words?",
                i * 7
            )
        })
        .collect();
    let lines: String = prompts
        .iter()
        .map(|p| format!("{}\n", json!({"prompt": p})))
        .collect();
    std::fs::write(&data, lines).unwrap();
    let o = llmspeed(
        &[
            "bench",
            "serve",
            "--base-url",
            &s.url,
            "--dataset-name",
            "custom",
            "--dataset-path",
            data.to_str().unwrap(),
            "--custom-output-len",
            "24",
            // As vLLM 0.33, bench serve sends no temperature unless asked: ask for greedy, so
            // the non-streamed requests below give the same tokens.
            "--temperature",
            "0",
            "--num-prompts",
            "6",
            // One at a time, as it serves: a request arriving mid-stream makes this server end
            // the stream in progress (its `interrupt_requests`, on by default).
            "--max-concurrency",
            "1",
            "--save-result",
            "--result-dir",
            dir.to_str().unwrap(),
            "--result-filename",
            "r.json",
        ],
        Duration::from_secs(240),
    );
    assert!(o.status.success(), "{}\n{}", text(&o), s.log());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    assert_eq!(r["completed"], 6, "{}", text(&o));
    assert_eq!(r["failed"], 0, "{}", text(&o));
    real_server::assert_not_upstream_batched(&r, "llama-cpp-python");
    // The same requests, not streamed: greedy sampling gives the same tokens.
    let (mut input, mut output) = (0u64, 0u64);
    for p in &prompts {
        let v = s.post(
            "/v1/completions",
            &json!({"model": "tiny", "prompt": p, "max_tokens": 24, "temperature": 0.0}),
        );
        input += v["usage"]["prompt_tokens"].as_u64().unwrap();
        output += v["usage"]["completion_tokens"].as_u64().unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], s.count(p), "{v}");
    }
    assert_eq!(r["total_input_tokens"], input, "{}", text(&o));
    assert_eq!(r["total_output_tokens"], output, "{}", text(&o));
}
