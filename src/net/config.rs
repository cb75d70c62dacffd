//! Client configuration: one struct instead of bool parameters.

use super::target::Target;
use std::path::PathBuf;
use std::time::Duration;

/// Per-request time limits. `None` means no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect plus TLS handshake.
    pub connect: Option<Duration>,
    /// From the end of the request write to the first SSE event (or the whole response head and
    /// body for non-streaming calls). Long by default: a 256K-token prefill takes minutes.
    pub first_byte: Option<Duration>,
    /// Longest allowed silence between two SSE events once the first has arrived.
    pub gap: Option<Duration>,
    /// Whole request, from the first write.
    pub total: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Some(Duration::from_secs(10)),
            first_byte: Some(Duration::from_secs(600)),
            gap: Some(Duration::from_secs(120)),
            total: None,
        }
    }
}

/// Everything a [`super::Client`] needs to know about the server and how to talk to it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub target: Target,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Extra headers (`--header 'K: V'`), sent on every request.
    pub headers: Vec<(String, String)>,
    /// Accept any server certificate (the handshake still happens).
    pub insecure: bool,
    /// Trust the operating system's roots instead of the bundled webpki roots.
    pub system_roots: bool,
    /// An extra PEM file of CA certificates to trust (for self-signed servers).
    pub ca_file: Option<PathBuf>,
    pub timeouts: Timeouts,
    /// Largest SSE event accepted (logprobs and echoed prompts make big events).
    pub max_event_bytes: usize,
    /// Keep the output text in the timeline by default.
    pub keep_text: bool,
    /// Most idle keep-alive connections kept for reuse.
    pub max_idle: usize,
    /// Stamp reads with the kernel's receive time where it can (plain TCP on Linux), so a
    /// client that wakes up late does not shift its stamps; `false` keeps the client's own
    /// clock for every read (`--no-kernel-stamps`).
    pub kernel_stamps: bool,
    /// Stamp each event with the arrival of the TCP segment that carried it, from a packet
    /// ring of the client (Linux, plain HTTP, `CAP_NET_RAW`; see `net::packet`). The client
    /// says once which stamps it uses: these, or why not and how to have them. Off in a new
    /// config (a library user asks); the commands turn it on by default
    /// ([`packet_stamps_wanted`]).
    pub packet_stamps: bool,
}

impl ClientConfig {
    pub fn new(target: Target) -> Self {
        Self {
            target,
            api_key: None,
            headers: Vec::new(),
            insecure: false,
            system_roots: false,
            ca_file: None,
            timeouts: Timeouts::default(),
            max_event_bytes: 4 << 20,
            keep_text: false,
            max_idle: 256,
            kernel_stamps: true,
            packet_stamps: false,
        }
    }
}

/// Whether a command's client asks for packet stamps: by default, wherever a packet socket
/// opens (root, or `CAP_NET_RAW`; where it does not, the client says why and keeps socket
/// stamps), but not with `--no-packet-stamps`, nor with `--no-kernel-stamps` (the client's
/// own clock, asked for) unless `--packet-stamps` asks for them too.
pub fn packet_stamps_wanted(
    packet_stamps: bool,
    no_packet_stamps: bool,
    no_kernel_stamps: bool,
) -> bool {
    !no_packet_stamps && (packet_stamps || !no_kernel_stamps)
}

/// Parses `--header 'Name: value'`, refusing anything that would corrupt the request.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("header {s:?} must look like 'Name: value'"))?;
    let (k, v) = (k.trim(), v.trim());
    crate::proto::http1::validate_header(k, v).map_err(|e| e.to_string())?;
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_stamps_are_the_default_unless_a_flag_says_otherwise() {
        // (--packet-stamps, --no-packet-stamps, --no-kernel-stamps) -> asked for.
        assert!(packet_stamps_wanted(false, false, false), "the default");
        assert!(
            packet_stamps_wanted(true, false, false),
            "the old flag still works"
        );
        assert!(
            !packet_stamps_wanted(false, true, false),
            "--no-packet-stamps"
        );
        assert!(
            !packet_stamps_wanted(false, false, true),
            "the client's own clock asked for"
        );
        assert!(packet_stamps_wanted(true, false, true), "both asked for");
    }

    #[test]
    fn header_parsing() {
        assert_eq!(
            parse_header("X-A: b c").unwrap(),
            ("X-A".into(), "b c".into())
        );
        assert_eq!(parse_header("X-A:b").unwrap(), ("X-A".into(), "b".into()));
        assert!(parse_header("no colon").is_err());
        assert!(parse_header(": v").is_err());
        assert!(parse_header("a b: v").is_err());
        assert!(parse_header("X-A: b\r\nInjected: yes").is_err());
    }
}
