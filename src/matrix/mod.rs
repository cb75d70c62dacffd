//! The speed-test matrix: plan, prefill scouts, sustained-decode cells, verdicts.

pub mod plan;
pub mod status;
