//! The two signals that stop a command cleanly: SIGINT (Ctrl-C) and SIGTERM (a supervisor's
//! stop: systemd, Kubernetes, `docker stop`, a CI timeout, `kill`). Every command that writes
//! results watches both through [`Signals`], finishes its files, marks them interrupted with the
//! signal's name and exits 128 + the signal's number, as a shell reports a process killed by it.
//!
//! Watching a signal replaces its default action (ending the process at once) for the rest of
//! the process's life, so a run that no longer listens would ignore a second Ctrl-C:
//! [`stop_on_signal`] ends the process at the second signal, after [`at_second_signal`]'s
//! last step (a child process of a command's own would outlive it otherwise).

use super::CliError;
use crate::net::Cancel;
use std::sync::{Arc, OnceLock};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Which signal stopped the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
}

impl StopSignal {
    /// The signal's name: `SIGINT`, `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// How a person reads it: `Ctrl-C (SIGINT)`, `SIGTERM`.
    pub fn describe(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "Ctrl-C (SIGINT)",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
    pub fn exit_code(self) -> u8 {
        let n = match self {
            StopSignal::Interrupt => libc::SIGINT,
            StopSignal::Terminate => libc::SIGTERM,
        };
        128 + n as u8
    }
}

/// SIGINT and SIGTERM, watched from creation on. Create inside a tokio runtime.
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub fn watch() -> Result<Self, CliError> {
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| CliError::failed(format!("cannot watch for {name}: {e}")))
        };
        Ok(Self {
            int: watch(SignalKind::interrupt(), "SIGINT")?,
            term: watch(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM and says which.
    pub async fn next(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.int.recv() => StopSignal::Interrupt,
            _ = self.term.recv() => StopSignal::Terminate,
        }
    }
}

/// What runs just before a second signal ends the process, set once per process.
static LAST_STEP: OnceLock<fn()> = OnceLock::new();

/// Sets what a second signal does just before it ends the process (a command that started a
/// process of its own kills it here). The first call wins.
pub fn at_second_signal(step: fn()) {
    let _ = LAST_STEP.set(step);
}

/// The signal that stopped the run, once one has.
#[derive(Clone, Debug, Default)]
pub struct Caught(Arc<OnceLock<StopSignal>>);

impl Caught {
    pub fn get(&self) -> Option<StopSignal> {
        self.0.get().copied()
    }
}

/// Watches both signals on the current runtime: at the first, `announce` prints what happens
/// now and `cancel` is cancelled with the signal's name as its reason (the runners
/// write it into their results); at a second, the process ends at once with 128 + its number
/// and `second` printed. Must be called inside a tokio runtime; the signals are watched before
/// it returns.
pub fn stop_on_signal(
    cancel: Cancel,
    prefix: &'static str,
    announce: fn(StopSignal) -> String,
    second: &'static str,
) -> Result<Caught, CliError> {
    let mut signals = Signals::watch()?;
    let caught = Caught::default();
    let c = caught.clone();
    tokio::spawn(async move {
        let first = signals.next().await;
        let _ = c.0.set(first);
        eprintln!("{prefix}{}", announce(first));
        cancel.cancel_because(first.name());
        let again = signals.next().await;
        eprintln!("{prefix}{} again: {second}", again.describe());
        if let Some(step) = LAST_STEP.get() {
            step();
        }
        std::process::exit(again.exit_code().into());
    });
    Ok(caught)
}

/// [`stop_on_signal`] for code without a runtime of its own to spare: the watch runs on a
/// small thread with its own current-thread runtime, which lives as long as the process.
pub fn stop_on_signal_thread(
    cancel: Cancel,
    prefix: &'static str,
    announce: fn(StopSignal) -> String,
    second: &'static str,
) -> Result<Caught, CliError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(CliError::failed(format!(
                        "cannot start the signal watcher: {e}"
                    ))));
                    return;
                }
            };
            rt.block_on(async move {
                let r = stop_on_signal(cancel, prefix, announce, second);
                let ok = r.is_ok();
                let _ = tx.send(r);
                if ok {
                    std::future::pending::<()>().await;
                }
            });
        })
        .map_err(|e| CliError::failed(format!("cannot start the signal watcher: {e}")))?;
    rx.recv()
        .map_err(|_| CliError::failed("the signal watcher ended before watching"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal_number() {
        assert_eq!(StopSignal::Interrupt.exit_code(), 130);
        assert_eq!(StopSignal::Terminate.exit_code(), 143);
        assert_eq!(StopSignal::Interrupt.name(), "SIGINT");
        assert_eq!(StopSignal::Terminate.name(), "SIGTERM");
    }
}
