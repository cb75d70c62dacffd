//! Rows of a tabular dataset (a Hugging Face dataset's parquet or JSON files), in the order a
//! reference's loader sees them: the one interface between where rows come from (the hub, its
//! cache, local files: `workload::hub`) and the families that turn rows into samples
//! (`workload::datasets::hf`).
//!
//! A row is a JSON object: parquet's nested columns map onto it as the `datasets` library's
//! Python objects do (struct → object, list → array, string, integer, float, bool, null), so a
//! family reads `row["conversations"][0]["value"]` the way vLLM's class reads it.
//!
//! Owns no network IO: [`DatasetFiles`] names local files (already downloaded or cached).

use std::path::PathBuf;

/// One row: column name → value.
pub type Row = serde_json::Map<String, serde_json::Value>;

/// A stream of rows; a file that cannot be read ends it with an error that names the file.
pub type Rows = Box<dyn Iterator<Item = Result<Row, RowsError>> + Send>;

/// A dataset split's local data files, in the order the `datasets` library lists its shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetFiles {
    /// The dataset's id as the user named it (`likaixin/InstructCoder`), for messages.
    pub id: String,
    pub subset: Option<String>,
    pub split: String,
    pub format: FileFormat,
    pub files: Vec<PathBuf>,
}

/// How a dataset's files are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    /// One JSON object per line.
    JsonLines,
    /// One JSON array of objects (or an object whose one list-valued key holds them).
    Json,
}

/// The order rows are taken in: vLLM's `HuggingFaceDataset` shuffles with the `datasets`
/// library for `--seed` (streamed by default, which shuffles shards and then a buffer; in full
/// with `--no-stream`), or keeps the stored order (`--disable-shuffle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    AsStored,
    /// `IterableDataset.shuffle(seed=seed)`: the `datasets` library's streamed shuffle.
    Streamed {
        seed: u64,
    },
    /// `Dataset.shuffle(seed=seed)`: a permutation of every row.
    Full {
        seed: u64,
    },
}

/// Why rows could not be read: the message names the file and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RowsError(pub String);

/// Rows held in memory, in their order (tests, and datasets small enough to hold).
pub fn from_vec(rows: Vec<Row>) -> Rows {
    Box::new(rows.into_iter().map(Ok))
}
