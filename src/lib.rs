//! llmspeed: measures how fast LLM inference servers serve tokens.
//!
//! See `docs/ARCHITECTURE.md` for the map. The layers, bottom up:
//! `proto` (sans-IO parsers) -> `net` (the one read loop) -> `workload` / `matrix` / `bench`
//! (what to send and when) -> `report` (the only serialised types). `mock` is a simulated server
//! that shares none of the client's HTTP code.

pub mod analysis;
pub mod bench;
pub mod capacity;
pub mod cli;
pub mod clock;
pub mod matrix;
pub mod mock;
pub mod net;
pub mod progress;
pub mod proto;
pub mod report;
pub mod selftest;
pub mod server;
pub mod sys;
pub mod timeline;
pub mod workload;

/// What `llmspeed --version` prints after the name, and what every result file records as the
/// tool's version: the package version, the git commit the binary was built from ("release" for
/// a build from a package) and the target triple, e.g. `0.1.0 (3e0944a1b2c3 x86_64-unknown-linux-gnu)`.
/// Made by `build.rs`.
pub const VERSION: &str = env!("LLMSPEED_VERSION");
