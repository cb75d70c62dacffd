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
//!
//! A request with images adds `"images":N,"image_tokens":T` to each of its lines: how many
//! `image_url` parts it had and how many of its prompt tokens they took (`mock::image`).

use crate::clock::realtime_ns;
use crate::net::stamp;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One token write.
#[derive(Clone, Debug, Default)]
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
    /// The request's images and the prompt tokens they took (`mock::image`'s rule), written
    /// on each line of a request that had any.
    pub images: u32,
    pub image_tokens: u64,
    /// The kernel's stamp of when that write's bytes went to the device, raw; 0 when send
    /// stamps are off or the kernel gave none (see [`super::sendstamp`]; not written to the
    /// file).
    pub t_sent_raw: u64,
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
                    write!(
                        w,
                        "{{\"request_id\":{},\"choice\":{},\"index\":{},\"t_ns\":{},\"due_ns\":{},\"arrival_ns\":{},\"queued_ns\":{},\"scheduled_ns\":{}",
                        r.request_id_json,
                        r.choice,
                        r.index,
                        r.t_ns,
                        r.due_ns,
                        r.arrival_ns,
                        r.queued_ns,
                        r.scheduled_ns
                    )?;
                    if r.images > 0 {
                        write!(
                            w,
                            ",\"images\":{},\"image_tokens\":{}",
                            r.images, r.image_tokens
                        )?;
                    }
                    w.write_all(b"}\n")?;
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
    /// With send stamps: the socket, and the written records waiting for their stamps.
    send: Option<(RawFd, Mutex<SendQueue>)>,
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
            send: None,
        }
    }

    /// Take each write's send stamp from `fd`'s error queue ([`super::sendstamp`], already
    /// enabled on it, no byte written yet). [`WriteStamper::closing`] must be called while `fd`
    /// is still open.
    pub fn with_send_stamps(mut self, fd: RawFd) -> Self {
        self.send = Some((fd, Mutex::new(SendQueue::default())));
        self
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

    /// A write of `n` bytes returned: everything queued so far went out with it. With send
    /// stamps its records wait for theirs (usually already in the error queue).
    pub fn written(&self, n: usize) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut send = self
            .send
            .as_ref()
            .map(|(fd, s)| (*fd, s.lock().unwrap_or_else(|p| p.into_inner())));
        if let Some((_, s)) = send.as_mut() {
            s.wrote(n);
        }
        if !q.is_empty() {
            let raw = self.clock.raw();
            let t = self.clock.delta_ns(self.start, raw);
            let before = self.write_start.load(Ordering::Relaxed).min(raw);
            for r in q.iter_mut() {
                r.t_ns = t;
                r.t_raw = raw;
                r.t_before_raw = before;
            }
            match send.as_mut() {
                Some((_, s)) => s.hold(q.drain(..).collect(), |r| self.sink.record(r)),
                None => q.drain(..).for_each(|r| self.sink.record(r)),
            }
        }
        if let Some((fd, s)) = send.as_mut() {
            if s.waiting() {
                self.settle(*fd, s);
            }
        }
    }

    /// The connection is closing (its socket still open): the last stamps are taken, and
    /// records still without one are recorded as they are.
    pub fn closing(&self) {
        if let Some((fd, s)) = &self.send {
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            self.settle(*fd, &mut s);
            s.flush(|r| self.sink.record(r));
        }
    }

    /// Takes the stamps the error queue holds and records the writes they stamp, converted
    /// onto the raw clock as a client's kernel receive stamp is (one clock pair for all).
    fn settle(&self, fd: RawFd, s: &mut SendQueue) {
        let c = &self.clock;
        let mut pair = None;
        super::sendstamp::drain(fd, |stamp| {
            let (tsc, realtime) = *pair
                .get_or_insert_with(|| stamp::clock_pair(c, || (c.raw(), realtime_ns(), c.raw())));
            let raw = stamp::onto_tsc(c, tsc, realtime, stamp.ns).unwrap_or(0);
            s.stamped(stamp.key, raw, |r| self.sink.record(r));
        });
    }
}

/// Written records waiting for their writes' send stamps, in write order: pure, so the
/// matching is tested by hand. A stamp's key is its write's last byte (modulo 2^32). A write
/// whose bytes TCP held back (a full congestion window) gets no stamp of its own when a later
/// write's bytes are appended to the same segment: the kernel moves the segment's key to the
/// later write's last byte, and both go out at that stamp. TCP sends in order, so a stamp
/// covers every write still waiting before its own.
#[derive(Debug, Default)]
pub struct SendQueue {
    /// Bytes written on the connection so far.
    bytes: u64,
    /// Each written write's key and records.
    waiting: std::collections::VecDeque<(u32, Vec<TraceRec>)>,
}

/// Writes that may wait at once; beyond it the oldest is recorded without a stamp (a kernel
/// that turned stamps on and sends none must not hold the whole trace).
pub const SEND_WAITING_MAX: usize = 1024;

impl SendQueue {
    /// `n` more bytes were written.
    pub fn wrote(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    /// The records of the write that just returned wait for its stamp.
    pub fn hold(&mut self, records: Vec<TraceRec>, mut record: impl FnMut(TraceRec)) {
        if self.waiting.len() == SEND_WAITING_MAX {
            if let Some((_, old)) = self.waiting.pop_front() {
                old.into_iter().for_each(&mut record);
            }
        }
        self.waiting
            .push_back((self.bytes.wrapping_sub(1) as u32, records));
    }

    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The write whose last byte is `key` went out at `raw` (0: a stamp that could not be put
    /// on the raw clock): it is recorded with it, and so is every earlier one still waiting
    /// (their bytes went in the same segment).
    pub fn stamped(&mut self, key: u32, raw: u64, mut record: impl FnMut(TraceRec)) {
        let Some(at) = self.waiting.iter().position(|(k, _)| *k == key) else {
            // A write that carried no token (a response's head, `[DONE]`).
            return;
        };
        for (_, recs) in self.waiting.drain(..=at) {
            for mut r in recs {
                r.t_sent_raw = raw;
                record(r);
            }
        }
    }

    /// Everything still waiting is recorded without a stamp.
    pub fn flush(&mut self, mut record: impl FnMut(TraceRec)) {
        for (_, recs) in self.waiting.drain(..) {
            recs.into_iter().for_each(&mut record);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(index: u32) -> TraceRec {
        TraceRec {
            index,
            ..TraceRec::default()
        }
    }

    /// (index, send stamp) of each record, in the order recorded.
    fn run(
        q: &mut SendQueue,
        step: impl FnOnce(&mut SendQueue, &mut Vec<(u32, u64)>),
    ) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        step(q, &mut out);
        out
    }

    #[test]
    fn a_stamp_covers_its_write_and_the_earlier_ones_sent_with_it() {
        let mut q = SendQueue::default();
        let mut got = Vec::new();
        let mut record = |r: TraceRec| got.push((r.index, r.t_sent_raw));
        // A head of 100 bytes (no token), then three token writes of 10 bytes: keys 109, 119,
        // 129 (each write's last byte).
        q.wrote(100);
        for i in 0..3 {
            q.wrote(10);
            q.hold(vec![rec(i)], &mut record);
        }
        assert!(q.waiting());
        // The head's stamp matches no token write: nothing recorded.
        q.stamped(99, 5, &mut record);
        // The second write's stamp: the first had none of its own (TCP held its bytes back and
        // appended the second's), so both went out at it.
        q.stamped(119, 7_000, &mut record);
        // A stamp for a write no longer waiting changes nothing.
        q.stamped(109, 6_000, &mut record);
        assert!(q.waiting());
        q.flush(&mut record);
        assert!(!q.waiting());
        assert_eq!(got, [(0, 7_000), (1, 7_000), (2, 0)]);
    }

    #[test]
    fn a_write_of_several_tokens_stamps_them_all_and_waiting_is_capped() {
        let mut q = SendQueue::default();
        let got = run(&mut q, |q, out| {
            q.wrote(20);
            q.hold(vec![rec(0), rec(1)], |r| out.push((r.index, r.t_sent_raw)));
            q.stamped(19, 42, |r| out.push((r.index, r.t_sent_raw)));
        });
        assert_eq!(got, [(0, 42), (1, 42)]);
        // A kernel that sends no stamps: the oldest write is recorded once the queue is full.
        let got = run(&mut q, |q, out| {
            for i in 0..=SEND_WAITING_MAX as u32 {
                q.wrote(1);
                q.hold(vec![rec(i)], |r| out.push((r.index, r.t_sent_raw)));
            }
        });
        assert_eq!(got, [(0, 0)]);
        assert_eq!(q.waiting.len(), SEND_WAITING_MAX);
    }
}
