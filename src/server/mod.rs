//! Probing servers (vLLM, SGLang, TGI, llama.cpp, Ollama, generic OpenAI): which engine, which
//! model, its limits and KV capacity, and live `/metrics` sampling during a matrix cell.
//!
//! `probe` keeps detection pure (collected endpoint responses -> [`ServerInfo`]) behind a thin
//! async fetch layer; `sampler` polls `/metrics` on its own task; `gpu` lists and samples this machine's
//! GPUs with nvidia-smi. Neither is on the per-token
//! path, and neither ever sends a generation request that produces more than one token.

pub mod diagnose;
pub mod dialect;
pub mod engine;
pub mod gpu;
pub mod probe;
pub mod ready;
pub mod sampler;

pub use dialect::TokenizeDialect;
pub use engine::EngineKind;
pub use probe::{
    collect, detect, Collected, Fetched, Found, Overrides, ServerInfo, VerifiedTokenize,
};
pub use ready::{wait_ready, NotReady};
pub use sampler::{MetricNames, MetricsSample, Sampler};
