//! The socket half (Linux): one `AF_PACKET` socket per client with the server's port filter,
//! a `TPACKET_V2` receive ring mapped into our memory, the walk over the frames the kernel has
//! handed over, and the kernel's count of the frames it could not hand over.
//!
//! Why `TPACKET_V2` and not `V3`: a V3 ring hands frames over a block at a time, when the
//! block fills or its retire timer fires (a millisecond at best), so the segments of the last
//! millisecond before a read are not there yet. A V2 frame is ours as soon as the kernel has
//! written it, and the kernel writes it (packet taps run before IP and TCP) before the
//! segment's bytes reach the TCP socket: every byte a read returns was in the ring first.
//!
//! Reading the ring is memory reads only: no system call per read or per token. The filter
//! keeps the frames few (the server's segments to us, headers only).

use super::bpf;
use super::frame::{self, Segment, TP_STATUS_USER};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per frame: the frame header, the link-layer address and [`bpf::SNAP_LEN`] bytes
/// (the kernel puts a `SOCK_DGRAM` packet at offset 80).
const FRAME: usize = 256;
/// Frames in the ring: 8 MiB for all of a client's connections. Any read of any connection
/// empties it, so it fills only when every connection is this many segments behind the server
/// together (at 100,000 tokens a second, a third of a second); the kernel then drops the
/// newest and counts them ([`Ring::drops`]), and those events keep their read's stamp.
pub const FRAMES: usize = 32_768;
/// The ring's size; its blocks are pages (frames do not cross blocks, and a block must be a
/// whole number of pages).
const RING: usize = FRAME * FRAMES;

/// `linux/if_packet.h` and `linux/if_ether.h`.
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const ETH_P_ALL: u16 = 0x0003;

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    block_size: libc::c_uint,
    block_nr: libc::c_uint,
    frame_size: libc::c_uint,
    frame_nr: libc::c_uint,
}

fn packet_socket() -> io::Result<OwnedFd> {
    // Protocol 0: nothing is received until `bind` names one, after the filter is in place.
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: a live value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct tpacket_stats`: since the last time it was asked, frames the filter kept and those
/// of them the ring had no room for.
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: libc::c_uint,
    drops: libc::c_uint,
}

/// A packet socket and its mapped ring. See the module doc.
pub struct Ring {
    fd: OwnedFd,
    map: *mut u8,
    /// The next frame to look at.
    next: usize,
}

// SAFETY: the mapping belongs to this value alone (nothing else holds the pointer), and it is
// used through `&mut self` only, so moving it to another thread is moving plain memory.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of the segments of the server listening on port `remote`, to any of our ports.
    /// Takes milliseconds (the kernel waits for its readers before it installs a ring).
    pub fn open(remote: u16) -> io::Result<Ring> {
        let fd = packet_socket()?;
        // The outgoing copy of each segment on `lo` is dropped by the filter too; this saves
        // running it (Linux 4.20 and later; older kernels refuse, and the filter still does).
        let one: libc::c_int = 1;
        let _ = setsockopt(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
        let prog = bpf::server_filter(remote);
        let fprog = libc::sock_fprog {
            len: bpf::LEN as libc::c_ushort,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)?;
        setsockopt(&fd, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        // SAFETY: plain sysconf(3) call.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p >= FRAME && RING % p == 0)
            .ok_or_else(|| io::Error::other("unusual page size for a packet ring"))?;
        let req = TpacketReq {
            block_size: page as libc::c_uint,
            block_nr: (RING / page) as libc::c_uint,
            frame_size: FRAME as libc::c_uint,
            frame_nr: FRAMES as libc::c_uint,
        };
        setsockopt(&fd, libc::SOL_PACKET, PACKET_RX_RING, &req)?;
        // SAFETY: maps the ring the kernel just allocated for this descriptor, at its size.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RING,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = Ring {
            fd,
            map: map.cast(),
            next: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid; family and protocol set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = 0; // every interface
                             // SAFETY: a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ring)
    }

    /// Frames the ring had no room for since the last call (the kernel counts them and starts
    /// again from 0 when asked); 0 if the kernel will not say.
    pub fn drops(&self) -> u64 {
        let mut st = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: a live value of the size given.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            u64::from(st.drops)
        } else {
            0
        }
    }

    /// Hands every frame the kernel has filled since the last call to `each`, oldest first,
    /// and gives the frames back. Returns how many there were. Memory reads only.
    pub fn drain(&mut self, mut each: impl FnMut(Result<Segment, frame::Skip>)) -> usize {
        let mut n = 0;
        loop {
            // SAFETY: `next < FRAMES`, so the frame lies inside the mapping, and its first
            // word is a 4-byte-aligned `tp_status` the kernel writes: read it atomically.
            let at = unsafe { self.map.add(self.next * FRAME) };
            let status = unsafe { &*(at as *const AtomicU32) };
            if status.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return n;
            }
            // SAFETY: the kernel does not touch a frame whose status says it is ours, until
            // we give it back below.
            let bytes = unsafe { std::slice::from_raw_parts(at, FRAME) };
            each(frame::parse_frame(bytes));
            status.store(0, Ordering::Release); // TP_STATUS_KERNEL
            self.next = (self.next + 1) % FRAMES;
            n += 1;
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, at its size; unmapped once.
        unsafe {
            libc::munmap(self.map.cast(), RING);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Needs CAP_NET_RAW: under CI (root) it must run; elsewhere without it, it says so.
    fn ring_or_skip(remote: u16) -> Option<Ring> {
        match Ring::open(remote) {
            Ok(r) => Some(r),
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped: no packet socket here ({e})");
                None
            }
            Err(e) => panic!("CI=true: a packet socket must open (CAP_NET_RAW): {e}"),
        }
    }

    #[test]
    fn sees_each_server_segment_once_with_the_handshake_first() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server_port = listener.local_addr().unwrap().port();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let local = socket.local_addr().unwrap().port();
        let Some(mut ring) = ring_or_skip(server_port) else {
            return;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            for i in 0..5u8 {
                s.write_all(&[i; 100]).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let _ = s.read(&mut [0u8; 1]);
        });
        let mut client = rt.block_on(async {
            let s = socket.connect(([127, 0, 0, 1], server_port).into()).await;
            s.unwrap().into_std().unwrap()
        });
        client.set_nonblocking(false).unwrap();
        let mut got = vec![0u8; 500];
        client.read_exact(&mut got).unwrap();
        let mut segs = Vec::new();
        ring.drain(|s| segs.push(s.expect("a TCP segment")));
        drop(client);
        server.join().unwrap();
        // The SYN-ACK, then the five data segments (and perhaps bare ACKs), each once: the
        // outgoing copies on `lo` and our own segments were filtered out.
        assert!(segs[0].flags & frame::SYN != 0, "{segs:?}");
        let data: Vec<&Segment> = segs.iter().filter(|s| s.payload_len > 0).collect();
        assert_eq!(data.len(), 5, "{segs:?}");
        for (i, s) in data.iter().enumerate() {
            assert_eq!((s.src_port, s.dst_port), (server_port, local));
            assert_eq!(s.seq, segs[0].seq.wrapping_add(1 + 100 * i as u32));
            assert_eq!(s.pkttype, 0);
        }
        assert!(data.windows(2).all(|w| w[0].ns < w[1].ns));
        // After the close only the server's FIN and ACKs come: no data twice.
        ring.drain(|s| assert_eq!(s.expect("a TCP segment").payload_len, 0));
        assert_eq!(ring.drops(), 0);
    }
}
