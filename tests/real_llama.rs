//! llmspeed against a real llama.cpp `llama-server` (built by `scripts/llama-server.sh`, a tiny
//! random-weight model, 127.0.0.1:0): every figure checked against the server's own counts.
//!
//! The binary is driven as a user drives it; the server is asked independently (its own
//! `/tokenize`, `/metrics`, `/props`) through a separate minimal HTTP client in `server.rs`.

#[path = "support/real_server.rs"]
mod real_server;
#[path = "real_llama/server.rs"]
mod server;

use real_server::{
    assert_client_kept_up, assert_server_ran, bench_result, bench_serve, cell, check_bench_counts,
    llmspeed, stream_summary, text,
};
use serde_json::Value;
use server::LlamaServer;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// llama.cpp's tiny model: `-c 8192 -np 4` gives 2048 tokens per slot.
const SLOTS: u64 = 4;
const CTX: u64 = 8192;
const PER_SLOT: u64 = CTX / SLOTS;

/// `stream` of `prompt` on the tiny model, at most `max_tokens` tokens, with `extra`.
fn stream(s: &LlamaServer, prompt: &str, max_tokens: &str, extra: &[&str]) -> Output {
    real_server::stream(
        &s.url,
        "tiny",
        prompt,
        max_tokens,
        extra,
        Duration::from_secs(60),
    )
}

#[test]
fn stream_completions_and_chat_count_tokens_from_usage() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    for chat in [false, true] {
        let mut args = vec!["--ignore-eos", "--json"];
        if chat {
            args.push("--chat");
        }
        let o = stream(&s, "The speed of the server is", "48", &args);
        let summary = stream_summary(&o, &format!("chat={chat}"));
        // The server generated exactly 48 tokens (ignore_eos); the client must say so even
        // though a random model emits byte pieces that are not valid UTF-8 on their own (fewer
        // content chunks than tokens).
        assert_eq!(summary["output_tokens"], 48, "chat={chat}: {summary}");
        assert_eq!(
            summary["usage"]["completion_tokens"], 48,
            "chat={chat}: {summary}"
        );
        assert_eq!(summary["finish_reason"], "length", "chat={chat}: {summary}");
        assert!(summary["error"].is_null(), "chat={chat}: {summary}");
        let prompt_tokens = summary["usage"]["prompt_tokens"].as_u64().unwrap();
        if !chat {
            // The server's own count of the same text (with BOS).
            assert_eq!(
                prompt_tokens as usize,
                s.count("The speed of the server is"),
                "{summary}"
            );
        }
        assert!(
            summary["events"].as_u64().unwrap() >= 1,
            "chat={chat}: {summary}"
        );
    }
}

#[test]
fn stream_prompt_over_the_context_fails_with_the_server_message() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    // 2,500 words, each one token of the tiny vocabulary: past the 2,048 of a slot.
    let long_prompt = "river ".repeat(2500);
    assert!(s.count(&long_prompt) > PER_SLOT as usize);
    let o = stream(&s, &long_prompt, "8", &[]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("400"), "{}", text(&o));
    assert!(
        err.contains("exceeds the available context size"),
        "the server's own message must reach the user: {}",
        text(&o)
    );
}

#[test]
fn probe_reads_slots_context_vocabulary_and_tokenize_dialect() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let v = real_server::probe(&s.url, Duration::from_secs(60));
    // Independent truth: the server's /props.
    let (_, props) = s.get("/props");
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(props["total_slots"], SLOTS);
    assert_eq!(props["default_generation_settings"]["n_ctx"], PER_SLOT);
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    let n_vocab = models["data"][0]["meta"]["n_vocab"].as_u64().unwrap();
    assert!(n_vocab > 1000, "{models}");
    assert_eq!(v["engine"], "llama.cpp", "{v}");
    assert_eq!(v["max_model_len"], PER_SLOT, "{v}");
    assert_eq!(v["max_running_requests"], SLOTS, "{v}");
    assert_eq!(v["kv_cache_tokens"], CTX, "{v}");
    assert_eq!(v["vocab_size"], n_vocab, "{v}");
    assert_eq!(v["tokenize_dialect"], "content", "{v}");
    assert_eq!(v["token_id_prompts"], true, "{v}");
}

/// `matrix` on contexts × concurrency (prefill rows for the same contexts) with short windows.
fn matrix(
    s: &LlamaServer,
    out: &Path,
    contexts: &str,
    concurrency: &str,
    extra: &[&str],
) -> (Output, Value) {
    let mut args = vec![
        "--contexts",
        contexts,
        "--prefill-contexts",
        contexts,
        "--concurrency",
        concurrency,
        "--max-tokens",
        "512",
    ];
    args.extend_from_slice(extra);
    real_server::matrix(&s.url, out, &args, Duration::from_secs(400))
}

#[test]
fn matrix_on_llama_cpp_is_valid_where_it_fits_and_over_capacity_by_slots() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let before = s.metric("llamacpp:tokens_predicted_total").unwrap_or(0.0);
    // Packet stamps (CI runs as root): the client shares this machine's 2 cores with
    // llama-server, and every token still has its own arrival time.
    let (o, r) = matrix(&s, dir.path(), "256,1k", "1,2,4,8", &["--packet-stamps"]);
    assert!(o.status.success(), "{}", text(&o));
    for ctx in [256, 1024] {
        for c in [1, 2, 4] {
            let cell = cell(&r, ctx, c);
            assert_client_kept_up(cell, &format!("{ctx} x {c}"), &o);
            let tps = cell["output_tok_per_s"].as_f64().unwrap();
            assert!(tps > 0.0, "{cell}");
            assert_server_ran(cell, c, &format!("{ctx} x {c}"));
        }
        // Eight streams on four slots: known before running.
        let c8 = cell(&r, ctx, 8);
        assert_eq!(c8["status"]["kind"], "over_capacity", "{c8}");
    }
    // Prefill rows: the prompt the server counted is the context asked for (±1%).
    for row in r["prefill"].as_array().unwrap() {
        let ctx = row["context"].as_f64().unwrap();
        assert_eq!(row["status"]["kind"], "valid", "{row}\n{}", text(&o));
        let counted = row["server_prompt_tokens"]
            .as_f64()
            .unwrap_or_else(|| panic!("{row}"));
        assert!((counted - ctx).abs() <= ctx * 0.01, "{row}");
        assert!(row["prefill_tok_per_s"].as_f64().unwrap() > 0.0, "{row}");
    }
    // The server's own count over the window (tokens_predicted_total, which grows when a
    // request ends, plus the busy slots' live n_decoded from /slots) agrees with ours within 1%.
    for c in r["decode"].as_array().unwrap() {
        if c["status"]["kind"] == "valid" {
            let server = c["server_output_tokens"].as_i64();
            let diff = c["token_count_diff"].as_i64();
            let out = c["output_tokens"].as_i64().unwrap();
            assert!(server.is_some() && diff.is_some(), "no server count: {c}");
            // The difference is over the span of the server's two reads (a few ms more than
            // the window), so it is ours over that span minus the server's.
            assert!(diff.unwrap().abs() * 100 <= server.unwrap(), "{c}");
            assert!((server.unwrap() - out).abs() * 10 <= out, "{c}");
            assert!(c["token_count_check"].is_null(), "{c}");
        }
    }
    let after = s.metric("llamacpp:tokens_predicted_total").unwrap_or(0.0);
    assert!(after > before, "the server generated nothing?");
}

/// The tiny model's small vocabulary spells the full prompt framing in ~350 tokens: small
/// contexts build with a smaller framing, and the server counts the size asked for.
#[test]
fn matrix_small_contexts_build_on_the_tiny_vocabulary() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (o, r) = matrix(&s, dir.path(), "128,256", "1", &[]);
    assert!(o.status.success(), "{}", text(&o));
    for ctx in [128u64, 256] {
        let c = cell(&r, ctx, 1);
        let kind = c["status"]["kind"].as_str();
        assert!(
            matches!(kind, Some("valid" | "client_bound")),
            "{ctx}: {c}\n{}",
            text(&o)
        );
        let row = r["prefill"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["context"] == ctx)
            .unwrap();
        assert_eq!(row["status"]["kind"], "valid", "{row}\n{}", text(&o));
        let counted = row["server_prompt_tokens"].as_f64().unwrap();
        assert!((counted - ctx as f64).abs() <= ctx as f64 * 0.01, "{row}");
    }
}

#[test]
fn matrix_prefill_rows_are_cold_on_llama_cpp() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (o, r) = matrix(&s, dir.path(), "256,1k", "1", &["--prefill-samples", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let rows = r["prefill"].as_array().unwrap();
    let ttft = |ctx: u64| {
        rows.iter().find(|r| r["context"] == ctx).unwrap()["ttft_ms"]
            .as_f64()
            .unwrap()
    };
    // A cold 1K prefill takes longer than a cold 256-token one; a prompt-cache hit (the
    // calibration request's prefix still in a slot) would make it faster.
    assert!(
        ttft(1024) > ttft(256),
        "{}",
        serde_json::to_string_pretty(rows).unwrap()
    );
}

#[test]
fn matrix_beyond_the_slots_is_queued_not_slow() {
    let Some(s) = LlamaServer::start(2, 4096) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The user claims 4 running requests; the server has 2 slots and queues the rest silently.
    let (o, r) = matrix(&s, dir.path(), "256", "2,4", &["--max-num-seqs", "4"]);
    assert!(o.status.success(), "{}", text(&o));
    let kind = cell(&r, 256, 2)["status"]["kind"].as_str();
    assert!(
        matches!(kind, Some("valid" | "client_bound")),
        "{}",
        text(&o)
    );
    assert_eq!(
        cell(&r, 256, 4)["status"]["kind"],
        "queued",
        "{}",
        cell(&r, 256, 4)
    );
}

/// `bench serve` with a detailed result file; `n` requests, at most `conc` at once. Returns
/// the output, the result and the growth of the server's prompt-token counters over the run.
fn bench(s: &LlamaServer, dir: &Path, n: &str, conc: &str, extra: &[&str]) -> (Output, Value, f64) {
    let prompt_tokens = || {
        s.metric("llamacpp:prompt_tokens_total").unwrap_or(0.0)
            + s.metric("llamacpp:prompt_tokens_cached_total")
                .unwrap_or(0.0)
    };
    let before = prompt_tokens();
    let o = bench_serve(&s.url, "tiny", dir, n, conc, extra);
    let delta = prompt_tokens() - before;
    let r = bench_result(dir, &o);
    (o, r, delta)
}

/// What a `bench serve` result must say on llama.cpp: every request done, exact output counts,
/// input lengths that are the server's own counts (`usage.prompt_tokens`, as vLLM reports them)
/// and agree with the server's `/metrics` prompt-token counters, dataset prompts of the size
/// asked for, and no upstream batching. `prompt_delta`: the growth of `llamacpp:prompt_tokens_total` plus
/// `llamacpp:prompt_tokens_cached_total` over the run (every prompt token the server took in).
fn check_bench(
    o: &Output,
    r: &Value,
    n: u64,
    chat: bool,
    input_len: Option<u64>,
    output_len: u64,
    prompt_delta: f64,
) {
    let lens = check_bench_counts(o, r, n, input_len, output_len, prompt_delta);
    real_server::assert_not_upstream_batched(r, &format!("llama.cpp, chat {chat}, {n} requests"));
    for (server, dataset) in lens {
        if chat {
            // The chat template adds its tokens around the dataset's text.
            assert!(
                server > dataset && server - dataset <= 40,
                "{server} vs {dataset}"
            );
        } else {
            // Token ids go as they are; text gets BOS.
            assert!(server - dataset <= 1, "{server} vs {dataset}");
        }
    }
}

/// 12 requests, 4 at once, of one dataset on `/v1/completions` and on `/v1/chat/completions`,
/// each result checked by [`check_bench`] (`input_len`: the prompt size the dataset asks for).
fn bench_both_endpoints(s: &LlamaServer, dataset: &[&str], input_len: Option<u64>) {
    for (backend, endpoint) in [
        ("openai", "/v1/completions"),
        ("openai-chat", "/v1/chat/completions"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--backend", backend, "--endpoint", endpoint];
        args.extend_from_slice(dataset);
        let (o, r, delta) = bench(s, dir.path(), "12", "4", &args);
        check_bench(&o, &r, 12, backend == "openai-chat", input_len, 16, delta);
    }
}

#[test]
fn bench_serve_random_on_both_endpoints() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let random = [
        "--dataset-name",
        "random",
        "--random-input-len",
        "200",
        "--random-output-len",
        "16",
    ];
    bench_both_endpoints(&s, &random, Some(200));
}

#[test]
fn bench_serve_custom_and_prefix_repetition() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = real_server::question_prompts(dir.path(), 12);
    let custom = [
        "--dataset-name",
        "custom",
        "--dataset-path",
        data.to_str().unwrap(),
        "--custom-output-len",
        "16",
    ];
    bench_both_endpoints(&s, &custom, None);
    let prefix_repetition = [
        "--dataset-name",
        "prefix_repetition",
        "--prefix-repetition-prefix-len",
        "128",
        "--prefix-repetition-suffix-len",
        "64",
        "--prefix-repetition-num-prefixes",
        "3",
        "--prefix-repetition-output-len",
        "16",
    ];
    bench_both_endpoints(&s, &prefix_repetition, Some(192));
}

#[test]
fn keep_alive_connection_closed_by_the_idle_server_is_reused_without_a_loss() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    // llama.cpp closes idle keep-alive connections after 5 s: two requests 6 s apart on one
    // pooled client must both succeed, and neither may be counted failed.
    let dir = tempfile::tempdir().unwrap();
    let (o, r, _) = bench(
        &s,
        dir.path(),
        "3",
        "1",
        &[
            "--request-rate",
            "0.16",
            "--burstiness",
            "1000",
            "--dataset-name",
            "random",
            "--random-input-len",
            "32",
            "--random-output-len",
            "4",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["completed"], 3, "{}", text(&o));
    assert_eq!(r["failed"], 0, "{}", text(&o));
    // Three requests ~6 s apart: the run really spanned the server's idle close.
    assert!(r["duration"].as_f64().unwrap() > 10.0, "{}", r["duration"]);
}

#[test]
fn ready_check_waits_for_a_server_that_starts_later() {
    let Some(p) = server::paths() else {
        return;
    };
    drop(p);
    // Reserve a port, free it, start the client first and the server 3 s later on that port.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let client = std::thread::spawn({
        let (url, dir) = (url.clone(), dir.path().to_path_buf());
        move || {
            llmspeed(
                &[
                    "bench",
                    "serve",
                    "--base-url",
                    &url,
                    "--model",
                    "tiny",
                    "--num-prompts",
                    "2",
                    "--dataset-name",
                    "random",
                    "--random-input-len",
                    "16",
                    "--random-output-len",
                    "4",
                    "--ready-check-timeout-sec",
                    "60",
                    "--save-result",
                    "--result-dir",
                    dir.to_str().unwrap(),
                    "--result-filename",
                    "r.json",
                ],
                Duration::from_secs(120),
            )
        }
    });
    // `probe` and `matrix` wait the same way.
    let probe = std::thread::spawn({
        let url = url.clone();
        move || {
            llmspeed(
                &[
                    "probe",
                    "--base-url",
                    &url,
                    "--json",
                    "--ready-check-timeout-sec",
                    "60",
                ],
                Duration::from_secs(120),
            )
        }
    });
    let matrix_dir = tempfile::tempdir().unwrap();
    let matrix = std::thread::spawn({
        let (url, dir) = (url.clone(), matrix_dir.path().to_path_buf());
        move || {
            llmspeed(
                &[
                    "matrix",
                    "--base-url",
                    &url,
                    "--dry-run",
                    "--contexts",
                    "256",
                    "--concurrency",
                    "1",
                    "--out",
                    dir.to_str().unwrap(),
                    "--ready-check-timeout-sec",
                    "60",
                ],
                Duration::from_secs(120),
            )
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    let s = server::LlamaServer::start_on(port, SLOTS, CTX).expect("server");
    let o = client.join().unwrap();
    assert!(o.status.success(), "{}\n{}", text(&o), s.log());
    let p = probe.join().unwrap();
    assert!(p.status.success(), "{}", text(&p));
    let v: Value = serde_json::from_slice(&p.stdout).unwrap();
    assert_eq!(v["engine"], "llama.cpp", "{v}");
    let m = matrix.join().unwrap();
    assert!(m.status.success(), "{}", text(&m));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(r["completed"], 2);
    // Without waiting, the same commands fail at once with the transport error.
    drop(s);
    let o = llmspeed(&["probe", "--base-url", &url], Duration::from_secs(30));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refused"),
        "{}",
        text(&o)
    );
}

/// The gaps (ns) between consecutive token-carrying events of a timeline.
fn token_gaps_ns(clock: &llmspeed::clock::Clock, tl: &llmspeed::timeline::Timeline) -> Vec<u64> {
    let stamps: Vec<u64> = tl
        .events
        .iter()
        .filter(|e| e.tokens > 0)
        .map(|e| e.t)
        .collect();
    stamps
        .windows(2)
        .map(|w| clock.delta_ns(w[0], w[1]))
        .collect()
}

fn p50(mut v: Vec<u64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

/// llama.cpp's native `/completion` stream and its OpenAI completions stream, for the same
/// request (prompt, greedy decoding with a fixed seed, 64 tokens, ignore_eos), alternated so
/// both see the same server state: the same tokens, the same text, the server's own count in
/// both, and the same token gaps (p50 within 1 ms).
#[test]
fn native_completion_stream_agrees_with_the_openai_stream_of_the_same_request() {
    use llmspeed::clock::Clock;
    use llmspeed::net::request::{Generation, Prompt};
    use llmspeed::net::{Cancel, Client, ClientConfig, Dialect, NoopObserver, Target};
    use llmspeed::timeline::{FinishReason, TokenCountSource};
    const MAX: u32 = 64;
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clock = Clock::new();
    let client = Client::new(
        ClientConfig::new(Target::parse(&s.url).unwrap()),
        clock.clone(),
    )
    .unwrap();
    let mut gaps = [Vec::new(), Vec::new()];
    let mut texts = [Vec::new(), Vec::new()];
    for round in 0..4 {
        for (i, d) in [Dialect::OpenAi, Dialect::LlamaCpp].into_iter().enumerate() {
            let mut g = Generation::new("tiny", Prompt::Text("The speed of the server is".into()));
            g.dialect = d;
            g.max_tokens = Some(MAX);
            g.ignore_eos = true;
            g.continuous_usage = false;
            g.extra.insert("temperature".into(), 0.0.into());
            g.extra.insert("seed".into(), 42.into());
            let req = g.stream_request(Some(true)).unwrap();
            let tl = rt.block_on(async {
                let start = client.clock().raw();
                client
                    .stream(&req, start, &mut NoopObserver, &Cancel::new())
                    .await
            });
            let what = format!("round {round}, {}", d.as_str());
            assert_eq!(tl.outcome, Ok(()), "{what}");
            assert_eq!(
                tl.output_tokens(),
                MAX as u64,
                "{what}: the server's own count"
            );
            assert_eq!(tl.finish_reason, Some(FinishReason::Length), "{what}");
            if d == Dialect::LlamaCpp {
                // tokens_predicted deltas: exact per event, even for tokens that end inside a
                // UTF-8 character (no event of their own).
                assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
                assert_eq!(tl.event_tokens(), MAX as u64, "{what}");
            }
            gaps[i].extend(token_gaps_ns(&clock, &tl));
            texts[i].push(tl.content_text.unwrap_or_default());
        }
    }
    assert_eq!(
        texts[0], texts[1],
        "greedy decoding: the same text on both endpoints"
    );
    assert!(texts[1].iter().all(|t| t == &texts[1][0] && !t.is_empty()));
    let (openai, native) = (p50(gaps[0].clone()), p50(gaps[1].clone()));
    assert!(
        (openai - native).abs() < 1e6,
        "p50 token gap: OpenAI {:.3} ms, native {:.3} ms",
        openai / 1e6,
        native / 1e6
    );
    eprintln!(
        "p50 token gap: OpenAI {:.3} ms ({} gaps), native {:.3} ms ({} gaps)",
        openai / 1e6,
        gaps[0].len(),
        native / 1e6,
        gaps[1].len()
    );
}

#[test]
fn stream_cli_speaks_the_native_completion_endpoint() {
    let Some(s) = LlamaServer::start(SLOTS, CTX) else {
        return;
    };
    let o = stream(
        &s,
        "The speed of the server is",
        "32",
        &["--api", "llama.cpp", "--ignore-eos", "--json"],
    );
    let summary = stream_summary(&o, "stream --api llama.cpp");
    assert_eq!(summary["output_tokens"], 32, "{summary}");
    assert_eq!(
        summary["token_count_source"], "continuous_usage",
        "{summary}"
    );
    assert_eq!(summary["finish_reason"], "length", "{summary}");
    let prompt_tokens = summary["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        prompt_tokens as usize,
        s.count("The speed of the server is")
    );
}
