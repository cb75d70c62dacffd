//! `bench serve`: vLLM's flags, metric definitions and result JSON.

pub mod args;
pub mod merge;
pub mod metrics;
pub mod multi_run;
pub mod result;
pub mod run;
pub mod session;
pub mod shard;
pub mod steady;
pub mod sweep;
pub mod timeline_html;
