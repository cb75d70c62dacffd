//! `llmspeed capacity`: the largest load a server carries while every service-level objective
//! holds, found by a search whose every probe is decided from a confidence interval.
//!
//! The pure core: [`slo`] (the `--slo` syntax), [`interval`] (the exact binomial intervals of a
//! percentile and of a share), [`decide`] (a probe's pass / fail / not yet from its samples) and
//! [`search`] (bracket, then bisect, as a state machine).
//!
//! Architecture invariant: nothing in `capacity`'s core reads a clock, a socket or a file.

pub mod client;
pub mod decide;
pub mod flow;
pub mod grid;
pub mod interval;
pub mod plan;
pub mod results;
pub mod run;
pub mod samples;
pub mod search;
pub mod slo;
