//! What a matrix run is asked to do: [`MatrixConfig`] (the command line's settings, the
//! prompt mode, the header's facts), shared by the runner (`run`) and the prompt maker
//! (`prompts`). Plain data, no IO.

use crate::analysis::repetition::RepetitionConfig;
use crate::matrix::plan::PlanConfig;
use crate::server::Overrides;
use crate::workload::tokenizer::LocalTokenizer;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How prompt sizes are made exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptMode {
    /// `/tokenize` calibration where the server has it (natural prose), else token ids, else
    /// the usage estimate.
    Auto,
    TokenIds,
    Tokenize,
    Usage,
}

/// What the header cannot probe.
#[derive(Clone, Debug, Default)]
pub struct HeaderFacts {
    pub gpu: Option<String>,
    pub vram_gb: Option<f64>,
    pub hardware: Option<String>,
    pub launch_command: Option<String>,
    pub engine_build: Option<String>,
    pub notes: Option<String>,
    /// `matrix --mock`: the built-in simulated server's identity (profile and parameters),
    /// which `--resume` compares instead of its address (a new port every run).
    pub simulated_server: Option<String>,
}

#[derive(Clone, Debug)]
pub struct MatrixConfig {
    pub plan: PlanConfig,
    pub duration: Duration,
    pub model: Option<String>,
    pub chat: bool,
    pub prompt_mode: PromptMode,
    pub seed: u64,
    pub ignore_eos: bool,
    pub out_dir: PathBuf,
    /// Keep finished measurements found in `out_dir/results.json`.
    pub resume: bool,
    /// Keep them even when they were measured with other settings (see `matrix::resume`).
    pub resume_force: bool,
    pub retry_looped: bool,
    pub repetition: RepetitionConfig,
    pub overrides: Overrides,
    pub header: HeaderFacts,
    pub ready_timeout: Duration,
    /// How long the server's metrics must keep showing the gate condition before the window
    /// opens.
    pub ready_stable: Duration,
    pub drain_timeout: Duration,
    /// How long the probe waits for a server that still answers 5xx (loading) before the run
    /// fails (`--ready-check-timeout-sec`; zero: one probe).
    pub ready_check_timeout: Duration,
    pub base_url: String,
    /// `--insecure`: the server's certificate is not checked (recorded in the settings).
    pub insecure: bool,
    /// Skip the warm-up request (tests).
    pub skip_warmup: bool,
    /// Calibrated prompts are kept here by (model, context, seed, kind); `None` calibrates
    /// every run.
    pub prompt_cache: Option<PathBuf>,
    /// `--tokenizer`: count calibration locally instead of with `/tokenize` (completions
    /// prompts only; chat prompts need the server's chat template).
    pub tokenizer: Option<Arc<LocalTokenizer>>,
    /// `--images N --image-size WxH`: every prompt carries these images (chat only; see
    /// `matrix::images`).
    pub images: Option<crate::matrix::images::ImageSpec>,
}
