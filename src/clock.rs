//! The one clock: quanta's TSC-backed counter.
//!
//! The hot path takes `raw()` stamps (a `u64`, ~15 ns) the moment a read returns and converts
//! them to nanoseconds only when a report is built. Tests build a [`Clock::mock`] and move time
//! by hand, so nothing that involves time needs a sleep or a tight bound.

use std::sync::Arc;

/// `CLOCK_REALTIME` now in ns since the epoch (a vDSO call, no system call); 0 if refused.
/// What a kernel's receive or send stamp is read against (`net::stamp::clock_pair`).
#[cfg(unix)]
#[inline]
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64)
}

/// A cheap-to-clone clock. All stamps in a [`crate::timeline::Timeline`] come from one `Clock`.
#[derive(Clone, Debug)]
pub struct Clock {
    inner: quanta::Clock,
}

/// Handle that moves a mocked clock forward (see [`Clock::mock`]).
pub type MockHandle = Arc<quanta::Mock>;

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// The real clock. Calibration (~0.6 ms) happens once per process inside quanta.
    pub fn new() -> Self {
        Self {
            inner: quanta::Clock::new(),
        }
    }

    /// A clock that only moves when the returned handle says so. `raw()` then reads nanoseconds.
    pub fn mock() -> (Self, MockHandle) {
        let (inner, mock) = quanta::Clock::mock();
        (Self { inner }, mock)
    }

    /// A raw, unscaled stamp. Take it on the hot path; scale later with [`Clock::delta_ns`].
    #[inline(always)]
    pub fn raw(&self) -> u64 {
        self.inner.raw()
    }

    /// Nanoseconds from `start` to `end` (both raw stamps of this clock); 0 when `end < start`.
    #[inline]
    pub fn delta_ns(&self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        self.inner.delta_as_nanos(start, end)
    }

    /// Milliseconds from `start` to `end` as a float, for reports.
    #[inline]
    pub fn delta_ms(&self, start: u64, end: u64) -> f64 {
        self.delta_ns(start, end) as f64 / 1e6
    }

    /// Signed nanoseconds `end - start`, for comparing stamps that may be in either order.
    pub fn signed_delta_ns(&self, start: u64, end: u64) -> i64 {
        if end >= start {
            self.delta_ns(start, end) as i64
        } else {
            -(self.delta_ns(end, start) as i64)
        }
    }

    /// Raw stamp `ns` nanoseconds after `base` (used to compute scheduled send times).
    pub fn add_ns(&self, base: u64, ns: u64) -> u64 {
        // Scale via the measured ratio of one second; exact for the mock clock (1 raw = 1 ns).
        base.saturating_add(self.ns_to_raw(ns))
    }

    /// Raw stamp `ns` nanoseconds before `base` (0 at the floor): moves a read's stamp back to
    /// when the kernel received its data (see `net::stamp`).
    pub fn sub_ns(&self, base: u64, ns: u64) -> u64 {
        base.saturating_sub(self.ns_to_raw(ns))
    }

    /// `ns` nanoseconds as raw ticks of this clock; exact for the mock clock (1 raw = 1 ns).
    fn ns_to_raw(&self, ns: u64) -> u64 {
        let probe = 1_000_000_000u64;
        let per_sec = self.inner.delta_as_nanos(0, probe);
        if per_sec == probe || per_sec == 0 {
            return ns;
        }
        (ns as f64 * (probe as f64 / per_sec as f64)) as u64
    }

    /// `raw` as nanoseconds since this process's clock epoch (quanta's one calibration, shared
    /// by every `Clock::new()` of the process). Deterministic in `raw`, so two parts of one
    /// process (the matrix client and the in-process simulated server's trace) land on one
    /// timeline; meaningless across processes. For a mock clock it is `raw` itself.
    pub fn epoch_ns(&self, raw: u64) -> u64 {
        let at = self.inner.scaled(raw);
        let epoch = self.inner.scaled(0);
        at.saturating_duration_since(epoch)
            .as_nanos()
            .min(u64::MAX as u128) as u64
    }

    /// The wrapped quanta clock, for callers that need `now()` as an `Instant`.
    pub fn quanta(&self) -> &quanta::Clock {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn mock_clock_moves_only_when_told() {
        let (clock, mock) = Clock::mock();
        let a = clock.raw();
        assert_eq!(clock.raw(), a);
        mock.increment(Duration::from_micros(250));
        let b = clock.raw();
        assert_eq!(clock.delta_ns(a, b), 250_000);
        assert_eq!(clock.delta_ns(b, a), 0);
        assert_eq!(clock.signed_delta_ns(b, a), -250_000);
        assert_eq!(clock.add_ns(a, 250_000), b);
        assert_eq!(clock.epoch_ns(b) - clock.epoch_ns(a), 250_000);
        assert_eq!(clock.sub_ns(b, 250_000), a);
        assert_eq!(clock.sub_ns(b, 1), b - 1);
        assert_eq!(clock.sub_ns(5, 10), 0);
    }

    #[test]
    fn sub_ns_is_the_inverse_of_add_ns_on_the_real_clock() {
        let clock = Clock::new();
        let b = clock.raw();
        for ns in [1_000u64, 50_000_000, 3_000_000_000] {
            let a = clock.sub_ns(b, ns);
            assert!(a < b);
            let back = clock.delta_ns(a, b);
            // Float scaling of one ratio: a part in a million at most.
            assert!(back.abs_diff(ns) <= ns / 1_000_000 + 2, "{ns}: {back}");
        }
    }

    #[test]
    fn epoch_ns_is_one_timeline_for_every_clock_of_the_process() {
        let (a, b) = (Clock::new(), Clock::new());
        let r0 = a.raw();
        std::thread::sleep(Duration::from_millis(2));
        let r1 = b.raw();
        // Same raw stamp, same answer from either clock: no per-instance offset.
        assert_eq!(a.epoch_ns(r0), b.epoch_ns(r0));
        // Each stamp is scaled (and floored) on its own: the difference may be 1 ns off.
        let span = a.epoch_ns(r1) - a.epoch_ns(r0);
        assert!(span.abs_diff(a.delta_ns(r0, r1)) <= 1, "{span}");
        assert!(span >= 2_000_000, "{span}");
    }

    #[test]
    fn real_clock_is_monotonic_and_add_ns_round_trips() {
        let clock = Clock::new();
        let a = clock.raw();
        let b = clock.raw();
        assert!(b >= a);
        let c = clock.add_ns(a, 1_000_000);
        let back = clock.delta_ns(a, c);
        assert!(
            (back as i64 - 1_000_000).abs() < 1_000,
            "round trip gave {back}"
        );
    }
}
