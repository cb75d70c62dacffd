//! Servers that are OpenAI-compatible in their own way, simulated on 127.0.0.1:0:
//! - one that validates `x-request-id` as a UUID and answers 400 with an empty body otherwise
//!   (llama-cpp-python's server): `matrix`, `bench serve` and `--multi-turn` work with their
//!   default ids, and `--request-id-prefix` keeps the user's own form;
//! - one still loading its model (503 `Loading model` from everything but `/v1/models`, as
//!   llama.cpp's server): the matrix waits for it and still counts prompts with `/tokenize`.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::analysis::repetition::RepetitionConfig;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::{run, session};
use llmspeed::cli::matrix::run_async;
use llmspeed::clock::Clock;
use llmspeed::matrix::plan::{ContextSpec, PlanConfig};
use llmspeed::matrix::run::{HeaderFacts, MatrixConfig, PromptMode};
use llmspeed::matrix::status::CellStatus;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use llmspeed::report::MatrixReport;
use llmspeed::server::Overrides;
use llmspeed::workload::request_id::RequestId;
use mock::MockServer;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Fast decode steps (2 ms), so a window holds many requests.
fn mock_config(tweak: impl FnOnce(&mut MockConfig)) -> MockConfig {
    let mut m = MockConfig::profile(Profile::Fast);
    m.max_model_len = 4096;
    m.engine.decode.base_us = 2000.0;
    tweak(&mut m);
    m
}

fn matrix_config(out: &Path, base_url: &str) -> MatrixConfig {
    MatrixConfig {
        tokenizer: None,
        images: None,
        plan: PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(512)]),
            prefill_contexts: Some(vec![ContextSpec::Tokens(512)]),
            concurrency: Some(vec![1, 2]),
            max_tokens: 16,
            margin: 64,
            prefill_samples: 1,
        },
        duration: Duration::from_millis(1000),
        model: None,
        chat: false,
        prompt_mode: PromptMode::Auto,
        seed: 5,
        ignore_eos: true,
        out_dir: out.to_path_buf(),
        resume: false,
        resume_force: false,
        retry_looped: false,
        repetition: RepetitionConfig {
            min_repeats: 4,
            min_span: 600,
            max_period: 512,
        },
        overrides: Overrides::default(),
        header: HeaderFacts::default(),
        ready_timeout: Duration::from_secs(20),
        ready_stable: Duration::ZERO,
        drain_timeout: Duration::from_secs(10),
        ready_check_timeout: Duration::ZERO,
        base_url: base_url.into(),
        insecure: false,
        skip_warmup: false,
        prompt_cache: None,
    }
}

async fn run_matrix(
    m: &MockServer,
    out: &Path,
    tweak: impl FnOnce(&mut MatrixConfig),
) -> MatrixReport {
    let mut cfg = matrix_config(out, &m.url());
    tweak(&mut cfg);
    run_async(&m.client(), &cfg, false, &Cancel::new())
        .await
        .map_err(|e| e.message)
        .expect("matrix run")
}

/// Every decode cell Valid, and every request's id one of ours naming that cell and stream.
fn assert_valid_with_our_ids(r: &MatrixReport) {
    assert!(!r.decode.is_empty());
    for cell in &r.decode {
        let what = format!("{} x {}", cell.context, cell.concurrency);
        // Measured, whether or not the client kept up: on a loaded machine the debug-built
        // client may fall behind the mock, which Client-bound says (its rule is tested in
        // `analysis::client_lag` and tests/selftest_bounds.rs); the ids are what this checks.
        assert!(
            matches!(cell.status, CellStatus::Valid | CellStatus::ClientBound),
            "{what}: {:?}",
            cell.status
        );
        assert!(!cell.requests.is_empty(), "{what}");
        for q in &cell.requests {
            let id = q.request_id.as_deref().expect("every request has an id");
            let Some(RequestId::Matrix {
                context,
                concurrency,
                stream,
                ..
            }) = RequestId::parse(id)
            else {
                panic!("{what}: {id} is not one of our matrix ids")
            };
            assert_eq!(
                (context, concurrency as u64, stream),
                (cell.context, cell.concurrency, q.stream),
                "{what}: {id}"
            );
            assert_eq!(q.error, None, "{what}: {id}");
        }
    }
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

fn serve_config(url: &str, extra: &[&str]) -> ServeConfig {
    let mut argv = vec![
        "x",
        "--base-url",
        url,
        "--ready-check-timeout-sec",
        "10",
        "--dataset-name",
        "random",
        "--num-prompts",
        "6",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--max-concurrency",
        "2",
    ];
    argv.extend_from_slice(extra);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_works_where_the_request_id_must_be_a_uuid() {
    let m = MockServer::start(mock_config(|c| c.uuid_request_ids = true)).await;
    let dir = tempfile::tempdir().unwrap();
    let r = run_matrix(&m, dir.path(), |_| {}).await;
    m.stop().await;
    assert_valid_with_our_ids(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_serve_works_where_the_request_id_must_be_a_uuid() {
    let m = MockServer::start(mock_config(|c| c.uuid_request_ids = true)).await;
    let cfg = serve_config(&m.url(), &[]);
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    assert_eq!((out.metrics.completed, out.metrics.failed), (6, 0));

    // The user's own form is kept, and this server refuses it.
    let cfg = serve_config(&m.url(), &["--request-id-prefix", "mine-"]);
    let mut log = Vec::new();
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut log)
        .await
        .expect("run");
    m.stop().await;
    assert_eq!((out.metrics.completed, out.metrics.failed), (0, 6));
    // The empty 400 was checked: the message names the header, the id sent and the flag.
    let first = &out.extras["first_failure_by_kind"]["http_status"];
    assert_eq!(first["status"], 400, "{first}");
    let msg = first["message"].as_str().unwrap();
    for want in [
        "(empty body)",
        "x-request-id",
        "\"mine-0\"",
        "--request-id-prefix",
    ] {
        assert!(msg.contains(want), "{want} missing from: {msg}");
    }
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("the first request was refused"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_works_where_the_request_id_must_be_a_uuid() {
    let m = MockServer::start(mock_config(|c| c.uuid_request_ids = true)).await;
    let dir = tempfile::tempdir().unwrap();
    let url = m.url();
    let argv = [
        "x",
        "--base-url",
        &url,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--multi-turn",
        "--multi-turn-num-turns",
        "2",
        "--num-prompts",
        "2",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "mt.json",
    ];
    let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let files = session::execute(
        &cfg,
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut |_: &str| {},
    )
    .await
    .expect("session");
    m.stop().await;
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(v["completed"], 4, "{v}");
    assert_eq!(v["conversations_failed"], 0, "{v}");
}

/// llama.cpp right after start: `/v1/models` answers, `/tokenize` and the rest answer `503
/// Loading model` (here for the first 12 such requests, about three probes' worth). The
/// matrix waits, then counts its prompts with `/tokenize` as on a ready server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_waits_for_a_loading_server_and_keeps_its_tokenizer() {
    let m = MockServer::start(mock_config(|c| c.loading_requests = 12)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = matrix_config(dir.path(), &m.url());
    cfg.plan.concurrency = Some(vec![1]);
    cfg.ready_check_timeout = Duration::from_secs(60);
    let mut heard = Vec::new();
    let prepared =
        llmspeed::matrix::run::plan_run(&m.client(), &cfg, &mut |w| heard.push(w.to_string()))
            .await
            .expect("the probe waits, then succeeds");
    let t = prepared
        .info
        .tokenize
        .expect("the dialect is verified once loaded");
    assert_eq!(t.dialect.path(), "/tokenize");
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        heard[0].contains("503") && heard[0].contains("Loading model"),
        "{heard:?}"
    );
    let r = run_async(&m.client(), &cfg, false, &Cancel::new())
        .await
        .map_err(|e| e.message)
        .expect("matrix run");
    m.stop().await;
    assert_valid_with_our_ids(&r);
}

/// Without time to wait, a loading server is an error that says so: never "no /tokenize".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loading_server_is_not_ready_rather_than_without_tokenize() {
    let m = MockServer::start(mock_config(|c| c.loading_requests = 1000)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = matrix_config(dir.path(), &m.url());
    let e = match llmspeed::matrix::run::plan_run(&m.client(), &cfg, &mut |_| {}).await {
        Ok(p) => panic!("planned against a loading server: {}", p.info.render()),
        Err(e) => e,
    };
    m.stop().await;
    assert!(e.contains("not ready"), "{e}");
    assert!(e.contains("503") && e.contains("Loading model"), "{e}");
    assert!(e.contains("--ready-check-timeout-sec"), "{e}");
}
