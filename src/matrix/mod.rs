//! The speed-test matrix: plan, prefill scouts, sustained-decode cells, verdicts.

pub mod plan;
pub mod status;
pub mod cell;
pub mod run;
pub mod scout;
