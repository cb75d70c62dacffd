//! The rustls client configuration: which server certificates are trusted (the bundled or the
//! system's roots, `--ca-cert FILE`, `--insecure`), built once per [`super::Client`].
//!
//! `--ca-cert FILE` trusts what curl and Python's `ssl` trust with the same file: a chain to a
//! CA in FILE (webpki's check, as for any root), and a server whose own certificate is in FILE
//! (`openssl req -x509` makes a certificate that is its own CA, which webpki refuses as an
//! end entity: `CaUsedAsEndEntity`). The second is still held to its validity period, the
//! host name and the handshake's signature; only the chain is taken from FILE.
//!
//! Architecture invariant: nothing here accepts a certificate without a reason a user gave
//! (`--insecure`, or the certificate itself in `--ca-cert`); every refusal keeps rustls's error,
//! which `connect` turns into the message a person reads.

use super::config::ClientConfig;
use super::connect::tls_err;
use crate::timeline::RequestError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// Builds the rustls client configuration once per [`super::Client`].
pub(crate) fn tls_config(cfg: &ClientConfig) -> Result<Arc<rustls::ClientConfig>, RequestError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(format!("cannot set up TLS: {e}")))?;
    let mut config = if cfg.insecure {
        let verifier = Verifier {
            provider,
            trust: Trust::Any,
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth()
    } else {
        let mut roots = base_roots(cfg.system_roots)?;
        match &cfg.ca_file {
            None => builder.with_root_certificates(roots).with_no_client_auth(),
            Some(path) => {
                let given = read_ca_file(path)?;
                for cert in &given {
                    roots.add(cert.clone()).map_err(|e| {
                        tls_err(format!("unusable certificate in {}: {e}", path.display()))
                    })?;
                }
                let chain =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| tls_err(format!("cannot set up TLS: {e}")))?;
                let verifier = Verifier {
                    provider,
                    trust: Trust::CaFile { chain, given },
                };
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth()
            }
        }
    };
    // We speak HTTP/1.1 only; saying so stops an h2-preferring server from choosing h2.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The bundled webpki roots, or the operating system's (`--system-roots`).
fn base_roots(system: bool) -> Result<rustls::RootCertStore, RequestError> {
    let mut roots = rustls::RootCertStore::empty();
    if system {
        let found = rustls_native_certs::load_native_certs();
        let (added, _ignored) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err(tls_err(
                "no usable system root certificates found (drop --system-roots to use the bundled roots)",
            ));
        }
    } else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    Ok(roots)
}

/// Every certificate of a PEM file; at least one.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, RequestError> {
    let iter = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_err(format!("cannot read CA file {}: {e}", path.display())))?;
    let certs = iter.collect::<Result<Vec<_>, _>>().map_err(|e| {
        tls_err(format!(
            "bad certificate in CA file {}: {e}",
            path.display()
        ))
    })?;
    if certs.is_empty() {
        return Err(tls_err(format!(
            "CA file {} holds no PEM certificates",
            path.display()
        )));
    }
    Ok(certs)
}

/// Our certificate check: any certificate (`--insecure`), or `--ca-cert FILE`'s rule (see the
/// module docs). Either way the handshake's signature is checked, so the connection is
/// encrypted and behaves like a verified one (same round trips, same cost).
#[derive(Debug)]
struct Verifier {
    provider: Arc<rustls::crypto::CryptoProvider>,
    trust: Trust,
}

#[derive(Debug)]
enum Trust {
    /// `--insecure`.
    Any,
    /// webpki's chain check against the roots and FILE, and where only the chain failed, the
    /// server's own certificate found in FILE.
    CaFile {
        chain: Arc<WebPkiServerVerifier>,
        given: Vec<CertificateDer<'static>>,
    },
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Trust::CaFile { chain, given } = &self.trust else {
            return Ok(ServerCertVerified::assertion());
        };
        let checked =
            chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match checked {
            Err(e) if only_the_chain_failed(&e) && given.iter().any(|c| c == end_entity) => {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Whether webpki refused a certificate for its chain alone: no issuer among the roots (a
/// server certificate given by itself, not its CA), or a CA certificate serving as the server's
/// own (`openssl req -x509`). webpki checks a certificate's validity period before either (its
/// own properties come first: `check_issuer_independent_properties`), so an expired one is
/// refused as expired; the host name is checked after the chain, so by the caller.
fn only_the_chain_failed(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => true,
        other => ca_used_as_server_cert(other),
    }
}

/// Whether webpki refused the server's certificate for being a CA's (`CaUsedAsEndEntity`).
pub(super) fn ca_used_as_server_cert(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(o)) => matches!(
            o.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}
