//! `--shard K/N`: one process's share of a run split across machines.
//!
//! The split is deterministic and needs no coordination: every shard builds the whole dataset
//! and the whole arrival schedule from the same seed, then keeps request `i` when
//! `i % N == K` (K is 0-based, as Kubernetes' `JOB_COMPLETION_INDEX`). Interleaving rather than
//! contiguous blocks keeps each shard's load spread over the whole schedule, so the union of
//! the shards is the single-process run's requests at the single-process run's send offsets.
//!
//! Owns the `K/N` value and its flags, the selection rule, the common start (`--start-at`),
//! where and when a shard ran (`Ran`, the same four keys in every front end's block), and the
//! merge's tool-neutral half: the shards of one split each given once, the merged window
//! (earliest start to latest end) and the clock rule's warnings. Pure. What else a shard saves
//! for the merge (each request as its tool reads it), and the figures recomputed from it, are
//! the front end's (its result shape).
//!
//! The clock rule (also in docs/distributed.md): shards told one `--start-at` must each have
//! started within [`START_AT_TOLERANCE_NS`] of it on their own clock; shards without one must
//! have started within [`UNSYNCED_SPREAD_NS`] of each other. Otherwise the merge still runs
//! and warns.

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

/// The flags that split one run across machines, the same in every front end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct ShardFlags {
    /// Send only shard K of N (0-based, like Kubernetes' JOB_COMPLETION_INDEX) of the run:
    /// requests i with i % N == K, at their single-run send times. Every shard builds the whole
    /// dataset and schedule from --seed and keeps every request in its result;
    /// `llmspeed merge` recomputes the whole run from the shards' results (docs/distributed.md).
    #[arg(long, value_name = "K/N", help_heading = "Many machines")]
    pub shard: Option<Shard>,
    /// Wait until this wall-clock time (Unix seconds, e.g. `date -u -d '+2 min' +%s`) before
    /// the first request, so that every shard starts the schedule together.
    #[arg(long = "start-at", value_name = "UNIX_SECONDS", value_parser = parse_start_at, help_heading = "Many machines")]
    pub start_at_unix_ns: Option<u64>,
}

impl ShardFlags {
    /// A shard is one run's share: a sweep or repeated runs are the shards run once per point.
    pub fn check(&self, sweeping: bool, num_runs: usize) -> Result<(), String> {
        if self.shard.is_some() && (sweeping || num_runs > 1) {
            return Err("--shard runs one run's share: sweep and repeat by running the shards once per point (see docs/distributed.md)".into());
        }
        Ok(())
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

/// Shards given one `--start-at` whose recorded starts lie further than this from it: a late
/// start (the pod was not ready in time) or a clock offset between machines. 100 ms is well
/// above the send timer's lag (a millisecond) and well below the seconds an unsynchronised
/// clock drifts.
pub const START_AT_TOLERANCE_NS: u64 = 100_000_000;

/// Shards without `--start-at` whose starts spread further than this did not run the single
/// run's schedule together: the merged window is longer and its throughput lower than one
/// process's would be.
pub const UNSYNCED_SPREAD_NS: u64 = 1_000_000_000;

/// Where and when one shard ran: its `K/N` and its window on the wall clock. Every front end's
/// shard block carries it under the same four keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    pub shard: Shard,
    /// `--start-at` as Unix nanoseconds, when the shards were told one common start.
    pub start_at_unix_ns: Option<u64>,
    /// The wall clock (UTC, ns since the Unix epoch) just before the first dispatch: the base
    /// every per-request time of the block counts from.
    pub start_unix_ns: u64,
    /// `start_unix_ns` + the run's duration on the monotonic clock (never a second wall-clock
    /// reading, which an NTP step could move).
    pub end_unix_ns: u64,
}

impl Ran {
    /// Puts the four keys into `block` (a JSON object).
    pub fn write(&self, block: &mut serde_json::Value) {
        if let Some(o) = block.as_object_mut() {
            o.insert("shard".into(), self.shard.to_string().into());
            o.insert("start_at_unix_ns".into(), self.start_at_unix_ns.into());
            o.insert("start_unix_ns".into(), self.start_unix_ns.into());
            o.insert("end_unix_ns".into(), self.end_unix_ns.into());
        }
    }

    /// Reads the four keys back; an error names the one missing or malformed.
    pub fn read(block: &serde_json::Value) -> Result<Ran, String> {
        let u64_of = |key: &str| {
            block
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("{key:?} missing or not a non-negative integer"))
        };
        Ok(Ran {
            shard: block
                .get("shard")
                .and_then(serde_json::Value::as_str)
                .ok_or("\"shard\" missing or not a string")?
                .parse()?,
            start_at_unix_ns: match block.get("start_at_unix_ns") {
                None | Some(serde_json::Value::Null) => None,
                Some(_) => Some(u64_of("start_at_unix_ns")?),
            },
            start_unix_ns: u64_of("start_unix_ns")?,
            end_unix_ns: u64_of("end_unix_ns")?,
        })
    }

    /// This shard's window, for the merge's checks: `name` is where it came from, `requests`
    /// how many it ran.
    pub fn window<'a>(&self, name: &'a str, requests: usize) -> Window<'a> {
        Window {
            name,
            shard: self.shard,
            start_at_unix_ns: self.start_at_unix_ns,
            start_unix_ns: self.start_unix_ns,
            end_unix_ns: self.end_unix_ns,
            requests,
        }
    }
}

/// One shard's run on the wall clock, as the merge checks it.
#[derive(Clone, Debug, PartialEq)]
pub struct Window<'a> {
    /// Where it came from (a file name), for messages.
    pub name: &'a str,
    pub shard: Shard,
    /// `--start-at` as Unix nanoseconds, when the shards were told one common start.
    pub start_at_unix_ns: Option<u64>,
    /// The wall clock (UTC, ns since the Unix epoch) just before the first dispatch.
    pub start_unix_ns: u64,
    /// The start plus the run's duration on the monotonic clock.
    pub end_unix_ns: u64,
    /// How many requests the shard ran.
    pub requests: usize,
}

/// Where each shard ran, in shard order, for a merged result's `merged_from`: its file, its
/// `K/N`, its window on the wall clock and its start's offset from the merged run's `base`.
pub fn merged_from(windows: &[Window<'_>], base: u64) -> Vec<serde_json::Value> {
    let mut order: Vec<&Window<'_>> = windows.iter().collect();
    order.sort_by_key(|w| w.shard.index);
    order
        .iter()
        .map(|w| {
            serde_json::json!({
                "file": w.name,
                "shard": w.shard.to_string(),
                "start_unix_ns": w.start_unix_ns,
                "end_unix_ns": w.end_unix_ns,
                "start_offset_ms": w.start_unix_ns.saturating_sub(base) as f64 / 1e6,
                "requests": w.requests,
            })
        })
        .collect()
}

/// The shards are one split, each exactly once: the same count, no index twice, none missing.
pub fn each_once(windows: &[Window<'_>]) -> Result<(), String> {
    let first = windows.first().ok_or("no shard results to merge")?;
    let n = first.shard.count;
    if let Some(w) = windows.iter().find(|w| w.shard.count != n) {
        return Err(format!(
            "{} and {} are not shards of one run: different shard counts",
            first.name, w.name
        ));
    }
    let mut seen = vec![None::<&str>; n];
    for w in windows {
        let k = w.shard.index;
        if let Some(other) = seen[k] {
            return Err(format!("shard {k}/{n} given twice: {other} and {}", w.name));
        }
        seen[k] = Some(w.name);
    }
    let missing: Vec<String> = (0..n)
        .filter(|&k| seen[k].is_none())
        .map(|k| format!("{k}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing shard(s) {}", missing.join(", ")));
    }
    Ok(())
}

/// The merged run's window: the earliest start (every shard's times move onto it) and the
/// latest end, never before it.
pub fn union(windows: &[Window<'_>]) -> (u64, u64) {
    let base = windows.iter().map(|w| w.start_unix_ns).min().unwrap_or(0);
    let end = windows.iter().map(|w| w.end_unix_ns).max().unwrap_or(base);
    (base, end.max(base))
}

/// The clock rule's warnings (empty when the shards ran one schedule together).
pub fn clock_warnings(windows: &[Window<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    let start_ats: Vec<Option<u64>> = windows.iter().map(|w| w.start_at_unix_ns).collect();
    let common = start_ats.first().copied().flatten();
    if start_ats.iter().any(|a| *a != start_ats[0]) {
        out.push(
            "the shards were not all given the same --start-at: they did not run one schedule together"
                .to_string(),
        );
    }
    if let Some(at) = common {
        for w in windows {
            let d = w.start_unix_ns.abs_diff(at);
            if d > START_AT_TOLERANCE_NS {
                out.push(format!(
                    "shard {} ({}) started {:.1} ms {} --start-at (bound {} ms): it started late or its clock is off; latencies are exact, the merged window and throughput are not",
                    w.shard,
                    w.name,
                    d as f64 / 1e6,
                    if w.start_unix_ns > at { "after" } else { "before" },
                    START_AT_TOLERANCE_NS / 1_000_000
                ));
            }
        }
    } else {
        let lo = windows.iter().map(|w| w.start_unix_ns).min().unwrap_or(0);
        let hi = windows.iter().map(|w| w.start_unix_ns).max().unwrap_or(0);
        if hi - lo > UNSYNCED_SPREAD_NS {
            out.push(format!(
                "the shards started {:.1} ms apart (bound {} ms) without a common --start-at: the merged window is the union of their windows, so throughput is lower than one process sending the same schedule",
                (hi - lo) as f64 / 1e6,
                UNSYNCED_SPREAD_NS / 1_000_000
            ));
        }
    }
    out
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

    fn window(name: &str, k: usize, n: usize, at: Option<u64>, start: u64) -> Window<'_> {
        Window {
            name,
            shard: Shard { index: k, count: n },
            start_at_unix_ns: at,
            start_unix_ns: start,
            end_unix_ns: start + 10,
            requests: 1,
        }
    }

    #[test]
    fn a_split_is_each_shard_once() {
        let ok = [window("a", 1, 2, None, 5), window("b", 0, 2, None, 7)];
        assert_eq!(each_once(&ok), Ok(()));
        assert_eq!(union(&ok), (5, 17));
        let twice = [window("a", 0, 2, None, 5), window("b", 0, 2, None, 7)];
        assert_eq!(
            each_once(&twice).unwrap_err(),
            "shard 0/2 given twice: a and b"
        );
        let missing = [window("a", 0, 3, None, 5), window("b", 2, 3, None, 7)];
        assert_eq!(each_once(&missing).unwrap_err(), "missing shard(s) 1/3");
        let counts = [window("a", 0, 2, None, 5), window("b", 0, 3, None, 7)];
        assert!(each_once(&counts)
            .unwrap_err()
            .contains("different shard counts"));
        assert!(each_once(&[]).is_err());
    }

    #[test]
    fn the_clock_rule_warns_past_its_bounds() {
        let at = 1_000_000_000_000;
        let on_time = [
            window("a", 0, 2, Some(at), at + 1),
            window("b", 1, 2, Some(at), at),
        ];
        assert!(clock_warnings(&on_time).is_empty());
        let late = [
            window("a", 0, 2, Some(at), at),
            window("b", 1, 2, Some(at), at + START_AT_TOLERANCE_NS + 1),
        ];
        let w = clock_warnings(&late);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("shard 1/2 (b) started 100.0 ms after --start-at"),
            "{w:?}"
        );
        let apart = [
            window("a", 0, 2, None, 0),
            window("b", 1, 2, None, UNSYNCED_SPREAD_NS + 1),
        ];
        assert!(clock_warnings(&apart)[0].contains("without a common --start-at"));
        let near = [
            window("a", 0, 2, None, 0),
            window("b", 1, 2, None, UNSYNCED_SPREAD_NS),
        ];
        assert!(clock_warnings(&near).is_empty());
        let mixed = [window("a", 0, 2, Some(at), at), window("b", 1, 2, None, at)];
        assert!(clock_warnings(&mixed)[0].contains("same --start-at"));
    }

    #[test]
    fn where_a_shard_ran_round_trips_under_four_keys() {
        let ran = Ran {
            shard: "2/3".parse().unwrap(),
            start_at_unix_ns: Some(1_796_050_800_000_000_000),
            start_unix_ns: 1_796_050_800_000_123_456,
            end_unix_ns: 1_796_050_801_000_000_000,
        };
        let mut block = serde_json::json!({"seed": 7});
        ran.write(&mut block);
        assert_eq!(
            block,
            serde_json::json!({
                "seed": 7,
                "shard": "2/3",
                "start_at_unix_ns": 1_796_050_800_000_000_000u64,
                "start_unix_ns": 1_796_050_800_000_123_456u64,
                "end_unix_ns": 1_796_050_801_000_000_000u64,
            })
        );
        assert_eq!(Ran::read(&block), Ok(ran));
        let w = ran.window("s2.json", 5);
        assert_eq!((w.name, w.shard, w.requests), ("s2.json", ran.shard, 5));
        // No common start is null; a malformed one, or a missing key, is an error that names it.
        block["start_at_unix_ns"] = serde_json::Value::Null;
        assert_eq!(Ran::read(&block).unwrap().start_at_unix_ns, None);
        block["start_at_unix_ns"] = "soon".into();
        assert!(Ran::read(&block).unwrap_err().contains("start_at_unix_ns"));
        block["start_at_unix_ns"] = serde_json::Value::Null;
        block.as_object_mut().unwrap().remove("end_unix_ns");
        assert!(Ran::read(&block).unwrap_err().contains("end_unix_ns"));
        block["end_unix_ns"] = 1.into();
        block["shard"] = "3/3".into();
        assert!(Ran::read(&block).unwrap_err().contains("invalid shard"));
    }

    #[test]
    fn a_shard_is_one_run_and_one_sweep_point() {
        let one = ShardFlags {
            shard: Some("1/4".parse().unwrap()),
            start_at_unix_ns: None,
        };
        assert_eq!(one.check(false, 1), Ok(()));
        for (sweeping, runs) in [(true, 1), (false, 2)] {
            let e = one.check(sweeping, runs).unwrap_err();
            assert!(e.starts_with("--shard runs one run's share"), "{e}");
        }
        // Without --shard, sweeps and repeats are the front end's to run.
        assert_eq!(ShardFlags::default().check(true, 3), Ok(()));
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
