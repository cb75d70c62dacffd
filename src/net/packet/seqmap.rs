//! TCP sequence numbers -> offsets in the connection's byte stream -> when each byte could be
//! read.
//!
//! Pure. Fed the server's segments in the order the packet ring saw them (the `SYN-ACK`
//! first: its sequence number is the initial one, and the stream's byte 0 is the one after
//! it), it answers [`SeqMap::arrival`]: the kernel stamp of the moment the stream's byte at an
//! offset became readable in order. That is the stamp of the segment that first brought it,
//! raised to the stamp of any later segment that filled a hole before it (TCP hands bytes to
//! the reader in order, so bytes behind a lost segment wait for its retransmission).
//!
//! Sequence numbers are 32 bits and wrap; offsets are 64. A segment is placed at the offset
//! nearest the highest one seen so far, so a stream may run past 4 GiB. A retransmission or
//! duplicate of bytes already seen keeps the first arrival; a segment that overlaps seen bytes
//! adds only the new ones.
//!
//! Bounded: at most [`CAPACITY`] ranges are kept; past that the oldest ranges are forgotten
//! (the reader is long past them). Room for [`INITIAL`] ranges (1 KiB) is allocated by `new`
//! and doubles only when a reader falls that far behind, at most five times in the map's life
//! (to 32 KiB): no allocation per segment, and 10,000 connections that keep up hold 10 MB of
//! maps, not the 320 MB that room for [`CAPACITY`] up front cost.

use std::collections::VecDeque;

/// Ranges kept (each a run of bytes that arrived in one segment).
pub const CAPACITY: usize = 1024;

/// Ranges a new map has room for: a reader that keeps up holds a few (those of its unread
/// segments); one 30 ms behind at 1 ms gaps, about 30.
pub const INITIAL: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    /// When the segment arrived.
    ns: u64,
    /// When these bytes became readable in order: the latest `ns` of this range and every
    /// range before it.
    ready: u64,
}

/// What a segment did to the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// New bytes.
    New,
    /// Only bytes already seen (a retransmission or a duplicate), or no payload.
    Seen,
    /// A data segment before the handshake was seen: its offset is unknown.
    NoHandshake,
}

/// See the module doc.
#[derive(Debug)]
pub struct SeqMap {
    /// The sequence number of the stream's byte 0 (the `SYN-ACK`'s plus one).
    base: Option<u32>,
    /// Highest end offset seen: where the next sequence number is unwrapped around.
    high: u64,
    /// Disjoint, sorted by offset.
    ranges: VecDeque<Range>,
}

impl Default for SeqMap {
    fn default() -> Self {
        Self::new()
    }
}

impl SeqMap {
    pub fn new() -> Self {
        Self {
            base: None,
            high: 0,
            ranges: VecDeque::with_capacity(INITIAL),
        }
    }

    /// The server's `SYN-ACK` carried initial sequence number `isn`. A repeated one (the
    /// `SYN-ACK` retransmitted) changes nothing.
    pub fn syn(&mut self, isn: u32) {
        if self.base.is_none() {
            self.base = Some(isn.wrapping_add(1));
        }
    }

    /// Whether the handshake was seen.
    pub fn has_base(&self) -> bool {
        self.base.is_some()
    }

    /// The 64-bit offset of sequence number `seq`: the one nearest the highest offset seen.
    fn offset(&self, base: u32, seq: u32) -> u64 {
        let rel = u64::from(seq.wrapping_sub(base));
        let cand = (self.high & !0xffff_ffff) | rel;
        let half = 1u64 << 31;
        if cand > self.high.saturating_add(half) && cand >= 1 << 32 {
            cand - (1 << 32)
        } else if cand.saturating_add(half) < self.high {
            cand + (1 << 32)
        } else {
            cand
        }
    }

    /// A segment of `len` payload bytes at sequence number `seq`, stamped `ns`.
    pub fn segment(&mut self, seq: u32, len: u32, ns: u64) -> Placed {
        let Some(base) = self.base else {
            return if len == 0 {
                Placed::Seen
            } else {
                Placed::NoHandshake
            };
        };
        if len == 0 {
            return Placed::Seen;
        }
        let start = self.offset(base, seq);
        let end = start + u64::from(len);
        self.high = self.high.max(end);
        // Where the new bytes go: after every range that ends at or before `start`.
        let mut at = self.ranges.partition_point(|r| r.end <= start);
        let mut from = start;
        let mut placed = Placed::Seen;
        // Fill each gap between the ranges that overlap [start, end).
        while from < end {
            let next = self.ranges.get(at).copied();
            match next {
                Some(r) if r.start <= from => {
                    from = from.max(r.end);
                    at += 1;
                }
                _ => {
                    let gap_end = next.map_or(end, |r| r.start.min(end));
                    at = self.insert(at, from, gap_end, ns);
                    placed = Placed::New;
                    from = gap_end;
                }
            }
        }
        placed
    }

    /// Inserts [start, end) at index `at`, keeping `ready` right for it and every range after;
    /// returns the index after it. Forgets the oldest range when full (or the new one, when it
    /// would be the oldest).
    fn insert(&mut self, mut at: usize, start: u64, end: u64, ns: u64) -> usize {
        if self.ranges.len() == CAPACITY {
            if at == 0 {
                return 0;
            }
            self.ranges.pop_front();
            at -= 1;
        }
        let before = at
            .checked_sub(1)
            .and_then(|i| self.ranges.get(i))
            .map(|r| r.ready);
        // A hole before this range (bytes never seen, perhaps dropped by a full ring) holds
        // nothing back: only what was seen is known.
        let ready = before.map_or(ns, |b| b.max(ns));
        self.ranges.insert(
            at,
            Range {
                start,
                end,
                ns,
                ready,
            },
        );
        // Bytes after it were waiting for it.
        for r in self.ranges.iter_mut().skip(at + 1) {
            if r.ready >= ready {
                break;
            }
            r.ready = ready;
        }
        at + 1
    }

    /// When the stream's byte at `offset` became readable (the kernel's ns), if a segment
    /// carrying it was seen and not yet forgotten.
    pub fn arrival(&self, offset: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|r| r.end <= offset);
        let r = self.ranges.get(i)?;
        (r.start <= offset).then_some(r.ready)
    }

    /// Forgets the ranges wholly before `offset` (the reader will not ask about them again).
    pub fn forget_before(&mut self, offset: u64) {
        while self.ranges.front().is_some_and(|r| r.end <= offset) {
            self.ranges.pop_front();
        }
    }

    /// Ranges held now.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Ranges it has room for without allocating.
    pub fn room(&self) -> usize {
        self.ranges.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISN: u32 = 1_000;

    fn map() -> SeqMap {
        let mut m = SeqMap::new();
        m.syn(ISN);
        m
    }

    #[test]
    fn offsets_count_from_the_byte_after_the_syn() {
        let mut m = map();
        assert_eq!(m.segment(ISN + 1, 100, 10), Placed::New);
        assert_eq!(m.segment(ISN + 101, 50, 20), Placed::New);
        assert_eq!(m.arrival(0), Some(10));
        assert_eq!(m.arrival(99), Some(10));
        assert_eq!(m.arrival(100), Some(20));
        assert_eq!(m.arrival(149), Some(20));
        assert_eq!(m.arrival(150), None);
        // A retransmitted SYN-ACK changes nothing.
        m.syn(5);
        assert_eq!(m.arrival(100), Some(20));
    }

    #[test]
    fn data_before_the_handshake_has_no_offset() {
        let mut m = SeqMap::new();
        assert_eq!(m.segment(7, 10, 1), Placed::NoHandshake);
        assert_eq!(m.segment(7, 0, 1), Placed::Seen);
        assert!(m.is_empty());
        assert!(!m.has_base());
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut m = SeqMap::new();
        let isn = u32::MAX - 9;
        m.syn(isn);
        // Bytes 0..5 end at sequence number u32::MAX - 3; the next segment wraps through 0.
        assert_eq!(m.segment(isn.wrapping_add(1), 5, 1), Placed::New);
        assert_eq!(m.segment(isn.wrapping_add(6), 20, 2), Placed::New);
        assert_eq!(m.arrival(5), Some(2));
        assert_eq!(m.arrival(24), Some(2));
        // Four GiB later the sequence numbers repeat; the offsets do not.
        let far = (1u64 << 32) + 100;
        for (i, off) in (25..far).step_by(1 << 30).chain([far]).enumerate() {
            let seq = isn.wrapping_add(1).wrapping_add(off as u32);
            m.segment(seq, 1, 10 + i as u64);
        }
        assert_eq!(m.arrival(far), Some(10 + 5));
        assert_eq!(
            m.arrival(100),
            None,
            "byte 100 of the first 4 GiB was never seen"
        );
    }

    #[test]
    fn retransmissions_and_duplicates_keep_the_first_arrival() {
        let mut m = map();
        m.segment(ISN + 1, 100, 10);
        assert_eq!(m.segment(ISN + 1, 100, 50), Placed::Seen);
        assert_eq!(m.segment(ISN + 51, 10, 50), Placed::Seen);
        // Overlapping: only bytes 100..150 are new.
        assert_eq!(m.segment(ISN + 51, 100, 60), Placed::New);
        assert_eq!(m.arrival(60), Some(10));
        assert_eq!(m.arrival(120), Some(60));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn bytes_behind_a_hole_are_ready_when_it_fills() {
        let mut m = map();
        m.segment(ISN + 1, 100, 10);
        // Bytes 100..200 are lost; 200..300 and 300..400 arrive at 30 and 40.
        m.segment(ISN + 201, 100, 30);
        m.segment(ISN + 301, 100, 40);
        assert_eq!(m.arrival(150), None);
        assert_eq!(m.arrival(250), Some(30));
        // The retransmission arrives at 70: everything behind it was readable then.
        assert_eq!(m.segment(ISN + 101, 100, 70), Placed::New);
        assert_eq!(m.arrival(50), Some(10));
        assert_eq!(m.arrival(150), Some(70));
        assert_eq!(m.arrival(250), Some(70));
        assert_eq!(m.arrival(399), Some(70));
        // Later bytes arrive later still.
        m.segment(ISN + 401, 10, 80);
        assert_eq!(m.arrival(405), Some(80));
    }

    #[test]
    fn a_segment_spanning_several_holes_fills_each() {
        let mut m = map();
        m.segment(ISN + 101, 10, 5); // 100..110
        m.segment(ISN + 121, 10, 6); // 120..130
        assert_eq!(m.segment(ISN + 1, 200, 9), Placed::New);
        assert_eq!(m.len(), 5);
        assert_eq!(m.arrival(0), Some(9));
        assert_eq!(m.arrival(105), Some(9));
        assert_eq!(m.arrival(115), Some(9));
        assert_eq!(m.arrival(125), Some(9));
        assert_eq!(m.arrival(199), Some(9));
        assert_eq!(m.arrival(200), None);
    }

    #[test]
    fn stays_bounded_and_forgets_the_oldest() {
        let mut m = map();
        // Room for a reader that keeps up; it doubles as one falls behind, to CAPACITY.
        assert_eq!(m.room(), INITIAL);
        let mut rooms = vec![m.room()];
        for i in 0..(CAPACITY as u32 + 10) {
            m.segment(ISN + 1 + i * 10, 10, u64::from(i));
            if m.room() != *rooms.last().unwrap() {
                rooms.push(m.room());
            }
        }
        assert_eq!(rooms, [32, 64, 128, 256, 512, 1024]);
        assert_eq!(m.len(), CAPACITY);
        assert_eq!(m.arrival(0), None);
        assert_eq!(
            m.arrival(10 * (CAPACITY as u64 + 9)),
            Some(CAPACITY as u64 + 9)
        );
        // Bytes older than everything kept are not placed at all.
        assert_eq!(m.segment(ISN + 1, 5, 1), Placed::New);
        assert_eq!(m.arrival(0), None);
        assert_eq!(m.len(), CAPACITY);
        m.forget_before(10 * (CAPACITY as u64 + 5));
        assert_eq!(m.len(), 5);
        // The room stays: a map that grew once does not allocate again.
        for i in 0..(CAPACITY as u32) {
            m.segment(ISN + 1 + (CAPACITY as u32 + 10 + i) * 10, 10, 1);
        }
        assert_eq!(m.len(), CAPACITY);
        assert_eq!(m.room(), CAPACITY, "never grew past CAPACITY");
    }

    #[test]
    fn a_reader_that_keeps_up_never_grows_the_map() {
        let mut m = map();
        // 10,000 segments, each read (and forgotten) before the next few arrive.
        for i in 0..10_000u32 {
            m.segment(ISN + 1 + i * 10, 10, u64::from(i));
            m.forget_before(10 * u64::from(i.saturating_sub(INITIAL as u32 - 2)));
        }
        assert!(m.len() < INITIAL);
        assert_eq!(m.room(), INITIAL);
    }
}
