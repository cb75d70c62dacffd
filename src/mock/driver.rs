//! Runs the pure [`Engine`] in real time on its own thread (the simulated GPU) and hands each
//! due token to the stream it belongs to. The thread sleeps until the next step ends, wakes
//! early when a request arrives at an idle engine, and spins only for the last ~100 µs so token
//! gaps below tokio's 1 ms timer resolution stay on schedule.
//! It must never block on a client: sends go into unbounded per-request channels.

use super::engine::{AdmitError, Emission, Engine, EngineParams, EngineStats, NewSeq};
use crate::clock::Clock;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Below this much time to the next step, the engine thread spins instead of sleeping.
const SPIN_NS: u64 = 100_000;

struct State {
    engine: Engine,
    senders: HashMap<u64, UnboundedSender<Emission>>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    clock: Clock,
    start: u64,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.clock.delta_ns(self.start, self.clock.raw())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic on the engine thread poisons the lock; the state is still consistent enough
        // to abort requests and shut down.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Handle to the engine thread. Dropping it stops the thread.
pub struct Driver {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    pub fn start(params: EngineParams, clock: Clock) -> std::io::Result<Driver> {
        let start = clock.raw();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine: Engine::new(params),
                senders: HashMap::new(),
                shutdown: false,
            }),
            wake: Condvar::new(),
            clock,
            start,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mock-engine".into())
            .spawn(move || run(&s))?;
        Ok(Driver {
            shared,
            thread: Some(thread),
        })
    }

    /// Nanoseconds since the driver started: the time base of emissions and the trace.
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// The clock and start stamp behind [`Driver::now_ns`].
    pub fn time_base(&self) -> (Clock, u64) {
        (self.shared.clock.clone(), self.shared.start)
    }

    /// Submit sequences (one per choice) that share one receiver.
    pub fn submit(&self, seqs: Vec<NewSeq>) -> Result<UnboundedReceiver<Emission>, AdmitError> {
        let (tx, rx) = unbounded_channel();
        let mut st = self.shared.lock();
        let now = self.shared.now_ns();
        let tags: Vec<u64> = seqs.iter().map(|s| s.tag).collect();
        for s in seqs {
            let tag = s.tag;
            if let Err(e) = st.engine.add(now, s) {
                for &t in &tags {
                    st.engine.abort(t);
                    st.senders.remove(&t);
                }
                return Err(e);
            }
            st.senders.insert(tag, tx.clone());
        }
        drop(st);
        self.shared.wake.notify_one();
        Ok(rx)
    }

    /// The client is gone: free the sequences.
    pub fn abort(&self, tags: &[u64]) {
        let mut st = self.shared.lock();
        for &t in tags {
            st.engine.abort(t);
            st.senders.remove(&t);
        }
    }

    pub fn stats(&self) -> EngineStats {
        self.shared.lock().engine.stats()
    }

    pub fn params(&self) -> EngineParams {
        self.shared.lock().engine.params().clone()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut out: Vec<Emission> = Vec::with_capacity(1024);
    let mut guard = shared.lock();
    loop {
        if guard.shutdown {
            // Dropping the senders ends every open stream.
            guard.senders.clear();
            return;
        }
        let now = shared.now_ns();
        let st = &mut *guard;
        st.engine.advance(now, &mut out);
        for e in out.drain(..) {
            let delivered = match st.senders.get(&e.tag) {
                Some(tx) => tx.send(e).is_ok(),
                None => false,
            };
            if !delivered {
                st.engine.abort(e.tag);
                st.senders.remove(&e.tag);
            } else if e.finish.is_some() {
                st.senders.remove(&e.tag);
            }
        }
        match st.engine.next_wakeup() {
            None => {
                guard = shared.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
            Some(due) => {
                let now = shared.now_ns();
                if due > now + SPIN_NS {
                    let d = Duration::from_nanos(due - now - SPIN_NS);
                    guard = shared
                        .wake
                        .wait_timeout(guard, d)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                } else if due > now {
                    drop(guard);
                    while shared.now_ns() < due {
                        std::hint::spin_loop();
                        std::thread::yield_now();
                    }
                    guard = shared.lock();
                }
            }
        }
    }
}
