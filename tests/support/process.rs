//! The binary run as a user runs it, for the lifecycle tests: spawned as a real process
//! (`LLMSPEED_BIN` overrides the debug build, so CI can point at a release build), its output
//! read line by line as it comes, real signals sent with kill(2), its exit status read.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> String {
    std::env::var("LLMSPEED_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_llmspeed").to_string())
}

/// Long enough for a debug build on a loaded two-core machine; a limit, never a measurement.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A running `llmspeed` with its stdout and stderr collected line by line.
pub struct Proc {
    pub child: Child,
    lines: Receiver<String>,
    seen: Arc<Mutex<Vec<String>>>,
    stdout: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    what: String,
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin()));
        let (tx, lines) = channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        // Both streams are drained from the start so the child never blocks on a full pipe;
        // every line of either goes to `lines` (stderr carries progress, stdout the banners).
        for (stream, keep) in [
            (
                Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>,
                None,
            ),
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                Some(stdout.clone()),
            ),
        ] {
            let (tx, seen) = (tx.clone(), seen.clone());
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if let Some(k) = &keep {
                        let mut k = k.lock().unwrap();
                        k.push_str(&line);
                        k.push('\n');
                    }
                    seen.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            }));
        }
        Proc {
            child,
            lines,
            seen,
            stdout,
            readers,
            what: args.join(" "),
        }
    }

    /// Waits for a line containing `needle` and returns it; panics with everything seen when
    /// none comes within [`PATIENCE`] or the process ends first.
    pub fn wait_line(&mut self, needle: &str) -> String {
        let t0 = Instant::now();
        while t0.elapsed() < PATIENCE {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = self.child.kill();
        panic!(
            "`llmspeed {}` never printed {needle:?}; it printed:\n{}",
            self.what,
            self.output()
        );
    }

    /// Sends `sig` with kill(2).
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// Waits for the exit (killing the process after [`PATIENCE`], which fails the test).
    pub fn wait(&mut self) -> ExitStatus {
        let t0 = Instant::now();
        while t0.elapsed() < PATIENCE {
            if let Ok(Some(st)) = self.child.try_wait() {
                // Its pipes are closed now: the readers end once they have every line.
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!(
            "`llmspeed {}` was still running after {PATIENCE:?}; it printed:\n{}",
            self.what,
            self.output()
        );
    }

    /// Waits for the exit and returns its code; panics when a signal ended the process.
    pub fn exit_code(&mut self) -> i32 {
        let st = self.wait();
        match st.code() {
            Some(c) => c,
            None => panic!(
                "`llmspeed {}` was killed by signal {:?} instead of exiting; it printed:\n{}",
                self.what,
                st.signal(),
                self.output()
            ),
        }
    }

    /// Every line printed so far (stderr and stdout interleaved as read).
    pub fn output(&self) -> String {
        self.seen.lock().unwrap().join("\n")
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `llmspeed mock` on 127.0.0.1:0 with `extra` flags; returns it with its base URL
/// (`http://127.0.0.1:PORT`, no `/v1`).
pub fn mock(extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["mock", "--host", "127.0.0.1", "--port", "0"];
    args.extend_from_slice(extra);
    let mut p = Proc::spawn(&args);
    let line = p.wait_line("serving on ");
    let url = line
        .split_whitespace()
        .nth(2)
        .and_then(|u| u.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (p, url)
}

/// A port on 127.0.0.1 where nothing listens (bound, then closed).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
