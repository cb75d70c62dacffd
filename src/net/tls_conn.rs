//! A TLS connection whose reads are stamped like a plain one's: we read the socket ourselves
//! (`net::plain`: the same `recvmsg` with the kernel's receive stamp, and the packet tap where
//! there is one) and hand the ciphertext to rustls one whole record at a time, so each
//! decrypted record carries the stamp of the read that completed it, and with packet stamps the
//! arrival of the segment that carried its last byte (`RecordClock`).
//!
//! The handshake runs through tokio-rustls over the same [`Plain`] socket (so the packet tap
//! counts its bytes too), which then hands back the socket and rustls's connection.
//!
//! Must not allocate per read in our code: the ciphertext buffer and the records' table are
//! kept and reused; the plaintext goes straight into the caller's `BytesMut`. (rustls 0.23
//! itself copies each decrypted record into a buffer of its own: one allocation per record,
//! which the plain path does not have. Its unbuffered API does the same — `ReadTraffic` pops
//! that same per-record `Vec`; in-place decryption comes with 0.24 — so this stays on the
//! buffered one: counted side by side in `tests/alloc.rs`, timed in `benches/tls_read.rs`.)

use super::packet::stamper::PacketClock;
use super::plain::Plain;
use super::stamp::ReadStamp;
use crate::clock::Clock;
use crate::net::decode::ReadClock;
use bytes::{Buf, BytesMut};
use rustls::ClientConnection;
use std::io::{self, BufRead, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TLS record's header: type, version (2), length (2).
const HEADER: usize = 5;
/// Room for one whole record of the largest size TLS allows, with its header and overhead.
const MAX_RECORD: usize = HEADER + 16 * 1024 + 256;

/// See the module doc.
pub(crate) struct TlsConn {
    sock: Plain,
    tls: ClientConnection,
    /// Ciphertext read but not yet a whole record.
    cipher: BytesMut,
    /// Stream bytes read from the socket so far (as the packet tap counts them).
    received: u64,
    /// The records whose plaintext the last read handed over: (where its plaintext ends in the
    /// caller's buffer, the stream offset just past its last ciphertext byte).
    records: Vec<(usize, u64)>,
    /// The last read's stamp, for plaintext rustls still held when the caller's buffer was full.
    last: Option<ReadStamp>,
    /// Ciphertext of a write accepted but not yet on the socket, and the plaintext bytes it
    /// carries (what `poll_write` returns once it is sent).
    out: Vec<u8>,
    accepted: Option<usize>,
}

impl TlsConn {
    /// Takes over the handshake's socket and connection.
    pub(crate) fn new(sock: Plain, tls: ClientConnection) -> Self {
        let received = sock.bytes_read();
        Self {
            sock,
            tls,
            cipher: BytesMut::with_capacity(2 * MAX_RECORD),
            received,
            records: Vec::with_capacity(64),
            last: None,
            out: Vec::new(),
            accepted: None,
        }
    }

    /// Reads until at least one record's plaintext is in `buf` (or the end), stamped with the
    /// read that completed its record. Cancel-safe: a dropped future keeps what it read in
    /// `cipher`.
    pub(crate) async fn read_stamped(
        &mut self,
        buf: &mut BytesMut,
        clock: &Clock,
    ) -> (io::Result<usize>, ReadStamp) {
        self.records.clear();
        let before = buf.len();
        // Plaintext rustls kept from the last read (the buffer was full): that read's stamp.
        if let Some(last) = self.last {
            let n = self.drain(buf, self.received.saturating_sub(self.cipher.len() as u64));
            if n > 0 {
                return (Ok(n), last);
            }
        }
        loop {
            if self.cipher.capacity() - self.cipher.len() < MAX_RECORD {
                self.cipher.reserve(MAX_RECORD);
            }
            let (r, stamp) = self.sock.read_stamped(&mut self.cipher, clock).await;
            match r {
                Err(e) => return (Err(e), stamp),
                Ok(0) => return (Ok(0), stamp),
                Ok(n) => self.received += n as u64,
            }
            self.last = Some(stamp);
            if let Err(e) = self.open_records(Some(buf)) {
                return (Err(e), stamp);
            }
            let n = buf.len() - before;
            if n > 0 {
                return (Ok(n), stamp);
            }
            // A close_notify with nothing after it: the end, as a plain socket's.
            if self.closed() {
                return (Ok(0), stamp);
            }
            // Part of a record, or a record with no application data (a session ticket):
            // read on.
        }
    }

    /// Whether the server closed the TLS session (close_notify) with all of its data read.
    fn closed(&mut self) -> bool {
        matches!(self.tls.process_new_packets(), Ok(s) if s.peer_has_closed() && s.plaintext_bytes_to_read() == 0)
    }

    /// Hands every whole record in `cipher` to rustls, one at a time, and its plaintext to
    /// `buf`, noting where each record's plaintext ends and its ciphertext ended (without
    /// `buf`, rustls keeps the plaintext).
    fn open_records(&mut self, mut buf: Option<&mut BytesMut>) -> io::Result<()> {
        let base = self.received - self.cipher.len() as u64;
        let mut taken = 0usize;
        loop {
            let rest = &self.cipher[taken..];
            if rest.len() < HEADER {
                break;
            }
            let len = HEADER + usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            if rest.len() < len {
                break;
            }
            let mut record = &rest[..len];
            while !record.is_empty() {
                if self.tls.read_tls(&mut record)? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "rustls took no more ciphertext",
                    ));
                }
            }
            taken += len;
            self.tls
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if let Some(buf) = buf.as_deref_mut() {
                self.drain(buf, base + taken as u64);
            }
        }
        self.cipher.advance(taken);
        Ok(())
    }

    /// Moves the plaintext rustls holds into `buf` (whose spare room it uses, growing it by
    /// one read's size when full); records it under `cipher_end`. Returns the bytes moved.
    fn drain(&mut self, buf: &mut BytesMut, cipher_end: u64) -> usize {
        let mut moved = 0;
        loop {
            let mut reader = self.tls.reader();
            let chunk = match reader.fill_buf() {
                Ok(c) if !c.is_empty() => c,
                _ => break,
            };
            let n = chunk.len();
            buf.extend_from_slice(chunk);
            reader.consume(n);
            moved += n;
        }
        if moved > 0 {
            self.records.push((buf.len(), cipher_end));
        }
        moved
    }

    /// The last read's per-position clock when the socket has a packet tap; `read` is that
    /// read's own stamp, `fed` the caller's buffer length when it feeds the decoder.
    pub(crate) fn packet_clock<'a>(
        &'a self,
        clock: &'a Clock,
        read: u64,
        fed: usize,
    ) -> Option<RecordClock<'a>> {
        Some(RecordClock {
            inner: self.sock.packet_clock(clock, read)?,
            records: &self.records,
            fed,
            received: self.received,
        })
    }

    /// Sends `self.out`; `Ready(Ok)` once all of it is on the socket.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.sock).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

/// A TLS read's events stamped by the segment that carried the last byte of their record:
/// a position in the plaintext buffer becomes its record's ciphertext end, which the packet
/// tap's [`PacketClock`] knows.
pub(crate) struct RecordClock<'a> {
    pub(crate) inner: PacketClock<'a>,
    records: &'a [(usize, u64)],
    /// The buffer's length when the decoder was fed.
    fed: usize,
    /// Stream bytes received, this read's included.
    received: u64,
}

impl ReadClock for RecordClock<'_> {
    fn at(&mut self, remaining: usize) -> u64 {
        let last = self.fed.saturating_sub(remaining + 1);
        // The record holding the last plaintext byte taken (plaintext left from an earlier read
        // lies before the first: this read's first record completed what it began).
        let end = self
            .records
            .iter()
            .find(|&&(plain_end, _)| plain_end > last)
            .or(self.records.last())
            .map_or(self.received, |&(_, cipher_end)| cipher_end);
        let behind = self.received.saturating_sub(end);
        self.inner.at(usize::try_from(behind).unwrap_or(usize::MAX))
    }
}

impl AsyncRead for TlsConn {
    /// Unstamped reads (`get`, `post_json`).
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut reader = this.tls.reader();
            match reader.fill_buf() {
                Ok(c) if !c.is_empty() => {
                    let n = c.len().min(out.remaining());
                    out.put_slice(&c[..n]);
                    reader.consume(n);
                    return Poll::Ready(Ok(()));
                }
                // A clean close: the end.
                Ok(_) => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.cipher.capacity() - this.cipher.len() < MAX_RECORD {
                this.cipher.reserve(MAX_RECORD);
            }
            let before = this.cipher.len();
            {
                let spare = this.cipher.spare_capacity_mut();
                // SAFETY: `ReadBuf::uninit` tracks what the read initialised; we mark only that.
                let mut rb = ReadBuf::uninit(spare);
                ready!(Pin::new(&mut this.sock).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                // SAFETY: the read initialised `n` spare bytes.
                unsafe { this.cipher.set_len(before + n) };
                this.received += n as u64;
            }
            // Unstamped: the plaintext stays with rustls until asked for above.
            this.open_records(None)?;
        }
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            ready!(this.poll_send(cx))?;
            if let Some(n) = this.accepted.take() {
                return Poll::Ready(Ok(n));
            }
            let n = this.tls.writer().write(buf)?;
            while this.tls.wants_write() {
                this.tls.write_tls(&mut this.out)?;
            }
            this.accepted = Some(n);
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.tls.wants_write() {
            this.tls.write_tls(&mut this.out)?;
        }
        this.poll_send(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.tls.send_close_notify();
        while this.tls.wants_write() {
            this.tls.write_tls(&mut this.out)?;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.sock).poll_shutdown(cx)
    }
}
