//! The client's lag of one measurement as results carry it: every figure of
//! [`analysis::client_lag::ClientLag`](crate::analysis::client_lag::ClientLag), the bound on
//! each printed figure and the Client-bound verdict with its reasons, in one plain shape. A
//! matrix cell writes it as `client_lag` in `results.json` (docs/results.schema.json); the keys
//! are those of `bench serve`'s and `bench sglang`'s `llmspeed.client_lag`. It holds what
//! `analysis::client_lag` computed and decides nothing.

use crate::analysis::client_lag::{Bounded, ClientLag, GapKind, Spread};
use serde::{Deserialize, Serialize};

/// p50, p99 and max of a lag.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LagSpread {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl From<Spread> for LagSpread {
    fn from(s: Spread) -> Self {
        LagSpread {
            p50: s.p50,
            p99: s.p99,
            max: s.max,
        }
    }
}

/// A figure (ms) and the bound on its error (ms): the truth lies within `value ± bound`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoundedMs {
    pub value: f64,
    pub bound: f64,
}

impl From<Bounded> for BoundedMs {
    fn from(b: Bounded) -> Self {
        BoundedMs {
            value: b.value,
            bound: b.bound,
        }
    }
}

/// The bound on each figure built on the stamps (`null` where there is no bound: no gap, or
/// the client's own stamps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FigureBounds {
    pub itl_p50: Option<BoundedMs>,
    pub itl_p99: Option<BoundedMs>,
    pub itl_mean: Option<BoundedMs>,
    pub ttft_p50: Option<BoundedMs>,
    pub ttft_p99: Option<BoundedMs>,
    pub tpot_p50: Option<BoundedMs>,
    pub tpot_p99: Option<BoundedMs>,
}

/// Every figure of the client's lag over one measurement, and the verdict (docs/methodology.md
/// §9). ms unless the name says otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientLagFigures {
    /// Whether the client's lag made the figures untrustworthy at the precision printed; the
    /// reasons, one phrase each (empty when not).
    pub client_bound: bool,
    pub client_bound_reasons: Vec<String>,
    /// Reads that completed token events; how late the client woke up to them (µs, `null`
    /// without a kernel stamp); tokens per read.
    pub reads: u64,
    pub read_lag_us: Option<LagSpread>,
    pub tokens_per_read_mean: Option<f64>,
    pub tokens_per_read_max: Option<f64>,
    pub reads_with_several_tokens_percent: Option<f64>,
    /// Reads that filled the read buffer (data may have been left waiting), and the bytes the
    /// socket held when each read took its data (the kernel's count) (p50, p99, max; `null` where the kernel did not count them: client
    /// stamps, TLS, not Linux, and files written before they were recorded).
    #[serde(default)]
    pub reads_left_data_percent: Option<f64>,
    #[serde(default)]
    pub socket_bytes_at_read: Option<LagSpread>,
    /// Intended start → request written, and its three parts' p99.
    pub dispatch_lag_ms: Option<LagSpread>,
    pub dispatch_late_ms_p99: Option<f64>,
    pub dispatch_connect_ms_p99: Option<f64>,
    pub dispatch_write_ms_p99: Option<f64>,
    /// Gaps between consecutive token events, and the share of each kind: both ends read
    /// apart (known to the stamp's resolution), an end read together with other data (known
    /// to that read's spread), an end on the client's own clock (no bound).
    pub gaps: u64,
    pub gaps_apart_percent: Option<f64>,
    pub gaps_merged_percent: Option<f64>,
    pub gaps_unbounded_percent: Option<f64>,
    pub bounds_ms: FigureBounds,
    /// Output throughput's bound, percent of it (tokens whose arrival may lie across an edge of
    /// the window).
    pub throughput_bound_percent: Option<f64>,
    /// The client's CPU over the measurement: share of the cores it may run on, and how many.
    pub client_cpu_percent_of_cores: Option<f64>,
    pub cores: Option<u64>,
    /// Which clock stamped the reads these figures come from: `kernel` (receive stamps),
    /// `packet` (each segment's arrival, `--packet-stamps`), `client_clock (REASON)` or
    /// `mixed (REASON)` (`timeline::StampSource::label`); `null` without a read (and in files
    /// written before it was recorded).
    #[serde(default)]
    pub stamp_source: Option<String>,
    /// Why some or all figures have no bound, so the stamp half of the verdict could not judge
    /// them (`analysis::client_lag::no_bound_reason`: TLS, stamps disabled, not Linux, ...);
    /// `null` when every figure has its bound (and in files written before it was recorded).
    #[serde(default)]
    pub no_bound_reason: Option<String>,
    /// Whether the tokens were batched upstream (a buffering proxy, a gateway, the engine's
    /// output coalescing: `analysis::batching::verdict`), the reason with its evidence, what
    /// batched them (`engine_writes`: several tokens to an event; `held_between`: one-token
    /// events several to a segment), and the evidence as figures: the share of tokens that
    /// came batched, the share that came in events of several tokens, tokens per batch and
    /// the time between one request's batches (p50). `false`/`null` in files written before.
    #[serde(default)]
    pub upstream_batched: bool,
    #[serde(default)]
    pub upstream_batching_reason: Option<String>,
    #[serde(default)]
    pub upstream_batching_cause: Option<String>,
    #[serde(default)]
    pub tokens_batched_percent: Option<f64>,
    #[serde(default)]
    pub tokens_in_multi_token_events_percent: Option<f64>,
    #[serde(default)]
    pub batch_tokens_p50: Option<f64>,
    #[serde(default)]
    pub batch_period_ms_p50: Option<f64>,
}

impl ClientLagFigures {
    /// `lag` with the verdict's `reasons` (`analysis::client_lag::verdict` or
    /// `stamp_reasons`, as the measurement prints its figures).
    pub fn new(lag: &ClientLag, reasons: Vec<String>) -> Self {
        let b = |v: Option<Bounded>| v.map(BoundedMs::from);
        let batched = crate::analysis::batching::verdict(&lag.batching);
        ClientLagFigures {
            client_bound: !reasons.is_empty(),
            client_bound_reasons: reasons,
            reads: lag.reads,
            read_lag_us: lag.read_lag_us.map(LagSpread::from),
            tokens_per_read_mean: lag.tokens_per_read_mean,
            tokens_per_read_max: lag.tokens_per_read_max,
            reads_with_several_tokens_percent: lag.reads_with_several_tokens_percent,
            reads_left_data_percent: lag.reads_left_data_percent,
            socket_bytes_at_read: lag.socket_bytes.map(LagSpread::from),
            dispatch_lag_ms: lag.dispatch_lag_ms.map(LagSpread::from),
            dispatch_late_ms_p99: lag.dispatch_late_ms_p99,
            dispatch_connect_ms_p99: lag.dispatch_connect_ms_p99,
            dispatch_write_ms_p99: lag.dispatch_write_ms_p99,
            gaps: lag.gaps,
            gaps_apart_percent: lag.gap_percent(GapKind::Apart),
            gaps_merged_percent: lag.gap_percent(GapKind::Merged),
            gaps_unbounded_percent: lag.gap_percent(GapKind::Unbounded),
            bounds_ms: FigureBounds {
                itl_p50: b(lag.itl_ms_p50),
                itl_p99: b(lag.itl_ms_p99),
                itl_mean: b(lag.itl_ms_mean),
                ttft_p50: b(lag.ttft_ms_p50),
                ttft_p99: b(lag.ttft_ms_p99),
                tpot_p50: b(lag.tpot_ms_p50),
                tpot_p99: b(lag.tpot_ms_p99),
            },
            throughput_bound_percent: lag.throughput_bound_percent,
            client_cpu_percent_of_cores: lag.cpu.map(|c| c.percent_of_cores()),
            cores: lag.cpu.map(|c| c.cores as u64),
            stamp_source: lag.stamp_source.map(|s| s.label()),
            no_bound_reason: crate::analysis::client_lag::no_bound_reason(lag),
            upstream_batched: batched.is_some(),
            upstream_batching_cause: batched.as_ref().map(|v| v.cause.as_str().to_string()),
            upstream_batching_reason: batched.map(|v| v.reason),
            tokens_batched_percent: lag.batching.batched_percent(),
            tokens_in_multi_token_events_percent: lag.batching.merged_events_percent(),
            batch_tokens_p50: lag.batching.batch_tokens_p50,
            batch_period_ms_p50: lag.batching.batch_period_ms_p50,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::client_lag::{Cpu, LagSamples};
    use crate::clock::Clock;
    use crate::timeline::{Channel, EventRecord, Timeline};

    #[test]
    fn every_figure_of_the_analysis_is_carried_under_bench_s_keys() {
        let (clock, _h) = Clock::mock();
        // Sent at 1 us, written at 3 us; reads at 1 ms (one token, woken 5 us late) and 4 ms
        // (two tokens, woken 2 ms late): the first of those two is known only to 3 ms.
        let mut tl = Timeline::new(0, 8, false);
        tl.send_start = Some(1_000);
        tl.write_done = Some(3_000);
        for (t, w) in [
            (1_000_000, 5_000),
            (4_000_000, 2_000_000),
            (4_000_000, 2_000_000),
        ] {
            tl.events.push(EventRecord {
                t,
                tokens: 1,
                wakeup_ns: w,
                socket_bytes: 0,
                channel: Channel::Content,
            });
        }
        let mut s = LagSamples::default();
        s.add(&tl, &clock, 0..u64::MAX);
        let cpu = Cpu {
            percent_of_one_core: 50.0,
            cores: 2,
        };
        let lag = s.summary(Some(cpu));
        let f = ClientLagFigures::new(&lag, vec!["a reason".into()]);
        assert!(f.client_bound);
        assert_eq!(f.reads, 2);
        assert_eq!(f.read_lag_us.unwrap().max, 2_000.0);
        assert_eq!(f.tokens_per_read_max, Some(2.0));
        assert_eq!(f.reads_with_several_tokens_percent, Some(50.0));
        assert_eq!(f.dispatch_lag_ms.unwrap().p50, 0.003);
        assert_eq!((f.gaps, f.gaps_apart_percent), (2, Some(0.0)));
        assert_eq!(f.gaps_merged_percent, Some(100.0));
        assert_eq!(f.bounds_ms.itl_p50, lag.itl_ms_p50.map(BoundedMs::from));
        // Gaps of 3 ms and 0, each known to about 3 ms one way: the median (1.5 ms) to about
        // ±1.5 ms (the bound is the analysis's: carried, not computed here).
        assert!((f.bounds_ms.itl_p50.unwrap().bound - 1.52).abs() < 0.01);
        assert_eq!(f.client_cpu_percent_of_cores, Some(25.0));
        assert_eq!(f.cores, Some(2));
        let v = serde_json::to_value(&f).unwrap();
        // The keys `bench serve` writes under `llmspeed.client_lag`.
        for k in [
            "client_bound",
            "client_bound_reasons",
            "reads",
            "read_lag_us",
            "tokens_per_read_mean",
            "tokens_per_read_max",
            "reads_with_several_tokens_percent",
            "dispatch_lag_ms",
            "dispatch_late_ms_p99",
            "dispatch_connect_ms_p99",
            "dispatch_write_ms_p99",
            "gaps",
            "gaps_apart_percent",
            "gaps_merged_percent",
            "gaps_unbounded_percent",
            "bounds_ms",
            "throughput_bound_percent",
            "client_cpu_percent_of_cores",
            "cores",
        ] {
            assert!(v.get(k).is_some(), "{k} missing: {v}");
        }
        assert_eq!(v["bounds_ms"]["tpot_p99"]["value"], 1.5);
        let back: ClientLagFigures = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
        assert!(!ClientLagFigures::new(&lag, Vec::new()).client_bound);
    }
}
