//! What a `--shard K/N` run saves so that `llmspeed merge` can recompute the whole run exactly:
//! the `llmspeed.shard` block of its result (the run's identity plus one exact record per
//! request, times in integer nanoseconds). The split itself is `bench::engine::shard`.
//!
//! It must never do IO or read a clock: the runner hands it the stamps, `bench::vllm::merge`
//! reads it back.

use crate::bench::engine::record::RequestRecord;
use crate::bench::engine::shard::Ran;
use crate::bench::vllm::metrics::{GoodputSlo, MetricKind};
use crate::bench::vllm::result::RunInfo;
use crate::bench::vllm::server_timing::ServerLists;
use crate::timeline::ErrorKind;
use crate::workload::schedule::{Ramp, RampStrategy};
use serde_json::{json, Value};

/// Bumped when the block's meaning changes, so `merge` refuses what it cannot read exactly.
pub const FORMAT: u64 = 1;

/// What a shard measured, as `merge` needs it: the run's identity, its window on the wall
/// clock, and every request it sent.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardBlock {
    /// Its `K/N` and its window: the base every `*_ns` figure of `requests` counts from.
    pub ran: Ran,
    pub seed: u64,
    pub info: RunInfoData,
    /// `(index in the whole run, record)`, in dispatch order.
    pub requests: Vec<(usize, RequestRecord)>,
    /// The server's own queue time and TTFT of each request, in `requests`' order (vLLM 0.33's
    /// `server_queue_times` and `server_ttfts`); both lists empty when the server sent none.
    pub server: ServerLists,
    /// With a ramp: `(request number, ns after this shard's start)` of each dispatch, in
    /// dispatch order, from which the merge recomputes `rps_change_events`; empty otherwise.
    pub dispatched_ns: Vec<(usize, u64)>,
}

/// The parts of [`RunInfo`] and the metrics configuration a merged result repeats.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfoData {
    pub backend: String,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: String,
    pub num_prompts: usize,
    pub metadata: Vec<(String, Value)>,
    pub request_rate: f64,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub ramp: Option<Ramp>,
    pub selected: Vec<MetricKind>,
    pub percentiles: Vec<f64>,
    pub goodput: Option<GoodputSlo>,
}

impl RunInfoData {
    pub fn new(info: &RunInfo, percentiles: &[f64], goodput: Option<GoodputSlo>) -> Self {
        RunInfoData {
            backend: info.backend.clone(),
            label: info.label.clone(),
            model_id: info.model_id.clone(),
            tokenizer_id: info.tokenizer_id.clone(),
            num_prompts: info.num_prompts,
            metadata: info.metadata.clone(),
            request_rate: info.request_rate,
            burstiness: info.burstiness,
            max_concurrency: info.max_concurrency,
            ramp: info.ramp,
            selected: info.selected.clone(),
            percentiles: percentiles.to_vec(),
            goodput,
        }
    }

    /// The header of a result with this identity, dated `date`.
    pub fn run_info(&self, date: String) -> RunInfo {
        RunInfo {
            date,
            backend: self.backend.clone(),
            label: self.label.clone(),
            model_id: self.model_id.clone(),
            tokenizer_id: self.tokenizer_id.clone(),
            num_prompts: self.num_prompts,
            metadata: self.metadata.clone(),
            request_rate: self.request_rate,
            burstiness: self.burstiness,
            max_concurrency: self.max_concurrency,
            ramp: self.ramp,
            selected: self.selected.clone(),
            goodput: self.goodput.is_some(),
        }
    }
}

/// A shard block that cannot be read back exactly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shard block: {0}")]
pub struct BlockError(pub String);

fn err(m: impl Into<String>) -> BlockError {
    BlockError(m.into())
}

fn u64_of(v: &Value, key: &str) -> Result<u64, BlockError> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| err(format!("{key:?} missing or not a non-negative integer")))
}

fn f64_of(v: &Value, key: &str) -> Result<f64, BlockError> {
    match v.get(key) {
        // `inf` is not JSON: the rate is written as vLLM writes it, the string "inf".
        Some(Value::String(s)) if s == "inf" => Ok(f64::INFINITY),
        Some(x) => x
            .as_f64()
            .ok_or_else(|| err(format!("{key:?} is not a number"))),
        None => Err(err(format!("{key:?} missing"))),
    }
}

fn str_of(v: &Value, key: &str) -> Result<String, BlockError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| err(format!("{key:?} missing or not a string")))
}

fn record_json(index: usize, r: &RequestRecord) -> Value {
    json!({
        "index": index,
        "start_ns": r.start_ns,
        "chunk_ns": r.chunk_times_ns,
        "output_tokens": r.output_tokens,
        "input_tokens": r.input_tokens,
        "error": r.error.map(ErrorKind::as_str),
        "queue_ns": r.queue_ns,
        "end_ns": r.end_ns,
        "empty_is_success": r.empty_is_success,
    })
}

fn record_from(v: &Value) -> Result<(usize, RequestRecord), BlockError> {
    let chunk_times_ns = v
        .get("chunk_ns")
        .and_then(Value::as_array)
        .ok_or_else(|| err("\"chunk_ns\" missing"))?
        .iter()
        .map(|t| {
            t.as_u64()
                .ok_or_else(|| err("a chunk time is not an integer"))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let error = match v.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            ErrorKind::ALL
                .into_iter()
                .find(|k| k.as_str() == s)
                .ok_or_else(|| err(format!("unknown error kind {s:?}")))?,
        ),
        Some(_) => return Err(err("\"error\" is not a string")),
    };
    let end_ns = match v.get("end_ns") {
        None | Some(Value::Null) => None,
        Some(x) => Some(
            x.as_u64()
                .ok_or_else(|| err("\"end_ns\" is not an integer"))?,
        ),
    };
    let index = u64_of(v, "index")? as usize;
    Ok((
        index,
        RequestRecord {
            start_ns: u64_of(v, "start_ns")?,
            chunk_times_ns,
            output_tokens: u64_of(v, "output_tokens")?,
            input_tokens: u64_of(v, "input_tokens")?,
            error,
            queue_ns: u64_of(v, "queue_ns")?,
            end_ns,
            empty_is_success: v
                .get("empty_is_success")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
    ))
}

fn rate_json(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!("inf")
    }
}

impl ShardBlock {
    pub fn to_json(&self) -> Value {
        let i = &self.info;
        let goodput = i
            .goodput
            .map(|g| json!({"ttft_ms": g.ttft_ms, "tpot_ms": g.tpot_ms, "e2el_ms": g.e2el_ms}));
        let ramp = i.ramp.map(|r| {
            json!({
                "strategy": match r.strategy { RampStrategy::Linear => "linear", RampStrategy::Exponential => "exponential" },
                "start_rps": r.start_rps,
                "end_rps": r.end_rps,
            })
        });
        let mut block = json!({
            "format": FORMAT,
            "index": self.ran.shard.index,
            "count": self.ran.shard.count,
            "seed": self.seed,
            "run": {
                "backend": i.backend,
                "label": i.label,
                "model_id": i.model_id,
                "tokenizer_id": i.tokenizer_id,
                "num_prompts": i.num_prompts,
                "metadata": i.metadata.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
                "request_rate": rate_json(i.request_rate),
                "burstiness": i.burstiness,
                "max_concurrency": i.max_concurrency,
                "ramp": ramp,
                "percentile_metrics": i.selected.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "metric_percentiles": i.percentiles,
                "goodput": goodput,
            },
            "requests": self.requests.iter().map(|(ix, r)| record_json(*ix, r)).collect::<Vec<_>>(),
        });
        if !self.server.keys().is_empty() {
            block["server_queue_s"] = json!(self.server.queue_s);
            block["server_ttft_s"] = json!(self.server.ttft_s);
        }
        if !self.dispatched_ns.is_empty() {
            block["dispatched_ns"] = json!(self.dispatched_ns);
        }
        self.ran.write(&mut block);
        block
    }

    pub fn from_json(v: &Value) -> Result<ShardBlock, BlockError> {
        let format = u64_of(v, "format")?;
        if format != FORMAT {
            return Err(err(format!(
                "format {format}, this llmspeed reads format {FORMAT}"
            )));
        }
        let ran = Ran::read(v).map_err(err)?;
        let run = v.get("run").ok_or_else(|| err("\"run\" missing"))?;
        let selected = run
            .get("percentile_metrics")
            .and_then(Value::as_array)
            .ok_or_else(|| err("\"percentile_metrics\" missing"))?
            .iter()
            .map(|k| {
                let name = k.as_str().unwrap_or("");
                MetricKind::ALL
                    .into_iter()
                    .find(|m| m.as_str() == name)
                    .ok_or_else(|| err(format!("unknown metric {name:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let percentiles = run
            .get("metric_percentiles")
            .and_then(Value::as_array)
            .ok_or_else(|| err("\"metric_percentiles\" missing"))?
            .iter()
            .map(|p| {
                p.as_f64()
                    .ok_or_else(|| err("a percentile is not a number"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let goodput = match run.get("goodput") {
            None | Some(Value::Null) => None,
            Some(g) => Some(GoodputSlo {
                ttft_ms: g.get("ttft_ms").and_then(Value::as_f64),
                tpot_ms: g.get("tpot_ms").and_then(Value::as_f64),
                e2el_ms: g.get("e2el_ms").and_then(Value::as_f64),
            }),
        };
        let ramp = match run.get("ramp") {
            None | Some(Value::Null) => None,
            Some(r) => Some(Ramp {
                strategy: match str_of(r, "strategy")?.as_str() {
                    "linear" => RampStrategy::Linear,
                    "exponential" => RampStrategy::Exponential,
                    s => return Err(err(format!("unknown ramp strategy {s:?}"))),
                },
                start_rps: f64_of(r, "start_rps")?,
                end_rps: f64_of(r, "end_rps")?,
            }),
        };
        let metadata = run
            .get("metadata")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| {
                        let k = p.get(0)?.as_str()?.to_string();
                        Some((k, p.get(1).cloned().unwrap_or(Value::Null)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let requests = v
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| err("\"requests\" missing"))?
            .iter()
            .map(record_from)
            .collect::<Result<Vec<_>, _>>()?;
        let server = ServerLists {
            queue_s: seconds_of(v, "server_queue_s", requests.len())?,
            ttft_s: seconds_of(v, "server_ttft_s", requests.len())?,
        };
        let dispatched_ns = match v.get("dispatched_ns") {
            None | Some(Value::Null) => Vec::new(),
            Some(d) => serde_json::from_value(d.clone()).map_err(|e| {
                err(format!(
                    "\"dispatched_ns\" is not a list of [index, ns]: {e}"
                ))
            })?,
        };
        Ok(ShardBlock {
            ran,
            seed: u64_of(v, "seed")?,
            info: RunInfoData {
                backend: str_of(run, "backend")?,
                label: run.get("label").and_then(Value::as_str).map(String::from),
                model_id: str_of(run, "model_id")?,
                tokenizer_id: str_of(run, "tokenizer_id")?,
                num_prompts: u64_of(run, "num_prompts")? as usize,
                metadata,
                request_rate: f64_of(run, "request_rate")?,
                burstiness: f64_of(run, "burstiness")?,
                max_concurrency: run
                    .get("max_concurrency")
                    .and_then(Value::as_u64)
                    .map(|n| n as usize),
                ramp,
                selected,
                percentiles,
                goodput,
            },
            requests,
            server,
            dispatched_ns,
        })
    }
}

/// A per-request list of seconds or nulls, one per request; absent: empty (no figures).
fn seconds_of(v: &Value, key: &str, n: usize) -> Result<Vec<Option<f64>>, BlockError> {
    let list: Vec<Option<f64>> = match v.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(x) => serde_json::from_value(x.clone())
            .map_err(|e| err(format!("{key:?} is not a list of numbers or nulls: {e}")))?,
    };
    if list.len() != n {
        return Err(err(format!(
            "{key:?} has {} entries for {n} requests",
            list.len()
        )));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::shard::Shard;

    fn block() -> ShardBlock {
        ShardBlock {
            ran: Ran {
                shard: Shard { index: 1, count: 2 },
                start_at_unix_ns: Some(1_796_050_800_000_000_000),
                start_unix_ns: 1_796_050_800_000_123_456,
                end_unix_ns: 1_796_050_802_000_000_000,
            },
            seed: 7,
            info: RunInfoData {
                backend: "openai".into(),
                label: None,
                model_id: "m".into(),
                tokenizer_id: "m".into(),
                num_prompts: 4,
                metadata: vec![("gpu".into(), json!("H200"))],
                request_rate: f64::INFINITY,
                burstiness: 1.0,
                max_concurrency: Some(8),
                ramp: Some(Ramp {
                    strategy: RampStrategy::Linear,
                    start_rps: 1.0,
                    end_rps: 4.0,
                }),
                selected: vec![MetricKind::Ttft, MetricKind::E2el],
                percentiles: vec![50.0, 99.9],
                goodput: Some(GoodputSlo {
                    ttft_ms: Some(500.0),
                    tpot_ms: None,
                    e2el_ms: None,
                }),
            },
            requests: vec![
                (
                    1,
                    RequestRecord {
                        start_ns: 5,
                        chunk_times_ns: vec![u64::MAX - 1, u64::MAX],
                        output_tokens: 2,
                        input_tokens: 10,
                        error: None,
                        queue_ns: 3,
                        end_ns: Some(99),
                        empty_is_success: true,
                    },
                ),
                (
                    3,
                    RequestRecord {
                        error: Some(ErrorKind::TimeoutGap),
                        ..Default::default()
                    },
                ),
            ],
            server: ServerLists {
                queue_s: vec![Some(0.25), None],
                ttft_s: vec![Some(1.5), None],
            },
            dispatched_ns: vec![(1, 4), (3, u64::MAX)],
        }
    }

    /// Every field survives the JSON round trip bit for bit (integers stay integers, `inf`
    /// stays infinite), which is what makes a merge exact.
    #[test]
    fn block_round_trips_exactly() {
        let b = block();
        let text = serde_json::to_string(&b.to_json()).unwrap();
        let back = ShardBlock::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, b);
    }

    #[test]
    fn bad_blocks_are_errors_not_panics() {
        let mut v = block().to_json();
        v["format"] = json!(2);
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["requests"][0]["error"] = json!("gremlins");
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["requests"][0]["chunk_ns"] = json!([-1]);
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["server_ttft_s"] = json!([0.5]);
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["server_queue_s"] = json!(["x", null]);
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["dispatched_ns"] = json!([[1]]);
        assert!(ShardBlock::from_json(&v).is_err());
        assert!(ShardBlock::from_json(&json!(null)).is_err());
    }
}
