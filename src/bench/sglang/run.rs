//! Runs `bench sglang` as named steps: set up (client, model, dataset, bodies), warm up, flush,
//! send on the schedule, read the server's info, then read every request SGLang's way, count,
//! print and append.
//!
//! Wiring: the steps that are not SGLang's (client, ready check, datasets, schedule offsets,
//! the stream itself) are today's `compat::run` functions, used as the engine until the shared
//! `bench::engine` lands; they are all called from this one file so the lead can re-point
//! them. Nothing here runs per token: each request is one task around `Client::stream`.

use super::args::{LoraDistribution, SglangConfig};
use super::metrics::{self, Reader, RequestInput, RequestOutput};
use super::{body, console, record};
use crate::clock::Clock;
use crate::compat::run::{self as engine, RunError, TokenCounting};
use crate::net::{Cancel, Client, Dialect, NoopObserver, StreamRequest};
use crate::progress::{Event, Phase, Progress};
use crate::server::{collect, detect, Overrides, TokenizeDialect};
use crate::timeline::Timeline;
use crate::workload::datasets::Sample;
use crate::workload::tokenizer::LocalTokenizer;
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub outputs: Vec<RequestOutput>,
    pub metrics: metrics::Metrics,
    pub duration_s: f64,
    /// The file the record was appended to.
    pub path: PathBuf,
    /// The per-request timelines, in dataset order (for tests and our own figures).
    pub timelines: Vec<Timeline>,
    /// The benchmark start, as a raw stamp of the run's clock.
    pub base_raw: u64,
}

/// Everything set up before the clock starts.
struct Prepared {
    client: Client,
    model: String,
    samples: Vec<Sample>,
    requests: Vec<StreamRequest>,
    counter: Counter,
    offsets: Vec<u64>,
}

/// How generated texts are counted again (SGLang: the client's tokenizer).
enum Counter {
    Local(LocalTokenizer),
    Server(TokenizeDialect),
    /// Nothing to count with: the server's own counts stand in.
    None,
}

impl Counter {
    fn name(&self) -> &'static str {
        match self {
            Counter::Local(_) => "local_tokenizer",
            Counter::Server(_) => "server_tokenize",
            Counter::None => "server_output_counts",
        }
    }
}

/// Runs the benchmark, prints SGLang's block to `out` and appends its record.
pub async fn run(
    cfg: &SglangConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    out: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Outcome, RunError> {
    let p = prepare(cfg, clock.clone(), log).await?;
    warm_up(cfg, &p, cancel, log).await?;
    if cfg.flush_cache {
        flush_cache(&p.client, log).await;
    }
    // SGLang pauses a second between the warm-up and the run, flush or not.
    tokio::time::sleep(Duration::from_secs(1)).await;
    progress.event(&Event::Start {
        total: p.requests.len() as u64,
        done: 0,
        estimate_s: 0.0,
    });
    progress.event(&Event::Phase {
        step: "bench sglang",
        phase: Phase::Requests,
    });
    let base_raw = clock.raw();
    let timelines = send_all(cfg, &p, &clock, base_raw, cancel, progress).await?;
    // SGLang asks for the accept length before it stops the clock (sglang backends only).
    let accept_length = if cfg.backend.contains("sglang") {
        accept_length(server_info(&p.client).await.as_ref())
    } else {
        None
    };
    let duration_s = clock.delta_ns(base_raw, clock.raw()) as f64 / 1e9;
    let info = server_info(&p.client).await;
    let outputs: Vec<RequestOutput> = p
        .samples
        .iter()
        .zip(&timelines)
        .map(|(s, t)| {
            let input = RequestInput::from_timeline(
                cfg.reader,
                t,
                &clock,
                base_raw,
                s.prompt_len,
                s.output_len as u64,
            );
            metrics::read(cfg.reader, &input)
        })
        .collect();
    let texts: Vec<String> = timelines
        .iter()
        .map(|t| t.content_text.clone().unwrap_or_default())
        .collect();
    let retok = retokenize(&p, &outputs, &texts, log).await;
    let m = metrics::compute(&outputs, &retok, duration_s);
    let rate = (!cfg.rate_is_trace).then_some(cfg.request_rate);
    console::write(
        out,
        &console::Header {
            backend: &cfg.backend,
            request_rate: rate,
            max_concurrency: cfg.max_concurrency,
            duration_s,
            accept_length,
        },
        &m,
    )
    .map_err(|e| RunError::Setup(format!("cannot write the result: {e}")))?;
    let llmspeed = ours(&p, &timelines, &outputs);
    let path = save(
        cfg,
        rate,
        info,
        duration_s,
        &m,
        accept_length,
        &outputs,
        &texts,
        llmspeed,
    )?;
    Ok(Outcome {
        outputs,
        metrics: m,
        duration_s,
        path,
        timelines,
        base_raw,
    })
}

/// Client, model, dataset (with SGLang's random lengths), bodies, the retokenizer and the
/// schedule.
async fn prepare(
    cfg: &SglangConfig,
    clock: Clock,
    log: &mut (dyn Write + Send),
) -> Result<Prepared, RunError> {
    let mut serve = cfg.serve.clone();
    serve.save_detailed = true;
    let client = engine::client_for(&serve, clock)?;
    let model = engine::resolve_model(&serve, &client, log).await?;
    let request_model = serve
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.clone());
    let (samples, counting, _) = engine::load_samples(&serve, &client, &request_model, log).await?;
    let lora = assign_lora(cfg, samples.len());
    let path = serve.endpoint.clone();
    let dialect = match cfg.reader {
        Reader::Native => Dialect::Sglang,
        Reader::Completions | Reader::Chat => Dialect::OpenAi,
    };
    let requests = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let b = body::body(cfg.reader, &request_model, s, lora[i].as_deref(), &cfg.body)
                .map_err(RunError::Setup)?;
            Ok(StreamRequest {
                path: path.clone(),
                body: Bytes::from(b),
                dialect,
                expected_events: s.output_len as usize + 8,
                // SGLang keeps every generated text (it counts them again).
                keep_text: Some(true),
                request_id: Some(serve.request_ids.request(i)),
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let counter = counter(&serve, &client, &request_model, counting).await?;
    let offsets = if serve.self_timed {
        engine::self_timed_offsets(&serve, samples.len())?
    } else {
        serve
            .schedule
            .offsets_ns(samples.len())
            .map_err(|e| RunError::Setup(e.to_string()))?
    };
    Ok(Prepared {
        client,
        model: request_model,
        samples,
        requests,
        counter,
        offsets,
    })
}

/// The adapter each request names: SGLang's three distributions over `--lora-name`.
fn assign_lora(cfg: &SglangConfig, n: usize) -> Vec<Option<String>> {
    if cfg.lora_names.is_empty() {
        return vec![None; n];
    }
    let names = &cfg.lora_names;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let weights: Vec<f64> = match cfg.lora_distribution {
        LoraDistribution::Skewed(alpha) => {
            (0..names.len()).map(|i| alpha.powi(-(i as i32))).collect()
        }
        _ => Vec::new(),
    };
    let total: f64 = weights.iter().sum();
    (0..n)
        .map(|i| {
            let k = match cfg.lora_distribution {
                LoraDistribution::Uniform => rng.gen_range(0..names.len()),
                LoraDistribution::Distinct => i % names.len(),
                LoraDistribution::Skewed(_) => {
                    let mut x = rng.gen::<f64>() * total;
                    weights
                        .iter()
                        .position(|w| {
                            x -= w;
                            x < 0.0
                        })
                        .unwrap_or(names.len() - 1)
                }
            };
            Some(names[k].clone())
        })
        .collect()
}

/// The counter for generated texts: `--tokenizer`, else the server's verified `/tokenize`.
async fn counter(
    serve: &crate::compat::args::ServeConfig,
    client: &Client,
    model: &str,
    counting: TokenCounting,
) -> Result<Counter, RunError> {
    if let Some(t) = engine::local_tokenizer(serve.tokenizer.as_deref())? {
        return Ok(Counter::Local(t));
    }
    if let TokenCounting::Server(d) = counting {
        return Ok(Counter::Server(d));
    }
    let found = collect(client, Some(model)).await.ok().and_then(|c| {
        detect(&c, &Overrides::default())
            .tokenize
            .map(|t| t.dialect)
    });
    Ok(found.map_or(Counter::None, Counter::Server))
}

/// SGLang's warm-up: `--warmup-requests` copies of the first request (at most 32 output
/// tokens), all at once; at least one must succeed.
async fn warm_up(
    cfg: &SglangConfig,
    p: &Prepared,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    if cfg.warmup_requests == 0 {
        return Ok(());
    }
    let _ = writeln!(
        log,
        "Starting warmup with {} sequences...",
        cfg.warmup_requests
    );
    let mut first = p.samples[0].clone();
    first.output_len = first.output_len.min(32);
    // SGLang's warm-up names the first adapter.
    let lora = cfg.lora_names.first().map(String::as_str);
    let b = body::body(cfg.reader, &p.model, &first, lora, &cfg.body).map_err(RunError::Setup)?;
    let req = Arc::new(StreamRequest {
        body: Bytes::from(b),
        request_id: None,
        keep_text: Some(false),
        ..p.requests[0].clone()
    });
    let mut set = JoinSet::new();
    for _ in 0..cfg.warmup_requests {
        let (c, req, cancel) = (p.client.clone(), req.clone(), cancel.clone());
        set.spawn(async move {
            let start = c.clock().raw();
            c.stream(&req, start, &mut NoopObserver, &cancel).await
        });
    }
    let mut first_error = None;
    let mut ok = false;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(t) if t.outcome.is_ok() => ok = true,
            Ok(t) => {
                first_error.get_or_insert_with(|| {
                    t.outcome.err().map(|e| e.to_string()).unwrap_or_default()
                });
            }
            Err(e) => return Err(RunError::Setup(format!("a warm-up task failed: {e}"))),
        }
    }
    if !ok {
        return Err(RunError::Setup(format!(
            "Warmup failed - Please make sure benchmark arguments are correctly specified. Error: {}",
            first_error.unwrap_or_default()
        )));
    }
    let _ = writeln!(
        log,
        "Warmup completed with {} sequences. Starting main benchmark run...",
        cfg.warmup_requests
    );
    Ok(())
}

/// `POST /flush_cache`; SGLang does not look at the answer, we report a failure.
async fn flush_cache(client: &Client, log: &mut (dyn Write + Send)) {
    match client.post_json("/flush_cache", b"").await {
        Ok(r) if r.is_success() => {}
        Ok(r) => {
            let _ = writeln!(log, "note: POST /flush_cache answered HTTP {}", r.status);
        }
        Err(e) => {
            let _ = writeln!(log, "note: POST /flush_cache failed: {e}");
        }
    }
}

/// Sends every request on the schedule, at most `--max-concurrency` at a time; a request's
/// start is when it got its slot (SGLang's `st`).
async fn send_all(
    cfg: &SglangConfig,
    p: &Prepared,
    clock: &Clock,
    base_raw: u64,
    cancel: &Cancel,
    progress: &mut (dyn Progress + Send),
) -> Result<Vec<Timeline>, RunError> {
    let slots = cfg.max_concurrency.map(|n| Arc::new(Semaphore::new(n)));
    let base_instant = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    for (i, req) in p.requests.iter().enumerate() {
        let off = p.offsets[i];
        let scheduled = clock.add_ns(base_raw, off);
        if off > 0 {
            tokio::select! {
                _ = engine::wait_until(clock, base_instant, off, scheduled) => {}
                _ = cancel.cancelled() => {}
            }
        }
        if cancel.is_cancelled() {
            break;
        }
        let (c, slots, cancel, req) =
            (p.client.clone(), slots.clone(), cancel.clone(), req.clone());
        set.spawn(async move {
            let _permit = match &slots {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            let start = c.clock().raw().max(scheduled);
            (i, c.stream(&req, start, &mut NoopObserver, &cancel).await)
        });
    }
    let mut done: Vec<Option<Timeline>> = (0..p.requests.len()).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, t) = r.map_err(|e| RunError::Setup(format!("a request task failed: {e}")))?;
        done[i] = Some(t);
        progress.event(&Event::StepDone { estimate_s: 0.0 });
    }
    Ok(done
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                let mut t = Timeline::new(clock.add_ns(base_raw, p.offsets[i]), 0, false);
                t.outcome = Err(crate::timeline::RequestError::new(
                    crate::timeline::ErrorKind::Cancelled,
                    "never sent: the run was interrupted",
                ));
                t
            })
        })
        .collect())
}

/// `GET /get_server_info` as JSON; `None` unless it answers 200 with JSON within 10 s.
async fn server_info(client: &Client) -> Option<Value> {
    let r = tokio::time::timeout(Duration::from_secs(10), client.get("/get_server_info"))
        .await
        .ok()?
        .ok()?;
    if r.status != 200 {
        return None;
    }
    serde_json::from_slice(&r.body).ok()
}

/// SGLang's accept length: `internal_states[0].avg_spec_accept_length` (of the first decode
/// server behind a disaggregated router).
pub fn accept_length(info: Option<&Value>) -> Option<f64> {
    let mut info = info?;
    if let Some(d) = info.get("decode") {
        info = d.get(0)?;
    }
    info.get("internal_states")?
        .get(0)?
        .get("avg_spec_accept_length")?
        .as_f64()
}

/// Each successful request's generated text counted again; the server's count where nothing
/// can count text.
async fn retokenize(
    p: &Prepared,
    outputs: &[RequestOutput],
    texts: &[String],
    log: &mut (dyn Write + Send),
) -> Vec<u64> {
    let mut out = Vec::with_capacity(outputs.len());
    let mut warned = false;
    for (o, text) in outputs.iter().zip(texts) {
        if !o.success {
            out.push(0);
            continue;
        }
        let n = match &p.counter {
            Counter::Local(t) => t.count_with(text, false).map_err(|e| e.to_string()),
            Counter::Server(d) => engine::server_count(&p.client, *d, &p.model, text).await,
            Counter::None => Ok(o.output_len),
        };
        out.push(n.unwrap_or_else(|e| {
            if !warned {
                warned = true;
                let _ = writeln!(
                    log,
                    "note: counting generated text failed ({e}); the server's count stands in"
                );
            }
            o.output_len
        }));
    }
    out
}

/// Our own figures, under the record's `llmspeed` key.
fn ours(p: &Prepared, timelines: &[Timeline], outputs: &[RequestOutput]) -> Value {
    let mut sources = std::collections::BTreeMap::<&str, usize>::new();
    let mut failures = std::collections::BTreeMap::<&str, usize>::new();
    let mut server_tokens = 0u64;
    for (t, o) in timelines.iter().zip(outputs) {
        *sources.entry(t.token_count_source.as_str()).or_default() += 1;
        if let Some(k) = t.error_kind() {
            *failures.entry(k.as_str()).or_default() += 1;
        }
        if o.success {
            server_tokens += t.output_tokens().max(t.event_tokens());
        }
    }
    json!({
        "version": crate::VERSION,
        "retokenized_with": p.counter.name(),
        "token_count_source": sources,
        "failures_by_kind": failures,
        "server_output_tokens": server_tokens,
        "request_start": "slot_granted",
    })
}

/// Appends the record (to `--output-file` or SGLang's default name).
#[allow(clippy::too_many_arguments)]
fn save(
    cfg: &SglangConfig,
    rate: Option<f64>,
    info: Option<Value>,
    duration_s: f64,
    m: &metrics::Metrics,
    accept_length: Option<f64>,
    outputs: &[RequestOutput],
    texts: &[String],
    llmspeed: Value,
) -> Result<PathBuf, RunError> {
    let a = record::RunArgs {
        tag: cfg.tag.as_deref(),
        backend: &cfg.backend,
        dataset_name: &cfg.dataset_name,
        request_rate: rate,
        max_concurrency: cfg.max_concurrency,
        sharegpt_output_len: cfg.sharegpt_output_len,
        random_input_len: cfg.random_input_len,
        random_output_len: cfg.random_output_len,
        random_range_ratio: cfg.random_range_ratio,
        num_prompts: cfg.num_prompts,
    };
    let path = PathBuf::from(match &cfg.output_file {
        Some(f) => f.clone(),
        None => {
            let d = crate::sys::UtcDateTime::from_unix(crate::sys::unix_secs(
                std::time::SystemTime::now(),
            ));
            record::default_file_name(&a, &format!("{:02}{:02}", d.month, d.day))
        }
    });
    let details = cfg.output_details.then_some((outputs, texts));
    let pairs = record::pairs(&a, info, duration_s, m, accept_length, details, llmspeed);
    record::append(&path, &pairs)
        .map_err(|e| RunError::Setup(format!("cannot append to {}: {e}", path.display())))?;
    Ok(path)
}
