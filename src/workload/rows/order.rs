//! The `datasets` library's (5.2) row orders for a seed, over any row sources. Pure: no IO.
//!
//! `IterableDataset.shuffle(seed=s)` (a streamed dataset, vLLM's default) is, for files read as
//! Arrow tables (parquet, JSON):
//! 1. the shards (data files) permuted: `default_rng(s).shuffle(list(range(n)))`;
//! 2. the permuted list cut into `min(n, 10)` contiguous groups (`max_buffer_input_shards`),
//!    each read in 100-row batches (`buffer_size // max_buffer_input_shards`; a group's last
//!    batch may be short) and the groups taken batch by batch in turn, skipping an exhausted one;
//! 3. a buffer of 1,000 rows on a second, fresh `default_rng(s)`: once it holds 1,000 rows or
//!    more, `rng.permutation(len)` orders it, all but 500 leave in that order and the last 500
//!    stay (in that order); at the end the rest leave through one more permutation.
//!
//! `Dataset.shuffle(seed=s)` (`--no-stream`) is `default_rng(s).permutation(len)` of the rows
//! in their stored order.

use std::ops::Range;

use crate::workload::numpy::Generator;

/// The streamed shuffle's buffer (`IterableDataset.shuffle`'s `buffer_size` default).
pub const BUFFER: usize = 1000;
/// The most shards feeding the buffer at once (its `max_buffer_input_shards` default).
pub const MAX_INPUT_SHARDS: usize = 10;
/// Rows per batch from each group: `max(1, BUFFER / MAX_INPUT_SHARDS)`.
pub const BATCH: usize = BUFFER / MAX_INPUT_SHARDS;

/// The order the streamed shuffle reads `n` shards in.
pub fn shard_order(n: usize, seed: u64) -> Vec<usize> {
    Generator::new(seed).permutation(n)
}

/// `n` shards cut into `min(n, MAX_INPUT_SHARDS)` contiguous groups, the first ones one
/// longer when they do not divide evenly.
pub fn groups(n: usize) -> Vec<Range<usize>> {
    let k = n.min(MAX_INPUT_SHARDS);
    (0..k)
        .map(|i| {
            let (div, rem) = (n / k, n % k);
            let start = div * i + i.min(rem);
            start..start + div + usize::from(i < rem)
        })
        .collect()
}

type Source<T, E> = Box<dyn Iterator<Item = Result<T, E>> + Send>;

/// Step 2 and 3 of the streamed shuffle over one row source per group (each already in its
/// shards' permuted order). An error from a source ends the stream after it.
pub struct Streamed<T, E> {
    sources: Vec<Option<Source<T, E>>>,
    turn: usize,
    rng: Generator,
    buf: Vec<T>,
    out: std::vec::IntoIter<T>,
    done: bool,
}

impl<T, E> Streamed<T, E> {
    pub fn new(sources: Vec<Source<T, E>>, seed: u64) -> Self {
        Self {
            sources: sources.into_iter().map(Some).collect(),
            turn: 0,
            rng: Generator::new(seed),
            buf: Vec::new(),
            out: Vec::new().into_iter(),
            done: false,
        }
    }

    /// The next group's next batch into the buffer: `Ok(false)` when every group is spent.
    fn fill(&mut self) -> Result<bool, E> {
        let k = self.sources.len();
        for _ in 0..k {
            let i = self.turn;
            self.turn = (self.turn + 1) % k;
            let Some(src) = &mut self.sources[i] else {
                continue;
            };
            let mut got = 0;
            while got < BATCH {
                match src.next() {
                    Some(Ok(row)) => {
                        self.buf.push(row);
                        got += 1;
                    }
                    Some(Err(e)) => return Err(e),
                    None => break,
                }
            }
            if got < BATCH {
                self.sources[i] = None;
            }
            if got > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Sends `buf` through a permutation: all but `keep` leave, the rest stay.
    fn drain(&mut self, keep: usize) {
        let perm = self.rng.permutation(self.buf.len());
        let mut slots: Vec<Option<T>> = self.buf.drain(..).map(Some).collect();
        let leave = perm.len() - keep;
        let mut out = Vec::with_capacity(leave);
        for &p in &perm[..leave] {
            out.extend(slots[p].take());
        }
        for &p in &perm[leave..] {
            self.buf.extend(slots[p].take());
        }
        self.out = out.into_iter();
    }
}

impl<T, E> Iterator for Streamed<T, E> {
    type Item = Result<T, E>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(x) = self.out.next() {
                return Some(Ok(x));
            }
            if self.done {
                return None;
            }
            match self.fill() {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(true) => {
                    if self.buf.len() >= BUFFER {
                        self.drain(BUFFER / 2);
                    }
                }
                Ok(false) => {
                    self.done = true;
                    if !self.buf.is_empty() {
                        self.drain(0);
                    }
                }
            }
        }
    }
}

/// `Dataset.shuffle(seed)`: `rows` in the order of `default_rng(seed).permutation(len)`.
pub fn full<T>(rows: Vec<T>, seed: u64) -> Vec<T> {
    let perm = Generator::new(seed).permutation(rows.len());
    let mut slots: Vec<Option<T>> = rows.into_iter().map(Some).collect();
    perm.iter().filter_map(|&p| slots[p].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: std::ops::Range<u32>) -> Source<u32, ()> {
        Box::new(n.map(Ok))
    }

    #[test]
    fn groups_cut_shards_as_contiguous_runs() {
        assert_eq!(groups(3), vec![0..1, 1..2, 2..3]);
        assert_eq!(
            groups(12),
            vec![
                0..2,
                2..4,
                4..5,
                5..6,
                6..7,
                7..8,
                8..9,
                9..10,
                10..11,
                11..12
            ]
        );
        assert!(groups(0).is_empty());
    }

    /// The naive twin: the stream laid out in full, batch by batch, then the buffer's rule.
    fn naive(groups: &[Vec<u32>], seed: u64) -> Vec<u32> {
        let mut batches: Vec<Vec<Vec<u32>>> = groups
            .iter()
            .map(|g| g.chunks(BATCH).map(<[u32]>::to_vec).collect())
            .collect();
        batches.iter_mut().for_each(|b| b.reverse());
        let mut stream = Vec::new();
        while batches.iter().any(|b| !b.is_empty()) {
            for b in &mut batches {
                if let Some(x) = b.pop() {
                    stream.push(x);
                }
            }
        }
        let mut rng = Generator::new(seed);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for batch in stream {
            buf.extend(batch);
            if buf.len() >= BUFFER {
                let p = rng.permutation(buf.len());
                let y = buf.len() - BUFFER / 2;
                out.extend(p[..y].iter().map(|&i| buf[i]));
                buf = p[y..].iter().map(|&i| buf[i]).collect();
            }
        }
        let p = rng.permutation(buf.len());
        out.extend(p.iter().map(|&i| buf[i]));
        out
    }

    #[test]
    fn the_streamed_shuffle_is_its_naive_twin_and_a_permutation() {
        let cuts = [0u32, 1234, 1789, 3789, 3826];
        let groups: Vec<Vec<u32>> = cuts.windows(2).map(|w| (w[0]..w[1]).collect()).collect();
        let sources = cuts.windows(2).map(|w| ids(w[0]..w[1])).collect();
        let ours: Vec<u32> = Streamed::new(sources, 0).map(Result::unwrap).collect();
        assert_eq!(ours, naive(&groups, 0));
        let mut sorted = ours.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..3826).collect::<Vec<_>>());
        assert_ne!(ours[..10], sorted[..10]);
    }

    #[test]
    fn a_source_error_ends_the_stream_with_it() {
        let bad: Source<u32, ()> = Box::new((0..5).map(Ok).chain(std::iter::once(Err(()))));
        let got: Vec<_> = Streamed::new(vec![bad], 1).collect();
        assert_eq!(got, vec![Err(())]);
    }
}
