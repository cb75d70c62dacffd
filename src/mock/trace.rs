//! Ground truth: one JSON line per token write, with the server's own monotonic time.
//! Bodies hand a small record to a channel; a dedicated thread formats and writes, so a traced
//! stream costs one channel send per token and an untraced one costs nothing.
//!
//! Line shape: `{"request_id":"…","choice":0,"index":5,"t_ns":123,"due_ns":120,"arrival_ns":80,
//! "queued_ns":85,"scheduled_ns":90}` where `t_ns`
//! is when the write syscall carrying the chunk returned (stamped by the connection's writer,
//! see [`WriteStamper`]) and `due_ns` is when the engine made the token, both in ns since the
//! server started. A chunk split over two writes is stamped at the first.
//!
//! `arrival_ns`, the same on every line of a request, is when the read syscall that completed
//! the request returned (stamped by the connection's reader), in the same base: the request's
//! TTFT as the server saw it is `t_ns` of index 0 minus `arrival_ns`. It is a field of every
//! line rather than a line of its own so that readers of token lines need no filtering.
//!
//! `queued_ns` and `scheduled_ns`, the same on every line of a choice, are when the engine took
//! the sequence in and when it first scheduled it (vLLM's `queued_ts` and `scheduled_ts`): the
//! per-request `metrics` the mock sends with `--enable-per-request-metrics` are made of them and
//! the `due_ns` of the choice's first and last tokens.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One token write.
#[derive(Clone, Debug)]
pub struct TraceRec {
    /// Request id already encoded as a JSON string (quotes included).
    pub request_id_json: Arc<str>,
    pub choice: u32,
    pub index: u32,
    pub t_ns: u64,
    pub due_ns: u64,
    /// When the request arrived (see the module docs).
    pub arrival_ns: u64,
    /// `arrival_ns` as a raw clock stamp (not written to the file).
    pub arrival_raw: u64,
    /// Engine time the sequence was queued and first scheduled (see the module docs).
    pub queued_ns: u64,
    pub scheduled_ns: u64,
    /// `t_ns` as a raw [`crate::clock::Clock`] stamp (not written to the file): lets an
    /// in-process reader put server writes and client reads on one timeline.
    pub t_raw: u64,
    /// Raw stamp taken just before the write that returned at `t_raw` began (not written to
    /// the file): the kernel took the bytes in between, so the truth is known to that
    /// interval even when the server thread was held up before or after the system call.
    pub t_before_raw: u64,
}

/// Sending half; cheap to clone. The writer thread ends when every clone is dropped.
#[derive(Clone, Debug)]
pub struct TraceSink {
    tx: mpsc::Sender<TraceRec>,
}

impl TraceSink {
    /// Create the file and start the writer thread.
    pub fn create(path: &Path) -> io::Result<(TraceSink, JoinHandle<io::Result<()>>)> {
        let file = std::fs::File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create trace file {}: {e}", path.display()),
            )
        })?;
        let (tx, rx) = mpsc::channel::<TraceRec>();
        let handle = std::thread::Builder::new()
            .name("mock-trace".into())
            .spawn(move || {
                let mut w = BufWriter::with_capacity(1 << 16, file);
                for r in rx {
                    writeln!(
                        w,
                        "{{\"request_id\":{},\"choice\":{},\"index\":{},\"t_ns\":{},\"due_ns\":{},\"arrival_ns\":{},\"queued_ns\":{},\"scheduled_ns\":{}}}",
                        r.request_id_json,
                        r.choice,
                        r.index,
                        r.t_ns,
                        r.due_ns,
                        r.arrival_ns,
                        r.queued_ns,
                        r.scheduled_ns
                    )?;
                }
                w.flush()
            })?;
        Ok((TraceSink { tx }, handle))
    }

    /// An in-memory sink (the self-test reads the records back in-process; no file, no
    /// formatting). The receiver gets every record until every sink clone is dropped.
    pub fn memory() -> (TraceSink, mpsc::Receiver<TraceRec>) {
        let (tx, rx) = mpsc::channel();
        (TraceSink { tx }, rx)
    }

    #[inline]
    pub fn record(&self, r: TraceRec) {
        // The writer only goes away at shutdown; losing the tail then is acceptable.
        let _ = self.tx.send(r);
    }
}

/// Per-connection: token chunks handed to hyper wait here until the socket write that carries
/// them returns, and are stamped then.
#[derive(Debug)]
pub struct WriteStamper {
    sink: TraceSink,
    clock: crate::clock::Clock,
    start: u64,
    queue: Mutex<Vec<TraceRec>>,
    /// Raw stamp of the last read that returned bytes on this connection (0: none yet).
    last_read: AtomicU64,
    /// Raw stamp taken before the write in progress began.
    write_start: AtomicU64,
}

impl WriteStamper {
    /// `clock` and `start` must be the engine driver's, so `t_ns` and `due_ns` share a base.
    pub fn new(sink: TraceSink, clock: crate::clock::Clock, start: u64) -> Self {
        Self {
            sink,
            clock,
            start,
            queue: Mutex::new(Vec::with_capacity(8)),
            last_read: AtomicU64::new(0),
            write_start: AtomicU64::new(0),
        }
    }

    /// A read returned request bytes. The client sends no request before it has the previous
    /// answer, so when a handler runs, the last read is the one that completed its request.
    #[inline]
    pub fn read_done(&self) {
        self.last_read.store(self.clock.raw(), Ordering::Relaxed);
    }

    /// The arrival of the request being handled now, as (ns since server start, raw stamp):
    /// the last read that returned bytes (now, if none did).
    pub fn arrival(&self) -> (u64, u64) {
        let raw = match self.last_read.load(Ordering::Relaxed) {
            0 => self.clock.raw(),
            r => r,
        };
        (self.clock.delta_ns(self.start, raw), raw)
    }

    /// A token chunk was handed to hyper; `t_ns` is filled in at the write.
    pub fn queue(&self, r: TraceRec) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    /// A write is about to begin.
    #[inline]
    pub fn writing(&self) {
        self.write_start.store(self.clock.raw(), Ordering::Relaxed);
    }

    /// A write returned: everything queued so far went out with it.
    pub fn written(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_empty() {
            return;
        }
        let raw = self.clock.raw();
        let t = self.clock.delta_ns(self.start, raw);
        let before = self.write_start.load(Ordering::Relaxed).min(raw);
        for mut r in q.drain(..) {
            r.t_ns = t;
            r.t_raw = raw;
            r.t_before_raw = before;
            self.sink.record(r);
        }
    }
}
