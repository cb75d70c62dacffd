//! A proxy's own errors (nginx, an ingress, a gateway in front of the engine): `502 Bad Gateway`
//! (it could not reach the engine, or the engine closed the connection: dead, restarting,
//! refusing) and `504 Gateway Timeout` (the engine did not answer within the proxy's read
//! timeout). They are not the engine's answers, so they get a class of their own
//! ([`ErrorKind::Proxy`]) and a message that says what the proxy saw, with the proxy's own
//! page (nginx writes a small HTML page: `502 Bad Gateway ... nginx/1.22.1`), read as text.
//!
//! The same class for a stream a proxy cut: once the proxy has passed on the engine's `200`
//! and head it cannot answer 502 any more, so when its connection to the engine ends
//! mid-response (nginx logs `upstream prematurely closed connection while reading upstream`,
//! or `recv() failed (104: Connection reset by peer) while reading upstream`) it closes the
//! client's connection without the chunked body's last chunk. A response relayed by a proxy
//! is known by its head ([`relayed_by`]: nginx replaces the engine's `Server` field with its
//! own; other proxies add `Via` or their own fields).
//!
//! Pure: a status and a body, or a head, in; an error out.

use crate::proto::http1::ResponseHead;
use crate::timeline::{ErrorKind, RequestError};

/// The most of a proxy's page kept in the message, in characters.
const MAX_PAGE_CHARS: usize = 200;

/// The error for a response with `status` and `body` when it is a proxy's own (502, 504),
/// else `None` (the engine's answer, classified as an HTTP status).
pub(crate) fn proxy_error(status: u16, body: &[u8]) -> Option<RequestError> {
    let what = match status {
        502 => "could not reach the engine or lost its connection (the engine died, is restarting or refused the connection); check the engine behind the proxy and the proxy's upstream address",
        504 => "waited longer than its read timeout for the engine's answer (nginx: proxy_read_timeout, 60 s by default); the engine is stalled or overloaded, or the proxy's timeout is shorter than the engine's time to first token or between tokens",
        _ => return None,
    };
    let page = page_text(body);
    let page = if page.is_empty() {
        "an empty page".to_string()
    } else {
        format!("its page: \"{page}\"")
    };
    Some(RequestError {
        kind: ErrorKind::Proxy,
        status: Some(status),
        message: format!("the proxy in front of the engine answered {status} ({page}): it {what}"),
    })
}

/// `Server` products of proxies, load balancers and gateways (lowercase, the name before `/`).
const PROXY_SERVERS: &[&str] = &[
    "nginx",
    "openresty",
    "tengine",
    "envoy",
    "istio-envoy",
    "haproxy",
    "traefik",
    "caddy",
    "apache",
    "cloudflare",
    "kong",
    "awselb",
];

/// The proxy that relayed a response, as its head names it: a `Server` field naming a proxy
/// (`nginx/1.22.1`: the engine's own, `uvicorn` or `llama.cpp`, is replaced by nginx's), a
/// `Via` field (RFC 9110's mark of an intermediary), or envoy's `x-envoy-*` fields. `None`
/// for an engine's own answer. Once per response, never per token.
pub(crate) fn relayed_by(head: &ResponseHead) -> Option<String> {
    if let Some(server) = head.header("server") {
        let product = server.split(['/', ' ']).next().unwrap_or("");
        if PROXY_SERVERS
            .iter()
            .any(|p| product.eq_ignore_ascii_case(p))
        {
            return Some(one_line(server));
        }
    }
    if let Some(via) = head.header("via") {
        return Some(format!("via {}", one_line(via)));
    }
    head.headers
        .iter()
        .any(|(n, _)| {
            n.get(..8)
                .is_some_and(|p| p.eq_ignore_ascii_case("x-envoy-"))
        })
        .then(|| "envoy".to_string())
}

/// A header value as one short line for a message.
fn one_line(v: &str) -> String {
    let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
    match v.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &v[..cut]),
        None => v,
    }
}

/// The error for a 2xx stream relayed by `proxy` that ended after `events` events without its
/// end: `how` says what the client saw (the connection closed mid-body, or failed).
pub(crate) fn cut_error(proxy: &str, events: usize, how: &str) -> RequestError {
    RequestError::new(
        ErrorKind::Proxy,
        format!(
            "the proxy in front of the engine ({proxy}) cut the stream after {events} events, {how}: its connection to the engine ended mid-response, so the engine died, restarted or closed it (nginx logs \"upstream prematurely closed connection\" or \"Connection reset by peer ... while reading upstream\"); check the engine behind the proxy and the proxy's error log"
        ),
    )
}

/// A proxy's page as one line of text: HTML tags dropped, whitespace collapsed, a word
/// repeated right after itself (nginx prints the status twice: title and heading) kept once,
/// cut to [`MAX_PAGE_CHARS`].
pub fn page_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut plain = String::with_capacity(text.len().min(4 * MAX_PAGE_CHARS));
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => {
                in_tag = true;
                plain.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            c => plain.push(c),
        }
        if plain.len() > 8 * MAX_PAGE_CHARS {
            break;
        }
    }
    let mut out = String::new();
    let mut last_phrase = String::new();
    // Phrases are runs of words between tags; nginx's page is "<title>502 Bad Gateway</title>
    // ... <h1>502 Bad Gateway</h1>": keep a phrase once when it repeats.
    for phrase in text_phrases(&plain) {
        if phrase == last_phrase {
            continue;
        }
        if !out.is_empty() {
            out.push_str(" / ");
        }
        out.push_str(&phrase);
        last_phrase = phrase;
    }
    match out.char_indices().nth(MAX_PAGE_CHARS) {
        Some((cut, _)) => {
            out.truncate(cut);
            out.push_str("...");
            out
        }
        None => out,
    }
}

/// The phrases of text with tags replaced by spaces: split where two or more spaces or a line
/// break separate words (what a tag left), each phrase's whitespace collapsed.
fn text_phrases(plain: &str) -> impl Iterator<Item = String> + '_ {
    plain
        .split("  ")
        .flat_map(|p| p.split(['\n', '\r']))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx 1.22's 502 page, byte for byte as it sends it (Debian's package).
    const NGINX_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";

    #[test]
    fn nginx_pages_read_as_one_line_with_the_status_once() {
        assert_eq!(
            page_text(NGINX_502.as_bytes()),
            "502 Bad Gateway / nginx/1.22.1"
        );
        let e = proxy_error(502, NGINX_502.as_bytes()).unwrap();
        assert_eq!(e.kind, ErrorKind::Proxy);
        assert_eq!(e.status, Some(502));
        assert!(
            e.message.contains("\"502 Bad Gateway / nginx/1.22.1\""),
            "{}",
            e.message
        );
        assert!(e.message.contains("the engine died"), "{}", e.message);
        let e = proxy_error(
            504,
            b"<html><body><h1>504 Gateway Time-out</h1></body></html>",
        )
        .unwrap();
        assert!(e.message.contains("proxy_read_timeout"), "{}", e.message);
        assert!(e.message.contains("504 Gateway Time-out"), "{}", e.message);
    }

    fn head(fields: &[(&str, &str)]) -> ResponseHead {
        ResponseHead {
            status: 200,
            reason: "OK".into(),
            body: crate::proto::http1::BodyKind::Chunked,
            keep_alive: true,
            content_type: None,
            headers: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_relayed_response_is_known_by_its_head_and_an_engines_own_is_not() {
        let by = |f: &[(&str, &str)]| relayed_by(&head(f));
        // nginx 1.22 in front of vLLM: nginx's own Server field (the engine's is dropped).
        assert_eq!(
            by(&[
                ("Server", "nginx/1.22.1"),
                ("Content-Type", "text/event-stream")
            ]),
            Some("nginx/1.22.1".into())
        );
        assert_eq!(by(&[("server", "envoy")]), Some("envoy".into()));
        assert_eq!(
            by(&[("server", "Apache/2.4.62 (Debian)")]),
            Some("Apache/2.4.62 (Debian)".into())
        );
        assert_eq!(
            by(&[("Via", "1.1 varnish")]),
            Some("via 1.1 varnish".into())
        );
        assert_eq!(
            by(&[("x-envoy-upstream-service-time", "3")]),
            Some("envoy".into())
        );
        // The engines' own answers.
        for server in ["uvicorn", "llama.cpp", "hypercorn-h11", "nginxish"] {
            assert_eq!(by(&[("server", server)]), None, "{server}");
        }
        assert_eq!(by(&[]), None);
        // Names and values as servers may send them (non-ASCII replaced, never a panic).
        assert_eq!(by(&[("x-envoé-a", "1"), ("server", "ünïcode/1")]), None);
        let e = cut_error("nginx/1.22.1", 5, "connection closed mid-body");
        assert_eq!(e.kind, ErrorKind::Proxy);
        assert!(
            e.message
                .starts_with("the proxy in front of the engine (nginx/1.22.1) cut the stream after 5 events, connection closed mid-body: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn other_statuses_and_odd_pages() {
        assert!(proxy_error(500, b"").is_none());
        assert!(proxy_error(503, b"Loading model").is_none());
        assert!(proxy_error(502, b"")
            .unwrap()
            .message
            .contains("an empty page"));
        // Plain text, an unclosed tag, and a long page.
        assert_eq!(
            page_text(b"upstream connect error"),
            "upstream connect error"
        );
        assert_eq!(page_text(b"bad <b"), "bad");
        let long = "x ".repeat(10_000);
        assert!(page_text(long.as_bytes()).chars().count() <= MAX_PAGE_CHARS + 3);
    }
}
