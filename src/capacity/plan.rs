//! One round of a probe in the benchmark engine's words: the workload at a closed-loop
//! concurrency, or at a request rate with Poisson arrivals (`--by rate`), as a
//! [`bench::engine::Plan`](crate::bench::engine::Plan). Pure.
//!
//! Why the engine and not the matrix's cell: the engine returns every request's record (TTFT,
//! each gap, E2E, TPOT, its failure) and the run's `analysis::client_lag` figures, which is all
//! a probe's decision reads; the cell measures a decode window over one shared prompt and
//! keeps per-stream summaries, not the per-request latencies an SLO is written in.

use crate::bench::engine::plan::{Plan, Warmup};
use crate::bench::engine::record::{LatencyOrigin, RequestEnd, TtftPredicate};
use crate::bench::vllm::body::BodyBuilder;
use crate::net::Dialect;
use crate::workload::datasets::{DatasetConfig, DatasetKind};
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::ScheduleConfig;
use std::sync::Arc;

/// What every request of the search is: one workload, the same at every load.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub base_url: String,
    /// `None`: the first model the server lists.
    pub model: Option<String>,
    /// Prompt and output lengths in tokens (random token-id prompts, every length exact, the
    /// output held to its length with `ignore_eos`).
    pub input_len: u32,
    pub output_len: u32,
    pub seed: u64,
}

/// What a load is: streams of a closed loop, or a request rate in whole steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum By {
    /// Load C: C streams, each sending its next request when its last one ends.
    Concurrency,
    /// Load k: Poisson arrivals at k x `step` requests per second (`step`: `--resolution`).
    Rate { step: f64 },
}

impl By {
    /// The load's figure as written: streams, or requests per second.
    pub fn value(self, load: u64) -> f64 {
        match self {
            By::Concurrency => load as f64,
            By::Rate { step } => load as f64 * step,
        }
    }

    /// `concurrency` or `request_rate`: the key the load is written under in results.json.
    pub fn key(self) -> &'static str {
        match self {
            By::Concurrency => "concurrency",
            By::Rate { .. } => "request_rate",
        }
    }

    /// `concurrency 8`, `request rate 12.5 req/s`.
    pub fn describe(self, load: u64) -> String {
        match self {
            By::Concurrency => format!("concurrency {load}"),
            By::Rate { .. } => format!("request rate {} req/s", fmt_rate(self.value(load))),
        }
    }
}

/// A rate as written: no trailing zeros (`12.5`, `40`), to the microrequest.
pub fn fmt_rate(r: f64) -> String {
    let s = format!("{r:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How many requests a round of a probe at `concurrency` sends: `round` beyond the opening
/// burst of `concurrency` requests (which the samples leave out, see `capacity::samples`).
pub fn round_size(concurrency: u64, round: u64) -> usize {
    (concurrency + round) as usize
}

/// The plan of round `index` of a probe at `concurrency`.
pub fn round_plan(w: &Workload, concurrency: u64, round: u64, index: u64) -> Plan {
    let mut p = plan(w, concurrency, round_size(concurrency, round), index);
    p.max_concurrency = Some(concurrency as usize);
    p
}

/// `n` requests of the workload, sent at once and without a cap, prompts and ids drawn for
/// (`key`, `index`).
fn plan(w: &Workload, key: u64, n: usize, index: u64) -> Plan {
    let concurrency = key;
    let dataset = DatasetConfig {
        kind: DatasetKind::Random,
        num_prompts: n,
        // A new seed per round and load: every prompt is new to the server's prefix cache
        // (kept under 2^31: the draws take a 32-bit seed).
        seed: w
            .seed
            .wrapping_add(concurrency.wrapping_mul(1_000_003))
            .wrapping_add(index)
            & 0x7fff_ffff,
        random_input_len: w.input_len,
        random_output_len: w.output_len,
        random_range_ratio: 0.0,
        ..DatasetConfig::default()
    };
    Plan {
        base_url: w.base_url.clone(),
        headers: Vec::new(),
        api_key: None,
        insecure: false,
        system_roots: false,
        ca_cert: None,
        kernel_stamps: true,
        packet_stamps: false,
        preconnect: true,
        ready_check_timeout_s: 60,
        model: w.model.clone(),
        served_model_name: None,
        tokenizer: None,
        endpoint: "/v1/completions".into(),
        dialect: Dialect::OpenAi,
        chat: false,
        bodies: Arc::new(BodyBuilder {
            model: w.model.clone().unwrap_or_default(),
            dialect: Dialect::OpenAi,
            chat: false,
            ignore_eos: true,
            continuous_usage: false,
            extra: serde_json::Map::new(),
        }),
        keep_text: false,
        request_ids: RequestIds::Uuid {
            run: (w.seed as u32) ^ (concurrency as u32).rotate_left(16) ^ index as u32,
        },
        routing_key: false,
        turns: 1,
        turn_len: 0,
        lora_modules: Vec::new(),
        lora_assignment: crate::bench::engine::lora::LoraAssignment::RoundRobin,
        dataset,
        schedule: ScheduleConfig::default(),
        self_timed: false,
        max_concurrency: None,
        num_warmups: 0,
        warmup: Warmup::default(),
        shard: None,
        start_at_unix_ns: None,
        probe_request_rate: 0.0,
        progress_step: "capacity",
        latency_origin: LatencyOrigin::Scheduled,
        ttft: TtftPredicate::FirstContent,
        end: RequestEnd::LastChoice,
    }
}

/// The plan of round `index` of a probe at `rate` requests per second: `n` requests whose
/// arrivals are a Poisson process (vLLM's draws, burstiness 1, as `bench serve --request-rate`
/// draws them; a new seed per round and rate), with no cap on how many are in flight.
pub fn rate_round_plan(w: &Workload, rate: f64, n: u64, index: u64) -> Plan {
    // The rate's bits give each rate its own prompts and arrivals.
    // The rate in millirequests per second keys its prompts and arrivals.
    let mut p = plan(w, (rate * 1000.0).round() as u64, n as usize, index);
    p.schedule = ScheduleConfig {
        rate,
        burstiness: 1.0,
        ramp: None,
        seed: p.dataset.seed,
        draws: crate::workload::schedule::Draws::Vllm,
    };
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_a_closed_loop_of_new_random_prompts() {
        let w = Workload {
            base_url: "http://127.0.0.1:1".into(),
            model: None,
            input_len: 64,
            output_len: 16,
            seed: 7,
        };
        let p = round_plan(&w, 8, 40, 0);
        assert_eq!(p.max_concurrency, Some(8));
        assert!(p.schedule.rate.is_infinite());
        assert_eq!(p.dataset.num_prompts, 48);
        assert_eq!(
            (p.dataset.random_input_len, p.dataset.random_output_len),
            (64, 16)
        );
        assert_eq!(p.dataset.random_range_ratio, 0.0);
        // Each round and each load draws its own prompts.
        let seeds = [
            p.dataset.seed,
            round_plan(&w, 8, 40, 1).dataset.seed,
            round_plan(&w, 9, 40, 0).dataset.seed,
        ];
        assert!(seeds[0] != seeds[1] && seeds[0] != seeds[2] && seeds[1] != seeds[2]);
    }

    #[test]
    fn a_rate_round_is_an_open_loop_of_poisson_arrivals() {
        let w = Workload {
            base_url: "http://127.0.0.1:1".into(),
            model: None,
            input_len: 64,
            output_len: 16,
            seed: 7,
        };
        let p = rate_round_plan(&w, 12.5, 100, 0);
        assert_eq!(p.max_concurrency, None);
        assert_eq!(p.dataset.num_prompts, 100);
        assert_eq!((p.schedule.rate, p.schedule.burstiness), (12.5, 1.0));
        assert!(p.schedule.validate().is_ok());
        let q = rate_round_plan(&w, 12.5, 100, 1);
        assert_ne!(p.dataset.seed, q.dataset.seed);
        assert_ne!(p.schedule.seed, q.schedule.seed);
        assert_eq!(By::Rate { step: 0.5 }.value(25), 12.5);
        assert_eq!(
            By::Rate { step: 0.5 }.describe(25),
            "request rate 12.5 req/s"
        );
        assert_eq!(fmt_rate(40.0), "40");
    }
}
