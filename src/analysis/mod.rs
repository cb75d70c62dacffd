//! Pure analysis over measurements: the online repetition (loop) detector, statistics with
//! numpy-compatible percentiles, and the client's lag with the error bounds it puts on every
//! figure. No IO, and no clock read (a given clock converts stamps).

pub mod batching;
pub mod client_lag;
pub mod repetition;
pub mod stats;
