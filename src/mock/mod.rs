//! The simulated vLLM-like server (`llmspeed mock`): endpoints, chunk shapes, metrics and error
//! bodies as vLLM sends them, over a real-time simulated engine with continuous batching, a
//! paged KV cache and a prefix cache. Tests, demos and the self-test use it as ground truth.
//!
//! Layout: `tokenizer`/`text` (what tokens are), `engine` (pure state machine: who runs, when a
//! token is due), `driver` (runs the engine on its own thread in real time), `http` (hyper 1
//! service and the SSE body), `native` (SGLang's `/generate` and TGI's `/generate_stream`:
//! request parsing and event lines), `responses` (the OpenAI Responses API's request and
//! typed events), `faults` (injected failures and the connection wrapper that
//! makes byte-level ones possible), `trace` (ground-truth write times), `reqlog` (each request as received), `metrics`, `config`.
//!
//! Architecture invariant: its HTTP side is hyper's and it shares no code with the client in
//! `net`/`proto`, so that each side checks the other. The engine never sees a clock or socket.

pub mod config;
pub mod driver;
pub mod engine;
pub mod faults;
pub mod http;
pub mod image;
pub mod metrics;
pub mod native;
pub mod reqlog;
pub mod request;
pub mod responses;
pub mod sendstamp;
pub mod text;
pub mod tokenizer;
pub mod trace;

pub use config::{MockConfig, Profile};

use crate::clock::Clock;
use driver::Driver;
use faults::{ConnCtl, FaultIo};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use reqlog::RequestLog;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokenizer::Tokenizer;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use trace::TraceSink;

/// How long open streams may run on after shutdown is requested before they are cut.
const DRAIN: Duration = Duration::from_secs(2);

/// State shared by every connection.
pub struct App {
    pub cfg: MockConfig,
    pub tok: Tokenizer,
    pub driver: Driver,
    pub trace: Option<TraceSink>,
    /// Where each request is logged as received (`MockConfig::request_log`).
    pub request_log: Option<RequestLog>,
    /// Completion requests seen (drives fault draws and loop selection).
    pub requests: AtomicU64,
    /// Next engine sequence tag.
    pub tags: AtomicU64,
    /// Unix seconds at start, for `created` fields.
    pub created: u64,
    /// Requests answered `503 Loading model` so far (`MockConfig::loading_requests`).
    pub loading_answered: AtomicU64,
}

/// One connection's HTTP/1.1 service until it ends or the server stops (gracefully).
async fn serve_conn<S>(
    io: S,
    app: Arc<App>,
    ctl: Arc<ConnCtl>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc_ctl = ctl.clone();
    let svc = service_fn(move |req| {
        let app = app.clone();
        let ctl = svc_ctl.clone();
        async move { Ok::<_, std::convert::Infallible>(http::handle(app, ctl, req).await) }
    });
    let conn = http1::Builder::new().serve_connection(TokioIo::new(FaultIo::new(io, ctl)), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Serve the mock on an already-bound listener until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    config: MockConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    config
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let (trace, trace_thread) = match (&config.trace_sink, &config.trace) {
        (Some(s), _) => (Some(s.clone()), None),
        (None, Some(p)) => {
            let (s, h) = TraceSink::create(p)?;
            (Some(s), Some(h))
        }
        (None, None) => (None, None),
    };
    let (request_log, request_log_thread) = match &config.request_log {
        Some(p) => {
            let (l, h) = RequestLog::create(p)?;
            (Some(l), Some(h))
        }
        None => (None, None),
    };
    let app = Arc::new(App {
        driver: Driver::start_with_hook(
            config.engine.clone(),
            Clock::new(),
            config.step_hook.clone(),
        )?,
        tok: Tokenizer::new(),
        trace,
        request_log,
        requests: AtomicU64::new(0),
        tags: AtomicU64::new(0),
        loading_answered: AtomicU64::new(0),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cfg: config,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => {
                let sock = match r {
                    Ok((s, _)) => s,
                    Err(_) => {
                        // Out of descriptors or an aborted handshake: back off, keep serving.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                let stamper = app.trace.as_ref().map(|t| {
                    let (clock, start) = app.driver.time_base();
                    let w = trace::WriteStamper::new(t.clone(), clock, start);
                    // A connection the kernel will not stamp keeps its writes' spans alone.
                    if app.cfg.send_stamps && sendstamp::enable(sock.as_raw_fd()).is_ok() {
                        w.with_send_stamps(sock.as_raw_fd())
                    } else {
                        w
                    }
                });
                let ctl = Arc::new(ConnCtl::new(sock.as_raw_fd(), stamper));
                let app = app.clone();
                let stop = stop_rx.clone();
                let tls = app.cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from);
                conns.spawn(async move {
                    match tls {
                        None => serve_conn(sock, app, ctl, stop).await,
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(sock).await {
                                serve_conn(s, app, ctl, stop).await;
                            }
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    // Last reference: stops the engine thread and closes the trace and request log channels.
    drop(app);
    for (what, h) in [("trace", trace_thread), ("request log", request_log_thread)] {
        let Some(h) = h else { continue };
        match tokio::task::spawn_blocking(move || h.join()).await {
            Ok(Ok(r)) => r?,
            _ => {
                return Err(std::io::Error::other(format!(
                    "the {what} writer thread panicked"
                )))
            }
        }
    }
    Ok(())
}
