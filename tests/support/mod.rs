//! An in-process scripted HTTP server for the network tests: it writes exact bytes with
//! controlled write boundaries, so tests decide where reads split.
//!
//! Each accepted connection runs the next script in order; connections beyond the scripts are
//! closed at once. It binds 127.0.0.1:0 only.
#![allow(dead_code)]

pub mod buffering_proxy;
pub mod mock;
pub mod nginx;
pub mod process;
pub mod processor;
pub mod relay;
pub mod tls_front;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// One step of a connection's script.
#[derive(Clone, Debug)]
pub enum Step {
    /// Wait for one whole request (head plus Content-Length body) and record it.
    ReadRequest,
    /// One write (flushed; TCP_NODELAY on, so small writes tend to arrive as separate reads).
    Write(Vec<u8>),
    Pause(Duration),
    /// Close the connection now.
    Close,
}

pub struct Server {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
    heads_sent: Arc<AtomicUsize>,
}

impl Server {
    pub async fn start(scripts: Vec<Vec<Step>>) -> Server {
        Self::start_inner(scripts, None).await
    }

    pub async fn start_tls(scripts: Vec<Vec<Step>>, acceptor: TlsAcceptor) -> Server {
        Self::start_inner(scripts, Some(acceptor)).await
    }

    /// Every connection runs the same script (for many parallel streams).
    pub async fn start_repeating(script: Vec<Step>, conns: usize) -> Server {
        Self::start_inner(vec![script; conns], None).await
    }

    async fn start_inner(scripts: Vec<Vec<Step>>, tls: Option<TlsAcceptor>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let heads_sent = Arc::new(AtomicUsize::new(0));
        let (a, r, h) = (accepted.clone(), requests.clone(), heads_sent.clone());
        tokio::spawn(async move {
            let mut scripts = scripts.into_iter();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let _ = sock.set_nodelay(true);
                a.fetch_add(1, Ordering::SeqCst);
                let script = scripts.next().unwrap_or_else(|| vec![Step::Close]);
                let (r, h, tls) = (r.clone(), h.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        None => run_script(sock, script, r, h).await,
                        Some(acc) => {
                            if let Ok(s) = acc.accept(sock).await {
                                run_script(s, script, r, h).await
                            }
                        }
                    }
                });
            }
        });
        Server {
            addr,
            accepted,
            requests,
            heads_sent,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Writes done so far across connections (used to wait until streams are open).
    pub fn writes(&self) -> usize {
        self.heads_sent.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

async fn run_script<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    script: Vec<Step>,
    requests: Arc<Mutex<Vec<String>>>,
    writes: Arc<AtomicUsize>,
) {
    let mut pending = Vec::new();
    for step in script {
        match step {
            Step::ReadRequest => match read_request(&mut sock, &mut pending).await {
                Some(req) => requests.lock().unwrap().push(req),
                None => return,
            },
            Step::Write(bytes) => {
                if sock.write_all(&bytes).await.is_err() || sock.flush().await.is_err() {
                    return;
                }
                writes.fetch_add(1, Ordering::SeqCst);
            }
            Step::Pause(d) => tokio::time::sleep(d).await,
            Step::Close => {
                let _ = sock.shutdown().await;
                return;
            }
        }
    }
    // Script done without Close: hold the connection until the client goes away.
    let mut sink = [0u8; 1024];
    while let Ok(n) = sock.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

async fn read_request<S: AsyncRead + Unpin>(sock: &mut S, pending: &mut Vec<u8>) -> Option<String> {
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(end) = find(pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let total = end + 4 + len;
            while pending.len() < total {
                let n = sock.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                pending.extend_from_slice(&tmp[..n]);
            }
            let req = String::from_utf8_lossy(&pending[..total]).to_string();
            pending.drain(..total);
            return Some(req);
        }
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&tmp[..n]);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---- response builders ----

pub const CHUNKED_HEAD: &str = "HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 04:00:00 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";

/// One chunk, lowercase hex size, as uvicorn writes it.
pub fn chunk(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    out
}

pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A vLLM completions chunk with continuous usage after `n` tokens (text `tok{n}`).
pub fn vllm_event(n: u64, prompt: u64, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    format!(
        "data: {{\"id\":\"cmpl-8f1e\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\" tok{n}\",\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":{prompt},\"total_tokens\":{},\"completion_tokens\":{n}}}}}\n\n",
        prompt + n
    )
}

pub fn vllm_usage_event(n: u64, prompt: u64) -> String {
    format!(
        "data: {{\"id\":\"cmpl-8f1e\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"total_tokens\":{},\"completion_tokens\":{n}}}}}\n\n",
        prompt + n
    )
}

pub const DONE_EVENT: &str = "data: [DONE]\n\n";

/// The SSE events of a vLLM stream of `tokens` tokens (finish `length`), usage chunk and [DONE].
pub fn vllm_events(tokens: u64, prompt: u64) -> Vec<String> {
    let mut v: Vec<String> = (1..=tokens)
        .map(|n| vllm_event(n, prompt, (n == tokens).then_some("length")))
        .collect();
    v.push(vllm_usage_event(tokens, prompt));
    v.push(DONE_EVENT.to_string());
    v
}

/// A whole vLLM response as writes: the head, then one chunk per event, then the last chunk.
pub fn vllm_writes(tokens: u64, prompt: u64) -> Vec<Step> {
    let mut steps = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for e in vllm_events(tokens, prompt) {
        steps.push(Step::Write(chunk(e.as_bytes())));
    }
    steps.push(Step::Write(LAST_CHUNK.to_vec()));
    steps
}

/// `[ReadRequest, writes...]`.
pub fn respond(writes: Vec<Step>) -> Vec<Step> {
    let mut s = vec![Step::ReadRequest];
    s.extend(writes);
    s
}

pub fn json_response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `llmspeed capacity ARGS` parsed through the real `Cli`, as `main` parses it.
pub fn capacity_args(args: &[&str]) -> Result<llmspeed::cli::capacity::CapacityArgs, String> {
    let mut argv: Vec<std::ffi::OsString> = vec!["llmspeed".into(), "capacity".into()];
    argv.extend(args.iter().map(|a| a.into()));
    match llmspeed::cli::try_parse(argv) {
        Ok(c) => match c.command {
            llmspeed::cli::Command::Capacity(a) => Ok(*a),
            other => panic!("not capacity: {other:?}"),
        },
        Err(e) => Err(e.to_string()),
    }
}
