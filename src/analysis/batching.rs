//! Upstream batching: tokens that arrived several to one TCP segment (or one event) while the
//! client read each segment as it came, because something between the engine and the client
//! held them (a proxy's buffer, a gateway, the engine's own output coalescing). ITL and TTFT
//! then describe the batching, not the engine. The verdict is distinct from Client-bound: the
//! client kept up; the figures are true, of the wrong thing (docs/methodology.md, "Upstream
//! batching").
//!
//! The rule needs to know which tokens came together, which only packet stamps tell for tokens
//! of separate events ([`StampSource::Packet`]: events stamped alike came in one segment);
//! socket stamps give a read one stamp, and a read of several tokens may be the client's lag.
//! So tokens group by segment on a packet-stamped timeline and by event elsewhere (the tokens
//! of one event always came together).
//!
//! The verdict names which of two things batched them, as the fix differs ([`Cause`]): tokens
//! several to one event were written together by the engine (its output loop merged them, or
//! it streams at an interval); one-token events several to one segment were written apart and
//! held together after (a proxy, a gateway, the server's HTTP layer falling behind).
//!
//! Pure: timelines in, figures out; the clock only converts stamps.

use crate::analysis::stats;
use crate::clock::Clock;
use crate::timeline::{StampSource, Timeline};
use std::ops::Range;

/// The run is upstream-batched when at least this share of its tokens came in batches ...
pub const BATCHED_SHARE: f64 = 0.5;
/// ... and at least this many batches were seen (a handful of merged events says nothing).
pub const MIN_BATCHES: u64 = 4;

/// Samples of one measurement, gathered timeline by timeline.
#[derive(Clone, Debug, Default)]
pub struct BatchSamples {
    tokens: u64,
    tokens_batched: u64,
    /// Tokens that came in events of several tokens (batched by the engine's own writes).
    tokens_in_merged_events: u64,
    /// Tokens per batch (a group of two or more tokens that came together).
    batch_tokens: Vec<f64>,
    /// Time from one batch to the next of the same request, ms.
    period_ms: Vec<f64>,
    /// Timelines counted, and those whose tokens group by segment.
    timelines: u64,
    by_segment: u64,
}

impl BatchSamples {
    /// One request's timeline; only groups that arrived inside `window` count.
    pub fn add(&mut self, tl: &Timeline, clock: &Clock, window: Range<u64>) {
        let by_segment = tl.stamp_source() == StampSource::Packet;
        self.timelines += 1;
        self.by_segment += u64::from(by_segment);
        let mut last_batch: Option<u64> = None;
        for g in groups(tl, by_segment) {
            if !window.contains(&g.t) {
                continue;
            }
            self.tokens += g.tokens;
            self.tokens_in_merged_events += g.in_merged_events;
            if g.tokens < 2 {
                continue;
            }
            self.tokens_batched += g.tokens;
            self.batch_tokens.push(g.tokens as f64);
            if let Some(prev) = last_batch {
                self.period_ms.push(clock.delta_ns(prev, g.t) as f64 / 1e6);
            }
            last_batch = Some(g.t);
        }
    }

    pub fn summary(&self) -> Batching {
        Batching {
            tokens: self.tokens,
            tokens_batched: self.tokens_batched,
            tokens_in_merged_events: self.tokens_in_merged_events,
            batches: self.batch_tokens.len() as u64,
            batch_tokens_p50: stats::percentile(&self.batch_tokens, 50.0),
            batch_period_ms_p50: stats::percentile(&self.period_ms, 50.0),
            by_segment: self.timelines > 0 && self.by_segment == self.timelines,
        }
    }
}

/// Tokens that came together: one segment's (consecutive events stamped alike) or one event's.
struct Group {
    t: u64,
    tokens: u64,
    /// Of `tokens`, those in events of several tokens.
    in_merged_events: u64,
}

impl Group {
    fn add(&mut self, event_tokens: u32) {
        self.tokens += u64::from(event_tokens);
        if event_tokens >= 2 {
            self.in_merged_events += u64::from(event_tokens);
        }
    }
}

/// The token groups of a timeline in order: one per segment when `by_segment`, else one per
/// event.
fn groups(tl: &Timeline, by_segment: bool) -> impl Iterator<Item = Group> + '_ {
    let mut events = tl.events.iter().filter(|e| e.tokens > 0).peekable();
    std::iter::from_fn(move || {
        let first = events.next()?;
        let mut g = Group {
            t: first.t,
            tokens: 0,
            in_merged_events: 0,
        };
        g.add(first.tokens);
        while let Some(next) = events.next_if(|e| by_segment && e.t == first.t) {
            g.add(next.tokens);
        }
        Some(g)
    })
}

/// How the tokens of one measurement arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Batching {
    pub tokens: u64,
    /// Tokens that came in batches (two or more together), and how many batches.
    pub tokens_batched: u64,
    pub batches: u64,
    /// Tokens that came in events of several tokens, batched or not: the engine wrote them
    /// together. Every such event is a batch, so these are part of `tokens_batched`; the rest
    /// of `tokens_batched` came as one-token events sharing a segment.
    pub tokens_in_merged_events: u64,
    /// Tokens per batch, and the time between one request's batches, ms (p50).
    pub batch_tokens_p50: Option<f64>,
    pub batch_period_ms_p50: Option<f64>,
    /// Every timeline grouped its tokens by segment (packet stamps): batches of separate events
    /// were seen; otherwise only events that carried several tokens.
    pub by_segment: bool,
}

impl Batching {
    /// Percent of tokens that came batched.
    pub fn batched_percent(&self) -> Option<f64> {
        (self.tokens > 0).then(|| 100.0 * self.tokens_batched as f64 / self.tokens as f64)
    }

    /// Percent of all tokens that came in events of several tokens.
    pub fn merged_events_percent(&self) -> Option<f64> {
        (self.tokens > 0).then(|| 100.0 * self.tokens_in_merged_events as f64 / self.tokens as f64)
    }

    /// Which of the two accounts for most of the batched tokens (the engine's on a tie: an event
    /// of several tokens is the engine's write whatever else happened to it); `None` when no
    /// token was batched.
    pub fn cause(&self) -> Option<Cause> {
        if self.tokens_batched == 0 {
            return None;
        }
        let held_apart = self.tokens_batched - self.tokens_in_merged_events;
        Some(if self.tokens_in_merged_events >= held_apart {
            Cause::EngineWrites
        } else {
            Cause::HeldBetween
        })
    }
}

/// What batched the tokens, judged by the batched tokens' events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Most batched tokens came several to one event: the engine wrote them together (its
    /// output loop merged a request's tokens, as vLLM's does when its API loop falls behind the
    /// engine, or it streams at an interval). Nothing between the engine and the client is to
    /// blame, and no proxy setting changes it.
    EngineWrites,
    /// Most batched tokens came as one-token events several to one TCP segment: the engine
    /// wrote them apart and something held them together after (a buffering proxy, a gateway,
    /// the server's own HTTP layer falling behind its engine). Seen only on packet stamps.
    HeldBetween,
}

impl Cause {
    /// The key written under `llmspeed.client_lag.upstream_batching_cause`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::EngineWrites => "engine_writes",
            Cause::HeldBetween => "held_between",
        }
    }
}

/// The run was batched upstream: what did it, and the line that says so with the evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub cause: Cause,
    pub reason: String,
}

/// The upstream-batching verdict: what batched the run's tokens, with the evidence and where the
/// fix lies; `None` when they were not batched (as far as the stamps tell).
pub fn verdict(b: &Batching) -> Option<Verdict> {
    let share = b.batched_percent()?;
    if share < 100.0 * BATCHED_SHARE || b.batches < MIN_BATCHES {
        return None;
    }
    let cause = b.cause()?;
    let period = b.batch_period_ms_p50.map_or(String::new(), |p| {
        format!(", one batch every {p:.1} ms p50")
    });
    let per_batch = b.batch_tokens_p50.unwrap_or(0.0);
    let in_events = 100.0 * b.tokens_in_merged_events as f64 / b.tokens_batched as f64;
    let reason = match cause {
        Cause::EngineWrites => format!(
            "{share:.0}% of tokens arrived several to an event ({per_batch:.0} tokens per batch p50{period}; {in_events:.0}% of the batched tokens in events of several tokens) while the client kept up: the engine wrote them together — its output loop merged a request's tokens (vLLM's does when its API loop falls behind the engine) or it streams at an interval (vLLM's --stream-interval, a request's stream_interval); no proxy setting changes that. ITL and TTFT here describe the engine's output batching, not its decode steps"
        ),
        Cause::HeldBetween => format!(
            "{share:.0}% of tokens arrived several to a TCP segment ({per_batch:.0} tokens per batch p50{period}; {:.0}% of the batched tokens one to an event) while the client kept up: the engine wrote them apart and something between held them — a buffering proxy (nginx: proxy_buffering off, or the X-Accel-Buffering: no response header; an ingress's proxy-buffering annotation), a gateway, or the server's HTTP layer falling behind its engine. ITL and TTFT here describe that holding, not the engine",
            100.0 - in_events
        ),
    };
    Some(Verdict { cause, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Channel, EventRecord};

    /// A timeline of events `(stamp ns, tokens)`; packet-stamped (one segment per distinct
    /// stamp) when `packet`, else each read kernel-stamped.
    fn timeline(events: &[(u64, u32)], packet: bool) -> Timeline {
        let mut tl = Timeline::new(0, 64, false);
        for (i, &(t, tokens)) in events.iter().enumerate() {
            tl.events.push(EventRecord {
                t,
                tokens,
                wakeup_ns: 1_000,
                socket_bytes: 0,
                channel: Channel::Content,
            });
            if packet {
                tl.note_packet_read(true, t, None, i, |_| 1_000);
            } else {
                tl.note_read(None, 1_000, i);
            }
        }
        tl
    }

    fn batching(tls: &[Timeline]) -> Batching {
        let (clock, _h) = Clock::mock();
        let mut s = BatchSamples::default();
        for tl in tls {
            s.add(tl, &clock, 0..u64::MAX);
        }
        s.summary()
    }

    /// A proxy that flushes every 20 ms: `n` segments of `k` one-token events each.
    fn flushed(n: u64, k: usize, packet: bool) -> Timeline {
        let events: Vec<(u64, u32)> = (1..=n)
            .flat_map(|i| std::iter::repeat_n((i * 20_000_000, 1), k))
            .collect();
        timeline(&events, packet)
    }

    #[test]
    fn a_proxy_that_flushes_every_20_ms_is_named_with_its_batch_and_period() {
        // 5 flushes of 10 tokens: all 50 tokens batched, 10 per batch, every 20 ms.
        let b = batching(&[flushed(5, 10, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (50, 50, 5));
        assert_eq!(b.batch_tokens_p50, Some(10.0));
        assert_eq!(b.batch_period_ms_p50, Some(20.0));
        assert!(b.by_segment);
        assert_eq!(b.tokens_in_merged_events, 0);
        let v = verdict(&b).expect("batched");
        assert_eq!(v.cause, Cause::HeldBetween);
        let why = v.reason;
        assert!(why.starts_with("100% of tokens arrived several to a TCP segment (10 tokens per batch p50, one batch every 20.0 ms p50; 100% of the batched tokens one to an event) while the client kept up: the engine wrote them apart and something between held them"), "{why}");
        assert!(
            why.contains("proxy_buffering off") && why.contains("X-Accel-Buffering: no"),
            "{why}"
        );
    }

    #[test]
    fn a_token_per_segment_is_not_batched() {
        // 40 tokens 2 ms apart, each its own segment.
        let events: Vec<(u64, u32)> = (1..=40).map(|i| (i * 2_000_000, 1)).collect();
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (40, 0, 0));
        assert_eq!(b.cause(), None);
        assert_eq!(verdict(&b), None);
    }

    #[test]
    fn the_share_and_the_count_must_both_be_reached() {
        // 10 segments of 2 tokens and 30 single ones: 20 of 50 tokens batched (40%): under half.
        let mut events: Vec<(u64, u32)> = (1..=10)
            .flat_map(|i| [(i * 1_000_000, 1), (i * 1_000_000, 1)])
            .collect();
        events.extend((11..=40).map(|i| (i * 1_000_000, 1)));
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (50, 20, 10));
        assert_eq!(b.batched_percent(), Some(40.0));
        assert_eq!(verdict(&b), None);
        // Three batches of 10 (all tokens batched) are too few to judge.
        let b = batching(&[flushed(3, 10, true)]);
        assert_eq!(b.batched_percent(), Some(100.0));
        assert_eq!(verdict(&b), None);
    }

    #[test]
    fn socket_stamps_count_only_events_of_several_tokens() {
        // The same flushes on socket stamps: a read of ten events may be the client's lag, so
        // none counts; events of four tokens each (a stream interval) do, by the event.
        let b = batching(&[flushed(5, 10, false)]);
        assert_eq!((b.tokens_batched, b.batches), (0, 0));
        assert!(!b.by_segment);
        let events: Vec<(u64, u32)> = (1..=6).map(|i| (i * 8_000_000, 4)).collect();
        let b = batching(&[timeline(&events, false)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (24, 24, 6));
        assert_eq!(b.batch_period_ms_p50, Some(8.0));
        let v = verdict(&b).expect("batched by the event");
        assert_eq!(v.cause, Cause::EngineWrites);
        assert!(
            v.reason
                .contains("several to an event (4 tokens per batch p50"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn events_of_several_tokens_are_the_engines_writes_and_no_proxy_is_blamed() {
        // A stream interval of 4 on packet stamps: each four-token event its own segment.
        let events: Vec<(u64, u32)> = (1..=6).map(|i| (i * 8_000_000, 4)).collect();
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (24, 24, 6));
        assert_eq!(b.tokens_in_merged_events, 24);
        assert_eq!(b.merged_events_percent(), Some(100.0));
        let v = verdict(&b).expect("batched");
        assert_eq!(v.cause, Cause::EngineWrites);
        assert_eq!(v.cause.as_str(), "engine_writes");
        assert!(
            v.reason.starts_with("100% of tokens arrived several to an event (4 tokens per batch p50, one batch every 8.0 ms p50; 100% of the batched tokens in events of several tokens) while the client kept up: the engine wrote them together"),
            "{}",
            v.reason
        );
        assert!(!v.reason.contains("proxy_buffering"), "{}", v.reason);
    }

    #[test]
    fn the_cause_is_what_most_batched_tokens_came_as() {
        // Each segment: one event of two tokens and three of one (5 tokens, 2 of them merged
        // by the engine, 3 held together after): held between, 60% of the batched tokens.
        let events: Vec<(u64, u32)> = (1..=4)
            .flat_map(|i| {
                let t = i * 10_000_000;
                [(t, 2), (t, 1), (t, 1), (t, 1)]
            })
            .collect();
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (20, 20, 4));
        assert_eq!(b.tokens_in_merged_events, 8);
        assert_eq!(b.cause(), Some(Cause::HeldBetween));
        let v = verdict(&b).expect("batched");
        assert!(
            v.reason.contains("5 tokens per batch p50, one batch every 10.0 ms p50; 60% of the batched tokens one to an event"),
            "{}",
            v.reason
        );
        // The same on socket stamps: only the merged events are seen, and they are the engine's.
        let b = batching(&[timeline(&events, false)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (20, 8, 4));
        assert_eq!(b.cause(), Some(Cause::EngineWrites));
        assert_eq!(verdict(&b), None, "8 of 20 tokens: under half");
        // A tie goes to the engine: a two-token event and two one-token events in one segment.
        let events: Vec<(u64, u32)> = (1..=4)
            .flat_map(|i| [(i * 1_000_000, 2), (i * 1_000_000, 1), (i * 1_000_000, 1)])
            .collect();
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens_batched, b.tokens_in_merged_events), (16, 8));
        assert_eq!(verdict(&b).map(|v| v.cause), Some(Cause::EngineWrites));
    }

    #[test]
    fn an_engine_merging_now_and_then_stays_under_the_share() {
        // vLLM's API loop behind its engine now and then: 5 of 40 events carry two tokens, each
        // its own segment. 10 of 45 tokens (22%) batched, all by the engine: no verdict.
        let events: Vec<(u64, u32)> = (1..=40)
            .map(|i| (i * 2_000_000, if i % 7 == 0 { 2 } else { 1 }))
            .collect();
        let b = batching(&[timeline(&events, true)]);
        assert_eq!((b.tokens, b.tokens_batched, b.batches), (45, 10, 5));
        assert_eq!(b.cause(), Some(Cause::EngineWrites));
        assert_eq!(verdict(&b), None);
    }

    #[test]
    fn periods_run_within_a_request_only() {
        // Two requests of two flushes each: one period per request, none across them.
        let b = batching(&[flushed(2, 5, true), flushed(2, 5, true)]);
        assert_eq!(b.batches, 4);
        assert_eq!(b.batch_period_ms_p50, Some(20.0));
    }
}
