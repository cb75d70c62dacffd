//! Whether the client, not the server, decided a probe: the client's own lag
//! (`analysis::client_lag`) held against the SLO's thresholds. Pure.
//!
//! The run-wide Client-bound verdict of `bench serve` and the matrix compares the client's lag
//! with the figures it printed (10% of a TTFT p50 of 0.4 ms is 40 µs, which a busy machine's
//! dispatch exceeds). A capacity probe prints a decision, not a figure: the client is the limit
//! when its lag could move a measured latency across a threshold, so each objective's
//! threshold is the yardstick. A probe is Client-bound when, for some latency objective with
//! threshold T, the client's share of it exceeds [`SHARE`] of T:
//! - TTFT and E2E: the dispatch lag's p99 (intended start -> request written, counted in both),
//!   or the TTFT p99's bound (how far the reads' stamps may be from the tokens' arrival);
//! - ITL and TPOT: the gap p99's bound.

use crate::analysis::client_lag::ClientLag;
use crate::capacity::slo::{Metric, Objective, Slo};

/// The share of a threshold the client's lag may take before it could decide the probe.
pub const SHARE: f64 = 0.10;

/// The three figures of the client's lag the rule reads, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lag {
    pub dispatch_p99: Option<f64>,
    pub ttft_p99_bound: Option<f64>,
    pub gap_p99_bound: Option<f64>,
}

impl Lag {
    pub fn of(lag: &ClientLag) -> Lag {
        Lag {
            dispatch_p99: lag.dispatch_lag_ms.map(|d| d.p99),
            ttft_p99_bound: lag.ttft_ms_p99.map(|b| b.bound),
            gap_p99_bound: lag.itl_ms_p99.map(|b| b.bound),
        }
    }
}

/// Why the client could have decided the probe (empty: it could not).
pub fn bound_reasons(lag: &Lag, slo: &Slo) -> Vec<String> {
    let mut why = Vec::new();
    for o in &slo.objectives {
        let Objective::Latency { metric, max_ms, .. } = *o else {
            continue;
        };
        let limit = SHARE * max_ms;
        let mut over = |what: &str, v: f64| {
            if v > limit {
                why.push(format!(
                    "{what} {v:.3} ms is over {:.0}% of {}'s {} ms",
                    SHARE * 100.0,
                    o.key(),
                    max_ms
                ));
            }
        };
        match metric {
            Metric::Ttft | Metric::E2e => {
                if let Some(d) = lag.dispatch_p99 {
                    over("the dispatch lag p99", d);
                }
                if let Some(b) = lag.ttft_p99_bound {
                    over("the TTFT p99's stamp bound", b);
                }
            }
            Metric::Itl | Metric::Tpot => {
                if let Some(b) = lag.gap_p99_bound {
                    over("the gap p99's stamp bound", b);
                }
            }
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_is_held_to_each_threshold() {
        let slo = Slo::parse(&["ttft_p99=100ms", "itl_p99=20ms", "errors=1%"]).unwrap();
        let mut lag = Lag {
            dispatch_p99: Some(9.9),
            ttft_p99_bound: Some(0.05),
            gap_p99_bound: Some(1.9),
        };
        // 9.9 ms of 100 and 1.9 ms of 20: under 10% each, however small the TTFT itself was.
        assert!(bound_reasons(&lag, &slo).is_empty());
        lag.dispatch_p99 = Some(10.5);
        lag.gap_p99_bound = Some(2.5);
        let why = bound_reasons(&lag, &slo);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("dispatch lag p99 10.500 ms") && why[0].contains("ttft_p99"));
        assert!(why[1].contains("gap p99's stamp bound 2.500 ms") && why[1].contains("itl_p99"));
        // No latency objective: nothing for the client's lag to decide.
        assert!(bound_reasons(&lag, &Slo::parse(&["errors=1%"]).unwrap()).is_empty());
    }
}
