#![no_main]
//! The packet-stamp parsers never panic, whatever the bytes: a `TPACKET_V2` frame, the IP and
//! TCP headers in it, and the sequence map fed segments made from the same bytes.
//!
//! Checked beside that: a packet the header parser accepts is one the kernel's port filter
//! keeps (the filter, run on a twin interpreter, is never stricter than the parser), and the
//! map's answers only grow along the stream (a byte is never readable before one before it).

use libfuzzer_sys::fuzz_target;
use llmspeed::net::packet::{bpf, frame, seqmap::SeqMap};

fuzz_target!(|data: &[u8]| {
    let _ = frame::parse_frame(data);
    let _ = frame::status(data);
    if let Ok(s) = frame::parse_ip_tcp(data) {
        let prog = bpf::server_filter(s.src_port);
        assert_eq!(bpf::run(&prog, data, 0), bpf::SNAP_LEN, "{s:?}");
        assert_eq!(bpf::run(&prog, data, frame::PACKET_OUTGOING), 0);
    }
    // Segments: 4 bytes of sequence number, 2 of length, 2 of time; the first is the SYN.
    let mut map = SeqMap::new();
    let mut ops = data.chunks_exact(8);
    if let Some(first) = ops.next() {
        map.syn(u32::from_le_bytes(first[0..4].try_into().unwrap()));
    }
    let mut high = 0u64;
    for op in ops {
        let seq = u32::from_le_bytes(op[0..4].try_into().unwrap());
        let len = u32::from(u16::from_le_bytes([op[4], op[5]]));
        let ns = u64::from(u16::from_le_bytes([op[6], op[7]]));
        map.segment(seq, len, ns);
        high = high.max(u64::from(seq)).saturating_add(u64::from(len));
    }
    let mut last = 0u64;
    let mut step = 1u64;
    let mut at = 0u64;
    while at < high.saturating_add(1 << 33) && step < 1 << 40 {
        if let Some(ns) = map.arrival(at) {
            assert!(ns >= last, "byte {at} readable at {ns}, before one before it ({last})");
            last = ns;
        }
        at += step;
        step = step * 3 / 2 + 1;
    }
    assert!(map.len() <= llmspeed::net::packet::seqmap::CAPACITY);
});
