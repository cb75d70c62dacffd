//! Runs `bench sglang` as named steps: the engine runs the plan (ready check, prompts,
//! SGLang's warm-up, the schedule, the streams), then SGLang's extra server calls, then every
//! request read SGLang's way, counted again, printed and appended.
//!
//! Owns only what is SGLang's around the engine: `/server_info` (the accept length and the
//! record's `server_info`), the retokenized counts and the output files. Nothing here runs per
//! token: the engine's requests are one task each around `Client::stream`.

use super::args::SglangConfig;
use super::body::SglangBodies;
use super::metrics::{self, RequestInput, RequestOutput};
use super::{cache, console, goodput, images, mooncake, record, shard};
use crate::bench::engine::connect::client_for;
use crate::bench::engine::plan::Plan;
use crate::bench::engine::samples::{local_tokenizer, server_count};
use crate::bench::engine::shard::Ran;
use crate::bench::engine::steady;
use crate::bench::engine::{self, Measured, RunError};
use crate::clock::Clock;
use crate::net::{Cancel, Client};
use crate::progress::Progress;
use crate::server::TokenizeDialect;
use crate::timeline::Timeline;
use crate::workload::chat_template::Processor;
use crate::workload::datasets::DatasetKind;
use crate::workload::hub;
use crate::workload::tokenizer::{HubCache, LocalTokenizer, TokenizerError};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    /// SGLang's reading of each request that ran, in request order.
    pub outputs: Vec<RequestOutput>,
    pub metrics: metrics::Metrics,
    pub duration_s: f64,
    /// The file the record was appended to.
    pub path: PathBuf,
    /// The record's measured figures, as repeated runs compare them (`record::figures`).
    pub figures: Vec<(String, f64)>,
    /// The engine's run: every request's timeline, its index and the run's base stamp.
    pub measured: Measured,
}

/// How generated texts are counted again (SGLang: the client's tokenizer).
enum Counter {
    Local(Box<LocalTokenizer>),
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
    mooncake_trace(cfg, log)?;
    let plan = hub_sharegpt(&cfg.plan, log)?;
    let (plan, processor) = native_template(cfg, plan, log)?;
    if cfg.cache_report && !cache::reads_counts(&cfg.backend) {
        let _ = writeln!(log, "{}", cache::WARNING);
    }
    let measured = engine::run(&plan, clock.clone(), cancel, log, progress).await?;
    let client = client_for(&cfg.plan, clock.clone())?;
    let (accept_length, info_s) = accept_length_call(cfg, &client).await;
    // SGLang stops its clock after that call (sglang backends), before the second.
    let duration_s = measured.duration_ns as f64 / 1e9 + info_s;
    let info = server_info(&client).await;
    let outputs = read_all(cfg, &clock, &measured);
    let texts: Vec<String> = measured
        .requests
        .iter()
        .map(|f| generated_text(cfg.reader, &f.timeline))
        .collect();
    let counter = counter(cfg, &measured).await?;
    let retok = retokenize(
        &counter,
        &client,
        &measured.request_model,
        &outputs,
        &texts,
        log,
    )
    .await;
    let mut m = metrics::compute(&outputs, &retok, duration_s);
    if cfg.plan.turns > 1 {
        m.without_dataset_input(duration_s);
    }
    let text_counts = match (cfg.image.is_some(), &processor) {
        (true, Some(p)) => native_text_counts(p, &client, &measured, log).await,
        (true, None) => chat_text_counts(cfg, &client, &measured, log).await,
        (false, _) => Vec::new(),
    };
    let image_rows = cfg
        .image
        .is_some()
        .then(|| image_rows(&measured, &outputs, &text_counts));
    if let Some(rows) = &image_rows {
        m.with_vision(
            images::total_text(rows),
            images::total_vision(rows),
            duration_s,
        );
    }
    let goodput = cfg
        .goodput
        .as_ref()
        .map(|slos| goodput::compute(&outputs, slos, duration_s));
    let cache = cfg
        .cache_report
        .then(|| cache_report(cfg, &measured, &outputs));
    let extra = record::Extra {
        accept_length,
        goodput: goodput.as_ref(),
        cache: cache.as_ref(),
    };
    let rate = (!cfg.rate_is_trace).then_some(cfg.request_rate);
    console::write(
        out,
        &console::Header {
            backend: &cfg.backend,
            request_rate: rate,
            max_concurrency: cfg.max_concurrency,
            duration_s,
            accept_length,
            goodput: extra.goodput,
            cache: extra.cache,
        },
        &m,
    )
    .map_err(|e| RunError::Setup(format!("cannot write the result: {e}")))?;
    let mut ours = ours(&counter, &measured, &outputs);
    ours["client_lag"] = crate::bench::engine::figures::client_lag(&measured.client_lag);
    // `--insecure`: the server's certificate was not checked, said in the record as bench serve's.
    ours["insecure"] = serde_json::Value::Bool(cfg.plan.insecure);
    for line in crate::bench::engine::figures::client_lag_lines(&ours) {
        writeln!(out, "{line}")
            .map_err(|e| RunError::Setup(format!("cannot write the result: {e}")))?;
    }
    if let Some(ss) = steady_state(cfg, &measured, duration_s) {
        ours["steady_state"] = ss;
    }
    if let Some(rows) = &image_rows {
        ours["images"] = images::block(rows);
    }
    if let Some(sh) = cfg.shard() {
        ours["shard"] = shard_block(
            cfg,
            sh,
            &measured,
            &outputs,
            &retok,
            duration_s,
            accept_length,
        );
    }
    let (path, figures) = save(cfg, info, duration_s, &m, &extra, &outputs, &texts, ours)?;
    Ok(Outcome {
        outputs,
        metrics: m,
        duration_s,
        path,
        figures,
        measured,
    })
}

/// Each request of an image run, in dispatch order, with its sample's images and its text's
/// length: `text_counts[i]` where measured, else the sample's.
fn image_rows<'a>(
    m: &'a Measured,
    outputs: &[RequestOutput],
    text_counts: &[Option<u64>],
) -> Vec<images::Row<'a>> {
    m.requests
        .iter()
        .zip(outputs)
        .enumerate()
        .map(|(i, (f, o))| {
            let s = &m.samples[f.index];
            images::Row {
                images: crate::workload::datasets::random_mm::images(s),
                text_tokens: text_counts
                    .get(i)
                    .copied()
                    .flatten()
                    .unwrap_or(s.prompt_len),
                success: o.success,
                timeline: &f.timeline,
            }
        })
        .collect()
}

/// On a chat backend, each completed image request's text alone as the server counts a chat
/// request of it (its chat template around one user message, the generation prompt added):
/// SGLang's `text_prompt_len`, so the vision tokens are the server's prompt count less it and
/// not less the bare text. After the run, through `/tokenize` with messages where the server
/// takes them; `None` for a request not counted (another backend, a server without the form,
/// or a failed call, said once).
async fn chat_text_counts(
    cfg: &SglangConfig,
    client: &Client,
    m: &Measured,
    log: &mut (dyn Write + Send),
) -> Vec<Option<u64>> {
    let dialect = m.tokenize.filter(|d| d.counts_chat());
    let (true, Some(d)) = (cfg.reader == metrics::Reader::Chat, dialect) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(m.requests.len());
    for f in &m.requests {
        let crate::workload::sample::PromptSource::Text(text) =
            m.samples[f.index].prompt.text_part()
        else {
            out.push(None);
            continue;
        };
        let body = json!({
            "model": m.request_model,
            "messages": [{"role": "user", "content": text}],
            "add_generation_prompt": true,
        });
        match crate::server::probe::tokenize_count(client, d, &body).await {
            Ok(n) => out.push(Some(n)),
            Err(e) => {
                let _ = writeln!(
                    log,
                    "note: counting the image rows' text with the chat template failed ({e}); \
                     vision tokens are the server's prompt count less the bare text"
                );
                return Vec::new();
            }
        }
    }
    out
}

/// A native image run (`--backend sglang` / `sglang-native`, `--dataset-name image` or
/// `mmmu`): the plan whose bodies send each row's text through the model's processor's chat
/// template (SGLang's prompt for `/generate`), and that processor; other runs as they are.
/// The processor is read before any request from `--tokenizer`'s folder (a hub id: its cached
/// snapshot's). SGLang loads it with `get_processor(--served-model-name or --model)` and stops
/// where it cannot; so does this run where there is no folder. A processor without a template
/// it can render is SGLang's fallback (`<image>{text}`), said in a note.
fn native_template<'a>(
    cfg: &SglangConfig,
    plan: Cow<'a, Plan>,
    log: &mut (dyn Write + Send),
) -> Result<(Cow<'a, Plan>, Option<std::sync::Arc<Processor>>), RunError> {
    if cfg.image.is_none() || cfg.reader != metrics::Reader::Native {
        return Ok((plan, None));
    }
    let dataset = &cfg.dataset_name;
    let hint = format!(
        "--dataset-name {dataset} on --backend {} sends each row's text through the model's \
         processor's chat template, as SGLang does (its /generate applies none)",
        cfg.backend
    );
    let (flag, name) = processor_name(
        cfg.plan.tokenizer.as_deref(),
        cfg.plan.served_model_name.as_deref(),
        cfg.plan.model.as_deref(),
    )
    .ok_or_else(|| {
        RunError::Setup(format!(
            "no --model: {hint}; SGLang loads the processor from --served-model-name or \
             --model (without them, from the server's first model id): give --model (a hub \
             id or the model's folder) or --tokenizer (the folder)"
        ))
    })?;
    let (p, dir) = processor_of(flag, name).map_err(|e| RunError::Setup(format!("{e}; {hint}")))?;
    let _ = writeln!(log, "processor of {flag} {name}: {}", dir.display());
    match &p.template {
        Ok(t) => {
            let _ = writeln!(
                log,
                "rendering the processor's chat template of {}",
                t.origin()
            );
        }
        Err(why) => {
            let _ = writeln!(
                log,
                "note: {why}: SGLang's apply_chat_template fails there and it sends {} \
                 (its fallback); so does llmspeed",
                match p.class.as_deref() {
                    Some("MiniCPMOProcessor") => "(<image>./</image>){text}",
                    _ => "<image>{text}",
                }
            );
        }
    }
    let p = std::sync::Arc::new(p);
    let mut plan = plan.into_owned();
    plan.bodies = std::sync::Arc::new(SglangBodies {
        native_template: Some(p.clone()),
        ..cfg.bodies.clone()
    });
    Ok((Cow::Owned(plan), Some(p)))
}

/// The name the processor is read from, and the option that gave it: `--tokenizer` when given
/// (llmspeed's override: SGLang reads only its tokenizer there), else SGLang's
/// `get_processor(served_model_name or model)`. `None`: no name at all.
fn processor_name<'a>(
    tokenizer: Option<&'a str>,
    served: Option<&'a str>,
    model: Option<&'a str>,
) -> Option<(&'static str, &'a str)> {
    tokenizer
        .map(|t| ("--tokenizer", t))
        .or_else(|| served.map(|s| ("--served-model-name", s)))
        .or_else(|| model.map(|m| ("--model", m)))
}

/// The processor `name` names: a folder; for `--tokenizer` also a file's folder (its
/// `tokenizer.json`); else a hub id, from the Hugging Face cache or the hub
/// (`workload::processor`). Also the folder it was read from.
fn processor_of(flag: &str, name: &str) -> Result<(Processor, PathBuf), String> {
    let p = std::path::Path::new(name);
    if flag == "--tokenizer" && p.is_file() {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        return crate::workload::processor::load(&dir.display().to_string(), flag)
            .map_err(|e| e.to_string());
    }
    crate::workload::processor::load(name, flag).map_err(|e| e.to_string())
}

/// On a native backend, each completed image request's text alone through the processor's
/// chat template (`datasets::sglang_image::text_only_prompt`), counted as the server counts a
/// prompt (`/tokenize` with special tokens, as `/generate` adds them): SGLang's
/// `text_prompt_len`, so the vision tokens are the server's prompt count less it. The
/// templated prompt sent holds the same text, the same template and the images' placeholders,
/// so what the subtraction leaves is the images' tokens with their placeholders. A request
/// SGLang fell back for is noted once. `None` for a request not counted (no `/tokenize`, a
/// failed call, said once).
async fn native_text_counts(
    p: &Processor,
    client: &Client,
    m: &Measured,
    log: &mut (dyn Write + Send),
) -> Vec<Option<u64>> {
    use crate::workload::datasets::sglang_image::{native_prompt, text_only_prompt};
    use crate::workload::sample::PromptSource;
    let mut fallbacks = 0;
    let mut first: Option<String> = None;
    let mut texts = Vec::with_capacity(m.requests.len());
    for f in &m.requests {
        let s = &m.samples[f.index];
        let PromptSource::Text(text) = s.prompt.text_part() else {
            texts.push(None);
            continue;
        };
        let urls: Vec<&str> = crate::workload::datasets::random_mm::images(s)
            .iter()
            .map(|i| &*i.url)
            .collect();
        if let Some(why) = native_prompt(p, text, &urls).fallback {
            fallbacks += 1;
            first.get_or_insert(why);
        }
        texts.push(Some(text_only_prompt(p, text)));
    }
    if let Some(why) = first {
        let _ = writeln!(
            log,
            "note: {fallbacks} of {} requests were sent SGLang's fallback prompt: {why}",
            m.requests.len()
        );
    }
    let Some(d) = m.tokenize else {
        let _ = writeln!(
            log,
            "note: the server has no /tokenize: vision tokens are its prompt count less the \
             text's length, which leaves the chat template's tokens in them"
        );
        return Vec::new();
    };
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        let Some(t) = t else {
            out.push(None);
            continue;
        };
        let body = d.text_body(&m.request_model, &t);
        match crate::server::probe::tokenize_count(client, d, &body).await {
            Ok(n) => out.push(Some(n)),
            Err(e) => {
                let _ = writeln!(
                    log,
                    "note: counting the image rows' text with the chat template failed ({e}); \
                     vision tokens are the server's prompt count less the text's length"
                );
                return Vec::new();
            }
        }
    }
    out
}

/// The accept length from `/server_info` (sglang backends only, as SGLang asks), and the
/// seconds the call took.
async fn accept_length_call(cfg: &SglangConfig, client: &Client) -> (Option<f64>, f64) {
    if !cfg.backend.contains("sglang") {
        return (None, 0.0);
    }
    let t0 = Instant::now();
    let a = accept_length(server_info(client).await.as_ref());
    (a, t0.elapsed().as_secs_f64())
}

/// `--cache-report`'s figures: each request's prompt length (the server's `prompt_tokens` when
/// it reported one, as SGLang takes it) and its last `meta_info.cached_tokens` (0 for a backend
/// whose stream SGLang does not read counts from).
fn cache_report(cfg: &SglangConfig, m: &Measured, outputs: &[RequestOutput]) -> cache::CacheReport {
    let reads = cache::reads_counts(&cfg.backend);
    let requests: Vec<cache::Request> = m
        .requests
        .iter()
        .zip(outputs)
        .map(|(f, o)| {
            let usage = f.timeline.usage;
            cache::Request {
                success: o.success,
                prompt_len: usage
                    .map(|u| u.prompt_tokens)
                    .filter(|&p| p > 0)
                    .unwrap_or(o.prompt_len),
                cached: usage
                    .and_then(|u| u.cached_tokens)
                    .filter(|_| reads)
                    .unwrap_or(0),
            }
        })
        .collect();
    cache::compute(&requests)
}

/// Every request that ran, read as SGLang's reader for the backend reads it.
fn read_all(cfg: &SglangConfig, clock: &Clock, m: &Measured) -> Vec<RequestOutput> {
    m.requests
        .iter()
        .map(|f| {
            let s = &m.samples[f.index];
            // A multi-turn row's rounds take their prompt length from the server (SGLang asks
            // for usage on each), else the row's first turn's.
            let prompt_len = match cfg.plan.turns {
                1 => s.prompt_len,
                _ => f.input_len,
            };
            let input = RequestInput::from_timeline(
                cfg.reader,
                &f.timeline,
                clock,
                m.base_raw,
                prompt_len,
                s.output_len as u64,
            );
            metrics::read(cfg.reader, &input)
        })
        .collect()
}

/// SGLang's `generated_text`: the chat reader adds each chunk's reasoning (`reasoning_content`,
/// else `reasoning`) before its content, so a reasoning model's thoughts are counted again with
/// its answer; the other readers keep the text alone.
fn generated_text(reader: metrics::Reader, t: &Timeline) -> String {
    let content = t.content_text.as_deref().unwrap_or_default();
    match (reader, t.reasoning_text.as_deref()) {
        (metrics::Reader::Chat, Some(r)) => format!("{r}{content}"),
        _ => content.to_string(),
    }
}

/// `GET /server_info` as JSON (SGLang 0.5.23 keeps `/get_server_info` only as a deprecated
/// alias); `None` unless it answers 200 with JSON within 10 s.
async fn server_info(client: &Client) -> Option<Value> {
    let r = tokio::time::timeout(Duration::from_secs(10), client.get("/server_info"))
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

/// SGLang's `--dataset-name sharegpt` without `--dataset-path`, and its `random` (with a
/// `--tokenizer` to cut it) without a file there: its ShareGPT file from the hub (the Hugging
/// Face cache first, as SGLang's `hf_hub_download` call does). Where `random`'s cannot be had,
/// a `note:` says why and where to put it, and the run draws token ids of the lengths instead.
fn hub_sharegpt<'a>(
    plan: &'a Plan,
    log: &mut (dyn Write + Send),
) -> Result<Cow<'a, Plan>, RunError> {
    let d = &plan.dataset;
    let sharegpt = d.kind == DatasetKind::ShareGpt && d.path.is_none();
    let cuts = d.cuts_sharegpt()
        && plan.tokenizer.is_some()
        && LocalTokenizer::AVAILABLE
        && !d.path.as_deref().is_some_and(std::path::Path::is_file);
    if !(sharegpt || cuts) {
        return Ok(Cow::Borrowed(plan));
    }
    let fetched = HubCache::from_env()
        .ok_or_else(|| TokenizerError::NoCacheDir.to_string())
        .and_then(|cache| {
            hub::get(&cache.dir, &hub::SHAREGPT, &hub::HubSettings::from_env())
                .map_err(|e| e.to_string())
        });
    let mut plan = plan.clone();
    plan.dataset.path = match (fetched, sharegpt) {
        (Ok(path), _) => Some(path),
        (Err(e), true) => return Err(RunError::Setup(format!("--dataset-name sharegpt: {e}"))),
        (Err(e), false) => {
            let _ = writeln!(
                log,
                "note: --dataset-name random cuts SGLang's ShareGPT file, which could not be \
                 had: {e}; the prompts are random token ids of the drawn lengths instead"
            );
            None
        }
    };
    Ok(Cow::Owned(plan))
}

/// SGLang's `--dataset-name mooncake` trace, downloaded to where it is read when it is not
/// there (SGLang's `/tmp/<workload>_trace.jsonl`, or the `--dataset-path` given).
fn mooncake_trace(cfg: &SglangConfig, log: &mut (dyn Write + Send)) -> Result<(), RunError> {
    let Some(t) = &cfg.mooncake_trace else {
        return Ok(());
    };
    mooncake::ensure(t, log).map_err(RunError::Setup)?;
    Ok(())
}

/// The counter for generated texts: `--tokenizer`, else the server's verified `/tokenize`.
/// (A `--tokenizer` that cannot be used was already noted when the engine loaded the prompts.)
async fn counter(cfg: &SglangConfig, m: &Measured) -> Result<Counter, RunError> {
    let noted = &mut std::io::sink();
    if let Some(t) = local_tokenizer(cfg.plan.tokenizer.as_deref(), "", noted)? {
        return Ok(Counter::Local(Box::new(t)));
    }
    Ok(m.tokenize.map_or(Counter::None, Counter::Server))
}

/// Each successful request's generated text counted again; the server's count where nothing
/// can count text.
async fn retokenize(
    counter: &Counter,
    client: &Client,
    model: &str,
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
        let n = match counter {
            Counter::Local(t) => t.count_with(text, false).map_err(|e| e.to_string()),
            Counter::Server(d) => server_count(client, *d, model, text).await,
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
fn ours(counter: &Counter, m: &Measured, outputs: &[RequestOutput]) -> Value {
    let mut sources = std::collections::BTreeMap::<&str, usize>::new();
    let mut failures = std::collections::BTreeMap::<&str, usize>::new();
    let mut server_tokens = 0u64;
    for (f, o) in m.requests.iter().zip(outputs) {
        let t: &Timeline = &f.timeline;
        *sources.entry(t.token_count_source.as_str()).or_default() += 1;
        if let Some(k) = t.error_kind() {
            *failures.entry(k.as_str()).or_default() += 1;
        }
        if o.success {
            server_tokens += t.output_tokens().max(t.event_tokens());
        }
    }
    let mut v = json!({
        "version": crate::VERSION,
        "retokenized_with": counter.name(),
        "token_count_source": sources,
        "failures_by_kind": failures,
        "server_output_tokens": server_tokens,
        "request_start": "slot_granted",
    });
    // Multi-turn rows: SGLang's total_input_tokens counts none (`without_dataset_input`); each
    // completed round's prompt as counted (the server's usage) is here.
    if m.requests.iter().any(|f| f.round > 0) {
        v["multi_turn_input_tokens"] = json!(metrics::completed_input(outputs));
    }
    if m.stopped {
        v["interrupted"] = json!({
            "signal": m.stop_reason,
            "requests_planned": m.planned,
            "requests_unsent": m.unsent,
            "requests_cut": m.cut,
        });
    }
    v
}

/// The busy share of the `--max-concurrency` slots that opens the steady-state window
/// (`bench serve`'s default threshold).
const STEADY_THRESHOLD: f64 = 0.95;

/// A closed loop's (`--max-concurrency` with `--request-rate inf`) steady-state window and the
/// figures inside it, by the engine from the run's records with `bench serve`'s defaults
/// (threshold 0.95, minimum window max(10 s, 10% of the run)); `null` when no window was found,
/// `None` for an open loop.
fn steady_state(cfg: &SglangConfig, m: &Measured, duration_s: f64) -> Option<Value> {
    let target = cfg.max_concurrency?;
    if cfg.request_rate.is_finite() || cfg.plan.self_timed {
        return None;
    }
    let records: Vec<_> = m.requests.iter().map(|f| f.record.clone()).collect();
    let min_window = steady::default_min_window_s(duration_s);
    let window = steady::detect_window(&records, target, STEADY_THRESHOLD, min_window, duration_s);
    Some(window.map_or(Value::Null, |w| {
        steady::compute(&records, &w, &[95.0, 99.0]).to_json()
    }))
}

/// What `llmspeed merge` recomputes the whole run from: every request as SGLang read it, on
/// the shard's start on the wall clock.
fn shard_block(
    cfg: &SglangConfig,
    sh: crate::bench::engine::shard::Shard,
    m: &Measured,
    outputs: &[RequestOutput],
    retok: &[u64],
    duration_s: f64,
    accept_length: Option<f64>,
) -> Value {
    let requests = m
        .requests
        .iter()
        .zip(outputs.iter().zip(retok))
        .map(|(f, (o, &n))| shard::ShardRequest {
            index: f.index,
            round: f.round,
            output: o.clone(),
            retokenized: n,
        })
        .collect();
    shard::ShardBlock {
        ran: Ran {
            shard: sh,
            start_at_unix_ns: cfg.plan.start_at_unix_ns,
            start_unix_ns: m.start_unix_ns,
            end_unix_ns: m.start_unix_ns + (duration_s * 1e9).round() as u64,
        },
        seed: cfg.plan.dataset.seed,
        model: m.request_model.clone(),
        settings: shard::Settings::of(&run_args(cfg)),
        accept_length,
        turns: cfg.plan.turns,
        requests,
    }
    .to_json()
}

/// The run's settings as the record repeats them.
pub fn run_args(cfg: &SglangConfig) -> record::RunArgs<'_> {
    record::RunArgs {
        tag: cfg.tag.as_deref(),
        backend: &cfg.backend,
        dataset_name: &cfg.dataset_name,
        request_rate: (!cfg.rate_is_trace).then_some(cfg.request_rate),
        max_concurrency: cfg.max_concurrency,
        sharegpt_output_len: cfg.sharegpt_output_len,
        random_input_len: cfg.random_input_len,
        random_output_len: cfg.random_output_len,
        random_range_ratio: cfg.random_range_ratio,
        num_prompts: cfg.num_prompts,
        image: cfg.image.as_ref().map(|(n, r)| (*n, r.as_str())),
    }
}

/// The file records are appended to: `--output-file`, or SGLang's default name for today.
pub fn output_path(cfg: &SglangConfig) -> PathBuf {
    PathBuf::from(match &cfg.output_file {
        Some(f) => f.clone(),
        None => {
            let now = crate::sys::unix_secs(std::time::SystemTime::now());
            let d = crate::sys::UtcDateTime::from_unix(now);
            record::default_file_name(&run_args(cfg), &format!("{:02}{:02}", d.month, d.day))
        }
    })
}

/// Appends the record (to `--output-file` or SGLang's default name); returns the file and the
/// record's figures.
#[allow(clippy::too_many_arguments)]
fn save(
    cfg: &SglangConfig,
    info: Option<Value>,
    duration_s: f64,
    m: &metrics::Metrics,
    extra: &record::Extra<'_>,
    outputs: &[RequestOutput],
    texts: &[String],
    llmspeed: Value,
) -> Result<(PathBuf, Vec<(String, f64)>), RunError> {
    let path = output_path(cfg);
    let details = cfg.output_details.then_some((outputs, texts));
    let pairs = record::pairs(
        &run_args(cfg),
        info,
        duration_s,
        m,
        extra,
        details,
        llmspeed,
    );
    record::append(&path, &pairs)
        .map_err(|e| RunError::Setup(format!("cannot append to {}: {e}", path.display())))?;
    Ok((path, record::figures(&pairs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processor_is_tokenizers_else_sglangs_served_name_else_model() {
        let all = processor_name(Some("/m"), Some("served"), Some("org/m"));
        assert_eq!(all, Some(("--tokenizer", "/m")));
        let sglang = processor_name(None, Some("served"), Some("org/m"));
        assert_eq!(sglang, Some(("--served-model-name", "served")));
        assert_eq!(
            processor_name(None, None, Some("org/m")),
            Some(("--model", "org/m"))
        );
        assert_eq!(processor_name(None, None, None), None);
    }

    #[test]
    fn the_chat_reader_keeps_reasoning_before_the_answer() {
        let mut t = Timeline::new(0, 0, true);
        t.content_text = Some("answer".into());
        t.reasoning_text = Some("think. ".into());
        assert_eq!(generated_text(metrics::Reader::Chat, &t), "think. answer");
        assert_eq!(generated_text(metrics::Reader::Completions, &t), "answer");
        assert_eq!(generated_text(metrics::Reader::Native, &t), "answer");
        t.reasoning_text = None;
        assert_eq!(generated_text(metrics::Reader::Chat, &t), "answer");
    }

    #[test]
    fn accept_length_is_read_where_sglang_reads_it() {
        let plain = json!({"internal_states": [{"avg_spec_accept_length": 2.5}]});
        assert_eq!(accept_length(Some(&plain)), Some(2.5));
        let pd = json!({"decode": [{"internal_states": [{"avg_spec_accept_length": 3.0}]}]});
        assert_eq!(accept_length(Some(&pd)), Some(3.0));
        let none = json!({"internal_states": [{"last_gen_throughput": 1.0}]});
        assert_eq!(accept_length(Some(&none)), None);
        assert_eq!(accept_length(Some(&json!({"internal_states": []}))), None);
        assert_eq!(accept_length(None), None);
    }
}
