//! A TLS front for a plain server, as nginx or an ingress terminates TLS in front of an engine:
//! it accepts TLS on 127.0.0.1:0 with a self-signed certificate for 127.0.0.1 that is its own
//! CA (as `openssl req -x509` makes one) and relays each connection to the backend, on a
//! thread of its own that lives as long as the test process.
#![allow(dead_code)]

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

pub struct TlsFront {
    pub addr: SocketAddr,
    /// The certificate, PEM: what a user gives as `--ca-cert`.
    pub cert_pem: String,
}

impl TlsFront {
    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Relays TLS connections to `backend` (plain TCP).
    pub fn start(backend: SocketAddr) -> TlsFront {
        let (config, cert_pem) = self_signed_server_config();
        let acceptor = TlsAcceptor::from(config);
        let addr = super::relay::listen_on_thread(move |conn| {
            let acceptor = acceptor.clone();
            async move {
                let Ok(mut tls) = acceptor.accept(conn).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = plain.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            }
        });
        TlsFront { addr, cert_pem }
    }
}

/// A rustls server configuration with a fresh self-signed certificate for 127.0.0.1 that is its
/// own CA (as `openssl req -x509` makes one), and that certificate's PEM: what a user gives as
/// `--ca-cert`.
pub fn self_signed_server_config() -> (Arc<rustls::ServerConfig>, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (Arc::new(config), cert.pem())
}
