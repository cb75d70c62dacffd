//! Fault injection: what can go wrong with one request, how a fault is spelled (flag or
//! `x-mock-fault` header), and the connection wrapper that makes byte-level faults possible
//! under hyper (drip one byte per write; cut a chunk in half; reset with SO_LINGER 0).
//! Everything here is off the normal path: a connection without an armed fault pays one relaxed
//! atomic load per write.

use super::trace::WriteStamper;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One fault. Token counts are output tokens already sent on the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status (500, 429, 503, ...) and a vLLM-shaped error body.
    Status(u16),
    /// Reset the connection (RST) after N tokens.
    ResetAfter(u32),
    /// Send nothing for `ms` milliseconds after N tokens.
    StallAfter { after: u32, ms: u64 },
    /// Send `data: {"error":{...}}` then `[DONE]` inside the 200 stream after N tokens.
    ErrorAfter(u32),
    /// Send one event whose JSON is cut short after N tokens, then carry on.
    MalformedAfter(u32),
    /// Write half of the chunk carrying token N (0-based), then close the connection.
    TruncateAfter(u32),
    /// Write the whole response one byte per write.
    Drip,
}

/// A fault with the probability that a request gets it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultRule {
    pub fault: Fault,
    pub probability: f64,
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("fault `{what}` needs a number, got `{s}`"))
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `status=500`, `reset-after=5`, `stall-after=5:200` (ms), `error-after=3`,
    /// `malformed-after=2`, `truncate-after=4`, `drip`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (k, v) = s.split_once('=').unwrap_or((s, ""));
        Ok(match k.trim() {
            "status" => {
                let code: u16 = num(v, k)?;
                if !(400..600).contains(&code) {
                    return Err(format!("fault status must be 400-599, got {code}"));
                }
                Fault::Status(code)
            }
            "reset-after" => Fault::ResetAfter(num(v, k)?),
            "stall-after" => {
                let (n, ms) = v
                    .split_once(':')
                    .ok_or_else(|| format!("stall-after needs N:MS, got `{v}`"))?;
                Fault::StallAfter {
                    after: num(n, k)?,
                    ms: num(ms, k)?,
                }
            }
            "error-after" => Fault::ErrorAfter(num(v, k)?),
            "malformed-after" => Fault::MalformedAfter(num(v, k)?),
            "truncate-after" => Fault::TruncateAfter(num(v, k)?),
            "drip" => Fault::Drip,
            other => return Err(format!("unknown fault `{other}` (status, reset-after, stall-after, error-after, malformed-after, truncate-after, drip)")),
        })
    }
}

impl std::str::FromStr for FaultRule {
    type Err = String;

    /// `SPEC` (always) or `SPEC@P` with P in 0..=1.
    fn from_str(s: &str) -> Result<Self, String> {
        let (spec, p) = match s.rsplit_once('@') {
            Some((spec, p)) => (spec, num::<f64>(p, "probability")?),
            None => (s, 1.0),
        };
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("fault probability must be in 0..=1, got {p}"));
        }
        Ok(FaultRule {
            fault: spec.parse()?,
            probability: p,
        })
    }
}

/// The first rule that fires for request number `n` (deterministic in `n`).
pub fn pick(rules: &[FaultRule], n: u64) -> Option<Fault> {
    rules.iter().enumerate().find_map(|(i, r)| {
        let u =
            super::text::mix64(n.wrapping_mul(31).wrapping_add(i as u64)) as f64 / u64::MAX as f64;
        (u < r.probability).then_some(r.fault)
    })
}

/// The first load-dependent rule that fires for request number `n` when `in_engine` requests
/// are already running or waiting: each rule's probability is per such request, at most 1.
/// Its draws are independent of [`pick`]'s (another stream of the same mix).
pub fn pick_loaded(rules: &[FaultRule], n: u64, in_engine: u64) -> Option<Fault> {
    rules.iter().enumerate().find_map(|(i, r)| {
        let u = super::text::mix64(n.wrapping_mul(31).wrapping_add(i as u64) ^ 0x10AD_FA17) as f64
            / u64::MAX as f64;
        (u < (r.probability * in_engine as f64).min(1.0)).then_some(r.fault)
    })
}

/// Per-connection switches that a response body flips for the writer below.
#[derive(Debug, Default)]
pub struct ConnCtl {
    drip: AtomicBool,
    truncate: AtomicBool,
    fd: i32,
    /// Present when `--trace` is on.
    pub stamper: Option<WriteStamper>,
}

impl ConnCtl {
    pub fn new(fd: i32, stamper: Option<WriteStamper>) -> Self {
        Self {
            fd,
            stamper,
            ..Self::default()
        }
    }

    #[inline]
    fn written(&self, n: usize) {
        if let Some(s) = &self.stamper {
            s.written(n);
        }
    }

    #[inline]
    fn writing(&self) {
        if let Some(s) = &self.stamper {
            s.writing();
        }
    }

    /// The connection's socket is about to close.
    fn closing(&self) {
        if let Some(s) = &self.stamper {
            s.closing();
        }
    }

    /// A read returned request bytes (stamped only when tracing).
    #[inline]
    fn read_done(&self) {
        if let Some(s) = &self.stamper {
            s.read_done();
        }
    }

    /// Each request on a kept-alive connection starts clean.
    pub fn clear(&self) {
        self.drip.store(false, Ordering::Relaxed);
        self.truncate.store(false, Ordering::Relaxed);
    }

    pub fn set_drip(&self) {
        self.drip.store(true, Ordering::Relaxed);
    }

    /// The next write goes out half, then the connection fails.
    pub fn arm_truncate(&self) {
        self.truncate.store(true, Ordering::Relaxed);
    }

    /// Make the coming close send RST instead of FIN. Only called from a body that this
    /// connection is polling, so the descriptor is still ours.
    pub fn reset_on_close(&self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: fd is the live socket of this connection; setsockopt only reads `linger`.
        unsafe {
            libc::setsockopt(
                self.fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const libc::linger as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
}

/// Pause between dripped bytes, long enough that each byte is its own TCP segment and read.
const DRIP_PAUSE: Duration = Duration::from_millis(1);

/// The connection as hyper sees it: passes everything through unless a fault is armed.
pub struct FaultIo<T> {
    inner: T,
    ctl: Arc<ConnCtl>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> FaultIo<T> {
    pub fn new(inner: T, ctl: Arc<ConnCtl>) -> Self {
        Self {
            inner,
            ctl,
            pause: None,
        }
    }
}

/// The socket closes when `inner` drops, just after this: the last send stamps are taken
/// while it is still open.
impl<T> Drop for FaultIo<T> {
    fn drop(&mut self) {
        self.ctl.closing();
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FaultIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        if r.is_ok() && buf.filled().len() > before {
            self.ctl.read_done();
        }
        Poll::Ready(r)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FaultIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.ctl.truncate.load(Ordering::Relaxed) {
            let half = (buf.len() / 2).max(1).min(buf.len());
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..half]));
            this.ctl.written(n.unwrap_or(0));
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock fault: chunk truncated",
            )));
        }
        if this.ctl.drip.load(Ordering::Relaxed) && !buf.is_empty() {
            if let Some(p) = this.pause.as_mut() {
                ready!(p.as_mut().poll(cx));
                this.pause = None;
            }
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..1]))?;
            this.ctl.written(n);
            this.pause = Some(Box::pin(tokio::time::sleep(DRIP_PAUSE)));
            return Poll::Ready(Ok(n));
        }
        this.ctl.writing();
        let r = ready!(Pin::new(&mut this.inner).poll_write(cx, buf));
        if let Ok(n @ 1..) = r {
            this.ctl.written(n);
        }
        Poll::Ready(r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Deliberately not vectored: hyper then flattens each chunk into one buffer, so a truncate
    // or drip sees the chunk's bytes in a single write.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_load_fault_fires_in_proportion_to_the_requests_already_in() {
        let rules = ["status=500@0.2".parse::<FaultRule>().unwrap()];
        let share = |in_engine: u64| {
            (0..20_000u64)
                .filter(|&n| pick_loaded(&rules, n, in_engine).is_some())
                .count() as f64
                / 20_000.0
        };
        assert_eq!(share(0), 0.0);
        assert!((share(1) - 0.2).abs() < 0.015, "{}", share(1));
        assert!((share(2) - 0.4).abs() < 0.015, "{}", share(2));
        assert_eq!(share(5), 1.0);
        // Its draws are not the fixed-rate rules' draws.
        let fixed = (0..20_000u64)
            .filter(|&n| pick(&rules, n).is_some() && pick_loaded(&rules, n, 1).is_some())
            .count() as f64
            / 20_000.0;
        assert!((fixed - 0.04).abs() < 0.01, "{fixed}");
    }
    use super::*;

    #[test]
    fn specs_parse() {
        let cases = [
            ("status=503", Fault::Status(503)),
            ("reset-after=5", Fault::ResetAfter(5)),
            ("stall-after=3:250", Fault::StallAfter { after: 3, ms: 250 }),
            ("error-after=0", Fault::ErrorAfter(0)),
            ("malformed-after=2", Fault::MalformedAfter(2)),
            ("truncate-after=4", Fault::TruncateAfter(4)),
            ("drip", Fault::Drip),
        ];
        for (s, f) in cases {
            assert_eq!(s.parse::<Fault>(), Ok(f), "{s}");
        }
        for bad in ["status=200", "reset-after=x", "stall-after=3", "explode"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
        let r: FaultRule = "status=429@0.25".parse().unwrap();
        assert_eq!(r.probability, 0.25);
        assert!("status=429@1.5".parse::<FaultRule>().is_err());
    }

    #[test]
    fn probabilities_pick_about_that_fraction() {
        let rules = ["status=500@0.1".parse().unwrap()];
        let hits = (0..10_000).filter(|&n| pick(&rules, n).is_some()).count();
        assert!((800..1200).contains(&hits), "{hits}");
        let always = ["drip".parse().unwrap()];
        assert!((0..100).all(|n| pick(&always, n) == Some(Fault::Drip)));
    }
}
