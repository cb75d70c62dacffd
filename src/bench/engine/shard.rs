//! `--shard K/N`: one process's share of a run split across machines.
//!
//! The split is deterministic and needs no coordination: every shard builds the whole dataset
//! and the whole arrival schedule from the same seed, then keeps request `i` when
//! `i % N == K` (K is 0-based, as Kubernetes' `JOB_COMPLETION_INDEX`). Interleaving rather than
//! contiguous blocks keeps each shard's load spread over the whole schedule, so the union of
//! the shards is the single-process run's requests at the single-process run's send offsets.
//!
//! Owns the `K/N` value, the selection rule and the common start (`--start-at`). Pure. What a
//! shard saves for the merge is the front end's (its result shape).

use std::fmt;
use std::str::FromStr;

/// Shard `index` of `count` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("invalid shard {s:?}: expected K/N with 0 <= K < N (0-based, e.g. 0/4 ... 3/4)")
        };
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = k.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// Whether request `i` of the whole run (its position in dataset and schedule) is ours.
    pub fn keeps(&self, i: usize) -> bool {
        i % self.count == self.index
    }

    /// The indices of `0..total` this shard sends, ascending.
    pub fn indices(&self, total: usize) -> Vec<usize> {
        (self.index..total).step_by(self.count).collect()
    }
}

/// `--start-at`: Unix seconds (`1796050800`, `1796050800.5`, what `date +%s` prints) -> Unix
/// nanoseconds. One common start is what makes N machines send the single run's schedule.
pub fn parse_start_at(s: &str) -> Result<u64, String> {
    let bad = || {
        format!("invalid --start-at {s:?}: expected Unix seconds, e.g. $(date -u -d '+2 min' +%s)")
    };
    // Integer arithmetic: an f64 holds Unix nanoseconds only to about 256 ns.
    let (whole, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
    let secs: u64 = whole.parse().map_err(|_| bad())?;
    if secs == 0
        || secs >= 100_000_000_000
        || frac.len() > 9
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let nanos: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().map_err(|_| bad())?
    };
    Ok(secs * 1_000_000_000 + nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_values() {
        assert_eq!("0/4".parse(), Ok(Shard { index: 0, count: 4 }));
        assert_eq!("3/4".parse(), Ok(Shard { index: 3, count: 4 }));
        for bad in ["4/4", "1/0", "-1/4", "1", "a/b", "1/4/2", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert_eq!(Shard { index: 2, count: 3 }.to_string(), "2/3");
    }

    /// The shards of one split partition the run: every index exactly once, none outside.
    #[test]
    fn shards_partition_the_run() {
        for total in [0usize, 1, 7, 100] {
            for n in 1..=5 {
                let mut seen = vec![0u32; total];
                for k in 0..n {
                    let s = Shard { index: k, count: n };
                    for i in s.indices(total) {
                        assert!(s.keeps(i));
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "total {total}, n {n}");
            }
        }
        assert_eq!(Shard { index: 1, count: 3 }.indices(8), vec![1, 4, 7]);
    }

    #[test]
    fn start_at_is_unix_seconds() {
        assert_eq!(parse_start_at("1796050800"), Ok(1_796_050_800_000_000_000));
        assert_eq!(
            parse_start_at("1796050800.5"),
            Ok(1_796_050_800_500_000_000)
        );
        assert!(parse_start_at("2026-11-30T15:00:00Z").is_err());
        assert!(parse_start_at("-5").is_err());
    }
}
