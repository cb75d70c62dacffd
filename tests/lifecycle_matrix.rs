//! `llmspeed matrix` run as a user runs it: the binary (`LLMSPEED_BIN`, else the one cargo
//! built), real signals, a simulated server in its own process killed mid-cell. Asserts on exit
//! codes, messages and the files left behind: a cell stopped inside its window, `--resume` of a
//! `--mock` run, a server that dies, and the prefill contexts of `--mock`. No timing is
//! asserted: every wait is for a line or an exit, with a limit far above what it needs.

use llmspeed::matrix::status::CellStatus;
use llmspeed::report::{files, MatrixReport};
use llmspeed::timeline::ErrorKind;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The longest any wait here may take before the test gives up (a loaded 2-core machine runs
/// these in seconds).
const LIMIT: Duration = Duration::from_secs(300);

fn bin() -> PathBuf {
    std::env::var_os("LLMSPEED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_llmspeed")))
}

/// A running `llmspeed` whose stderr (or stdout) lines arrive on a channel; killed when dropped.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn spawn(args: &[&str]) -> Running {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn llmspeed");
        let (tx, lines) = channel();
        for pipe in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line that `want` accepts and returns it.
    fn wait_line(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        while t0.elapsed() < LIMIT {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if want(&l) {
                        return l;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        panic!("no line {what}; output:\n{}", self.seen.join("\n"));
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// Waits for the exit and returns it with everything the process printed.
    fn wait(mut self) -> (ExitStatus, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            assert!(
                t0.elapsed() < LIMIT,
                "still running after {LIMIT:?}; output:\n{}",
                self.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        // The pipes close with the process: the rest of its lines are on the channel.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(l);
        }
        (status, self.seen.join("\n"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A results folder inside a temporary directory removed when the guard drops (also when a
/// test fails).
fn out_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let d = tmp.path().join(name);
    (tmp, d)
}

fn results(dir: &Path) -> MatrixReport {
    files::read_json(dir).expect("results.json reads")
}

/// The arguments every matrix here shares: plain progress lines, no prompt cache.
fn matrix_args<'a>(out: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["matrix", "--no-progress", "--no-prompt-cache", "--out", out];
    v.extend_from_slice(rest);
    v
}

/// `llmspeed mock` in its own process on port 0; its base URL from the banner.
fn external_mock(profile: &str) -> (Running, String) {
    let mut m = Running::spawn(&[
        "mock",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--profile",
        profile,
    ]);
    let line = m.wait_line("with the mock's URL", |l| l.starts_with("serving on "));
    let url = line["serving on ".len()..]
        .split_whitespace()
        .next()
        .expect("a URL")
        .to_string();
    (m, url)
}

/// `matrix` with `plan` against an external demo mock: the mock, the run, and its results
/// folder (removed with the returned directory).
fn matrix_on_a_mock(name: &str, plan: &[&str]) -> (Running, Running, tempfile::TempDir, PathBuf) {
    let (mock, url) = external_mock("demo");
    let (tmp, dir) = out_dir(name);
    let mut args = vec!["--base-url", url.as_str()];
    args.extend_from_slice(plan);
    let run = Running::spawn(&matrix_args(dir.to_str().unwrap(), &args));
    (mock, run, tmp, dir)
}

/// The plain line a cell's window prints once a second has passed inside it.
fn in_window(l: &str) -> bool {
    l.contains("tok/s live")
}

#[test]
fn a_cell_interrupted_inside_its_window_keeps_its_shortened_measurement() {
    let (_tmp, dir) = out_dir("interrupt");
    let out = dir.to_str().unwrap();
    let mut run = Running::spawn(&matrix_args(
        out,
        &[
            "--mock",
            "--contexts",
            "2k",
            "--concurrency",
            "2",
            "--duration",
            "120s",
        ],
    ));
    run.wait_line("from inside the window", in_window);
    run.signal(libc::SIGINT);
    let (status, output) = run.wait();
    assert_eq!(status.code(), Some(130), "{output}");
    let r = results(&dir);
    assert!(r.metadata.interrupted.is_some());
    let cell = &r.decode[0];
    // Before: the cell stayed Pending, its window lost.
    assert!(cell.status.was_run(), "{:?}: {:?}", cell.status, cell.notes);
    assert!(cell.interrupted);
    let measured = cell.measured_s.expect("the real window length");
    // Stopped a few seconds into a 120 s window: the real length, not the planned one.
    assert!(measured > 0.0 && measured < 120.0, "{measured}");
    let (open, close) = (cell.window_start_ns.unwrap(), cell.window_end_ns.unwrap());
    assert!((((close - open) as f64 / 1e9) - measured).abs() < 1e-6);
    assert!(cell.output_tokens.unwrap() > 0);
    let tps = cell.output_tok_per_s.unwrap();
    assert!(
        (tps - cell.output_tokens.unwrap() as f64 / measured).abs() < 1e-6 * tps,
        "tok/s over the shortened window"
    );
    assert!(cell.notes.iter().any(|n| n.contains("stopped inside")));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("(interrupted after "), "{md}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("· interrupted"));
    // The schema allows it (report_schema checks files against it; here the flag's own shape).
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["decode"][0]["interrupted"], serde_json::json!(true));
    // So does results.csv, for a spreadsheet (before: no such column, the shortened cell read
    // as a whole one).
    assert_eq!(csv_column(&dir, "interrupted"), ["true"]);
}

/// The values of `name` in results.csv's decode rows (RFC 4180 fields: a quoted one may hold
/// commas and doubled quotes, as the client-lag reasons do; no field holds a line break).
fn csv_column(dir: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("results.csv")).expect("results.csv");
    let mut lines = text.lines();
    let header = fields(lines.next().expect("a header"));
    let col = header
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no column {name:?} in {header:?}"));
    lines
        .filter(|l| l.starts_with("decode,"))
        .map(|l| {
            let row = fields(l);
            assert_eq!(row.len(), header.len(), "{l}");
            row[col].clone()
        })
        .collect()
}

/// One CSV line's fields.
fn fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[test]
fn resume_of_a_mock_run_finishes_the_remaining_cells() {
    let (_tmp, dir) = out_dir("resume-mock");
    let out = dir.to_str().unwrap();
    let plan = [
        "--mock",
        "--contexts",
        "2k",
        "--concurrency",
        "1,2",
        "--duration",
        "1s",
    ];
    let mut run = Running::spawn(&matrix_args(out, &plan));
    run.wait_line("for the first cell's verdict", |l| {
        l.contains("cell 2K x 1: ") && !l.contains("running (") && !in_window(l)
    });
    run.signal(libc::SIGINT);
    let (status, output) = run.wait();
    assert_eq!(status.code(), Some(130), "{output}");
    let first = results(&dir);
    assert!(first.decode[0].status.was_run());

    let mut args = vec![
        "matrix",
        "--no-progress",
        "--no-prompt-cache",
        "--resume",
        out,
    ];
    args.extend_from_slice(&plan);
    let (status, output) = Running::spawn(&args).wait();
    // Before: "cannot resume …: base URL http://127.0.0.1:A (now http://127.0.0.1:B)".
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("finished measurements kept"), "{output}");
    let r = results(&dir);
    assert_eq!(r.metadata.interrupted, None);
    assert!(r.metadata.simulated_server.is_some());
    for c in &r.decode {
        assert!(c.status.was_run() && !c.interrupted, "{:?}", c.status);
    }
    assert_eq!(csv_column(&dir, "interrupted"), ["false", "false"]);
    for p in &r.prefill {
        assert_ne!(p.status, CellStatus::Pending);
    }
    // The first run's cell was kept, not measured again.
    assert_eq!(r.decode[0].window_start_ns, first.decode[0].window_start_ns);
}

#[test]
fn a_dead_server_ends_the_drain_at_once_and_fails_the_rest_with_its_connection_error() {
    // Killed inside the first cell's window.
    dead_server("dead-window", in_window, Duration::ZERO);
}

#[test]
fn a_server_dead_while_a_cell_waits_for_its_gate_ends_the_cell_at_once() {
    // Killed 1.5 s after the first cell started its streams: they have their first tokens
    // (the demo server answers in milliseconds) and the readiness gate, which needs 3 s of
    // stable /metrics, is still closed. Before: the gate waited out --ready-timeout (120 s),
    // then the drain 60 s. (On a machine so slow that no token came yet, the older rule for
    // streams that all fail before a token ends the gate; the test holds either way.)
    dead_server(
        "dead-gate",
        |l| l.contains("cell 1K x 1: running ("),
        Duration::from_millis(1500),
    );
}

/// A server killed inside a cell's 120 s window: the window ends when every stream has lost it
/// (reset, then its reconnect refused), not when the 120 s run out, and the figures up to then
/// are kept, marked cut short. Before: the window ran its 120 s on a dead server, its tok/s
/// spread over all of them.
#[test]
fn a_server_dead_inside_the_window_ends_the_window_at_once() {
    let plan = [
        "--contexts",
        "1k",
        "--concurrency",
        "2,4",
        "--duration",
        "120s",
    ];
    let (mut mock, mut run, _tmp, dir) = matrix_on_a_mock("dead-mid-window", &plan);
    run.wait_line("from inside the window", in_window);
    let _ = mock.child.kill();
    let _ = mock.child.wait();
    let (status, output) = run.wait();
    assert!(status.code().is_some(), "{output}");
    let r = results(&dir);
    // Not a stop by the user.
    assert_eq!(r.metadata.interrupted, None);
    let cell = &r.decode[0];
    assert!(cell.interrupted, "{:?}\n{output}", cell.notes);
    assert!(
        cell.notes
            .iter()
            .any(|n| n.contains("the server died inside")),
        "{:?}",
        cell.notes
    );
    let measured = cell.measured_s.expect("the real window length");
    assert!(measured > 0.0 && measured < 120.0, "{measured}");
    let (open, close) = (cell.window_start_ns.unwrap(), cell.window_end_ns.unwrap());
    assert!((((close - open) as f64 / 1e9) - measured).abs() < 1e-6);
    let tokens = cell.output_tokens.expect("tokens before the death");
    assert!(tokens > 0);
    let tps = cell.output_tok_per_s.unwrap();
    assert!((tps - tokens as f64 / measured).abs() < 1e-6 * tps);
    assert_eq!(csv_column(&dir, "interrupted")[0], "true");
    // Then the dead-server path as before: the drain ends at once, the next cell fails.
    assert!(cell
        .notes
        .iter()
        .any(|n| n.contains("server unreachable after the cell")));
    assert_eq!(
        r.decode[1].status,
        CellStatus::Failed(vec![(ErrorKind::Connect, 1)])
    );
}

/// A `matrix` against an external mock that is killed `after` `kill_at` accepts a line.
fn dead_server(name: &str, kill_at: impl Fn(&str) -> bool, after: Duration) {
    let plan = [
        "--contexts",
        "1k,2k",
        "--concurrency",
        "1,2",
        "--duration",
        "3s",
    ];
    let (mut mock, mut run, _tmp, dir) = matrix_on_a_mock(name, &plan);
    run.wait_line("to kill the server at", kill_at);
    std::thread::sleep(after);
    let _ = mock.child.kill();
    let _ = mock.child.wait();
    let (status, output) = run.wait();
    assert!(status.code().is_some(), "{output}");
    let r = results(&dir);
    // Before: 60 s of drain waiting per cell, then "the server still reported running or
    // waiting requests" about a server that reported nothing.
    let notes: Vec<&String> = r.decode.iter().flat_map(|c| &c.notes).collect();
    assert!(
        !notes.iter().any(|n| n.contains("still reported")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("server unreachable after the cell")),
        "{notes:?}\n{output}"
    );
    assert!(
        !notes.iter().any(|n| n.contains("readiness gate gave up")),
        "{notes:?}"
    );
    // Every step after the dead one failed with the connection error, and every recorded error
    // has a kind (before: the prompt failures carried `kind: null`).
    let messages = r
        .decode
        .iter()
        .flat_map(|c| &c.error_messages)
        .chain(r.prefill.iter().flat_map(|p| &p.error_messages));
    for m in messages {
        assert!(m.kind.is_some(), "{m:?}");
    }
    let killed = r
        .decode
        .iter()
        .position(|c| c.notes.iter().any(|n| n.contains("server unreachable")))
        .expect("the cell the server died in");
    for c in &r.decode[killed + 1..] {
        assert_eq!(
            c.status,
            CellStatus::Failed(vec![(ErrorKind::Connect, 1)]),
            "{c:?}"
        );
        assert!(c.error_messages[0]
            .message
            .starts_with("server unreachable: "));
    }
    let later_prefill = r
        .prefill
        .iter()
        .filter(|p| p.context > r.decode[killed].context);
    for p in later_prefill {
        assert_eq!(p.status, CellStatus::Failed(vec![(ErrorKind::Connect, 1)]));
    }
    assert!(r.decode.iter().all(|c| c.status != CellStatus::Pending));
}

/// The plan's "Prefill at:" line of a dry run.
fn prefill_line(args: &[&str]) -> String {
    let mut run = Running::spawn(args);
    let line = run.wait_line("with the prefill plan", |l| l.starts_with("Prefill at: "));
    let (status, output) = run.wait();
    assert!(status.success(), "{output}");
    line
}

#[test]
fn prefill_contexts_follow_one_rule_with_the_built_in_or_an_external_mock() {
    let plan = ["--contexts", "1k,2k", "--concurrency", "1", "--dry-run"];
    let mut built_in = vec!["matrix", "--mock"];
    built_in.extend_from_slice(&plan);
    let (_mock, url) = external_mock("demo");
    let mut external = vec!["matrix", "--base-url", &url];
    external.extend_from_slice(&plan);
    let a = prefill_line(&built_in);
    // Before: "Prefill at: 2K, 8K, 32K" with --mock, 1K, 2K, 32K against the external one.
    assert_eq!(a, "Prefill at: 1K, 2K, 32K");
    assert_eq!(prefill_line(&external), a);
}
