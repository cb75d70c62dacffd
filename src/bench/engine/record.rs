//! One request as a plain record: [`RequestRecord`] (nanoseconds since the run's start, built
//! from a [`Timeline`] or by hand) and the rules that choose its first token, its end and where
//! its latency starts. The per-request half of the figures: every front end's metrics and
//! every scale-out step (shards, merge, steady state) start from these records.
//!
//! It must never do IO, read a clock (stamps arrive as data), or serialise.
//!
//! - TTFT: first counted event - start. The counted events are the choice-carrying ones from the
//!   first one the [`TtftPredicate`] accepts (the first event with a non-empty `choices`, i.e.
//!   the role-only chat chunk; or the first with content).
//! - E2EL: last counted event - start (or the last message, [`RequestEnd::LastMessage`]).
//! - ITL: the gaps between consecutive counted events; a chunk carrying several tokens is one gap.
//! - TPOT: `(E2EL - TTFT) / (output_tokens - 1)`, only when `output_tokens > 1`.
//! - Output tokens: `usage.completion_tokens`; when that is missing or 0, the sum of per-event
//!   counts.

use std::fmt;

use crate::clock::Clock;
use crate::timeline::{Channel, ErrorKind, Timeline};

/// Which event marks the first token (and so TTFT and the start of the counted events).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TtftPredicate {
    /// The first event with a non-empty `choices` list (current vLLM; for chat this is the
    /// role-only chunk even when its content is empty).
    #[default]
    FirstChoice,
    /// The first event that carried output: content, reasoning or a tool call.
    FirstContent,
}

impl TtftPredicate {
    /// The rule's name in our own figures.
    pub fn as_str(self) -> &'static str {
        match self {
            TtftPredicate::FirstChoice => "first_choice",
            TtftPredicate::FirstContent => "first_content",
        }
    }
}

/// Where a request ends, and whether a stream without a choice-carrying event counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RequestEnd {
    /// Current vLLM, both endpoints: E2EL ends at the last choice-carrying event, and a stream
    /// without one fails ("Never received a valid chunk to calculate TTFT").
    #[default]
    LastChoice,
    /// vLLM's older chat benchmark: E2EL ends at the last JSON message before `[DONE]` (the
    /// usage-only chunk included), and a 200 stream without a choice-carrying event still
    /// succeeds, with TTFT 0 (its default) and no ITL.
    LastMessage,
}

impl RequestEnd {
    /// The rule's name in our own figures.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestEnd::LastChoice => "last_choice",
            RequestEnd::LastMessage => "last_message",
        }
    }
}

/// Where a request's latency starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LatencyOrigin {
    /// The scheduled send time (`Timeline::intended_start`): no coordinated omission.
    #[default]
    Scheduled,
    /// Just before the first request byte was written (`Timeline::send_start`), as vLLM does.
    /// Falls back to the scheduled time when the request was never written.
    Sent,
}

impl LatencyOrigin {
    /// The origin's name in our own figures.
    pub fn as_str(self) -> &'static str {
        match self {
            LatencyOrigin::Scheduled => "scheduled",
            LatencyOrigin::Sent => "sent",
        }
    }
}

/// Why a request did not count as completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// The request failed with a classified error.
    Error(ErrorKind),
    /// The stream ended cleanly without an event the [`TtftPredicate`] accepts (vLLM: "Never
    /// received a valid chunk to calculate TTFT").
    NoOutput,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Error(k) => k.as_str(),
            FailureKind::NoOutput => "no_output",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request, in nanoseconds since a common base (the benchmark start).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestRecord {
    /// Where latency starts (see [`LatencyOrigin`]).
    pub start_ns: u64,
    /// The counted events: the choice-carrying events from the first-token event on, ascending.
    /// Empty when there was no first token.
    pub chunk_times_ns: Vec<u64>,
    /// Output tokens (usage, else the per-event sum).
    pub output_tokens: u64,
    /// Prompt length as the dataset defined it (vLLM uses the dataset's `prompt_len`).
    pub input_tokens: u64,
    /// The classified failure, `None` for a request that ended well.
    pub error: Option<ErrorKind>,
    /// Client-side wait for a concurrency slot (`--max-concurrency`), reported, never hidden.
    pub queue_ns: u64,
    /// Where latency ends when that is not the last counted event ([`RequestEnd::LastMessage`]);
    /// `None`: the last counted event.
    pub end_ns: Option<u64>,
    /// A clean stream without counted events succeeds ([`RequestEnd::LastMessage`]).
    pub empty_is_success: bool,
}

/// How to turn a [`Timeline`] into a [`RequestRecord`].
#[derive(Clone, Copy, Debug)]
pub struct RecordOptions {
    /// Raw clock stamp of the benchmark start; all times become nanoseconds after it.
    pub base_raw: u64,
    pub origin: LatencyOrigin,
    pub predicate: TtftPredicate,
    pub end: RequestEnd,
}

impl RequestRecord {
    /// A successful request for tests: started at `start`, a one-token chunk at each of
    /// `chunks`, 10 input tokens (ns since the run's base).
    #[cfg(test)]
    pub fn succeeded(start: u64, chunks: &[u64]) -> RequestRecord {
        RequestRecord {
            start_ns: start,
            chunk_times_ns: chunks.to_vec(),
            output_tokens: chunks.len() as u64,
            input_tokens: 10,
            error: None,
            queue_ns: 0,
            end_ns: None,
            empty_is_success: false,
        }
    }

    /// Converts a finished timeline (raw stamps of `clock`).
    pub fn from_timeline(
        t: &Timeline,
        clock: &Clock,
        opts: &RecordOptions,
        input_tokens: u64,
        queue_ns: u64,
    ) -> RequestRecord {
        let start_raw = match opts.origin {
            LatencyOrigin::Scheduled => t.intended_start,
            LatencyOrigin::Sent => t.send_start.unwrap_or(t.intended_start),
        };
        let first = match opts.predicate {
            TtftPredicate::FirstChoice => t.events.first().map(|_| 0),
            TtftPredicate::FirstContent => {
                t.events.iter().position(|e| e.channel != Channel::Empty)
            }
        };
        let chunk_times_ns = match first {
            Some(i) => t.events[i..]
                .iter()
                .map(|e| clock.delta_ns(opts.base_raw, e.t))
                .collect(),
            None => Vec::new(),
        };
        RequestRecord {
            start_ns: clock.delta_ns(opts.base_raw, start_raw),
            chunk_times_ns,
            // vLLM falls back to counting the text when usage is missing *or zero*.
            output_tokens: match t.output_tokens() {
                0 => t.event_tokens(),
                n => n,
            },
            input_tokens,
            error: t.error_kind(),
            queue_ns,
            end_ns: match opts.end {
                RequestEnd::LastChoice => None,
                RequestEnd::LastMessage => t.last_message.map(|m| clock.delta_ns(opts.base_raw, m)),
            },
            empty_is_success: opts.end == RequestEnd::LastMessage,
        }
    }

    /// `None` when the request completed, else why not.
    pub fn failure(&self) -> Option<FailureKind> {
        match self.error {
            Some(k) => Some(FailureKind::Error(k)),
            None if self.chunk_times_ns.is_empty() && !self.empty_is_success => {
                Some(FailureKind::NoOutput)
            }
            None => None,
        }
    }

    pub fn is_success(&self) -> bool {
        self.failure().is_none()
    }

    /// Time to first token; `None` without a first token (0 when such a stream succeeds, as
    /// vLLM's older chat rule leaves it).
    pub fn ttft_ns(&self) -> Option<u64> {
        match self.chunk_times_ns.first() {
            Some(&t) => Some(t.saturating_sub(self.start_ns)),
            None => self.empty_is_success.then_some(0),
        }
    }

    /// End-to-end latency: the end ([`RequestRecord::end_ns`], else the last counted event) -
    /// start.
    pub fn e2el_ns(&self) -> Option<u64> {
        match self.end_ns.or_else(|| self.chunk_times_ns.last().copied()) {
            Some(t) => Some(t.saturating_sub(self.start_ns)),
            None => self.empty_is_success.then_some(0),
        }
    }

    /// When the request ended, on the records' common base (its start when it has no end).
    pub fn end_time_ns(&self) -> u64 {
        self.start_ns + self.e2el_ns().unwrap_or(0)
    }

    /// Time per output token after the first; `None` unless `output_tokens > 1`.
    pub fn tpot_ns(&self) -> Option<f64> {
        if self.output_tokens <= 1 {
            return None;
        }
        let (ttft, e2el) = (self.ttft_ns()?, self.e2el_ns()?);
        Some(e2el.saturating_sub(ttft) as f64 / (self.output_tokens - 1) as f64)
    }

    /// Gaps between consecutive counted events.
    pub fn itls_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunk_times_ns
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
    }
}
