//! Runs the pure [`Engine`] in real time on its own thread (the simulated GPU) and hands each
//! due token to the stream it belongs to. The thread sleeps until the next step ends, wakes
//! early when a command arrives, and spins only for the last ~100 µs so token gaps below
//! tokio's 1 ms timer resolution stay on schedule.
//!
//! The engine thread owns the engine outright: request handlers talk to it through a command
//! channel (submit, abort, a stats query) and never take a lock it holds, so a batch step that
//! runs long can never stall the runtime that writes the tokens (the server's own write times
//! stay true under load). It must never block on a client either: sends go into unbounded
//! per-request channels.

use super::engine::{self, AdmitError, Emission, Engine, EngineParams, EngineStats, NewSeq};
use crate::clock::Clock;
use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

/// Below this much time to the next step, the engine thread spins instead of sleeping.
const SPIN_NS: u64 = 100_000;

/// Test hook: called on the engine thread inside every batch step, after the step's tokens are
/// computed and before they are handed out (where the old shared lock was held). A test makes
/// one step as long as it likes with it and checks that request handlers do not wait for it.
#[derive(Clone)]
pub struct StepHook(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for StepHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepHook")
    }
}

/// What a request handler asks of the engine thread.
enum Cmd {
    /// Sequences (one per choice) that share one receiver; already checked admissible.
    Submit {
        seqs: Vec<NewSeq>,
        tx: UnboundedSender<Emission>,
    },
    Abort(Vec<u64>),
    Stats(oneshot::Sender<EngineStats>),
    /// Empty the prefix cache if idle; the answer says whether it was.
    FlushCache(oneshot::Sender<bool>),
    Shutdown,
}

/// Handle to the engine thread. Dropping it stops the thread.
pub struct Driver {
    cmds: Sender<Cmd>,
    params: EngineParams,
    clock: Clock,
    start: u64,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    pub fn start(params: EngineParams, clock: Clock) -> std::io::Result<Driver> {
        Self::start_with_hook(params, clock, None)
    }

    /// [`Driver::start`] with a test-only [`StepHook`].
    #[doc(hidden)]
    pub fn start_with_hook(
        params: EngineParams,
        clock: Clock,
        step_hook: Option<StepHook>,
    ) -> std::io::Result<Driver> {
        let start = clock.raw();
        let (cmds, rx) = mpsc::channel();
        let mut thread = EngineThread {
            engine: Engine::new(params.clone()),
            senders: HashMap::new(),
            clock: clock.clone(),
            start,
            out: Vec::with_capacity(1024),
            step_hook,
        };
        let handle = std::thread::Builder::new()
            .name("mock-engine".into())
            .spawn(move || thread.run(&rx))?;
        Ok(Driver {
            cmds,
            params,
            clock,
            start,
            thread: Some(handle),
        })
    }

    /// Nanoseconds since the driver started: the time base of emissions and the trace.
    pub fn now_ns(&self) -> u64 {
        self.clock.delta_ns(self.start, self.clock.raw())
    }

    /// The clock and start stamp behind [`Driver::now_ns`].
    pub fn time_base(&self) -> (Clock, u64) {
        (self.clock.clone(), self.start)
    }

    /// Submit sequences (one per choice) that share one receiver. A request that can never
    /// run is refused here, at once; an accepted one reaches the engine on its thread (the
    /// sequences enter the queue at the time the engine thread takes the command, normally
    /// within microseconds).
    pub fn submit(&self, seqs: Vec<NewSeq>) -> Result<UnboundedReceiver<Emission>, AdmitError> {
        for s in &seqs {
            engine::admissible(&self.params, s)?;
        }
        let (tx, rx) = unbounded_channel();
        self.cmds
            .send(Cmd::Submit { seqs, tx })
            .map_err(|_| AdmitError::Stopped)?;
        Ok(rx)
    }

    /// The client is gone: free the sequences.
    pub fn abort(&self, tags: &[u64]) {
        // Nothing to free once the engine thread has stopped.
        let _ = self.cmds.send(Cmd::Abort(tags.to_vec()));
    }

    /// Counters and gauges as of the engine thread's next pass; commands sent before this one
    /// (a submit, say) are already counted. Zeros once the engine has stopped.
    pub async fn stats(&self) -> EngineStats {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Stats(tx)).is_err() {
            return EngineStats::default();
        }
        rx.await.unwrap_or_default()
    }

    pub fn params(&self) -> EngineParams {
        self.params.clone()
    }

    /// Empties the engine's prefix cache when no request is running or waiting; `false` when it
    /// was busy (or has stopped).
    pub async fn flush_cache(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::FlushCache(tx)).is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Everything the engine thread owns; nothing here is shared.
struct EngineThread {
    engine: Engine,
    senders: HashMap<u64, UnboundedSender<Emission>>,
    clock: Clock,
    start: u64,
    out: Vec<Emission>,
    step_hook: Option<StepHook>,
}

impl EngineThread {
    fn now_ns(&self) -> u64 {
        self.clock.delta_ns(self.start, self.clock.raw())
    }

    /// Applies one command; `false` means stop.
    fn apply(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Submit { seqs, tx } => {
                let now = self.now_ns();
                // Steps that ended while this command waited run first (their tokens go out at
                // the next `step`): the request is scheduled no earlier than it arrived, so its
                // queue time and first token (vLLM's per-request metrics, the trace) are never
                // before its arrival.
                self.engine.advance(now, &mut self.out);
                let tags: Vec<u64> = seqs.iter().map(|s| s.tag).collect();
                for s in seqs {
                    let tag = s.tag;
                    if self.engine.add(now, s).is_err() {
                        // Only a duplicate tag gets here (admissibility was checked by the
                        // submitter): drop the whole request, which ends its stream.
                        for &t in &tags {
                            self.engine.abort(t);
                            self.senders.remove(&t);
                        }
                        return true;
                    }
                    self.senders.insert(tag, tx.clone());
                }
            }
            Cmd::Abort(tags) => {
                for t in tags {
                    self.engine.abort(t);
                    self.senders.remove(&t);
                }
            }
            Cmd::Stats(reply) => {
                let _ = reply.send(self.engine.stats());
            }
            Cmd::FlushCache(reply) => {
                let _ = reply.send(self.engine.flush_cache());
            }
            Cmd::Shutdown => return false,
        }
        true
    }

    /// Applies every command already waiting; `false` means stop.
    fn drain(&mut self, rx: &Receiver<Cmd>) -> bool {
        loop {
            match rx.try_recv() {
                Ok(cmd) => {
                    if !self.apply(cmd) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Runs every step that has ended and hands out its tokens.
    fn step(&mut self) {
        let now = self.now_ns();
        self.engine.advance(now, &mut self.out);
        if let Some(h) = &self.step_hook {
            (h.0)();
        }
        for e in self.out.drain(..) {
            let delivered = match self.senders.get(&e.tag) {
                Some(tx) => tx.send(e).is_ok(),
                None => false,
            };
            if !delivered {
                self.engine.abort(e.tag);
                self.senders.remove(&e.tag);
            } else if e.finish.is_some() {
                self.senders.remove(&e.tag);
            }
        }
    }

    fn run(&mut self, rx: &Receiver<Cmd>) {
        loop {
            if !self.drain(rx) {
                break;
            }
            self.step();
            let next = match self.engine.next_wakeup() {
                // Idle: sleep until someone asks for something.
                None => match rx.recv() {
                    Ok(cmd) => Some(cmd),
                    Err(_) => break,
                },
                Some(due) => {
                    let now = self.now_ns();
                    if due > now + SPIN_NS {
                        match rx.recv_timeout(Duration::from_nanos(due - now - SPIN_NS)) {
                            Ok(cmd) => Some(cmd),
                            Err(RecvTimeoutError::Timeout) => None,
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        // The step is busy: a command arriving now waits at most the spin.
                        while self.now_ns() < due {
                            std::hint::spin_loop();
                            std::thread::yield_now();
                        }
                        None
                    }
                }
            };
            if let Some(cmd) = next {
                if !self.apply(cmd) {
                    break;
                }
            }
        }
        // Dropping the senders ends every open stream.
        self.senders.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::engine::{DecodeCost, PrefillCurve};

    fn params() -> EngineParams {
        EngineParams {
            kv_tokens: 16 * 64,
            block_size: 16,
            max_num_seqs: 8,
            max_num_batched_tokens: 256,
            prefill: PrefillCurve {
                rate_tok_s: 1e9,
                half_ctx: 1e12,
            },
            decode: DecodeCost {
                base_us: 500.0,
                per_seq_us: 0.0,
                per_ktok_total_us: 0.0,
                per_ktok_max_us: 0.0,
            },
            time_scale: 1.0,
        }
    }

    fn seq(tag: u64, max_tokens: u32) -> NewSeq {
        NewSeq {
            tag,
            prompt: vec![300; 8],
            salt: None,
            max_tokens,
            min_tokens: 0,
            ignore_eos: true,
            seed: tag,
            loop_after: None,
            vision_us: 0.0,
        }
    }

    #[tokio::test]
    async fn submit_streams_every_token_and_stats_see_it() {
        let d = Driver::start(params(), Clock::new()).unwrap();
        let mut rx = d.submit(vec![seq(1, 5)]).unwrap();
        // The stats query travels behind the submit, so the request is already counted.
        let s = d.stats().await;
        assert_eq!(s.running + s.waiting + s.finished_total as u32, 1, "{s:?}");
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            got.push(e.index);
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        let s = d.stats().await;
        assert_eq!((s.finished_total, s.generation_tokens_total), (1, 5));
        assert_eq!(s.used_blocks, 0);
    }

    #[tokio::test]
    async fn too_large_is_refused_at_once_and_abort_frees_blocks() {
        let d = Driver::start(params(), Clock::new()).unwrap();
        let err = d.submit(vec![seq(1, 5), seq(2, 16 * 64)]).unwrap_err();
        assert!(matches!(err, AdmitError::LargerThanCache { .. }), "{err}");
        let mut rx = d.submit(vec![seq(3, 100_000 / 200)]).unwrap();
        assert!(rx.recv().await.is_some());
        assert!(d.stats().await.used_blocks > 0);
        d.abort(&[3]);
        assert_eq!(d.stats().await.used_blocks, 0);
        // The stream ends: its sender is gone.
        while rx.recv().await.is_some() {}
    }

    #[tokio::test]
    async fn dropping_the_driver_ends_open_streams() {
        let d = Driver::start(params(), Clock::new()).unwrap();
        let mut rx = d.submit(vec![seq(1, 1_000)]).unwrap();
        assert!(rx.recv().await.is_some());
        drop(d);
        let mut left = 0;
        while rx.recv().await.is_some() {
            left += 1;
        }
        assert!(left < 999, "the stream was cut, not run to the end");
    }

    /// A step the test holds open for as long as it likes: armed, the next step signals
    /// `entered` and blocks until `release` (or 60 s, so a failing test cannot hang).
    struct HeldStep {
        armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        entered: mpsc::Receiver<()>,
        release: mpsc::Sender<()>,
        hook: StepHook,
    }

    fn held_step() -> HeldStep {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let armed = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let a = armed.clone();
        let inner = Mutex::new((entered_tx, release_rx));
        let hook = StepHook(Arc::new(move || {
            if a.swap(false, Ordering::SeqCst) {
                let g = inner.lock().unwrap();
                let _ = g.0.send(());
                let _ = g.1.recv_timeout(Duration::from_secs(60));
            }
        }));
        HeldStep {
            armed,
            entered,
            release,
            hook,
        }
    }

    /// Issue 9.12: the engine thread used to hold the engine's lock through a whole step, and
    /// a handler's submit or abort blocked (on the server's runtime thread) until the step
    /// ended. Now both return while a step is in progress. No timing bound: the step is held
    /// until the handler's calls have returned, so with the old lock they never would (the 10 s
    /// wait is only there to fail instead of hang).
    #[test]
    fn submit_and_abort_return_while_a_step_is_in_progress() {
        use std::sync::atomic::Ordering;
        let held = held_step();
        let d = Driver::start_with_hook(params(), Clock::new(), Some(held.hook.clone())).unwrap();
        let mut first = d.submit(vec![seq(1, 1_000)]).unwrap();
        // Running: a token came. Arm the hook; the next step is held.
        assert!(first.blocking_recv().is_some());
        held.armed.store(true, Ordering::SeqCst);
        held.entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the engine thread entered a step");
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let r = d.submit(vec![seq(2, 4)]).map(|_| ());
                d.abort(&[1]);
                let _ = done_tx.send(r);
            });
            // The step is still held here: whatever came back came back during it.
            let during = done_rx.recv_timeout(Duration::from_secs(10));
            let _ = held.release.send(());
            assert!(
                matches!(during, Ok(Ok(()))),
                "submit/abort waited for the engine's step: {during:?}"
            );
        });
        // After the step, the engine applies both: the aborted stream ends.
        while first.blocking_recv().is_some() {}
    }
}
