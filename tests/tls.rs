//! TLS against a scripted server with an rcgen certificate: rejected by default, accepted with
//! `insecure`, and accepted when its CA is given as a PEM file.

mod support;

use bytes::Bytes;
use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target};
use llmspeed::timeline::{ErrorKind, StampFallback, StampSource, Timeline};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
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
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

async fn run(pki: &Pki, tweak: impl FnOnce(&mut ClientConfig)) -> Timeline {
    let server = Server::start_tls(vec![respond(vllm_writes(3, 4))], pki.acceptor.clone()).await;
    let mut cfg = ClientConfig::new(Target::parse(&server.https_url()).unwrap());
    tweak(&mut cfg);
    let client = Client::new(cfg, Clock::new()).unwrap();
    let req = StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(b"{}"),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 8,
        keep_text: None,
        request_id: None,
    };
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
    // A rustls record can span reads: no kernel stamp belongs to an event, and the timeline
    // says the client's clock was used, and why (kernel stamps are on by default).
    assert_eq!(
        tl.stamp_source(),
        StampSource::ClientClock(StampFallback::Tls)
    );
    assert!(tl.events.iter().all(|e| e.wakeup_ns == 0));
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
    let req = StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(b"{}"),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 8,
        keep_text: None,
        request_id: None,
    };
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
