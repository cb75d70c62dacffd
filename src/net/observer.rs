//! Live consumers of a stream: the per-event observer hook and the external cancel handle.

use crate::timeline::EventRecord;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What an observer wants after seeing an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End the request now; it finishes with [`crate::timeline::ErrorKind::Cancelled`] and
    /// keeps everything recorded so far.
    Stop,
}

/// Watches a stream live (loop detector, matrix cells). Called once per recorded event, on the
/// per-token path: implementations must not block, and should not allocate.
pub trait StreamObserver {
    /// `text` is the event's output text exactly as it appeared inside the JSON string
    /// (escapes intact; content, else reasoning), when it had any. Unescaping it would cost a
    /// buffer per event; consumers that count characters unescape incrementally instead
    /// (`RepetitionDetector::push_json`).
    fn on_event(&mut self, rec: &EventRecord, text: Option<&[u8]>) -> Flow;
}

/// Watches nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl StreamObserver for NoopObserver {
    #[inline]
    fn on_event(&mut self, _rec: &EventRecord, _text: Option<&[u8]>) -> Flow {
        Flow::Continue
    }
}

impl<F: FnMut(&EventRecord, Option<&[u8]>) -> Flow> StreamObserver for F {
    fn on_event(&mut self, rec: &EventRecord, text: Option<&[u8]>) -> Flow {
        self(rec, text)
    }
}

/// A cheap cloneable handle that cancels the requests it was given to. Cancelling is sticky:
/// a request started with an already-cancelled handle ends at once.
#[derive(Clone, Debug, Default)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Debug, Default)]
struct CancelInner {
    flag: AtomicBool,
    notify: Notify,
    /// Why, when the canceller said (`cancel_because`): a signal's name, written into the
    /// runners' results.
    reason: std::sync::OnceLock<&'static str>,
}

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::Release);
        self.inner.notify.notify_waiters();
    }

    /// [`Cancel::cancel`], recording why (the first reason given is kept).
    pub fn cancel_because(&self, reason: &'static str) {
        let _ = self.inner.reason.set(reason);
        self.cancel();
    }

    /// The reason given to [`Cancel::cancel_because`], if any.
    pub fn reason(&self) -> Option<&'static str> {
        self.inner.reason.get().copied()
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::Acquire)
    }

    /// Resolves once [`Cancel::cancel`] has been called.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            // Check after creating the waiter so a cancel between the two is not missed.
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}
