//! `llmspeed selftest`: how truthfully does this machine measure? Runs the simulated server
//! (`mock`) on its own threads, drives it with the real streaming client (`net`) at a given
//! shape, and compares every client stamp with the server's ground-truth write stamps.
//!
//! Owns: the shape of the run, matching client events to trace records, and the error figures
//! (TTFT error, gap error, coalesced gaps, server write lag, client CPU per token, peak
//! memory). `external` runs any vLLM-compatible benchmark command instead of our client and
//! `score` scores its `--save-detailed` result (pure); `pin` places the server and the client
//! on given CPUs; `fds` makes room for every stream's descriptors, or refuses the run.
//!
//! Architecture invariants:
//! - The server never shares the client's executor: it runs on its own current-thread runtime
//!   on its own OS thread (plus the engine's thread); the client gets one multi-thread runtime.
//! - Both sides stamp with the same TSC-backed `quanta` counter (`Clock::raw`), so a server
//!   write and a client read are on one timeline without any offset estimate. Only TTFT needs
//!   that; gaps are differences within one side.
//! - Nothing here touches the per-token path: the client runs exactly as `stream` does
//!   (`NoopObserver`), and all matching happens after the run.
//! - A figure a client cannot be scored on (an external client's stamps are on its own clock:
//!   delivery, TTFT against first write) is `None` (JSON `null`), never 0.

pub mod cpu_window;
pub mod external;
pub mod fds;
pub mod pin;
pub mod score;

use crate::analysis::client_lag::{self, Arrival, Gap, GapKind, LagSamples};
use crate::analysis::stats;
use crate::clock::Clock;
use crate::mock::trace::{TraceRec, TraceSink};
use crate::mock::{self, MockConfig, Profile};
use crate::net::packet::hub::Lost;
use crate::net::request::{Generation, Prompt};
use crate::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target, Timeouts};
use crate::timeline::{ErrorKind, StampFallback, StampSource, Timeline};
use pin::{BusyLoop, Mask, Pin};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to simulate and how to drive it.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Concurrent streams, all started together.
    pub streams: usize,
    /// Server decode step: the true gap between consecutive tokens of a stream.
    pub gap: Duration,
    /// Output tokens per stream.
    pub tokens: u32,
    /// Extra server-side delay before a request reaches the engine (its first token then comes
    /// one to two decode steps later).
    pub first_token: Duration,
    /// Worker threads of the client's runtime.
    pub client_threads: usize,
    /// Kernel receive stamps on the client's reads (`--no-kernel-stamps` turns them off).
    pub kernel_stamps: bool,
    /// Each event stamped with its own TCP segment's arrival (`--packet-stamps`, see
    /// `net::packet`); the report's `stamp_source` says whether they were had.
    pub packet_stamps: bool,
    /// Open every stream's connection before the start (`--preconnect`, as `bench serve
    /// --preconnect`), so the start is requests only.
    pub preconnect: bool,
    /// The simulated server takes the kernel's send stamp of every write (`--send-stamps`,
    /// `mock::sendstamp`), and the client is scored against those too.
    pub send_stamps: bool,
}

impl Shape {
    pub fn validate(&self) -> Result<(), String> {
        if self.streams == 0 {
            return Err("--streams must be at least 1".into());
        }
        if self.tokens < 2 {
            return Err("--tokens must be at least 2 (a gap needs two tokens)".into());
        }
        if self.gap < Duration::from_micros(10) || self.gap > Duration::from_secs(10) {
            return Err("--gap must be between 10us and 10s".into());
        }
        if self.first_token > Duration::from_secs(60) {
            return Err("--first-token must be at most 60s".into());
        }
        if self.client_threads == 0 {
            return Err("--client-threads must be at least 1".into());
        }
        Ok(())
    }
}

/// Why the self-test could not run at all (failed streams are reported, not errors).
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error("invalid shape: {0}")]
    Shape(String),
    #[error("cannot start the simulated server: {0}")]
    Server(String),
    #[error("cannot start the client: {0}")]
    Client(String),
    #[error("{0}")]
    Usage(String),
    #[error("external client: {0}")]
    External(String),
    /// The process may not open the descriptors the run needs (see [`fds`]).
    #[error("{0}")]
    Limit(String),
}

/// What a report's client CPU figures cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuScope {
    /// The in-process client: its runtime's threads and the thread driving it, whole run
    /// (connecting and request writing included).
    ClientThreads,
    /// An external client's process tree between the first request's arrival at the server
    /// and the server's last token write (sampled every 2 ms; see [`cpu_window`]).
    StreamingWindow,
    /// An external client from exec to exit, when the sampler could not bracket the window.
    WholeProcess,
}

/// The result. Units are in the field names; every figure is over all matched tokens.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The llmspeed that measured ([`crate::VERSION`]: version, commit, target).
    pub tool_version: &'static str,
    pub streams: usize,
    pub tokens_per_stream: u32,
    pub gap_ms: f64,
    pub first_token_ms: f64,
    /// Worker threads of our in-process client; `None` for an external one.
    pub client_threads: Option<usize>,
    /// Whether our client opened every connection before the start (`--preconnect`); `None`
    /// for an external client (its own flags say).
    pub preconnect: Option<bool>,
    /// `llmspeed (in-process)`, or the external command line as given (placeholders kept).
    pub client: String,
    /// CPUs the server and the client were pinned to (`--pin`), `None` when not pinned.
    pub server_cpus: Option<Vec<usize>>,
    pub client_cpus: Option<Vec<usize>>,
    /// Output tokens the client received (sum of final usage over streams).
    pub tokens: u64,
    /// Tokens whose client event was matched to a server trace record.
    pub tokens_matched: u64,
    /// Tokens the server traced.
    pub trace_records: u64,
    pub failed_streams: usize,
    /// Failures by kind (statistics keys, not messages).
    pub errors: HashMap<&'static str, usize>,
    /// One example failure message, when any stream failed.
    pub first_error: Option<String>,
    /// Mean of (server's first write - client's send stamp): what TTFT truly was. Needs the
    /// client's send stamp on our clock: `None` for an external client.
    pub true_ttft_ms_mean: Option<f64>,
    /// Client first-token stamp minus the server's first write stamp (see docs/selftest.md);
    /// `None` for an external client (its stamps are on its own clock).
    pub ttft_error_ms_mean: Option<f64>,
    pub ttft_error_ms_p50: Option<f64>,
    pub ttft_error_ms_p99: Option<f64>,
    pub ttft_error_ms_max: Option<f64>,
    /// Mean of (server's first write - the request's arrival at the server): the TTFT the
    /// server itself saw, from the read that completed the request.
    pub server_ttft_ms_mean: f64,
    /// Client TTFT (first-token stamp - send stamp) minus the server's own TTFT (first write -
    /// arrival): the error against first write plus the request's trip to the server.
    pub ttft_arrival_error_ms_mean: f64,
    pub ttft_arrival_error_ms_p50: f64,
    pub ttft_arrival_error_ms_p99: f64,
    pub ttft_arrival_error_ms_max: f64,
    /// Per request scored token by token: client TPOT minus the server's, TPOT being
    /// (E2EL - TTFT) / (tokens - 1) on each side (the server's: last write - first write over
    /// tokens - 1), µs; and client E2EL (send to last token; an external client's own latency
    /// when its result holds one, else its TTFT plus its ITLs) minus the server's (last write
    /// - arrival), ms. Signed, like the TTFT error against arrival.
    pub tpot_error_us_mean: f64,
    pub tpot_error_us_p50: f64,
    pub tpot_error_us_p99: f64,
    pub tpot_error_us_max: f64,
    pub e2el_error_ms_mean: f64,
    pub e2el_error_ms_p50: f64,
    pub e2el_error_ms_p99: f64,
    pub e2el_error_ms_max: f64,
    /// The server's own TPOT and E2EL, means over the same requests, ms.
    pub server_tpot_ms_mean: f64,
    pub server_e2el_ms_mean: f64,
    /// How the client's requests were matched to the trace: `request_id` (`x-request-id`),
    /// or `arrival_order` for a client that sends none (see docs/selftest.md).
    pub matched_by: &'static str,
    /// |client gap - server gap| over consecutive tokens of a stream.
    pub gap_error_us_mean: f64,
    pub gap_error_us_p50: f64,
    pub gap_error_us_p99: f64,
    pub gap_error_us_max: f64,
    /// Consecutive tokens the client saw (almost) together although the server wrote them
    /// apart: client gap < 10% of the server's, server gap >= half the nominal gap.
    pub coalesced_gaps: u64,
    /// Streams whose number of client token times (an external client: ITLs + 1) differs from
    /// the trace's tokens: counted, and their gaps not scored.
    pub requests_itl_mismatch: usize,
    /// Client read stamp minus server write stamp, every matched token: where gap error comes
    /// from (its jitter). Negative when the server was descheduled between its write returning
    /// and its stamp: the ground truth's own noise. `None` for an external client.
    pub delivery_us_min: Option<f64>,
    pub delivery_us_p50: Option<f64>,
    pub delivery_us_p99: Option<f64>,
    /// Server write time minus the engine's due time: how late the server itself ran.
    pub server_write_lag_us_p50: f64,
    pub server_write_lag_us_p99: f64,
    pub server_write_lag_us_max: f64,
    /// CPU time of the client's runtime threads (and the thread driving it) per token; `None`
    /// when no token was measured (a run stopped before any stream ended).
    pub client_cpu_ns_per_token: Option<f64>,
    /// The same split into user space (our code) and kernel (recv, epoll, TCP ACKs).
    pub client_cpu_user_ns_per_token: Option<f64>,
    pub client_cpu_sys_ns_per_token: Option<f64>,
    pub client_cpu_ms: f64,
    /// What `client_cpu_*` covers (see [`CpuScope`]).
    pub client_cpu_scope: CpuScope,
    /// An external client's CPU from exec to exit (start-up, tokenizer and dataset loading,
    /// result writing included) per token; `None` for the in-process client.
    pub client_cpu_whole_run_ns_per_token: Option<f64>,
    /// Which clock stamped the client's reads: `kernel` (receive stamps), `client_clock` or
    /// `mixed`; `stamp_fallback` says why any read used the client's clock.
    pub stamp_source: Option<&'static str>,
    pub stamp_fallback: Option<&'static str>,
    /// With packet stamps: the server's segments the client's packet ring had no room for,
    /// plus those dropped from a connection's full inbox (`net::packet::hub`); their events
    /// kept their reads' stamps (`not_in_ring`). `None` without packet stamps.
    pub packet_segments_lost: Option<u64>,
    /// How late the client woke up to its reads: realtime when the read returned minus the
    /// kernel's receive stamp, over token events with a kernel stamp (`None` without any, and
    /// for an external client, whose reads we cannot see).
    /// Kernel stamps take it out of every figure above; it is what the client's clock would
    /// have added.
    pub client_wakeup_us_p50: Option<f64>,
    pub client_wakeup_us_p99: Option<f64>,
    pub client_wakeup_us_max: Option<f64>,
    /// The client's lag and the bounds it states (`analysis::client_lag`), scored against
    /// the trace; all `None` for an external client. Gaps whose two ends were each their
    /// read's newest data (known to the stamp's resolution), and gaps with an end read
    /// together with other data (known to that read's spread), percent of scored gaps.
    pub gaps_apart_percent: Option<f64>,
    pub gaps_merged_percent: Option<f64>,
    /// The bound the client states on each scored gap, µs.
    pub gap_bound_us_p50: Option<f64>,
    pub gap_bound_us_p99: Option<f64>,
    /// Percent of scored gaps whose true error (`gap_error_us`) lies inside their stated
    /// bound; of streams whose first token's true arrival lies inside its stated bound.
    pub gap_bound_coverage_percent: Option<f64>,
    pub ttft_bound_coverage_percent: Option<f64>,
    /// Each first token outside its bound (the first 16), by how much, µs: positive when the
    /// earliest arrival the client allows for is after the server's write returned (the
    /// bytes reached the client after the call, or the stamp is late), negative when the
    /// latest is before the write began. What to look at when coverage is under 100%.
    pub ttft_bound_misses_us: Vec<f64>,
    /// The truth is known to the span of the server's writes (the kernel took the bytes while
    /// the write ran; the server thread may have been held up on either side of it): a gap
    /// is covered when its bound meets that span. Its width's p99, µs.
    pub truth_span_us_p99: Option<f64>,
    /// How far each scored gap's measurement lies outside the span the truth is known to
    /// (0 inside it): the client's own error, with the server's uncertainty about its own
    /// writes taken out; p50 and p99, µs. `gap_error_us` measures from the writes' returns,
    /// so it holds that uncertainty too. `None` for an external client.
    pub gap_error_beyond_truth_us_p50: Option<f64>,
    pub gap_error_beyond_truth_us_p99: Option<f64>,
    /// The same over the gaps read apart alone (`gaps_apart_percent`): the ones the client says
    /// it knows to the stamp's resolution, whichever way it fell behind on the others; p50
    /// and p99, µs (`None` without any).
    pub gap_error_apart_us_p50: Option<f64>,
    pub gap_error_apart_us_p99: Option<f64>,
    /// Whether the simulated server took the kernel's send stamp of each write
    /// (`--send-stamps`): the truth at a point, not a span. The figures below are `None`
    /// without them.
    pub send_stamps: bool,
    /// Percent of matched tokens whose write had a send stamp (100 on loopback).
    pub send_stamped_percent: Option<f64>,
    /// Send stamps before their own write began: 0 unless stamps are matched to the wrong
    /// writes. Those after it returned: bytes TCP held back and sent later (a congestion window
    /// waiting for a slow reader's ACKs), when the write's return is not when they left.
    pub send_stamps_before_write: Option<u64>,
    pub send_stamps_after_write: Option<u64>,
    /// The true gap error against the send stamps (each gap between the kernel's stamps of its
    /// two writes): the client's own error, without the writes' spans; p50, p99, max, µs.
    pub gap_error_from_send_us_p50: Option<f64>,
    pub gap_error_from_send_us_p99: Option<f64>,
    pub gap_error_from_send_us_max: Option<f64>,
    /// Percent of gaps with a bound whose bound holds the gap between the send stamps.
    pub gap_bound_coverage_from_send_percent: Option<f64>,
    /// Each token's stamp minus its write's send stamp, p50 and p99, µs: how long after the
    /// kernel sent a token the client says it arrived (first tokens included, so TTFT's own
    /// error against a point).
    pub delivery_from_send_us_p50: Option<f64>,
    pub delivery_from_send_us_p99: Option<f64>,
    /// Tokens per read that completed token events.
    pub tokens_per_read_mean: Option<f64>,
    pub tokens_per_read_max: Option<f64>,
    /// Reads that left data waiting in the socket, percent; the bytes the socket held when a
    /// read took its data, p99 (`analysis::client_lag`; `null` where the kernel did not say).
    pub reads_left_data_percent: Option<f64>,
    pub socket_bytes_at_read_p99: Option<f64>,
    /// Intended start → request written, ms.
    pub dispatch_lag_ms_p50: Option<f64>,
    pub dispatch_lag_ms_p99: Option<f64>,
    /// The verdict from the client's own figures (`client_lag::verdict`), and its reasons.
    pub client_bound: Option<bool>,
    pub client_bound_reasons: Vec<String>,
    /// Why some or all gaps have no bound, so the stamp half of the verdict could not judge
    /// them (`client_lag::no_bound_reason`: TLS, `--no-kernel-stamps`, ...); `null` when every
    /// gap has its bound.
    pub no_bound_reason: Option<String>,
    /// Whether the verdict's stamp reasons fired (`client_lag::stamp_reasons`: the bounds too
    /// wide for the figures); the trace answers the same question below. The dispatch lag is
    /// the client's own exact reading and needs no trace.
    pub stamps_too_loose: Option<bool>,
    /// The trace's answer: a gap percentile (p50, p99) or the TTFT p50 off the trace's by
    /// more than the verdict's shares of it.
    pub client_limited_in_truth: Option<bool>,
    pub client_limited_in_truth_reasons: Vec<String>,
    /// Whether `--busy-loop` spun on the client's CPUs during the run.
    pub busy_loop: bool,
    /// Peak resident memory of the whole process (server and client together); for an
    /// external client, the client's own (its largest process).
    pub peak_rss_mb: f64,
    pub wall_s: f64,
    /// The external client's work folder, when `--keep` kept it.
    pub work_dir: Option<String>,
    /// The signal that stopped the run early (`SIGINT`, `SIGTERM`): the streams it cut are
    /// counted under `errors.cancelled` and every figure covers only what arrived. `None` for
    /// a whole run.
    pub interrupted: Option<&'static str>,
}

/// Run the self-test. Blocks; must not be called from inside a tokio runtime.
pub fn run(shape: &Shape) -> Result<Report, SelftestError> {
    run_client(shape, Duration::ZERO, None, false, &Cancel::new())
}

/// [`run`] with the server's threads on `pin.server` and the client's on `pin.client`.
pub fn run_pinned(shape: &Shape, pin: &Pin) -> Result<Report, SelftestError> {
    run_client(shape, Duration::ZERO, Some(pin), false, &Cancel::new())
}

/// [`run`] (pinned when `pin` is given) that `stop` ends early: the streams are cut, the
/// report covers what arrived and says why it stopped (`Report::interrupted`, the stop's
/// reason).
pub fn run_stoppable(
    shape: &Shape,
    pin: Option<&Pin>,
    stop: &Cancel,
) -> Result<Report, SelftestError> {
    run_client(shape, Duration::ZERO, pin, false, stop)
}

/// [`run_stoppable`] pinned, with a thread spinning on each of the client's CPUs for the
/// whole run (`--busy-loop`): a client that must share its cores.
pub fn run_with_busy_loop(
    shape: &Shape,
    pin: &Pin,
    stop: &Cancel,
) -> Result<Report, SelftestError> {
    run_client(shape, Duration::ZERO, Some(pin), true, stop)
}

/// Test hook: [`run`] with a client that blocks its thread for `busy` after every event, so
/// each following read returns (and is stamped) up to that much after its data arrived: what a
/// client stamping late would report. Tests use it to prove their bounds catch that.
#[doc(hidden)]
pub fn run_with_busy_client(shape: &Shape, busy: Duration) -> Result<Report, SelftestError> {
    run_client(shape, busy, None, false, &Cancel::new())
}

/// What the client connects to instead of the server itself: a proxy or a TLS terminator in
/// front of it (nginx, the suite's TLS front), started once the server's address is known.
pub struct Front {
    /// The base URL the client uses (`https://...` for TLS).
    pub url: String,
    /// `--ca-cert` for a TLS front.
    pub ca_file: Option<std::path::PathBuf>,
    /// Whatever keeps the front running; dropped after the run.
    pub keep: Box<dyn std::any::Any>,
}

/// Test hook: [`run`] with the client going through the front `front` starts in front of the
/// server (given its address). The trace is still the server's, so each figure's error includes
/// what the front added.
#[doc(hidden)]
pub fn run_fronted(
    shape: &Shape,
    front: impl FnOnce(std::net::SocketAddr) -> Front,
) -> Result<Report, SelftestError> {
    run_with_front(
        shape,
        Duration::ZERO,
        None,
        false,
        &Cancel::new(),
        Some(&mut Some(front)),
        None,
    )
}

/// TLS on the simulated server itself (so the trace stamps each TLS write) and the file the
/// client trusts its certificate with (`--ca-cert`).
pub struct TlsSetup {
    pub server: std::sync::Arc<rustls::ServerConfig>,
    pub ca_file: std::path::PathBuf,
}

impl TlsSetup {
    /// `selftest --tls-cert CERT --tls-key KEY`: the server serves CERT (PEM, with its chain)
    /// with KEY (PEM), and the client trusts CERT as `--ca-cert` (a certificate made with
    /// `openssl req -x509 ... -addext subjectAltName=IP:127.0.0.1`).
    pub fn from_pem_files(
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<TlsSetup, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("cannot read the key {}: {e}", key.display()))?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
            .map_err(|e| format!("cannot serve {}: {e}", cert.display()))?;
        Ok(TlsSetup {
            server: std::sync::Arc::new(server),
            ca_file: cert.to_path_buf(),
        })
    }
}

/// [`run_stoppable`] (beside a busy loop when `busy_loop`, pinned) over TLS when `tls` is given.
pub fn run_stoppable_over(
    shape: &Shape,
    pin: Option<&Pin>,
    busy_loop: bool,
    stop: &Cancel,
    tls: Option<&TlsSetup>,
) -> Result<Report, SelftestError> {
    run_with_front(
        shape,
        Duration::ZERO,
        pin,
        busy_loop && pin.is_some(),
        stop,
        None::<&mut Option<fn(std::net::SocketAddr) -> Front>>,
        tls,
    )
}

/// Test hook: [`run`] over TLS (pinned when `pin` is given; with a client blocking `busy`
/// after every event, as [`run_with_busy_client`]).
#[doc(hidden)]
pub fn run_tls(
    shape: &Shape,
    tls: &TlsSetup,
    pin: Option<&Pin>,
    busy: Duration,
) -> Result<Report, SelftestError> {
    run_with_front(
        shape,
        busy,
        pin,
        false,
        &Cancel::new(),
        None::<&mut Option<fn(std::net::SocketAddr) -> Front>>,
        Some(tls),
    )
}

fn run_client(
    shape: &Shape,
    busy: Duration,
    pin: Option<&Pin>,
    busy_loop: bool,
    stop: &Cancel,
) -> Result<Report, SelftestError> {
    run_with_front(
        shape,
        busy,
        pin,
        busy_loop,
        stop,
        None::<&mut Option<fn(std::net::SocketAddr) -> Front>>,
        None,
    )
}

fn run_with_front<F: FnOnce(std::net::SocketAddr) -> Front>(
    shape: &Shape,
    busy: Duration,
    pin: Option<&Pin>,
    busy_loop: bool,
    stop: &Cancel,
    front: Option<&mut Option<F>>,
    tls: Option<&TlsSetup>,
) -> Result<Report, SelftestError> {
    shape.validate().map_err(SelftestError::Shape)?;
    // The server's and the client's end of each stream (the client's one packet socket, with
    // packet stamps, is among the spare).
    fds::ensure(shape.streams, 2, "the server's end and the client's")
        .map_err(SelftestError::Limit)?;
    let wall = Instant::now();
    let (sink, trace_rx) = TraceSink::memory();
    let mut config = mock_config(shape, sink);
    config.tls = tls.map(|t| t.server.clone());
    let server = ServerThread::start(config, pin.map(|p| Mask::of(&p.server)))?;
    let front = front.and_then(|f| f.take()).map(|f| f(server.addr));
    let (url, ca_file) = match (&front, tls) {
        (Some(f), _) => (f.url.clone(), f.ca_file.clone()),
        (None, Some(t)) => (format!("https://{}", server.addr), Some(t.ca_file.clone())),
        (None, None) => (format!("http://{}", server.addr), None),
    };
    let clock = Clock::new();
    // The busy loop spins for as long as the client runs, and stops before the server does.
    let spinners = pin
        .filter(|_| busy_loop)
        .map(|p| BusyLoop::start(&p.client).map_err(|e| SelftestError::Client(e.to_string())))
        .transpose();
    let run = spinners.and_then(|spin| {
        let run = drive(
            shape,
            (&url, ca_file.as_deref()),
            &clock,
            busy,
            pin.map(|p| Mask::of(&p.client)),
            stop,
        );
        drop(spin);
        run
    });
    drop(front);
    // Stop the server whatever happened to the client, so its thread never outlives us.
    let stopped = server.stop();
    let Driven {
        timelines,
        cpu_ns: (user_ns, sys_ns),
        lost,
    } = run?;
    stopped?;
    // The server has returned: every sink clone is gone and the trace is complete.
    let trace: Vec<TraceRec> = trace_rx.try_iter().collect();
    let mut report = analyse(shape, &clock, &timelines, &trace);
    report.packet_segments_lost = lost.map(|l| l.ring + l.inbox);
    report.busy_loop = busy_loop && pin.is_some();
    report.interrupted = stop
        .is_cancelled()
        .then(|| stop.reason().unwrap_or("SIGINT"));
    let per_token = |ns: u64| per_token(ns as f64, report.tokens);
    report.client_cpu_ms = (user_ns + sys_ns) as f64 / 1e6;
    report.client_cpu_ns_per_token = per_token(user_ns + sys_ns);
    report.client_cpu_user_ns_per_token = per_token(user_ns);
    report.client_cpu_sys_ns_per_token = per_token(sys_ns);
    report.peak_rss_mb = crate::sys::peak_rss_bytes().unwrap_or(0) as f64 / (1024.0 * 1024.0);
    report.server_cpus = pin.map(|p| p.server.cpus().to_vec());
    report.client_cpus = pin.map(|p| p.client.cpus().to_vec());
    report.wall_s = wall.elapsed().as_secs_f64();
    Ok(report)
}

/// The `fast` profile bent into a fixed-gap server: a constant decode step equal to the gap,
/// free prefill, room for every stream in the batch and the KV cache.
fn mock_config(shape: &Shape, sink: TraceSink) -> MockConfig {
    let mut c = MockConfig::profile(Profile::Fast);
    let e = &mut c.engine;
    e.decode.base_us = shape.gap.as_secs_f64() * 1e6;
    e.decode.per_seq_us = 0.0;
    e.decode.per_ktok_total_us = 0.0;
    e.decode.per_ktok_max_us = 0.0;
    e.time_scale = 1.0;
    let per_seq = (shape.tokens as u64 + 16).div_ceil(e.block_size as u64) * e.block_size as u64;
    e.kv_tokens = e.kv_tokens.max(per_seq * shape.streams as u64);
    e.max_num_seqs = e.max_num_seqs.max(shape.streams as u32);
    e.max_num_batched_tokens = e.max_num_batched_tokens.max(shape.streams as u32 * 4);
    c.max_model_len = c.max_model_len.max(shape.tokens + 64);
    c.admission_delay = shape.first_token;
    c.trace_sink = Some(sink);
    c.send_stamps = shape.send_stamps;
    c
}

/// The request id of stream `i`; the trace is keyed by it.
fn request_id(i: usize) -> String {
    format!("selftest-{i}")
}

/// What [`drive`] returns.
struct Driven {
    /// In stream order.
    timelines: Vec<Timeline>,
    /// The client's CPU time (user, system).
    cpu_ns: (u64, u64),
    /// With packet stamps, what the client's packet ring lost.
    lost: Option<Lost>,
}

/// Start every stream at once on the client's own runtime.
fn drive(
    shape: &Shape,
    addr: (&str, Option<&std::path::Path>),
    clock: &Clock,
    busy: Duration,
    pin: Option<Mask>,
    stop: &Cancel,
) -> Result<Driven, SelftestError> {
    let reqs = stream_requests(shape)?;
    let client = client_for(shape, addr, clock)?;
    let packets = client.clone();
    let rt = ClientRuntime::build(shape.client_threads, pin)?;
    // The thread driving `block_on` runs client work too; it is the caller's, so its own mask
    // comes back afterwards.
    let restore = match pin {
        Some(mask) => {
            let old = Mask::current().map_err(|e| SelftestError::Client(format!("pin: {e}")))?;
            mask.apply()
                .map_err(|e| SelftestError::Client(format!("cannot pin the client: {e}")))?;
            Some(old)
        }
        None => None,
    };
    let main_cpu0 = thread_cpu_ns_pair();
    let timelines = rt
        .rt
        .block_on(run_streams(shape, client, reqs, busy, stop.clone()));
    let main_cpu1 = thread_cpu_ns_pair();
    let lost = packets.packet_lost();
    let (worker_user, worker_sys, pin_failures) = rt.finish();
    if let Some(old) = restore {
        let _ = old.apply();
    }
    if pin_failures > 0 {
        return Err(SelftestError::Client(
            "cannot pin the client runtime's threads to the --pin CPUs".into(),
        ));
    }
    let timelines = timelines.map_err(|e| SelftestError::Client(format!("--preconnect: {e}")))?;
    let user = worker_user + main_cpu1.0.saturating_sub(main_cpu0.0);
    let sys = worker_sys + main_cpu1.1.saturating_sub(main_cpu0.1);
    Ok(Driven {
        timelines,
        cpu_ns: (user, sys),
        lost,
    })
}

/// One request per stream, differing only in the id the trace is keyed by (the body is
/// shared `Bytes`).
fn stream_requests(shape: &Shape) -> Result<Vec<StreamRequest>, SelftestError> {
    let mut g = Generation::new("mock-model", Prompt::Text(" the".into()));
    g.max_tokens = Some(shape.tokens);
    g.ignore_eos = true;
    g.continuous_usage = true;
    let base = g
        .stream_request(Some(false))
        .map_err(SelftestError::Client)?;
    Ok((0..shape.streams)
        .map(|i| StreamRequest {
            request_id: Some(request_id(i)),
            ..base.clone()
        })
        .collect())
}

/// One client, one pool, as `bench serve` and the matrix use it: what is measured is the
/// client users run.
fn client_for(
    shape: &Shape,
    (url, ca_file): (&str, Option<&std::path::Path>),
    clock: &Clock,
) -> Result<Client, SelftestError> {
    let target =
        Target::parse(&format!("{url}/v1")).map_err(|e| SelftestError::Client(e.to_string()))?;
    let mut cfg = ClientConfig::new(target);
    cfg.ca_file = ca_file.map(|p| p.to_path_buf());
    cfg.max_idle = shape.streams;
    cfg.kernel_stamps = shape.kernel_stamps;
    cfg.packet_stamps = shape.packet_stamps;
    cfg.timeouts = Timeouts {
        connect: Some(Duration::from_secs(30)),
        first_byte: Some(Duration::from_secs(120)),
        gap: Some(Duration::from_secs(60)),
        total: None,
    };
    Client::new(cfg, clock.clone()).map_err(|e| SelftestError::Client(e.to_string()))
}

/// The client's multi-thread runtime, its threads pinned where asked, adding up their CPU
/// time as they stop.
struct ClientRuntime {
    rt: tokio::runtime::Runtime,
    /// User and system ns of the runtime's threads that have stopped.
    cpu: Arc<[AtomicU64; 2]>,
    /// Pinning failures on the runtime's threads cannot be returned from the hook: counted,
    /// and the run refused afterwards.
    pin_failures: Arc<AtomicU64>,
}

impl ClientRuntime {
    fn build(threads: usize, pin: Option<Mask>) -> Result<ClientRuntime, SelftestError> {
        let cpu = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let stop_cpu = cpu.clone();
        let pin_failures = Arc::new(AtomicU64::new(0));
        let start_failures = pin_failures.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("selftest-client")
            .enable_all()
            .on_thread_start(move || {
                if let Some(mask) = pin {
                    if mask.apply().is_err() {
                        start_failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            // A thread's CPU clock starts at zero, so its value at exit is all it ever used.
            .on_thread_stop(move || {
                let (user, sys) = thread_cpu_ns_pair();
                stop_cpu[0].fetch_add(user, Ordering::Relaxed);
                stop_cpu[1].fetch_add(sys, Ordering::Relaxed);
            })
            .build()
            .map_err(|e| SelftestError::Client(format!("runtime: {e}")))?;
        Ok(ClientRuntime {
            rt,
            cpu,
            pin_failures,
        })
    }

    /// Shut the runtime down; its threads' CPU time (user, system ns) and pinning failures.
    fn finish(self) -> (u64, u64, u64) {
        // Joins the workers, which runs their stop hooks.
        drop(self.rt);
        (
            self.cpu[0].load(Ordering::Relaxed),
            self.cpu[1].load(Ordering::Relaxed),
            self.pin_failures.load(Ordering::Relaxed),
        )
    }
}

/// Every stream started at once behind a barrier; the timelines in stream order. Fails only
/// where `--preconnect` could not open the connections.
async fn run_streams(
    shape: &Shape,
    client: Client,
    reqs: Vec<StreamRequest>,
    busy: Duration,
    stop: Cancel,
) -> Result<Vec<Timeline>, crate::timeline::RequestError> {
    if shape.preconnect {
        // Every stream's connection is open before the start; the pool holds them all.
        client.preconnect(shape.streams).await?;
    }
    let go = Arc::new(tokio::sync::Barrier::new(shape.streams + 1));
    let mut tasks = Vec::with_capacity(shape.streams);
    for req in reqs {
        let (go, client, stop) = (go.clone(), client.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            go.wait().await;
            let start = client.clock().raw();
            if busy.is_zero() {
                return client.stream(&req, start, &mut NoopObserver, &stop).await;
            }
            // Test hook only (see `run_with_busy_client`): blocking is the point.
            let mut slow = |_: &crate::timeline::EventRecord, _: Option<&[u8]>| {
                std::thread::sleep(busy);
                crate::net::Flow::Continue
            };
            client.stream(&req, start, &mut slow, &stop).await
        }));
    }
    go.wait().await;
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(tl) => out.push(tl),
            Err(e) => {
                let mut tl = Timeline::new(0, 0, false);
                tl.outcome = Err(crate::timeline::RequestError::new(
                    ErrorKind::Cancelled,
                    format!("client task failed: {e}"),
                ));
                out.push(tl);
            }
        }
    }
    Ok(out)
}

fn analyse(shape: &Shape, clock: &Clock, timelines: &[Timeline], trace: &[TraceRec]) -> Report {
    let truth = score::index_trace(trace);
    let mut scores = score::Scores::default();
    let mut own = OwnStamps::default();
    let mut lag = LagSamples::default();
    for (i, tl) in timelines.iter().enumerate() {
        own.add_reads(tl);
        lag.add(tl, clock, 0..u64::MAX);
        let client_t = token_stamps(tl, clock, shape.tokens as usize);
        if let Some(server) = truth.get(request_id(i).as_str()) {
            match_stream(shape, clock, tl, &client_t, server, &mut scores, &mut own);
        }
    }
    let (errors, first_error) = failures(timelines);
    let outcome = Outcome {
        tokens: timelines.iter().map(Timeline::output_tokens).sum(),
        failed_streams: timelines.iter().filter(|t| !t.is_ok()).count(),
        errors,
        first_error,
    };
    let mut report = Report::scored(shape, trace, outcome, &scores);
    report.client = IN_PROCESS.into();
    report.client_threads = Some(shape.client_threads);
    report.preconnect = Some(shape.preconnect);
    own.fill(&mut report);
    own.fill_bounds(&mut report, &lag.summary(None));
    report
}

/// How a run's streams ended, whichever client ran them.
struct Outcome {
    /// Output tokens the client received.
    tokens: u64,
    failed_streams: usize,
    errors: HashMap<&'static str, usize>,
    first_error: Option<String>,
}

impl Report {
    /// The report of any client: the shape, how its streams ended, and the figures it is
    /// scored on against the server's trace. What only our own client's stamps show (on the
    /// server's clock) is `None`; the client's name, CPU, memory and wall time are the
    /// caller's.
    fn scored(shape: &Shape, trace: &[TraceRec], run: Outcome, s: &score::Scores) -> Report {
        let (gap, lag, arrival) = (
            Fig::of(&s.gap_error_us),
            Fig::of(&server_write_lag_us(trace)),
            Fig::of(&s.ttft_arrival_error_ms),
        );
        let (tpot, e2el) = (
            Fig::of(&s.spans.tpot_error_us),
            Fig::of(&s.spans.e2el_error_ms),
        );
        Report {
            tool_version: crate::VERSION,
            streams: shape.streams,
            tokens_per_stream: shape.tokens,
            gap_ms: shape.gap.as_secs_f64() * 1e3,
            first_token_ms: shape.first_token.as_secs_f64() * 1e3,
            client_threads: None,
            preconnect: None,
            client: String::new(),
            server_cpus: None,
            client_cpus: None,
            tokens: run.tokens,
            tokens_matched: s.tokens_matched,
            trace_records: trace.len() as u64,
            failed_streams: run.failed_streams,
            errors: run.errors,
            first_error: run.first_error,
            true_ttft_ms_mean: None,
            ttft_error_ms_mean: None,
            ttft_error_ms_p50: None,
            ttft_error_ms_p99: None,
            ttft_error_ms_max: None,
            server_ttft_ms_mean: Fig::of(&s.server_ttft_ms).mean,
            ttft_arrival_error_ms_mean: arrival.mean,
            ttft_arrival_error_ms_p50: arrival.p50,
            ttft_arrival_error_ms_p99: arrival.p99,
            ttft_arrival_error_ms_max: arrival.max,
            tpot_error_us_mean: tpot.mean,
            tpot_error_us_p50: tpot.p50,
            tpot_error_us_p99: tpot.p99,
            tpot_error_us_max: tpot.max,
            e2el_error_ms_mean: e2el.mean,
            e2el_error_ms_p50: e2el.p50,
            e2el_error_ms_p99: e2el.p99,
            e2el_error_ms_max: e2el.max,
            server_tpot_ms_mean: Fig::of(&s.spans.server_tpot_ms).mean,
            server_e2el_ms_mean: Fig::of(&s.spans.server_e2el_ms).mean,
            matched_by: score::Matching::RequestId.as_str(),
            gap_error_us_mean: gap.mean,
            gap_error_us_p50: gap.p50,
            gap_error_us_p99: gap.p99,
            gap_error_us_max: gap.max,
            coalesced_gaps: s.coalesced_gaps,
            requests_itl_mismatch: s.requests_itl_mismatch,
            delivery_us_min: None,
            delivery_us_p50: None,
            delivery_us_p99: None,
            server_write_lag_us_p50: lag.p50,
            server_write_lag_us_p99: lag.p99,
            server_write_lag_us_max: lag.max,
            client_cpu_ns_per_token: None,
            client_cpu_user_ns_per_token: None,
            client_cpu_sys_ns_per_token: None,
            client_cpu_ms: 0.0,
            client_cpu_scope: CpuScope::ClientThreads,
            client_cpu_whole_run_ns_per_token: None,
            stamp_source: None,
            packet_segments_lost: None,
            stamp_fallback: None,
            client_wakeup_us_p50: None,
            client_wakeup_us_p99: None,
            client_wakeup_us_max: None,
            gaps_apart_percent: None,
            gaps_merged_percent: None,
            gap_bound_us_p50: None,
            gap_bound_us_p99: None,
            gap_bound_coverage_percent: None,
            ttft_bound_coverage_percent: None,
            ttft_bound_misses_us: Vec::new(),
            truth_span_us_p99: None,
            gap_error_beyond_truth_us_p50: None,
            gap_error_beyond_truth_us_p99: None,
            gap_error_apart_us_p50: None,
            gap_error_apart_us_p99: None,
            send_stamps: shape.send_stamps,
            send_stamped_percent: None,
            send_stamps_before_write: None,
            send_stamps_after_write: None,
            gap_error_from_send_us_p50: None,
            gap_error_from_send_us_p99: None,
            gap_error_from_send_us_max: None,
            gap_bound_coverage_from_send_percent: None,
            delivery_from_send_us_p50: None,
            delivery_from_send_us_p99: None,
            tokens_per_read_mean: None,
            tokens_per_read_max: None,
            reads_left_data_percent: None,
            socket_bytes_at_read_p99: None,
            dispatch_lag_ms_p50: None,
            dispatch_lag_ms_p99: None,
            client_bound: None,
            client_bound_reasons: Vec::new(),
            no_bound_reason: None,
            stamps_too_loose: None,
            client_limited_in_truth: None,
            client_limited_in_truth_reasons: Vec::new(),
            busy_loop: false,
            peak_rss_mb: 0.0,
            wall_s: 0.0,
            work_dir: None,
            interrupted: None,
        }
    }
}

/// What only the in-process client can be scored on: its stamps share the server's clock.
#[derive(Default)]
struct OwnStamps {
    /// Client first-token stamp − server first write, per stream, ms.
    ttft_error_ms: Vec<f64>,
    /// Server first write − client send stamp, per stream, ms.
    true_ttft_ms: Vec<f64>,
    /// Client read stamp − server write stamp, every matched token, µs.
    delivery_us: Vec<f64>,
    /// How late the client woke up to its kernel-stamped reads, µs.
    wakeup_us: Vec<f64>,
    /// Which clock stamped the reads, over every stream.
    source: Option<StampSource>,
    /// Per scored gap with a bound: the bound stated, µs, and whether it held the truth.
    gap_bound_us: Vec<f64>,
    gaps_covered: u64,
    gaps_apart: u64,
    gaps_merged: u64,
    /// How wide the truth itself is per scored gap (the writes' own durations), µs.
    truth_span_us: Vec<f64>,
    /// Per scored gap, how far the measurement lies outside the truth's span, µs; the same
    /// for the gaps read apart.
    beyond_truth_us: Vec<f64>,
    apart_beyond_truth_us: Vec<f64>,
    /// With send stamps: per scored gap with both, the error against the gap between them, µs;
    /// gaps with a bound, and those whose bound held that gap.
    sent_gap_error_us: Vec<f64>,
    sent_bounded: u64,
    sent_covered: u64,
    /// Matched tokens with a send stamp, and those whose stamp lies before its write began or
    /// after it returned (see [`Report::send_stamps_before_write`]).
    sent_stamped: u64,
    sent_before_write: u64,
    sent_after_write: u64,
    /// Per matched token with a send stamp: the client's stamp minus it, µs.
    delivery_from_send_us: Vec<f64>,
    /// Streams whose first token has a bound, and those whose true arrival lay inside it.
    ttft_bounded: u64,
    ttft_covered: u64,
    /// See [`Report::ttft_bound_misses_us`].
    ttft_misses_us: Vec<f64>,
    /// Every scored gap as the client measured it and as the server left it, ms.
    measured_gap_ms: Vec<f64>,
    true_gap_ms: Vec<f64>,
    /// Per stream, the client's TTFT from the intended start, and the server's first write
    /// from the same start, ms.
    ttft_ms: Vec<f64>,
    true_ttft_from_intended_ms: Vec<f64>,
}

impl OwnStamps {
    fn add_reads(&mut self, tl: &Timeline) {
        let s = tl.stamp_source();
        self.source = Some(self.source.map_or(s, |a| a.combine(s)));
        self.wakeup_us.extend(tl.token_wakeups_us(0..u64::MAX));
    }

    /// The report's figures that need the client's stamps on the server's clock.
    fn fill(&self, r: &mut Report) {
        let ttft = Fig::of(&self.ttft_error_ms);
        r.true_ttft_ms_mean = Some(Fig::of(&self.true_ttft_ms).mean);
        r.ttft_error_ms_mean = Some(ttft.mean);
        r.ttft_error_ms_p50 = Some(ttft.p50);
        r.ttft_error_ms_p99 = Some(ttft.p99);
        r.ttft_error_ms_max = Some(ttft.max);
        let delivery = Fig::of(&self.delivery_us);
        r.delivery_us_min = Some(delivery.min);
        r.delivery_us_p50 = Some(delivery.p50);
        r.delivery_us_p99 = Some(delivery.p99);
        let source = self
            .source
            .unwrap_or(StampSource::ClientClock(StampFallback::NoStamp));
        r.stamp_source = Some(source.as_str());
        r.stamp_fallback = source.fallback().map(StampFallback::as_str);
        if !self.wakeup_us.is_empty() {
            let wakeup = Fig::of(&self.wakeup_us);
            r.client_wakeup_us_p50 = Some(wakeup.p50);
            r.client_wakeup_us_p99 = Some(wakeup.p99);
            r.client_wakeup_us_max = Some(wakeup.max);
        }
    }

    /// The bounds the client stated, scored against the trace, and the verdict beside the
    /// trace's own answer.
    fn fill_bounds(&self, r: &mut Report, lag: &client_lag::ClientLag) {
        let scored = self.gap_bound_us.len() as u64;
        let share = |n: u64, of: u64| (of > 0).then(|| 100.0 * n as f64 / of as f64);
        let all = self.measured_gap_ms.len() as u64;
        r.gaps_apart_percent = share(self.gaps_apart, all);
        r.gaps_merged_percent = share(self.gaps_merged, all);
        r.gap_bound_us_p50 = stats::percentile(&self.gap_bound_us, 50.0);
        r.gap_bound_us_p99 = stats::percentile(&self.gap_bound_us, 99.0);
        r.gap_bound_coverage_percent = share(self.gaps_covered, scored);
        r.truth_span_us_p99 = stats::percentile(&self.truth_span_us, 99.0);
        r.gap_error_beyond_truth_us_p50 = stats::percentile(&self.beyond_truth_us, 50.0);
        r.gap_error_beyond_truth_us_p99 = stats::percentile(&self.beyond_truth_us, 99.0);
        r.gap_error_apart_us_p50 = stats::percentile(&self.apart_beyond_truth_us, 50.0);
        r.gap_error_apart_us_p99 = stats::percentile(&self.apart_beyond_truth_us, 99.0);
        r.ttft_bound_coverage_percent = share(self.ttft_covered, self.ttft_bounded);
        if r.send_stamps {
            r.send_stamped_percent = share(self.sent_stamped, self.delivery_us.len() as u64);
            r.send_stamps_before_write = Some(self.sent_before_write);
            r.send_stamps_after_write = Some(self.sent_after_write);
            r.gap_error_from_send_us_p50 = stats::percentile(&self.sent_gap_error_us, 50.0);
            r.gap_error_from_send_us_p99 = stats::percentile(&self.sent_gap_error_us, 99.0);
            r.gap_error_from_send_us_max = stats::percentile(&self.sent_gap_error_us, 100.0);
            r.gap_bound_coverage_from_send_percent = share(self.sent_covered, self.sent_bounded);
            let d = &self.delivery_from_send_us;
            r.delivery_from_send_us_p50 = stats::percentile(d, 50.0);
            r.delivery_from_send_us_p99 = stats::percentile(d, 99.0);
        }
        r.ttft_bound_misses_us = self.ttft_misses_us.clone();
        r.tokens_per_read_mean = lag.tokens_per_read_mean;
        r.tokens_per_read_max = lag.tokens_per_read_max;
        r.reads_left_data_percent = lag.reads_left_data_percent;
        r.socket_bytes_at_read_p99 = lag.socket_bytes.map(|s| s.p99);
        r.dispatch_lag_ms_p50 = lag.dispatch_lag_ms.map(|d| d.p50);
        r.dispatch_lag_ms_p99 = lag.dispatch_lag_ms.map(|d| d.p99);
        // Held to what `bench serve` prints: the gap p50 and p99.
        let printed = client_lag::Printed::MedianAndP99;
        r.client_bound_reasons = client_lag::verdict(lag, printed);
        r.client_bound = Some(!r.client_bound_reasons.is_empty());
        r.no_bound_reason = client_lag::no_bound_reason(lag);
        r.stamps_too_loose = Some(!client_lag::stamp_reasons(lag, printed).is_empty());
        r.client_limited_in_truth_reasons = self.truth_reasons();
        r.client_limited_in_truth = Some(!r.client_limited_in_truth_reasons.is_empty());
    }

    /// Where the client's stamps put a figure off the trace's by more than the verdict's
    /// shares: a gap percentile, or the TTFT p50 (both from the intended start, so the
    /// dispatch lag is in both and only the stamps differ).
    fn truth_reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        for p in [50.0, 99.0] {
            let pct = |v: &[f64]| stats::percentile(v, p);
            if let (Some(m), Some(t)) = (pct(&self.measured_gap_ms), pct(&self.true_gap_ms)) {
                if (m - t).abs() > client_lag::GAP_BOUND_SHARE * t {
                    why.push(format!(
                        "the gap p{p} measured {m:.3} ms is {t:.3} ms in the trace"
                    ));
                }
            }
        }
        if let (Some(m), Some(t)) = (
            stats::median(&self.ttft_ms),
            stats::median(&self.true_ttft_from_intended_ms),
        ) {
            if (m - t).abs() > client_lag::TTFT_BOUND_SHARE * t {
                why.push(format!(
                    "the TTFT p50 measured {m:.3} ms from the intended start is {t:.3} ms in the trace"
                ));
            }
        }
        why
    }

    /// One gap against the kernel's send stamps of its two writes (`true_ns` between them):
    /// the error, and whether the bound the client stated held it.
    fn score_sent_gap(&mut self, measured_ns: i64, true_ns: i64, gap: Option<&Gap>) {
        self.sent_gap_error_us
            .push((measured_ns - true_ns).unsigned_abs() as f64 / 1e3);
        if let Some(g) = gap.filter(|g| g.bound_ns().is_some()) {
            self.sent_bounded += 1;
            self.sent_covered += u64::from(g.covers(true_ns, true_ns));
        }
    }

    /// One scored gap: the client's and the server's (between the writes' returns, and the
    /// span the truth is known to: the kernel took each token's bytes while its write ran),
    /// and the bound the client states on it.
    fn score_gap(&mut self, measured_ns: i64, true_ns: i64, span: (i64, i64), gap: Option<Gap>) {
        self.measured_gap_ms.push(measured_ns as f64 / 1e6);
        self.true_gap_ms.push(true_ns as f64 / 1e6);
        let beyond_us = beyond_span_ns(measured_ns, span) as f64 / 1e3;
        self.beyond_truth_us.push(beyond_us);
        let Some(g) = gap else { return };
        let Some(bound) = g.bound_ns() else { return };
        self.gap_bound_us.push(bound as f64 / 1e3);
        self.truth_span_us.push((span.1 - span.0) as f64 / 1e3);
        self.gaps_covered += u64::from(g.covers(span.0, span.1));
        match g.kind {
            GapKind::Apart => {
                self.gaps_apart += 1;
                self.apart_beyond_truth_us.push(beyond_us);
            }
            GapKind::Merged => self.gaps_merged += 1,
            GapKind::Unbounded => {}
        }
    }

    /// The first token: its stamp `c`, the server's write (began, returned), and the bound on
    /// its arrival: covered when the two spans meet.
    fn score_first(
        &mut self,
        clock: &Clock,
        c: u64,
        (began, returned): (u64, u64),
        arrival: Option<Arrival>,
    ) {
        let Some(early) = arrival.and_then(|a| a.early_ns) else {
            return;
        };
        let res = client_lag::STAMP_RESOLUTION_NS as i64;
        // The client says its data came in [c - early - res, c + res]; on c's scale the
        // write ran over [began - c, returned - c].
        let (from, to) = (
            clock.signed_delta_ns(c, began),
            clock.signed_delta_ns(c, returned),
        );
        self.ttft_bounded += 1;
        match first_token_miss_ns((-(early as i64) - res, res), (from, to)) {
            0 => self.ttft_covered += 1,
            miss if self.ttft_misses_us.len() < 16 => self.ttft_misses_us.push(miss as f64 / 1e3),
            _ => {}
        }
    }
}

/// How far the client's bound `[lo, hi]` on a first token's arrival misses the server's
/// write `[from, to]` (all ns on one scale): 0 when they meet, positive when the bound lies
/// after the write, negative when before it.
fn first_token_miss_ns((lo, hi): (i64, i64), (from, to): (i64, i64)) -> i64 {
    if to < lo {
        lo - to
    } else if from > hi {
        hi - from
    } else {
        0
    }
}

/// How far `measured` lies outside `[lo, hi]` (0 inside it), ns.
fn beyond_span_ns(measured: i64, (lo, hi): (i64, i64)) -> u64 {
    if measured < lo {
        lo.abs_diff(measured)
    } else if measured > hi {
        measured.abs_diff(hi)
    } else {
        0
    }
}

/// A stream's tokens as the client saw them, by token index (the first `n`).
struct ClientTokens {
    /// Each token's stamp.
    stamps: Vec<Option<u64>>,
    /// Each token's arrival bounds (its event's).
    arrivals: Vec<Option<Arrival>>,
    /// Every token the stream counted (past `n` too).
    counted: usize,
}

/// The client's stamp and arrival bounds per token index, for the first `n` tokens: each
/// event covers the next `tokens` indices.
fn token_stamps(tl: &Timeline, clock: &Clock, n: usize) -> ClientTokens {
    let mut out = ClientTokens {
        stamps: vec![None; n],
        arrivals: vec![None; n],
        counted: 0,
    };
    for a in client_lag::arrivals(tl, clock) {
        for _ in 0..a.tokens {
            if let Some(slot) = out.stamps.get_mut(out.counted) {
                *slot = Some(a.t);
                out.arrivals[out.counted] = Some(a);
            }
            out.counted += 1;
        }
    }
    out
}

/// One stream's client stamps against the server's writes of it, token by token.
fn match_stream(
    shape: &Shape,
    clock: &Clock,
    tl: &Timeline,
    client: &ClientTokens,
    server: &score::ServerRequest,
    scores: &mut score::Scores,
    own: &mut OwnStamps,
) {
    let nominal_gap_ns = shape.gap.as_nanos() as u64;
    // The server's writes on the shared raw clock; only the tokens the shape asks for.
    let writes = &server.writes_raw[..server.writes_raw.len().min(shape.tokens as usize)];
    let traced = writes.iter().filter(|t| t.is_some()).count();
    if client.counted != traced {
        scores.requests_itl_mismatch += 1;
    }
    let mut prev: Option<(u64, u64)> = None;
    for (k, (c, s)) in client.stamps.iter().zip(writes).enumerate() {
        let (Some(c), Some(s_raw)) = (*c, *s) else {
            prev = None;
            continue;
        };
        scores.tokens_matched += 1;
        let sent = server.writes_sent_raw.get(k).copied().flatten();
        if let Some(t) = sent {
            own.sent_stamped += 1;
            let began = server.writes_before_raw.get(k).copied().flatten();
            own.sent_before_write += u64::from(t < began.unwrap_or(t));
            own.sent_after_write += u64::from(t > s_raw);
            own.delivery_from_send_us
                .push(clock.signed_delta_ns(t, c) as f64 / 1e3);
        }
        own.delivery_us
            .push(clock.signed_delta_ns(s_raw, c) as f64 / 1e3);
        if k == 0 {
            own.ttft_error_ms
                .push(clock.signed_delta_ns(s_raw, c) as f64 / 1e6);
            own.ttft_ms
                .push(clock.delta_ns(tl.intended_start, c) as f64 / 1e6);
            own.true_ttft_from_intended_ms
                .push(clock.delta_ns(tl.intended_start, s_raw) as f64 / 1e6);
            let written_from = server.writes_before_raw.first().copied().flatten();
            own.score_first(
                clock,
                c,
                (written_from.unwrap_or(s_raw), s_raw),
                client.arrivals[0],
            );
            if let Some(send) = tl.send_start {
                own.true_ttft_ms
                    .push(clock.signed_delta_ns(send, s_raw) as f64 / 1e6);
                let server_ttft = clock.signed_delta_ns(server.arrival_raw, s_raw);
                let client_ttft = clock.signed_delta_ns(send, c);
                scores.server_ttft_ms.push(server_ttft as f64 / 1e6);
                scores
                    .ttft_arrival_error_ms
                    .push((client_ttft - server_ttft) as f64 / 1e6);
            }
        }
        if let Some((pc, ps)) = prev {
            let measured = clock.signed_delta_ns(pc, c);
            let truth = clock.signed_delta_ns(ps, s_raw);
            scores
                .gap_error_us
                .push((measured - truth).unsigned_abs() as f64 / 1e3);
            if score::is_coalesced(measured, truth, nominal_gap_ns) {
                scores.coalesced_gaps += 1;
            }
            let before = |i: usize| server.writes_before_raw.get(i).copied().flatten();
            let truth_span = (
                clock.signed_delta_ns(ps, before(k).unwrap_or(s_raw)),
                clock.signed_delta_ns(before(k - 1).unwrap_or(ps), s_raw),
            );
            let bound = match (client.arrivals[k - 1], client.arrivals[k]) {
                (Some(a), Some(b)) => Some(Gap::between(&a, &b, clock)),
                _ => None,
            };
            let sent_gap = match (server.writes_sent_raw.get(k - 1), sent) {
                (Some(&Some(a)), Some(b)) => Some(clock.signed_delta_ns(a, b)),
                _ => None,
            };
            if let Some(t) = sent_gap {
                own.score_sent_gap(measured, t, bound.as_ref());
            }
            own.score_gap(measured, truth, truth_span, bound);
        }
        prev = Some((c, s_raw));
    }
    if let Some(spans) = stream_spans(clock, tl.send_start, client, server.arrival_raw, writes) {
        scores.spans.add(spans.0, spans.1);
    }
}

/// A stream's TTFT and E2EL on both sides, when every token the server wrote has a client
/// stamp and the client counted no other: the client's from its send, the server's from the
/// request's arrival (one raw clock, so both are plain differences).
fn stream_spans(
    clock: &Clock,
    send: Option<u64>,
    client: &ClientTokens,
    arrival_raw: u64,
    writes: &[Option<u64>],
) -> Option<(score::ClientSpan, score::ServerSpan)> {
    let send = send?;
    if writes.is_empty() || client.counted != writes.len() {
        return None;
    }
    let (c_first, c_last) = (
        client.stamps.first()?.as_ref()?,
        client.stamps.last()?.as_ref()?,
    );
    let (s_first, s_last) = (writes.first()?.as_ref()?, writes.last()?.as_ref()?);
    if client.stamps.iter().chain(writes).any(Option::is_none) {
        return None;
    }
    let tokens = writes.len() as u64;
    Some((
        score::ClientSpan {
            ttft_ns: clock.signed_delta_ns(send, *c_first),
            e2el_ns: clock.signed_delta_ns(send, *c_last),
            tokens,
        },
        score::ServerSpan {
            ttft_ns: clock.signed_delta_ns(arrival_raw, *s_first),
            e2el_ns: clock.signed_delta_ns(arrival_raw, *s_last),
            tokens,
        },
    ))
}

/// Failed streams by kind, and the first one's message.
fn failures(timelines: &[Timeline]) -> (HashMap<&'static str, usize>, Option<String>) {
    let mut errors: HashMap<&'static str, usize> = HashMap::new();
    let mut first_error = None;
    for (i, tl) in timelines.iter().enumerate() {
        if let Err(e) = &tl.outcome {
            *errors.entry(e.kind.as_str()).or_default() += 1;
            if first_error.is_none() {
                first_error = Some(format!("stream {i}: {e}"));
            }
        }
    }
    (errors, first_error)
}

/// How late the server wrote each token after the engine's due time, µs.
fn server_write_lag_us(trace: &[TraceRec]) -> Vec<f64> {
    trace
        .iter()
        .map(|r| r.t_ns.saturating_sub(r.due_ns) as f64 / 1e3)
        .collect()
}

/// What the report says our own client is.
pub const IN_PROCESS: &str = "llmspeed (in-process)";

/// Score a vLLM `--save-detailed` result (`result_json`, entry `i` being request `{prefix}{i}`)
/// against a trace: what `--external` does once its command has finished. CPU, memory, wall
/// time and the client's name are left for the caller.
pub fn score_result(
    shape: &Shape,
    trace: &[TraceRec],
    result_json: &str,
    prefix: &str,
) -> Result<Report, String> {
    let clients = external::parse_detailed(result_json)?;
    if clients.len() != shape.streams {
        return Err(format!(
            "the result holds {} requests, the self-test expects {} (pass {{streams}} as the number of prompts)",
            clients.len(),
            shape.streams
        ));
    }
    let (matching, keyed) = score::key_by_arrival(trace, prefix, shape.streams)?;
    let mut report = analyse_external(shape, keyed.as_deref().unwrap_or(trace), &clients, prefix);
    report.matched_by = matching.as_str();
    Ok(report)
}

/// The report for an external client's result (`clients[i]` is request `{prefix}{i}`):
/// every figure [`score::score`] gives, the server's own figures from the trace, and `None`
/// for what needs the client's stamps on our clock. CPU, memory and wall time are the
/// caller's.
fn analyse_external(
    shape: &Shape,
    trace: &[TraceRec],
    clients: &[score::ClientRecord],
    prefix: &str,
) -> Report {
    let s = score::score(
        &score::index_trace(trace),
        prefix,
        clients,
        shape.gap.as_nanos() as u64,
    );
    let failed: Vec<(usize, &score::ClientRecord)> = clients
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.error.is_empty())
        .collect();
    let mut errors = HashMap::new();
    if !failed.is_empty() {
        errors.insert("client_reported", failed.len());
    }
    if s.requests_untraced > 0 {
        errors.insert("untraced", s.requests_untraced);
    }
    let first_error = failed
        .first()
        .map(|(i, c)| format!("request {prefix}{i}: {}", c.error))
        .or_else(|| {
            (s.requests_untraced > 0).then(|| {
                format!(
                    "{} request(s) never reached the server under an id {prefix}N (does the client send x-request-id {{prefix}}N?)",
                    s.requests_untraced
                )
            })
        });
    let outcome = Outcome {
        tokens: clients.iter().map(|c| c.output_len).sum(),
        failed_streams: failed.len(),
        errors,
        first_error,
    };
    Report::scored(shape, trace, outcome, &s)
}

/// mean / p50 / p99 / max of a sample, zeros when empty (numpy-compatible percentiles).
struct Fig {
    min: f64,
    mean: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

impl Fig {
    fn of(v: &[f64]) -> Fig {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        Fig {
            min: s.first().copied().unwrap_or(0.0),
            mean: stats::mean(&s).unwrap_or(0.0),
            p50: stats::percentile_sorted(&s, 50.0).unwrap_or(0.0),
            p99: stats::percentile_sorted(&s, 99.0).unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
        }
    }
}

/// The mock on its own OS thread with its own current-thread runtime.
struct ServerThread {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl ServerThread {
    /// With `pin`, the server thread restricts itself before it starts anything, so the
    /// engine's thread (spawned from it) inherits the mask; the caller's thread is untouched.
    fn start(cfg: MockConfig, pin: Option<Mask>) -> Result<ServerThread, SelftestError> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("selftest-server".into())
            .spawn(move || -> std::io::Result<()> {
                if let Some(mask) = pin {
                    if let Err(e) = mask.apply() {
                        let why = format!("cannot pin the server: {e}");
                        let _ = addr_tx.send(Err(std::io::Error::new(e.kind(), why)));
                        return Ok(());
                    }
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    // A deep accept backlog: every stream connects at the same instant.
                    let sock = tokio::net::TcpSocket::new_v4()?;
                    sock.bind(([127, 0, 0, 1], 0).into())?;
                    let listener = sock.listen(4096)?;
                    let _ = addr_tx.send(listener.local_addr());
                    mock::serve(listener, cfg, async move {
                        let _ = stop_rx.await;
                    })
                    .await
                })
            })
            .map_err(|e| SelftestError::Server(e.to_string()))?;
        let addr = match addr_rx.recv() {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(SelftestError::Server(e.to_string())),
            Err(_) => {
                let why = match thread.join() {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the server thread ended before binding".into(),
                };
                return Err(SelftestError::Server(why));
            }
        };
        Ok(ServerThread { addr, stop, thread })
    }

    fn stop(self) -> Result<(), SelftestError> {
        let _ = self.stop.send(());
        match self.thread.join() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SelftestError::Server(e.to_string())),
            Err(_) => Err(SelftestError::Server("the server thread panicked".into())),
        }
    }
}

/// The human table. A figure the client cannot be scored on prints as `n/a`.
pub fn write_table(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    write_run_lines(w, r)?;
    write_error_rows(w, r)?;
    writeln!(
        w,
        "  coalesced gaps    {} (tokens read together that the server wrote apart); {} stream(s) with a token count unlike the trace's",
        r.coalesced_gaps, r.requests_itl_mismatch
    )?;
    writeln!(
        w,
        "  true TTFT         {} ms mean (server first write - client send); {:.2} ms at the server (first write - arrival)",
        opt_fixed(r.true_ttft_ms_mean, 2),
        r.server_ttft_ms_mean
    )?;
    writeln!(
        w,
        "  server spans      TPOT {:.3} ms, E2EL {:.2} ms mean (last write - arrival); requests matched by {}",
        r.server_tpot_ms_mean,
        r.server_e2el_ms_mean,
        r.matched_by.replace('_', " ")
    )?;
    write_client_cost(w, r)?;
    write_bounds(w, r)?;
    if let Some(e) = &r.first_error {
        writeln!(w, "  first failure     {e}")?;
    }
    if let Some(d) = &r.work_dir {
        writeln!(w, "  work folder       {d}")?;
    }
    Ok(())
}

/// `v` with `digits` decimals, or `n/a`.
fn opt_fixed(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) => format!("{v:.digits$}"),
        None => "n/a".into(),
    }
}

/// The shape, the client, whether the run was cut or pinned, and the token counts.
fn write_run_lines(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    let threads = match r.client_threads {
        Some(n) if r.preconnect == Some(true) => {
            format!(", {n} client thread(s), connections opened before the start")
        }
        Some(n) => format!(", {n} client thread(s)"),
        None => String::new(),
    };
    writeln!(
        w,
        "selftest: {} streams x {} tokens, gap {} ms, first-token delay {} ms{threads}, {:.1} s",
        r.streams, r.tokens_per_stream, r.gap_ms, r.first_token_ms, r.wall_s
    )?;
    writeln!(w, "  client            {}", r.client)?;
    if let Some(sig) = r.interrupted {
        writeln!(
            w,
            "  INTERRUPTED       by {sig}: streams were cut short; the figures cover what arrived"
        )?;
    }
    if let (Some(s), Some(c)) = (&r.server_cpus, &r.client_cpus) {
        writeln!(
            w,
            "  pinned            server CPUs {s:?}, client CPUs {c:?}"
        )?;
    }
    writeln!(
        w,
        "  tokens            {} received, {} matched to the server trace ({} traced), {} failed stream(s)",
        r.tokens, r.tokens_matched, r.trace_records, r.failed_streams
    )
}

/// The error figures' table: mean, p50, p99 and max of each.
fn write_error_rows(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    writeln!(
        w,
        "  {:<17} {:>10} {:>10} {:>10} {:>10}",
        "", "mean", "p50", "p99", "max"
    )?;
    writeln!(
        w,
        "  {:<17} {:>10} {:>10} {:>10} {:>10}",
        "TTFT error ms",
        opt_fixed(r.ttft_error_ms_mean, 3),
        opt_fixed(r.ttft_error_ms_p50, 3),
        opt_fixed(r.ttft_error_ms_p99, 3),
        opt_fixed(r.ttft_error_ms_max, 3)
    )?;
    writeln!(
        w,
        "  {:<17} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
        "  vs arrival ms",
        r.ttft_arrival_error_ms_mean,
        r.ttft_arrival_error_ms_p50,
        r.ttft_arrival_error_ms_p99,
        r.ttft_arrival_error_ms_max
    )?;
    writeln!(
        w,
        "  {:<17} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        "TPOT error us",
        r.tpot_error_us_mean,
        r.tpot_error_us_p50,
        r.tpot_error_us_p99,
        r.tpot_error_us_max
    )?;
    writeln!(
        w,
        "  {:<17} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
        "E2EL error ms",
        r.e2el_error_ms_mean,
        r.e2el_error_ms_p50,
        r.e2el_error_ms_p99,
        r.e2el_error_ms_max
    )?;
    writeln!(
        w,
        "  {:<17} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        "gap error us",
        r.gap_error_us_mean,
        r.gap_error_us_p50,
        r.gap_error_us_p99,
        r.gap_error_us_max
    )?;
    writeln!(
        w,
        "  {:<17} {:>10} {:>10.1} {:>10.1} {:>10.1}",
        "server lag us",
        "",
        r.server_write_lag_us_p50,
        r.server_write_lag_us_p99,
        r.server_write_lag_us_max
    )?;
    writeln!(
        w,
        "  {:<17} {:>10} {:>10} {:>10} {:>10}",
        "delivery us",
        match r.delivery_us_min {
            Some(m) => format!("min {m:.1}"),
            None => "n/a".into(),
        },
        opt_fixed(r.delivery_us_p50, 1),
        opt_fixed(r.delivery_us_p99, 1),
        ""
    )
}

/// `ns` of CPU per token of `tokens`; `None` when no token was measured (a figure per token
/// of none has no meaning).
pub(crate) fn per_token(ns: f64, tokens: u64) -> Option<f64> {
    (tokens > 0).then(|| ns / tokens as f64)
}

/// What the client cost: CPU per token, how its reads were stamped, and its peak memory.
fn write_client_cost(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    let scope = match r.client_cpu_scope {
        CpuScope::ClientThreads => "client runtime threads, whole run",
        CpuScope::StreamingWindow => "while streaming",
        CpuScope::WholeProcess => "whole process: start-up included",
    };
    let ms = r.client_cpu_ms;
    match (
        r.client_cpu_ns_per_token,
        r.client_cpu_user_ns_per_token,
        r.client_cpu_sys_ns_per_token,
    ) {
        (Some(t), Some(u), Some(s)) => writeln!(
            w,
            "  client CPU        {t:.0} ns/token: {u:.0} user + {s:.0} kernel ({ms:.1} ms total, {scope})"
        )?,
        _ => writeln!(
            w,
            "  client CPU        per token: none, no token was measured ({ms:.1} ms total, {scope})"
        )?,
    }
    if let Some(n) = r.client_cpu_whole_run_ns_per_token {
        writeln!(
            w,
            "                    {n:.0} ns/token over the whole process (start-up included)"
        )?;
    }
    let fallback = r
        .stamp_fallback
        .map_or(String::new(), |f| format!(" ({f})"));
    match (r.stamp_source, r.client_wakeup_us_p50, r.client_wakeup_us_p99, r.client_wakeup_us_max) {
        (None, ..) => writeln!(w, "  stamps            n/a (the external client's own)")?,
        (Some(src), Some(p50), Some(p99), Some(max)) => writeln!(
            w,
            "  stamps            {src}{fallback}: the client woke up {p50:.1} us p50, {p99:.1} p99, {max:.1} max after the data arrived (not in the stamps)"
        )?,
        (Some(src), ..) => writeln!(
            w,
            "  stamps            {src}{fallback}: each read stamped when the client woke up"
        )?,
    }
    if let Some(lost) = r.packet_segments_lost {
        writeln!(
            w,
            "  packet ring       {lost} segments lost (the ring or a connection's inbox full: their events kept their reads' stamps)"
        )?;
    }
    let whose = if r.client_threads.is_some() {
        "whole process: server and client"
    } else {
        "the external client's largest process"
    };
    writeln!(w, "  peak RSS          {:.1} MB ({whose})", r.peak_rss_mb)
}

fn opt_count(n: Option<u64>) -> String {
    n.map_or_else(|| "n/a".to_string(), |n| n.to_string())
}

/// The bounds the client stated against the truth, and the verdict beside the trace's.
fn write_bounds(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    let Some(bound) = r.gap_bound_us_p99 else {
        if r.client_bound.is_some() {
            let why = r
                .no_bound_reason
                .as_deref()
                .unwrap_or("the reads carry the client's own stamps");
            writeln!(w, "  gap bound         none: {why}")?;
        }
        return Ok(());
    };
    if let Some(why) = &r.no_bound_reason {
        writeln!(w, "  unbounded gaps    {why}")?;
    }
    writeln!(
        w,
        "  gap bound         {} us p50, {bound:.1} us p99 stated; true error {:.1} us p99 (the truth known to {} us p99; {} us p50, {} us p99 beyond it); {}% of gaps inside ({}% read apart, {} us p99 beyond the truth; {}% with an end read together with others)",
        opt_fixed(r.gap_bound_us_p50, 1),
        r.gap_error_us_p99,
        opt_fixed(r.truth_span_us_p99, 1),
        opt_fixed(r.gap_error_beyond_truth_us_p50, 1),
        opt_fixed(r.gap_error_beyond_truth_us_p99, 1),
        opt_fixed(r.gap_bound_coverage_percent, 2),
        opt_fixed(r.gaps_apart_percent, 1),
        opt_fixed(r.gap_error_apart_us_p99, 1),
        opt_fixed(r.gaps_merged_percent, 1),
    )?;
    writeln!(
        w,
        "  reads             {} tokens per read mean, {} max; {}% left data in the socket (held {} bytes p99); dispatch lag {} ms p50, {} ms p99; TTFT bound held for {}% of streams",
        opt_fixed(r.tokens_per_read_mean, 2),
        opt_fixed(r.tokens_per_read_max, 0),
        opt_fixed(r.reads_left_data_percent, 1),
        opt_fixed(r.socket_bytes_at_read_p99, 0),
        opt_fixed(r.dispatch_lag_ms_p50, 3),
        opt_fixed(r.dispatch_lag_ms_p99, 3),
        opt_fixed(r.ttft_bound_coverage_percent, 1),
    )?;
    if r.send_stamps {
        writeln!(
            w,
            "  send stamps       {}% of tokens; true error {} us p50, {} us p99, {} us max against them; {}% of bounded gaps inside; tokens stamped {} us p50, {} us p99 after them; {} stamps before their write began, {} after it returned",
            opt_fixed(r.send_stamped_percent, 2),
            opt_fixed(r.gap_error_from_send_us_p50, 1),
            opt_fixed(r.gap_error_from_send_us_p99, 1),
            opt_fixed(r.gap_error_from_send_us_max, 1),
            opt_fixed(r.gap_bound_coverage_from_send_percent, 2),
            opt_fixed(r.delivery_from_send_us_p50, 1),
            opt_fixed(r.delivery_from_send_us_p99, 1),
            opt_count(r.send_stamps_before_write),
            opt_count(r.send_stamps_after_write),
        )?;
    }
    if !r.ttft_bound_misses_us.is_empty() {
        let by: Vec<String> = r
            .ttft_bound_misses_us
            .iter()
            .map(|us| format!("{us:+.1}"))
            .collect();
        writeln!(
            w,
            "  first tokens      outside their bound by {} us (+: after the server's write returned)",
            by.join(", ")
        )?;
    }
    let said = |bound: Option<bool>, why: &[String]| match bound {
        Some(true) => format!("Client-bound: {}", why.join("; ")),
        Some(false) => "not client-bound".to_string(),
        None => "n/a".to_string(),
    };
    writeln!(
        w,
        "  verdict           {}",
        said(r.client_bound, &r.client_bound_reasons)
    )?;
    writeln!(
        w,
        "  in truth          {}",
        said(
            r.client_limited_in_truth,
            &r.client_limited_in_truth_reasons
        )
    )
}

/// CPU time of the calling thread so far: (user ns, system ns); zeros if the kernel refuses.
fn thread_cpu_ns_pair() -> (u64, u64) {
    let t = crate::sys::thread_cpu().unwrap_or_default();
    (t.user_ns, t.system_ns)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_first_tokens_miss_says_which_side_of_the_write_it_fell() {
        // The client allows [-30, +1] µs around its stamp.
        let bound = (-30_000, 1_000);
        // Writes that meet it, at either edge or around it.
        assert_eq!(super::first_token_miss_ns(bound, (-50_000, -30_000)), 0);
        assert_eq!(super::first_token_miss_ns(bound, (1_000, 9_000)), 0);
        assert_eq!(super::first_token_miss_ns(bound, (-40_000, 5_000)), 0);
        // A write that returned 40 µs before the stamp: the bound lies 10 µs after it.
        assert_eq!(
            super::first_token_miss_ns(bound, (-45_000, -40_000)),
            10_000
        );
        // A write that began 3 µs after the stamp: the bound lies 2 µs before it.
        assert_eq!(super::first_token_miss_ns(bound, (3_000, 8_000)), -2_000);
    }

    #[test]
    fn error_beyond_the_truths_span_is_zero_inside_and_the_distance_outside() {
        // Writes of 1.000–1.012 ms apart (each write took 6 µs): a measured gap of 1.005 ms
        // lies inside; 1.020 ms is 8 µs beyond; 0.990 ms is 10 µs short.
        let span = (1_000_000, 1_012_000);
        assert_eq!(super::beyond_span_ns(1_005_000, span), 0);
        assert_eq!(super::beyond_span_ns(1_012_000, span), 0);
        assert_eq!(super::beyond_span_ns(1_020_000, span), 8_000);
        assert_eq!(super::beyond_span_ns(990_000, span), 10_000);
    }

    use super::*;
    use crate::timeline::{Channel, EventRecord};
    use std::sync::Arc as StdArc;

    fn rec(id: &str, index: u32, t: u64) -> TraceRec {
        TraceRec {
            request_id_json: StdArc::from(format!("\"{id}\"")),
            choice: 0,
            index,
            t_ns: t,
            due_ns: t.saturating_sub(5_000),
            t_raw: t,
            t_before_raw: t,
            t_sent_raw: 0,
            // The request reached the server 800 ns after the send stamp (1_000) below.
            arrival_ns: 1_800,
            arrival_raw: 1_800,
            queued_ns: 0,
            scheduled_ns: 0,
            ..TraceRec::default()
        }
    }

    fn shape(streams: usize, tokens: u32) -> Shape {
        Shape {
            streams,
            gap: Duration::from_millis(1),
            tokens,
            first_token: Duration::ZERO,
            client_threads: 1,
            kernel_stamps: true,
            packet_stamps: false,
            send_stamps: false,
            preconnect: false,
        }
    }

    #[test]
    fn matches_events_to_trace_and_measures_errors() {
        // Mock clock: 1 raw unit = 1 ns, so the expected numbers are exact.
        let (clock, _h) = Clock::mock();
        let mut tl = Timeline::new(0, 4, false);
        tl.send_start = Some(1_000);
        // Server writes at 10_000, 11_000, 12_000; client reads 200, 250, 100 ns later.
        for (i, (t, n)) in [(10_200u64, 1u32), (11_250, 1), (12_100, 1)]
            .into_iter()
            .enumerate()
        {
            tl.events.push(EventRecord {
                t,
                tokens: n,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            });
            tl.note_read(None, 1_000 * (i as u32 + 1), i);
        }
        let trace = vec![
            rec("selftest-0", 0, 10_000),
            rec("selftest-0", 1, 11_000),
            rec("selftest-0", 2, 12_000),
        ];
        let r = analyse(&shape(1, 3), &clock, &[tl], &trace);
        assert_eq!(r.tokens, 3);
        assert_eq!(r.tokens_matched, 3);
        // Server TTFT 10_000 - 1_800; client TTFT 10_200 - 1_000; error 9_200 - 8_200 ns.
        assert!((r.server_ttft_ms_mean - 0.0082).abs() < 1e-12);
        assert!((r.ttft_arrival_error_ms_mean - 0.001).abs() < 1e-12);
        assert!((r.ttft_arrival_error_ms_max - 0.001).abs() < 1e-12);
        assert_eq!(r.failed_streams, 0);
        assert!((r.ttft_error_ms_mean.unwrap() - 0.0002).abs() < 1e-12);
        assert!((r.true_ttft_ms_mean.unwrap() - 0.009).abs() < 1e-12);
        // Gap errors: |1050 - 1000| = 50 ns, |850 - 1000| = 150 ns.
        assert!((r.gap_error_us_max - 0.15).abs() < 1e-9);
        assert!((r.gap_error_us_mean - 0.1).abs() < 1e-9);
        assert!((r.server_write_lag_us_max - 5.0).abs() < 1e-9);
        assert!((r.delivery_us_min.unwrap() - 0.1).abs() < 1e-9);
        assert!((r.delivery_us_p50.unwrap() - 0.2).abs() < 1e-9);
        // Every read kernel-stamped, woken 1, 2 and 3 us late.
        assert_eq!((r.stamp_source, r.stamp_fallback), (Some("kernel"), None));
        assert!((r.client_wakeup_us_p50.unwrap() - 2.0).abs() < 1e-9);
        assert!((r.client_wakeup_us_max.unwrap() - 3.0).abs() < 1e-9);
        let mut table = Vec::new();
        write_table(&mut table, &r).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(table.contains("stamps            kernel: "), "{table}");
    }

    #[test]
    fn tokens_read_together_are_coalesced_gaps() {
        // Server writes 1 ms apart (the nominal gap); the client reads tokens 1 and 2 in one
        // read, so their gap measures 0, and it misses token 3 entirely.
        let (clock, _h) = Clock::mock();
        let mut tl = Timeline::new(0, 4, false);
        tl.send_start = Some(0);
        for (t, n) in [(1_000_100u64, 1u32), (3_000_100, 2)] {
            tl.events.push(EventRecord {
                t,
                tokens: n,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            });
        }
        let trace: Vec<TraceRec> = (0..4)
            .map(|k| rec("selftest-0", k, 1_000_000 * (k as u64 + 1)))
            .collect();
        let r = analyse(&shape(1, 4), &clock, &[tl], &trace);
        assert_eq!(r.tokens_matched, 3);
        assert_eq!(r.coalesced_gaps, 1, "{r:?}");
        assert_eq!(r.requests_itl_mismatch, 1, "3 client tokens, 4 traced");
        // |2_000_000 - 1_000_000| and |0 - 1_000_000| ns.
        assert_eq!(r.gap_error_us_max, 1000.0);
        assert_eq!(r.gap_error_us_p50, 1000.0);
    }

    #[test]
    fn unmatched_tokens_and_failures_are_counted() {
        let (clock, _h) = Clock::mock();
        let mut ok = Timeline::new(0, 2, false);
        ok.events.push(EventRecord {
            t: 5,
            tokens: 1,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel: Channel::Content,
        });
        let mut bad = Timeline::new(0, 2, false);
        bad.outcome = Err(crate::timeline::RequestError::new(
            ErrorKind::Protocol,
            "cut",
        ));
        // No trace for stream 0 at all; stream 1 failed.
        let r = analyse(&shape(2, 2), &clock, &[ok, bad], &[]);
        assert_eq!(r.tokens, 1);
        assert_eq!(r.tokens_matched, 0);
        assert_eq!(r.failed_streams, 1);
        assert_eq!(r.errors.get("protocol"), Some(&1));
        assert!(r.first_error.unwrap().contains("stream 1"));
        assert_eq!(r.gap_error_us_max, 0.0);
        // No read brought data through a kernel stamp.
        assert_eq!(r.stamp_source, Some("client_clock"));
        assert_eq!(r.client_wakeup_us_max, None);
    }

    #[test]
    fn shape_validation() {
        assert!(shape(1, 2).validate().is_ok());
        assert!(shape(0, 2).validate().is_err());
        assert!(shape(1, 1).validate().is_err());
        let mut s = shape(1, 2);
        s.gap = Duration::from_nanos(5);
        assert!(s.validate().is_err());
    }

    #[test]
    fn fixed_gap_mock_config() {
        let (sink, _rx) = TraceSink::memory();
        let mut s = shape(1000, 500);
        s.gap = Duration::from_millis(10);
        s.first_token = Duration::from_millis(50);
        let c = mock_config(&s, sink);
        assert!(c.validate().is_ok());
        assert_eq!(c.engine.decode.step_us(1000, 1 << 20, 1 << 10), 10_000.0);
        assert!(c.engine.max_num_seqs >= 1000);
        assert!(c.engine.kv_tokens >= 1000 * 516);
        assert_eq!(c.admission_delay, Duration::from_millis(50));
    }
}
