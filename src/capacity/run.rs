//! The search run against a server: the named steps around the pure core — find the server's
//! gauges, load a dataset that is read once, then for each load the search asks for: settle
//! the server, probe it in rounds until the decision is made (or its round limit), tell the
//! search, report the line. The one IO-bearing file of `capacity`: it calls the bench engine
//! for each round and reads the server's `/metrics` between probes.
//!
//! **A finite dataset across probes and rounds.** A dataset of texts (ShareGPT, custom, sonnet,
//! the hub's) is loaded once, before the first probe, as `bench serve` loads it: `--num-prompts`
//! samples, shuffled by `--seed` unless `--disable-shuffle`, measured in tokens once. Each
//! round then sends the next samples in that order, continuing where the last round (of any
//! probe) stopped and wrapping at the end: no sample is sent twice before every one has been
//! sent once, so a server's prefix cache helps no probe until the search has used the whole
//! set (the summary says when it wrapped). The families drawn from a seed (random ids, with or
//! without images, prefix repetition, BurstGPT) draw each round afresh instead
//! ([`Workload::draws_per_round`]).

use crate::bench::engine;
use crate::bench::engine::samples::{load_samples, Loaded};
use crate::capacity::client::{bound_reasons, Lag};
use crate::capacity::decide::{decide, Decision, Samples, Verdict};
use crate::capacity::flow::{dispersion, keeps_up, of_open_round, Flow, KeepsUp};
use crate::capacity::plan::{rate_round_plan, round_plan, setup_plan, By, Workload};
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
    /// The workload sent: the configured one, its `--context max` resolved.
    pub workload: Workload,
    /// A dataset read once: how many samples it held and how many requests the rounds took
    /// from it (more than it held: the rounds wrapped). `None`: every round drew its own.
    pub dataset: Option<DeckUse>,
    /// When the search started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    pub wall_s: f64,
}

/// What the rounds took from a dataset read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeckUse {
    pub samples: usize,
    pub sent: u64,
}

/// A dataset read once, dealt to the rounds in order, wrapping.
struct Deck {
    loaded: Loaded,
    next: usize,
    sent: u64,
}

impl Deck {
    /// The next `n` samples, as the engine takes a loaded dataset.
    fn deal(&mut self, n: usize) -> Loaded {
        let all = &self.loaded.samples;
        let samples = (0..n)
            .map(|i| all[(self.next + i) % all.len()].clone())
            .collect();
        self.next = (self.next + n) % all.len();
        self.sent += n as u64;
        Loaded {
            samples,
            counting: self.loaded.counting,
            prompt_kind: self.loaded.prompt_kind,
            tokenize: self.loaded.tokenize,
            numpy_words: 0,
            images: self.loaded.images,
        }
    }

    fn used(&self) -> DeckUse {
        DeckUse {
            samples: self.loaded.samples.len(),
            sent: self.sent,
        }
    }
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
    let (model, engine, names, max_model_len) = server(cfg, client, line).await?;
    let fitted;
    let cfg = match cfg.workload.context_max {
        true => {
            fitted = fit_context(cfg, max_model_len, line)?;
            &fitted
        }
        false => cfg,
    };
    let mut deck = match cfg.workload.draws_per_round() {
        true => None,
        false => Some(load_once(cfg, client, stop, line).await?),
    };
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
        match probe(cfg, load, deadline, stop, deck.as_mut(), line).await? {
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
        dataset: deck.as_ref().map(Deck::used),
        workload: cfg.workload.clone(),
        started_unix_s,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// The model and engine, the gauges to drain by (`None`: the server shows none), and its
/// `max_model_len` where it says it.
async fn server(
    cfg: &CapacityConfig,
    client: &Client,
    line: &mut dyn FnMut(&str),
) -> Result<(String, &'static str, Option<MetricNames>, Option<u64>), String> {
    let collected = collect_when_ready(
        client,
        cfg.workload.connection.model.as_deref(),
        Duration::from_secs(60),
        line,
    )
    .await?;
    let info = detect(&collected, &Overrides::default());
    let model = cfg
        .workload
        .connection
        .model
        .clone()
        .or(info.model.clone())
        .ok_or("the server lists no model; pass --model")?;
    let names = if info.has_metrics {
        MetricNames::for_engine(info.engine)
    } else {
        None
    };
    let max_model_len = info.max_model_len.map(|f| f.value);
    Ok((model, info.engine.as_str(), names, max_model_len))
}

/// `--context max` made a length: the largest decode context that fits the server's
/// `max_model_len` beside the output, as the matrix's `max`.
fn fit_context(
    cfg: &CapacityConfig,
    max_model_len: Option<u64>,
    line: &mut dyn FnMut(&str),
) -> Result<CapacityConfig, String> {
    use crate::matrix::plan::{decode_fit, fitted_label, DEFAULT_MARGIN};
    let m = max_model_len.ok_or(
        "--context max: the server does not say its max_model_len; give the context in tokens \
         (e.g. 32K)",
    )?;
    let out = u64::from(cfg.workload.dataset.random_output_len);
    let fit = decode_fit(m, out, DEFAULT_MARGIN);
    if fit == 0 {
        return Err(format!(
            "--context max: max_model_len {m} leaves no room for {out} output tokens"
        ));
    }
    let mut c = cfg.clone();
    c.workload.dataset.random_input_len = u32::try_from(fit).unwrap_or(u32::MAX);
    line(&format!(
        "--context max: {fit} prompt tokens ({}) = max_model_len {m} - {out} output - {DEFAULT_MARGIN} margin",
        fitted_label(fit)
    ));
    Ok(c)
}

/// Loads the dataset once, as `bench serve` loads it (`--num-prompts` samples, measured in
/// tokens), for the rounds to take in order.
async fn load_once(
    cfg: &CapacityConfig,
    client: &Client,
    stop: &Cancel,
    line: &mut dyn FnMut(&str),
) -> Result<Deck, String> {
    let plan = setup_plan(&cfg.workload);
    let mut log = Vec::new();
    let model = engine::connect::resolve_model(&plan, client, &mut log).await;
    let model = model.map_err(|e| e.to_string())?;
    let model = plan.served_model_name.clone().unwrap_or(model);
    let loaded = load_samples(&plan, client, &model, stop, &mut log).await;
    for l in String::from_utf8_lossy(&log).lines() {
        line(l);
    }
    let loaded = loaded.map_err(|e| e.to_string())?;
    if loaded.samples.is_empty() {
        return Err(format!(
            "--dataset-name {}: the dataset gave no samples to send",
            cfg.workload.dataset.kind.as_str()
        ));
    }
    line(&format!(
        "dataset {}: {} samples loaded once; each round sends the next of them, in order",
        cfg.workload.dataset.kind.as_str(),
        loaded.samples.len()
    ));
    Ok(Deck {
        loaded,
        next: 0,
        sent: 0,
    })
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
    mut deck: Option<&mut Deck>,
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
            By::Rate { burstiness, .. } => {
                rate_round_plan(&cfg.workload, rate, burstiness, round, rounds)
            }
        };
        let n = plan.dataset.num_prompts;
        let dealt = deck.as_deref_mut().map(|d| d.deal(n));
        let m = match one_round(&plan, dealt, deadline, stop).await? {
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
            By::Rate { step, burstiness } => Some(keeps_up(
                &flow,
                step,
                cfg.confidence,
                dispersion(burstiness),
            )),
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
    loaded: Option<Loaded>,
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
    let r = engine::run::run_loaded(
        plan,
        loaded,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::samples::{PromptKind, TokenCounting};
    use crate::workload::datasets::{PromptSource, Sample};

    fn text(s: &Sample) -> &str {
        match &s.prompt {
            PromptSource::Text(t) => t,
            _ => unreachable!(),
        }
    }

    /// Rounds take the loaded samples in order, each continuing where the last stopped,
    /// wrapping at the end; the use counts every request dealt.
    #[test]
    fn a_deck_deals_in_order_and_wraps() {
        let samples = (0..5)
            .map(|i| Sample {
                prompt: PromptSource::Text(format!("p{i}")),
                prompt_len: 1,
                output_len: 2,
                group: None,
            })
            .collect();
        let mut deck = Deck {
            loaded: Loaded {
                samples,
                counting: TokenCounting::Local,
                prompt_kind: PromptKind::DatasetText,
                tokenize: None,
                numpy_words: 7,
                images: crate::bench::engine::samples::ImagePath::None,
            },
            next: 0,
            sent: 0,
        };
        let round = |d: &mut Deck, n| {
            let l = d.deal(n);
            assert_eq!(
                (l.counting, l.prompt_kind, l.numpy_words),
                (TokenCounting::Local, PromptKind::DatasetText, 0)
            );
            l.samples
                .iter()
                .map(|s| text(s).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(round(&mut deck, 3), ["p0", "p1", "p2"]);
        assert_eq!(round(&mut deck, 4), ["p3", "p4", "p0", "p1"]);
        assert_eq!(round(&mut deck, 12).len(), 12);
        assert_eq!(deck.next, (3 + 4 + 12) % 5);
        assert_eq!(
            deck.used(),
            DeckUse {
                samples: 5,
                sent: 19
            }
        );
    }
}
