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

/// `GET path` until it answers 2xx, for at most `timeout_s` seconds (0: one attempt). Returns the
/// successful response.
pub async fn wait_ready(client: &Client, path: &str, timeout_s: u64) -> Result<Response, NotReady> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(timeout_s);
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
