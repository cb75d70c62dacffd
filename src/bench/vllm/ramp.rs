//! `rps_change_events`: under `--ramp-up-strategy`, vLLM 0.33 notes when the ramp's request rate
//! passed each whole number of requests per second. The first event is the start rate at the
//! start of the run; then, as each request is dispatched, every whole rate from the last one
//! noted up to the integer part of that request's rate gets an event stamped with the dispatch
//! moment (a rate that jumps by several gets several events at one moment; a falling ramp adds
//! none). Timestamps are ISO 8601 without a zone, as Python's `datetime.isoformat()` writes
//! them, on UTC (our `date` is UTC too; vLLM uses the local time for both).
//!
//! Pure: the dispatch moments and the schedule in, the events out.

use crate::sys::UtcDateTime;
use crate::workload::schedule::ScheduleConfig;
use serde_json::{json, Value};

/// One event: a whole rate and when it was reached (Unix ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpsChange {
    pub rps: i64,
    pub at_unix_ns: u64,
}

/// The events of a ramped run; empty without a ramp. `dispatched` is (request number, ns after
/// the start) in dispatch order, `total` the requests the schedule spans.
pub fn rps_changes(
    schedule: &ScheduleConfig,
    total: usize,
    start_unix_ns: u64,
    dispatched: &[(usize, u64)],
) -> Vec<RpsChange> {
    let Some(ramp) = schedule.ramp else {
        return Vec::new();
    };
    // vLLM's ramp rates are integers (argparse `type=int`); Python's int() truncates.
    let mut last = ramp.start_rps.trunc() as i64;
    let mut out = vec![RpsChange {
        rps: last,
        at_unix_ns: start_unix_ns,
    }];
    for &(index, at_ns) in dispatched {
        let now = schedule.rate_at(index, total).trunc() as i64;
        if now > last {
            out.extend((last + 1..=now).map(|rps| RpsChange {
                rps,
                at_unix_ns: start_unix_ns + at_ns,
            }));
            last = now;
        }
    }
    out
}

/// Python's `datetime.isoformat()` of a naive date and time: microseconds only when not zero.
pub fn isoformat(unix_ns: u64) -> String {
    let d = UtcDateTime::from_unix(unix_ns / 1_000_000_000);
    let micros = unix_ns % 1_000_000_000 / 1000;
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        d.year, d.month, d.day, d.hour, d.minute, d.second
    );
    if micros == 0 {
        base
    } else {
        format!("{base}.{micros:06}")
    }
}

/// vLLM's `rps_change_events` value.
pub fn to_json(events: &[RpsChange]) -> Value {
    Value::Array(
        events
            .iter()
            .map(|e| json!({"rps": e.rps, "timestamp": isoformat(e.at_unix_ns)}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::schedule::{Ramp, RampStrategy};

    fn ramp(strategy: RampStrategy, start: f64, end: f64) -> ScheduleConfig {
        ScheduleConfig {
            ramp: Some(Ramp {
                strategy,
                start_rps: start,
                end_rps: end,
            }),
            ..ScheduleConfig::default()
        }
    }

    #[test]
    fn every_whole_rate_once_at_the_dispatch_that_reached_it() {
        // Linear 1 -> 4 over 5 requests: rates 1, 1.75, 2.5, 3.25, 4.
        let s = ramp(RampStrategy::Linear, 1.0, 4.0);
        let d: Vec<(usize, u64)> = (0..5).map(|i| (i, 1000 * (i as u64 + 1))).collect();
        let got = rps_changes(&s, 5, 7_000, &d);
        let want = [(1, 7_000), (2, 10_000), (3, 11_000), (4, 12_000)];
        assert_eq!(
            got,
            want.map(|(rps, at_unix_ns)| RpsChange { rps, at_unix_ns })
        );
        // A jump past several whole rates notes each of them at that one moment.
        let s = ramp(RampStrategy::Linear, 0.0, 9.0);
        let got = rps_changes(&s, 2, 0, &[(0, 5), (1, 8)]);
        assert_eq!(got.len(), 10);
        assert!(got[1..].iter().all(|e| e.at_unix_ns == 8));
        assert_eq!(got.last().unwrap().rps, 9);
        // A falling ramp notes only its start; no ramp, nothing.
        let s = ramp(RampStrategy::Exponential, 8.0, 2.0);
        assert_eq!(rps_changes(&s, 3, 1, &[(0, 0), (1, 1), (2, 2)]).len(), 1);
        assert!(rps_changes(&ScheduleConfig::default(), 3, 1, &[(0, 0)]).is_empty());
    }

    #[test]
    fn timestamps_are_pythons_isoformat() {
        // 2026-12-02 14:10:32 UTC.
        let t = 1_796_220_632u64 * 1_000_000_000;
        assert_eq!(isoformat(t), "2026-12-02T14:10:32");
        assert_eq!(isoformat(t + 123_456_789), "2026-12-02T14:10:32.123456");
        assert_eq!(isoformat(t + 5_000), "2026-12-02T14:10:32.000005");
        let v = to_json(&[RpsChange {
            rps: 3,
            at_unix_ns: t,
        }]);
        assert_eq!(v, json!([{"rps": 3, "timestamp": "2026-12-02T14:10:32"}]));
    }
}
