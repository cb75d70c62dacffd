//! `llmspeed bench`: drop-ins for the Python serving benchmarks, as one shared engine and one
//! front end per tool (hyper's split between `proto` and `client`/`server` is the picture).
//!
//! - [`engine`]: dataset -> schedule -> requests -> per-request records, plus the pure pieces
//!   every front end reuses (shards, steady state, repeated runs, LoRA, conversations, probes).
//! - [`vllm`]: `llmspeed bench serve`, the drop-in for `vllm bench serve` — its flags, request
//!   bodies, metric definitions, result JSON, console summary, sessions, sweeps and merge.
//! - [`sglang`]: `llmspeed bench sglang`, the drop-in for `python -m sglang.bench_serving` — its
//!   flags, request bodies, stream readers and metrics, console block and JSONL record.
//!
//! Architecture invariant: a front end maps flags in and results out; the engine knows no
//! tool's names. Front ends never import each other.

pub mod engine;
pub mod sglang;
pub mod vllm;
