//! Per-event RECEIVER CPU cost of each candidate read path, on real loopback TCP.
//!
//! K connections (`READ_PATH_STREAMS`, default 128) over 127.0.0.1; a writer thread writes one
//! ~200-byte chunked-SSE completion chunk per connection per round, all K then the next round
//! every `READ_PATH_GAP_US` µs (default 1000; 0 = as fast as it can), like an engine's lockstep
//! decode step. The receiver (the bench's own thread) reads exactly the bytes written, takes a
//! `clock.raw()` stamp per read and feeds every read to the real `StreamDecoder` — parsing is
//! included in every variant equally. One criterion iteration = one event; the time reported is
//! the receiver thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time. The kernel's
//! loopback receive processing (TCP input, waking the reader) runs in the *sender's* context, so
//! what the receiver pays is its wake-ups, the receive syscalls' copy and the ACKs it sends.
//!
//! Variants:
//! - `tokio`: a current-thread runtime, one task per connection doing `read_buf` raced against a
//!   gap timer armed once (today's path);
//! - `tokio_timer_reset_per_event`: the same with the timer moved after every event (the client
//!   before `net::deadline`): the difference is what lazy re-arming saves;
//! - `epoll`: plain level-triggered epoll + one `recv` per ready socket, no tokio (the floor of
//!   the readiness model);
//! - `epoll_timestamping`: `epoll` with `recvmsg` and `SO_TIMESTAMPING` software receive stamps
//!   parsed from the control messages (what kernel receive stamps cost);
//! - `io_uring`: one multishot receive per connection from one provided-buffer ring, every
//!   connection's completions reaped with one `submit_and_wait` (`support/uring.rs`); skipped,
//!   with the reason printed, when the kernel refuses it.
//!
//! After each variant one line gives its syscalls per event (counted by the receiver itself;
//! tokio's own `epoll_wait` and `EAGAIN` reads are not visible, so only its data-bearing reads
//! are counted) and voluntary context switches per event (`RUSAGE_THREAD`: how often it slept).
//!
//! Run on a quiet machine: `cargo bench --bench read_path`; smoke: `-- --test`. Linux only.

#[cfg(target_os = "linux")]
#[path = "support/uring.rs"]
mod uring;

#[cfg(target_os = "linux")]
mod linux {
    use super::uring::{Recv, UringReader};
    use bytes::BytesMut;
    use criterion::{BenchmarkId, Criterion};
    use llmspeed::clock::Clock;
    use llmspeed::net::{NoopObserver, Progress, StreamDecoder};
    use llmspeed::timeline::Timeline;
    use std::hint::black_box;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::mpsc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";
    const READ_BUF: usize = 8 * 1024;
    const GAP_LIMIT: Duration = Duration::from_secs(120);

    /// One vLLM completions chunk as uvicorn frames it: ~200 bytes, one token.
    pub fn chunk() -> Vec<u8> {
        let ev = "data: {\"id\":\"cmpl-5c1b7a0e9d2f\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" word\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n";
        let mut out = format!("{:x}\r\n", ev.len()).into_bytes();
        out.extend_from_slice(ev.as_bytes());
        out.extend_from_slice(b"\r\n");
        out
    }

    fn env(name: &str, default: u64) -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Thread CPU time and voluntary context switches of the calling thread.
    fn thread_usage() -> (Duration, u64) {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointers.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe {
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        }
        (
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
            ru.ru_nvcsw as u64,
        )
    }

    /// The receiving end of one stream: its decoder, read buffer and timeline.
    struct Stream {
        dec: StreamDecoder,
        buf: BytesMut,
        tl: Timeline,
    }

    impl Stream {
        fn new() -> Self {
            let mut s = Stream {
                dec: StreamDecoder::new(1 << 20),
                buf: BytesMut::with_capacity(READ_BUF),
                tl: Timeline::new(0, 1 << 16, false),
            };
            // The head is fed directly: the sockets carry only body chunks.
            s.buf.extend_from_slice(HEAD);
            s.feed(0);
            s
        }

        fn feed(&mut self, t: u64) {
            match self
                .dec
                .feed(&mut self.buf, t, &mut self.tl, &mut NoopObserver)
            {
                Ok(Progress::NeedMore) => {}
                other => panic!("bench stream failed: {other:?}"),
            }
        }

        fn spare(&mut self) {
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(READ_BUF);
            }
        }

        /// Events recorded since the last call (and forget them: the timeline does not grow).
        fn take_events(&mut self) -> usize {
            let n = self.tl.events.len();
            self.tl.events.clear();
            n
        }
    }

    /// K connected pairs and the writer thread that owns the sending ends.
    struct Rig {
        receivers: Vec<TcpStream>,
        go: mpsc::Sender<u64>,
        done: mpsc::Receiver<()>,
        writer: Option<JoinHandle<()>>,
        k: usize,
        chunk_len: usize,
    }

    impl Rig {
        fn new(k: usize, gap: Duration) -> Rig {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
            let addr = listener.local_addr().expect("local addr");
            let mut receivers = Vec::with_capacity(k);
            let mut senders = Vec::with_capacity(k);
            for _ in 0..k {
                let c = TcpStream::connect(addr).expect("connect");
                let (s, _) = listener.accept().expect("accept");
                s.set_nodelay(true).expect("nodelay");
                receivers.push(c);
                senders.push(s);
            }
            let (go, go_rx) = mpsc::channel::<u64>();
            let (done_tx, done) = mpsc::channel();
            let chunk = chunk();
            let writer = std::thread::spawn(move || {
                // `n` events: round-robin over the connections, one round per gap.
                for n in go_rx {
                    let start = Instant::now();
                    let mut written = 0u64;
                    let mut round = 0u32;
                    while written < n {
                        for s in senders.iter_mut() {
                            if written == n {
                                break;
                            }
                            s.write_all(&chunk).expect("write");
                            written += 1;
                        }
                        round += 1;
                        if !gap.is_zero() {
                            let due = start + gap * round;
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                        }
                    }
                    let _ = done_tx.send(());
                }
            });
            let chunk_len = chunk_len();
            Rig {
                receivers,
                go,
                done,
                writer: Some(writer),
                k,
                chunk_len,
            }
        }

        /// Bytes connection `i` receives when `n` events are written.
        fn expected(&self, n: u64) -> Vec<usize> {
            let k = self.k as u64;
            (0..k)
                .map(|i| ((n / k + u64::from(i < n % k)) as usize) * self.chunk_len)
                .collect()
        }

        fn start(&self, n: u64) {
            self.go.send(n).expect("writer alive");
        }

        fn finish(&self) {
            self.done.recv().expect("writer alive");
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            let (tx, _) = mpsc::channel();
            self.go = tx; // closes the writer's channel
            if let Some(w) = self.writer.take() {
                let _ = w.join();
            }
        }
    }

    fn chunk_len() -> usize {
        chunk().len()
    }

    /// What a variant counts while receiving.
    #[derive(Default)]
    struct Counts {
        reads: u64,
        waits: u64,
        stamps: u64,
    }

    /// A read path under test: receives `expected[i]` bytes on connection `i`, feeding decoders.
    trait Path {
        fn receive(&mut self, expected: &[usize], clock: &Clock, counts: &mut Counts);
        /// Events decoded since the last call, summed over the streams (and forgotten).
        fn take_events(&mut self) -> usize;
        /// Syscalls the path counts beyond `reads` and `waits` (io_uring's enters).
        fn describe(&self, counts: &Counts, events: u64) -> String;
    }

    struct Tokio {
        /// Move the read's timeout timer after every event, as the client did before
        /// `net::deadline` (today's client arms it once and re-arms only when it fires).
        rearm_per_event: bool,
        rt: tokio::runtime::Runtime,
        /// Out in the tasks during `receive`, back here between calls.
        conns: Vec<(tokio::net::TcpStream, Stream)>,
    }

    impl Tokio {
        fn new(rig: &Rig, rearm_per_event: bool) -> Tokio {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .expect("runtime");
            let conns = {
                let _g = rt.enter();
                rig.receivers
                    .iter()
                    .map(|s| {
                        let s = s.try_clone().expect("clone");
                        s.set_nonblocking(true).expect("nonblocking");
                        let s = tokio::net::TcpStream::from_std(s).expect("register");
                        (s, Stream::new())
                    })
                    .collect()
            };
            Tokio {
                rearm_per_event,
                rt,
                conns,
            }
        }
    }

    impl Path for Tokio {
        fn receive(&mut self, expected: &[usize], clock: &Clock, counts: &mut Counts) {
            // One task per connection, as the client runs one read loop per request.
            let tasks: Vec<_> = self
                .conns
                .drain(..)
                .zip(expected.iter().copied())
                .map(|((mut sock, mut st), want)| {
                    let clock = clock.clone();
                    let rearm = self.rearm_per_event;
                    self.rt.spawn(async move {
                        let (mut got, mut reads) = (0usize, 0u64);
                        // The client's read races a gap timer (default limit 120 s).
                        let timer = tokio::time::sleep(GAP_LIMIT);
                        tokio::pin!(timer);
                        while got < want {
                            st.spare();
                            let n = tokio::select! {
                                biased;
                                r = sock.read_buf(&mut st.buf) => r.expect("read"),
                                _ = &mut timer => panic!("gap limit passed in a bench"),
                            };
                            let t = clock.raw();
                            assert!(n > 0, "early end of stream");
                            got += n;
                            reads += 1;
                            st.feed(t);
                            if rearm {
                                timer
                                    .as_mut()
                                    .reset(tokio::time::Instant::now() + GAP_LIMIT);
                            }
                        }
                        (sock, st, reads)
                    })
                })
                .collect();
            let done = self.rt.block_on(async {
                let mut v = Vec::with_capacity(tasks.len());
                for t in tasks {
                    v.push(t.await.expect("task"));
                }
                v
            });
            for (sock, st, reads) in done {
                counts.reads += reads;
                self.conns.push((sock, st));
            }
        }

        fn take_events(&mut self) -> usize {
            self.conns.iter_mut().map(|(_, s)| s.take_events()).sum()
        }

        fn describe(&self, c: &Counts, events: u64) -> String {
            format!(
                "{:.2} data-bearing reads/event (tokio's EAGAIN reads and epoll_waits not counted)",
                c.reads as f64 / events as f64
            )
        }
    }

    struct Epoll {
        epfd: i32,
        fds: Vec<i32>,
        streams: Vec<Stream>,
        timestamping: bool,
        events: Vec<libc::epoll_event>,
    }

    impl Epoll {
        fn new(rig: &Rig, timestamping: bool) -> Epoll {
            // SAFETY: plain syscalls on fds the rig keeps open for the path's life.
            let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            assert!(epfd >= 0, "epoll_create1");
            let mut fds = Vec::new();
            for (i, s) in rig.receivers.iter().enumerate() {
                s.set_nonblocking(true).expect("nonblocking");
                let fd = s.as_raw_fd();
                if timestamping {
                    let flags: libc::c_uint =
                        libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
                    // SAFETY: valid option value of the right size.
                    let r = unsafe {
                        libc::setsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            libc::SO_TIMESTAMPING,
                            &flags as *const _ as *const libc::c_void,
                            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
                        )
                    };
                    assert_eq!(r, 0, "SO_TIMESTAMPING");
                }
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: i as u64,
                };
                // SAFETY: as above.
                let r = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
                assert_eq!(r, 0, "epoll_ctl");
                fds.push(fd);
            }
            Epoll {
                epfd,
                fds,
                streams: (0..rig.k).map(|_| Stream::new()).collect(),
                timestamping,
                events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            }
        }

        /// One `recv` (or `recvmsg` with the kernel's receive stamp) into the stream's buffer.
        fn read(&mut self, i: usize, counts: &mut Counts) -> usize {
            let st = &mut self.streams[i];
            st.spare();
            let spare = st.buf.spare_capacity_mut();
            let (ptr, len) = (spare.as_mut_ptr() as *mut libc::c_void, spare.len());
            let n = if self.timestamping {
                let mut iov = libc::iovec {
                    iov_base: ptr,
                    iov_len: len,
                };
                let mut control = [0u64; 16];
                // SAFETY: msghdr with valid iovec and control buffer.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
                msg.msg_controllen = std::mem::size_of_val(&control) as _;
                let n = unsafe { libc::recvmsg(self.fds[i], &mut msg, 0) };
                if n > 0 {
                    if let Some(ns) = receive_stamp(&msg) {
                        counts.stamps += 1;
                        black_box(ns);
                    }
                }
                n
            } else {
                // SAFETY: `ptr` is `len` writable bytes of the buffer's spare capacity.
                unsafe { libc::recv(self.fds[i], ptr, len, 0) }
            };
            counts.reads += 1;
            if n < 0 {
                let e = std::io::Error::last_os_error();
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "recv: {e}");
                return 0;
            }
            assert!(n > 0, "early end of stream");
            // SAFETY: the kernel initialised `n` bytes of the spare capacity.
            unsafe { st.buf.set_len(st.buf.len() + n as usize) };
            n as usize
        }
    }

    /// The software receive stamp (ns since the epoch) from `SCM_TIMESTAMPING`, when present.
    fn receive_stamp(msg: &libc::msghdr) -> Option<u64> {
        // SAFETY: walking the control messages the kernel wrote into `msg`'s buffer.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPING {
                    let ts = libc::CMSG_DATA(c) as *const libc::timespec;
                    let t = std::ptr::read_unaligned(ts);
                    return Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
        None
    }

    impl Drop for Epoll {
        fn drop(&mut self) {
            // SAFETY: our own epoll fd.
            unsafe { libc::close(self.epfd) };
        }
    }

    impl Path for Epoll {
        fn receive(&mut self, expected: &[usize], clock: &Clock, counts: &mut Counts) {
            let mut left: Vec<usize> = expected.to_vec();
            let mut total: usize = left.iter().sum();
            while total > 0 {
                // SAFETY: the events buffer has room for its length.
                let n = unsafe {
                    libc::epoll_wait(
                        self.epfd,
                        self.events.as_mut_ptr(),
                        self.events.len() as i32,
                        -1,
                    )
                };
                counts.waits += 1;
                if n < 0 {
                    continue; // EINTR
                }
                for j in 0..n as usize {
                    let i = self.events[j].u64 as usize;
                    let got = self.read(i, counts);
                    if got == 0 {
                        continue;
                    }
                    let t = clock.raw();
                    self.streams[i].feed(t);
                    left[i] -= got;
                    total -= got;
                }
            }
        }

        fn take_events(&mut self) -> usize {
            self.streams.iter_mut().map(Stream::take_events).sum()
        }

        fn describe(&self, c: &Counts, events: u64) -> String {
            let mut s = format!(
                "{:.2} syscalls/event ({:.2} recv{}, {:.2} epoll_wait)",
                (c.reads + c.waits) as f64 / events as f64,
                c.reads as f64 / events as f64,
                if self.timestamping { "msg" } else { "" },
                c.waits as f64 / events as f64
            );
            if self.timestamping {
                s += &format!(
                    ", kernel stamp on {:.0}% of reads",
                    100.0 * c.stamps as f64 / c.reads.max(1) as f64
                );
            }
            s
        }
    }

    struct Uring {
        reader: UringReader,
        streams: Vec<Stream>,
    }

    impl Uring {
        fn new(rig: &Rig) -> std::io::Result<Uring> {
            let mut reader = UringReader::new(256, 1024, 2048)?;
            for s in &rig.receivers {
                reader.add(s.as_raw_fd())?;
            }
            Ok(Uring {
                reader,
                streams: (0..rig.k).map(|_| Stream::new()).collect(),
            })
        }
    }

    impl Path for Uring {
        fn receive(&mut self, expected: &[usize], clock: &Clock, _counts: &mut Counts) {
            let mut left: Vec<usize> = expected.to_vec();
            let mut total: usize = left.iter().sum();
            let streams = &mut self.streams;
            while total > 0 {
                self.reader
                    .reap(|i, what| match what {
                        Recv::Data(d) => {
                            let t = clock.raw();
                            let st = &mut streams[i];
                            st.buf.extend_from_slice(d);
                            st.feed(t);
                            left[i] -= d.len();
                            total -= d.len();
                        }
                        Recv::Eof => panic!("early end of stream {i}"),
                        Recv::Error(e) => panic!("receive on stream {i}: {e}"),
                    })
                    .expect("io_uring_enter");
            }
        }

        fn take_events(&mut self) -> usize {
            self.streams.iter_mut().map(Stream::take_events).sum()
        }

        fn describe(&self, _c: &Counts, events: u64) -> String {
            let u = self.reader.counts();
            format!(
                "{:.3} io_uring_enter/event, {:.2} completions/event, {} multishot re-arms",
                u.enters as f64 / events as f64,
                u.data_cqes as f64 / events as f64,
                u.rearms
            )
        }
    }

    fn run_variant(c: &mut Criterion, name: &str, rig: &Rig, path: &mut dyn Path) {
        let clock = Clock::new();
        let mut counts = Counts::default();
        let (mut events, mut switches) = (0u64, 0u64);
        let mut g = c.benchmark_group("read_path");
        g.sample_size(10);
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(5));
        g.bench_function(BenchmarkId::new(name, format!("{}_streams", rig.k)), |b| {
            b.iter_custom(|iters| {
                let expected = rig.expected(iters);
                let (cpu0, cs0) = thread_usage();
                rig.start(iters);
                path.receive(&expected, &clock, &mut counts);
                let (cpu1, cs1) = thread_usage();
                rig.finish();
                let got = path.take_events();
                assert_eq!(got as u64, iters, "{name}: every written event decoded");
                events += iters;
                switches += cs1 - cs0;
                cpu1 - cpu0
            })
        });
        g.finish();
        println!(
            "read_path/{name}: {events} events: {}; {:.2} voluntary context switches/event",
            path.describe(&counts, events.max(1)),
            switches as f64 / events.max(1) as f64
        );
    }

    pub fn bench(c: &mut Criterion) {
        let k = env("READ_PATH_STREAMS", 128).max(1) as usize;
        let gap = Duration::from_micros(env("READ_PATH_GAP_US", 1000));
        for (name, rearm) in [("tokio", false), ("tokio_timer_reset_per_event", true)] {
            let rig = Rig::new(k, gap);
            let mut p = Tokio::new(&rig, rearm);
            run_variant(c, name, &rig, &mut p);
        }
        for timestamping in [false, true] {
            let rig = Rig::new(k, gap);
            let mut p = Epoll::new(&rig, timestamping);
            let name = if timestamping {
                "epoll_timestamping"
            } else {
                "epoll"
            };
            run_variant(c, name, &rig, &mut p);
        }
        let rig = Rig::new(k, gap);
        match Uring::new(&rig) {
            Ok(mut p) => run_variant(c, "io_uring", &rig, &mut p),
            Err(e) => println!("read_path/io_uring: skipped: the kernel refused io_uring: {e}"),
        }
    }
}

#[cfg(target_os = "linux")]
criterion::criterion_group!(benches, linux::bench);
#[cfg(target_os = "linux")]
criterion::criterion_main!(benches);

#[cfg(not(target_os = "linux"))]
fn main() {}
