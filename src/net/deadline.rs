//! When the read loop stops waiting for the next event: the first-byte limit until the first SSE
//! event, then the gap limit from the last event, then (after `[DONE]`) a short wait for the end
//! of the body. Pure: no tokio, no clock — the loop asks what to do with its one timer and tells
//! what it saw.
//!
//! The timer is re-armed lazily. Moving it on every event (the obvious way) re-arms a tokio timer
//! per token; instead the loop only notes the last event's raw stamp, leaves the armed timer
//! alone, and when it fires asks [`ReadDeadline::fired`] whether the limit has really passed
//! since the last event — if not, it re-arms once for the rest. With events every 1 ms and a
//! 120 s gap limit that is one re-arm per 120 s of stream instead of 120,000; the deadline still
//! falls exactly one limit after the last event.

use super::config::Timeouts;
use crate::timeline::ErrorKind;
use std::time::Duration;

/// How long (at most; never longer than the gap limit) to wait for the end of the body once
/// `[DONE]` arrived before giving the connection up (the request has succeeded by then).
pub(crate) const AFTER_DONE_WAIT: Duration = Duration::from_secs(2);

/// Which limit the loop is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No SSE event yet: the first-byte limit, from the end of the request write.
    FirstByte,
    /// Events arrive: the gap limit, from the last one.
    Gap,
    /// `[DONE]` seen: the stream succeeded; only the body's end is awaited.
    AfterDone,
}

impl Phase {
    /// The error a phase's expiry is; `None` after `[DONE]`, where the request has succeeded.
    pub(crate) fn timeout_kind(self) -> Option<ErrorKind> {
        match self {
            Phase::FirstByte => Some(ErrorKind::TimeoutFirstByte),
            Phase::Gap => Some(ErrorKind::TimeoutGap),
            Phase::AfterDone => None,
        }
    }
}

/// What to do with the timer before the next read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arm {
    /// No limit applies: read without a timer.
    Unlimited,
    /// The armed timer still stands (it may fire early; [`ReadDeadline::fired`] then decides).
    Keep,
    /// Arm the timer this long from now.
    In(Duration),
}

/// What the timer's firing means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// The limit of this phase has passed with nothing new: give up.
    Expired(Phase),
    /// Events came since the timer was armed; the real deadline is this long from now.
    RearmIn(Duration),
}

/// The read loop's deadline state for one response.
#[derive(Clone, Debug)]
pub(crate) struct ReadDeadline {
    timeouts: Timeouts,
    /// The phase the armed timer belongs to; `None` when no timer is armed.
    armed: Option<Phase>,
    /// Events seen when the timer was (re)armed: any more means progress since.
    events_at_arm: u64,
}

impl ReadDeadline {
    pub(crate) fn new(timeouts: Timeouts) -> Self {
        Self {
            timeouts,
            armed: None,
            events_at_arm: 0,
        }
    }

    fn phase(events: u64, done: bool) -> Phase {
        if done {
            Phase::AfterDone
        } else if events == 0 {
            Phase::FirstByte
        } else {
            Phase::Gap
        }
    }

    fn limit(&self, phase: Phase) -> Option<Duration> {
        match phase {
            Phase::FirstByte => self.timeouts.first_byte,
            Phase::Gap => self.timeouts.gap,
            Phase::AfterDone => Some(
                self.timeouts
                    .gap
                    .map_or(AFTER_DONE_WAIT, |g| g.min(AFTER_DONE_WAIT)),
            ),
        }
    }

    /// Before each read, with the events seen so far and whether `[DONE]` came. The timer is
    /// armed only when the phase changes (at most three times a response), never per event; the
    /// caller calls this right after the read that changed the phase, so "from now" is from the
    /// event that started it.
    pub(crate) fn before_read(&mut self, events: u64, done: bool) -> Arm {
        let phase = Self::phase(events, done);
        if self.armed == Some(phase) {
            return Arm::Keep;
        }
        match self.limit(phase) {
            None => {
                self.armed = None;
                Arm::Unlimited
            }
            Some(limit) => {
                self.armed = Some(phase);
                self.events_at_arm = events;
                Arm::In(limit)
            }
        }
    }

    /// The armed timer fired. `since_last_event` is the time from the last event's read stamp to
    /// now; it is only looked at when events came after the timer was armed (so a clock that
    /// does not move cannot keep a stalled stream alive: the next firing without events ends it).
    pub(crate) fn fired(&mut self, events: u64, since_last_event: Duration) -> Fired {
        let phase = self.armed.unwrap_or(Phase::Gap);
        let limit = self.limit(phase).unwrap_or(Duration::MAX);
        if events == self.events_at_arm || since_last_event >= limit {
            return Fired::Expired(phase);
        }
        self.events_at_arm = events;
        Fired::RearmIn(limit - since_last_event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn timeouts(first_byte: Option<u64>, gap: Option<u64>) -> Timeouts {
        Timeouts {
            first_byte: first_byte.map(ms),
            gap: gap.map(ms),
            ..Timeouts::default()
        }
    }

    #[test]
    fn arms_once_per_phase_and_not_per_event() {
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        assert_eq!(d.before_read(0, false), Arm::In(ms(600)));
        assert_eq!(d.before_read(0, false), Arm::Keep);
        assert_eq!(d.before_read(1, false), Arm::In(ms(200)));
        for events in 2..100 {
            assert_eq!(d.before_read(events, false), Arm::Keep);
        }
        assert_eq!(d.before_read(100, true), Arm::In(ms(200)));
        assert_eq!(d.before_read(101, true), Arm::Keep);
    }

    #[test]
    fn after_done_waits_the_shorter_of_the_gap_limit_and_two_seconds() {
        let mut d = ReadDeadline::new(timeouts(None, Some(120_000)));
        assert_eq!(d.before_read(0, false), Arm::Unlimited);
        assert_eq!(d.before_read(0, false), Arm::Unlimited);
        assert_eq!(d.before_read(3, true), Arm::In(AFTER_DONE_WAIT));
        let mut d = ReadDeadline::new(timeouts(None, None));
        assert_eq!(d.before_read(1, false), Arm::Unlimited);
        assert_eq!(d.before_read(2, true), Arm::In(AFTER_DONE_WAIT));
    }

    #[test]
    fn firing_without_new_events_expires_the_armed_phase() {
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        d.before_read(0, false);
        assert_eq!(d.fired(0, ms(0)), Fired::Expired(Phase::FirstByte));
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        d.before_read(4, false);
        // A clock reading "no time since the last event" cannot keep a stall alive.
        assert_eq!(d.fired(4, ms(0)), Fired::Expired(Phase::Gap));
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        d.before_read(4, true);
        assert_eq!(d.fired(4, ms(0)), Fired::Expired(Phase::AfterDone));
    }

    #[test]
    fn firing_after_new_events_rearms_for_the_rest_of_the_limit_from_the_last_one() {
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        d.before_read(1, false);
        // Events 2..=5 arrived; the last one 150 ms ago: 50 ms are left.
        assert_eq!(d.fired(5, ms(150)), Fired::RearmIn(ms(50)));
        // Nothing since: the deadline (one limit after event 5) has come.
        assert_eq!(d.fired(5, ms(200)), Fired::Expired(Phase::Gap));
    }

    #[test]
    fn firing_late_after_new_events_expires_when_the_last_one_is_a_limit_ago() {
        // The runtime polled the timer late: the last event is already older than the limit.
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        d.before_read(1, false);
        assert_eq!(d.fired(2, ms(200)), Fired::Expired(Phase::Gap));
        assert_eq!(d.fired(3, ms(250)), Fired::Expired(Phase::Gap));
    }

    /// Drives the deadline the way the read loop does, in virtual time (µs): events at the given
    /// times, then silence. Returns when it gave up (µs) and how many times the timer was
    /// (re)armed.
    fn simulate(d: &mut ReadDeadline, events_at_us: &[u64]) -> (u64, usize) {
        let mut arms = 0;
        let mut timer: Option<u64> = None;
        let mut seen = 0u64;
        let mut last_event = 0u64;
        let mut now = 0u64;
        let mut next = events_at_us.iter().copied().peekable();
        loop {
            match d.before_read(seen, false) {
                Arm::Unlimited => timer = None,
                Arm::Keep => {}
                Arm::In(limit) => {
                    arms += 1;
                    timer = Some(now + limit.as_micros() as u64);
                }
            }
            let fire = timer.unwrap_or(u64::MAX);
            match next.peek().copied() {
                // A read is ready first (the loop's select is biased towards the read).
                Some(at) if at <= fire => {
                    now = at;
                    next.next();
                    seen += 1;
                    last_event = at;
                }
                _ => {
                    assert!(
                        fire != u64::MAX,
                        "no limit and no events: would wait forever"
                    );
                    now = fire;
                    let since = Duration::from_micros(now - last_event);
                    match d.fired(seen, since) {
                        Fired::Expired(_) => return (now, arms),
                        Fired::RearmIn(rest) => {
                            arms += 1;
                            timer = Some(now + rest.as_micros() as u64);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_thousand_events_one_ms_apart_rearm_a_handful_of_times_and_expire_one_gap_after_the_last() {
        // The loop before this module re-armed after every event (the deadline moved with each
        // one): 1000 re-arms here. Lazily: the first-byte arm, the gap arm, one re-arm per 200 ms
        // of stream (5), and none after the last event.
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        let events: Vec<u64> = (0..1000).map(|i| 50_000 + i * 1_000).collect();
        let (gave_up, arms) = simulate(&mut d, &events);
        assert_eq!(gave_up, 1_049_000 + 200_000, "one gap after the last event");
        assert!(arms <= 8, "{arms} arms for 1000 events");
    }

    #[test]
    fn gaps_just_inside_the_limit_for_many_limits_never_expire() {
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        // 199 ms apart for 20 s: 100 limits long, never one limit of silence.
        let events: Vec<u64> = (0..100).map(|i| i * 199_000).collect();
        let (gave_up, _) = simulate(&mut d, &events);
        assert_eq!(gave_up, 99 * 199_000 + 200_000);
    }

    #[test]
    fn first_byte_limit_counts_from_the_start_and_gap_from_the_first_event() {
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        assert_eq!(simulate(&mut d, &[]).0, 600_000);
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        assert_eq!(simulate(&mut d, &[500_000]).0, 700_000);
        let mut d = ReadDeadline::new(timeouts(Some(600), Some(200)));
        // The first event after the first-byte limit: too late.
        assert_eq!(simulate(&mut d, &[700_000]).0, 600_000);
    }
}
