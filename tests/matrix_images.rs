//! `matrix --chat --images N --image-size WxH` against the in-process simulated server
//! (`127.0.0.1:0`, images counted by Qwen2-VL's rule): read back from the server's own request
//! log and trace, independently of the matrix's account of them.
//!
//! - every prefill sample carries N images of W x H, each new (no image's bytes are sent by any
//!   other request): cold; every decode request of a context row carries the same N (warm),
//!   none of them a prefill sample's;
//! - the context is the whole prompt: each sample's `usage.prompt_tokens` is the server's
//!   count of its text alone (its `/tokenize` of the request's messages with the images taken
//!   out) plus N times the rule's count for W x H, within 1% under the context; the report's
//!   image tokens are that product; the trace says N images and those tokens for every request
//!   that carried images;
//! - the report shows it (results.json against its schema, report.md, results.csv);
//! - `--images` without `--chat` is refused by name.

#[path = "support/mock.rs"]
mod mock_server;

use clap::Parser;
use llmspeed::analysis::repetition::RepetitionConfig;
use llmspeed::cli::matrix::run_async;
use llmspeed::cli::{Cli, Command};
use llmspeed::matrix::images::ImageSpec;
use llmspeed::matrix::plan::{ContextSpec, PlanConfig};
use llmspeed::matrix::run::{HeaderFacts, MatrixConfig, PromptMode};
use llmspeed::mock::image::{url_size, ImageTokens};
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use llmspeed::server::Overrides;
use llmspeed::workload::request_id::RequestId;
use mock_server::MockServer;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

const CONTEXT: u64 = 2048;
const SAMPLES: u32 = 3;
const RULE: ImageTokens = ImageTokens::Qwen2Vl;

fn matrix_config(out: &Path, base_url: &str, images: ImageSpec) -> MatrixConfig {
    MatrixConfig {
        tokenizer: None,
        images: Some(images),
        plan: PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(CONTEXT)]),
            prefill_contexts: Some(vec![ContextSpec::Tokens(CONTEXT)]),
            concurrency: Some(vec![1, 2]),
            max_tokens: 64,
            margin: 64,
            prefill_samples: SAMPLES,
        },
        duration: Duration::from_millis(800),
        model: None,
        chat: true,
        prompt_mode: PromptMode::Auto,
        seed: 3,
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
        ready_stable: Duration::from_millis(300),
        drain_timeout: Duration::from_secs(10),
        ready_check_timeout: Duration::ZERO,
        base_url: base_url.into(),
        insecure: false,
        skip_warmup: false,
        prompt_cache: None,
    }
}

/// The images of a logged chat request's last user message: (width, height, data URL).
fn images_of(body: &Value) -> Vec<(u32, u32, String)> {
    let Some(parts) = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_array())
    else {
        return Vec::new();
    };
    parts
        .iter()
        .filter(|p| p["type"] == "image_url")
        .map(|p| {
            let url = p["image_url"]["url"].as_str().unwrap().to_string();
            let s = url_size(&url).unwrap();
            (s.width, s.height, url)
        })
        .collect()
}

/// The messages with every image part taken out: the text the server counts alone.
fn text_only(messages: &Value) -> Value {
    let mut m = messages.clone();
    for msg in m.as_array_mut().unwrap() {
        if let Some(parts) = msg["content"].as_array() {
            let parts: Vec<Value> = parts
                .iter()
                .filter(|p| p["type"] != "image_url")
                .cloned()
                .collect();
            msg["content"] = Value::Array(parts);
        }
    }
    m
}

#[test]
fn cold_prefill_images_are_new_warm_decode_images_the_same_and_counted_in_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let log = dir.path().join("requests.jsonl");
    let trace = dir.path().join("trace.jsonl");
    // Small images: the request log writes each body whole (debug builds parse it), and every
    // decode request carries them.
    let spec = ImageSpec::new(2, "160x120").unwrap();
    let per_image = RULE.count(160, 120);
    let mut mock = MockConfig::profile(Profile::Fast);
    mock.max_model_len = 8192;
    mock.image_tokens = RULE;
    mock.request_log = Some(log.clone());
    mock.trace = Some(trace.clone());
    let rt = mock_server::runtime();
    let (report, text_counts) = rt.block_on(async {
        let server = MockServer::start(mock).await;
        let (url, client) = (server.url(), server.client());
        let cfg = matrix_config(&out, &url, spec);
        let report = run_async(&client, &cfg, false, &Cancel::new()).await;
        let report = report.map_err(|e| e.message).expect("the run");
        // The server's count of each chat request's text alone, by its messages without images
        // (the decode requests share theirs: each distinct text is counted once).
        let mut text_counts = HashMap::new();
        for line in std::fs::read_to_string(&log).unwrap().lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            if r["path"] != "/v1/chat/completions" {
                continue;
            }
            let text = text_only(&r["body"]["messages"]).to_string();
            if text_counts.contains_key(&text) {
                continue;
            }
            let body = format!(r#"{{"model":{},"messages":{text}}}"#, r["body"]["model"]);
            let a = client
                .post_json("/tokenize", body.as_bytes())
                .await
                .unwrap();
            assert!(a.is_success());
            let v: Value = serde_json::from_slice(&a.body).unwrap();
            text_counts.insert(text, v["count"].as_u64().unwrap());
        }
        drop(client);
        server.stop().await;
        (report, text_counts)
    });

    let requests: Vec<(String, Value)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| (l.to_string(), serde_json::from_str(l).unwrap()))
        .filter(|(_, r): &(String, Value)| r["path"] == "/v1/chat/completions")
        .collect();
    // Prefill samples carry vLLM's cache_salt; decode requests the matrix's request ids.
    let prefill: Vec<&(String, Value)> = requests
        .iter()
        .filter(|(_, r)| r["body"]["cache_salt"].is_string())
        .collect();
    let decode: Vec<&(String, Value)> = requests
        .iter()
        .filter(|(_, r)| {
            r["request_id"]
                .as_str()
                .and_then(RequestId::parse)
                .is_some_and(|id| matches!(id, RequestId::Matrix { .. }))
        })
        .collect();
    assert_eq!(prefill.len(), SAMPLES as usize);
    assert!(decode.len() >= 3, "{} decode requests", decode.len());

    // Cold: each sample's two images are 160 x 120 and sent by no other request.
    let mut seen_in: HashMap<String, usize> = HashMap::new();
    for (_, r) in &requests {
        for (_, _, url) in images_of(&r["body"]) {
            *seen_in.entry(url).or_default() += 1;
        }
    }
    let mut cold = HashSet::new();
    for (_, r) in &prefill {
        let imgs = images_of(&r["body"]);
        assert_eq!(imgs.len(), 2);
        for (w, h, url) in imgs {
            assert_eq!((w, h), (160, 120));
            assert_eq!(seen_in[&url], 1, "a prefill sample's image was sent again");
            cold.insert(url);
        }
    }
    assert_eq!(cold.len(), 2 * SAMPLES as usize);
    // Warm: every decode request carries the same two, none of them cold.
    let warm = images_of(&decode[0].1["body"]);
    assert_eq!(warm.len(), 2);
    assert_ne!(warm[0].2, warm[1].2);
    for (_, r) in &decode {
        assert_eq!(images_of(&r["body"]), warm);
    }
    assert!(warm.iter().all(|(_, _, u)| !cold.contains(u)));

    // The accounting: usage = the text's count + the rule's, within 1% under the context.
    let images = report
        .metadata
        .settings
        .images
        .expect("images in the settings");
    assert_eq!(
        (images.per_prompt, images.width, images.height),
        (2, 160, 120)
    );
    assert_eq!(images.image_tokens_per_prompt, Some(2 * per_image));
    let row = &report.prefill[0];
    assert_eq!(row.image_tokens, Some(2 * per_image));
    let server = row.server_prompt_tokens.expect("usage on the samples");
    assert_eq!(row.prompt_tokens, Some(server));
    assert!(
        server <= CONTEXT && (CONTEXT - server) * 100 <= CONTEXT,
        "{server}"
    );
    let text_of = |r: &Value| text_counts[&text_only(&r["body"]["messages"]).to_string()];
    for (_, r) in &prefill {
        assert_eq!(text_of(r) + 2 * per_image, server);
    }
    for cell in &report.decode {
        let measured = cell
            .server_prompt_tokens
            .expect("usage on the cell's requests");
        assert_eq!(measured, text_of(&decode[0].1) + 2 * per_image);
    }

    // The trace: every request with images had two, and the rule's tokens for them.
    let traced: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l.get("images").is_some())
        .collect();
    let arrivals: HashSet<u64> = traced
        .iter()
        .map(|l| l["arrival_ns"].as_u64().unwrap())
        .collect();
    assert!(arrivals.len() >= prefill.len() + decode.len());
    for l in &traced {
        assert_eq!(
            (l["images"].as_u64(), l["image_tokens"].as_u64()),
            (Some(2), Some(2 * per_image))
        );
    }

    // The report files say it.
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/results.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Images"), "{md}");
    assert!(md.contains("2 × 160x120 JPEG per prompt"), "{md}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("2 × 160x120 JPEG per prompt"));
    let measured = report.decode[0].server_prompt_tokens.unwrap();
    // Grouped as the page prints counts (the context is 2,048: four digits).
    let grouped = format!("{},{:03}", measured / 1000, measured % 1000);
    let row =
        format!("<tr><td>Prompt tokens (server usage)</td><td class=\"num\">{grouped}</td></tr>");
    assert!(html.contains(&row), "{row}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    // The image columns are the last five (nothing in them is quoted; earlier fields may be).
    let tail = |line: &str| -> Vec<String> {
        let mut t: Vec<String> = line.rsplitn(6, ',').take(5).map(String::from).collect();
        t.reverse();
        t
    };
    let mut rows = csv.lines();
    assert_eq!(
        tail(rows.next().unwrap()),
        [
            "images_per_prompt",
            "image_width",
            "image_height",
            "image_tokens",
            "server_prompt_tokens"
        ]
    );
    let (i, s) = ((2 * per_image).to_string(), server.to_string());
    assert_eq!(tail(rows.next().unwrap()), ["2", "160", "120", &i, &s]);
    for (line, cell) in rows.zip(&report.decode) {
        let m = cell.server_prompt_tokens.unwrap().to_string();
        assert_eq!(tail(line), ["2", "160", "120", &i, &m]);
    }
}

#[test]
fn images_need_the_chat_endpoint() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["llmspeed", "matrix", "--base-url", "http://127.0.0.1:9"];
        argv.extend_from_slice(extra);
        let Command::Matrix(a) = Cli::try_parse_from(&argv).unwrap().command else {
            panic!("not matrix")
        };
        llmspeed::cli::matrix::config(&a, "http://127.0.0.1:9")
    };
    let e = parse(&["--images", "2"]).unwrap_err().to_string();
    assert!(e.contains("--images needs --chat"), "{e}");
    let e = parse(&["--chat", "--images", "2", "--image-size", "1280"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("1280x720"), "{e}");
    let c = parse(&["--chat", "--images", "4", "--image-size", "1280x720"]).unwrap();
    assert_eq!(c.images, Some(ImageSpec::new(4, "1280x720").unwrap()));
    assert!(parse(&["--chat"]).unwrap().images.is_none());
}
