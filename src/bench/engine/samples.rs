//! The run's prompts: the dataset loaded and sized in tokens the way the server counts them.
//! Texts are measured with a local tokenizer or the server's verified `/tokenize`; token-id
//! prompts stay inside the server's vocabulary and are sent as ids only where the server was
//! seen to accept them, else turned into text (through `/detokenize` on a chat endpoint, or
//! natural text of a measured length).
//!
//! Owns token counting and prompt preparation before the measured run; it must never run during
//! it (it calls the server and blocks a thread per dataset).

use crate::bench::engine::error::{unless_stopped, RunError};
use crate::bench::engine::plan::Plan;
use crate::net::{Cancel, Client};
use crate::server::probe::token_id_range;
use crate::server::{collect, detect, Overrides, ServerInfo, TokenizeDialect};
use crate::workload::datasets::{self, PromptSource, Sample};
use crate::workload::tokenizer::LocalTokenizer;
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// How text prompts were measured in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCounting {
    /// Token-id prompts: exact by construction.
    Exact,
    /// The server's `/tokenize`, in the dialect the probe verified.
    Server(TokenizeDialect),
    /// No `/tokenize`: bytes / 4.
    Estimate,
    /// `--tokenizer`: a local tokenizer.json.
    Local,
    /// Neither: each request's input length is the `usage.prompt_tokens` the server returned.
    Usage,
}

impl TokenCounting {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenCounting::Exact => "exact",
            TokenCounting::Server(_) => "server_tokenize",
            TokenCounting::Estimate => "estimate_bytes_div_4",
            TokenCounting::Local => "local_tokenizer",
            TokenCounting::Usage => "usage_prompt_tokens",
        }
    }
}

/// What the prompts sent were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptKind {
    /// Token ids, within the server's vocabulary.
    TokenIds,
    /// Token ids turned into text by the server's `/detokenize` (chat endpoint).
    Detokenized,
    /// Token-id datasets sent as natural text of a measured length (ids could not be used).
    Text,
    /// The dataset's own texts (sharegpt, sonnet, custom).
    DatasetText,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::TokenIds => "token_ids",
            PromptKind::Detokenized => "detokenized_token_ids",
            PromptKind::Text => "text",
            PromptKind::DatasetText => "dataset_text",
        }
    }
}

/// `POST /tokenize` of `text` in the verified `dialect` -> its token count (without special
/// tokens where the dialect has the switch, as before).
pub async fn server_count(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    text: &str,
) -> Result<u64, String> {
    crate::server::probe::tokenize_count(client, dialect, &plain_text_body(dialect, model, text))
        .await
}

/// `POST /tokenize` of `text` in the verified `dialect` -> its token ids, counted as
/// [`server_count`] counts them.
async fn server_ids(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    text: &str,
) -> Result<Vec<u32>, String> {
    crate::server::probe::tokenize_ids(client, dialect, &plain_text_body(dialect, model, text))
        .await
}

/// The dialect's tokenize request for `text`, without special tokens where it has the switch.
fn plain_text_body(dialect: TokenizeDialect, model: &str, text: &str) -> serde_json::Value {
    let mut body = dialect.text_body(model, text);
    for k in ["add_special_tokens", "add_special"] {
        if let Some(v) = body.get_mut(k) {
            *v = json!(false);
        }
    }
    body
}

/// `POST /detokenize` of token ids -> text (random prompts on the chat endpoint), in the
/// verified dialect's shape.
async fn detokenize(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    ids: &[u32],
) -> Result<String, String> {
    let body = dialect
        .detokenize_body(model, ids)
        .ok_or_else(|| format!("no /detokenize in the {} dialect", dialect.as_str()))?
        .to_string();
    let answer =
        crate::server::probe::post_ok(client, dialect.detokenize_path(), body.as_bytes()).await?;
    dialect.parse_detokenized(&answer)
}

/// The `--tokenizer` to count with locally: a path (which must load), or a model id found in the
/// local Hugging Face cache or downloaded from the hub. `None` when there is none to use: no
/// flag, a build without the `hf-tokenizer` feature, or a spec that names no file here and
/// could not be fetched (the Python tools' flag names a hub id, so that is common). A spec that
/// is given but not used is never passed over silently: a `note:` line on `log` says why (for
/// a hub id, which file, from where and where to put it by hand) and what counts instead,
/// `fallback` (the caller's words, e.g. "the server's /tokenize").
pub fn local_tokenizer(
    spec: Option<&str>,
    fallback: &str,
    log: &mut (dyn Write + Send),
) -> Result<Option<LocalTokenizer>, RunError> {
    let Some(spec) = spec else { return Ok(None) };
    if !LocalTokenizer::AVAILABLE {
        let _ = writeln!(
            log,
            "note: --tokenizer {spec} is not used: {}; counting with {fallback} instead",
            crate::workload::tokenizer::TokenizerError::NotBuilt
        );
        return Ok(None);
    }
    match crate::workload::tokenizer::resolve(spec) {
        Ok(path) => LocalTokenizer::load_file(&path)
            .map(Some)
            .map_err(|e| RunError::Setup(e.to_string())),
        Err(e) if std::path::Path::new(spec).exists() => Err(RunError::Setup(e.to_string())),
        Err(e) => {
            let _ = writeln!(
                log,
                "note: {}; counting with {fallback} instead",
                fallback_reason(spec, &e.to_string())
            );
            Ok(None)
        }
    }
}

/// What the model's chat template does while the dataset loads, as functions for
/// `datasets::load`: `wrap` each prompt (by `DatasetConfig::chat_template`'s rule), or measure
/// each row of a dataset of chat requests (`chat_len`).
#[derive(Default)]
pub struct ChatFns {
    pub wrap: Option<Box<WrapFn>>,
    pub chat_len: Option<Box<WrapLen>>,
    /// Message lists rendered (the `hf` dataset's MLPerf and BFCL).
    pub render: Option<Box<RenderFn>>,
}

/// Messages (and tools) rendered through the chat template.
pub type RenderFn =
    dyn FnMut(&serde_json::Value, Option<&serde_json::Value>) -> Result<String, String> + Send;

/// A prompt wrapped in the chat template.
pub type WrapFn = dyn FnMut(&str) -> Result<String, String> + Send;
/// A chat request row's input length.
pub type WrapLen = dyn FnMut(&str) -> Result<u64, String> + Send;

/// The [`ChatFns`] of `dataset`, from the tokenizer `spec` named (`local`, loaded from it).
/// Both `None` when the rule asks for none, or (a rule that does not require it) when there is
/// no local tokenizer to take the template from, said in a `note:` on `log`. A tokenizer without
/// a chat template, a template that does not compile, or a required rule without a tokenizer
/// stops the run, naming the file and the rule's hint (the references stop there too).
pub fn chat_fns(
    dataset: &datasets::DatasetConfig,
    spec: Option<&str>,
    local: Option<&LocalTokenizer>,
    log: &mut (dyn Write + Send),
) -> Result<ChatFns, RunError> {
    let Some(rule) = &dataset.chat_template else {
        return Ok(ChatFns::default());
    };
    let (Some(spec), Some(local)) = (spec, local) else {
        let why = "the prompts go through the model's chat template on the client, which needs a local tokenizer folder holding it";
        if rule.required {
            return Err(RunError::Setup(format!("{why}; {}", rule.hint)));
        }
        let _ = writeln!(
            log,
            "note: the prompts are sent as written, without the model's chat template: {why}; {}",
            rule.hint
        );
        return Ok(ChatFns::default());
    };
    let template = crate::workload::tokenizer::chat_template(spec, local.path())
        .map_err(|e| RunError::Setup(format!("{e}; {}", rule.hint)))?
        .ok_or_else(|| {
            RunError::Setup(format!(
                "the tokenizer {} has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json); {}",
                local.path().display(),
                rule.hint
            ))
        })?;
    let _ = writeln!(log, "rendering the chat template of {}", template.origin());
    if dataset.kind == datasets::DatasetKind::ChatRequests {
        // Its own copy of the tokenizer: the run's counter owns the other.
        let tok =
            LocalTokenizer::load_file(local.path()).map_err(|e| RunError::Setup(e.to_string()))?;
        let mut count =
            move |t: &str, special: bool| tok.count_with(t, special).map_err(|e| e.to_string());
        return Ok(ChatFns {
            wrap: None,
            chat_len: Some(Box::new(move |row: &str| {
                template.chat_request_len(row, &mut count)
            })),
            render: None,
        });
    }
    let rule = rule.clone();
    let template = Arc::new(template);
    let render = (dataset.kind == datasets::DatasetKind::Hf).then(|| {
        let template = template.clone();
        Box::new(
            move |m: &serde_json::Value, t: Option<&serde_json::Value>| {
                template.render_json(m, t).map_err(|e| e.to_string())
            },
        ) as Box<RenderFn>
    });
    Ok(ChatFns {
        wrap: Some(Box::new(move |prompt: &str| {
            template.wrap_user(&rule, prompt).map_err(|e| e.to_string())
        })),
        chat_len: None,
        render,
    })
}

/// Why `spec` is not used, from its resolution error (which starts `--tokenizer: `).
fn fallback_reason(spec: &str, err: &str) -> String {
    let why = err.strip_prefix("--tokenizer: ").unwrap_or(err);
    format!("--tokenizer {spec} is not used: {why}")
}

/// The dataset as it will be sent, and what the server showed while it was loaded.
pub struct Loaded {
    pub samples: Vec<Sample>,
    /// How the prompts' lengths were counted.
    pub counting: TokenCounting,
    /// What the prompts sent are.
    pub prompt_kind: PromptKind,
    /// The server's `/tokenize` dialect the probe verified, whatever counted the prompts (a
    /// front end counts output text with it without probing again).
    pub tokenize: Option<TokenizeDialect>,
    /// The 32-bit words the dataset drew from numpy's legacy generator (SGLang's random
    /// lengths), where SGLang's send times continue: `datasets::random_numpy_words`.
    pub numpy_words: u64,
    /// How the images are made: before the run, or by the producer (`bench::engine::producer`)
    /// during it, whose samples carry recipes ([`ImagePath`]).
    pub images: ImagePath,
}

/// What `datasets::load` asks of the model, as the run answers it: texts counted by `count`,
/// prompts wrapped and chat requests measured by the chat template ([`ChatFns`]), and the
/// local tokenizer, where one is loaded (SGLang's `random` cuts its ShareGPT texts with it).
pub struct DatasetTokens<C> {
    pub count: C,
    pub chat: ChatFns,
    pub tokenizer: Option<Arc<LocalTokenizer>>,
}

impl<C: FnMut(&str) -> Result<u64, String>> datasets::Tokens for DatasetTokens<C> {
    fn count(&mut self, text: &str) -> Result<u64, String> {
        (self.count)(text)
    }

    fn wrap(&mut self) -> Option<&mut datasets::PromptWrap<'_>> {
        let wrap = self.chat.wrap.as_deref_mut();
        wrap.map(|w| w as &mut datasets::PromptWrap<'_>)
    }

    fn chat_len(&mut self) -> Option<&mut datasets::ChatLen<'_>> {
        let len = self.chat.chat_len.as_deref_mut();
        len.map(|l| l as &mut datasets::ChatLen<'_>)
    }

    fn render(&mut self) -> Option<&mut datasets::RenderChat<'_>> {
        let render = self.chat.render.as_deref_mut();
        render.map(|r| r as &mut datasets::RenderChat<'_>)
    }

    fn tokenizer(&self) -> Option<&dyn datasets::Tokenizer> {
        let tok = self.tokenizer.as_deref();
        tok.map(|t| t as &dyn datasets::Tokenizer)
    }
}

/// Loads the dataset. Texts are measured with `--tokenizer` or the server's verified
/// `/tokenize`. Token ids stay inside the server's vocabulary and are sent only where the probe
/// saw the server accept ids from both ends of that range; on the chat endpoint they become
/// text through the server's `/detokenize`. Where ids cannot be used, prompts are natural text
/// sized by the same counters, or by each request's `usage.prompt_tokens` when there is none.
/// A stop (`cancel`) ends whichever of these steps is under way ([`unless_stopped`]).
pub async fn load_samples(
    plan: &Plan,
    client: &Client,
    model: &str,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<Loaded, RunError> {
    let info = server_info(client, model, cancel).await?;
    let spec = plan.tokenizer.as_deref();
    let local = local_tokenizer(spec, "the server's /tokenize (else its usage counts)", log)?;
    let local = local.map(Arc::new);
    let chat = chat_fns(&plan.dataset, spec, local.as_deref(), log)?;
    let dialect = tokenize_dialect(&info, log);
    let counter = match (&local, dialect) {
        (Some(_), _) => Some(TokenCounting::Local),
        (None, Some(d)) => Some(TokenCounting::Server(d)),
        (None, None) => None,
    };
    let dcfg = fitted(&plan.dataset, &info, local.as_deref());
    let numpy_words = datasets::random_numpy_words(&dcfg);
    let cuts = sglang_cuts(&dcfg, local.is_some(), log);
    let count_with: CountWith = Arc::new(counter_fn(client, model, local.clone(), cancel));
    let how = counter.unwrap_or(TokenCounting::Estimate);
    let ids_dataset = dcfg.kind.token_ids();
    if let (false, TokenCounting::Server(_)) = (ids_dataset, how) {
        let _ = writeln!(
            log,
            "loading the dataset, its prompts counted through the server's /tokenize"
        );
    }
    let count = {
        let count_with = count_with.clone();
        move |t: &str| count_with(how, t)
    };
    let tokens = DatasetTokens {
        count,
        chat,
        tokenizer: local,
    };
    let images = image_path_of(&dcfg)?;
    let making = match images {
        ImagePath::Producer { .. } => crate::workload::image::Making::Planned,
        _ => crate::workload::image::Making::UpFront,
    };
    let started = std::time::Instant::now();
    let loading = load(dcfg, tokens, making);
    let samples = unless_stopped(cancel, "loading the dataset", loading).await?;
    match images {
        ImagePath::Producer { .. } => note_producer(&images, samples.len(), log),
        _ => {
            let per_prompt = samples.iter().map(datasets::random_mm::images);
            let totals = crate::workload::image::ImageTotals::of(per_prompt);
            note_images(totals.as_ref(), started.elapsed(), ImagesKept::Held, log)
        }
    }
    let (samples, counting, kind) = match cuts {
        Some(true) => (samples, TokenCounting::Local, PromptKind::DatasetText),
        Some(false) => (samples, TokenCounting::Exact, PromptKind::TokenIds),
        None if !ids_dataset => (samples, how, PromptKind::DatasetText),
        None => {
            let server = Server {
                client,
                model,
                cancel,
                dialect,
                takes_ids: info.token_ids == Some(true),
            };
            as_sent(&server, plan, counter, samples, count_with, log).await?
        }
    };
    Ok(Loaded {
        samples,
        counting,
        prompt_kind: kind,
        tokenize: dialect,
        numpy_words,
        images,
    })
}

/// How a run's synthetic images are made, decided before any is made
/// ([`image_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePath {
    /// The dataset makes no synthetic images (or brings its own files).
    None,
    /// All made and encoded before the run, held until it ends: `bytes` of data URLs.
    UpFront { bytes: u64 },
    /// Made during the run by the producer, `window` requests ahead of the dispatcher, each
    /// request's images at most `request_bytes`; `bytes`: what up front would have held.
    /// `forced`: [`WINDOW_ENV`] asked for it.
    Producer {
        window: usize,
        request_bytes: u64,
        bytes: u64,
        forced: bool,
    },
}

/// Forces the producer and its window (a number of requests) whatever the run's size: for
/// tests, and for a user who wants the run's memory bounded.
pub const WINDOW_ENV: &str = "LLMSPEED_IMAGE_WINDOW";

/// Up front while the images' data URLs take at most this share of the available memory: the
/// run also builds every request body before it starts when its prompts are small
/// (`engine::run`'s prebuilt bodies), each a copy of its images' URLs, and the allocator keeps
/// the pages of the strings the making let go, so an up-front run peaks at about three times
/// its URLs (measured: 955 MB for 320 MiB of URLs, 400 requests of 4 × 640x360), and 3 × 0.25
/// leaves a quarter of the memory to the rest.
pub const UP_FRONT_SHARE: f64 = 0.25;

/// The share of the available memory a run's images may hold at once (made up front, image
/// files read before the run, or the producer's window); the run, its records and the server's
/// replies take the rest.
pub const HOLD_SHARE: f64 = 0.9;

/// Whether `need` bytes fit [`HOLD_SHARE`] of `available`.
fn fits(need: u64, available: u64) -> bool {
    need as f64 <= available as f64 * HOLD_SHARE
}

/// Bytes as GiB, for the refusals' figures.
fn gib(b: u64) -> f64 {
    b as f64 / 1073741824.0
}

/// The producer's window holds at most this share of the available memory, and at most
/// [`WINDOW_MAX_BYTES`]: enough requests made ahead to ride out a burst of arrivals, while the
/// rest of the memory holds the requests in flight and the records.
pub const WINDOW_SHARE: f64 = 0.25;
pub const WINDOW_MAX_BYTES: u64 = 1 << 30;
/// ... and at most this many requests (a window that large rides out any burst already).
pub const WINDOW_MAX_REQUESTS: usize = 4096;

/// [`image_path`] for the dataset `dcfg` on this machine ([`WINDOW_ENV`] read here).
pub fn image_path_of(dcfg: &datasets::DatasetConfig) -> Result<ImagePath, RunError> {
    let forced = match std::env::var(WINDOW_ENV) {
        Ok(v) => Some(
            v.trim()
                .parse::<usize>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or_else(|| {
                    RunError::Setup(format!(
                "{WINDOW_ENV}={v:?}: the producer's window is a number of requests, 1 or more"
            ))
                })?,
        ),
        Err(_) => None,
    };
    // Image files are read up front or not at all: refused here where they would not fit.
    check_image_memory(dcfg)?;
    let need = datasets::image_need(dcfg);
    image_path(need, dcfg.num_prompts, crate::sys::mem_available(), forced).map_err(RunError::Setup)
}

/// How a run's images are made: up front when they take at most [`UP_FRONT_SHARE`] of the
/// `available` memory (or where the kernel gives no figure), else by the producer, its window
/// as many requests as [`WINDOW_SHARE`] of the memory holds (at most [`WINDOW_MAX_BYTES`] and
/// [`WINDOW_MAX_REQUESTS`], at least one, at most the run's `requests`); `forced`: that window,
/// whatever the size. Refused only when even the window takes more than 90% of the memory.
pub fn image_path(
    need: crate::workload::image::ImageNeed,
    requests: usize,
    available: Option<u64>,
    forced: Option<usize>,
) -> Result<ImagePath, String> {
    if need.total == 0 {
        return Ok(ImagePath::None);
    }
    let producer = |window: usize| ImagePath::Producer {
        window: window.clamp(1, requests.max(1)),
        request_bytes: need.per_request_max,
        bytes: need.total,
        forced: forced.is_some(),
    };
    let path = match (forced, available) {
        (Some(w), _) => producer(w),
        (None, None) => return Ok(ImagePath::UpFront { bytes: need.total }),
        (None, Some(a)) if need.total as f64 <= a as f64 * UP_FRONT_SHARE => {
            return Ok(ImagePath::UpFront { bytes: need.total })
        }
        (None, Some(a)) => {
            let budget = ((a as f64 * WINDOW_SHARE) as u64).min(WINDOW_MAX_BYTES);
            let w = budget / need.per_request_max.max(1);
            producer((w as usize).min(WINDOW_MAX_REQUESTS))
        }
    };
    if let (ImagePath::Producer { window, .. }, Some(a)) = (path, available) {
        window_memory_verdict(window as u64 * need.per_request_max, window, a)?;
    }
    Ok(path)
}

/// The producer's window may take up to 90% of the available memory.
fn window_memory_verdict(need: u64, window: usize, available: u64) -> Result<(), String> {
    if fits(need, available) {
        return Ok(());
    }
    Err(format!(
        "this run's images are made during the run, a window of {window} request(s) ahead of \
         the dispatcher, and even that window would hold about {:.1} GiB as data URLs, but \
         this machine has {:.1} GiB available (MemAvailable in /proc/meminfo): send fewer or \
         smaller images per request{}, or run where more memory is free",
        gib(need),
        gib(available),
        if window > 1 {
            format!(", or a smaller window ({WINDOW_ENV})")
        } else {
            String::new()
        }
    ))
}

/// The line on `log` for the producer path: the window, what it holds, and why.
fn note_producer(path: &ImagePath, requests: usize, log: &mut (dyn Write + Send)) {
    let ImagePath::Producer {
        window,
        request_bytes,
        bytes,
        forced,
    } = *path
    else {
        return;
    };
    let mib = |b: u64| b as f64 / 1048576.0;
    let _ = writeln!(
        log,
        "images: made during the run by a producer {window} request(s) ahead of the dispatcher \
         (of {requests}), on {}: the window holds at most about {:.1} MiB of data URLs, where \
         all made before the run would hold about {:.1} MiB ({}); a request whose images are \
         not made by its send time waits, and the wait is the client's dispatch lag",
        threads(),
        mib(window as u64 * request_bytes),
        mib(bytes),
        match forced {
            true => format!("{WINDOW_ENV} asks for the producer"),
            false => format!(
                "over {:.0}% of the memory available",
                UP_FRONT_SHARE * 100.0
            ),
        }
    );
}

/// The pool's threads, as words.
fn threads() -> String {
    match rayon::current_num_threads() {
        1 => "1 thread".to_string(),
        n => format!("{n} threads"),
    }
}

/// Refuses, before any file is read, a run (or dry run) whose images come from files read
/// before it and held until it ends (`custom_image`; [`datasets::file_image_need`]), where
/// their data URLs would not fit in the memory the machine has available (`MemAvailable`).
/// Synthetic images never need this: a run too large to hold makes them during the run
/// ([`image_path`]), a dry run counts each and drops it. Where the kernel gives no figure,
/// nothing is checked.
pub fn check_image_memory(dcfg: &datasets::DatasetConfig) -> Result<(), RunError> {
    let need = datasets::file_image_need(dcfg).total;
    match (need, crate::sys::mem_available()) {
        (0, _) | (_, None) => Ok(()),
        (need, Some(available)) => image_memory_verdict(need, available).map_err(RunError::Setup),
    }
}

/// The verdict of [`check_image_memory`]: the images may take up to 90% of the available
/// memory (the run, its records and the server's replies take the rest).
pub fn image_memory_verdict(need: u64, available: u64) -> Result<(), String> {
    if fits(need, available) {
        return Ok(());
    }
    Err(format!(
        "this run's image files are read before the run and held until it ends, and their \
         data URLs would hold about {:.1} GiB, but this machine has {:.1} GiB available \
         (MemAvailable in /proc/meminfo): lower --num-prompts, send fewer or smaller images \
         per request, leave out --custom-ensure-client-side-data (the server then reads each \
         file itself, as vLLM's default sends it), or run where more memory is free",
        gib(need),
        gib(available)
    ))
}

/// What became of a dataset's images once made (or read) and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagesKept {
    /// Each dropped once counted (the dry run).
    Dropped,
    /// Made before the run and held in memory until it ends.
    Held,
}

/// A line on `log` for a dataset's images: how many, how long making them took on how many
/// threads, and what they hold (pixels, encoded bytes, data URLs), said as `kept` has it.
pub fn note_images(
    totals: Option<&crate::workload::image::ImageTotals>,
    took: std::time::Duration,
    kept: ImagesKept,
    log: &mut (dyn Write + Send),
) {
    let Some(t) = totals else { return };
    let mib = t.url_bytes as f64 / 1048576.0;
    let (made, dropped, urls) = match kept {
        ImagesKept::Dropped => (
            "made and counted",
            ", each dropped once counted",
            format!("{mib:.1} MiB of data URLs"),
        ),
        ImagesKept::Held => (
            "made before the run",
            "",
            format!("their data URLs hold {mib:.1} MiB until the run ends"),
        ),
    };
    let _ = writeln!(
        log,
        "images: {} {made} in {:.1} s on {}{dropped}: {} pixels, {} bytes encoded, {urls}",
        t.images,
        took.as_secs_f64(),
        threads(),
        t.pixels,
        t.encoded_bytes,
    );
}

/// What the server offers (its vocabulary, `/tokenize`, whether it takes token ids), read
/// once before the dataset loads.
async fn server_info(
    client: &Client,
    model: &str,
    cancel: &Cancel,
) -> Result<ServerInfo, RunError> {
    let facts = async { collect(client, Some(model)).await.map_err(RunError::Setup) };
    let collected = unless_stopped(cancel, "reading what the server offers", facts).await?;
    Ok(detect(&collected, &Overrides::default()))
}

/// The `/tokenize` dialect the probe verified; where it failed, a `note:` on `log` says why.
fn tokenize_dialect(info: &ServerInfo, log: &mut (dyn Write + Send)) -> Option<TokenizeDialect> {
    let dialect = info.tokenize.map(|t| t.dialect);
    if let (None, Some(e)) = (dialect, &info.tokenize_error) {
        let _ = writeln!(log, "note: the server's /tokenize failed: {e}");
    }
    dialect
}

/// The plan's dataset settings fitted to the server and the tokenizer: random ids inside the
/// server's vocabulary, and the reference's length draws given the tokenizer's special tokens
/// (vLLM) or vocabulary (SGLang): the local tokenizer's, else none and the server's vocabulary.
fn fitted(
    dataset: &datasets::DatasetConfig,
    info: &ServerInfo,
    local: Option<&LocalTokenizer>,
) -> datasets::DatasetConfig {
    let mut dcfg = dataset.clone();
    if let Some(r) = datasets::IdRange::from_range(token_id_range(info.vocab.map(|f| f.value))) {
        dcfg.ids = r;
    }
    dcfg.random_draws = match dcfg.random_draws {
        datasets::RandomDraws::Vllm { .. } => datasets::RandomDraws::Vllm {
            special: local.map_or(0, LocalTokenizer::num_special_tokens),
        },
        datasets::RandomDraws::Sglang { offsets, text, .. } => datasets::RandomDraws::Sglang {
            vocab: local.map_or(dcfg.ids.end(), LocalTokenizer::vocab_size),
            offsets,
            text,
        },
    };
    dcfg
}

/// SGLang's `random` with its ShareGPT file: `Some(text)` where a local tokenizer is loaded to
/// cut it with (`datasets::load` then cuts, as text or as token ids); with none it draws token
/// ids of the lengths instead, said in a `note:`.
fn sglang_cuts(
    dcfg: &datasets::DatasetConfig,
    local: bool,
    log: &mut (dyn Write + Send),
) -> Option<bool> {
    let datasets::RandomDraws::Sglang { text, .. } = dcfg.random_draws else {
        return None;
    };
    if !dcfg.cuts_sharegpt() || dcfg.path.is_none() {
        return None;
    }
    if !local {
        let _ = writeln!(
            log,
            "note: SGLang's random cuts ShareGPT conversations with the model's tokenizer; \
             with no local tokenizer loaded (--tokenizer) the prompts are random token ids of \
             the drawn lengths"
        );
    }
    local.then_some(text)
}

/// The prompt fitting through `/detokenize` and `/tokenize`, as a set-up step.
pub const FITTING: &str = "fitting the prompts to their lengths (/detokenize, /tokenize)";

/// Counts a text's tokens the way asked ([`counter_fn`]).
type CountWith = Arc<dyn Fn(TokenCounting, &str) -> Result<u64, String> + Send + Sync>;

/// Counts a text's tokens the way asked: the server's `/tokenize` (called back into the
/// runtime from a blocking thread), the local tokenizer, or bytes / 4. After a stop it counts
/// nothing more, so the blocking thread ends soon after the step was abandoned.
fn counter_fn(
    client: &Client,
    model: &str,
    local: Option<Arc<LocalTokenizer>>,
    cancel: &Cancel,
) -> impl Fn(TokenCounting, &str) -> Result<u64, String> + Send + Sync + 'static {
    let handle = tokio::runtime::Handle::current();
    let (client, model, cancel) = (client.clone(), model.to_string(), cancel.clone());
    move |how: TokenCounting, t: &str| -> Result<u64, String> {
        if cancel.is_cancelled() {
            return Err("stopped".to_string());
        }
        match how {
            TokenCounting::Server(d) => handle.block_on(server_count(&client, d, &model, t)),
            TokenCounting::Local => match &local {
                Some(tok) => tok.count(t).map_err(|e| e.to_string()),
                None => Err("no local tokenizer loaded".to_string()),
            },
            _ => Ok(datasets::estimate_tokens(t)),
        }
    }
}

/// Loads the dataset on a blocking thread (loading is synchronous; its token counter calls
/// back into the runtime, only before the measured run).
async fn load<C>(
    dcfg: datasets::DatasetConfig,
    mut tokens: DatasetTokens<C>,
    making: crate::workload::image::Making,
) -> Result<Vec<Sample>, RunError>
where
    C: FnMut(&str) -> Result<u64, String> + Send + 'static,
{
    tokio::task::spawn_blocking(move || datasets::load_with(&dcfg, &mut tokens, making))
        .await
        .map_err(|e| RunError::Setup(format!("dataset loading failed: {e}")))?
        .map_err(RunError::from)
}

/// The server the token-id prompts are fitted to, and the run's stop.
struct Server<'a> {
    client: &'a Client,
    model: &'a str,
    cancel: &'a Cancel,
    /// The `/tokenize` dialect the probe verified.
    dialect: Option<TokenizeDialect>,
    /// The probe saw the server accept token ids from both ends of the range.
    takes_ids: bool,
}

/// Token-id prompts as they are sent, with how they were counted: ids where the server takes
/// them; on an endpoint that takes text only, text through the server's `/detokenize` where it
/// has one; else natural text sized by `counter` (by each request's `usage.prompt_tokens` when
/// there is none).
async fn as_sent(
    server: &Server<'_>,
    plan: &Plan,
    counter: Option<TokenCounting>,
    mut samples: Vec<Sample>,
    count_with: CountWith,
    log: &mut (dyn Write + Send),
) -> Result<(Vec<Sample>, TokenCounting, PromptKind), RunError> {
    // TGI's /generate_stream and the Responses API take text only, as the chat endpoint does.
    let chat = plan.chat || plan.dialect.text_only();
    if !chat && server.takes_ids {
        return Ok((samples, TokenCounting::Exact, PromptKind::TokenIds));
    }
    let (client, model, cancel) = (server.client, server.model, server.cancel);
    if let Some(d) = server.dialect.filter(|d| chat && d.has_detokenize()) {
        let _ = writeln!(
            log,
            "fitting {} prompts to their lengths through the server's /detokenize and /tokenize",
            samples.len()
        );
        let fit = async { Ok::<_, RunError>(detokenize_all(client, d, model, &mut samples).await) };
        match unless_stopped(cancel, FITTING, fit).await? {
            Ok(()) => return Ok((samples, TokenCounting::Exact, PromptKind::Detokenized)),
            Err(e) => {
                let _ = writeln!(
                    log,
                    "note: {e}; sending natural text of a measured length instead"
                );
            }
        }
    }
    let why = if chat {
        "the endpoint takes no token ids"
    } else {
        "the server did not accept token ids from the range probed"
    };
    let counting = counter.unwrap_or(TokenCounting::Usage);
    let _ = writeln!(
        log,
        "note: {why}; prompts are natural text sized by {}",
        counting.as_str()
    );
    let sizing = to_text(samples, counting, plan.dataset.seed, count_with);
    let samples = unless_stopped(cancel, "sizing the prompts as natural text", sizing).await?;
    Ok((samples, counting, PromptKind::Text))
}

/// Token-id prompts rewritten as natural text of their lengths, sized by `counting` (by each
/// request's `usage.prompt_tokens` when that is all there is).
async fn to_text(
    mut samples: Vec<Sample>,
    counting: TokenCounting,
    seed: u64,
    count_with: CountWith,
) -> Result<Vec<Sample>, RunError> {
    tokio::task::spawn_blocking(move || {
        let mut count = |t: &str| count_with(counting, t);
        let c: Option<&mut dyn datasets::Tokens> = match counting {
            TokenCounting::Usage => None,
            _ => Some(&mut count),
        };
        datasets::to_text(&mut samples, seed, c).map(|()| samples)
    })
    .await
    .map_err(|e| RunError::Setup(format!("dataset loading failed: {e}")))?
    .map_err(RunError::from)
}

/// Every token-id prompt through `/detokenize`, fitted to its length ([`fit_detokenized`]);
/// all or nothing (the first failure is the error, and the samples are left as they were).
///
/// A prompt with a shared prefix (`prefix_repetition`, SGLang's generated-shared-prefix) is
/// fitted in two parts: its group's prefix once, then its own ids after it. Fitted whole, the
/// cut that brings the server's count down to the length falls at the end, on the prompt's own
/// tokens: random ids re-encode about 20% longer on a byte-level BPE vocabulary, so a prefix of
/// 2048 ids alone would outgrow a 2176-token prompt and every prompt of a group would be the same
/// text (a benchmark of one cached prompt). The two texts are joined as they are; the prompt's
/// length is the server's count of the whole.
async fn detokenize_all(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    samples: &mut [Sample],
) -> Result<(), String> {
    let mut ids = Vec::new();
    let mut texts = Vec::with_capacity(samples.len());
    // Each group's prefix, fitted once: by the address of the ids the group's prompts share.
    let mut prefixes: HashMap<usize, (String, u64)> = HashMap::new();
    for s in samples.iter() {
        ids.clear();
        if !s.write_ids(&mut ids) {
            texts.push(None);
            continue;
        }
        let shared = match &s.prompt {
            PromptSource::Synthetic { prefix, .. }
                if !prefix.is_empty() && prefix.len() < ids.len() =>
            {
                Some(prefix)
            }
            _ => None,
        };
        let Some(prefix) = shared else {
            texts.push(Some(
                fit_detokenized(client, dialect, model, &mut ids, s.prompt_len).await?,
            ));
            continue;
        };
        let key = Arc::as_ptr(prefix) as *const u32 as usize;
        let (head, head_len) = match prefixes.get(&key) {
            Some(p) => p.clone(),
            None => {
                let (mut p, len) = (prefix.to_vec(), prefix.len() as u64);
                let fitted = fit_detokenized(client, dialect, model, &mut p, len).await?;
                prefixes.insert(key, fitted.clone());
                fitted
            }
        };
        let own = ids.split_off(prefix.len());
        let target = s.prompt_len;
        texts.push(Some(
            fit_after(client, dialect, model, &head, own, target, head_len).await?,
        ));
    }
    for (s, t) in samples.iter_mut().zip(texts) {
        if let Some((text, len)) = t {
            s.prompt.set_text(text);
            s.prompt_len = len;
        }
    }
    Ok(())
}

/// `head` (a shared prefix's fitted text, `head_len` tokens) and text of the prompt's own ids
/// after it, the whole counted by the server as close to `target` as the rounds get: the seam
/// can merge or split tokens, so each round fits the own text again to what the last whole came
/// out short or long by.
async fn fit_after(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    head: &str,
    own: Vec<u32>,
    target: u64,
    head_len: u64,
) -> Result<(String, u64), String> {
    let mut want = target.saturating_sub(head_len).max(1);
    let mut best: Option<(String, u64)> = None;
    for _ in 0..SEAM_ROUNDS {
        let (tail, _) = fit_detokenized(client, dialect, model, &mut own.clone(), want).await?;
        let text = format!("{head}{tail}");
        let n = server_ids(client, dialect, model, &text).await?.len() as u64;
        if best
            .as_ref()
            .is_none_or(|(_, b)| n.abs_diff(target) < b.abs_diff(target))
        {
            best = Some((text, n));
        }
        if n == target {
            break;
        }
        want = (want + target).saturating_sub(n).max(1);
    }
    best.ok_or_else(|| "no fitting round ran".to_string())
}

/// Rounds of fitting a shared prefix's prompt across the seam ([`fit_after`]).
const SEAM_ROUNDS: usize = 4;

/// Rounds of fitting a detokenized prompt to its length, as vLLM's
/// `gen_prompt_decode_to_target_len` does.
const FIT_ROUNDS: usize = 10;

/// The text of `ids` that the server counts (without special tokens) as `target` tokens, and
/// its count. Random ids rarely come back as many tokens once decoded: on a byte-level BPE
/// vocabulary 200 random ids re-tokenize as about 240 (pieces merge across id boundaries, bytes
/// that are not valid UTF-8 alone are replaced), on the simulated server's about 4.6 times as
/// many. Each round decodes the ids, re-encodes the text, and goes on from the *re-encoded*
/// ids, as vLLM's `gen_prompt_decode_to_target_len` does: after the first round they are the
/// server's own encoding, so a cut of them comes back close to its length. The cut differs from
/// vLLM's, which always cuts to the target: the first round cuts to the target, later ones by
/// the last round's excess from the length sent ([`next_len`]), so a cut whose text re-encodes a
/// few tokens longer (a multi-byte character split at the cut comes back as replacement bytes)
/// is cut shorter next time instead of again at the same place. Too short, the sample's own
/// ids are appended again, each time from where the last append stopped ([`lengthen`]; vLLM
/// appends random ids). After [`FIT_ROUNDS`] the closest text is kept with its true count
/// (as vLLM keeps its mismatch).
async fn fit_detokenized(
    client: &Client,
    dialect: TokenizeDialect,
    model: &str,
    ids: &mut Vec<u32>,
    target: u64,
) -> Result<(String, u64), String> {
    let pool = ids.clone();
    let mut cursor = 0;
    // Whether the ids sent are the server's own encoding (a cut of it): not the dataset's
    // first ids, nor ids appended from them.
    let mut own = false;
    let mut best: Option<(String, u64)> = None;
    for _ in 0..FIT_ROUNDS {
        let sent = ids.len() as u64;
        let text = detokenize(client, dialect, model, ids).await?;
        *ids = server_ids(client, dialect, model, &text).await?;
        let n = ids.len() as u64;
        if best
            .as_ref()
            .is_none_or(|(_, b)| n.abs_diff(target) < b.abs_diff(target))
        {
            best = Some((text, n));
        }
        if n == target || pool.is_empty() {
            break;
        }
        let len = usize::try_from(next_len(own, sent, n, target)).unwrap_or(usize::MAX);
        own = ids.len() > len;
        if own {
            ids.truncate(len);
        } else {
            lengthen(ids, &pool, &mut cursor, len);
        }
    }
    best.ok_or_else(|| "no /detokenize round ran".to_string())
}

/// Appends `pool`'s ids to `ids` until it holds `len`, in the pool's order from `cursor` (which
/// moves on past them), so a round that came back short sends ids no earlier round sent (padded
/// from the same place each time, a prompt can go round the same states until the rounds end).
fn lengthen(ids: &mut Vec<u32>, pool: &[u32], cursor: &mut usize, len: usize) {
    while ids.len() < len && !pool.is_empty() {
        ids.push(pool[*cursor % pool.len()]);
        *cursor += 1;
    }
}

/// How many ids the next fitting round sends, after `sent` ids came back as `n` tokens; `own`:
/// the ids sent were a cut of the server's own encoding. The dataset's ids (the first round's)
/// and ids appended from them are not, so their excess says nothing about a cut: cut to the
/// target. A cut of the server's own encoding comes back long by what the cut's seam adds: take
/// that off what was sent. Never fewer than one id.
fn next_len(own: bool, sent: u64, n: u64, target: u64) -> u64 {
    if !own || n < target {
        target.max(1)
    } else {
        sent.saturating_sub(n - target).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two image lines, worked by hand from the old two functions' texts: the dry run's
    /// (each image dropped) and the run's (each held until it ends); no images, no line.
    #[test]
    fn the_image_line_says_whether_the_images_are_dropped_or_held() {
        let t = crate::workload::image::ImageTotals {
            images: 3,
            pixels: 12,
            encoded_bytes: 345,
            url_bytes: 3 * 1048576 / 2,
            ..Default::default()
        };
        let line = |totals, kept| {
            let mut v = Vec::new();
            note_images(totals, std::time::Duration::from_millis(2500), kept, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(
            line(Some(&t), ImagesKept::Dropped),
            format!(
                "images: 3 made and counted in 2.5 s on {}, each dropped once counted: 12 pixels, 345 bytes encoded, 1.5 MiB of data URLs\n",
                threads()
            )
        );
        assert_eq!(
            line(Some(&t), ImagesKept::Held),
            format!(
                "images: 3 made before the run in 2.5 s on {}: 12 pixels, 345 bytes encoded, their data URLs hold 1.5 MiB until the run ends\n",
                threads()
            )
        );
        assert_eq!(line(None, ImagesKept::Held), "");
    }

    #[test]
    fn images_may_take_nine_tenths_of_the_available_memory() {
        let gib = 1u64 << 30;
        assert!(image_memory_verdict(9 * gib, 10 * gib).is_ok());
        let e = image_memory_verdict(9 * gib + 1, 10 * gib).unwrap_err();
        assert!(
            e.contains("about 9.0 GiB") && e.contains("10.0 GiB available"),
            "{e}"
        );
        assert!(e.contains("lower --num-prompts"), "{e}");
    }

    #[test]
    fn images_go_up_front_while_they_fit_else_through_a_window_refused_only_when_it_cannot() {
        use crate::workload::image::ImageNeed;
        let (gib, mib) = (1u64 << 30, 1u64 << 20);
        let need = |total, per_request_max| ImageNeed {
            total,
            per_request_max,
        };
        let path = |n, requests, avail, forced| image_path(n, requests, avail, forced);
        assert_eq!(path(need(0, 0), 10, Some(gib), None), Ok(ImagePath::None));
        // Up to a quarter of the memory available, and wherever the kernel gives no figure.
        let up = |bytes| Ok(ImagePath::UpFront { bytes });
        let quarter = 2 * gib + 512 * mib;
        assert_eq!(
            path(need(quarter, 4 * mib), 1000, Some(10 * gib), None),
            up(quarter)
        );
        assert!(matches!(
            path(need(quarter + 1, 4 * mib), 1000, Some(10 * gib), None),
            Ok(ImagePath::Producer { window: 256, .. })
        ));
        assert_eq!(path(need(400 * gib, mib), 10, None, None), up(400 * gib));
        // Above it: a quarter of the memory's worth of requests (10 GiB: 2.5 GiB, capped at
        // 1 GiB), each at the most a request carries: 1 GiB / 4 MiB = 256 requests.
        let producer = |window, request_bytes, bytes, forced| {
            Ok(ImagePath::Producer {
                window,
                request_bytes,
                bytes,
                forced,
            })
        };
        assert_eq!(
            path(need(4 * gib + 1, 4 * mib), 10_000, Some(10 * gib), None),
            producer(256, 4 * mib, 4 * gib + 1, false)
        );
        // 1 GiB available: 256 MiB of window, 64 requests of 4 MiB.
        assert_eq!(
            path(need(40 * gib, 4 * mib), 10_000, Some(gib), None),
            producer(64, 4 * mib, 40 * gib, false)
        );
        // Never more than the run's requests, never fewer than one.
        assert_eq!(
            path(need(8 * gib, 800 * mib), 10, Some(4 * gib), None),
            producer(1, 800 * mib, 8 * gib, false)
        );
        assert_eq!(
            path(need(5 * gib, mib), 3, Some(gib), Some(50)),
            producer(3, mib, 5 * gib, true)
        );
        // Forced, whatever the size.
        assert_eq!(
            path(need(10 * mib, mib), 10, Some(10 * gib), Some(2)),
            producer(2, mib, 10 * mib, true)
        );
        // Refused only where even the window takes over 90%: one request of 1 GiB in 1 GiB.
        let e = path(need(100 * gib, gib), 100, Some(gib), None).unwrap_err();
        assert!(e.contains("a window of 1 request(s)"), "{e}");
        assert!(
            e.contains("about 1.0 GiB") && e.contains("1.0 GiB available"),
            "{e}"
        );
        assert!(!e.contains(WINDOW_ENV), "{e}");
        let e = path(need(100 * gib, 300 * mib), 100, Some(gib), Some(4)).unwrap_err();
        assert!(
            e.contains("a window of 4 request(s)") && e.contains(WINDOW_ENV),
            "{e}"
        );
        assert!(path(need(100 * gib, 300 * mib), 100, Some(gib), Some(3)).is_ok());
    }

    #[test]
    fn without_a_tokenizer_a_required_template_stops_and_another_is_noted() {
        let rule = |required| crate::workload::chat_template::Wrap {
            strip_bos: false,
            kwargs: None,
            required,
            hint: "HINT".into(),
        };
        let mut d = datasets::DatasetConfig {
            chat_template: Some(rule(true)),
            ..Default::default()
        };
        let mut log = Vec::new();
        let e = chat_fns(&d, None, None, &mut log).err().expect("stops");
        assert!(e.to_string().contains("HINT"), "{e}");
        d.chat_template = Some(rule(false));
        let f = chat_fns(&d, None, None, &mut log).unwrap();
        assert!(f.wrap.is_none() && f.chat_len.is_none());
        let log = String::from_utf8(log).unwrap();
        assert!(
            log.starts_with("note: the prompts are sent as written"),
            "{log}"
        );
        assert!(log.trim_end().ends_with("HINT"), "{log}");
        d.chat_template = None;
        let f = chat_fns(&d, None, None, &mut Vec::new()).unwrap();
        assert!(f.wrap.is_none() && f.chat_len.is_none());
    }

    #[test]
    fn a_short_round_is_lengthened_with_ids_no_round_sent() {
        // The dataset's ids re-encoded to the first one alone; padded, they must not be the
        // dataset's ids again (the simulated server's tokenizer sent such a prompt round the
        // same two states for all ten rounds, and it went out 7 tokens short).
        let pool: Vec<u32> = (100..124).collect();
        let mut cursor = 0;
        let mut ids = vec![100];
        lengthen(&mut ids, &pool, &mut cursor, 24);
        assert_eq!(ids.len(), 24);
        assert_ne!(ids, pool);
        assert_eq!(ids[..3], [100, 100, 101]);
        // Short again: the next append goes on where the last one stopped.
        ids.truncate(2);
        lengthen(&mut ids, &pool, &mut cursor, 4);
        assert_eq!(ids, [100, 100, 123, 100]);
        // Long enough already: nothing appended, the cursor stays.
        lengthen(&mut ids, &pool, &mut cursor, 3);
        assert_eq!((ids.len(), cursor), (4, 25));
    }

    #[test]
    fn fitting_cuts_the_first_round_to_the_target_and_later_ones_by_their_excess() {
        // Random ids re-encoded 4.6 times longer: the excess says nothing; cut to the target.
        assert_eq!(next_len(false, 64, 298, 64), 64);
        // The server's own ids, cut at 192, came back 195: the seam adds 3; send 189.
        assert_eq!(next_len(true, 192, 195, 192), 189);
        // Short: grow back to the target whatever the round.
        assert_eq!(next_len(true, 189, 190, 192), 192);
        // Never an empty prompt.
        assert_eq!(next_len(true, 2, 50, 1), 1);
        // Lengthened from the dataset's ids, 24 came back as 70: cut to the target, not to
        // 24 - 46 (a 24-token prompt of the simulated server went out as 1 id, then 17 tokens).
        assert_eq!(next_len(false, 24, 70, 24), 24);
    }
}
