//! The search run against a server: the named steps around the pure core — find the server's
//! gauges, then for each load the search asks for: settle the server, probe it in rounds until
//! the decision is made (or its round limit), tell the search, report the line. The one
//! IO-bearing file of `capacity`: it calls `bench::engine::run` for each round and reads the
//! server's `/metrics` between probes.

use crate::bench::engine;
use crate::capacity::client::{bound_reasons, Lag};
use crate::capacity::decide::{decide, Decision, Samples, Verdict};
use crate::capacity::flow::{keeps_up, of_open_round, Flow, KeepsUp};
use crate::capacity::plan::{rate_round_plan, round_plan, By, Workload};
use crate::capacity::samples::{of_round, Throughput};
use crate::capacity::search::{Conclusion, Next, Outcome, Search, SearchConfig};
use crate::capacity::slo::Slo;
use crate::clock::Clock;
use crate::net::{Cancel, Client};
use crate::server::probe::{collect_when_ready, detect, Overrides};
use crate::server::sampler::{wait_drained, Drain, MetricNames};
use std::time::{Duration, Instant};

/// Everything a search run needs.
#[derive(Clone, Debug)]
pub struct CapacityConfig {
    pub workload: Workload,
    /// Closed-loop streams, or a request rate (`--by rate`).
    pub by: By,
    pub slo: Slo,
    /// The confidence of every interval (0.95 by default).
    pub confidence: f64,
    pub search: SearchConfig,
    /// Requests per round beyond the opening burst; 0: max(4 x concurrency, 40). By rate: the
    /// arrivals per round; 0: max(5 s of arrivals, 50).
    pub round: u64,
    /// Rounds a probe may take while its decision is "not yet".
    pub max_rounds: u64,
    /// The whole search's time limit.
    pub max_time: Duration,
    /// The longest wait for the server's gauges to show it idle between probes.
    pub drain_timeout: Duration,
    /// The pause after a probe when the server has no gauges to check, and after a drain.
    pub settle: Duration,
    /// The simulated server and its profile when the search ran against `--mock`.
    pub simulated: Option<String>,
}

/// How the server was brought to rest before a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The first probe: nothing ran before it.
    First,
    /// Its running and waiting gauges read 0.
    Drained,
    /// Its gauges still showed requests at the drain timeout.
    StillBusy,
    /// It has no gauges we read: the settle pause only.
    Paused,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::First => "first",
            Settled::Drained => "drained",
            Settled::StillBusy => "still_busy",
            Settled::Paused => "paused",
        }
    }
}

/// One probe as it ended.
#[derive(Clone, Debug)]
pub struct Probe {
    pub load: u64,
    pub outcome: Outcome,
    pub decision: Decision,
    pub rounds: u64,
    pub throughput: Throughput,
    /// By rate: whether the server completed requests as fast as they arrived.
    pub keeps_up: Option<KeepsUp>,
    /// Why the client was the limit (empty: it was not).
    pub client_bound: Vec<String>,
    pub settled: Settled,
    pub wall_s: f64,
}

/// The whole search.
#[derive(Clone, Debug)]
pub struct CapacityRun {
    pub model: String,
    pub engine: &'static str,
    pub probes: Vec<Probe>,
    pub conclusion: Conclusion,
    /// Why it stopped early, when it did (`--max-time`, a signal's name).
    pub stopped: Option<&'static str>,
    /// When the search started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    pub wall_s: f64,
}

/// The reason a round is cut at `--max-time`.
const OUT_OF_TIME: &str = "--max-time";

/// Runs the search. `line` hears the live progress lines.
pub async fn run(
    cfg: &CapacityConfig,
    client: &Client,
    stop: &Cancel,
    line: &mut dyn FnMut(&str),
) -> Result<CapacityRun, String> {
    let t0 = Instant::now();
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let deadline = tokio::time::Instant::now() + cfg.max_time;
    let (model, engine, names) = server(cfg, client, line).await?;
    let mut search = Search::new(cfg.search)?;
    let mut probes: Vec<Probe> = Vec::new();
    let mut stopped = None;
    while let Next::Probe(load) = search.next() {
        let settled = if probes.is_empty() {
            Settled::First
        } else {
            settle(cfg, client, names.as_ref()).await
        };
        let n = probes.len() + 1;
        line(&format!(
            "probe {n}: {} (server {}; {:.0} s of --max-time left)",
            cfg.by.describe(load),
            settled.as_str(),
            deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_secs_f64()
        ));
        match probe(cfg, load, deadline, stop, line).await? {
            Ok(mut p) => {
                p.settled = settled;
                line(&verdict_line(n, &p, cfg.by));
                search.record(load, p.outcome);
                probes.push(p);
            }
            Err(reason) => {
                stopped = Some(reason);
                break;
            }
        }
    }
    let conclusion = match search.next() {
        Next::Done(c) => c,
        Next::Probe(_) => search.stop(),
    };
    Ok(CapacityRun {
        model,
        engine,
        probes,
        conclusion,
        stopped,
        started_unix_s,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// The model and engine, and the gauges to drain by (`None`: the server shows none).
async fn server(
    cfg: &CapacityConfig,
    client: &Client,
    line: &mut dyn FnMut(&str),
) -> Result<(String, &'static str, Option<MetricNames>), String> {
    let collected = collect_when_ready(
        client,
        cfg.workload.model.as_deref(),
        Duration::from_secs(60),
        line,
    )
    .await?;
    let info = detect(&collected, &Overrides::default());
    let model = cfg
        .workload
        .model
        .clone()
        .or(info.model.clone())
        .ok_or("the server lists no model; pass --model")?;
    let names = if info.has_metrics {
        MetricNames::for_engine(info.engine)
    } else {
        None
    };
    Ok((model, info.engine.as_str(), names))
}

/// Brings the server to rest between probes: its running and waiting gauges at 0 where it has
/// them, then the settle pause.
async fn settle(cfg: &CapacityConfig, client: &Client, names: Option<&MetricNames>) -> Settled {
    let s = match names {
        Some(n) => match wait_drained(client, n, cfg.drain_timeout, client.clock()).await {
            Drain::Drained => Settled::Drained,
            Drain::Busy | Drain::Unreachable(_) => Settled::StillBusy,
        },
        None => Settled::Paused,
    };
    tokio::time::sleep(cfg.settle).await;
    s
}

/// One probe: rounds until the decision is made, the client is the limit, or the round limit.
/// `Ok(Err(reason))`: stopped (time or signal) before it decided.
async fn probe(
    cfg: &CapacityConfig,
    load: u64,
    deadline: tokio::time::Instant,
    stop: &Cancel,
    line: &mut dyn FnMut(&str),
) -> Result<Result<Probe, &'static str>, String> {
    let t0 = Instant::now();
    let rate = cfg.by.value(load);
    let round = match (cfg.round, cfg.by) {
        (0, By::Concurrency) => (4 * load).max(40),
        (0, By::Rate { .. }) => ((5.0 * rate).ceil() as u64).max(50),
        (r, _) => r,
    };
    let mut samples = Samples::default();
    let mut throughput = Throughput::default();
    let mut flow = Flow::default();
    let mut rounds = 0;
    loop {
        let plan = match cfg.by {
            By::Concurrency => round_plan(&cfg.workload, load, round, rounds),
            By::Rate { .. } => rate_round_plan(&cfg.workload, rate, round, rounds),
        };
        let m = match one_round(&plan, deadline, stop).await? {
            Ok(m) => m,
            Err(reason) => return Ok(Err(reason)),
        };
        rounds += 1;
        let client_bound = bound_reasons(&Lag::of(&m.client_lag), &cfg.slo);
        let (s, t) = match cfg.by {
            By::Concurrency => {
                let records: Vec<_> = m.requests.iter().map(|f| (f.index, &f.record)).collect();
                of_round(&cfg.slo, &records, load, m.duration_ns as f64 / 1e9)
            }
            By::Rate { .. } => {
                let records: Vec<_> = m.requests.iter().map(|f| &f.record).collect();
                let (s, t, f) = of_open_round(&cfg.slo, &records);
                flow.add(f);
                (s, t)
            }
        };
        samples.extend(s);
        throughput.add(t);
        let decision = decide(&cfg.slo, &samples, cfg.confidence);
        let kept = match cfg.by {
            By::Concurrency => None,
            By::Rate { step } => Some(keeps_up(&flow, step, cfg.confidence)),
        };
        let verdict = match kept.map(|k| k.verdict) {
            None => decision.verdict,
            Some(Verdict::Fail) => Verdict::Fail,
            Some(Verdict::Pass) => decision.verdict,
            Some(Verdict::NotYet) if decision.verdict == Verdict::Fail => Verdict::Fail,
            Some(Verdict::NotYet) => Verdict::NotYet,
        };
        let outcome = if !client_bound.is_empty() {
            Some(Outcome::ClientBound)
        } else {
            match verdict {
                Verdict::Pass => Some(Outcome::Pass),
                Verdict::Fail => Some(Outcome::Fail),
                Verdict::NotYet if rounds >= cfg.max_rounds => Some(Outcome::NotYet),
                Verdict::NotYet => None,
            }
        };
        match outcome {
            Some(outcome) => {
                return Ok(Ok(Probe {
                    load,
                    outcome,
                    decision,
                    rounds,
                    throughput,
                    keeps_up: kept,
                    client_bound,
                    settled: Settled::First,
                    wall_s: t0.elapsed().as_secs_f64(),
                }))
            }
            None => line(&format!(
                "  round {rounds}/{}: not yet — {}{}",
                cfg.max_rounds,
                judged_text(&decision),
                kept.map_or(String::new(), |k| keeps_up_text(&k))
            )),
        }
    }
}

/// One round through the engine, cut by a stop or the deadline (`Ok(Err(reason))`: it was,
/// and its requests are not used).
async fn one_round(
    plan: &engine::Plan,
    deadline: tokio::time::Instant,
    stop: &Cancel,
) -> Result<Result<engine::Measured, &'static str>, String> {
    if stop.is_cancelled() {
        return Ok(Err(stop.reason().unwrap_or("a stop")));
    }
    if tokio::time::Instant::now() >= deadline {
        return Ok(Err(OUT_OF_TIME));
    }
    let cut = Cancel::new();
    let watcher = {
        let (cut, stop) = (cut.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => cut.cancel_because(stop.reason().unwrap_or("a stop")),
                _ = tokio::time::sleep_until(deadline) => cut.cancel_because(OUT_OF_TIME),
            }
        })
    };
    let r = engine::run(
        plan,
        Clock::new(),
        &cut,
        &mut std::io::sink(),
        &mut |_: &str| {},
    )
    .await;
    watcher.abort();
    if cut.is_cancelled() {
        return Ok(Err(cut.reason().unwrap_or(OUT_OF_TIME)));
    }
    r.map(Ok).map_err(|e| e.to_string())
}

/// `ttft_p99 12.3 ms [11.9, 13.0] pass; errors 0.0% [0.0, 0.8] pass`.
pub fn judged_text(d: &Decision) -> String {
    let end =
        |v: Option<f64>, scale: f64| v.map_or("-".to_string(), |v| format!("{:.2}", v * scale));
    d.judged
        .iter()
        .map(|j| {
            let (scale, unit) = match j.objective {
                crate::capacity::slo::Objective::Latency { .. } => (1.0, " ms"),
                _ => (100.0, "%"),
            };
            format!(
                "{} {}{unit} [{}, {}] {}",
                j.objective.key(),
                end(j.estimate, scale),
                end(j.lo, scale),
                end(j.hi, scale),
                j.verdict.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `; keeps up: 39.8 req/s completed [36.1, 43.9] of 40.0 arriving pass`.
pub fn keeps_up_text(k: &KeepsUp) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    format!(
        "; keeps up: {} req/s completed [{}, {}] of {} arriving {}",
        f(k.completion_per_s),
        f(k.lo),
        f(k.hi),
        f(k.arrival_per_s),
        k.verdict.as_str()
    )
}

impl Probe {
    /// What the probe's figures read as: the objectives, then (by rate) keeps-up.
    pub fn judged_text(&self) -> String {
        judged_text(&self.decision) + &self.keeps_up.map_or(String::new(), |k| keeps_up_text(&k))
    }

    /// The first objective, in the order given, that failed; then keeps-up (`keeps_up`).
    pub fn first_failed(&self) -> Option<String> {
        self.decision
            .first_failed()
            .map(|j| j.objective.key())
            .or_else(|| {
                self.keeps_up
                    .filter(|k| k.verdict == Verdict::Fail)
                    .map(|_| KEEPS_UP.to_string())
            })
    }
}

/// The name the keeps-up rule fails under.
pub const KEEPS_UP: &str = "keeps_up";

fn verdict_line(n: usize, p: &Probe, by: By) -> String {
    let what = match p.outcome {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::NotYet => "not decided at the round limit",
        Outcome::ClientBound => "Client-bound (the client fell behind; neither pass nor fail)",
    };
    let mut s = format!(
        "probe {n}: {} -> {what} after {} round(s), {:.1} s: {}",
        by.describe(p.load),
        p.rounds,
        p.wall_s,
        p.judged_text()
    );
    if !p.client_bound.is_empty() {
        s += &format!(" (the client: {})", p.client_bound.join("; "));
    }
    s
}
