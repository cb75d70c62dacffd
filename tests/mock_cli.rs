//! The `llmspeed mock` binary as a supervisor runs it: started on port 0, read its URL from
//! stdout, stopped with SIGTERM. The trace must be complete when the process has exited.

use llmspeed::clock::Clock;
use llmspeed::net::request::{Generation, Prompt};
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, Target};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKENS: u32 = 20;
const STREAMS: usize = 3;

/// Starts the mock and returns it with its base URL (`http://127.0.0.1:PORT/v1`), read from the
/// banner line it prints once it is ready to serve.
fn start_mock(trace: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "mock",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--profile",
            "fast",
        ])
        .arg("--trace")
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn llmspeed mock");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => {
                let _ = child.kill();
                panic!("the mock ended before printing its URL");
            }
        };
        if let Some(rest) = line.strip_prefix("serving on ") {
            break rest.split_whitespace().next().unwrap_or("").to_string();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

#[test]
fn sigterm_flushes_and_closes_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let (mut child, url) = start_mock(&trace);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let timelines = rt.block_on(async {
        let mut cfg = ClientConfig::new(Target::parse(&url).unwrap());
        cfg.timeouts.total = Some(Duration::from_secs(30));
        let client = Client::new(cfg, Clock::new()).unwrap();
        let mut g = Generation::new("mock-model", Prompt::Text(" the the".into()));
        g.max_tokens = Some(TOKENS);
        g.ignore_eos = true;
        let base = g.stream_request(Some(true)).unwrap();
        let mut out = Vec::new();
        for i in 0..STREAMS {
            let mut r = base.clone();
            r.request_id = Some(format!("term-{i}"));
            let start = client.clock().raw();
            out.push(
                client
                    .stream(&r, start, &mut NoopObserver, &Cancel::new())
                    .await,
            );
        }
        out
    });
    for tl in &timelines {
        assert_eq!(tl.outcome, Ok(()));
        assert_eq!(tl.output_tokens(), TOKENS as u64);
    }

    // SAFETY: plain kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill(SIGTERM)");
    let status = wait_exit(&mut child, Duration::from_secs(15)).expect("exits after SIGTERM");
    assert!(
        status.success(),
        "SIGTERM must stop the mock cleanly, got {status:?}"
    );

    // Every line is one whole JSON object, and every token of every stream is there.
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.ends_with('\n'), "the last line is complete");
    let mut tokens = vec![vec![false; TOKENS as usize]; STREAMS];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect(line);
        let id = v["request_id"].as_str().expect(line);
        let i: usize = id.strip_prefix("term-").expect(line).parse().unwrap();
        let index = v["index"].as_u64().expect(line);
        let (t, due) = (
            v["t_ns"].as_u64().expect(line),
            v["due_ns"].as_u64().expect(line),
        );
        let arrival = v["arrival_ns"].as_u64().expect(line);
        assert!(arrival <= due && due <= t, "{line}");
        // The engine takes the request in after it arrived and schedules it before its tokens.
        let (queued, scheduled) = (
            v["queued_ns"].as_u64().expect(line),
            v["scheduled_ns"].as_u64().expect(line),
        );
        assert!(
            arrival <= queued && queued <= scheduled && scheduled <= due,
            "{line}"
        );
        tokens[i][index as usize] = true;
    }
    for (i, t) in tokens.iter().enumerate() {
        assert!(
            t.iter().all(|&x| x),
            "stream {i}: tokens missing from the trace"
        );
    }
}
