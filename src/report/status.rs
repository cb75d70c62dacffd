//! The verdict vocabulary of the speed-test matrix, as plain data the report model owns and
//! the matrix fills: a cell's status (Valid, Looped, Client-bound, Over capacity, Failed,
//! Queued, Skipped, Pending), why a cell is over capacity, the server's limits and where its KV capacity came
//! from. The rules that choose a status are `matrix::status`'s. It holds no serde code: the
//! report model decides how statuses are written.

use crate::timeline::ErrorKind;

/// Where a server's KV-cache capacity (in tokens) came from, so the report can say how much to
/// trust the Over-capacity verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvSource {
    /// vLLM `cache_config_info{kv_cache_size_tokens}`: exact on recent builds.
    KvCacheSizeTokens,
    /// vLLM `num_gpu_blocks × block_size`: overstates hybrid and sliding-window models.
    BlocksTimesBlockSize,
    /// SGLang `/get_server_info` `max_total_num_tokens`.
    SglangMaxTotalNumTokens,
    /// TGI `/info` `max_batch_total_tokens`.
    TgiMaxBatchTotalTokens,
    /// llama.cpp `/props` `total_slots × n_ctx` (n_ctx per slot).
    LlamaCppSlotsTimesCtx,
    /// `--kv-budget` on the command line.
    UserFlag,
}

impl KvSource {
    pub const ALL: [KvSource; 6] = [
        KvSource::KvCacheSizeTokens,
        KvSource::BlocksTimesBlockSize,
        KvSource::SglangMaxTotalNumTokens,
        KvSource::TgiMaxBatchTotalTokens,
        KvSource::LlamaCppSlotsTimesCtx,
        KvSource::UserFlag,
    ];

    /// Stable identifier (used as the JSON value).
    pub fn as_str(self) -> &'static str {
        match self {
            KvSource::KvCacheSizeTokens => "kv_cache_size_tokens",
            KvSource::BlocksTimesBlockSize => "num_gpu_blocks_x_block_size",
            KvSource::SglangMaxTotalNumTokens => "max_total_num_tokens",
            KvSource::TgiMaxBatchTotalTokens => "max_batch_total_tokens",
            KvSource::LlamaCppSlotsTimesCtx => "slots_x_n_ctx",
            KvSource::UserFlag => "kv_budget_flag",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Human words for the report header.
    pub fn describe(self) -> &'static str {
        match self {
            KvSource::KvCacheSizeTokens => "vLLM kv_cache_size_tokens",
            KvSource::BlocksTimesBlockSize => "vLLM num_gpu_blocks × block_size",
            KvSource::SglangMaxTotalNumTokens => "SGLang max_total_num_tokens",
            KvSource::TgiMaxBatchTotalTokens => "TGI max_batch_total_tokens",
            KvSource::LlamaCppSlotsTimesCtx => "llama.cpp slots × n_ctx",
            KvSource::UserFlag => "--kv-budget",
        }
    }
}

/// What the server can hold, as probed or overridden. `None` = not known: no verdict is drawn
/// from an unknown limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerLimits {
    pub max_model_len: Option<u64>,
    pub kv_tokens: Option<(u64, KvSource)>,
    /// Most requests the server runs at once (`--max-num-seqs`, SGLang `max_running_requests`,
    /// llama.cpp slots).
    pub max_running: Option<u64>,
}

/// Why a cell is not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityReason {
    /// `concurrency × (context + max_tokens)` exceeds the KV capacity.
    KvCache { needed_tokens: u64, kv_tokens: u64 },
    /// More streams than the server runs at once.
    RunningLimit { max_running: u64 },
}

/// A cell's verdict. Figures of a cell (kept even when Looped or Queued) live in the report; the
/// status only says how to read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CellStatus {
    /// Measured with all C streams running and no loop.
    Valid,
    /// At least one stream repeated itself; the figures are kept but marked.
    Looped,
    /// Not run: it would exceed the server's KV cache or running limit.
    OverCapacity(CapacityReason),
    /// Requests failed; error kinds with counts, most frequent first.
    Failed(Vec<(ErrorKind, u64)>),
    /// The server kept requests waiting during the window: it never ran C at once.
    Queued,
    /// The client's own lag made the figures untrustworthy at the precision they are printed
    /// (`analysis::client_lag::verdict`; the reasons are the cell's
    /// `client_lag.client_bound_reasons`). Figures kept and marked.
    ClientBound,
    /// Not run: context + max_tokens does not fit `max_model_len`.
    Skipped,
    /// Planned but not (yet) run: an interrupted run's partial report.
    Pending,
}

impl CellStatus {
    /// Stable identifier (used as the JSON `kind` and CSV value).
    pub fn as_str(&self) -> &'static str {
        match self {
            CellStatus::Valid => "valid",
            CellStatus::Looped => "looped",
            CellStatus::OverCapacity(_) => "over_capacity",
            CellStatus::Failed(_) => "failed",
            CellStatus::Queued => "queued",
            CellStatus::ClientBound => "client_bound",
            CellStatus::Skipped => "skipped",
            CellStatus::Pending => "pending",
        }
    }

    /// Words for tables.
    pub fn label(&self) -> &'static str {
        match self {
            CellStatus::Valid => "Valid",
            CellStatus::Looped => "Looped",
            CellStatus::OverCapacity(_) => "Over capacity",
            CellStatus::Failed(_) => "Failed",
            CellStatus::Queued => "Queued",
            CellStatus::ClientBound => "Client-bound",
            CellStatus::Skipped => "Skipped",
            CellStatus::Pending => "Pending",
        }
    }

    /// Whether the cell was run (its figures mean something, even if marked).
    pub fn was_run(&self) -> bool {
        matches!(
            self,
            CellStatus::Valid
                | CellStatus::Looped
                | CellStatus::Failed(_)
                | CellStatus::Queued
                | CellStatus::ClientBound
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_source_round_trips() {
        for k in KvSource::ALL {
            assert_eq!(KvSource::parse(k.as_str()), Some(k));
        }
        assert_eq!(KvSource::parse("nope"), None);
    }
}
