//! The per-request timeline: the unit every later feature (stream, matrix, bench serve,
//! selftest) consumes.
//!
//! A `Timeline` is filled by the one read loop in `net`: raw clock stamps for each phase, one
//! [`EventRecord`] per SSE event that carried output, the final usage, the finish reason and a
//! classified [`Outcome`]. It must not allocate per token: `events` is pre-sized, text is only
//! kept when asked for (and then appended to a pre-sized `String`).

use std::fmt;

/// Which part of the output an event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// Completions `text` or chat `delta.content`.
    Content,
    /// Chat `delta.reasoning` / `delta.reasoning_content`.
    Reasoning,
    /// Chat `delta.tool_calls`.
    ToolCall,
    /// A choice-carrying event with no output text (e.g. the role-only first chat chunk, or the
    /// chunk that only carries `finish_reason`).
    Empty,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Content => "content",
            Channel::Reasoning => "reasoning",
            Channel::ToolCall => "tool_call",
            Channel::Empty => "empty",
        }
    }
}

/// Where the per-event token counts came from, best first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenCountSource {
    /// Running `usage.completion_tokens` on every chunk (`continuous_usage_stats`), or an
    /// engine's own running count (SGLang `meta_info.completion_tokens`, llama.cpp
    /// `tokens_predicted`): exact.
    ContinuousUsage,
    /// Length of the per-chunk `token_ids` array (`return_token_ids`), or the protocol's own
    /// token per event (TGI's `token` object, llama.cpp's `tokens`): exact.
    TokenIds,
    /// One token per non-empty chunk: an estimate (wrong under output merging or speculation).
    #[default]
    Chunks,
}

impl TokenCountSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenCountSource::ContinuousUsage => "continuous_usage",
            TokenCountSource::TokenIds => "token_ids",
            TokenCountSource::Chunks => "chunks",
        }
    }
}

/// Token usage as the server reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens` where the server sends it.
    pub cached_tokens: Option<u64>,
}

/// The server's own timing of one request, in milliseconds, as vLLM sends it when started with
/// `--enable-per-request-metrics` (the `metrics` object of the final usage chunk). Each field is
/// `None` where the server left it out or sent something other than a number.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerTiming {
    /// Engine arrival -> first scheduled (`queue_time_ms`).
    pub queue_ms: Option<f64>,
    /// First scheduled -> first output token (`time_to_first_token_ms`).
    pub ttft_ms: Option<f64>,
    /// First -> last output token (`generation_time_ms`).
    pub generation_ms: Option<f64>,
    /// `generation_time_ms / (output tokens - 1)` (`mean_itl_ms`).
    pub mean_itl_ms: Option<f64>,
}

/// Why a stream ended, as the server said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Abort,
    /// Any other value the server sent (kept out of the hot path: no allocation).
    Other,
}

impl FinishReason {
    pub fn parse(s: &[u8]) -> Self {
        match s {
            // TGI says `eos_token`; llama.cpp's native `stop_type` says `eos`, `word` or `limit`.
            b"stop" | b"eos" | b"eos_token" | b"word" | b"stop_sequence" | b"end_turn" => {
                FinishReason::Stop
            }
            b"length" | b"max_tokens" | b"limit" => FinishReason::Length,
            b"tool_calls" | b"function_call" => FinishReason::ToolCalls,
            b"content_filter" => FinishReason::ContentFilter,
            b"abort" | b"cancelled" => FinishReason::Abort,
            _ => FinishReason::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Abort => "abort",
            FinishReason::Other => "other",
        }
    }
}

/// One SSE event that carried a non-empty `choices` list (role-only, content, reasoning, tool
/// call, or finish-only). Usage-only events, comments and `[DONE]` are not recorded here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Raw clock stamp of the read that completed this event.
    pub t: u64,
    /// Output tokens this event carried (see [`Timeline::token_count_source`]).
    pub tokens: u32,
    /// How late the client woke up to the read that completed this event: ns between the
    /// kernel receiving the data and the read returning; 0 when unknown (the read kept the
    /// client's own stamp, see [`Timeline::stamp_source`]). Set after the observer saw it.
    pub wakeup_ns: u32,
    /// On the first event a read completed: the bytes the socket held when that read took its
    /// data (those it read and those it left, `TCP_CM_INQ`: `net::stamp::tcp_inq`). 0 on its
    /// other events, and when the kernel did not say (client stamps, TLS, not Linux).
    pub socket_bytes: u32,
    pub channel: Channel,
}

/// Why a read carries the client's own (TSC) stamp rather than the kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StampFallback {
    /// `--no-kernel-stamps` / `ClientConfig::kernel_stamps = false`.
    Disabled,
    /// TLS: a rustls record can span reads, so no one read's stamp belongs to an event.
    Tls,
    /// Not Linux: no `SO_TIMESTAMPING`.
    Unsupported,
    /// `setsockopt(SO_TIMESTAMPING)` failed on this connection.
    EnableFailed,
    /// A read returned data without a usable timestamp message.
    NoStamp,
    /// The stamp was later than the realtime clock read after it, or implausibly old: the
    /// realtime clock was stepped.
    Implausible,
    /// `--packet-stamps`: a byte the read's events ended on was not in the connection's packet
    /// ring (the ring was full, or it never saw the handshake); the read kept its own stamp.
    NotInRing,
}

impl StampFallback {
    pub fn as_str(self) -> &'static str {
        match self {
            StampFallback::Disabled => "disabled",
            StampFallback::Tls => "tls",
            StampFallback::Unsupported => "unsupported",
            StampFallback::EnableFailed => "enable_failed",
            StampFallback::NoStamp => "no_stamp",
            StampFallback::Implausible => "implausible",
            StampFallback::NotInRing => "not_in_ring",
        }
    }

    /// Why a read stamped for this reason puts no bound on its tokens' arrival, and what would
    /// give one: the words the console and the results say instead of a bound.
    pub fn why_no_bound(self) -> &'static str {
        match self {
            StampFallback::Disabled => {
                "--no-kernel-stamps: each read was stamped when the client woke up, and how late that was is unknown (drop the flag for kernel stamps)"
            }
            StampFallback::Tls => {
                "over TLS each read is stamped when rustls hands over the plaintext (a record can span reads, so no kernel stamp belongs to a token): how late the client woke up is unknown (measure over plain HTTP for bounds)"
            }
            StampFallback::Unsupported => {
                "this platform has no kernel receive stamps (SO_TIMESTAMPING, Linux): each read was stamped when the client woke up"
            }
            StampFallback::EnableFailed => {
                "the kernel refused receive stamps on the connection (setsockopt SO_TIMESTAMPING failed): each read was stamped when the client woke up"
            }
            StampFallback::NoStamp => {
                "reads returned without the kernel's receive stamp: each was stamped when the client woke up"
            }
            StampFallback::Implausible => {
                "the kernel's stamps were implausible (the realtime clock was stepped): those reads kept the client's own stamp"
            }
            StampFallback::NotInRing => {
                "the packet ring missed some segments (full, or it never saw the handshake): those reads kept their own stamps"
            }
        }
    }
}

/// Which clock stamped a timeline's reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StampSource {
    /// Every read carried the kernel's receive stamp.
    Kernel,
    /// `--packet-stamps`: every event carried the arrival of its own TCP segment, from the
    /// connection's packet ring (`net::packet`).
    Packet,
    /// Every read carried the client's own stamp, for this reason.
    ClientClock(StampFallback),
    /// Some of each; the reason is the last read that fell back.
    Mixed(StampFallback),
}

impl StampSource {
    /// `kernel`, `client_clock` or `mixed`: the report key (the reason is separate).
    pub fn as_str(self) -> &'static str {
        match self {
            StampSource::Kernel => "kernel",
            StampSource::Packet => "packet",
            StampSource::ClientClock(_) => "client_clock",
            StampSource::Mixed(_) => "mixed",
        }
    }

    /// Why some reads used another clock; `None` for [`StampSource::Kernel`] and
    /// [`StampSource::Packet`].
    pub fn fallback(self) -> Option<StampFallback> {
        match self {
            StampSource::Kernel | StampSource::Packet => None,
            StampSource::ClientClock(f) | StampSource::Mixed(f) => Some(f),
        }
    }

    /// The source of two sets of reads together (several timelines in one report).
    pub fn combine(self, other: StampSource) -> StampSource {
        use StampSource::*;
        match (self, other) {
            (Kernel, Kernel) => Kernel,
            (Packet, Packet) => Packet,
            (ClientClock(a), ClientClock(_)) => ClientClock(a),
            (Kernel, Packet) | (Packet, Kernel) => Mixed(StampFallback::NotInRing),
            (Kernel | Packet, x) | (x, Kernel | Packet) => {
                Mixed(x.fallback().unwrap_or(StampFallback::NoStamp))
            }
            (Mixed(a), _) | (_, Mixed(a)) => Mixed(a),
        }
    }

    /// `kernel`, `client_clock (tls)`, `mixed (no_stamp)`: for tables and the console.
    pub fn label(self) -> String {
        match self.fallback() {
            None => self.as_str().to_string(),
            Some(f) => format!("{} ({})", self.as_str(), f.as_str()),
        }
    }
}

/// Per-timeline tally of how its data reads were stamped (counters only: no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StampCounts {
    /// Reads whose every event carried its own segment's arrival (`--packet-stamps`).
    pub packet_reads: u32,
    pub kernel_reads: u32,
    pub client_reads: u32,
    /// Why the last read that used the client's clock did.
    pub fallback: Option<StampFallback>,
}

/// Classified failure kinds. These are statistics keys: never key counts by message strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// TCP connect failed (refused, unreachable, DNS).
    Connect,
    /// TLS handshake or certificate failure.
    Tls,
    /// The server answered with a non-2xx status.
    HttpStatus,
    /// A proxy in front of the engine answered for it: 502 (the engine unreachable or gone)
    /// or 504 (the engine too slow for the proxy's read timeout), `net::proxy`.
    Proxy,
    /// The bytes broke HTTP, chunked, SSE or JSON framing, or the connection closed early.
    Protocol,
    /// A 200 stream carried an error event.
    ServerError,
    TimeoutConnect,
    TimeoutFirstByte,
    /// No event arrived within the allowed gap.
    TimeoutGap,
    TimeoutTotal,
    /// No token arrived before the matrix's readiness gate gave up (`--ready-timeout`): the
    /// server accepted the request but produced nothing in time.
    TimeoutFirstToken,
    /// The client's own task for the request panicked (a bug in llmspeed): counted, never
    /// hidden.
    ClientPanic,
    /// We cancelled it (end of a measurement window, Ctrl-C).
    Cancelled,
    /// The matrix could not build a prompt of the planned size (the counter's answers could
    /// not be vouched for, or the server answered the counting requests with an error), so no
    /// measuring request was sent.
    Prompt,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::Connect,
        ErrorKind::Tls,
        ErrorKind::HttpStatus,
        ErrorKind::Proxy,
        ErrorKind::Protocol,
        ErrorKind::ServerError,
        ErrorKind::TimeoutConnect,
        ErrorKind::TimeoutFirstByte,
        ErrorKind::TimeoutGap,
        ErrorKind::TimeoutTotal,
        ErrorKind::TimeoutFirstToken,
        ErrorKind::ClientPanic,
        ErrorKind::Cancelled,
        ErrorKind::Prompt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::Proxy => "proxy",
            ErrorKind::Protocol => "protocol",
            ErrorKind::ServerError => "server_error",
            ErrorKind::TimeoutConnect => "timeout_connect",
            ErrorKind::TimeoutFirstByte => "timeout_first_byte",
            ErrorKind::TimeoutGap => "timeout_gap",
            ErrorKind::TimeoutTotal => "timeout_total",
            ErrorKind::TimeoutFirstToken => "timeout_first_token",
            ErrorKind::ClientPanic => "client_panic",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Prompt => "prompt",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure with a human message (built once, off the per-token path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
    pub kind: ErrorKind,
    /// HTTP status for [`ErrorKind::HttpStatus`].
    pub status: Option<u16>,
    /// One line: what happened, with the server's own message or a body excerpt where there is one.
    pub message: String,
}

impl RequestError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} (HTTP {}): {}", self.kind, s, self.message),
            None => write!(f, "{}: {}", self.kind, self.message),
        }
    }
}

impl std::error::Error for RequestError {}

/// How a request ended.
pub type Outcome = Result<(), RequestError>;

/// Everything measured about one streaming request. Stamps are raw [`crate::clock::Clock`]
/// values; convert with `Clock::delta_ns`.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// When the request should have started (the schedule), not when it did.
    pub intended_start: u64,
    /// When the client began to take a connection for it (a pooled one, or a new connect):
    /// `intended_start` → here is how late the runner got to it, here → `send_start` the
    /// connection.
    pub connect_start: Option<u64>,
    /// Just before the first byte of the request was written.
    pub send_start: Option<u64>,
    /// The whole request had been written.
    pub write_done: Option<u64>,
    /// The response head had been parsed.
    pub response_head: Option<u64>,
    /// HTTP status of the response.
    pub status: Option<u16>,
    /// The first event with a non-empty `choices` list.
    pub first_event: Option<u64>,
    /// The first event that carried output text/tokens (content, reasoning or tool call).
    pub first_token: Option<u64>,
    /// The response ended (`[DONE]`, end of body, or failure).
    pub end: Option<u64>,
    /// The last JSON stream message before `[DONE]`, with or without choices (a usage-only
    /// chunk too): where vLLM's older chat benchmark ended a request.
    pub last_message: Option<u64>,
    pub events: Vec<EventRecord>,
    pub token_count_source: TokenCountSource,
    /// Output text per channel, only when the request asked for it.
    pub content_text: Option<String>,
    pub reasoning_text: Option<String>,
    pub usage: Option<Usage>,
    /// The server's own timing of the request, when it sent one ([`ServerTiming`]).
    pub server_timing: Option<ServerTiming>,
    pub finish_reason: Option<FinishReason>,
    /// The raw finish reason when it was not one we know.
    pub finish_reason_raw: Option<String>,
    /// Whether `[DONE]` was seen.
    pub done: bool,
    /// How the reads that brought data were stamped (see [`Timeline::stamp_source`]).
    pub stamps: StampCounts,
    /// Reads that completed events and left data waiting in the socket, by the end of their
    /// events (`events.len()` after them), in order: the kernel's count of the bytes left
    /// (`TCP_CM_INQ`) where it gave one, else a read that filled the read buffer (it may have
    /// left some). Pre-sized, never grown on the per-token path: past its capacity
    /// `full_reads_overflowed` says some went unrecorded.
    pub full_reads: Vec<u32>,
    pub full_reads_overflowed: bool,
    pub outcome: Outcome,
}

/// The most events a [`Timeline`] reserves up front (16 MiB); longer streams grow the vector.
pub const MAX_PREALLOC_EVENTS: usize = 1 << 20;

impl Timeline {
    /// A fresh timeline with room for `expected_events` events (no reallocation until then),
    /// at most [`MAX_PREALLOC_EVENTS`].
    pub fn new(intended_start: u64, expected_events: usize, keep_text: bool) -> Self {
        // The hint comes from `max_tokens` or a dataset's output length, which a user (or a
        // dataset file) may set to billions: preallocating that aborts the process.
        let expected_events = expected_events.min(MAX_PREALLOC_EVENTS);
        Self {
            intended_start,
            connect_start: None,
            send_start: None,
            write_done: None,
            response_head: None,
            status: None,
            first_event: None,
            first_token: None,
            end: None,
            last_message: None,
            events: Vec::with_capacity(expected_events),
            token_count_source: TokenCountSource::Chunks,
            content_text: keep_text.then(|| String::with_capacity(expected_events * 6)),
            reasoning_text: None,
            usage: None,
            server_timing: None,
            finish_reason: None,
            finish_reason_raw: None,
            done: false,
            stamps: StampCounts::default(),
            full_reads: Vec::with_capacity(expected_events / 2 + 16),
            full_reads_overflowed: false,
            outcome: Ok(()),
        }
    }

    /// Output tokens: final usage when the server sent it, else the sum over events.
    pub fn output_tokens(&self) -> u64 {
        match self.usage {
            Some(u) => u.completion_tokens,
            None => self.event_tokens(),
        }
    }

    /// Sum of per-event token counts.
    pub fn event_tokens(&self) -> u64 {
        self.events.iter().map(|e| e.tokens as u64).sum()
    }

    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    pub fn error_kind(&self) -> Option<ErrorKind> {
        self.outcome.as_ref().err().map(|e| e.kind)
    }

    /// Records one read that brought data: its stamp source, and its wake-up latency on the
    /// events from index `first_event` on (the ones this read completed).
    #[inline]
    pub fn note_read(
        &mut self,
        fallback: Option<StampFallback>,
        wakeup_ns: u32,
        first_event: usize,
    ) {
        match fallback {
            None => self.stamps.kernel_reads = self.stamps.kernel_reads.saturating_add(1),
            Some(f) => {
                self.stamps.client_reads = self.stamps.client_reads.saturating_add(1);
                self.stamps.fallback = Some(f);
            }
        }
        if wakeup_ns != 0 {
            if let Some(new) = self.events.get_mut(first_event..) {
                new.iter_mut().for_each(|e| e.wakeup_ns = wakeup_ns);
            }
        }
    }

    /// Records one read under `--packet-stamps`: `all_from_ring` when every event it completed
    /// took its segment's arrival from the packet ring; otherwise the read counts by its own
    /// stamp `read_t` (`read_fallback` as in [`Timeline::note_read`]), says the ring missed,
    /// and every event it completed takes that stamp: a read the ring saw only in part is a
    /// socket-stamped read, one stamp for all its events, so that the bounds read it as one
    /// (`analysis::client_lag::arrivals` groups a read's events by their stamp; an event that
    /// kept the read's stamp among others with their segments' would pass for the read's
    /// newest data alone). Each new event's wake-up latency is `wakeup_of(its stamp)`: how
    /// long before the read returned its data arrived.
    #[inline]
    pub fn note_packet_read(
        &mut self,
        all_from_ring: bool,
        read_t: u64,
        read_fallback: Option<StampFallback>,
        first_event: usize,
        wakeup_of: impl Fn(u64) -> u32,
    ) {
        let Some(new) = self.events.get_mut(first_event..) else {
            return;
        };
        if all_from_ring {
            self.stamps.packet_reads = self.stamps.packet_reads.saturating_add(1);
        } else {
            match read_fallback {
                None => self.stamps.kernel_reads = self.stamps.kernel_reads.saturating_add(1),
                Some(_) => self.stamps.client_reads = self.stamps.client_reads.saturating_add(1),
            }
            self.stamps.fallback = Some(StampFallback::NotInRing);
            new.iter_mut().for_each(|e| e.t = read_t);
        }
        new.iter_mut().for_each(|e| e.wakeup_ns = wakeup_of(e.t));
    }

    /// The bytes the socket held when the read that completed the events from `first_event`
    /// on took them (see [`EventRecord::socket_bytes`]); nothing when it completed none.
    #[inline]
    pub fn note_socket_bytes(&mut self, first_event: usize, bytes: u32) {
        if let Some(e) = self.events.get_mut(first_event) {
            e.socket_bytes = bytes;
        }
    }

    /// The read just noted left data waiting (see [`Timeline::full_reads`]). Allocates
    /// nothing: past the capacity reserved up front it only sets the overflow flag.
    #[inline]
    pub fn note_full_read(&mut self) {
        let end = u32::try_from(self.events.len()).unwrap_or(u32::MAX);
        if self.full_reads.last().is_some_and(|&e| e == end) {
            return;
        }
        if self.full_reads.len() < self.full_reads.capacity() {
            self.full_reads.push(end);
        } else {
            self.full_reads_overflowed = true;
        }
    }

    /// Whether the read whose events end at `end` may have left data waiting (the kernel said
    /// so, or it filled the buffer where the kernel did not say; or the record of such reads
    /// overflowed).
    pub fn read_was_full(&self, end: usize) -> bool {
        self.full_reads_overflowed || self.full_reads.binary_search(&(end as u32)).is_ok()
    }

    /// Which clock stamped this timeline's reads. No data read at all: the client's clock.
    pub fn stamp_source(&self) -> StampSource {
        let s = &self.stamps;
        let why = s.fallback.unwrap_or(StampFallback::NoStamp);
        match (s.packet_reads, s.kernel_reads, s.client_reads) {
            (p, 0, 0) if p > 0 => StampSource::Packet,
            (0, k, 0) if k > 0 => StampSource::Kernel,
            (0, 0, _) => StampSource::ClientClock(why),
            _ => StampSource::Mixed(why),
        }
    }

    /// How late the client woke up (µs) to each token event stamped inside `window` whose read
    /// carried a kernel stamp (events without one, wake-up 0, are left out).
    pub fn token_wakeups_us(&self, window: std::ops::Range<u64>) -> impl Iterator<Item = f64> + '_ {
        self.events
            .iter()
            .filter(move |e| e.tokens > 0 && e.wakeup_ns > 0 && window.contains(&e.t))
            .map(|e| e.wakeup_ns as f64 / 1e3)
    }

    /// Gaps between consecutive token-carrying events stamped inside `window`, and how many of
    /// them the client could not time because both events came in one read (equal stamps):
    /// `(in_one_read, gaps)`. Such a gap is 0 in every figure built on it (ITL, time between
    /// tokens); a share of them says the client, or the server's batching of writes, hid the
    /// real gaps.
    pub fn token_gaps_in_one_read(&self, window: std::ops::Range<u64>) -> (u64, u64) {
        let mut prev: Option<u64> = None;
        let (mut same, mut gaps) = (0, 0);
        for e in self
            .events
            .iter()
            .filter(|e| e.tokens > 0 && window.contains(&e.t))
        {
            if let Some(p) = prev {
                gaps += 1;
                same += u64::from(p == e.t);
            }
            prev = Some(e.t);
        }
        (same, gaps)
    }

    /// Stamp of the last choice-carrying event.
    pub fn last_event(&self) -> Option<u64> {
        self.events.last().map(|e| e.t)
    }

    /// The reads that completed events, in order: consecutive events with one stamp came in
    /// one read (every event a read completes carries its stamp). A read that completed no
    /// event (part of an event, a usage-only chunk, `[DONE]`) is not seen here.
    pub fn reads(&self) -> Reads<'_> {
        Reads {
            events: &self.events,
            at: 0,
        }
    }
}

/// One read that completed events (see [`Timeline::reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// Its stamp (the kernel's receive stamp of its newest data, or the client's own).
    pub t: u64,
    /// How late the client woke up to it, ns; `None` when its stamp is the client's own.
    pub lag_ns: Option<u32>,
    /// The events it completed: `Timeline::events[first..end]`.
    pub first: usize,
    pub end: usize,
    /// Output tokens those events carried.
    pub tokens: u32,
}

/// Iterator of [`Read`]s; allocates nothing.
pub struct Reads<'a> {
    events: &'a [EventRecord],
    at: usize,
}

impl Iterator for Reads<'_> {
    type Item = Read;

    fn next(&mut self) -> Option<Read> {
        let first = self.at;
        let head = *self.events.get(first)?;
        let mut end = first + 1;
        let mut tokens = head.tokens;
        while let Some(e) = self.events.get(end).filter(|e| e.t == head.t) {
            tokens = tokens.saturating_add(e.tokens);
            end += 1;
        }
        self.at = end;
        Some(Read {
            t: head.t,
            lag_ns: (head.wakeup_ns > 0).then_some(head.wakeup_ns),
            first,
            end,
            tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_gaps_in_one_read_count_equal_stamps_between_token_events() {
        let mut tl = Timeline::new(0, 8, false);
        // Stamps 10, 20, 20 (a read that brought two tokens), an empty event at 30 that
        // does not count, then 30 (the same read as the empty one, but the token before was
        // at 20), 40, 40, 40.
        for (t, tokens) in [
            (10, 1),
            (20, 1),
            (20, 2),
            (30, 0),
            (30, 1),
            (40, 1),
            (40, 1),
            (40, 1),
        ] {
            tl.events.push(EventRecord {
                t,
                tokens,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: if tokens > 0 {
                    Channel::Content
                } else {
                    Channel::Empty
                },
            });
        }
        assert_eq!(tl.token_gaps_in_one_read(0..u64::MAX), (3, 6));
        // Inside [20, 40): token events at 20, 20 and 30: one of two gaps in one read.
        assert_eq!(tl.token_gaps_in_one_read(20..40), (1, 2));
        assert_eq!(
            Timeline::new(0, 1, false).token_gaps_in_one_read(0..u64::MAX),
            (0, 0)
        );
    }

    #[test]
    fn reads_group_events_by_stamp_with_their_lag_and_tokens() {
        let mut tl = Timeline::new(0, 8, false);
        // Read at 10 (lag 500 ns): a role-only event and one token; read at 20 (lag 3 us):
        // three tokens in two events; read at 30 with the client's own stamp: one token.
        for (t, tokens, w) in [
            (10, 0, 500),
            (10, 1, 500),
            (20, 2, 3_000),
            (20, 1, 3_000),
            (30, 1, 0),
        ] {
            tl.events.push(EventRecord {
                t,
                tokens,
                wakeup_ns: w,
                socket_bytes: 0,
                channel: Channel::Content,
            });
        }
        let reads: Vec<Read> = tl.reads().collect();
        assert_eq!(
            reads,
            vec![
                Read {
                    t: 10,
                    lag_ns: Some(500),
                    first: 0,
                    end: 2,
                    tokens: 1
                },
                Read {
                    t: 20,
                    lag_ns: Some(3_000),
                    first: 2,
                    end: 4,
                    tokens: 3
                },
                Read {
                    t: 30,
                    lag_ns: None,
                    first: 4,
                    end: 5,
                    tokens: 1
                },
            ]
        );
        assert_eq!(Timeline::new(0, 0, false).reads().count(), 0);
    }

    #[test]
    fn output_tokens_prefers_usage() {
        let mut t = Timeline::new(0, 4, false);
        for i in 0..3 {
            t.events.push(EventRecord {
                t: i,
                tokens: 2,
                wakeup_ns: 0,
                socket_bytes: 0,
                channel: Channel::Content,
            });
        }
        assert_eq!(t.output_tokens(), 6);
        t.usage = Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 7,
            total_tokens: 17,
            cached_tokens: None,
        });
        assert_eq!(t.output_tokens(), 7);
        assert_eq!(t.event_tokens(), 6);
        assert_eq!(t.last_event(), Some(2));
    }

    #[test]
    fn stamp_source_follows_the_reads() {
        let mut t = Timeline::new(0, 4, false);
        assert_eq!(
            t.stamp_source(),
            StampSource::ClientClock(StampFallback::NoStamp)
        );
        t.events.push(EventRecord {
            t: 10,
            tokens: 1,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel: Channel::Content,
        });
        t.note_read(None, 700, 0);
        assert_eq!(t.stamp_source(), StampSource::Kernel);
        assert_eq!(t.events[0].wakeup_ns, 700);
        // A later read completing no event touches no earlier event.
        t.note_read(Some(StampFallback::NoStamp), 0, 1);
        assert_eq!(t.events[0].wakeup_ns, 700);
        assert_eq!(t.stamp_source(), StampSource::Mixed(StampFallback::NoStamp));
        assert_eq!(t.stamp_source().label(), "mixed (no_stamp)");
        let mut tls = Timeline::new(0, 1, false);
        tls.note_read(Some(StampFallback::Tls), 0, 0);
        assert_eq!(
            tls.stamp_source(),
            StampSource::ClientClock(StampFallback::Tls)
        );
        assert_eq!(
            StampSource::Kernel.combine(tls.stamp_source()),
            StampSource::Mixed(StampFallback::Tls)
        );
        assert_eq!(
            StampSource::Kernel.combine(StampSource::Kernel),
            StampSource::Kernel
        );
        assert_eq!(
            tls.stamp_source().combine(tls.stamp_source()).label(),
            "client_clock (tls)"
        );
    }

    #[test]
    fn packet_reads_give_each_event_its_own_wakeup_and_a_source_of_their_own() {
        let ev = |t| EventRecord {
            t,
            tokens: 1,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel: Channel::Content,
        };
        let mut t = Timeline::new(0, 4, false);
        // One read at 100 brought two events whose segments arrived at 60 and 80.
        t.events.extend([ev(60), ev(80)]);
        t.note_packet_read(true, 100, None, 0, |s| (100 - s) as u32);
        assert_eq!(t.stamp_source(), StampSource::Packet);
        assert_eq!(t.stamp_source().label(), "packet");
        assert_eq!((t.events[0].wakeup_ns, t.events[1].wakeup_ns), (40, 20));
        // A read at 300 whose first event came from the ring (250) and whose last the ring
        // missed (it kept the read's stamp) counts by its own (kernel) stamp, and so does
        // each of its events: one stamp, as a socket-stamped read has.
        t.events.extend([ev(250), ev(300)]);
        t.note_packet_read(false, 300, None, 2, |s| (310 - s) as u32);
        assert_eq!((t.events[2].t, t.events[3].t), (300, 300));
        assert_eq!((t.events[2].wakeup_ns, t.events[3].wakeup_ns), (10, 10));
        assert_eq!(t.stamps.packet_reads, 1);
        assert_eq!(t.stamps.kernel_reads, 1);
        assert_eq!(
            t.stamp_source(),
            StampSource::Mixed(StampFallback::NotInRing)
        );
        assert_eq!(t.events[0].wakeup_ns, 40, "earlier events untouched");
        assert_eq!((t.events[0].t, t.events[1].t), (60, 80));
        let mut missed = Timeline::new(0, 1, false);
        missed.note_packet_read(false, 5, Some(StampFallback::Tls), 0, |_| 0);
        assert_eq!(
            missed.stamp_source(),
            StampSource::ClientClock(StampFallback::NotInRing)
        );
        assert_eq!(
            StampSource::Packet.combine(StampSource::Packet),
            StampSource::Packet
        );
        assert_eq!(
            StampSource::Packet.combine(StampSource::Kernel),
            StampSource::Mixed(StampFallback::NotInRing)
        );
        assert_eq!(
            StampSource::Packet.combine(StampSource::ClientClock(StampFallback::Tls)),
            StampSource::Mixed(StampFallback::Tls)
        );
    }

    #[test]
    fn event_record_stays_small() {
        // Millions are kept per run: the wake-up latency fits in the padding tokens left.
        assert!(std::mem::size_of::<EventRecord>() <= 24);
    }

    #[test]
    fn finish_reason_parses_known_and_other() {
        let cases: [(&[u8], FinishReason); 4] = [
            (b"stop", FinishReason::Stop),
            (b"length", FinishReason::Length),
            (b"tool_calls", FinishReason::ToolCalls),
            (b"weird", FinishReason::Other),
        ];
        for (input, want) in cases {
            assert_eq!(FinishReason::parse(input), want, "{input:?}");
        }
    }

    #[test]
    fn an_absurd_event_hint_does_not_preallocate_it() {
        // `--max-tokens 4294967295` (or a dataset asking for that) used to abort the process
        // on a 64 GiB allocation before the first request.
        let t = Timeline::new(0, usize::MAX, true);
        assert!(t.events.capacity() <= MAX_PREALLOC_EVENTS);
        assert!(t
            .content_text
            .as_ref()
            .is_some_and(|s| s.capacity() <= 6 * MAX_PREALLOC_EVENTS));
    }
}
