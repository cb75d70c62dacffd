//! The sans-IO heart of a streaming request: bytes in, timeline entries out.
//!
//! [`StreamDecoder::feed`] takes the bytes of one read and the stamp of that read, and runs
//! them through the response-head parser, the body decoder (chunked, length or close
//! delimited), the SSE parser and the event decoder of the request's [`Dialect`] (OpenAI, or an
//! engine's native stream), appending to the [`Timeline`].
//! Every event completed by one read gets that read's stamp.
//!
//! Architecture invariant: no IO, no clock, no locks, and no allocation per event in steady
//! state (body bytes are copied into one reused SSE buffer; records go to pre-sized vectors).
//! Messages are formatted only when a request fails.

use super::observer::{Flow, StreamObserver};
use crate::proto::body::{BodyChunk, BodyDecoder};
use crate::proto::http1::{BodyKind, HeadParser};
use crate::proto::native::{Dialect, NativeDecoder, NativeEvent, NativeItem};
use crate::proto::openai::{self, ServerError, StreamItem};
use crate::proto::sse::SseParser;
use crate::timeline::{
    Channel, ErrorKind, EventRecord, FinishReason, RequestError, Timeline, TokenCountSource,
};
use bytes::BytesMut;

/// Largest response head we accept.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most of an error body we keep for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Initial SSE buffer: one typical event fits many times over.
const SSE_BUF: usize = 4 * 1024;

/// The stamp of a read's bytes by position, for [`StreamDecoder::feed_at`].
pub trait ReadClock {
    /// The stamp of the bytes taken from the read buffer so far, `remaining` bytes being left
    /// in it. Called once per body chunk (and for the response head and the end), never per
    /// byte; must not allocate or block.
    fn at(&mut self, remaining: usize) -> u64;
}

/// One stamp for the whole read.
impl ReadClock for u64 {
    #[inline(always)]
    fn at(&mut self, _remaining: usize) -> u64 {
        *self
    }
}

/// What a [`StreamDecoder::feed`] call left us with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Give me the next read.
    NeedMore,
    /// The response is complete and successful. `reusable`: the connection may go back to the
    /// pool (keep-alive, body fully read).
    Finished { reusable: bool },
    /// The observer asked to stop.
    Stopped,
}

enum Phase {
    Head,
    Stream,
    ErrorBody { status: u16 },
    Done { reusable: bool },
}

/// Decodes one streaming response. Build one per request (cheap) or [`StreamDecoder::reset`]
/// it between requests.
pub struct StreamDecoder {
    phase: Phase,
    head: HeadParser,
    body: BodyDecoder,
    sse: SseParser,
    sse_buf: BytesMut,
    max_event_bytes: usize,
    keep_alive: bool,
    received_any: bool,
    events_seen: u64,
    /// Whether `usage.completion_tokens` arrives on every chunk (decided by the first
    /// choice-carrying event).
    continuous: bool,
    last_completion: u64,
    dialect: Dialect,
    /// The native dialect's per-stream state (`None` for OpenAI).
    native: Option<NativeDecoder>,
    content_type: Option<String>,
    /// The proxy that relayed the response, as its head names it (`net::proxy::relayed_by`).
    relayed_by: Option<String>,
    reason: String,
    error_body: Vec<u8>,
}

impl StreamDecoder {
    /// A decoder for OpenAI-compatible streams.
    pub fn new(max_event_bytes: usize) -> Self {
        Self::with_dialect(max_event_bytes, Dialect::OpenAi)
    }

    /// A decoder for streams of `dialect`.
    pub fn with_dialect(max_event_bytes: usize, dialect: Dialect) -> Self {
        Self {
            phase: Phase::Head,
            head: HeadParser::new(MAX_HEAD_BYTES),
            body: BodyDecoder::new(BodyKind::Empty),
            sse: SseParser::new(max_event_bytes),
            sse_buf: BytesMut::with_capacity(SSE_BUF),
            max_event_bytes,
            keep_alive: false,
            received_any: false,
            events_seen: 0,
            continuous: false,
            last_completion: 0,
            dialect,
            native: NativeDecoder::new(dialect),
            content_type: None,
            relayed_by: None,
            reason: String::new(),
            error_body: Vec::new(),
        }
    }

    /// Ready for the next response, keeping the SSE buffer's allocation.
    pub fn reset(&mut self) {
        let mut sse_buf = std::mem::take(&mut self.sse_buf);
        sse_buf.clear();
        *self = Self {
            sse_buf,
            ..Self::with_dialect(self.max_event_bytes, self.dialect)
        };
    }

    /// Whether any response byte has arrived (a pooled connection that closes before that is
    /// dead, not a failing server).
    pub fn received_any(&self) -> bool {
        self.received_any
    }

    /// SSE events decoded so far (including usage-only ones); the gap timer restarts when it
    /// moves.
    pub fn events_seen(&self) -> u64 {
        self.events_seen
    }

    /// Feeds the bytes of one read, stamped `t`. Consumes what it can from `buf`; the rest
    /// stays for the next call.
    #[inline]
    pub fn feed<O: StreamObserver + ?Sized>(
        &mut self,
        buf: &mut BytesMut,
        t: u64,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<Progress, RequestError> {
        self.feed_at(buf, &mut { t }, tl, observer)
    }

    /// [`StreamDecoder::feed`] with a stamp per position: each event carries
    /// `clock.at(remaining)`, asked when the body bytes that completed it have been taken from
    /// `buf` and `remaining` bytes are left there (`net::packet` answers with the arrival of
    /// the segment that carried the last of them; a plain `u64` answers with itself).
    pub fn feed_at<O: StreamObserver + ?Sized, C: ReadClock + ?Sized>(
        &mut self,
        buf: &mut BytesMut,
        clock: &mut C,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<Progress, RequestError> {
        if !buf.is_empty() {
            self.received_any = true;
        }
        loop {
            match self.phase {
                Phase::Head => {
                    let head = match self.head.parse(buf, "POST") {
                        Ok(Some(h)) => h,
                        Ok(None) => return Ok(Progress::NeedMore),
                        Err(e) => return Err(protocol(format!("invalid response head: {e}"))),
                    };
                    if (100..200).contains(&head.status) {
                        // An interim response (100 Continue, 103 Early Hints): the real head follows.
                        self.head = HeadParser::new(MAX_HEAD_BYTES);
                        continue;
                    }
                    tl.response_head = Some(clock.at(buf.len()));
                    tl.status = Some(head.status);
                    self.keep_alive = head.keep_alive;
                    self.body = BodyDecoder::new(head.body);
                    self.relayed_by = super::proxy::relayed_by(&head);
                    self.content_type = head.content_type;
                    if (200..300).contains(&head.status) {
                        self.phase = Phase::Stream;
                    } else {
                        self.reason = head.reason;
                        self.phase = Phase::ErrorBody {
                            status: head.status,
                        };
                    }
                }
                Phase::Stream if self.body.is_done() => {
                    return self.finish_stream(clock.at(buf.len()), tl, true)
                }
                Phase::Stream => match self.body.decode(buf) {
                    Ok(None) => return Ok(Progress::NeedMore),
                    Ok(Some(BodyChunk::Data(data))) => {
                        if tl.done {
                            // Anything after [DONE] is ignored; only the end of the body matters.
                            continue;
                        }
                        self.sse_buf.extend_from_slice(&data);
                        drop(data);
                        let t = clock.at(buf.len());
                        if self.drain_events(t, tl, observer)? == Flow::Stop {
                            return Ok(Progress::Stopped);
                        }
                    }
                    Ok(Some(BodyChunk::End)) => {
                        return self.finish_stream(clock.at(buf.len()), tl, true)
                    }
                    Err(e) => {
                        return Err(protocol(format!(
                            "broken response body after {} events: {e}",
                            tl.events.len()
                        )))
                    }
                },
                Phase::ErrorBody { status } if self.body.is_done() => {
                    tl.end = Some(clock.at(buf.len()));
                    return Err(self.status_error(status));
                }
                Phase::ErrorBody { status } => match self.body.decode(buf) {
                    Ok(None) => return Ok(Progress::NeedMore),
                    Ok(Some(BodyChunk::Data(data))) => {
                        let room = MAX_ERROR_BODY.saturating_sub(self.error_body.len());
                        self.error_body
                            .extend_from_slice(&data[..data.len().min(room)]);
                    }
                    Ok(Some(BodyChunk::End)) | Err(_) => {
                        tl.end = Some(clock.at(buf.len()));
                        return Err(self.status_error(status));
                    }
                },
                Phase::Done { reusable } => return Ok(Progress::Finished { reusable }),
            }
        }
    }

    /// The connection reached end of file at stamp `t`.
    pub fn eof(&mut self, t: u64, tl: &mut Timeline) -> Result<Progress, RequestError> {
        match self.phase {
            Phase::Head => Err(protocol(if self.received_any {
                "connection closed in the middle of the response head"
            } else {
                "connection closed before any response"
            })),
            Phase::Stream => {
                self.sse.finish();
                match self.body.eof() {
                    Ok(_) => self.finish_stream(t, tl, false),
                    Err(_) if tl.done => {
                        tl.end.get_or_insert(t);
                        Ok(Progress::Finished { reusable: false })
                    }
                    Err(e) => {
                        tl.end = Some(t);
                        Err(self.cut_short(tl, &e))
                    }
                }
            }
            Phase::ErrorBody { status } => {
                tl.end = Some(t);
                Err(self.status_error(status))
            }
            Phase::Done { reusable } => Ok(Progress::Finished { reusable }),
        }
    }

    fn finish_stream(
        &mut self,
        t: u64,
        tl: &mut Timeline,
        clean_end: bool,
    ) -> Result<Progress, RequestError> {
        tl.end.get_or_insert(t);
        if !tl.done && tl.finish_reason.is_none() {
            let ct = self.content_type.as_deref().unwrap_or("none");
            return Err(protocol(if tl.events.is_empty() {
                format!("the response ended without any stream event (content-type: {ct})")
            } else if self.dialect == Dialect::OpenAi {
                format!(
                    "the stream ended after {} events without [DONE] or a finish_reason",
                    tl.events.len()
                )
            } else if self.dialect == Dialect::Responses {
                format!(
                    "the responses stream ended after {} token events without its terminal event (response.completed)",
                    tl.events.len()
                )
            } else {
                format!(
                    "the {} stream ended after {} events without its last event",
                    self.dialect.as_str(),
                    tl.events.len()
                )
            }));
        }
        let reusable = clean_end && self.keep_alive;
        self.phase = Phase::Done { reusable };
        Ok(Progress::Finished { reusable })
    }

    fn drain_events<O: StreamObserver + ?Sized>(
        &mut self,
        t: u64,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<Flow, RequestError> {
        loop {
            let event = match self.sse.next_event(&mut self.sse_buf) {
                Ok(Some(e)) => e,
                Ok(None) => return Ok(Flow::Continue),
                Err(e) => return Err(protocol(format!("malformed SSE stream: {e}"))),
            };
            self.events_seen += 1;
            if self.on_data(&event.data, t, tl, observer)? == Flow::Stop {
                return Ok(Flow::Stop);
            }
            if tl.done {
                return Ok(Flow::Continue);
            }
        }
    }

    fn on_data<O: StreamObserver + ?Sized>(
        &mut self,
        data: &[u8],
        t: u64,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<Flow, RequestError> {
        if self.native.is_some() {
            return self.on_native(data, t, tl, observer);
        }
        let item = match openai::decode(data) {
            Ok(i) => i,
            Err(e) => {
                return Err(protocol(format!(
                    "malformed stream event after {} events: {e}: {}",
                    tl.events.len(),
                    excerpt(data)
                )))
            }
        };
        let c = match item {
            StreamItem::Done => {
                tl.done = true;
                tl.end = Some(t);
                return Ok(Flow::Continue);
            }
            StreamItem::Error(e) => return Err(stream_error(&e, data, t, tl)),
            StreamItem::Chunk(c) => c,
        };
        tl.last_message = Some(t);
        let mut usage_tokens = None;
        if let Some(u) = c.usage {
            // Usage on the first choice event means the server sends it on every chunk
            // (continuous_usage_stats). Usage that first shows up later is a final total
            // (llama.cpp puts it in the last chunk) and must not count as that event's tokens.
            if c.choices > 0 && (self.continuous || tl.events.is_empty()) {
                self.continuous = true;
                usage_tokens = Some(u.completion_tokens.saturating_sub(self.last_completion));
                self.last_completion = self.last_completion.max(u.completion_tokens);
            }
            tl.usage = Some(u);
        }
        if let Some(raw) = c.metrics {
            // The final usage chunk only: read off the per-token path.
            let t = openai::server_timing(raw)
                .map_err(|e| protocol(format!("bad metrics in stream event: {e}")))?;
            tl.server_timing = Some(t);
        }
        if c.choices == 0 {
            return Ok(Flow::Continue);
        }
        let has_content = c.content.as_ref().is_some_and(|x| !x.is_empty());
        let has_reasoning = c.reasoning.as_ref().is_some_and(|x| !x.is_empty());
        let has_output = has_content || has_reasoning || c.tool_calls;
        let (tokens, source) = match (usage_tokens, c.token_ids) {
            (Some(n), _) => (n, TokenCountSource::ContinuousUsage),
            (None, Some(n)) => (n as u64, TokenCountSource::TokenIds),
            (None, None) => (has_output as u64, TokenCountSource::Chunks),
        };
        tl.token_count_source = source;
        let channel = if has_content {
            Channel::Content
        } else if has_reasoning {
            Channel::Reasoning
        } else if c.tool_calls {
            Channel::ToolCall
        } else {
            Channel::Empty
        };
        tl.first_event.get_or_insert(t);
        if has_output {
            tl.first_token.get_or_insert(t);
        }
        let rec = EventRecord {
            t,
            tokens: tokens.min(u32::MAX as u64) as u32,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel,
        };
        tl.events.push(rec);
        if let Some(reason) = c.finish_reason {
            set_finish_reason(tl, reason);
        }
        if tl.content_text.is_some() {
            if let (true, Some(text), Some(out)) =
                (has_content, c.content.as_ref(), tl.content_text.as_mut())
            {
                text.unescape_into(out)
                    .map_err(|e| protocol(format!("bad text escape in stream event: {e}")))?;
            }
            if let (true, Some(text)) = (has_reasoning, c.reasoning.as_ref()) {
                let cap = tl.events.capacity() * 6;
                let out = tl
                    .reasoning_text
                    .get_or_insert_with(|| String::with_capacity(cap));
                text.unescape_into(out)
                    .map_err(|e| protocol(format!("bad text escape in stream event: {e}")))?;
            }
        }
        let raw = if has_content {
            c.content.as_ref().map(|x| x.raw)
        } else if has_reasoning {
            c.reasoning.as_ref().map(|x| x.raw)
        } else {
            None
        };
        Ok(observer.on_event(&rec, raw))
    }

    /// One event of a native stream: the same records as an OpenAI choice event, with the
    /// dialect's own token count.
    fn on_native<O: StreamObserver + ?Sized>(
        &mut self,
        data: &[u8],
        t: u64,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<Flow, RequestError> {
        let Some(decoder) = self.native.as_mut() else {
            return Ok(Flow::Continue);
        };
        let ev: NativeEvent<'_> = match decoder.decode(data) {
            Ok(NativeItem::Event(ev)) => ev,
            Ok(NativeItem::Done) => {
                tl.done = true;
                tl.end = Some(t);
                return Ok(Flow::Continue);
            }
            Ok(NativeItem::Ignore) => return Ok(Flow::Continue),
            Ok(NativeItem::End {
                usage,
                finish_reason,
            }) => {
                // The end is no token: it moves neither the first nor the last token.
                tl.last_message = Some(t);
                if usage.is_some() {
                    tl.usage = usage;
                }
                set_finish_reason(tl, finish_reason);
                tl.done = true;
                tl.end = Some(t);
                return Ok(Flow::Continue);
            }
            Ok(NativeItem::Error(e)) => return Err(stream_error(&e, data, t, tl)),
            Err(e) => {
                return Err(protocol(format!(
                    "malformed {} stream event after {} events: {e}: {}",
                    self.dialect.as_str(),
                    tl.events.len(),
                    excerpt(data)
                )))
            }
        };
        tl.last_message = Some(t);
        if ev.usage.is_some() {
            tl.usage = ev.usage;
        }
        let has_output = !ev.text.is_empty();
        tl.token_count_source = ev.source;
        tl.first_event.get_or_insert(t);
        if has_output {
            tl.first_token.get_or_insert(t);
        }
        let rec = EventRecord {
            t,
            tokens: ev.tokens.min(u32::MAX as u64) as u32,
            wakeup_ns: 0,
            socket_bytes: 0,
            channel: match (has_output, ev.reasoning) {
                (false, _) => Channel::Empty,
                (true, false) => Channel::Content,
                (true, true) => Channel::Reasoning,
            },
        };
        tl.events.push(rec);
        if let Some(reason) = ev.finish_reason {
            set_finish_reason(tl, reason);
        }
        if let (true, Some(out)) = (has_output, tl.content_text.as_mut()) {
            let out = if ev.reasoning {
                let cap = tl.events.capacity() * 6;
                tl.reasoning_text
                    .get_or_insert_with(|| String::with_capacity(cap))
            } else {
                out
            };
            ev.text
                .unescape_into(out)
                .map_err(|e| protocol(format!("bad text escape in stream event: {e}")))?;
        }
        if ev.last {
            tl.done = true;
            tl.end = Some(t);
        }
        Ok(observer.on_event(&rec, has_output.then_some(ev.text.raw)))
    }

    /// The connection failed (`e`, a read error) after some response bytes arrived at stamp `t`.
    pub(crate) fn read_failed(
        &self,
        t: u64,
        tl: &mut Timeline,
        e: &dyn std::fmt::Display,
    ) -> RequestError {
        tl.end = Some(t);
        match (&self.phase, &self.relayed_by) {
            (Phase::Stream, Some(proxy)) => {
                super::proxy::cut_error(proxy, tl.events.len(), &format!("connection error: {e}"))
            }
            _ => protocol(format!(
                "connection error after {} events: {e}",
                tl.events.len()
            )),
        }
    }

    /// A 2xx stream whose connection ended (`how`) before the stream did: cut by the proxy
    /// that relayed it (`net::proxy`), else closed early by the server.
    fn cut_short(&self, tl: &Timeline, how: &dyn std::fmt::Display) -> RequestError {
        let events = tl.events.len();
        match &self.relayed_by {
            Some(proxy) => super::proxy::cut_error(proxy, events, &how.to_string()),
            None => protocol(format!(
                "connection closed before the stream finished ({events} events received): {how}"
            )),
        }
    }

    fn status_error(&self, status: u16) -> RequestError {
        if let Some(e) = super::proxy::proxy_error(status, &self.error_body) {
            return e;
        }
        let detail = server_message(&self.error_body).unwrap_or_else(|| {
            if self.error_body.is_empty() {
                EMPTY_BODY.to_string()
            } else {
                excerpt(&self.error_body)
            }
        });
        let reason = if self.reason.is_empty() {
            String::new()
        } else {
            format!(" {}", self.reason)
        };
        RequestError {
            kind: ErrorKind::HttpStatus,
            status: Some(status),
            message: format!("server answered {status}{reason}: {detail}"),
        }
    }
}

/// Records the server's finish reason (the raw word only when it is not one we know).
fn set_finish_reason(tl: &mut Timeline, reason: &[u8]) {
    let parsed = FinishReason::parse(reason);
    if parsed == FinishReason::Other {
        tl.finish_reason_raw = Some(String::from_utf8_lossy(reason).into_owned());
    }
    tl.finish_reason = Some(parsed);
}

/// An error event in a 200 stream, with the server's own message (or the payload).
fn stream_error(e: &ServerError<'_>, data: &[u8], t: u64, tl: &mut Timeline) -> RequestError {
    let mut message = String::new();
    if e.message.unescape_into(&mut message).is_err() || message.is_empty() {
        message = excerpt(data);
    }
    tl.end = Some(t);
    RequestError::new(
        ErrorKind::ServerError,
        format!("server error in the stream: {message}"),
    )
}

/// How a status error's message ends when the server sent no body.
pub const EMPTY_BODY: &str = "(empty body)";

fn protocol(message: impl Into<String>) -> RequestError {
    RequestError::new(ErrorKind::Protocol, message)
}

/// The server's own message from an error body, in the shapes servers use: OpenAI/vLLM/llama.cpp
/// `{"error":{"message"}}`, TGI `{"error":"..."}`, old vLLM `{"message"}`, FastAPI `{"detail"}`.
pub(crate) fn server_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let pick = |v: &serde_json::Value| -> Option<String> {
        match v {
            serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_json::Value::Null => None,
            serde_json::Value::String(_) => None,
            other => Some(excerpt(other.to_string().as_bytes())),
        }
    };
    match v.get("error") {
        Some(serde_json::Value::Object(o)) => {
            if let Some(m) = o.get("message").and_then(pick) {
                return Some(one_line(&m));
            }
        }
        Some(other) => {
            if let Some(m) = pick(other) {
                return Some(one_line(&m));
            }
        }
        None => {}
    }
    v.get("message")
        .and_then(pick)
        .or_else(|| v.get("detail").and_then(pick))
        .map(|m| one_line(&m))
}

/// The first few hundred bytes of `data` as one printable line.
pub(crate) fn excerpt(data: &[u8]) -> String {
    const MAX: usize = 300;
    let cut = &data[..data.len().min(MAX)];
    let mut s = one_line(&String::from_utf8_lossy(cut));
    if data.len() > MAX {
        s.push_str("...");
    }
    s
}

/// `s` on one line, cut to [`MAX_MESSAGE_CHARS`]: a server's message ends up in every failed
/// request's error, on the console and in result files, so its size is ours to bound.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(4 * MAX_MESSAGE_CHARS));
    for (i, word) in s.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > 4 * MAX_MESSAGE_CHARS {
            break;
        }
    }
    match out.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => {
            out.truncate(cut);
            out.push_str("...");
            out
        }
        None => out,
    }
}

/// The longest server message kept, in characters.
const MAX_MESSAGE_CHARS: usize = 500;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::observer::NoopObserver;

    fn chunked(events: &[&str]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for e in events {
            let ev = format!("data: {e}\n\n");
            out.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    /// Feeds `input` in reads of `step` bytes, stamping read i with i.
    fn run(
        input: &[u8],
        step: usize,
        keep_text: bool,
    ) -> (Timeline, Result<Progress, RequestError>) {
        run_decoder(StreamDecoder::new(1 << 20), input, step, keep_text)
    }

    /// [`run`] for a stream of `dialect`, keeping the text.
    fn run_dialect(
        dialect: Dialect,
        input: &[u8],
        step: usize,
    ) -> (Timeline, Result<Progress, RequestError>) {
        run_decoder(
            StreamDecoder::with_dialect(1 << 20, dialect),
            input,
            step,
            true,
        )
    }

    fn run_decoder(
        mut d: StreamDecoder,
        input: &[u8],
        step: usize,
        keep_text: bool,
    ) -> (Timeline, Result<Progress, RequestError>) {
        let mut tl = Timeline::new(0, 64, keep_text);
        let mut buf = BytesMut::new();
        for (i, piece) in input.chunks(step).enumerate() {
            buf.extend_from_slice(piece);
            let r = d.feed(&mut buf, i as u64 + 1, &mut tl, &mut NoopObserver);
            if r != Ok(Progress::NeedMore) {
                return (tl, r);
            }
        }
        let r = d.eof(1_000_000, &mut tl);
        (tl, r)
    }

    /// A Responses body: `(type, json)` events with their `event:` lines.
    fn responses_body(events: &[(&str, &str)]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for (ty, data) in events {
            let ev = format!("event: {ty}\ndata: {data}\n\n");
            out.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    const RESPONSES: &[(&str, &str)] = &[
        (
            "response.created",
            r#"{"response":{"status":"in_progress","usage":null},"sequence_number":0,"type":"response.created"}"#,
        ),
        (
            "response.in_progress",
            r#"{"response":{"status":"in_progress","usage":null},"sequence_number":1,"type":"response.in_progress"}"#,
        ),
        (
            "response.output_item.added",
            r#"{"item":{"type":"reasoning"},"output_index":0,"sequence_number":2,"type":"response.output_item.added"}"#,
        ),
        (
            "response.reasoning_text.delta",
            r#"{"delta":"think","sequence_number":3,"type":"response.reasoning_text.delta"}"#,
        ),
        (
            "response.output_text.delta",
            r#"{"delta":"Hel","sequence_number":4,"type":"response.output_text.delta"}"#,
        ),
        (
            "response.output_text.delta",
            r#"{"delta":"lo","sequence_number":5,"type":"response.output_text.delta"}"#,
        ),
        (
            "response.output_text.done",
            r#"{"text":"Hello","sequence_number":6,"type":"response.output_text.done"}"#,
        ),
        (
            "response.completed",
            r#"{"response":{"status":"completed","usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":2},"output_tokens":3,"total_tokens":8}},"sequence_number":7,"type":"response.completed"}"#,
        ),
    ];

    #[test]
    fn responses_stream_records_its_token_deltas_only_any_split() {
        let input = responses_body(RESPONSES);
        for step in 1..=input.len() {
            let (tl, r) = run_dialect(Dialect::Responses, &input, step);
            assert_eq!(r, Ok(Progress::Finished { reusable: true }), "step {step}");
            let channels: Vec<(u32, Channel)> =
                tl.events.iter().map(|e| (e.tokens, e.channel)).collect();
            assert_eq!(
                channels,
                [
                    (1, Channel::Reasoning),
                    (1, Channel::Content),
                    (1, Channel::Content)
                ],
                "step {step}"
            );
            assert_eq!(tl.token_count_source, TokenCountSource::Chunks);
            assert_eq!(tl.finish_reason, Some(FinishReason::Stop));
            let u = tl.usage.expect("usage");
            assert_eq!(
                (
                    u.prompt_tokens,
                    u.completion_tokens,
                    u.total_tokens,
                    u.cached_tokens
                ),
                (5, 3, 8, Some(2))
            );
            assert!(tl.done);
            assert_eq!(tl.content_text.as_deref(), Some("Hello"));
            assert_eq!(tl.reasoning_text.as_deref(), Some("think"));
            // The end is the terminal event's read; the last token is the last delta's.
            let last_token = tl.events.last().unwrap().t;
            assert!(tl.end.unwrap() >= last_token, "step {step}");
            if step == 1 {
                assert!(tl.end.unwrap() > last_token);
            }
        }
    }

    #[test]
    fn responses_stream_ends_only_at_its_terminal_event() {
        // Cut before response.completed: a protocol error that says so.
        let input = responses_body(&RESPONSES[..7]);
        let (tl, r) = run_dialect(Dialect::Responses, &input, input.len());
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        assert!(e.message.contains("terminal event"), "{}", e.message);
        assert_eq!(tl.events.len(), 3);
        // `incomplete` is finish reason length; a terminal event without tokens ends cleanly
        // with no event (the engine's rule then calls it no output).
        let input = responses_body(&[
            RESPONSES[0],
            (
                "response.completed",
                r#"{"response":{"status":"incomplete","usage":{"input_tokens":5,"output_tokens":0}},"type":"response.completed"}"#,
            ),
        ]);
        let (tl, r) = run_dialect(Dialect::Responses, &input, 3);
        assert_eq!(r, Ok(Progress::Finished { reusable: true }));
        assert!(tl.events.is_empty());
        assert_eq!(tl.finish_reason, Some(FinishReason::Length));
        // An error event fails the request with the server's message.
        let input = responses_body(&[
            RESPONSES[0],
            RESPONSES[4],
            (
                "error",
                r#"{"type":"error","code":"500","message":"engine died","param":null}"#,
            ),
        ]);
        let (tl, r) = run_dialect(Dialect::Responses, &input, 5);
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ServerError);
        assert!(e.message.contains("engine died"), "{}", e.message);
        assert_eq!(tl.events.len(), 1);
    }

    const VLLM: &[&str] = &[
        r#"{"id":"c","object":"text_completion","choices":[{"index":0,"text":"Hel","finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#,
        r#"{"id":"c","object":"text_completion","choices":[{"index":0,"text":"lo \"x\"","finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#,
        r#"{"id":"c","object":"text_completion","choices":[{"index":0,"text":"!","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}"#,
        r#"{"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}"#,
        "[DONE]",
    ];

    #[test]
    fn vllm_stream_with_continuous_usage_any_split() {
        let input = chunked(VLLM);
        for step in [1, 2, 7, 64, input.len()] {
            let (tl, r) = run(&input, step, true);
            assert_eq!(r, Ok(Progress::Finished { reusable: true }), "step {step}");
            let tokens: Vec<u32> = tl.events.iter().map(|e| e.tokens).collect();
            assert_eq!(tokens, [1, 2, 1], "step {step}");
            assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
            assert_eq!(tl.finish_reason, Some(FinishReason::Length));
            assert_eq!(tl.usage.map(|u| u.completion_tokens), Some(4));
            assert!(tl.done);
            assert_eq!(tl.content_text.as_deref(), Some("Hello \"x\"!"));
            assert_eq!(tl.status, Some(200));
            assert!(tl.first_token.is_some() && tl.first_event <= tl.first_token);
        }
    }

    #[test]
    fn final_usage_is_not_one_events_tokens() {
        // llama.cpp completions: usage only in the last (finish) chunk.
        let input = chunked(&[
            r#"{"choices":[{"text":"a","finish_reason":null}]}"#,
            r#"{"choices":[{"text":"b","finish_reason":null}]}"#,
            r#"{"choices":[{"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}"#,
            "[DONE]",
        ]);
        let (tl, r) = run(&input, 5, false);
        assert!(r.is_ok(), "{r:?}");
        let tokens: Vec<u32> = tl.events.iter().map(|e| e.tokens).collect();
        assert_eq!(tokens, [1, 1, 0]);
        assert_eq!(tl.token_count_source, TokenCountSource::Chunks);
        assert_eq!(tl.output_tokens(), 9);
        assert_eq!(tl.events[2].channel, Channel::Empty);
    }

    #[test]
    fn chat_channels_and_first_token() {
        let input = chunked(&[
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"think"}}]}"#,
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"weird_reason"}]}"#,
            "[DONE]",
        ]);
        let (tl, r) = run(&input, 3, true);
        assert!(r.is_ok(), "{r:?}");
        let ch: Vec<Channel> = tl.events.iter().map(|e| e.channel).collect();
        assert_eq!(
            ch,
            [
                Channel::Empty,
                Channel::Reasoning,
                Channel::Content,
                Channel::ToolCall,
                Channel::Empty
            ]
        );
        assert_eq!(tl.first_event, Some(tl.events[0].t));
        assert_eq!(tl.first_token, Some(tl.events[1].t));
        assert_eq!(tl.finish_reason, Some(FinishReason::Other));
        assert_eq!(tl.finish_reason_raw.as_deref(), Some("weird_reason"));
        assert_eq!(tl.reasoning_text.as_deref(), Some("think"));
        assert_eq!(tl.content_text.as_deref(), Some("hi"));
    }

    #[test]
    fn classifies_failures() {
        let cases: Vec<(Vec<u8>, ErrorKind, &str)> = vec![
            (
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 52\r\n\r\n{\"error\":{\"message\":\"prompt too long\",\"code\":400}}\n".to_vec(),
                ErrorKind::HttpStatus,
                "prompt too long",
            ),
            (
                b"HTTP/1.1 422 Unprocessable\r\ncontent-length: 23\r\n\r\n{\"error\":\"tgi says no\"}".to_vec(),
                ErrorKind::HttpStatus,
                "tgi says no",
            ),
            (
                b"HTTP/1.1 500 Oops\r\ncontent-length: 9\r\n\r\nnot json!".to_vec(),
                ErrorKind::HttpStatus,
                "not json!",
            ),
            (
                chunked(&[r#"{"error":{"message":"engine died","type":"x","code":500}}"#, "[DONE]"]),
                ErrorKind::ServerError,
                "engine died",
            ),
            (
                chunked(&[r#"{"object":"error","message":"old shape"}"#]),
                ErrorKind::ServerError,
                "old shape",
            ),
            (chunked(&["{not json"]), ErrorKind::Protocol, "malformed stream event"),
            (
                chunked(&[r#"{"choices":[{"text":"a"}]}"#]),
                ErrorKind::Protocol,
                "without [DONE]",
            ),
            (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\ndata:".to_vec(), ErrorKind::Protocol, "closed before the stream finished"),
            (b"HTTX garbage\r\n\r\n".to_vec(), ErrorKind::Protocol, "invalid response head"),
            (b"HTTP/1.1 200".to_vec(), ErrorKind::Protocol, "middle of the response head"),
        ];
        for (input, kind, needle) in cases {
            for step in [1, 4, input.len()] {
                let (_, r) = run(&input, step, false);
                let e = r.expect_err(needle);
                assert_eq!(e.kind, kind, "{needle}: {e}");
                assert!(
                    e.message.contains(needle),
                    "{needle:?} not in {:?}",
                    e.message
                );
            }
        }
    }

    #[test]
    fn observer_can_stop_and_sees_text() {
        let input = chunked(VLLM);
        let mut tl = Timeline::new(0, 8, false);
        let mut d = StreamDecoder::new(1 << 20);
        let mut buf = BytesMut::from(&input[..]);
        let mut seen = Vec::new();
        let mut obs = |rec: &EventRecord, text: Option<&[u8]>| {
            seen.push((rec.tokens, text.map(|t| t.to_vec())));
            if seen.len() == 2 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        };
        assert_eq!(
            d.feed(&mut buf, 7, &mut tl, &mut obs),
            Ok(Progress::Stopped)
        );
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].1.as_deref(), Some(&br#"lo \"x\""#[..]));
        assert_eq!(tl.events.len(), 2);
        assert!(tl.events.iter().all(|e| e.t == 7));
    }

    #[test]
    fn reset_decodes_a_second_response() {
        let input = chunked(VLLM);
        let mut d = StreamDecoder::new(1 << 20);
        for _ in 0..2 {
            let mut tl = Timeline::new(0, 8, false);
            let mut buf = BytesMut::from(&input[..]);
            let r = d.feed(&mut buf, 1, &mut tl, &mut NoopObserver);
            assert_eq!(r, Ok(Progress::Finished { reusable: true }));
            assert_eq!(tl.events.len(), 3);
            d.reset();
        }
    }

    mod model {
        //! Model-based property test: any event list, framed into any chunks and split into any
        //! reads, decodes to exactly what the list says (the naive twin is the list itself).
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        struct Ev {
            content: String,
            reasoning: String,
            /// Tokens this event adds to the running usage (continuous mode only).
            tokens: u64,
        }

        fn text() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just("a"),
                    Just(" b"),
                    Just("\""),
                    Just("\\"),
                    Just("\n"),
                    Just("é"),
                    Just("😀")
                ],
                0..4,
            )
            .prop_map(|v| v.concat())
        }

        fn event() -> impl Strategy<Value = Ev> {
            (text(), text(), 0u64..4).prop_map(|(content, reasoning, tokens)| Ev {
                content,
                reasoning,
                tokens,
            })
        }

        fn sse(evs: &[Ev], continuous: bool) -> Vec<u8> {
            let mut out = String::new();
            let mut running = 0;
            for (i, e) in evs.iter().enumerate() {
                running += e.tokens;
                let finish = if i + 1 == evs.len() {
                    "\"stop\""
                } else {
                    "null"
                };
                let mut delta =
                    format!("\"content\":{}", serde_json::to_string(&e.content).unwrap());
                if !e.reasoning.is_empty() {
                    delta.push_str(&format!(
                        ",\"reasoning_content\":{}",
                        serde_json::to_string(&e.reasoning).unwrap()
                    ));
                }
                let usage = if continuous {
                    format!(",\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{running},\"total_tokens\":{}}}", running + 3)
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{{delta}}},\"finish_reason\":{finish}}}]{usage}}}\n\n"
                ));
            }
            out.push_str("data: [DONE]\n\n");
            out.into_bytes()
        }

        fn frame(body: &[u8], chunk_sizes: &[usize]) -> Vec<u8> {
            let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            let mut at = 0;
            let mut i = 0;
            while at < body.len() {
                let n = chunk_sizes
                    .get(i)
                    .copied()
                    .unwrap_or(body.len())
                    .clamp(1, body.len() - at);
                out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                out.extend_from_slice(&body[at..at + n]);
                out.extend_from_slice(b"\r\n");
                at += n;
                i += 1;
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }

        proptest! {
            /// The fuzz-style half: arbitrary bytes after a valid head, in arbitrary reads,
            /// end in a classified outcome and never a panic.
            #[test]
            fn arbitrary_bytes_never_panic(
                body in proptest::collection::vec(any::<u8>(), 0..600),
                cut in 1usize..64,
                chunked in any::<bool>(),
            ) {
                let mut input = if chunked {
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()
                } else {
                    b"HTTP/1.1 200 OK\r\n\r\n".to_vec()
                };
                input.extend_from_slice(&body);
                let mut tl = Timeline::new(0, 4, true);
                let mut d = StreamDecoder::new(256);
                let mut buf = BytesMut::new();
                let mut result = Ok(Progress::NeedMore);
                for piece in input.chunks(cut) {
                    buf.extend_from_slice(piece);
                    result = d.feed(&mut buf, 1, &mut tl, &mut NoopObserver);
                    if result != Ok(Progress::NeedMore) {
                        break;
                    }
                }
                if result == Ok(Progress::NeedMore) {
                    result = d.eof(2, &mut tl);
                }
                match result {
                    Ok(p) => prop_assert!(matches!(p, Progress::Finished { .. }), "{:?}", p),
                    Err(e) => prop_assert!(
                        matches!(e.kind, ErrorKind::Protocol | ErrorKind::ServerError),
                        "{e}"
                    ),
                }
            }
        }

        proptest! {
            #[test]
            fn decodes_what_was_sent_for_any_framing_and_split(
                evs in proptest::collection::vec(event(), 1..12),
                continuous in any::<bool>(),
                chunk_sizes in proptest::collection::vec(1usize..400, 0..40),
                cuts in proptest::collection::vec(1usize..300, 0..60),
            ) {
                let input = frame(&sse(&evs, continuous), &chunk_sizes);
                let mut tl = Timeline::new(0, 4, true);
                let mut d = StreamDecoder::new(1 << 20);
                let mut buf = BytesMut::new();
                let mut at = 0;
                let mut read = 0u64;
                let mut result = Ok(Progress::NeedMore);
                while at < input.len() {
                    let n = cuts.get(read as usize).copied().unwrap_or(input.len()).min(input.len() - at);
                    buf.extend_from_slice(&input[at..at + n]);
                    at += n;
                    read += 1;
                    result = d.feed(&mut buf, read, &mut tl, &mut NoopObserver);
                    prop_assert!(result.is_ok(), "{:?}", result);
                }
                prop_assert_eq!(result, Ok(Progress::Finished { reusable: true }));
                prop_assert!(tl.done);
                prop_assert_eq!(tl.events.len(), evs.len());
                let want_tokens: Vec<u32> = evs
                    .iter()
                    .map(|e| if continuous { e.tokens as u32 } else { (!e.content.is_empty() || !e.reasoning.is_empty()) as u32 })
                    .collect();
                let got_tokens: Vec<u32> = tl.events.iter().map(|e| e.tokens).collect();
                prop_assert_eq!(got_tokens, want_tokens);
                let want_channels: Vec<Channel> = evs
                    .iter()
                    .map(|e| if !e.content.is_empty() { Channel::Content } else if !e.reasoning.is_empty() { Channel::Reasoning } else { Channel::Empty })
                    .collect();
                let got_channels: Vec<Channel> = tl.events.iter().map(|e| e.channel).collect();
                prop_assert_eq!(got_channels, want_channels);
                let content: String = evs.iter().map(|e| e.content.as_str()).collect();
                prop_assert_eq!(tl.content_text.as_deref(), Some(content.as_str()));
                let reasoning: String = evs.iter().map(|e| e.reasoning.as_str()).collect();
                prop_assert_eq!(tl.reasoning_text.as_deref().unwrap_or(""), reasoning.as_str());
                prop_assert!(tl.events.windows(2).all(|w| w[0].t <= w[1].t));
                prop_assert_eq!(tl.finish_reason, Some(FinishReason::Stop));
                let source = if continuous { TokenCountSource::ContinuousUsage } else { TokenCountSource::Chunks };
                prop_assert_eq!(tl.token_count_source, source);
                if continuous {
                    prop_assert_eq!(tl.usage.map(|u| u.completion_tokens), Some(evs.iter().map(|e| e.tokens).sum::<u64>()));
                }
                let first_output = evs.iter().position(|e| !e.content.is_empty() || !e.reasoning.is_empty());
                prop_assert_eq!(tl.first_token, first_output.map(|i| tl.events[i].t));
            }
        }
    }

    #[test]
    fn server_message_shapes() {
        let cases: [(&str, Option<&str>); 5] = [
            (r#"{"error":{"message":"a  b\nc"}}"#, Some("a b c")),
            (r#"{"error":"tgi"}"#, Some("tgi")),
            (r#"{"object":"error","message":"old"}"#, Some("old")),
            (r#"{"detail":"fastapi"}"#, Some("fastapi")),
            ("plain", None),
        ];
        for (body, want) in cases {
            assert_eq!(server_message(body.as_bytes()).as_deref(), want, "{body}");
        }
    }

    #[test]
    fn a_huge_server_message_is_cut_to_one_short_line() {
        let word = "é".repeat(40);
        let long = vec![word.as_str(); 10_000].join("\n");
        let body = serde_json::json!({"error": {"message": long}}).to_string();
        let m = server_message(body.as_bytes()).unwrap();
        assert!(m.ends_with("...") && !m.contains('\n'), "{m}");
        assert_eq!(m.chars().count(), MAX_MESSAGE_CHARS + 3);
        assert!(m.starts_with(&word));
        // Short messages are untouched.
        let short = serde_json::json!({"detail": "model  not\nfound"}).to_string();
        assert_eq!(server_message(short.as_bytes()).unwrap(), "model not found");
    }
}
