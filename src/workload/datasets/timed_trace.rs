//! vLLM's `timed_trace`: a Mooncake-style JSONL trace (`workload::trace` reads it), one
//! token-id sample per row, in file order.

use super::{DatasetConfig, DatasetError, Sample};
use crate::workload::trace;

/// The `timed_trace` dataset: one token-id sample per row, in file order.
pub(super) fn timed_trace(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let path = cfg
        .path
        .as_deref()
        .ok_or(DatasetError::NoPath("timed_trace"))?;
    let rows = trace::read(path, &cfg.trace, cfg.num_prompts)?;
    Ok(trace::rows_to_samples(
        &rows,
        cfg.trace.chunk_hash_size,
        cfg.ids,
        cfg.seed,
        cfg.trace.rounds,
    ))
}
