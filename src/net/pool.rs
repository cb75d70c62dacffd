//! The keep-alive pool of one target: a bounded stack of idle connections.
//!
//! The lock is taken once when a request starts and once when it ends, never per token.
//! Connections come back only after a complete, keep-alive response; the caller decides that.

use super::connect::Conn;
use std::sync::Mutex;

pub(crate) struct Pool {
    idle: Mutex<Vec<Conn>>,
    max_idle: usize,
}

impl Pool {
    pub(crate) fn new(max_idle: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    /// The most recently returned idle connection (the one least likely to have been closed).
    pub(crate) fn take(&self) -> Option<Conn> {
        self.idle.lock().ok()?.pop()
    }

    pub(crate) fn put(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push(conn);
            }
        }
    }

    pub(crate) fn idle_count(&self) -> usize {
        self.idle.lock().map(|v| v.len()).unwrap_or(0)
    }
}
