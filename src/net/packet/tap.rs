//! A connection's packet tap: its place at its client's packet hub, the map from the server's
//! sequence numbers to stream offsets, and how many stream bytes the connection has read.
//! `net::plain` holds one per connection when packet stamps are on, and feeds it after every
//! read.

use super::frame::{Segment, ACK, PACKET_OUTGOING, SYN};
use super::seqmap::SeqMap;
use std::net::SocketAddr;

#[cfg(target_os = "linux")]
pub use linux::PacketTap;
#[cfg(not(target_os = "linux"))]
pub use other::PacketTap;

/// Whether `s` is the server's segment to this connection as it came in.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn ours(s: &Segment, remote: SocketAddr, local: Option<SocketAddr>, local_port: u16) -> bool {
    s.pkttype != PACKET_OUTGOING
        && s.src == remote.ip()
        && s.src_port == remote.port()
        && s.dst_port == local_port
        && local.is_none_or(|l| s.dst == l.ip())
}

/// Puts one of the connection's segments into its map.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn place(map: &mut SeqMap, s: &Segment) {
    if s.flags & SYN != 0 {
        if s.flags & ACK != 0 {
            map.syn(s.seq);
        }
        return;
    }
    map.segment(s.seq, s.payload_len, s.ns);
}

#[cfg(target_os = "linux")]
mod linux {
    use super::super::hub::PacketHub;
    use super::super::stamper::PacketClock;
    use super::*;
    use crate::clock::Clock;
    use std::io;
    use std::sync::Arc;

    /// See the module doc.
    pub struct PacketTap {
        hub: Arc<PacketHub>,
        map: SeqMap,
        /// The segments taken from the hub at the last read (kept for its room).
        taken: Vec<Segment>,
        remote: SocketAddr,
        local_port: u16,
        local: SocketAddr,
        /// Stream bytes read so far.
        received: u64,
    }

    impl PacketTap {
        /// Takes the hub's segments for a connection from `local` to `remote` that began
        /// connecting at `since_ns` (`CLOCK_REALTIME`) and has connected, before anything was
        /// sent on it: the server's `SYN-ACK` (the hub kept it) and all that follows.
        pub fn open(
            hub: &Arc<PacketHub>,
            remote: SocketAddr,
            local: SocketAddr,
            since_ns: u64,
        ) -> io::Result<Self> {
            let local_port = local.port();
            if !hub.open_port(local_port, since_ns) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("port {local_port} already has a packet tap"),
                ));
            }
            let mut tap = Self {
                hub: Arc::clone(hub),
                map: SeqMap::new(),
                taken: Vec::new(),
                remote,
                local_port,
                local,
                received: 0,
            };
            tap.take();
            Ok(tap)
        }

        /// A read is about to fill the buffer behind `unparsed` bytes still waiting there: only
        /// those and the last byte taken before them will be asked about again.
        pub fn before_read(&mut self, unparsed: usize) {
            self.map
                .forget_before(self.received.saturating_sub(unparsed as u64 + 1));
        }

        /// A read returned `n` bytes: count them and take the ring's new frames (each byte
        /// read was in the ring before it reached the socket).
        pub fn after_read(&mut self, n: usize) {
            self.received += n as u64;
            self.take();
        }

        fn take(&mut self) {
            self.hub.take(self.local_port, &mut self.taken);
            for s in &self.taken {
                if ours(s, self.remote, Some(self.local), self.local_port) {
                    place(&mut self.map, s);
                }
            }
        }

        /// The clock of the read just made: `tsc` and `realtime_ns` read when it returned,
        /// `fallback` its own stamp.
        pub fn clock<'a>(
            &'a self,
            clock: &'a Clock,
            tsc: u64,
            realtime_ns: u64,
            fallback: u64,
        ) -> PacketClock<'a> {
            PacketClock::new(&self.map, clock, self.received, tsc, realtime_ns, fallback)
        }
    }

    impl Drop for PacketTap {
        fn drop(&mut self) {
            self.hub.close_port(self.local_port);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod other {
    use super::super::stamper::PacketClock;
    use crate::clock::Clock;
    use std::io;
    use std::net::SocketAddr;

    /// No packet sockets here: never made.
    pub enum PacketTap {}

    impl PacketTap {
        pub fn open(
            hub: &std::sync::Arc<super::super::hub::PacketHub>,
            _remote: SocketAddr,
            _local: SocketAddr,
            _since_ns: u64,
        ) -> io::Result<Self> {
            match **hub {}
        }
        pub fn before_read(&mut self, _unparsed: usize) {}
        pub fn after_read(&mut self, _n: usize) {}
        pub fn clock<'a>(
            &'a self,
            _clock: &'a Clock,
            _tsc: u64,
            _realtime_ns: u64,
            _fallback: u64,
        ) -> PacketClock<'a> {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn seg(src_port: u16, dst_port: u16, pkttype: u8, flags: u8, seq: u32, len: u32) -> Segment {
        Segment {
            ns: 1_000 + u64::from(seq),
            pkttype,
            losing: false,
            src: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst: IpAddr::V4(Ipv4Addr::LOCALHOST),
            src_port,
            dst_port,
            seq,
            flags,
            payload_len: len,
        }
    }

    #[test]
    fn keeps_the_incoming_copy_of_the_servers_segments_only() {
        let remote: SocketAddr = "127.0.0.1:8000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let mine = seg(8000, 40_000, 0, ACK, 1, 10);
        assert!(ours(&mine, remote, Some(local), 40_000));
        assert!(ours(&mine, remote, None, 40_000));
        // On `lo` the same segment also passes going out: that copy is not the arrival.
        assert!(!ours(
            &seg(8000, 40_000, PACKET_OUTGOING, ACK, 1, 10),
            remote,
            Some(local),
            40_000
        ));
        // Our own segments, another connection's, another host's.
        assert!(!ours(
            &seg(40_000, 8000, 0, ACK, 1, 10),
            remote,
            Some(local),
            40_000
        ));
        assert!(!ours(
            &seg(8000, 40_001, 0, ACK, 1, 10),
            remote,
            Some(local),
            40_000
        ));
        let elsewhere: SocketAddr = "10.0.0.1:8000".parse().unwrap();
        assert!(!ours(&mine, elsewhere, Some(local), 40_000));
        let other_local: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        assert!(!ours(&mine, remote, Some(other_local), 40_000));
    }

    #[test]
    fn the_syn_ack_sets_the_base_and_data_follows_it() {
        let mut m = SeqMap::new();
        // Our SYN (no ACK) is never the server's; the SYN-ACK is.
        place(&mut m, &seg(8000, 40_000, 0, SYN, 500, 0));
        assert!(!m.has_base());
        place(&mut m, &seg(8000, 40_000, 0, SYN | ACK, 999, 0));
        place(&mut m, &seg(8000, 40_000, 0, ACK, 1_000, 40));
        place(&mut m, &seg(8000, 40_000, 0, ACK, 1_040, 0)); // a bare ACK
        assert_eq!(m.arrival(0), Some(2_000));
        assert_eq!(m.arrival(39), Some(2_000));
        assert_eq!(m.arrival(40), None);
    }
}
