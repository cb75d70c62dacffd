//! Pure analysis over measurements: the online repetition (loop) detector and statistics with
//! numpy-compatible percentiles. No IO, no clock.

pub mod repetition;
pub mod stats;
