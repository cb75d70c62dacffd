//! What each request asks: `vllm bench serve`'s dataset flags (`--dataset-name` and each
//! family's own flags, `--num-prompts`, `--input-len` / `--output-len` over them) as one clap
//! group, [`DatasetArgs`], which `bench serve` and `llmspeed capacity` both flatten, so the two
//! commands read a dataset the same way. Checked into the one dataset interface,
//! [`DatasetConfig`] (`workload::datasets`), which the engine loads.
//!
//! Parsing and checking only: it resolves an `hf` id to its class (vLLM's table) and never
//! reads a file.

use crate::bench::vllm::connection::Backend;
use crate::bench::vllm::flags::{refuse, REFUSED};
use crate::workload::datasets::{DatasetConfig, DatasetKind};
use std::path::PathBuf;

/// vLLM's dataset flags, by family (their `--help` headings are vLLM's groups).
#[derive(Debug, Clone, clap::Args)]
pub struct DatasetArgs {
    /// random, random-mm, sharegpt, sonnet, custom, prefix_repetition, timed_trace, burstgpt or hf.
    #[arg(long, default_value = "random", help_heading = "Dataset options")]
    pub dataset_name: String,
    /// The dataset file (sharegpt JSON, sonnet text, custom JSONL, timed_trace JSONL), or the
    /// hf dataset's hub id (or local copy, with --hf-name).
    #[arg(long, help_heading = "Dataset options")]
    pub dataset_path: Option<PathBuf>,
    #[arg(long, default_value_t = 1000, help_heading = "Dataset options")]
    pub num_prompts: usize,
    /// Input length of the dataset's prompts: sets --random-input-len.
    #[arg(long, help_heading = "Dataset options")]
    pub input_len: Option<u32>,
    /// Output length of every dataset: sets --random-output-len, --sharegpt-output-len,
    /// --custom-output-len and --prefix-repetition-output-len.
    #[arg(long, help_heading = "Dataset options")]
    pub output_len: Option<u32>,
    /// Keep a dataset file's rows in file order (sharegpt, custom) and prefix_repetition's
    /// prompts in build order, instead of shuffling them by --seed.
    #[arg(long, help_heading = "Dataset options")]
    pub disable_shuffle: bool,
    /// Send only the rows a short dataset file has, instead of repeating rows drawn at random
    /// up to --num-prompts.
    #[arg(long, help_heading = "Dataset options")]
    pub no_oversample: bool,
    /// Send custom prompts as written. Without it each custom prompt is wrapped in the
    /// tokenizer's chat template (one user message and the generation prompt) before it is
    /// counted and sent, as vLLM does; that needs --tokenizer (a folder with the template).
    #[arg(
        long,
        alias = "custom-skip-chat-template",
        help_heading = "Dataset options"
    )]
    pub skip_chat_template: bool,
    /// A JSON object of extra variables for the chat template custom prompts are wrapped in
    /// (e.g. '{"enable_thinking": false}').
    #[arg(long, value_name = "JSON", help_heading = "Dataset options")]
    pub chat_template_kwargs: Option<String>,

    #[arg(long, default_value_t = 1024, help_heading = "Random dataset options")]
    pub random_input_len: u32,
    #[arg(long, default_value_t = 128, help_heading = "Random dataset options")]
    pub random_output_len: u32,
    /// Lengths are uniform in [L(1-r), L(1+r)] (Python vLLM's meaning); a JSON object
    /// '{"input": 0.3, "output": 0.5}' sets the two ratios apart.
    #[arg(long, default_value = "0.0", help_heading = "Random dataset options")]
    pub random_range_ratio: String,
    /// Tokens of a random prefix shared by every prompt.
    #[arg(long, default_value_t = 0, help_heading = "Random dataset options")]
    pub random_prefix_len: u32,

    /// random-mm: the mean number of images per request n.
    #[arg(
        long,
        default_value_t = 1,
        help_heading = "Random multimodal dataset options"
    )]
    pub random_mm_base_items_per_request: u32,
    /// random-mm: each request's image count is uniform in [floor(n(1-r)), ceil(n(1+r))],
    /// r in [0, 1], capped by --random-mm-limit-mm-per-prompt.
    #[arg(
        long,
        default_value_t = 0.0,
        help_heading = "Random multimodal dataset options"
    )]
    pub random_mm_num_mm_items_range_ratio: f64,
    /// random-mm: the most items of each modality per request, a JSON object.
    #[arg(
        long,
        value_name = "JSON",
        default_value = r#"{"image": 255, "video": 1}"#,
        help_heading = "Random multimodal dataset options"
    )]
    pub random_mm_limit_mm_per_prompt: String,
    /// random-mm: a Python dict of (height, width, frames) -> probability; frames 1 is an
    /// image (noise, sent as a JPEG data URL). Video buckets must have probability 0.
    #[arg(
        long,
        value_name = "DICT",
        default_value = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}",
        help_heading = "Random multimodal dataset options"
    )]
    pub random_mm_bucket_config: String,

    /// Each prompt as vLLM's multimodal chat messages (one user message of content parts, the
    /// text then the images): on openai-chat the body vLLM sends without it too, so nothing
    /// changes; refused for sharegpt on the other backends, where vLLM would send the message
    /// list as the prompt (its other datasets here ignore it).
    #[arg(long, help_heading = "Random multimodal dataset options")]
    pub enable_multimodal_chat: bool,

    /// Output length for every request [default: each reply's own length].
    #[arg(long, help_heading = "ShareGPT dataset options")]
    pub sharegpt_output_len: Option<u32>,

    #[arg(long, default_value_t = 550, help_heading = "Sonnet dataset options")]
    pub sonnet_input_len: u32,
    #[arg(long, default_value_t = 150, help_heading = "Sonnet dataset options")]
    pub sonnet_output_len: u32,
    #[arg(long, default_value_t = 200, help_heading = "Sonnet dataset options")]
    pub sonnet_prefix_len: u32,

    /// Output length of every custom row; -1: each row's "output_tokens" (then required).
    #[arg(
        long,
        default_value_t = 256,
        allow_negative_numbers = true,
        help_heading = "Custom dataset options"
    )]
    pub custom_output_len: i64,
    /// `custom_image`: send each local image file as a data URL of its bytes, instead of the
    /// `file://` URL the server reads (vLLM re-encodes it as PNG; llmspeed sends the file).
    #[arg(long, help_heading = "Custom dataset options")]
    pub custom_ensure_client_side_data: bool,

    /// The dataset's subset (the `datasets` library's config name; openai/gsm8k: main).
    #[arg(long, help_heading = "HF dataset options")]
    pub hf_subset: Option<String>,
    /// The dataset's split (each id's own default: train, or test for humaneval and gsm8k).
    #[arg(long, help_heading = "HF dataset options")]
    pub hf_split: Option<String>,
    /// The dataset's hub id, where --dataset-path is a local copy of it.
    #[arg(long, help_heading = "HF dataset options")]
    pub hf_name: Option<String>,
    /// Every request's output length, over the dataset's own.
    #[arg(long, help_heading = "HF dataset options")]
    pub hf_output_len: Option<u32>,
    /// llmspeed's: the column holding each prompt, for a dataset vLLM does not know (text, or a
    /// conversation whose first turn is the prompt).
    #[arg(long, value_name = "COLUMN", help_heading = "HF dataset options")]
    pub hf_prompt_column: Option<String>,
    /// llmspeed's: the column whose text's token count (or whole number) is each output
    /// length, with --hf-prompt-column.
    #[arg(long, value_name = "COLUMN", help_heading = "HF dataset options")]
    pub hf_output_column: Option<String>,
    /// Load the hf dataset whole rather than streamed: --seed then shuffles every row (the
    /// `datasets` library's Dataset.shuffle) instead of shards and a 1,000-row buffer.
    #[arg(long, help_heading = "HF dataset options")]
    pub no_stream: bool,
    /// Blazedit (vdaita/edit_*_char): keep rows whose normalised edit distance is at least this.
    #[arg(long, default_value_t = 0.0, help_heading = "HF dataset options")]
    pub blazedit_min_distance: f64,
    /// Blazedit: keep rows whose normalised edit distance is at most this.
    #[arg(long, default_value_t = 1.0, help_heading = "HF dataset options")]
    pub blazedit_max_distance: f64,
    /// BFCL: comma-separated categories (without BFCL_v3_ and .json), default
    /// simple,live_simple,multiple.
    #[arg(long, help_heading = "HF dataset options")]
    pub bfcl_categories: Option<String>,

    #[arg(
        long,
        default_value_t = 256,
        help_heading = "Prefix repetition dataset options"
    )]
    pub prefix_repetition_prefix_len: u32,
    #[arg(
        long,
        default_value_t = 256,
        help_heading = "Prefix repetition dataset options"
    )]
    pub prefix_repetition_suffix_len: u32,
    #[arg(
        long,
        default_value_t = 10,
        help_heading = "Prefix repetition dataset options"
    )]
    pub prefix_repetition_num_prefixes: u32,
    #[arg(
        long,
        default_value_t = 128,
        help_heading = "Prefix repetition dataset options"
    )]
    pub prefix_repetition_output_len: u32,
}

impl DatasetArgs {
    /// `--dataset-name`, parsed; a dataset vLLM has and llmspeed does not is refused by name.
    pub fn kind(&self) -> Result<DatasetKind, String> {
        let dataset = format!("--dataset-name {}", self.dataset_name);
        if crate::bench::refusal::find(REFUSED, &dataset).is_some() {
            return Err(refuse(&dataset));
        }
        DatasetKind::parse(&self.dataset_name)
    }

    /// The dataset's checks against the backend (vLLM's): images and per-request tools go to
    /// the chat endpoint only.
    pub fn check_backend(&self, kind: DatasetKind, backend: Backend) -> Result<(), String> {
        if self.enable_multimodal_chat
            && kind == DatasetKind::ShareGpt
            && backend != Backend::OpenAiChat
        {
            return Err(format!(
                "--enable-multimodal-chat makes each {} prompt a list of chat messages, which \
                 vLLM sends as the prompt of --backend {} (servers refuse it): use --backend \
                 openai-chat, where the body is the same with or without it",
                kind.as_str(),
                backend.as_str()
            ));
        }
        if kind == DatasetKind::CustomImage && backend != Backend::OpenAiChat {
            return Err(format!(
                "--dataset-name custom_image sends images, which only --backend openai-chat \
                 carries (got {})",
                backend.as_str()
            ));
        }
        if kind == DatasetKind::RandomMm && backend != Backend::OpenAiChat {
            // vLLM's own check: images go in chat messages.
            return Err(format!(
                "--dataset-name random-mm sends images, which only --backend openai-chat \
                 carries (got {})",
                backend.as_str()
            ));
        }
        if kind == DatasetKind::Hf {
            self.hf_class(backend)?;
        }
        Ok(())
    }

    /// The datasets read from a file need `--dataset-path`.
    pub fn check_path(&self, kind: DatasetKind) -> Result<(), String> {
        if matches!(
            kind,
            DatasetKind::ShareGpt
                | DatasetKind::Sonnet
                | DatasetKind::Custom
                | DatasetKind::TimedTrace
        ) && self.dataset_path.is_none()
        {
            return Err(format!(
                "--dataset-name {} needs --dataset-path",
                kind.as_str()
            ));
        }
        Ok(())
    }

    /// vLLM's rule for the chat template: custom prompts are wrapped in it unless
    /// `--skip-chat-template`, or `--skip-tokenizer-init` (vLLM then has no tokenizer to render
    /// with); `--chat-template-kwargs` must be a JSON object (vLLM passes it as `**kwargs`).
    fn chat_template(
        &self,
        kind: DatasetKind,
        skip_tokenizer_init: bool,
    ) -> Result<Option<crate::workload::chat_template::Wrap>, String> {
        let kwargs = match &self.chat_template_kwargs {
            Some(t) => Some(
                crate::workload::chat_template::parse_kwargs("--chat-template-kwargs", t)
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        if kind == DatasetKind::Hf && !skip_tokenizer_init {
            return Ok(self.hf_template());
        }
        if kind != DatasetKind::Custom || self.skip_chat_template || skip_tokenizer_init {
            return Ok(None);
        }
        Ok(Some(crate::workload::chat_template::Wrap {
            strip_bos: false,
            kwargs,
            required: false,
            hint: "vLLM wraps custom prompts so unless --skip-chat-template: give --tokenizer a \
                   folder holding the model's chat template, or --skip-chat-template to send \
                   them as written"
                .into(),
        }))
    }

    /// vLLM's chat template rule for the `hf` class (no `--chat-template-kwargs`: vLLM passes
    /// them to custom prompts only): InstructCoder, MT-Bench, HumanEval, GSM8K and Blazedit wrap
    /// their prompts unless `--skip-chat-template`; MLPerf renders its messages always (it needs
    /// the template); BFCL renders its turn with its tools to count it (without a template it
    /// counts the messages' text, as vLLM falls back).
    fn hf_template(&self) -> Option<crate::workload::chat_template::Wrap> {
        let path = self.dataset_path.as_ref().map(|p| p.to_string_lossy());
        let class = crate::workload::datasets::hf::resolve(path.as_deref(), &self.hf())
            .ok()?
            .class;
        let wraps = class.wraps() && !self.skip_chat_template;
        if !wraps && !class.renders() {
            return None;
        }
        let hint = match class {
            crate::workload::datasets::hf::Class::MlPerf => {
                "vLLM renders MLPerf's system and user message through the model's chat \
                 template: give --tokenizer a folder holding it"
            }
            crate::workload::datasets::hf::Class::Bfcl => {
                "vLLM counts each BFCL request through the model's chat template with its \
                 tools: give --tokenizer a folder holding it (without it the messages' text \
                 is counted)"
            }
            _ => {
                "vLLM wraps this dataset's prompts so unless --skip-chat-template: give \
                 --tokenizer a folder holding the model's chat template, or \
                 --skip-chat-template to send them as written"
            }
        };
        Some(crate::workload::chat_template::Wrap {
            strip_bos: false,
            kwargs: None,
            required: class == crate::workload::datasets::hf::Class::MlPerf,
            hint: hint.into(),
        })
    }

    /// The `hf` dataset's flags as its settings (the class is resolved by [`Self::hf_class`]).
    fn hf(&self) -> crate::workload::datasets::hf::HfSettings {
        crate::workload::datasets::hf::HfSettings {
            name: self.hf_name.clone(),
            subset: self.hf_subset.clone(),
            split: self.hf_split.clone(),
            output_len: self.output_len.or(self.hf_output_len),
            blazedit_min_distance: self.blazedit_min_distance,
            blazedit_max_distance: self.blazedit_max_distance,
            // vLLM's `type=`: split on commas, blanks dropped.
            bfcl_categories: self.bfcl_categories.as_ref().map(|c| {
                c.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect()
            }),
            skip_chat_template: self.skip_chat_template,
            prompt_column: self.hf_prompt_column.clone(),
            output_column: self.hf_output_column.clone(),
            no_stream: self.no_stream,
        }
    }

    /// The `hf` dataset's class for `--dataset-path` / `--hf-name`, as vLLM picks it (an id it
    /// does not know refused with its message, before the run), and vLLM's check that BFCL's
    /// tool calls go to the chat endpoint.
    pub fn hf_class(
        &self,
        backend: Backend,
    ) -> Result<crate::workload::datasets::hf::Class, String> {
        let path = self.dataset_path.as_ref().map(|p| p.to_string_lossy());
        let r = crate::workload::datasets::hf::resolve(path.as_deref(), &self.hf())?;
        if r.class.needs_chat() && backend != Backend::OpenAiChat {
            return Err(
                "BFCL dataset requires the 'openai-chat' backend because it sends per-request \
                 tool schemas via chat completions."
                    .into(),
            );
        }
        if r.class.is_multimodal() && backend != Backend::OpenAiChat {
            // vLLM's check (its list names openai-audio too, which llmspeed does not send).
            return Err(format!(
                "Multi-modal content is not supported on backend '{}'; use one of \
                 ['openai-audio', 'openai-chat'].",
                backend.as_str()
            ));
        }
        if self.hf_prompt_column.is_none() && self.hf_output_column.is_some() {
            return Err("--hf-output-column goes with --hf-prompt-column".into());
        }
        Ok(r.class)
    }

    /// The dataset flags, `--input-len` and `--output-len` over the dataset-specific ones;
    /// `seed` (`--seed`, a load flag in vLLM's groups), `skip_tokenizer_init` (a server flag:
    /// without a tokenizer nothing is wrapped in a chat template) and `trace` (the timed-trace
    /// flags, `bench serve`'s only) come from the other groups.
    pub fn config(
        &self,
        kind: DatasetKind,
        seed: u64,
        skip_tokenizer_init: bool,
        trace: crate::workload::trace::TraceConfig,
    ) -> Result<DatasetConfig, String> {
        if matches!(
            kind,
            DatasetKind::Random | DatasetKind::PrefixRepetition | DatasetKind::RandomMm
        ) && self.dataset_path.is_some()
        {
            return Err(format!(
                "--dataset-name {} builds its prompts: leave --dataset-path out (as vLLM requires)",
                kind.as_str()
            ));
        }
        let (ratio, output_ratio) = self.range_ratio()?;
        let output_len = self.output_len;
        let custom_output_len = match output_len {
            Some(n) => Some(n),
            None if self.custom_output_len == -1 => None,
            None => Some(u32::try_from(self.custom_output_len).map_err(|_| {
                format!(
                    "--custom-output-len must be a number of tokens or -1 (each row's output_tokens), got {}",
                    self.custom_output_len
                )
            })?),
        };
        Ok(DatasetConfig {
            kind,
            path: self.dataset_path.clone(),
            num_prompts: self.num_prompts,
            seed,
            random_input_len: self.input_len.unwrap_or(self.random_input_len),
            random_output_len: output_len.unwrap_or(self.random_output_len),
            random_range_ratio: ratio,
            random_output_range_ratio: output_ratio,
            random_bounds: None,
            // The tokenizer's special tokens are counted once it is loaded.
            random_draws: crate::workload::datasets::RandomDraws::Vllm { special: 0 },
            random_prefix_len: self.random_prefix_len,
            sharegpt_output_len: output_len.or(self.sharegpt_output_len),
            sonnet_input_len: self.sonnet_input_len,
            sonnet_output_len: self.sonnet_output_len,
            sonnet_prefix_len: self.sonnet_prefix_len,
            prefix_repetition_prefix_len: self.prefix_repetition_prefix_len,
            prefix_repetition_suffix_len: self.prefix_repetition_suffix_len,
            prefix_repetition_num_prefixes: self.prefix_repetition_num_prefixes,
            prefix_repetition_output_len: output_len.unwrap_or(self.prefix_repetition_output_len),
            custom_output_len,
            // The runner narrows it to the server's vocabulary once probed.
            ids: crate::workload::datasets::IdRange::DEFAULT,
            trace,
            shuffle: !self.disable_shuffle,
            oversample: !self.no_oversample,
            conversations: crate::workload::datasets::Conversations::Vllm,
            prompt_suffix: String::new(),
            prefix_groups: None,
            chat_template: self.chat_template(kind, skip_tokenizer_init)?,
            random_mm: self.random_mm()?,
            hf: self.hf(),
            sglang_image: Default::default(),
            longbench_v2: Default::default(),
            custom_image: crate::workload::datasets::custom_image::Settings {
                client_side: self.custom_ensure_client_side_data,
            },
        })
    }

    /// The `--random-mm-*` flags, parsed and checked as vLLM checks them (whatever the dataset,
    /// so a bad value never waits for the run).
    fn random_mm(&self) -> Result<crate::workload::datasets::random_mm::MmSettings, String> {
        use crate::workload::datasets::random_mm::{
            parse_buckets, parse_limits, ItemDraw, MmSettings,
        };
        let mm = MmSettings {
            base_items: self.random_mm_base_items_per_request,
            items_range_ratio: self.random_mm_num_mm_items_range_ratio,
            limits: parse_limits(&self.random_mm_limit_mm_per_prompt)?,
            buckets: parse_buckets(&self.random_mm_bucket_config)?,
            fill: crate::workload::image::Fill::Noise,
        };
        ItemDraw::new(&mm)?;
        Ok(mm)
    }

    /// `--random-range-ratio`: one ratio for both lengths, or `{"input": a, "output": b}`
    /// (then the bounds, each ratio in [0, 1) as vLLM requires).
    fn range_ratio(&self) -> Result<(f64, Option<f64>), String> {
        let s = self.random_range_ratio.trim();
        if let Ok(r) = s.parse::<f64>() {
            return Ok((r, None));
        }
        let bad = || {
            format!(
                "--random-range-ratio {s:?}: expected a number or a JSON object {{\"input\": r, \"output\": r}}"
            )
        };
        let v: serde_json::Value = serde_json::from_str(s).map_err(|_| bad())?;
        let ratio = |k: &str| -> Result<f64, String> {
            let r = v
                .get(k)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(bad)?;
            if (0.0..1.0).contains(&r) {
                Ok(r)
            } else {
                Err(format!(
                    "--random-range-ratio: the {k} ratio must be in [0, 1), got {r}"
                ))
            }
        };
        Ok((ratio("input")?, Some(ratio("output")?)))
    }
}
