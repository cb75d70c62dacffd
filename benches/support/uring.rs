//! A candidate read path, not product code: one io_uring for many TCP connections, one multishot
//! receive per connection drawing from one provided-buffer ring, every connection's completions
//! reaped in one place. `benches/read_path.rs` measures it against the tokio and epoll paths;
//! `tests/read_path_uring.rs` checks it hands the same bytes (and, through `StreamDecoder`, the
//! same timelines) as the tokio path. The lead decides from the measurements whether it
//! graduates into `net`.
//!
//! One `submit_and_wait` (one `io_uring_enter`) reaps every completion that is ready, for all
//! connections: with many streams and lockstep token writes, one syscall can bring several
//! connections' tokens, where the readiness model pays one `recv` per token plus `epoll_wait`s.
//! The kernel still copies each segment into a provided buffer and still ACKs it; this path
//! saves wake-ups and syscalls, not copies or ACKs.
#![allow(dead_code)] // each includer uses a different part

use io_uring::{cqueue, opcode, types, IoUring};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};

/// The buffer group of the one provided-buffer ring.
const BGID: u16 = 0;

/// What a completion brought for one connection.
pub enum Recv<'a> {
    /// Bytes, in order (multishot receives complete in order per socket).
    Data(&'a [u8]),
    /// The peer closed: no more completions for this connection.
    Eof,
    /// The receive failed with this errno: no more completions for this connection.
    Error(io::Error),
}

/// Counts a benchmark prints: syscalls the reader made.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// `io_uring_enter` calls (each `submit_and_wait`).
    pub enters: u64,
    /// Completions carrying data.
    pub data_cqes: u64,
    /// Multishot receives re-armed (the kernel ended one: ran out of buffers, or stopped).
    pub rearms: u64,
}

/// The reader: a ring, the provided buffers, and the connections (`token` = index of `add`).
pub struct UringReader {
    ring: IoUring,
    /// `entries` `io_uring_buf` slots, page-aligned as the kernel requires; the tail is the
    /// `resv` field of slot 0.
    ring_mem: *mut u8,
    ring_layout: Layout,
    entries: u16,
    /// Buffer memory: `entries` buffers of `buf_len` bytes, buffer id = index.
    bufs: Vec<u8>,
    buf_len: u32,
    /// Our copy of the tail: buffers handed back to the kernel so far (wrapping).
    tail: u16,
    fds: Vec<RawFd>,
    /// Connections whose multishot receive has ended (EOF or error).
    closed: Vec<bool>,
    counts: Counts,
    /// Scratch kept between reaps so reaping allocates nothing.
    cqes: Vec<cqueue::Entry>,
    rearm: Vec<usize>,
}

// SAFETY: the raw pointer is owned memory used by this reader only.
unsafe impl Send for UringReader {}

impl UringReader {
    /// A ring of `sq_entries` submissions and `buffers` provided buffers (a power of two, at most
    /// 32768) of `buf_len` bytes. Fails when the kernel refuses io_uring or provided-buffer rings
    /// (before 5.19, or disabled by `kernel.io_uring_disabled` or a seccomp filter).
    pub fn new(sq_entries: u32, buffers: u16, buf_len: u32) -> io::Result<Self> {
        if !buffers.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffers must be a power of two",
            ));
        }
        // Room for every connection's multishot completions between two reaps.
        let ring = IoUring::builder()
            .setup_cqsize(sq_entries.max(u32::from(buffers)) * 2)
            .build(sq_entries)?;
        let size = usize::from(buffers) * std::mem::size_of::<types::BufRingEntry>();
        let ring_layout = Layout::from_size_align(size.max(4096), 4096)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: non-zero size; freed in Drop with the same layout.
        let ring_mem = unsafe { alloc_zeroed(ring_layout) };
        if ring_mem.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "buffer ring"));
        }
        let mut reader = Self {
            ring,
            ring_mem,
            ring_layout,
            entries: buffers,
            bufs: vec![0u8; usize::from(buffers) * buf_len as usize],
            buf_len,
            tail: 0,
            fds: Vec::new(),
            closed: Vec::new(),
            counts: Counts::default(),
            cqes: Vec::with_capacity(usize::from(buffers) * 2),
            rearm: Vec::new(),
        };
        // SAFETY: ring_mem holds `buffers` entries and lives until Drop unregisters it.
        unsafe {
            reader.ring.submitter().register_buf_ring_with_flags(
                ring_mem as u64,
                buffers,
                BGID,
                0,
            )?;
        }
        for bid in 0..buffers {
            reader.push_buffer(bid);
        }
        reader.publish_tail();
        Ok(reader)
    }

    fn ring_entry(&mut self, slot: u16) -> &mut types::BufRingEntry {
        let i = usize::from(slot & (self.entries - 1));
        // SAFETY: `i < entries`, and the memory holds `entries` entries.
        unsafe { &mut *(self.ring_mem as *mut types::BufRingEntry).add(i) }
    }

    /// Writes buffer `bid` into the next ring slot (visible to the kernel at `publish_tail`).
    fn push_buffer(&mut self, bid: u16) {
        let addr = self.bufs.as_ptr() as u64 + u64::from(bid) * u64::from(self.buf_len);
        let (len, tail) = (self.buf_len, self.tail);
        let e = self.ring_entry(tail);
        e.set_addr(addr);
        e.set_len(len);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish_tail(&mut self) {
        // SAFETY: the tail field lies inside the ring memory; the kernel reads it with acquire.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring_mem as *const types::BufRingEntry)
                as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn arm(&mut self, token: usize) -> io::Result<()> {
        let entry = opcode::RecvMulti::new(types::Fd(self.fds[token]), BGID)
            .build()
            .user_data(token as u64);
        // SAFETY: the fd outlives the reader (the caller keeps the socket open), and the
        // buffers come from the registered ring.
        unsafe {
            if self.ring.submission().push(&entry).is_err() {
                self.ring.submit()?;
                self.counts.enters += 1;
                self.ring
                    .submission()
                    .push(&entry)
                    .map_err(|_| io::Error::other("submission queue full"))?;
            }
        }
        Ok(())
    }

    /// Starts receiving on `fd` (a connected TCP socket, kept open by the caller for the
    /// reader's life). Returns its token. Submitted with the next [`UringReader::reap`].
    pub fn add(&mut self, fd: RawFd) -> io::Result<usize> {
        self.fds.push(fd);
        self.closed.push(false);
        let token = self.fds.len() - 1;
        self.arm(token)?;
        Ok(token)
    }

    /// Submits what is queued, waits for at least one completion, and hands every completion
    /// that is ready to `f(token, what)`. Returns the number handed.
    pub fn reap(&mut self, mut f: impl FnMut(usize, Recv<'_>)) -> io::Result<usize> {
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.counts.enters += 1;
        let mut handed = 0;
        let mut returned = false;
        // Copied out (16 bytes each) so buffers can be handed back while walking them; the
        // completion queue's head moves once.
        let mut cqes = std::mem::take(&mut self.cqes);
        let mut rearm = std::mem::take(&mut self.rearm);
        cqes.extend(self.ring.completion());
        for cqe in cqes.drain(..) {
            let token = cqe.user_data() as usize;
            let res = cqe.result();
            let more = cqueue::more(cqe.flags());
            if res > 0 {
                let Some(bid) = cqueue::buffer_select(cqe.flags()) else {
                    f(
                        token,
                        Recv::Error(io::Error::other("completion without a buffer")),
                    );
                    self.closed[token] = true;
                    continue;
                };
                let start = usize::from(bid) * self.buf_len as usize;
                self.counts.data_cqes += 1;
                f(token, Recv::Data(&self.bufs[start..start + res as usize]));
                self.push_buffer(bid);
                returned = true;
                if !more {
                    rearm.push(token);
                }
            } else if res == 0 {
                self.closed[token] = true;
                f(token, Recv::Eof);
            } else if -res == libc::ENOBUFS {
                // Every buffer was in use: the multishot receive ended; the data waits in the
                // socket and is received once buffers are back.
                rearm.push(token);
            } else {
                self.closed[token] = true;
                f(token, Recv::Error(io::Error::from_raw_os_error(-res)));
            }
            handed += 1;
        }
        if returned {
            self.publish_tail();
        }
        let mut result = Ok(handed);
        for token in rearm.drain(..) {
            if !self.closed[token] {
                self.counts.rearms += 1;
                if let Err(e) = self.arm(token) {
                    result = Err(e);
                }
            }
        }
        self.cqes = cqes;
        self.rearm = rearm;
        result
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }
}

impl Drop for UringReader {
    fn drop(&mut self) {
        // Until unregistered, the kernel may still read the buffer ring; if that fails the memory
        // is leaked rather than freed under it.
        if self.ring.submitter().unregister_buf_ring(BGID).is_ok() {
            // SAFETY: allocated in `new` with this layout; the kernel no longer uses it.
            unsafe { dealloc(self.ring_mem, self.ring_layout) };
        }
    }
}

/// Whether this kernel lets us build a reader; the reason when not.
pub fn available() -> Result<(), String> {
    UringReader::new(8, 8, 4096)
        .map(drop)
        .map_err(|e| format!("io_uring with a provided-buffer ring refused: {e}"))
}
