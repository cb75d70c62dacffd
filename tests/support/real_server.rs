//! What the real-server suites (`tests/real_llama.rs`, `tests/real_vllm.rs`,
//! `tests/real_llama_cpp_python.rs`) share: running the binary as a user does (and its `matrix`
//! and `bench serve` runs in the shape every suite uses), finding a script's cached model,
//! starting a server process that dies with the test, the rule for a missing server, and an
//! HTTP client of their own (not llmspeed's) to ask the server for its own counts.
#![allow(dead_code)]

use llmspeed::analysis::client_lag::late_writes_alone;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs the binary with a deadline; the output, whatever the exit status.
pub fn llmspeed(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(args)
        .env("XDG_CACHE_HOME", prompt_cache_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn llmspeed");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A prompt cache of this test process only: never a stale prompt from another run.
pub fn prompt_cache_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
        .path()
        .to_path_buf()
}

pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `stream` of `prompt` on `url`'s `model`, at most `max_tokens` tokens, with `extra`.
pub fn stream(
    url: &str,
    model: &str,
    prompt: &str,
    max_tokens: &str,
    extra: &[&str],
    limit: Duration,
) -> Output {
    let mut args = vec![
        "stream",
        "--base-url",
        url,
        "--model",
        model,
        "--prompt",
        prompt,
        "--max-tokens",
        max_tokens,
    ];
    args.extend_from_slice(extra);
    llmspeed(&args, limit)
}

/// The summary line (the last) of a `stream --json` that must have succeeded; `what` names the
/// run in the failure message.
pub fn stream_summary(o: &Output, what: &str) -> Value {
    assert!(o.status.success(), "{what}: {}", text(o));
    json_lines(o)
        .pop()
        .unwrap_or_else(|| panic!("{what}: no JSON line: {}", text(o)))
}

/// `probe --json` on `url`: it must succeed; its JSON parsed.
pub fn probe(url: &str, limit: Duration) -> Value {
    let o = llmspeed(&["probe", "--base-url", url, "--json"], limit);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

/// `matrix` on `url` with short windows (2 s, the readiness gate stable for 0.5 s and given up
/// after 20 s, loop detection off) and `extra`; `results.json` parsed.
pub fn matrix(url: &str, out: &Path, extra: &[&str], limit: Duration) -> (Output, Value) {
    let mut args = vec![
        "matrix",
        "--base-url",
        url,
        "--out",
        out.to_str().unwrap(),
        "--duration",
        "2",
        "--ready-stable",
        "0.5",
        "--ready-timeout",
        "20",
        "--loop-min-span",
        "100000",
    ];
    args.extend_from_slice(extra);
    let o = llmspeed(&args, limit);
    let json = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|e| panic!("no results.json ({e}): {}", text(&o)));
    (o, serde_json::from_str(&json).unwrap())
}

/// The decode cell of a `results.json` at `context` x `concurrency`.
pub fn cell(r: &Value, context: u64, concurrency: u64) -> &Value {
    r["decode"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["context"] == context && c["concurrency"] == concurrency)
        .unwrap_or_else(|| panic!("no cell {context} x {concurrency}"))
}

/// `bench serve` on `url` of `n` requests, at most `conc` at once, with `--ignore-eos` and a
/// detailed result `r.json` in `dir` ([`bench_result`]), and `extra`.
pub fn bench_serve(
    url: &str,
    model: &str,
    dir: &Path,
    n: &str,
    conc: &str,
    extra: &[&str],
) -> Output {
    let mut args = vec![
        "bench",
        "serve",
        "--base-url",
        url,
        "--model",
        model,
        "--num-prompts",
        n,
        "--max-concurrency",
        conc,
        "--ignore-eos",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ];
    args.extend_from_slice(extra);
    llmspeed(&args, Duration::from_secs(300))
}

/// A custom dataset of `n` questions in `dir/prompts.jsonl` (`Question {i}: how fast is a server
/// that reads {7i} words of context?`); its path.
pub fn question_prompts(dir: &Path, n: usize) -> PathBuf {
    let data = dir.join("prompts.jsonl");
    let mut lines = String::new();
    for i in 0..n {
        lines.push_str(&format!(
            "{{\"prompt\": \"Question {i}: how fast is a server that reads {} words of context?\"}}\n",
            i * 7
        ));
    }
    std::fs::write(&data, lines).unwrap();
    data
}

/// The result [`bench_serve`] wrote in `dir`.
pub fn bench_result(dir: &Path, o: &Output) -> Value {
    let json = std::fs::read_to_string(dir.join("r.json"))
        .unwrap_or_else(|e| panic!("no result ({e}): {}", text(o)));
    serde_json::from_str(&json).unwrap()
}

/// What a `bench serve` result must say on any real server: every request done, exact output
/// counts (`ignore_eos`: the server generated exactly what was asked, counted from usage), input
/// lengths that are the server's own counts (`usage.prompt_tokens`) and add up both to
/// `total_input_tokens` and to `prompt_delta`, the growth of the server's own prompt-token
/// counters over the run (which also saw the probe's few one-token requests), and dataset prompts
/// within 1% of `input_len`. Returns each request's (server-counted, dataset) input length, for
/// the engine's own rule between the two.
pub fn check_bench_counts(
    o: &Output,
    r: &Value,
    n: u64,
    input_len: Option<u64>,
    output_len: u64,
    prompt_delta: f64,
) -> Vec<(u64, u64)> {
    assert!(o.status.success(), "{}", text(o));
    assert_eq!(r["completed"], n, "{}", text(o));
    assert_eq!(r["failed"], 0, "{}", text(o));
    assert_eq!(r["total_output_tokens"], n * output_len, "{}", text(o));
    let ext = &r["llmspeed"];
    assert_eq!(ext["input_lens_from_server_usage"], n, "{ext}");
    let numbers = |v: &Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let lens = numbers(&r["input_lens"]);
    let asked = numbers(&ext["dataset_input_lens"]);
    assert_eq!(lens.len() as u64, n);
    let sum: u64 = lens.iter().sum();
    assert_eq!(r["total_input_tokens"], sum);
    let extra = prompt_delta - sum as f64;
    assert!(
        (0.0..=64.0).contains(&extra),
        "the server took in {prompt_delta} prompt tokens, we report {sum}"
    );
    if let Some(want) = input_len {
        for dataset in &asked {
            assert!(
                dataset.abs_diff(want) <= want / 100 + 1,
                "{dataset} vs {want}"
            );
        }
    }
    lens.into_iter().zip(asked).collect()
}

/// A real engine at the suites' shapes is not upstream-batched: `upstream_batched` false and the
/// share of tokens that came batched under the threshold (docs/methodology.md, "Upstream
/// batching", with the shares measured on each engine). Returns that share, printed for the log.
pub fn assert_not_upstream_batched(r: &Value, what: &str) -> f64 {
    use llmspeed::analysis::batching::BATCHED_SHARE;
    let lag = &r["llmspeed"]["client_lag"];
    assert_eq!(lag["upstream_batched"], false, "{what}: {lag}");
    let share = lag["tokens_batched_percent"]
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: no share batched: {lag}"));
    eprintln!(
        "{what}: {share:.1}% of tokens batched ({} in events of several), stamps {}",
        lag["tokens_in_multi_token_events_percent"], lag["stamp_source"]
    );
    assert!(share < 100.0 * BATCHED_SHARE, "{what}: {lag}");
    share
}

pub fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed`, where the scripts cache their builds.
pub fn scripts_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default()
        .join("llmspeed")
}

/// The newest entry of a script's cache folder that `is_model` accepts (a model's name changes
/// with the scripts that write it); `cache/placeholder` when there is none.
pub fn newest_model(
    cache: &Path,
    placeholder: &str,
    is_model: impl Fn(&std::fs::DirEntry) -> bool,
) -> PathBuf {
    std::fs::read_dir(cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| is_model(e))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .unwrap_or_else(|| cache.join(placeholder))
}

/// A server process whose output is read line by line into `log`, and the port it printed.
pub struct Spawned {
    pub child: Child,
    pub port: u16,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Start `cmd` (a server binding 127.0.0.1:0) so that it dies with the test process, even when
/// a test panics; wait up to `wait` for a line of its output that `port_of` reads a port from.
/// A server that prints none is killed and the test fails with its output.
pub fn spawn_logged(
    cmd: &mut Command,
    what: &str,
    port_of: fn(&str) -> Option<u16>,
    wait: Duration,
) -> Spawned {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(target_os = "linux")]
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<u16>();
    for pipe in [
        Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stdout.take().unwrap()),
    ] {
        let (log, tx) = (log.clone(), tx.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(port) = port_of(&line) {
                    let _ = tx.send(port);
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    let Ok(port) = rx.recv_timeout(wait) else {
        let _ = child.kill();
        panic!(
            "{what} printed no listening address:\n{}",
            log.lock().unwrap().join("\n")
        );
    };
    Spawned { child, port, log }
}

/// A real component is missing: a failure under `CI=true` (CI must provide it), elsewhere a
/// loud "NOT RUN" and `None`.
pub fn missing<T>(msg: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("NOT RUN: {msg}");
    None
}

/// A port nobody listens on now, chosen by the kernel (bind 127.0.0.1:0, then free it), for a
/// server that takes its port as a flag.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// One request on its own connection with `Connection: close`; the body read to EOF.
/// Non-streaming answers (llama.cpp, uvicorn) come with Content-Length.
pub fn raw_request(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).is_err() || s.write_all(body.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return (0, text);
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// A counter or gauge of a Prometheus page, summed over its label sets; `None` when absent.
pub fn metric(page: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let key = key.split('{').next().unwrap_or(key);
        if key == name {
            *found.get_or_insert(0.0) += value.parse::<f64>().ok()?;
        }
    }
    found
}

/// A histogram's cumulative buckets `(le, count)` in page order, summed over label sets
/// other than `le`; `+Inf` is `f64::INFINITY`.
pub fn histogram(page: &str, name: &str) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for line in page.lines().filter(|l| l.starts_with(&bucket)) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(le) = key.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::NAN)
        };
        let v: f64 = value.parse().unwrap_or(f64::NAN);
        match out.iter_mut().find(|(l, _)| *l == le) {
            Some((_, c)) => *c += v,
            None => out.push((le, v)),
        }
    }
    out
}

/// A matrix cell run with `--packet-stamps` against a real server whose token rate one client
/// core outruns (vLLM's and llama.cpp's in the suite): it is Valid, its reads packet-stamped.
/// With socket stamps a full-suite run once marked vLLM's 1K x 4 Client-bound (its TTFT p50
/// known only to +-8.6 ms: one of its 4 first tokens shared a read with the second, on 2 cores
/// shared with the engine); packet stamps know each token to their resolution however late the
/// client reads, so no stamp bound may mark the cell. The one thing they cannot vouch for is
/// the client writing its requests late: a cell marked for that alone is accepted, with its
/// reason printed.
/// A C-stream cell as the server counted it: its running count, sampled at 1 Hz or more, peaks
/// at C, and `avg_active_requests` is the samples' mean. (Not "the mean is C": a sample taken
/// while the streams were between requests sees fewer, a true reading; CI saw 2, 2, 0 at C = 2
/// on llama.cpp while both streams reconnected.)
pub fn assert_server_ran(cell: &Value, c: u64, name: &str) {
    let running: Vec<f64> = cell["server_samples"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: {cell}"))
        .iter()
        .map(|s| s["running"].as_f64().unwrap())
        .collect();
    assert!(!running.is_empty() && running.len() < 600, "{name}: {cell}");
    let peak = running.iter().copied().fold(f64::MIN, f64::max);
    assert_eq!(peak, c as f64, "{name}: running samples {running:?}");
    let mean = running.iter().sum::<f64>() / running.len() as f64;
    let avg = cell["avg_active_requests"].as_f64().unwrap();
    assert!(
        (avg - mean).abs() < 1e-9,
        "{name}: avg {avg}, samples' mean {mean}"
    );
}

pub fn assert_client_kept_up(cell: &Value, name: &str, o: &Output) {
    let lag = &cell["client_lag"];
    assert_eq!(lag["stamp_source"], "packet", "{name}: {lag}\n{}", text(o));
    let reasons: Vec<&str> = lag["client_bound_reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: {lag}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    match cell["status"]["kind"].as_str() {
        Some("valid") => assert!(reasons.is_empty(), "{name}: {lag}"),
        Some("client_bound") => {
            assert!(
                late_writes_alone(&reasons),
                "{name}: a stamp bound marked a packet-stamped cell: {reasons:?}\n{cell}"
            );
            eprintln!("{name}: Client-bound by dispatch lag: {reasons:?}");
        }
        other => panic!("{name}: {other:?}\n{cell}\n{}", text(o)),
    }
}
