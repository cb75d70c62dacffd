//! A rustls server and client joined in memory (no sockets), shared by `benches/tls_read.rs`
//! and `tests/alloc.rs`: a CA and a leaf for `localhost` made by rcgen, the handshake pumped by
//! hand, then the server seals one record per call and the client opens records the way
//! `net::tls_conn` does (one whole record handed to rustls, its plaintext appended to the
//! caller's buffer) — with rustls's buffered API (what `tls_conn` uses) or its unbuffered one
//! (`UnbufferedClientConnection`), so the two can be counted and timed side by side.
#![allow(dead_code)]

use bytes::BytesMut;
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
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
fn feed(mut bytes: &[u8], mut read_tls: impl FnMut(&mut &[u8]) -> std::io::Result<usize>) {
    while !bytes.is_empty() {
        assert!(
            read_tls(&mut bytes).expect("read_tls") > 0,
            "rustls took nothing"
        );
    }
}

/// The server's pending TLS bytes.
fn server_out(server: &mut ServerConnection) -> Vec<u8> {
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

/// A connected pair, the client on rustls's buffered API (`ClientConnection`).
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
    /// What `net::tls_conn` does with one whole record: hand it to rustls, decrypt, and move
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

/// A connected pair, the client on rustls's unbuffered API (`UnbufferedClientConnection`).
pub fn unbuffered() -> (ServerConnection, Unbuffered) {
    let (scfg, ccfg) = configs();
    let mut server = ServerConnection::new(scfg).expect("server");
    let mut conn = UnbufferedClientConnection::new(ccfg, name()).expect("client");
    let mut incoming = Vec::with_capacity(64 * 1024);
    let mut outgoing = vec![0u8; 64 * 1024];
    let mut out_len = 0;
    for _ in 0..64 {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming);
        let mut pull = false;
        match state.expect("client handshake") {
            ConnectionState::EncodeTlsData(mut e) => {
                out_len += e.encode(&mut outgoing[out_len..]).expect("encode");
            }
            ConnectionState::TransmitTlsData(t) => {
                feed(&outgoing[..out_len], |r| server.read_tls(r));
                server.process_new_packets().expect("server handshake");
                out_len = 0;
                t.done();
            }
            ConnectionState::BlockedHandshake => pull = true,
            ConnectionState::WriteTraffic(_) => {
                incoming.drain(..discard);
                // The server's tickets after its Finished: the first `open` reads past them.
                incoming.extend_from_slice(&server_out(&mut server));
                return (server, Unbuffered { conn, incoming });
            }
            other => panic!("unexpected handshake state {other:?}"),
        }
        incoming.drain(..discard);
        if pull {
            let back = server_out(&mut server);
            assert!(!back.is_empty(), "both sides wait");
            incoming.extend_from_slice(&back);
        }
    }
    panic!("handshake did not finish");
}

/// The client half on rustls's unbuffered API: the ciphertext lives in our buffer.
pub struct Unbuffered {
    conn: UnbufferedClientConnection,
    incoming: Vec<u8>,
}

impl Unbuffered {
    /// One whole record into our buffer, every application record it completes into `out`.
    pub fn open(&mut self, record: &[u8], out: &mut BytesMut) -> usize {
        self.incoming.extend_from_slice(record);
        let mut moved = 0;
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process_tls_records(&mut self.incoming);
            let more = match state.expect("decrypt") {
                ConnectionState::ReadTraffic(mut r) => {
                    while let Some(rec) = r.next_record() {
                        let rec = rec.expect("record");
                        out.extend_from_slice(rec.payload);
                        moved += rec.payload.len();
                    }
                    true
                }
                // Idle: everything given is read.
                ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => false,
                other => panic!("unexpected state {other:?}"),
            };
            self.incoming.drain(..discard);
            if !more {
                return moved;
            }
        }
    }
}
