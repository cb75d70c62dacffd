//! Issue 9.12 over real sockets: while the simulated server's engine thread is inside a batch
//! step, its HTTP side keeps serving. The old engine lock, held through the step, blocked a new
//! request's handler (and with it the server's runtime thread) until the step ended, so
//! `/health` and every other stream's writes waited too.
//!
//! No timing bound decides the verdict: a test hook holds one step open until the test has
//! seen `/health` answered, so with the old lock it never would be (the 10 s read timeout only
//! turns that hang into a failure).

#[path = "support/mock.rs"]
mod mock_server;

use llmspeed::mock::driver::StepHook;
use llmspeed::mock::{MockConfig, Profile};
use mock_server::MockThread;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

fn send(addr: SocketAddr, req: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    s
}

fn completion(max_tokens: u32) -> String {
    let body = format!(
        r#"{{"model":"mock-model","prompt":"hello there","max_tokens":{max_tokens},"stream":true,"ignore_eos":true}}"#
    );
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Reads until `needle` has arrived; the bytes read, or the read error (a timeout).
fn read_until(s: &mut TcpStream, needle: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(needle.len()).any(|w| w == needle) {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

#[test]
fn health_and_new_requests_are_served_while_an_engine_step_is_in_progress() {
    // Armed, the next engine step signals `entered` and blocks until released (at most 60 s).
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let chans = Mutex::new((entered_tx, release_rx));
    let a = armed.clone();
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 1000.0;
    cfg.step_hook = Some(StepHook(Arc::new(move || {
        if a.swap(false, Ordering::SeqCst) {
            let c = chans.lock().unwrap();
            let _ = c.0.send(());
            let _ = c.1.recv_timeout(Duration::from_secs(60));
        }
    })));
    // On its own thread and current-thread runtime: a handler that blocks that thread blocks
    // the whole server.
    let server = MockThread::start(cfg);
    let addr = server.addr;

    // A running stream: its first token has been written.
    let mut running = send(addr, &completion(20_000));
    let first = read_until(&mut running, b"data: ").unwrap();
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    armed.store(true, Ordering::SeqCst);
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the engine thread entered a step");

    // A new request arrives during the step: its handler submits to the engine. Give it time
    // to get there (with the old lock it then held the server's only runtime thread).
    let mut newcomer = send(addr, &completion(4));
    std::thread::sleep(Duration::from_millis(300));
    let mut health = send(
        addr,
        "GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let answered = read_until(&mut health, b"\r\n\r\n");
    // The step is still held: whatever came back came back during it.
    let _ = release_tx.send(());
    let head = answered.expect("/health was not answered while the engine was in a step");
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );

    // After the step the newcomer runs to its end: the submit made during the step counted.
    let body = read_until(&mut newcomer, b"data: [DONE]").unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("data: [DONE]"), "{text}");
    assert_eq!(text.matches("\"index\":0,\"text\"").count(), 4, "{text}");
    drop(running);
    server.stop();
}
