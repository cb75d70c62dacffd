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
        let mut cfg = MockConfig::profile(llmspeed::mock::Profile::Fast);
        cfg.engine.decode.base_us = step_us;
        TracedMock::with(cfg)
    }

    /// The simulated server with `cfg`'s settings, tracing in memory.
    pub fn with(mut cfg: MockConfig) -> TracedMock {
        let (sink, trace) = llmspeed::mock::trace::TraceSink::memory();
        cfg.trace_sink = Some(sink);
        let server = MockThread::start(cfg);
        TracedMock {
            addr: server.addr,
            server,
            trace,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Stops the server and returns the requests it served, in order of arrival: one entry per
    /// request even where two carried the same id (a capacity probe repeated at its load sends
    /// the same ids again), told apart by their arrival.
    pub fn finish_served(self) -> Vec<Served> {
        self.server.stop();
        let mut by_req: std::collections::HashMap<(std::sync::Arc<str>, u64), Vec<_>> =
            Default::default();
        for r in self.trace.try_iter() {
            by_req
                .entry((r.request_id_json.clone(), r.arrival_raw))
                .or_default()
                .push(r);
        }
        let mut served: Vec<Served> = by_req
            .into_iter()
            .map(|((id, _), mut recs)| {
                recs.sort_by_key(|r| r.index);
                Served {
                    id: serde_json::from_str(&id).unwrap(),
                    arrival_ns: recs[0].arrival_ns,
                    t_ns: recs.iter().map(|r| r.t_ns).collect(),
                    due_ns: recs.iter().map(|r| r.due_ns).collect(),
                }
            })
            .collect();
        served.sort_by_key(|s| s.arrival_ns);
        served
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

/// One request as the simulated server served it (its trace, in ns since the server started).
#[derive(Clone, Debug)]
pub struct Served {
    pub id: String,
    /// When the read that completed the request returned.
    pub arrival_ns: u64,
    /// Each token's write (when the write carrying it returned) and when the engine made it,
    /// in token order.
    pub t_ns: Vec<u64>,
    pub due_ns: Vec<u64>,
}

impl Served {
    /// When its last token was written.
    pub fn end_ns(&self) -> u64 {
        *self.t_ns.last().unwrap()
    }
}

/// What the server did during one probe of a `capacity --by concurrency` search, from its
/// trace: the gaps between consecutive token writes of the requests that speak for the load,
/// chosen as the client chooses its own (`capacity::samples`): in each round, not one of the
/// `C` that opened it, and ended by the close of the round's steady window (the last request
/// end while all `C` slots were busy), both judged on the server's clock.
#[derive(Clone, Debug)]
pub struct ServerProbe {
    pub concurrency: u64,
    /// The gaps in ms, sorted ascending.
    pub gaps_ms: Vec<f64>,
    /// The same tokens' gaps on the engine's own schedule (their `due_ns`: the engine plans
    /// each step from the last one's end, so these never stretch), sorted ascending.
    pub nominal_ms: Vec<f64>,
    /// Of every gap of the probe's requests, the share whose write gap differs from the engine's
    /// own step (the `due_ns` gap) by more than `slip_ms`, and the largest difference in ms.
    pub slipped: f64,
    pub worst_slip_ms: f64,
}

impl ServerProbe {
    /// The server-side `percent`ile of the gaps and its interval at `confidence`, as the search
    /// computes the client's: (estimate, lo, hi), `None` for an unbounded end.
    pub fn percentile(&self, percent: f64, confidence: f64) -> (f64, Option<f64>, Option<f64>) {
        let i =
            llmspeed::capacity::interval::percentile_interval(&self.gaps_ms, percent, confidence);
        let est = llmspeed::analysis::stats::percentile_sorted(&self.gaps_ms, percent)
            .expect("a probe with gaps");
        (est, i.lo, i.hi)
    }

    /// Whether the server kept its nominal schedule as far as the `percent`ile goes: that of
    /// its write gaps within `ms` of that of the engine's steps.
    pub fn kept(&self, percent: f64, ms: f64) -> bool {
        let p = |v: &[f64]| llmspeed::analysis::stats::percentile_sorted(v, percent).unwrap();
        (p(&self.gaps_ms) - p(&self.nominal_ms)).abs() <= ms
    }
}

/// Splits `served` into the probes of a search by concurrency (results.json's `probes`, in the
/// order they ran), `round` requests per round beyond the opening burst, the workload's `seed`.
/// Probes run one after another with a drain between, so they take the requests in order of
/// arrival, `rounds x (C + round)` each; every one of them must carry the id its probe sends
/// (run `seed ^ C.rotate_left(16) ^ round index`, index below `C + round`: `capacity::plan`),
/// which the split checks. A step's write gap counts as slipped when it differs from the
/// engine's step by more than `slip_ms`.
pub fn server_probes(
    served: &[Served],
    probes: &[serde_json::Value],
    seed: u64,
    round: u64,
    slip_ms: f64,
) -> Vec<ServerProbe> {
    use llmspeed::workload::request_id::RequestId;
    let served: Vec<&Served> = served
        .iter()
        .filter(|s| matches!(RequestId::parse(&s.id), Some(RequestId::Bench { .. })))
        .collect();
    let mut next = 0;
    let mut out = Vec::new();
    for p in probes {
        let c = p["concurrency"].as_u64().expect("a search by concurrency");
        let rounds = p["rounds"].as_u64().unwrap();
        let per_round = (c + round) as usize;
        let take = rounds as usize * per_round;
        assert!(
            next + take <= served.len(),
            "the trace has {} requests, the probes {} and more",
            served.len(),
            next + take
        );
        let mine = &served[next..next + take];
        next += take;
        // By round, each in dispatch order.
        let mut by_round: Vec<Vec<(u64, &Served)>> = vec![Vec::new(); rounds as usize];
        for s in mine {
            let Some(RequestId::Bench { run, index }) = RequestId::parse(&s.id) else {
                unreachable!()
            };
            let r = (run ^ seed as u32 ^ (c as u32).rotate_left(16)) as usize;
            assert!(
                r < rounds as usize && (index as usize) < per_round,
                "request {} (run {run:#x}, index {index}) is not one of probe {p}'s",
                s.id
            );
            by_round[r].push((index, *s));
        }
        let (mut gaps_ms, mut nominal_ms) = (Vec::new(), Vec::new());
        let (mut slips, mut all, mut worst) = (0u64, 0u64, 0.0f64);
        for reqs in &by_round {
            assert_eq!(reqs.len(), per_round, "a round of probe {p}");
            let close = window_close(reqs.iter().map(|(_, s)| *s), c as usize);
            for (index, s) in reqs {
                for (t, d) in s.t_ns.windows(2).zip(s.due_ns.windows(2)) {
                    let slip = ((t[1] - t[0]) as f64 - (d[1] - d[0]) as f64).abs() / 1e6;
                    all += 1;
                    slips += u64::from(slip > slip_ms);
                    worst = worst.max(slip);
                }
                if *index >= c && s.end_ns() <= close {
                    gaps_ms.extend(s.t_ns.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6));
                    nominal_ms.extend(s.due_ns.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6));
                }
            }
        }
        gaps_ms.sort_by(f64::total_cmp);
        nominal_ms.sort_by(f64::total_cmp);
        out.push(ServerProbe {
            concurrency: c,
            gaps_ms,
            nominal_ms,
            slipped: slips as f64 / all.max(1) as f64,
            worst_slip_ms: worst,
        });
    }
    assert_eq!(
        next,
        served.len(),
        "requests in the trace beyond the probes'"
    );
    out
}

/// The last request end at which all `c` slots were busy (`bench::engine::steady`'s close at
/// 100%), on the server's clock: requests from arrival to last token write.
fn window_close<'a>(reqs: impl Iterator<Item = &'a Served>, c: usize) -> u64 {
    let mut events: Vec<(u64, bool)> = Vec::new();
    for s in reqs {
        events.push((s.arrival_ns, true));
        events.push((s.end_ns(), false));
    }
    // Ends before starts at the same instant, as the client's sweep takes them.
    events.sort_by_key(|&(t, start)| (t, start));
    let (mut busy, mut close) = (0usize, 0u64);
    for (t, start) in events {
        if start {
            busy += 1;
        } else {
            if busy == c {
                close = t;
            }
            busy -= 1;
        }
    }
    close
}

/// Checks every probe of a search judged on the latency objective `key` (its `percent`ile of
/// gaps, `max_ms`, at `confidence`) against what the server did during it (`server`, from
/// [`server_probes`]), and prints both side by side:
/// - a "pass" probe: the server's percentile is within the threshold, or its interval
///   straddles it (the server did not clearly miss);
/// - a "fail" probe: the server's percentile is over the threshold, or its interval straddles
///   it: never a fail where the server clearly met the objective (its interval's top within
///   the threshold), which would be the client's limit taken for the server's;
/// - a "client_bound" probe names its reasons.
pub fn assert_verdicts_follow_the_server(
    probes: &[serde_json::Value],
    server: &[ServerProbe],
    key: &str,
    confidence: f64,
) {
    assert_eq!(probes.len(), server.len());
    for (p, s) in probes.iter().zip(server) {
        let o = p["objectives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["key"] == key)
            .unwrap_or_else(|| panic!("no {key} in {p}"));
        let thr = o["threshold"].as_f64().unwrap();
        let percent: f64 = key.rsplit('p').next().unwrap().parse().unwrap();
        let (est, lo, hi) = s.percentile(percent, confidence);
        let outcome = p["outcome"].as_str().unwrap();
        let nominal = llmspeed::analysis::stats::percentile_sorted(&s.nominal_ms, percent).unwrap();
        eprintln!(
            "  C={:<3} {outcome:<12} client {key} {} [{}, {}] | server {est:.1} [{}, {}] of {} gaps \
             (nominal {nominal:.1}), {:.1}% over 2 ms off, worst {:.1} ms",
            s.concurrency,
            o["estimate"],
            o["lo"],
            o["hi"],
            lo.map_or("-".into(), |x| format!("{x:.1}")),
            hi.map_or("-".into(), |x| format!("{x:.1}")),
            s.gaps_ms.len(),
            100.0 * s.slipped,
            s.worst_slip_ms,
        );
        let server_missed = est > thr && lo.is_some_and(|lo| lo > thr);
        let server_met = est <= thr && hi.is_some_and(|hi| hi <= thr);
        match outcome {
            "pass" => assert!(
                !server_missed,
                "a pass where the server clearly missed ({est:.1} ms, lo {lo:?} > {thr}): {p}"
            ),
            "fail" => assert!(
                !server_met,
                "the client's limit taken for the server's: a fail where the server clearly met \
                 {key} ({est:.1} ms, hi {hi:?} <= {thr}): {p}"
            ),
            "client_bound" => assert!(
                !p["client_bound_reasons"].as_array().unwrap().is_empty(),
                "{p}"
            ),
            other => panic!("a probe left {other}: {p}"),
        }
    }
}
