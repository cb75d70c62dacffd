//! Sending on time: waiting for a request's scheduled moment (to the TSC clock, not the timer
//! wheel's millisecond) and for a common wall-clock start. Nothing here builds or reads a
//! request.

use crate::clock::Clock;
use std::io::Write;
use std::time::{Duration, SystemTime};

/// The timer wheel's resolution is 1 ms: sleeping to the deadline would start requests up to
/// a millisecond late, and that lateness lands in TTFT (latency runs from the schedule). So we
/// sleep to just before the deadline and yield (letting other tasks run) for the rest.
const SPIN_NS: u64 = 1_500_000;

/// Waits until `scheduled_raw` (`off_ns` after `base`), to the clock's resolution.
pub async fn wait_until(
    clock: &Clock,
    base: tokio::time::Instant,
    off_ns: u64,
    scheduled_raw: u64,
) {
    if off_ns > SPIN_NS {
        tokio::time::sleep_until(base + Duration::from_nanos(off_ns - SPIN_NS)).await;
    }
    while clock.raw() < scheduled_raw {
        tokio::task::yield_now().await;
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// Sleeps until the wall clock reads `at_unix_ns` (`--start-at`); returns at once when that is
/// past (a shard that starts late is reported by the merge, not refused here).
pub async fn wait_for_wall_clock(at_unix_ns: u64, log: &mut (dyn Write + Send)) {
    let now = unix_ns(SystemTime::now());
    if now >= at_unix_ns {
        let _ = writeln!(
            log,
            "--start-at passed {:.3} s ago: starting now",
            (now - at_unix_ns) as f64 / 1e9
        );
        return;
    }
    let _ = writeln!(
        log,
        "waiting {:.3} s for --start-at",
        (at_unix_ns - now) as f64 / 1e9
    );
    // Coarse sleep, then re-read the wall clock: the timer runs on the monotonic clock, which
    // need not advance with the wall clock (NTP slews it).
    tokio::time::sleep(
        Duration::from_nanos(at_unix_ns - now).saturating_sub(Duration::from_millis(2)),
    )
    .await;
    while unix_ns(SystemTime::now()) < at_unix_ns {
        tokio::task::yield_now().await;
    }
}
