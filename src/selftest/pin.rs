//! `--pin SERVER_CPUS:CLIENT_CPUS`: which CPUs the simulated server and the client may run on,
//! so that one machine approximates a server on another machine (the two sides no longer steal
//! each other's cores or caches).
//!
//! Owns: the CPU-list syntax (`0`, `0-1`, `0,2`, `0-3,8`) as a pure parser, the check against
//! the CPUs this process may use, and setting a thread's affinity (`sched_setaffinity`, Linux
//! only). Applying a mask is always to the *calling* thread: threads it spawns afterwards
//! inherit it, which is how the server's runtime and engine threads, a client runtime's
//! workers and an external client's `sh` and its children get theirs.

use std::fmt;

/// The largest CPU number a Linux `cpu_set_t` holds, plus one.
pub const MAX_CPUS: usize = 1024;

/// A non-empty, sorted, duplicate-free list of CPU numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// `0`, `0-1`, `0,2`, `0-3,8`: comma-separated numbers or inclusive ranges (the syntax of
    /// `taskset -c` and `/proc/self/status`'s `Cpus_allowed_list`).
    pub fn parse(s: &str) -> Result<CpuList, String> {
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("empty CPU number in {s:?}"));
            }
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (cpu_number(a, s)?, cpu_number(b, s)?),
                None => {
                    let n = cpu_number(part, s)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(format!("CPU range {part:?} runs backwards in {s:?}"));
            }
            cpus.extend(lo..=hi);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }

    pub fn cpus(&self) -> &[usize] {
        &self.0
    }
}

fn cpu_number(t: &str, whole: &str) -> Result<usize, String> {
    let t = t.trim();
    let n: usize = t
        .parse()
        .map_err(|_| format!("{t:?} is not a CPU number (in {whole:?})"))?;
    if n >= MAX_CPUS {
        return Err(format!(
            "CPU {n} is beyond the {MAX_CPUS} CPUs a mask holds"
        ));
    }
    Ok(n)
}

impl fmt::Display for CpuList {
    /// Ranges folded back: `0-2,5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Where each side runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub server: CpuList,
    pub client: CpuList,
}

impl Pin {
    /// `SERVER_CPUS:CLIENT_CPUS`, e.g. `0:1` or `0-1:2,3`. Both sides are required: pinning
    /// one side only would let the other run anywhere, which is not what the figures claim.
    pub fn parse(s: &str) -> Result<Pin, String> {
        let (server, client) = s.split_once(':').ok_or_else(|| {
            format!("--pin {s:?}: expected SERVER_CPUS:CLIENT_CPUS, e.g. 0:1 or 0-1:2,3")
        })?;
        let side = |t: &str, which: &str| {
            CpuList::parse(t).map_err(|e| format!("--pin {s:?}: {which} CPUs: {e}"))
        };
        Ok(Pin {
            server: side(server, "server")?,
            client: side(client, "client")?,
        })
    }

    /// Every CPU named must be one this process may run on (`allowed`, as
    /// [`allowed_cpus`] reads it): `sched_setaffinity` would otherwise fail, or silently keep
    /// only the allowed part of a list.
    pub fn check_allowed(&self, allowed: &[usize]) -> Result<(), String> {
        for (which, list) in [("server", &self.server), ("client", &self.client)] {
            if let Some(cpu) = list.cpus().iter().find(|c| !allowed.contains(c)) {
                let allowed = CpuList(allowed.to_vec());
                return Err(format!(
                    "--pin: {which} CPU {cpu} is not one this process may use (allowed: {allowed})"
                ));
            }
        }
        Ok(())
    }
}

/// `--busy-loop`: one thread spinning on each of the client's CPUs while the self-test runs,
/// so the client shares its cores with work that never sleeps (the scheduler then takes the
/// client off its core for whole time slices, as a loaded machine does).
pub struct BusyLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoop {
    /// Starts the spinners, each pinned to one CPU of `cpus`.
    pub fn start(cpus: &CpuList) -> std::io::Result<BusyLoop> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut busy = BusyLoop {
            stop: stop.clone(),
            threads: Vec::with_capacity(cpus.cpus().len()),
        };
        for &cpu in cpus.cpus() {
            let mask = Mask::of(&CpuList(vec![cpu]));
            let stop = stop.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name("selftest-busy".into())
                .spawn(move || {
                    let pinned = mask.apply();
                    let ok = pinned.is_ok();
                    let _ = tx.send(pinned);
                    while ok && !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })?;
            busy.threads.push(t);
            // Dropping `busy` on an error stops the spinners already started.
            rx.recv()
                .map_err(|_| std::io::Error::other("a busy-loop thread ended before pinning"))?
                .map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot pin the busy loop: {e}"))
                })?;
        }
        Ok(busy)
    }
}

impl Drop for BusyLoop {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether `--pin` can work on this OS.
pub const SUPPORTED: bool = cfg!(target_os = "linux");

#[cfg(target_os = "linux")]
mod imp {
    use super::{CpuList, MAX_CPUS};
    use std::io;

    /// A CPU mask ready for `sched_setaffinity`: built before a `fork`, so that a child's
    /// `pre_exec` only makes the system call (no allocation between fork and exec).
    #[derive(Clone, Copy)]
    pub struct Mask(libc::cpu_set_t);

    impl Mask {
        pub fn of(list: &CpuList) -> Mask {
            // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &cpu in list.cpus() {
                // SAFETY: `cpu` < MAX_CPUS (checked by the parser), the set's capacity.
                unsafe { libc::CPU_SET(cpu, &mut set) };
            }
            Mask(set)
        }

        /// The calling thread's current mask.
        pub fn current() -> io::Result<Mask> {
            // SAFETY: as above.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
            let rc = unsafe {
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Mask(set))
        }

        /// Restrict the calling thread (and every thread or process it starts from now on).
        /// Async-signal-safe: one system call, no allocation, so it may run in `pre_exec`.
        pub fn apply(&self) -> io::Result<()> {
            // SAFETY: pid 0 is the calling thread; the pointer and size describe our set.
            let rc = unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        pub fn cpus(&self) -> Vec<usize> {
            // SAFETY: `c` < MAX_CPUS, within the set.
            (0..MAX_CPUS)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &self.0) })
                .collect()
        }
    }

    pub fn allowed_cpus() -> io::Result<Vec<usize>> {
        Ok(Mask::current()?.cpus())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::CpuList;
    use std::io;

    /// Stands in for the Linux mask; every operation says pinning is unsupported.
    #[derive(Clone, Copy)]
    pub struct Mask;

    fn unsupported() -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "CPU pinning needs sched_setaffinity (Linux only)",
        )
    }

    impl Mask {
        pub fn of(_: &CpuList) -> Mask {
            Mask
        }
        pub fn current() -> io::Result<Mask> {
            Err(unsupported())
        }
        pub fn apply(&self) -> io::Result<()> {
            Err(unsupported())
        }
        pub fn cpus(&self) -> Vec<usize> {
            Vec::new()
        }
    }

    pub fn allowed_cpus() -> io::Result<Vec<usize>> {
        Err(unsupported())
    }
}

pub use imp::{allowed_cpus, Mask};

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> Vec<usize> {
        CpuList::parse(s).unwrap().cpus().to_vec()
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(list("0"), [0]);
        assert_eq!(list("0-1"), [0, 1]);
        assert_eq!(list("0,2"), [0, 2]);
        assert_eq!(list("3, 0-1,1"), [0, 1, 3]);
        assert_eq!(list("1023"), [1023]);
    }

    #[test]
    fn bad_cpu_lists_say_what_is_wrong() {
        for (s, want) in [
            ("", "empty"),
            ("0,", "empty"),
            ("a", "not a CPU number"),
            ("-1", "not a CPU number"),
            ("2-1", "backwards"),
            ("1024", "beyond"),
            ("0-x", "not a CPU number"),
        ] {
            let e = CpuList::parse(s).unwrap_err();
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }

    #[test]
    fn lists_print_folded() {
        for s in ["0", "0-2,5", "1,3,5-7"] {
            assert_eq!(CpuList::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(CpuList::parse("2,0,1").unwrap().to_string(), "0-2");
    }

    #[test]
    fn pins() {
        let p = Pin::parse("0:1").unwrap();
        assert_eq!(p.server.cpus(), [0]);
        assert_eq!(p.client.cpus(), [1]);
        let p = Pin::parse("0-1:2,3").unwrap();
        assert_eq!(p.server.cpus(), [0, 1]);
        assert_eq!(p.client.cpus(), [2, 3]);
        for (s, want) in [
            ("0", "SERVER_CPUS:CLIENT_CPUS"),
            (":1", "server CPUs"),
            ("0:", "client CPUs"),
            ("0:x", "client CPUs: \"x\" is not a CPU number"),
        ] {
            let e = Pin::parse(s).unwrap_err();
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }

    #[test]
    fn cpus_outside_the_allowed_set_are_refused() {
        let p = Pin::parse("0:1").unwrap();
        assert!(p.check_allowed(&[0, 1]).is_ok());
        let e = p.check_allowed(&[0, 2, 3]).unwrap_err();
        assert!(e.contains("client CPU 1"), "{e}");
        assert!(e.contains("allowed: 0,2-3"), "{e}");
        let e = Pin::parse("4:0").unwrap().check_allowed(&[0]).unwrap_err();
        assert!(e.contains("server CPU 4"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_mask_round_trips_through_the_kernel() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        // On a thread of our own, so no other test's thread is touched.
        let first = allowed[0];
        std::thread::spawn(move || {
            let list = CpuList::parse(&first.to_string()).unwrap();
            Mask::of(&list).apply().unwrap();
            assert_eq!(Mask::current().unwrap().cpus(), [first]);
        })
        .join()
        .unwrap();
    }
}
