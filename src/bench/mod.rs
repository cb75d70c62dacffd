//! Benchmark front ends.

pub mod sglang;
