//! `llmspeed merge`: shard results (`bench serve --shard K/N`) -> one vLLM-shaped result.
//!
//! Exact by construction: each shard saved every request as a [`RequestRecord`] in integer
//! nanoseconds since its own start, plus that start on the wall clock. The merge moves every
//! record onto one base (the earliest shard start), then calls the very `bench::vllm::metrics::compute`
//! a single run calls, over the union of the records, with the duration of the union of the
//! shards' windows (earliest start to latest end). So TTFT, TPOT, ITL and E2EL percentiles are
//! computed from the pooled per-request values, never averaged across shards.
//!
//! The one thing the records cannot prove is that the machines' clocks agree. The rule (also
//! in docs/distributed.md): shards told one `--start-at` must each have started within
//! [`START_AT_TOLERANCE_NS`] of it on their own clock; shards without one must have started
//! within [`UNSYNCED_SPREAD_NS`] of each other. Otherwise the merge still runs and warns.
//!
//! Owns vLLM's identity checks (seed, prompts, model, metrics), the shift onto a common base
//! and the merged result's `llmspeed` key; the split check (each shard once), the window and the
//! clock rule are the engine's (`bench::engine::shard`). It must never do IO (the CLI reads and
//! writes the files) or compute a metric itself.

use crate::bench::engine::record::RequestRecord;
use crate::bench::engine::shard::{self, Window};
use crate::bench::vllm::metrics::{compute, BenchMetrics, MetricsConfig};
use crate::bench::vllm::ramp;
use crate::bench::vllm::result::{Detailed, RunInfo};
use crate::bench::vllm::server_timing::{self, ServerLists};
use crate::bench::vllm::shard::ShardBlock;
use crate::workload::schedule::{Draws, ScheduleConfig};
use serde_json::{json, Value};

pub use crate::bench::engine::shard::{START_AT_TOLERANCE_NS, UNSYNCED_SPREAD_NS};

/// One shard's saved result.
#[derive(Clone, Debug)]
pub struct ShardResult {
    /// Where it came from (a file name), for messages.
    pub name: String,
    pub block: ShardBlock,
    /// vLLM's `generated_texts` and `errors`, one per request in the block's order (empty
    /// strings when the file lacks them).
    pub texts: Vec<String>,
    pub errors: Vec<String>,
    /// The shard's own `llmspeed.client_lag` (its client's read loop: a figure of that
    /// machine, which no merge can pool), `null` when absent.
    pub client_lag: Value,
}

impl ShardResult {
    /// Reads a shard's result JSON (`--shard` implies `--save-detailed`).
    pub fn from_json(name: &str, v: &Value) -> Result<ShardResult, String> {
        let block = v
            .get("llmspeed")
            .and_then(|x| x.get("shard"))
            .ok_or_else(|| format!("{name}: not a shard result (no llmspeed.shard block: was it run with --shard K/N?)"))?;
        let block = ShardBlock::from_json(block).map_err(|e| format!("{name}: {e}"))?;
        let strings = |key: &str| -> Vec<String> {
            let list = v.get(key).and_then(Value::as_array);
            (0..block.requests.len())
                .map(|i| {
                    list.and_then(|l| l.get(i))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        };
        Ok(ShardResult {
            name: name.to_string(),
            texts: strings("generated_texts"),
            errors: strings("errors"),
            client_lag: v["llmspeed"]
                .get("client_lag")
                .cloned()
                .unwrap_or(Value::Null),
            block,
        })
    }
}

/// The merged run.
#[derive(Debug)]
pub struct Merged {
    pub info: RunInfo,
    pub metrics: BenchMetrics,
    pub detailed: Detailed,
    /// The `llmspeed` key: where each shard ran, and the warnings.
    pub extras: Value,
    pub warnings: Vec<String>,
    /// vLLM 0.33's `server_queue_times` and `server_ttfts`, the shards' lists in request
    /// order, when any shard's server sent its timing (written with `--save-detailed`, as vLLM
    /// writes them).
    pub server_lists: Vec<(String, Value)>,
    /// `rps_change_events` of a ramped run, from the shards' dispatches on the common base.
    pub vllm_extra: Vec<(String, Value)>,
}

/// Merges shard results. Errors when they are not the shards of one split (different N, seed,
/// model or dataset size; a shard given twice or missing; one request in two shards).
pub fn merge(shards: &[ShardResult], date: String) -> Result<Merged, String> {
    let first = shards.first().ok_or("no shard results to merge")?;
    let f = &first.block;
    let windows = windows(shards);
    check_one_split(first, shards)?;
    shard::each_once(&windows)?;
    let (base, end) = shard::union(&windows);
    let all = pooled(shards, base)?;
    let records: Vec<RequestRecord> = all.iter().map(|x| x.1.clone()).collect();
    let metrics = compute(
        &records,
        // A hand-edited file could end before another starts: no underflow, a zero duration.
        end.saturating_sub(base),
        &MetricsConfig {
            percentiles: f.info.percentiles.clone(),
            goodput: f.info.goodput,
        },
    );
    let detailed = detailed(&all);
    let server = server_lists(&all);
    let warnings = shard::clock_warnings(&windows);
    let mut extras = extras(&windows, f, (base, end), &metrics, &warnings);
    let ttfts: Vec<Option<f64>> = all
        .iter()
        .map(|(_, r, ..)| r.is_success().then(|| r.ttft_ns()).flatten())
        .map(|t| t.map(|t| t as f64 / 1e9))
        .collect();
    if let Some(split) = server_timing::split_json(&server_timing::splits(&ttfts, &server)) {
        extras["ttft_split_ms"] = split;
    }
    extras["client_lag_by_shard"] = client_lag_by_shard(shards);
    let vllm_extra = rps_change_events(shards, f, base);
    Ok(Merged {
        info: f.info.run_info(date),
        metrics,
        detailed,
        extras,
        warnings,
        server_lists: server.keys(),
        vllm_extra,
    })
}

/// The merged run's server lists, one entry per request in request order (`None` where a
/// shard's server sent no figure).
fn server_lists(all: &[Pooled<'_>]) -> ServerLists {
    let mut lists = ServerLists::default();
    for (.., (q, t)) in all {
        lists.queue_s.push(*q);
        lists.ttft_s.push(*t);
    }
    lists
}

/// Each shard's own client lag, by shard: a machine's read loop is not pooled.
fn client_lag_by_shard(shards: &[ShardResult]) -> Value {
    let mut order: Vec<&ShardResult> = shards.iter().collect();
    order.sort_by_key(|s| s.block.ran.shard.index);
    Value::Array(
        order
            .iter()
            .map(|s| json!({"shard": s.block.ran.shard.to_string(), "client_lag": s.client_lag}))
            .collect(),
    )
}

/// vLLM's `rps_change_events` of the whole ramped run: the shards' dispatches moved onto the
/// common base and read in time order, by the very function a single run uses. Empty without
/// a ramp.
fn rps_change_events(shards: &[ShardResult], f: &ShardBlock, base: u64) -> Vec<(String, Value)> {
    let Some(ramp_cfg) = f.info.ramp else {
        return Vec::new();
    };
    let mut dispatched: Vec<(usize, u64)> = shards
        .iter()
        .flat_map(|s| {
            let off = s.block.ran.start_unix_ns - base;
            s.block
                .dispatched_ns
                .iter()
                .map(move |(i, t)| (*i, t + off))
        })
        .collect();
    dispatched.sort_by_key(|&(i, t)| (t, i));
    let schedule = ScheduleConfig {
        rate: f.info.request_rate,
        burstiness: f.info.burstiness,
        ramp: Some(ramp_cfg),
        seed: f.seed,
        draws: Draws::Vllm,
    };
    let changes = ramp::rps_changes(&schedule, f.info.num_prompts, base, &dispatched);
    vec![("rps_change_events".into(), ramp::to_json(&changes))]
}

/// The shards are one split's: the same run's identity.
fn check_one_split(first: &ShardResult, shards: &[ShardResult]) -> Result<(), String> {
    let f = &first.block;
    for s in shards {
        let b = &s.block;
        let differs = |what: &str| {
            format!(
                "{} and {} are not shards of one run: different {what}",
                first.name, s.name
            )
        };
        if b.ran.shard.count != f.ran.shard.count {
            return Err(differs("shard counts"));
        }
        if b.seed != f.seed {
            return Err(differs("--seed"));
        }
        if b.info.num_prompts != f.info.num_prompts {
            return Err(differs("--num-prompts"));
        }
        if b.info.model_id != f.info.model_id {
            return Err(differs("models"));
        }
        if b.info.selected != f.info.selected || b.info.percentiles != f.info.percentiles {
            return Err(differs("--percentile-metrics or --metric-percentiles"));
        }
    }
    Ok(())
}

/// Each shard's window on the wall clock, for the engine's checks.
fn windows(shards: &[ShardResult]) -> Vec<Window<'_>> {
    shards
        .iter()
        .map(|s| s.block.ran.window(&s.name, s.block.requests.len()))
        .collect()
}

/// One request of the merged run: its index in the whole run, its record on the common base,
/// its text, its error, and the server's queue time and TTFT (seconds).
type Pooled<'a> = (
    usize,
    RequestRecord,
    &'a str,
    &'a str,
    (Option<f64>, Option<f64>),
);

/// Every shard's requests on the common `base`, in request order so the per-request lists read
/// as one process's would.
fn pooled(shards: &[ShardResult], base: u64) -> Result<Vec<Pooled<'_>>, String> {
    let mut all: Vec<Pooled<'_>> = Vec::new();
    for s in shards {
        let off = s.block.ran.start_unix_ns - base;
        for (j, (i, r)) in s.block.requests.iter().enumerate() {
            if !s.block.ran.shard.keeps(*i) {
                return Err(format!(
                    "{}: request {i} does not belong to shard {}",
                    s.name, s.block.ran.shard
                ));
            }
            all.push((
                *i,
                shifted(r, off),
                s.texts.get(j).map_or("", String::as_str),
                s.errors.get(j).map_or("", String::as_str),
                (
                    s.block.server.queue_s.get(j).copied().flatten(),
                    s.block.server.ttft_s.get(j).copied().flatten(),
                ),
            ));
        }
    }
    all.sort_by_key(|x| x.0);
    if all.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("one request appears in two shards".into());
    }
    Ok(all)
}

/// vLLM's per-request lists of the merged run.
fn detailed(all: &[Pooled<'_>]) -> Detailed {
    let mut detailed = Detailed::default();
    for (_, r, text, error, _) in all {
        detailed.input_lens.push(r.input_tokens);
        detailed
            .output_lens
            .push(if r.is_success() { r.output_tokens } else { 0 });
        detailed.ttfts.push(r.ttft_ns().unwrap_or(0) as f64 / 1e9);
        detailed
            .itls
            .push(r.itls_ns().map(|g| g as f64 / 1e9).collect());
        detailed.start_times.push(r.start_ns as f64 / 1e9);
        detailed.generated_texts.push(text.to_string());
        detailed.errors.push(error.to_string());
    }
    detailed
}

/// The `llmspeed` key: where each shard ran, the merged run's window and the warnings.
fn extras(
    windows: &[Window<'_>],
    f: &ShardBlock,
    (base, end): (u64, u64),
    metrics: &BenchMetrics,
    warnings: &[String],
) -> Value {
    json!({
        "version": crate::VERSION,
        "merged_from": shard::merged_from(windows, base),
        "start_unix_ns": base,
        "end_unix_ns": end.max(base),
        "seed": f.seed,
        "start_at_unix_ns": f.ran.start_at_unix_ns,
        "failures_by_kind": metrics.failures.iter().map(|(k, n)| (k.as_str().to_string(), json!(n))).collect::<serde_json::Map<String, Value>>(),
        "max_concurrent_requests_exact": metrics.max_concurrent_requests,
        "clock_warnings": warnings,
    })
}

/// `r` with every time moved `off` nanoseconds later (from its shard's base to the common one).
fn shifted(r: &RequestRecord, off: u64) -> RequestRecord {
    RequestRecord {
        start_ns: r.start_ns + off,
        chunk_times_ns: r.chunk_times_ns.iter().map(|t| t + off).collect(),
        end_ns: r.end_ns.map(|t| t + off),
        ..r.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::shard::{Ran, Shard};
    use crate::bench::vllm::metrics::MetricKind;
    use crate::bench::vllm::shard::RunInfoData;

    fn rec(start: u64, chunks: &[u64], tokens: u64) -> RequestRecord {
        RequestRecord {
            start_ns: start,
            chunk_times_ns: chunks.to_vec(),
            output_tokens: tokens,
            input_tokens: 10,
            ..Default::default()
        }
    }

    fn info() -> RunInfoData {
        RunInfoData {
            backend: "openai".into(),
            label: None,
            model_id: "m".into(),
            tokenizer_id: "m".into(),
            num_prompts: 4,
            metadata: vec![],
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            max_concurrency: None,
            ramp: None,
            selected: vec![MetricKind::Ttft, MetricKind::Itl, MetricKind::E2el],
            percentiles: vec![50.0, 90.0, 99.0],
            goodput: None,
        }
    }

    fn shard(
        k: usize,
        n: usize,
        start: u64,
        end: u64,
        at: Option<u64>,
        reqs: Vec<(usize, RequestRecord)>,
    ) -> ShardResult {
        ShardResult {
            name: format!("s{k}.json"),
            texts: vec![String::new(); reqs.len()],
            errors: vec![String::new(); reqs.len()],
            block: ShardBlock {
                ran: Ran {
                    shard: Shard { index: k, count: n },
                    start_at_unix_ns: at,
                    start_unix_ns: start,
                    end_unix_ns: end,
                },
                seed: 0,
                info: info(),
                requests: reqs,
                server: ServerLists::default(),
                dispatched_ns: Vec::new(),
            },
            client_lag: Value::Null,
        }
    }

    /// Two shards started 5 ms apart on the wall clock merge into exactly the metrics of one
    /// record list on the earliest start: same function, same inputs.
    #[test]
    fn merge_is_compute_over_the_shifted_union() {
        const T0: u64 = 1_796_050_800_000_000_000;
        let a = shard(
            0,
            2,
            T0,
            T0 + 900_000_000,
            None,
            vec![
                (0, rec(0, &[40_000_000, 50_000_000, 70_000_000], 3)),
                (2, rec(1_000_000, &[90_000_000, 91_000_000], 2)),
            ],
        );
        let b = shard(
            1,
            2,
            T0 + 5_000_000,
            T0 + 1_000_000_000,
            None,
            vec![
                (1, rec(0, &[20_000_000, 60_000_000], 2)),
                (
                    3,
                    RequestRecord {
                        error: Some(crate::timeline::ErrorKind::HttpStatus),
                        ..rec(2_000_000, &[], 0)
                    },
                ),
            ],
        );
        let m = merge(&[b.clone(), a.clone()], "d".into()).unwrap();
        // The union on the common base, written out by hand (shard 1 is 5 ms later).
        let want = compute(
            &[
                rec(0, &[40_000_000, 50_000_000, 70_000_000], 3),
                rec(5_000_000, &[25_000_000, 65_000_000], 2),
                rec(1_000_000, &[90_000_000, 91_000_000], 2),
                RequestRecord {
                    error: Some(crate::timeline::ErrorKind::HttpStatus),
                    ..rec(7_000_000, &[], 0)
                },
            ],
            1_000_000_000,
            &MetricsConfig {
                percentiles: vec![50.0, 90.0, 99.0],
                goodput: None,
            },
        );
        assert_eq!(m.metrics, want);
        assert_eq!((m.metrics.completed, m.metrics.failed), (3, 1));
        // TTFTs 40, 20, 89 ms pooled: the median is 40 ms, not a mean of shard medians.
        assert_eq!(m.metrics.ttft_ms.median, 40.0);
        // Request order, as one process lists them.
        assert_eq!(m.detailed.start_times, vec![0.0, 0.005, 0.001, 0.007]);
        assert_eq!(m.detailed.output_lens, vec![3, 2, 2, 0]);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    }

    #[test]
    fn shards_of_different_runs_or_missing_ones_are_refused() {
        let a = shard(0, 2, 1, 2, None, vec![]);
        let b = shard(1, 2, 1, 2, None, vec![]);
        assert!(merge(std::slice::from_ref(&a), "d".into())
            .unwrap_err()
            .contains("missing shard(s) 1/2"));
        assert!(merge(&[a.clone(), a.clone()], "d".into())
            .unwrap_err()
            .contains("given twice"));
        let mut c = b.clone();
        c.block.seed = 9;
        assert!(merge(&[a.clone(), c], "d".into())
            .unwrap_err()
            .contains("--seed"));
        let mut c = b.clone();
        c.block.ran.shard.count = 3;
        assert!(merge(&[a.clone(), c], "d".into()).is_err());
        let mut c = b;
        c.block.requests = vec![(2, rec(0, &[1], 1))];
        assert!(merge(&[a, c], "d".into())
            .unwrap_err()
            .contains("does not belong"));
    }

    /// The engine's clock rule on this front end's shard results.
    fn warnings(shards: &[ShardResult]) -> Vec<String> {
        shard::clock_warnings(&windows(shards))
    }

    #[test]
    fn clock_rule() {
        const AT: u64 = 1_796_050_800_000_000_000;
        let ok = [
            shard(0, 2, AT + 2_000_000, AT + 9, Some(AT), vec![]),
            shard(1, 2, AT + 99_000_000, AT + 9, Some(AT), vec![]),
        ];
        assert!(warnings(&ok).is_empty());
        let late = [
            shard(0, 2, AT + 2_000_000, AT + 9, Some(AT), vec![]),
            shard(1, 2, AT + 101_000_000, AT + 9, Some(AT), vec![]),
        ];
        let w = warnings(&late);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("shard 1/2") && w[0].contains("101.0 ms after"));
        // Without --start-at: a spread of 1 s passes, more warns.
        let spread = |d| {
            warnings(&[
                shard(0, 2, AT, AT + 9, None, vec![]),
                shard(1, 2, AT + d, AT + 9, None, vec![]),
            ])
        };
        assert!(spread(1_000_000_000).is_empty());
        assert_eq!(spread(1_000_000_001).len(), 1);
        let mixed = [
            shard(0, 2, AT, AT + 9, Some(AT), vec![]),
            shard(1, 2, AT, AT + 9, None, vec![]),
        ];
        assert!(warnings(&mixed)[0].contains("same --start-at"));
    }
}
