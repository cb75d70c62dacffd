//! The search for the largest load within the SLO, as a pure state machine: it says which load
//! to probe next and is told each probe's outcome; the runner does the probing.
//!
//! Loads are whole units (streams of a closed loop; a rate in steps of its resolution), from 1
//! to `max`. Load 0 passes by definition, so the bracket always has a lower end.
//! - **Bracket**: probe `start`; while probes pass, grow from the last pass p to
//!   max(p + 1, ⌈p · growth⌉), capped at `max`, until one does not pass.
//! - **Bisect**: between the largest pass `lo` and the smallest load that did not pass `hi`,
//!   probe lo + ⌊(hi - lo) / 2⌋ until hi - lo <= `resolution`.
//! - A probe that ends **not yet** decided (its sample limit reached) did not pass: it bounds the
//!   search from above like a failure, but the answer says its upper end is uncertain.
//! - A **Client-bound** probe measured the client, not the server: it is neither. It is probed
//!   once more; Client-bound twice in a row at the same load ends the search, saying so.

/// How the search moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchConfig {
    /// The first load probed (>= 1).
    pub start: u64,
    /// The bracket's growth factor (> 1).
    pub growth: f64,
    /// The search ends when the largest pass and the smallest non-pass are this close (>= 1).
    pub resolution: u64,
    /// The largest load the search may probe (>= start).
    pub max: u64,
}

impl SearchConfig {
    /// Checks the settings, naming the flag at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.start == 0 {
            return Err("the first load must be at least 1".into());
        }
        if !(self.growth > 1.0 && self.growth.is_finite()) {
            return Err(format!(
                "the growth factor must be above 1 (got {})",
                self.growth
            ));
        }
        if self.resolution == 0 {
            return Err("--resolution must be at least 1".into());
        }
        if self.max < self.start {
            return Err(format!(
                "the largest load ({}) is below the first ({})",
                self.max, self.start
            ));
        }
        Ok(())
    }
}

/// What a probe showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// Its sample limit came with the interval still straddling a threshold.
    NotYet,
    /// The client fell behind: the figures are the client's, not the server's.
    ClientBound,
}

/// Why the search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The largest pass and the smallest non-pass are within the resolution.
    Resolved,
    /// Every load up to the largest allowed passed.
    PassedAtMax,
    /// The client was the limit twice at this load.
    ClientBound { load: u64 },
    /// The caller stopped it (time ran out, or the user stopped it) before it resolved.
    Stopped,
}

/// Where the search stands or ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conclusion {
    /// The largest load that passed (`None`: none did).
    pub largest_pass: Option<u64>,
    /// The smallest load that did not pass (`None`: none was seen).
    pub smallest_fail: Option<u64>,
    /// Whether that load failed for certain (`false`: it ended not yet decided).
    pub fail_certain: bool,
    pub ending: Ending,
}

/// The search's next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Probe(u64),
    Done(Conclusion),
}

/// The state machine.
#[derive(Clone, Debug)]
pub struct Search {
    cfg: SearchConfig,
    /// Largest pass so far (0: none).
    lo: u64,
    /// Smallest non-pass so far, and whether it failed for certain.
    hi: Option<(u64, bool)>,
    /// The load to probe next.
    next: u64,
    /// The load that was Client-bound on its last probe.
    client_bound_at: Option<u64>,
    ended: Option<Ending>,
}

impl Search {
    pub fn new(cfg: SearchConfig) -> Result<Search, String> {
        cfg.validate()?;
        Ok(Search {
            cfg,
            lo: 0,
            hi: None,
            next: cfg.start,
            client_bound_at: None,
            ended: None,
        })
    }

    /// The next load to probe, or the conclusion.
    pub fn next(&self) -> Next {
        match self.ended {
            Some(ending) => Next::Done(self.conclusion(ending)),
            None => Next::Probe(self.next),
        }
    }

    /// What the probe at `load` (the one [`Search::next`] asked for) showed.
    pub fn record(&mut self, load: u64, outcome: Outcome) {
        if self.ended.is_some() {
            return;
        }
        if outcome == Outcome::ClientBound {
            if self.client_bound_at == Some(load) {
                self.ended = Some(Ending::ClientBound { load });
            } else {
                self.client_bound_at = Some(load);
                self.next = load;
            }
            return;
        }
        self.client_bound_at = None;
        match outcome {
            Outcome::Pass => self.lo = self.lo.max(load),
            Outcome::Fail | Outcome::NotYet => {
                let certain = outcome == Outcome::Fail;
                if self
                    .hi
                    .is_none_or(|(h, _)| load < h || (load == h && certain))
                {
                    self.hi = Some((load, certain));
                }
            }
            Outcome::ClientBound => unreachable!("handled above"),
        }
        self.step();
    }

    /// Ends the search where it stands (time ran out, or a stop).
    pub fn stop(&mut self) -> Conclusion {
        let ending = *self.ended.get_or_insert(Ending::Stopped);
        self.conclusion(ending)
    }

    /// Chooses the next load, or ends.
    fn step(&mut self) {
        match self.hi {
            None if self.lo >= self.cfg.max => self.ended = Some(Ending::PassedAtMax),
            None => {
                let grown = (self.lo as f64 * self.cfg.growth).ceil() as u64;
                self.next = grown.max(self.lo + 1).min(self.cfg.max);
            }
            Some((hi, _)) if hi.saturating_sub(self.lo) <= self.cfg.resolution => {
                self.ended = Some(Ending::Resolved)
            }
            Some((hi, _)) => self.next = self.lo + (hi - self.lo) / 2,
        }
    }

    fn conclusion(&self, ending: Ending) -> Conclusion {
        Conclusion {
            largest_pass: (self.lo > 0).then_some(self.lo),
            smallest_fail: self.hi.map(|h| h.0),
            fail_certain: self.hi.is_some_and(|h| h.1),
            ending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(start: u64, resolution: u64, max: u64) -> SearchConfig {
        SearchConfig {
            start,
            growth: 2.0,
            resolution,
            max,
        }
    }

    /// Runs the search against `oracle`, returning the loads probed and the conclusion.
    fn drive(c: SearchConfig, mut oracle: impl FnMut(u64) -> Outcome) -> (Vec<u64>, Conclusion) {
        let mut s = Search::new(c).unwrap();
        let mut probed = Vec::new();
        loop {
            match s.next() {
                Next::Probe(load) => {
                    assert!(probed.len() < 200, "the search did not end: {probed:?}");
                    assert!(
                        (1..=c.max).contains(&load),
                        "probed {load} outside 1..={}",
                        c.max
                    );
                    probed.push(load);
                    s.record(load, oracle(load));
                }
                Next::Done(c) => return (probed, c),
            }
        }
    }

    fn monotone(truth: u64) -> impl FnMut(u64) -> Outcome {
        move |load| {
            if load <= truth {
                Outcome::Pass
            } else {
                Outcome::Fail
            }
        }
    }

    #[test]
    fn brackets_by_doubling_then_bisects() {
        let (probed, c) = drive(cfg(1, 1, 1024), monotone(23));
        assert_eq!(probed, vec![1, 2, 4, 8, 16, 32, 24, 20, 22, 23]);
        assert_eq!(
            c,
            Conclusion {
                largest_pass: Some(23),
                smallest_fail: Some(24),
                fail_certain: true,
                ending: Ending::Resolved
            }
        );
    }

    #[test]
    fn the_first_load_failing_ends_below_it() {
        let (probed, c) = drive(cfg(1, 1, 64), monotone(0));
        assert_eq!(probed, vec![1]);
        assert_eq!((c.largest_pass, c.smallest_fail), (None, Some(1)));
        // A larger first load that fails is bisected down toward 0.
        let (probed, c) = drive(cfg(16, 1, 64), monotone(5));
        assert_eq!(probed, vec![16, 8, 4, 6, 5]);
        assert_eq!((c.largest_pass, c.smallest_fail), (Some(5), Some(6)));
    }

    #[test]
    fn passing_everything_stops_at_the_cap() {
        let (probed, c) = drive(cfg(1, 1, 50), monotone(1000));
        assert_eq!(probed, vec![1, 2, 4, 8, 16, 32, 50]);
        assert_eq!(c.ending, Ending::PassedAtMax);
        assert_eq!((c.largest_pass, c.smallest_fail), (Some(50), None));
    }

    #[test]
    fn client_bound_is_repeated_once_then_ends_the_search() {
        // Client-bound once at 8, then the repeat passes: the search goes on.
        let mut first = true;
        let (probed, c) = drive(cfg(1, 1, 64), |load| {
            if load == 8 && std::mem::take(&mut first) {
                Outcome::ClientBound
            } else {
                monotone(10)(load)
            }
        });
        assert_eq!(probed, vec![1, 2, 4, 8, 8, 16, 12, 10, 11]);
        assert_eq!(c.largest_pass, Some(10));
        // Client-bound twice at 8: the search stops there with what it knew.
        let (probed, c) = drive(cfg(1, 1, 64), |load| {
            if load >= 8 {
                Outcome::ClientBound
            } else {
                Outcome::Pass
            }
        });
        assert_eq!(probed, vec![1, 2, 4, 8, 8]);
        assert_eq!(c.ending, Ending::ClientBound { load: 8 });
        assert_eq!((c.largest_pass, c.smallest_fail), (Some(4), None));
    }

    #[test]
    fn not_yet_bounds_from_above_and_is_marked_uncertain() {
        let (_, c) = drive(cfg(1, 1, 64), |load| match load {
            0..=9 => Outcome::Pass,
            10 => Outcome::NotYet,
            _ => Outcome::Fail,
        });
        assert_eq!((c.largest_pass, c.smallest_fail), (Some(9), Some(10)));
        assert!(!c.fail_certain);
        assert_eq!(c.ending, Ending::Resolved);
    }

    #[test]
    fn stopping_keeps_what_was_learned() {
        let mut s = Search::new(cfg(1, 1, 64)).unwrap();
        s.record(1, Outcome::Pass);
        s.record(2, Outcome::Pass);
        let c = s.stop();
        assert_eq!(c.ending, Ending::Stopped);
        assert_eq!((c.largest_pass, c.smallest_fail), (Some(2), None));
        assert_eq!(s.next(), Next::Done(c));
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Search::new(cfg(0, 1, 8)).is_err());
        assert!(Search::new(cfg(1, 0, 8)).is_err());
        assert!(Search::new(cfg(9, 1, 8)).is_err());
        let mut c = cfg(1, 1, 8);
        c.growth = 1.0;
        assert!(Search::new(c).is_err());
    }

    proptest! {
        /// On a monotone oracle the search always lands within the resolution around the
        /// truth, in a number of probes bounded by the bracket's and the bisection's logarithms.
        #[test]
        fn lands_within_the_resolution(
            truth in 0u64..3000,
            start in 1u64..40,
            resolution in 1u64..9,
            growth in 1.2f64..4.0,
            max in 40u64..2000,
        ) {
            let c = SearchConfig { start, growth, resolution, max };
            let (probed, got) = drive(c, monotone(truth));
            if truth >= max {
                prop_assert_eq!(got.ending, Ending::PassedAtMax);
                prop_assert_eq!(got.largest_pass, Some(max));
            } else {
                prop_assert_eq!(got.ending, Ending::Resolved);
                let lo = got.largest_pass.unwrap_or(0);
                let hi = got.smallest_fail.unwrap();
                prop_assert!(lo <= truth && truth < hi, "{lo} <= {truth} < {hi}");
                prop_assert!(hi - lo <= resolution);
                if resolution == 1 {
                    prop_assert_eq!(lo, truth);
                }
            }
            let span = max as f64;
            let bound = span.ln() / growth.ln() + span.log2() + 4.0;
            prop_assert!((probed.len() as f64) <= bound, "{} probes: {:?}", probed.len(), probed);
        }
    }
}
