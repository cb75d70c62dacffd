//! Probe requests: one-token requests sent one after another for the whole measured run,
//! outside the concurrency cap, so their latency shows what a new, tiny request waits for under
//! the benchmark's load. Probes never enter the run's own records; a front end reports their
//! outcomes under its own keys.
//!
//! Owns the probe loop (send, wait for the whole answer, sleep `1 / rate`, repeat until the
//! run's requests are all done; the probe in flight then finishes). Nothing here runs per token.

use crate::bench::engine::record::{RecordOptions, RequestRecord};
use crate::net::{Cancel, Client, NoopObserver, StreamRequest};
use std::time::Duration;

/// One probe's end: its end-to-end latency when it succeeded.
pub type ProbeOutcome = Option<u64>;

/// Sends probes until `stop` (or `cancel`, Ctrl-C) and returns their outcomes in order.
pub async fn run_probes(
    client: Client,
    req: StreamRequest,
    rate: f64,
    opts: RecordOptions,
    stop: Cancel,
    cancel: Cancel,
) -> Vec<ProbeOutcome> {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let clock = client.clock().clone();
    let mut out = Vec::new();
    while !stop.is_cancelled() && !cancel.is_cancelled() {
        let start = clock.raw();
        let t = client.stream(&req, start, &mut NoopObserver, &cancel).await;
        let rec = RequestRecord::from_timeline(&t, &clock, &opts, 1, 0);
        out.push(if rec.is_success() {
            rec.e2el_ns()
        } else {
            None
        });
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => break,
        }
    }
    out
}
