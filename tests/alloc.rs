//! Allocation proofs with a counting global allocator (counts per thread, so parallel tests do
//! not disturb each other):
//! - the whole decode path (`StreamDecoder::feed`) does not allocate per event in steady state;
//! - nor does the loop detector fed JSON-escaped text (`RepetitionDetector::push_json`);
//! - an idle open stream costs at most 64 KiB of heap;
//! - nor does the whole read path (socket read, kernel stamp, decode) of `Client::stream`: a
//!   stream of 1000 tokens allocates no more than one of 50.

mod support;
#[path = "../benches/support/tls_pair.rs"]
mod tls_pair;

use bytes::BytesMut;
use llmspeed::clock::Clock;
use llmspeed::net::{
    Cancel, Client, ClientConfig, Dialect, NoopObserver, Progress, StreamDecoder, StreamRequest,
    Target,
};
use llmspeed::timeline::Timeline;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;
use support::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

fn note(allocs: u64, bytes: i64) {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + allocs));
    let _ = LIVE.try_with(|c| c.set(c.get() + bytes));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(1, layout.size() as i64);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(0, -(layout.size() as i64));
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(1, new_size as i64 - layout.size() as i64);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(1, layout.size() as i64);
        System.alloc_zeroed(layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

fn live() -> i64 {
    LIVE.with(|c| c.get())
}

/// A realistic vLLM completions stream: chunked, one SSE event per chunk, continuous usage.
fn vllm_stream(tokens: u64) -> Vec<u8> {
    let mut bytes = CHUNKED_HEAD.as_bytes().to_vec();
    for e in vllm_events(tokens, 1000) {
        bytes.extend(chunk(e.as_bytes()));
    }
    bytes.extend_from_slice(LAST_CHUNK);
    bytes
}

/// Feeds `input` through the whole decode path of `dialect` in socket-sized reads; returns the
/// allocations after the first `warmup_reads` reads and the events decoded after them.
fn steady_decode_allocs(
    input: &[u8],
    dialect: Dialect,
    expected_events: u64,
    warmup_reads: usize,
) -> (u64, usize) {
    // Read sizes as a socket hands them out: whole events, several at once, and splits.
    let sizes = [291, 97, 1024, 33, 640, 290, 4096, 1, 580];
    let mut reads = Vec::new();
    let mut at = 0;
    for i in 0.. {
        if at >= input.len() {
            break;
        }
        let n = sizes[i % sizes.len()].min(input.len() - at);
        reads.push(&input[at..at + n]);
        at += n;
    }
    let mut tl = Timeline::new(0, expected_events as usize + 8, false);
    let mut dec = StreamDecoder::with_dialect(1 << 20, dialect);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut steady_start = None;
    let mut events_at_steady = 0;
    let mut finished = false;
    for (i, read) in reads.iter().enumerate() {
        if i == warmup_reads {
            steady_start = Some(allocs());
            events_at_steady = tl.events.len();
        }
        // What the client's read loop does around a socket read.
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8 * 1024);
        }
        buf.extend_from_slice(read);
        match dec.feed(&mut buf, i as u64, &mut tl, &mut NoopObserver) {
            Ok(Progress::NeedMore) => {}
            Ok(Progress::Finished { .. }) => finished = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    if !finished {
        // Close-delimited bodies end at end of file.
        finished = matches!(dec.eof(u64::MAX, &mut tl), Ok(Progress::Finished { .. }));
    }
    let steady = allocs() - steady_start.expect("enough reads");
    let events = tl.events.len() - events_at_steady;
    assert!(finished && tl.done && tl.outcome.is_ok(), "{dialect:?}");
    assert_eq!(tl.events.len() as u64, expected_events, "{dialect:?}");
    assert_eq!(tl.event_tokens(), expected_events, "{dialect:?}");
    eprintln!("{dialect:?} steady state: {steady} allocations over {events} events");
    (steady, events)
}

#[test]
fn decode_path_does_not_allocate_per_event() {
    const EVENTS: u64 = 5000;
    let (steady, events) = steady_decode_allocs(&vllm_stream(EVENTS), Dialect::OpenAi, EVENTS, 200);
    assert!(events > 4000, "steady state covers {events} events");
    assert_eq!(
        steady, 0,
        "allocations in steady state over {events} events"
    );
}

/// `n` events of a native stream, framed as the engine's server frames them: SGLang's uvicorn
/// and llama.cpp's httplib send chunked bodies, TGI's axum too (with `data:` and no space).
fn native_stream(dialect: Dialect, n: u64) -> Vec<u8> {
    let mut bytes = CHUNKED_HEAD.as_bytes().to_vec();
    let mut text = String::new();
    let mut ids = String::new();
    for i in 1..=n {
        let piece = format!(" w\\\\{}", i % 10);
        let ev = match dialect {
            Dialect::Sglang => {
                text.push_str(&piece);
                if i > 1 {
                    ids.push(',');
                }
                ids.push_str(&(1000 + i % 7000).to_string());
                let fin = if i == n { r#"{"type":"length","length":1}"# } else { "null" };
                format!(
                    "data: {{\"text\":\"{text}\",\"output_ids\":[{ids}],\"meta_info\":{{\"id\":\"r\",\"finish_reason\":{fin},\"prompt_tokens\":9,\"completion_tokens\":{i},\"cached_tokens\":0}}}}\n\n"
                )
            }
            Dialect::Tgi => {
                let (gen, det) = if i == n {
                    ("\"all\"", format!(r#"{{"finish_reason":"length","generated_tokens":{n},"seed":null,"input_length":9}}"#))
                } else {
                    ("null", "null".to_string())
                };
                format!(
                    "data:{{\"index\":{i},\"token\":{{\"id\":{i},\"text\":\"{piece}\",\"logprob\":-0.1,\"special\":false}},\"generated_text\":{gen},\"details\":{det}}}\n\n"
                )
            }
            // vLLM's Responses stream: `event:` lines, `type` last, a reasoning delta now and
            // then, the `.done` events and `response.completed` (a big object) after the last.
            Dialect::Responses => {
                let ty = if i % 9 == 0 {
                    "response.reasoning_text.delta"
                } else {
                    "response.output_text.delta"
                };
                let mut ev = format!(
                    "event: {ty}\ndata: {{\"content_index\":0,\"delta\":\"{piece}\",\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":{i},\"type\":\"{ty}\"}}\n\n"
                );
                if i == n {
                    ev.push_str("event: response.output_text.done\ndata: {\"text\":\"all\",\"type\":\"response.output_text.done\"}\n\n");
                    ev.push_str(&format!(
                        "event: response.completed\ndata: {{\"response\":{{\"id\":\"resp_1\",\"output\":[{{\"type\":\"message\",\"content\":[{{\"text\":\"all\"}}]}}],\"status\":\"incomplete\",\"usage\":{{\"input_tokens\":9,\"input_tokens_details\":{{\"cached_tokens\":0}},\"output_tokens\":{n},\"total_tokens\":{}}}}},\"sequence_number\":{},\"type\":\"response.completed\"}}\n\n",
                        n + 9,
                        n + 2
                    ));
                }
                ev
            }
            _ => format!(
                "data: {{\"index\":0,\"content\":\"{piece}\",\"tokens\":[{i}],\"stop\":{},\"id_slot\":0,\"tokens_predicted\":{i},\"tokens_evaluated\":9,\"stop_type\":\"limit\"}}\n\n",
                i == n
            ),
        };
        bytes.extend(chunk(ev.as_bytes()));
    }
    if dialect == Dialect::Sglang {
        bytes.extend(chunk(b"data: [DONE]\n\n"));
    }
    bytes.extend_from_slice(LAST_CHUNK);
    bytes
}

#[test]
fn native_decode_paths_do_not_allocate_per_event() {
    for dialect in [Dialect::Tgi, Dialect::LlamaCpp, Dialect::Responses] {
        let (steady, events) =
            steady_decode_allocs(&native_stream(dialect, 5000), dialect, 5000, 50);
        assert!(
            events > 4500,
            "{dialect:?}: steady state covers {events} events"
        );
        assert_eq!(steady, 0, "{dialect:?}: allocations over {events} events");
    }
    // SGLang's events carry the whole output so far, so they grow without bound: the buffers
    // that hold one event grow with them, geometrically (a few reallocations in all), never
    // once per event. 1500 events of up to ~15 KiB each.
    let (steady, events) = steady_decode_allocs(
        &native_stream(Dialect::Sglang, 1500),
        Dialect::Sglang,
        1500,
        50,
    );
    assert!(events > 1200, "steady state covers {events} events");
    assert!(
        steady <= 12,
        "{steady} allocations over {events} growing events"
    );
}

#[test]
fn loop_detector_on_escaped_text_does_not_allocate_per_push() {
    use llmspeed::analysis::repetition::{RepetitionConfig, RepetitionDetector};
    // Escaped the way servers send text: newlines, quotes, \uXXXX for CJK and a surrogate
    // pair, cut into token-sized pieces (escapes split between pieces too).
    let mut wire = Vec::new();
    for i in 0..20_000u32 {
        let piece = match i % 7 {
            0 => format!(" word{i}"),
            1 => "\\n\\n".to_string(),
            2 => format!("\\u{:04x}", 0x4e00 + (i % 2000)),
            3 => "\\\"q\\\"".to_string(),
            4 => "\\ud83d\\ude00".to_string(),
            5 => format!(" 中{}", i % 97),
            _ => ",".to_string(),
        };
        wire.extend_from_slice(piece.as_bytes());
    }
    let mut det = RepetitionDetector::new(RepetitionConfig::default()).unwrap();
    let pieces: Vec<&[u8]> = wire.chunks(5).collect();
    let warmup = pieces.len() / 5;
    for p in &pieces[..warmup] {
        det.push_json(p);
    }
    let before = allocs();
    for p in &pieces[warmup..] {
        det.push_json(p);
    }
    let steady = allocs() - before;
    assert!(det.chars() > 50_000, "{} characters", det.chars());
    assert!(det.verdict().is_none());
    assert_eq!(
        steady,
        0,
        "allocations over {} pushes",
        pieces.len() - warmup
    );
}

/// The scripted server on a thread and runtime of its own, so its allocations are not counted
/// by the tests here; it runs until the process ends.
fn server_on_its_own_thread(scripts: Vec<Vec<Step>>) -> Server {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tx.send(Server::start(scripts).await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

#[test]
fn idle_open_stream_costs_at_most_64_kib() {
    const STREAMS: usize = 200;
    let script = respond(vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Pause(Duration::from_secs(60)),
    ]);
    let mut scripts = vec![respond(vllm_writes(2, 2))];
    scripts.extend(std::iter::repeat_n(script, STREAMS));
    let server = server_on_its_own_thread(scripts);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = ClientConfig::new(Target::parse(&server.base_url()).unwrap());
        cfg.max_idle = 0;
        let client = Client::new(cfg, Clock::new()).unwrap();
        let req = StreamRequest {
            header: None,
            path: "/v1/completions".into(),
            body: bytes::Bytes::from(vec![b' '; 600]),
            // Room for 1024 output tokens, as a real decode request reserves.
            dialect: Dialect::OpenAi,
            expected_events: 1028,
            keep_text: None,
            request_id: None,
        };
        // Warm up lazily built runtime and client state with one complete request.
        let warm = client
            .stream(&req, 0, &mut NoopObserver, &Cancel::new())
            .await;
        assert!(warm.is_ok(), "{:?}", warm.outcome);
        let cancel = Cancel::new();
        let before = live();
        let mut tasks = Vec::new();
        for _ in 0..STREAMS {
            let (client, req, cancel) = (client.clone(), req.clone(), cancel.clone());
            tasks.push(tokio::spawn(async move {
                client.stream(&req, 0, &mut NoopObserver, &cancel).await
            }));
        }
        let writes_before = vllm_writes(2, 2).len();
        for _ in 0..500 {
            if server.writes() >= writes_before + STREAMS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            server.writes(),
            writes_before + STREAMS,
            "all streams got their head"
        );
        // Let every client task read its head and park in the next read.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let per_stream = (live() - before) / STREAMS as i64;
        eprintln!("idle open stream: {per_stream} bytes of heap each ({STREAMS} streams)");
        cancel.cancel();
        for t in tasks {
            let tl = t.await.unwrap();
            assert_eq!(tl.status, Some(200), "{:?}", tl.outcome);
            assert_eq!(
                tl.error_kind(),
                Some(llmspeed::timeline::ErrorKind::Cancelled)
            );
        }
        assert!(
            per_stream <= 64 * 1024,
            "{per_stream} bytes per idle stream"
        );
    });
}

/// Streams of 50 and 1000 tokens (after a warm-up one), each on a fresh connection: the
/// client's allocations for each.
fn read_path_allocations(server: Server, tls: bool) -> (u64, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let url = if tls {
            server.https_url()
        } else {
            server.base_url()
        };
        let mut cfg = ClientConfig::new(Target::parse(&url).unwrap());
        // A fresh connection per request, so each run has the same fixed costs.
        cfg.max_idle = 0;
        cfg.insecure = tls;
        let client = Client::new(cfg, Clock::new()).unwrap();
        let req = StreamRequest {
            header: None,
            path: "/v1/completions".into(),
            body: bytes::Bytes::from_static(b"{}"),
            dialect: Dialect::OpenAi,
            expected_events: 1100,
            keep_text: None,
            request_id: None,
        };
        let run = || async {
            let before = allocs();
            let tl = client
                .stream(&req, 0, &mut NoopObserver, &Cancel::new())
                .await;
            (allocs() - before, tl)
        };
        // The first run warms lazily built runtime and client state.
        let (_, warm) = run().await;
        assert!(warm.is_ok(), "{:?}", warm.outcome);
        let (short, tl_short) = run().await;
        let (long, tl_long) = run().await;
        assert_eq!(tl_short.output_tokens(), 50, "{:?}", tl_short.outcome);
        assert_eq!(tl_long.output_tokens(), 1000, "{:?}", tl_long.outcome);
        #[cfg(target_os = "linux")]
        assert_eq!(
            tl_long.stamp_source(),
            llmspeed::timeline::StampSource::Kernel
        );
        (short, long)
    })
}

fn three_streams() -> Vec<Vec<Step>> {
    [50, 50, 1000]
        .into_iter()
        .map(|n| respond(vllm_writes(n, 2)))
        .collect()
}

#[test]
fn whole_read_path_does_not_allocate_per_token() {
    let (short, long) = read_path_allocations(server_on_its_own_thread(three_streams()), false);
    eprintln!("stream allocations: {short} for 50 tokens, {long} for 1000");
    // Reads coalesce differently run to run; a per-token cost would add ~950.
    // Each stream is a new connection (max_idle 0): the long one's map may double up to
    // five times more than the short one's if it falls behind; per token it would be 950.
    assert!(
        long <= short + 8 + 5,
        "{long} allocations for 1000 tokens vs {short} for 50"
    );
}

/// Over TLS (`net::tls_conn`: our own socket reads, the ciphertext handed to rustls a record at
/// a time) our code allocates nothing per token either; rustls 0.23 copies each decrypted
/// record into a buffer of its own (`received_plaintext`), one allocation per record, which
/// is per token when the server writes one token a record (the scripted server writes each
/// chunk as one record here). So: at most one per record, none of ours.
#[test]
fn tls_read_path_allocates_only_rustls_one_buffer_per_record() {
    let (short, long) = read_path_allocations(tls_server_on_its_own_thread(three_streams()), true);
    eprintln!("TLS stream allocations: {short} for 50 tokens, {long} for 1000");
    // 1000 tokens write 950 more records than 50 (one chunk each).
    assert!(
        long <= short + 950 + 8 + 5,
        "{long} allocations for 1000 tokens vs {short} for 50: more than rustls's one a record"
    );
}

/// The tripwire on rustls's per-record copy, on our production path: in rustls 0.23 the
/// unbuffered API (`net::tls_session`, which takes the ciphertext in a buffer of ours) copies
/// each decrypted record into a `Vec` of its own (`ReadTraffic::next_record` pops it from its
/// `received_plaintext` queue: in-place decryption is marked "in the future" there, and 0.24's
/// pre-releases have it), as the buffered API did. Counted here on one in-memory connection
/// each, 1000 records of one vLLM token chunk, opened by `TlsSession::open` (and, for
/// comparison, by the buffered API as `tls_conn` used it before) and fed to the decoder: after
/// 50 records of warm-up, one allocation per record on either and none besides. When this
/// fails because the production count drops to zero (rustls decrypting in place), tighten
/// `tls_read_path_allocates_only_rustls_one_buffer_per_record` to none per record.
#[test]
fn tls_session_open_allocates_only_rustls_one_copy_per_record() {
    const RECORDS: usize = 1000;
    const WARMUP: usize = 50;
    let mut chunks = vec![CHUNKED_HEAD.as_bytes().to_vec()];
    chunks.extend(
        vllm_events(RECORDS as u64 - 1, 2)
            .iter()
            .map(|e| chunk(e.as_bytes())),
    );
    assert!(chunks.len() >= RECORDS);
    let count = |open: &mut dyn FnMut(&[u8], &mut BytesMut) -> usize, records: &[Vec<u8>]| {
        let mut tl = Timeline::new(0, RECORDS + 8, false);
        let mut dec = StreamDecoder::with_dialect(1 << 20, Dialect::OpenAi);
        let mut buf = BytesMut::with_capacity(8 * 1024);
        let mut before = 0;
        for (i, record) in records.iter().enumerate() {
            if i == WARMUP {
                before = allocs();
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(8 * 1024);
            }
            assert!(
                open(record, &mut buf) > 0,
                "record {i} carried no plaintext"
            );
            match dec.feed(&mut buf, i as u64, &mut tl, &mut NoopObserver) {
                Ok(Progress::NeedMore) | Ok(Progress::Finished { .. }) => {}
                other => panic!("record {i}: {other:?}"),
            }
        }
        let steady = allocs() - before;
        assert!(tl.events.len() >= RECORDS - 2, "{} events", tl.events.len());
        steady
    };
    let seal_all = |server: &mut rustls::ServerConnection| -> Vec<Vec<u8>> {
        chunks
            .iter()
            .take(RECORDS)
            .map(|c| tls_pair::seal(server, c))
            .collect()
    };
    let (mut server, mut client) = tls_pair::buffered();
    let records = seal_all(&mut server);
    let buffered = count(&mut |r, b| client.open(r, b), &records);
    let (mut server, mut client) = tls_pair::session();
    let records = seal_all(&mut server);
    let ours = count(&mut |r, b| client.open(r, b), &records);
    let n = (RECORDS - WARMUP) as u64;
    eprintln!("{n} records: TlsSession::open {ours} allocations, the buffered API {buffered}");
    assert_eq!(ours, n, "TlsSession::open: allocations over {n} records");
    assert_eq!(buffered, n, "buffered API: allocations over {n} records");
}

/// [`server_on_its_own_thread`] speaking TLS (a self-signed certificate for 127.0.0.1).
fn tls_server_on_its_own_thread(scripts: Vec<Vec<Step>>) -> Server {
    let (config, _) = support::tls_front::self_signed_server_config();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tx.send(Server::start_tls(scripts, acceptor).await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

/// `--packet-stamps` (Linux, CAP_NET_RAW): the read path with the client's packet ring does
/// not allocate per token either (the ring is memory the kernel fills; a connection's sequence
/// map and segment lists grow by doubling, the map at most five times). Under `CI=true` (root)
/// a missing capability fails it.
#[cfg(target_os = "linux")]
#[test]
fn packet_stamped_read_path_does_not_allocate_per_token() {
    let server = server_on_its_own_thread(
        [50, 50, 1000]
            .into_iter()
            .map(|n| respond(vllm_writes(n, 2)))
            .collect(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = ClientConfig::new(Target::parse(&server.base_url()).unwrap());
        cfg.max_idle = 0;
        cfg.packet_stamps = true;
        let client = Client::new(cfg, Clock::new()).unwrap();
        if let Err(why) = client.packet_stamps() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true: packet stamps must work (root): {why:?}"
            );
            eprintln!("skipped: {}", why.note());
            return;
        }
        let req = StreamRequest {
            header: None,
            path: "/v1/completions".into(),
            body: bytes::Bytes::from_static(b"{}"),
            dialect: Dialect::OpenAi,
            expected_events: 1100,
            keep_text: None,
            request_id: None,
        };
        let run = || async {
            let before = allocs();
            let tl = client
                .stream(&req, 0, &mut NoopObserver, &Cancel::new())
                .await;
            (allocs() - before, tl)
        };
        let (_, warm) = run().await;
        assert!(warm.is_ok(), "{:?}", warm.outcome);
        let (short, tl_short) = run().await;
        let (long, tl_long) = run().await;
        assert_eq!(tl_short.output_tokens(), 50, "{:?}", tl_short.outcome);
        assert_eq!(tl_long.output_tokens(), 1000, "{:?}", tl_long.outcome);
        // The server writes without pauses: a client far enough behind may find its oldest
        // frames gone from the ring (those reads keep their own stamps), never all of them.
        assert!(tl_long.stamps.packet_reads > 0, "{:?}", tl_long.stamps);
        eprintln!("packet-stamped stream allocations: {short} for 50 tokens, {long} for 1000");
        // Each stream is a new connection (max_idle 0): the long one's map may double up to
        // five times more than the short one's if it falls behind; per token it would be 950.
        assert!(
            long <= short + 8 + 5,
            "{long} allocations for 1000 tokens vs {short} for 50"
        );
    });
}
