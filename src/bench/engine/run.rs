//! The runner: one benchmark run from a [`Plan`] to per-request records. Ready check and model,
//! prompts, warm-ups, the measured run on the schedule, then one [`Finished`] per request.
//!
//! Owns the one dispatch loop (generic over the schedule's offsets: `inf`, gamma arrivals,
//! ramps and a trace's own timestamps are all just offsets), the concurrency slots, warm-ups,
//! probes beside the run, and the client-side measurements the Python tools lack (send lag,
//! timer lag, client CPU time, and the client's headroom for the live display once a second
//! while requests finish). It must never parse server bytes (that is `net`/`proto`),
//! compute a tool's metrics, or format results (those are the front ends'). Nothing here runs
//! per token: each request is one spawned task around `Client::stream`.

use crate::bench::engine::connect::{client_for, metrics_page, resolve_model};
use crate::bench::engine::error::unless_stopped;
use crate::bench::engine::lora;
use crate::bench::engine::plan::{InitialTest, Plan};
use crate::bench::engine::probe::{run_probes, ProbeOutcome};
use crate::bench::engine::producer::Producer;
use crate::bench::engine::record::RequestRecord;
use crate::bench::engine::rounds::{self, Row};
use crate::bench::engine::samples::{load_samples, ImagePath, Loaded, PromptKind, TokenCounting};
use crate::bench::engine::send::{unix_ns, wait_for_wall_clock, wait_until};
use crate::bench::engine::slot::Slot;
use crate::clock::Clock;
use crate::net::{Cancel, Client, NoopObserver, StreamRequest};
use crate::progress::{Event, Phase, Progress};
use crate::server::diagnose;
use crate::server::TokenizeDialect;
use crate::sys::CpuTime;
use crate::timeline::{ErrorKind, Timeline};
use crate::workload::datasets::{self, PromptSource, Sample};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use crate::bench::engine::error::RunError;

/// Above this many prompt tokens in total, bodies are built just before each send instead of
/// all up front (8K x 100K token-id prompts would need ~5 GB of JSON).
const PREBUILD_MAX_TOKENS: u64 = 64 << 20;

/// Everything a measured run produced, before any tool's metrics.
#[derive(Debug)]
pub struct Measured {
    /// The model id: the plan's, else the first the server listed.
    pub model: String,
    /// The name requests carried (the served model name, else the model id).
    pub request_model: String,
    pub counting: TokenCounting,
    pub prompt_kind: PromptKind,
    /// The server's `/tokenize` dialect the probe verified before the run, if any.
    pub tokenize: Option<TokenizeDialect>,
    /// The whole dataset, every shard's share included; a request's `index` points into it.
    pub samples: Vec<Sample>,
    /// Requests this run was to send (its shard's share).
    pub planned: usize,
    /// Every request that ran to its own end (success or the server's failure), by index.
    pub requests: Vec<Finished>,
    /// Requests a stop left unsent, and those it cut short: neither is the server's result.
    pub unsent: usize,
    pub cut: usize,
    /// Whether a stop (`Cancel`) ended the run early, and its reason.
    pub stopped: bool,
    pub stop_reason: Option<&'static str>,
    /// Scheduled send time -> the moment the dispatcher woke up, per dispatched request.
    pub timer_lag_ns: Vec<u64>,
    /// Each dispatched request's number and the moment it was dispatched (ns since
    /// [`Measured::base_raw`]), in dispatch order: cut and failed requests included.
    pub dispatched_ns: Vec<(usize, u64)>,
    /// The clock's raw stamp of the run's start, the base of every record's times.
    pub base_raw: u64,
    /// Start -> the last request's end (and the probe in flight's).
    pub duration_ns: u64,
    /// The start on the wall clock (UTC), for merging shards run on other machines.
    pub start_unix_ns: u64,
    /// Wall time and the client's CPU time over the measured run.
    pub wall_s: f64,
    pub client_cpu: CpuTime,
    /// The client's lag over the run and the bounds it puts on the figures.
    pub client_lag: crate::analysis::client_lag::ClientLag,
    /// Connections opened before the start (preconnect), `None` without it.
    pub preconnected: Option<usize>,
    /// The probes' outcomes, in order (empty without probes).
    pub probes: Vec<ProbeOutcome>,
    /// The server's `/metrics` page just before the first request and just after the last.
    pub metrics_before: Option<String>,
    pub metrics_after: Option<String>,
    /// Why the server refused the run's first request with `400` and an empty body, when it did.
    pub refusal: Option<diagnose::Cause>,
}

/// One request that ran to its own end.
#[derive(Debug)]
pub struct Finished {
    /// Its position in the dataset and the schedule: its request number.
    pub index: usize,
    /// Its round within its row ([`Plan::turns`]; 0 for a single request).
    pub round: usize,
    /// Every event as it arrived, with its stamp and tokens (and the text when kept).
    pub timeline: Timeline,
    /// The timeline as a record under the plan's rules, times since [`Measured::base_raw`].
    pub record: RequestRecord,
    /// Wait for a concurrency slot.
    pub queue_ns: u64,
    /// Request start (scheduled, or slot granted) -> first byte written: timer lag, dispatch
    /// and connecting.
    pub send_lag_ns: u64,
    /// The server's own count of the prompt (`usage.prompt_tokens`) when it reports one, else
    /// the dataset's length.
    pub input_len: u64,
    pub input_len_from_server: bool,
}

/// Runs one benchmark as `plan` says and returns its per-request records.
///
/// This is the engine's one entry point. A front end maps its tool's flags to a [`Plan`]
/// (its own request bodies through [`Plan::bodies`]), calls `run`, and turns the returned
/// [`Measured`] into its tool's figures and files: each [`Finished`] carries the request's
/// [`RequestRecord`] (start, counted event times, output and input tokens, failure) and its
/// whole [`Timeline`] (every event's stamp and tokens, generated text when
/// [`Plan::keep_text`], status and error) for definitions of its own; [`Measured::duration_ns`]
/// is the run's duration. Our own figures are `figures::ours`.
///
/// Progress lines go to `log`, completed requests to `progress`. Cancelling `cancel` (Ctrl-C)
/// stops dispatching, ends the requests in flight, and still returns what was measured.
pub async fn run(
    plan: &Plan,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Measured, RunError> {
    run_loaded(plan, None, clock, cancel, log, progress).await
}

/// [`run`], with the samples already loaded when `loaded` is given: a caller that sends one
/// dataset over many runs (`llmspeed capacity` loads a file once and gives each round the next
/// of its samples) loads it with `samples::load_samples` and passes each run its share, which
/// is sent as it is, in order; [`Plan::dataset`] is then not read.
pub async fn run_loaded(
    plan: &Plan,
    loaded: Option<Loaded>,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Measured, RunError> {
    let client = client_for(plan, clock.clone())?;
    let model = unless_stopped(cancel, READY, resolve_model(plan, &client, log)).await?;
    let request_model = plan
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.clone());
    let Loaded {
        mut samples,
        counting,
        prompt_kind,
        tokenize,
        numpy_words,
        images,
    } = match loaded {
        Some(l) => l,
        None => load_samples(plan, &client, &request_model, cancel, log).await?,
    };
    if counting == TokenCounting::Estimate {
        let _ = writeln!(
            log,
            "note: the server has no /tokenize; prompt lengths are estimated as bytes/4"
        );
    }
    if plan.turns > 1 {
        let lens = datasets::later_turn_lens(&plan.dataset);
        rounds::make_rows(
            &mut samples,
            plan.turns,
            plan.turn_len,
            lens.as_deref(),
            plan.dataset.seed,
        )
        .map_err(RunError::Setup)?;
    }
    let requests = Requests::new(plan, &request_model, samples.len());
    let warm = warm_up(plan, &client, &requests, &samples, cancel, log);
    unless_stopped(cancel, "warming up", warm).await?;
    let window = match images {
        ImagePath::Producer { window, .. } => Some(window),
        _ => None,
    };
    let mut order = Order::new(plan, &samples, numpy_words, &requests, window, log)?;
    // Started after the warm-up (whose requests make their own images on the spot): the
    // first window is made while the connections open and the probes start.
    let mut producer = window.and_then(|w| Producer::start(&samples, &order.chosen, w));
    let open = preconnect(plan, &client, order.chosen.len(), log);
    let preconnected = unless_stopped(cancel, "opening connections (--preconnect)", open).await?;
    announce(plan, &request_model, order.chosen.len(), log, progress);
    // The server's counters just before the first request...
    let metrics_before = metrics_page(&client).await;
    // ...and one-token probes beside the run, outside the concurrency cap.
    let probes = Probes::start(plan, &client, &requests, cancel, log)?;
    let sent = dispatch(
        &client,
        &requests,
        &samples,
        &mut order,
        producer.as_mut(),
        cancel,
        log,
        progress,
    )
    .await?;
    if let Some(p) = producer {
        p.write_back(&mut samples);
    }
    // The probe in flight finishes, then the duration ends.
    let probes = probes.finish().await?;
    let end_raw = clock.raw();
    let wall_s = sent.wall0.elapsed().as_secs_f64();
    let cpu1 = crate::sys::client_cpu().unwrap_or_default();
    let metrics_after = metrics_page(&client).await;
    let refusal = first_refusal(&client, &order.chosen, &sent.done, |i| {
        requests.make(&samples[i], Some(i), &mut Vec::new())
    })
    .await?;
    let (finished, unsent, cut) = finish(plan, &clock, sent.base_raw, &samples, sent.done);
    let client_cpu = cpu1.since(sent.cpu0);
    let client_lag = client_lag_of(&clock, &finished, client_cpu, wall_s);
    let turns = plan.turns.max(1) as usize;
    note_if_nothing_completed(&finished, order.chosen.len(), cancel);
    Ok(Measured {
        model,
        request_model,
        counting,
        prompt_kind,
        tokenize,
        planned: order.chosen.len() * turns,
        unsent: unsent + (order.chosen.len() - sent.dispatched) * turns,
        cut,
        stopped: cancel.is_cancelled(),
        stop_reason: cancel.reason(),
        requests: finished,
        samples,
        timer_lag_ns: sent.timer_lag_ns,
        dispatched_ns: sent.dispatched_ns,
        base_raw: sent.base_raw,
        duration_ns: clock.delta_ns(sent.base_raw, end_raw),
        start_unix_ns: sent.start_unix_ns,
        wall_s,
        client_cpu,
        client_lag,
        preconnected,
        probes,
        metrics_before,
        metrics_after,
        refusal,
    })
}

/// Runs of this process that sent requests and completed none of them (a session may run
/// many): the command exits with an error when any did, after saving what it measured, so a
/// pipeline never passes a benchmark in which every request failed.
static NOTHING_COMPLETED: AtomicUsize = AtomicUsize::new(0);

/// How many runs of this process completed no request ([`NOTHING_COMPLETED`]).
pub fn runs_without_completion() -> usize {
    NOTHING_COMPLETED.load(Ordering::Relaxed)
}

/// Counts the run in [`NOTHING_COMPLETED`] when it planned requests, was not stopped, and none
/// of them succeeded.
fn note_if_nothing_completed(finished: &[Finished], planned: usize, cancel: &Cancel) {
    if planned > 0 && !cancel.is_cancelled() && !finished.iter().any(|f| f.record.is_success()) {
        NOTHING_COMPLETED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The ready check as a set-up step, for [`unless_stopped`].
pub const READY: &str = "waiting for the server to be ready (GET /v1/models)";

/// The client's lag over every finished request (`analysis::client_lag`).
fn client_lag_of(
    clock: &Clock,
    finished: &[Finished],
    cpu: CpuTime,
    wall_s: f64,
) -> crate::analysis::client_lag::ClientLag {
    let mut lag = crate::analysis::client_lag::LagSamples::default();
    for f in finished {
        lag.add(&f.timeline, clock, 0..u64::MAX);
    }
    lag.summary(crate::analysis::client_lag::Cpu::over(
        cpu.total_s(),
        wall_s,
    ))
}

/// The header SGLang's `--gsp-send-routing-key` names a request's shared-prefix group in.
const ROUTING_KEY: &str = "X-SMG-Routing-Key";

/// A run's routing tag, as SGLang makes one each time it builds the dataset: 8 random hex digits
/// and the start's `%Y%m%d%H%M%S` (UTC here, local time in SGLang), e.g.
/// `3fa85f64_20261203153000`. Shards told one `--start-at` are one run on several machines:
/// they make the same tag from that instant and the seed, so a group whose requests fall to
/// several shards still carries one key (`shared_start`: the `--start-at` instant, Unix ns,
/// and the seed). Any other run makes its own.
fn routing_tag(shared_start: Option<(u64, u64)>) -> String {
    let (hex, secs) = match shared_start {
        Some((at_unix_ns, seed)) => (
            StdRng::seed_from_u64(at_unix_ns ^ seed).gen::<u32>(),
            at_unix_ns / 1_000_000_000,
        ),
        None => (
            rand::random::<u32>(),
            crate::sys::unix_secs(SystemTime::now()),
        ),
    };
    let at = crate::sys::UtcDateTime::from_unix(secs);
    format!("{hex:08x}_{}", at.compact().replace('-', ""))
}

/// Builds the stream request of a sample.
struct Requests<'a> {
    plan: &'a Plan,
    model: &'a str,
    /// Benchmark request i names adapter `lora[i]`; warm-ups and probes keep the model.
    lora: Vec<usize>,
    /// This run's routing tag ([`Plan::routing_key`]).
    routing_tag: Option<String>,
}

impl<'a> Requests<'a> {
    fn new(plan: &'a Plan, model: &'a str, n: usize) -> Self {
        let lora = lora::assign(
            plan.lora_modules.len(),
            plan.lora_assignment,
            n,
            plan.dataset.seed,
        );
        let shared_start = plan
            .shard
            .and(plan.start_at_unix_ns)
            .map(|at| (at, plan.dataset.seed));
        let routing_tag = plan.routing_key.then(|| routing_tag(shared_start));
        Requests {
            plan,
            model,
            lora,
            routing_tag,
        }
    }

    /// `index` is the sample's position, which names the request; warm-ups are not benchmark
    /// requests and carry no id.
    fn make(
        &self,
        s: &Sample,
        index: Option<usize>,
        ids: &mut Vec<u32>,
    ) -> Result<StreamRequest, RunError> {
        let model = self.model_for(index);
        // A sample whose images are planned (the producer's run) and sent outside the
        // dispatcher (warm-ups, a rebuild after the run): made here, the same bytes.
        let made = crate::bench::engine::producer::made_now(s)
            .transpose()
            .map_err(RunError::Setup)?;
        let s = made.as_ref().unwrap_or(s);
        // A row's first round: its first turn alone; its answer is the next round's history.
        let (body, row) = match &s.prompt {
            PromptSource::Turns(t) => (
                self.plan
                    .bodies
                    .round_body(s, model, &rounds::messages(t, &[])),
                true,
            ),
            _ => (self.plan.bodies.request_body(s, model, ids), false),
        };
        Ok(StreamRequest {
            path: self.plan.endpoint.clone(),
            body: Bytes::from(body.map_err(RunError::Setup)?),
            dialect: self.plan.dialect,
            expected_events: s.output_len as usize + 8,
            keep_text: Some(self.plan.keep_text || row),
            request_id: index.map(|i| match row {
                true => self.plan.request_ids.turn(i, 0),
                false => self.plan.request_ids.request(i),
            }),
            // Warm-ups carry no routing key, as in SGLang.
            header: match (&self.routing_tag, index.and(s.group)) {
                (Some(tag), Some(g)) => Some((ROUTING_KEY, format!("{tag}_{g}"))),
                _ => None,
            },
        })
    }

    /// The model request `index` names: its adapter, else the run's model.
    fn model_for(&self, index: Option<usize>) -> &str {
        match index.and_then(|i| self.lora.get(i)) {
            Some(&k) => self.plan.lora_modules[k].as_str(),
            None => self.model,
        }
    }

    /// What sends the later rounds of a row whose first request is `first`; `None` for a
    /// sample that is one request.
    fn row(&self, s: &Sample, index: Option<usize>, first: &StreamRequest) -> Option<Row> {
        matches!(s.prompt, PromptSource::Turns(_)).then(|| Row {
            bodies: self.plan.bodies.clone(),
            model: self.model_for(index).to_string(),
            first: first.clone(),
            ids: index.map(|i| (self.plan.request_ids.clone(), i)),
            sample: s.clone(),
        })
    }
}

/// The plan's initial test request (where it has one), then the warm-up requests, at most the
/// concurrency cap at once: their failures are logged, never counted (the run fails only when
/// the plan says every one must not).
async fn warm_up(
    plan: &Plan,
    client: &Client,
    requests: &Requests<'_>,
    samples: &[Sample],
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let rules = &plan.warmup;
    if let Some(test) = &rules.initial_test {
        initial_test(test, client, requests, samples, cancel, log).await?;
    }
    if plan.num_warmups > 0 {
        let _ = writeln!(log, "warming up with {} request(s)", plan.num_warmups);
        let slots = Arc::new(Semaphore::new(match rules.all_at_once {
            true => plan.num_warmups,
            false => plan.max_concurrency.unwrap_or(plan.num_warmups),
        }));
        let mut ids = Vec::new();
        let mut set = JoinSet::new();
        for i in 0..plan.num_warmups {
            let k = if rules.repeat_first {
                0
            } else {
                i % samples.len()
            };
            let mut s = samples[k].clone();
            if let Some(m) = rules.max_output {
                s.output_len = s.output_len.min(m);
            }
            if let (true, PromptSource::Chat { extra, .. }) =
                (rules.without_request_fields, &mut s.prompt)
            {
                *extra = Arc::default();
            }
            let req = requests.make(&s, None, &mut ids)?;
            let row = requests.row(&s, None, &req);
            let (c, slot, cancel) = (client.clone(), Slot::ask(&slots), cancel.clone());
            set.spawn(async move {
                let _permit = slot.taken().await;
                let start = c.clock().raw();
                let first = c.stream(&req, start, &mut NoopObserver, &cancel).await;
                let later = rounds::after(row.as_ref(), &c, &first, &cancel).await;
                std::iter::once(first).chain(later).collect::<Vec<_>>()
            });
        }
        let (mut ok, mut first_error) = (false, None);
        while let Some(r) = set.join_next().await {
            for t in r.into_iter().flatten() {
                match &t.outcome {
                    Ok(()) => ok = true,
                    Err(e) => {
                        let _ = writeln!(log, "warm-up request failed: {e}");
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
        }
        if let (Some(words), false) = (rules.must_succeed, ok) {
            return Err(RunError::Setup(format!(
                "{words}{}",
                first_error.unwrap_or_default()
            )));
        }
    }
    if let Some(path) = &rules.then_post {
        match client.post_json(path, b"").await {
            Ok(r) if r.is_success() => {}
            Ok(r) => {
                let _ = writeln!(log, "note: POST {path} answered HTTP {}", r.status);
            }
            Err(e) => {
                let _ = writeln!(log, "note: POST {path} failed: {e}");
            }
        }
    }
    if !rules.settle.is_zero() {
        tokio::time::sleep(rules.settle).await;
    }
    Ok(())
}

/// The plan's ready check by a generation request: the first sample, sent until it succeeds
/// or `within` has passed (no new try once it has), `retry` between tries. A failed try is
/// logged with the server's message.
async fn initial_test(
    test: &InitialTest,
    client: &Client,
    requests: &Requests<'_>,
    samples: &[Sample],
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let deadline = Instant::now() + test.within;
    let req = requests.make(&samples[0], None, &mut Vec::new())?;
    let mut last_error = String::new();
    while Instant::now() < deadline && !cancel.is_cancelled() {
        let start = client.clock().raw();
        let t = client.stream(&req, start, &mut NoopObserver, cancel).await;
        match &t.outcome {
            Ok(()) => {
                let _ = writeln!(log, "{}", test.passed);
                return first_images(test, client, requests, samples, cancel).await;
            }
            // The server is up and refused this body: a retry gets the same answer (vLLM's
            // client retries it until its timeout, 10 minutes by default).
            Err(e) if refused(e) => {
                return Err(RunError::Setup(format!("{}{e}", test.failed)));
            }
            Err(e) => {
                last_error = e.to_string();
                let _ = writeln!(log, "the server is not ready yet: {last_error}");
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(test.retry.min(left)).await;
    }
    Err(RunError::Setup(format!("{}{last_error}", test.failed)))
}

/// An answer that refuses the request as sent (malformed, too large, a content type or part the
/// model does not take), which no retry of the same body changes.
fn refused(e: &crate::timeline::RequestError) -> bool {
    matches!(e.status, Some(400 | 413 | 415 | 422))
}

/// After an initial test whose sample carried no image: the first sample that carries images,
/// sent once, so a server that refuses images (a text-only model) stops the run with its
/// message here instead of failing every image request of the run. Nothing is sent when the
/// first sample had images (the initial test sent them) or no sample has any.
async fn first_images(
    test: &InitialTest,
    client: &Client,
    requests: &Requests<'_>,
    samples: &[Sample],
    cancel: &Cancel,
) -> Result<(), RunError> {
    let has_images = |s: &Sample| matches!(&s.prompt, PromptSource::Multimodal { images, .. } if !images.is_empty());
    if samples.first().is_none_or(has_images) {
        return Ok(());
    }
    let Some(i) = samples.iter().position(has_images) else {
        return Ok(());
    };
    let req = requests.make(&samples[i], None, &mut Vec::new())?;
    let t = client
        .stream(&req, client.clock().raw(), &mut NoopObserver, cancel)
        .await;
    match &t.outcome {
        Err(e) if refused(e) => Err(RunError::Setup(format!(
            "{}{e} (sample {i}, the first that carries images; the initial test's sample had none)",
            test.failed
        ))),
        _ => Ok(()),
    }
}

/// Which requests this run sends, when, and their bodies when they fit in memory.
struct Order {
    /// Send offset of every sample (the whole run's schedule).
    offsets: Vec<u64>,
    /// The samples this run sends, ascending: all of them, or a shard's share.
    chosen: Vec<usize>,
    /// The chosen requests built ahead, or empty when they are built just before each send.
    prebuilt: Vec<StreamRequest>,
}

impl Order {
    /// `numpy_words`: what the dataset drew from numpy's legacy generator before the schedule
    /// (SGLang draws its send times from the same one).
    fn new(
        plan: &Plan,
        samples: &[Sample],
        numpy_words: u64,
        requests: &Requests<'_>,
        producer_window: Option<usize>,
        log: &mut (dyn Write + Send),
    ) -> Result<Order, RunError> {
        let offsets = if plan.self_timed {
            self_timed_offsets(plan, samples.len())?
        } else {
            plan.schedule
                .after_dataset(numpy_words)
                .offsets_ns(samples.len())
                .map_err(|e| RunError::Setup(e.to_string()))?
        };
        // A shard: the whole dataset and schedule were built above, so the requests kept here
        // carry their single-run index (request id) and send offset.
        let chosen: Vec<usize> = match plan.shard {
            Some(sh) => sh.indices(samples.len()),
            None => (0..samples.len()).collect(),
        };
        let total_tokens: u64 = chosen.iter().map(|&i| samples[i].prompt_len).sum();
        let mut prebuilt = Vec::new();
        // Under the image producer, bodies are built as their images are made: never all.
        if total_tokens <= PREBUILD_MAX_TOKENS && producer_window.is_none() {
            let mut ids = Vec::new();
            for &i in &chosen {
                prebuilt.push(requests.make(&samples[i], Some(i), &mut ids)?);
            }
        }
        if let Some(sh) = plan.shard {
            let _ = writeln!(
                log,
                "shard {sh}: {} of the run's {} requests",
                chosen.len(),
                samples.len()
            );
            if plan.routing_key && plan.start_at_unix_ns.is_none() {
                let _ = writeln!(
                    log,
                    "note: without --start-at each shard makes its own routing tag, so a group split across shards carries one key per shard"
                );
            }
        }
        Ok(Order {
            offsets,
            chosen,
            prebuilt,
        })
    }
}

/// A trace dataset's own send offsets (the same rows the dataset was built from, `n` samples:
/// each row's rounds).
fn self_timed_offsets(plan: &Plan, n: usize) -> Result<Vec<u64>, RunError> {
    let path = plan
        .dataset
        .path
        .as_deref()
        .ok_or(datasets::DatasetError::NoPath("timed_trace"))?;
    let rounds = plan.dataset.trace.rounds.max(1);
    let rows = crate::workload::trace::read(path, &plan.dataset.trace, n / rounds as usize)?;
    if rows.len() * rounds as usize != n {
        return Err(RunError::Setup(format!(
            "the trace changed while it was read: {} rows of {rounds} rounds, then {n} requests",
            rows.len()
        )));
    }
    Ok(crate::workload::trace::offsets_ns(&rows, rounds))
}

/// Opens the connections the run will hold at once before its start, when the plan asks.
async fn preconnect(
    plan: &Plan,
    client: &Client,
    requests: usize,
    log: &mut (dyn Write + Send),
) -> Result<Option<usize>, RunError> {
    if !plan.preconnect {
        return Ok(None);
    }
    let n = requests
        .min(plan.max_concurrency.unwrap_or(usize::MAX))
        .min(client.config().max_idle);
    let idle = client
        .preconnect(n)
        .await
        .map_err(|e| RunError::Setup(format!("--preconnect: {e}")))?;
    let _ = writeln!(
        log,
        "--preconnect: {idle} connections open before the start"
    );
    Ok(Some(idle))
}

/// The run's first log line and its size for the progress display.
fn announce(
    plan: &Plan,
    model: &str,
    requests: usize,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) {
    let rate = plan.schedule.rate;
    let _ = writeln!(
        log,
        "sending {requests} requests to {}{} (model {model}, rate {}, max concurrency {})",
        plan.base_url,
        plan.endpoint,
        // Python's `str(float)`, as the tools print it: `inf`, `10.0`.
        if rate.is_infinite() {
            "inf".to_string()
        } else if rate.fract() == 0.0 && rate.abs() < 1e16 {
            format!("{rate:.1}")
        } else {
            format!("{rate}")
        },
        plan.max_concurrency
            .map(|n| n.to_string())
            .unwrap_or_else(|| "none".into())
    );
    progress.event(&Event::Start {
        total: requests as u64,
        done: 0,
        estimate_s: 0.0,
    });
    progress.event(&Event::Phase {
        step: plan.progress_step,
        phase: Phase::Requests,
    });
}

/// The probe loop beside the run, when the plan asks for probes.
struct Probes {
    task: Option<tokio::task::JoinHandle<Vec<ProbeOutcome>>>,
    stop: Cancel,
}

impl Probes {
    fn start(
        plan: &Plan,
        client: &Client,
        requests: &Requests<'_>,
        cancel: &Cancel,
        log: &mut (dyn Write + Send),
    ) -> Result<Probes, RunError> {
        let stop = Cancel::new();
        if plan.probe_request_rate <= 0.0 {
            return Ok(Probes { task: None, stop });
        }
        let _ = writeln!(log, "probe request rate: {} req/s", plan.probe_request_rate);
        let hi = Sample {
            group: None,
            prompt: PromptSource::Text("Hi".into()),
            prompt_len: 1,
            output_len: 1,
        };
        let mut req = requests.make(&hi, None, &mut Vec::new())?;
        req.expected_events = 9;
        req.keep_text = Some(false);
        let opts = plan.record_options(client.clock().raw());
        let task = tokio::spawn(run_probes(
            client.clone(),
            req,
            plan.probe_request_rate,
            opts,
            stop.clone(),
            cancel.clone(),
        ));
        Ok(Probes {
            task: Some(task),
            stop,
        })
    }

    /// Stops the loop; the probe in flight finishes first.
    async fn finish(self) -> Result<Vec<ProbeOutcome>, RunError> {
        self.stop.cancel();
        match self.task {
            Some(h) => h
                .await
                .map_err(|e| RunError::Setup(format!("the probe task failed: {e}"))),
            None => Ok(Vec::new()),
        }
    }
}

/// What one request task hands back.
struct Done {
    index: usize,
    timeline: Timeline,
    /// A row's later rounds, in order (empty for a single request).
    later: Vec<Timeline>,
    queue_ns: u64,
}

/// What the dispatch loop leaves.
struct Sent {
    /// By sample index; `None` for a sample not sent.
    done: Vec<Option<Done>>,
    dispatched: usize,
    timer_lag_ns: Vec<u64>,
    dispatched_ns: Vec<(usize, u64)>,
    base_raw: u64,
    start_unix_ns: u64,
    wall0: Instant,
    cpu0: CpuTime,
}

/// Sends every chosen request at its offset from the start (taking the prebuilt ones out of
/// `order`, or each one's images from the `producer`) and waits for them all. Measuring starts
/// here: the Python tools' "just before the first dispatch".
#[allow(clippy::too_many_arguments)]
async fn dispatch(
    client: &Client,
    requests: &Requests<'_>,
    samples: &[Sample],
    order: &mut Order,
    mut producer: Option<&mut Producer>,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Sent, RunError> {
    let plan = requests.plan;
    let clock = client.clock().clone();
    let slots = plan.max_concurrency.map(|n| Arc::new(Semaphore::new(n)));
    let mut timer_lag_ns = Vec::with_capacity(order.chosen.len());
    let mut dispatched_ns = Vec::with_capacity(order.chosen.len());
    if let Some(at) = plan.start_at_unix_ns {
        wait_for_wall_clock(at, log).await;
    }
    let cpu0 = crate::sys::client_cpu().unwrap_or_default();
    let wall0 = Instant::now();
    let base_raw = clock.raw();
    let start_unix_ns = unix_ns(SystemTime::now());
    let base_instant = tokio::time::Instant::now();
    let mut prebuilt = std::mem::take(&mut order.prebuilt).into_iter();
    let mut ids = Vec::new();
    let mut fl = InFlight::new(samples.len());
    for (sent, &i) in order.chosen.iter().enumerate() {
        let off = order.offsets[i];
        let scheduled = clock.add_ns(base_raw, off);
        let at = At {
            clock: &clock,
            base: base_instant,
            off,
            scheduled,
        };
        // Under the producer, a request whose images came after its send time goes at once,
        // with the slot it asked for at that time.
        let mut late = None;
        let req = match (prebuilt.next(), producer.as_deref_mut()) {
            (Some(r), _) => Some(r),
            (None, None) => Some(requests.make(&samples[i], Some(i), &mut ids)?),
            (None, Some(p)) => {
                let queue = slots.as_ref();
                match produced(p, samples, i, &at, queue, cancel, &mut fl, progress).await? {
                    Produced::InTime(s) => Some(requests.make(&s, Some(i), &mut ids)?),
                    Produced::Late(s, slot, granted) => {
                        late = Some((slot, granted));
                        Some(requests.make(&s, Some(i), &mut ids)?)
                    }
                    Produced::Stopped => None,
                }
            }
        };
        if off > 0 && late.is_none() {
            // A stop must not wait for the next send time (minutes apart at a low rate), and
            // meanwhile the requests that end are taken in and the live display hears the
            // client's headroom; the send time comes first when both are ready.
            let wait = wait_until(&clock, base_instant, off, scheduled);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    biased;
                    _ = &mut wait => break,
                    _ = cancel.cancelled() => break,
                    r = fl.step(progress) => r?,
                }
            }
        }
        let (Some(req), false) = (req, cancel.is_cancelled()) else {
            let _ = writeln!(
                log,
                "interrupted: {sent} of {} requests were dispatched",
                order.chosen.len()
            );
            break;
        };
        let row = requests.row(&samples[i], Some(i), &req);
        let now = clock.raw();
        timer_lag_ns.push(clock.delta_ns(scheduled, now));
        dispatched_ns.push((i, clock.delta_ns(base_raw, now)));
        let (slot, granted) = match late {
            Some(l) => l,
            None => (slots.as_ref().map(Slot::ask), None),
        };
        fl.set.spawn(one_request(
            client.clone(),
            (slot, granted),
            cancel.clone(),
            (req, row),
            i,
            scheduled,
        ));
    }
    let dispatched = dispatched_ns.len();
    while !fl.set.is_empty() {
        fl.step(progress).await?;
    }
    Ok(Sent {
        done: fl.done,
        dispatched,
        timer_lag_ns,
        dispatched_ns,
        base_raw,
        start_unix_ns,
        wall0,
        cpu0,
    })
}

/// When a request is due: its offset from the start, on the clock and on tokio's timer.
struct At<'a> {
    clock: &'a Clock,
    base: tokio::time::Instant,
    off: u64,
    scheduled: u64,
}

/// The requests in flight, and what the dispatcher does while it waits: take in those that
/// end, and tell the live display the client's headroom once a second.
struct InFlight {
    set: JoinSet<Done>,
    room: Room,
    /// By sample index; `None` for a sample not sent.
    done: Vec<Option<Done>>,
    tick: tokio::time::Interval,
}

impl InFlight {
    fn new(samples: usize) -> InFlight {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + HEADROOM_EVERY, HEADROOM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        InFlight {
            set: JoinSet::new(),
            room: Room::start(),
            done: (0..samples).map(|_| None).collect(),
            tick,
        }
    }

    /// One request taken in, or one headroom report. Cancel-safe.
    async fn step(&mut self, progress: &mut (dyn Progress + Send)) -> Result<(), RunError> {
        tokio::select! {
            Some(r) = self.set.join_next(), if !self.set.is_empty() => {
                take_in(r, &mut self.room, &mut self.done, progress)
            }
            _ = self.tick.tick() => {
                progress.event(&Event::Headroom(self.room.take()));
                Ok(())
            }
        }
    }
}

/// A request's images from the producer.
enum Produced {
    /// Made by its send time: the request goes as any other.
    InTime(Sample),
    /// Made after it: its slot (under a cap) asked for at its send time, and the moment that
    /// slot came free while it waited (its intended start), if it did.
    Late(Sample, Option<Slot>, Option<u64>),
    /// The run was stopped meanwhile.
    Stopped,
}

/// Request `i`'s images from the producer: at once where they are made, else waited for,
/// taking in requests meanwhile. Past its send time the request asks for its slot as it would
/// have then, and the moment the slot comes free is kept: the wait from then (or from the send
/// time, without a cap) is the client's, in the request's dispatch lag.
#[allow(clippy::too_many_arguments)]
async fn produced(
    p: &mut Producer,
    samples: &[Sample],
    i: usize,
    at: &At<'_>,
    slots: Option<&Arc<Semaphore>>,
    cancel: &Cancel,
    fl: &mut InFlight,
    progress: &mut (dyn Progress + Send),
) -> Result<Produced, RunError> {
    if let Some(made) = p.try_take(samples, i) {
        return made.map(Produced::InTime).map_err(RunError::Setup);
    }
    let take = p.take(samples, i);
    tokio::pin!(take);
    let due = wait_until(at.clock, at.base, at.off, at.scheduled);
    tokio::pin!(due);
    let (mut late, mut slot, mut granted) = (false, None::<Slot>, None);
    loop {
        if late && slot.is_none() {
            slot = slots.map(Slot::ask);
            if slot.as_ref().is_some_and(Slot::is_settled) {
                granted = Some(at.clock.raw());
            }
        }
        let waiting = slot.as_ref().is_some_and(|s| !s.is_settled());
        tokio::select! {
            biased;
            made = &mut take => {
                let s = made.map_err(RunError::Setup)?;
                return Ok(match late {
                    false => Produced::InTime(s),
                    true => Produced::Late(s, slot, granted),
                });
            }
            _ = cancel.cancelled() => return Ok(Produced::Stopped),
            _ = &mut due, if !late => late = true,
            _ = slot_granted(&mut slot), if waiting => granted = Some(at.clock.raw()),
            r = fl.step(progress) => r?,
        }
    }
}

/// Waits until `slot`'s permit is granted (never, without a slot).
async fn slot_granted(slot: &mut Option<Slot>) {
    match slot {
        Some(s) => s.granted().await,
        None => std::future::pending().await,
    }
}

/// A request that ended: its reads counted into the headroom, its result kept at its index.
fn take_in(
    r: Result<Done, tokio::task::JoinError>,
    room: &mut Room,
    done: &mut [Option<Done>],
    progress: &mut (dyn Progress + Send),
) -> Result<(), RunError> {
    let d = r.map_err(|e| RunError::Setup(format!("a request task failed: {e}")))?;
    room.note_reads(&d.timeline);
    for t in &d.later {
        room.note_reads(t);
    }
    let i = d.index;
    done[i] = Some(d);
    progress.event(&Event::StepDone { estimate_s: 0.0 });
    Ok(())
}

/// How often the live display hears the client's headroom while requests finish.
const HEADROOM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The client's headroom since the last report: the read lags of the requests that finished
/// (summed once per request, when it ends: never per token; the read lag of
/// `analysis::client_lag`, as the matrix's live display sums it) and the client's CPU time.
struct Room {
    reads: u64,
    sum_ns: u64,
    max_ns: u64,
    cpu_s: Option<f64>,
    at: Instant,
    cores: u64,
}

impl Room {
    fn start() -> Room {
        Room {
            reads: 0,
            sum_ns: 0,
            max_ns: 0,
            cpu_s: crate::sys::client_cpu().map(CpuTime::total_s),
            at: Instant::now(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        }
    }

    fn note_reads(&mut self, tl: &Timeline) {
        for lag in tl.reads().filter_map(|r| r.lag_ns) {
            self.reads += 1;
            self.sum_ns += u64::from(lag);
            self.max_ns = self.max_ns.max(u64::from(lag));
        }
    }

    /// The headroom since the last call, starting afresh.
    fn take(&mut self) -> crate::progress::Headroom {
        let cpu = crate::sys::client_cpu().map(CpuTime::total_s);
        let now = Instant::now();
        let used = cpu.zip(self.cpu_s).map(|(b, a)| b - a);
        let h = crate::progress::Headroom::of(
            self.reads,
            self.sum_ns,
            self.max_ns,
            used,
            now.duration_since(self.at).as_secs_f64(),
            self.cores,
        );
        (self.reads, self.sum_ns, self.max_ns) = (0, 0, 0);
        (self.cpu_s, self.at) = (cpu, now);
        h
    }
}

/// One request's task: its slot (asked for by the dispatcher, in sample order), then its stream
/// (a row's rounds, one after another, in the one slot).
async fn one_request(
    c: Client,
    (slot, granted): (Option<Slot>, Option<u64>),
    cancel: Cancel,
    (req, row): (StreamRequest, Option<Row>),
    index: usize,
    scheduled: u64,
) -> Done {
    let limited = slot.is_some();
    let _permit = match slot {
        Some(s) => s.taken().await,
        None => None,
    };
    let clock = c.clock().clone();
    // With a concurrency limit, the request's own clock starts when it gets a slot (or got
    // it, while the dispatcher waited for its images: `granted`); the wait is queue time,
    // reported separately (the Python tools' split).
    let (intended, queue_ns) = if limited {
        let now = granted.unwrap_or_else(|| clock.raw());
        (now.max(scheduled), clock.delta_ns(scheduled, now))
    } else {
        (scheduled, 0)
    };
    let timeline = c.stream(&req, intended, &mut NoopObserver, &cancel).await;
    let later = rounds::after(row.as_ref(), &c, &timeline, &cancel).await;
    Done {
        index,
        timeline,
        later,
        queue_ns,
    }
}

/// A request's start (scheduled, or slot granted) -> its first byte written: its lag behind
/// its own start (the slot wait is queue time, not lag).
fn send_lag(clock: &Clock, t: &Timeline) -> u64 {
    t.send_start
        .map(|s| clock.delta_ns(t.intended_start, s))
        .unwrap_or(0)
}

/// A server that refuses the run's first request with `400` and an empty body says nothing
/// about why: the checks of `server::diagnose` find the cause.
async fn first_refusal(
    client: &Client,
    chosen: &[usize],
    done: &[Option<Done>],
    rebuild: impl FnOnce(usize) -> Result<StreamRequest, RunError>,
) -> Result<Option<diagnose::Cause>, RunError> {
    let Some(&first) = chosen.first() else {
        return Ok(None);
    };
    match done.get(first).and_then(Option::as_ref) {
        Some(d) if diagnose::is_empty_400(&d.timeline) => {
            let req = rebuild(first)?;
            Ok(Some(diagnose::empty_400(client, &req).await))
        }
        _ => Ok(None),
    }
}

/// How a stop left a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopFate {
    /// It ran to its own end (success or the server's failure).
    Ran,
    /// Cancelled before its first byte was written: never a request.
    Unsent,
    /// Sent, then cut short by the stop: not the server's failure.
    Cut,
}

/// Only our own cancel (the stop) ends a request as `cancelled`.
pub fn stop_fate(t: &Timeline) -> StopFate {
    match &t.outcome {
        Err(e) if e.kind == ErrorKind::Cancelled => match t.send_start {
            None => StopFate::Unsent,
            Some(_) => StopFate::Cut,
        },
        _ => StopFate::Ran,
    }
}

/// The requests that ran, as records, in sample order; and how many a stop left unsent or cut
/// (counted apart, never as completed or failed).
fn finish(
    plan: &Plan,
    clock: &Clock,
    base_raw: u64,
    samples: &[Sample],
    done: Vec<Option<Done>>,
) -> (Vec<Finished>, usize, usize) {
    let opts = plan.record_options(base_raw);
    let mut out = Vec::with_capacity(samples.len());
    let (mut unsent, mut cut) = (0usize, 0usize);
    for (s, d) in samples.iter().zip(done) {
        let Some(d) = d else { continue };
        // A row's rounds that a stop left unsent: not in `later`.
        let rounds = match &s.prompt {
            PromptSource::Turns(t) => t.len(),
            _ => 1,
        };
        unsent += rounds.saturating_sub(1 + d.later.len());
        let (index, queue_ns) = (d.index, d.queue_ns);
        for (round, timeline) in std::iter::once(d.timeline).chain(d.later).enumerate() {
            match stop_fate(&timeline) {
                StopFate::Ran => {}
                StopFate::Unsent => {
                    unsent += 1;
                    continue;
                }
                StopFate::Cut => {
                    cut += 1;
                    continue;
                }
            }
            // As vLLM does now: the server's own count of what it received
            // (`usage.prompt_tokens`) when it reports one, else the dataset's length (a row's
            // first turn's, as SGLang seeds every round).
            let server_len = timeline.usage.map(|u| u.prompt_tokens).filter(|&n| n > 0);
            let input_len = server_len.unwrap_or(s.prompt_len);
            // A row's later rounds wait for no slot: the row holds its own.
            let queue_ns = if round == 0 { queue_ns } else { 0 };
            let record = RequestRecord::from_timeline(&timeline, clock, &opts, input_len, queue_ns);
            out.push(Finished {
                index,
                round,
                send_lag_ns: send_lag(clock, &timeline),
                timeline,
                record,
                queue_ns,
                input_len,
                input_len_from_server: server_len.is_some(),
            });
        }
    }
    (out, unsent, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_leaves_requests_unsent_or_cut_and_nothing_else_changes() {
        use crate::timeline::RequestError;
        let tl = |sent: bool, kind: Option<ErrorKind>| {
            let mut t = Timeline::new(0, 1, false);
            t.send_start = sent.then_some(5);
            t.outcome = match kind {
                Some(k) => Err(RequestError::new(k, "x")),
                None => Ok(()),
            };
            t
        };
        assert_eq!(
            stop_fate(&tl(false, Some(ErrorKind::Cancelled))),
            StopFate::Unsent
        );
        assert_eq!(
            stop_fate(&tl(true, Some(ErrorKind::Cancelled))),
            StopFate::Cut
        );
        assert_eq!(stop_fate(&tl(true, None)), StopFate::Ran);
        // The server's own failures stay failures, sent or not (a refused connection).
        assert_eq!(
            stop_fate(&tl(false, Some(ErrorKind::Connect))),
            StopFate::Ran
        );
        assert_eq!(
            stop_fate(&tl(true, Some(ErrorKind::HttpStatus))),
            StopFate::Ran
        );
    }

    #[test]
    fn shards_of_one_start_share_a_routing_tag_and_other_runs_do_not() {
        // 2026-12-03 15:30:00 UTC.
        let at = 1_796_311_800_000_000_000;
        let tag = routing_tag(Some((at, 42)));
        assert_eq!(tag, routing_tag(Some((at, 42))));
        let (hex, when) = tag.split_once('_').unwrap();
        assert!(
            hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{tag}"
        );
        assert_eq!(when, "20261203153000");
        assert_ne!(tag, routing_tag(Some((at + 1_000_000_000, 42))));
        assert_ne!(tag, routing_tag(Some((at, 43))));
        assert_ne!(routing_tag(None), routing_tag(None));
    }
}
