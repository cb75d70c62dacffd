//! A recording proxy in front of a plain HTTP/1.1 server: each connection is relayed to the
//! backend as it comes and both directions' bytes are kept, so a test can read what a client
//! sent and what the server answered, request by request, independently of the client's own
//! account of it. On a thread of its own that lives as long as the test.
//!
//! HTTP/1.1 without pipelining (the client sends a request on a connection only after the
//! previous answer): the n-th request of a connection is answered by its n-th final response.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One connection's bytes: client to server, server to client.
#[derive(Default)]
struct Wire {
    sent: Vec<u8>,
    answered: Vec<u8>,
}

pub struct RecordingProxy {
    pub addr: SocketAddr,
    wires: Arc<Mutex<Vec<Arc<Mutex<Wire>>>>>,
}

/// A request and its answer, as they crossed the proxy (bodies de-chunked).
#[derive(Debug)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    pub status: u16,
    pub answer: Vec<u8>,
}

impl RecordingProxy {
    pub fn start(backend: SocketAddr) -> RecordingProxy {
        let wires: Arc<Mutex<Vec<Arc<Mutex<Wire>>>>> = Arc::default();
        let all = wires.clone();
        let addr = super::relay::listen_on_thread(move |client| {
            let wire = Arc::new(Mutex::new(Wire::default()));
            all.lock().unwrap().push(wire.clone());
            relay(client, backend, wire)
        });
        RecordingProxy { addr, wires }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every complete exchange so far, connection by connection in the order they opened.
    /// Panics on bytes that are not HTTP/1.1 as this proxy reads it (a test's failure).
    pub fn exchanges(&self) -> Vec<Exchange> {
        let wires = self.wires.lock().unwrap();
        let mut out = Vec::new();
        for wire in wires.iter() {
            let w = wire.lock().unwrap();
            let (mut sent, mut answered) = (&w.sent[..], &w.answered[..]);
            while let Some((head, body)) = message(&mut sent) {
                let mut line = head.lines().next().unwrap_or("").split(' ');
                let (method, path) = (line.next().unwrap_or(""), line.next().unwrap_or(""));
                // The final answer: 1xx ones are skipped.
                let answer = loop {
                    match message(&mut answered) {
                        Some((h, b)) if !h.starts_with("HTTP/1.1 1") => break Some((h, b)),
                        Some(_) => continue,
                        None => break None,
                    }
                };
                let Some((ahead, abody)) = answer else {
                    break;
                };
                let status = ahead
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("no status in {ahead:?}"));
                out.push(Exchange {
                    method: method.to_string(),
                    path: path.to_string(),
                    body,
                    status,
                    answer: abody,
                });
            }
        }
        out
    }
}

async fn relay(client: TcpStream, backend: SocketAddr, wire: Arc<Mutex<Wire>>) {
    let Ok(server) = TcpStream::connect(backend).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up = wire.clone();
    let upstream = tokio::task::spawn_local(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
            up.lock().unwrap().sent.extend_from_slice(&buf[..n]);
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
        wire.lock().unwrap().answered.extend_from_slice(&buf[..n]);
        if client_tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = client_tx.shutdown().await;
    let _ = upstream.await;
}

/// One HTTP/1.1 message from the front of `bytes` (its head, and its body: by Content-Length,
/// de-chunked, or none), consumed; `None` when no complete one is there.
fn message(bytes: &mut &[u8]) -> Option<(String, Vec<u8>)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let mut rest = &bytes[end + 4..];
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&rest[..line_end]).ok()?;
            let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                // No trailers from the servers this reads: the final CRLF.
                rest = rest.get(2..)?;
                break;
            }
            body.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
        body
    } else {
        let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap_or(0));
        let body = rest.get(..len)?.to_vec();
        rest = &rest[len..];
        body
    };
    *bytes = rest;
    Some((head, body))
}
