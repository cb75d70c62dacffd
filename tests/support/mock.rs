//! The simulated server in-process for integration tests: `MockServer::start(config)` binds
//! 127.0.0.1:0, serves until `stop()`, and checks that `serve` shut down cleanly. Tests that
//! are not async themselves run it inside [`runtime`].
#![allow(dead_code)]

use llmspeed::mock::{serve, MockConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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
