//! The per-read cost of kernel receive stamps: one `recvmsg` of a token-sized chunk with a
//! control buffer, plus the `SCM_TIMESTAMPING` parse and the clock pair (`stamp::clock_pair`,
//! benched alone beside the single TSC-then-realtime reading it replaced), against a plain
//! `recv` of the same chunk on a socket without stamps (what tokio's read does). Loopback TCP,
//! one chunk written and read per iteration. Linux only; elsewhere it benches nothing.
//!
//! And the same read with packet stamps (`net::packet`, needs `CAP_NET_RAW`; said and skipped
//! without it): the client's packet hub with 2,000 ports taken, the read's tap emptying the
//! ring under the hub's lock, routing, taking its inbox, placing its segment and stamping the
//! token by it. The kernel's filter runs inside the write, which the iteration includes.

use criterion::{criterion_group, criterion_main, Criterion};

#[cfg(target_os = "linux")]
mod linux {
    use criterion::Criterion;
    use llmspeed::clock::Clock;
    use llmspeed::net::stamp::{clock_pair, rx_software_stamp_ns, CONTROL_LEN};
    use std::hint::black_box;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    const CHUNK: &[u8] = b"data: {\"choices\":[{\"index\":0,\"text\":\" word\"}]}\n\n";

    fn pair(stamps: bool) -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let w = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (r, _) = l.accept().expect("accept");
        w.set_nodelay(true).expect("nodelay");
        if stamps {
            let flags: libc::c_uint =
                libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
            // SAFETY: a valid fd and a c_uint of the size passed.
            let rc = unsafe {
                libc::setsockopt(
                    r.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_TIMESTAMPING,
                    (&flags as *const libc::c_uint).cast(),
                    std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_TIMESTAMPING");
        }
        (w, r)
    }

    fn realtime_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    pub fn bench(c: &mut Criterion) {
        let mut g = c.benchmark_group("read_stamp");
        let clock = Clock::new();
        // The clock readings a stamped read takes: TSC then realtime, as until 2026-12-05,
        // and the realtime reading between two TSC readings (`clock_pair`, what reads do now).
        g.bench_function("tsc_then_realtime", |b| {
            b.iter(|| black_box((clock.raw(), realtime_ns())))
        });
        g.bench_function("clock_pair", |b| {
            b.iter(|| {
                black_box(clock_pair(&clock, || {
                    (clock.raw(), realtime_ns(), clock.raw())
                }))
            })
        });
        let mut data = [0u8; 4096];
        let (mut w, r) = pair(true);
        g.bench_function("recvmsg_with_stamp", |b| {
            b.iter(|| {
                w.write_all(CHUNK).expect("write");
                let mut control = [0u64; CONTROL_LEN / 8];
                let mut iov = libc::iovec {
                    iov_base: data.as_mut_ptr().cast(),
                    iov_len: data.len(),
                };
                // SAFETY: an all-zero msghdr is valid; the buffers outlive the call.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen = CONTROL_LEN as _;
                // SAFETY: as above; blocking, the chunk is already on its way.
                let n = unsafe { libc::recvmsg(r.as_raw_fd(), &mut msg, 0) };
                assert!(n > 0);
                // SAFETY: `control` is plain bytes; the kernel filled `msg_controllen`.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        control.as_ptr().cast::<u8>(),
                        (msg.msg_controllen as usize).min(CONTROL_LEN),
                    )
                };
                let pair = clock_pair(&clock, || (clock.raw(), realtime_ns(), clock.raw()));
                black_box((rx_software_stamp_ns(bytes), pair))
            })
        });
        let (mut w, r) = pair(false);
        g.bench_function("recv_plain", |b| {
            b.iter(|| {
                w.write_all(CHUNK).expect("write");
                // SAFETY: a live buffer of its length; blocking, the chunk is on its way.
                let n =
                    unsafe { libc::recv(r.as_raw_fd(), data.as_mut_ptr().cast(), data.len(), 0) };
                black_box(n)
            })
        });
        packet(&mut g, &mut data, &clock);
        g.finish();
    }

    /// See the module doc: `recvmsg_with_packet_stamp`.
    fn packet(
        g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        data: &mut [u8; 4096],
        clock: &Clock,
    ) {
        use llmspeed::net::packet::{open_hub, tap::PacketTap};
        use llmspeed::net::ReadClock;
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = l.local_addr().expect("addr");
        let hub = match open_hub(false, addr.port()) {
            Ok(h) => h,
            Err(why) => {
                eprintln!("recvmsg_with_packet_stamp skipped: {}", why.note());
                return;
            }
        };
        // Other connections' places, as at 2,000 streams (ports no connection here uses).
        let others: Vec<PacketTap> = (1..=2_000u16)
            .filter_map(|p| PacketTap::open(&hub, addr, (addr.ip(), p).into(), 0).ok())
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let r = rt
            .block_on(tokio::net::TcpStream::connect(addr))
            .expect("connect")
            .into_std()
            .expect("std");
        r.set_nonblocking(false).expect("blocking");
        let local = r.local_addr().expect("local");
        let mut tap = PacketTap::open(&hub, addr, local, 0).expect("tap");
        let (mut w, _) = l.accept().expect("accept");
        w.set_nodelay(true).expect("nodelay");
        g.bench_function("recvmsg_with_packet_stamp", |b| {
            b.iter(|| {
                w.write_all(CHUNK).expect("write");
                tap.before_read(0);
                // SAFETY: a live buffer of its length; blocking, the chunk is on its way.
                let n =
                    unsafe { libc::recv(r.as_raw_fd(), data.as_mut_ptr().cast(), data.len(), 0) };
                let (tsc, now) = clock_pair(clock, || (clock.raw(), realtime_ns(), clock.raw()));
                tap.after_read(usize::try_from(n).expect("read"));
                let mut at = tap.clock(clock, tsc, now, tsc);
                black_box((at.at(0), at.all_hit()))
            })
        });
        drop(others);
    }
}

fn bench(c: &mut Criterion) {
    #[cfg(target_os = "linux")]
    linux::bench(c);
    #[cfg(not(target_os = "linux"))]
    let _ = c;
}

criterion_group!(benches, bench);
criterion_main!(benches);
