//! `--multi-turn` end to end against the simulated server on 127.0.0.1:0: every turn is sent,
//! each turn's prompt carries the conversation so far (its input grows by the earlier turns
//! and answers), and the server's prefix cache finds the earlier turns already computed.

#[path = "support/mock.rs"]
mod mock;

use clap::Parser;
use llmspeed::bench::vllm::args::ServeArgs;
use llmspeed::bench::vllm::session;
use llmspeed::clock::Clock;
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

/// Runs the multi-turn session `argv` asks for against `m`, then stops `m`: the result file,
/// the prefix-cache hit tokens the session caused, and the console output.
async fn run_session(m: MockServer, argv: &[&str]) -> (Value, u64, String) {
    let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
    let url = m.url();
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
    (v, hits, String::from_utf8(out).unwrap())
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
    let (v, hits, console) = run_session(m, &argv).await;
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
    assert!(console.contains("Multi-Turn Benchmark Result"), "{console}");
}

/// `--dataset-name sharegpt --multi-turn`: the file's human turns are the user messages and
/// the server's answers (not the file's replies) the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharegpt_conversations_send_the_human_turns_with_the_servers_answers() {
    let m = MockServer::start(MockConfig::profile(Profile::Fast)).await;
    let url = m.url();
    let dir = tempfile::tempdir().unwrap();
    // Each file reply is ~300 words: had one been sent, a turn would grow by hundreds of tokens.
    let reply = "the file's own answer ".repeat(75);
    let human = |c: usize, t: usize| format!("conversation {c} turn {t}: ").repeat(6);
    let convs: Vec<Value> = (0..2)
        .map(|c| {
            let mut msgs = vec![serde_json::json!({"from": "system", "value": "skipped"})];
            for t in 0..3 {
                msgs.push(serde_json::json!({"from": "human", "value": human(c, t)}));
                msgs.push(serde_json::json!({"from": "gpt", "value": reply}));
            }
            serde_json::json!({"id": c, "conversations": msgs})
        })
        .collect();
    let path = dir.path().join("sharegpt.json");
    std::fs::write(&path, Value::Array(convs).to_string()).unwrap();
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
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        path.to_str().unwrap(),
        "--sharegpt-output-len",
        "8",
        "--multi-turn",
        "--num-prompts",
        "2",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "mt.json",
    ];
    let (v, hits, _) = run_session(m, &argv).await;
    assert_eq!(v["mode"], "multi_turn");
    // Every turn of the file (the cap is 0: uncapped), 8 tokens asked each.
    assert_eq!(v["completed"], 6, "{v}");
    assert_eq!(v["conversations_completed"], 2);
    assert_eq!(v["total_output_tokens"], 6 * 8);
    let turns = v["per_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    let input: Vec<u64> = turns
        .iter()
        .map(|t| {
            assert_eq!(t["completed"], 2, "{t}");
            t["total_input_tokens"].as_u64().unwrap()
        })
        .collect();
    // Per conversation, turn k adds turn k-1's 8-token answer and a message as long as turn
    // 0's (the only other input): at least both, and far less than a 1,650-byte file reply.
    for k in 1..3 {
        let grew = input[k] - input[k - 1];
        assert!(
            grew >= input[0] + 2 * 8 && grew < input[0] + 2 * (8 + 32),
            "{input:?}"
        );
    }
    // The earlier turns are served again from the prefix cache (less a block at the seam).
    assert!(
        hits + 2 * 2 * 16 >= input[0] + input[1],
        "hits {hits}, inputs {input:?}"
    );
}

/// `--multi-turn-max-turns 1` leaves no ShareGPT conversation (vllm-bench refuses it too);
/// `--multi-turn-max-turns 2` caps the file's conversations at two turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharegpt_turn_cap() {
    let base = [
        "x",
        "--base-url",
        "http://127.0.0.1:1",
        "--backend",
        "openai-chat",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        "f.json",
        "--multi-turn",
    ];
    let one = [&base[..], &["--multi-turn-max-turns", "1"]].concat();
    let err = Wrap::parse_from(one).a.validate().unwrap_err();
    assert!(err.contains("at least 2 for ShareGPT"), "{err}");
    let two = [&base[..], &["--multi-turn-max-turns", "2"]].concat();
    let cfg = Wrap::parse_from(two).a.validate().expect("valid");
    assert_eq!(cfg.multi_turn.map(|m| m.max_turns), Some(2));
}

/// vllm-bench's prefix-sharing mode: each turn is sent alone (its input does not grow with the
/// conversation), and the global and per-conversation parts are served from the prefix cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_ratios_send_each_turn_alone() {
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
        "--multi-turn-prefix-global-ratio",
        "0.4",
        "--multi-turn-prefix-conversation-ratio",
        "0.4",
        "--multi-turn-concurrency",
        "1",
        "--num-prompts",
        "2",
        "--random-input-len",
        "200",
        "--random-output-len",
        "8",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "mt.json",
    ];
    let (v, hits, _) = run_session(m, &argv).await;
    assert_eq!(v["completed"], 6, "{v}");
    assert_eq!(v["prefix_global_ratio"], 0.4);
    assert_eq!(v["prefix_conversation_ratio"], 0.4);
    let unique = v["prefix_unique_ratio"].as_f64().unwrap();
    assert!((unique - 0.2).abs() < 1e-9, "{unique}");
    let input: Vec<u64> = v["per_turn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["total_input_tokens"].as_u64().unwrap())
        .collect();
    // No earlier turns or answers: every turn's two messages are about the same size.
    let (lo, hi) = (input.iter().min().unwrap(), input.iter().max().unwrap());
    assert!(hi - lo < hi / 10, "{input:?}");
    // 6 requests of ~200 tokens, 80% of each a part an earlier request sent (the first
    // conversation's first turn has none, the second's only the global 40%): most of it hit.
    let total: u64 = input.iter().sum();
    assert!(hits * 2 > total, "hits {hits}, inputs {input:?}");
}
