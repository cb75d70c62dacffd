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
        for (t, tokens) in groups(tl, by_segment) {
            if !window.contains(&t) {
                continue;
            }
            self.tokens += tokens;
            if tokens < 2 {
                continue;
            }
            self.tokens_batched += tokens;
            self.batch_tokens.push(tokens as f64);
            if let Some(prev) = last_batch {
                self.period_ms.push(clock.delta_ns(prev, t) as f64 / 1e6);
            }
            last_batch = Some(t);
        }
    }

    pub fn summary(&self) -> Batching {
        Batching {
            tokens: self.tokens,
            tokens_batched: self.tokens_batched,
            batches: self.batch_tokens.len() as u64,
            batch_tokens_p50: stats::percentile(&self.batch_tokens, 50.0),
            batch_period_ms_p50: stats::percentile(&self.period_ms, 50.0),
            by_segment: self.timelines > 0 && self.by_segment == self.timelines,
        }
    }
}

/// The token groups of a timeline in order: `(stamp, tokens)`, one per segment (consecutive
/// events stamped alike) when `by_segment`, else one per event.
fn groups(tl: &Timeline, by_segment: bool) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut events = tl.events.iter().filter(|e| e.tokens > 0).peekable();
    std::iter::from_fn(move || {
        let first = events.next()?;
        let mut tokens = u64::from(first.tokens);
        while let Some(next) = events.next_if(|e| by_segment && e.t == first.t) {
            tokens += u64::from(next.tokens);
        }
        Some((first.t, tokens))
    })
}

/// How the tokens of one measurement arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Batching {
    pub tokens: u64,
    /// Tokens that came in batches (two or more together), and how many batches.
    pub tokens_batched: u64,
    pub batches: u64,
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
}

/// The upstream-batching verdict: why the run's tokens were batched upstream, with the
/// evidence and the usual causes and fixes; `None` when they were not (as far as the stamps
/// tell).
pub fn verdict(b: &Batching) -> Option<String> {
    let share = b.batched_percent()?;
    if share < 100.0 * BATCHED_SHARE || b.batches < MIN_BATCHES {
        return None;
    }
    let unit = if b.by_segment {
        "several to a TCP segment"
    } else {
        "several to an event"
    };
    let period = b.batch_period_ms_p50.map_or(String::new(), |p| {
        format!(", one batch every {p:.1} ms p50")
    });
    Some(format!(
        "{share:.0}% of tokens arrived {unit} ({:.0} tokens per batch p50{period}) while the client kept up: something upstream held them — a buffering proxy (nginx: proxy_buffering off, or the X-Accel-Buffering: no response header; an ingress's proxy-buffering annotation), a gateway, or the engine's own output coalescing (a stream interval). ITL and TTFT here describe that batching, not the engine",
        b.batch_tokens_p50.unwrap_or(0.0)
    ))
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
        let why = verdict(&b).expect("batched");
        assert!(why.starts_with("100% of tokens arrived several to a TCP segment (10 tokens per batch p50, one batch every 20.0 ms p50)"), "{why}");
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
        let why = verdict(&b).expect("batched by the event");
        assert!(
            why.contains("several to an event (4 tokens per batch p50"),
            "{why}"
        );
    }

    #[test]
    fn periods_run_within_a_request_only() {
        // Two requests of two flushes each: one period per request, none across them.
        let b = batching(&[flushed(2, 5, true), flushed(2, 5, true)]);
        assert_eq!(b.batches, 4);
        assert_eq!(b.batch_period_ms_p50, Some(20.0));
    }
}
