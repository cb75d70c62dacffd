//! How well does the mock keep its own schedule? Serves N streams (default 128) at the `fast`
//! profile on one current-thread runtime (plus the engine thread), drives them from a separate
//! client thread, and reports how far each chunk's hand-off to hyper lags the engine's due time
//! (from the trace), plus the CPU time of the server threads per token.
//!
//! `cargo bench --bench mock_engine -- [streams] [tokens]`

use llmspeed::mock::{serve, MockConfig, Profile};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn thread_cpu_ns(name: &str) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let tick_ns = 1_000_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let mut total = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit(')').next().unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of stat: 11 and 12 after the comm.
            if f.len() > 12 {
                total += (f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0))
                    * tick_ns;
            }
        }
    }
    total
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let streams = args.first().copied().unwrap_or(128);
    let tokens = args.get(1).copied().unwrap_or(1000);
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("trace.jsonl");
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.trace = Some(trace.clone());
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::Builder::new()
        .name("mock-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(std_listener)?;
                serve(l, cfg, async move {
                    let _ = stop_rx.await;
                })
                .await
            })
        })
        .expect("server thread");
    let started = Instant::now();
    let client = std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let body = format!(
                    "{{\"prompt\":\" the house\",\"max_tokens\":{tokens},\"ignore_eos\":true,\"stream\":true}}"
                );
                let tasks: Vec<_> = (0..streams)
                    .map(|i| {
                        let body = body.clone();
                        tokio::spawn(async move {
                            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                            s.set_nodelay(true).expect("nodelay");
                            let req = format!(
                                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-request-id: s{i}\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            s.write_all(req.as_bytes()).await.expect("write");
                            let mut buf = vec![0u8; 1 << 16];
                            let mut n = 0;
                            loop {
                                match s.read(&mut buf).await {
                                    Ok(0) | Err(_) => break,
                                    Ok(k) => n += k,
                                }
                            }
                            n
                        })
                    })
                    .collect();
                let mut bytes = 0;
                for t in tasks {
                    bytes += t.await.expect("client task");
                }
                bytes
            })
        })
        .expect("client thread");
    let bytes = client.join().expect("client");
    let wall = started.elapsed();
    let server_cpu = thread_cpu_ns("mock-server");
    let engine_cpu = thread_cpu_ns("mock-engine");
    let _ = stop_tx.send(());
    server.join().expect("server").expect("serve");
    std::thread::sleep(Duration::from_millis(50));
    let text = std::fs::read_to_string(&trace).expect("trace");
    let mut drift: Vec<i64> = text
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some(v["t_ns"].as_i64()? - v["due_ns"].as_i64()?)
        })
        .collect();
    drift.sort_unstable();
    let n = drift.len();
    println!("mock_engine: {streams} streams x {tokens} tokens, fast profile, one current-thread runtime + engine thread");
    println!(
        "  tokens {n} (expected {}), {:.1} MB in {:.2} s = {:.0} tok/s",
        streams * tokens,
        bytes as f64 / 1e6,
        wall.as_secs_f64(),
        n as f64 / wall.as_secs_f64()
    );
    if n > 0 {
        println!(
            "  write drift behind schedule: p50 {} us, p99 {} us, max {} us",
            pct(&drift, 0.5) / 1000,
            pct(&drift, 0.99) / 1000,
            drift[n - 1] / 1000
        );
        println!(
            "  server CPU: runtime thread {:.0} ms ({:.2} us/token), engine thread {:.0} ms ({:.2} us/token)",
            server_cpu as f64 / 1e6,
            server_cpu as f64 / 1e3 / n as f64,
            engine_cpu as f64 / 1e6,
            engine_cpu as f64 / 1e3 / n as f64
        );
    }
}
