//! An external client's CPU time while it streamed, not over its whole life.
//!
//! `wait4` gives the CPU a client used from exec to exit: process start-up, tokenizer loading,
//! dataset generation and result writing included. Those are not per-token costs, and for a
//! client that loads a tokenizer they are a large share of a short run. So a sampler thread
//! reads the client's CPU clock (all its threads, and its descendants' when it is a shell) every
//! [`PERIOD`], each reading stamped with the raw clock the server's trace uses; afterwards
//! [`window`] takes the CPU spent between the last reading before the first request reached
//! the server and the first reading after the server's last token write. The window is wider
//! than the streaming by at most two sampling periods, so the figure can only be too high, by
//! at most `2 × PERIOD` of one CPU over the run's tokens.
//!
//! Owns: the sampler (Linux: `clock_getcpuclockid`, the process tree from
//! `/proc/PID/task/*/children`) and the pure window rule.

use crate::clock::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the sampler reads the client's CPU clock.
pub const PERIOD: Duration = Duration::from_millis(2);

/// One reading of the client's process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Raw clock stamp of the reading.
    pub t: u64,
    /// CPU ns (exact: the processes' CPU clocks).
    pub cpu_ns: u64,
    /// User and system clock ticks (`/proc/PID/stat`): only for the split of `cpu_ns`.
    pub user_ticks: u64,
    pub system_ticks: u64,
}

/// CPU spent inside a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spent {
    pub cpu_ns: u64,
    /// The user-space share of `cpu_ns` by the kernel's tick accounting (coarse: 10 ms ticks;
    /// `None` when no tick fell inside the window).
    pub user_share: Option<f64>,
}

/// CPU ns spent between `start` and `end` (raw stamps): the difference of the last reading at
/// or before `start` and the first reading at or after `end`. `None` when the readings do not
/// bracket the window (the sampler started late or stopped early) or the counter went
/// backwards (a process of the tree ended and took its time with it).
pub fn window(samples: &[Sample], start: u64, end: u64) -> Option<Spent> {
    if start > end {
        return None;
    }
    let before = samples.iter().rev().find(|s| s.t <= start)?;
    let after = samples.iter().find(|s| s.t >= end)?;
    let cpu_ns = after.cpu_ns.checked_sub(before.cpu_ns)?;
    let user = after.user_ticks.saturating_sub(before.user_ticks);
    let system = after.system_ticks.saturating_sub(before.system_ticks);
    let user_share = (user + system > 0).then(|| user as f64 / (user + system) as f64);
    Some(Spent { cpu_ns, user_share })
}

/// The sampler thread: runs until [`Sampler::stop`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Start sampling process `pid` and its descendants. `on_start` runs first on the new
    /// thread (the caller pins it beside the server, away from the client's CPUs).
    pub fn start(
        pid: u32,
        clock: Clock,
        on_start: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Sampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("selftest-cpu-sampler".into())
            .spawn(move || {
                on_start();
                let mut out = Vec::with_capacity(1 << 14);
                while !flag.load(Ordering::Relaxed) {
                    if let Some(mut s) = tree_sample(pid) {
                        s.t = clock.raw();
                        out.push(s);
                    }
                    std::thread::sleep(PERIOD);
                }
                out
            })?;
        Ok(Sampler { stop, handle })
    }

    /// Stop and return the readings (empty if the thread panicked).
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// CPU of process `pid` (all its threads, dead ones included) plus its living descendants;
/// `t` is left 0 for the caller to stamp.
#[cfg(target_os = "linux")]
pub fn tree_sample(pid: u32) -> Option<Sample> {
    let mut total = Sample::default();
    add_process(&mut total, pid)?;
    let mut stack = children(pid);
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        // A bound against a /proc that loops (pid reuse while walking).
        seen += 1;
        if seen > 4096 {
            break;
        }
        // A descendant that ended between the listing and the read adds nothing.
        let _ = add_process(&mut total, p);
        stack.extend(children(p));
    }
    Some(total)
}

#[cfg(not(target_os = "linux"))]
pub fn tree_sample(_pid: u32) -> Option<Sample> {
    None
}

#[cfg(target_os = "linux")]
fn add_process(total: &mut Sample, pid: u32) -> Option<()> {
    let cpu = process_cpu_ns(pid)?;
    total.cpu_ns += cpu;
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        if let Some((_, user, system)) = crate::sys::parse_task_stat(&stat) {
            total.user_ticks += user;
            total.system_ticks += system;
        }
    }
    Some(())
}

#[cfg(target_os = "linux")]
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: plain out-parameters owned by this frame.
    let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clk) };
    if rc != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as above.
    if unsafe { libc::clock_gettime(clk, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The children of every thread of `pid` (`/proc/PID/task/TID/children`).
#[cfg(target_os = "linux")]
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|s| s.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: u64, cpu_ns: u64, user_ticks: u64, system_ticks: u64) -> Sample {
        Sample {
            t,
            cpu_ns,
            user_ticks,
            system_ticks,
        }
    }

    fn cpu(w: Option<Spent>) -> Option<u64> {
        w.map(|w| w.cpu_ns)
    }

    #[test]
    fn the_window_is_bracketed_by_the_nearest_readings_outside_it() {
        let v = [
            s(10, 100, 0, 0),
            s(20, 150, 1, 0),
            s(30, 400, 2, 1),
            s(40, 900, 4, 4),
            s(50, 950, 4, 5),
        ];
        // Streaming from 25 to 35: last reading at or before 25 is t=20; first at or after
        // 35 is t=40. Ticks in between: 3 user, 4 system.
        let w = window(&v, 25, 35).expect("bracketed");
        assert_eq!(w.cpu_ns, 750);
        assert_eq!(w.user_share, Some(3.0 / 7.0));
        // Readings exactly on the edges count.
        assert_eq!(cpu(window(&v, 20, 40)), Some(750));
        assert_eq!(cpu(window(&v, 10, 50)), Some(850));
        // No tick inside: no split, the exact total still stands.
        let w = window(&[s(1, 10, 5, 5), s(2, 20, 5, 5)], 1, 2).expect("bracketed");
        assert_eq!((w.cpu_ns, w.user_share), (10, None));
    }

    #[test]
    fn a_window_the_readings_do_not_cover_has_no_figure() {
        let v = [s(10, 100, 0, 0), s(20, 150, 0, 0), s(30, 400, 0, 0)];
        assert_eq!(window(&v, 5, 25), None, "no reading before the start");
        assert_eq!(window(&v, 15, 35), None, "no reading after the end");
        assert_eq!(window(&[], 1, 2), None);
        assert_eq!(window(&v, 25, 15), None, "start after end");
        // A process of the tree ended and its time left the sum.
        assert_eq!(window(&[s(10, 500, 0, 0), s(20, 100, 0, 0)], 10, 20), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_busy_child_shows_its_cpu_in_the_tree() {
        // A shell that starts a busy child: the tree's CPU grows although `sh` itself idles.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("timeout 2 sh -c 'while :; do :; done'; true")
            .spawn()
            .expect("sh starts");
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(100));
        let a = tree_sample(pid).expect("readable").cpu_ns;
        std::thread::sleep(Duration::from_millis(400));
        let b = tree_sample(pid).expect("readable").cpu_ns;
        let _ = child.kill();
        let _ = child.wait();
        // On a loaded 2-core machine the busy loop still gets well over 10% of a core.
        assert!(
            b - a > 40_000_000,
            "the busy grandchild's CPU must be counted: {} ms",
            (b - a) / 1_000_000
        );
    }
}
