//! TCP/TLS connections, the keep-alive pool, and the one read loop that stamps each read and
//! feeds the `proto` parsers into a [`crate::timeline::Timeline`].
//!
//! Architecture invariant: only this module reads client sockets.
