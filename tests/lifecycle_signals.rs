//! Stopping a run with a real signal, as a terminal (Ctrl-C: SIGINT) or a supervisor (systemd,
//! Kubernetes, a CI timeout: SIGTERM) does: every command that writes results finishes its
//! files, marks them interrupted with the signal's name and exits 128 + the signal's number.
//! The binary runs as a user runs it (`LLMSPEED_BIN` may point at a release build).

mod support;

use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use support::process::{mock, Proc, PATIENCE};

/// `vllm:num_requests_running` of the server at `url` (`http://127.0.0.1:PORT`).
fn running(url: &str) -> f64 {
    metric(url, "vllm:num_requests_running")
}

/// The value of the first `/metrics` line of the server at `url` that starts with `name`.
fn metric(url: &str, name: &str) -> f64 {
    let addr = url.strip_prefix("http://").expect("an http URL");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the mock");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// Waits until the server runs at least one request (a state that lasts: each request of the
/// tests below streams for seconds).
fn wait_running(url: &str) {
    let t0 = Instant::now();
    while running(url) < 1.0 {
        assert!(t0.elapsed() < PATIENCE, "the server never ran a request");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `bench serve` with `extra` flags against a mock whose requests stream for ~10 s each (5000
/// tokens at 2 ms), its result saved as `r.json` in the returned directory.
fn slow_bench_serve(extra: &[&str]) -> (Proc, String, tempfile::TempDir, Proc) {
    let (server, url) = mock(&["--profile", "fast", "--decode-base-us", "2000"]);
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "serve", "--base-url", url.as_str()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
        "--random-output-len",
        "5000",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "r.json",
    ]);
    let p = Proc::spawn(&args);
    (server, url, dir, p)
}

/// `bench serve` stopped while requests stream: 4 run (each 5000 tokens at 2 ms, ~10 s) and 4
/// wait for a slot. The signal cuts the 4 and the 4 are never sent.
fn bench_serve_stopped_by(sig: libc::c_int, name: &str, code: i32) {
    let (_server, url, dir, mut p) = slow_bench_serve(&[
        "--num-prompts",
        "8",
        "--max-concurrency",
        "4",
        "--random-input-len",
        "16",
    ]);
    p.wait_line("sending 8 requests");
    wait_running(&url);
    p.signal(sig);
    assert_eq!(p.exit_code(), code, "{}", p.output());
    let out = p.output();
    assert!(
        out.contains(&format!("interrupted by {}", signal_words(name))),
        "{out}"
    );

    let v = read_json(&dir.path().join("r.json"));
    let ls = &v["llmspeed"];
    let stop = &ls["interrupted"];
    assert_eq!(stop["signal"], name, "{ls}");
    assert_eq!(stop["requests_planned"], 8, "{ls}");
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    let (unsent, cut) = (n(&stop["requests_unsent"]), n(&stop["requests_cut"]));
    let (completed, failed) = (n(&v["completed"]), n(&v["failed"]));
    // Every request is accounted for exactly once.
    assert_eq!(completed + failed + unsent + cut, 8, "{v}");
    // The 4 waiting for a slot were never sent; at least one running was cut.
    assert!(unsent >= 4, "{stop}");
    assert!(cut >= 1, "{stop}");
    // Requests never sent are not requests; cut ones are not the server's failures.
    assert_eq!(n(&v["num_prompts"]), completed + failed, "{v}");
    assert!(
        ls["failures_by_kind"].get("cancelled").is_none(),
        "{}",
        ls["failures_by_kind"]
    );
}

#[test]
fn bench_serve_ctrl_c_exits_130_with_a_result_marked_interrupted() {
    bench_serve_stopped_by(libc::SIGINT, "SIGINT", 130);
}

#[test]
fn bench_serve_sigterm_exits_143_with_a_result_marked_interrupted() {
    bench_serve_stopped_by(libc::SIGTERM, "SIGTERM", 143);
}

/// `matrix --mock` stopped in its decode cell (a 60 s window).
fn matrix_stopped_by(sig: libc::c_int, name: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let mut p = Proc::spawn(&[
        "matrix",
        "--mock",
        "--no-progress",
        "--contexts",
        "1k",
        "--prefill-contexts",
        "1k",
        "--concurrency",
        "2",
        "--duration",
        "60",
        "--max-tokens",
        "64",
        "--out",
        out.to_str().unwrap(),
        "--prompt-cache",
        dir.path().join("cache").to_str().unwrap(),
    ]);
    // Printed once both signals are watched.
    p.wait_line("simulated server");
    p.wait_line("tok/s live");
    p.signal(sig);
    assert_eq!(p.exit_code(), code, "{}", p.output());
    let log = p.output();
    assert!(
        log.contains(&format!("[matrix] stopping after {}", signal_words(name))),
        "{log}"
    );
    let v = read_json(&out.join("results.json"));
    assert_eq!(
        v["metadata"]["interrupted"],
        format!("stopped by {name}"),
        "{}",
        v["metadata"]
    );
    // The rendered report says so too.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(&format!("stopped by {name}")), "{md}");
}

fn signal_words(name: &str) -> &'static str {
    match name {
        "SIGINT" => "Ctrl-C (SIGINT)",
        _ => "SIGTERM",
    }
}

#[test]
fn matrix_sigterm_is_ctrl_c() {
    matrix_stopped_by(libc::SIGTERM, "SIGTERM", 143);
}

#[test]
fn matrix_ctrl_c_exits_130_marked_interrupted() {
    matrix_stopped_by(libc::SIGINT, "SIGINT", 130);
}

/// `selftest` of 4 streams of 200000 tokens at 1 ms (minutes), the first token a minute after
/// each request reaches the server, so a stop sent when the run starts comes before any token
/// (with the first token at once, some came in before a stop on a loaded machine), with `extra`
/// flags.
fn long_selftest(extra: &[&str]) -> Proc {
    let mut args = vec![
        "selftest",
        "--streams",
        "4",
        "--tokens",
        "200000",
        "--gap",
        "1ms",
        "--first-token",
        "60s",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&args)
}

/// `selftest` stopped mid-run (4 streams of 200000 tokens at 1 ms would take minutes): the
/// report comes out, says it is partial, and every stream is counted as cut.
#[test]
fn selftest_sigterm_prints_a_partial_report_and_exits_143() {
    let mut p = long_selftest(&["--json"]);
    p.wait_line("SIGTERM stops early");
    p.signal(libc::SIGTERM);
    assert_eq!(p.exit_code(), 143, "{}", p.output());
    let v: Value =
        serde_json::from_str(p.stdout().trim()).unwrap_or_else(|e| panic!("{e}: {}", p.output()));
    assert_eq!(v["interrupted"], "SIGTERM", "{v}");
    assert_eq!(v["errors"]["cancelled"], 4, "{v}");
    // No stream ended, so no token was measured: no figure per token (before: CPU / 1).
    assert_eq!(v["tokens"], 0, "{v}");
    for k in per_token_cpu_keys() {
        assert!(v[k].is_null(), "{k}: {v}");
    }
    assert!(
        p.output().contains("interrupted by SIGTERM"),
        "{}",
        p.output()
    );
}

/// `bench serve` stopped in a set-up step, before any benchmark request: the first signal ends
/// the step (before: the step ignored it and only a second signal ended the process), the error
/// names the step, nothing is saved, and the exit is 128 + the signal.
fn bench_serve_setup_stopped(args: &[&str], step_line: &str, sig: libc::c_int, step: &str) {
    let (mut p, dir) = bench_serve_saving(args);
    p.wait_line(step_line);
    setup_stopped(p, &dir, sig, step);
}

/// `bench serve` with `args`, saving its result in the returned folder.
fn bench_serve_saving(args: &[&str]) -> (Proc, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![
        "bench",
        "serve",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        dir.path().to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let p = Proc::spawn(&all);
    (p, dir)
}

/// Sends `sig` to `p`, in a set-up step: the step ends at once, named, and nothing is saved.
fn setup_stopped(mut p: Proc, dir: &tempfile::TempDir, sig: libc::c_int, step: &str) {
    p.signal(sig);
    let code = p.exit_code();
    let out = p.output();
    let name = match sig {
        libc::SIGINT => "SIGINT",
        _ => "SIGTERM",
    };
    assert_eq!(code, 128 + sig, "{out}");
    assert!(
        out.contains(&format!(
            "stopped by {name} while {step}: nothing was measured"
        )),
        "{out}"
    );
    assert!(!out.contains("again:"), "one signal was enough: {out}");
    let saved: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        saved.is_empty(),
        "nothing measured, nothing saved: {saved:?}"
    );
}

#[test]
fn bench_serve_ctrl_c_in_the_ready_check_ends_it_at_once() {
    let url = format!("http://127.0.0.1:{}", support::process::closed_port());
    bench_serve_setup_stopped(
        &[
            "--base-url",
            &url,
            "--num-prompts",
            "1",
            "--ready-check-timeout-sec",
            "3600",
        ],
        "waiting up to 3600 s",
        libc::SIGINT,
        "waiting for the server to be ready (GET /v1/models)",
    );
}

/// 100000 random prompts of 64 tokens, 4 tokens out: a set-up that sizes each takes minutes.
const MANY_SHORT: [&str; 6] = [
    "--num-prompts",
    "100000",
    "--random-input-len",
    "64",
    "--random-output-len",
    "4",
];

#[test]
fn bench_serve_sigterm_while_fitting_prompts_through_tokenize_ends_it_at_once() {
    // 100000 random prompts on the chat endpoint: each is turned into text through the server's
    // /detokenize and fitted to its length with /tokenize, round after round (minutes).
    let (_server, url) = mock(&["--profile", "fast"]);
    bench_serve_setup_stopped(
        &[
            &["--base-url", &url, "--backend", "openai-chat"],
            &MANY_SHORT[..],
        ]
        .concat(),
        "fitting 100000 prompts to their lengths",
        libc::SIGTERM,
        "fitting the prompts to their lengths (/detokenize, /tokenize)",
    );
}

/// `bench serve --multi-turn` stopped while turns stream: 6 conversations of 3 turns, 2 at a
/// time, each turn 5000 tokens at 2 ms (~10 s). The result says it was stopped, and counts
/// every conversation and turn once: ended on its own, cut, or never sent. Before: no
/// `interrupted` block, and the cut turns counted as the server's failures.
#[test]
fn bench_serve_multi_turn_ctrl_c_writes_an_interrupted_block() {
    let (_server, url, dir, mut p) = slow_bench_serve(&[
        "--backend",
        "openai-chat",
        "--multi-turn",
        "--num-prompts",
        "6",
        "--multi-turn-num-turns",
        "3",
        "--multi-turn-concurrency",
        "2",
        "--random-input-len",
        "16",
        "--ignore-eos",
    ]);
    p.wait_line("multi-turn: 6 conversations");
    wait_running(&url);
    p.signal(libc::SIGINT);
    assert_eq!(p.exit_code(), 130, "{}", p.output());
    assert!(p.output().contains("turns cut short"), "{}", p.output());
    let v = read_json(&dir.path().join("r.json"));
    let stop = &v["llmspeed"]["interrupted"];
    assert_eq!(stop["signal"], "SIGINT", "{v}");
    let n = |k: &str| {
        stop[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} is not a count: {stop}"))
    };
    assert_eq!(n("conversations_planned"), 6, "{stop}");
    assert_eq!(n("turns_planned"), 18, "{stop}");
    assert_eq!(
        n("conversations_finished") + n("conversations_cut") + n("conversations_unsent"),
        6,
        "{stop}"
    );
    // No turn failed, so every planned turn is finished, cut or unsent.
    assert_eq!(
        n("turns_finished") + n("turns_cut") + n("turns_unsent"),
        18,
        "{stop}"
    );
    // The 2 conversations in flight were cut; at least the 4 waiting were never sent.
    assert!(n("turns_cut") >= 1 && n("conversations_cut") >= 1, "{stop}");
    assert!(n("conversations_unsent") >= 4, "{stop}");
    // Cut turns are not the server's failures; the figures cover the finished turns.
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["conversations_failed"], 0, "{v}");
    assert_eq!(v["completed"].as_u64(), Some(n("turns_finished")), "{v}");
}

/// `selftest --keep --json --external` with `llmspeed bench serve` (and `client_flags`) as the
/// command, and `flags`: the running self-test, with its server's URL once the command started
/// (the command first writes it where the test reads it).
fn external_selftest(flags: &[&str], client_flags: &str) -> (Proc, String) {
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("url");
    let cmd = format!(
        "echo {{url}} > {}; exec {} bench serve --base-url {{url}} --model {{model}} \
         --dataset-name custom --dataset-path {{dataset}} --num-prompts {{streams}} \
         --custom-output-len {{tokens}} --ignore-eos --request-id-prefix {{prefix}} \
         --save-result --save-detailed --result-dir {{result_dir}} --disable-tqdm {client_flags}",
        url_file.display(),
        support::process::bin()
    );
    let mut args = vec!["selftest", "--json", "--keep", "--external", cmd.as_str()];
    args.extend_from_slice(flags);
    let mut p = Proc::spawn(&args);
    p.wait_line("stops it early");
    let t0 = Instant::now();
    let url = loop {
        match std::fs::read_to_string(&url_file) {
            Ok(u) if u.ends_with('\n') => break u.trim().to_string(),
            _ => assert!(t0.elapsed() < PATIENCE, "the command never started"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (p, url)
}

/// The self-test's exit after `sig` (128 + it, the partial report announced), its JSON report,
/// and the result the command saved in the kept work folder (removed when the guard drops).
fn stopped_external(mut p: Proc, sig: libc::c_int, name: &str) -> (Value, Value, RemoveOnDrop) {
    p.signal(sig);
    assert_eq!(p.exit_code(), 128 + sig, "{}", p.output());
    assert!(
        p.output().contains(&format!(
            "interrupted by {}: the report above is partial",
            signal_words(name)
        )),
        "{}",
        p.output()
    );
    let v: Value =
        serde_json::from_str(p.stdout().trim()).unwrap_or_else(|e| panic!("{e}: {}", p.output()));
    let work = std::path::PathBuf::from(v["work_dir"].as_str().expect("--keep kept it"));
    let cleanup = RemoveOnDrop(work.clone());
    assert_eq!(v["interrupted"], name, "{v}");
    let result = std::fs::read_dir(work.join("result"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap_or_else(|| panic!("the command saved no result in {}", work.display()));
    // The command got the same signal and ended cleanly: its own result says so.
    let r = read_json(&result);
    assert_eq!(r["llmspeed"]["interrupted"]["signal"], name, "{r}");
    (v, r, cleanup)
}

/// `selftest --external CMD` stopped while the command streams (4 streams of 200000 tokens at
/// 1 ms would take minutes): the command gets the signal and ends as it does on its own (here
/// `llmspeed bench serve`, which saves its partial result), what it wrote is scored, and the
/// report says it is partial. Before: SIGTERM ended the self-test at once, with no report.
#[test]
fn selftest_external_sigterm_stops_the_command_and_prints_a_partial_report() {
    let (p, url) = external_selftest(
        &["--streams", "4", "--tokens", "200000", "--gap", "1ms"],
        "",
    );
    wait_running(&url);
    let (v, _, _cleanup) = stopped_external(p, libc::SIGTERM, "SIGTERM");
    // Every stream was cut, and the server had streamed tokens when the stop came.
    assert_eq!(v["errors"]["cancelled"], 4, "{v}");
    assert_eq!(v["failed_streams"], 4, "{v}");
    assert_eq!(v["tokens"], 0, "{v}");
    assert!(v["trace_records"].as_u64().unwrap() > 0, "{v}");
    // No token measured: no CPU per token, over the stream or the whole process.
    for k in per_token_cpu_keys()
        .into_iter()
        .chain(["client_cpu_whole_run_ns_per_token"])
    {
        assert!(v[k].is_null(), "{k}: {v}");
    }
}

/// The command runs its 3 streams one at a time (`--max-concurrency 1`, 1500 tokens at 1 ms
/// each) and is stopped (Ctrl-C) in the second: the first, which it finished, is scored token
/// by token against the trace; the other two are cut.
#[test]
fn selftest_external_ctrl_c_scores_the_requests_the_command_finished() {
    let (p, url) = external_selftest(
        &["--streams", "3", "--tokens", "1500", "--gap", "1ms"],
        "--max-concurrency 1",
    );
    // 1600 tokens generated: the first request's 1500 (the command's own probes of the server
    // ask for a handful) and the second's first, which the command sends only once it has
    // read the first to its end.
    let t0 = Instant::now();
    while metric(&url, "vllm:generation_tokens_total") < 1600.0 {
        assert!(t0.elapsed() < PATIENCE, "the second request never streamed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (v, r, _cleanup) = stopped_external(p, libc::SIGINT, "SIGINT");
    assert_eq!(r["completed"], 1, "{r}");
    assert_eq!(v["tokens"], 1500, "{v}");
    assert_eq!(v["tokens_matched"], 1500, "{v}");
    assert_eq!(v["requests_itl_mismatch"], 0, "{v}");
    assert_eq!(v["errors"]["cancelled"], 2, "{v}");
    assert_eq!(v["failed_streams"], 2, "{v}");
    assert!(v["gap_error_us_max"].as_f64().unwrap() > 0.0, "{v}");
}

/// Removes a folder when dropped (also when the test fails).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The self-test's client CPU figures per token.
fn per_token_cpu_keys() -> [&'static str; 3] {
    [
        "client_cpu_ns_per_token",
        "client_cpu_user_ns_per_token",
        "client_cpu_sys_ns_per_token",
    ]
}

/// `selftest` stopped before any stream ended, its report printed as text: it says no token
/// was measured instead of a CPU time per token (before: the CPU time divided by 1, printed as
/// ns/token).
#[test]
fn selftest_stopped_before_any_token_prints_no_cpu_per_token() {
    let mut p = long_selftest(&[]);
    p.wait_line("SIGTERM stops early");
    p.signal(libc::SIGINT);
    assert_eq!(p.exit_code(), 130, "{}", p.output());
    let out = p.stdout();
    let cpu = out
        .lines()
        .find(|l| l.trim_start().starts_with("client CPU"))
        .unwrap_or_else(|| panic!("no client CPU line: {out}"));
    assert!(cpu.contains("no token was measured"), "{cpu}");
    assert!(!out.contains("ns/token"), "{out}");
}

#[test]
fn bench_serve_sigint_while_loading_a_dataset_counted_through_tokenize_ends_it_at_once() {
    // 100000 prompts, each counted through the server's /tokenize as the dataset loads.
    let (_server, url) = mock(&["--profile", "fast"]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("prompts.jsonl");
    let mut text = String::new();
    for i in 0..100_000 {
        text.push_str(&format!(
            "{{\"prompt\": \"the prompt number {i} of many\"}}\n"
        ));
    }
    std::fs::write(&data, text).unwrap();
    bench_serve_setup_stopped(
        &[
            "--base-url",
            &url,
            "--dataset-name",
            "custom",
            "--dataset-path",
            data.to_str().unwrap(),
            "--num-prompts",
            "100000",
            "--custom-output-len",
            "4",
        ],
        "its prompts counted through the server's /tokenize",
        libc::SIGINT,
        "loading the dataset",
    );
}

/// One request after one warm-up request, each streaming for ~10 s ([`slow_bench_serve`]).
const ONE_WARMED: [&str; 7] = [
    "--num-prompts",
    "1",
    "--num-warmups",
    "1",
    "--random-input-len",
    "16",
    "--ignore-eos",
];

#[test]
fn bench_serve_sigterm_while_warming_up_ends_it_at_once() {
    let (_server, _url, dir, mut p) = slow_bench_serve(&ONE_WARMED);
    p.wait_line("warming up with 1 request(s)");
    setup_stopped(p, &dir, libc::SIGTERM, "warming up");
}

#[test]
fn bench_serve_ctrl_c_while_sizing_prompts_as_text_ends_it_at_once() {
    // The server refuses every completion (so token ids are not sent) but counts tokens: each
    // of 100000 random prompts becomes natural text sized through /tokenize (minutes).
    let (_server, url) = mock(&["--profile", "fast", "--fault", "status=500"]);
    bench_serve_setup_stopped(
        &[&["--base-url", &url], &MANY_SHORT[..]].concat(),
        "prompts are natural text sized by",
        libc::SIGINT,
        "sizing the prompts as natural text",
    );
}

/// `bench serve --num-runs 2` stopped in the second run's warm-up: the first run's result is
/// saved and the user is told so, with the step the stop ended. Before: the error alone, the
/// first run's file on disk but not named.
#[test]
fn bench_serve_stopped_in_a_later_runs_set_up_names_what_was_saved() {
    let (_server, url, dir, mut p) =
        slow_bench_serve(&[&["--num-runs", "2"], &ONE_WARMED[..]].concat());
    p.wait_line("run 2/2");
    p.wait_line("warming up with 1 request(s)");
    wait_running(&url);
    p.signal(libc::SIGTERM);
    assert_eq!(p.exit_code(), 143, "{}", p.output());
    let out = p.output();
    assert!(
        out.contains("run 2/2: stopped by SIGTERM while warming up"),
        "{out}"
    );
    let saved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "the first run's result only: {saved:?}");
    assert!(
        out.contains(&format!("saved {}", saved[0].display())),
        "{out}"
    );
    // It is the first run's whole result.
    let v = read_json(&saved[0]);
    assert_eq!(v["completed"], 1, "{v}");
    assert!(v["llmspeed"].get("interrupted").is_none(), "{v}");
}

/// `selftest --external` killed with SIGKILL (no handler runs): nothing of the command lives
/// on, neither the shell running it nor what that shell started. Before: the command, in its
/// own process group, kept running.
#[test]
fn selftest_external_killed_leaves_no_command_running() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The shell starts a child and waits for it; both write their ids where the test reads.
    let cmd = format!(
        "sleep 300 & echo $! > {p}; echo $$ >> {p}; wait # {{url}}",
        p = pids.display()
    );
    let mut p = Proc::spawn(&["selftest", "--streams", "1", "--external", cmd.as_str()]);
    let t0 = Instant::now();
    let ids: Vec<libc::pid_t> = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let ids: Vec<_> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if ids.len() == 2 {
            break ids;
        }
        assert!(t0.elapsed() < PATIENCE, "the command never started: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    p.signal(libc::SIGKILL);
    p.wait();
    let t0 = Instant::now();
    let left = loop {
        let left: Vec<_> = ids.iter().copied().filter(|&id| alive(id)).collect();
        if left.is_empty() || t0.elapsed() > Duration::from_secs(20) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for &id in &left {
        // SAFETY: kill(2) on a process this test's command started; no memory is involved.
        unsafe {
            libc::kill(id, libc::SIGKILL);
        }
    }
    assert!(
        left.is_empty(),
        "still running after the self-test died: {left:?}"
    );
}

/// Whether process `id` runs (a zombie, dead but not yet reaped, does not).
fn alive(id: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{id}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A forwarder on 127.0.0.1 (port 0) to the server at `to` (`http://127.0.0.1:PORT`), with
/// the smallest accept queue. Until [`Forwarder::close`] it passes every connection on; after,
/// it accepts none and its queue is kept full, so every later connect hangs (the kernel drops
/// the SYNs of a listener whose queue is full).
struct Forwarder {
    url: String,
    listener: std::net::TcpListener,
    closing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
    held: Vec<std::net::TcpStream>,
}

impl Forwarder {
    fn start(to: &str) -> Forwarder {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::os::fd::FromRawFd;
        use std::sync::atomic::Ordering;
        let to = to.strip_prefix("http://").expect("an http URL").to_string();
        // SAFETY: plain socket calls on a socket this test creates and then owns through the
        // listener; `addr` lives across the bind.
        let listener = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket");
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let bound = libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len);
            assert_eq!(bound, 0, "bind");
            assert_eq!(libc::listen(fd, 0), 0, "listen");
            TcpListener::from_raw_fd(fd)
        };
        let url = format!("http://{}", listener.local_addr().unwrap());
        let closing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (l, c) = (listener.try_clone().unwrap(), closing.clone());
        let accepting = std::thread::spawn(move || {
            for client in l.incoming() {
                if c.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&to).expect("connect to the server");
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        Forwarder {
            url,
            listener,
            closing,
            accepting: Some(accepting),
            held: Vec::new(),
        }
    }

    /// Accepts no more connections, and fills the accept queue with one of its own.
    fn close(&mut self) {
        let addr = self.listener.local_addr().unwrap();
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // The accepting thread takes this one, sees it is closing, and ends...
        self.held.push(std::net::TcpStream::connect(addr).unwrap());
        self.accepting.take().unwrap().join().unwrap();
        // ...and this one fills the queue no one takes from any more.
        self.held.push(std::net::TcpStream::connect(addr).unwrap());
    }
}

#[test]
fn bench_serve_sigterm_while_preconnecting_ends_it_at_once() {
    // The warm-up streams 1000 tokens at 2 ms through the forwarder, which is closed while it
    // does: the 256 connections `--preconnect` then wants (beyond the few the set-up left
    // open) hang.
    let (_server, mock_url) = mock(&["--profile", "fast", "--decode-base-us", "2000"]);
    let mut fwd = Forwarder::start(&mock_url);
    let (mut p, dir) = bench_serve_saving(&[
        "--base-url",
        &fwd.url,
        "--num-prompts",
        "256",
        "--max-concurrency",
        "256",
        "--num-warmups",
        "1",
        "--random-input-len",
        "16",
        "--random-output-len",
        "1000",
        "--ignore-eos",
        "--preconnect",
    ]);
    p.wait_line("warming up with 1 request(s)");
    wait_running(&mock_url);
    fwd.close();
    // The warm-up ends; the connects start and hang.
    let t0 = Instant::now();
    while running(&mock_url) > 0.0 {
        assert!(t0.elapsed() < PATIENCE, "the warm-up never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    setup_stopped(p, &dir, libc::SIGTERM, "opening connections (--preconnect)");
}
