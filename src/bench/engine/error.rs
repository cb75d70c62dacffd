//! What ends a benchmark run before it has results: one error type for every step, each a line
//! for the user. Below every other module of `bench`, so each can return it.

use crate::net::Cancel;
use crate::workload::datasets;
use std::future::Future;

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
    /// A stop (Ctrl-C, SIGTERM) came during a set-up step, before any benchmark request:
    /// nothing was measured.
    #[error("stopped by {signal} while {step}: nothing was measured")]
    Interrupted {
        /// What was under way, as a phrase after "while".
        step: &'static str,
        /// The stop's reason (the signal's name).
        signal: &'static str,
    },
}

/// Runs the set-up step `f` (named by `step`, a phrase after "while") until it ends or `cancel`
/// is cancelled, whichever comes first: a stop ends the step at once (it is dropped) as
/// [`RunError::Interrupted`]. A step already cancelled before it starts does not start.
pub async fn unless_stopped<T>(
    cancel: &Cancel,
    step: &'static str,
    f: impl Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    let stopped = || RunError::Interrupted {
        step,
        signal: cancel.reason().unwrap_or("a stop"),
    };
    if cancel.is_cancelled() {
        return Err(stopped());
    }
    tokio::select! {
        // The stop first: a step whose requests the stop cut ends as interrupted, not failed.
        biased;
        _ = cancel.cancelled() => Err(stopped()),
        r = f => r,
    }
}
