//! Runs that meet trouble, as a user's run would, kept so they cannot regress: a storm of server
//! faults over 1000 concurrent streams, a run killed outright (SIGKILL) and resumed, hostile
//! servers, a full disk. The binary runs as a user runs it (`LLMSPEED_BIN` may point at a release
//! build); servers are `llmspeed mock` processes or tiny TCP servers here, on 127.0.0.1:0.

mod support;

use llmspeed::mock::faults::{pick, Fault, FaultRule};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;
use support::process::{mock, Proc};

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const STORM: [&str; 5] = [
    "status=500@0.1",
    "reset-after=2@0.1",
    "error-after=1@0.1",
    "truncate-after=3@0.1",
    "status=429@0.05",
];

/// The kind our client gives each fault the mock injects.
fn kind_of(f: Fault) -> &'static str {
    match f {
        Fault::Status(_) => "http_status",
        // A stream cut by the server (reset, or closed mid-chunk) is a protocol failure.
        Fault::ResetAfter(_) | Fault::TruncateAfter(_) => "protocol",
        Fault::ErrorAfter(_) => "server_error",
        other => panic!("not in the storm: {other:?}"),
    }
}

/// 1000 requests at once against a mock injecting five faults: every request is accounted for
/// and classified, and the count of each kind is the mock's own (its fault choice is a pure
/// function of the generation request's arrival number, whatever the order: number 0 is
/// `bench serve`'s one-token probe of token-id prompts, so the run's requests are 1..=1000).
#[test]
fn a_fault_storm_over_1000_streams_is_accounted_for_request_by_request() {
    const N: u64 = 1000;
    let mut mock_args = vec!["--profile", "fast"];
    for f in STORM {
        mock_args.extend(["--fault", f]);
    }
    let (_server, url) = mock(&mock_args);
    let rules: Vec<FaultRule> = STORM.iter().map(|s| s.parse().unwrap()).collect();
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for n in 1..=N {
        if let Some(f) = pick(&rules, n) {
            *want.entry(kind_of(f)).or_default() += 1;
        }
    }
    let failed_want: u64 = want.values().sum();
    assert!(want.len() == 3 && failed_want > 200, "{want:?}");

    let dir = tempfile::tempdir().unwrap();
    let mut p = Proc::spawn(&[
        "bench",
        "serve",
        "--base-url",
        &url,
        "--num-prompts",
        &N.to_string(),
        "--random-input-len",
        "8",
        "--random-output-len",
        "8",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        dir.path().to_str().unwrap(),
        "--result-filename",
        "storm.json",
    ]);
    assert_eq!(p.exit_code(), 0, "{}", p.output());
    let v = read_json(&dir.path().join("storm.json"));
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    assert_eq!(n(&v["num_prompts"]), N);
    assert_eq!(n(&v["completed"]) + n(&v["failed"]), N, "{v}");
    let got: BTreeMap<&str, u64> = v["llmspeed"]["failures_by_kind"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, c)| (k.as_str(), n(c)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(n(&v["failed"]), failed_want);
    // Request by request: one error line per failed request, each led by its kind.
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len() as u64, N);
    let failed: Vec<&str> = errors
        .iter()
        .filter_map(Value::as_str)
        .filter(|e| !e.is_empty())
        .collect();
    assert_eq!(failed.len() as u64, failed_want);
    for e in failed {
        assert!(
            want.keys().any(|k| e.starts_with(k)),
            "an error without its kind first: {e}"
        );
    }
}

/// A run killed outright (SIGKILL: nothing can be finished) inside a decode cell leaves the
/// results of every finished step; `--resume` keeps them and runs the rest. The server is an
/// external `llmspeed mock` process, so its address stays the same across the two runs.
#[test]
fn sigkill_mid_cell_then_resume_completes_the_run() {
    let (_server, url) = mock(&["--profile", "fast"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let cache = dir.path().join("cache");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "matrix",
            "--base-url",
            &url,
            "--no-progress",
            "--contexts",
            "1k",
            "--prefill-contexts",
            "1k",
            "--concurrency",
            "1,2,4",
            "--duration",
            "3",
            "--max-tokens",
            "64",
            "--prompt-cache",
            cache.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let first = args(&["--out", out.to_str().unwrap()]);
    let mut p = Proc::spawn(&first.iter().map(String::as_str).collect::<Vec<_>>());
    p.wait_line("2 of 4 steps done");
    p.wait_line("tok/s live");
    p.signal(libc::SIGKILL);
    let st = p.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL)
    );
    let before = read_json(&out.join("results.json"));
    let pending = |v: &Value| {
        v["decode"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["status"]["kind"] == "pending")
            .count()
    };
    assert!(
        pending(&before) >= 1,
        "the killed cell is not finished: {before}"
    );

    let second = args(&["--resume", out.to_str().unwrap()]);
    let mut r = Proc::spawn(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.exit_code(), 0, "{}", r.output());
    let log = r.output();
    let kept: usize = log
        .lines()
        .find_map(|l| {
            l.split("resume: ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no `resume: N finished measurements kept`: {log}"));
    assert!(kept >= 2, "{log}");
    let after = read_json(&out.join("results.json"));
    assert!(
        after["metadata"]["interrupted"].is_null(),
        "{}",
        after["metadata"]
    );
    assert_eq!(after["decode"].as_array().unwrap().len(), 3);
    assert_eq!(pending(&after), 0, "{after}");
    for c in after["decode"].as_array().unwrap() {
        // Measured; a loaded machine may find its client behind (Client-bound, figures kept).
        let kind = c["status"]["kind"].as_str();
        assert!(matches!(kind, Some("valid" | "client_bound")), "{c}");
    }
}

/// A one-connection server that reads the request, then runs `respond` on the socket until it
/// returns; gives back how many bytes it wrote.
fn hostile(respond: fn(&mut std::net::TcpStream) -> u64) -> (String, JoinHandle<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return 0,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        respond(&mut s)
    });
    (url, h)
}

/// Writes `head`, then `piece` until the client goes away.
fn endless(s: &mut std::net::TcpStream, head: &[u8], piece: &[u8]) -> u64 {
    let mut n = 0u64;
    if s.write_all(head).is_err() {
        return n;
    }
    n += head.len() as u64;
    while s.write_all(piece).is_ok() {
        n += piece.len() as u64;
    }
    n
}

fn stream_against(url: &str) -> (i32, String) {
    let mut p = Proc::spawn(&[
        "stream",
        "--base-url",
        url,
        "--model",
        "m",
        "--prompt",
        "hi",
    ]);
    let code = p.exit_code();
    (code, p.output())
}

#[test]
fn an_endless_sse_line_stops_at_4_mib() {
    let (url, server) = hostile(|s| {
        let piece = format!("{:x}\r\n{}\r\n", 65536, "a".repeat(65536));
        endless(
            s,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n8\r\ndata: {\"\r\n",
            piece.as_bytes(),
        )
    });
    let (code, out) = stream_against(&url);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("server-sent event larger than 4194304 bytes"),
        "{out}"
    );
    // The client hung up: the server's endless write ended.
    let written = server.join().unwrap();
    assert!(written > 4 << 20, "only {written} bytes were written");
}

#[test]
fn endless_headers_stop_at_64_kib() {
    let (url, server) = hostile(|s| {
        let piece = format!("X-Pad: {}\r\n", "b".repeat(1000));
        endless(s, b"HTTP/1.1 200 OK\r\n", piece.as_bytes())
    });
    let (code, out) = stream_against(&url);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("response head larger than 65536 bytes"),
        "{out}"
    );
    server.join().unwrap();
}

#[test]
fn absurd_chunk_sizes_are_refused() {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size, message) in [
        ("FFFFFFFFFFFFFFFFFFFF", "chunk size does not fit in 64 bits"),
        ("7FFFFFFFFFFFFFFF", "exceeds the limit of"),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let reply = format!("{head}{size}\r\ndata: ");
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(reply.as_bytes());
            // Hold the connection open: the refusal must come from the size line alone.
            let _ = s.read(&mut buf);
        });
        let (code, out) = stream_against(&url);
        assert_eq!(code, 1, "{size}: {out}");
        assert!(out.contains(message), "{size}: {out}");
        server.join().unwrap();
    }
}

/// A result folder on a full disk: a clear "No space left" naming the file, exit 1. Needs a
/// small tmpfs, so root; CI runs as root and must run it.
#[test]
fn a_full_disk_is_named_with_the_file() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!ci, "CI runs as root: the disk-full case must run there");
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&full)
        .status();
    if !matches!(mounted, Ok(s) if s.success()) {
        assert!(!ci, "cannot mount a tmpfs under CI: {mounted:?}");
        eprintln!("skipped: cannot mount a tmpfs here ({mounted:?})");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(full.clone());
    // Fill it.
    let mut f = std::fs::File::create(full.join("filler")).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);

    let (_server, url) = mock(&["--profile", "fast"]);
    let mut p = Proc::spawn(&[
        "bench",
        "serve",
        "--base-url",
        &url,
        "--num-prompts",
        "4",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        full.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ]);
    assert_eq!(p.exit_code(), 1, "{}", p.output());
    let out = p.output();
    assert!(out.contains("No space left"), "{out}");
    assert!(
        out.contains(&full.join("r.json").display().to_string()),
        "{out}"
    );
}
