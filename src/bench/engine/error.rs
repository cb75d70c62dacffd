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
    let r = tokio::select! {
        // The stop first: a step whose requests the stop cut ends as interrupted, not failed.
        biased;
        _ = cancel.cancelled() => return Err(stopped()),
        r = f => r,
    };
    // A stop sets its flag before it wakes the waiters: a step whose requests saw the flag can
    // end before `cancelled` wakes, in the same poll. It was stopped all the same (before, it
    // passed as finished, and the next step was named as the one interrupted).
    if cancel.is_cancelled() {
        return Err(stopped());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_stop_ends_a_step_that_would_never_end_and_names_it() {
        let cancel = Cancel::new();
        let c = cancel.clone();
        let r = rt().block_on(async {
            tokio::spawn(async move { c.cancel_because("SIGTERM") });
            unless_stopped(&cancel, "loading", std::future::pending::<Result<(), _>>()).await
        });
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                RunError::Interrupted {
                    step: "loading",
                    signal: "SIGTERM"
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "stopped by SIGTERM while loading: nothing was measured"
        );
    }

    #[test]
    fn a_step_ends_with_its_own_result_unless_stopped_first() {
        let cancel = Cancel::new();
        let ok = rt().block_on(unless_stopped(&cancel, "x", async { Ok(7) }));
        assert_eq!(ok.unwrap(), 7);
        let failed = rt().block_on(unless_stopped(&cancel, "x", async {
            Err::<(), _>(RunError::Setup("no".into()))
        }));
        assert_eq!(failed.unwrap_err().to_string(), "no");
        // Stopped before it starts, a step does not start (its future is never polled).
        cancel.cancel_because("SIGINT");
        let r = rt().block_on(unless_stopped(&cancel, "x", async {
            panic!("a stopped step must not start")
        }));
        assert!(matches!(r, Err::<(), _>(RunError::Interrupted { .. })));
    }

    #[test]
    fn a_step_that_ends_as_the_stop_comes_is_the_one_interrupted() {
        // The step sees the stop and ends in the same poll, before `cancelled` is woken (the
        // race a warm-up whose request the stop cut ran into).
        let cancel = Cancel::new();
        let c = cancel.clone();
        let r = rt().block_on(unless_stopped(&cancel, "warming up", async move {
            c.cancel_because("SIGTERM");
            Ok(())
        }));
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                RunError::Interrupted {
                    step: "warming up",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
