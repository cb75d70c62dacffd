//! Ground truth: one JSON line per token write, with the server's own monotonic time.
//! Bodies hand a small record to a channel; a dedicated thread formats and writes, so a traced
//! stream costs one channel send per token and an untraced one costs nothing.
//!
//! Line shape: `{"request_id":"…","choice":0,"index":5,"t_ns":123,"due_ns":120}` where `t_ns`
//! is when the write syscall carrying the chunk returned (stamped by the connection's writer,
//! see [`WriteStamper`]) and `due_ns` is when the engine made the token, both in ns since the
//! server started. A chunk split over two writes is stamped at the first.

use std::io::{self, BufWriter, Write};
use std::path::Path;
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
                        "{{\"request_id\":{},\"choice\":{},\"index\":{},\"t_ns\":{},\"due_ns\":{}}}",
                        r.request_id_json, r.choice, r.index, r.t_ns, r.due_ns
                    )?;
                }
                w.flush()
            })?;
        Ok((TraceSink { tx }, handle))
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
}

impl WriteStamper {
    /// `clock` and `start` must be the engine driver's, so `t_ns` and `due_ns` share a base.
    pub fn new(sink: TraceSink, clock: crate::clock::Clock, start: u64) -> Self {
        Self {
            sink,
            clock,
            start,
            queue: Mutex::new(Vec::with_capacity(8)),
        }
    }

    /// A token chunk was handed to hyper; `t_ns` is filled in at the write.
    pub fn queue(&self, r: TraceRec) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    /// A write returned: everything queued so far went out with it.
    pub fn written(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_empty() {
            return;
        }
        let t = self.clock.delta_ns(self.start, self.clock.raw());
        for mut r in q.drain(..) {
            r.t_ns = t;
            self.sink.record(r);
        }
    }
}
