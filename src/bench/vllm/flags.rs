//! Where `llmspeed bench serve` parts from `vllm bench serve` 0.33.0's argument parser: the one
//! table of refused flags ([`REFUSED`]), and the flags accepted only to be refused
//! ([`RefusedFlags`]), so that a reference command line never ends in clap's "unexpected
//! argument".
//!
//! Every other flag of the reference is accepted with its meaning (`args.rs`). The conformance
//! test (`tests/conformance_flags.rs`) reads the reference's own parser and checks both halves:
//! each reference flag parses here, and each one listed below is refused naming itself and its
//! reason. Owns no IO.

use crate::bench::refusal::{self, Refusal};

/// The command in the refusal messages.
const COMMAND: &str = "bench serve";

const HF_DATASETS: &str = "llmspeed's image prompts are random-mm's, custom_image's and the hf \
                           vision ids', its hub datasets are vLLM's hf ids; it sends no audio or \
                           video (datasets: random, random-mm, sharegpt, custom, custom_image, \
                           prefix_repetition, timed_trace, sonnet, burstgpt, hf)";

/// Each reference flag (or `--flag value` choice) llmspeed refuses, and why. Checked against
/// vLLM 0.33.0's parser by `tests/conformance_flags.rs`.
pub const REFUSED: &[Refusal] = &[
    Refusal {
        flag: "--profile",
        reason: "it starts and stops the server's torch profiler; profile the server with its \
                 own tools while llmspeed runs",
    },
    Refusal {
        flag: "--plot-dataset-stats",
        reason: "llmspeed draws no matplotlib figure; --dry-run prints the dataset's lengths",
    },
    Refusal {
        flag: "--tokenizer-mode",
        reason: "only auto: a local tokenizer is a tokenizer.json (the Rust tokenizers crate); \
                 mistral_common and custom tokenizer modes are Python-only",
    },
    Refusal {
        flag: "--spec-bench-output-len",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--spec-bench-category",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--speed-bench-dataset-subset",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--speed-bench-output-len",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--speed-bench-category",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--asr-min-audio-len-sec",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--asr-max-audio-len-sec",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--random-batch-size",
        reason: "only 1: batched prompts are for vLLM's embeddings benchmark, and llmspeed \
                 measures generation",
    },
    Refusal {
        flag: "--no-reranker",
        reason: "it shapes the reranking dataset (random-rerank); llmspeed measures generation",
    },
    Refusal {
        flag: "--dataset-name random-rerank",
        reason: "reranking is a pooling task; llmspeed measures generation",
    },
    Refusal {
        flag: "--dataset-name custom_audio",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--dataset-name spec_bench",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--dataset-name speed_bench",
        reason: HF_DATASETS,
    },
    Refusal {
        flag: "--backend openai-audio",
        reason: "speech-to-text sends audio; llmspeed measures text generation",
    },
    Refusal {
        flag: "--backend openai-embeddings",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend openai-embeddings-chat",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend openai-embeddings-clip",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend openai-embeddings-vlm2vec",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend infinity-embeddings",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend infinity-embeddings-clip",
        reason: "embeddings are a pooling task with no tokens to time; llmspeed measures \
                 generation",
    },
    Refusal {
        flag: "--backend vllm-pooling",
        reason: "pooling returns no tokens to time; llmspeed measures generation",
    },
    Refusal {
        flag: "--backend vllm-rerank",
        reason: "reranking is a pooling task; llmspeed measures generation",
    },
];

/// Accepted flags whose default reads differently from the reference parser's, and why the
/// run is the same (or how it differs). Checked against vLLM 0.33.0's parser by
/// `tests/conformance_flags.rs`: every other accepted flag has the reference's default.
pub const DEFAULTS_DIFFER: &[(&str, &str)] = &[
    (
        "--endpoint",
        "vLLM's default is /v1/completions whatever the backend (openai-chat and \
         openai-responses then need --endpoint); llmspeed takes the backend's own endpoint",
    ),
    (
        "--percentile-metrics",
        "vLLM's None means ttft,tpot,itl for generation, which llmspeed writes out",
    ),
    (
        "--random-mm-limit-mm-per-prompt",
        "vLLM's default is the Python dict {'image': 255, 'video': 1}; llmspeed writes the same \
         limits as the JSON the flag takes",
    ),
    (
        "--request-id-prefix",
        "vLLM's default is a random bench-<8 hex>- prefix; llmspeed's is a UUID per request \
         (its run tag and index inside), which servers that parse the id accept",
    ),
];

/// The message refusing `flag` (a [`REFUSED`] row).
pub fn refuse(flag: &str) -> String {
    refusal::message(REFUSED, COMMAND, flag)
}

/// The reference's flags llmspeed parses only to refuse them when given, hidden from `--help`
/// (vLLM's own help lists them). A flag written on the command line is refused whatever its
/// value, save `--random-batch-size 1` (the reference's default, which changes nothing).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RefusedFlags {
    #[arg(long, hide = true)]
    pub profile: bool,
    #[arg(long, hide = true)]
    pub plot_dataset_stats: bool,
    #[arg(long, hide = true)]
    pub spec_bench_output_len: Option<String>,
    #[arg(long, hide = true)]
    pub spec_bench_category: Option<String>,
    #[arg(long, hide = true)]
    pub speed_bench_dataset_subset: Option<String>,
    #[arg(long, hide = true)]
    pub speed_bench_output_len: Option<String>,
    #[arg(long, hide = true)]
    pub speed_bench_category: Option<String>,
    #[arg(long, hide = true)]
    pub asr_min_audio_len_sec: Option<String>,
    #[arg(long, hide = true)]
    pub asr_max_audio_len_sec: Option<String>,
    /// Only 1 (the reference's default) is accepted.
    #[arg(long, hide = true, default_value_t = 1)]
    pub random_batch_size: i64,
    #[arg(long, hide = true)]
    pub no_reranker: bool,
}

impl RefusedFlags {
    /// Each flag of this struct with whether it was given, in [`REFUSED`]'s order.
    fn given(&self) -> [(&'static str, bool); 11] {
        [
            ("--profile", self.profile),
            ("--plot-dataset-stats", self.plot_dataset_stats),
            (
                "--spec-bench-output-len",
                self.spec_bench_output_len.is_some(),
            ),
            ("--spec-bench-category", self.spec_bench_category.is_some()),
            (
                "--speed-bench-dataset-subset",
                self.speed_bench_dataset_subset.is_some(),
            ),
            (
                "--speed-bench-output-len",
                self.speed_bench_output_len.is_some(),
            ),
            (
                "--speed-bench-category",
                self.speed_bench_category.is_some(),
            ),
            (
                "--asr-min-audio-len-sec",
                self.asr_min_audio_len_sec.is_some(),
            ),
            (
                "--asr-max-audio-len-sec",
                self.asr_max_audio_len_sec.is_some(),
            ),
            ("--random-batch-size", self.random_batch_size != 1),
            ("--no-reranker", self.no_reranker),
        ]
    }

    /// The first refused flag given, as its refusal.
    pub fn check(&self) -> Result<(), String> {
        refusal::check_given(REFUSED, COMMAND, &self.given())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parsed_refusal_has_a_row_and_every_row_is_raised_somewhere() {
        let parsed: Vec<&str> = RefusedFlags::default()
            .given()
            .iter()
            .map(|(f, _)| *f)
            .collect();
        for f in &parsed {
            assert!(refusal::find(REFUSED, f).is_some(), "{f} has no row");
        }
        // The rows not raised by RefusedFlags are raised by args.rs: --tokenizer-mode and
        // the refused choices of --backend and --dataset-name.
        for r in REFUSED {
            let elsewhere = r.flag == "--tokenizer-mode"
                || r.flag.starts_with("--backend ")
                || r.flag.starts_with("--dataset-name ");
            assert!(
                parsed.contains(&r.flag) || elsewhere,
                "{} is never raised",
                r.flag
            );
        }
    }
}
