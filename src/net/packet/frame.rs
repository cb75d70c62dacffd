//! One frame of a `TPACKET_V2` receive ring, read as bytes: the frame header (status, capture
//! length, where the packet starts, the kernel's `CLOCK_REALTIME` stamp), the link-layer
//! address that says which way the packet went, then the IPv4 or IPv6 header and the TCP
//! header behind it.
//!
//! Pure: no socket, no clock. The ring's socket is `SOCK_DGRAM`, so a packet starts at its
//! network header (no link-layer header to skip, whatever the interface). The BPF filter
//! captures only the first [`super::bpf::SNAP_LEN`] bytes, so the TCP payload's length comes
//! from the IP header's own length field, never from what was captured.
//!
//! Layouts (Linux `if_packet.h`, the same on every architecture): `struct tpacket2_hdr` is
//! `u32 tp_status, tp_len, tp_snaplen; u16 tp_mac, tp_net; u32 tp_sec, tp_nsec; u16
//! tp_vlan_tci, tp_vlan_tpid; u8 tp_padding[4]` (32 bytes), followed at
//! `TPACKET_ALIGN(32) = 32` by `struct sockaddr_ll` (`u16 sll_family, sll_protocol; i32
//! sll_ifindex; u16 sll_hatype; u8 sll_pkttype, sll_halen; u8 sll_addr[8]`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `sizeof(struct tpacket2_hdr)`.
pub const TPACKET2_HDR: usize = 32;
/// Where `struct sockaddr_ll` starts in a frame (`TPACKET_ALIGN(sizeof(tpacket2_hdr))`).
const SLL_AT: usize = 32;
/// Offset of `sll_pkttype` in `struct sockaddr_ll`.
const SLL_PKTTYPE: usize = 10;
/// `PACKET_OUTGOING`: a packet this host sent (on `lo`, every segment is seen once going out
/// and once coming in; only the incoming copy is the arrival).
pub const PACKET_OUTGOING: u8 = 4;
/// `TP_STATUS_USER`: the frame is ours to read.
pub const TP_STATUS_USER: u32 = 1;
/// `TP_STATUS_LOSING`: the kernel dropped packets since the last frame it filled (ring full).
pub const TP_STATUS_LOSING: u32 = 1 << 2;
const IPPROTO_TCP: u8 = 6;

/// TCP flags we look at.
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;

/// One captured TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The kernel's stamp of the frame, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub ns: u64,
    /// `sll_pkttype`: 0 for a packet addressed to this host, [`PACKET_OUTGOING`] for one it sent.
    pub pkttype: u8,
    /// The ring dropped packets before this one (`TP_STATUS_LOSING`).
    pub losing: bool,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub flags: u8,
    /// TCP payload bytes, from the IP header's length fields.
    pub payload_len: u32,
}

/// Why a frame holds no segment we can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Shorter than its headers say, or its offsets point outside the frame.
    Truncated,
    /// Not IPv4 or IPv6.
    NotIp,
    /// Not TCP, or (IPv6) behind extension headers.
    NotTcp,
    /// An IPv4 fragment other than the first, or a fragmented one.
    Fragment,
    /// A header field that cannot be (header lengths below the minimum, lengths that do not add
    /// up, a zero stamp).
    Malformed,
}

/// The frame header's `tp_status` (the first word), as the kernel wrote it.
pub fn status(frame: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(frame.get(0..4)?.try_into().ok()?))
}

/// Reads one ring frame the kernel handed over (`tp_status & TP_STATUS_USER`).
pub fn parse_frame(frame: &[u8]) -> Result<Segment, Skip> {
    let hdr = frame.get(..TPACKET2_HDR).ok_or(Skip::Truncated)?;
    let status = u32::from_ne_bytes(word4(hdr, 0));
    let snaplen = u32::from_ne_bytes(word4(hdr, 8)) as usize;
    let net = u16::from_ne_bytes([hdr[14], hdr[15]]) as usize;
    let sec = u32::from_ne_bytes(word4(hdr, 16));
    let nsec = u32::from_ne_bytes(word4(hdr, 20));
    if nsec >= 1_000_000_000 || (sec == 0 && nsec == 0) {
        return Err(Skip::Malformed);
    }
    let pkttype = *frame.get(SLL_AT + SLL_PKTTYPE).ok_or(Skip::Truncated)?;
    let end = net.checked_add(snaplen).ok_or(Skip::Truncated)?;
    if net < SLL_AT + 20 {
        return Err(Skip::Malformed);
    }
    let packet = frame.get(net..end).ok_or(Skip::Truncated)?;
    let mut seg = parse_ip_tcp(packet)?;
    seg.ns = u64::from(sec) * 1_000_000_000 + u64::from(nsec);
    seg.pkttype = pkttype;
    seg.losing = status & TP_STATUS_LOSING != 0;
    Ok(seg)
}

/// The IP and TCP headers at the start of `p` (a packet from its network header on, perhaps
/// cut short after the TCP header). `ns`, `pkttype` and `losing` are left 0.
pub fn parse_ip_tcp(p: &[u8]) -> Result<Segment, Skip> {
    let first = *p.first().ok_or(Skip::Truncated)?;
    let (src, dst, tcp_at, ip_payload) = match first >> 4 {
        4 => {
            let h = p.get(..20).ok_or(Skip::Truncated)?;
            let ihl = usize::from(first & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            if ihl < 20 || total < ihl {
                return Err(Skip::Malformed);
            }
            if h[9] != IPPROTO_TCP {
                return Err(Skip::NotTcp);
            }
            // More fragments, or a fragment offset: the TCP header may not be here.
            if u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                return Err(Skip::Fragment);
            }
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            (IpAddr::V4(src), IpAddr::V4(dst), ihl, total - ihl)
        }
        6 => {
            let h = p.get(..40).ok_or(Skip::Truncated)?;
            if h[6] != IPPROTO_TCP {
                return Err(Skip::NotTcp);
            }
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let src: [u8; 16] = h[8..24].try_into().map_err(|_| Skip::Truncated)?;
            let dst: [u8; 16] = h[24..40].try_into().map_err(|_| Skip::Truncated)?;
            (
                IpAddr::V6(Ipv6Addr::from(src)),
                IpAddr::V6(Ipv6Addr::from(dst)),
                40,
                payload,
            )
        }
        _ => return Err(Skip::NotIp),
    };
    let tcp = p.get(tcp_at..tcp_at + 20).ok_or(Skip::Truncated)?;
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || ip_payload < doff {
        return Err(Skip::Malformed);
    }
    Ok(Segment {
        ns: 0,
        pkttype: 0,
        losing: false,
        src,
        dst,
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes(word4(tcp, 4)),
        flags: tcp[13],
        payload_len: (ip_payload - doff) as u32,
    })
}

fn word4(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

/// Hand-built frames and packets, for this module's tests, the sequence map's and the ring's.
#[cfg(test)]
pub(crate) mod build {
    use super::*;

    /// Where a test frame's packet starts (as the kernel lays out a `SOCK_DGRAM` frame).
    pub const NET_AT: usize = 64;

    /// An IPv4 + TCP packet (20-byte IP header, `tcp_opts` bytes of TCP options) of `payload`
    /// bytes, whose captured part is its headers only.
    pub fn ipv4_tcp(
        src: ([u8; 4], u16),
        dst: ([u8; 4], u16),
        seq: u32,
        flags: u8,
        tcp_opts: usize,
        payload: usize,
    ) -> Vec<u8> {
        let doff = 20 + tcp_opts;
        let total = (20 + doff + payload) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&src.0);
        p.extend_from_slice(&dst.0);
        p.extend(tcp(src.1, dst.1, seq, flags, doff));
        p
    }

    /// An IPv6 + TCP packet (no extension headers) of `payload` bytes, headers captured only.
    pub fn ipv6_tcp(
        src: (Ipv6Addr, u16),
        dst: (Ipv6Addr, u16),
        seq: u32,
        flags: u8,
        payload: usize,
    ) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
        p.extend_from_slice(&[IPPROTO_TCP, 64]);
        p.extend_from_slice(&src.0.octets());
        p.extend_from_slice(&dst.0.octets());
        p.extend(tcp(src.1, dst.1, seq, flags, 20));
        p
    }

    fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, doff: usize) -> Vec<u8> {
        let mut t = vec![0u8; doff];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[12] = ((doff / 4) as u8) << 4;
        t[13] = flags;
        t
    }

    /// A ring frame of `size` bytes holding `packet`, stamped `ns`, as the kernel fills one.
    pub fn frame(size: usize, status: u32, ns: u64, pkttype: u8, packet: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; size];
        f[0..4].copy_from_slice(&status.to_ne_bytes());
        f[4..8].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        f[8..12].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        f[12..14].copy_from_slice(&(NET_AT as u16).to_ne_bytes());
        f[14..16].copy_from_slice(&(NET_AT as u16).to_ne_bytes());
        f[16..20].copy_from_slice(&((ns / 1_000_000_000) as u32).to_ne_bytes());
        f[20..24].copy_from_slice(&((ns % 1_000_000_000) as u32).to_ne_bytes());
        f[SLL_AT..SLL_AT + 2].copy_from_slice(&17u16.to_ne_bytes());
        f[SLL_AT + SLL_PKTTYPE] = pkttype;
        f[NET_AT..NET_AT + packet.len()].copy_from_slice(packet);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    const NS: u64 = 1_700_000_000_123_456_789;
    const SERVER: ([u8; 4], u16) = ([127, 0, 0, 1], 8000);
    const CLIENT: ([u8; 4], u16) = ([127, 0, 0, 1], 40_000);

    #[test]
    fn reads_an_ipv4_segment_from_a_frame() {
        // 12 bytes of TCP options (timestamps), 137 bytes of payload.
        let p = ipv4_tcp(SERVER, CLIENT, 0xfffe_0001, ACK | 0x08, 12, 137);
        let f = frame(256, TP_STATUS_USER, NS, 0, &p);
        let s = parse_frame(&f).unwrap();
        assert_eq!(s.ns, NS);
        assert_eq!(s.pkttype, 0);
        assert!(!s.losing);
        assert_eq!(s.src, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!((s.src_port, s.dst_port), (8000, 40_000));
        assert_eq!(s.seq, 0xfffe_0001);
        assert_eq!(s.flags, ACK | 0x08);
        assert_eq!(s.payload_len, 137);
        assert_eq!(status(&f), Some(TP_STATUS_USER));
    }

    #[test]
    fn reads_an_ipv6_segment_and_the_direction_and_losses() {
        let a = (Ipv6Addr::LOCALHOST, 8000);
        let b = ("fe80::1".parse().unwrap(), 50_000);
        let p = ipv6_tcp(a, b, 7, SYN | ACK, 0);
        let f = frame(
            256,
            TP_STATUS_USER | TP_STATUS_LOSING,
            NS,
            PACKET_OUTGOING,
            &p,
        );
        let s = parse_frame(&f).unwrap();
        assert_eq!((s.src, s.dst), (IpAddr::V6(a.0), IpAddr::V6(b.0)));
        assert_eq!((s.seq, s.flags, s.payload_len), (7, SYN | ACK, 0));
        assert_eq!(s.pkttype, PACKET_OUTGOING);
        assert!(s.losing);
    }

    #[test]
    fn refuses_what_is_not_a_whole_tcp_header() {
        let p = ipv4_tcp(SERVER, CLIENT, 1, ACK, 0, 10);
        // Cut anywhere inside the headers: never a segment, never a panic.
        for cut in 0..p.len() {
            assert_eq!(
                parse_ip_tcp(&p[..cut]),
                Err(Skip::Truncated),
                "cut at {cut}"
            );
        }
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(parse_ip_tcp(&udp), Err(Skip::NotTcp));
        let mut frag = p.clone();
        frag[6] = 0x20; // more fragments
        assert_eq!(parse_ip_tcp(&frag), Err(Skip::Fragment));
        let mut short_ihl = p.clone();
        short_ihl[0] = 0x44;
        assert_eq!(parse_ip_tcp(&short_ihl), Err(Skip::Malformed));
        let mut short_total = p.clone();
        short_total[2..4].copy_from_slice(&30u16.to_be_bytes());
        assert_eq!(parse_ip_tcp(&short_total), Err(Skip::Malformed));
        let mut arp = p.clone();
        arp[0] = 0x15;
        assert_eq!(parse_ip_tcp(&arp), Err(Skip::NotIp));
        let mut doff = p;
        doff[20 + 12] = 0x40; // 16-byte TCP header
        assert_eq!(parse_ip_tcp(&doff), Err(Skip::Malformed));
    }

    #[test]
    fn refuses_frames_whose_offsets_leave_the_frame() {
        let p = ipv4_tcp(SERVER, CLIENT, 1, ACK, 0, 10);
        let f = frame(256, TP_STATUS_USER, NS, 0, &p);
        for cut in 0..NET_AT + p.len() {
            assert!(parse_frame(&f[..cut]).is_err(), "cut at {cut}");
        }
        let mut far = f.clone();
        far[14..16].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert_eq!(parse_frame(&far), Err(Skip::Truncated));
        let mut huge = f.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse_frame(&huge), Err(Skip::Truncated));
        let mut inside_header = f.clone();
        inside_header[14..16].copy_from_slice(&8u16.to_ne_bytes());
        assert_eq!(parse_frame(&inside_header), Err(Skip::Malformed));
        let unstamped = frame(256, TP_STATUS_USER, 0, 0, &p);
        assert_eq!(parse_frame(&unstamped), Err(Skip::Malformed));
    }
}
