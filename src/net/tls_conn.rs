//! A TLS connection whose reads are stamped like a plain one's: we read the socket ourselves
//! (`net::plain`: the same `recvmsg` with the kernel's receive stamp, and the packet tap where
//! there is one) into the session's ciphertext buffer and open the whole records there one at
//! a time (`net::tls_session`, on rustls's unbuffered API), so each decrypted record carries
//! the stamp of the read that completed it, and with packet stamps the arrival of the segment
//! that carried its last byte (`RecordClock`).
//!
//! The handshake runs over the same [`Plain`] socket (so the packet tap counts its bytes too):
//! [`handshake`] moves the session's records between it and the socket.
//!
//! Must not allocate per read in our code: the ciphertext buffer and the records' table are
//! kept and reused; the plaintext goes straight into the caller's `BytesMut` (rustls's own
//! copy of each record: see `net::tls_session`).

use super::packet::stamper::PacketClock;
use super::plain::Plain;
use super::stamp::{Fallback, ReadStamp};
use super::tls_session::{Step, TlsSession};
use crate::clock::Clock;
use crate::net::decode::ReadClock;
use bytes::BytesMut;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Runs the TLS handshake for `name` over `sock`. Its errors are as a TLS library's: rustls's
/// refusal inside an `InvalidData` error, `UnexpectedEof` when the server closes first (what
/// `net::connect` classifies); a refusal of ours is told to the server in an alert first.
pub(crate) async fn handshake(
    mut sock: Plain,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<TlsConn> {
    let mut session =
        TlsSession::new(config, name).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut send = Vec::with_capacity(1024);
    loop {
        match session.handshake(&mut send) {
            Ok(Step::Write) => {
                sock.write_all(&send).await?;
                send.clear();
            }
            Ok(Step::Read) => {
                if sock.read_buf(session.cipher()).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection during the TLS handshake",
                    ));
                }
            }
            Ok(Step::Done) => return Ok(TlsConn::new(sock, session)),
            Err(e) => {
                send.clear();
                session.alert(&mut send);
                let _ = sock.write_all(&send).await;
                return Err(e);
            }
        }
    }
}

/// See the module doc.
pub(crate) struct TlsConn {
    sock: Plain,
    session: TlsSession,
    /// Stream bytes read from the socket so far (as the packet tap counts them).
    received: u64,
    /// The records whose plaintext the last read handed over: (where its plaintext ends in the
    /// caller's buffer, the stream offset just past its last ciphertext byte).
    records: Vec<(usize, u64)>,
    /// The last stamped read's stamp, for plaintext an unstamped read left in `unread`.
    last: Option<ReadStamp>,
    /// Plaintext opened and not yet handed over (an unstamped read's caller had no room).
    unread: BytesMut,
    /// Ciphertext of a write accepted but not yet on the socket, and the plaintext bytes it
    /// carries (what `poll_write` returns once it is sent).
    out: Vec<u8>,
    accepted: Option<usize>,
    /// Our close_notify is sealed (`poll_shutdown` seals it once).
    closing: bool,
}

impl TlsConn {
    /// Takes over the handshake's socket and session.
    fn new(sock: Plain, session: TlsSession) -> Self {
        let received = sock.bytes_read();
        Self {
            sock,
            session,
            received,
            records: Vec::with_capacity(64),
            last: None,
            unread: BytesMut::new(),
            out: Vec::new(),
            accepted: None,
            closing: false,
        }
    }

    /// Reads until at least one record's plaintext is in `buf` (or the end), stamped with the
    /// read that completed its record. Cancel-safe: a dropped future keeps what it read in
    /// the session's ciphertext buffer.
    pub(crate) async fn read_stamped(
        &mut self,
        buf: &mut BytesMut,
        clock: &Clock,
    ) -> (io::Result<usize>, ReadStamp) {
        self.records.clear();
        let before = buf.len();
        // Plaintext an unstamped read left: the last stamped read's stamp, or the clock's.
        if !self.unread.is_empty() {
            buf.extend_from_slice(&self.unread);
            self.unread.clear();
            let end = self.received - self.session.pending() as u64;
            self.records.push((buf.len(), end));
            let stamp = self
                .last
                .unwrap_or_else(|| ReadStamp::client(clock.raw(), Fallback::NoStamp));
            return (Ok(buf.len() - before), stamp);
        }
        loop {
            if self.session.peer_closed() {
                // A close_notify with nothing after it: the end, as a plain socket's.
                return (Ok(0), ReadStamp::client(clock.raw(), Fallback::NoStamp));
            }
            let (r, stamp) = self.sock.read_stamped(self.session.cipher(), clock).await;
            match r {
                Err(e) => return (Err(e), stamp),
                Ok(0) => return (Ok(0), stamp),
                Ok(n) => self.received += n as u64,
            }
            self.last = Some(stamp);
            let opened = self
                .session
                .open(self.received, buf, &mut self.records, &mut self.out);
            if let Err(e) = opened {
                return (Err(e), stamp);
            }
            let n = buf.len() - before;
            if n > 0 || self.session.peer_closed() {
                return (Ok(n), stamp);
            }
            // Part of a record, or a record with no application data (a session ticket):
            // read on.
        }
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
            if !this.unread.is_empty() {
                let n = this.unread.len().min(out.remaining());
                out.put_slice(&this.unread.split_to(n));
                return Poll::Ready(Ok(()));
            }
            // A clean close: the end.
            if this.session.peer_closed() {
                return Poll::Ready(Ok(()));
            }
            // The handshake's read, polled here: the bytes land in the ciphertext buffer.
            let n = ready!(std::pin::pin!(this.sock.read_buf(this.session.cipher())).poll(cx))?;
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            this.received += n as u64;
            // Unstamped: no record ends to keep.
            this.records.clear();
            this.session.open(
                this.received,
                &mut this.unread,
                &mut this.records,
                &mut this.out,
            )?;
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
            this.session.seal(buf, &mut this.out, &mut this.unread)?;
            this.accepted = Some(buf.len());
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_send(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.session.close(&mut this.out, &mut this.unread)?;
            this.closing = true;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.sock).poll_shutdown(cx)
    }
}
