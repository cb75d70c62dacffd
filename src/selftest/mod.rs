//! `llmspeed selftest`: how truthfully does this machine measure? Runs the simulated server
//! (`mock`) on its own threads, drives it with the real streaming client (`net`) at a given
//! shape, and compares every client stamp with the server's ground-truth write stamps.
//!
//! Owns: the shape of the run, matching client events to trace records, and the error figures
//! (TTFT error, gap error, server write lag, client CPU per token, peak memory).
//!
//! Architecture invariants:
//! - The server never shares the client's executor: it runs on its own current-thread runtime
//!   on its own OS thread (plus the engine's thread); the client gets one multi-thread runtime.
//! - Both sides stamp with the same TSC-backed `quanta` counter (`Clock::raw`), so a server
//!   write and a client read are on one timeline without any offset estimate. Only TTFT needs
//!   that; gaps are differences within one side.
//! - Nothing here touches the per-token path: the client runs exactly as `stream` does
//!   (`NoopObserver`), and all matching happens after the run.

use crate::analysis::stats;
use crate::clock::Clock;
use crate::mock::trace::{TraceRec, TraceSink};
use crate::mock::{self, MockConfig, Profile};
use crate::net::request::{Generation, Prompt};
use crate::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target, Timeouts};
use crate::timeline::{ErrorKind, StampFallback, StampSource, Timeline};
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
}

/// The result. Units are in the field names; every figure is over all matched tokens.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub streams: usize,
    pub tokens_per_stream: u32,
    pub gap_ms: f64,
    pub first_token_ms: f64,
    pub client_threads: usize,
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
    /// Mean of (server's first write - client's send stamp): what TTFT truly was.
    pub true_ttft_ms_mean: f64,
    /// Client first-token stamp minus the server's first write stamp (see docs/selftest.md).
    pub ttft_error_ms_mean: f64,
    pub ttft_error_ms_p50: f64,
    pub ttft_error_ms_p99: f64,
    pub ttft_error_ms_max: f64,
    /// Mean of (server's first write - the request's arrival at the server): the TTFT the
    /// server itself saw, from the read that completed the request.
    pub server_ttft_ms_mean: f64,
    /// Client TTFT (first-token stamp - send stamp) minus the server's own TTFT (first write -
    /// arrival): the error against first write plus the request's trip to the server.
    pub ttft_arrival_error_ms_mean: f64,
    pub ttft_arrival_error_ms_p50: f64,
    pub ttft_arrival_error_ms_p99: f64,
    pub ttft_arrival_error_ms_max: f64,
    /// |client gap - server gap| over consecutive tokens of a stream.
    pub gap_error_us_mean: f64,
    pub gap_error_us_p50: f64,
    pub gap_error_us_p99: f64,
    pub gap_error_us_max: f64,
    /// Client read stamp minus server write stamp, every matched token: where gap error comes
    /// from (its jitter). Negative when the server was descheduled between its write returning
    /// and its stamp: the ground truth's own noise.
    pub delivery_us_min: f64,
    pub delivery_us_p50: f64,
    pub delivery_us_p99: f64,
    /// Server write time minus the engine's due time: how late the server itself ran.
    pub server_write_lag_us_p50: f64,
    pub server_write_lag_us_p99: f64,
    pub server_write_lag_us_max: f64,
    /// CPU time of the client's runtime threads (and the thread driving it) per token.
    pub client_cpu_ns_per_token: f64,
    /// The same split into user space (our code) and kernel (recv, epoll, TCP ACKs).
    pub client_cpu_user_ns_per_token: f64,
    pub client_cpu_sys_ns_per_token: f64,
    pub client_cpu_ms: f64,
    /// Which clock stamped the client's reads: `kernel` (receive stamps), `client_clock` or
    /// `mixed`; `stamp_fallback` says why any read used the client's clock.
    pub stamp_source: &'static str,
    pub stamp_fallback: Option<&'static str>,
    /// How late the client woke up to its reads: realtime when the read returned minus the
    /// kernel's receive stamp, over token events with a kernel stamp (zeros without any).
    /// Kernel stamps take it out of every figure above; it is what the client's clock would
    /// have added.
    pub client_wakeup_us_p50: f64,
    pub client_wakeup_us_p99: f64,
    pub client_wakeup_us_max: f64,
    /// Peak resident memory of the whole process (server and client together).
    pub peak_rss_mb: f64,
    pub wall_s: f64,
}

/// Run the self-test. Blocks; must not be called from inside a tokio runtime.
pub fn run(shape: &Shape) -> Result<Report, SelftestError> {
    run_client(shape, Duration::ZERO)
}

/// Test hook: [`run`] with a client that blocks its thread for `busy` after every event, so
/// each following read returns (and is stamped) up to that much after its data arrived: what a
/// client stamping late would report. Tests use it to prove their bounds catch that.
#[doc(hidden)]
pub fn run_with_busy_client(shape: &Shape, busy: Duration) -> Result<Report, SelftestError> {
    run_client(shape, busy)
}

fn run_client(shape: &Shape, busy: Duration) -> Result<Report, SelftestError> {
    shape.validate().map_err(SelftestError::Shape)?;
    raise_fd_limit(shape.streams as u64 * 2 + 256);
    let wall = Instant::now();
    let (sink, trace_rx) = TraceSink::memory();
    let server = ServerThread::start(mock_config(shape, sink))?;
    let clock = Clock::new();
    let run = drive(shape, server.addr, &clock, busy);
    // Stop the server whatever happened to the client, so its thread never outlives us.
    let stopped = server.stop();
    let (timelines, (user_ns, sys_ns)) = run?;
    stopped?;
    // The server has returned: every sink clone is gone and the trace is complete.
    let trace: Vec<TraceRec> = trace_rx.try_iter().collect();
    let mut report = analyse(shape, &clock, &timelines, &trace);
    let per_token = |ns: u64| ns as f64 / report.tokens.max(1) as f64;
    report.client_cpu_ms = (user_ns + sys_ns) as f64 / 1e6;
    report.client_cpu_ns_per_token = per_token(user_ns + sys_ns);
    report.client_cpu_user_ns_per_token = per_token(user_ns);
    report.client_cpu_sys_ns_per_token = per_token(sys_ns);
    report.peak_rss_mb = crate::sys::peak_rss_bytes().unwrap_or(0) as f64 / (1024.0 * 1024.0);
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
    c
}

/// The request id of stream `i`; the trace is keyed by it.
fn request_id(i: usize) -> String {
    format!("selftest-{i}")
}

/// Start every stream at once on the client's own runtime; returns the timelines (in stream
/// order) and the client's CPU time in ns (user, system).
fn drive(
    shape: &Shape,
    addr: std::net::SocketAddr,
    clock: &Clock,
    busy: Duration,
) -> Result<(Vec<Timeline>, (u64, u64)), SelftestError> {
    let mut g = Generation::new("mock-model", Prompt::Text(" the".into()));
    g.max_tokens = Some(shape.tokens);
    g.ignore_eos = true;
    g.continuous_usage = true;
    let base = g
        .stream_request(Some(false))
        .map_err(SelftestError::Client)?;
    // One request per stream, differing only in the id the trace is keyed by (the body is
    // shared `Bytes`).
    let reqs: Vec<StreamRequest> = (0..shape.streams)
        .map(|i| StreamRequest {
            request_id: Some(request_id(i)),
            ..base.clone()
        })
        .collect();
    let target = Target::parse(&format!("http://{addr}/v1"))
        .map_err(|e| SelftestError::Client(e.to_string()))?;
    // One client, one pool, as `bench serve` and the matrix use it: what is measured is the
    // client users run.
    let mut cfg = ClientConfig::new(target);
    cfg.max_idle = shape.streams;
    cfg.kernel_stamps = shape.kernel_stamps;
    cfg.timeouts = Timeouts {
        connect: Some(Duration::from_secs(30)),
        first_byte: Some(Duration::from_secs(120)),
        gap: Some(Duration::from_secs(60)),
        total: None,
    };
    let client =
        Client::new(cfg, clock.clone()).map_err(|e| SelftestError::Client(e.to_string()))?;

    let worker_cpu = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let stop_cpu = worker_cpu.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(shape.client_threads)
        .thread_name("selftest-client")
        .enable_all()
        // A thread's CPU clock starts at zero, so its value at exit is all it ever used.
        .on_thread_stop(move || {
            let (user, sys) = thread_cpu_ns_pair();
            stop_cpu[0].fetch_add(user, Ordering::Relaxed);
            stop_cpu[1].fetch_add(sys, Ordering::Relaxed);
        })
        .build()
        .map_err(|e| SelftestError::Client(format!("runtime: {e}")))?;
    let main_cpu0 = thread_cpu_ns_pair();
    let timelines = rt.block_on(async move {
        let go = Arc::new(tokio::sync::Barrier::new(shape.streams + 1));
        let mut tasks = Vec::with_capacity(shape.streams);
        for req in reqs {
            let (go, client) = (go.clone(), client.clone());
            tasks.push(tokio::spawn(async move {
                go.wait().await;
                let start = client.clock().raw();
                if busy.is_zero() {
                    return client
                        .stream(&req, start, &mut NoopObserver, &Cancel::new())
                        .await;
                }
                // Test hook only (see `run_with_busy_client`): blocking is the point.
                let mut slow = |_: &crate::timeline::EventRecord, _: Option<&[u8]>| {
                    std::thread::sleep(busy);
                    crate::net::Flow::Continue
                };
                client.stream(&req, start, &mut slow, &Cancel::new()).await
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
        out
    });
    let main_cpu1 = thread_cpu_ns_pair();
    // Joins the workers, which runs their stop hooks.
    drop(rt);
    let user = worker_cpu[0].load(Ordering::Relaxed) + main_cpu1.0.saturating_sub(main_cpu0.0);
    let sys = worker_cpu[1].load(Ordering::Relaxed) + main_cpu1.1.saturating_sub(main_cpu0.1);
    Ok((timelines, (user, sys)))
}

/// Per-stream ground truth.
struct Truth {
    /// Raw stamp of the read that completed the request at the server.
    arrival: Option<u64>,
    /// For each token index, (write stamp raw, t_ns, due_ns).
    tokens: Vec<Option<(u64, u64, u64)>>,
}

fn index_trace(trace: &[TraceRec], tokens: u32) -> HashMap<&str, Truth> {
    let mut by_id: HashMap<&str, Truth> = HashMap::new();
    for r in trace {
        if r.choice != 0 || r.index >= tokens {
            continue;
        }
        // Stored as a JSON string literal; our ids need no escaping, so strip the quotes.
        let id = r.request_id_json.trim_matches('"');
        let v = by_id.entry(id).or_insert_with(|| Truth {
            arrival: None,
            tokens: vec![None; tokens as usize],
        });
        v.tokens[r.index as usize] = Some((r.t_raw, r.t_ns, r.due_ns));
        v.arrival = Some(r.arrival_raw);
    }
    by_id
}

fn analyse(shape: &Shape, clock: &Clock, timelines: &[Timeline], trace: &[TraceRec]) -> Report {
    let truth = index_trace(trace, shape.tokens);
    let mut ttft_err_ms = Vec::with_capacity(timelines.len());
    let mut true_ttft_ms = Vec::with_capacity(timelines.len());
    let mut server_ttft_ms = Vec::with_capacity(timelines.len());
    let mut ttft_arrival_err_ms = Vec::with_capacity(timelines.len());
    let mut gap_err_us = Vec::with_capacity(timelines.len() * shape.tokens as usize);
    let mut delivery_us = Vec::with_capacity(timelines.len() * shape.tokens as usize);
    let mut errors: HashMap<&'static str, usize> = HashMap::new();
    let mut first_error = None;
    let (mut tokens, mut matched) = (0u64, 0u64);
    let mut client_t: Vec<Option<u64>> = vec![None; shape.tokens as usize];
    let mut wakeup_us = Vec::with_capacity(timelines.len() * shape.tokens as usize);
    let mut source: Option<StampSource> = None;
    for (i, tl) in timelines.iter().enumerate() {
        let s = tl.stamp_source();
        source = Some(source.map_or(s, |a| a.combine(s)));
        wakeup_us.extend(
            tl.events
                .iter()
                .filter(|e| e.tokens > 0 && e.wakeup_ns > 0)
                .map(|e| e.wakeup_ns as f64 / 1e3),
        );
        if let Err(e) = &tl.outcome {
            *errors.entry(e.kind.as_str()).or_default() += 1;
            if first_error.is_none() {
                first_error = Some(format!("stream {i}: {e}"));
            }
        }
        tokens += tl.output_tokens();
        // Client stamp per token index: each event covers the next `tokens` indices.
        client_t.iter_mut().for_each(|c| *c = None);
        let mut k = 0usize;
        for ev in tl.events.iter().filter(|e| e.tokens > 0) {
            for _ in 0..ev.tokens {
                if k < client_t.len() {
                    client_t[k] = Some(ev.t);
                }
                k += 1;
            }
        }
        let Some(server) = truth.get(request_id(i).as_str()) else {
            continue;
        };
        let mut prev: Option<(u64, u64)> = None;
        for (k, (c, s)) in client_t.iter().zip(server.tokens.iter()).enumerate() {
            let (Some(c), Some((s_raw, _, _))) = (*c, *s) else {
                prev = None;
                continue;
            };
            matched += 1;
            delivery_us.push(clock.signed_delta_ns(s_raw, c) as f64 / 1e3);
            if k == 0 {
                ttft_err_ms.push(clock.signed_delta_ns(s_raw, c) as f64 / 1e6);
                if let Some(send) = tl.send_start {
                    true_ttft_ms.push(clock.signed_delta_ns(send, s_raw) as f64 / 1e6);
                }
                if let (Some(send), Some(arrival)) = (tl.send_start, server.arrival) {
                    let server_ttft = clock.signed_delta_ns(arrival, s_raw);
                    let client_ttft = clock.signed_delta_ns(send, c);
                    server_ttft_ms.push(server_ttft as f64 / 1e6);
                    ttft_arrival_err_ms.push((client_ttft - server_ttft) as f64 / 1e6);
                }
            }
            if let Some((pc, ps)) = prev {
                let measured = clock.signed_delta_ns(pc, c);
                let truth = clock.signed_delta_ns(ps, s_raw);
                gap_err_us.push((measured - truth).unsigned_abs() as f64 / 1e3);
            }
            prev = Some((c, s_raw));
        }
    }
    let lag_us: Vec<f64> = trace
        .iter()
        .map(|r| r.t_ns.saturating_sub(r.due_ns) as f64 / 1e3)
        .collect();
    let ttft = Fig::of(&ttft_err_ms);
    let ttft_arrival = Fig::of(&ttft_arrival_err_ms);
    let gap = Fig::of(&gap_err_us);
    let lag = Fig::of(&lag_us);
    let delivery = Fig::of(&delivery_us);
    let wakeup = Fig::of(&wakeup_us);
    let source = source.unwrap_or(StampSource::ClientClock(StampFallback::NoStamp));
    Report {
        streams: shape.streams,
        tokens_per_stream: shape.tokens,
        gap_ms: shape.gap.as_secs_f64() * 1e3,
        first_token_ms: shape.first_token.as_secs_f64() * 1e3,
        client_threads: shape.client_threads,
        tokens,
        tokens_matched: matched,
        trace_records: trace.len() as u64,
        failed_streams: timelines.iter().filter(|t| !t.is_ok()).count(),
        errors,
        first_error,
        true_ttft_ms_mean: Fig::of(&true_ttft_ms).mean,
        ttft_error_ms_mean: ttft.mean,
        ttft_error_ms_p50: ttft.p50,
        ttft_error_ms_p99: ttft.p99,
        ttft_error_ms_max: ttft.max,
        server_ttft_ms_mean: Fig::of(&server_ttft_ms).mean,
        ttft_arrival_error_ms_mean: ttft_arrival.mean,
        ttft_arrival_error_ms_p50: ttft_arrival.p50,
        ttft_arrival_error_ms_p99: ttft_arrival.p99,
        ttft_arrival_error_ms_max: ttft_arrival.max,
        gap_error_us_mean: gap.mean,
        gap_error_us_p50: gap.p50,
        gap_error_us_p99: gap.p99,
        gap_error_us_max: gap.max,
        delivery_us_min: delivery.min,
        delivery_us_p50: delivery.p50,
        delivery_us_p99: delivery.p99,
        server_write_lag_us_p50: lag.p50,
        server_write_lag_us_p99: lag.p99,
        server_write_lag_us_max: lag.max,
        client_cpu_ns_per_token: 0.0,
        client_cpu_user_ns_per_token: 0.0,
        client_cpu_sys_ns_per_token: 0.0,
        client_cpu_ms: 0.0,
        stamp_source: source.as_str(),
        stamp_fallback: source.fallback().map(StampFallback::as_str),
        client_wakeup_us_p50: wakeup.p50,
        client_wakeup_us_p99: wakeup.p99,
        client_wakeup_us_max: wakeup.max,
        peak_rss_mb: 0.0,
        wall_s: 0.0,
    }
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
    fn start(cfg: MockConfig) -> Result<ServerThread, SelftestError> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("selftest-server".into())
            .spawn(move || -> std::io::Result<()> {
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

/// Every stream needs two descriptors in this process (client and server side).
fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur >= want {
        return;
    }
    lim.rlim_cur = want.min(lim.rlim_max);
    // SAFETY: as above; failure leaves the old limit, and connects then fail visibly.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

/// The human table.
pub fn write_table(w: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    writeln!(
        w,
        "selftest: {} streams x {} tokens, gap {} ms, first-token delay {} ms, {} client thread(s), {:.1} s",
        r.streams, r.tokens_per_stream, r.gap_ms, r.first_token_ms, r.client_threads, r.wall_s
    )?;
    writeln!(
        w,
        "  tokens            {} received, {} matched to the server trace ({} traced), {} failed stream(s)",
        r.tokens, r.tokens_matched, r.trace_records, r.failed_streams
    )?;
    writeln!(
        w,
        "  {:<17} {:>10} {:>10} {:>10} {:>10}",
        "", "mean", "p50", "p99", "max"
    )?;
    writeln!(
        w,
        "  {:<17} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
        "TTFT error ms",
        r.ttft_error_ms_mean,
        r.ttft_error_ms_p50,
        r.ttft_error_ms_p99,
        r.ttft_error_ms_max
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
        "  {:<17} {:>10} {:>10.1} {:>10.1} {:>10}",
        "delivery us",
        format!("min {:.1}", r.delivery_us_min),
        r.delivery_us_p50,
        r.delivery_us_p99,
        ""
    )?;
    writeln!(
        w,
        "  true TTFT         {:.2} ms mean (server first write - client send); {:.2} ms at the server (first write - arrival)",
        r.true_ttft_ms_mean, r.server_ttft_ms_mean
    )?;
    writeln!(
        w,
        "  client CPU        {:.0} ns/token: {:.0} user + {:.0} kernel ({:.1} ms total)",
        r.client_cpu_ns_per_token,
        r.client_cpu_user_ns_per_token,
        r.client_cpu_sys_ns_per_token,
        r.client_cpu_ms
    )?;
    let fallback = r
        .stamp_fallback
        .map_or(String::new(), |f| format!(" ({f})"));
    if r.stamp_source == "client_clock" {
        writeln!(
            w,
            "  stamps            client_clock{fallback}: each read stamped when the client woke up"
        )?;
    } else {
        writeln!(
            w,
            "  stamps            {}{fallback}: the client woke up {:.1} us p50, {:.1} p99, {:.1} max after the data arrived (not in the stamps)",
            r.stamp_source, r.client_wakeup_us_p50, r.client_wakeup_us_p99, r.client_wakeup_us_max
        )?;
    }
    writeln!(
        w,
        "  peak RSS          {:.1} MB (whole process: server and client)",
        r.peak_rss_mb
    )?;
    if let Some(e) = &r.first_error {
        writeln!(w, "  first failure     {e}")?;
    }
    Ok(())
}

/// CPU time of the calling thread so far: (user ns, system ns); zeros if the kernel refuses.
fn thread_cpu_ns_pair() -> (u64, u64) {
    let t = crate::sys::thread_cpu().unwrap_or_default();
    (t.user_ns, t.system_ns)
}

#[cfg(test)]
mod tests {
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
            // The request reached the server 800 ns after the send stamp (1_000) below.
            arrival_ns: 1_800,
            arrival_raw: 1_800,
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
        assert!((r.ttft_error_ms_mean - 0.0002).abs() < 1e-12);
        assert!((r.true_ttft_ms_mean - 0.009).abs() < 1e-12);
        // Gap errors: |1050 - 1000| = 50 ns, |850 - 1000| = 150 ns.
        assert!((r.gap_error_us_max - 0.15).abs() < 1e-9);
        assert!((r.gap_error_us_mean - 0.1).abs() < 1e-9);
        assert!((r.server_write_lag_us_max - 5.0).abs() < 1e-9);
        assert!((r.delivery_us_min - 0.1).abs() < 1e-9);
        assert!((r.delivery_us_p50 - 0.2).abs() < 1e-9);
        // Every read kernel-stamped, woken 1, 2 and 3 us late.
        assert_eq!((r.stamp_source, r.stamp_fallback), ("kernel", None));
        assert!((r.client_wakeup_us_p50 - 2.0).abs() < 1e-9);
        assert!((r.client_wakeup_us_max - 3.0).abs() < 1e-9);
        let mut table = Vec::new();
        write_table(&mut table, &r).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(table.contains("stamps            kernel: "), "{table}");
    }

    #[test]
    fn unmatched_tokens_and_failures_are_counted() {
        let (clock, _h) = Clock::mock();
        let mut ok = Timeline::new(0, 2, false);
        ok.events.push(EventRecord {
            t: 5,
            tokens: 1,
            wakeup_ns: 0,
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
        assert_eq!(r.stamp_source, "client_clock");
        assert_eq!(r.client_wakeup_us_max, 0.0);
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
