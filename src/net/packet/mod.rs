//! Packet stamps (`--packet-stamps`, Linux, plain HTTP): each event stamped with the arrival
//! of the TCP segment that carried it, even when the client read several segments at once.
//!
//! Why: a TCP socket's receive queue merges the segments waiting in it and keeps one stamp,
//! the newest, so a client that falls behind gets one stamp for every token of a merged read,
//! kernel stamps or not. A packet socket sees each segment before the receive queue.
//!
//! How: a client opens one `AF_PACKET` socket whose BPF filter (`bpf`) keeps only the server's
//! segments, as they come in, headers only, in a `TPACKET_V2` ring mapped into our memory
//! (`ring`, the only IO here). Each connection takes its place at that ring by its port before
//! its handshake (`hub`, `tap`). After each read the connection empties the ring into the
//! connections' inboxes (`frame`, memory reads, no system call), places its own segments in its
//! stream by their sequence numbers (`seqmap`; the `SYN-ACK` gives the initial one), and the
//! decoder stamps each event with the arrival of the segment that brought the last byte taken
//! before it (`stamper`, a [`crate::net::decode::ReadClock`]). Stamps are `CLOCK_REALTIME` and
//! become TSC stamps as kernel receive stamps do (`net::stamp`).
//!
//! Needs `CAP_NET_RAW`; without it, or on TLS, or off Linux, a client says so once and keeps
//! socket stamps ([`open_hub`]).

pub mod bpf;
pub mod frame;
pub mod hub;
#[cfg(target_os = "linux")]
mod ring;
pub mod seqmap;
pub mod stamper;
pub mod tap;

/// Why packet stamps cannot be used by a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Not Linux.
    Unsupported,
    /// A packet socket would not open (usually `CAP_NET_RAW` missing); the system's words.
    Refused(String),
}

impl Unavailable {
    /// The one line a client prints when packet stamps were asked for (the commands' default)
    /// and cannot be had: which stamps it uses instead, why, and how to have them.
    pub fn note(&self) -> String {
        match self {
            Unavailable::Unsupported => "llmspeed: stamps: socket stamps, not packet stamps: those need Linux (AF_PACKET) (--no-packet-stamps silences this)".to_string(),
            Unavailable::Refused(why) => format!("llmspeed: stamps: socket receive stamps, not packet stamps: a packet socket would not open ({why}); they need CAP_NET_RAW: run as root, or `sudo setcap cap_net_raw+ep \"$(command -v llmspeed)\"` once (--no-packet-stamps silences this)"),
        }
    }
}

/// The one line a client prints when it has packet stamps.
pub const IN_USE: &str = "llmspeed: stamps: packet (each token's TCP segment's arrival, from a packet ring; --no-packet-stamps for socket receive stamps)";

/// The packet hub of a client of a plain or TLS (`tls`) target whose server listens on port
/// `remote`, or why it cannot have one. Over TLS the ciphertext is read as it came, so each
/// record's last byte has its segment (`net::tls_conn`), as a plain stream's bytes do.
pub fn open_hub(tls: bool, remote: u16) -> Result<std::sync::Arc<hub::PacketHub>, Unavailable> {
    let _ = tls;
    #[cfg(target_os = "linux")]
    {
        hub::PacketHub::open(remote)
            .map(std::sync::Arc::new)
            .map_err(|e| Unavailable::Refused(e.to_string()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = remote;
        Err(Unavailable::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_is_one_line() {
        for why in [
            Unavailable::Unsupported,
            Unavailable::Refused("Operation not permitted (os error 1)".into()),
        ] {
            let note = why.note();
            // Which stamps are used instead, and how to be rid of the line.
            assert!(note.starts_with("llmspeed: stamps: "), "{note}");
            assert!(note.contains("not packet stamps"), "{note}");
            assert!(
                note.ends_with("(--no-packet-stamps silences this)"),
                "{note}"
            );
            assert!(!note.contains('\n'), "{note}");
        }
        // How to have them.
        let refused = Unavailable::Refused("EPERM".into()).note();
        assert!(refused.contains("CAP_NET_RAW"), "{refused}");
        assert!(refused.contains("setcap cap_net_raw+ep"), "{refused}");
    }
}
