#![no_main]
//! The control-buffer parsers (`SCM_TIMESTAMPING`'s stamp, `TCP_CM_INQ`'s bytes left, a send
//! stamp's extended error) never panic, whatever the bytes, and agree with naive twins that
//! first split the buffer into whole messages, then look for theirs.

use libfuzzer_sys::fuzz_target;
use llmspeed::net::stamp::{rx_software_stamp_ns, tcp_inq, tx_software_stamp, SendStamp};

/// `(level, type, payload)` of each whole message, walking as `CMSG_NXTHDR` does; stops at
/// the first header that does not fit.
fn messages(b: &[u8]) -> Vec<(i32, i32, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while b.len() >= at + 16 {
        let len = u64::from_ne_bytes(b[at..at + 8].try_into().unwrap()) as u128;
        if len < 16 || len > (b.len() - at) as u128 {
            break;
        }
        let len = len as usize;
        let level = i32::from_ne_bytes(b[at + 8..at + 12].try_into().unwrap());
        let ty = i32::from_ne_bytes(b[at + 12..at + 16].try_into().unwrap());
        out.push((level, ty, &b[at + 16..at + len]));
        at += len.div_ceil(8) * 8;
    }
    out
}

fn naive(b: &[u8]) -> Option<u64> {
    // SOL_SOCKET / SCM_TIMESTAMPING on Linux x86-64 and aarch64.
    let (_, _, p) = messages(b).into_iter().find(|m| m.0 == 1 && m.1 == 37)?;
    if p.len() < 16 {
        return None;
    }
    let sec = i64::from_ne_bytes(p[..8].try_into().unwrap());
    let nsec = i64::from_ne_bytes(p[8..16].try_into().unwrap());
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) || (sec, nsec) == (0, 0) {
        return None;
    }
    (sec as u128 * 1_000_000_000 + nsec as u128).try_into().ok()
}

fn naive_inq(b: &[u8]) -> Option<u32> {
    // SOL_TCP / TCP_CM_INQ on Linux.
    let (_, _, p) = messages(b).into_iter().find(|m| m.0 == 6 && m.1 == 36)?;
    let v = i32::from_ne_bytes(p.get(..4)?.try_into().unwrap());
    (v >= 0).then_some(v as u32)
}

fn naive_send(b: &[u8]) -> Option<SendStamp> {
    let ns = naive(b)?;
    // SOL_IP / IP_RECVERR or SOL_IPV6 / IPV6_RECVERR; a sock_extended_err of 16 bytes whose
    // origin is SO_EE_ORIGIN_TIMESTAMPING (4) and info SCM_TSTAMP_SND (0).
    let (_, _, e) = messages(b)
        .into_iter()
        .find(|m| *m == (0, 11, m.2))
        .or_else(|| messages(b).into_iter().find(|m| *m == (41, 25, m.2)))?;
    if e.len() < 16 || e[4] != 4 || e[8..12] != [0; 4] {
        return None;
    }
    let key = u32::from_ne_bytes(e[12..16].try_into().unwrap());
    Some(SendStamp { key, ns })
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(rx_software_stamp_ns(data), naive(data));
    assert_eq!(tcp_inq(data), naive_inq(data));
    assert_eq!(tx_software_stamp(data), naive_send(data));
});
