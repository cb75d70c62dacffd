//! One connection's TLS session without its socket (sans-IO): rustls's unbuffered client
//! (`UnbufferedClientConnection`) and the ciphertext read but not yet opened, in a buffer of
//! ours. It runs the handshake's steps, opens whole records into the caller's buffer (noting
//! where each record's plaintext and ciphertext end, for the stamps), and seals what we send.
//! `net::tls_conn` does the socket's reading and writing around it.
//!
//! Public (hidden from the docs) so that `benches/tls_read.rs` and `tests/alloc.rs` time and
//! count this very code on an in-memory connection.
//!
//! Must not allocate per record in our code: the ciphertext buffer is kept and reused, the
//! plaintext goes straight into the caller's `BytesMut`. rustls 0.23 itself copies each
//! decrypted record into a `Vec` of its own (`ReadTraffic::next_record` pops it; in-place
//! decryption comes with 0.24): one allocation per record, counted in `tests/alloc.rs`.

use bytes::{Buf, BytesMut};
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;

/// A TLS record's header: type, version (2), length (2).
const HEADER: usize = 5;
/// Room for one whole record of the largest size TLS allows, with its header and overhead.
pub const MAX_RECORD: usize = HEADER + 16 * 1024 + 256;

/// What the handshake needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// More ciphertext from the server, appended to [`TlsSession::cipher`].
    Read,
    /// The bytes [`TlsSession::handshake`] appended to its `send` sent to the server.
    Write,
    /// The handshake is done: application data may flow.
    Done,
}

/// See the module doc.
pub struct TlsSession {
    tls: UnbufferedClientConnection,
    /// Ciphertext read but not yet opened: part of a record at most, between calls.
    cipher: BytesMut,
    /// The server sent close_notify: no application data follows.
    peer_closed: bool,
}

impl TlsSession {
    /// A client session for `name`, before its handshake.
    pub fn new(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        Ok(Self {
            tls: UnbufferedClientConnection::new(config, name)?,
            cipher: BytesMut::with_capacity(2 * MAX_RECORD),
            peer_closed: false,
        })
    }

    /// The buffer the socket's reads append ciphertext to, with room for one whole record.
    pub fn cipher(&mut self) -> &mut BytesMut {
        if self.cipher.capacity() - self.cipher.len() < MAX_RECORD {
            self.cipher.reserve(MAX_RECORD);
        }
        &mut self.cipher
    }

    /// Ciphertext bytes read and not yet opened (part of a record).
    pub fn pending(&self) -> usize {
        self.cipher.len()
    }

    /// Whether the server closed the session (close_notify) and all it sent before is opened.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Runs the handshake as far as the ciphertext read so far takes it: the records it asks
    /// to send are appended to `send`. A refusal is rustls's error (the certificate's, the
    /// server's alert) as `InvalidData`, which `net::connect` turns into its message; the
    /// server closing the session in the middle is `UnexpectedEof`.
    pub fn handshake(&mut self, send: &mut Vec<u8>) -> io::Result<Step> {
        loop {
            let UnbufferedStatus { discard, state } =
                self.tls.process_tls_records(&mut self.cipher);
            let step = match state.map_err(invalid)? {
                ConnectionState::EncodeTlsData(mut e) => {
                    append(send, 1024, |b| e.encode(b).map_err(encode_room))?;
                    None
                }
                ConnectionState::TransmitTlsData(t) => {
                    // The caller sends `send` before it calls again: that is the transmission.
                    t.done();
                    Some(Step::Write)
                }
                ConnectionState::BlockedHandshake => Some(Step::Read),
                // Application data may flow; a record of it already here waits for `open`.
                ConnectionState::WriteTraffic(_) | ConnectionState::ReadTraffic(_) => {
                    Some(Step::Done)
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the TLS session during its handshake",
                    ))
                }
                other => return Err(unexpected(&other)),
            };
            self.cipher.advance(discard);
            if let Some(step) = step {
                return Ok(step);
            }
        }
    }

    /// After a failed handshake: the alert rustls queued for the server (why we refused it),
    /// appended to `send`, to be sent as a courtesy before closing.
    pub fn alert(&mut self, send: &mut Vec<u8>) {
        let UnbufferedStatus { state, .. } = self.tls.process_tls_records(&mut self.cipher);
        if let Ok(ConnectionState::EncodeTlsData(mut e)) = state {
            let _ = append(send, 64, |b| e.encode(b).map_err(encode_room));
        }
    }

    /// Opens every whole record in the ciphertext buffer, one at a time: each application
    /// data record's plaintext is appended to `out`, and (its end in `out`, the stream offset
    /// just past its ciphertext) pushed onto `ends`; `received` is the stream offset just past
    /// the buffer's last byte. Records without application data (session tickets, key
    /// updates, close_notify) are taken as they come; what rustls asks to send in answer (a
    /// key update's) is appended to `send`, which the next write sends first.
    pub fn open(
        &mut self,
        received: u64,
        out: &mut BytesMut,
        ends: &mut Vec<(usize, u64)>,
        send: &mut Vec<u8>,
    ) -> io::Result<()> {
        self.run(received, out, ends, send, None)
    }

    /// Seals `data` as application data records appended to `send`. Plaintext that arrived
    /// meanwhile (none: every read opens all it read) would go to `unread`, not be lost.
    pub fn seal(
        &mut self,
        data: &[u8],
        send: &mut Vec<u8>,
        unread: &mut BytesMut,
    ) -> io::Result<()> {
        let room = data.len() + (data.len() / (16 * 1024) + 1) * 64;
        let mut write = |w: &mut Writer<'_>, send: &mut Vec<u8>| {
            append(send, room, |b| w.encrypt(data, b).map_err(encrypt_room))
        };
        self.run(0, unread, &mut Vec::new(), send, Some(&mut write))
    }

    /// Appends a close_notify alert to `send`.
    pub fn close(&mut self, send: &mut Vec<u8>, unread: &mut BytesMut) -> io::Result<()> {
        let mut write = |w: &mut Writer<'_>, send: &mut Vec<u8>| {
            append(send, 64, |b| w.queue_close_notify(b).map_err(encrypt_room))
        };
        self.run(0, unread, &mut Vec::new(), send, Some(&mut write))
    }

    /// The one loop over rustls's states after the handshake (see [`Self::open`]): until it
    /// has opened all the whole records it holds, and then, given `write`, calls that in the
    /// `WriteTraffic` state (where a session that cannot write is an error).
    fn run(
        &mut self,
        received: u64,
        out: &mut BytesMut,
        ends: &mut Vec<(usize, u64)>,
        send: &mut Vec<u8>,
        mut write: Option<&mut Write<'_>>,
    ) -> io::Result<()> {
        loop {
            let start = received.saturating_sub(self.cipher.len() as u64);
            let UnbufferedStatus { discard, state } =
                self.tls.process_tls_records(&mut self.cipher);
            let more = match state.map_err(invalid)? {
                ConnectionState::ReadTraffic(mut r) => {
                    let before = out.len();
                    while let Some(record) = r.next_record() {
                        out.extend_from_slice(record.map_err(invalid)?.payload);
                    }
                    if out.len() > before {
                        // `discard` reaches just past the record opened (rustls discards an
                        // application data record as soon as it has read it).
                        ends.push((out.len(), start + discard as u64));
                    }
                    true
                }
                ConnectionState::EncodeTlsData(mut e) => {
                    append(send, 256, |b| e.encode(b).map_err(encode_room))?;
                    true
                }
                ConnectionState::TransmitTlsData(t) => {
                    // In `send`, ahead of anything written after it.
                    t.done();
                    true
                }
                ConnectionState::PeerClosed => {
                    self.peer_closed = true;
                    true
                }
                // Nothing more to open until more ciphertext comes.
                ConnectionState::WriteTraffic(mut w) => {
                    if let Some(write) = write.as_mut() {
                        write(&mut w, send)?;
                    }
                    false
                }
                ConnectionState::BlockedHandshake | ConnectionState::Closed if write.is_some() => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the TLS session cannot send: its handshake is not done or it is closed",
                    ))
                }
                ConnectionState::BlockedHandshake | ConnectionState::Closed => false,
                other => return Err(unexpected(&other)),
            };
            self.cipher.advance(discard);
            if !more {
                return Ok(());
            }
        }
    }
}

/// The state in which rustls seals application data.
type Writer<'c> = rustls::unbuffered::WriteTraffic<'c, rustls::client::ClientConnectionData>;
/// What `run` does in that state: seal something into `send`.
type Write<'w> = dyn FnMut(&mut Writer<'_>, &mut Vec<u8>) -> io::Result<()> + 'w;

/// Calls `write` on `send`'s tail of `room` bytes (more when it says it needs more), and keeps
/// what it wrote. `write`'s error: the room it needs, or `None` when room will not help.
fn append(
    send: &mut Vec<u8>,
    mut room: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
) -> io::Result<()> {
    let start = send.len();
    loop {
        send.resize(start + room, 0);
        match write(&mut send[start..]) {
            Ok(n) => {
                send.truncate(start + n);
                return Ok(());
            }
            Err(Some(need)) if need > room => room = need,
            Err(_) => {
                send.truncate(start);
                return Err(io::Error::other("rustls could not encode a TLS record"));
            }
        }
    }
}

fn encode_room(e: EncodeError) -> Option<usize> {
    match e {
        EncodeError::InsufficientSize(s) => Some(s.required_size),
        EncodeError::AlreadyEncoded => None,
    }
}

fn encrypt_room(e: EncryptError) -> Option<usize> {
    match e {
        EncryptError::InsufficientSize(s) => Some(s.required_size),
        _ => None,
    }
}

/// rustls's error as the I/O error a connection returns (`net::connect` looks inside).
fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn unexpected<D>(state: &ConnectionState<'_, '_, D>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected TLS state {state:?}"),
    )
}
