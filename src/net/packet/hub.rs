//! One packet ring for all of a client's connections, and the routing of its segments to the
//! connection each belongs to, by our port.
//!
//! Why one ring and not one per connection: every packet socket runs its filter on every
//! packet of the machine, so with a socket per connection the kernel's work grew with
//! connections × packets (at 2,000 streams, 163 µs of kernel time per token, most of it the
//! 2,000 filters each packet met), each ring took milliseconds to set up at connect time, and
//! each held 128 KiB. One ring is one filter per packet, set up once per client.
//!
//! How: a connection takes its place at the hub by its port once it has connected, and
//! claims the server's `SYN-ACK` to that port, which the hub keeps for a port nobody has yet
//! (connecting binds no port of its own first: a port bound before `connect` cannot be shared
//! with a connection in `TIME_WAIT` to the same server, and at 10,000 streams 576 connects
//! failed with "Address already in use"). After each of its reads a connection takes the hub's
//! lock, empties the ring into the
//! connections' inboxes by destination port ([`Routes`], pure), takes its own inbox and lets
//! go; it places its segments in its own sequence map outside the lock (`tap`). Every byte a
//! read returns was in the ring before it reached the socket (`ring`), so whichever connection
//! empties the ring, a connection that takes the lock after its read finds its segments
//! routed. The lock is held for the frames that came in since the last read of any
//! connection, and is contended only when two runtime threads finish a read at once.
//!
//! Bounded: an inbox keeps at most [`INBOX`] segments (a connection that stopped reading);
//! past that the newest are dropped and counted, as the kernel counts the frames a full ring
//! could not take. Events whose segment was dropped keep their read's stamp, and the read
//! says so (`not_in_ring`).

use super::frame::{Segment, ACK, SYN};

/// Segments an inbox keeps for a connection that has not read them yet: as many as its
/// sequence map holds.
pub const INBOX: usize = super::seqmap::CAPACITY;

/// A connection's segments, waiting for its next read.
#[derive(Default)]
struct Inbox {
    open: bool,
    segs: Vec<Segment>,
    /// The last `SYN-ACK` to this port: what a connection taking the port claims.
    syn_ack: Option<Segment>,
}

/// What the ring and the inboxes could not keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Frames the ring had no room for (the kernel's count).
    pub ring: u64,
    /// Segments dropped from a full inbox.
    pub inbox: u64,
}

/// The inboxes, one per local port in use. Pure. See the module doc.
pub struct Routes {
    /// Indexed by our port: 65,536 entries, allocated once.
    inboxes: Box<[Inbox]>,
    /// Segments dropped from full inboxes.
    overflow: u64,
}

impl Default for Routes {
    fn default() -> Self {
        Self::new()
    }
}

impl Routes {
    pub fn new() -> Self {
        Self {
            inboxes: (0..=u16::MAX).map(|_| Inbox::default()).collect(),
            overflow: 0,
        }
    }

    /// Starts keeping the segments to our port `port` for a connection that began connecting
    /// at `since_ns` (`CLOCK_REALTIME`) and has connected: its `SYN-ACK`, the last one to the
    /// port if it came after `since_ns` (an older one was another connection's), comes first.
    /// `false` if another connection has the port.
    pub fn open(&mut self, port: u16, since_ns: u64) -> bool {
        let inbox = &mut self.inboxes[usize::from(port)];
        if inbox.open {
            return false;
        }
        inbox.open = true;
        inbox.segs.clear();
        if let Some(s) = inbox.syn_ack.take().filter(|s| s.ns >= since_ns) {
            inbox.segs.push(s);
        }
        true
    }

    /// Stops keeping them; what was waiting is forgotten.
    pub fn close(&mut self, port: u16) {
        let inbox = &mut self.inboxes[usize::from(port)];
        inbox.open = false;
        inbox.segs.clear();
        inbox.syn_ack = None;
    }

    /// Puts a segment in its connection's inbox. A `SYN-ACK` to a port nobody has open is
    /// kept for the connection that takes it; anything else to such a port (a connection
    /// already closed, another program's) is dropped without a count: it is nobody's stamp.
    pub fn route(&mut self, s: Segment) {
        let inbox = &mut self.inboxes[usize::from(s.dst_port)];
        if !inbox.open {
            if s.flags & (SYN | ACK) == SYN | ACK {
                inbox.syn_ack = Some(s);
            }
            return;
        }
        if inbox.segs.len() >= INBOX {
            self.overflow += 1;
            return;
        }
        inbox.segs.push(s);
    }

    /// Hands `port`'s waiting segments over in `into` (emptied first), oldest first, keeping
    /// both vectors' room: no allocation once they have grown.
    pub fn take(&mut self, port: u16, into: &mut Vec<Segment>) {
        into.clear();
        std::mem::swap(&mut self.inboxes[usize::from(port)].segs, into);
    }

    /// Segments dropped from full inboxes so far.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }
}

#[cfg(target_os = "linux")]
pub use linux::PacketHub;

#[cfg(target_os = "linux")]
mod linux {
    use super::super::ring::Ring;
    use super::*;
    use std::io;
    use std::sync::{Mutex, MutexGuard};

    struct Shared {
        ring: Ring,
        routes: Routes,
        ring_drops: u64,
    }

    fn drain_into(ring: &mut Ring, routes: &mut Routes) {
        ring.drain(|s| {
            if let Ok(s) = s {
                routes.route(s);
            }
        });
    }

    /// A client's packet ring and its connections' inboxes. See the module doc.
    pub struct PacketHub {
        shared: Mutex<Shared>,
    }

    impl PacketHub {
        /// The ring of the segments of the server listening on port `remote`. Takes
        /// milliseconds (once per client).
        pub fn open(remote: u16) -> io::Result<Self> {
            Ok(Self {
                shared: Mutex::new(Shared {
                    ring: Ring::open(remote)?,
                    routes: Routes::new(),
                    ring_drops: 0,
                }),
            })
        }

        fn lock(&self) -> MutexGuard<'_, Shared> {
            // Nothing under the lock can leave the routes half-changed: a panic elsewhere
            // while it was held does not make them wrong.
            self.shared.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// A connection from our port `port`, which began connecting at `since_ns`, has
        /// connected: the ring is emptied first, so its `SYN-ACK` (in the ring before the
        /// connect returned) is the port's to claim. `false` if a connection has that port.
        pub fn open_port(&self, port: u16, since_ns: u64) -> bool {
            let mut guard = self.lock();
            let Shared { ring, routes, .. } = &mut *guard;
            drain_into(ring, routes);
            routes.open(port, since_ns)
        }

        /// The connection from `port` has ended.
        pub fn close_port(&self, port: u16) {
            self.lock().routes.close(port);
        }

        /// Empties the ring into the inboxes and hands `port`'s over in `into`.
        pub fn take(&self, port: u16, into: &mut Vec<Segment>) {
            let mut guard = self.lock();
            let Shared { ring, routes, .. } = &mut *guard;
            drain_into(ring, routes);
            routes.take(port, into);
        }

        /// What was lost so far: the ring's drops (asked of the kernel now) and the inboxes'.
        pub fn lost(&self) -> Lost {
            let mut guard = self.lock();
            let drops = guard.ring.drops();
            guard.ring_drops += drops;
            Lost {
                ring: guard.ring_drops,
                inbox: guard.routes.overflow(),
            }
        }
    }
}

/// No packet sockets here: never made.
#[cfg(not(target_os = "linux"))]
pub enum PacketHub {}

#[cfg(not(target_os = "linux"))]
impl PacketHub {
    pub fn open(_remote: u16) -> std::io::Result<Self> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "packet sockets need Linux",
        ))
    }
    pub fn lost(&self) -> Lost {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn seg(dst_port: u16, seq: u32) -> Segment {
        Segment {
            ns: u64::from(seq),
            pkttype: 0,
            losing: false,
            src: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst: IpAddr::V4(Ipv4Addr::LOCALHOST),
            src_port: 8000,
            dst_port,
            seq,
            flags: ACK,
            payload_len: 10,
        }
    }

    #[test]
    fn each_connection_gets_its_own_segments_in_order() {
        let mut r = Routes::new();
        assert!(r.open(40_000, 0));
        assert!(r.open(40_001, 0));
        for (port, seq) in [(40_000, 1), (40_001, 7), (40_000, 11), (40_002, 5)] {
            r.route(seg(port, seq));
        }
        let mut got = vec![seg(9, 9)]; // whatever was there goes
        r.take(40_000, &mut got);
        assert_eq!(got.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 11]);
        r.take(40_000, &mut got);
        assert!(got.is_empty(), "taken once");
        r.take(40_001, &mut got);
        assert_eq!(got.iter().map(|s| s.seq).collect::<Vec<_>>(), [7]);
        // 40_002 was never opened: its segment went nowhere, and is not a loss.
        r.take(40_002, &mut got);
        assert!(got.is_empty());
        assert_eq!(r.overflow(), 0);
    }

    #[test]
    fn a_port_is_one_connections_until_it_closes_and_its_leftovers_go_with_it() {
        let mut r = Routes::new();
        assert!(r.open(40_000, 0));
        assert!(!r.open(40_000, 0), "in use");
        r.route(seg(40_000, 1));
        r.close(40_000);
        r.route(seg(40_000, 2)); // late, after the close
        assert!(r.open(40_000, 0));
        r.route(seg(40_000, 3));
        let mut got = Vec::new();
        r.take(40_000, &mut got);
        assert_eq!(got.iter().map(|s| s.seq).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn a_connection_claims_the_syn_ack_that_came_before_it_took_its_port() {
        let mut r = Routes::new();
        let mut syn_ack = seg(40_000, 99);
        syn_ack.flags = SYN | ACK;
        syn_ack.ns = 1_000;
        // An older connection's, never claimed, then this one's, then a bare SYN (not ours).
        let mut old = syn_ack;
        old.seq = 7;
        old.ns = 10;
        r.route(old);
        r.route(syn_ack);
        let mut syn = syn_ack;
        syn.flags = SYN;
        r.route(syn);
        r.route(seg(40_000, 100)); // data before the port was taken: nobody's
        assert!(r.open(40_000, 500));
        let mut got = Vec::new();
        r.take(40_000, &mut got);
        assert_eq!(got, [syn_ack]);
        // A SYN-ACK older than the connect is another connection's: not claimed.
        r.close(40_000);
        r.route(old);
        assert!(r.open(40_000, 500));
        r.take(40_000, &mut got);
        assert!(got.is_empty(), "{got:?}");
        // Closing forgets an unclaimed one too.
        r.close(40_000);
        r.route(syn_ack);
        r.close(40_000);
        assert!(r.open(40_000, 0));
        r.take(40_000, &mut got);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_full_inbox_keeps_the_oldest_and_counts_the_rest() {
        let mut r = Routes::new();
        r.open(40_000, 0);
        for i in 0..INBOX as u32 + 5 {
            r.route(seg(40_000, i));
        }
        assert_eq!(r.overflow(), 5);
        let mut got = Vec::new();
        r.take(40_000, &mut got);
        assert_eq!(got.len(), INBOX);
        assert_eq!(got.last().unwrap().seq, INBOX as u32 - 1);
        // Taking keeps both vectors' room: the next round needs no allocation.
        let room = got.capacity();
        r.route(seg(40_000, 0));
        r.take(40_000, &mut got);
        assert_eq!(got.len(), 1);
        r.take(40_000, &mut got);
        assert!(got.capacity() >= room);
    }
}
