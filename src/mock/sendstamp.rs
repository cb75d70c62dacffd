//! The kernel's send stamps on the simulated server's writes (`selftest --send-stamps`), the
//! socket half: turning them on for a connection, and taking the stamp of a write from the
//! socket's error queue (the parsing is `net::stamp::tx_software_stamp`).
//!
//! Why: the trace's write times are known only to the span of each write system call, and on
//! loopback that call runs the receiving side too (tens of µs at p99 on a busy VM). The kernel
//! stamps the moment it hands the write's bytes to the device (`SOF_TIMESTAMPING_TX_SOFTWARE`,
//! `loopback_xmit` on `lo`), which is when they left the server: a point, not a span. With
//! `SOF_TIMESTAMPING_OPT_ID` each stamp carries the stream offset of its write's last byte, so
//! it is matched to its write, not merely taken in order. On loopback the stamp is usually
//! queued before the write returns; TCP may also hold the bytes back (a full congestion window
//! waiting for a slow reader's ACKs) and send them later, and the stamp says so.
//!
//! Linux only; elsewhere [`enable`] says it is unsupported and no write gets a stamp.

#[cfg(target_os = "linux")]
use crate::net::stamp::tx_software_stamp;
pub use crate::net::stamp::SendStamp;
use std::io;
use std::os::fd::RawFd;

/// `SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
/// SOF_TIMESTAMPING_OPT_TSONLY`: software stamps as the bytes go to the device, keyed by
/// stream offset, without the payload looped back.
#[cfg(target_os = "linux")]
const FLAGS: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// Control buffer for one error-queue message: `SCM_TIMESTAMPING` (`CMSG_SPACE(48)`) and the
/// extended error with the offender's address (`CMSG_SPACE(16 + 28)`), with room to spare.
#[cfg(target_os = "linux")]
const CONTROL: usize = 256;

/// Turns send stamps on for the connection `fd`, before any byte is written on it (keys count
/// from the first byte sent after this).
pub fn enable(fd: RawFd) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        crate::sys::set_int_option(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            FLAGS as libc::c_int,
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "send stamps need Linux's SO_TIMESTAMPING",
        ))
    }
}

/// Empties `fd`'s error queue, handing `each` every send stamp in it, oldest first.
pub fn drain(fd: RawFd, mut each: impl FnMut(SendStamp)) {
    #[cfg(target_os = "linux")]
    {
        let mut control = [0u8; CONTROL];
        loop {
            // SAFETY: an all-zero msghdr is valid (no name, no iovec).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = CONTROL as _;
            // SAFETY: msg points at a live control buffer of the length given; no data buffer,
            // so the kernel writes only the control messages.
            let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
            if n < 0 {
                // EAGAIN: the queue is empty (any other error ends the drain the same way).
                return;
            }
            let len = (msg.msg_controllen as usize).min(CONTROL);
            if let Some(s) = tx_software_stamp(&control[..len]) {
                each(s);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (fd, &mut each);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn realtime_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    fn stamps(fd: RawFd) -> Vec<SendStamp> {
        let mut v = Vec::new();
        drain(fd, |s| v.push(s));
        v
    }

    /// Three writes on a loopback connection: each one's stamp is in the queue when it
    /// returns, keyed by its last byte's offset, and lies between the clock read before the
    /// write and the one after it. A drain empties the queue.
    #[test]
    fn each_write_gets_its_own_stamp_keyed_by_its_last_byte() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.set_nodelay(true).unwrap();
        enable(server.as_raw_fd()).unwrap();
        let mut sent = 0u64;
        for chunk in [&b"data: {\"a\":1}\n\n"[..], b"data: {\"b\":22}\n\n", b"x"] {
            let before = realtime_ns();
            server.write_all(chunk).unwrap();
            let after = realtime_ns();
            sent += chunk.len() as u64;
            let got = stamps(server.as_raw_fd());
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(u64::from(got[0].key), sent - 1);
            let ns = got[0].ns;
            assert!(
                (before..=after).contains(&ns),
                "{before} <= {ns} <= {after}"
            );
            let mut buf = vec![0u8; chunk.len()];
            client.read_exact(&mut buf).unwrap();
        }
        assert_eq!(stamps(server.as_raw_fd()), []);
        // Two writes, one drain: both, in order.
        server.write_all(b"yy").unwrap();
        server.write_all(b"zzz").unwrap();
        let keys: Vec<u64> = stamps(server.as_raw_fd())
            .iter()
            .map(|s| u64::from(s.key))
            .collect();
        assert_eq!(keys, [sent + 1, sent + 4]);
    }
}
