//! The request log (`llmspeed mock --request-log FILE`): one JSON line per HTTP request the
//! server answered, as it arrived, so that a test can compare what two clients sent. The
//! handler hands a record to a channel once per request (never per token); a dedicated thread
//! checks the body (as a reader of the log will parse it), formats and writes, as
//! [`super::trace`] does.
//!
//! Line shape: `{"arrival_ns":80,"method":"POST","path":"/v1/completions","request_id":"…",
//! "status":200,"body":{…}}`. `arrival_ns` is when the request was complete (its last read
//! returned), in ns since the server started: the base of the trace's `arrival_ns`, equal to
//! it when both are on. `request_id` is the `x-request-id` header, `null` without one.
//! `status` is the answer's status code (a refused request is logged too). A request that
//! carried SGLang's `X-SMG-Routing-Key` header has its value as `routing_key`, before `body`.
//! `body` is the body as received when it is JSON (its keys in the order sent, whitespace
//! aside), `null` when it is empty; a body that is not JSON is `null` there and written as text
//! in `body_text` (invalid UTF-8 replaced). Lines are in the order the answers' heads were ready, which is not
//! always the order of arrival.

use bytes::Bytes;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct RequestRec {
    pub arrival_ns: u64,
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub request_id: Option<String>,
    /// The `X-SMG-Routing-Key` header (SGLang's `--gsp-send-routing-key`), if sent.
    pub routing_key: Option<String>,
    pub status: u16,
    pub body: Bytes,
}

/// Sending half; cheap to clone. The writer thread ends when every clone is dropped.
#[derive(Clone, Debug)]
pub struct RequestLog {
    tx: mpsc::Sender<RequestRec>,
}

impl RequestLog {
    /// Create the file and start the writer thread.
    pub fn create(path: &Path) -> io::Result<(RequestLog, JoinHandle<io::Result<()>>)> {
        let file = std::fs::File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create request log {}: {e}", path.display()),
            )
        })?;
        let (tx, rx) = mpsc::channel::<RequestRec>();
        let handle = std::thread::Builder::new()
            .name("mock-reqlog".into())
            .spawn(move || {
                let mut w = BufWriter::with_capacity(1 << 16, file);
                for r in rx {
                    w.write_all(line(&r).as_bytes())?;
                    w.write_all(b"\n")?;
                }
                w.flush()
            })?;
        Ok((RequestLog { tx }, handle))
    }

    pub fn record(&self, r: RequestRec) {
        // The writer only goes away at shutdown; losing the tail then is acceptable.
        let _ = self.tx.send(r);
    }
}

/// One record as its line (no newline). Pure.
pub fn line(r: &RequestRec) -> String {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into());
    let mut out = format!(
        "{{\"arrival_ns\":{},\"method\":{},\"path\":{},\"request_id\":{},\"status\":{},",
        r.arrival_ns,
        text(&r.method),
        text(&r.path),
        r.request_id.as_deref().map_or("null".into(), text),
        r.status,
    );
    if let Some(k) = &r.routing_key {
        out.push_str("\"routing_key\":");
        out.push_str(&text(k));
        out.push(',');
    }
    out.push_str("\"body\":");
    if r.body.iter().all(u8::is_ascii_whitespace) {
        out.push_str("null");
    } else if serde_json::from_slice::<serde_json::Value>(&r.body).is_ok() {
        // Valid JSON has raw line breaks only between tokens, where any whitespace will do:
        // the body stays on one line, every key and value as sent.
        let body = String::from_utf8_lossy(&r.body);
        out.push_str(&body.trim().replace(['\n', '\r'], " "));
    } else {
        out.push_str("null,\"body_text\":");
        out.push_str(&text(&String::from_utf8_lossy(&r.body)));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn rec(body: &[u8], request_id: Option<&str>) -> RequestRec {
        RequestRec {
            arrival_ns: 42,
            method: "POST".into(),
            path: "/v1/completions".into(),
            request_id: request_id.map(str::to_owned),
            routing_key: None,
            status: 200,
            body: Bytes::copy_from_slice(body),
        }
    }

    fn parsed(r: &RequestRec) -> Value {
        serde_json::from_str(&line(r)).unwrap()
    }

    #[test]
    fn a_json_body_is_kept_as_sent_on_one_line() {
        let body = b"{\"model\": \"m\",\n  \"prompt\": \"a\\nb\",\r\n \"max_tokens\": 3}\n";
        let l = line(&rec(body, Some("id-1")));
        assert!(!l.contains('\n'), "{l}");
        // The keys in the order sent.
        assert!(
            l.ends_with(
                "\"body\":{\"model\": \"m\",   \"prompt\": \"a\\nb\",   \"max_tokens\": 3}}"
            ),
            "{l}"
        );
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(
            v,
            json!({"arrival_ns": 42, "method": "POST", "path": "/v1/completions",
                "request_id": "id-1", "status": 200,
                "body": {"model": "m", "prompt": "a\nb", "max_tokens": 3}})
        );
    }

    #[test]
    fn an_empty_or_unparsable_body_is_null_with_its_text_beside() {
        let empty = parsed(&rec(b"", None));
        assert_eq!(
            (&empty["body"], &empty["request_id"], empty.get("body_text")),
            (&Value::Null, &Value::Null, None)
        );
        let bad = parsed(&rec(b"{\"prompt\": \"x\"", None));
        assert_eq!(
            (&bad["body"], &bad["body_text"]),
            (&Value::Null, &json!("{\"prompt\": \"x\""))
        );
        let bytes = parsed(&rec(&[0xff, b'a'], Some("q\"uote")));
        assert_eq!(
            (&bytes["body_text"], &bytes["request_id"]),
            (&json!("\u{fffd}a"), &json!("q\"uote"))
        );
        // Well-formed, but no JSON reader takes it: text, so the line stays readable.
        let huge = parsed(&rec(b"{\"temperature\": 1e400}", None));
        assert_eq!(huge["body_text"], json!("{\"temperature\": 1e400}"));
    }
}
