//! What ends a benchmark run before it has results: one error type for every step, each a line
//! for the user. Below every other module of `bench`, so each can return it.

use crate::workload::datasets;

/// A run that could not be done, as one line.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    NotReady(#[from] crate::server::NotReady),
    #[error("{0}")]
    Dataset(#[from] datasets::DatasetError),
    #[error("cannot save the result to {0}: {1}")]
    Save(String, std::io::Error),
}
