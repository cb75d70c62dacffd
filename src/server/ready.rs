//! Waiting for a server to come up (`--ready-check-timeout-sec`), as `vllm bench serve` does:
//! a server started beside the benchmark refuses connections, then answers 503 while it loads
//! its model (llama.cpp: "Loading model"), then serves. Both are retried until the deadline;
//! an answer that will not change by waiting (401, 404, ...) ends the wait at once with the
//! server's own message. Every message states the time really waited.

use crate::net::{Client, Response};
use std::time::{Duration, Instant};

/// How often a server that is not ready yet is asked again.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// Why the server is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotReady {
    #[error("the server was not ready after {waited_s:.1} s of waiting (--ready-check-timeout-sec {timeout_s}): {last}")]
    TimedOut {
        waited_s: f64,
        timeout_s: u64,
        /// The last answer or transport error.
        last: String,
    },
    #[error("GET {path} answered {status}: {message}")]
    Refused {
        path: String,
        status: u16,
        message: String,
    },
}

/// What one attempt tells the waiting loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    Ready,
    /// Not yet: connection refused or reset, a timeout, a 5xx (loading), 429.
    Retry(String),
    /// Waiting will not help.
    Fail(u16, String),
}

/// Classify one answer to the readiness request (pure, unit-tested).
pub fn classify(answer: Result<(u16, String), String>) -> Attempt {
    match answer {
        Ok((s, _)) if (200..300).contains(&s) => Attempt::Ready,
        Ok((s, msg)) if s >= 500 || s == 429 || s == 408 => {
            Attempt::Retry(format!("HTTP {s}: {msg}"))
        }
        Ok((s, msg)) => Attempt::Fail(s, msg),
        Err(e) => Attempt::Retry(e),
    }
}

/// How often a wait that goes on says so.
const NOTE_EVERY: Duration = Duration::from_secs(10);

/// What the waiting loop tells the person watching (pure: the loop hands it the time waited):
/// once when it starts waiting, what it waits for and for how long; then a line every
/// [`NOTE_EVERY`]. A server that answers at the first attempt is never mentioned.
#[derive(Debug)]
pub struct WaitNotes {
    url: String,
    timeout_s: u64,
    next: Option<Duration>,
}

impl WaitNotes {
    pub fn new(url: String, timeout_s: u64) -> Self {
        Self {
            url,
            timeout_s,
            next: None,
        }
    }

    /// The line to print after a failed attempt `waited` into the wait, if one is due.
    pub fn after_attempt(&mut self, waited: Duration, last: &str) -> Option<String> {
        let (url, limit) = (&self.url, self.timeout_s);
        match self.next {
            None => {
                self.next = Some(waited + NOTE_EVERY);
                Some(format!(
                    "waiting up to {limit} s for {url} to answer (--ready-check-timeout-sec {limit}); now: {last}"
                ))
            }
            Some(at) if waited >= at => {
                self.next = Some(at + NOTE_EVERY);
                Some(format!(
                    "still waiting for {url}: {:.0} s of {limit} s; now: {last}",
                    waited.as_secs_f64()
                ))
            }
            Some(_) => None,
        }
    }
}

/// `GET path` until it answers 2xx, for at most `timeout_s` seconds (0: one attempt). Returns the
/// successful response. A wait is announced through `say` (see [`WaitNotes`]).
pub async fn wait_ready(
    client: &Client,
    path: &str,
    timeout_s: u64,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<Response, NotReady> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(timeout_s);
    let mut notes = WaitNotes::new(format!("{}{path}", client.config().target), timeout_s);
    loop {
        let r = client.get(path).await;
        let answer = match &r {
            Ok(resp) => Ok((resp.status, resp.error_message())),
            Err(e) => Err(e.to_string()),
        };
        let last = match classify(answer) {
            Attempt::Ready => return Ok(r.expect("classified as a 2xx answer")),
            Attempt::Fail(status, message) => {
                return Err(NotReady::Refused {
                    path: path.to_string(),
                    status,
                    message,
                })
            }
            Attempt::Retry(why) => why,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(NotReady::TimedOut {
                waited_s: now.duration_since(start).as_secs_f64(),
                timeout_s,
                last,
            });
        }
        if let Some(line) = notes.after_attempt(now.duration_since(start), &last) {
            say(&line);
        }
        tokio::time::sleep(RETRY_EVERY.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loading_and_refused_connections_are_retried_client_errors_are_not() {
        assert_eq!(classify(Ok((200, String::new()))), Attempt::Ready);
        assert_eq!(
            classify(Ok((503, "Loading model".into()))),
            Attempt::Retry("HTTP 503: Loading model".into())
        );
        assert!(matches!(
            classify(Err("connection refused".into())),
            Attempt::Retry(_)
        ));
        assert!(matches!(
            classify(Ok((429, String::new()))),
            Attempt::Retry(_)
        ));
        assert_eq!(
            classify(Ok((401, "bad key".into()))),
            Attempt::Fail(401, "bad key".into())
        );
        assert!(matches!(
            classify(Ok((404, String::new()))),
            Attempt::Fail(404, _)
        ));
    }

    #[test]
    fn a_wait_is_announced_once_then_every_ten_seconds() {
        let mut n = WaitNotes::new("http://127.0.0.1:9/v1/models".into(), 60);
        let ms = Duration::from_millis;
        let first = n
            .after_attempt(ms(3), "connection refused")
            .expect("the first note");
        assert_eq!(
            first,
            "waiting up to 60 s for http://127.0.0.1:9/v1/models to answer (--ready-check-timeout-sec 60); now: connection refused"
        );
        let mut lines = vec![];
        // An attempt every 500 ms for 35 s: notes at 10, 20 and 30 s after the first.
        for k in 1..=70 {
            if let Some(l) = n.after_attempt(ms(3 + 500 * k), "HTTP 503: Loading model") {
                lines.push((k, l));
            }
        }
        let at: Vec<u64> = lines.iter().map(|(k, _)| *k).collect();
        assert_eq!(at, [20, 40, 60]);
        assert_eq!(
            lines[0].1,
            "still waiting for http://127.0.0.1:9/v1/models: 10 s of 60 s; now: HTTP 503: Loading model"
        );
    }

    #[test]
    fn the_message_says_the_time_really_waited() {
        let e = NotReady::TimedOut {
            waited_s: 3.04,
            timeout_s: 600,
            last: "connection refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "the server was not ready after 3.0 s of waiting (--ready-check-timeout-sec 600): connection refused"
        );
    }
}
