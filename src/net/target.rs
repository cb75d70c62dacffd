//! `--base-url` parsing: scheme, host, port, and an optional path prefix.

use std::fmt;

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// Where requests go. Built once from `--base-url`; every request path is joined with
/// [`Target::path`] so a base URL that already ends in `/v1` does not double it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    /// Host name or IP literal, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing `/` and without a trailing `/v1` (empty for none).
    pub prefix: String,
    /// The `Host` header value: `host[:port]`, brackets around IPv6, port only when not default.
    pub host_header: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid base URL {url:?}: {reason}")]
pub struct TargetError {
    pub url: String,
    pub reason: &'static str,
}

impl Target {
    /// Parses `http://host[:port][/prefix]` or `https://...`. IPv6 literals go in brackets.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let err = |reason| TargetError {
            url: url.to_string(),
            reason,
        };
        let trimmed = url.trim();
        let (scheme, rest) = if let Some(r) = strip_prefix_ci(trimmed, "http://") {
            (Scheme::Http, r)
        } else if let Some(r) = strip_prefix_ci(trimmed, "https://") {
            (Scheme::Https, r)
        } else {
            return Err(err("it must start with http:// or https://"));
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(err("user info in the URL is not supported; use --api-key"));
        }
        let default_port = match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        };
        let (host, port_str) = if let Some(after) = authority.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| err("unclosed '[' in IPv6 host"))?;
            let host = &after[..end];
            let tail = &after[end + 1..];
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(err("the bracketed host is not an IPv6 address"));
            }
            match tail {
                "" => (host, None),
                t => match t.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => return Err(err("unexpected text after the IPv6 host")),
                },
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => {
                    return Err(err(
                        "IPv6 hosts must be written in brackets, e.g. http://[::1]:8000",
                    ))
                }
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(err("the host is empty"));
        }
        let port = match port_str {
            None => default_port,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(err("the port is not a number from 1 to 65535")),
            },
        };
        let path = path.split(['?', '#']).next().unwrap_or("");
        let mut prefix = path.trim_end_matches('/').to_string();
        if prefix.ends_with("/v1") {
            prefix.truncate(prefix.len() - 3);
        }
        let host_in_header = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let host_header = if port == default_port {
            host_in_header
        } else {
            format!("{host_in_header}:{port}")
        };
        Ok(Self {
            scheme,
            host: host.to_string(),
            port,
            prefix,
            host_header,
        })
    }

    /// The request path for an API path such as `/v1/completions` or `/metrics`.
    pub fn path(&self, api_path: &str) -> String {
        let mut p = String::with_capacity(self.prefix.len() + api_path.len() + 1);
        p.push_str(&self.prefix);
        if !api_path.starts_with('/') {
            p.push('/');
        }
        p.push_str(api_path);
        p
    }

    /// `host:port` as a connect address (brackets around IPv6), also used in error messages.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn is_tls(&self) -> bool {
        self.scheme == Scheme::Https
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        write!(f, "{s}://{}{}", self.host_header, self.prefix)
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    // `get`: a multi-byte character across the prefix's end is a mismatch, not a panic.
    match s.get(..prefix.len()) {
        Some(head) if head.eq_ignore_ascii_case(prefix) => s.get(prefix.len()..),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, scheme: Scheme, host: &str, port: u16, prefix: &str, host_header: &str) {
        let t = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(
            (
                t.scheme,
                t.host.as_str(),
                t.port,
                t.prefix.as_str(),
                t.host_header.as_str()
            ),
            (scheme, host, port, prefix, host_header),
            "{url}"
        );
    }

    #[test]
    fn parses_base_urls() {
        use Scheme::*;
        check(
            "http://localhost:8000",
            Http,
            "localhost",
            8000,
            "",
            "localhost:8000",
        );
        check(
            "http://localhost:8000/",
            Http,
            "localhost",
            8000,
            "",
            "localhost:8000",
        );
        check(
            "http://localhost:8000/v1",
            Http,
            "localhost",
            8000,
            "",
            "localhost:8000",
        );
        check(
            "http://localhost:8000/v1/",
            Http,
            "localhost",
            8000,
            "",
            "localhost:8000",
        );
        check(
            "https://api.example.com",
            Https,
            "api.example.com",
            443,
            "",
            "api.example.com",
        );
        check("HTTPS://h:443/proxy/v1", Https, "h", 443, "/proxy", "h");
        check("http://h/proxy", Http, "h", 80, "/proxy", "h");
        check("http://[::1]:8000/v1", Http, "::1", 8000, "", "[::1]:8000");
        check("http://[::1]", Http, "::1", 80, "", "[::1]");
        check(
            "http://127.0.0.1:9/a?x=1",
            Http,
            "127.0.0.1",
            9,
            "/a",
            "127.0.0.1:9",
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "localhost:8000",
            "ftp://h",
            "http://",
            "http://h:0",
            "http://h:99999",
            "http://h:x",
            "http://::1:8000",
            "http://[::1",
            "http://[nothex]:80",
            "http://user:pw@h",
        ] {
            assert!(Target::parse(url).is_err(), "{url} should be rejected");
        }
    }

    #[test]
    fn joins_paths_without_doubling_v1() {
        let t = Target::parse("http://h:1/v1").unwrap();
        assert_eq!(t.path("/v1/completions"), "/v1/completions");
        assert_eq!(t.path("/metrics"), "/metrics");
        let t = Target::parse("http://h:1/proxy/v1/").unwrap();
        assert_eq!(t.path("/v1/chat/completions"), "/proxy/v1/chat/completions");
        assert_eq!(t.authority(), "h:1");
        assert_eq!(
            Target::parse("http://[::1]:2").unwrap().authority(),
            "[::1]:2"
        );
    }

    #[test]
    fn a_multibyte_character_across_the_scheme_is_an_error() {
        // Byte 7 falls inside "é": slicing there used to panic.
        for url in ["http:/é", "https:/é", "é", "httpsé//x"] {
            let e = Target::parse(url).unwrap_err();
            assert!(e.to_string().contains("http:// or https://"), "{url}: {e}");
        }
    }
}
