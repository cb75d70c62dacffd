//! TCP/TLS connections, the keep-alive pool, and the one read loop that stamps each read and
//! feeds the `proto` parsers into a [`crate::timeline::Timeline`].
//!
//! What lives here: base-URL parsing ([`Target`]), client configuration ([`ClientConfig`]),
//! connecting and classifying connect/TLS failures (`connect`), the per-target keep-alive pool
//! (`pool`), the read loop's lazily re-armed deadline (`deadline`, pure), the sans-IO
//! [`StreamDecoder`] that turns bytes into timeline entries, request
//! bodies for the OpenAI endpoints and the engines' native ones ([`request`]), and the [`Client`] that ties them together.
//!
//! Architecture invariants:
//! - Only this module reads client sockets, and only `client` holds the read loop. The loop
//!   takes `clock.raw()` the moment a read returns, before any parsing; every event completed
//!   by that read carries that stamp. On a Linux connection the stamp is moved back to
//!   the kernel's receive stamp (`stamp`, `plain`): the same moment in the TSC clock, minus
//!   how late the client woke up. Over TLS the same socket reads feed rustls one whole record
//!   at a time (`tls_conn`): each record's plaintext carries the stamp of the read, or with
//!   packet stamps the segment, that completed it.
//! - Nothing on the per-token path (`StreamDecoder::feed`) allocates, formats, locks or
//!   tokenizes: it appends to pre-sized vectors. The pool's lock is taken once per request.
//!   With `--packet-stamps` one more lock is taken once per read: the client's packet hub,
//!   while the read's connection empties the shared ring (`packet::hub`; its cost per token
//!   is in `benches/read_stamp.rs`).
//! - Every request ends with a classified outcome ([`crate::timeline::ErrorKind`]); nothing
//!   here panics on server data.

mod client;
mod config;
mod connect;
mod deadline;
mod decode;
pub mod fetch;
mod observer;
pub mod packet;
mod plain;
mod pool;
pub mod proxy;
pub mod request;
pub mod stamp;
mod target;
mod tls;
mod tls_conn;
#[doc(hidden)]
pub mod tls_session;

pub use crate::proto::native::Dialect;
pub use client::{Client, Response, StreamRequest};
pub use config::{packet_stamps_wanted, parse_header, ClientConfig, Timeouts};
pub use decode::{Progress, ReadClock, StreamDecoder, EMPTY_BODY};
pub use observer::{Cancel, Flow, NoopObserver, StreamObserver};
pub use target::{Scheme, Target, TargetError};
