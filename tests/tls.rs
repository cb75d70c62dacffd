//! TLS against a scripted server with an rcgen certificate: rejected by default, accepted with
//! `insecure`, and accepted when its CA is given as a PEM file; with `--ca-cert FILE`, the
//! certificates users make (a self-signed one that is its own CA, as `openssl req -x509` makes
//! it, or a server's certificate given by itself) accepted as curl and Python's `ssl` accept
//! them, and anything else refused with its reason.

#[path = "support/real_server.rs"]
mod real_server;
mod support;
#[path = "../benches/support/tls_pair.rs"]
mod tls_pair;

use bytes::Bytes;
use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target};
use llmspeed::timeline::{ErrorKind, StampFallback, StampSource, Timeline};
use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io::Write;
use std::sync::Arc;
use support::*;
use tokio_rustls::TlsAcceptor;

struct Pki {
    ca_pem: String,
    acceptor: TlsAcceptor,
}

/// A CA and a leaf for 127.0.0.1 signed by it.
fn pki() -> Pki {
    let (ca, leaf, leaf_key) = ca_and_leaf();
    Pki {
        ca_pem: ca.pem(),
        acceptor: acceptor(&leaf, &leaf_key),
    }
}

/// A CA, and a leaf for 127.0.0.1 signed by it with the leaf's key.
fn ca_and_leaf() -> (Certificate, Certificate, KeyPair) {
    let (ca, ca_key) = ca();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    (ca, leaf, leaf_key)
}

/// A CA of no name in particular.
fn ca() -> (Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    (params.self_signed(&key).unwrap(), key)
}

/// A self-signed certificate for `name` that is its own CA (basic constraints CA:TRUE, as
/// `openssl req -x509` writes by default), served with its key; its PEM is what the user gives.
fn self_signed_ca(name: &str, tweak: impl FnOnce(&mut CertificateParams)) -> Pki {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    tweak(&mut params);
    let cert = params.self_signed(&key).unwrap();
    Pki {
        ca_pem: cert.pem(),
        acceptor: acceptor(&cert, &key),
    }
}

fn acceptor(cert: &Certificate, key: &KeyPair) -> TlsAcceptor {
    server_config(
        CertificateDer::from(cert.der().to_vec()),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

fn server_config(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

/// A run against the server of `pki` trusting the PEM text `ca_pem` as `--ca-cert`.
async fn run_with_ca_file(pki: &Pki, ca_pem: &str) -> Timeline {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(ca_pem.as_bytes()).unwrap();
    let path = file.path().to_path_buf();
    run(pki, |cfg| cfg.ca_file = Some(path)).await
}

/// The run failed in the handshake, before any request was sent: nothing measured.
fn refused(tl: Timeline) -> llmspeed::timeline::RequestError {
    assert!(tl.events.is_empty(), "nothing may be measured");
    assert_eq!(tl.send_start, None, "no request may be sent");
    let e = tl.outcome.expect_err("the server must be refused");
    assert_eq!(e.kind, ErrorKind::Tls, "{e}");
    e
}

/// The streamed completions request every test here sends (the server's answer is scripted).
fn completions_request() -> StreamRequest {
    StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(b"{}"),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 8,
        keep_text: None,
        request_id: None,
    }
}

async fn run(pki: &Pki, tweak: impl FnOnce(&mut ClientConfig)) -> Timeline {
    let server = Server::start_tls(vec![respond(vllm_writes(3, 4))], pki.acceptor.clone()).await;
    let mut cfg = ClientConfig::new(Target::parse(&server.https_url()).unwrap());
    tweak(&mut cfg);
    let client = Client::new(cfg, Clock::new()).unwrap();
    let req = completions_request();
    client
        .stream(&req, 0, &mut NoopObserver, &Cancel::new())
        .await
}

#[tokio::test]
async fn self_signed_is_rejected_by_default() {
    let pki = pki();
    let tl = run(&pki, |_| {}).await;
    let e = tl.outcome.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Tls);
    assert!(e.message.contains("certificate not trusted"), "{e}");
    assert!(e.message.contains("--insecure"), "{e}");
}

#[tokio::test]
async fn insecure_accepts_any_certificate() {
    let pki = pki();
    let tl = run(&pki, |cfg| cfg.insecure = true).await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.events.len(), 3);
    assert_eq!(tl.output_tokens(), 3);
    // The socket is read as a plain one is (`net::tls_conn`): no read keeps the client's
    // clock for being TLS (tests/kernel_stamps.rs holds the stamps themselves over TLS).
    let source = tl.stamp_source();
    assert_ne!(source, StampSource::ClientClock(StampFallback::Tls));
    assert_ne!(source, StampSource::Mixed(StampFallback::Tls));
}

#[tokio::test]
async fn ca_file_makes_it_trusted() {
    let pki = pki();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(pki.ca_pem.as_bytes()).unwrap();
    let path = file.path().to_path_buf();
    let tl = run(&pki, |cfg| cfg.ca_file = Some(path)).await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.events.len(), 3);
}

#[tokio::test]
async fn plain_http_server_on_https_url_is_a_tls_error() {
    // A plain HTTP server answers the ClientHello with a 400 of its own.
    let reply = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n".to_vec();
    let server = Server::start(vec![vec![Step::Write(reply), Step::Close]]).await;
    let cfg = ClientConfig::new(Target::parse(&server.https_url()).unwrap());
    let client = Client::new(cfg, Clock::new()).unwrap();
    let req = completions_request();
    let tl = client
        .stream(&req, 0, &mut NoopObserver, &Cancel::new())
        .await;
    let e = tl.outcome.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Tls, "{e}");
    assert!(e.message.contains("plain http"), "{e}");
}

#[test]
fn bad_ca_file_is_a_tls_error() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"not a certificate").unwrap();
    let mut cfg = ClientConfig::new(Target::parse("https://127.0.0.1:1").unwrap());
    cfg.ca_file = Some(file.path().to_path_buf());
    let e = Client::new(cfg, Clock::new()).err().expect("must fail");
    assert_eq!(e.kind, ErrorKind::Tls);
    assert!(e.message.contains("no PEM certificates"), "{e}");
}

#[tokio::test]
async fn a_self_signed_certificate_that_is_its_own_ca_is_trusted_when_given() {
    let pki = self_signed_ca("127.0.0.1", |_| {});
    // Without it, refused, and the message says what the certificate is and what to do.
    let e = refused(run(&pki, |_| {}).await);
    assert!(e.message.contains("is a self-signed CA certificate"), "{e}");
    assert!(e.message.contains("--ca-cert"), "{e}");
    // With it, trusted (webpki alone says CaUsedAsEndEntity).
    let tl = run_with_ca_file(&pki, &pki.ca_pem).await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.output_tokens(), 3);
}

#[tokio::test]
async fn a_server_certificate_given_without_its_ca_is_trusted() {
    // curl and Python's ssl accept a chain that ends at a certificate in the file (OpenSSL's
    // partial chain): the file holds the leaf, not the CA that signed it.
    let (ca, ca_key) = ca();
    let leaf_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    // A name of its own (rcgen names every certificate alike, which would make the leaf look
    // like its own issuer).
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    let leaf = params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
    let pki = Pki {
        ca_pem: leaf.pem(),
        acceptor: acceptor(&leaf, &leaf_key),
    };
    let tl = run_with_ca_file(&pki, &pki.ca_pem).await;
    assert_eq!(tl.outcome, Ok(()));
}

#[tokio::test]
async fn a_wrong_ca_is_refused_with_its_reason_and_nothing_measured() {
    let pki = pki();
    let (other, _) = ca();
    let e = refused(run_with_ca_file(&pki, &other.pem()).await);
    assert!(
        e.message
            .contains("certificate not trusted (unknown issuer)"),
        "{e}"
    );
    assert!(e.message.contains("--ca-cert"), "{e}");
}

#[tokio::test]
async fn a_self_signed_certificate_for_another_host_is_refused_even_when_given() {
    // The host name is still checked for a certificate trusted by being in the file.
    let pki = self_signed_ca("llm.example.com", |_| {});
    let e = refused(run_with_ca_file(&pki, &pki.ca_pem).await);
    assert!(e.message.contains("not valid for this host name"), "{e}");
}

#[tokio::test]
async fn an_expired_self_signed_certificate_is_refused_even_when_given() {
    let pki = self_signed_ca("127.0.0.1", |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let e = refused(run_with_ca_file(&pki, &pki.ca_pem).await);
    assert!(e.message.contains("certificate expired"), "{e}");
}

#[tokio::test]
async fn a_certificate_made_by_openssl_req_x509_is_trusted_when_given() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    // The command a user copies: a key and a self-signed certificate for the host, one day.
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    let made = match made {
        Ok(o) => o,
        Err(e) => return real_server::missing(&format!("openssl cannot run: {e}")).unwrap_or(()),
    };
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pem = std::fs::read_to_string(&cert).unwrap();
    let pki = Pki {
        acceptor: server_config(
            CertificateDer::from_pem_file(&cert).unwrap(),
            PrivateKeyDer::from_pem_file(&key).unwrap(),
        ),
        ca_pem: pem,
    };
    // openssl's default makes it its own CA: webpki alone refuses it.
    let e = refused(run(&pki, |_| {}).await);
    assert!(e.message.contains("is a self-signed CA certificate"), "{e}");
    let tl = run_with_ca_file(&pki, &pki.ca_pem).await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.output_tokens(), 3);
}

/// `selftest --tls-cert --tls-key`: the simulated server speaks TLS itself and the client
/// trusts its certificate as `--ca-cert`; the bounds are stated and hold against the trace,
/// as in plain text (tests/selftest_bounds.rs holds the other scenarios).
#[test]
fn selftest_over_tls_states_bounds_that_hold() {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let out = std::process::Command::new(support::process::bin())
        .args([
            "selftest",
            "--streams",
            "8",
            "--gap",
            "5ms",
            "--tokens",
            "40",
        ])
        .arg("--tls-cert")
        .arg(&cert_file)
        .arg("--tls-key")
        .arg(&key_file)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["failed_streams"], 0, "{r}");
    assert_eq!(r["tokens_matched"], r["trace_records"], "{r}");
    if cfg!(target_os = "linux") {
        assert_eq!(r["no_bound_reason"], serde_json::Value::Null, "{r}");
        assert_eq!(r["stamp_source"], "kernel", "{r}");
        let cover = r["gap_bound_coverage_percent"].as_f64().unwrap();
        assert!(cover >= 99.0, "{r}");
        assert_eq!(r["ttft_bound_coverage_percent"], 100.0, "{r}");
    }
}

/// `TlsSession::open`, what every TLS read runs after its `recvmsg`, against a rustls server in
/// memory: the whole records in the buffer are opened one at a time, each noted with its
/// plaintext's end and its ciphertext's end in the stream (what packet stamps look up, worked
/// out here from the records' own lengths); part of a record waits for the rest; a key update
/// the server asks for is answered ahead of our next request, which the server then reads
/// under the new keys; a close_notify ends the stream.
#[test]
fn tls_session_opens_records_one_at_a_time_each_with_its_ends() {
    use std::io::Read;
    let (mut server, mut client) = tls_pair::session();
    let texts: [&[u8]; 3] = [b"first", &[b'x'; 3000], b"third"];
    let sealed: Vec<Vec<u8>> = texts
        .iter()
        .map(|t| tls_pair::seal(&mut server, t))
        .collect();
    let fourth = tls_pair::seal(&mut server, b"fourth");
    // The session tickets after the handshake are in the stream before these.
    let mut cipher_end = client.received();
    let mut read = sealed.concat();
    read.extend_from_slice(&fourth[..3]);
    let mut out = bytes::BytesMut::new();
    assert_eq!(client.open(&read, &mut out), 5 + 3000 + 5);
    assert_eq!(&out[..], &texts.concat()[..]);
    let mut plain_end = 0;
    let want: Vec<(usize, u64)> = texts
        .iter()
        .zip(&sealed)
        .map(|(t, r)| {
            plain_end += t.len();
            cipher_end += r.len() as u64;
            (plain_end, cipher_end)
        })
        .collect();
    assert_eq!(client.ends(), &want[..]);
    // The rest of the fourth record completes it.
    assert_eq!(client.open(&fourth[3..], &mut out), 6);
    let total = out.len();
    assert_eq!(client.ends(), &[(total, client.received())]);
    assert!(out.ends_with(b"fourth"));

    // A key update asked for by the server: no plaintext, an answer to send.
    server.refresh_traffic_keys().expect("key update");
    let update = tls_pair::server_out(&mut server);
    assert_eq!(client.open(&update, &mut out), 0);
    assert!(client.ends().is_empty());
    let sent = client.seal(b"GET / HTTP/1.1\r\n\r\n");
    // Two records: the answer (our own key update), then the request.
    let first = 5 + usize::from(u16::from_be_bytes([sent[3], sent[4]]));
    assert!(
        sent.len() > first + 5,
        "{} bytes: no answer ahead of the request",
        sent.len()
    );
    tls_pair::feed(&sent, |r| server.read_tls(r));
    server
        .process_new_packets()
        .expect("server reads our answer and request");
    let mut got = Vec::new();
    let _ = server.reader().read_to_end(&mut got);
    assert_eq!(&got[..], b"GET / HTTP/1.1\r\n\r\n");
    // And the server's next record is still opened, under its new keys.
    let after = tls_pair::seal(&mut server, b"after the update");
    assert_eq!(client.open(&after, &mut out), 16);

    // close_notify: no plaintext, and the session says the server closed.
    assert!(!client.peer_closed());
    server.send_close_notify();
    let close = tls_pair::server_out(&mut server);
    assert_eq!(client.open(&close, &mut out), 0);
    assert!(client.peer_closed());
}

/// The unstamped reads (`get`, `post_json`) over TLS: a 40 KiB body (three records, each
/// larger than the read buffer's room, so the plaintext waits in the connection between reads)
/// comes back whole; the same kept-alive connection then streams, stamped.
#[tokio::test]
async fn a_get_larger_than_a_record_then_a_stream_on_the_same_connection() {
    let pki = pki();
    let body: String = (0..40 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let script = vec![
        Step::ReadRequest,
        Step::Write(head.into_bytes()),
        Step::Write(body.as_bytes()[..30_000].to_vec()),
        Step::Write(body.as_bytes()[30_000..].to_vec()),
    ];
    let mut script = script;
    script.extend(respond(vllm_writes(3, 4)));
    let server = Server::start_tls(vec![script], pki.acceptor.clone()).await;
    let mut cfg = ClientConfig::new(Target::parse(&server.https_url()).unwrap());
    cfg.insecure = true;
    let client = Client::new(cfg, Clock::new()).unwrap();
    let got = client.get("/v1/models").await.expect("get over TLS");
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), body.len());
    assert!(got.body == body.as_bytes(), "the body came back changed");
    let req = completions_request();
    let tl = client
        .stream(&req, 0, &mut NoopObserver, &Cancel::new())
        .await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.output_tokens(), 3);
    assert_eq!(server.accepted(), 1, "the stream reused the connection");
}

/// A server that speaks TLS 1.2 only: the handshake (our own steps on rustls's unbuffered API,
/// where 1.2 waits for the server's Finished after ours) completes and the stream is measured
/// with kernel stamps, as over 1.3.
#[tokio::test]
async fn a_tls_1_2_only_server_is_streamed_with_kernel_stamps() {
    let (ca, leaf, leaf_key) = ca_and_leaf();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    let pki = Pki {
        ca_pem: ca.pem(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    };
    let tl = run_with_ca_file(&pki, &pki.ca_pem).await;
    assert_eq!(tl.outcome, Ok(()));
    assert_eq!(tl.output_tokens(), 3);
    #[cfg(target_os = "linux")]
    assert_eq!(tl.stamp_source(), StampSource::Kernel);
}
