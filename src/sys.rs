//! What the process knows about itself: CPU time used, peak memory, and the UTC calendar date
//! of a Unix time. The client's own overhead is a reported figure (matrix cells, `bench serve`,
//! `selftest`), so all of them read it the same way, here.
//!
//! Never on the per-token path: each call is a system call.

use std::time::{SystemTime, UNIX_EPOCH};

/// CPU time consumed, split as the kernel accounts it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    pub user_ns: u64,
    pub system_ns: u64,
}

impl CpuTime {
    pub fn total_ns(self) -> u64 {
        self.user_ns + self.system_ns
    }

    pub fn total_s(self) -> f64 {
        self.total_ns() as f64 / 1e9
    }

    /// CPU used between `earlier` and `self` (saturating, field by field).
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
        }
    }
}

fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: rusage is plain data, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `who` is RUSAGE_SELF or RUSAGE_THREAD and the pointer is to an owned struct that
    // getrusage only writes.
    (unsafe { libc::getrusage(who, &mut ru) } == 0).then_some(ru)
}

fn cpu_of(ru: &libc::rusage) -> CpuTime {
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    CpuTime {
        user_ns: ns(ru.ru_utime),
        system_ns: ns(ru.ru_stime),
    }
}

/// CPU time of the whole process so far; `None` when the kernel refuses.
pub fn process_cpu() -> Option<CpuTime> {
    rusage(libc::RUSAGE_SELF).map(|ru| cpu_of(&ru))
}

/// CPU time of the calling thread so far; `None` when the kernel refuses.
pub fn thread_cpu() -> Option<CpuTime> {
    rusage(libc::RUSAGE_THREAD).map(|ru| cpu_of(&ru))
}

/// Peak resident set size of the process in bytes (Linux reports KiB).
pub fn peak_rss_bytes() -> Option<u64> {
    rusage(libc::RUSAGE_SELF).map(|ru| ru.ru_maxrss.max(0) as u64 * 1024)
}

/// Seconds since the Unix epoch, now (0 if the system clock is before 1970).
pub fn unix_now() -> u64 {
    unix_secs(SystemTime::now())
}

/// Seconds since the Unix epoch of `t` (0 before 1970).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A UTC calendar date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcDateTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcDateTime {
    /// The calendar date of a Unix time, proleptic Gregorian (Howard Hinnant's
    /// civil-from-days), so no calendar crate is needed.
    pub fn from_unix(unix_s: u64) -> Self {
        let z = (unix_s / 86_400) as i64 + 719_468;
        let secs = (unix_s % 86_400) as u32;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: secs / 3600,
            minute: secs % 3600 / 60,
            second: secs % 60,
        }
    }

    /// `2026-11-30T05:04:34Z`.
    pub fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `20261130-050434` (Python's `%Y%m%d-%H%M%S`).
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let cases = [
            (0, "1970-01-01T00:00:00Z", "19700101-000000"),
            (951_782_400, "2000-02-29T00:00:00Z", "20000229-000000"),
            (1_796_015_074, "2026-11-30T05:04:34Z", "20261130-050434"),
            (4_107_542_399, "2100-02-28T23:59:59Z", "21000228-235959"),
        ];
        for (unix, rfc, compact) in cases {
            let d = UtcDateTime::from_unix(unix);
            assert_eq!(d.rfc3339(), rfc, "{unix}");
            assert_eq!(d.compact(), compact, "{unix}");
        }
    }

    #[test]
    fn cpu_time_grows_and_subtracts() {
        let a = process_cpu().expect("getrusage");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = process_cpu().expect("getrusage");
        assert!(b.total_ns() >= a.total_ns());
        assert_eq!(a.since(b).total_ns(), 0, "saturates instead of wrapping");
        assert!(thread_cpu().is_some());
        assert!(peak_rss_bytes().unwrap_or(0) > 0);
    }
}
