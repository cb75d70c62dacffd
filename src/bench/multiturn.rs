//! `--multi-turn` (vllm-bench's): synthetic or ShareGPT conversations sent turn after turn on
//! the chat endpoint, each turn's `messages` carrying the conversation so far (the user
//! messages and the answers the server actually generated), with figures over all turns and per
//! turn in vllm-bench's result shape (`mode: "multi_turn"`, `per_turn`).
//!
//! Owns the conversations (pure: [`generate`], [`sharegpt`], [`messages`]), the conversation loop (one task
//! per conversation, at most `--multi-turn-concurrency` requests in flight, `--multi-turn-
//! delay-ms` of think time between turns, a conversation stops at its first failed turn) and
//! the result JSON. Figures are `bench::metrics` over the turns' records. Nothing here runs per
//! token.
//!
//! Every conversation starts with the same system message of `--random-prefix-len` tokens
//! (when > 0): the shared prefix a server's prefix cache can reuse across conversations, and
//! within a conversation each turn's prompt starts with the whole previous turn's prompt and
//! answer.

use crate::bench::args::ServeConfig;
use crate::bench::lora;
use crate::bench::metrics::{
    compute, metric_values, BenchMetrics, LatencyOrigin, MetricsConfig, RecordOptions, RequestEnd,
    RequestRecord, TtftPredicate,
};
use crate::bench::run::RunError;
use crate::clock::Clock;
use crate::net::{Cancel, NoopObserver, StreamRequest};
use crate::workload::datasets::{self, DatasetKind};
use crate::workload::prose::{Prompt, PromptBuilder};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// `--multi-turn*` flags, with vllm-bench's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiTurnConfig {
    /// `--multi-turn-num-turns` (3).
    pub num_turns: usize,
    /// `--multi-turn-min-turns` (0: `num_turns`).
    pub min_turns: usize,
    /// `--multi-turn-max-turns` (0: `num_turns`).
    pub max_turns: usize,
    /// `--multi-turn-concurrency` (default `--max-concurrency`, else every conversation).
    pub concurrency: Option<usize>,
    /// `--multi-turn-delay-ms`: think time between a conversation's turns.
    pub delay_ms: u64,
    /// `--multi-turn-prefix-global-ratio`: the share of each user message that is the same in
    /// every conversation. With the next, > 0 turns on vllm-bench's no-history mode.
    pub prefix_global_ratio: f64,
    /// `--multi-turn-prefix-conversation-ratio`: the share the same within a conversation.
    pub prefix_conversation_ratio: f64,
}

impl MultiTurnConfig {
    /// vllm-bench's prefix-sharing mode: each turn sends only its own message (no earlier
    /// turns, no answers), built as [global][conversation][unique] parts.
    pub fn no_history(&self) -> bool {
        self.prefix_global_ratio > 0.0 || self.prefix_conversation_ratio > 0.0
    }
}

/// One synthetic conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    pub id: String,
    /// The shared system message (the same `Arc` in every conversation), if any.
    pub system: Option<Arc<str>>,
    /// Each turn's user message and the output tokens to ask for.
    pub turns: Vec<(String, u32)>,
}

/// Words for about `tokens` tokens of prose (1.3 tokens a word, as elsewhere).
fn prose(seed: u64, tokens: u32) -> String {
    let words = ((tokens as f64 / 1.3).round() as usize).max(1);
    match PromptBuilder::bare(seed).build(words) {
        Prompt::Text(t) => t,
        // Bare builders only make text; an empty message is the harmless fallback.
        _ => String::new(),
    }
}

/// `n` conversations: turns per conversation uniform in `[min, max]` turns (seeded), user
/// messages of about `input_len` tokens, `output_len` tokens asked per turn.
pub fn generate(
    mt: &MultiTurnConfig,
    n: usize,
    input_len: u32,
    output_len: u32,
    prefix_len: u32,
    seed: u64,
    id_prefix: &str,
) -> Vec<Conversation> {
    let lo = if mt.min_turns == 0 {
        mt.num_turns
    } else {
        mt.min_turns
    };
    let hi = if mt.max_turns == 0 {
        mt.num_turns
    } else {
        mt.max_turns
    }
    .max(lo);
    let system: Option<Arc<str>> =
        (prefix_len > 0).then(|| prose(seed ^ 0x5359_5354_454D, prefix_len).into());
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4D54_5552_4E53);
    // No-history mode: vllm-bench's part lengths, floors of the message length.
    let (global_len, conv_len) = if mt.no_history() {
        (
            (input_len as f64 * mt.prefix_global_ratio).floor() as u32,
            (input_len as f64 * mt.prefix_conversation_ratio).floor() as u32,
        )
    } else {
        (0, 0)
    };
    let unique_len = input_len.saturating_sub(global_len + conv_len).max(1);
    let part = |s: u64, len: u32| {
        if len > 0 {
            prose(s, len) + " "
        } else {
            String::new()
        }
    };
    let global = part(seed ^ 0x474C_4F42_414C, global_len);
    (0..n)
        .map(|c| {
            let k = rng.gen_range(lo..=hi);
            let shared = format!(
                "{global}{}",
                part(seed ^ 0x434F_4E56 ^ ((c as u64) << 24), conv_len)
            );
            Conversation {
                id: format!("{id_prefix}conv{c}"),
                system: system.clone(),
                turns: (0..k)
                    .map(|t| {
                        let s = seed ^ ((c as u64) << 20 | t as u64).wrapping_mul(0x9E37_79B9);
                        (format!("{shared}{}", prose(s, unique_len)), output_len)
                    })
                    .collect(),
            }
        })
        .collect()
}

/// `n` conversations from a ShareGPT file (vllm-bench's `--dataset-name sharegpt --multi-turn`):
/// entries with at least 4 messages, shuffled (seeded); each human message followed by a
/// reply is a turn (a non-human or empty message is skipped), at most `max_turns` turns; a
/// conversation with fewer than 2 turns is dropped; fewer usable conversations than `n` are
/// repeated at random. The file's replies are never sent (the server's own answers are
/// carried): only their length is used, as the turn's output length, unless `output_len`
/// (`--sharegpt-output-len`) fixes it. That length is [`datasets::estimate_tokens`] (at least
/// 1), where vllm-bench tokenizes: this tool has no local tokenizer.
pub fn sharegpt(
    text: &str,
    n: usize,
    output_len: Option<u32>,
    max_turns: Option<usize>,
    seed: u64,
    id_prefix: &str,
) -> Result<Vec<Conversation>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let list = v
        .as_array()
        .ok_or("expected a JSON list of conversations")?;
    let mut entries: Vec<&Vec<Value>> = list
        .iter()
        .filter_map(|e| e.get("conversations")?.as_array())
        .filter(|c| c.len() >= 4)
        .collect();
    if entries.is_empty() {
        return Err("no entry with at least 4 messages (2 turns)".into());
    }
    let mut rng = StdRng::seed_from_u64(seed);
    rand::seq::SliceRandom::shuffle(entries.as_mut_slice(), &mut rng);
    let field = |m: &Value, k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out: Vec<Conversation> = Vec::new();
    for msgs in entries {
        if out.len() >= n {
            break;
        }
        let mut turns = Vec::new();
        let mut i = 0;
        while i + 1 < msgs.len() && max_turns.is_none_or(|m| turns.len() < m) {
            let user = field(&msgs[i], "value");
            if field(&msgs[i], "from") != "human" || user.is_empty() {
                i += 1;
                continue;
            }
            let reply = field(&msgs[i + 1], "value");
            let len = output_len.unwrap_or_else(|| {
                u32::try_from(datasets::estimate_tokens(&reply))
                    .unwrap_or(u32::MAX)
                    .max(1)
            });
            turns.push((user, len));
            i += 2;
        }
        if turns.len() >= 2 {
            out.push(Conversation {
                id: format!("{id_prefix}conv{}", out.len()),
                system: None,
                turns,
            });
        }
    }
    if out.is_empty() {
        return Err("no conversation with at least 2 human turns followed by a reply".into());
    }
    let have = out.len();
    while out.len() < n {
        let mut c = out[rng.gen_range(0..have)].clone();
        c.id = format!("{id_prefix}conv{}", out.len());
        out.push(c);
    }
    Ok(out)
}

/// The `messages` of a turn: the system message, then each earlier turn's user message and
/// the server's answer, then this turn's user message (vllm-bench's content shapes).
pub fn messages(system: Option<&str>, history: &[(String, String)], user: &str) -> Value {
    let mut m = Vec::with_capacity(2 * history.len() + 2);
    if let Some(s) = system {
        m.push(json!({"role": "system", "content": s}));
    }
    for (u, a) in history {
        m.push(json!({"role": "user", "content": [{"type": "text", "text": u}]}));
        m.push(json!({"role": "assistant", "content": a}));
    }
    m.push(json!({"role": "user", "content": [{"type": "text", "text": user}]}));
    Value::Array(m)
}

/// One finished turn.
struct TurnDone {
    turn: usize,
    record: RequestRecord,
}

/// One finished conversation.
struct ConvDone {
    turns: Vec<TurnDone>,
    all_success: bool,
    duration_ns: u64,
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
    if !cfg.backend.is_chat() {
        return Err(RunError::Setup(
            "--multi-turn sends conversations: use --backend openai-chat".into(),
        ));
    }
    let client = crate::bench::run::client_for(cfg, clock.clone())?;
    let model = crate::bench::run::resolve_model(cfg, &client, log).await?;
    let request_model = cfg.served_model_name.clone().unwrap_or(model.clone());
    let d = &cfg.dataset;
    let convs = match (&d.kind, &d.path) {
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
            .map_err(|e| RunError::Setup(format!("{}: {e}", path.display())))?
        }
        _ => generate(
            mt,
            d.num_prompts,
            d.random_input_len,
            d.random_output_len,
            d.random_prefix_len,
            d.seed,
            cfg.request_ids.prefix(),
        ),
    };
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
        d.seed,
    );
    let spec_before = crate::bench::run::spec_decode_counters(&client).await;
    let slots = Arc::new(Semaphore::new(concurrency));
    let base_raw = clock.raw();
    let opts = RecordOptions {
        base_raw,
        origin: LatencyOrigin::Sent,
        predicate: TtftPredicate::FirstChoice,
        end: RequestEnd::LastChoice,
    };
    let mut set = tokio::task::JoinSet::new();
    for (i, c) in convs.into_iter().enumerate() {
        let model = match lora.get(i) {
            Some(&k) => cfg.lora_modules[k].clone(),
            None => request_model.clone(),
        };
        let (client, slots, cancel) = (client.clone(), slots.clone(), cancel.clone());
        let request_ids = cfg.request_ids.clone();
        let (endpoint, extra, ignore_eos) =
            (cfg.endpoint.clone(), cfg.extra.clone(), cfg.ignore_eos);
        let delay = Duration::from_millis(mt.delay_ms);
        let no_history = mt.no_history();
        set.spawn(async move {
            let clock = client.clock().clone();
            let start = clock.raw();
            let mut history: Vec<(String, String)> = Vec::new();
            let mut turns = Vec::new();
            let mut all_success = true;
            let n = c.turns.len();
            for (t, (user, out_len)) in c.turns.iter().enumerate() {
                if cancel.is_cancelled() {
                    all_success = false;
                    break;
                }
                let mut body = Map::new();
                body.insert("model".into(), json!(model));
                body.insert(
                    "messages".into(),
                    messages(c.system.as_deref(), &history, user),
                );
                body.insert("max_completion_tokens".into(), json!(out_len));
                body.insert("stream".into(), json!(true));
                body.insert("stream_options".into(), json!({"include_usage": true}));
                if ignore_eos {
                    body.insert("ignore_eos".into(), json!(true));
                } else {
                    // vllm-bench's rule: without ignore_eos, ask for the length anyway.
                    body.insert("min_tokens".into(), json!(out_len));
                }
                for (k, v) in &extra {
                    body.insert(k.clone(), v.clone());
                }
                let req = StreamRequest {
                    path: endpoint.clone(),
                    body: Bytes::from(Value::Object(body).to_string()),
                    dialect: crate::net::Dialect::OpenAi,
                    expected_events: *out_len as usize + 8,
                    // The answer is the next turn's history.
                    keep_text: Some(true),
                    request_id: Some(request_ids.turn(i, t)),
                };
                let permit = slots.clone().acquire_owned().await;
                let sent = clock.raw();
                let tl = client.stream(&req, sent, &mut NoopObserver, &cancel).await;
                drop(permit);
                let input = tl.usage.map(|u| u.prompt_tokens).unwrap_or(0);
                let record = RequestRecord::from_timeline(&tl, &clock, &opts, input, 0);
                let ok = record.is_success();
                turns.push(TurnDone { turn: t, record });
                if !ok {
                    all_success = false;
                    break;
                }
                // No-history mode sends each turn alone (vllm-bench's prefix sharing).
                if !no_history {
                    history.push((user.clone(), tl.content_text.unwrap_or_default()));
                }
                if !delay.is_zero() && t + 1 < n {
                    tokio::time::sleep(delay).await;
                }
            }
            ConvDone {
                turns,
                all_success,
                duration_ns: clock.delta_ns(start, clock.raw()),
            }
        });
    }
    let mut done = Vec::new();
    while let Some(r) = set.join_next().await {
        done.push(r.map_err(|e| RunError::Setup(format!("a conversation task failed: {e}")))?);
    }
    let duration_ns = clock.delta_ns(base_raw, clock.raw());
    let spec = match (
        spec_before,
        crate::bench::run::spec_decode_counters(&client).await,
    ) {
        (Some(b), Some(a)) => crate::bench::spec_decode::keys(&b, &a).unwrap_or_default(),
        _ => Vec::new(),
    };
    let v = result_json(cfg, mt, &model, concurrency, &done, duration_ns, spec);
    write_summary(out, &v).map_err(|e| RunError::Save("stdout".into(), e))?;
    Ok(v)
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
    let n = done.len().max(1) as f64;
    let mut r = Map::new();
    r.insert(
        "date".into(),
        json!(crate::bench::result::format_date(
            std::time::SystemTime::now()
        )),
    );
    r.insert("mode".into(), json!("multi_turn"));
    r.insert("backend".into(), json!(cfg.backend.as_str()));
    r.insert("model_id".into(), json!(model));
    r.insert("num_conversations".into(), json!(done.len()));
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
        json!(done.iter().filter(|c| c.all_success).count()),
    );
    r.insert(
        "conversations_failed".into(),
        json!(done.iter().filter(|c| !c.all_success).count()),
    );
    r.insert(
        "avg_turns_completed".into(),
        json!(
            done.iter()
                .map(|c| c.turns.iter().filter(|t| t.record.is_success()).count())
                .sum::<usize>() as f64
                / n
        ),
    );
    r.insert(
        "avg_conversation_duration_ms".into(),
        json!(done.iter().map(|c| c.duration_ns as f64 / 1e6).sum::<f64>() / n),
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

    fn mt() -> MultiTurnConfig {
        MultiTurnConfig {
            num_turns: 3,
            min_turns: 0,
            max_turns: 0,
            concurrency: None,
            delay_ms: 0,
            prefix_global_ratio: 0.0,
            prefix_conversation_ratio: 0.0,
        }
    }

    #[test]
    fn no_history_messages_share_a_global_and_a_conversation_part() {
        let ps = MultiTurnConfig {
            prefix_global_ratio: 0.25,
            prefix_conversation_ratio: 0.25,
            ..mt()
        };
        assert!(ps.no_history() && !mt().no_history());
        let a = generate(&ps, 3, 80, 8, 0, 7, "");
        // The words common to the start of two messages.
        let common = |x: &str, y: &str| {
            x.split(' ')
                .zip(y.split(' '))
                .take_while(|(p, q)| p == q)
                .count()
        };
        let words = |x: &str| x.split(' ').count();
        let (m00, m01, m10) = (&a[0].turns[0].0, &a[0].turns[1].0, &a[1].turns[0].0);
        // 20 tokens each part at 1.3 tokens a word: about 15 words global, 15 per conversation,
        // 31 unique; the same conversation shares both parts, another only the global one.
        let within = common(m00, m01);
        let across = common(m00, m10);
        assert!((28..=32).contains(&within), "{within}: {m00} / {m01}");
        assert!((13..=17).contains(&across), "{across}: {m00} / {m10}");
        assert!((58..=64).contains(&words(m00)), "{}", words(m00));
        assert_eq!(common(&a[1].turns[0].0, &a[2].turns[1].0), across);
        // Without the ratios, messages share nothing.
        let b = generate(&mt(), 2, 80, 8, 0, 7, "");
        assert!(common(&b[0].turns[0].0, &b[0].turns[1].0) < 3);
    }

    fn msg(from: &str, value: &str) -> Value {
        json!({"from": from, "value": value})
    }

    #[test]
    fn sharegpt_takes_the_human_turns_and_the_reply_lengths() {
        let file = json!([
            // Three turns after a leading system message that is skipped.
            {"conversations": [msg("system", "be brief"), msg("human", "one"),
                msg("gpt", "12345678"), msg("human", "two"), msg("gpt", "123456789012"),
                msg("human", "three"), msg("gpt", "1")]},
            // One usable turn only: dropped.
            {"conversations": [msg("human", "a"), msg("gpt", "b"), msg("gpt", "c"),
                msg("gpt", "d")]},
            // Fewer than 4 messages: filtered out.
            {"conversations": [msg("human", "x"), msg("gpt", "y")]},
            {"no": "conversations"}
        ])
        .to_string();
        let c = sharegpt(&file, 1, None, None, 7, "p-").unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].id, "p-conv0");
        assert_eq!(c[0].system, None);
        // Replies of 8, 12 and 1 bytes: 2, 3 and 1 tokens at 4 bytes a token.
        let want: Vec<(String, u32)> =
            vec![("one".into(), 2), ("two".into(), 3), ("three".into(), 1)];
        assert_eq!(c[0].turns, want);
        // The cap stops the walk; a fixed output length replaces the replies' lengths.
        let c = sharegpt(&file, 1, Some(5), Some(2), 7, "").unwrap();
        assert_eq!(
            c[0].turns,
            vec![("one".to_string(), 5), ("two".to_string(), 5)]
        );
        // Too few conversations are repeated, renumbered.
        let c = sharegpt(&file, 3, None, None, 7, "").unwrap();
        let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["conv0", "conv1", "conv2"]);
        assert!(c.iter().all(|x| x.turns == want));
        assert!(sharegpt("{}", 1, None, None, 0, "").is_err());
        assert!(sharegpt("[{\"conversations\": []}]", 1, None, None, 0, "").is_err());
    }

    #[test]
    fn conversations_are_seeded_and_share_one_system_prefix() {
        let a = generate(&mt(), 4, 40, 8, 30, 7, "p-");
        assert_eq!(a, generate(&mt(), 4, 40, 8, 30, 7, "p-"));
        assert_ne!(a, generate(&mt(), 4, 40, 8, 30, 8, "p-"));
        assert!(a.iter().all(|c| c.turns.len() == 3));
        assert_eq!(a[2].id, "p-conv2");
        let s = a[0].system.clone().unwrap();
        assert!(a.iter().all(|c| c.system.as_deref() == Some(&*s)));
        // User messages differ across turns and conversations.
        assert_ne!(a[0].turns[0].0, a[0].turns[1].0);
        assert_ne!(a[0].turns[0].0, a[1].turns[0].0);
        assert!(generate(&mt(), 2, 40, 8, 0, 7, "")[0].system.is_none());
        let ranged = MultiTurnConfig {
            min_turns: 2,
            max_turns: 5,
            ..mt()
        };
        let lens: Vec<usize> = generate(&ranged, 60, 4, 1, 0, 1, "")
            .iter()
            .map(|c| c.turns.len())
            .collect();
        assert!(lens.iter().all(|l| (2..=5).contains(l)));
        assert!(lens.contains(&2) && lens.contains(&5), "{lens:?}");
    }

    #[test]
    fn a_turn_carries_the_conversation_so_far() {
        let h = vec![
            ("u0".to_string(), "a0".to_string()),
            ("u1".into(), "a1".into()),
        ];
        let m = messages(Some("sys"), &h, "u2");
        assert_eq!(
            m,
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "u0"}]},
                {"role": "assistant", "content": "a0"},
                {"role": "user", "content": [{"type": "text", "text": "u1"}]},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": [{"type": "text", "text": "u2"}]},
            ])
        );
    }
}
