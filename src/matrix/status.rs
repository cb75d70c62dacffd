//! The rules that give the speed-test matrix's cells their statuses.
//!
//! Owns three pure rules: the pre-run capacity/fit verdict from server limits, whether the
//! server queued requests inside a measured window, and the post-run verdict from what a cell
//! observed. The verdict vocabulary (Valid, Looped, Over capacity,
//! Failed, Queued, Skipped, Pending) is plain data owned by the report model
//! ([`crate::report::status`]) and re-exported here. It must never measure, sleep or touch the
//! network.

pub use crate::report::status::{CapacityReason, CellStatus, KvSource, ServerLimits};
use crate::timeline::ErrorKind;

/// The pre-run verdict of a decode cell: `None` when it should run.
///
/// Skipped (does not fit the model) wins over Over capacity, because a prompt that the server
/// refuses outright says nothing about memory.
pub fn pre_run(
    limits: &ServerLimits,
    context: u64,
    max_tokens: u64,
    concurrency: u64,
) -> Option<CellStatus> {
    if let Some(mml) = limits.max_model_len {
        if context.saturating_add(max_tokens) > mml {
            return Some(CellStatus::Skipped);
        }
    }
    if let Some((kv, _)) = limits.kv_tokens {
        let needed = concurrency.saturating_mul(context.saturating_add(max_tokens));
        if needed > kv {
            return Some(CellStatus::OverCapacity(CapacityReason::KvCache {
                needed_tokens: needed,
                kv_tokens: kv,
            }));
        }
    }
    if let Some(max_running) = limits.max_running {
        if concurrency > max_running {
            return Some(CellStatus::OverCapacity(CapacityReason::RunningLimit {
                max_running,
            }));
        }
    }
    None
}

/// How the server's queue looked inside a measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowQueue {
    /// `/metrics` samples taken inside the window...
    pub samples: usize,
    /// ...and how many of them reported waiting requests.
    pub waiting_samples: usize,
    /// The mean time the requests the server counted inside the window waited before their
    /// first step (its queue-time histogram), in ms; `None` where it has none.
    pub mean_wait_ms: Option<f64>,
    /// The window's time between tokens (p50), in ms: one engine step.
    pub step_ms: Option<f64>,
}

/// A request that arrives while a step runs waits for that step to end before it joins the
/// batch: under one step. Twice that leaves room for a late scheduler; a request held back for
/// a free slot or free memory waits for another request to end, many steps.
pub const ADMISSION_STEPS: f64 = 2.0;

impl WindowQueue {
    /// Whether requests queued inside the window: the server reported waiting requests in most
    /// samples, and, where it says how long they waited, longer than [`ADMISSION_STEPS`] steps.
    /// With short requests every stream restarts often, so a gauge read at a random instant
    /// often finds a restart waiting for the step in flight; only the wait tells the two apart.
    pub fn queued(&self) -> bool {
        let persistent = self.gauge_says_queued();
        match (self.mean_wait_ms, self.step_ms) {
            (Some(wait), Some(step)) => persistent && wait > ADMISSION_STEPS * step,
            _ => persistent,
        }
    }

    /// The waiting gauge's verdict alone: waiting requests in most samples.
    fn gauge_says_queued(&self) -> bool {
        self.samples > 0 && self.waiting_samples * 2 > self.samples
    }

    /// Why the waiting gauge was or was not taken as queueing, where it alone would have said
    /// queued and the wait was measured; `None` otherwise.
    pub fn note(&self) -> Option<String> {
        let (wait, step) = (self.mean_wait_ms?, self.step_ms?);
        if !self.gauge_says_queued() {
            return None;
        }
        let (n, of) = (self.waiting_samples, self.samples);
        let steps = wait / step;
        Some(if self.queued() {
            format!(
                "the server reported waiting requests in {n} of {of} samples, and requests waited {wait:.1} ms on average before their first step ({steps:.1} steps of {step:.1} ms): queued"
            )
        } else {
            format!(
                "the server reported waiting requests in {n} of {of} samples, but they waited {wait:.1} ms on average before their first step ({steps:.1} steps of {step:.1} ms): restarted requests joining the batch, not queueing"
            )
        })
    }
}

/// What a finished decode cell observed, for the post-run verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellObservation {
    /// Streams flagged by the repetition detector during the cell.
    pub looped_streams: u64,
    /// Failed requests by kind; `Cancelled` (our own end-of-window cancel) must not be counted.
    pub errors: Vec<(ErrorKind, u64)>,
    /// Requests that completed or were measured successfully.
    pub ok_requests: u64,
    /// Whether the server reported waiting requests (or fewer than C running) inside the window.
    pub server_queued: bool,
    /// The cell's C.
    pub concurrency: u64,
    /// Streams that had tokens stamped inside the window (0 when no window opened).
    pub streams_measured: u64,
    /// The client never saw all C streams between their first token and their end at one
    /// instant of the window: the server held some back (llama.cpp queues requests beyond its
    /// slots silently, without a status or a byte).
    pub never_all_at_once: bool,
    /// The client's own lag made the window's figures untrustworthy
    /// (`analysis::client_lag::verdict` found a reason).
    pub client_bound: bool,
}

/// The post-run verdict. Failures dominate when no request succeeded, or when they are at least
/// as many as the successes; a loop is reported before queueing because a looping model's
/// throughput is not the engine's. Queueing (the server's own evidence) comes before a
/// Client-bound window, which comes before Valid. A cell that measured nothing and saw no failure is Failed
/// with [`ErrorKind::TimeoutFirstToken`] (its streams never produced a token), never Valid;
/// Valid needs tokens from every stream inside the window.
pub fn post_run(obs: &CellObservation) -> CellStatus {
    let mut errors: Vec<(ErrorKind, u64)> = obs
        .errors
        .iter()
        .copied()
        .filter(|&(k, n)| k != ErrorKind::Cancelled && n > 0)
        .collect();
    // Merge duplicate kinds so the report shows one count per kind.
    errors.sort_by_key(|&(k, _)| k);
    errors.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
    errors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let failed: u64 = errors.iter().map(|e| e.1).sum();
    if failed > 0 && (obs.ok_requests == 0 || failed >= obs.ok_requests) {
        return CellStatus::Failed(errors);
    }
    if obs.ok_requests == 0 && obs.streams_measured == 0 {
        return CellStatus::Failed(vec![(ErrorKind::TimeoutFirstToken, obs.concurrency.max(1))]);
    }
    if obs.looped_streams > 0 {
        return CellStatus::Looped;
    }
    if obs.server_queued || obs.streams_measured < obs.concurrency || obs.never_all_at_once {
        return CellStatus::Queued;
    }
    if obs.client_bound {
        return CellStatus::ClientBound;
    }
    CellStatus::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(mml: u64, kv: u64) -> ServerLimits {
        ServerLimits {
            max_model_len: Some(mml),
            kv_tokens: Some((kv, KvSource::UserFlag)),
            max_running: None,
        }
    }

    /// The failing CI run's cell: 16 streams of short requests, 3 samples, each with a restart
    /// waiting (15 + 1, 15 + 1, 13 + 3); the mock's queue never held a request past a step.
    #[test]
    fn waiting_restarts_are_not_queueing_when_the_wait_is_under_a_step() {
        let restarts = WindowQueue {
            samples: 3,
            waiting_samples: 3,
            mean_wait_ms: Some(2.2),
            step_ms: Some(4.5),
        };
        assert!(!restarts.queued());
        assert!(restarts.note().unwrap().contains("not queueing"));
        // Without the histogram the gauge alone decides, as before.
        let gauge_only = WindowQueue {
            mean_wait_ms: None,
            ..restarts
        };
        assert!(gauge_only.queued());
        assert_eq!(gauge_only.note(), None);
        // Held back for a slot: the wait is a request's length, not a step.
        let held = WindowQueue {
            mean_wait_ms: Some(60.0),
            ..restarts
        };
        assert!(held.queued());
        assert!(held
            .note()
            .unwrap()
            .contains("13.3 steps of 4.5 ms): queued"));
        // The edge: exactly two steps is admission; a long wait seen in one sample of three
        // is not persistent.
        assert!(!WindowQueue {
            mean_wait_ms: Some(9.0),
            ..restarts
        }
        .queued());
        assert!(WindowQueue {
            mean_wait_ms: Some(9.1),
            ..restarts
        }
        .queued());
        assert!(!WindowQueue {
            waiting_samples: 1,
            ..held
        }
        .queued());
        assert!(!WindowQueue::default().queued());
    }

    #[test]
    fn skipped_beats_over_capacity() {
        let l = limits(10_000, 100);
        assert_eq!(pre_run(&l, 8192, 4096, 4), Some(CellStatus::Skipped));
    }

    #[test]
    fn capacity_rule_is_strictly_greater() {
        let l = limits(1_000_000, 4 * (1000 + 100));
        assert_eq!(pre_run(&l, 1000, 100, 4), None);
        assert!(matches!(
            pre_run(&l, 1000, 100, 5),
            Some(CellStatus::OverCapacity(CapacityReason::KvCache {
                needed_tokens: 5500,
                kv_tokens: 4400
            }))
        ));
    }

    #[test]
    fn running_limit() {
        let l = ServerLimits {
            max_running: Some(8),
            ..Default::default()
        };
        assert_eq!(pre_run(&l, 1 << 20, 4096, 8), None);
        assert_eq!(
            pre_run(&l, 1, 1, 9),
            Some(CellStatus::OverCapacity(CapacityReason::RunningLimit {
                max_running: 8
            }))
        );
    }

    #[test]
    fn unknown_limits_run_everything() {
        assert_eq!(
            pre_run(&ServerLimits::default(), u64::MAX, u64::MAX, u64::MAX),
            None
        );
    }

    #[test]
    fn post_run_verdicts() {
        let ok = CellObservation {
            ok_requests: 10,
            concurrency: 4,
            streams_measured: 4,
            ..Default::default()
        };
        assert_eq!(post_run(&ok), CellStatus::Valid);
        let cancelled_only = CellObservation {
            errors: vec![(ErrorKind::Cancelled, 7)],
            ..ok.clone()
        };
        assert_eq!(post_run(&cancelled_only), CellStatus::Valid);
        let looped = CellObservation {
            looped_streams: 1,
            server_queued: true,
            ..ok.clone()
        };
        assert_eq!(post_run(&looped), CellStatus::Looped);
        let queued = CellObservation {
            server_queued: true,
            ..ok.clone()
        };
        assert_eq!(post_run(&queued), CellStatus::Queued);
        // The server's queue, then the client's lag, then Valid; a loop before all.
        let client = CellObservation {
            client_bound: true,
            ..ok.clone()
        };
        assert_eq!(post_run(&client), CellStatus::ClientBound);
        assert_eq!(
            post_run(&CellObservation {
                client_bound: true,
                ..queued.clone()
            }),
            CellStatus::Queued
        );
        assert_eq!(
            post_run(&CellObservation {
                client_bound: true,
                ..looped.clone()
            }),
            CellStatus::Looped
        );
        let failed = CellObservation {
            ok_requests: 2,
            looped_streams: 1,
            errors: vec![
                (ErrorKind::TimeoutGap, 1),
                (ErrorKind::HttpStatus, 2),
                (ErrorKind::TimeoutGap, 2),
            ],
            ..Default::default()
        };
        assert_eq!(
            post_run(&failed),
            CellStatus::Failed(vec![(ErrorKind::TimeoutGap, 3), (ErrorKind::HttpStatus, 2)])
        );
        // A few failures among many successes do not sink the cell.
        let mostly_ok = CellObservation {
            ok_requests: 50,
            errors: vec![(ErrorKind::Protocol, 1)],
            ..ok.clone()
        };
        assert_eq!(post_run(&mostly_ok), CellStatus::Valid);
    }

    #[test]
    fn a_cell_that_measured_nothing_is_never_valid() {
        // The readiness gate gave up with no stream producing a token: no window, no errors
        // (the streams were our own cancellations).
        let nothing = CellObservation {
            concurrency: 4,
            errors: vec![(ErrorKind::Cancelled, 4)],
            ..Default::default()
        };
        assert_eq!(
            post_run(&nothing),
            CellStatus::Failed(vec![(ErrorKind::TimeoutFirstToken, 4)])
        );
        // Tokens from only some streams: the server never ran C at once.
        let some = CellObservation {
            concurrency: 4,
            streams_measured: 2,
            ok_requests: 6,
            ..Default::default()
        };
        assert_eq!(post_run(&some), CellStatus::Queued);
        // Every stream measured, but never all decoding at one instant (silent queueing).
        let serial = CellObservation {
            never_all_at_once: true,
            ..some.clone()
        };
        assert_eq!(
            post_run(&CellObservation {
                streams_measured: 4,
                ..serial
            }),
            CellStatus::Queued
        );
    }
}
