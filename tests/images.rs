//! `bench serve --dataset-name random-mm` end to end against the simulated server on
//! 127.0.0.1:0: every request carries the images the dataset drew for it, as `image_url` data
//! URLs after the text, read back by the server's own header reader (`mock::image`, which
//! shares no code with the client's encoder).

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::mock::image::url_size;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::Cancel;
use llmspeed::workload::datasets::{self, random_mm};
use llmspeed::workload::request_id::RequestId;
use serde_json::Value;
use support::mock::MockServer;

mod support;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

const FLAGS: &[&str] = &[
    "--backend",
    "openai-chat",
    "--dataset-name",
    "random-mm",
    "--num-prompts",
    "10",
    "--random-input-len",
    "16",
    "--random-output-len",
    "4",
    "--random-mm-base-items-per-request",
    "2",
    "--random-mm-num-mm-items-range-ratio",
    "1.0",
    "--random-mm-limit-mm-per-prompt",
    r#"{"image": 3, "video": 0}"#,
    "--random-mm-bucket-config",
    "{(32, 48, 1): 0.5, (16, 16, 1): 0.5}",
    "--max-concurrency",
    "1",
    "--seed",
    "5",
];

/// One image as the server received it: width, height and the file's bytes (its base64's
/// length less the padding).
type Received = (u32, u32, u64);

/// Each request's images as the server read them, in the order sent, for the chat requests of
/// the log by request index (its `x-request-id`).
fn images_received(log: &str) -> Vec<Vec<Received>> {
    let mut got: Vec<(u64, Vec<Received>)> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["path"] == "/v1/chat/completions" && r["request_id"].is_string())
        .map(|r| {
            let Some(RequestId::Bench { index, .. }) =
                RequestId::parse(r["request_id"].as_str().unwrap())
            else {
                panic!("not a bench request id: {}", r["request_id"]);
            };
            let parts = r["body"]["messages"][0]["content"]
                .as_array()
                .unwrap()
                .clone();
            assert_eq!(parts[0]["type"], "text", "the text part first");
            let sizes = parts[1..]
                .iter()
                .map(|p| {
                    assert_eq!(p["type"], "image_url");
                    let url = p["image_url"]["url"].as_str().unwrap();
                    let s = url_size(url).unwrap();
                    let b64 = url.split_once(',').unwrap().1;
                    let pad = b64.bytes().rev().take_while(|&c| c == b'=').count();
                    (s.width, s.height, (b64.len() / 4 * 3 - pad) as u64)
                })
                .collect();
            (index, sizes)
        })
        .collect();
    got.sort_by_key(|(i, _)| *i);
    assert!(got.iter().enumerate().all(|(n, (i, _))| n as u64 == *i));
    got.into_iter().map(|(_, s)| s).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_mm_sends_each_requests_drawn_images() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = Some(log.clone());
    let mock = MockServer::start(mcfg).await;
    let addr = mock.addr;
    let url = format!("http://{addr}");
    let mut argv = vec!["x", "--base-url", &url, "--ready-check-timeout-sec", "10"];
    argv.extend_from_slice(FLAGS);
    let cfg: ServeConfig = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    mock.stop().await;
    assert_eq!((out.metrics.completed, out.metrics.failed), (10, 0));

    // The dataset as drawn for the same flags: each request's sizes, by index.
    let samples = datasets::load(&cfg.dataset, &mut |_: &str| Ok(0)).unwrap();
    let drawn: Vec<Vec<(u32, u32)>> = samples
        .iter()
        .map(|s| {
            random_mm::images(s)
                .iter()
                .map(|i| (i.width, i.height))
                .collect()
        })
        .collect();
    let got = images_received(&std::fs::read_to_string(&log).unwrap());
    let sizes: Vec<Vec<(u32, u32)>> = got
        .iter()
        .map(|r| r.iter().map(|&(w, h, _)| (w, h)).collect())
        .collect();
    assert_eq!(sizes, drawn);
    // Our figures of them: per request in request order (vLLM's `input_lens` order), and totals.
    let x = &out.extras["images"];
    let per = |f: &dyn Fn(&Received) -> u64| -> Vec<u64> {
        got.iter().map(|r| r.iter().map(f).sum()).collect()
    };
    let counts_sent = per(&|_| 1);
    let pixels_sent = per(&|&(w, h, _)| w as u64 * h as u64);
    let bytes_sent = per(&|&(_, _, b)| b);
    assert_eq!(x["images"], serde_json::json!(counts_sent));
    assert_eq!(x["pixels"], serde_json::json!(pixels_sent));
    assert_eq!(x["encoded_bytes"], serde_json::json!(bytes_sent));
    assert_eq!(x["total_images"], counts_sent.iter().sum::<u64>());
    assert_eq!(x["total_pixels"], pixels_sent.iter().sum::<u64>());
    assert_eq!(x["total_encoded_bytes"], bytes_sent.iter().sum::<u64>());
    // The range 0..=3 (4 capped by the limit) is drawn from: counts differ, none above 3.
    let counts: Vec<usize> = got.iter().map(Vec::len).collect();
    assert!(counts.iter().any(|&c| c != counts[0]), "{counts:?}");
    assert!(counts.iter().all(|&c| c <= 3), "{counts:?}");
    assert!(sizes
        .iter()
        .flatten()
        .all(|s| [(48, 32), (16, 16)].contains(s)));
}

/// One HTTP/1.1 request on a fresh connection: the status and the JSON body of the answer.
fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let (_, json) = raw.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

fn image_part(w: u32, h: u32, shade: u8) -> Value {
    let rgb = vec![shade; (w * h * 3) as usize];
    let img = llmspeed::workload::image::Image::jpeg(w, h, &rgb).unwrap();
    serde_json::json!({"type": "image_url", "image_url": {"url": &*img.url}})
}

/// The simulated server counts an image part as its rule says, on chat completions and on
/// `/tokenize` alike: `usage.prompt_tokens` = the text's tokens + each image's, worked by hand
/// for a patch rule of 28 (1280 x 720: 46 x 26 patches; 100 x 30: 4 x 2); it writes them to
/// the trace, and refuses an http URL saying it fetches none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_counts_image_tokens_by_its_rule() {
    use llmspeed::mock::image::ImageTokens;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.image_tokens = ImageTokens::Patches(28);
    mcfg.trace = Some(trace.clone());
    let mock = MockServer::start(mcfg).await;
    let addr = mock.addr;
    let text = json!({"type": "text", "text": "describe these"});
    let messages = |parts: Vec<Value>| json!([{"role": "user", "content": parts}]);
    let with_images = messages(vec![
        text.clone(),
        image_part(1280, 720, 7),
        image_part(100, 30, 200),
    ]);
    let answers = tokio::task::spawn_blocking(move || {
        let tok = |m: &Value| {
            post(
                addr,
                "/tokenize",
                &json!({"model": "mock-model", "messages": m}),
            )
        };
        let (s0, plain) = tok(&messages(vec![text.clone()]));
        let (s1, both) = tok(&with_images);
        let chat = |m: &Value, stream: bool| {
            post(
                addr,
                "/v1/chat/completions",
                &json!({"model": "mock-model", "messages": m, "max_completion_tokens": 3,
                        "stream": stream, "stream_options": {"include_usage": true}}),
            )
        };
        let (s2, answer) = chat(&with_images, false);
        // Streamed, so the trace has its lines.
        let (s3, _) = chat(&with_images, true);
        let http = messages(vec![json!({"type": "image_url",
                                        "image_url": {"url": "http://127.0.0.1:9/cat.jpg"}})]);
        let (s4, refused) = chat(&http, false);
        (s0, plain, s1, both, s2, answer, s3, s4, refused)
    })
    .await
    .unwrap();
    let (s0, plain, s1, both, s2, answer, s3, s4, refused) = answers;
    assert_eq!((s0, s1, s2, s3, s4), (200, 200, 200, 200, 400));
    let text_tokens = plain["count"].as_u64().unwrap();
    let image_tokens = 46 * 26 + 4 * 2;
    assert_eq!(both["count"].as_u64().unwrap(), text_tokens + image_tokens);
    assert_eq!(
        answer["usage"]["prompt_tokens"].as_u64().unwrap(),
        text_tokens + image_tokens
    );
    let msg = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("fetches no image URLs"), "{refused}");
    mock.stop().await;
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(
            (l["images"].as_u64(), l["image_tokens"].as_u64()),
            (Some(2), Some(image_tokens))
        );
    }
}
