//! `--multi-turn` end to end against the simulated server on 127.0.0.1:0: every turn is sent,
//! each turn's prompt carries the conversation so far (its input grows by the earlier turns
//! and answers), and the server's prefix cache finds the earlier turns already computed.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::clock::Clock;
use llmspeed::compat::args::ServeArgs;
use llmspeed::compat::session;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::{Cancel, Client, ClientConfig, Target};
use mock::MockServer;
use serde_json::Value;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

async fn prefix_hits(url: &str) -> u64 {
    let c = Client::new(ClientConfig::new(Target::parse(url).unwrap()), Clock::new()).unwrap();
    let r = c.get("/metrics").await.unwrap();
    String::from_utf8(r.body.to_vec())
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("vllm:prefix_cache_hits_total"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_carry_the_conversation_and_hit_the_prefix_cache() {
    let m = MockServer::start(MockConfig::profile(Profile::Fast)).await;
    let url = m.url();
    let dir = tempfile::tempdir().unwrap();
    let argv = [
        "x",
        "--base-url",
        &url,
        "--ready-check-timeout-sec",
        "10",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--multi-turn",
        "--multi-turn-num-turns",
        "3",
        "--multi-turn-concurrency",
        "2",
        "--multi-turn-delay-ms",
        "20",
        "--num-prompts",
        "4",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--random-prefix-len",
        "64",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "mt.json",
    ];
    let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let before = prefix_hits(&url).await;
    let mut out = Vec::new();
    let files = session::execute(
        &cfg,
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
        &mut out,
        &mut |_: &str| {},
    )
    .await
    .expect("session");
    let hits = prefix_hits(&url).await - before;
    m.stop().await;
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(v["mode"], "multi_turn");
    assert_eq!(v["completed"], 12, "{v}");
    assert_eq!(v["conversations_completed"], 4);
    assert_eq!(v["conversations_failed"], 0);
    assert_eq!(v["avg_turns_completed"], 3.0);
    assert_eq!(v["total_output_tokens"], 12 * 8);
    let turns = v["per_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    let input: Vec<u64> = turns
        .iter()
        .map(|t| {
            assert_eq!(t["completed"], 4, "{t}");
            t["total_input_tokens"].as_u64().unwrap()
        })
        .collect();
    // Turn k's prompt holds turn k-1's prompt, its 8-token answer and a new ~32-token
    // message: each turn's input exceeds the one before by more than the answers.
    assert!(input[1] > input[0] + 4 * (8 + 16), "{input:?}");
    assert!(input[2] > input[1] + 4 * (8 + 16), "{input:?}");
    // The earlier turns are a prefix of the later ones: the prefix cache serves at least the
    // whole of turns 0 and 1 again, less a 16-token block per request at the seam.
    assert!(
        hits + 2 * 4 * 16 >= input[0] + input[1],
        "hits {hits}, inputs {input:?}"
    );
    let console = String::from_utf8(out).unwrap();
    assert!(console.contains("Multi-Turn Benchmark Result"), "{console}");
}
