//! The [`Client`]: connects, pools, writes requests, and runs the one read loop.

use super::config::ClientConfig;
use super::connect::{self, Conn};
use super::deadline::{Arm, Fired, ReadDeadline};
use super::decode::{self, Progress, StreamDecoder};
use super::observer::{Cancel, StreamObserver};
use super::packet::{self, hub::PacketHub, Unavailable};
use super::plain::StampKeeper;
use super::pool::Pool;
use super::tls;
use crate::clock::Clock;
use crate::proto::body::{BodyChunk, BodyDecoder};
use crate::proto::http1::{encode_request, validate_header, HeadParser, RequestHead};
use crate::proto::native::Dialect;
use crate::timeline::{ErrorKind, RequestError, Timeline};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Read buffer per request; grows only for events larger than this.
const READ_BUF: usize = 8 * 1024;
/// Reads smaller than this would waste a syscall.
const MIN_READ: usize = 1024;
/// The header that carries [`StreamRequest::request_id`].
const REQUEST_ID: &str = "x-request-id";
/// Most handshakes [`Client::preconnect`] has in flight: enough to open a thousand connections
/// in a few round trips, few enough not to overflow a server's accept backlog.
pub const PRECONNECT_IN_FLIGHT: usize = 64;
/// Largest body `get`/`post_json` accept.
const MAX_FULL_BODY: usize = 64 << 20;

/// `Err` (a protocol failure naming `what` and the value) when `value` cannot be sent as header
/// `name` without corrupting the request head.
fn sendable(name: &str, value: &str, what: &str) -> Result<(), RequestError> {
    validate_header(name, value).map_err(|_| {
        RequestError::new(
            ErrorKind::Protocol,
            format!("{what} {value:?} has bytes not allowed in a header; not sent"),
        )
    })
}

/// One streaming request.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    /// API path such as `/v1/completions`; the target's prefix is added.
    pub path: String,
    /// The JSON body (see [`super::request`]).
    pub body: Bytes,
    /// The streaming API the response speaks (OpenAI, or an engine's native one).
    pub dialect: Dialect,
    /// Room to reserve for event records (max tokens + a few); more still works.
    pub expected_events: usize,
    /// Keep the output text; `None` uses [`ClientConfig::keep_text`].
    pub keep_text: Option<bool>,
    /// Sent as `x-request-id` (replacing a configured one), so a server's logs and traces can
    /// be joined to this request; vLLM's `bench serve` sends `{prefix}{index}`. A value that
    /// would corrupt the request head fails the request before anything is sent.
    pub request_id: Option<String>,
    /// One more header for this request alone (name, value), after the configured ones; a
    /// value that would corrupt the request head fails the request before anything is sent.
    pub header: Option<(&'static str, String)>,
}

/// A complete non-streaming response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The server's message for a non-2xx answer, as one line.
    pub fn error_message(&self) -> String {
        decode::server_message(&self.body).unwrap_or_else(|| decode::excerpt(&self.body))
    }
}

/// The HTTP client of one target. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: ClientConfig,
    clock: Clock,
    tls: Option<Arc<rustls::ClientConfig>>,
    pool: Pool,
    /// Keeps the kernel's receive stamping switched on while this client lives (every target
    /// with kernel stamps, TLS included; see `plain::StampKeeper`).
    _stamps: Option<StampKeeper>,
    /// The packet ring its connections take their places at (`ClientConfig::packet_stamps`,
    /// and available here).
    packet: Option<Arc<PacketHub>>,
    /// Why packet stamps were asked for and cannot be had.
    packet_unavailable: Option<Unavailable>,
    /// User-Agent, Authorization and the custom headers, in that order.
    headers: Vec<(String, String)>,
}

/// Why an attempt failed: a dead pooled connection may be retried, anything else may not.
enum AttemptError {
    Dead(String),
    Failed(RequestError),
}

impl From<RequestError> for AttemptError {
    fn from(e: RequestError) -> Self {
        AttemptError::Failed(e)
    }
}

impl Client {
    /// A fresh connection that closed before any response byte: the server's doing, so a
    /// protocol failure (a pooled one is retried instead, see `stream` and `full`).
    fn closed_without_response(&self, why: &str) -> RequestError {
        RequestError::new(
            ErrorKind::Protocol,
            format!(
                "{} closed the connection without a response: {why}",
                self.inner.cfg.target.authority()
            ),
        )
    }

    pub fn new(cfg: ClientConfig, clock: Clock) -> Result<Self, RequestError> {
        let tls = if cfg.target.is_tls() {
            Some(tls::tls_config(&cfg)?)
        } else {
            None
        };
        let mut headers = Vec::new();
        let has = |name: &str| {
            cfg.headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case(name))
        };
        if !has("user-agent") {
            headers.push((
                "User-Agent".to_string(),
                concat!("llmspeed/", env!("CARGO_PKG_VERSION")).to_string(),
            ));
        }
        if let (Some(key), false) = (&cfg.api_key, has("authorization")) {
            headers.push(("Authorization".to_string(), format!("Bearer {key}")));
        }
        headers.extend(cfg.headers.iter().cloned());
        let pool = Pool::new(cfg.max_idle);
        // TLS connections' reads are kernel-stamped too (`tls_conn`): kept on for them alike.
        let _stamps = cfg.kernel_stamps.then(StampKeeper::new).flatten();
        let (packet, packet_unavailable) = if cfg.packet_stamps {
            match packet::open_hub(tls.is_some(), cfg.target.port) {
                Ok(hub) => {
                    note_once(packet::IN_USE);
                    (Some(hub), None)
                }
                Err(why) => {
                    note_once(&why.note());
                    (None, Some(why))
                }
            }
        } else {
            (None, None)
        };
        Ok(Self {
            inner: Arc::new(Inner {
                packet,
                packet_unavailable,
                cfg,
                clock,
                tls,
                pool,
                _stamps,
                headers,
            }),
        })
    }

    /// `Ok` when packet stamps were asked for and every connection opens a packet tap; why
    /// not when they cannot be had (said once on stderr too); `Ok` when not asked for.
    pub fn packet_stamps(&self) -> Result<bool, Unavailable> {
        match &self.inner.packet_unavailable {
            Some(why) => Err(why.clone()),
            None => Ok(self.inner.packet.is_some()),
        }
    }

    /// What the packet ring and the connections' inboxes could not keep so far (their events
    /// kept their reads' stamps); `None` without packet stamps.
    pub fn packet_lost(&self) -> Option<packet::hub::Lost> {
        self.inner.packet.as_ref().map(|h| h.lost())
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Idle keep-alive connections in the pool now.
    pub fn idle_connections(&self) -> usize {
        self.inner.pool.idle_count()
    }

    /// Sends one streaming request and records its timeline. Never panics and always returns a
    /// classified outcome; on failure or cancellation the partial timeline is kept.
    pub async fn stream<O: StreamObserver + ?Sized>(
        &self,
        req: &StreamRequest,
        intended_start: u64,
        observer: &mut O,
        cancel: &Cancel,
    ) -> Timeline {
        let keep_text = req.keep_text.unwrap_or(self.inner.cfg.keep_text);
        let mut tl = Timeline::new(intended_start, req.expected_events, keep_text);
        let total = self.inner.cfg.timeouts.total;
        let deadline = total.map(|d| Instant::now() + d);
        enum End {
            Done(Result<(), RequestError>),
            Cancelled,
            Total,
        }
        let end = tokio::select! {
            biased;
            _ = cancel.cancelled() => End::Cancelled,
            _ = sleep_until(deadline) => End::Total,
            r = self.run_stream(req, &mut tl, observer) => End::Done(r),
        };
        tl.outcome = match end {
            End::Done(r) => r,
            End::Cancelled => Err(RequestError::new(
                ErrorKind::Cancelled,
                format!("cancelled after {} events", tl.events.len()),
            )),
            End::Total => Err(RequestError::new(
                ErrorKind::TimeoutTotal,
                format!(
                    "the request took longer than the total limit of {} ({} events received)",
                    fmt_dur(total.unwrap_or_default()),
                    tl.events.len()
                ),
            )),
        };
        if tl.end.is_none() {
            tl.end = Some(self.inner.clock.raw());
        }
        tl
    }

    /// `GET path` (prefix added), read to the end. Any status is returned; only transport and
    /// framing failures are errors.
    pub async fn get(&self, path: &str) -> Result<Response, RequestError> {
        self.full("GET", path, &[], None).await
    }

    /// `POST path` with a JSON body, read to the end.
    pub async fn post_json(&self, path: &str, body: &[u8]) -> Result<Response, RequestError> {
        self.full("POST", path, body, None).await
    }

    /// [`Client::post_json`] carrying `x-request-id: request_id` when set (it replaces a
    /// configured one, as in [`Client::stream`]).
    pub async fn post_json_with_id(
        &self,
        path: &str,
        body: &[u8],
        request_id: Option<&str>,
    ) -> Result<Response, RequestError> {
        if let Some(id) = request_id {
            sendable(REQUEST_ID, id, "request id")?;
        }
        self.full("POST", path, body, request_id).await
    }

    /// The request bytes. `request_id`, when set, replaces any configured `x-request-id`;
    /// `extra` comes last.
    fn encode(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        accept: Option<&str>,
        request_id: Option<&str>,
        extra: Option<(&str, &str)>,
    ) -> BytesMut {
        let path = self.inner.cfg.target.path(path);
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(self.inner.headers.len() + 3);
        if let Some(a) = accept {
            headers.push(("Accept", a));
        }
        headers.extend(
            self.inner
                .headers
                .iter()
                .filter(|(k, _)| request_id.is_none() || !k.eq_ignore_ascii_case(REQUEST_ID))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        if let Some(id) = request_id {
            headers.push((REQUEST_ID, id));
        }
        headers.extend(extra);
        let head = RequestHead {
            method,
            path: &path,
            host: &self.inner.cfg.target.host_header,
            headers: &headers,
            content_type: (method == "POST").then_some("application/json"),
            keep_alive: true,
        };
        let mut out = BytesMut::with_capacity(256 + path.len() + body.len());
        encode_request(&mut out, &head, body);
        out
    }

    async fn fresh_conn(&self) -> Result<Conn, RequestError> {
        let target = &self.inner.cfg.target;
        let fut = connect::connect(
            target,
            self.inner.tls.as_ref(),
            self.inner.cfg.kernel_stamps,
            self.inner.packet.as_ref(),
        );
        match self.inner.cfg.timeouts.connect {
            None => fut.await,
            Some(limit) => match tokio::time::timeout(limit, fut).await {
                Ok(r) => r,
                Err(_) => Err(RequestError::new(
                    ErrorKind::TimeoutConnect,
                    format!(
                        "connecting to {} took longer than {}",
                        target.authority(),
                        fmt_dur(limit)
                    ),
                )),
            },
        }
    }

    /// Opens connections until `n` (at most the pool's size) are idle in the pool, at most
    /// [`PRECONNECT_IN_FLIGHT`] handshakes at once, so the requests that follow start without
    /// a TCP or TLS handshake. Returns how many are idle afterwards; a connect failure ends it
    /// with that error (the connections already opened stay pooled).
    pub async fn preconnect(&self, n: usize) -> Result<usize, RequestError> {
        let want = n
            .min(self.inner.cfg.max_idle)
            .saturating_sub(self.inner.pool.idle_count());
        let mut set = tokio::task::JoinSet::new();
        let mut started = 0;
        let mut first_err = None;
        while started < want || !set.is_empty() {
            while started < want && set.len() < PRECONNECT_IN_FLIGHT && first_err.is_none() {
                let c = self.clone();
                set.spawn(async move { c.fresh_conn().await });
                started += 1;
            }
            let Some(done) = set.join_next().await else {
                break;
            };
            match done {
                Ok(Ok(conn)) => self.inner.pool.put(conn),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(e) => {
                    first_err.get_or_insert(RequestError::new(
                        ErrorKind::Connect,
                        format!("a connect task failed: {e}"),
                    ));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(self.inner.pool.idle_count()),
        }
    }

    /// A pooled connection when there is one (`true`), else a new one.
    async fn conn(&self, allow_pooled: bool) -> Result<(Conn, bool), RequestError> {
        if allow_pooled {
            if let Some(c) = self.inner.pool.take() {
                return Ok((c, true));
            }
        }
        Ok((self.fresh_conn().await?, false))
    }

    async fn run_stream<O: StreamObserver + ?Sized>(
        &self,
        req: &StreamRequest,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<(), RequestError> {
        // Checked here, once per request, because the fields are plain data anyone can set.
        if let Some(id) = &req.request_id {
            sendable(REQUEST_ID, id, "request id")?;
        }
        if let Some((name, value)) = &req.header {
            sendable(name, value, name)?;
        }
        let wbuf = self.encode(
            "POST",
            &req.path,
            &req.body,
            Some("text/event-stream"),
            req.request_id.as_deref(),
            req.header.as_ref().map(|(n, v)| (*n, v.as_str())),
        );
        let mut retried = false;
        // How long taking a connection took is part of the dispatch lag (`analysis::client_lag`).
        tl.connect_start = Some(self.inner.clock.raw());
        loop {
            let (mut conn, pooled) = self.conn(!retried).await?;
            match self
                .stream_on(&mut conn, &wbuf, req.dialect, tl, observer)
                .await
            {
                Ok(reusable) => {
                    if reusable {
                        self.inner.pool.put(conn);
                    }
                    return Ok(());
                }
                // A pooled connection the server had already closed (llama.cpp drops idle
                // ones after 5 s): not the server's failure; try once on a fresh connection.
                Err(AttemptError::Dead(_)) if pooled => {
                    retried = true;
                    tl.send_start = None;
                    tl.write_done = None;
                }
                Err(AttemptError::Dead(why)) => return Err(self.closed_without_response(&why)),
                Err(AttemptError::Failed(e)) => return Err(e),
            }
        }
    }

    /// One attempt on one connection. `Ok(reusable)` on success.
    async fn stream_on<O: StreamObserver + ?Sized>(
        &self,
        conn: &mut Conn,
        request: &[u8],
        dialect: Dialect,
        tl: &mut Timeline,
        observer: &mut O,
    ) -> Result<bool, AttemptError> {
        let clock = &self.inner.clock;
        let timeouts = self.inner.cfg.timeouts;
        tl.send_start = Some(clock.raw());
        if let Err(e) = conn.write_all(request).await {
            return Err(AttemptError::Dead(format!("write failed: {e}")));
        }
        tl.write_done = Some(clock.raw());
        let mut buf = BytesMut::with_capacity(READ_BUF);
        let mut dec = StreamDecoder::with_dialect(self.inner.cfg.max_event_bytes, dialect);
        let mut deadline = ReadDeadline::new(timeouts);
        let mut seen = 0u64;
        // The last event's read stamp, where the gap limit runs from. Noting it is all the
        // per-event work: the timer is armed once per phase and re-armed only when it fires
        // while events still flow (see `deadline`), not moved per token.
        let mut last_event = tl.write_done.unwrap_or_default();
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut timed = false;
        loop {
            if buf.capacity() - buf.len() < MIN_READ {
                buf.reserve(READ_BUF);
            }
            match deadline.before_read(seen, tl.done) {
                Arm::Unlimited => timed = false,
                Arm::Keep => {}
                Arm::In(limit) => {
                    timer.as_mut().reset(Instant::now() + limit);
                    timed = true;
                }
            }
            let want = buf.capacity() - buf.len();
            let (read, stamp) = if timed {
                tokio::select! {
                    biased;
                    r = conn.read_stamped(&mut buf, clock) => r,
                    _ = &mut timer => {
                        let since = Duration::from_nanos(clock.delta_ns(last_event, clock.raw()));
                        match deadline.fired(seen, since) {
                            Fired::RearmIn(rest) => {
                                timer.as_mut().reset(Instant::now() + rest);
                                continue;
                            }
                            Fired::Expired(phase) => {
                                return match phase.timeout_kind() {
                                    // The stream is complete; only the end of the body is late.
                                    None => Ok(false),
                                    Some(kind) => Err(self.timeout_error(kind, tl).into()),
                                };
                            }
                        }
                    }
                }
            } else {
                conn.read_stamped(&mut buf, clock).await
            };
            // The stamp every event completed by this read carries: taken before any parsing,
            // moved back to the kernel's receive stamp where there is one (`net::stamp`).
            let t = stamp.t;
            match read {
                Ok(0) => {
                    if !dec.received_any() {
                        return Err(AttemptError::Dead("end of file".to_string()));
                    }
                    return match dec.eof(t, tl)? {
                        Progress::Finished { .. } => Ok(false),
                        Progress::Stopped => Err(stopped(tl).into()),
                        Progress::NeedMore => Ok(false),
                    };
                }
                Ok(_) => {}
                Err(e) => {
                    if !dec.received_any() {
                        return Err(AttemptError::Dead(format!("read failed: {e}")));
                    }
                    return Err(dec.read_failed(t, tl, &e).into());
                }
            }
            let first_new = tl.events.len();
            let fed = match conn.packet_clock(clock, t, buf.len()) {
                None => {
                    let fed = dec.feed(&mut buf, t, tl, observer);
                    tl.note_read(stamp.fallback, stamp.wakeup_ns, first_new);
                    fed
                }
                // `--packet-stamps`: each event carries its own segment's arrival.
                Some(mut at) => {
                    let fed = dec.feed_at(&mut buf, &mut at, tl, observer);
                    let all = at.all_hit();
                    tl.note_packet_read(all, t, stamp.fallback, first_new, |e| at.wakeup_ns(e));
                    fed
                }
            };
            let n = *read.as_ref().unwrap_or(&0);
            if let Some(left) = stamp.left {
                tl.note_socket_bytes(
                    first_new,
                    u32::try_from(n).unwrap_or(u32::MAX).saturating_add(left),
                );
            }
            // Data may be waiting behind it: its successor's stamp may be of data that came in
            // before this read returned (`analysis::client_lag`). The kernel's count of what
            // the read left (`stamp.left`) is not used here: data that arrived while the read
            // ran counts there too, though it came after the read's stamp, and taken as older
            // it widened the bounds enough to mark a simulated cell Client-bound in the suite.
            if n == want && tl.events.len() > first_new {
                tl.note_full_read();
            }
            match fed? {
                Progress::NeedMore => {}
                Progress::Finished { reusable } => return Ok(reusable && buf.is_empty()),
                Progress::Stopped => return Err(stopped(tl).into()),
            }
            if dec.events_seen() != seen {
                seen = dec.events_seen();
                last_event = t;
            }
        }
    }

    fn timeout_error(&self, kind: ErrorKind, tl: &Timeline) -> RequestError {
        let t = self.inner.cfg.timeouts;
        let message = match kind {
            ErrorKind::TimeoutFirstByte => format!(
                "no stream event within {} of sending the request (first-byte timeout)",
                fmt_dur(t.first_byte.unwrap_or_default())
            ),
            _ => format!(
                "no stream event for {} after {} events (gap timeout)",
                fmt_dur(t.gap.unwrap_or_default()),
                tl.events.len()
            ),
        };
        RequestError::new(kind, message)
    }

    async fn full(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        request_id: Option<&str>,
    ) -> Result<Response, RequestError> {
        let wbuf = self.encode(method, path, body, None, request_id, None);
        let total = self.inner.cfg.timeouts.total;
        let attempt = async {
            let mut retried = false;
            loop {
                let (mut conn, pooled) = self.conn(!retried).await?;
                match self.full_on(&mut conn, &wbuf, method).await {
                    Ok((resp, reusable)) => {
                        if reusable {
                            self.inner.pool.put(conn);
                        }
                        return Ok(resp);
                    }
                    Err(AttemptError::Dead(_)) if pooled => retried = true,
                    Err(AttemptError::Dead(why)) => return Err(self.closed_without_response(&why)),
                    Err(AttemptError::Failed(e)) => return Err(e),
                }
            }
        };
        match total {
            None => attempt.await,
            Some(limit) => tokio::time::timeout(limit, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(RequestError::new(
                        ErrorKind::TimeoutTotal,
                        format!("{method} {path} took longer than {}", fmt_dur(limit)),
                    ))
                }),
        }
    }

    async fn full_on(
        &self,
        conn: &mut Conn,
        request: &[u8],
        method: &str,
    ) -> Result<(Response, bool), AttemptError> {
        let timeouts = self.inner.cfg.timeouts;
        if let Err(e) = conn.write_all(request).await {
            return Err(AttemptError::Dead(format!("write failed: {e}")));
        }
        let mut buf = BytesMut::with_capacity(READ_BUF);
        let mut head_parser = HeadParser::new(decode::MAX_HEAD_BYTES);
        let mut head = None;
        let mut decoder = None::<BodyDecoder>;
        let mut body = BytesMut::new();
        let mut received = false;
        let mut last = Instant::now();
        loop {
            let (limit, kind) = if head.is_none() {
                (timeouts.first_byte, ErrorKind::TimeoutFirstByte)
            } else {
                (timeouts.gap, ErrorKind::TimeoutGap)
            };
            if buf.capacity() - buf.len() < MIN_READ {
                buf.reserve(READ_BUF);
            }
            let read = match limit {
                None => conn.read_buf(&mut buf).await,
                Some(d) => match tokio::time::timeout_at(last + d, conn.read_buf(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(RequestError::new(
                            kind,
                            format!("{method} got no data for {}", fmt_dur(d)),
                        )
                        .into())
                    }
                },
            };
            last = Instant::now();
            let n = match read {
                Ok(n) => n,
                Err(e) if !received => return Err(AttemptError::Dead(format!("read failed: {e}"))),
                Err(e) => {
                    return Err(RequestError::new(
                        ErrorKind::Protocol,
                        format!("connection error while reading the response: {e}"),
                    )
                    .into())
                }
            };
            if n == 0 && !received {
                return Err(AttemptError::Dead("end of file".to_string()));
            }
            received = true;
            if head.is_none() {
                // The parser consumes interim 1xx heads itself, also when the final head sits
                // behind one in the same read, so what comes back is always the final head.
                match head_parser.parse(&mut buf, method) {
                    Ok(Some(h)) => {
                        decoder = Some(BodyDecoder::new(h.body));
                        head = Some(h);
                    }
                    Ok(None) if n == 0 => {
                        return Err(protocol(
                            "connection closed in the middle of the response head",
                        ))
                    }
                    Ok(None) => continue,
                    Err(e) => return Err(protocol(format!("invalid response head: {e}"))),
                }
            }
            let (Some(h), Some(dec)) = (head.as_ref(), decoder.as_mut()) else {
                continue;
            };
            loop {
                let chunk = if dec.is_done() {
                    Ok(Some(BodyChunk::End))
                } else if n == 0 && buf.is_empty() {
                    dec.eof()
                } else {
                    dec.decode(&mut buf)
                };
                match chunk {
                    Ok(Some(BodyChunk::Data(d))) => {
                        if body.len() + d.len() > MAX_FULL_BODY {
                            return Err(protocol(format!(
                                "response body larger than {} MiB",
                                MAX_FULL_BODY >> 20
                            )));
                        }
                        body.extend_from_slice(&d);
                    }
                    Ok(Some(BodyChunk::End)) => {
                        let reusable = h.keep_alive && buf.is_empty() && n != 0;
                        let resp = Response {
                            status: h.status,
                            content_type: h.content_type.clone(),
                            body: body.freeze(),
                        };
                        return Ok((resp, reusable));
                    }
                    Ok(None) if n == 0 => {
                        return Err(protocol("connection closed before the response body ended"))
                    }
                    Ok(None) => break,
                    Err(e) => return Err(protocol(format!("broken response body: {e}"))),
                }
            }
        }
    }
}

/// Says once per process which stamps the clients use when packet stamps were asked for:
/// them, or why not (every client of a run would say the same).
fn note_once(line: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("{line}"));
}

fn protocol(message: impl Into<String>) -> AttemptError {
    AttemptError::Failed(RequestError::new(ErrorKind::Protocol, message))
}

fn stopped(tl: &Timeline) -> RequestError {
    RequestError::new(
        ErrorKind::Cancelled,
        format!(
            "stopped by the stream observer after {} events",
            tl.events.len()
        ),
    )
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn fmt_dur(d: Duration) -> String {
    if d.as_secs() >= 1 && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
