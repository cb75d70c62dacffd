//! Kernel receive stamps (Linux): a client that wakes up late keeps the stamps of when the data
//! arrived. A raw server thread writes token 1, then token 2 five milliseconds later; the
//! client's observer blocks its thread 50 ms on token 1, so the read of token 2 returns about
//! 45 ms after token 2 arrived. With kernel stamps the measured gap is the server's; with the
//! client's own clock it is the observer's 50 ms.
#![cfg(target_os = "linux")]

mod support;

use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, Flow, StreamRequest, Target};
use llmspeed::timeline::{EventRecord, StampFallback, StampSource, Timeline};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;
use support::{chunk, vllm_event, vllm_usage_event, CHUNKED_HEAD, DONE_EVENT, LAST_CHUNK};

const SERVER_GAP: Duration = Duration::from_millis(5);
const BUSY: Duration = Duration::from_millis(50);

/// Reads one request (head and Content-Length body) off `s`.
fn read_request(s: &mut impl Read) {
    let mut buf = Vec::new();
    let mut piece = [0u8; 4096];
    loop {
        let n = s.read(&mut piece).expect("read request");
        assert!(n > 0, "client closed before its request ended");
        buf.extend_from_slice(&piece[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("content-length"));
        if buf.len() >= end + 4 + len {
            return;
        }
    }
}

/// One streamed response with two tokens `SERVER_GAP` apart. Returns the client's timeline and
/// the bounds of the true gap between the two tokens' arrivals (same process, same clock): on
/// loopback a token arrives inside the server's `write`, so the gap lies between the later
/// write's start minus the earlier write's end and the later write's end minus the earlier
/// write's start. Bounds, not one stamp: on a busy machine the server thread can be preempted
/// between a write and its stamp.
fn run(kernel_stamps: bool) -> (Timeline, (Duration, Duration)) {
    run_over(kernel_stamps, false)
}

/// A server socket, plain or TLS (rustls over the accepted stream, a self-signed certificate:
/// the client runs with `--insecure`).
trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

fn server_end(s: std::net::TcpStream, tls: bool) -> Box<dyn Io> {
    if !tls {
        return Box::new(s);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
    Box::new(rustls::StreamOwned::new(conn, s))
}

fn run_over(kernel_stamps: bool, tls: bool) -> (Timeline, (Duration, Duration)) {
    let clock = Clock::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let server_clock = clock.clone();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut s = server_end(s, tls);
        read_request(&mut s);
        let mut first = CHUNKED_HEAD.as_bytes().to_vec();
        first.extend(chunk(vllm_event(1, 4, None).as_bytes()));
        let t1_pre = server_clock.raw();
        s.write_all(&first).expect("write token 1");
        let t1_post = server_clock.raw();
        std::thread::sleep(SERVER_GAP);
        let mut rest = chunk(vllm_event(2, 4, Some("length")).as_bytes());
        rest.extend(chunk(vllm_usage_event(2, 4).as_bytes()));
        rest.extend(chunk(DONE_EVENT.as_bytes()));
        rest.extend_from_slice(LAST_CHUNK);
        let t2_pre = server_clock.raw();
        s.write_all(&rest).expect("write token 2");
        let t2_post = server_clock.raw();
        // Keep the socket open until the client has read everything.
        let _ = s.read(&mut [0u8; 1]);
        (
            Duration::from_nanos(server_clock.delta_ns(t1_post, t2_pre)),
            Duration::from_nanos(server_clock.delta_ns(t1_pre, t2_post)),
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tl = rt.block_on(async move {
        let scheme = if tls { "https" } else { "http" };
        let mut cfg = ClientConfig::new(Target::parse(&format!("{scheme}://{addr}")).expect("url"));
        cfg.kernel_stamps = kernel_stamps;
        cfg.insecure = tls;
        cfg.max_idle = 0;
        let client = Client::new(cfg, clock).expect("client");
        let req = StreamRequest {
            header: None,
            path: "/v1/completions".into(),
            body: bytes::Bytes::from_static(b"{}"),
            dialect: llmspeed::net::Dialect::OpenAi,
            expected_events: 4,
            keep_text: None,
            request_id: None,
        };
        // Blocking the runtime's only thread is the point: the next read returns late.
        let mut seen = 0;
        let mut busy = |e: &EventRecord, _: Option<&[u8]>| {
            seen += e.tokens;
            if seen == 1 {
                std::thread::sleep(BUSY);
            }
            Flow::Continue
        };
        client.stream(&req, 0, &mut busy, &Cancel::new()).await
    });
    let true_gap = server.join().expect("server thread");
    (tl, true_gap)
}

fn token_gap(tl: &Timeline, clock: &Clock) -> Duration {
    let tokens: Vec<&EventRecord> = tl.events.iter().filter(|e| e.tokens > 0).collect();
    assert_eq!(tokens.len(), 2, "{:?}", tl.events);
    Duration::from_nanos(clock.delta_ns(tokens[0].t, tokens[1].t))
}

#[test]
fn kernel_stamps_take_the_late_wakeup_out_of_the_gap() {
    late_wakeup_taken_out(false);
}

/// The same over TLS: each record's plaintext carries the stamp of the read that completed it
/// (`net::tls_conn`), the kernel's.
#[test]
fn over_tls_kernel_stamps_take_the_late_wakeup_out_of_the_gap() {
    late_wakeup_taken_out(true);
}

fn late_wakeup_taken_out(tls: bool) {
    let (tl, (lo, hi)) = run_over(true, tls);
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert_eq!(tl.stamp_source(), StampSource::Kernel, "{:?}", tl.stamps);
    let gap = token_gap(&tl, &Clock::new());
    // The server's gap is ≥ 5 ms; the busy client would make it ≥ 50 ms.
    let slack = Duration::from_millis(1);
    assert!(
        gap + slack >= lo && gap <= hi + slack,
        "measured {gap:?}, the tokens arrived between {lo:?} and {hi:?} apart"
    );
    let second = tl.events.iter().filter(|e| e.tokens > 0).nth(1).unwrap();
    eprintln!(
        "kernel stamps (TLS: {tls}): gap {gap:?} (server {lo:?}..{hi:?}), wake-up {} us",
        second.wakeup_ns / 1000
    );
    // Token 2 arrived `gap` after token 1, while the client was blocked for 50 ms from its read
    // of token 1: it woke up at least the rest of those 50 ms after token 2 arrived.
    let least = BUSY.saturating_sub(gap + slack);
    assert!(
        u128::from(second.wakeup_ns) >= least.as_nanos(),
        "wake-up {} ns, at least {least:?} expected",
        second.wakeup_ns
    );
}

#[test]
fn the_clients_own_clock_shows_the_late_wakeup() {
    // The same run with kernel stamps off: what every stamp looked like before them.
    let (tl, (_, true_gap)) = run(false);
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert_eq!(
        tl.stamp_source(),
        StampSource::ClientClock(StampFallback::Disabled)
    );
    let gap = token_gap(&tl, &Clock::new());
    assert!(
        gap >= BUSY - Duration::from_millis(1),
        "measured {gap:?}, server {true_gap:?}"
    );
    assert!(tl.events.iter().all(|e| e.wakeup_ns == 0));
}
