//! A server that refuses images (the simulated server started as a text-only model,
//! `--image-tokens none`, answers a request with an `image_url` part with its 400): the run
//! stops before it measures anything, with the server's own message shown once, and sends
//! nothing more than the requests that found the refusal (read from the server's request log).
//!
//! `bench serve --dataset-name random-mm` sends vLLM's initial test request (the first
//! sample) first; when that sample carries images, its refusal fails the run at once (no
//! retry every 5 s until the ready-check timeout: a 400 does not change on a retry). When it
//! carries none but later samples do (a range ratio lets a draw be 0 images), the initial test
//! also sends the first sample with images, so the run's first image request is not found
//! refused a thousand times over.

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::mock::image::{ImageTokens, REFUSED};
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use llmspeed::workload::datasets::{self, random_mm};
use serde_json::Value;
use support::mock::MockServer;

mod support;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// random-mm with `base` images a request (range ratio `ratio`) and `seed`.
fn flags(base: &str, ratio: &str, seed: &str) -> Vec<String> {
    [
        "--backend",
        "openai-chat",
        "--dataset-name",
        "random-mm",
        "--num-prompts",
        "40",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--random-mm-base-items-per-request",
        base,
        "--random-mm-num-mm-items-range-ratio",
        ratio,
        "--random-mm-limit-mm-per-prompt",
        r#"{"image": 3, "video": 0}"#,
        "--random-mm-bucket-config",
        "{(32, 48, 1): 1.0}",
        "--num-warmups",
        "0",
        // Long enough that retries every 5 s would show in the log.
        "--ready-check-timeout-sec",
        "30",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["--seed".to_string(), seed.to_string()])
    .collect()
}

fn config(url: &str, flags: &[String]) -> ServeConfig {
    let mut argv = vec!["x".to_string(), "--base-url".into(), url.into()];
    argv.extend_from_slice(flags);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

/// The chat requests the server received, each as the number of images it carried.
fn chat_requests(log: &std::path::Path) -> Vec<usize> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["path"] == "/v1/chat/completions")
        .map(|r| {
            r["body"]["messages"][0]["content"]
                .as_array()
                .map_or(0, |p| p.iter().filter(|p| p["type"] == "image_url").count())
        })
        .collect()
}

/// Runs `bench serve` with `flags` against a text-only simulated server; the run's error and
/// the images of each chat request the server received.
async fn against_text_only_server(flags: &[String]) -> (String, Vec<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = Some(log.clone());
    mcfg.image_tokens = ImageTokens::Refused;
    let mock = MockServer::start(mcfg).await;
    let cfg = config(&format!("http://{}", mock.addr), flags);
    let mut out = Vec::new();
    let r = run::run(&cfg, Clock::new(), &Cancel::new(), &mut out).await;
    mock.stop().await;
    let err = match r {
        Ok(o) => panic!(
            "the run must fail; it completed {} and failed {}",
            o.metrics.completed, o.metrics.failed
        ),
        Err(e) => e.to_string(),
    };
    let log_text = String::from_utf8_lossy(&out).to_string();
    assert!(
        !log_text.contains("not ready yet"),
        "a refusal is not retried as a server that is not ready: {log_text}"
    );
    (err, chat_requests(&log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_request_with_images_refused_fails_the_run_at_once() {
    let (err, sent) = against_text_only_server(&flags("2", "0", "1")).await;
    assert!(err.starts_with("Initial test run failed"), "{err}");
    assert_eq!(err.matches(REFUSED).count(), 1, "{err}");
    assert_eq!(sent, vec![2], "one request, the first sample, then nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_sample_without_images_does_not_hide_the_refusal() {
    // A seed whose first draw has no image while later ones have some (counts 0..=2).
    let seed = (0..200)
        .map(|s| s.to_string())
        .find(|s| {
            let cfg = config("http://127.0.0.1:1", &flags("1", "1.0", s));
            let samples = datasets::load(&cfg.dataset, &mut |_: &str| Ok(0)).unwrap();
            random_mm::images(&samples[0]).is_empty()
        })
        .expect("a seed whose first request has no image");
    let (err, sent) = against_text_only_server(&flags("1", "1.0", &seed)).await;
    assert!(err.contains(REFUSED), "{err}");
    assert_eq!(err.matches(REFUSED).count(), 1, "{err}");
    assert_eq!(
        sent.len(),
        2,
        "the text-only first sample, one with images: {sent:?}"
    );
    assert_eq!(sent[0], 0);
    assert!(sent[1] > 0, "{sent:?}");
}

/// `matrix --chat --images` against a text-only server: the run stops before its first
/// measurement with the server's message once; the server saw the image-token probe's two
/// requests (a short chat without images, then with) and nothing else on the chat endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_matrix_stops_at_its_image_probe_with_the_servers_message() {
    use llmspeed::matrix::images::ImageSpec;
    use llmspeed::matrix::plan::{ContextSpec, PlanConfig};
    use llmspeed::matrix::run::{HeaderFacts, MatrixConfig, PromptMode};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = Some(log.clone());
    mcfg.image_tokens = ImageTokens::Refused;
    let mock = MockServer::start(mcfg).await;
    let cfg = MatrixConfig {
        tokenizer: None,
        images: Some(ImageSpec::new(2, "64x48").unwrap()),
        plan: PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(1024)]),
            prefill_contexts: Some(vec![ContextSpec::Tokens(1024)]),
            concurrency: Some(vec![1]),
            max_tokens: 32,
            margin: 64,
            prefill_samples: 2,
        },
        duration: Duration::from_millis(500),
        model: None,
        chat: true,
        prompt_mode: PromptMode::Auto,
        seed: 0,
        ignore_eos: true,
        out_dir: dir.path().join("run"),
        resume: false,
        resume_force: false,
        retry_looped: false,
        repetition: llmspeed::analysis::repetition::RepetitionConfig {
            min_repeats: 4,
            min_span: 600,
            max_period: 512,
        },
        overrides: llmspeed::server::Overrides::default(),
        header: HeaderFacts::default(),
        ready_timeout: Duration::from_secs(10),
        ready_stable: Duration::from_millis(300),
        drain_timeout: Duration::from_secs(5),
        ready_check_timeout: Duration::ZERO,
        base_url: mock.url(),
        insecure: false,
        skip_warmup: false,
        prompt_cache: None,
    };
    let client = mock.client();
    let r = llmspeed::cli::matrix::run_async(&client, &cfg, false, &Cancel::new()).await;
    mock.stop().await;
    let err = match r {
        Ok(_) => panic!("the run must fail"),
        Err(e) => e.message,
    };
    assert_eq!(err.matches(REFUSED).count(), 1, "{err}");
    assert!(
        err.contains("refused a prompt with 2 × 64x48 images"),
        "{err}"
    );
    assert_eq!(
        chat_requests(&log),
        vec![0, 2],
        "the probe's two requests, nothing else"
    );
}
