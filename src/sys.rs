//! What the process knows about itself and its machine: CPU time used, peak memory, the UTC
//! calendar date of a Unix time, and the client machine's CPU, cores, memory, OS and kernel
//! (`/proc/cpuinfo`, `/proc/meminfo`, `/etc/os-release`, `uname`). The client's own overhead is
//! a reported figure (matrix cells, `bench serve`, `selftest`), so all of them read it the same
//! way, here. The parsers are pure functions of the files' text; absent files give `None`,
//! never a guess.
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

/// Thread-name prefix of an in-process simulated server (`matrix --mock`, `selftest`): the
/// mock's engine and trace threads and the thread its runtime runs on. Their CPU is the
/// server's, not the client's.
pub const SERVER_THREAD_PREFIX: &str = "mock-";

/// CPU time of this process's live threads whose name starts with `prefix`. Linux only
/// (`/proc/self/task/*/stat`, in clock ticks: 10 ms per thread at the usual 100 Hz); `None`
/// elsewhere or when `/proc` cannot be read.
pub fn threads_cpu(prefix: &str) -> Option<CpuTime> {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let tick_ns = 1_000_000_000 / hz as u64;
    let mut total = CpuTime::default();
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // A thread may end between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((name, user, system)) = parse_task_stat(&stat) {
            if name.starts_with(prefix) {
                total.user_ns += user * tick_ns;
                total.system_ns += system * tick_ns;
            }
        }
    }
    Some(total)
}

/// `(comm, utime, stime)` of one `/proc/<pid>/task/<tid>/stat` line. The name sits in
/// parentheses and may itself hold spaces or parentheses, so fields are counted after the last
/// `)`: state is field 3, utime 14, stime 15.
pub(crate) fn parse_task_stat(line: &str) -> Option<(&str, u64, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?;
    let mut rest = line.get(close + 1..)?.split_ascii_whitespace();
    let utime = rest.nth(11)?.parse().ok()?;
    let stime = rest.next()?.parse().ok()?;
    Some((name, utime, stime))
}

/// CPU time of the client: the whole process minus the threads of an in-process simulated
/// server ([`SERVER_THREAD_PREFIX`]), so `matrix --mock` does not charge the server's work to
/// the client. Those threads live for the whole run, so differences between two readings are
/// exact up to the per-thread tick. Without `/proc`, the whole process.
pub fn client_cpu() -> Option<CpuTime> {
    let all = process_cpu()?;
    Some(match threads_cpu(SERVER_THREAD_PREFIX) {
        Some(server) => all.since(server),
        None => all,
    })
}

/// Reap child `pid` and return its raw wait status, the CPU time of it and of every
/// descendant it waited for, and the largest resident set among them in bytes (`wait4`: the
/// usage the kernel hands over with this one child, whatever other children the process has).
pub fn wait_child(pid: u32) -> std::io::Result<(i32, CpuTime, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: the pointers are to owned values that wait4 only writes.
        let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut ru) };
        if rc >= 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok((status, cpu_of(&ru), ru.ru_maxrss.max(0) as u64 * 1024))
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

/// The client machine, as measured. Every field is `None` where its source is missing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    pub cpu_model: Option<String>,
    /// Logical CPUs (`processor` entries of /proc/cpuinfo).
    pub cpu_logical: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os: Option<String>,
    /// `uname -sr`, e.g. "Linux 6.1.0-27-amd64".
    pub kernel: Option<String>,
    /// `uname -m`.
    pub arch: Option<String>,
}

/// Read this machine's facts (a few small files and one system call; call once per run).
pub fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let (cpu_model, cpu_logical) = read("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default();
    let (kernel, arch) = match uname() {
        Some((sys, rel, arch)) => (Some(format!("{sys} {rel}")), Some(arch)),
        None => (None, None),
    };
    Machine {
        cpu_model,
        cpu_logical,
        memory_bytes: read("/proc/meminfo").and_then(|t| parse_meminfo(&t)),
        os: read("/etc/os-release")
            .and_then(|t| parse_os_release(&t))
            .or_else(|| Some(std::env::consts::OS.to_string())),
        kernel,
        arch,
    }
}

/// CPU model and logical CPU count from /proc/cpuinfo. x86 names the model `model name`;
/// many Arm kernels give no model line at all (then `None`), some `Model` or `Hardware`.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, Option<u64>) {
    let mut model = None;
    let mut fallback = None;
    let mut processors = 0u64;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "processor" => processors += 1,
            "model name" if model.is_none() && !v.is_empty() => model = Some(v.to_string()),
            "Model" | "Hardware" if fallback.is_none() && !v.is_empty() => {
                fallback = Some(v.to_string())
            }
            _ => {}
        }
    }
    (model.or(fallback), (processors > 0).then_some(processors))
}

/// `MemTotal` of /proc/meminfo, in bytes (the file says kB, meaning KiB).
pub fn parse_meminfo(text: &str) -> Option<u64> {
    meminfo_bytes(text, "MemTotal:")
}

/// `MemAvailable` of /proc/meminfo, in bytes: what the kernel estimates a new process can
/// take without swapping.
pub fn parse_mem_available(text: &str) -> Option<u64> {
    meminfo_bytes(text, "MemAvailable:")
}

/// This machine's `MemAvailable` (`None` off Linux or where the kernel gives none).
pub fn mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The /proc/meminfo line `key` (with its colon), in bytes.
fn meminfo_bytes(text: &str, key: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix(key))?;
    let mut it = rest.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") | None => n.checked_mul(1024),
        Some(_) => None,
    }
}

/// `PRETTY_NAME` of /etc/os-release, quotes removed.
pub fn parse_os_release(text: &str) -> Option<String> {
    let v = text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME="))?;
    let v = v.trim().trim_matches('"').trim_matches('\'');
    (!v.is_empty()).then(|| v.to_string())
}

/// (sysname, release, machine) of uname(2).
fn uname() -> Option<(String, String, String)> {
    // SAFETY: utsname is plain data, for which all-zero bytes are a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to an owned struct that uname only writes.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((field(&u.sysname), field(&u.release), field(&u.machine)))
}

/// `setsockopt` of one `int` (the kernel reads `SO_TIMESTAMPING`'s flags as one too).
#[cfg(unix)]
pub fn set_int_option(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: a valid fd and a pointer to a c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_x86_and_arm() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\ncpu cores\t: 96\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\n";
        assert_eq!(
            parse_cpuinfo(x86),
            (Some("AMD EPYC 9654 96-Core Processor".into()), Some(2))
        );
        // Arm (Grace): no model name; "BogoMIPS" and "CPU part" only, so no model.
        let grace = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n\nprocessor\t: 1\nBogoMIPS\t: 2000.00\n";
        assert_eq!(parse_cpuinfo(grace), (None, Some(2)));
        let pi = "processor\t: 0\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
        assert_eq!(
            parse_cpuinfo(pi),
            (Some("BCM2835".into()), Some(1)),
            "the first of Model/Hardware is kept"
        );
        assert_eq!(parse_cpuinfo(""), (None, None));
    }

    #[test]
    fn meminfo_and_os_release() {
        let m = "MemTotal:       24683652 kB\nMemFree:         1779956 kB\n";
        assert_eq!(parse_meminfo(m), Some(24_683_652 * 1024));
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        let m2 = "MemTotal:  8 kB\nMemFree: 2 kB\nMemAvailable:    5 kB\n";
        assert_eq!(parse_mem_available(m2), Some(5 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 8 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: x kB\n"), None);
        let os = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            parse_os_release(os).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(parse_os_release("PRETTY_NAME=''\n"), None);
    }

    #[test]
    fn this_machine_reads_without_guessing() {
        let m = machine();
        if std::path::Path::new("/proc/cpuinfo").exists() {
            assert!(m.cpu_logical.is_some_and(|n| n >= 1), "{m:?}");
            assert!(m.memory_bytes.is_some_and(|b| b > 1 << 20), "{m:?}");
        }
        assert!(m.kernel.is_some(), "uname works on every Unix");
    }

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
    fn task_stat_fields_after_a_name_with_spaces_and_parens() {
        let line = "4242 (mock-a (b) c) S 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 1 0";
        assert_eq!(parse_task_stat(line), Some(("mock-a (b) c", 123, 45)));
        assert_eq!(parse_task_stat("1 (x) S 1 2"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn client_cpu_leaves_out_a_busy_server_thread() {
        // A "server" thread burns 300 ms of CPU while this thread waits; the process total
        // grows by that much, the client's figure must not.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let (burnt_tx, burnt_rx) = std::sync::mpsc::channel::<()>();
        let a_all = process_cpu().unwrap();
        let a_client = client_cpu().unwrap();
        let server = std::thread::Builder::new()
            .name(format!("{SERVER_THREAD_PREFIX}test"))
            .spawn(move || {
                let start = thread_cpu().unwrap().total_ns();
                let mut x = 0u64;
                while thread_cpu().unwrap().total_ns() - start < 300_000_000 {
                    for i in 0..100_000u64 {
                        x = x.wrapping_mul(31).wrapping_add(i);
                    }
                }
                std::hint::black_box(x);
                let _ = burnt_tx.send(());
                // Stay alive until read: a live thread's CPU is what is subtracted.
                let _ = done_rx.recv();
            })
            .unwrap();
        burnt_rx.recv().unwrap();
        let b_all = process_cpu().unwrap();
        let b_client = client_cpu().unwrap();
        done_tx.send(()).unwrap();
        server.join().unwrap();
        let all_ms = b_all.since(a_all).total_ns() / 1_000_000;
        let client_ms = b_client.since(a_client).total_ns() / 1_000_000;
        assert!(
            all_ms >= 290,
            "the burn shows in the process total: {all_ms} ms"
        );
        // Other test threads of this process run meanwhile and count in both figures (on a
        // loaded machine, hundreds of ms), so what is checked is the part taken off: the
        // server's 300 ms, less a few 10 ms ticks.
        assert!(
            all_ms.saturating_sub(client_ms) >= 250,
            "the server thread was charged to the client: {client_ms} of {all_ms} ms"
        );
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
