//! The classic BPF program a client's packet socket runs in the kernel: keep the TCP segments
//! the server sends (source port the server's), as they come in, and only their first
//! [`SNAP_LEN`] bytes; drop everything else before it reaches the ring. Which of the client's
//! connections a kept segment belongs to is the hub's business (`hub`, by destination port):
//! one filter for all of them, so the kernel's work per packet does not grow with connections.
//!
//! Pure: the program is data. The socket is `SOCK_DGRAM`, so offsets count from the network
//! header. The kernel checks the program when it is attached; the tests here run it on an
//! interpreter of the few instructions it uses.

/// Bytes kept of each segment: the longest IPv4 header (60) and TCP header (60), rounded up.
/// The payload is never needed.
pub const SNAP_LEN: u32 = 128;

/// `struct sock_filter`, as the kernel reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Opcodes (linux/bpf_common.h, linux/filter.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MSH: u16 = 0xa0;
const AND: u16 = 0x50;
const JEQ: u16 = 0x10;
const JSET: u16 = 0x40;
const K: u16 = 0x00;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the packet's `sll_pkttype`.
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// Instructions in [`server_filter`]'s program.
pub const LEN: usize = 19;

/// The program for the segments of a server listening on port `remote`, to any of our ports.
/// Jumps are relative (`jt`/`jf` instructions skipped), counted against the labels in the
/// comments.
pub fn server_filter(remote: u16) -> [Insn; LEN] {
    let remote = u32::from(remote);
    [
        /* 0 */ stmt(LD | W | ABS, AD_PKTTYPE),
        /* 1 */ jump(JMP | JEQ | K, 4, 16, 0), // PACKET_OUTGOING -> drop (18)
        /* 2 */ stmt(LD | B | ABS, 0),
        /* 3 */ stmt(ALU | AND | K, 0xf0),
        /* 4 */ jump(JMP | JEQ | K, 0x40, 1, 0), // IPv4 -> 6
        /* 5 */ jump(JMP | JEQ | K, 0x60, 7, 12), // IPv6 -> 13, else drop
        /* 6 */ stmt(LD | B | ABS, 9),
        /* 7 */ jump(JMP | JEQ | K, 6, 0, 10), // not TCP -> drop
        /* 8 */ stmt(LD | H | ABS, 6),
        /* 9 */ jump(JMP | JSET | K, 0x1fff, 8, 0), // a later fragment -> drop
        /* 10 */ stmt(LDX | B | MSH, 0), // X = IPv4 header length
        /* 11 */ stmt(LD | H | IND, 0),
        /* 12 */
        jump(JMP | JEQ | K, remote, 4, 5), // source port -> accept (17), else drop
        /* 13 */ stmt(LD | B | ABS, 6),
        /* 14 */ jump(JMP | JEQ | K, 6, 0, 3), // next header not TCP -> drop
        /* 15 */ stmt(LD | H | ABS, 40),
        /* 16 */ jump(JMP | JEQ | K, remote, 0, 1),
        /* 17 */ stmt(RET | K, SNAP_LEN),
        /* 18 */ stmt(RET | K, 0),
    ]
}

/// Runs `prog` on `packet` (from its network header) with `pkttype`, as the kernel would:
/// the bytes to keep, 0 to drop. Only the instructions [`server_filter`] uses; a load past the
/// end drops the packet, as in the kernel. For tests (here and the fuzz target's twin).
pub fn run(prog: &[Insn], packet: &[u8], pkttype: u8) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let load = |at: u32, size: usize| -> Option<u32> {
        let at = at as usize;
        let b = packet.get(at..at.checked_add(size)?)?;
        Some(b.iter().fold(0u32, |v, &byte| (v << 8) | u32::from(byte)))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let size = match i.code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        match i.code & 0x07 {
            LD if i.code & 0xe0 == ABS && i.k == AD_PKTTYPE => a = u32::from(pkttype),
            LD if i.code & 0xe0 == ABS => match load(i.k, size) {
                Some(v) => a = v,
                None => return 0,
            },
            LD if i.code & 0xe0 == IND => match load(x.wrapping_add(i.k), size) {
                Some(v) => a = v,
                None => return 0,
            },
            LDX if i.code & 0xe0 == MSH => match load(i.k, 1) {
                Some(v) => x = (v & 0xf) * 4,
                None => return 0,
            },
            ALU if i.code & 0xf0 == AND => a &= i.k,
            JMP => {
                let hit = match i.code & 0xf0 {
                    JEQ => a == i.k,
                    JSET => a & i.k != 0,
                    _ => return 0,
                };
                pc += usize::from(if hit { i.jt } else { i.jf });
            }
            RET => return i.k,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::packet::frame::build::{ipv4_tcp, ipv6_tcp};
    use crate::net::packet::frame::{ACK, PACKET_OUTGOING};
    use std::net::Ipv6Addr;

    const SERVER: ([u8; 4], u16) = ([127, 0, 0, 1], 8000);
    const CLIENT: ([u8; 4], u16) = ([127, 0, 0, 1], 40_000);

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_returns() {
        let prog = server_filter(8000);
        for (at, i) in prog.iter().enumerate() {
            if i.code & 0x07 == JMP {
                assert!(at + 1 + usize::from(i.jt.max(i.jf)) < LEN, "insn {at}");
            }
        }
        assert_eq!(prog[LEN - 2], stmt(RET | K, SNAP_LEN));
        assert_eq!(prog[LEN - 1], stmt(RET | K, 0));
    }

    #[test]
    fn keeps_the_servers_segments_to_us_as_they_come_in() {
        let prog = server_filter(8000);
        let data = ipv4_tcp(SERVER, CLIENT, 1, ACK, 12, 500);
        assert_eq!(run(&prog, &data, 0), SNAP_LEN);
        // To any of our ports: the hub tells the connections apart.
        let other = ipv4_tcp(SERVER, ([127, 0, 0, 1], 40_001), 1, ACK, 0, 9);
        assert_eq!(run(&prog, &other, 0), SNAP_LEN);
        // An IPv4 header with options: the ports are found behind it.
        let mut opts = ipv4_tcp(SERVER, CLIENT, 1, ACK, 0, 0);
        let tcp = opts.split_off(20);
        opts.extend([1u8; 8]);
        opts.extend(tcp);
        opts[0] = 0x47;
        assert_eq!(run(&prog, &opts, 0), SNAP_LEN);
        let v6 = ipv6_tcp(
            (Ipv6Addr::LOCALHOST, 8000),
            (Ipv6Addr::LOCALHOST, 40_000),
            1,
            ACK,
            10,
        );
        assert_eq!(run(&prog, &v6, 0), SNAP_LEN);
    }

    #[test]
    fn drops_everything_else() {
        let prog = server_filter(8000);
        let data = ipv4_tcp(SERVER, CLIENT, 1, ACK, 0, 500);
        // The same segment going out (the server's copy on `lo`).
        assert_eq!(run(&prog, &data, PACKET_OUTGOING), 0);
        // Our own segments to the server, another server.
        assert_eq!(run(&prog, &ipv4_tcp(CLIENT, SERVER, 1, ACK, 0, 9), 0), 0);
        assert_eq!(
            run(
                &prog,
                &ipv4_tcp(([127, 0, 0, 1], 8001), CLIENT, 1, ACK, 0, 9),
                0
            ),
            0
        );
        // UDP with the same ports, a later fragment, not IP at all, a cut header.
        let mut udp = data.clone();
        udp[9] = 17;
        assert_eq!(run(&prog, &udp, 0), 0);
        let mut frag = data.clone();
        frag[7] = 1;
        assert_eq!(run(&prog, &frag, 0), 0);
        let mut arp = data.clone();
        arp[0] = 0x00;
        assert_eq!(run(&prog, &arp, 0), 0);
        assert_eq!(run(&prog, &data[..21], 0), 0);
        let v6_ours_out = ipv6_tcp(
            (Ipv6Addr::LOCALHOST, 40_000),
            (Ipv6Addr::LOCALHOST, 8000),
            1,
            ACK,
            10,
        );
        assert_eq!(run(&prog, &v6_ours_out, 0), 0);
    }
}
