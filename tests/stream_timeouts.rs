//! What the read loop's timeouts mean, pinned against a scripted server: the first-byte limit,
//! the gap limit measured from the LAST event, the wait for the body's end after `[DONE]`, and a
//! stream whose events keep arriving inside the gap limit for longer than the limit in total.
//!
//! The loop arms its timer lazily (it is not moved per event; when it fires, the real deadline
//! is computed from the last event's stamp), so these tests are what says the semantics did not
//! change. Bounds leave room for a loaded machine but not for a deadline measured from the wrong
//! event: a server stall is 20 s where a test asserts the client gave up before it ended (the
//! client gives up after its limit, so the stall costs nothing), and a limit that must not fire
//! is several times the pauses under it.

mod support;

use bytes::Bytes;
use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target};
use llmspeed::timeline::{ErrorKind, Timeline};
use std::time::{Duration, Instant};
use support::*;

fn request() -> StreamRequest {
    StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(br#"{"model":"m","prompt":"hi","stream":true}"#),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 64,
        keep_text: None,
        request_id: None,
    }
}

/// Runs `writes` as the one response; returns the timeline, the client (for its pool and clock)
/// and how long the request took on the wall clock.
async fn run(
    writes: Vec<Step>,
    tweak: impl FnOnce(&mut ClientConfig),
) -> (Timeline, Client, Duration) {
    let server = Server::start(vec![respond(writes)]).await;
    let mut cfg = ClientConfig::new(Target::parse(&format!("{}/v1", server.base_url())).unwrap());
    tweak(&mut cfg);
    let client = Client::new(cfg, Clock::new()).unwrap();
    let started = Instant::now();
    let start = client.clock().raw();
    let tl = client
        .stream(&request(), start, &mut NoopObserver, &Cancel::new())
        .await;
    (tl, client, started.elapsed())
}

fn event(n: u64) -> Step {
    Step::Write(chunk(vllm_event(n, 3, None).as_bytes()))
}

fn head() -> Step {
    Step::Write(CHUNKED_HEAD.as_bytes().to_vec())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn first_byte_timeout_fires_when_no_event_comes() {
    let (tl, _c, took) = run(vec![head(), Step::Pause(ms(20_000))], |cfg| {
        cfg.timeouts.first_byte = Some(ms(300));
        cfg.timeouts.gap = Some(ms(100));
    })
    .await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeoutFirstByte, "{e}");
    assert!(tl.events.is_empty());
    // The first-byte limit, not the (shorter) gap limit, applies before the first event.
    assert!(took >= ms(300), "timed out after {took:?}");
    assert!(
        took < ms(15_000),
        "gave up long before the stall ended: {took:?}"
    );
}

#[tokio::test]
async fn after_the_first_event_the_gap_limit_replaces_the_first_byte_limit() {
    // A long first-byte limit must not keep a stalled stream alive once events flow...
    let (tl, _c, took) = run(vec![head(), event(1), Step::Pause(ms(20_000))], |cfg| {
        cfg.timeouts.first_byte = Some(ms(60_000));
        cfg.timeouts.gap = Some(ms(300));
    })
    .await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::TimeoutGap));
    assert_eq!(tl.events.len(), 1);
    assert!(took < ms(15_000), "gap limit applied: {took:?}");

    // ...and a short first-byte limit must not end a stream whose later gaps exceed it.
    // (A 100 ms pause under a 1 s first-byte limit: a loaded machine's late write must not
    // look like a stall.)
    let writes = vec![
        head(),
        Step::Pause(ms(100)),
        event(1),
        Step::Pause(ms(1500)),
        event(2),
        Step::Write(chunk(DONE_EVENT.as_bytes())),
        Step::Write(LAST_CHUNK.to_vec()),
    ];
    let (tl, _c, _) = run(writes, |cfg| {
        cfg.timeouts.first_byte = Some(ms(1000));
        cfg.timeouts.gap = Some(ms(10_000));
    })
    .await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.events.len(), 2);
}

#[tokio::test]
async fn gap_timeout_is_measured_from_the_last_event() {
    let gap = ms(400);
    let writes = vec![
        head(),
        event(1),
        Step::Pause(ms(250)),
        event(2),
        Step::Pause(ms(250)),
        event(3),
        Step::Pause(ms(20_000)),
    ];
    let (tl, client, took) = run(writes, |cfg| cfg.timeouts.gap = Some(gap)).await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeoutGap, "{e}");
    assert!(e.message.contains("after 3 events"), "{e}");
    assert_eq!(tl.events.len(), 3);
    // Measured from the first event the timeout would come 100 ms after the third; from the
    // last, a whole gap limit after it. 1 ms of slack for the two clocks' rounding.
    let last = tl.events[2].t;
    let waited = Duration::from_nanos(client.clock().delta_ns(last, tl.end.unwrap()));
    assert!(
        waited + ms(1) >= gap,
        "timed out {waited:?} after the last event"
    );
    assert!(
        waited < ms(10_000),
        "timed out {waited:?} after the last event"
    );
    assert!(
        took < ms(15_000),
        "gave up before the stall ended: {took:?}"
    );
}

#[tokio::test]
async fn events_inside_the_gap_limit_never_time_out_however_long_the_stream() {
    // 30 events 100 ms apart: 2.9 s in total, about twice the 1.5 s gap limit, which is 15
    // times each pause (a loaded machine's late write is no stall).
    let mut writes = vec![head()];
    for n in 1..=30 {
        writes.push(event(n));
        writes.push(Step::Pause(ms(100)));
    }
    writes.push(Step::Write(chunk(DONE_EVENT.as_bytes())));
    writes.push(Step::Write(LAST_CHUNK.to_vec()));
    let (tl, client, took) = run(writes, |cfg| {
        cfg.timeouts.gap = Some(ms(1500));
        cfg.timeouts.first_byte = Some(ms(1500));
    })
    .await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.events.len(), 30);
    assert!(took >= ms(2900), "the stream really lasted: {took:?}");
    assert_eq!(
        client.idle_connections(),
        1,
        "a clean end keeps the connection"
    );
}

#[tokio::test]
async fn after_done_the_client_waits_at_most_the_gap_limit_for_the_body_end() {
    let writes = vec![
        head(),
        event(1),
        Step::Write(chunk(DONE_EVENT.as_bytes())),
        // No last chunk: the body never ends while the client waits.
        Step::Pause(ms(20_000)),
    ];
    let (tl, client, took) = run(writes, |cfg| cfg.timeouts.gap = Some(ms(300))).await;
    assert_eq!(tl.outcome, Ok(()), "the stream was complete at [DONE]");
    assert!(tl.done);
    assert_eq!(tl.events.len(), 1);
    assert_eq!(
        client.idle_connections(),
        0,
        "a body that did not end is not reused"
    );
    assert!(took >= ms(300), "waited the gap limit: {took:?}");
    // min(gap, 2 s) is 300 ms; the bound leaves room for a loaded machine and none for
    // waiting out the 20 s stall.
    assert!(
        took < ms(10_000),
        "waited min(gap, 2 s), not until the body ended: {took:?}"
    );
}
