//! The candidate io_uring read path (`benches/support/uring.rs`) against the product's tokio path:
//! for the same byte streams, written with adversarial boundaries (inside the chunk-size line,
//! inside `data:`, between CR and LF, the head cut in two, many events in one segment), the
//! io_uring reader hands exactly the bytes the server wrote, and `StreamDecoder` fed from it
//! records the same timeline as `Client::stream` does, stamps aside. All streams are read at
//! once through one ring with few, small provided buffers, so buffer recycling and the re-arming
//! of a multishot receive that ran out of buffers are exercised too.
#![cfg(target_os = "linux")]

mod support;

#[path = "../benches/support/uring.rs"]
mod uring;

use bytes::{Bytes, BytesMut};
use llmspeed::clock::Clock;
use llmspeed::net::{
    Cancel, Client, ClientConfig, NoopObserver, Progress, StreamDecoder, StreamRequest, Target,
};
use llmspeed::timeline::Timeline;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;
use support::*;
use uring::{Recv, UringReader};

const BODY: &str = r#"{"model":"m","prompt":"hi","stream":true}"#;

/// The response's pieces: the head, then one chunk per SSE event, then the last chunk.
fn pieces() -> Vec<Vec<u8>> {
    let mut v = vec![CHUNKED_HEAD.as_bytes().to_vec()];
    v.extend(vllm_events(4, 3).iter().map(|e| chunk(e.as_bytes())));
    v.push(LAST_CHUNK.to_vec());
    v
}

fn at(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle in piece")
}

/// Each piece cut at the offsets `cut` picks; a short pause between writes so the cuts tend to
/// reach the reader as separate reads (TCP_NODELAY is on at the server).
fn split(cut: impl Fn(usize, &[u8]) -> Vec<usize>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, p) in pieces().iter().enumerate() {
        let mut from = 0;
        for c in cut(i, p) {
            out.push(p[from..c].to_vec());
            from = c;
        }
        out.push(p[from..].to_vec());
    }
    out
}

/// The byte streams, as the server's writes.
fn patterns() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let body = |i: usize| i > 0 && i < pieces().len() - 1;
    vec![
        ("one event per write", pieces()),
        (
            "inside the chunk-size line",
            split(|i, _| if body(i) { vec![1] } else { vec![] }),
        ),
        (
            "inside data:",
            split(|i, p| {
                if body(i) {
                    vec![at(p, b"data:") + 2]
                } else {
                    vec![]
                }
            }),
        ),
        (
            "CR | LF",
            split(|i, p| {
                if body(i) {
                    vec![at(p, b"\r\n") + 1, p.len() - 1]
                } else {
                    vec![]
                }
            }),
        ),
        (
            "the head cut in two",
            split(|i, p| if i == 0 { vec![p.len() / 2] } else { vec![] }),
        ),
        ("many events in one segment", vec![pieces().concat()]),
    ]
}

fn script(writes: &[Vec<u8>]) -> Vec<Step> {
    let mut s = Vec::new();
    for w in writes {
        s.push(Step::Write(w.clone()));
        s.push(Step::Pause(Duration::from_millis(2)));
    }
    s.push(Step::Close);
    respond(s)
}

/// What must match between the two paths: everything but the stamps (kept as present/absent).
fn without_stamps(tl: &Timeline) -> String {
    let mut t = tl.clone();
    t.intended_start = 0;
    // The candidate connects on its own and records no connect stamp.
    t.connect_start = None;
    for s in [
        &mut t.send_start,
        &mut t.write_done,
        &mut t.response_head,
        &mut t.first_event,
        &mut t.first_token,
        &mut t.end,
        &mut t.last_message,
    ] {
        *s = s.map(|_| 0);
    }
    for e in &mut t.events {
        e.t = 0;
        e.wakeup_ns = 0;
        // The socket's backlog comes with the kernel's stamp (TCP_CM_INQ), as the wake-up does.
        e.socket_bytes = 0;
    }
    // Which clock stamped the reads, and how many reads there were, are stamps too: the
    // tokio path's reads are kernel-stamped, the bench reader's are not.
    t.stamps = Default::default();
    format!("{t:?}")
}

async fn tokio_path(writes: &[Vec<u8>]) -> Timeline {
    let server = Server::start(vec![script(writes)]).await;
    let cfg = ClientConfig::new(Target::parse(&format!("{}/v1", server.base_url())).unwrap());
    let client = Client::new(cfg, Clock::new()).unwrap();
    let req = StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(BODY.as_bytes()),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 64,
        keep_text: Some(true),
        request_id: None,
    };
    client
        .stream(&req, 0, &mut NoopObserver, &Cancel::new())
        .await
}

/// One stream read by the io_uring path: the bytes as handed, and the decoder's timeline.
struct UringStream {
    bytes: Vec<u8>,
    buf: BytesMut,
    dec: StreamDecoder,
    tl: Timeline,
    finished: bool,
}

/// Connects to every address, sends the request, and reads every response through one ring.
fn uring_path(addrs: Vec<SocketAddr>) -> Vec<UringStream> {
    let clock = Clock::new();
    // 8 buffers of 256 bytes for six streams: buffers run out and come back constantly.
    let mut reader = UringReader::new(64, 8, 256).expect("io_uring available (checked)");
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let mut socks = Vec::new();
    let mut streams = Vec::new();
    for a in addrs {
        let mut s = TcpStream::connect(a).expect("connect");
        let mut tl = Timeline::new(0, 64, true);
        tl.send_start = Some(clock.raw());
        s.write_all(request.as_bytes()).expect("write request");
        tl.write_done = Some(clock.raw());
        reader.add(s.as_raw_fd()).expect("add");
        socks.push(s);
        streams.push(UringStream {
            bytes: Vec::new(),
            buf: BytesMut::new(),
            dec: StreamDecoder::new(1 << 20),
            tl,
            finished: false,
        });
    }
    while streams.iter().any(|s| !s.finished) {
        reader
            .reap(|i, what| {
                let t = clock.raw();
                let st = &mut streams[i];
                match what {
                    Recv::Data(d) => {
                        st.bytes.extend_from_slice(d);
                        if st.finished {
                            return;
                        }
                        st.buf.extend_from_slice(d);
                        match st.dec.feed(&mut st.buf, t, &mut st.tl, &mut NoopObserver) {
                            Ok(Progress::NeedMore) => {}
                            Ok(Progress::Finished { .. }) => st.finished = true,
                            other => panic!("stream {i}: {other:?}"),
                        }
                    }
                    Recv::Eof => {
                        if !st.finished {
                            let r = st.dec.eof(t, &mut st.tl);
                            panic!("stream {i} ended before the response did: {r:?}");
                        }
                    }
                    Recv::Error(e) => panic!("stream {i}: {e}"),
                }
            })
            .expect("io_uring_enter");
    }
    for s in &mut streams {
        if s.tl.end.is_none() {
            s.tl.end = Some(clock.raw());
        }
    }
    assert!(
        reader.counts().data_cqes > 0,
        "the ring handed the data, not some other path"
    );
    drop(socks);
    streams
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_uring_path_hands_the_same_bytes_and_timelines_as_the_tokio_path() {
    if let Err(why) = uring::available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "io_uring is part of what CI checks: {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let patterns = patterns();
    let mut servers = Vec::new();
    for (_, writes) in &patterns {
        servers.push(Server::start(vec![script(writes)]).await);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let read = tokio::task::spawn_blocking(move || uring_path(addrs))
        .await
        .expect("io_uring reader");
    for ((name, writes), got) in patterns.iter().zip(read) {
        assert_eq!(got.bytes, writes.concat(), "{name}: bytes as written");
        let want = tokio_path(writes).await;
        assert_eq!(want.outcome, Ok(()), "{name}: tokio path");
        assert_eq!(want.events.len(), 4, "{name}");
        assert_eq!(
            without_stamps(&got.tl),
            without_stamps(&want),
            "{name}: timelines"
        );
    }
}
