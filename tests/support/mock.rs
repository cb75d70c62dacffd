//! The simulated server in-process for integration tests: `MockServer::start(config)` binds
//! 127.0.0.1:0, serves until `stop()`, and checks that `serve` shut down cleanly. Tests that
//! are not async themselves run it inside [`runtime`], or on a thread of its own
//! ([`MockThread`]).
#![allow(dead_code)]

use llmspeed::mock::{serve, MockConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The simulated server whose capacity follows from its settings (the capacity tests' known
/// answers): a decode step of `base_us + per_seq_us x batch` (the context terms 0), prefill
/// nearly free, at most `max_num_seqs` sequences running; the demo profile otherwise.
pub fn analytic(max_num_seqs: u32, base_us: f64, per_seq_us: f64) -> MockConfig {
    let mut c = MockConfig::profile(llmspeed::mock::Profile::Demo);
    c.engine.max_num_seqs = max_num_seqs;
    c.engine.decode.base_us = base_us;
    c.engine.decode.per_seq_us = per_seq_us;
    c.engine.decode.per_ktok_total_us = 0.0;
    c.engine.decode.per_ktok_max_us = 0.0;
    c.engine.prefill.rate_tok_s = 1e9;
    c
}

/// Our client for `url` with `--packet-stamps` (a packet ring per connection), or `None` where
/// packet sockets cannot open here (no CAP_NET_RAW, not Linux). Under `CI=true` (root, Linux)
/// they must open: the test fails rather than fall back.
pub fn packet_client_for(url: &str) -> Option<llmspeed::net::Client> {
    let target = llmspeed::net::Target::parse(url).expect("the mock's URL");
    let mut cfg = llmspeed::net::ClientConfig::new(target);
    cfg.packet_stamps = true;
    let client = llmspeed::net::Client::new(cfg, llmspeed::clock::Clock::new()).expect("a client");
    match client.packet_stamps() {
        Ok(_) => Some(client),
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "CI=true: packet stamps must open here (CI runs as root): {}",
                why.note()
            )
        }
        Err(why) => {
            eprintln!(
                "packet stamps unavailable, socket stamps instead: {}",
                why.note()
            );
            None
        }
    }
}

/// The stamp source the commands use by default on Linux here: `packet` where packet sockets
/// open (root or CAP_NET_RAW; always under `CI=true`, which runs as root), else `kernel`.
pub fn default_stamp_source() -> &'static str {
    match llmspeed::net::packet::open_hub(false, 1) {
        Ok(_) => "packet",
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "CI=true: packet stamps must open here (CI runs as root): {}",
                why.note()
            )
        }
        Err(_) => "kernel",
    }
}

pub struct MockServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl MockServer {
    pub async fn start(cfg: MockConfig) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, cfg, async move {
            let _ = rx.await;
        }));
        MockServer {
            addr,
            stop: Some(tx),
            task,
        }
    }

    /// Our client for this server, on a fresh clock.
    pub fn client(&self) -> llmspeed::net::Client {
        let target = llmspeed::net::Target::parse(&self.url()).expect("the mock's URL");
        llmspeed::net::Client::new(
            llmspeed::net::ClientConfig::new(target),
            llmspeed::clock::Clock::new(),
        )
        .expect("a client")
    }

    /// Our client with `--packet-stamps` for this server ([`packet_client_for`]).
    pub fn packet_client(&self) -> Option<llmspeed::net::Client> {
        packet_client_for(&self.url())
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Asks the server to shut down and waits (at most 10 s) for `serve` to return `Ok`.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let r = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("serve did not return after shutdown");
        r.unwrap().expect("serve failed");
    }
}

/// A two-worker runtime, as the tests that drive the matrix from synchronous code use.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The simulated server on its own OS thread with its own current-thread runtime (as `llmspeed
/// mock`, `matrix --mock` and the self-test run it): the client's runtime never delays its
/// writes, and a handler that blocks that thread blocks the whole server.
pub struct MockThread {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl MockThread {
    /// Binds 127.0.0.1:0 on the new thread and returns once the address is known.
    pub fn start(cfg: MockConfig) -> MockThread {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                serve(listener, cfg, async move {
                    let _ = stop_rx.await;
                })
                .await
            })
        });
        MockThread {
            addr: addr_rx.recv().unwrap(),
            stop,
            thread,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Asks the server to shut down and waits for its thread; `serve` must have returned `Ok`.
    pub fn stop(self) {
        let _ = self.stop.send(());
        self.thread
            .join()
            .expect("the server thread panicked")
            .expect("serve failed");
    }
}

/// A [`MockThread`] tracing in memory (the self-test's ground truth): the Fast profile with a
/// decode step of `step_us`, and its trace by request id once stopped.
pub struct TracedMock {
    pub server: MockThread,
    pub addr: SocketAddr,
    trace: std::sync::mpsc::Receiver<llmspeed::mock::trace::TraceRec>,
}

impl TracedMock {
    pub fn start(step_us: f64) -> TracedMock {
        let (sink, trace) = llmspeed::mock::trace::TraceSink::memory();
        let mut cfg = MockConfig::profile(llmspeed::mock::Profile::Fast);
        cfg.engine.decode.base_us = step_us;
        cfg.trace_sink = Some(sink);
        let server = MockThread::start(cfg);
        TracedMock {
            addr: server.addr,
            server,
            trace,
        }
    }

    /// Stops the server and returns its trace by request id, each in token order.
    pub fn finish(self) -> std::collections::HashMap<String, Vec<llmspeed::mock::trace::TraceRec>> {
        self.server.stop();
        let mut by_id: std::collections::HashMap<String, Vec<_>> = Default::default();
        for r in self.trace.try_iter() {
            let id: String = serde_json::from_str(&r.request_id_json).unwrap();
            by_id.entry(id).or_default().push(r);
        }
        for recs in by_id.values_mut() {
            recs.sort_by_key(|r| r.index);
        }
        by_id
    }
}
