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
//! [`open`] reads them: `parquet` (row group by row group, only the named columns), `json`
//! (JSON Lines a line at a time, JSON whole), in the [`RowOrder`] `order` computes.

mod json;
pub mod order;
pub mod parquet;

use std::path::{Path, PathBuf};

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

/// `files`' rows in `order`, each row holding only `columns` (empty: every column). Every
/// file is checked before the first row is read: a parquet file's footer (a truncated or corrupt
/// file fails here) and that it has the named columns (else the error lists those it has); a
/// JSON file's first row. Streamed and stored orders hold at most the shuffle's buffer (1,000
/// rows and ten 100-row batches); the full shuffle holds every row, as `Dataset.shuffle` does.
pub fn open(files: &DatasetFiles, columns: &[&str], order: RowOrder) -> Result<Rows, RowsError> {
    if files.files.is_empty() {
        return Err(RowsError(format!(
            "{}: split {:?} has no data files",
            files.id, files.split
        )));
    }
    let owned: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let mut sources = Vec::with_capacity(files.files.len());
    for path in &files.files {
        sources.push(Source::check(files.format, path, columns)?);
    }
    Ok(match order {
        RowOrder::AsStored => {
            Box::new(sources.into_iter().flat_map(move |s| s.rows(owned.clone())))
        }
        RowOrder::Streamed { seed } => {
            let perm = order::shard_order(sources.len(), seed);
            let mut slots: Vec<Option<Source>> = sources.into_iter().map(Some).collect();
            let permuted: Vec<Source> = perm.iter().filter_map(|&i| slots[i].take()).collect();
            let mut permuted = permuted.into_iter();
            let groups = order::groups(permuted.len())
                .into_iter()
                .map(|g| {
                    let group: Vec<Source> = permuted.by_ref().take(g.len()).collect();
                    let owned = owned.clone();
                    Box::new(group.into_iter().flat_map(move |s| s.rows(owned.clone()))) as Rows
                })
                .collect();
            Box::new(order::Streamed::new(groups, seed))
        }
        RowOrder::Full { seed } => {
            let all: Vec<Row> = sources
                .into_iter()
                .flat_map(|s| s.rows(owned.clone()))
                .collect::<Result<_, _>>()?;
            from_vec(order::full(all, seed))
        }
    })
}

/// One data file, checked and not yet read.
enum Source {
    Parquet(parquet::ParquetFile),
    JsonLines(PathBuf),
    Json(PathBuf),
}

impl Source {
    fn check(format: FileFormat, path: &Path, columns: &[&str]) -> Result<Self, RowsError> {
        Ok(match format {
            FileFormat::Parquet => Source::Parquet(parquet::ParquetFile::open(path, columns)?),
            FileFormat::JsonLines => {
                if let Some(first) = json::lines(path)?.next() {
                    has_columns(path, &first?, columns)?;
                }
                Source::JsonLines(path.to_path_buf())
            }
            FileFormat::Json => {
                if !path.is_file() {
                    return Err(RowsError(format!(
                        "cannot read {}: no such file",
                        path.display()
                    )));
                }
                Source::Json(path.to_path_buf())
            }
        })
    }

    /// The file's rows in stored order, cut to `columns`.
    fn rows(self, columns: Vec<String>) -> Rows {
        match self {
            // The parquet reader reads the named columns alone.
            Source::Parquet(f) => Box::new(f.into_rows()),
            Source::JsonLines(path) => match json::lines(&path) {
                Ok(rows) => Box::new(rows.map(move |r| r.map(|r| keep(r, &columns)))),
                Err(e) => Box::new(std::iter::once(Err(e))),
            },
            Source::Json(path) => match json::whole(&path).and_then(|rows| {
                if let Some(first) = rows.first() {
                    let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
                    has_columns(&path, first, &cols)?;
                }
                Ok(rows)
            }) {
                Ok(rows) => Box::new(rows.into_iter().map(move |r| Ok(keep(r, &columns)))),
                Err(e) => Box::new(std::iter::once(Err(e))),
            },
        }
    }
}

/// A JSON dataset's columns are its rows' keys: a named column the first row lacks is a
/// mistake to report with the keys it has.
fn has_columns(path: &Path, row: &Row, columns: &[&str]) -> Result<(), RowsError> {
    match columns.iter().find(|c| !row.contains_key(**c)) {
        None => Ok(()),
        Some(c) => Err(RowsError(format!(
            "{}: no column {c:?}; its columns are {}",
            path.display(),
            row.keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// `row` cut to `columns` (all when empty); a later row missing one holds null there, as the
/// `datasets` library fills it.
fn keep(mut row: Row, columns: &[String]) -> Row {
    if columns.is_empty() {
        return row;
    }
    columns
        .iter()
        .map(|c| (c.clone(), row.remove(c).unwrap_or(serde_json::Value::Null)))
        .collect()
}
