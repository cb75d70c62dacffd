//! A read's events stamped by where their bytes lie in the stream: the [`ReadClock`] of a
//! connection with a packet tap.
//!
//! Pure: given the connection's [`SeqMap`], how many stream bytes it has received, and the
//! read's TSC and `CLOCK_REALTIME` readings, a position in the read buffer becomes the arrival
//! of the segment that carried the last byte taken so far, converted to the TSC clock as a
//! kernel receive stamp is (`net::stamp`: the read's TSC stamp minus how long before the read
//! the segment arrived). A byte the ring did not see keeps the read's own stamp, and the read
//! says so.

use super::seqmap::SeqMap;
use crate::clock::Clock;
use crate::net::decode::ReadClock;
use crate::net::stamp;

/// See the module doc.
pub struct PacketClock<'a> {
    map: &'a SeqMap,
    clock: &'a Clock,
    /// Stream bytes the connection has received, this read's included.
    received: u64,
    tsc: u64,
    realtime_ns: u64,
    /// The read's own stamp: what a byte the ring missed gets.
    fallback: u64,
    /// Positions stamped from the ring, and those that kept the read's stamp.
    pub hits: u32,
    pub misses: u32,
}

impl<'a> PacketClock<'a> {
    pub fn new(
        map: &'a SeqMap,
        clock: &'a Clock,
        received: u64,
        tsc: u64,
        realtime_ns: u64,
        fallback: u64,
    ) -> Self {
        Self {
            map,
            clock,
            received,
            tsc,
            realtime_ns,
            fallback,
            hits: 0,
            misses: 0,
        }
    }

    /// The ring's stamp of the stream byte at `offset`, on the TSC clock.
    fn stamp_of(&self, offset: u64) -> Option<u64> {
        let ns = self.map.arrival(offset)?;
        stamp::onto_tsc(self.clock, self.tsc, self.realtime_ns, ns)
    }

    /// How long before the read returned an event stamped `t` (by [`ReadClock::at`]) arrived,
    /// in ns (0 for one that kept the read's own client stamp).
    pub fn wakeup_ns(&self, t: u64) -> u32 {
        u32::try_from(self.clock.delta_ns(t, self.tsc)).unwrap_or(u32::MAX)
    }

    /// Whether every position asked about was in the ring; a read that asked about none is
    /// judged by its own last byte.
    pub fn all_hit(&mut self) -> bool {
        if self.hits == 0 && self.misses == 0 {
            self.at(0);
        }
        self.misses == 0
    }
}

impl ReadClock for PacketClock<'_> {
    fn at(&mut self, remaining: usize) -> u64 {
        let last = self.received.checked_sub(remaining as u64 + 1);
        match last.and_then(|o| self.stamp_of(o)) {
            Some(t) => {
                self.hits += 1;
                t
            }
            None => {
                self.misses += 1;
                self.fallback
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISN: u32 = 77;
    const NOW: u64 = 1_700_000_000_000_000_000;

    #[test]
    fn each_position_gets_the_arrival_of_the_segment_that_carried_it() {
        let (clock, _h) = Clock::mock();
        let mut m = SeqMap::new();
        m.syn(ISN);
        // Three 100-byte segments 1 ms apart, read together 20 ms after the first.
        for i in 0..3u32 {
            m.segment(ISN + 1 + 100 * i, 100, NOW + u64::from(i) * 1_000_000);
        }
        let tsc = 50_000_000; // the mock clock counts ns
        let realtime = NOW + 20_000_000;
        let mut c = PacketClock::new(&m, &clock, 300, tsc, realtime, tsc);
        // The buffer holds the 300 bytes; the decoder took the first event's 100.
        assert_eq!(c.at(200), 30_000_000);
        assert_eq!(c.at(100), 31_000_000);
        assert_eq!(c.at(0), 32_000_000);
        assert!(c.all_hit());
        assert_eq!((c.hits, c.misses), (3, 0));
    }

    #[test]
    fn what_the_ring_missed_keeps_the_reads_stamp() {
        let (clock, _h) = Clock::mock();
        let mut m = SeqMap::new();
        m.syn(ISN);
        m.segment(ISN + 1, 100, NOW);
        // Bytes 100..200 never made it into the ring.
        let mut c = PacketClock::new(&m, &clock, 200, 9_000_000, NOW + 1_000_000, 9_000_000);
        assert_eq!(c.at(100), 8_000_000);
        assert_eq!(c.at(0), 9_000_000);
        assert!(!c.all_hit());
        // More bytes than received: no offset at all.
        let mut c = PacketClock::new(&m, &clock, 10, 1, NOW, 1);
        assert_eq!(c.at(10), 1);
        // A segment stamped after the read (the realtime clock stepped back): not trusted.
        let mut c = PacketClock::new(&m, &clock, 100, 5, NOW - 1, 5);
        assert_eq!(c.at(0), 5);
        assert_eq!(c.misses, 1);
    }

    #[test]
    fn a_read_that_completed_nothing_is_judged_by_its_last_byte() {
        let (clock, _h) = Clock::mock();
        let mut m = SeqMap::new();
        m.syn(ISN);
        m.segment(ISN + 1, 10, NOW);
        assert!(PacketClock::new(&m, &clock, 10, 1, NOW, 1).all_hit());
        assert!(!PacketClock::new(&m, &clock, 11, 1, NOW, 1).all_hit());
    }
}
