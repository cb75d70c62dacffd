//! One round of a probe in the benchmark engine's words: the workload at a closed-loop
//! concurrency, or at a request rate with gamma arrivals (`--by rate`, Poisson by default), as a
//! [`bench::engine::Plan`](crate::bench::engine::Plan). Pure.
//!
//! Why the engine and not the matrix's cell: the engine returns every request's record (TTFT,
//! each gap, E2E, TPOT, its failure) and the run's `analysis::client_lag` figures, which is all
//! a probe's decision reads; the cell measures a decode window over one shared prompt and
//! keeps per-stream summaries, not the per-request latencies an SLO is written in.

use crate::bench::engine::plan::Plan;
use crate::bench::engine::record::TtftPredicate;
use crate::bench::vllm::connection::Connection;
use crate::bench::vllm::plan::BodyFields;
use crate::workload::datasets::{DatasetConfig, DatasetKind};
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::ScheduleConfig;

/// What every request of the search is: one workload, the same at every load — where and how
/// it is sent (`bench serve`'s connection flags) and what it asks (`bench serve`'s dataset).
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The server, its endpoint and how requests reach it (headers, key, TLS).
    pub connection: Connection,
    /// The dataset. Its `num_prompts` is how many samples a dataset read once holds
    /// ([`Workload::draws_per_round`]); its `seed` is the search's.
    pub dataset: DatasetConfig,
    /// `--context max`: the random prompts are the largest context that fits the model, as
    /// the matrix's `max` (`matrix::plan::decode_fit`), set from the server's `max_model_len`
    /// before the first probe (`capacity::run`).
    pub context_max: bool,
}

impl Workload {
    /// Random token-id prompts of exactly `input_len` tokens asking for exactly `output_len`
    /// (held with `ignore_eos`), over plain HTTP to `base_url`: the default workload.
    pub fn random(
        base_url: &str,
        model: Option<String>,
        input_len: u32,
        output_len: u32,
        seed: u64,
    ) -> Workload {
        Workload {
            connection: Connection::plain(base_url, model),
            dataset: DatasetConfig {
                kind: DatasetKind::Random,
                seed,
                random_input_len: input_len,
                random_output_len: output_len,
                random_range_ratio: 0.0,
                ..DatasetConfig::default()
            },
            context_max: false,
        }
    }

    /// Whether every round draws prompts of its own from a new seed (the families built from
    /// a seed: random ids, with or without images, prefix repetition, BurstGPT's lengths), so
    /// no round is helped by an earlier one's prefix cache. Otherwise (texts: ShareGPT, custom,
    /// sonnet, the hub's) the dataset is read once before the first probe and every round
    /// sends the next of its samples, in order, wrapping at the end (`capacity::run`).
    pub fn draws_per_round(&self) -> bool {
        self.dataset.kind.token_ids()
    }
}

/// What a load is: streams of a closed loop, or a request rate in whole steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum By {
    /// Load C: C streams, each sending its next request when its last one ends.
    Concurrency,
    /// Load k: arrivals at k x `step` requests per second (`step`: `--resolution`), their gaps
    /// gamma-distributed with shape `burstiness` (`--burstiness`: 1 Poisson, `inf` constant).
    Rate { step: f64, burstiness: f64 },
}

impl By {
    /// The load's figure as written: streams, or requests per second.
    pub fn value(self, load: u64) -> f64 {
        match self {
            By::Concurrency => load as f64,
            By::Rate { step, .. } => load as f64 * step,
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
    let mut dataset = w.dataset.clone();
    dataset.num_prompts = n;
    // A new seed per round and load: every prompt is new to the server's prefix cache
    // (kept under 2^31: the draws take a 32-bit seed).
    dataset.seed = w
        .dataset
        .seed
        .wrapping_add(concurrency.wrapping_mul(1_000_003))
        .wrapping_add(index)
        & 0x7fff_ffff;
    let mut p = setup_plan(w);
    p.dataset = dataset;
    p.request_ids = RequestIds::Uuid {
        run: (w.dataset.seed as u32) ^ (concurrency as u32).rotate_left(16) ^ index as u32,
    };
    p
}

/// The plan every round is made from, its dataset as given: the connection a search sets up
/// with (its client, model and readiness), and what a dataset read once is loaded by.
pub fn setup_plan(w: &Workload) -> Plan {
    let c = &w.connection;
    let fields = BodyFields {
        // Every request is held to its sample's output length: a probe's load is the
        // dataset's lengths, not where the model happens to stop.
        ignore_eos: true,
        continuous_usage: false,
        extra: serde_json::Map::new(),
    };
    Plan {
        // Always: no request's latency includes a handshake.
        preconnect: true,
        ready_check_timeout_s: c.ready_check_timeout_s.max(60),
        progress_step: "capacity",
        ttft: TtftPredicate::FirstContent,
        ..crate::bench::vllm::plan::on(c, fields, w.dataset.clone())
    }
}

/// The plan of round `index` of a probe at `rate` requests per second: `n` requests whose
/// gaps are gamma-distributed of shape `burstiness` (vLLM's draws, as `bench serve
/// --request-rate --burstiness` draws them; 1 is a Poisson process; a new seed per round and
/// rate), with no cap on how many are in flight.
pub fn rate_round_plan(w: &Workload, rate: f64, burstiness: f64, n: u64, index: u64) -> Plan {
    // The rate's bits give each rate its own prompts and arrivals.
    // The rate in millirequests per second keys its prompts and arrivals.
    let mut p = plan(w, (rate * 1000.0).round() as u64, n as usize, index);
    p.schedule = ScheduleConfig {
        rate,
        burstiness,
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
        let w = Workload::random("http://127.0.0.1:1", None, 64, 16, 7);
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

    /// The connection is `bench serve`'s; a search always preconnects, waits at least a
    /// minute for the server, holds every output to its length and times the first content.
    #[test]
    fn the_setup_plan_is_the_connection_with_capacitys_rules() {
        let mut w = Workload::random("http://127.0.0.1:1/", Some("m".into()), 64, 16, 7);
        w.connection.api_key = Some("sk-1".into());
        w.connection.served_model_name = Some("s".into());
        let p = setup_plan(&w);
        assert_eq!(p.base_url, "http://127.0.0.1:1");
        assert_eq!(p.api_key.as_deref(), Some("sk-1"));
        assert_eq!(
            (p.model.as_deref(), p.served_model_name.as_deref()),
            (Some("m"), Some("s"))
        );
        assert!(p.preconnect && p.kernel_stamps && !p.packet_stamps);
        assert_eq!(p.ready_check_timeout_s, 60);
        w.connection.ready_check_timeout_s = 90;
        assert_eq!(setup_plan(&w).ready_check_timeout_s, 90);
        assert_eq!(
            (p.progress_step, p.ttft),
            ("capacity", TtftPredicate::FirstContent)
        );
        assert_eq!((p.num_warmups, p.max_concurrency), (0, None));
        assert_eq!(
            p.request_ids,
            RequestIds::Uuid {
                run: w.dataset.seed as u32
            }
        );
        let s = crate::workload::datasets::Sample {
            group: None,
            prompt: crate::workload::datasets::PromptSource::Text("hi".into()),
            prompt_len: 1,
            output_len: 4,
        };
        let body = p.bodies.request_body(&s, "m", &mut Vec::new()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ignore_eos"], true);
    }

    #[test]
    fn a_rate_round_is_an_open_loop_of_poisson_arrivals() {
        let w = Workload::random("http://127.0.0.1:1", None, 64, 16, 7);
        let p = rate_round_plan(&w, 12.5, 1.0, 100, 0);
        assert_eq!(p.max_concurrency, None);
        assert_eq!(p.dataset.num_prompts, 100);
        assert_eq!((p.schedule.rate, p.schedule.burstiness), (12.5, 1.0));
        assert!(p.schedule.validate().is_ok());
        let q = rate_round_plan(&w, 12.5, 1.0, 100, 1);
        assert_ne!(p.dataset.seed, q.dataset.seed);
        assert_ne!(p.schedule.seed, q.schedule.seed);
        let by = By::Rate {
            step: 0.5,
            burstiness: 1.0,
        };
        assert_eq!(by.value(25), 12.5);
        assert_eq!(by.describe(25), "request rate 12.5 req/s");
        // --burstiness reaches the schedule: gamma gaps of its shape, inf constant.
        let b = rate_round_plan(&w, 12.5, 0.5, 100, 0);
        assert_eq!(b.schedule.burstiness, 0.5);
        assert_eq!(b.dataset.seed, p.dataset.seed);
        let c = rate_round_plan(&w, 12.5, f64::INFINITY, 100, 0);
        assert!(c.schedule.burstiness.is_infinite() && c.schedule.validate().is_ok());
        assert_eq!(fmt_rate(40.0), "40");
    }
}
