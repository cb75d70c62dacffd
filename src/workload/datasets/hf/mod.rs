//! vLLM 0.33's `--dataset-name hf`: a Hugging Face dataset's rows turned into samples as the
//! `HuggingFaceDataset` subclass vLLM picks for the dataset's id builds them.
//!
//! Owns: the id → class dispatch in vLLM's order ([`resolve`]), each class's split and subset
//! defaults and the columns it reads ([`Class::columns`]), and each class's rule, one file per
//! class: `conversation` (ConversationDataset), `instruct_coder`, `mt_bench`, `humaneval`,
//! `gsm8k`, `aimo`, `blazedit`, `next_edit` (NextEditPredictionDataset), `mlperf`, `bfcl`, the
//! vision ones `vision_arena`, `mm_conversation` (MultiModalConversationDataset) and `mmstar`
//! (their row images read by `row_image`), and `mapped` (llmspeed's: any dataset, with a
//! column mapping vLLM lacks). Each is a pure function
//! of the rows (`workload::rows`, already in the order vLLM's loader sees them: shuffled by the
//! `datasets` library for `--seed`, or stored), the settings and the token counter.
//!
//! Must never read files or the network: the rows come in ([`samples`]); [`load`] is the
//! family's entry, which asks `workload::hub` for the files and `workload::rows` for the rows.
//! Video (`yale-nlp/MMVU`) and audio ids are refused (llmspeed sends no video or audio).

mod aimo;
pub mod bfcl;
mod blazedit;
mod conversation;
mod gsm8k;
mod humaneval;
mod instruct_coder;
mod mapped;
mod mlperf;
mod mm_conversation;
mod mmstar;
mod mt_bench;
mod next_edit;
mod row_image;
mod vision_arena;

pub use bfcl::{translate_schema, BFCL_DEFAULT_CATEGORIES};

use super::common::{counted, fill_to, wrapped};
use super::{DatasetConfig, DatasetError, PromptSource, Sample, Tokens};
use crate::workload::hub;
use crate::workload::rows::{self, DatasetFiles, FileFormat, Row, RowOrder, Rows};
use serde_json::Value;
use std::path::Path;

/// The `--hf-*`, `--blazedit-*` and `--bfcl-categories` flags, with vLLM's defaults, and the
/// column mapping llmspeed adds for ids vLLM does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct HfSettings {
    /// `--hf-name`: the id, where `--dataset-path` is a local copy.
    pub name: Option<String>,
    /// `--hf-subset` (the `datasets` library's config name).
    pub subset: Option<String>,
    /// `--hf-split`; `None`: the class's default ([`Resolved::split`]).
    pub split: Option<String>,
    /// `--hf-output-len`: every request's output length, over the class's own rule.
    pub output_len: Option<u32>,
    /// `--blazedit-min-distance` / `--blazedit-max-distance`.
    pub blazedit_min_distance: f64,
    pub blazedit_max_distance: f64,
    /// `--bfcl-categories`, split on commas (`None`: BFCL's defaults).
    pub bfcl_categories: Option<Vec<String>>,
    /// `--skip-chat-template`: the classes that wrap their prompt in the model's chat template
    /// (InstructCoder, MT-Bench, HumanEval, GSM8K, Blazedit) send it as written.
    pub skip_chat_template: bool,
    /// llmspeed's `--hf-prompt-column`: the column holding each prompt, for an id vLLM does not
    /// know (a string, or a chat message list whose first user turn is taken).
    pub prompt_column: Option<String>,
    /// llmspeed's `--hf-output-column`: the column whose text's token count is each output
    /// length (else `--hf-output-len`, else 256).
    pub output_column: Option<String>,
    /// `--no-stream`: the dataset loaded whole, so `--seed` shuffles every row
    /// (`Dataset.shuffle`) instead of the streamed shards-and-buffer shuffle.
    pub no_stream: bool,
}

impl Default for HfSettings {
    fn default() -> Self {
        Self {
            name: None,
            subset: None,
            split: None,
            output_len: None,
            blazedit_min_distance: 0.0,
            blazedit_max_distance: 1.0,
            bfcl_categories: None,
            skip_chat_template: false,
            prompt_column: None,
            output_column: None,
            no_stream: false,
        }
    }
}

/// The order vLLM's `HuggingFaceDataset.load_data` gives the rows: stored with
/// `--disable-shuffle`; else the `datasets` library's shuffle for `--seed`, streamed by default
/// (`load_dataset(streaming=True)`), of every row with `--no-stream`.
pub fn row_order(cfg: &DatasetConfig) -> RowOrder {
    match (cfg.shuffle, cfg.hf.no_stream) {
        (false, _) => RowOrder::AsStored,
        (true, false) => RowOrder::Streamed { seed: cfg.seed },
        (true, true) => RowOrder::Full { seed: cfg.seed },
    }
}

/// vLLM 0.33's `HuggingFaceDataset` subclasses llmspeed builds, and its own mapped rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    Conversation,
    InstructCoder,
    MtBench,
    HumanEval,
    Gsm8k,
    Aimo,
    NextEdit,
    Blazedit,
    MlPerf,
    Bfcl,
    /// `VisionArenaDataset`; `id` (`--hf-name`, else `--dataset-path`) picks the turns column.
    VisionArena {
        id: String,
    },
    MmConversation,
    MmStar,
    /// An id vLLM does not know, with `--hf-prompt-column` (and maybe an output column).
    Mapped {
        prompt: String,
        output: Option<String>,
    },
}

impl Class {
    /// vLLM's class name (for messages and docs).
    pub fn name(&self) -> &'static str {
        match self {
            Class::Conversation => "ConversationDataset",
            Class::InstructCoder => "InstructCoderDataset",
            Class::MtBench => "MTBenchDataset",
            Class::HumanEval => "HumanEvalDataset",
            Class::Gsm8k => "GSM8KDataset",
            Class::Aimo => "AIMODataset",
            Class::NextEdit => "NextEditPredictionDataset",
            Class::Blazedit => "BlazeditDataset",
            Class::MlPerf => "MLPerfDataset",
            Class::Bfcl => "BFCLDataset",
            Class::VisionArena { .. } => "VisionArenaDataset",
            Class::MmConversation => "MultiModalConversationDataset",
            Class::MmStar => "MMStarDataset",
            Class::Mapped { .. } => "a column mapping (llmspeed's)",
        }
    }

    /// The columns the class reads, all a reader need decode.
    pub fn columns(&self) -> Vec<String> {
        let c: &[&str] = match self {
            Class::Conversation => &["conversations"],
            Class::InstructCoder => &["input", "instruction"],
            Class::MtBench => &["turns"],
            Class::HumanEval => &["prompt"],
            Class::Gsm8k => &["question"],
            Class::Aimo => &["problem", "solution"],
            Class::NextEdit => &["events", "input", "output"],
            Class::Blazedit => &["code", "change_request", "norm_distance"],
            Class::MlPerf => &["system_prompt", "question", "output"],
            Class::Bfcl => &["question", "function"],
            Class::VisionArena { id } => match vision_arena::turns_column(id) {
                Some(turns) => return vec![turns.to_string(), "images".to_string()],
                None => &["images"],
            },
            Class::MmConversation => &["conversations", "image"],
            Class::MmStar => &["question", "image"],
            Class::Mapped { prompt, output } => {
                let mut v = vec![prompt.clone()];
                v.extend(output.clone());
                return v;
            }
        };
        c.iter().map(|s| s.to_string()).collect()
    }

    /// Whether the class wraps each prompt in the model's chat template (unless
    /// `--skip-chat-template`); MLPerf and BFCL render their messages through it always.
    pub fn wraps(&self) -> bool {
        matches!(
            self,
            Class::InstructCoder
                | Class::MtBench
                | Class::HumanEval
                | Class::Gsm8k
                | Class::Blazedit
        )
    }

    /// Whether the class renders whole message lists through the template (MLPerf's system and
    /// user message; BFCL's turn with its tools, to count it).
    pub fn renders(&self) -> bool {
        matches!(self, Class::MlPerf | Class::Bfcl)
    }

    /// Whether its requests are whole chat conversations with tools (`--backend openai-chat`
    /// only, as vLLM requires).
    pub fn needs_chat(&self) -> bool {
        matches!(self, Class::Bfcl)
    }

    /// Whether its prompts carry images (vLLM's `IS_MULTIMODAL`: `--backend openai-chat`).
    pub fn is_multimodal(&self) -> bool {
        matches!(
            self,
            Class::VisionArena { .. } | Class::MmConversation | Class::MmStar
        )
    }
}

/// The class vLLM picks, with the split and subset it loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub class: Class,
    /// The id the hub knows the dataset by: `--hf-name`, else `--dataset-path`.
    pub id: String,
    pub split: String,
    pub subset: Option<String>,
}

/// What an id resolves to, before the split defaults.
#[derive(Clone, Copy)]
enum Pick {
    Build(fn() -> Class, &'static str),
    /// VisionArena: its class holds the id.
    VisionArena,
    Video,
    Audio,
}

/// vLLM 0.33's `get_samples` for `hf`: each class's ids and default split, in the order it
/// tries them.
const CLASSES: &[(&[&str], Pick)] = &[
    (
        &[
            "lmarena-ai/VisionArena-Chat",
            "lmarena-ai/vision-arena-bench-v0.1",
        ],
        Pick::VisionArena,
    ),
    (&["yale-nlp/MMVU"], Pick::Video),
    (
        &["likaixin/InstructCoder"],
        Pick::Build(|| Class::InstructCoder, "train"),
    ),
    (
        &["philschmid/mt-bench"],
        Pick::Build(|| Class::MtBench, "train"),
    ),
    (
        &["openai/openai_humaneval"],
        Pick::Build(|| Class::HumanEval, "test"),
    ),
    (&["openai/gsm8k"], Pick::Build(|| Class::Gsm8k, "test")),
    // vLLM sets no split for it and then fails, as for ShareGPT below: "train", the
    // dataset's one split, is what its users pass (its subsets are its configs).
    (
        &["lmms-lab/LLaVA-OneVision-Data"],
        Pick::Build(|| Class::MmConversation, "train"),
    ),
    // vLLM sets no split for it and then fails (it gets a dict of splits, not rows): "train",
    // the dataset's one split, is what its users pass.
    (
        &["Aeala/ShareGPT_Vicuna_unfiltered"],
        Pick::Build(|| Class::Conversation, "train"),
    ),
    (
        &[
            "AI-MO/aimo-validation-aime",
            "AI-MO/NuminaMath-1.5",
            "AI-MO/NuminaMath-CoT",
        ],
        Pick::Build(|| Class::Aimo, "train"),
    ),
    (
        &["zed-industries/zeta"],
        Pick::Build(|| Class::NextEdit, "train"),
    ),
    (
        &[
            "openslr/librispeech_asr",
            "facebook/voxpopuli",
            "LIUM/tedlium",
            "edinburghcstr/ami",
            "speechcolab/gigaspeech",
            "kensho/spgispeech",
            "ArtificialAnalysis/Earnings22-Cleaned-AA",
            "D4nt3/esb-datasets-earnings22-validation-tiny-filtered",
        ],
        Pick::Audio,
    ),
    // Matched by --dataset-path alone (vLLM checks no --hf-name for it).
    (
        &["vdaita/edit_5k_char", "vdaita/edit_10k_char"],
        Pick::Build(|| Class::Blazedit, "train"),
    ),
    (
        &[
            "mgoin/mlperf-inference-llama2-data",
            "mgoin/mlperf-inference-llama3.1-data",
        ],
        Pick::Build(|| Class::MlPerf, "train"),
    ),
    (&["Lin-Chen/MMStar"], Pick::Build(|| Class::MmStar, "val")),
    (
        &["gorilla-llm/Berkeley-Function-Calling-Leaderboard"],
        Pick::Build(|| Class::Bfcl, "train"),
    ),
];

/// Every id vLLM 0.33's `hf` knows (the set its refusal lists), sorted.
pub fn known_ids() -> Vec<&'static str> {
    let mut all: Vec<&str> = CLASSES
        .iter()
        .flat_map(|(ids, _)| ids.iter().copied())
        .collect();
    all.sort_unstable();
    all
}

/// The class for `--dataset-path` `path` / `--hf-name`, tried in vLLM's order (each class by
/// either, save Blazedit, which vLLM matches by `--dataset-path` alone), with its default split
/// (and GSM8K's subset `main`). An id vLLM does not know is refused with vLLM's message, unless
/// `hf` names its prompt column.
pub fn resolve(path: Option<&str>, hf: &HfSettings) -> Result<Resolved, String> {
    let Some(path) = path else {
        return Err(
            "--dataset-name hf needs --dataset-path: the dataset's hub id (e.g. \
             likaixin/InstructCoder), or a local copy with --hf-name naming the id"
                .into(),
        );
    };
    let name = hf.name.as_deref();
    let id = name.unwrap_or(path).to_string();
    let found = CLASSES.iter().find(|(ids, pick)| {
        let blazedit = matches!(pick, Pick::Build(f, _) if f() == Class::Blazedit);
        ids.contains(&path) || (!blazedit && name.is_some_and(|n| ids.contains(&n)))
    });
    let (class, default_split) = match found.map(|(_, p)| *p) {
        Some(Pick::VisionArena) => (Class::VisionArena { id: id.clone() }, "train"),
        Some(Pick::Video) => {
            return Err(format!(
                "{id}: a video dataset (vLLM's MMVUDataset sends each row's video as a \
                 video_url part); llmspeed sends no video"
            ))
        }
        Some(Pick::Audio) => {
            return Err(format!(
                "{id}: an audio dataset (vLLM's ASRDataset, for transcription endpoints); \
                 llmspeed sends no audio"
            ))
        }
        Some(Pick::Build(class, split)) => (class(), split),
        None => match &hf.prompt_column {
            Some(prompt) => (
                Class::Mapped {
                    prompt: prompt.clone(),
                    output: hf.output_column.clone(),
                },
                "train",
            ),
            None => return Err(unsupported(path)),
        },
    };
    let subset = match class {
        Class::Gsm8k => Some(hf.subset.clone().unwrap_or_else(|| "main".into())),
        // BFCL reads its own per-category files, no subset.
        Class::Bfcl => None,
        // vLLM sets no subset for these.
        Class::VisionArena { .. } | Class::MmStar => None,
        _ => hf.subset.clone(),
    };
    Ok(Resolved {
        class,
        id,
        split: hf.split.clone().unwrap_or_else(|| default_split.into()),
        subset,
    })
}

/// vLLM 0.33's refusal of an id it does not know (its set printed sorted: Python's order
/// varies from run to run), and what llmspeed takes instead.
fn unsupported(path: &str) -> String {
    let set = known_ids()
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "Unsupported dataset path: {path}. Huggingface dataset only supports dataset_path from \
         one of following: {{{set}}}. Please consider contributing if you would like to add \
         support for additional dataset formats. (llmspeed reads any dataset given the column \
         of its prompts: --hf-prompt-column COLUMN, with --hf-output-column COLUMN or \
         --hf-output-len N for the output lengths)"
    )
}

/// The samples of `class` from `rows` (in the order vLLM's loader sees them), by vLLM's rule
/// for that class; then oversampled to `--num-prompts` unless `--no-oversample`.
pub fn samples(
    cfg: &DatasetConfig,
    class: &Class,
    rows: Rows,
    tokens: &mut dyn Tokens,
) -> Result<Vec<Sample>, DatasetError> {
    let mut rows = Numbered { rows, n: 0 };
    let mut out = match class {
        Class::Conversation => conversation::samples(cfg, &mut rows, tokens),
        Class::InstructCoder => instruct_coder::samples(cfg, &mut rows, tokens),
        Class::MtBench => mt_bench::samples(cfg, &mut rows, tokens),
        Class::HumanEval => humaneval::samples(cfg, &mut rows, tokens),
        Class::Gsm8k => gsm8k::samples(cfg, &mut rows, tokens),
        Class::Aimo => aimo::samples(cfg, &mut rows, tokens),
        Class::NextEdit => next_edit::samples(cfg, &mut rows, tokens),
        Class::Blazedit => blazedit::samples(cfg, &mut rows, tokens),
        Class::MlPerf => mlperf::samples(cfg, &mut rows, tokens),
        Class::Bfcl => bfcl::samples(cfg, &mut rows, tokens),
        Class::VisionArena { id } => vision_arena::samples(cfg, id, &mut rows, tokens),
        Class::MmConversation => mm_conversation::samples(cfg, &mut rows, tokens),
        Class::MmStar => mmstar::samples(cfg, &mut rows, tokens),
        Class::Mapped { prompt, output } => {
            mapped::samples(cfg, prompt, output.as_deref(), &mut rows, tokens)
        }
    }?;
    if out.is_empty() && cfg.num_prompts > 0 {
        return Err(DatasetError::Invalid(format!(
            "{}: no row gave a prompt ({} rows read{}); check --hf-split/--hf-subset{}",
            class.name(),
            rows.n,
            match class {
                Class::Conversation | Class::MmConversation | Class::Aimo | Class::MlPerf =>
                    ", each filtered by vLLM's length limits",
                Class::Blazedit => ", each filtered by --blazedit-min/max-distance",
                _ => "",
            },
            if matches!(class, Class::Bfcl) {
                " and --bfcl-categories"
            } else {
                ""
            }
        )));
    }
    fill_to(&mut out, cfg);
    Ok(out)
}

/// The rows with the count read so far (messages name the row).
pub(super) struct Numbered {
    rows: Rows,
    /// Rows taken so far; the last one taken is row `n - 1`.
    n: usize,
}

impl Numbered {
    /// The next row, or `None` at the end; a read error ends the load.
    fn next_row(&mut self) -> Result<Option<Row>, DatasetError> {
        match self.rows.next() {
            None => Ok(None),
            Some(Err(e)) => Err(DatasetError::Invalid(e.to_string())),
            Some(Ok(r)) => {
                self.n += 1;
                Ok(Some(r))
            }
        }
    }

    /// An error about the row just taken.
    fn bad(&self, msg: impl std::fmt::Display) -> DatasetError {
        DatasetError::Invalid(format!("row {}: {msg}", self.n.saturating_sub(1)))
    }

    /// The row's `col`, which must be there.
    fn get<'r>(&self, row: &'r Row, col: &str) -> Result<&'r Value, DatasetError> {
        row.get(col).ok_or_else(|| {
            let have: Vec<&str> = row.keys().map(String::as_str).collect();
            self.bad(format!(
                "no column {col:?} (the row has {have:?}); is this the dataset's own layout?"
            ))
        })
    }

    /// The row's `col`, a string.
    fn text<'r>(&self, row: &'r Row, col: &str) -> Result<&'r str, DatasetError> {
        let v = self.get(row, col)?;
        v.as_str()
            .ok_or_else(|| self.bad(format!("column {col:?} is {}, not text", kind_of(v))))
    }
}

/// A JSON value's kind, for messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a struct",
    }
}

/// A text prompt's sample: wrapped in the chat template when `wrap` (and the run has one),
/// counted as it will be sent.
fn text_sample(
    tokens: &mut dyn Tokens,
    prompt: &str,
    wrap: bool,
    output_len: u32,
) -> Result<Sample, DatasetError> {
    let prompt = if wrap {
        wrapped(tokens, prompt)?.into_owned()
    } else {
        prompt.to_string()
    };
    let prompt_len = counted(tokens, &prompt)?;
    Ok(Sample {
        prompt: PromptSource::Text(prompt),
        prompt_len,
        output_len,
        group: None,
    })
}

/// The output length of MT-Bench, HumanEval and GSM8K without `--hf-output-len`.
const SINGLE_TURN_OUTPUT_LEN: u32 = 256;

/// MT-Bench's, HumanEval's and GSM8K's one rule: the first `--num-prompts` rows, each one's
/// prompt (`prompt` picks it) wrapped in the chat template unless `--skip-chat-template`; every
/// output length `--hf-output-len`, else 256.
fn single_turn(
    cfg: &DatasetConfig,
    rows: &mut Numbered,
    tokens: &mut dyn Tokens,
    prompt: impl Fn(&Numbered, &Row) -> Result<String, DatasetError>,
) -> Result<Vec<Sample>, DatasetError> {
    let output_len = cfg.hf.output_len.unwrap_or(SINGLE_TURN_OUTPUT_LEN);
    let mut out = Vec::new();
    while out.len() < cfg.num_prompts {
        let Some(row) = rows.next_row()? else { break };
        let p = prompt(rows, &row)?;
        out.push(text_sample(
            tokens,
            &p,
            !cfg.hf.skip_chat_template,
            output_len,
        )?);
    }
    Ok(out)
}

/// vLLM's `is_valid_sequence`: prompt and output at least `min` (4) tokens, the prompt at most
/// `max_prompt`, both together at most `max_total`.
fn valid(prompt: u64, output: u64, max_prompt: u64, max_total: u64) -> bool {
    prompt >= 4 && output >= 4 && prompt <= max_prompt && prompt.saturating_add(output) <= max_total
}

/// An output length in tokens as a request's `max_tokens`.
fn out_len(n: u64) -> Result<u32, DatasetError> {
    u32::try_from(n)
        .map_err(|_| DatasetError::Invalid(format!("an output length of {n} tokens is too many")))
}

/// The family's entry: the dataset's files from the hub (or its cache, or the local copy
/// `--dataset-path` names), their rows in vLLM's order for `--seed`, then [`samples`].
pub fn load(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    let path = cfg.path.as_ref().map(|p| p.to_string_lossy().into_owned());
    let resolved = resolve(path.as_deref(), &cfg.hf).map_err(DatasetError::Invalid)?;
    let path = path.unwrap_or_default();
    let rows = match resolved.class {
        Class::Bfcl => bfcl_rows(cfg, &path)?,
        _ => {
            let files = split_files(&path, &resolved)?;
            let columns = resolved.class.columns();
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            rows::open(&files, &columns, row_order(cfg)).map_err(|e| DatasetError::Invalid(e.0))?
        }
    };
    samples(cfg, &resolved.class, rows, tokens)
}

/// The split's files: a local folder's (`--dataset-path` a folder, chosen as the `datasets`
/// library chooses a folder's files without a card) or one local data file, else the hub's
/// (`--dataset-path` is the id vLLM's `load_dataset` is given), from the cache first.
fn split_files(path: &str, r: &Resolved) -> Result<DatasetFiles, DatasetError> {
    let local = Path::new(path);
    if local.is_file() {
        let format = match local.extension().and_then(|e| e.to_str()) {
            Some("parquet") => FileFormat::Parquet,
            Some("jsonl") => FileFormat::JsonLines,
            Some("json") => FileFormat::Json,
            _ => {
                return Err(DatasetError::Invalid(format!(
                    "{path}: a local dataset file must be .parquet, .jsonl or .json"
                )))
            }
        };
        return Ok(DatasetFiles {
            id: r.id.clone(),
            subset: r.subset.clone(),
            split: r.split.clone(),
            format,
            files: vec![local.to_path_buf()],
        });
    }
    if local.is_dir() {
        return folder_files(local, r);
    }
    hub::dataset_files(path, r.subset.as_deref(), &r.split, None)
        .map_err(|e| DatasetError::Invalid(e.to_string()))
}

/// A local folder's files of the split (every file under it, chosen by the library's default
/// split patterns: `train-*.parquet`, `data/test.jsonl` ...).
fn folder_files(dir: &Path, r: &Resolved) -> Result<DatasetFiles, DatasetError> {
    let mut paths = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let read = std::fs::read_dir(&d).map_err(|err| DatasetError::Read {
            path: d.display().to_string(),
            err,
        })?;
        for e in read.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                paths.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    paths.sort();
    let chosen =
        hub::select::choose(&paths, &Value::Null, r.subset.as_deref(), &r.split).map_err(|m| {
            DatasetError::Invalid(format!(
                "{}: no data files for split {:?}{} ({m:?}); pass --hf-split, or --dataset-path \
                 a .parquet/.jsonl file",
                dir.display(),
                r.split,
                r.subset
                    .as_ref()
                    .map_or(String::new(), |s| format!(" of subset {s:?}"))
            ))
        })?;
    Ok(DatasetFiles {
        id: r.id.clone(),
        subset: chosen.subset,
        split: r.split.clone(),
        format: chosen.format,
        files: chosen.files.iter().map(|f| dir.join(f)).collect(),
    })
}

/// BFCL's rows: each category's `BFCL_v3_<category>.json` (JSON lines, read whole) from the
/// local folder `--dataset-path` names, else the hub (cache first), interleaved and shuffled
/// as vLLM does ([`bfcl::interleave`]). A category without a file is refused with vLLM's
/// message.
fn bfcl_rows(cfg: &DatasetConfig, path: &str) -> Result<Rows, DatasetError> {
    let cache = crate::workload::tokenizer::HubCache::from_env();
    let settings = hub::HubSettings::from_env();
    let mut per = Vec::new();
    for cat in bfcl::categories(cfg.hf.bfcl_categories.as_deref()) {
        let name = bfcl::category_file(&cat);
        let not_found = || {
            DatasetError::Invalid(format!(
                "BFCL category '{cat}' not found: file '{name}' does not exist in {path}. Check \
                 --bfcl-categories (defaults: {}).",
                BFCL_DEFAULT_CATEGORIES.join(", ")
            ))
        };
        let file = if Path::new(path).is_dir() {
            let f = Path::new(path).join(&name);
            if !f.is_file() {
                return Err(not_found());
            }
            f
        } else {
            let Some(cache) = &cache else {
                return Err(DatasetError::Invalid(
                    "no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, HOME is \
                     set; set HF_HUB_CACHE"
                        .into(),
                ));
            };
            let file = hub::HubFile {
                kind: hub::RepoKind::Dataset,
                repo: path,
                file: &name,
                flag: "--dataset-path (a folder holding the BFCL_v3_*.json files)",
            };
            match hub::get(&cache.dir, &file, &settings) {
                Ok(p) => p,
                Err(e)
                    if matches!(
                        *e,
                        hub::HubError::Download {
                            cause: crate::net::fetch::FetchError::Status { status: 404, .. },
                            ..
                        }
                    ) =>
                {
                    return Err(not_found())
                }
                Err(e) => return Err(DatasetError::Invalid(e.to_string())),
            }
        };
        let files = DatasetFiles {
            id: path.to_string(),
            subset: None,
            split: cat.clone(),
            format: FileFormat::JsonLines,
            files: vec![file],
        };
        let rows = rows::open(&files, &[], RowOrder::AsStored)
            .map_err(|e| DatasetError::Invalid(e.0))?
            .collect::<Result<Vec<Row>, _>>()
            .map_err(|e| DatasetError::Invalid(e.0))?;
        per.push(rows);
    }
    Ok(rows::from_vec(bfcl::interleave(
        per,
        cfg.shuffle.then_some(cfg.seed),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::DatasetKind;
    use crate::workload::rows::from_vec;
    use serde_json::json;

    fn words(t: &str) -> Result<u64, String> {
        Ok(t.split_whitespace().count() as u64)
    }

    fn rows(v: Value) -> Rows {
        let Value::Array(a) = v else { unreachable!() };
        from_vec(
            a.into_iter()
                .map(|r| match r {
                    Value::Object(m) => m,
                    _ => unreachable!(),
                })
                .collect(),
        )
    }

    fn cfg(n: usize, hf: HfSettings) -> DatasetConfig {
        DatasetConfig {
            kind: DatasetKind::Hf,
            num_prompts: n,
            hf,
            ..Default::default()
        }
    }

    #[test]
    fn ids_resolve_in_vllms_order_with_its_defaults() {
        let hf = HfSettings::default();
        let r = resolve(Some("openai/gsm8k"), &hf).unwrap();
        assert_eq!((r.class, r.split.as_str()), (Class::Gsm8k, "test"));
        assert_eq!(r.subset.as_deref(), Some("main"));
        let r = resolve(Some("openai/openai_humaneval"), &hf).unwrap();
        assert_eq!((r.class, r.split.as_str()), (Class::HumanEval, "test"));
        // A local copy named by --hf-name; the id is what the hub knows it by.
        let named = HfSettings {
            name: Some("AI-MO/NuminaMath-1.5".into()),
            split: Some("test".into()),
            ..Default::default()
        };
        let r = resolve(Some("/data/nm"), &named).unwrap();
        assert_eq!(
            (r.class, r.id.as_str(), r.split.as_str()),
            (Class::Aimo, "AI-MO/NuminaMath-1.5", "test")
        );
        // Where --dataset-path and --hf-name name two classes, vLLM's first in order wins.
        let both = HfSettings {
            name: Some("Lin-Chen/MMStar".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(Some("likaixin/InstructCoder"), &both)
                .unwrap()
                .class,
            Class::InstructCoder
        );
        // Blazedit is matched by --dataset-path alone, as vLLM matches it.
        let blazedit = HfSettings {
            name: Some("vdaita/edit_5k_char".into()),
            ..Default::default()
        };
        let e = resolve(Some("/data/blazedit"), &blazedit).unwrap_err();
        assert!(
            e.starts_with("Unsupported dataset path: /data/blazedit."),
            "{e}"
        );
        let r = resolve(Some("Lin-Chen/MMStar"), &hf).unwrap();
        assert_eq!((r.class, r.split.as_str()), (Class::MmStar, "val"));
        let e = resolve(Some("yale-nlp/MMVU"), &hf).unwrap_err();
        assert!(e.contains("video dataset"), "{e}");
        let e = resolve(Some("facebook/voxpopuli"), &hf).unwrap_err();
        assert!(e.contains("sends no audio"), "{e}");
        let e = resolve(None, &hf).unwrap_err();
        assert!(e.contains("needs --dataset-path"), "{e}");
        // Any other id with the column of its prompts.
        let mapped = HfSettings {
            prompt_column: Some("text".into()),
            ..Default::default()
        };
        let r = resolve(Some("someone/prompts"), &mapped).unwrap();
        assert_eq!(r.split, "train");
        assert_eq!(r.class.columns(), ["text"]);
        assert_eq!(known_ids().len(), 27);
    }

    #[test]
    fn a_mapping_that_names_no_column_says_which_columns_there_are() {
        let hf = HfSettings {
            prompt_column: Some("prompt".into()),
            ..Default::default()
        };
        let class = resolve(Some("x/y"), &hf).unwrap().class;
        let e = samples(
            &cfg(2, hf),
            &class,
            rows(json!([{"text": "a b", "id": 1}])),
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("row 0") && e.contains("no column \"prompt\"") && e.contains("\"text\""),
            "{e}"
        );
    }

    #[test]
    fn a_mapping_reads_text_or_a_conversation_and_its_output_column() {
        let hf = HfSettings {
            prompt_column: Some("p".into()),
            output_column: Some("o".into()),
            skip_chat_template: true,
            ..Default::default()
        };
        let class = resolve(Some("x/y"), &hf).unwrap().class;
        let r = rows(json!([
            {"p": "a b c", "o": "d e"},
            {"p": null, "o": 3},
            {"p": [{"role": "user", "content": "f g"}, {"role": "assistant", "content": "h"}], "o": 7},
            {"p": [{"from": "human", "value": "i"}], "o": "j k l"},
        ]));
        let s = samples(&cfg(5, hf.clone()), &class, r, &mut words).unwrap();
        let got: Vec<(String, u64, u32)> = s
            .iter()
            .map(|s| match &s.prompt {
                PromptSource::Text(t) => (t.clone(), s.prompt_len, s.output_len),
                p => panic!("{p:?}"),
            })
            .collect();
        // Three rows with prompts (the null one passed over), oversampled to five.
        assert_eq!(
            got[..3],
            [
                ("a b c".into(), 3, 2),
                ("f g".into(), 2, 7),
                ("i".into(), 1, 3)
            ]
        );
        assert_eq!(got.len(), 5);
        let e = samples(
            &cfg(1, hf),
            &class,
            rows(json!([{"p": "a", "o": [1]}])),
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("column \"o\" is a list"), "{e}");
    }

    #[test]
    fn an_empty_split_or_one_whose_rows_are_all_filtered_is_an_error() {
        let e = samples(
            &cfg(3, HfSettings::default()),
            &Class::InstructCoder,
            rows(json!([])),
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no row gave a prompt (0 rows read)"), "{e}");
        let e = samples(
            &cfg(3, HfSettings::default()),
            &Class::Conversation,
            rows(json!([{"conversations": [{"value": "a"}, {"value": "b"}]}])),
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("1 rows read") && e.contains("length limits"),
            "{e}"
        );
        // A row of another layout is named.
        let e = samples(
            &cfg(3, HfSettings::default()),
            &Class::MtBench,
            rows(json!([{"turns": ["a"]}, {"turns": "b"}])),
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("row 1") && e.contains("\"turns\""), "{e}");
    }

    #[test]
    fn mlperf_needs_the_chat_template_and_bfcl_falls_back_to_its_text() {
        let ml = rows(json!([{"system_prompt": "s", "question": "q q q q", "output": "o o o o"}]));
        let e = samples(
            &cfg(1, HfSettings::default()),
            &Class::MlPerf,
            ml,
            &mut words,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--tokenizer"), "{e}");
        let b = rows(
            json!([{"question": [[{"role": "user", "content": "a b"}, {"role": "user"}]],
            "function": {"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "float"}}}}}]),
        );
        let s = samples(&cfg(1, HfSettings::default()), &Class::Bfcl, b, &mut words).unwrap();
        // "a b\n" counted: vLLM's fallback joins the contents (a missing one empty).
        assert_eq!((s[0].prompt_len, s[0].output_len), (2, 512));
        let PromptSource::Chat { extra, .. } = &s[0].prompt else {
            panic!()
        };
        assert_eq!(
            Value::Object((**extra).clone()),
            json!({"tool_choice": "auto", "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}}]})
        );
    }

    /// Any JSON value, nested a little, with the keys the classes read.
    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            "(\\PC| |\n){0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn key() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        proptest::sample::select(vec![
            "conversations",
            "value",
            "input",
            "instruction",
            "turns",
            "prompt",
            "question",
            "problem",
            "solution",
            "events",
            "output",
            "code",
            "change_request",
            "norm_distance",
            "system_prompt",
            "function",
            "role",
            "content",
            "p",
            "o",
            "name",
            "type",
            "conversation",
            "images",
            "image",
            "bytes",
            "path",
        ])
        .prop_map(String::from)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Rows come from anyone's dataset: any rows give samples or an error, never a panic.
        #[test]
        fn any_rows_give_samples_or_an_error(
            rows in proptest::collection::vec(
                proptest::collection::btree_map(key(), json_value(), 0..6), 0..6),
            class in 0usize..14,
            n in 0usize..5,
        ) {
            let v: Vec<Row> = rows.into_iter().map(|m| m.into_iter().collect()).collect();
            let class = fuzz_class(class);
            if let Ok(s) = samples(&cfg(n, HfSettings::default()), &class, from_vec(v), &mut words) {
                proptest::prop_assert!(s.len() == n);
            }
        }
    }

    fn fuzz_class(i: usize) -> Class {
        [
            Class::Conversation,
            Class::InstructCoder,
            Class::MtBench,
            Class::HumanEval,
            Class::Gsm8k,
            Class::Aimo,
            Class::NextEdit,
            Class::Blazedit,
            Class::MlPerf,
            Class::Bfcl,
            Class::Mapped {
                prompt: "p".into(),
                output: Some("o".into()),
            },
            Class::VisionArena {
                id: "lmarena-ai/VisionArena-Chat".into(),
            },
            Class::MmConversation,
            Class::MmStar,
        ][i % 14]
            .clone()
    }
}
