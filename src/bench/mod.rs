//! `bench serve`: vLLM's flags, metric definitions and result JSON.

pub mod args;
pub mod connect;
pub mod conversation;
pub mod error;
pub mod lora;
pub mod merge;
pub mod metrics;
pub mod multi_run;
pub mod multiturn;
pub mod probe;
pub mod result;
pub mod run;
pub mod session;
pub mod shard;
pub mod spec_decode;
pub mod steady;
pub mod sweep;
pub mod sweep_html;
pub mod timeline_html;
