//! A rustls server and client joined in memory (no sockets), shared by `benches/tls_read.rs`
//! and `tests/alloc.rs`: a CA and a leaf for `localhost` made by rcgen, the handshake pumped by
//! hand, then the server seals one record per call and the client opens it: with our own
//! session (`net::tls_session`, what `net::tls_conn` reads through: the production code), or
//! with rustls's buffered API as `tls_conn` used it before it moved to the unbuffered one
//! (kept here only, so the bench can time before and after side by side).
#![allow(dead_code)]

use bytes::BytesMut;
use llmspeed::net::tls_session::{Step, TlsSession};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use std::io::{BufRead, Write};
use std::sync::Arc;

/// Server and client configurations: a leaf for `localhost` signed by a CA the client trusts.
pub fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).expect("CA");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .expect("leaf params")
        .signed_by(&leaf_key, &ca, &ca_key)
        .expect("leaf");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.der().to_vec()))
        .expect("CA as root");
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

fn name() -> ServerName<'static> {
    ServerName::try_from("localhost").expect("server name")
}

/// Hands all of `bytes` to a connection's `read_tls`.
pub fn feed(mut bytes: &[u8], mut read_tls: impl FnMut(&mut &[u8]) -> std::io::Result<usize>) {
    while !bytes.is_empty() {
        assert!(
            read_tls(&mut bytes).expect("read_tls") > 0,
            "rustls took nothing"
        );
    }
}

/// The server's pending TLS bytes.
pub fn server_out(server: &mut ServerConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut out).expect("write_tls");
    }
    out
}

/// One record carrying `plaintext` (at most 16 KiB), as a server writes one token's chunk.
pub fn seal(server: &mut ServerConnection, plaintext: &[u8]) -> Vec<u8> {
    server.writer().write_all(plaintext).expect("write");
    server_out(server)
}

/// A connected pair, the client on rustls's buffered API (`ClientConnection`): the "before".
pub fn buffered() -> (ServerConnection, Buffered) {
    let (scfg, ccfg) = configs();
    let mut server = ServerConnection::new(scfg).expect("server");
    let mut client = ClientConnection::new(ccfg, name()).expect("client");
    for _ in 0..16 {
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).expect("write_tls");
        }
        feed(&out, |r| server.read_tls(r));
        server.process_new_packets().expect("server handshake");
        let back = server_out(&mut server);
        feed(&back, |r| client.read_tls(r));
        client.process_new_packets().expect("client handshake");
        if !client.is_handshaking() && !server.is_handshaking() && !server.wants_write() {
            return (server, Buffered { conn: client });
        }
    }
    panic!("handshake did not finish");
}

/// The client half on rustls's buffered API.
pub struct Buffered {
    conn: ClientConnection,
}

impl Buffered {
    /// What `net::tls_conn` did with one whole record before the unbuffered API: hand it to rustls, decrypt, and move
    /// its plaintext into `out`. Returns the plaintext bytes moved.
    pub fn open(&mut self, record: &[u8], out: &mut BytesMut) -> usize {
        feed(record, |r| self.conn.read_tls(r));
        self.conn.process_new_packets().expect("decrypt");
        let mut moved = 0;
        loop {
            let mut reader = self.conn.reader();
            let chunk = match reader.fill_buf() {
                Ok(c) if !c.is_empty() => c,
                _ => break,
            };
            let n = chunk.len();
            out.extend_from_slice(chunk);
            reader.consume(n);
            moved += n;
        }
        moved
    }
}

/// A connected pair, the client our own session (`llmspeed::net::tls_session::TlsSession`,
/// on rustls's unbuffered API, what `net::tls_conn` uses), its handshake run by its own steps.
pub fn session() -> (ServerConnection, Session) {
    let (scfg, ccfg) = configs();
    let mut server = ServerConnection::new(scfg).expect("server");
    let mut session = TlsSession::new(ccfg, name()).expect("client");
    let mut send = Vec::new();
    let mut received = 0u64;
    for _ in 0..64 {
        match session.handshake(&mut send).expect("client handshake") {
            Step::Write => {
                feed(&send, |r| server.read_tls(r));
                server.process_new_packets().expect("server handshake");
                send.clear();
            }
            Step::Read => {
                let back = server_out(&mut server);
                assert!(!back.is_empty(), "both sides wait");
                received += back.len() as u64;
                session.cipher().extend_from_slice(&back);
            }
            Step::Done => {
                // The server's tickets after its Finished: the first `open` reads past them.
                let tickets = server_out(&mut server);
                received += tickets.len() as u64;
                session.cipher().extend_from_slice(&tickets);
                let session = Session {
                    session,
                    received,
                    ends: Vec::with_capacity(64),
                    send,
                };
                return (server, session);
            }
        }
    }
    panic!("handshake did not finish");
}

/// The client half as `net::tls_conn` holds it: the session, the stream offset, the records'
/// table and the bytes to send.
pub struct Session {
    session: TlsSession,
    received: u64,
    ends: Vec<(usize, u64)>,
    send: Vec<u8>,
}

impl Session {
    /// What `net::tls_conn`'s stamped read does after its `recvmsg`: the ciphertext lands in
    /// the session's buffer (here copied there, as the kernel copies it) and
    /// `TlsSession::open` opens every whole record into `out`. Returns the plaintext bytes.
    pub fn open(&mut self, record: &[u8], out: &mut BytesMut) -> usize {
        let before = out.len();
        self.session.cipher().extend_from_slice(record);
        self.received += record.len() as u64;
        self.ends.clear();
        self.session
            .open(self.received, out, &mut self.ends, &mut self.send)
            .expect("open");
        out.len() - before
    }

    /// The records the last `open` opened: (plaintext end in `out`, ciphertext end in the
    /// stream).
    pub fn ends(&self) -> &[(usize, u64)] {
        &self.ends
    }

    /// Seals `data` as `net::tls_conn`'s write does; returns the bytes to send (anything the
    /// session had to answer first, then `data`'s records).
    pub fn seal(&mut self, data: &[u8]) -> Vec<u8> {
        let mut unread = BytesMut::new();
        self.session
            .seal(data, &mut self.send, &mut unread)
            .expect("seal");
        assert!(unread.is_empty(), "plaintext arrived while sealing");
        std::mem::take(&mut self.send)
    }

    /// Whether the server's close_notify was opened.
    pub fn peer_closed(&self) -> bool {
        self.session.peer_closed()
    }

    /// Stream bytes handed to the session so far.
    pub fn received(&self) -> u64 {
        self.received
    }
}
