//! `llmspeed bench serve`: the front end for `vllm bench serve` — vLLM's flags ([`args`], the
//! refused ones and why in [`flags`]; the server's and the dataset's groups, which `capacity`
//! shares, in [`connection`] and [`dataset_flags`]) mapped
//! to the engine's plan ([`plan`]) with vLLM's request bodies ([`body`]); vLLM's metric
//! definitions ([`metrics`]), result JSON and console summary ([`result`], [`run`]); the session of
//! sweep points and repeated runs ([`session`], [`sweep`]); `--shard`'s saved block and
//! `llmspeed merge` ([`shard`], [`merge`]); `--multi-turn`'s result ([`multiturn`]); the
//! optional keys of probes and speculative decoding ([`probe`], [`spec_decode`]), the server's
//! per-request timing ([`server_timing`]) and the ramp-up's rate changes ([`ramp`]); the HTML pages
//! ([`timeline_html`], [`sweep_html`]).

pub mod args;
pub mod body;
pub mod connection;
pub mod dataset_flags;
pub mod flags;
pub mod merge;
pub mod metrics;
pub mod multiturn;
pub mod plan;
pub mod probe;
pub mod ramp;
pub mod result;
pub mod run;
pub mod server_timing;
pub mod session;
pub mod shard;
pub mod spec_decode;
pub mod sweep;
pub mod sweep_html;
pub mod timeline_html;
