//! `bench serve` end to end against the simulated server on 127.0.0.1:0: the result file's keys,
//! order and types against `tests/data/bench_serve_keys.txt`, and the measured token times
//! against the server's ground-truth trace, matched request by request through `x-request-id`.

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::bench::vllm::run;
use llmspeed::clock::Clock;
use llmspeed::mock::{serve, MockConfig, Profile};
use llmspeed::net::Cancel;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

struct Mock {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Sub-millisecond prefill and a 2 ms decode step: gaps big enough to compare, a run in ~1 s.
async fn start_mock(trace: Option<&Path>) -> Mock {
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 2000.0;
    cfg.trace = trace.map(Path::to_path_buf);
    start_mock_with(cfg).await
}

async fn start_mock_with(cfg: MockConfig) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, cfg, async move {
        let _ = rx.await;
    }));
    Mock { addr, stop, task }
}

impl Mock {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("mock did not stop")
            .unwrap()
            .expect("mock failed");
    }
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

fn config(addr: SocketAddr, extra: &[&str]) -> ServeConfig {
    let url = format!("http://{addr}");
    let mut argv = vec!["x", "--base-url", &url];
    argv.extend_from_slice(extra);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

/// A JSON object's keys and values in file order.
struct Ordered(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::String(_) => "str",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        // An empty list counts as a list of floats (vLLM's empty latencies are one).
        Value::Array(a) if a.iter().all(|x| x.is_f64()) => "list[float]",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn check_keys(pairs: &[(String, Value)]) {
    let want: Vec<(String, String)> = include_str!("data/bench_serve_keys.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (k, t) = l.split_once(' ').expect("KEY TYPE");
            (k.to_string(), t.to_string())
        })
        .collect();
    let got: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let want_keys: Vec<&str> = want.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, want_keys, "keys and order");
    for ((k, v), (_, types)) in pairs.iter().zip(&want) {
        let t = type_of(v);
        let ok = types.split('|').any(|w| w == t);
        assert!(ok, "{k}: got {t} ({v}), want {types}");
    }
}

/// Ground truth by request id: the server's write times of its token chunks in token order
/// (ns since the server started).
fn trace_writes(path: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut by_req: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        by_req
            .entry(v["request_id"].as_str().unwrap().to_string())
            .or_default()
            .push((v["index"].as_u64().unwrap(), v["t_ns"].as_u64().unwrap()));
    }
    by_req
        .into_iter()
        .map(|(id, mut w)| {
            w.sort();
            (id, w.into_iter().map(|(_, t)| t).collect())
        })
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_file_has_vllms_keys_and_times_match_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let mock = start_mock(Some(&trace)).await;
    let out_dir = dir.path().join("results");
    let out_dir_s = out_dir.to_str().unwrap().to_string();
    let cfg = config(
        mock.addr,
        &[
            "--num-prompts",
            "40",
            "--random-input-len",
            "64",
            "--random-output-len",
            "20",
            "--request-rate",
            "80",
            "--save-result",
            "--result-dir",
            &out_dir_s,
            "--seed",
            "3",
            "--request-id-prefix",
            "e2e-",
        ],
    );
    let mut log = Vec::new();
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut log)
        .await
        .expect("run");
    let mut console = Vec::new();
    let saved = run::report(&cfg, &out, &mut console)
        .unwrap()
        .expect("saved");
    mock.stop().await;

    let console = String::from_utf8(console).unwrap();
    assert!(console.contains("============ Serving Benchmark Result ============"));
    assert!(console.contains("Successful requests:                     40"));
    let name = saved.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("openai-80.0qps-mock-model-") && name.ends_with(".json"),
        "{name}"
    );

    let text = std::fs::read_to_string(&saved).unwrap();
    let Ordered(pairs) = serde_json::from_str(&text).unwrap();
    check_keys(&pairs);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["completed"], 40);
    assert_eq!(v["failed"], 0);
    assert_eq!(v["total_input_tokens"], 40 * 64);
    assert_eq!(v["total_output_tokens"], 40 * 20);
    assert_eq!(v["request_rate"], 80.0);
    // vLLM's body has no continuous_usage_stats, so per-event counts come from the chunks.
    assert_eq!(v["llmspeed"]["token_count_source"]["chunks"], 40);
    // Plain TCP on Linux: every read carries the kernel's receive stamp, or each event its
    // segment's (packet stamps, the default where a packet socket opens), and the client's
    // wake-up latency is reported beside it.
    if cfg!(target_os = "linux") {
        let packet = llmspeed::net::packet::open_hub(false, 1).is_ok();
        let source = if packet { "packet" } else { "kernel" };
        assert_eq!(v["llmspeed"]["stamp_source"], source, "{}", v["llmspeed"]);
        assert_eq!(v["llmspeed"]["stamp_fallback"], Value::Null);
        assert!(v["llmspeed"]["client_wakeup_us"]["max"].as_f64().unwrap() > 0.0);
    }
    // Gaps whose two tokens came in one read, counted from the timelines' stamps, are exactly
    // the zero ITLs of the result (vLLM's per-chunk gaps), out of every ITL.
    let one_read = &v["llmspeed"]["token_gaps_in_one_read"];
    let itls: Vec<f64> = out.detailed.itls.iter().flatten().copied().collect();
    assert_eq!(itls.len(), 40 * 19, "one token per chunk");
    assert_eq!(one_read["of"], itls.len(), "{one_read}");
    assert_eq!(
        one_read["count"],
        itls.iter().filter(|&&g| g == 0.0).count(),
        "{one_read}"
    );

    // Ground truth: every request, under exactly the id we sent, wrote 20 token chunks.
    let writes = trace_writes(&trace);
    let mut want_ids: Vec<String> = (0..40).map(|i| format!("e2e-{i}")).collect();
    want_ids.sort();
    assert_eq!(writes.keys().cloned().collect::<Vec<_>>(), want_ids, "ids");
    assert!(writes.values().all(|w| w.len() == 20));
    // The client saw one event per token chunk: the same number of gaps, the same mean gap.
    // The mean is dominated by the 2 ms decode step; 25% + 0.3 ms absorbs a loaded machine.
    let server_gaps: Vec<f64> = writes
        .values()
        .flat_map(|w| w.windows(2).map(|p| (p[1] - p[0]) as f64 / 1e6))
        .collect();
    let client_itl_mean = v["mean_itl_ms"].as_f64().unwrap();
    let server_mean = mean(&server_gaps);
    assert_eq!(server_gaps.len(), 40 * 19);
    assert!(
        (client_itl_mean - server_mean).abs() < 0.25 * server_mean + 0.3,
        "client ITL {client_itl_mean} ms vs server gaps {server_mean} ms"
    );

    // Request by request (request i is `e2e-{i}`; the detailed lists are in request order).
    let d = &out.detailed;
    assert_eq!((d.ttfts.len(), d.itls.len()), (40, 40));
    let mut gap_err_ms = Vec::with_capacity(40 * 19);
    let mut first_delay_ms = Vec::with_capacity(40);
    for i in 0..40 {
        let w = &writes[&format!("e2e-{i}")];
        // Each measured gap against the server's write gap for the same two tokens.
        assert_eq!(d.itls[i].len(), 19, "request {i}: one gap per chunk");
        for (k, (c, p)) in d.itls[i].iter().zip(w.windows(2)).enumerate() {
            let s = (p[1] - p[0]) as f64 / 1e6;
            let err = (c * 1e3 - s).abs();
            // Generous: a shared 2-core machine can hold one read back by a scheduler tick.
            assert!(
                err < 25.0,
                "request {i} gap {k}: client {} ms vs server {s} ms",
                c * 1e3
            );
            gap_err_ms.push(err);
        }
        // Client first-token time (ms since the run started) minus the server's write of the
        // last token that came in the same read (ms since the server started): one constant
        // clock offset plus this request's delivery. A kernel receive stamp is that of the last
        // segment a read took, so a first token read late together with the next k (the k
        // zero gaps that lead its ITLs) carries the stamp of token k's write: exactly so, and
        // that is what this pins, however late the client read.
        let k = d.itls[i].iter().take_while(|&&g| g == 0.0).count();
        first_delay_ms.push((d.start_times[i] + d.ttfts[i]) * 1e3 - w[k] as f64 / 1e6);
    }
    gap_err_ms.sort_by(f64::total_cmp);
    let median_gap_err = gap_err_ms[gap_err_ms.len() / 2];
    assert!(
        median_gap_err < 1.0,
        "median |gap error| {median_gap_err} ms"
    );
    // With the clock offset (the median) removed, every request's first-token stamp sits
    // within a few ms of that write. The kernel stamps inside the server's write syscall and
    // the trace after it returns, so only a server thread held up in the syscall moves one;
    // 20 ms absorbs that on a loaded 2-core machine, and 40 requests at 80/s span ~500 ms, so
    // a wrong pairing would be off by far more.
    let mut sorted = first_delay_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let offset = sorted[sorted.len() / 2];
    for (i, dly) in first_delay_ms.iter().enumerate() {
        assert!(
            (dly - offset).abs() < 20.0,
            "request {i}: first-token stamp {} ms off the server's write of the last token read with it, against the median request",
            dly - offset
        );
    }
    // Fast prefill: TTFT is about one decode step plus delivery, far below 100 ms.
    let ttft = v["median_ttft_ms"].as_f64().unwrap();
    assert!(ttft > 0.0 && ttft < 100.0, "median TTFT {ttft} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_queues_and_is_reported() {
    let mock = start_mock(None).await;
    let cfg = config(
        mock.addr,
        &[
            "--num-prompts",
            "12",
            "--random-input-len",
            "32",
            "--random-output-len",
            "10",
            "--max-concurrency",
            "2",
            "--num-warmups",
            "2",
            "--backend",
            "openai-chat",
            "--percentile-metrics",
            "ttft,e2el",
            "--metric-percentiles",
            "50,99.9",
        ],
    );
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    mock.stop().await;
    let m = &out.metrics;
    assert_eq!((m.completed, m.failed), (12, 0));
    assert!(
        m.max_concurrent_requests <= 2,
        "{}",
        m.max_concurrent_requests
    );
    // Twelve requests, two slots, everything scheduled at 0: most waited for a slot.
    let waited = m.queue_times_s.iter().filter(|&&q| q > 0.005).count();
    assert!(waited >= 6, "queue times {:?}", m.queue_times_s);
    let pairs = out.pairs(false);
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let tail = &keys[keys.len() - 11..];
    assert_eq!(
        tail,
        [
            "mean_ttft_ms",
            "median_ttft_ms",
            "std_ttft_ms",
            "p50_ttft_ms",
            "p99.9_ttft_ms",
            "mean_e2el_ms",
            "median_e2el_ms",
            "std_e2el_ms",
            "p50_e2el_ms",
            "p99.9_e2el_ms",
            "llmspeed"
        ]
    );
    // A closed loop (--max-concurrency, rate inf) has a steady state: ours, since vLLM 0.33
    // writes none, so it is under our key and vLLM's keys stay vLLM's.
    assert!(out.extras["steady_state"].is_object(), "{}", out.extras);
    assert_eq!(out.info.backend, "openai-chat");
}

/// The prompts the server received on its generation endpoint, in the order it logged them.
fn logged_prompts(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["path"] == "/v1/completions" && v["body"]["stream"] == true)
        .map(|v| v["body"]["prompt"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// With `--max-concurrency`, vLLM's client and SGLang's take their slots in the order they
/// create their requests (asyncio's semaphore is first come, first served, and each request's
/// task is created at its send time), so request k is sent k-th. Ours must too, whichever
/// thread runs the dispatcher: here it runs in `bench serve`'s own way (the runtime's main
/// thread) and inside a spawned task (a worker, where tokio runs the task spawned last first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_sends_requests_in_sample_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("prompts.jsonl");
    let prompts: Vec<String> = (0..16).map(|i| format!("prompt number {i}")).collect();
    let lines: String = prompts
        .iter()
        .map(|p| format!("{}\n", serde_json::json!({ "prompt": p })))
        .collect();
    std::fs::write(&data, lines).unwrap();
    for in_a_task in [false, true] {
        let log = dir.path().join(format!("requests-{in_a_task}.jsonl"));
        let mut mc = MockConfig::profile(Profile::Fast);
        mc.request_log = Some(log.clone());
        let mock = start_mock_with(mc).await;
        let cfg = config(
            mock.addr,
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                data.to_str().unwrap(),
                "--disable-shuffle",
                "--skip-chat-template",
                "--num-prompts",
                "16",
                "--custom-output-len",
                "4",
                "--max-concurrency",
                "1",
                "--num-warmups",
                "0",
            ],
        );
        let run = async move {
            run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
                .await
                .map(|out| out.metrics.completed)
                .map_err(|e| e.to_string())
        };
        let completed = match in_a_task {
            false => run.await,
            true => tokio::spawn(run).await.unwrap(),
        }
        .expect("run");
        mock.stop().await;
        assert_eq!(completed, 16);
        assert_eq!(
            logged_prompts(&log),
            prompts,
            "the order the server received them in (dispatcher in a task: {in_a_task})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_requests_are_counted_by_kind() {
    let mock = start_mock(None).await;
    let cfg = config(
        mock.addr,
        &[
            "--num-prompts",
            "5",
            "--model",
            "not-served",
            "--save-detailed",
        ],
    );
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    mock.stop().await;
    assert_eq!((out.metrics.completed, out.metrics.failed), (0, 5));
    assert_eq!(out.extras["failures_by_kind"]["http_status"], 5);
    // The server's own words, once per kind, in the JSON and in the console block.
    let first = &out.extras["first_failure_by_kind"]["http_status"];
    assert_eq!(first["status"], 404, "{first}");
    let msg = first["message"].as_str().unwrap();
    assert!(msg.contains("not-served"), "{msg}");
    let mut console = Vec::new();
    run::report(&cfg, &out, &mut console).expect("report");
    let console = String::from_utf8(console).unwrap();
    assert!(
        console.contains(&format!("First http_status (HTTP 404): {msg}")),
        "{console}"
    );
    assert!(
        out.detailed.errors.iter().all(|e| e.contains("404")),
        "{:?}",
        out.detailed.errors
    );
    let keys: Vec<String> = out.pairs(true).into_iter().map(|(k, _)| k).collect();
    // vLLM 0.33's order: the per-request lists among the totals, latencies and queue times.
    let at = keys
        .iter()
        .position(|k| k == "total_token_throughput")
        .unwrap();
    assert_eq!(
        &keys[at + 1..at + 13],
        [
            "input_lens",
            "output_lens",
            "ttfts",
            "itls",
            "latencies",
            "start_times",
            "queue_times",
            "generated_texts",
            "errors",
            "max_output_tokens_per_s",
            "max_concurrent_requests",
            "rtfx",
        ]
    );
}

#[test]
fn the_binary_runs_and_appends_results() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mock = rt.block_on(start_mock(None));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.json");
    let run_once = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args([
                "bench",
                "serve",
                "--base-url",
                &format!("http://{}", mock.addr),
            ])
            .args([
                "--num-prompts",
                "6",
                "--random-input-len",
                "16",
                "--random-output-len",
                "4",
            ])
            .args([
                "--append-result",
                "--result-filename",
                file.to_str().unwrap(),
            ])
            .args(["--label", "ci", "--metadata", "run=1"])
            .output()
            .unwrap()
    };
    let a = run_once();
    let b = run_once();
    rt.block_on(mock.stop());
    for o in [&a, &b] {
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(stdout.contains("Serving Benchmark Result"), "{stdout}");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["label"], "ci");
        assert_eq!(v["run"], "1", "metadata values stay strings, as in vLLM");
        assert_eq!(v["completed"], 6);
        // As `llmspeed --version` names the binary (tests/version.rs).
        assert_eq!(v["llmspeed"]["version"], llmspeed::VERSION);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_dispatch_and_keeps_what_was_measured() {
    let mock = start_mock(None).await;
    // 40 requests at 20/s would take ~2 s; cancel after 400 ms.
    let cfg = config(
        mock.addr,
        &[
            "--num-prompts",
            "40",
            "--request-rate",
            "20",
            "--random-output-len",
            "200",
        ],
    );
    let cancel = Cancel::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        c.cancel();
    });
    let mut log = Vec::new();
    let out = run::run(&cfg, Clock::new(), &cancel, &mut log)
        .await
        .expect("run");
    mock.stop().await;
    let m = &out.metrics;
    let stop = &out.extras["interrupted"];
    let count = |k: &str| stop[k].as_u64().unwrap_or_else(|| panic!("{k}: {stop}")) as usize;
    let (unsent, cut) = (count("requests_unsent"), count("requests_cut"));
    // Every request once: ran to its end, cut short by the stop, or never sent.
    assert_eq!(count("requests_planned"), 40);
    assert_eq!(m.completed + m.failed + unsent + cut, 40, "{stop}");
    assert!(unsent > 0 && unsent < 40, "{stop}");
    // 200 tokens at 2 ms each outlive the 400 ms, so some were cut: not the server's failures.
    assert!(cut > 0, "{stop}");
    assert!(
        !m.failures.keys().any(|k| k.as_str() == "cancelled"),
        "{:?}",
        m.failures
    );
    // No signal here: the cancel gave no reason.
    assert!(stop["signal"].is_null(), "{stop}");
    assert_eq!(out.info.num_prompts, m.completed + m.failed);
    assert!(String::from_utf8(log).unwrap().contains("interrupted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconnect_opens_one_connection_per_concurrent_request_before_the_start() {
    let mock = start_mock(None).await;
    let run_with = |extra: &'static [&'static str]| {
        let mut argv = vec![
            "--num-prompts",
            "12",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--max-concurrency",
            "4",
        ];
        argv.extend_from_slice(extra);
        config(mock.addr, &argv)
    };
    let mut log = Vec::new();
    let out = run::run(
        &run_with(&["--preconnect"]),
        Clock::new(),
        &Cancel::new(),
        &mut log,
    )
    .await
    .expect("run");
    assert_eq!(out.metrics.completed, 12);
    assert_eq!(out.extras["preconnected"], 4, "{}", out.extras);
    let log = String::from_utf8(log).unwrap();
    assert!(
        log.contains("--preconnect: 4 connections open before the start"),
        "{log}"
    );
    let plain = run::run(
        &run_with(&[]),
        Clock::new(),
        &Cancel::new(),
        &mut Vec::new(),
    )
    .await
    .expect("run");
    assert_eq!(plain.extras["preconnected"], Value::Null);
    mock.stop().await;
}

/// Random prompts on the chat endpoint are the text of random ids, fitted to the asked length
/// as vLLM's `gen_prompt_decode_to_target_len` does: decode, re-encode, and go on from the
/// *re-encoded* ids (cut to the length, or grown). The simulated server's vocabulary, like a
/// real byte-level BPE, re-encodes random ids' text into many more tokens (about 4.6 times:
/// pieces without their leading space fall back to bytes); cutting the original ids by the
/// excess instead had left every prompt at 1 token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_chat_prompts_are_fitted_to_the_asked_length() {
    let mock = start_mock(None).await;
    let cfg = config(
        mock.addr,
        &[
            "--num-prompts",
            "6",
            "--random-input-len",
            "64",
            "--random-output-len",
            "4",
            "--backend",
            "openai-chat",
            "--save-detailed",
        ],
    );
    let out = run::run(&cfg, Clock::new(), &Cancel::new(), &mut Vec::new())
        .await
        .expect("run");
    mock.stop().await;
    assert_eq!((out.metrics.completed, out.metrics.failed), (6, 0));
    assert_eq!(out.extras["prompt_source"], "detokenized_token_ids");
    let asked: Vec<u64> = out.extras["dataset_input_lens"]
        .as_array()
        .expect("dataset_input_lens")
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    // The server's own count of each prompt's text, without special tokens: 64 exactly where
    // the ten rounds found it, never more than one token off.
    assert_eq!(asked.len(), 6);
    for &n in &asked {
        assert!((63..=65).contains(&n), "{asked:?}");
    }
    // The server's usage counts the same text inside its chat template ("user: " before it,
    // "\n\nassistant:" after): a few tokens more than the fitted text, never fewer.
    for (&n, &a) in out.detailed.input_lens.iter().zip(&asked) {
        assert!(n > a && n <= a + 8, "usage {n}, fitted {a}");
    }
}
