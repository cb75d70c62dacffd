//! `bench serve`: vLLM's flags, metric definitions and result JSON.

pub mod args;
pub mod metrics;
pub mod result;
pub mod run;
pub mod timeline_html;
