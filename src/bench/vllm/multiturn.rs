//! `--multi-turn` (vllm-bench's): synthetic or ShareGPT conversations sent turn after turn on
//! the chat endpoint, each turn's `messages` carrying the conversation so far (the user
//! messages and the answers the server actually generated), with figures over all turns and per
//! turn in vllm-bench's result shape (`mode: "multi_turn"`, `per_turn`).
//!
//! Owns the conversation loop (one task per conversation, at most `--multi-turn-concurrency`
//! requests in flight, `--multi-turn-delay-ms` of think time between turns, a conversation
//! stops at its first failed turn; a stop (Ctrl-C, SIGTERM) ends every conversation, and the
//! turns it cut or left unsent are counted apart, never as failures) and the result JSON. The
//! conversations themselves are
//! `bench::engine::conversation`; figures are `bench::vllm::metrics` over the turns' records. Nothing here
//! runs per token.

use crate::bench::engine::connect::{client_for, resolve_model};
use crate::bench::engine::conversation::{
    generate, messages, sharegpt, Conversation, MultiTurnConfig,
};
use crate::bench::engine::error::{unless_stopped, RunError};
use crate::bench::engine::lora;
use crate::bench::engine::record::{
    LatencyOrigin, RecordOptions, RequestEnd, RequestRecord, TtftPredicate,
};
use crate::bench::engine::run::{stop_fate, StopFate};
use crate::bench::vllm::args::ServeConfig;
use crate::bench::vllm::metrics::{compute, metric_values, BenchMetrics, MetricsConfig};
use crate::bench::vllm::{plan, spec_decode};
use crate::clock::Clock;
use crate::net::{Cancel, Client, NoopObserver, StreamRequest};
use crate::workload::datasets::DatasetKind;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// One finished turn.
struct TurnDone {
    turn: usize,
    record: RequestRecord,
}

/// One conversation as it ended: on its own, or by the stop.
struct ConvDone {
    /// The turns that ran to their own end (success or the server's failure).
    turns: Vec<TurnDone>,
    all_success: bool,
    duration_ns: u64,
    /// What the stop did to it, `None` when it ended on its own.
    stopped: Option<Stopped>,
}

/// A conversation the stop ended: a turn in flight cut short, and the turns never sent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Stopped {
    cut: bool,
    unsent: usize,
}

impl ConvDone {
    /// Ended on its own: every turn, or up to its first failed one.
    fn finished(&self) -> bool {
        self.stopped.is_none()
    }

    /// The stop came before any of its turns was sent.
    fn unsent(&self) -> bool {
        self.stopped.is_some_and(|s| !s.cut) && self.turns.is_empty()
    }
}

/// Runs the multi-turn benchmark and returns its result JSON (also printed to `out` as a
/// short summary).
pub async fn run(
    cfg: &ServeConfig,
    mt: &MultiTurnConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    out: &mut (dyn Write + Send),
) -> Result<Value, RunError> {
    if !cfg.conn.chat() {
        return Err(RunError::Setup(
            "--multi-turn sends conversations: use --backend openai-chat".into(),
        ));
    }
    let plan = plan::of(cfg);
    let client = client_for(&plan, clock.clone())?;
    let ready = resolve_model(&plan, &client, log);
    let model = unless_stopped(cancel, crate::bench::engine::run::READY, ready).await?;
    let request_model = cfg.conn.served_model_name.clone().unwrap_or(model.clone());
    let convs = conversations(cfg, mt)?;
    let total_turns: usize = convs.iter().map(|c| c.turns.len()).sum();
    let concurrency = mt
        .concurrency
        .or(cfg.max_concurrency)
        .unwrap_or(convs.len())
        .max(1);
    let _ = writeln!(
        log,
        "multi-turn: {} conversations, {total_turns} turns, concurrency {concurrency}, think time {} ms",
        convs.len(),
        mt.delay_ms
    );
    // As vllm-bench: one adapter per conversation, sticky across its turns.
    let lora = lora::assign(
        cfg.lora_modules.len(),
        cfg.lora_assignment,
        convs.len(),
        cfg.dataset.seed,
    );
    let spec_before = spec_decode::counters(&client).await;
    let base_raw = clock.raw();
    let talk = Arc::new(Talk {
        client: client.clone(),
        slots: Arc::new(Semaphore::new(concurrency)),
        cancel: cancel.clone(),
        cfg: cfg.clone(),
        delay: Duration::from_millis(mt.delay_ms),
        no_history: mt.no_history(),
        opts: RecordOptions {
            base_raw,
            origin: LatencyOrigin::Sent,
            predicate: TtftPredicate::FirstChoice,
            end: RequestEnd::LastChoice,
        },
    });
    let mut set = tokio::task::JoinSet::new();
    for (i, c) in convs.into_iter().enumerate() {
        let model = match lora.get(i) {
            Some(&k) => cfg.lora_modules[k].clone(),
            None => request_model.clone(),
        };
        set.spawn(talk.clone().converse(i, c, model));
    }
    let mut done = Vec::new();
    while let Some(r) = set.join_next().await {
        done.push(r.map_err(|e| RunError::Setup(format!("a conversation task failed: {e}")))?);
    }
    let stop = cancel
        .is_cancelled()
        .then(|| StopTally::of(&done, total_turns));
    if let Some(s) = &stop {
        let _ = writeln!(
            log,
            "interrupted: {} turns cut short and {} never sent are left out of the figures",
            s.turns_cut, s.turns_unsent
        );
    }
    let duration_ns = clock.delta_ns(base_raw, clock.raw());
    let spec = match (spec_before, spec_decode::counters(&client).await) {
        (Some(b), Some(a)) => spec_decode::keys(&b, &a).unwrap_or_default(),
        _ => Vec::new(),
    };
    let mut v = result_json(cfg, mt, &model, concurrency, &done, duration_ns, spec);
    if let Some(s) = stop {
        v["llmspeed"] = json!({ "interrupted": s.json(cancel.reason()) });
    }
    write_summary(out, &v).map_err(|e| RunError::Save("stdout".into(), e))?;
    Ok(v)
}

/// The run's conversations: a ShareGPT file's, or synthetic ones.
fn conversations(cfg: &ServeConfig, mt: &MultiTurnConfig) -> Result<Vec<Conversation>, RunError> {
    let d = &cfg.dataset;
    match (&d.kind, &d.path) {
        (DatasetKind::ShareGpt, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| RunError::Setup(format!("cannot read {}: {e}", path.display())))?;
            // ShareGPT only consumes a cap on turns: 0 is every turn of the file.
            let cap = (mt.max_turns > 0).then_some(mt.max_turns);
            sharegpt(
                &text,
                d.num_prompts,
                d.sharegpt_output_len,
                cap,
                d.seed,
                cfg.request_ids.prefix(),
            )
            .map_err(|e| RunError::Setup(format!("{}: {e}", path.display())))
        }
        _ => Ok(generate(
            mt,
            d.num_prompts,
            d.random_input_len,
            d.random_output_len,
            d.random_prefix_len,
            d.seed,
            cfg.request_ids.prefix(),
        )),
    }
}

/// What every conversation's task shares.
struct Talk {
    client: Client,
    slots: Arc<Semaphore>,
    cancel: Cancel,
    cfg: ServeConfig,
    /// Think time between a conversation's turns.
    delay: Duration,
    /// vllm-bench's prefix-sharing mode: each turn sent alone.
    no_history: bool,
    opts: RecordOptions,
}

impl Talk {
    /// Conversation `i`, turn after turn, until its last turn or its first failed one.
    async fn converse(self: Arc<Self>, i: usize, c: Conversation, model: String) -> ConvDone {
        let clock = self.client.clock().clone();
        let start = clock.raw();
        let mut history: Vec<(String, String)> = Vec::new();
        let mut turns = Vec::new();
        let mut all_success = true;
        let mut stopped = None;
        let n = c.turns.len();
        for (t, (user, out_len)) in c.turns.iter().enumerate() {
            if self.cancel.is_cancelled() {
                stopped = Some(Stopped {
                    cut: false,
                    unsent: n - t,
                });
                break;
            }
            let body = self.body(&model, c.system.as_deref(), &history, user, *out_len);
            let req = StreamRequest {
                header: None,
                path: self.cfg.conn.endpoint.clone(),
                body: Bytes::from(body.to_string()),
                dialect: crate::net::Dialect::OpenAi,
                expected_events: *out_len as usize + 8,
                // The answer is the next turn's history.
                keep_text: Some(true),
                request_id: Some(self.cfg.request_ids.turn(i, t)),
            };
            let permit = self.slots.clone().acquire_owned().await;
            let sent = clock.raw();
            let tl = self
                .client
                .stream(&req, sent, &mut NoopObserver, &self.cancel)
                .await;
            drop(permit);
            // A turn the stop cut or never sent is not the server's failure.
            let fate = stop_fate(&tl);
            if fate != StopFate::Ran {
                let cut = fate == StopFate::Cut;
                stopped = Some(Stopped {
                    cut,
                    unsent: n - t - usize::from(cut),
                });
                break;
            }
            let input = tl.usage.map(|u| u.prompt_tokens).unwrap_or(0);
            let record = RequestRecord::from_timeline(&tl, &clock, &self.opts, input, 0);
            let ok = record.is_success();
            turns.push(TurnDone { turn: t, record });
            if !ok {
                all_success = false;
                break;
            }
            // No-history mode sends each turn alone (vllm-bench's prefix sharing).
            if !self.no_history {
                history.push((user.clone(), tl.content_text.unwrap_or_default()));
            }
            if !self.delay.is_zero() && t + 1 < n {
                // Think time ends early at a stop (the next turn then sees it).
                tokio::select! {
                    _ = tokio::time::sleep(self.delay) => {}
                    _ = self.cancel.cancelled() => {}
                }
            }
        }
        ConvDone {
            turns,
            all_success,
            duration_ns: clock.delta_ns(start, clock.raw()),
            stopped,
        }
    }

    /// One turn's chat body, as vllm-bench sends it.
    fn body(
        &self,
        model: &str,
        system: Option<&str>,
        history: &[(String, String)],
        user: &str,
        out_len: u32,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert("messages".into(), messages(system, history, user));
        body.insert("max_completion_tokens".into(), json!(out_len));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if self.cfg.ignore_eos {
            body.insert("ignore_eos".into(), json!(true));
        } else {
            // vllm-bench's rule: without ignore_eos, ask for the length anyway.
            body.insert("min_tokens".into(), json!(out_len));
        }
        for (k, v) in &self.cfg.extra {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }
}

/// The figures of some records, flat, as vllm-bench writes them.
fn figures(m: &BenchMetrics, cfg: &ServeConfig, into: &mut Map<String, Value>) {
    let d = m.duration_s.max(f64::MIN_POSITIVE);
    into.insert("completed".into(), json!(m.completed));
    into.insert("failed".into(), json!(m.failed));
    into.insert("total_input_tokens".into(), json!(m.total_input_tokens));
    into.insert("total_output_tokens".into(), json!(m.total_output_tokens));
    into.insert("request_throughput".into(), json!(m.request_throughput));
    into.insert(
        "input_throughput".into(),
        json!(m.total_input_tokens as f64 / d),
    );
    into.insert("output_throughput".into(), json!(m.output_throughput));
    into.insert(
        "total_token_throughput".into(),
        json!(m.total_token_throughput),
    );
    for (k, v) in metric_values(m, &cfg.metrics) {
        into.insert(k, json!(v));
    }
}

fn result_json(
    cfg: &ServeConfig,
    mt: &MultiTurnConfig,
    model: &str,
    concurrency: usize,
    done: &[ConvDone],
    duration_ns: u64,
    spec: Vec<(String, Value)>,
) -> Value {
    let mc = MetricsConfig {
        percentiles: cfg.percentiles.clone(),
        goodput: cfg.goodput,
    };
    let all: Vec<RequestRecord> = done
        .iter()
        .flat_map(|c| c.turns.iter().map(|t| t.record.clone()))
        .collect();
    let overall = compute(&all, duration_ns, &mc);
    // Conversation figures cover those that ended on their own; turn figures every turn that
    // did (a stopped conversation's earlier turns included).
    let ended: Vec<&ConvDone> = done.iter().filter(|c| c.finished()).collect();
    let n = ended.len().max(1) as f64;
    let mut r = Map::new();
    r.insert(
        "date".into(),
        json!(crate::bench::vllm::result::format_date(
            std::time::SystemTime::now()
        )),
    );
    r.insert("mode".into(), json!("multi_turn"));
    r.insert("backend".into(), json!(cfg.conn.backend.as_str()));
    r.insert("model_id".into(), json!(model));
    r.insert("num_conversations".into(), json!(ended.len()));
    r.insert("turns_per_conversation".into(), json!(mt.num_turns));
    r.insert("multi_turn_concurrency".into(), json!(concurrency));
    r.insert("inter_turn_delay_ms".into(), json!(mt.delay_ms));
    if mt.no_history() {
        r.insert("prefix_global_ratio".into(), json!(mt.prefix_global_ratio));
        r.insert(
            "prefix_conversation_ratio".into(),
            json!(mt.prefix_conversation_ratio),
        );
        r.insert(
            "prefix_unique_ratio".into(),
            json!((1.0 - mt.prefix_global_ratio - mt.prefix_conversation_ratio).max(0.0)),
        );
    }
    r.insert("duration".into(), json!(overall.duration_s));
    r.insert(
        "conversations_completed".into(),
        json!(ended.iter().filter(|c| c.all_success).count()),
    );
    r.insert(
        "conversations_failed".into(),
        json!(ended.iter().filter(|c| !c.all_success).count()),
    );
    r.insert(
        "avg_turns_completed".into(),
        json!(
            ended
                .iter()
                .map(|c| c.turns.iter().filter(|t| t.record.is_success()).count())
                .sum::<usize>() as f64
                / n
        ),
    );
    r.insert(
        "avg_conversation_duration_ms".into(),
        json!(
            ended
                .iter()
                .map(|c| c.duration_ns as f64 / 1e6)
                .sum::<f64>()
                / n
        ),
    );
    figures(&overall, cfg, &mut r);
    for (k, v) in spec {
        r.insert(k, v);
    }
    let max_turns = done.iter().map(|c| c.turns.len()).max().unwrap_or(0);
    let per_turn: Vec<Value> = (0..max_turns)
        .map(|t| {
            let recs: Vec<RequestRecord> = done
                .iter()
                .flat_map(|c| c.turns.iter().filter(|x| x.turn == t))
                .map(|x| x.record.clone())
                .collect();
            let m = compute(&recs, duration_ns, &mc);
            let mut o = Map::new();
            o.insert("turn_index".into(), json!(t));
            o.insert("num_samples".into(), json!(recs.len()));
            figures(&m, cfg, &mut o);
            Value::Object(o)
        })
        .collect();
    r.insert("per_turn".into(), Value::Array(per_turn));
    Value::Object(r)
}

/// What a stop left of the run: conversations and turns planned, ended on their own, cut short
/// and never sent. Conversations: finished + cut + unsent = planned. Turns: finished + cut +
/// unsent = planned, less the turns a conversation never sends after its first failed turn.
#[derive(Debug, PartialEq)]
struct StopTally {
    conversations_planned: usize,
    conversations_finished: usize,
    conversations_cut: usize,
    conversations_unsent: usize,
    turns_planned: usize,
    turns_finished: usize,
    turns_cut: usize,
    turns_unsent: usize,
}

impl StopTally {
    fn of(done: &[ConvDone], turns_planned: usize) -> StopTally {
        let stops = || done.iter().filter_map(|c| c.stopped);
        let unsent = done.iter().filter(|c| c.unsent()).count();
        let finished = done.iter().filter(|c| c.finished()).count();
        StopTally {
            conversations_planned: done.len(),
            conversations_finished: finished,
            conversations_cut: done.len() - finished - unsent,
            conversations_unsent: unsent,
            turns_planned,
            turns_finished: done.iter().map(|c| c.turns.len()).sum(),
            turns_cut: stops().filter(|s| s.cut).count(),
            turns_unsent: stops().map(|s| s.unsent).sum(),
        }
    }

    fn json(&self, signal: Option<&str>) -> Value {
        json!({
            "signal": signal,
            "conversations_planned": self.conversations_planned,
            "conversations_finished": self.conversations_finished,
            "conversations_cut": self.conversations_cut,
            "conversations_unsent": self.conversations_unsent,
            "turns_planned": self.turns_planned,
            "turns_finished": self.turns_finished,
            "turns_cut": self.turns_cut,
            "turns_unsent": self.turns_unsent,
        })
    }
}

/// A short console summary: the overall figures and mean TTFT and input tokens per turn.
fn write_summary(w: &mut (dyn Write + Send), v: &Value) -> std::io::Result<()> {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    writeln!(w, "{:=^50}", " Multi-Turn Benchmark Result ")?;
    writeln!(
        w,
        "{:<40} {}",
        "Conversations completed:", v["conversations_completed"]
    )?;
    writeln!(
        w,
        "{:<40} {}",
        "Conversations failed:", v["conversations_failed"]
    )?;
    writeln!(w, "{:<40} {}", "Successful turns:", v["completed"])?;
    writeln!(
        w,
        "{:<40} {:<10.2}",
        "Benchmark duration (s):",
        f("duration")
    )?;
    writeln!(
        w,
        "{:<40} {:<10.2}",
        "Output token throughput (tok/s):",
        f("output_throughput")
    )?;
    writeln!(w, "{:<40} {:<10.2}", "Mean TTFT (ms):", f("mean_ttft_ms"))?;
    if let Some(turns) = v["per_turn"].as_array() {
        writeln!(w, "{:-^50}", "Per Turn")?;
        for t in turns {
            writeln!(
                w,
                "turn {:<3} {:>4} ok  input {:>8} tok  mean TTFT {:>9.2} ms",
                t["turn_index"],
                t["completed"],
                t["total_input_tokens"],
                t["mean_ttft_ms"].as_f64().unwrap_or(0.0)
            )?;
        }
    }
    writeln!(w, "{}", "=".repeat(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(turns: usize, all_success: bool, stopped: Option<Stopped>) -> ConvDone {
        ConvDone {
            turns: (0..turns)
                .map(|turn| TurnDone {
                    turn,
                    record: RequestRecord::default(),
                })
                .collect(),
            all_success,
            duration_ns: 1,
            stopped,
        }
    }

    /// Five conversations of 3 turns, stopped: one whole, one ended at its failed second turn,
    /// one cut in its third turn, one stopped in its think time after its first turn, one never
    /// started.
    #[test]
    fn a_stop_counts_every_conversation_and_turn_once() {
        let stop = |cut, unsent| Some(Stopped { cut, unsent });
        let done = [
            conv(3, true, None),
            conv(2, false, None),
            conv(2, false, stop(true, 0)),
            conv(1, false, stop(false, 2)),
            conv(0, false, stop(false, 3)),
        ];
        let t = StopTally::of(&done, 15);
        assert_eq!(
            t,
            StopTally {
                conversations_planned: 5,
                conversations_finished: 2,
                conversations_cut: 2,
                conversations_unsent: 1,
                turns_planned: 15,
                turns_finished: 8,
                turns_cut: 1,
                turns_unsent: 5,
            }
        );
        // The failed conversation's third turn was never due: 15 = 8 + 1 + 5 + 1.
        assert_eq!(
            t.turns_planned,
            t.turns_finished + t.turns_cut + t.turns_unsent + 1
        );
        // A conversation whose only sent turn was cut is cut, not unsent.
        assert!(!conv(0, false, stop(true, 2)).unsent());
        assert_eq!(t.json(Some("SIGINT"))["signal"], "SIGINT");
    }
}
