//! llmspeed: measures how fast LLM inference servers serve tokens.
//!
//! See `docs/ARCHITECTURE.md` for the map. The layers, bottom up:
//! `proto` (sans-IO parsers) -> `net` (the one read loop) -> `workload` / `matrix` / `compat`
//! (what to send and when) -> `report` (the only serialised types). `mock` is a simulated server
//! that shares none of the client's HTTP code.

pub mod analysis;
pub mod cli;
pub mod clock;
pub mod compat;
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
