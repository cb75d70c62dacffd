//! `vllm bench serve`'s datasets: `random`, `sharegpt`, `sonnet`, `custom`, `prefix_repetition`.
//!
//! Owns turning dataset flags (and files) into [`Sample`]s: a prompt, its length in tokens and
//! the output length to ask for, deterministic for a seed. It must never do network IO or read
//! a clock: where a text must be measured in tokens, the caller passes a counter (the runner
//! uses the server's `/tokenize`).
//!
//! Random prompts are token ids built arithmetically from a per-prompt offset, as vLLM does
//! (`(offset + i + j) mod vocab`), so a prompt costs one pass over its ids, and a [`Sample`]
//! only stores `(offset, length)` until [`Sample::write_ids`] materialises it: 100,000 prompts
//! of 8K tokens never need 3 GB of ids at once.

use crate::workload::numpy::{self, Generator, RandomState};
use crate::workload::pyrandom::PyRandom;
use crate::workload::trace;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::workload::sample::{
    DatasetError, IdRange, PromptSource, Sample, VOCAB_LO, VOCAB_SPAN,
};

/// Which dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetKind {
    Random,
    ShareGpt,
    Sonnet,
    Custom,
    PrefixRepetition,
    /// vLLM's `timed_trace`: a Mooncake-style JSONL trace.
    TimedTrace,
    /// SGLang's `openai`: JSON lines of whole chat requests.
    ChatRequests,
    /// vLLM's `burstgpt`: the BurstGPT trace's CSV, its GPT-4 rows' lengths.
    BurstGpt,
    /// vLLM's `random-mm`: `random`'s prompts with images (`workload::random_mm`).
    RandomMm,
}

impl DatasetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Random => "random",
            DatasetKind::ShareGpt => "sharegpt",
            DatasetKind::Sonnet => "sonnet",
            DatasetKind::Custom => "custom",
            DatasetKind::PrefixRepetition => "prefix_repetition",
            DatasetKind::TimedTrace => "timed_trace",
            DatasetKind::ChatRequests => "openai",
            DatasetKind::BurstGpt => "burstgpt",
            DatasetKind::RandomMm => "random-mm",
        }
    }

    /// Parses `--dataset-name`; vLLM's other names are known but refused clearly.
    pub fn parse(s: &str) -> Result<DatasetKind, String> {
        match s {
            "random" => Ok(DatasetKind::Random),
            "sharegpt" => Ok(DatasetKind::ShareGpt),
            "sonnet" => Ok(DatasetKind::Sonnet),
            "custom" => Ok(DatasetKind::Custom),
            "prefix_repetition" => Ok(DatasetKind::PrefixRepetition),
            "timed_trace" => Ok(DatasetKind::TimedTrace),
            "burstgpt" => Ok(DatasetKind::BurstGpt),
            "random-mm" => Ok(DatasetKind::RandomMm),
            "hf" | "random-rerank" | "spec_bench" => Err(format!(
                "--dataset-name {s} is not supported yet by llmspeed (supported: random, random-mm, sharegpt, sonnet, custom, prefix_repetition, timed_trace, burstgpt)"
            )),
            _ => Err(format!(
                "unknown --dataset-name {s:?} (supported: random, random-mm, sharegpt, sonnet, custom, prefix_repetition, timed_trace, burstgpt)"
            )),
        }
    }
}

/// Inclusive `(input, output)` length bounds of a random dataset.
pub type Bounds = ((u32, u32), (u32, u32));

/// Every dataset flag, with vLLM's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetConfig {
    pub kind: DatasetKind,
    pub path: Option<PathBuf>,
    pub num_prompts: usize,
    pub seed: u64,
    pub random_input_len: u32,
    pub random_output_len: u32,
    pub random_range_ratio: f64,
    /// vLLM's `--random-range-ratio '{"input": a, "output": b}'`: the output's ratio, where
    /// `random_range_ratio` is then the input's (`None`: one ratio for both).
    pub random_output_range_ratio: Option<f64>,
    /// Inclusive `(input, output)` length bounds that replace the range ratio's (SGLang's
    /// reading of its ratio, set by `bench sglang`).
    pub random_bounds: Option<Bounds>,
    /// Whose numpy draws the `random` dataset's lengths are, so a seed gives the reference's.
    pub random_draws: RandomDraws,
    pub random_prefix_len: u32,
    pub sharegpt_output_len: Option<u32>,
    pub sonnet_input_len: u32,
    pub sonnet_output_len: u32,
    pub sonnet_prefix_len: u32,
    pub prefix_repetition_prefix_len: u32,
    pub prefix_repetition_suffix_len: u32,
    pub prefix_repetition_num_prefixes: u32,
    pub prefix_repetition_output_len: u32,
    /// `--custom-output-len`: every custom row's output length; `None` (vLLM's -1): each row's
    /// `output_tokens`, which every row must then have.
    pub custom_output_len: Option<u32>,
    /// Token ids random prompts draw from (the runner narrows it to the server's vocabulary).
    pub ids: IdRange,
    /// `--timed-trace-*` (the `timed_trace` dataset).
    pub trace: crate::workload::trace::TraceConfig,
    /// Shuffle the rows of sharegpt and custom, and the prompts of prefix_repetition, by the
    /// seed (vLLM's `--disable-shuffle` turns it off: rows in file order).
    pub shuffle: bool,
    /// Repeat samples drawn at random until there are `num_prompts` (vLLM's `--no-oversample`
    /// turns it off: a short file sends what it has).
    pub oversample: bool,
    /// Whose rules `sharegpt` reads its file and filters its conversations by.
    pub conversations: Conversations,
    /// SGLang's `--prompt-suffix` (its `sharegpt` and `custom`): appended to each prompt, before
    /// its "Assistant:" ([`with_suffix`]); empty: none.
    pub prompt_suffix: String,
    /// SGLang's `generated-shared-prefix` (`None`: vLLM's `prefix_repetition`).
    pub prefix_groups: Option<PrefixGroups>,
    /// Wrap each text prompt of the file datasets (custom; SGLang's sharegpt and custom) in the
    /// model's chat template before it is counted and sent; `load`'s `wrap` does it.
    pub chat_template: Option<crate::workload::chat_template::Wrap>,
    /// `--random-mm-*` (the `random-mm` dataset).
    pub random_mm: crate::workload::random_mm::MmSettings,
}

/// SGLang 0.5.23's `generated-shared-prefix` (`prefix_groups`): drawn lengths, a group
/// distribution, turns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefixGroups {
    /// `--gsp-range-ratio` r: each group's prefix length, and each prompt's suffix and output
    /// length, drawn from `[max(int(L*r), 1), L]` (0 stays 0), as SGLang draws them; 1 is exact.
    pub range_ratio: f64,
    /// `--gsp-group-distribution zipf --gsp-zipf-alpha a`: each prompt's group drawn with
    /// probability proportional to `1 / rank^a` (rank 1 is group 0, the hottest), from a
    /// generator of its own (numpy's `default_rng(seed)`, as SGLang) so the prompts are those
    /// of the uniform draw; `None`: uniform, every group its `num_prompts / groups` prompts.
    pub zipf_alpha: Option<f64>,
    /// `--gsp-num-turns`: SGLang draws a question length for every turn of every prompt.
    pub turns: u32,
}

/// Whose numpy draws the `random` dataset makes (`workload::numpy`): for a seed, each request's
/// input and output length is the one the reference tool draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandomDraws {
    /// vLLM 0.33: `np.random.default_rng(seed)`; every input length, then every output length,
    /// then every prompt's offset. The input range is drawn for `--random-input-len` less the
    /// `special` tokens the tokenizer adds to a text (vLLM's prompts are text the server adds
    /// them to), and they are added back to each drawn length: llmspeed's token ids reach the
    /// server as sent, so the server counts for each request what it counts for vLLM's.
    Vllm { special: u32 },
    /// SGLang 0.5.23: the legacy generator `np.random.seed(seed)` seeds; every input length,
    /// then every output length, then (`random-ids`; its `random` cuts ShareGPT text instead,
    /// `offsets` false) every prompt's offset below the tokenizer's `vocab` size (`vocab`
    /// decides how many draws that takes, and SGLang's send times are drawn next from the same
    /// generator: [`random_numpy_words`]). `text`: SGLang sends the prompts as decoded text
    /// (without `--tokenize-prompt`), its `random` cuts then shortened by the tokenizer's
    /// special tokens ([`sglang_sharegpt_cuts`]).
    Sglang {
        vocab: u32,
        offsets: bool,
        text: bool,
    },
}

impl Default for RandomDraws {
    fn default() -> Self {
        RandomDraws::Vllm { special: 0 }
    }
}

/// Whose rules the `sharegpt` dataset follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversations {
    /// vLLM 0.33's: a JSON list; turns 0 and 1 of each entry with at least two, whatever their
    /// roles; prompt and output at least 4 tokens (the output check skipped with a fixed output
    /// length), prompt at most 1024, both together at most 2048; a short file oversampled
    /// (unless `oversample` is off).
    Vllm,
    /// SGLang 0.5.23's `sharegpt` and `custom`: turns 0 and 1 of each entry's `conversations`
    /// (or `conversation`) list, whatever their roles; prompt and output at least 2 tokens;
    /// with `context_len` (`--sharegpt-context-len`, 0 is none), prompt + output at most it;
    /// a short file sends what passed, never oversampled.
    Sglang {
        /// `custom`: JSON lines, a line that is not JSON skipped, a turn's text under `content`
        /// or `value` (missing: empty). Else `sharegpt`: one JSON list, the text under `value`.
        lines: bool,
        context_len: Option<u32>,
    },
}

impl DatasetConfig {
    /// SGLang's `random`, whose prompts are its ShareGPT file cut to the drawn lengths
    /// ([`sglang_sharegpt_cuts`], given a tokenizer to cut with).
    pub fn cuts_sharegpt(&self) -> bool {
        self.kind == DatasetKind::Random
            && matches!(
                self.random_draws,
                RandomDraws::Sglang { offsets: false, .. }
            )
    }
}

impl Default for DatasetConfig {
    fn default() -> Self {
        Self {
            kind: DatasetKind::Random,
            path: None,
            num_prompts: 1000,
            seed: 0,
            random_input_len: 1024,
            random_output_len: 128,
            random_range_ratio: 0.0,
            random_output_range_ratio: None,
            random_bounds: None,
            random_draws: RandomDraws::default(),
            random_prefix_len: 0,
            sharegpt_output_len: None,
            sonnet_input_len: 550,
            sonnet_output_len: 150,
            sonnet_prefix_len: 200,
            prefix_repetition_prefix_len: 256,
            prefix_repetition_suffix_len: 256,
            prefix_repetition_num_prefixes: 10,
            prefix_repetition_output_len: 128,
            custom_output_len: Some(256),
            ids: IdRange::DEFAULT,
            trace: Default::default(),
            shuffle: true,
            oversample: true,
            conversations: Conversations::Vllm,
            prompt_suffix: String::new(),
            prefix_groups: None,
            chat_template: None,
            random_mm: Default::default(),
        }
    }
}

/// Counts the tokens of a text (the server's `/tokenize`, or an estimate).
pub type TokenCounter<'a> = dyn FnMut(&str) -> Result<u64, String> + 'a;

/// Turns a dataset's prompt into the text sent (the model's chat template around it, by
/// [`DatasetConfig::chat_template`]'s rule).
pub type PromptWrap<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// The input length of one chat request (a JSON object with `messages`), by the tool's rule
/// (SGLang's `openai` dataset: the messages through the chat template, and the tools).
pub type ChatLen<'a> = dyn FnMut(&str) -> Result<u64, String> + 'a;

/// A text's token ids, special tokens added (the model's tokenizer).
pub type Encode<'a> = dyn FnMut(&str) -> Result<Vec<u32>, String> + 'a;

/// The text of token ids (the model's tokenizer).
pub type Decode<'a> = dyn FnMut(&[u32]) -> Result<String, String> + 'a;

/// Builds the samples. `count` measures texts (sharegpt, sonnet, custom); token-id datasets
/// never call it. `wrap`, where given, turns each prompt of the datasets that render a chat
/// template (custom; SGLang's sharegpt and custom) into the text sent, before it is counted.
/// `chat_len` measures the rows of a dataset of whole chat requests, which needs it.
pub fn load(
    cfg: &DatasetConfig,
    count: &mut TokenCounter<'_>,
    wrap: Option<&mut PromptWrap<'_>>,
    chat_len: Option<&mut ChatLen<'_>>,
) -> Result<Vec<Sample>, DatasetError> {
    let samples = match cfg.kind {
        DatasetKind::Random => random(cfg),
        DatasetKind::PrefixRepetition => prefix_repetition(cfg),
        DatasetKind::ShareGpt => sharegpt(cfg, count, wrap),
        DatasetKind::Sonnet => sonnet(cfg, count),
        DatasetKind::Custom => custom(cfg, count, wrap),
        DatasetKind::TimedTrace => timed_trace(cfg),
        DatasetKind::BurstGpt => burstgpt(cfg),
        DatasetKind::RandomMm => crate::workload::random_mm::load(cfg, &cfg.random_mm),
        DatasetKind::ChatRequests => match chat_len {
            Some(len) => chat_requests(cfg, len),
            None => Err(DatasetError::Invalid(
                "a dataset of chat requests needs the model's chat template to count its rows"
                    .into(),
            )),
        },
    }?;
    // Callers index samples round-robin (warm-ups): an empty set must be an error here.
    if samples.is_empty() {
        return Err(DatasetError::Invalid(format!(
            "--dataset-name {} produced no prompts (is --num-prompts 0?)",
            cfg.kind.as_str()
        )));
    }
    Ok(samples)
}

/// `[floor(L(1-r)), ceil(L(1+r))]`, at least 1 token: Python's reading of the range ratio.
pub fn range_bounds(len: u32, ratio: f64) -> (u32, u32) {
    let lo = (len as f64 * (1.0 - ratio)).floor().max(1.0) as u32;
    let hi = (len as f64 * (1.0 + ratio)).ceil().max(lo as f64) as u32;
    (lo, hi)
}

/// The `timed_trace` dataset: one token-id sample per row, in file order.
fn timed_trace(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let path = cfg
        .path
        .as_deref()
        .ok_or(DatasetError::NoPath("timed_trace"))?;
    let rows = trace::read(path, &cfg.trace, cfg.num_prompts)?;
    Ok(trace::rows_to_samples(
        &rows,
        cfg.trace.chunk_hash_size,
        cfg.ids,
        cfg.seed,
        cfg.trace.rounds,
    ))
}

/// vLLM 0.33's `burstgpt`: the BurstGPT trace's CSV (`--dataset-path`), its rows whose `Model`
/// is `GPT-4` and whose `Response tokens` are above 0; `num_prompts` of them picked as pandas'
/// `DataFrame.sample(n, random_state=--seed)` picks them (numpy's legacy `choice`: a permutation's
/// first n, with replacement when more are asked than there are rows); request i a token-id
/// prompt of the row's `Request tokens` (`(i + j) mod V`, as vLLM's) asking for its `Response
/// tokens`.
fn burstgpt(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let fmt = |msg: String| DatasetError::Format {
        path: path.display().to_string(),
        msg,
    };
    let rows = burstgpt_rows(&text).map_err(fmt)?;
    if rows.is_empty() {
        return Err(fmt(
            "no row to send: none has Model GPT-4 and Response tokens above 0 (vLLM's filter)"
                .into(),
        ));
    }
    let n = cfg.num_prompts;
    let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
    let picked = np
        .choice(rows.len(), n, n > rows.len())
        .ok_or_else(|| DatasetError::Invalid("no rows to pick from".into()))?;
    let ids = cfg.ids;
    Ok(picked
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let (input, output) = rows[r];
            Sample {
                group: None,
                prompt: PromptSource::Synthetic {
                    prefix: Arc::from(Vec::new()),
                    start: (i as u64 % ids.span as u64) as u32,
                    len: input,
                    ids,
                },
                prompt_len: input as u64,
                output_len: output,
            }
        })
        .collect())
}

/// The (request, response) token counts of a BurstGPT CSV's rows that vLLM keeps, in file
/// order; the columns found by their header names.
pub fn burstgpt_rows(text: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| format!("not CSV: {e}"))?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h.trim() == name).ok_or_else(|| {
            format!("no {name:?} column (BurstGPT's CSV has Model, Request tokens and Response tokens)")
        })
    };
    let (model, request, response) = (
        col("Model")?,
        col("Request tokens")?,
        col("Response tokens")?,
    );
    let mut rows = Vec::new();
    for (i, record) in rdr.records().enumerate() {
        let line = i + 2;
        let record = record.map_err(|e| format!("line {line}: {e}"))?;
        let tokens = |c: usize, name: &str| -> Result<i64, String> {
            let v = record.get(c).unwrap_or("").trim();
            v.parse::<i64>()
                .map_err(|_| format!("line {line}: {name} is {v:?}, not a whole number"))
        };
        if record.get(model).map(str::trim) != Some("GPT-4") {
            continue;
        }
        let out = tokens(response, "Response tokens")?;
        if out <= 0 {
            continue;
        }
        let input = tokens(request, "Request tokens")?;
        let fit = |v: i64, name: &str| {
            u32::try_from(v).map_err(|_| format!("line {line}: {name} {v} is out of range"))
        };
        rows.push((fit(input, "Request tokens")?, fit(out, "Response tokens")?));
    }
    Ok(rows)
}

/// The `random` dataset.
pub fn random(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    random_then(cfg).map(|(samples, _)| samples)
}

/// The `random` dataset and, for vLLM's draws, the generator they leave (`random-mm` goes on
/// drawing from it).
pub fn random_then(cfg: &DatasetConfig) -> Result<(Vec<Sample>, Option<Generator>), DatasetError> {
    let mut drawn = random_lengths(cfg)?;
    // The ids themselves are llmspeed's (a range every tokenizer shares, sent as ids): the
    // references decode theirs to text, so only the lengths can be the same.
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let ids = cfg.ids;
    let prefix: Arc<[u32]> = random_ids(&mut rng, cfg.random_prefix_len as usize, ids).into();
    let out = (0..cfg.num_prompts)
        .map(|i| {
            let len = drawn.input[i];
            // vLLM and SGLang: (offset + i + arange(len)) % vocab.
            let start =
                ((drawn.offsets[i] % ids.span as u64) as u32 + i as u32 % ids.span) % ids.span;
            Sample {
                group: None,
                prompt: PromptSource::Synthetic {
                    prefix: prefix.clone(),
                    start,
                    len,
                    ids,
                },
                prompt_len: prefix.len() as u64 + len as u64,
                output_len: drawn.output[i],
            }
        })
        .collect();
    Ok((out, drawn.rest.take()))
}

/// Each request's drawn lengths and offset, and how many 32-bit words the draws took.
struct Drawn {
    input: Vec<u32>,
    output: Vec<u32>,
    offsets: Vec<u64>,
    words: u64,
    /// vLLM's generator after the draws.
    rest: Option<Generator>,
}

fn random_lengths(cfg: &DatasetConfig) -> Result<Drawn, DatasetError> {
    let n = cfg.num_prompts;
    match cfg.random_draws {
        RandomDraws::Vllm { special } => {
            let ri = cfg.random_range_ratio;
            let ro = cfg.random_output_range_ratio.unwrap_or(ri);
            for r in [ri, ro] {
                if !(0.0..1.0).contains(&r) {
                    return Err(DatasetError::Invalid(format!(
                        "--random-range-ratio must be in [0, 1), got {r}"
                    )));
                }
            }
            // vLLM: [floor(L(1-r)), ceil(L(1+r))], the input's L less the special tokens, the
            // output's at least 1.
            let span = |l: u32, r: f64| {
                let l = l as f64;
                (
                    (l * (1.0 - r)).floor() as u32,
                    (l * (1.0 + r)).ceil() as u32,
                )
            };
            let real = cfg.random_input_len.saturating_sub(special);
            let (in_lo, in_hi) = span(real, ri);
            let (out_lo, out_hi) = span(cfg.random_output_len, ro);
            let (out_lo, out_hi) = (out_lo.max(1), out_hi.max(1));
            // vLLM's refusal: no drawn prompt may be empty before the special tokens.
            if cfg.random_prefix_len + in_lo == 0 {
                return Err(DatasetError::Invalid(format!(
                    "--random-input-len {} is too small: less the tokenizer's {special} special \
                     tokens and with input range ratio {ri}, the shortest prompt would be empty; \
                     raise --random-input-len or --random-prefix-len, or lower the ratio",
                    cfg.random_input_len
                )));
            }
            let mut g = Generator::new(cfg.seed);
            let mut draw = |lo: u32, hi: u32| -> Vec<u32> {
                (0..n)
                    .map(|_| g.integers(lo as i64, hi as i64 + 1) as u32)
                    .collect()
            };
            let input = draw(in_lo, in_hi)
                .into_iter()
                .map(|l| l + special)
                .collect();
            let output = draw(out_lo, out_hi);
            let offsets = (0..n)
                .map(|_| g.integers(0, cfg.ids.span as i64) as u64)
                .collect();
            Ok(Drawn {
                input,
                output,
                offsets,
                words: 0,
                rest: Some(g),
            })
        }
        RandomDraws::Sglang { vocab, offsets, .. } => {
            let ((in_lo, in_hi), (out_lo, out_hi)) = cfg.random_bounds.unwrap_or((
                range_bounds(cfg.random_input_len, cfg.random_range_ratio),
                range_bounds(cfg.random_output_len, cfg.random_range_ratio),
            ));
            let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
            let input = sglang_lens(&mut np, (in_lo, in_hi), n);
            let output = sglang_lens(&mut np, (out_lo, out_hi), n);
            let offsets = match offsets {
                true => (0..n)
                    .map(|_| np.randint(0, vocab.max(1) as i64) as u64)
                    .collect(),
                // SGLang's ShareGPT cuts take no offset: llmspeed's come from its own generator.
                false => {
                    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x00ff_5e75);
                    (0..n)
                        .map(|_| rng.gen_range(0..cfg.ids.span) as u64)
                        .collect()
                }
            };
            Ok(Drawn {
                input,
                output,
                offsets,
                words: np.words(),
                rest: None,
            })
        }
    }
}

/// SGLang 0.5.23's `random` (`sample_random_requests` with `random_sample`): turn 0 of each
/// ShareGPT entry with at least two turns (`conversations`, else `conversation`), the list
/// shuffled by Python's `random` seeded with --seed; in that order each prompt encoded with the
/// model's tokenizer (`encode`, special tokens added; an empty one skipped) and its ids cut,
/// or repeated and cut, to the next drawn length ([`random_lengths`], numpy's, as for
/// `random-ids` but without offsets); with `decode` (SGLang's text prompts, no
/// `--tokenize-prompt`) each length first shortened by the tokenizer's `special` tokens (at
/// least 1) and the ids decoded to the text sent, counted again by `encode` for the prompt's
/// length; without it the ids themselves are sent, the drawn length. A file with fewer usable
/// entries sends fewer prompts, as SGLang's.
pub fn sglang_sharegpt_cuts(
    cfg: &DatasetConfig,
    file: &str,
    encode: &mut Encode<'_>,
    mut decode: Option<&mut Decode<'_>>,
    special: u32,
) -> Result<Vec<Sample>, DatasetError> {
    let fmt = |msg: String| DatasetError::Format {
        path: cfg
            .path
            .as_ref()
            .map_or("the ShareGPT file".into(), |p| p.display().to_string()),
        msg,
    };
    let drawn = random_lengths(cfg)?;
    let list: Vec<Value> = serde_json::from_str(file)
        .map_err(|e| fmt(format!("not a JSON list of conversations: {e}")))?;
    // The pairs SGLang's sharegpt reads too, of which `random` keeps the prompt.
    let mut prompts: Vec<&str> = sglang_pairs(&list, false)
        .map_err(fmt)?
        .into_iter()
        .map(|(prompt, _)| prompt)
        .collect();
    PyRandom::new(cfg.seed).shuffle(&mut prompts);
    let n = cfg.num_prompts.min(drawn.input.len());
    let mut out = Vec::with_capacity(n);
    for prompt in prompts {
        let i = out.len();
        if i == n {
            break;
        }
        let ids = encode(prompt).map_err(DatasetError::Invalid)?;
        if ids.is_empty() {
            continue;
        }
        let want = match decode {
            Some(_) => drawn.input[i].saturating_sub(special).max(1),
            None => drawn.input[i],
        } as usize;
        let cut: Vec<u32> = ids.iter().copied().cycle().take(want).collect();
        let (prompt, prompt_len) = match decode.as_deref_mut() {
            Some(decode) => {
                let text = decode(&cut).map_err(DatasetError::Invalid)?;
                let len = encode(&text).map_err(DatasetError::Invalid)?.len() as u64;
                (PromptSource::Text(text), len)
            }
            None => (
                PromptSource::Synthetic {
                    prefix: cut.into(),
                    start: 0,
                    len: 0,
                    ids: cfg.ids,
                },
                want as u64,
            ),
        };
        out.push(Sample {
            prompt,
            prompt_len,
            output_len: drawn.output[i],
            group: None,
        });
    }
    Ok(out)
}

/// SGLang 0.5.23's inclusive bounds for a length `l` and range ratio `r`:
/// `[max(int(l*r), 1), l]`, and `(0, 0)` for 0 (its `compute_random_lens`).
pub fn sglang_range(l: u32, r: f64) -> (u32, u32) {
    match l {
        0 => (0, 0),
        _ => (((l as f64 * r) as u32).clamp(1, l), l),
    }
}

/// SGLang's `compute_random_lens`: `n` lengths drawn from the inclusive bounds by numpy's legacy
/// generator, or `n` zeros with no draw when the upper bound is 0.
fn sglang_lens(np: &mut RandomState, (lo, hi): (u32, u32), n: usize) -> Vec<u32> {
    if hi == 0 {
        return vec![0; n];
    }
    (0..n)
        .map(|_| np.randint(lo as i64, hi as i64 + 1) as u32)
        .collect()
}

/// How many 32-bit words SGLang's `random` and `generated-shared-prefix` datasets take from
/// numpy's legacy generator for `cfg` (0 for every other dataset and for vLLM's): SGLang's send
/// times are drawn from the same generator after them.
pub fn random_numpy_words(cfg: &DatasetConfig) -> u64 {
    match (cfg.kind, cfg.random_draws, cfg.prefix_groups) {
        (DatasetKind::Random, RandomDraws::Sglang { .. }, _) => {
            random_lengths(cfg).map_or(0, |d| d.words)
        }
        (DatasetKind::PrefixRepetition, _, Some(g)) => {
            gsp_lengths(cfg, g).map_or(0, |d| d.numpy_words)
        }
        _ => 0,
    }
}

fn random_ids(rng: &mut StdRng, n: usize, ids: IdRange) -> Vec<u32> {
    (0..n)
        .map(|_| ids.lo + rng.gen_range(0..ids.span))
        .collect()
}

/// The `prefix_repetition` dataset: `num_prefixes` shared prefixes, each followed by unique
/// suffixes, shuffled.
pub fn prefix_repetition(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let n_pre = cfg.prefix_repetition_num_prefixes as usize;
    if n_pre == 0 {
        return Err(DatasetError::Invalid(
            "--prefix-repetition-num-prefixes must be at least 1".into(),
        ));
    }
    if let Some(g) = cfg.prefix_groups {
        return prefix_groups(cfg, g);
    }
    if cfg.num_prompts < n_pre {
        // vLLM's rule too: fewer prompts than prefixes would leave every prefix empty.
        return Err(DatasetError::Invalid(format!(
            "--num-prompts ({}) must be at least --prefix-repetition-num-prefixes ({n_pre})",
            cfg.num_prompts
        )));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let per = cfg.num_prompts / n_pre;
    let mut out = Vec::with_capacity(cfg.num_prompts);
    let suffix = cfg.prefix_repetition_suffix_len;
    for group in 0..n_pre {
        let prefix: Arc<[u32]> =
            random_ids(&mut rng, cfg.prefix_repetition_prefix_len as usize, cfg.ids).into();
        for _ in 0..per {
            out.push(Sample {
                group: Some(group as u32),
                prompt: PromptSource::Synthetic {
                    prefix: prefix.clone(),
                    start: rng.gen_range(0..cfg.ids.span),
                    len: suffix,
                    ids: cfg.ids,
                },
                prompt_len: prefix.len() as u64 + suffix as u64,
                output_len: cfg.prefix_repetition_output_len,
            });
        }
    }
    // vLLM 0.33 (and SGLang's generated-shared-prefix of equal groups) shuffle with Python's
    // `random` seeded by --seed and send prompts per prefix x prefixes, never oversampled.
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut out);
    }
    Ok(out)
}

/// SGLang 0.5.23's `generated-shared-prefix`, drawn as SGLang draws it: from numpy's legacy
/// generator seeded with --seed, every group's prefix length, then every prompt's question
/// length for each turn, then every prompt's output length (`[max(int(L*r), 1), L]`, a length of
/// 0 no draw); `groups x prompts per group` slots, slot `i` taking the question and output
/// lengths of prompt `(i / per, i % per)` and the prefix of its group (the slot's own under
/// uniform; under zipf a draw of numpy's `default_rng(seed)`, as SGLang's); then, unless
/// ordered, shuffled by Python's `random` seeded with --seed after the two words of each
/// `random.random()` SGLang's prompt text took (one per token of every prefix and question).
/// Never oversampled. The prompt ids are llmspeed's.
fn prefix_groups(cfg: &DatasetConfig, g: PrefixGroups) -> Result<Vec<Sample>, DatasetError> {
    let d = gsp_lengths(cfg, g)?;
    let groups = cfg.prefix_repetition_num_prefixes as usize;
    let per = cfg.num_prompts / groups;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let prefixes: Vec<Arc<[u32]>> = d
        .prefix
        .iter()
        .map(|n| random_ids(&mut rng, *n as usize, cfg.ids).into())
        .collect();
    let assignment: Vec<usize> = match g.zipf_alpha {
        None => (0..groups * per).map(|slot| slot / per.max(1)).collect(),
        // SGLang's own generator for it (`default_rng(seed)`): the prompts stay those of the
        // uniform draw.
        Some(alpha) => {
            Generator::new(cfg.seed).choice_weighted(&zipf_probs(groups, alpha)?, groups * per)
        }
    };
    let turns = g.turns.max(1) as usize;
    let mut out = Vec::with_capacity(assignment.len());
    for (slot, group) in assignment.into_iter().enumerate() {
        let prefix = prefixes[group].clone();
        // SGLang: the slot's question and output are those of its place in uniform order.
        let len = d.question[slot * turns];
        out.push(Sample {
            group: Some(group as u32),
            prompt_len: prefix.len() as u64 + len as u64,
            prompt: PromptSource::Synthetic {
                prefix,
                start: rng.gen_range(0..cfg.ids.span),
                len,
                ids: cfg.ids,
            },
            output_len: d.output[slot],
        });
    }
    gsp_shuffle(cfg, &d, &mut out);
    Ok(out)
}

/// SGLang's shuffle of the generated-shared-prefix prompts (unless ordered): Python's `random`
/// seeded with --seed, after what the prompts' texts drew from it.
fn gsp_shuffle<T>(cfg: &DatasetConfig, d: &GspLengths, x: &mut [T]) {
    if cfg.shuffle {
        let mut py = PyRandom::new(cfg.seed);
        py.skip_words(d.python_words);
        py.shuffle(x);
    }
}

/// SGLang's generated-shared-prefix with `--gsp-num-turns` above 1: each prompt's later turns'
/// question lengths (turn 2 on), drawn with the first's, in the order [`prefix_repetition`]
/// gives its prompts. `None` for any other dataset, or one turn.
pub fn later_turn_lens(cfg: &DatasetConfig) -> Option<Vec<Vec<u32>>> {
    let g = cfg.prefix_groups.filter(|g| g.turns > 1)?;
    if cfg.kind != DatasetKind::PrefixRepetition || cfg.prefix_repetition_num_prefixes == 0 {
        return None;
    }
    let d = gsp_lengths(cfg, g).ok()?;
    let turns = g.turns as usize;
    let mut slots: Vec<usize> = (0..d.output.len()).collect();
    gsp_shuffle(cfg, &d, &mut slots);
    Some(
        slots
            .into_iter()
            .map(|slot| d.question[slot * turns + 1..(slot + 1) * turns].to_vec())
            .collect(),
    )
}

/// SGLang's generated-shared-prefix lengths, and what drawing them and their texts took from
/// numpy's legacy generator and Python's `random`.
struct GspLengths {
    prefix: Vec<u32>,
    /// Prompt-major, then turn.
    question: Vec<u32>,
    output: Vec<u32>,
    numpy_words: u64,
    python_words: u64,
}

fn gsp_lengths(cfg: &DatasetConfig, g: PrefixGroups) -> Result<GspLengths, DatasetError> {
    let groups = cfg.prefix_repetition_num_prefixes as usize;
    let prompts = groups * (cfg.num_prompts / groups);
    let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
    let mut lens = |l: u32, n: usize| sglang_lens(&mut np, sglang_range(l, g.range_ratio), n);
    let prefix = lens(cfg.prefix_repetition_prefix_len, groups);
    let question = lens(
        cfg.prefix_repetition_suffix_len,
        prompts * g.turns.max(1) as usize,
    );
    let output = lens(cfg.prefix_repetition_output_len, prompts);
    let tokens: u64 = prefix.iter().chain(&question).map(|&l| l as u64).sum();
    Ok(GspLengths {
        prefix,
        question,
        output,
        numpy_words: np.words(),
        python_words: 2 * tokens,
    })
}

/// Zipf probabilities by rank, as SGLang computes them with numpy: `1 / rank^alpha` for ranks
/// 1..=n, each over their (pairwise) sum.
fn zipf_probs(n: usize, alpha: f64) -> Result<Vec<f64>, DatasetError> {
    let weights: Vec<f64> = (1..=n)
        .map(|rank| 1.0 / (rank as f64).powf(alpha))
        .collect();
    let total = numpy::sum(&weights);
    if !(total.is_finite() && total > 0.0) {
        return Err(DatasetError::Invalid(format!(
            "--gsp-zipf-alpha {alpha}: the groups' weights do not sum to a positive number"
        )));
    }
    Ok(weights.iter().map(|w| w / total).collect())
}

/// vLLM's oversampling (unless `--no-oversample`): a set short of `num_prompts` is filled with
/// samples picked at random from it, by Python's `random` seeded again with --seed
/// (`random.choice` each time), then `num_prompts` are kept.
fn fill_to(out: &mut Vec<Sample>, cfg: &DatasetConfig) {
    let n = cfg.num_prompts;
    if out.is_empty() || !cfg.oversample {
        out.truncate(n);
        return;
    }
    let have = out.len();
    let mut py = PyRandom::new(cfg.seed);
    while out.len() < n {
        let s = out[py.randbelow(have)].clone();
        out.push(s);
    }
    out.truncate(n);
}

fn need_path(cfg: &DatasetConfig) -> Result<&PathBuf, DatasetError> {
    cfg.path
        .as_ref()
        .ok_or(DatasetError::NoPath(cfg.kind.as_str()))
}

fn read(path: &PathBuf) -> Result<String, DatasetError> {
    std::fs::read_to_string(path).map_err(|err| DatasetError::Read {
        path: path.display().to_string(),
        err,
    })
}

fn counted(count: &mut TokenCounter<'_>, text: &str) -> Result<u64, DatasetError> {
    count(text).map_err(DatasetError::Count)
}

/// SGLang's `--prompt-suffix`: `suffix`, then "Assistant:", after the prompt with its own
/// "Assistant:" taken off its end; the prompt as it is without a suffix.
pub fn with_suffix<'p>(prompt: &'p str, suffix: &str) -> std::borrow::Cow<'p, str> {
    const ASSISTANT: &str = "Assistant:";
    if suffix.is_empty() {
        return std::borrow::Cow::Borrowed(prompt);
    }
    let head = prompt.strip_suffix(ASSISTANT).unwrap_or(prompt);
    std::borrow::Cow::Owned(format!("{head}{suffix}{ASSISTANT}"))
}

/// `prompt` through `wrap` when there is one, else as it is.
fn wrapped<'p>(
    wrap: &mut Option<&mut PromptWrap<'_>>,
    prompt: &'p str,
) -> Result<std::borrow::Cow<'p, str>, DatasetError> {
    match wrap {
        Some(w) => w(prompt)
            .map(std::borrow::Cow::Owned)
            .map_err(DatasetError::Invalid),
        None => Ok(std::borrow::Cow::Borrowed(prompt)),
    }
}

/// The `sharegpt` dataset: a prompt and its reply from each conversation, counted, filtered
/// and shuffled by [`DatasetConfig::conversations`]' rules. The output length is the reply's
/// token count, or `--sharegpt-output-len`.
pub fn sharegpt(
    cfg: &DatasetConfig,
    count: &mut TokenCounter<'_>,
    wrap: Option<&mut PromptWrap<'_>>,
) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    sharegpt_text(cfg, &path.display().to_string(), &text, count, wrap)
}

/// [`sharegpt`] on a file's text, `name` naming it in errors (the parser the fuzz target
/// drives). `wrap` turns each prompt into the text sent before it is counted (SGLang's
/// `--apply-chat-template`).
pub fn sharegpt_text(
    cfg: &DatasetConfig,
    name: &str,
    text: &str,
    count: &mut TokenCounter<'_>,
    mut wrap: Option<&mut PromptWrap<'_>>,
) -> Result<Vec<Sample>, DatasetError> {
    let fmt = |msg: String| DatasetError::Format {
        path: name.to_string(),
        msg,
    };
    let list: Vec<serde_json::Value> = match cfg.conversations {
        // SGLang's custom file: JSON lines, a line that does not parse skipped.
        Conversations::Sglang { lines: true, .. } => text
            .lines()
            .filter_map(|l| serde_json::from_str(l.trim()).ok())
            .collect(),
        _ => match serde_json::from_str(text) {
            Ok(serde_json::Value::Array(list)) => list,
            Ok(_) => return Err(fmt("expected a JSON list of conversations".into())),
            Err(e) => return Err(fmt(format!("not valid JSON: {e}"))),
        },
    };
    let mut pairs = match cfg.conversations {
        Conversations::Vllm => vllm_pairs(&list).map_err(fmt)?,
        Conversations::Sglang { lines, .. } => sglang_pairs(&list, lines).map_err(fmt)?,
    };
    // Both tools shuffle with Python's `random` seeded by --seed (vLLM just before, SGLang at
    // the start of the run, with nothing drawn in between).
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut pairs);
    }
    let mut out = Vec::with_capacity(cfg.num_prompts);
    for (prompt, reply) in pairs {
        if out.len() >= cfg.num_prompts {
            break;
        }
        let prompt = with_suffix(prompt, &cfg.prompt_suffix);
        let prompt = wrapped(&mut wrap, &prompt)?;
        let prompt_len = counted(count, &prompt)?;
        let output_len = match cfg.sharegpt_output_len {
            Some(n) => n as u64,
            None => counted(count, reply)?,
        };
        // Counts come from the server's `/tokenize`: a huge one must be filtered, not overflow.
        let total = prompt_len.saturating_add(output_len);
        let keep = match cfg.conversations {
            Conversations::Vllm => {
                prompt_len >= 4
                    && (cfg.sharegpt_output_len.is_some() || output_len >= 4)
                    && prompt_len <= 1024
                    && total <= 2048
            }
            Conversations::Sglang { context_len, .. } => {
                prompt_len >= 2
                    && output_len >= 2
                    && context_len.is_none_or(|c| c == 0 || total <= c as u64)
            }
        };
        if !keep {
            continue;
        }
        out.push(Sample {
            group: None,
            prompt: PromptSource::Text(prompt.into_owned()),
            prompt_len,
            output_len: output_len.min(u32::MAX as u64) as u32,
        });
    }
    if out.is_empty() {
        let rules = match cfg.conversations {
            Conversations::Vllm => "a human turn followed by a reply, within vLLM's length limits",
            Conversations::Sglang { .. } => {
                "two turns, each at least 2 tokens, within --sharegpt-context-len"
            }
        };
        return Err(fmt(format!("no usable conversation ({rules})")));
    }
    match cfg.conversations {
        Conversations::Vllm => fill_to(&mut out, cfg),
        Conversations::Sglang { .. } => out.truncate(cfg.num_prompts),
    }
    Ok(out)
}

/// vLLM 0.33's pairs: turns 0 and 1 of each entry whose `conversations` list has two or more,
/// whatever their roles; a turn without a string `value` is an error (vLLM stops on it too).
fn vllm_pairs(list: &[serde_json::Value]) -> Result<Vec<(&str, &str)>, String> {
    let mut pairs = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let conv = entry.get("conversations").and_then(|c| c.as_array());
        let Some([first, second, ..]) = conv.map(Vec::as_slice) else {
            continue;
        };
        match (turn(first).1, turn(second).1) {
            (Some(p), Some(r)) => pairs.push((p, r)),
            _ => {
                return Err(format!(
                    "conversation {} has a turn without a text (a string under \"value\")",
                    i + 1
                ))
            }
        }
    }
    Ok(pairs)
}

/// SGLang's pairs: turns 0 and 1 of each entry with two or more. A sharegpt turn without a
/// string `value` is an error (SGLang stops on it too); a custom turn's text is its `content`,
/// else its `value`, else empty.
fn sglang_pairs(list: &[serde_json::Value], lines: bool) -> Result<Vec<(&str, &str)>, String> {
    let mut pairs = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let conv = entry
            .get("conversations")
            .or_else(|| entry.get("conversation"))
            .and_then(|c| c.as_array());
        let Some([first, second, ..]) = conv.map(Vec::as_slice) else {
            continue;
        };
        match (sglang_text(first, lines), sglang_text(second, lines)) {
            (Some(p), Some(r)) => pairs.push((p, r)),
            _ => {
                return Err(format!(
                    "conversation {} has a turn without a text (a string under {})",
                    i + 1,
                    if lines {
                        "\"content\" or \"value\""
                    } else {
                        "\"value\""
                    }
                ))
            }
        }
    }
    Ok(pairs)
}

/// A turn's text by SGLang's rule (see [`sglang_pairs`]); `None`: not a string.
fn sglang_text(t: &serde_json::Value, lines: bool) -> Option<&str> {
    let v = match lines {
        true => t.get("content").or_else(|| t.get("value")),
        false => t.get("value"),
    };
    match v {
        None if lines => Some(""),
        v => v.and_then(|v| v.as_str()),
    }
}

fn turn(t: &serde_json::Value) -> (&str, Option<&str>) {
    (
        t.get("from").and_then(|f| f.as_str()).unwrap_or(""),
        t.get("value").and_then(|f| f.as_str()),
    )
}

/// The instruction vLLM's sonnet dataset puts before the poem lines.
pub const SONNET_BASE: &str = "Pick as many lines as you can from these poem lines:\n";

/// The `sonnet` dataset: the instruction, the first lines of the file as a shared prefix of
/// about `--sonnet-prefix-len` tokens, then random lines up to `--sonnet-input-len` tokens.
/// vLLM measures lengths through the model's chat template; without a tokenizer we measure the
/// plain prompt, so lengths differ by the template's few tokens.
pub fn sonnet(
    cfg: &DatasetConfig,
    count: &mut TokenCounter<'_>,
) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let lines: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "the file has no lines".into(),
        });
    }
    let mut total = 0u64;
    for l in &lines {
        total = total.saturating_add(counted(count, l)?);
    }
    if total == 0 {
        // A zero average would ask for billions of lines per prompt.
        return Err(DatasetError::Invalid(
            "the token counter gave 0 tokens for every line of the sonnet file".into(),
        ));
    }
    let avg = total as f64 / lines.len() as f64;
    let base = counted(count, SONNET_BASE)? as f64;
    let input = cfg.sonnet_input_len as f64;
    if input <= base {
        return Err(DatasetError::Invalid(format!(
            "--sonnet-input-len {} must exceed the instruction's {base} tokens",
            cfg.sonnet_input_len
        )));
    }
    // Every non-blank line is at least one token, so more lines than input tokens never fit
    // (this also bounds the prompt when a counter under-reports).
    let mut n_input = (((input - base) / avg).round() as usize).min(cfg.sonnet_input_len as usize);
    let n_prefix = (((cfg.sonnet_prefix_len as f64 - base) / avg)
        .round()
        .max(0.0) as usize)
        .min(lines.len())
        .min(n_input);
    let mut prefix = String::from(SONNET_BASE);
    for l in &lines[..n_prefix] {
        prefix.push_str(l);
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut out = Vec::with_capacity(cfg.num_prompts);
    let mut misses = 0usize;
    while out.len() < cfg.num_prompts {
        let mut p = prefix.clone();
        for _ in n_prefix..n_input {
            p.push_str(lines[rng.gen_range(0..lines.len())]);
        }
        let len = counted(count, &p)?;
        if len <= cfg.sonnet_input_len as u64 {
            misses = 0;
            out.push(Sample {
                group: None,
                prompt: PromptSource::Text(p),
                prompt_len: len,
                output_len: cfg.sonnet_output_len,
            });
            continue;
        }
        // vLLM retries forever when rounding the line count overshoots; after 50 misses in a
        // row we take one line fewer instead.
        misses += 1;
        if misses >= 50 {
            if n_input <= n_prefix {
                return Err(DatasetError::Invalid(format!(
                    "cannot fit sonnet prompts in --sonnet-input-len {}; raise it or lower --sonnet-prefix-len",
                    cfg.sonnet_input_len
                )));
            }
            n_input -= 1;
            misses = 0;
        }
    }
    Ok(out)
}

/// The `custom` dataset: JSON lines with `prompt` and, read only when `--custom-output-len` is
/// -1, `output_tokens` (vLLM's rule: the flag, 256 by default, sets every row's length),
/// shuffled by the seed.
pub fn custom(
    cfg: &DatasetConfig,
    count: &mut TokenCounter<'_>,
    mut wrap: Option<&mut PromptWrap<'_>>,
) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fmt = |msg: String| DatasetError::Format {
            path: format!("{}:{}", path.display(), i + 1),
            msg,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| fmt(format!("not valid JSON: {e}")))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .ok_or_else(|| fmt("needs a string field \"prompt\"".into()))?
            .to_string();
        let output = match (cfg.custom_output_len, v.get("output_tokens")) {
            (Some(n), _) => n,
            (None, None | Some(serde_json::Value::Null)) => {
                return Err(fmt(
                    "needs \"output_tokens\" when --custom-output-len is -1".into(),
                ))
            }
            (None, Some(o)) => o
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| fmt("\"output_tokens\" must be a non-negative integer".into()))?,
        };
        rows.push((prompt, output));
    }
    if rows.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "no prompts".into(),
        });
    }
    // vLLM: Python's `random` seeded by --seed shuffles the rows.
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut rows);
    }
    rows.truncate(cfg.num_prompts);
    let mut out = Vec::with_capacity(cfg.num_prompts);
    for (prompt, output_len) in rows {
        let prompt = wrapped(&mut wrap, &prompt)?.into_owned();
        let prompt_len = counted(count, &prompt)?;
        out.push(Sample {
            group: None,
            prompt: PromptSource::Text(prompt),
            prompt_len,
            output_len,
        });
    }
    fill_to(&mut out, cfg);
    Ok(out)
}

/// The fields of a chat request row that are not sent with it: the messages go as the request's
/// own, `max_tokens` becomes its output length, and the model is the run's (SGLang's
/// `EXCLUDED_FIELDS`).
const CHAT_REQUEST_OWN: [&str; 4] = ["messages", "max_tokens", "max_completion_tokens", "model"];

/// SGLang 0.5.23's `openai` dataset: JSON lines, each a chat request. Lines are read in file
/// order (never shuffled) until `num_prompts` have parsed (`--num-prompts` 0: all); a line that
/// is not JSON is skipped and not counted. A row whose `messages` is missing or empty is skipped
/// after that; one that is not an object, or whose `messages` is not a list, is an error (SGLang
/// stops on it too). The output length is `--sharegpt-output-len` when above 0, else the row's
/// `max_tokens`, else 256; the input length is `chat_len` of the row; every other field (save
/// `max_completion_tokens` and `model`) is sent with the row.
pub fn chat_requests(
    cfg: &DatasetConfig,
    chat_len: &mut ChatLen<'_>,
) -> Result<Vec<Sample>, DatasetError> {
    let path = need_path(cfg)?;
    let text = read(path)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if cfg.num_prompts > 0 && rows.len() >= cfg.num_prompts {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            rows.push((i + 1, line, v));
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for (n, line, row) in rows {
        let fmt = |msg: &str| DatasetError::Format {
            path: format!("{}:{n}", path.display()),
            msg: msg.to_string(),
        };
        let serde_json::Value::Object(mut row) = row else {
            return Err(fmt("a row must be a JSON object (a chat request)"));
        };
        let messages = match row.remove("messages") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Array(m)) if m.is_empty() => continue,
            Some(m @ serde_json::Value::Array(_)) => m,
            Some(_) => return Err(fmt("\"messages\" must be a list of messages")),
        };
        let output_len = match (
            cfg.sharegpt_output_len.filter(|&n| n > 0),
            row.get("max_tokens"),
        ) {
            (Some(n), _) => n,
            (None, None) => 256,
            (None, Some(m)) => m
                .as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .ok_or_else(|| fmt("\"max_tokens\" must be a non-negative integer"))?,
        };
        let prompt_len = chat_len(line).map_err(|e| fmt(&e))?;
        for k in CHAT_REQUEST_OWN {
            row.remove(k);
        }
        out.push(Sample {
            group: None,
            prompt: PromptSource::Chat {
                messages: Arc::new(messages),
                extra: Arc::new(row),
            },
            prompt_len,
            output_len,
        });
    }
    if out.is_empty() {
        return Err(DatasetError::Format {
            path: path.display().to_string(),
            msg: "no chat request with messages".into(),
        });
    }
    Ok(out)
}

/// A token count without a tokenizer: one token per 4 bytes, rounded up (the usual English
/// average). Used only when the server has no `/tokenize`, and reported as an estimate.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Replace every token-id prompt with natural prose of the same length, for servers where ids
/// cannot be sent (the chat endpoint, an unknown vocabulary, no working `/detokenize`).
///
/// With a counter (the server's `/tokenize`, a local tokenizer) each text is calibrated and
/// `prompt_len` becomes the counter's figure for the text actually sent; a shared prefix
/// (`prefix_repetition`, `--random-prefix-len`) stays one shared text. Without one, the text is
/// sized at 1.3 tokens per word and `prompt_len` keeps the asked length until the server's
/// `usage.prompt_tokens` replaces it (the runner does that).
pub fn to_text(
    samples: &mut [Sample],
    seed: u64,
    mut count: Option<&mut TokenCounter<'_>>,
) -> Result<(), DatasetError> {
    // One text per distinct prefix (by identity: samples share the `Arc`).
    let mut prefixes: Vec<(*const u32, String)> = Vec::new();
    // A trace block's text by hash id (see `trace_text`).
    let mut blocks: HashMap<u64, String> = HashMap::new();
    for (i, s) in samples.iter_mut().enumerate() {
        let text = match s.prompt.text_part() {
            PromptSource::Blocks {
                hash_ids,
                block,
                len,
                tail_seed,
                rounds,
                answer,
                ..
            } => {
                let one = trace_text(hash_ids, *block, *len, *tail_seed, seed, &mut blocks);
                rounds_text(&one, *rounds, *answer)
            }
            PromptSource::Synthetic { prefix, len, .. } => {
                let sample_seed = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let prefix = shared_prefix_text(prefix, seed, &mut prefixes, &mut count)?;
                let (suffix, _) = sized_text(*len as u64, sample_seed, &mut count)?;
                match prefix {
                    Some(p) => format!("{p}\n\n{suffix}"),
                    None => suffix,
                }
            }
            PromptSource::Text(_)
            | PromptSource::Chat { .. }
            | PromptSource::Turns(_)
            | PromptSource::Multimodal { .. } => continue,
        };
        // The whole text once more: a prefix and a suffix counted apart can differ from the
        // two together (BOS, merges at the seam).
        if let Some(c) = count.as_deref_mut() {
            s.prompt_len = counted(c, &text)?;
        }
        s.prompt.set_text(text);
    }
    Ok(())
}

/// Words for `n` tokens at 1.3 tokens per word (at least one).
fn words_for(n: u32) -> usize {
    ((n as f64 / 1.3).round() as usize).max(1)
}

/// Bare prose of `words` words from `seed`.
fn bare_text(seed: u64, words: usize) -> String {
    match crate::workload::prose::PromptBuilder::bare(seed).build(words) {
        crate::workload::prose::Prompt::Text(t) => t,
        _ => unreachable!("bare prompts are text"),
    }
}

/// Prose of `n` tokens from `seed` and its size: calibrated with `count` (the closest text
/// where none is exact, with its true size), else at 1.3 tokens per word with `n` as its size.
fn sized_text(
    n: u64,
    seed: u64,
    count: &mut Option<&mut TokenCounter<'_>>,
) -> Result<(String, u64), DatasetError> {
    use crate::workload::prose::{CalibrateError, Prompt, PromptBuilder};
    let Some(count) = count.as_deref_mut() else {
        return Ok((bare_text(seed, (n as f64 / 1.3).round() as usize), n));
    };
    let c = match PromptBuilder::bare(seed).calibrate(n, |p| count(prompt_text(p)), 20) {
        Ok(c) => c,
        // The closest text: its true size is reported, not the asked one.
        Err(CalibrateError::NotExact { best, .. }) => *best,
        Err(CalibrateError::TooSmall { overhead, .. }) => {
            return Err(DatasetError::Count(format!(
                "an empty text already counts {overhead} tokens, more than the {n} asked for"
            )))
        }
        Err(e) => return Err(DatasetError::Count(e.to_string())),
    };
    let Prompt::Text(t) = c.prompt else {
        unreachable!("bare prompts are text")
    };
    Ok((t, c.tokens))
}

/// The text of a shared prefix of token ids, made once per distinct prefix; `None` for none.
fn shared_prefix_text(
    prefix: &Arc<[u32]>,
    seed: u64,
    prefixes: &mut Vec<(*const u32, String)>,
    count: &mut Option<&mut TokenCounter<'_>>,
) -> Result<Option<String>, DatasetError> {
    if prefix.is_empty() {
        return Ok(None);
    }
    let key = prefix.as_ptr();
    if let Some((_, t)) = prefixes.iter().find(|(k, _)| *k == key) {
        return Ok(Some(t.clone()));
    }
    let (t, _) = sized_text(prefix.len() as u64, seed ^ prefixes.len() as u64, count)?;
    prefixes.push((key, t.clone()));
    Ok(Some(t))
}

/// A trace prompt's text: each block by hash id the same words wherever it is used, so the
/// trace's prefix sharing survives as shared leading text (not calibrated block by block: a
/// Mooncake trace names ~180K blocks; the whole prompt is counted once instead), a partial
/// block its first words, and what the blocks leave of `len` prose of its own.
/// A session round's text: `one` `rounds` times, a placeholder answer of about `answer` tokens
/// ("story" repeated, as SGLang's) between each two.
fn rounds_text(one: &str, rounds: u32, answer: u32) -> String {
    if rounds <= 1 {
        return one.to_string();
    }
    let between = format!("\n\n{}\n\n", vec!["story"; answer as usize].join(" "));
    let mut text = one.to_string();
    for _ in 1..rounds {
        text.push_str(&between);
        text.push_str(one);
    }
    text
}

fn trace_text(
    hash_ids: &[u64],
    block: u32,
    len: u32,
    tail_seed: u64,
    seed: u64,
    blocks: &mut HashMap<u64, String>,
) -> String {
    let mut text = String::new();
    let mut push = |part: &str| {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(part);
    };
    let mut left = len;
    for &h in hash_ids {
        if left == 0 {
            break;
        }
        let full = blocks
            .entry(h)
            .or_insert_with(|| bare_text(seed ^ h.rotate_left(17), words_for(block)));
        let n = left.min(block);
        if n == block {
            push(full);
        } else {
            let words: Vec<&str> = full.split(' ').take(words_for(n)).collect();
            push(&words.join(" "));
        }
        left -= n;
    }
    if left > 0 {
        push(&bare_text(tail_seed, words_for(left)));
    }
    text
}

fn prompt_text(p: &crate::workload::prose::Prompt) -> &str {
    match p {
        crate::workload::prose::Prompt::Text(t) => t,
        // `PromptBuilder::bare` builds text only.
        crate::workload::prose::Prompt::Chat(m) => m.first().map_or("", |m| m.content.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn words(s: &str) -> Result<u64, String> {
        Ok(s.split_whitespace().count() as u64)
    }

    /// The naive twin of `write_ids`: vLLM's formula written directly.
    fn naive_ids(prefix: &[u32], start: u32, len: u32, ids: IdRange) -> Vec<u32> {
        let mut v = prefix.to_vec();
        v.extend((0..len).map(|j| ids.lo + ((start as u64 + j as u64) % ids.span as u64) as u32));
        v
    }

    #[test]
    fn random_lengths_are_exact_and_deterministic() {
        let cfg = DatasetConfig {
            num_prompts: 50,
            random_input_len: 300,
            random_prefix_len: 7,
            ..Default::default()
        };
        let a = random(&cfg).unwrap();
        assert_eq!(a, random(&cfg).unwrap());
        let mut ids = Vec::new();
        for s in &a {
            ids.clear();
            assert!(s.write_ids(&mut ids));
            assert_eq!(ids.len() as u64, s.prompt_len);
            assert_eq!(s.prompt_len, 307);
            assert_eq!(s.output_len, 128);
            assert!(ids
                .iter()
                .all(|&i| (VOCAB_LO..VOCAB_LO + VOCAB_SPAN).contains(&i)));
            if let PromptSource::Synthetic {
                prefix,
                start,
                len,
                ids: r,
            } = &s.prompt
            {
                assert_eq!(ids, naive_ids(prefix, *start, *len, *r));
            }
        }
        let other = random(&DatasetConfig { seed: 1, ..cfg }).unwrap();
        assert_ne!(a, other);
    }

    /// llama.cpp's 679-token test model: every id, prefix included, stays inside the range
    /// the runner derives from `n_vocab` (before, ids reached 7999: "invalid tokens").
    #[test]
    fn random_ids_stay_inside_a_small_vocabulary() {
        let r = IdRange::from_range(339..657).unwrap();
        for kind in [DatasetKind::Random, DatasetKind::PrefixRepetition] {
            let cfg = DatasetConfig {
                kind,
                num_prompts: 40,
                random_input_len: 2000,
                random_prefix_len: 50,
                prefix_repetition_num_prefixes: 4,
                ids: r,
                ..Default::default()
            };
            let samples = load(&cfg, &mut words, None, None).unwrap();
            let mut ids = Vec::new();
            for s in &samples {
                ids.clear();
                assert!(s.write_ids(&mut ids));
                assert_eq!(ids.len() as u64, s.prompt_len);
                assert!(ids.iter().all(|&i| (339..657).contains(&i)), "{kind:?}");
                if let PromptSource::Synthetic {
                    prefix, start, len, ..
                } = &s.prompt
                {
                    assert_eq!(ids, naive_ids(prefix, *start, *len, r));
                }
            }
        }
    }

    /// A stand-in tokenizer with BOS: one token per word plus one.
    fn counted_words(s: &str) -> Result<u64, String> {
        Ok(1 + s.split_whitespace().count() as u64)
    }

    /// Trace prompts as text (chat endpoint): rows with the same leading hash ids start with
    /// A session's later round as text: the first round's text, then a placeholder answer of
    /// the row's output length in words, then the first round's text again.
    #[test]
    fn a_trace_rounds_text_repeats_the_first_round_around_a_placeholder_answer() {
        let rows = crate::workload::trace::parse(
            "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [1]}\n",
            &crate::workload::trace::TraceConfig::default(),
            10,
        )
        .unwrap();
        let mut s = crate::workload::trace::rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 2);
        to_text(&mut s, 3, None).unwrap();
        let text = |x: &Sample| match &x.prompt {
            PromptSource::Text(t) => t.clone(),
            other => panic!("text expected, got {other:?}"),
        };
        let one = text(&s[0]);
        assert!(!one.is_empty() && !one.contains("story"), "{one}");
        assert_eq!(text(&s[1]), format!("{one}\n\nstory story story\n\n{one}"));
    }

    /// the same text, rows without share none of it, and each is counted once in full.
    #[test]
    fn trace_blocks_become_text_that_keeps_the_shared_prefix() {
        let rows = crate::workload::trace::parse(
            "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n\
             {\"timestamp\": 0, \"input_length\": 48, \"output_length\": 1, \"hash_ids\": [1, 2, 9]}\n\
             {\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [5, 6, 7]}\n",
            &crate::workload::trace::TraceConfig::default(),
            10,
        )
        .unwrap();
        let mut s = crate::workload::trace::rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 1);
        let mut count = counted_words;
        to_text(&mut s, 3, Some(&mut count)).unwrap();
        let t: Vec<String> = s
            .iter()
            .map(|x| match &x.prompt {
                PromptSource::Text(t) => t.clone(),
                other => panic!("text expected, got {other:?}"),
            })
            .collect();
        let words = |x: &str| x.split(' ').map(String::from).collect::<Vec<_>>();
        let common = |a: &str, b: &str| {
            words(a)
                .iter()
                .zip(words(b))
                .take_while(|(x, y)| **x == *y)
                .count()
        };
        // Blocks 1 and 2 (16 tokens each, 12 words each at 1.3 tokens a word) are shared.
        assert_eq!(common(&t[0], &t[1]), 24, "{t:?}");
        assert_eq!(common(&t[0], &t[2]), 0, "{t:?}");
        for (x, text) in s.iter().zip(&t) {
            assert_eq!(x.prompt_len, counted_words(text).unwrap());
        }
    }

    #[test]
    fn token_id_prompts_become_text_of_the_counted_length() {
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: 12,
            prefix_repetition_prefix_len: 60,
            prefix_repetition_suffix_len: 40,
            prefix_repetition_num_prefixes: 3,
            ..Default::default()
        };
        let mut samples = load(&cfg, &mut words, None, None).unwrap();
        let mut count = counted_words;
        to_text(&mut samples, 5, Some(&mut count)).unwrap();
        let mut firsts = std::collections::HashMap::new();
        for s in &samples {
            let PromptSource::Text(t) = &s.prompt else {
                panic!("text expected")
            };
            // The counter's figure for the text sent, within 1% of the 100 asked for.
            assert_eq!(s.prompt_len, counted_words(t).unwrap());
            assert!((99..=101).contains(&s.prompt_len), "{}", s.prompt_len);
            // Prefixes stay shared: three distinct openings of 60 tokens' worth.
            let head: String = t.split_whitespace().take(40).collect::<Vec<_>>().join(" ");
            *firsts.entry(head).or_insert(0) += 1;
        }
        assert_eq!(firsts.len(), 3, "{:?}", firsts.values());
    }

    #[test]
    fn without_a_counter_text_is_estimated_and_marked_for_usage() {
        let cfg = DatasetConfig {
            num_prompts: 3,
            random_input_len: 130,
            ..Default::default()
        };
        let mut samples = load(&cfg, &mut words, None, None).unwrap();
        to_text(&mut samples, 1, None).unwrap();
        for s in &samples {
            let PromptSource::Text(t) = &s.prompt else {
                panic!("text expected")
            };
            // ~1.3 tokens per word of English: 100 words for 130 tokens.
            assert_eq!(t.split_whitespace().count(), 100);
            assert_eq!(s.prompt_len, 130);
        }
    }

    #[test]
    fn explicit_bounds_replace_the_ratios() {
        let cfg = DatasetConfig {
            num_prompts: 2000,
            random_input_len: 100,
            random_output_len: 40,
            random_bounds: Some(((50, 100), (0, 40))),
            random_draws: RandomDraws::Sglang {
                vocab: 8460,
                offsets: true,
                text: false,
            },
            ..Default::default()
        };
        let s = random(&cfg).unwrap();
        assert!(s.iter().all(|x| (50..=100).contains(&x.prompt_len)));
        assert!(s.iter().all(|x| x.output_len <= 40));
        // 2000 uniform draws reach both ends' neighbourhoods.
        assert!(s.iter().any(|x| x.prompt_len <= 52) && s.iter().any(|x| x.output_len <= 1));
        assert!(s.iter().any(|x| x.prompt_len >= 98) && s.iter().any(|x| x.output_len >= 39));
    }

    #[test]
    fn vllms_special_tokens_come_off_the_drawn_range_and_back_onto_each_prompt() {
        // Input 100 with one special token: vLLM draws from [99, 99] and the server adds the
        // BOS to its text; llmspeed's ids are 100 long.
        let cfg = DatasetConfig {
            num_prompts: 20,
            random_input_len: 100,
            random_draws: RandomDraws::Vllm { special: 1 },
            ..Default::default()
        };
        assert!(random(&cfg).unwrap().iter().all(|s| s.prompt_len == 100));
        // Ratio 0.5: [floor(99 * 0.5), ceil(99 * 1.5)] = [49, 149], each plus the one token.
        let s = random(&DatasetConfig {
            num_prompts: 2000,
            random_range_ratio: 0.5,
            ..cfg.clone()
        })
        .unwrap();
        let lens: Vec<u64> = s.iter().map(|x| x.prompt_len).collect();
        assert_eq!(lens.iter().min(), Some(&50));
        assert_eq!(lens.iter().max(), Some(&150));
        // One token less the special one is nothing: refused, as vLLM refuses it.
        let one = DatasetConfig {
            random_input_len: 1,
            ..cfg
        };
        let e = random(&one).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
        assert!(random(&DatasetConfig {
            random_prefix_len: 4,
            ..one
        })
        .is_ok());
    }

    #[test]
    fn burstgpt_keeps_gpt4_rows_with_a_response_by_column_name() {
        // Columns in another order than the trace's, a ChatGPT row, a failed GPT-4 row.
        let csv = "Response tokens,Model,Timestamp,Request tokens\n\
                   12,GPT-4,0,100\n\
                   30,ChatGPT,1,7\n\
                   0,GPT-4,2,55\n\
                   5,GPT-4,3,9\n";
        assert_eq!(burstgpt_rows(csv), Ok(vec![(100, 12), (9, 5)]));
        let no_col = burstgpt_rows("Model,Request tokens\nGPT-4,3\n").unwrap_err();
        assert!(no_col.contains("\"Response tokens\""), "{no_col}");
        let bad = burstgpt_rows("Model,Request tokens,Response tokens\nGPT-4,3.5,2\n").unwrap_err();
        assert!(
            bad.contains("line 2") && bad.contains("Request tokens"),
            "{bad}"
        );
    }

    #[test]
    fn range_ratio_has_pythons_meaning() {
        assert_eq!(range_bounds(1000, 0.25), (750, 1250));
        assert_eq!(range_bounds(10, 0.0), (10, 10));
        assert_eq!(range_bounds(1, 0.99), (1, 2));
        let cfg = DatasetConfig {
            num_prompts: 2000,
            random_input_len: 100,
            random_output_len: 40,
            random_range_ratio: 0.5,
            ..Default::default()
        };
        let s = random(&cfg).unwrap();
        let (lo, hi) = (
            s.iter().map(|x| x.prompt_len).min().unwrap(),
            s.iter().map(|x| x.prompt_len).max().unwrap(),
        );
        // Uniform over [50, 150]: 2000 draws reach both ends' neighbourhoods.
        assert!(
            (50..=55).contains(&lo) && (145..=150).contains(&hi),
            "{lo} {hi}"
        );
        assert!(s.iter().all(|x| (20..=60).contains(&x.output_len)));
        assert!(random(&DatasetConfig {
            random_range_ratio: 1.0,
            ..cfg
        })
        .is_err());
    }

    #[test]
    fn prefix_repetition_shares_prefixes() {
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: 40,
            prefix_repetition_prefix_len: 16,
            prefix_repetition_suffix_len: 8,
            prefix_repetition_num_prefixes: 4,
            ..Default::default()
        };
        let s = prefix_repetition(&cfg).unwrap();
        assert_eq!(s.len(), 40);
        let mut prefixes = std::collections::BTreeSet::new();
        let mut ids = Vec::new();
        for x in &s {
            ids.clear();
            x.write_ids(&mut ids);
            assert_eq!(ids.len(), 24);
            prefixes.insert(ids[..16].to_vec());
        }
        assert_eq!(prefixes.len(), 4);
    }

    /// SGLang's generated-shared-prefix: each sample's prefix (its group's) and suffix length.
    fn groups_of(s: &[Sample]) -> Vec<(Arc<[u32]>, u32)> {
        s.iter()
            .map(|x| match &x.prompt {
                PromptSource::Synthetic { prefix, len, .. } => (prefix.clone(), *len),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn gsp(ratio: f64, zipf: Option<f64>, groups: u32, per: usize) -> DatasetConfig {
        DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: groups as usize * per,
            seed: 42,
            prefix_repetition_prefix_len: 40,
            prefix_repetition_suffix_len: 10,
            prefix_repetition_num_prefixes: groups,
            prefix_repetition_output_len: 20,
            prefix_groups: Some(PrefixGroups {
                range_ratio: ratio,
                zipf_alpha: zipf,
                turns: 1,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn shared_prefix_lengths_come_from_sglangs_range() {
        // r = 0.5: prefixes in [20, 40] per group, suffixes in [5, 10] and outputs in [10, 20]
        // per prompt; uniform groups keep 25 prompts each.
        let s = prefix_repetition(&gsp(0.5, None, 4, 25)).unwrap();
        assert_eq!(s.len(), 100);
        let g = groups_of(&s);
        let mut per_group: Vec<(Arc<[u32]>, usize)> = Vec::new();
        for (prefix, len) in &g {
            assert!((20..=40).contains(&prefix.len()), "{}", prefix.len());
            assert!((5..=10).contains(len), "{len}");
            match per_group.iter_mut().find(|(p, _)| Arc::ptr_eq(p, prefix)) {
                Some((_, n)) => *n += 1,
                None => per_group.push((prefix.clone(), 1)),
            }
        }
        assert_eq!(per_group.len(), 4);
        assert!(per_group.iter().all(|(_, n)| *n == 25), "{per_group:?}");
        assert!(s.iter().all(|x| (10..=20).contains(&x.output_len)));
        for (x, (prefix, len)) in s.iter().zip(&g) {
            assert_eq!(x.prompt_len, prefix.len() as u64 + *len as u64);
        }
        // Drawn, not fixed: several lengths of each kind occur.
        let lens: std::collections::BTreeSet<u32> = g.iter().map(|(_, l)| *l).collect();
        assert!(lens.len() >= 3, "{lens:?}");
        // Ratio 0 draws from [1, L]; a length of 0 stays 0.
        let mut z = gsp(0.0, None, 2, 50);
        z.prefix_repetition_output_len = 0;
        let s = prefix_repetition(&z).unwrap();
        assert!(s.iter().all(|x| x.output_len == 0));
        assert!(groups_of(&s).iter().all(|(_, l)| (1..=10).contains(l)));
    }

    #[test]
    fn a_prompt_suffix_goes_before_sglangs_assistant_tag() {
        assert_eq!(
            with_suffix("Hello.", " Be brief."),
            "Hello. Be brief.Assistant:"
        );
        // A prompt ending in the tag has it taken off first, so it appears once, last.
        assert_eq!(
            with_suffix("Hello.\nAssistant:", "\nBe brief.\n"),
            "Hello.\n\nBe brief.\nAssistant:"
        );
        // No suffix: the prompt as it is, tag and all.
        assert_eq!(with_suffix("Hi Assistant:", ""), "Hi Assistant:");
        // SGLang's sharegpt applies it before counting (one token a word here).
        let f =
            file(r#"[{"conversations": [{"value": "one two three"}, {"value": "four five"}]}]"#);
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 1,
            conversations: Conversations::Sglang {
                lines: false,
                context_len: None,
            },
            prompt_suffix: " six seven".into(),
            ..Default::default()
        };
        let s = load(&cfg, &mut words, None, None).unwrap();
        assert_eq!(
            s[0].prompt,
            PromptSource::Text("one two three six sevenAssistant:".into())
        );
        assert_eq!(s[0].prompt_len, 5);
    }

    #[test]
    fn later_turn_lengths_go_with_their_prompts_through_the_shuffle() {
        let cfg = |shuffle| DatasetConfig {
            shuffle,
            prefix_groups: Some(PrefixGroups {
                turns: 3,
                ..gsp(0.2, None, 3, 5).prefix_groups.unwrap()
            }),
            ..gsp(0.2, None, 3, 5)
        };
        // Each prompt as (first question's length, output length, later questions' lengths).
        let rows = |c: &DatasetConfig| -> Vec<(u32, u32, Vec<u32>)> {
            let later = later_turn_lens(c).unwrap();
            prefix_repetition(c)
                .unwrap()
                .into_iter()
                .zip(later)
                .map(|(s, l)| match s.prompt {
                    PromptSource::Synthetic { len, .. } => (len, s.output_len, l),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let (ordered, mut shuffled) = (rows(&cfg(false)), rows(&cfg(true)));
        // In order, prompt k's questions are draws 3k, 3k + 1 and 3k + 2 of SGLang's.
        let d = gsp_lengths(&cfg(false), cfg(false).prefix_groups.unwrap()).unwrap();
        for (k, (first, _, later)) in ordered.iter().enumerate() {
            assert_eq!(*first, d.question[3 * k]);
            assert_eq!(*later, d.question[3 * k + 1..3 * k + 3]);
        }
        // Shuffled, each prompt keeps its own: the same rows in another order.
        assert_ne!(shuffled, ordered);
        let mut sorted = ordered.clone();
        sorted.sort();
        shuffled.sort();
        assert_eq!(shuffled, sorted);
        // One turn, or another dataset: none.
        assert_eq!(later_turn_lens(&gsp(0.2, None, 3, 5)), None);
        let random = DatasetConfig {
            kind: DatasetKind::Random,
            ..cfg(true)
        };
        assert_eq!(later_turn_lens(&random), None);
    }

    #[test]
    fn zipf_groups_take_their_rank_share_of_the_same_prompts() {
        // alpha 1.5 over 4 groups: p(rank k) = k^-1.5 / (1 + 0.35355 + 0.19245 + 0.125) =
        // 0.5984, 0.2116, 0.1152, 0.0748. 4000 prompts: each share within 0.03 (4 sigma of
        // the hottest group's binomial spread), the hottest group first.
        let s = prefix_repetition(&gsp(1.0, Some(1.5), 4, 1000)).unwrap();
        let uniform = prefix_repetition(&gsp(1.0, None, 4, 1000)).unwrap();
        let (g, u) = (groups_of(&s), groups_of(&uniform));
        // The group prompts are the uniform draw's: the same four prefixes.
        let mut zipf_prefixes: Vec<Vec<u32>> = g.iter().map(|(p, _)| p.to_vec()).collect();
        let mut uniform_prefixes: Vec<Vec<u32>> = u.iter().map(|(p, _)| p.to_vec()).collect();
        for v in [&mut zipf_prefixes, &mut uniform_prefixes] {
            v.sort();
            v.dedup();
        }
        assert_eq!(zipf_prefixes, uniform_prefixes);
        let want = [0.5984, 0.2116, 0.1152, 0.0748];
        let ordered = prefix_repetition(&DatasetConfig {
            shuffle: false,
            ..gsp(1.0, None, 4, 1)
        })
        .unwrap();
        for (rank, prefix) in groups_of(&ordered).iter().map(|(p, _)| p).enumerate() {
            let n = g.iter().filter(|(p, _)| **p == **prefix).count();
            let share = n as f64 / 4000.0;
            assert!(
                (share - want[rank]).abs() < 0.03,
                "rank {}: {share} (want {})",
                rank + 1,
                want[rank]
            );
        }
    }

    fn file(content: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        f
    }

    #[test]
    fn sharegpt_takes_turns_zero_and_one_whatever_their_roles() {
        // vLLM 0.33 reads turns 0 and 1 of an entry with at least two: a system turn 0 is the
        // prompt (here 2 words, under the 4-token minimum, so the entry is dropped).
        let f = file(
            r#"[
            {"conversations": [{"from": "system", "value": "be nice"},
                               {"from": "human", "value": "seven eight nine ten eleven twelve"},
                               {"from": "gpt", "value": "g h i j k l m"}]},
            {"conversations": [{"from": "human", "value": "one two three four five"},
                               {"from": "gpt", "value": "a b c d e f"},
                               {"from": "human", "value": "a later turn nobody reads"}]},
            {"conversations": [{"from": "human", "value": "too short"}, {"from": "gpt", "value": "x y z w v"}]},
            {"conversations": [{"from": "human", "value": "lonely turn"}]},
            {"id": 3}
        ]"#,
        );
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 3,
            ..Default::default()
        };
        let s = load(&cfg, &mut words, None, None).unwrap();
        // Only the first conversation passes the 4-token minimum; it is oversampled to 3.
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(
            |x| x.prompt == PromptSource::Text("one two three four five".into())
                && x.prompt_len == 5
                && x.output_len == 6
        ));
        let fixed = DatasetConfig {
            sharegpt_output_len: Some(9),
            ..cfg.clone()
        };
        assert!(load(&fixed, &mut words, None, None)
            .unwrap()
            .iter()
            .all(|x| x.output_len == 9));
        let none = DatasetConfig { path: None, ..cfg };
        assert!(load(&none, &mut words, None, None)
            .unwrap_err()
            .to_string()
            .contains("--dataset-path"));
    }

    /// SGLang's rules, worked by hand with the word counter: prompt and output at least 2,
    /// prompt + output at most the context length, turns 0 and 1 whatever their roles.
    #[test]
    fn sglang_sharegpt_filters_by_context_length_and_never_oversamples() {
        let f = file(
            r#"[
            {"conversations": [{"from": "system", "value": "be nice to me"},
                               {"from": "human", "value": "one two three"}]},
            {"conversation": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "x y z"}]},
            {"conversations": [{"from": "human", "value": "short"}, {"from": "gpt", "value": "p q"}]},
            {"conversations": [{"from": "human", "value": "k l"}, {"from": "gpt", "value": "m n"}]},
            {"conversations": [{"from": "human", "value": "lonely turn"}]}
        ]"#,
        );
        let lens = |context_len: Option<u32>, fixed: Option<u32>| -> Vec<(u64, u32)> {
            let cfg = DatasetConfig {
                kind: DatasetKind::ShareGpt,
                path: Some(f.path().into()),
                num_prompts: 10,
                sharegpt_output_len: fixed,
                conversations: Conversations::Sglang {
                    lines: false,
                    context_len,
                },
                ..Default::default()
            };
            let mut s: Vec<(u64, u32)> = load(&cfg, &mut words, None, None)
                .unwrap()
                .iter()
                .map(|x| (x.prompt_len, x.output_len))
                .collect();
            s.sort();
            s
        };
        // (4, 3) is turn 0 (system) and turn 1; "short" is 1 token and dropped; (5, 3) comes
        // from the `conversation` key. Three pass, and three are sent although 10 were asked.
        assert_eq!(lens(None, None), [(2, 2), (4, 3), (5, 3)]);
        assert_eq!(lens(Some(0), None), [(2, 2), (4, 3), (5, 3)]);
        // prompt + output > 7 is dropped; exactly 7 is kept.
        assert_eq!(lens(Some(7), None), [(2, 2), (4, 3)]);
        // With a fixed output length the sum uses it.
        assert_eq!(lens(Some(8), Some(4)), [(2, 4), (4, 4)]);
        // Nothing passes: an error naming SGLang's rules, not an empty run.
        let none = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            sharegpt_output_len: Some(4),
            conversations: Conversations::Sglang {
                lines: false,
                context_len: Some(5),
            },
            ..Default::default()
        };
        let e = load(&none, &mut words, None, None).unwrap_err().to_string();
        assert!(e.contains("--sharegpt-context-len"), "{e}");
    }

    #[test]
    fn chat_requests_read_as_sglang_reads_its_openai_file() {
        let f = file(concat!(
            "{\"messages\": [{\"role\": \"user\", \"content\": \"a b\"}], \"max_tokens\": 7, \"temperature\": 0.5, \"model\": \"x\", \"max_completion_tokens\": 9}\n",
            "not json\n",
            "\n",
            "{\"messages\": []}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}], \"tools\": [1]}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"past the cap\"}]}\n",
        ));
        let cfg = DatasetConfig {
            kind: DatasetKind::ChatRequests,
            path: Some(f.path().into()),
            num_prompts: 3,
            ..Default::default()
        };
        // The row's length: its byte count, to see which rows were measured.
        let mut len = |row: &str| -> Result<u64, String> { Ok(row.len() as u64) };
        let s = load(&cfg, &mut words, None, Some(&mut len)).unwrap();
        // Three parsed lines (the one that is not JSON does not count), the empty one dropped.
        assert_eq!(s.len(), 2);
        let PromptSource::Chat { messages, extra } = &s[0].prompt else {
            panic!("{:?}", s[0].prompt)
        };
        assert_eq!(
            messages.as_ref(),
            &serde_json::json!([{"role": "user", "content": "a b"}])
        );
        assert_eq!(
            extra.as_ref(),
            serde_json::json!({"temperature": 0.5}).as_object().unwrap()
        );
        assert_eq!((s[0].output_len, s[1].output_len), (7, 256));
        assert!(s[0].prompt_len > 50 && s[1].prompt_len > 20);
        // --sharegpt-output-len wins over max_tokens; --num-prompts 0 reads every line.
        let all = DatasetConfig {
            num_prompts: 0,
            sharegpt_output_len: Some(4),
            ..cfg.clone()
        };
        let s = load(&all, &mut words, None, Some(&mut len)).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|x| x.output_len == 4));
        // Without the template's measure the dataset cannot be built.
        assert!(load(&cfg, &mut words, None, None).is_err());
        let bad = file("{\"messages\": \"hi\"}\n");
        let e = load(
            &DatasetConfig {
                path: Some(bad.path().into()),
                ..cfg
            },
            &mut words,
            None,
            Some(&mut len),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":1:") && e.contains("list of messages"), "{e}");
    }

    #[test]
    fn the_wrap_runs_before_counting_and_its_text_is_sent() {
        // Wrapping adds two words around each prompt: the count is the wrapped text's.
        let mut wrap = |p: &str| -> Result<String, String> { Ok(format!("<u> {p} <a>")) };
        let f = file("{\"prompt\": \"a b c\"}\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 1,
            ..Default::default()
        };
        let s = load(&cfg, &mut words, Some(&mut wrap), None).unwrap();
        assert_eq!(s[0].prompt_len, 5);
        assert!(matches!(&s[0].prompt, PromptSource::Text(t) if t == "<u> a b c <a>"));
        let g = file("[{\"conversations\": [{\"value\": \"d e\"}, {\"value\": \"f g h\"}]}]");
        let sg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(g.path().into()),
            num_prompts: 1,
            conversations: Conversations::Sglang {
                lines: false,
                context_len: Some(7),
            },
            ..Default::default()
        };
        // The reply is not wrapped; the context limit sees the wrapped prompt (4 + 3 = 7).
        let s = load(&sg, &mut words, Some(&mut wrap), None).unwrap();
        assert_eq!((s[0].prompt_len, s[0].output_len), (4, 3));
        let mut failing = |_: &str| -> Result<String, String> { Err("the template raised".into()) };
        let e = load(&cfg, &mut words, Some(&mut failing), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the template raised"), "{e}");
    }

    #[test]
    fn sglang_custom_reads_json_lines_with_content_or_value() {
        let f = file(concat!(
            "{\"conversations\": [{\"role\": \"user\", \"content\": \"a b c\"}, {\"role\": \"assistant\", \"content\": \"d e\"}]}\n",
            "not json at all\n",
            "\n",
            "{\"conversation\": [{\"value\": \"f g h i\"}, {\"value\": \"j k l\"}]}\n",
            "{\"conversations\": [{\"content\": \"m n\"}, {\"other\": 1}]}\n",
            "{\"conversations\": [{\"content\": \"only one\"}]}\n",
        ));
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 10,
            conversations: Conversations::Sglang {
                lines: true,
                context_len: None,
            },
            ..Default::default()
        };
        let mut s: Vec<(u64, u32)> = load(&cfg, &mut words, None, None)
            .unwrap()
            .iter()
            .map(|x| (x.prompt_len, x.output_len))
            .collect();
        s.sort();
        // The bad line is skipped; a turn with neither key is empty text (0 words: dropped).
        assert_eq!(s, [(3, 2), (4, 3)]);
        // The same file read as SGLang's sharegpt is not one JSON list.
        let as_list = DatasetConfig {
            conversations: Conversations::Sglang {
                lines: false,
                context_len: None,
            },
            ..cfg
        };
        assert!(load(&as_list, &mut words, None, None)
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
    }

    #[test]
    fn disable_shuffle_keeps_file_order_and_no_oversample_keeps_the_short_file() {
        let rows: String = (1..=6)
            .map(|n| format!("{{\"prompt\": \"{}\"}}\n", vec!["w"; n].join(" ")))
            .collect();
        let f = file(&rows);
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 10,
            ..Default::default()
        };
        let lens = |cfg: &DatasetConfig| -> Vec<u64> {
            load(cfg, &mut words, None, None)
                .unwrap()
                .iter()
                .map(|s| s.prompt_len)
                .collect()
        };
        let shuffled = lens(&cfg);
        assert_eq!(shuffled.len(), 10, "oversampled to --num-prompts");
        assert_ne!(shuffled[..6], [1, 2, 3, 4, 5, 6], "shuffled by the seed");
        let kept = lens(&DatasetConfig {
            shuffle: false,
            oversample: false,
            ..cfg.clone()
        });
        assert_eq!(kept, [1, 2, 3, 4, 5, 6]);
        let first = lens(&DatasetConfig {
            shuffle: false,
            num_prompts: 3,
            ..cfg
        });
        assert_eq!(first, [1, 2, 3]);
    }

    #[test]
    fn custom_reads_prompts_and_optional_output_tokens() {
        let f = file("{\"prompt\": \"a b c\", \"output_tokens\": 7}\n\n{\"prompt\": \"d e\"}\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Custom,
            path: Some(f.path().into()),
            num_prompts: 2,
            ..Default::default()
        };
        // The flag (256 by default) sets every row's length, output_tokens or not (vLLM).
        let mut s = load(&cfg, &mut words, None, None).unwrap();
        s.sort_by_key(|x| x.prompt_len);
        assert_eq!((s[0].prompt_len, s[0].output_len), (2, 256));
        assert_eq!((s[1].prompt_len, s[1].output_len), (3, 256));
        // -1: each row's output_tokens, which every row must have.
        let from_rows = DatasetConfig {
            custom_output_len: None,
            ..cfg.clone()
        };
        let err = load(&from_rows, &mut words, None, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(":3:") && err.contains("output_tokens"),
            "{err}"
        );
        let g = file("{\"prompt\": \"a b c\", \"output_tokens\": 7}\n");
        let s = load(
            &DatasetConfig {
                path: Some(g.path().into()),
                num_prompts: 1,
                ..from_rows
            },
            &mut words,
            None,
            None,
        )
        .unwrap();
        assert_eq!((s[0].prompt_len, s[0].output_len), (3, 7));
        let bad = file("{\"text\": \"x\"}\n");
        let err = load(
            &DatasetConfig {
                path: Some(bad.path().into()),
                ..cfg
            },
            &mut words,
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(":1:") && err.contains("\"prompt\""), "{err}");
    }

    #[test]
    fn sonnet_builds_prompts_within_the_input_length() {
        let poem: String = (0..40)
            .map(|i| format!("line {i} of the poem here\n"))
            .collect();
        let f = file(&poem);
        let cfg = DatasetConfig {
            kind: DatasetKind::Sonnet,
            path: Some(f.path().into()),
            num_prompts: 5,
            sonnet_input_len: 100,
            sonnet_prefix_len: 40,
            ..Default::default()
        };
        let s = load(&cfg, &mut words, None, None).unwrap();
        assert_eq!(s.len(), 5);
        for x in &s {
            let PromptSource::Text(t) = &x.prompt else {
                panic!("sonnet prompts are text")
            };
            assert!(t.starts_with(SONNET_BASE));
            assert!(
                t.contains("line 0 of the poem"),
                "the shared prefix comes first"
            );
            assert!(x.prompt_len <= 100 && x.prompt_len > 80, "{}", x.prompt_len);
            assert_eq!(x.output_len, 150);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Dataset files come from users: any content gives samples or an error, never a panic.
        #[test]
        fn file_datasets_never_panic(
            text in "(\\PC|[\\[\\]{}\":,\n])*",
            kind in 0usize..3,
        ) {
            let f = file(&text);
            let kind = [DatasetKind::ShareGpt, DatasetKind::Custom, DatasetKind::Sonnet][kind];
            let cfg = DatasetConfig {
                kind,
                path: Some(f.path().into()),
                num_prompts: 3,
                sonnet_input_len: 40,
                sonnet_prefix_len: 5,
                ..Default::default()
            };
            if let Ok(s) = load(&cfg, &mut words, None, None) {
                proptest::prop_assert_eq!(s.len(), 3);
            }
        }
    }

    #[test]
    fn dataset_names() {
        assert_eq!(
            DatasetKind::parse("prefix_repetition"),
            Ok(DatasetKind::PrefixRepetition)
        );
        assert!(DatasetKind::parse("hf")
            .unwrap_err()
            .contains("not supported yet"));
        assert!(DatasetKind::parse("nope").unwrap_err().contains("unknown"));
        assert_eq!(estimate_tokens("abcdefghi"), 3);
    }

    #[test]
    fn a_huge_token_count_from_the_server_is_filtered_not_overflowed() {
        let f = file(
            r#"[{"conversations": [{"from": "human", "value": "one two three four five"},
                                  {"from": "gpt", "value": "REPLY"}]}]"#,
        );
        let cfg = DatasetConfig {
            kind: DatasetKind::ShareGpt,
            path: Some(f.path().into()),
            num_prompts: 2,
            ..Default::default()
        };
        // A `/tokenize` answer of u64::MAX for the reply: prompt + output must not wrap below
        // 2048 (which would keep the sample with a truncated output length).
        let mut bogus = |s: &str| Ok(if s == "REPLY" { u64::MAX } else { 5 });
        let err = load(&cfg, &mut bogus, None, None).unwrap_err().to_string();
        assert!(err.contains("no usable conversation"), "{err}");
    }

    #[test]
    fn sonnet_refuses_a_counter_that_says_zero() {
        let f = file("a line\nanother line\n");
        let cfg = DatasetConfig {
            kind: DatasetKind::Sonnet,
            path: Some(f.path().into()),
            num_prompts: 2,
            sonnet_input_len: 100,
            sonnet_prefix_len: 10,
            ..Default::default()
        };
        // Before: the average clamped to 1e-9 asked for ~1e11 lines per prompt (OOM).
        let err = load(&cfg, &mut |_: &str| Ok(0), None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("0 tokens for every line"), "{err}");
        // A counter that counts the lines but says 0 for whole prompts stays bounded.
        let mut lines_only = |s: &str| Ok(u64::from(s.lines().count() == 1));
        let s = load(&cfg, &mut lines_only, None, None).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|x| match &x.prompt {
            PromptSource::Text(t) => t.lines().count() <= 100 + SONNET_BASE.lines().count(),
            _ => false,
        }));
    }

    #[test]
    fn fewer_prompts_than_prefixes_is_an_error_not_an_empty_set() {
        // An empty set made `bench serve --num-warmups 1` divide by zero picking a warm-up.
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: 2,
            prefix_repetition_num_prefixes: 4,
            ..Default::default()
        };
        let err = load(&cfg, &mut words, None, None).unwrap_err().to_string();
        assert!(
            err.contains("must be at least --prefix-repetition-num-prefixes"),
            "{err}"
        );
        let none = DatasetConfig {
            kind: DatasetKind::Random,
            num_prompts: 0,
            ..Default::default()
        };
        let err = load(&none, &mut words, None, None).unwrap_err().to_string();
        assert!(err.contains("produced no prompts"), "{err}");
    }
}
