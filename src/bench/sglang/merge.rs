//! `llmspeed merge` of `bench sglang --shard K/N` records -> one SGLang record of the whole run.
//!
//! Exact by construction, as `bench serve`'s merge: each shard saved every request as SGLang's
//! reading of it plus the shard's start on the wall clock; the merge moves every request onto
//! the earliest start, then calls the very `metrics::compute` a single run calls, over the
//! union of the requests in request order, with the union of the shards' windows as the
//! duration. Percentiles come from the pooled per-request values, never from averages. The
//! split check, the window and the clock rule are the engine's (`bench::engine::shard`).
//!
//! Owns reading a shard's block out of its JSONL file, SGLang's identity checks and the merged
//! record's `llmspeed` key. Never does IO (the CLI reads and writes the files).

use super::metrics::{self, Metrics, RequestOutput};
use super::shard::{ShardBlock, RECORD};
use crate::bench::engine::shard::{self, Window};
use serde_json::{json, Value};

/// One shard's record, as read from its file.
#[derive(Clone, Debug)]
pub struct ShardRecord {
    /// Where it came from (a file name), for messages.
    pub name: String,
    pub block: ShardBlock,
    /// The record's `server_info`.
    pub server_info: Value,
}

/// The value written right after `"key": ` at byte `at` of a record line.
fn value_at(line: &str, at: usize) -> Option<Value> {
    serde_json::Deserializer::from_str(&line[at..])
        .into_iter::<Value>()
        .next()?
        .ok()
}

/// The shard record in a `bench sglang` output file (the last line carrying a shard block:
/// the file is appended to), or `None` when the text holds none (another tool's result).
/// The line is SGLang's, with Python's `Infinity` possibly in it, so only the two objects the
/// merge needs are parsed: `server_info` (written before any text) and our `llmspeed` key
/// (written last).
pub fn read_shard(name: &str, text: &str) -> Option<Result<ShardRecord, String>> {
    let key = "\"llmspeed\": ";
    let line = text.lines().rev().find(|l| {
        l.rfind(key)
            .and_then(|i| value_at(l, i + key.len()))
            .is_some_and(|v| v["shard"]["record"] == RECORD)
    })?;
    let ours = value_at(line, line.rfind(key)? + key.len())?;
    let block =
        ShardBlock::from_json(&ours["shard"]).map_err(|e| format!("{name}: shard block: {e}"));
    let server_info = line
        .find("\"server_info\": ")
        .and_then(|i| value_at(line, i + "\"server_info\": ".len()))
        .unwrap_or(Value::Null);
    Some(block.map(|block| ShardRecord {
        name: name.to_string(),
        block,
        server_info,
    }))
}

/// The merged run.
#[derive(Debug)]
pub struct Merged {
    /// The first shard's (by index): settings, `server_info`, accept length.
    pub first: ShardRecord,
    pub outputs: Vec<RequestOutput>,
    pub retokenized: Vec<u64>,
    pub duration_s: f64,
    pub metrics: Metrics,
    /// The `llmspeed` key: where each shard ran, and the warnings.
    pub extras: Value,
    pub warnings: Vec<String>,
}

/// Merges shard records. Errors when they are not the shards of one split (different N,
/// seed, model, settings; a shard given twice or missing; a request in the wrong shard).
pub fn merge(shards: &[ShardRecord]) -> Result<Merged, String> {
    let windows: Vec<Window<'_>> = shards
        .iter()
        .map(|s| s.block.ran.window(&s.name, s.block.requests.len()))
        .collect();
    shard::each_once(&windows)?;
    check_one_run(shards)?;
    let (base, end) = shard::union(&windows);
    let (outputs, retokenized) = pooled(shards, base)?;
    let duration_s = (end - base) as f64 / 1e9;
    let mut metrics = metrics::compute(&outputs, &retokenized, duration_s);
    let turns = shards[0].block.turns;
    if turns > 1 {
        metrics.without_dataset_input(duration_s);
    }
    let warnings = shard::clock_warnings(&windows);
    let mut order: Vec<&ShardRecord> = shards.iter().collect();
    order.sort_by_key(|s| s.block.ran.shard.index);
    let mut extras = json!({
        "version": crate::VERSION,
        "merged_from": shard::merged_from(&windows, base),
        "start_unix_ns": base,
        "end_unix_ns": end,
        "seed": order[0].block.seed,
        "start_at_unix_ns": order[0].block.ran.start_at_unix_ns,
        "clock_warnings": warnings,
    });
    // As a single run's record: what SGLang's total leaves out for multi-turn rows.
    if turns > 1 {
        extras["multi_turn_input_tokens"] = json!(metrics::completed_input(&outputs));
    }
    Ok(Merged {
        first: order[0].clone(),
        outputs,
        retokenized,
        duration_s,
        metrics,
        extras,
        warnings,
    })
}

/// The shards ran one run: the same seed, model and settings.
fn check_one_run(shards: &[ShardRecord]) -> Result<(), String> {
    let first = &shards[0];
    let f = &first.block;
    for s in shards {
        let b = &s.block;
        let what = if b.seed != f.seed {
            "--seed"
        } else if b.model != f.model {
            "models"
        } else if b.settings != f.settings {
            "settings (backend, dataset, rate, concurrency, lengths or --num-prompts)"
        } else if b.turns != f.turns {
            "--gsp-num-turns"
        } else {
            continue;
        };
        return Err(format!(
            "{} and {} are not shards of one run: different {what}",
            first.name, s.name
        ));
    }
    Ok(())
}

/// Every shard's requests on the common `base`, in request order, with their retokenized
/// counts.
fn pooled(shards: &[ShardRecord], base: u64) -> Result<(Vec<RequestOutput>, Vec<u64>), String> {
    let mut all: Vec<((usize, usize), RequestOutput, u64)> = Vec::new();
    for s in shards {
        let off = s.block.ran.start_unix_ns - base;
        for r in &s.block.requests {
            if !s.block.ran.shard.keeps(r.index) {
                return Err(format!(
                    "{}: request {} does not belong to shard {}",
                    s.name, r.index, s.block.ran.shard
                ));
            }
            let mut o = r.output.clone();
            o.start_ns += off;
            all.push(((r.index, r.round), o, r.retokenized));
        }
    }
    all.sort_by_key(|x| x.0);
    if let Some(w) = all.windows(2).find(|w| w[0].0 == w[1].0) {
        let (index, round) = w[0].0;
        return Err(format!(
            "request {index} (round {round}) appears twice in the shards"
        ));
    }
    Ok(all.into_iter().map(|(_, o, n)| (o, n)).unzip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::shard::{Ran, Shard};
    use crate::bench::sglang::shard::{Settings, ShardRequest};

    fn out(start_ns: u64, ttft_s: f64, itl_s: &[f64], latency_s: f64) -> RequestOutput {
        RequestOutput {
            success: true,
            start_ns,
            ttft_s,
            itl_s: itl_s.to_vec(),
            latency_s,
            prompt_len: 10,
            output_len: itl_s.len() as u64 + 1,
            error: String::new(),
        }
    }

    fn settings() -> Settings {
        Settings {
            tag: None,
            backend: "sglang".into(),
            dataset_name: "random".into(),
            request_rate: Some(f64::INFINITY),
            max_concurrency: None,
            sharegpt_output_len: None,
            random_input_len: 10,
            random_output_len: 3,
            random_range_ratio: 1.0,
            num_prompts: 4,
        }
    }

    fn record(
        name: &str,
        k: usize,
        start: u64,
        dur: u64,
        reqs: Vec<(usize, RequestOutput)>,
    ) -> ShardRecord {
        ShardRecord {
            name: name.into(),
            server_info: Value::Null,
            block: ShardBlock {
                ran: Ran {
                    shard: Shard { index: k, count: 2 },
                    start_at_unix_ns: None,
                    start_unix_ns: start,
                    end_unix_ns: start + dur,
                },
                seed: 1,
                model: "m".into(),
                settings: settings(),
                accept_length: None,
                turns: 1,
                requests: reqs
                    .into_iter()
                    .map(|(index, output)| ShardRequest {
                        index,
                        round: 0,
                        retokenized: output.output_len,
                        output,
                    })
                    .collect(),
            },
        }
    }

    /// Two shards of four requests against the one process that would have sent them all:
    /// the same outputs on the common base, the same metrics.
    #[test]
    fn two_shards_are_the_single_run() {
        let s = 1_000_000_000u64;
        let (a, b, c, d) = (
            out(0, 0.010, &[0.002, 0.003], 0.020),
            out(5_000_000, 0.011, &[0.002, 0.002], 0.021),
            out(1_000_000, 0.012, &[0.004, 0.001], 0.030),
            out(9_000_000, 0.013, &[0.003, 0.003], 0.025),
        );
        // Shard 1 started 2 ms after shard 0: its requests' starts move 2 ms later.
        let shifted = |o: &RequestOutput| RequestOutput {
            start_ns: o.start_ns + 2_000_000,
            ..o.clone()
        };
        let shards = [
            record(
                "one",
                1,
                s + 2_000_000,
                40_000_000,
                vec![(1, b.clone()), (3, d.clone())],
            ),
            record(
                "zero",
                0,
                s,
                30_000_000,
                vec![(0, a.clone()), (2, c.clone())],
            ),
        ];
        let m = merge(&shards).unwrap();
        let whole = vec![a, shifted(&b), c, shifted(&d)];
        assert_eq!(m.outputs, whole);
        assert_eq!(m.retokenized, [3, 3, 3, 3]);
        // The window: earliest start to latest end (shard 1's: 2 + 40 ms).
        assert_eq!(m.duration_s, 0.042);
        assert_eq!(m.metrics, metrics::compute(&whole, &[3, 3, 3, 3], 0.042));
        assert_eq!(m.first.name, "zero");
        assert_eq!(m.extras["merged_from"][1]["start_offset_ms"], 2.0);
        assert!(m.warnings.is_empty());
    }

    /// Multi-turn rows: a row's rounds share its index and are kept each once, in row and
    /// round order; the totals count no dataset input, as a single run's do.
    #[test]
    fn a_rows_rounds_merge_once_each() {
        let s = 1_000_000_000u64;
        let o = |start: u64| RequestOutput {
            prompt_len: 10 + start / 1_000_000,
            ..out(start, 0.010, &[0.002], 0.020)
        };
        let turns = |mut r: ShardRecord, rounds: &[usize]| {
            r.block.turns = 2;
            for (q, &round) in r.block.requests.iter_mut().zip(rounds) {
                q.round = round;
            }
            r
        };
        let shards = [
            turns(
                record("zero", 0, s, 30_000_000, vec![(0, o(1_000_000)), (0, o(0))]),
                &[1, 0],
            ),
            turns(
                record(
                    "one",
                    1,
                    s,
                    30_000_000,
                    vec![(1, o(2_000_000)), (1, o(3_000_000))],
                ),
                &[0, 1],
            ),
        ];
        let m = merge(&shards).unwrap();
        let starts: Vec<u64> = m.outputs.iter().map(|x| x.start_ns).collect();
        assert_eq!(starts, [0, 1_000_000, 2_000_000, 3_000_000]);
        assert_eq!((m.metrics.completed, m.metrics.total_input), (4, 0));
        assert_eq!(m.extras["multi_turn_input_tokens"], 10 + 11 + 12 + 13);
        // One (row, round) twice is refused; so is a shard of a one-turn run beside them.
        let mut twice = shards.clone();
        twice[1].block.requests[1].round = 0;
        assert!(merge(&twice)
            .unwrap_err()
            .contains("request 1 (round 0) appears twice"));
        let mut single = shards.clone();
        single[1].block.turns = 1;
        assert!(merge(&single).unwrap_err().contains("--gsp-num-turns"));
    }

    #[test]
    fn shards_of_different_runs_are_refused() {
        let r = |name: &str, k: usize, idx: usize| {
            record(name, k, 1, 1, vec![(idx, out(0, 0.1, &[], 0.1))])
        };
        let mut other = r("b", 1, 1);
        other.block.seed = 2;
        assert!(merge(&[r("a", 0, 0), other])
            .unwrap_err()
            .contains("--seed"));
        let mut other = r("b", 1, 1);
        other.block.settings.max_concurrency = Some(3);
        assert!(merge(&[r("a", 0, 0), other])
            .unwrap_err()
            .contains("settings"));
        assert!(merge(&[r("a", 0, 0), r("b", 1, 2)])
            .unwrap_err()
            .contains("does not belong to shard 1/2"));
        assert!(merge(&[r("a", 0, 0)])
            .unwrap_err()
            .contains("missing shard(s) 1/2"));
    }

    #[test]
    fn the_block_is_found_in_a_line_with_pythons_infinity() {
        let b = record("x", 0, 5, 5, vec![(0, out(0, 0.1, &[0.2], 0.3))]).block;
        let line = format!(
            "{{\"request_rate\": Infinity, \"server_info\": {{\"model_path\": \"p\"}}, \"generated_texts\": [\"\\\"llmspeed\\\": 1\"], \"llmspeed\": {}}}",
            json!({"version": "x", "shard": b.to_json()})
        );
        let text = format!("{{\"not\": \"a shard\"}}\n{line}\n");
        let r = read_shard("f", &text).unwrap().unwrap();
        assert_eq!(r.block, b);
        assert_eq!(r.server_info, json!({"model_path": "p"}));
        assert!(read_shard("f", "{\"llmspeed\": {\"version\": 1}}\n").is_none());
        assert!(read_shard("f", "{\"a\": 1}").is_none());
    }
}
