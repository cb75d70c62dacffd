//! TCP and TLS connection set-up, and the classification of their failures.
//!
//! Failures become [`RequestError`]s here, once, with a one-line message a person can act on
//! ("connection refused by 127.0.0.1:8000", "certificate not trusted; use --insecure ...").

use super::packet::hub::PacketHub;
use super::packet::stamper::PacketClock;
use super::packet::tap::PacketTap;
use super::plain::Plain;
use super::stamp::ReadStamp;
use super::target::Target;
use super::tls_conn::{self, RecordClock, TlsConn};
use crate::clock::Clock;
use crate::net::decode::ReadClock;
use crate::timeline::{ErrorKind, RequestError};
use bytes::BytesMut;
use rustls::pki_types::ServerName;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// One open connection to the target, plain or TLS.
pub(crate) enum Conn {
    /// Reads stamped by the kernel where it can (see `net::plain`).
    Plain(Plain),
    /// The same socket reads, the ciphertext opened record by record (`net::tls_conn`).
    Tls(Box<TlsConn>),
}

/// The per-position clock of a read on a connection with a packet tap.
pub(crate) enum ConnClock<'a> {
    Plain(PacketClock<'a>),
    Tls(RecordClock<'a>),
}

impl<'a> ConnClock<'a> {
    fn inner(&self) -> &PacketClock<'a> {
        match self {
            ConnClock::Plain(c) => c,
            ConnClock::Tls(c) => &c.inner,
        }
    }

    /// See [`PacketClock::all_hit`].
    pub(crate) fn all_hit(&mut self) -> bool {
        match self {
            ConnClock::Plain(c) => c.all_hit(),
            ConnClock::Tls(c) => {
                if c.inner.hits == 0 && c.inner.misses == 0 {
                    c.at(0);
                }
                c.inner.misses == 0
            }
        }
    }

    /// See [`PacketClock::wakeup_ns`].
    pub(crate) fn wakeup_ns(&self, t: u64) -> u32 {
        self.inner().wakeup_ns(t)
    }
}

impl ReadClock for ConnClock<'_> {
    #[inline]
    fn at(&mut self, remaining: usize) -> u64 {
        match self {
            ConnClock::Plain(c) => c.at(remaining),
            ConnClock::Tls(c) => c.at(remaining),
        }
    }
}

impl Conn {
    /// Reads into `buf` and stamps the read: the kernel's receive stamp on a Linux connection
    /// that has them, else the client's clock the moment the read returned. Over TLS the
    /// stamp is the read's that completed the record(s) whose plaintext it hands over.
    pub(crate) async fn read_stamped(
        &mut self,
        buf: &mut BytesMut,
        clock: &Clock,
    ) -> (io::Result<usize>, ReadStamp) {
        match self {
            Conn::Plain(p) => p.read_stamped(buf, clock).await,
            Conn::Tls(s) => s.read_stamped(buf, clock).await,
        }
    }

    /// The last read's per-position clock when the connection has a packet tap (see
    /// `net::packet`); `read` is that read's own stamp, `fed` the length of the buffer the
    /// decoder is about to be fed.
    pub(crate) fn packet_clock<'a>(
        &'a self,
        clock: &'a Clock,
        read: u64,
        fed: usize,
    ) -> Option<ConnClock<'a>> {
        match self {
            Conn::Plain(p) => p.packet_clock(clock, read).map(ConnClock::Plain),
            Conn::Tls(s) => s.packet_clock(clock, read, fed).map(ConnClock::Tls),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Opens a connection (TCP, then TLS for https), with `TCP_NODELAY` set, kernel receive
/// stamps asked for on a plain one when `kernel_stamps`, and a packet tap at `packet` taken
/// once connected (plain only).
pub(crate) async fn connect(
    target: &Target,
    tls: Option<&Arc<rustls::ClientConfig>>,
    kernel_stamps: bool,
    packet: Option<&Arc<PacketHub>>,
) -> Result<Conn, RequestError> {
    let authority = target.authority();
    let addrs = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| {
            RequestError::new(
                ErrorKind::Connect,
                format!("cannot resolve host {:?}: {e}", target.host),
            )
        })?;
    let mut last: Option<io::Error> = None;
    let mut stream = None;
    let hub = packet;
    for addr in addrs {
        match tcp_connect(addr, hub).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let (stream, tap) = match stream {
        Some(s) => s,
        None => {
            let e = last.unwrap_or_else(|| io::Error::other("no addresses"));
            return Err(RequestError::new(
                ErrorKind::Connect,
                describe_connect_error(&e, &authority),
            ));
        }
    };
    // Nagle would hold our small request writes back; the latency it adds is what we measure.
    let _ = stream.set_nodelay(true);
    let plain = Plain::new(stream, kernel_stamps, tap).map_err(|e| {
        RequestError::new(
            ErrorKind::Connect,
            format!("cannot register the connection to {authority}: {e}"),
        )
    })?;
    let Some(tls) = tls else {
        return Ok(Conn::Plain(plain));
    };
    let name = ServerName::try_from(target.host.clone())
        .map_err(|_| tls_err(format!("{:?} is not a valid TLS server name", target.host)))?;
    // The handshake over our own socket, so its bytes pass the packet tap's count too.
    match tls_conn::handshake(plain, tls.clone(), name).await {
        Ok(conn) => Ok(Conn::Tls(Box::new(conn))),
        Err(e) => Err(classify_tls_error(&e, &authority)),
    }
}

/// One TCP connect; with a packet `hub`, the connection then takes its port's place there,
/// claiming the server's `SYN-ACK` (the hub keeps it for the port), before anything is sent. A
/// tap that does not open (the port has one already: a connection to another of the host's
/// addresses) leaves this connection with socket stamps: its timelines count kernel reads, so
/// a run's stamp source reads `mixed`.
async fn tcp_connect(
    addr: std::net::SocketAddr,
    hub: Option<&Arc<PacketHub>>,
) -> io::Result<(TcpStream, Option<PacketTap>)> {
    let Some(hub) = hub else {
        return Ok((TcpStream::connect(addr).await?, None));
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let stream = TcpStream::connect(addr).await?;
    let tap = PacketTap::open(hub, addr, stream.local_addr()?, since).ok();
    Ok((stream, tap))
}

fn describe_connect_error(e: &io::Error, authority: &str) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("connection refused by {authority}"),
        io::ErrorKind::TimedOut => format!("connection to {authority} timed out"),
        _ => match e.raw_os_error() {
            Some(libc::ENETUNREACH) => format!("network unreachable for {authority}"),
            Some(libc::EHOSTUNREACH) => format!("host unreachable: {authority}"),
            _ => format!("cannot connect to {authority}: {e}"),
        },
    }
}

fn classify_tls_error(e: &io::Error, authority: &str) -> RequestError {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        use rustls::CertificateError as C;
        let msg = match tls {
            rustls::Error::InvalidCertificate(C::UnknownIssuer)
            | rustls::Error::InvalidCertificate(C::BadSignature) => format!(
                "TLS handshake with {authority} failed: certificate not trusted (unknown issuer); use --insecure to skip verification or --ca-cert to trust it"
            ),
            rustls::Error::InvalidCertificate(C::NotValidForName)
            | rustls::Error::InvalidCertificate(C::NotValidForNameContext { .. }) => format!(
                "TLS handshake with {authority} failed: certificate not valid for this host name; use --insecure to skip verification"
            ),
            rustls::Error::InvalidCertificate(C::Expired)
            | rustls::Error::InvalidCertificate(C::ExpiredContext { .. }) => format!(
                "TLS handshake with {authority} failed: certificate expired; use --insecure to skip verification"
            ),
            e if super::tls::ca_used_as_server_cert(e) => format!(
                "TLS handshake with {authority} failed: the server's certificate is a self-signed CA certificate (as `openssl req -x509` makes) that no --ca-cert file holds; give that very certificate with --ca-cert to trust it, or use --insecure to skip verification"
            ),
            rustls::Error::InvalidCertificate(other) => format!(
                "TLS handshake with {authority} failed: certificate not trusted ({other:?}); use --insecure to skip verification"
            ),
            rustls::Error::InvalidMessage(_) => format!(
                "TLS handshake with {authority} failed: the server did not answer in TLS (is it serving plain http?)"
            ),
            other => format!("TLS handshake with {authority} failed: {other}"),
        };
        return tls_err(msg);
    }
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return tls_err(format!(
            "TLS handshake with {authority} failed: the server closed the connection (is it serving plain http?)"
        ));
    }
    if e.kind() == io::ErrorKind::InvalidData {
        return tls_err(format!(
            "TLS handshake with {authority} failed: {e} (is it serving plain http?)"
        ));
    }
    tls_err(format!("TLS handshake with {authority} failed: {e}"))
}

pub(super) fn tls_err(message: impl Into<String>) -> RequestError {
    RequestError::new(ErrorKind::Tls, message)
}
