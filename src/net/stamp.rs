//! Kernel timestamps, the pure half: reading `SCM_TIMESTAMPING` out of a `recvmsg` control
//! buffer (a read's receive stamp; a send stamp from a socket's error queue), and turning
//! (kernel stamp, realtime now, TSC now) into the stamp a read's events carry.
//!
//! Why: a client stamps a read when it wakes up, not when the data arrived. With
//! `SO_TIMESTAMPING` (software receive stamps) the kernel tells us when the data reached the
//! socket, in `CLOCK_REALTIME`. Reading `CLOCK_REALTIME` again right after `recvmsg` returns
//! gives the wake-up latency in one clock (no offset between clocks to estimate), and the
//! event stamp is the TSC stamp taken at the same moment minus that latency.
//!
//! No sockets, no clock reads here: the socket half lives in `net::plain`.

use crate::clock::Clock;
pub use crate::timeline::StampFallback as Fallback;

/// `SOL_SOCKET` and `SCM_TIMESTAMPING`: libc's on Linux; elsewhere Linux x86-64's values, so
/// the parser (and its fuzz target) builds everywhere though only Linux sends the message.
#[cfg(target_os = "linux")]
const LEVEL: i32 = libc::SOL_SOCKET;
#[cfg(target_os = "linux")]
const TYPE: i32 = libc::SCM_TIMESTAMPING;
#[cfg(not(target_os = "linux"))]
const LEVEL: i32 = 1;
#[cfg(not(target_os = "linux"))]
const TYPE: i32 = 37;

/// `SOL_TCP` and `TCP_CM_INQ` (Linux's values everywhere, as above).
#[cfg(target_os = "linux")]
const TCP_LEVEL: i32 = libc::SOL_TCP;
#[cfg(target_os = "linux")]
const TCP_INQ_TYPE: i32 = libc::TCP_CM_INQ;
#[cfg(not(target_os = "linux"))]
const TCP_LEVEL: i32 = 6;
#[cfg(not(target_os = "linux"))]
const TCP_INQ_TYPE: i32 = 36;

/// Where a send stamp's `struct sock_extended_err` comes: `SOL_IP`/`IP_RECVERR` and
/// `SOL_IPV6`/`IPV6_RECVERR` (Linux's values, the same on every architecture).
const RECVERR: [(i32, i32); 2] = [(0, 11), (41, 25)];
/// `sock_extended_err.ee_origin` of a timestamp (`SO_EE_ORIGIN_TIMESTAMPING`) and its
/// `ee_info` for a stamp taken as the packet went to the device (`SCM_TSTAMP_SND`).
const ORIGIN_TIMESTAMPING: u8 = 4;
const TSTAMP_SND: u32 = 0;
/// `struct sock_extended_err { u32 ee_errno; u8 ee_origin, ee_type, ee_code, ee_pad; u32
/// ee_info; u32 ee_data; }`.
const EXTENDED_ERR_LEN: usize = 16;

/// `struct cmsghdr` on a 64-bit target: `size_t cmsg_len; int cmsg_level; int cmsg_type;`.
const HDR: usize = 16;
/// `struct scm_timestamping { struct timespec ts[3]; }` with 64-bit `time_t` and `long`.
const SCM_TIMESTAMPING_LEN: usize = 48;
/// Bytes of control buffer a read's two messages need: `SCM_TIMESTAMPING` (`CMSG_SPACE(48)`)
/// and `TCP_CM_INQ`, an `int` (`CMSG_SPACE(4)`). The kernel writes them in that order; one
/// that does not fit is dropped (`MSG_CTRUNC`), never the first for the second.
pub const CONTROL_LEN: usize = HDR + SCM_TIMESTAMPING_LEN + HDR + 8;

/// Longest wake-up latency taken as real: the most a `u32` of nanoseconds holds (4.29 s). A
/// larger one means the realtime clock was stepped between the two readings (NTP), not that
/// the client slept that long, so that read keeps its TSC stamp.
pub const MAX_WAKEUP_NS: u64 = u32::MAX as u64;

/// How far apart the two TSC readings around a `CLOCK_REALTIME` reading may be for the pair
/// to be taken at once ([`clock_pair`]): a few times two vDSO clock reads.
pub const PAIR_SPREAD_NS: u64 = 1_000;
/// Readings [`clock_pair`] makes before it settles for the tightest.
pub const PAIR_TRIES: u32 = 3;

/// A TSC reading and the `CLOCK_REALTIME` reading that goes with it, the two known to within
/// half the spread of the TSC readings `read` takes on either side of the realtime one
/// (`read` returns them as before, realtime, after). Why: a kernel or packet stamp goes onto
/// the TSC clock as the TSC reading minus (realtime reading − kernel stamp), so a thread
/// descheduled between the two readings (a VM does that for tens of µs) puts every stamp of
/// the read early by as long. Seen on 2026-12-05: one first token in 2,000 stamped 20.2 µs
/// before the simulated server began writing it (`selftest`'s `ttft_bound_misses_us`). Takes
/// the first pair whose spread is at most [`PAIR_SPREAD_NS`], else the tightest of
/// [`PAIR_TRIES`]; returns the midpoint of its TSC readings and its realtime reading.
pub fn clock_pair(clock: &Clock, mut read: impl FnMut() -> (u64, u64, u64)) -> (u64, u64) {
    // (spread, TSC midpoint, realtime) of one reading.
    let mut pair = || {
        let (before, realtime, after) = read();
        let mid = before + after.saturating_sub(before) / 2;
        (clock.delta_ns(before, after), mid, realtime)
    };
    let mut best = pair();
    for _ in 1..PAIR_TRIES {
        if best.0 <= PAIR_SPREAD_NS {
            break;
        }
        let next = pair();
        if next.0 < best.0 {
            best = next;
        }
    }
    (best.1, best.2)
}

/// The software receive stamp (`ts[0]`, nanoseconds since the Unix epoch, `CLOCK_REALTIME`)
/// of the first `SCM_TIMESTAMPING` message in `control`, the bytes `recvmsg` filled
/// (`msg_controllen` of them). `None` when there is none, it is cut short, or `ts[0]` is zero
/// or not a valid time (the kernel leaves it zero when it took no software stamp).
pub fn rx_software_stamp_ns(control: &[u8]) -> Option<u64> {
    let p = message(control, LEVEL, TYPE)?;
    if p.len() < 16 {
        return None;
    }
    let sec = i64::from_ne_bytes(word(&p[0..8])?);
    let nsec = i64::from_ne_bytes(word(&p[8..16])?);
    timespec_ns(sec, nsec)
}

/// One send stamp from a socket's error queue (`SO_TIMESTAMPING` with
/// `SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_OPT_ID`): when the kernel handed the bytes
/// of one send to the device, and which send it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendStamp {
    /// `ee_data`: on TCP, the stream offset of the send's last byte, counted from the first
    /// byte sent after stamping was turned on (modulo 2^32).
    pub key: u32,
    /// The software stamp (`ts[0]`), `CLOCK_REALTIME` ns since the epoch.
    pub ns: u64,
}

/// The send stamp in `control`, the bytes a `recvmsg(MSG_ERRQUEUE)` filled: its
/// `SCM_TIMESTAMPING` message and the extended error that says it is a timestamp taken at the
/// device (`SO_EE_ORIGIN_TIMESTAMPING`, `SCM_TSTAMP_SND`). `None` when either is missing or
/// cut short, the error is another kind, or the stamp is zero or not a valid time.
pub fn tx_software_stamp(control: &[u8]) -> Option<SendStamp> {
    let ns = rx_software_stamp_ns(control)?;
    let e = RECVERR
        .iter()
        .find_map(|&(level, ty)| message(control, level, ty))?;
    let e = e.get(..EXTENDED_ERR_LEN)?;
    let info = u32::from_ne_bytes(e[8..12].try_into().ok()?);
    if e[4] != ORIGIN_TIMESTAMPING || info != TSTAMP_SND {
        return None;
    }
    let key = u32::from_ne_bytes(e[12..16].try_into().ok()?);
    Some(SendStamp { key, ns })
}

/// A kernel stamp `kernel_ns` put on the TSC clock: the TSC reading `tsc` minus how long
/// before the realtime reading `realtime_ns` taken with it (see [`clock_pair`]) the stamp
/// was. `None` when the stamp is after that reading or more than [`MAX_WAKEUP_NS`] before it
/// (the realtime clock was stepped).
pub fn onto_tsc(clock: &Clock, tsc: u64, realtime_ns: u64, kernel_ns: u64) -> Option<u64> {
    let late = wakeup_ns(kernel_ns, realtime_ns)?;
    Some(clock.sub_ns(tsc, u64::from(late)))
}

/// The bytes left in the socket's receive queue after the read (`TCP_CM_INQ`, sent with every
/// read once `TCP_INQ` is set on the socket: Linux 4.18 on). `None` when `control` holds no
/// such message, it is cut short, or its value is negative. The kernel also says 1 when
/// nothing is left but the peer's FIN: an upper bound on the data left, never below it.
pub fn tcp_inq(control: &[u8]) -> Option<u32> {
    let p = message(control, TCP_LEVEL, TCP_INQ_TYPE)?;
    let v = i32::from_ne_bytes(p.get(0..4)?.try_into().ok()?);
    u32::try_from(v).ok()
}

/// The payload of the first message of `level` and `ty` in `control`.
///
/// Walks the messages as `CMSG_NXTHDR` does: each header's length, rounded up to 8, leads to
/// the next; a length shorter than a header or past the end stops the walk.
fn message(control: &[u8], level: i32, ty: i32) -> Option<&[u8]> {
    let mut at = 0usize;
    while control.len().saturating_sub(at) >= HDR {
        let hdr = &control[at..at + HDR];
        let len = u64::from_ne_bytes(word(&hdr[0..8])?);
        let l = i32::from_ne_bytes(hdr[8..12].try_into().ok()?);
        let t = i32::from_ne_bytes(hdr[12..16].try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        if len < HDR || len > control.len() - at {
            return None;
        }
        if l == level && t == ty {
            return Some(&control[at + HDR..at + len]);
        }
        // CMSG_ALIGN: the next header starts at an 8-byte boundary.
        at = at.checked_add(len.checked_add(7)? & !7)?;
    }
    None
}

fn word(b: &[u8]) -> Option<[u8; 8]> {
    b.try_into().ok()
}

fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) || (sec == 0 && nsec == 0) {
        return None;
    }
    (sec as u64)
        .checked_mul(1_000_000_000)?
        .checked_add(nsec as u64)
}

/// How late the client woke up: realtime now minus the kernel's receive stamp, both
/// `CLOCK_REALTIME` ns. `None` when the difference is negative or above [`MAX_WAKEUP_NS`]
/// (the clock was stepped): that read keeps its TSC stamp.
pub fn wakeup_ns(kernel_ns: u64, realtime_now_ns: u64) -> Option<u32> {
    let d = realtime_now_ns.checked_sub(kernel_ns)?;
    if d > MAX_WAKEUP_NS {
        return None;
    }
    u32::try_from(d).ok()
}

/// The stamp of one read: what every event it completes carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadStamp {
    /// Raw clock stamp (see [`crate::clock::Clock`]).
    pub t: u64,
    /// Nanoseconds between the kernel receiving the data and the client waking up to read it;
    /// 0 when the kernel stamp was not used.
    pub wakeup_ns: u32,
    /// `None` when `t` is the kernel's stamp, else why it is the client's own.
    pub fallback: Option<Fallback>,
    /// Bytes the read left in the socket ([`tcp_inq`]); `None` when the kernel did not say.
    pub left: Option<u32>,
}

impl ReadStamp {
    /// The client's own stamp, taken when the read returned.
    pub fn client(t: u64, why: Fallback) -> Self {
        Self {
            t,
            wakeup_ns: 0,
            fallback: Some(why),
            left: None,
        }
    }

    /// A read's stamp from its TSC stamp `tsc`, the realtime clock read with it and the
    /// kernel's receive stamp, if the control buffer held one.
    pub fn from_kernel(clock: &Clock, tsc: u64, realtime_ns: u64, kernel_ns: Option<u64>) -> Self {
        let Some(kernel) = kernel_ns else {
            return Self::client(tsc, Fallback::NoStamp);
        };
        match wakeup_ns(kernel, realtime_ns) {
            Some(w) => Self {
                t: clock.sub_ns(tsc, w as u64),
                wakeup_ns: w,
                fallback: None,
                left: None,
            },
            None => Self::client(tsc, Fallback::Implausible),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_pair_read_across_a_pause_is_read_again() {
        // The mock clock's raw tick is 1 ns.
        let (clock, _h) = Clock::mock();
        // The thread was descheduled for 40 µs between the first TSC and realtime readings:
        // that pair is dropped for the next, tight one, taken at its TSC midpoint.
        let mut script = [(1_000, 77, 41_000), (41_100, 99, 41_300)].into_iter();
        assert_eq!(clock_pair(&clock, || script.next().unwrap()), (41_200, 99));
        // A tight first pair is taken at once.
        let mut script = [(5_000, 7, 5_040)].into_iter();
        assert_eq!(clock_pair(&clock, || script.next().unwrap()), (5_020, 7));
        // None tight enough: the tightest of PAIR_TRIES (here the second), no more reads.
        let mut script = [(0, 1, 9_000), (10_000, 2, 12_000), (20_000, 3, 25_000)].into_iter();
        assert_eq!(clock_pair(&clock, || script.next().unwrap()), (11_000, 2));
        assert!(script.next().is_none());
    }

    /// One control message as the kernel lays it out: header, payload, padding to 8.
    fn cmsg(level: i32, ty: i32, payload: &[u8]) -> Vec<u8> {
        let len = (HDR + payload.len()) as u64;
        let mut v = len.to_ne_bytes().to_vec();
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 8 != 0 {
            v.push(0);
        }
        v
    }

    fn stamping(ts: [(i64, i64); 3]) -> Vec<u8> {
        let mut p = Vec::new();
        for (s, n) in ts {
            p.extend_from_slice(&s.to_ne_bytes());
            p.extend_from_slice(&n.to_ne_bytes());
        }
        cmsg(LEVEL, TYPE, &p)
    }

    const T: (i64, i64) = (1_700_000_000, 123_456_789);
    const T_NS: u64 = 1_700_000_000_123_456_789;

    #[test]
    fn reads_the_software_stamp() {
        let buf = stamping([T, (0, 0), (0, 0)]);
        assert_eq!(buf.len() + HDR + 8, CONTROL_LEN);
        assert_eq!(rx_software_stamp_ns(&buf), Some(T_NS));
        assert_eq!(tcp_inq(&buf), None);
    }

    /// The two messages as the kernel writes them with `SO_TIMESTAMPING` and `TCP_INQ` on:
    /// the stamp, then the bytes left (an `int`, padded to 8).
    #[test]
    fn reads_the_stamp_and_the_bytes_left_from_one_buffer() {
        let mut buf = stamping([T, (0, 0), (0, 0)]);
        buf.extend(cmsg(TCP_LEVEL, TCP_INQ_TYPE, &4_096i32.to_ne_bytes()));
        assert_eq!(buf.len(), CONTROL_LEN);
        assert_eq!(rx_software_stamp_ns(&buf), Some(T_NS));
        assert_eq!(tcp_inq(&buf), Some(4_096));
        // Alone, first, or cut: found where whole, never read past the end.
        let inq = cmsg(TCP_LEVEL, TCP_INQ_TYPE, &0i32.to_ne_bytes());
        assert_eq!(tcp_inq(&inq), Some(0));
        assert_eq!(rx_software_stamp_ns(&inq), None);
        // Its header says 20 bytes (16 + an int): whole from 84 bytes on, padding or not.
        for cut in 64..buf.len() {
            let want = (cut >= 64 + HDR + 4).then_some(4_096);
            assert_eq!(tcp_inq(&buf[..cut]), want, "cut at {cut}");
        }
        // Negative (never sent, but not a count) and too short.
        assert_eq!(
            tcp_inq(&cmsg(TCP_LEVEL, TCP_INQ_TYPE, &(-1i32).to_ne_bytes())),
            None
        );
        assert_eq!(tcp_inq(&cmsg(TCP_LEVEL, TCP_INQ_TYPE, &[1, 0])), None);
        // Another level's message of the same type is not it.
        assert_eq!(
            tcp_inq(&cmsg(LEVEL, TCP_INQ_TYPE, &5i32.to_ne_bytes())),
            None
        );
    }

    /// `struct sock_extended_err` as the kernel fills it for a timestamp: `ENOMSG`, origin,
    /// `ee_info` (which stamp), `ee_data` (the key).
    fn extended_err(origin: u8, info: u32, key: u32) -> Vec<u8> {
        let mut e = 42u32.to_ne_bytes().to_vec();
        e.extend_from_slice(&[origin, 0, 0, 0]);
        e.extend_from_slice(&info.to_ne_bytes());
        e.extend_from_slice(&key.to_ne_bytes());
        e
    }

    /// What `recvmsg(MSG_ERRQUEUE)` fills for one send stamp of a TCP socket: the stamp, then
    /// the extended error (IPv4's level, or IPv6's).
    #[test]
    fn reads_a_send_stamp_and_its_key() {
        let stamp = stamping([T, (0, 0), (0, 0)]);
        for (level, ty) in RECVERR {
            let mut buf = stamp.clone();
            buf.extend(cmsg(level, ty, &extended_err(4, 0, 4_095)));
            let want = SendStamp {
                key: 4_095,
                ns: T_NS,
            };
            assert_eq!(tx_software_stamp(&buf), Some(want));
            // Either order.
            let mut rev = cmsg(level, ty, &extended_err(4, 0, 4_095));
            rev.extend(&stamp);
            assert_eq!(tx_software_stamp(&rev), Some(want));
            // Cut anywhere short of the error's last byte: none.
            for cut in 0..stamp.len() + HDR + EXTENDED_ERR_LEN {
                assert_eq!(tx_software_stamp(&buf[..cut]), None, "cut at {cut}");
            }
        }
        let with = |e: Vec<u8>| {
            let mut buf = stamp.clone();
            buf.extend(cmsg(0, 11, &e));
            tx_software_stamp(&buf)
        };
        // Another origin (a real ICMP error, 2), another stamp (SCM_TSTAMP_ACK, 2), or no
        // stamp at all: none.
        assert_eq!(with(extended_err(2, 0, 1)), None);
        assert_eq!(with(extended_err(4, 2, 1)), None);
        let mut zero = stamping([(0, 0), (0, 0), (0, 0)]);
        zero.extend(cmsg(0, 11, &extended_err(4, 0, 1)));
        assert_eq!(tx_software_stamp(&zero), None);
        assert_eq!(
            tx_software_stamp(&cmsg(0, 11, &extended_err(4, 0, 1))),
            None
        );
    }

    #[test]
    fn a_kernel_stamp_goes_onto_the_tsc_clock_by_its_age() {
        // The mock clock's raw tick is 1 ns: a stamp 7 µs before the realtime reading is 7 µs
        // before the TSC reading taken with it.
        let (clock, _h) = Clock::mock();
        assert_eq!(onto_tsc(&clock, 50_000, T_NS, T_NS - 7_000), Some(43_000));
        assert_eq!(onto_tsc(&clock, 50_000, T_NS, T_NS), Some(50_000));
        // After the reading, or older than MAX_WAKEUP_NS: the clock was stepped.
        assert_eq!(onto_tsc(&clock, 50_000, T_NS, T_NS + 1), None);
        assert_eq!(
            onto_tsc(&clock, 50_000, T_NS, T_NS - MAX_WAKEUP_NS - 1),
            None
        );
    }

    #[test]
    fn no_control_message_means_no_stamp() {
        assert_eq!(rx_software_stamp_ns(&[]), None);
        assert_eq!(rx_software_stamp_ns(&[0u8; 15]), None);
    }

    #[test]
    fn skips_another_message_first() {
        // An IP_TOS-like 1-byte message: padded to 24 bytes, then ours.
        let mut buf = cmsg(0, 1, &[7]);
        assert_eq!(buf.len(), 24);
        buf.extend(stamping([T, (0, 0), (0, 0)]));
        assert_eq!(rx_software_stamp_ns(&buf), Some(T_NS));
        // Another type at our level is skipped too.
        let mut buf = cmsg(LEVEL, TYPE + 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        buf.extend(stamping([T, (0, 0), (0, 0)]));
        assert_eq!(rx_software_stamp_ns(&buf), Some(T_NS));
    }

    #[test]
    fn truncated_buffers_give_no_stamp() {
        let full = stamping([T, (0, 0), (0, 0)]);
        // Cut anywhere: the header's length then runs past the end.
        for cut in 0..full.len() {
            assert_eq!(rx_software_stamp_ns(&full[..cut]), None, "cut at {cut}");
        }
        // A header claiming less than a header: the walk stops instead of looping.
        let mut bad = full.clone();
        bad[..8].copy_from_slice(&4u64.to_ne_bytes());
        assert_eq!(rx_software_stamp_ns(&bad), None);
        // A header too short for ts[0].
        let mut short = cmsg(LEVEL, TYPE, &[0; 8]);
        short.extend_from_slice(&[0; 8]);
        assert_eq!(rx_software_stamp_ns(&short), None);
    }

    #[test]
    fn zero_or_invalid_software_stamp_gives_none() {
        // Only a hardware stamp (ts[2]): ts[0] is zero.
        assert_eq!(rx_software_stamp_ns(&stamping([(0, 0), (0, 0), T])), None);
        assert_eq!(
            rx_software_stamp_ns(&stamping([(5, 1_000_000_000), (0, 0), (0, 0)])),
            None
        );
        assert_eq!(
            rx_software_stamp_ns(&stamping([(-1, 5), (0, 0), (0, 0)])),
            None
        );
        assert_eq!(
            rx_software_stamp_ns(&stamping([(i64::MAX, 0), (0, 0), (0, 0)])),
            None
        );
    }

    #[test]
    fn wakeup_is_realtime_now_minus_kernel_stamp() {
        assert_eq!(wakeup_ns(T_NS, T_NS + 42_000), Some(42_000));
        assert_eq!(wakeup_ns(T_NS, T_NS), Some(0));
        // The clock went back between the two readings: not a latency.
        assert_eq!(wakeup_ns(T_NS, T_NS - 1), None);
        assert_eq!(wakeup_ns(T_NS, T_NS + MAX_WAKEUP_NS), Some(u32::MAX));
        assert_eq!(wakeup_ns(T_NS, T_NS + MAX_WAKEUP_NS + 1), None);
    }

    #[test]
    fn read_stamp_moves_the_tsc_stamp_back_by_the_wakeup() {
        let (clock, _h) = Clock::mock();
        let s = ReadStamp::from_kernel(&clock, 1_000_000, T_NS + 30_000, Some(T_NS));
        assert_eq!(s.t, 970_000);
        assert_eq!(s.wakeup_ns, 30_000);
        assert_eq!(s.fallback, None);
        let s = ReadStamp::from_kernel(&clock, 1_000_000, T_NS, None);
        assert_eq!(s, ReadStamp::client(1_000_000, Fallback::NoStamp));
        let s = ReadStamp::from_kernel(&clock, 1_000_000, T_NS - 5, Some(T_NS));
        assert_eq!(s, ReadStamp::client(1_000_000, Fallback::Implausible));
    }
}
