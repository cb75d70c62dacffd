//! Per-token CPU of the TLS read path without sockets: one vLLM completions chunk (one token)
//! per TLS 1.3 record, each record opened and its plaintext appended to the read buffer, and
//! the buffer fed to the real `StreamDecoder`. One criterion iteration = one token. Variants:
//! - `plain`: the same chunks fed to the decoder with no TLS (the floor);
//! - `tls_conn`: our production code, `net::tls_session::TlsSession::open` (what
//!   `net::tls_conn` calls after each socket read; rustls's unbuffered API), the record copied
//!   into the session's buffer where the socket read would put it;
//! - `tls_buffered`: the before, rustls's `ClientConnection` as `tls_conn` used it until it
//!   moved to the unbuffered API (kept in `support/tls_pair.rs` only).
//!
//! The records are sealed by an in-memory rustls server before each timed batch (sealing is
//! not timed); the difference between `plain` and a TLS variant is what decryption and
//! rustls's per-record copy (one allocation each in 0.23: `tests/alloc.rs`) cost per token.
//! Run on a quiet machine: `cargo bench --bench tls_read`; smoke: `-- --test`.

#[path = "support/tls_pair.rs"]
mod tls_pair;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use llmspeed::net::{NoopObserver, Progress, StreamDecoder};
use llmspeed::timeline::Timeline;
use rustls::ServerConnection;
use std::hint::black_box;
use std::time::{Duration, Instant};

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";
/// Records sealed ahead of each timed stretch (bounds the memory a long measurement holds).
const BATCH: u64 = 4096;

/// One vLLM completions chunk as uvicorn frames it: ~200 bytes, one token.
fn chunk() -> Vec<u8> {
    let ev = "data: {\"id\":\"cmpl-5c1b7a0e9d2f\",\"object\":\"text_completion\",\"created\":1764475200,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" word\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n";
    let mut out = format!("{:x}\r\n", ev.len()).into_bytes();
    out.extend_from_slice(ev.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// The receiving end: read buffer, decoder and a timeline that is emptied as it goes.
struct Reader {
    dec: StreamDecoder,
    buf: BytesMut,
    tl: Timeline,
}

impl Reader {
    fn new() -> Self {
        let mut r = Reader {
            dec: StreamDecoder::new(1 << 20),
            buf: BytesMut::with_capacity(8 * 1024),
            tl: Timeline::new(0, 1 << 14, false),
        };
        r.buf.extend_from_slice(HEAD);
        r.feed(0);
        r
    }

    fn spare(&mut self) {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(8 * 1024);
        }
    }

    fn feed(&mut self, t: u64) {
        match self
            .dec
            .feed(&mut self.buf, t, &mut self.tl, &mut NoopObserver)
        {
            Ok(Progress::NeedMore) => {}
            other => panic!("bench stream failed: {other:?}"),
        }
        if self.tl.events.len() > 1 << 13 {
            self.tl.events.clear();
        }
    }
}

/// Times `iters` tokens in batches: `seal` makes a batch's records (untimed), `open` takes one.
fn timed(
    iters: u64,
    seal: &mut dyn FnMut(u64) -> Vec<Vec<u8>>,
    open: &mut dyn FnMut(&[u8], &mut BytesMut) -> usize,
    reader: &mut Reader,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        let records = seal(n);
        let start = Instant::now();
        for (i, record) in records.iter().enumerate() {
            reader.spare();
            black_box(open(record, &mut reader.buf));
            reader.feed(i as u64);
        }
        total += start.elapsed();
        left -= n;
    }
    total
}

fn sealer(server: &mut ServerConnection, plain: Vec<u8>) -> impl FnMut(u64) -> Vec<Vec<u8>> + '_ {
    move |n| (0..n).map(|_| tls_pair::seal(server, &plain)).collect()
}

fn bench(c: &mut Criterion) {
    let plain = chunk();
    let mut g = c.benchmark_group("tls_read_per_token");
    g.throughput(Throughput::Elements(1));

    g.bench_function("plain", |b| {
        let mut reader = Reader::new();
        let mut seal = |n: u64| vec![plain.clone(); n as usize];
        let mut open = |r: &[u8], buf: &mut BytesMut| {
            buf.extend_from_slice(r);
            r.len()
        };
        b.iter_custom(|iters| timed(iters, &mut seal, &mut open, &mut reader));
    });

    g.bench_function("tls_buffered", |b| {
        let (mut server, mut client) = tls_pair::buffered();
        let mut reader = Reader::new();
        let mut seal = sealer(&mut server, plain.clone());
        let mut open = |r: &[u8], buf: &mut BytesMut| client.open(r, buf);
        b.iter_custom(|iters| timed(iters, &mut seal, &mut open, &mut reader));
    });

    g.bench_function("tls_conn", |b| {
        let (mut server, mut client) = tls_pair::session();
        let mut reader = Reader::new();
        let mut seal = sealer(&mut server, plain.clone());
        let mut open = |r: &[u8], buf: &mut BytesMut| client.open(r, buf);
        b.iter_custom(|iters| timed(iters, &mut seal, &mut open, &mut reader));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
