//! Datasets: each family builds [`Sample`]s (a prompt, its length in tokens and the output length
//! to ask for, deterministic for a seed) from one settings value, [`DatasetConfig`], and one
//! token counter, [`Tokens`]; [`load`] is the one entry, and a front end only maps its
//! reference's flags to the settings.
//!
//! Owns turning dataset flags (and files) into samples. It must never do network IO or read
//! a clock: where a text must be measured in tokens, the caller's [`Tokens`] does it (the runner
//! uses the server's `/tokenize` or a local tokenizer). Each family's draws (numpy's generators,
//! Python's `random`) are made in the reference's order in the family's own file.
//!
//! One file per family: `random` (vLLM's and SGLang's `random`, SGLang's `random-ids`, and
//! SGLang's ShareGPT cuts), `sharegpt` (vLLM's and SGLang's rules, SGLang's `custom`), `sonnet`,
//! `custom`, `burstgpt`, `prefix` (`prefix_repetition` and SGLang's generated-shared-prefix),
//! `timed_trace`, `chat_requests` (SGLang's `openai`), `longbench_v2` (SGLang's), `custom_image`
//! (vLLM's), `mmmu` (SGLang's); `common` holds what file families share (the file read, counting, wrapping,
//! oversampling), `text` turns token-id prompts into prose.
//!
//! How to add a family: write `datasets/<family>.rs` with its entry, a function of the settings
//! and the counter, `(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>,
//! DatasetError>` (`sharegpt::sharegpt`, `random::load`; a family that measures nothing takes
//! `cfg` alone, as `burstgpt::burstgpt`), its draws in its reference's order, and its tests
//! beside it; put its flags in [`DatasetConfig`] as fields with the reference's defaults; add
//! its [`DatasetKind`] arm (`as_str`, `parse`, [`DatasetKind::token_ids`]) and its arm in
//! [`load`]'s match. What it needs of the model goes through [`Tokens`] (a new need is a new
//! method there, with a default, that the engine's one implementation answers); the engine
//! calls [`load`] and needs no other change, unless the family's prompts are a new kind of
//! [`PromptSource`] (`sample.rs`, and the engine that sends it).

mod burstgpt;
mod chat_requests;
mod common;
mod custom;
pub mod custom_image;
pub mod hf;
pub mod longbench_v2;
pub mod mmmu;
mod prefix;
mod random;
pub mod random_mm;
pub mod sglang_image;
mod sharegpt;
mod sonnet;
mod text;
mod timed_trace;

pub use burstgpt::burstgpt_rows;
pub use chat_requests::chat_requests;
pub use common::with_suffix;
pub use custom::custom;
pub use prefix::{later_turn_lens, prefix_repetition};
pub use random::{random, random_then, range_bounds, sglang_range, sglang_sharegpt_cuts};
pub use sharegpt::{sharegpt, sharegpt_text};
pub use sonnet::{sonnet, SONNET_BASE};
pub use text::{estimate_tokens, to_text};

use std::path::PathBuf;

pub use crate::workload::sample::{
    DatasetError, IdRange, PromptSource, Sample, VOCAB_LO, VOCAB_SPAN,
};
use crate::workload::tokenizer::LocalTokenizer;

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
    /// vLLM's `random-mm`: `random`'s prompts with images (`workload::datasets::random_mm`).
    RandomMm,
    /// vLLM's `hf`: a Hugging Face dataset's rows, by the class vLLM picks for its id
    /// (`workload::datasets::hf`).
    Hf,
    /// SGLang's `image`: random text lengths with images (`workload::datasets::sglang_image`).
    SglangImage,
    /// SGLang's `longbench_v2`: LongBench v2's questions with their long contexts
    /// (`workload::datasets::longbench_v2`).
    LongBenchV2,
    /// vLLM's `custom_image`: a JSONL file of prompts with image files or URLs
    /// (`workload::datasets::custom_image`).
    CustomImage,
    /// SGLang's `mmmu`: MMMU's Math questions, each with its image
    /// (`workload::datasets::mmmu`).
    Mmmu,
}

impl DatasetKind {
    /// Whether the family's prompts are token ids (exact lengths by construction, sent as ids
    /// where the server takes them); the others' are texts, measured by [`Tokens::count`].
    pub fn token_ids(self) -> bool {
        matches!(
            self,
            DatasetKind::Random
                | DatasetKind::RandomMm
                | DatasetKind::SglangImage
                | DatasetKind::PrefixRepetition
                | DatasetKind::TimedTrace
                | DatasetKind::BurstGpt
        )
    }

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
            DatasetKind::Hf => "hf",
            DatasetKind::SglangImage => "image",
            DatasetKind::LongBenchV2 => "longbench_v2",
            DatasetKind::CustomImage => "custom_image",
            DatasetKind::Mmmu => "mmmu",
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
            "hf" => Ok(DatasetKind::Hf),
            "custom_image" => Ok(DatasetKind::CustomImage),
            "random-rerank" | "spec_bench" => Err(format!(
                "--dataset-name {s} is not supported yet by llmspeed (supported: random, random-mm, sharegpt, sonnet, custom, custom_image, prefix_repetition, timed_trace, burstgpt, hf)"
            )),
            _ => Err(format!(
                "unknown --dataset-name {s:?} (supported: random, random-mm, sharegpt, sonnet, custom, custom_image, prefix_repetition, timed_trace, burstgpt, hf)"
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
    pub random_mm: crate::workload::datasets::random_mm::MmSettings,
    /// `--hf-*`, `--blazedit-*`, `--bfcl-categories` (the `hf` dataset).
    pub hf: hf::HfSettings,
    /// SGLang's `--image-*` (its `image` dataset).
    pub sglang_image: sglang_image::ImageSettings,
    /// SGLang's `longbench_v2`: its output length and context limit.
    pub longbench_v2: longbench_v2::Settings,
    /// vLLM's `--custom-ensure-client-side-data` (the `custom_image` dataset).
    pub custom_image: custom_image::Settings,
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
            hf: Default::default(),
            sglang_image: Default::default(),
            longbench_v2: Default::default(),
            custom_image: Default::default(),
        }
    }
}

/// Turns a dataset's prompt into the text sent (the model's chat template around it, by
/// [`DatasetConfig::chat_template`]'s rule).
pub type PromptWrap<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// The input length of one chat request (a JSON object with `messages`), by the tool's rule
/// (SGLang's `openai` dataset: the messages through the chat template, and the tools).
pub type ChatLen<'a> = dyn FnMut(&str) -> Result<u64, String> + 'a;

/// Chat messages (a JSON list) rendered through the model's chat template with the generation
/// prompt, and `tools` (a JSON list) given to the template where `Some`: the text
/// `apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)`
/// gives.
pub type RenderChat<'a> =
    dyn FnMut(&serde_json::Value, Option<&serde_json::Value>) -> Result<String, String> + 'a;

/// What a family asks of the model while it loads, as one value: the run implements it once
/// (the server's `/tokenize` or a local tokenizer, the chat template); a test can pass a closure
/// that counts (`&mut |t: &str| Ok(..)`), which is a `Tokens` with nothing else.
pub trait Tokens {
    /// A text's length in tokens as the run counts texts (sharegpt, sonnet, custom, prompts
    /// made into prose); token-id families never call it.
    fn count(&mut self, text: &str) -> Result<u64, String>;

    /// What turns each prompt of the families that render a chat template (custom; SGLang's
    /// sharegpt and custom) into the text sent, before it is counted; `None`: sent as written.
    fn wrap(&mut self) -> Option<&mut PromptWrap<'_>> {
        None
    }

    /// What measures the rows of a dataset of whole chat requests, which needs it; `None`: the
    /// model's chat template is not at hand.
    fn chat_len(&mut self) -> Option<&mut ChatLen<'_>> {
        None
    }

    /// What renders whole message lists through the model's chat template (the `hf` dataset's
    /// MLPerf and BFCL); `None`: the template is not at hand.
    fn render(&mut self) -> Option<&mut RenderChat<'_>> {
        None
    }

    /// The model's own tokenizer, loaded here (SGLang's `random` cuts its ShareGPT texts with
    /// it); `None`: none, and SGLang's `random` draws token ids of its lengths instead.
    fn tokenizer(&self) -> Option<&dyn Tokenizer> {
        None
    }
}

impl<F: FnMut(&str) -> Result<u64, String>> Tokens for F {
    fn count(&mut self, text: &str) -> Result<u64, String> {
        self(text)
    }
}

/// The model's tokenizer, as a family that cuts texts by token ids uses it.
pub trait Tokenizer {
    /// A text's token ids, special tokens added.
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
    /// The text of token ids.
    fn decode(&self, ids: &[u32]) -> Result<String, String>;
    /// How many special tokens it adds to a text.
    fn special_tokens(&self) -> u32;
}

impl Tokenizer for LocalTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        LocalTokenizer::encode(self, text, true).map_err(|e| e.to_string())
    }

    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        LocalTokenizer::decode(self, ids).map_err(|e| e.to_string())
    }

    fn special_tokens(&self) -> u32 {
        self.num_special_tokens()
    }
}

/// Builds the samples of `cfg`'s family, measuring with `tokens` what it must (see [`Tokens`]).
/// An empty set is an error.
pub fn load(cfg: &DatasetConfig, tokens: &mut dyn Tokens) -> Result<Vec<Sample>, DatasetError> {
    load_with(cfg, tokens, crate::workload::image::Making::UpFront)
}

/// [`load`], the synthetic image datasets' images (`random-mm`, SGLang's `image`) made as
/// `making` says: while the dataset loads, or their recipes only (made during the run by the
/// engine's producer, which decides: `bench::engine::samples::image_path`).
pub fn load_with(
    cfg: &DatasetConfig,
    tokens: &mut dyn Tokens,
    making: crate::workload::image::Making,
) -> Result<Vec<Sample>, DatasetError> {
    let samples = match cfg.kind {
        DatasetKind::Random => random::load(cfg, tokens),
        DatasetKind::PrefixRepetition => prefix_repetition(cfg),
        DatasetKind::ShareGpt => sharegpt(cfg, tokens),
        DatasetKind::Sonnet => sonnet(cfg, tokens),
        DatasetKind::Custom => custom(cfg, tokens),
        DatasetKind::TimedTrace => timed_trace::timed_trace(cfg),
        DatasetKind::BurstGpt => burstgpt::burstgpt(cfg),
        DatasetKind::RandomMm => random_mm::load(cfg, &cfg.random_mm, making),
        DatasetKind::ChatRequests => chat_requests(cfg, tokens),
        DatasetKind::Hf => hf::load(cfg, tokens),
        DatasetKind::SglangImage => sglang_image::load(cfg, making),
        DatasetKind::LongBenchV2 => longbench_v2::load(cfg, tokens),
        DatasetKind::CustomImage => custom_image::load(cfg, tokens),
        DatasetKind::Mmmu => mmmu::load(cfg, tokens),
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

/// About how many bytes the data URLs of the images `cfg`'s dataset makes will hold, before
/// any is made (0 for a dataset that makes none, or whose settings `load` will refuse).
pub fn image_bytes_estimate(cfg: &DatasetConfig) -> u64 {
    image_need(cfg).total
}

/// [`image_bytes_estimate`] in total and for the request that holds the most (what a request
/// made during the run holds): the synthetic image datasets', the only ones that can be made
/// during the run; nothing for the others.
pub fn image_need(cfg: &DatasetConfig) -> crate::workload::image::ImageNeed {
    let est = match cfg.kind {
        DatasetKind::RandomMm => random_mm::url_bytes_need(cfg, &cfg.random_mm),
        DatasetKind::SglangImage => sglang_image::url_bytes_need(cfg),
        _ => Ok(Default::default()),
    };
    est.unwrap_or_default()
}

/// The data URLs of the images a dataset reads from files before the run and holds until it
/// ends (`custom_image` with `--custom-ensure-client-side-data`), estimated before any file is
/// read: such images are read up front or not at all (no producer makes them). Nothing for
/// the others, or where the dataset's own file will be refused by `load`.
pub fn file_image_need(cfg: &DatasetConfig) -> crate::workload::image::ImageNeed {
    match cfg.kind {
        DatasetKind::CustomImage => custom_image::url_bytes_need(cfg).unwrap_or_default(),
        _ => Default::default(),
    }
}

/// How many 32-bit words SGLang's `random` and `generated-shared-prefix` datasets take from
/// numpy's legacy generator for `cfg` (0 for every other dataset and for vLLM's): SGLang's send
/// times are drawn from the same generator after them.
pub fn random_numpy_words(cfg: &DatasetConfig) -> u64 {
    match (cfg.kind, cfg.random_draws, cfg.prefix_groups) {
        (DatasetKind::Random, RandomDraws::Sglang { .. }, _) => random::numpy_words(cfg),
        (DatasetKind::PrefixRepetition, _, Some(g)) => prefix::numpy_words(cfg, g),
        (DatasetKind::SglangImage, _, _) => sglang_image::numpy_words(cfg),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_util::*;

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
            let samples = load(&cfg, &mut words).unwrap();
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
            if let Ok(s) = load(&cfg, &mut words) {
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
        assert_eq!(DatasetKind::parse("hf"), Ok(DatasetKind::Hf));
        assert!(DatasetKind::parse("spec_bench")
            .unwrap_err()
            .contains("not supported yet"));
        assert!(DatasetKind::parse("nope").unwrap_err().contains("unknown"));
        assert_eq!(estimate_tokens("abcdefghi"), 3);
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
        let err = load(&cfg, &mut words).unwrap_err().to_string();
        assert!(
            err.contains("must be at least --prefix-repetition-num-prefixes"),
            "{err}"
        );
        let none = DatasetConfig {
            kind: DatasetKind::Random,
            num_prompts: 0,
            ..Default::default()
        };
        let err = load(&none, &mut words).unwrap_err().to_string();
        assert!(err.contains("produced no prompts"), "{err}");
    }
}

/// What the families' tests share: a word counter, files, the naive twin of `write_ids`.
#[cfg(test)]
mod test_util {
    use super::{ChatLen, IdRange, PromptWrap, Tokens};
    use std::io::Write;

    /// [`words`] with a chat template's functions, as the run's [`Tokens`] has them.
    #[derive(Default)]
    pub struct Templated {
        wrap: Option<Box<PromptWrap<'static>>>,
        chat_len: Option<Box<ChatLen<'static>>>,
    }

    impl Templated {
        pub fn wrapping(w: impl FnMut(&str) -> Result<String, String> + 'static) -> Self {
            Templated {
                wrap: Some(Box::new(w)),
                ..Default::default()
            }
        }

        pub fn measuring(len: impl FnMut(&str) -> Result<u64, String> + 'static) -> Self {
            Templated {
                chat_len: Some(Box::new(len)),
                ..Default::default()
            }
        }
    }

    impl Tokens for Templated {
        fn count(&mut self, text: &str) -> Result<u64, String> {
            words(text)
        }

        fn wrap(&mut self) -> Option<&mut PromptWrap<'_>> {
            self.wrap.as_deref_mut().map(|w| w as &mut PromptWrap<'_>)
        }

        fn chat_len(&mut self) -> Option<&mut ChatLen<'_>> {
            self.chat_len.as_deref_mut().map(|l| l as &mut ChatLen<'_>)
        }
    }

    pub fn words(s: &str) -> Result<u64, String> {
        Ok(s.split_whitespace().count() as u64)
    }

    /// The naive twin of `write_ids`: vLLM's formula written directly.
    pub fn naive_ids(prefix: &[u32], start: u32, len: u32, ids: IdRange) -> Vec<u32> {
        let mut v = prefix.to_vec();
        v.extend((0..len).map(|j| ids.lo + ((start as u64 + j as u64) % ids.span as u64) as u32));
        v
    }

    pub fn file(content: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        f
    }
}
