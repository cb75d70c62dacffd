//! llmspeed against a real vLLM (`vllm serve`, the CPU build `scripts/vllm-server.sh` installs,
//! a tiny random-weight Llama, 127.0.0.1 on a kernel-chosen port): every figure checked against
//! the server's own counts — `/tokenize`, `/v1/models`, `/version` and `/metrics` read through a
//! separate minimal HTTP client in `support/real_server.rs`.
//!
//! One server for the whole binary (it takes 30–90 s to start), with `--max-num-seqs 4` and a
//! KV cache of 64 blocks of 128 tokens, so that one small grid holds Valid, Queued and
//! Over-capacity cells. The tests take turns on it, so each test's counter deltas are its own.

/// `llmspeed capacity` against this binary's server.
#[path = "real_vllm/capacity.rs"]
mod capacity;
#[path = "capacity/real.rs"]
mod real;
#[path = "support/real_server.rs"]
mod real_server;
#[path = "real_vllm/server.rs"]
mod server;

use llmspeed::server::engine::EngineKind;
use llmspeed::server::sampler::MetricNames;
use real_server::{
    assert_client_kept_up, assert_server_ran, bench_result, bench_serve, cell, check_bench_counts,
    histogram, llmspeed, metric, stream_summary, text,
};
use serde_json::Value;
use server::{VllmServer, KV_BLOCKS, MAX_MODEL_LEN, MAX_NUM_SEQS, MODEL};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// vLLM's CPU block size for this model (the platform's default).
const BLOCK: u64 = 128;

fn cache_config(s: &VllmServer) -> Value {
    let page = s.metrics();
    let line = page
        .lines()
        .find(|l| l.starts_with("vllm:cache_config_info{"))
        .unwrap_or_else(|| panic!("no vllm:cache_config_info:\n{page}"));
    let labels = &line[line.find('{').unwrap() + 1..line.rfind('}').unwrap()];
    let mut map = serde_json::Map::new();
    for kv in labels.split("\",") {
        if let Some((k, v)) = kv.split_once("=\"") {
            map.insert(
                k.to_string(),
                Value::String(v.trim_end_matches('"').to_string()),
            );
        }
    }
    Value::Object(map)
}

/// The server's KV capacity in tokens, as vLLM itself reports it.
fn kv_tokens(s: &VllmServer) -> u64 {
    let c = cache_config(s);
    c["kv_cache_size_tokens"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{c}"))
}

#[test]
fn probe_reads_engine_version_context_and_kv_capacity() {
    let Some(s) = server::shared() else {
        return;
    };
    let v = real_server::probe(&s.url, Duration::from_secs(120));
    // Independent truth: the server's own answers.
    let (_, version) = s.get("/version");
    let version: Value = serde_json::from_str(&version).unwrap();
    assert!(
        version["version"]
            .as_str()
            .unwrap()
            .contains(server::VERSION),
        "{version}"
    );
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(
        models["data"][0]["max_model_len"], MAX_MODEL_LEN,
        "{models}"
    );
    let kv = kv_tokens(&s);
    // 64 blocks of 128 tokens, as started (less at most the one block vLLM holds back).
    assert!(
        ((KV_BLOCKS - 1) * BLOCK..=KV_BLOCKS * BLOCK).contains(&kv),
        "{}",
        cache_config(&s)
    );
    assert_eq!(v["engine"], "vllm", "{v}");
    assert_eq!(v["version"], version["version"], "{v}");
    assert_eq!(v["model"], MODEL, "{v}");
    assert_eq!(v["max_model_len"], MAX_MODEL_LEN, "{v}");
    assert_eq!(v["kv_cache_tokens"], kv, "{v}");
    assert_eq!(v["kv_cache_source"], "kv_cache_size_tokens", "{v}");
    assert_eq!(v["tokenize_dialect"], "prompt", "{v}");
    // The probe's verification sentence, counted by the server itself.
    let sentence = v["tokenize_verified_text"].as_str().unwrap();
    assert_eq!(v["tokenize_verified_count"], s.count(sentence), "{v}");
    // vLLM does not say its running limit: reported unknown, never guessed.
    assert!(v["max_running_requests"].is_null(), "{v}");
}

/// `matrix` with short windows; `results.json` parsed.
fn matrix(s: &VllmServer, out: &Path, args: &[&str]) -> (Output, Value) {
    real_server::matrix(&s.url, out, args, Duration::from_secs(900))
}

#[test]
fn prefill_rows_are_cold_and_cache_salt_is_accepted() {
    let Some(s) = server::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hits = || s.metric("vllm:prefix_cache_hits_total").unwrap();
    let queries = || s.metric("vllm:prefix_cache_queries_total").unwrap();
    let (hits0, queries0) = (hits(), queries());
    // Prefill rows only: the one decode cell (64 streams of 1K) is over the KV capacity.
    let (o, r) = matrix(
        &s,
        dir.path(),
        &[
            "--prefill-contexts",
            "512,1k",
            "--prefill-samples",
            "3",
            "--contexts",
            "1k",
            "--concurrency",
            "64",
            "--max-tokens",
            "64",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    for c in r["decode"].as_array().unwrap() {
        assert!(
            c["requests"].as_array().unwrap().is_empty(),
            "a decode cell ran: {c}"
        );
        assert_eq!(c["status"]["kind"], "over_capacity", "{c}");
    }
    let rows = r["prefill"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let mut prompt_tokens = 0.0;
    for row in rows {
        // Valid: vLLM took every salted request (an unknown field would be a 400).
        assert_eq!(row["status"]["kind"], "valid", "{row}\n{}", text(&o));
        let ctx = row["context"].as_f64().unwrap();
        let counted = row["server_prompt_tokens"].as_f64().unwrap();
        assert!((counted - ctx).abs() <= ctx * 0.01, "{row}");
        assert_samples_keep_the_calibrated_size(row, &o);
        prompt_tokens += 3.0 * counted;
    }
    // Six prompts of 512 and 1K tokens went through the prefix cache, and none hit it.
    assert!(queries() - queries0 >= prompt_tokens, "{rows:?}");
    assert_eq!(hits(), hits0, "a prefill sample hit the prefix cache");
    // The control: the cache is on and the counter moves. The same 1K prompt twice, with the
    // same salt, hits; with another salt, it does not.
    let prompt = "the river ".repeat(400);
    let send = |salt: &str| {
        let (status, body) = s.post(
            "/v1/completions",
            &serde_json::json!({"model": MODEL, "prompt": prompt, "max_tokens": 1, "cache_salt": salt}),
        );
        assert_eq!(status, 200, "{body}");
    };
    send("a");
    let before = hits();
    send("b");
    assert_eq!(hits(), before, "another salt shares no block");
    send("a");
    assert!(
        hits() - before >= 512.0,
        "the same salt must hit: {}",
        hits() - before
    );
}

#[test]
fn matrix_grid_valid_where_it_fits_queued_past_max_num_seqs_over_capacity_by_kv() {
    let Some(s) = server::shared() else {
        return;
    };
    let kv = kv_tokens(&s);
    const MAX_TOKENS: u64 = 256;
    // The grid's verdicts follow from the server's facts: c × (context + max_tokens) against
    // the KV capacity, c against --max-num-seqs (which vLLM does not expose, so not passed).
    assert!(
        (4 * (1024 + MAX_TOKENS)..8 * (1024 + MAX_TOKENS)).contains(&kv),
        "kv {kv}"
    );
    assert!(8 * (256 + MAX_TOKENS) <= kv && 8 > MAX_NUM_SEQS, "kv {kv}");
    let dir = tempfile::tempdir().unwrap();
    let (o, r) = matrix(
        &s,
        dir.path(),
        &[
            "--contexts",
            "256,1k",
            "--prefill-contexts",
            "256,1k",
            "--concurrency",
            "1,2,4,8",
            "--max-tokens",
            "256",
            // Each token stamped when its segment reached the loopback device (CI runs as root:
            // CAP_NET_RAW), so a client that shares the machine's 2 cores with vLLM's engine and
            // reads late still knows every token's time to the stamps' resolution.
            "--packet-stamps",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // The grid, for whoever reads the test's output (`--nocapture`).
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    for ctx in [256, 1024] {
        for c in [1, 2, 4] {
            let cell = cell(&r, ctx, c);
            assert_client_kept_up(cell, &format!("{ctx} x {c}"), &o);
            assert!(cell["output_tok_per_s"].as_f64().unwrap() > 0.0, "{cell}");
            // vLLM's own num_requests_running, sampled during the window: it reached c and never
            // passed it, and the cell's average is the average of those samples. (Not "the
            // average rounds to c": the cell's streams all ask for the same 256 tokens, so they
            // end together and restart together, and on a busy machine the server's own count
            // sat below c long enough for a true average of 3.0 at c = 4.)
            assert_server_ran(cell, c, &format!("{ctx} x {c}"));
            // The server's own generation counter over the window, within 1% of ours.
            let ours = cell["output_tokens"].as_i64().unwrap();
            let server = cell["server_output_tokens"]
                .as_i64()
                .unwrap_or_else(|| panic!("{cell}"));
            assert_eq!(
                cell["token_count_diff"].as_i64(),
                Some(ours - server),
                "{cell}"
            );
            // Within 1%, plus one token per stream: a token stamped near an edge of the
            // window may fall on the other side of the server's counter readings (packet
            // stamps put tokens earlier than a read's stamp; 1K x 2 once read 182 against 180).
            assert!(
                (ours - server).abs() * 100 <= ours + 100 * c as i64,
                "{ctx} x {c}: ours {ours}, vLLM {server}"
            );
        }
    }
    // Eight streams, four running: vLLM queues the rest (num_requests_waiting), never a slow
    // Valid cell.
    let q = cell(&r, 256, 8);
    assert_eq!(q["status"]["kind"], "queued", "{q}\n{}", text(&o));
    // The queue-time histogram the verdict weighs the waiting gauge with is vLLM's own: read
    // through the sampler's names it is the page's sum and count (which count the grid's
    // requests), as an independent reading of the same page finds them.
    let page = s.metrics();
    let names = MetricNames::for_engine(EngineKind::Vllm).unwrap();
    let (sum, count) = names.read(0, &page).unwrap().queue_time.unwrap();
    let h = "vllm:request_queue_time_seconds";
    assert_eq!(Some(sum), metric(&page, &format!("{h}_sum")), "{page}");
    assert_eq!(Some(count), metric(&page, &format!("{h}_count")), "{page}");
    assert_eq!(histogram(&page, h).last(), Some(&(f64::INFINITY, count)));
    assert!(count > 0.0 && sum > 0.0, "{sum} s over {count} requests");
    // Eight 1K streams do not fit the KV cache vLLM reported: known before running.
    let over = cell(&r, 1024, 8);
    assert_eq!(over["status"]["kind"], "over_capacity", "{over}");
    assert!(over["requests"].as_array().unwrap().is_empty(), "{over}");
    // Prefill rows: the prompt the server counted is the context asked for (±1%).
    for row in r["prefill"].as_array().unwrap() {
        let ctx = row["context"].as_f64().unwrap();
        assert_eq!(row["status"]["kind"], "valid", "{row}\n{}", text(&o));
        let counted = row["server_prompt_tokens"]
            .as_f64()
            .unwrap_or_else(|| panic!("{row}"));
        assert!((counted - ctx).abs() <= ctx * 0.01, "{row}");
        assert_samples_keep_the_calibrated_size(row, &o);
    }
}

/// A prefill row's samples are the size its prompt was calibrated to, exactly: vLLM's count
/// of the last sample (`usage.prompt_tokens`) is the count `/tokenize` gave the calibrated
/// prompt (its progress line), though each sample has a first line of its own. The tiny
/// model's byte-level BPE merges digit runs, so two run ids of one width can differ by a few
/// tokens: a 256-token row once measured a 253-token sample. No sample was sent short.
fn assert_samples_keep_the_calibrated_size(row: &Value, o: &Output) {
    let label = row["context_label"].as_str().unwrap();
    let out = text(o);
    let line = out
        .lines()
        .find(|l| l.contains(&format!("context {label}: prompt: ")))
        .unwrap_or_else(|| panic!("no prompt line for {label}\n{out}"));
    // The note's last "N tokens, " is the count the prompt was used at.
    let calibrated: u64 = line
        .rsplit_once(" tokens, ")
        .and_then(|(head, _)| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"));
    assert_eq!(
        row["server_prompt_tokens"].as_u64(),
        Some(calibrated),
        "{row}\n{line}"
    );
    assert!(
        !out.contains(&format!("prefill {label}: sample")),
        "a sample of another size was sent\n{out}"
    );
}

/// The prompt tokens vLLM took in (`vllm:prompt_tokens_total`, cached ones included).
fn prompt_tokens(s: &VllmServer) -> f64 {
    s.metric("vllm:prompt_tokens_total").unwrap()
}

/// `bench serve` with a detailed result file; `n` requests, at most `conc` at once. Returns
/// the output, the result and the growth of vLLM's prompt-token counter over the run.
fn bench(s: &VllmServer, dir: &Path, n: &str, conc: &str, extra: &[&str]) -> (Output, Value, f64) {
    let before = prompt_tokens(s);
    let o = bench_serve(&s.url, MODEL, dir, n, conc, extra);
    let delta = prompt_tokens(s) - before;
    // `--num-runs N` writes r-run1.json … r-runN.json and r-runs.json instead.
    if extra.contains(&"--num-runs") {
        return (o, Value::Null, delta);
    }
    let r = bench_result(dir, &o);
    (o, r, delta)
}

/// How the dataset's prompt reached the server.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Sent {
    /// Token ids on `/v1/completions`: the server counts exactly the ids sent.
    Ids,
    /// Text on `/v1/completions`: the tokenizer adds BOS.
    Text,
    /// Chat messages: the template adds its tokens around the text.
    Chat,
}

/// What a `bench serve` result must say on vLLM: every request done, exact output counts,
/// input lengths that are the server's own counts (`usage.prompt_tokens`) and add up to the
/// growth of its `vllm:prompt_tokens_total`, dataset prompts of the size asked for, and no
/// upstream batching.
fn check_bench(
    o: &Output,
    r: &Value,
    n: u64,
    sent: Sent,
    input_len: Option<u64>,
    output_len: u64,
    prompt_delta: f64,
) {
    let lens = check_bench_counts(o, r, n, input_len, output_len, prompt_delta);
    real_server::assert_not_upstream_batched(r, &format!("vLLM, {sent:?}, {n} requests"));
    for (server, dataset) in lens {
        match sent {
            Sent::Ids => assert_eq!(server, dataset),
            Sent::Text => assert!(server - dataset <= 1, "{server} vs {dataset}"),
            Sent::Chat => assert!(
                server > dataset && server - dataset <= 40,
                "{server} vs {dataset}"
            ),
        }
    }
}

/// The bucket of a cumulative histogram that holds `x` (index into `buckets`).
fn bucket_of(buckets: &[(f64, f64)], x: f64) -> usize {
    buckets.iter().position(|(le, _)| x <= *le).unwrap()
}

/// The bucket holding the median of the observations between two readings of a histogram.
fn median_bucket(before: &[(f64, f64)], after: &[(f64, f64)]) -> usize {
    let delta: Vec<f64> = after
        .iter()
        .map(|(le, c)| c - before.iter().find(|(l, _)| l == le).map_or(0.0, |b| b.1))
        .collect();
    let total = *delta.last().unwrap();
    assert!(total > 0.0, "no observations: {after:?}");
    delta.iter().position(|&c| c >= total / 2.0).unwrap()
}

#[test]
fn bench_serve_random_ids_on_both_endpoints_and_ttft_gaps_match_the_servers_histograms() {
    let Some(s) = server::shared() else {
        return;
    };
    const TTFT: &str = "vllm:time_to_first_token_seconds";
    const ITL: &str = "vllm:inter_token_latency_seconds";
    for (backend, endpoint, sent) in [
        ("openai", "/v1/completions", Sent::Ids),
        ("openai-chat", "/v1/chat/completions", Sent::Chat),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let page = s.metrics();
        let (ttft0, itl0) = (histogram(&page, TTFT), histogram(&page, ITL));
        let (o, r, delta) = bench(
            &s,
            dir.path(),
            "12",
            "4",
            &[
                "--backend",
                backend,
                "--endpoint",
                endpoint,
                "--dataset-name",
                "random",
                "--random-input-len",
                "200",
                "--random-output-len",
                "32",
            ],
        );
        check_bench(&o, &r, 12, sent, Some(200), 32, delta);
        eprintln!("{}", String::from_utf8_lossy(&o.stdout));
        let page = s.metrics();
        let (ttft1, itl1) = (histogram(&page, TTFT), histogram(&page, ITL));
        // Our medians against vLLM's own histograms of the same requests: our median falls in
        // the bucket holding the server's median or in a neighbour. The buckets are all the
        // resolution the server gives; the two clocks sit at either end of one loopback
        // connection and differ by the frontend's few milliseconds (HTTP, detokenizing, SSE
        // framing), which near a bucket edge is one bucket. A per-chunk instead of per-token
        // gap, or a TTFT from the wrong start, moves a median by a factor, several buckets.
        for (name, before, after, ours_ms) in [
            (TTFT, &ttft0, &ttft1, r["median_ttft_ms"].as_f64().unwrap()),
            (ITL, &itl0, &itl1, r["median_itl_ms"].as_f64().unwrap()),
        ] {
            let server = median_bucket(before, after);
            let ours = bucket_of(after, ours_ms / 1e3);
            eprintln!(
                "{backend} {name}: our median {ours_ms:.1} ms in bucket le={}, vLLM's median in le={}",
                after[ours].0, after[server].0
            );
            assert!(
                ours.abs_diff(server) <= 1,
                "{backend} {name}: our median {ours_ms} ms (bucket le={}) vs vLLM's median bucket le={}: {after:?}",
                after[ours].0,
                after[server].0
            );
        }
    }
}

/// The engine's own batching, named as the engine's. A request's `stream_interval` of 4 makes
/// vLLM write four tokens an event; with `--continuous-usage` each event's token count is the
/// server's, so those events count as batches: the upstream-batching verdict fires and its cause
/// is the engine's writes, not a proxy (docs/methodology.md, "Upstream batching"). Without exact
/// per-event counts (bench serve's default, as vLLM's bench counts) the same stream reads one
/// token a chunk and nothing batched, which the rule cannot see.
#[test]
fn bench_serve_names_a_vllm_stream_interval_the_engines_writes_not_a_proxy() {
    let Some(s) = server::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let every4 = [
        "--backend",
        "openai",
        "--endpoint",
        "/v1/completions",
        "--dataset-name",
        "random",
        "--random-input-len",
        "200",
        "--random-output-len",
        "32",
        "--continuous-usage",
        "--extra-body",
        r#"{"stream_interval": 4}"#,
    ];
    let (o, r, delta) = bench(&s, dir.path(), "12", "4", &every4);
    for (server, dataset) in check_bench_counts(&o, &r, 12, Some(200), 32, delta) {
        assert_eq!(server, dataset);
    }
    assert_eq!(
        r["llmspeed"]["token_count_source"],
        serde_json::json!({"continuous_usage": 12}),
        "{}",
        text(&o)
    );
    let lag = &r["llmspeed"]["client_lag"];
    eprintln!(
        "vLLM, stream_interval 4: {}",
        lag["upstream_batching_reason"]
    );
    assert_eq!(lag["upstream_batched"], true, "{lag}\n{}", text(&o));
    assert_eq!(lag["upstream_batching_cause"], "engine_writes", "{lag}");
    // Each request's first token comes alone, then events of four (the last of three, or more
    // when the API loop also falls behind): at least 31 of every 32 tokens in events of several.
    let in_events = lag["tokens_in_multi_token_events_percent"]
        .as_f64()
        .unwrap();
    assert!(in_events >= 100.0 * 31.0 / 32.0 - 1e-9, "{lag}");
    assert!(lag["batch_tokens_p50"].as_f64().unwrap() >= 4.0, "{lag}");
    let why = lag["upstream_batching_reason"].as_str().unwrap();
    assert!(
        why.contains("the engine wrote them together") && !why.contains("proxy_buffering"),
        "{why}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("WARNING: llmspeed: upstream batching: ")
            && stdout.contains("the engine wrote them together"),
        "{stdout}"
    );
}

#[test]
fn bench_serve_custom_dataset_on_both_endpoints() {
    let Some(s) = server::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = real_server::question_prompts(dir.path(), 8);
    for (backend, endpoint, sent) in [
        ("openai", "/v1/completions", Sent::Text),
        ("openai-chat", "/v1/chat/completions", Sent::Chat),
        // vLLM's own Responses server: the same chat template around the text, the lengths
        // from `response.completed`'s usage.
        ("openai-responses", "/v1/responses", Sent::Chat),
    ] {
        let out = tempfile::tempdir().unwrap();
        let (o, r, delta) = bench(
            &s,
            out.path(),
            "8",
            "4",
            &[
                "--backend",
                backend,
                "--endpoint",
                endpoint,
                "--dataset-name",
                "custom",
                "--dataset-path",
                data.to_str().unwrap(),
                "--custom-output-len",
                "16",
            ],
        );
        check_bench(&o, &r, 8, sent, None, 16, delta);
        // The dataset's texts, counted by the server itself.
        if sent == Sent::Text {
            let asked = r["llmspeed"]["dataset_input_lens"].as_array().unwrap();
            let first = "Question 0: how fast is a server that reads 0 words of context?";
            assert!(
                asked.iter().any(|n| n.as_u64() == Some(s.count(first) - 1)),
                "{asked:?}"
            );
        }
    }
}

#[test]
fn bench_serve_multi_turn_carries_the_conversation_into_vllms_prefix_cache() {
    let Some(s) = server::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hits0 = s.metric("vllm:prefix_cache_hits_total").unwrap();
    let before = prompt_tokens(&s);
    let o = llmspeed(
        &[
            "bench",
            "serve",
            "--base-url",
            &s.url,
            "--model",
            MODEL,
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--multi-turn",
            "--multi-turn-num-turns",
            "3",
            "--multi-turn-concurrency",
            "2",
            "--num-prompts",
            "4",
            "--random-input-len",
            "200",
            "--random-output-len",
            "16",
            "--random-prefix-len",
            "256",
            "--ignore-eos",
            "--save-result",
            "--result-dir",
            dir.path().to_str().unwrap(),
            "--result-filename",
            "mt.json",
        ],
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "{}", text(&o));
    let delta = prompt_tokens(&s) - before;
    let hits = s.metric("vllm:prefix_cache_hits_total").unwrap() - hits0;
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("mt.json")).unwrap())
            .unwrap();
    assert_eq!(v["mode"], "multi_turn", "{v}");
    assert_eq!(v["completed"], 12, "{v}\n{}", text(&o));
    assert_eq!(v["conversations_completed"], 4, "{v}");
    assert_eq!(v["total_output_tokens"], 12 * 16, "{v}");
    let turns: Vec<u64> = v["per_turn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["total_input_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(turns.len(), 3, "{v}");
    // Each turn holds the one before, its 16-token answers and a new message.
    assert!(
        turns[1] > turns[0] + 4 * 16 && turns[2] > turns[1] + 4 * 16,
        "{turns:?}"
    );
    // vLLM's own prompt counter took in exactly what we report (plus the probe's requests).
    let sum: u64 = turns.iter().sum();
    assert!(
        (0.0..=64.0).contains(&(delta - sum as f64)),
        "vLLM {delta}, ours {sum}"
    );
    // Turns 1 and 2 resend the earlier turns: vLLM served whole 128-token blocks of them from
    // its prefix cache (at least the shared 256-token prefix's blocks of every later turn).
    assert!(
        hits >= (8 * 2 * BLOCK) as f64,
        "hits {hits}, turns {turns:?}"
    );
}

#[test]
fn bench_serve_num_runs_reports_each_run_and_the_spread() {
    let Some(s) = server::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (o, _, delta) = bench(
        &s,
        dir.path(),
        "6",
        "2",
        &[
            "--num-runs",
            "2",
            "--dataset-name",
            "random",
            "--random-input-len",
            "64",
            "--random-output-len",
            "8",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
    };
    let runs = [read("r-run1.json"), read("r-run2.json")];
    let mut sum = 0;
    for r in &runs {
        assert_eq!(r["completed"], 6, "{r}");
        assert_eq!(r["total_output_tokens"], 6 * 8, "{r}");
        sum += r["total_input_tokens"].as_u64().unwrap();
    }
    assert!(
        (0.0..=64.0).contains(&(delta - sum as f64)),
        "vLLM {delta}, ours {sum}"
    );
    let spread = read("r-runs.json");
    assert_eq!(spread["num_runs"], 2, "{spread}");
    let tp = &spread["metrics"]["request_throughput"];
    let xs: Vec<f64> = runs
        .iter()
        .map(|r| r["request_throughput"].as_f64().unwrap())
        .collect();
    assert_eq!(tp["values"], serde_json::json!(xs), "{tp}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Multi-Run Summary (2 runs)"),
        "{}",
        text(&o)
    );
}

#[test]
fn stream_counts_tokens_from_vllm_usage() {
    let Some(s) = server::shared() else {
        return;
    };
    for chat in [false, true] {
        let mut args = vec!["--ignore-eos", "--json"];
        if chat {
            args.push("--chat");
        }
        let o = real_server::stream(
            &s.url,
            MODEL,
            "The speed of the server is",
            "48",
            &args,
            Duration::from_secs(120),
        );
        let summary = stream_summary(&o, &format!("chat={chat}"));
        assert_eq!(summary["output_tokens"], 48, "chat={chat}: {summary}");
        assert_eq!(
            summary["usage"]["completion_tokens"], 48,
            "chat={chat}: {summary}"
        );
        assert!(summary["error"].is_null(), "chat={chat}: {summary}");
        if !chat {
            assert_eq!(
                summary["usage"]["prompt_tokens"],
                s.count("The speed of the server is"),
                "{summary}"
            );
        }
    }
}

/// `bench sglang` (the drop-in for `python -m sglang.bench_serving`) on vLLM's OpenAI endpoints,
/// as SGLang users run it against vLLM (`--backend vllm` / `vllm-chat`): its record against
/// vLLM's own counters and histograms of the same requests. Output tokens: SGLang's readers take
/// them from usage or else the length asked for (with `ignore_eos`, exact), and vLLM's
/// `generation_tokens_total` grows by exactly as many. Input tokens: SGLang's record sums the
/// dataset's lengths: token ids on completions, text fitted to the server's own count on chat.
/// TTFT and ITL medians: in vLLM's median bucket or a neighbour, as for `bench serve`.
#[test]
fn bench_sglang_on_vllms_openai_endpoints_matches_its_counters_and_histograms() {
    let Some(s) = server::shared() else {
        return;
    };
    const TTFT: &str = "vllm:time_to_first_token_seconds";
    const ITL: &str = "vllm:inter_token_latency_seconds";
    const N: u64 = 12;
    for backend in ["vllm", "vllm-chat"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("sglang.jsonl");
        let page = s.metrics();
        let (ttft0, itl0) = (histogram(&page, TTFT), histogram(&page, ITL));
        const GEN: &str = "vllm:generation_tokens_total";
        const DONE: &str = "vllm:request_success_total";
        let (prompt0, gen0, done0) = (
            prompt_tokens(&s),
            s.metric(GEN).unwrap(),
            s.metric(DONE).unwrap(),
        );
        let o = llmspeed(
            &[
                "bench",
                "sglang",
                "--backend",
                backend,
                "--base-url",
                &s.url,
                "--model",
                MODEL,
                "--dataset-name",
                "random",
                "--random-input-len",
                "200",
                "--random-output-len",
                "32",
                "--random-range-ratio",
                "1",
                "--num-prompts",
                "12",
                "--max-concurrency",
                "4",
                "--warmup-requests",
                "0",
                "--output-file",
                out.to_str().unwrap(),
                "--output-details",
            ],
            Duration::from_secs(300),
        );
        assert!(o.status.success(), "{}", text(&o));
        let page = s.metrics();
        let prompt_delta = prompt_tokens(&s) - prompt0;
        let gen_delta = s.metric(GEN).unwrap() - gen0;
        let extra_requests = s.metric(DONE).unwrap() - done0 - N as f64;
        let lines = std::fs::read_to_string(&out).unwrap();
        // SGLang's record is Python's JSON: an unlimited request rate is `Infinity`.
        let last = lines
            .lines()
            .last()
            .unwrap()
            .replace(": Infinity", ": 1.0e300");
        let r: Value = serde_json::from_str(&last).unwrap();
        eprintln!("{}", String::from_utf8_lossy(&o.stdout));
        assert_eq!(r["completed"], N, "{r}");
        assert_eq!(r["total_output_tokens"], N * 32, "{r}");
        // Besides the run, vLLM saw only the probe's one-token request (does the server take
        // token-id prompts?), sent once before the run: one token each.
        assert!((0.0..=1.0).contains(&extra_requests), "{extra_requests}");
        assert_eq!(
            gen_delta,
            (N * 32) as f64 + extra_requests,
            "vLLM generated {gen_delta}"
        );
        // Every prompt 200 tokens by vLLM's /tokenize (±1 where ten fitting rounds fall short).
        let lens: Vec<u64> = r["input_lens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(lens.len() as u64, N);
        assert!(lens.iter().all(|n| (199..=201).contains(n)), "{lens:?}");
        let sum: u64 = lens.iter().sum();
        assert_eq!(r["total_input_tokens"], sum);
        // What vLLM took in over the run: the probe's 8 token ids, and the prompts — on
        // `/v1/completions` the token ids themselves (llmspeed sends random prompts as ids where
        // the server takes them: exactly the lengths in the record), on the chat endpoint the
        // text inside the template's few tokens per request (the tiny model's adds under 16).
        let per_request = (prompt_delta - 8.0 * extra_requests - sum as f64) / N as f64;
        if backend == "vllm" {
            assert_eq!(
                per_request, 0.0,
                "vLLM took in {prompt_delta} for prompts of {sum}"
            );
        } else {
            assert!(
                (1.0..=16.0).contains(&per_request),
                "{backend}: vLLM took in {prompt_delta} prompt tokens for prompts of {sum}"
            );
        }
        let (ttft1, itl1) = (histogram(&page, TTFT), histogram(&page, ITL));
        for (name, before, after, ours_ms) in [
            (TTFT, &ttft0, &ttft1, r["median_ttft_ms"].as_f64().unwrap()),
            (ITL, &itl0, &itl1, r["median_itl_ms"].as_f64().unwrap()),
        ] {
            let server = median_bucket(before, after);
            let ours = bucket_of(after, ours_ms / 1e3);
            assert!(
                ours.abs_diff(server) <= 1,
                "{backend} {name}: our median {ours_ms} ms (bucket le={}) vs vLLM's median bucket le={}",
                after[ours].0,
                after[server].0
            );
        }
    }
}
