//! The probe and `bench serve` against a small in-process server that answers as the real
//! llama.cpp `llama-server` was observed to (docs/…/servers.md, "verified behaviour"): the
//! `{"prompt": …}` tokenize dialect answers 200 `{"tokens": []}`, `{"content": …}` counts,
//! `/v1/models` carries `meta.n_vocab` (679), ids outside the vocabulary are a 400 on
//! completions and a 500 on `/detokenize`. It binds 127.0.0.1:0 only.
//!
//! Its tokenizer is a stand-in: one token per two characters of each word, plus BOS.

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, Target};
use llmspeed::server::{collect, detect, EngineKind, Overrides, TokenizeDialect};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const N_VOCAB: u64 = 679;

#[derive(Clone, Copy)]
struct Behaviour {
    /// `false`: `/detokenize` answers 404, as most OpenAI-compatible servers do.
    detokenize: bool,
    /// `true`: nothing names llama.cpp (no `/props`, no `owned_by`), as behind a proxy; the
    /// probe then tries the vLLM dialect first and meets the `{"tokens": []}` trap.
    anonymous: bool,
}

const LLAMA: Behaviour = Behaviour {
    detokenize: true,
    anonymous: false,
};

#[derive(Default)]
struct Seen {
    /// `usage.prompt_tokens` of every generation request answered.
    prompt_tokens: Vec<u64>,
    /// Generation requests refused for ids outside the vocabulary.
    invalid_tokens: usize,
}

fn count_text(text: &str, bos: bool) -> u64 {
    bos as u64
        + text
            .split_whitespace()
            .map(|w| (w.len() as u64).div_ceil(2))
            .sum::<u64>()
}

fn ids_of(text: &str, bos: bool) -> Vec<u64> {
    (0..count_text(text, bos)).map(|i| 300 + i % 300).collect()
}

/// One answer: status and JSON (or SSE) body.
fn route(method: &str, path: &str, body: &[u8], b: Behaviour, seen: &Mutex<Seen>) -> (u16, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    match (method, path) {
        ("GET", "/v1/models") if b.anonymous => (
            200,
            json!({"object":"list","data":[{"id":"tiny.gguf","object":"model","meta":{"n_vocab":N_VOCAB}}]})
                .to_string(),
        ),
        ("GET", "/v1/models") => (
            200,
            json!({"models":[{"name":"tiny.gguf","model":"tiny.gguf"}],"object":"list","data":[{"id":"tiny.gguf","object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,"n_vocab":N_VOCAB,"n_ctx_train":2048,"n_ctx":2048}}]})
                .to_string(),
        ),
        ("GET", "/props") if !b.anonymous => (
            200,
            json!({"default_generation_settings":{"n_ctx":2048},"total_slots":4,"build_info":"b11434"})
                .to_string(),
        ),
        ("POST", "/tokenize") => {
            // The real server ignores unknown keys: `{"prompt": …}` tokenizes nothing.
            let text = v.get("content").and_then(Value::as_str).unwrap_or("");
            let bos = v.get("add_special").and_then(Value::as_bool).unwrap_or(false);
            (200, json!({"tokens": ids_of(text, bos)}).to_string())
        }
        ("POST", "/detokenize") if b.detokenize => {
            let ids: Vec<u64> = v
                .get("tokens")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            if let Some(bad) = ids.iter().find(|&&i| i >= N_VOCAB) {
                return (
                    500,
                    json!({"error":{"code":500,"message":format!("vector::_M_range_check: __n (which is {bad}) >= this->size() (which is {N_VOCAB})"),"type":"server_error"}}).to_string(),
                );
            }
            let words: Vec<&str> = ids.iter().map(|_| "ab").collect();
            (200, json!({"content": words.join(" ")}).to_string())
        }
        ("POST", "/v1/completions") | ("POST", "/v1/chat/completions") => {
            let prompt_tokens = if path == "/v1/completions" {
                match v.get("prompt") {
                    Some(Value::Array(ids)) => {
                        if ids.iter().any(|i| i.as_u64().is_none_or(|i| i >= N_VOCAB)) {
                            seen.lock().unwrap().invalid_tokens += 1;
                            return (
                                400,
                                json!({"error":{"code":400,"message":"Prompt contains invalid tokens","type":"invalid_request_error"}}).to_string(),
                            );
                        }
                        ids.len() as u64
                    }
                    Some(Value::String(s)) => count_text(s, true),
                    _ => return (400, json!({"error":{"message":"no prompt"}}).to_string()),
                }
            } else {
                let msgs = v.get("messages").and_then(Value::as_array);
                // A chat template's tokens on top of the text.
                5 + msgs.map_or(0, |m| {
                    // `content` is a string or, as vLLM's client sends it, a list of text parts.
                    m.iter()
                        .filter_map(|m| m.get("content"))
                        .flat_map(|c| match c {
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|p| p.get("text").and_then(Value::as_str))
                                .collect::<Vec<_>>(),
                            c => c.as_str().into_iter().collect(),
                        })
                        .map(|t| count_text(t, false))
                        .sum()
                })
            };
            seen.lock().unwrap().prompt_tokens.push(prompt_tokens);
            let completions = path == "/v1/completions";
            let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2});
            if v.get("stream").and_then(Value::as_bool) != Some(true) {
                return (200, json!({"choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage": usage}).to_string());
            }
            let (c1, c2) = if completions {
                (
                    json!({"choices":[{"index":0,"text":"a","finish_reason":null}]}),
                    json!({"choices":[{"index":0,"text":"b","finish_reason":"length"}],"usage":usage}),
                )
            } else {
                (
                    json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}),
                    json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":usage}),
                )
            };
            (200, format!("data: {c1}\n\ndata: {c2}\n\ndata: [DONE]\n\n"))
        }
        _ => (404, json!({"error":{"code":404,"message":"File Not Found"}}).to_string()),
    }
}

async fn connection(mut s: TcpStream, b: Behaviour, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut first = head.lines().next().unwrap_or("").split(' ');
        let (method, path) = (
            first.next().unwrap_or("").to_string(),
            first.next().unwrap_or("").to_string(),
        );
        let len: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 65536];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf[head_end..head_end + len].to_vec();
        buf.drain(..head_end + len);
        let (status, out) = route(&method, &path, &body, b, &seen);
        let ctype = if out.starts_with("data:") {
            "text/event-stream"
        } else {
            "application/json"
        };
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nKeep-Alive: timeout=5\r\n\r\n{out}",
            out.len()
        );
        if s.write_all(resp.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn start(b: Behaviour) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(connection(s, b, s2.clone()));
        }
    });
    (addr, seen)
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

fn config(addr: SocketAddr, extra: &[&str]) -> ServeConfig {
    let url = format!("http://{addr}");
    let mut argv = vec![
        "x",
        "--base-url",
        &url,
        "--num-prompts",
        "16",
        "--random-input-len",
        "200",
        "--random-output-len",
        "2",
        "--num-warmups",
        "0",
    ];
    argv.extend_from_slice(extra);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_verifies_the_content_dialect_and_reads_n_vocab() {
    let (addr, _) = start(LLAMA).await;
    let client = Client::new(
        ClientConfig::new(Target::parse(&format!("http://{addr}")).unwrap()),
        Clock::new(),
    )
    .unwrap();
    let c = collect(&client, None).await.unwrap();
    let i = detect(&c, &Overrides::default());
    assert_eq!(i.engine, EngineKind::LlamaCpp);
    let t = i.tokenize.expect("a verified dialect");
    assert_eq!(t.dialect, TokenizeDialect::Content);
    assert_eq!(t.count, count_text(t.text, true));
    assert_eq!(i.vocab.map(|f| f.value), Some(N_VOCAB));
    // Token ids from inside the vocabulary were accepted.
    assert_eq!(i.token_ids, Some(true));
    let text = i.render();
    assert!(text.contains("vocabulary      679 tokens"), "{text}");
}

/// Unidentified, the server is asked the vLLM dialect first and answers `{"tokens": []}`:
/// that must be "not this dialect" (it was a working tokenizer before), and the content
/// dialect is found next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unidentified_llamacpp_is_not_trusted_on_an_empty_token_list() {
    let (addr, _) = start(Behaviour {
        anonymous: true,
        ..LLAMA
    })
    .await;
    let client = Client::new(
        ClientConfig::new(Target::parse(&format!("http://{addr}")).unwrap()),
        Clock::new(),
    )
    .unwrap();
    let c = collect(&client, None).await.unwrap();
    let i = detect(&c, &Overrides::default());
    assert_eq!(i.engine, EngineKind::OpenAi);
    assert_eq!(c.tokenize.len(), 2, "{:?}", c.tokenize);
    assert_eq!(c.tokenize[0].0, TokenizeDialect::Prompt);
    assert_eq!(
        i.tokenize.map(|t| t.dialect),
        Some(TokenizeDialect::Content)
    );
    assert_eq!(i.vocab.map(|f| f.value), Some(N_VOCAB));
}

/// Before: ids were drawn from 1000..8000 and 16 of 16 requests failed with "Prompt contains
/// invalid tokens".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_on_completions_sends_ids_inside_the_vocabulary() {
    let (addr, seen) = start(LLAMA).await;
    let cfg = config(addr, &[]);
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    assert_eq!((out.metrics.completed, out.metrics.failed), (16, 0));
    assert_eq!(out.extras["prompt_source"], "token_ids");
    assert_eq!(out.extras["prompt_token_counting"], "exact");
    let s = seen.lock().unwrap();
    assert_eq!(s.invalid_tokens, 0);
    // The 16 prompts, each exactly the 200 ids asked for (the probe's request is 8 ids).
    assert_eq!(s.prompt_tokens.iter().filter(|&&n| n == 200).count(), 16);
}

/// Before: the run was refused when `/detokenize` was missing. Now prompts are prose sized by
/// the server's `/tokenize` (content dialect), and the input lengths reported are those counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_on_chat_without_detokenize_sends_text_sized_by_tokenize() {
    let (addr, _) = start(Behaviour {
        detokenize: false,
        ..LLAMA
    })
    .await;
    let cfg = config(addr, &["--backend", "openai-chat", "--save-detailed"]);
    let mut log = Vec::new();
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut log)
        .await
        .expect("run");
    let log = String::from_utf8_lossy(&log);
    assert_eq!(
        (out.metrics.completed, out.metrics.failed),
        (16, 0),
        "{log}"
    );
    assert_eq!(out.extras["prompt_source"], "text");
    assert_eq!(out.extras["prompt_token_counting"], "server_tokenize");
    assert!(log.contains("natural text"), "{log}");
    // Every prompt within 1% of the 200 tokens asked for, by the server's own count; the
    // reported input lengths are the server's usage (the text plus its 5 template tokens).
    let asked = out.extras["dataset_input_lens"]
        .as_array()
        .expect("dataset_input_lens");
    for (&n, asked) in out.detailed.input_lens.iter().zip(asked) {
        let asked = asked.as_u64().unwrap();
        assert!((198..=200).contains(&asked), "{asked}");
        assert_eq!(n, asked + 5);
    }
}

/// With `/detokenize`, chat prompts are the ids' text, all inside the vocabulary (a 500 on an
/// out-of-range id before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_on_chat_with_detokenize_uses_it() {
    let (addr, _) = start(LLAMA).await;
    let cfg = config(addr, &["--backend", "openai-chat"]);
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    assert_eq!((out.metrics.completed, out.metrics.failed), (16, 0));
    assert_eq!(out.extras["prompt_source"], "detokenized_token_ids");
}

/// The matrix calibrates with the content dialect: before, it counted `{"prompt": …}` as 0
/// tokens, "calibrated" a 0-token prompt and cached it. Now the prefill prompt is within 1% of
/// the context by the server's own count, and the cache entry names llama.cpp's tokenizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_calibrates_with_the_content_dialect_and_caches_by_tokenizer() {
    use llmspeed::analysis::repetition::RepetitionConfig;
    use llmspeed::cli::matrix::run_async;
    use llmspeed::matrix::plan::{ContextSpec, PlanConfig};
    use llmspeed::matrix::run::{HeaderFacts, MatrixConfig, PromptMode};
    use std::time::Duration;

    let (addr, seen) = start(LLAMA).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("prompts");
    let url = format!("http://{addr}");
    let cfg = MatrixConfig {
        tokenizer: None,
        images: None,
        plan: PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(256)]),
            prefill_contexts: Some(vec![ContextSpec::Tokens(256)]),
            concurrency: Some(vec![1]),
            max_tokens: 16,
            margin: 16,
            prefill_samples: 1,
        },
        duration: Duration::from_millis(100),
        model: None,
        chat: false,
        prompt_mode: PromptMode::Auto,
        seed: 7,
        ignore_eos: true,
        out_dir: dir.path().join("run"),
        resume: false,
        resume_force: false,
        retry_looped: false,
        repetition: RepetitionConfig {
            min_repeats: 4,
            min_span: 600,
            max_period: 512,
        },
        overrides: llmspeed::server::Overrides::default(),
        header: HeaderFacts::default(),
        ready_timeout: Duration::from_secs(2),
        ready_stable: Duration::from_millis(50),
        drain_timeout: Duration::from_secs(2),
        ready_check_timeout: Duration::ZERO,
        base_url: url.clone(),
        insecure: false,
        skip_warmup: true,
        prompt_cache: Some(cache.clone()),
    };
    let client = Client::new(
        ClientConfig::new(Target::parse(&url).unwrap()),
        Clock::new(),
    )
    .unwrap();
    let r = run_async(&client, &cfg, false, &Cancel::new())
        .await
        .map_err(|e| e.message)
        .expect("matrix");
    let n = r.prefill[0].prompt_tokens.expect("a prefill prompt");
    assert!((254..=256).contains(&n), "{n}");
    // The server counted the same prompt the same way.
    assert!(
        seen.lock().unwrap().prompt_tokens.contains(&n),
        "{n} not among {:?}",
        seen.lock().unwrap().prompt_tokens
    );
    let files: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap();
    assert!(
        text.contains("tokenizer llama.cpp model=tiny.gguf vocab=679 tokenize=content\n"),
        "{}",
        &text[..200]
    );
}
