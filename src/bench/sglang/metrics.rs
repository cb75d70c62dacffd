//! `sglang.bench_serving`'s per-request readings and run metrics, computed as its Python code
//! does (definitions in `docs/bench-sglang.md`), from plain per-request inputs.
//!
//! Owns: [`Reader`] (which of SGLang's three stream readers a backend uses), [`read`] (one
//! request's events -> [`RequestOutput`]: TTFT, ITL list, latency, output length, success) and
//! [`compute`] (outputs -> [`Metrics`]). It must never do IO, read a clock (stamps arrive as
//! data) or serialise: `record` and `console` own the shapes.
//!
//! The readers (SGLang `python/sglang/bench_serving.py`, commit `0033168f0f58b2bc05aa0273bd475d9c01bafb1c`):
//! - Native `/generate` (`sglang`, `sglang-native`): an event counts once the *cumulative* `text`
//!   is non-empty. The first such event is the first token (TTFT). On each later one the new
//!   tokens are the growth of `meta_info.completion_tokens` since the last counted event; an
//!   event that adds none is skipped outright (its stamp is not kept), and the gap since the
//!   last counted event is split evenly into one ITL entry per new token. Output length: the
//!   last `completion_tokens` seen.
//! - OpenAI completions (`sglang-oai`, `vllm`, `lmdeploy`): an event counts when
//!   `choices[0].text` is non-empty; one ITL entry per counted event after the first, whatever
//!   it carried. Output length: `usage.completion_tokens` of the last counted event that had
//!   usage, else the requested length.
//! - OpenAI chat (`*-chat`): an event counts when `choices[0].delta` carries text, reasoning
//!   (`reasoning_content` / `reasoning`) or content (SGLang 0.5.23 counts thoughts like
//!   content); output length from `usage.completion_tokens` on *any* event.
//! - All three: latency ends at the last non-empty line read, `[DONE]` included; a 200 stream
//!   with no counted event still succeeds, with TTFT 0, no ITL and the requested length.
//!
//! Run metrics: over successful requests; TPOT = `(latency - ttft) / (output_len - 1)` only when
//! `output_len > 1`; empty lists give zeros (`np.mean(xs or 0)`) except E2E latency, which numpy
//! turns into NaN; `concurrency` = sum of latencies / duration; the peak figures count tokens
//! and running requests in one-second buckets from the earliest successful start.

use crate::analysis::stats;
use crate::clock::Clock;
use crate::timeline::{Channel, Timeline, TokenCountSource};

const NS_PER_S: f64 = 1e9;

/// Which of SGLang's request functions reads a backend's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `async_request_sglang_generate`.
    Native,
    /// `async_request_openai_completions`.
    Completions,
    /// `async_request_openai_chat_completions`.
    Chat,
}

/// One stream event (one non-empty `data:` line that was not `[DONE]`) as SGLang reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamEvent {
    /// When the read that completed it returned, in ns on the requests' common base.
    pub t_ns: u64,
    /// The field SGLang tests was non-empty: the cumulative `text` (native), `choices[0].text`
    /// (completions) or `choices[0].delta.content` (chat).
    pub has_text: bool,
    /// Native: the running `meta_info.completion_tokens`. OpenAI: this event's
    /// `usage.completion_tokens`, when it carried usage.
    pub completion_tokens: Option<u64>,
}

/// One request as it ended, before SGLang's reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestInput {
    /// SGLang's `st`: when the request function started (after the concurrency slot).
    pub start_ns: u64,
    /// The dataset's prompt length.
    pub prompt_len: u64,
    /// The output length asked for (`max_new_tokens` / `max_tokens`).
    pub requested_output_len: u64,
    pub events: Vec<StreamEvent>,
    /// The last non-empty line read, `[DONE]` included; `None` when no line came.
    pub last_line_ns: Option<u64>,
    /// Why the request failed (non-200, a broken stream); `None` when it was read to its end.
    pub error: Option<String>,
}

impl RequestInput {
    /// A finished timeline as `reader` sees it; times become ns after `base_raw` (the
    /// benchmark start) on `clock`. The request starts at the timeline's intended start.
    pub fn from_timeline(
        reader: Reader,
        t: &Timeline,
        clock: &Clock,
        base_raw: u64,
        prompt_len: u64,
        requested_output_len: u64,
    ) -> RequestInput {
        let ns = |raw: u64| clock.delta_ns(base_raw, raw);
        let mut events = Vec::with_capacity(t.events.len() + 1);
        let (mut running, mut seen_text) = (0u64, false);
        let continuous = t.token_count_source == TokenCountSource::ContinuousUsage;
        for e in &t.events {
            running += e.tokens as u64;
            // SGLang 0.5.23's chat reader counts reasoning as output text.
            let text = e.channel == Channel::Content
                || (reader == Reader::Chat && e.channel == Channel::Reasoning);
            seen_text |= text;
            events.push(StreamEvent {
                t_ns: ns(e.t),
                // The native `text` is cumulative: non-empty from the first event that added
                // text on.
                has_text: if reader == Reader::Native {
                    seen_text
                } else {
                    text
                },
                completion_tokens: (reader == Reader::Native || continuous).then_some(running),
            });
        }
        // A usage-only chunk (no choices) is no event of the timeline; chat reads its usage.
        if let (Some(u), false) = (t.usage, reader == Reader::Native) {
            events.push(StreamEvent {
                t_ns: t.last_message.map_or(0, ns),
                has_text: false,
                completion_tokens: Some(u.completion_tokens),
            });
        }
        RequestInput {
            start_ns: ns(t.intended_start),
            prompt_len,
            requested_output_len,
            events,
            last_line_ns: t.end.or(t.last_message).map(ns),
            error: t.outcome.as_ref().err().map(|e| e.to_string()),
        }
    }
}

/// SGLang's `RequestFuncOutput`, in seconds as it keeps them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestOutput {
    pub success: bool,
    /// `st` on the requests' common base (for the peak figures).
    pub start_ns: u64,
    pub ttft_s: f64,
    pub itl_s: Vec<f64>,
    pub latency_s: f64,
    pub prompt_len: u64,
    pub output_len: u64,
    pub error: String,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / NS_PER_S
}

/// Reads one request the way `reader` does.
pub fn read(reader: Reader, r: &RequestInput) -> RequestOutput {
    let mut out = RequestOutput {
        start_ns: r.start_ns,
        prompt_len: r.prompt_len,
        ..RequestOutput::default()
    };
    if let Some(e) = &r.error {
        out.error = e.clone();
        return out;
    }
    // With no line at all, SGLang's `latency` is never bound and the request fails.
    let Some(last) = r.last_line_ns else {
        out.error = "the stream ended without a line".into();
        return out;
    };
    let walk = match reader {
        Reader::Native => walk_native(r),
        Reader::Completions | Reader::Chat => walk_openai(reader, r),
    };
    out.success = true;
    out.ttft_s = walk.ttft_s;
    out.itl_s = walk.itl_s;
    out.output_len = walk.output_len;
    out.latency_s = secs(last.saturating_sub(r.start_ns));
    out
}

struct Walk {
    ttft_s: f64,
    itl_s: Vec<f64>,
    output_len: u64,
}

fn walk_native(r: &RequestInput) -> Walk {
    let mut w = Walk {
        ttft_s: 0.0,
        itl_s: Vec::new(),
        output_len: r.requested_output_len,
    };
    let mut first = true;
    let (mut recent_ns, mut last_len) = (r.start_ns, 0i128);
    for ev in r.events.iter().filter(|e| e.has_text) {
        if let Some(c) = ev.completion_tokens {
            w.output_len = c;
        }
        if first {
            first = false;
            w.ttft_s = secs(ev.t_ns.saturating_sub(r.start_ns));
        } else {
            let new = w.output_len as i128 - last_len;
            if new == 0 {
                continue;
            }
            // A count that went backwards adds no entry (Python repeats a list a negative
            // number of times) but still moves the marks.
            if new > 0 {
                let gap = secs(ev.t_ns.saturating_sub(recent_ns)) / new as f64;
                w.itl_s.extend(std::iter::repeat_n(gap, new as usize));
            }
        }
        recent_ns = ev.t_ns;
        last_len = w.output_len as i128;
    }
    w
}

fn walk_openai(reader: Reader, r: &RequestInput) -> Walk {
    let mut w = Walk {
        ttft_s: 0.0,
        itl_s: Vec::new(),
        output_len: r.requested_output_len,
    };
    let mut first = true;
    let mut recent_ns = r.start_ns;
    for ev in &r.events {
        if ev.has_text {
            if first {
                first = false;
                w.ttft_s = secs(ev.t_ns.saturating_sub(r.start_ns));
            } else {
                w.itl_s.push(secs(ev.t_ns.saturating_sub(recent_ns)));
            }
            recent_ns = ev.t_ns;
        }
        // Completions reads usage only inside its text branch; chat on every event.
        if ev.has_text || reader == Reader::Chat {
            if let Some(c) = ev.completion_tokens {
                w.output_len = c;
            }
        }
    }
    w
}

/// SGLang's `BenchmarkMetrics` (times in ms, as its keys say).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub completed: u64,
    /// The input tokens of the completed requests, vision tokens included.
    pub total_input: u64,
    /// Of them, the vision tokens: `Some` for the image dataset alone (SGLang prints the row
    /// for its image datasets only).
    pub total_input_vision: Option<u64>,
    pub total_output: u64,
    pub total_output_retokenized: u64,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub output_throughput_retokenized: f64,
    pub total_throughput: f64,
    pub total_throughput_retokenized: f64,
    pub ttft_ms: Stats,
    pub tpot_ms: Stats,
    pub itl_ms: Stats,
    pub e2e_latency_ms: Stats,
    pub concurrency: f64,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: u64,
}

/// The prompt tokens of the successful requests, as read: what SGLang's total leaves out for
/// multi-turn rows ([`Metrics::without_dataset_input`]).
pub fn completed_input(outputs: &[RequestOutput]) -> u64 {
    outputs
        .iter()
        .filter(|o| o.success)
        .map(|o| o.prompt_len)
        .sum()
}

impl Metrics {
    /// The image dataset's figures: the completed requests' `text` and `vision` tokens make
    /// the input total and the throughputs built on it (SGLang's rows count them together).
    pub fn with_vision(&mut self, text: u64, vision: u64, duration_s: f64) {
        self.total_input_vision = Some(vision);
        self.total_input = text + vision;
        self.input_throughput = self.total_input as f64 / duration_s;
        self.total_throughput = (self.total_input + self.total_output) as f64 / duration_s;
        self.total_throughput_retokenized =
            (self.total_input + self.total_output_retokenized) as f64 / duration_s;
    }

    /// The text tokens of the input total.
    pub fn total_input_text(&self) -> u64 {
        self.total_input - self.total_input_vision.unwrap_or(0)
    }

    /// SGLang's figures for multi-turn rows (`--gsp-num-turns` above 1): it totals the input
    /// over the dataset's rows and passes none for conversations, so the input total and the
    /// throughputs built on it count no input (each round's server count stays in
    /// `input_lens`).
    pub fn without_dataset_input(&mut self, duration_s: f64) {
        self.total_input = 0;
        self.input_throughput = 0.0;
        self.total_throughput = self.total_output as f64 / duration_s;
        self.total_throughput_retokenized = self.total_output_retokenized as f64 / duration_s;
    }
}

/// The figures SGLang reports for one list.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    /// `np.<stat>(xs or 0)`: an empty list is the list `[0]`.
    fn or_zero(xs: &[f64], scale: f64) -> Stats {
        if xs.is_empty() {
            return Stats::default();
        }
        Stats::of(xs, scale)
    }

    /// numpy's figures of a non-empty list, or NaN everywhere for an empty one (what numpy
    /// answers for `np.mean([])`).
    fn or_nan(xs: &[f64], scale: f64) -> Stats {
        if xs.is_empty() {
            return Stats {
                mean: f64::NAN,
                median: f64::NAN,
                std: f64::NAN,
                p90: f64::NAN,
                p95: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        Stats::of(xs, scale)
    }

    fn of(xs: &[f64], scale: f64) -> Stats {
        let mut sorted = xs.to_vec();
        sorted.sort_unstable_by(f64::total_cmp);
        let get = |v: Option<f64>| v.unwrap_or(f64::NAN) * scale;
        Stats {
            mean: get(stats::mean(xs)),
            median: get(stats::median_sorted(&sorted)),
            std: get(stats::std(xs)),
            p90: get(stats::percentile_sorted(&sorted, 90.0)),
            p95: get(stats::percentile_sorted(&sorted, 95.0)),
            p99: get(stats::percentile_sorted(&sorted, 99.0)),
            max: get(sorted.last().copied()),
        }
    }
}

/// The output lengths SGLang reports per request: the reading's length, 0 for a failure.
pub fn output_lens(outputs: &[RequestOutput]) -> Vec<u64> {
    outputs
        .iter()
        .map(|o| if o.success { o.output_len } else { 0 })
        .collect()
}

/// The run's metrics. `retokenized[i]` is request i's generated text counted again with the
/// client's tokenizer (ignored for failures); `duration_s` is SGLang's benchmark duration.
pub fn compute(outputs: &[RequestOutput], retokenized: &[u64], duration_s: f64) -> Metrics {
    let mut m = Metrics::default();
    let (mut ttfts, mut tpots, mut itls, mut e2e) = (vec![], vec![], vec![], vec![]);
    for (i, o) in outputs.iter().enumerate().filter(|(_, o)| o.success) {
        m.completed += 1;
        m.total_input += o.prompt_len;
        m.total_output += o.output_len;
        m.total_output_retokenized += retokenized.get(i).copied().unwrap_or(0);
        if o.output_len > 1 {
            tpots.push((o.latency_s - o.ttft_s) / (o.output_len - 1) as f64);
        }
        itls.extend_from_slice(&o.itl_s);
        ttfts.push(o.ttft_s);
        e2e.push(o.latency_s);
    }
    let per_s = |x: f64| x / duration_s;
    m.request_throughput = per_s(m.completed as f64);
    m.input_throughput = per_s(m.total_input as f64);
    m.output_throughput = per_s(m.total_output as f64);
    m.output_throughput_retokenized = per_s(m.total_output_retokenized as f64);
    m.total_throughput = per_s((m.total_input + m.total_output) as f64);
    m.total_throughput_retokenized = per_s((m.total_input + m.total_output_retokenized) as f64);
    m.ttft_ms = Stats::or_zero(&ttfts, 1e3);
    m.tpot_ms = Stats::or_zero(&tpots, 1e3);
    m.itl_ms = Stats::or_zero(&itls, 1e3);
    m.e2e_latency_ms = Stats::or_nan(&e2e, 1e3);
    m.concurrency = per_s(e2e.iter().sum());
    let (tok, req) = peaks(outputs);
    m.max_output_tokens_per_s = tok;
    m.max_concurrent_requests = req;
    m
}

/// The peak output tokens in one second and the peak running requests in one second, counted
/// in one-second buckets from the earliest successful start (a request counts in every bucket
/// from its start's to its end's).
fn peaks(outputs: &[RequestOutput]) -> (f64, u64) {
    let ok: Vec<&RequestOutput> = outputs.iter().filter(|o| o.success).collect();
    let Some(t0) = ok.iter().map(|o| secs(o.start_ns)).reduce(f64::min) else {
        return (0.0, 0);
    };
    let end = ok
        .iter()
        .map(|o| secs(o.start_ns) + o.latency_s)
        .fold(f64::MIN, f64::max);
    let n = (end - t0).ceil() as usize + 1;
    let (mut tokens, mut running) = (vec![0u64; n], vec![0u64; n]);
    for o in &ok {
        let start = secs(o.start_ns);
        let mut t = start + o.ttft_s;
        let mut bump = |t: f64| {
            let b = (t - t0).trunc();
            if b >= 0.0 && (b as usize) < n {
                tokens[b as usize] += 1;
            }
        };
        bump(t);
        for itl in &o.itl_s {
            t += itl;
            bump(t);
        }
        let first = (start - t0).trunc() as usize;
        let last = (start + o.latency_s - t0).trunc() as usize;
        for r in running.iter_mut().take((last + 1).min(n)).skip(first) {
            *r += 1;
        }
    }
    let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    (max(&tokens) as f64, max(&running))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t_ms: u64, has_text: bool, c: Option<u64>) -> StreamEvent {
        StreamEvent {
            t_ns: t_ms * 1_000_000,
            has_text,
            completion_tokens: c,
        }
    }

    fn input(events: &[StreamEvent], last_ms: u64) -> RequestInput {
        RequestInput {
            start_ns: 0,
            prompt_len: 7,
            requested_output_len: 16,
            events: events.to_vec(),
            last_line_ns: Some(last_ms * 1_000_000),
            error: None,
        }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn native_splits_each_gap_over_the_new_tokens_and_skips_events_without_any() {
        // 10 ms: first text (2 tokens so far); 30 ms: +3 tokens; 35 ms: no new token
        // (skipped, its stamp not kept); 45 ms: +1 token; [DONE] at 50 ms.
        let evs = [
            ev(5, false, Some(0)),
            ev(10, true, Some(2)),
            ev(30, true, Some(5)),
            ev(35, true, Some(5)),
            ev(45, true, Some(6)),
        ];
        let o = read(Reader::Native, &input(&evs, 50));
        assert!(o.success);
        assert!((o.ttft_s - 0.010).abs() < 1e-12);
        close(&o.itl_s, &[0.020 / 3.0, 0.020 / 3.0, 0.020 / 3.0, 0.015]);
        assert_eq!(o.output_len, 6);
        assert!((o.latency_s - 0.050).abs() < 1e-12);
    }

    #[test]
    fn chat_counts_reasoning_as_text_and_completions_do_not() {
        let clock = Clock::new();
        let mut t = Timeline::new(0, 2, false);
        for (ch, at) in [(Channel::Reasoning, 10), (Channel::Content, 20)] {
            t.events.push(crate::timeline::EventRecord {
                t: at,
                tokens: 1,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: ch,
            });
        }
        let has = |r| -> Vec<bool> {
            RequestInput::from_timeline(r, &t, &clock, 0, 3, 2)
                .events
                .iter()
                .map(|e| e.has_text)
                .collect()
        };
        assert_eq!(
            has(Reader::Chat),
            [true, true],
            "SGLang 0.5.23 counts thoughts"
        );
        assert_eq!(has(Reader::Completions), [false, true]);
    }

    #[test]
    fn completions_take_one_gap_per_text_event_and_usage_only_with_text() {
        let evs = [
            ev(10, true, None),
            ev(20, false, Some(99)), // usage without text: completions ignore it
            ev(25, true, Some(4)),
            ev(40, true, None),
        ];
        let o = read(Reader::Completions, &input(&evs, 41));
        close(&[o.ttft_s], &[0.010]);
        close(&o.itl_s, &[0.015, 0.015]);
        assert_eq!(o.output_len, 4);
        let chat = read(Reader::Chat, &input(&evs, 41));
        assert_eq!(chat.output_len, 4, "the last usage seen by chat is 4");
        let evs = [ev(10, true, None), ev(20, false, Some(9))];
        assert_eq!(read(Reader::Chat, &input(&evs, 21)).output_len, 9);
        assert_eq!(read(Reader::Completions, &input(&evs, 21)).output_len, 16);
    }

    #[test]
    fn a_stream_without_text_succeeds_with_zero_ttft_and_the_requested_length() {
        let evs = [ev(10, false, Some(0))];
        let o = read(Reader::Native, &input(&evs, 12));
        assert!(o.success);
        assert_eq!((o.ttft_s, o.itl_s.len(), o.output_len), (0.0, 0, 16));
        let none = read(
            Reader::Native,
            &RequestInput {
                last_line_ns: None,
                ..input(&[], 0)
            },
        );
        assert!(!none.success);
    }

    #[test]
    fn metrics_follow_numpy_and_the_peaks_count_one_second_buckets() {
        let a = RequestOutput {
            success: true,
            start_ns: 0,
            ttft_s: 0.5,
            itl_s: vec![0.25, 0.5, 0.5],
            latency_s: 1.75,
            prompt_len: 10,
            output_len: 4,
            error: String::new(),
        };
        let b = RequestOutput {
            start_ns: 1_500_000_000,
            ttft_s: 0.25,
            itl_s: vec![],
            latency_s: 0.25,
            output_len: 1,
            ..a.clone()
        };
        let failed = RequestOutput {
            success: false,
            ..a.clone()
        };
        let m = compute(&[a, b, failed], &[5, 2, 100], 2.0);
        assert_eq!((m.completed, m.total_input, m.total_output), (2, 20, 5));
        assert_eq!(m.total_output_retokenized, 7);
        assert!((m.output_throughput - 2.5).abs() < 1e-12);
        assert!((m.ttft_ms.mean - 375.0).abs() < 1e-9);
        // TPOT only for a: (1.75 - 0.5) / 3.
        assert!((m.tpot_ms.mean - 1250.0 / 3.0).abs() < 1e-9);
        assert!((m.itl_ms.max - 500.0).abs() < 1e-9);
        assert!((m.concurrency - 1.0).abs() < 1e-12);
        // Tokens of a at 0.5, 0.75 (bucket 0), 1.25, 1.75 (bucket 1); b at 1.75 (bucket 1).
        assert_eq!(m.max_output_tokens_per_s, 3.0);
        // a runs in buckets 0-1, b in bucket 1.
        assert_eq!(m.max_concurrent_requests, 2);
        let empty = compute(&[], &[], 1.0);
        assert_eq!(empty.ttft_ms.mean, 0.0);
        assert!(empty.e2e_latency_ms.mean.is_nan());
    }
}
