//! A proxy's own errors (nginx, an ingress, a gateway in front of the engine): `502 Bad Gateway`
//! (it could not reach the engine, or the engine closed the connection: dead, restarting,
//! refusing) and `504 Gateway Timeout` (the engine did not answer within the proxy's read
//! timeout). They are not the engine's answers, so they get a class of their own
//! ([`ErrorKind::Proxy`]) and a message that says what the proxy saw, with the proxy's own
//! page (nginx writes a small HTML page: `502 Bad Gateway ... nginx/1.22.1`), read as text.
//!
//! Pure: a status and a body in, an error out.

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
