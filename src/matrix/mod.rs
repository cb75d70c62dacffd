//! The speed-test matrix: plan, prefill scouts, sustained-decode cells, verdicts.

pub mod cell;
pub mod config;
pub mod images;
pub mod plan;
pub mod prompts;
pub mod resume;
pub mod run;
pub mod scout;
pub mod status;
