//! `vllm bench serve`'s checked flags in the engine's words: a [`ServeConfig`] -> the engine's
//! [`Plan`], with vLLM's request bodies; and [`on`], the plan's server half from the connection
//! flags, which `llmspeed capacity` builds its rounds on too. Pure.

use crate::bench::engine::lora::LoraAssignment;
use crate::bench::engine::plan::{InitialTest, Plan, Warmup};
use crate::bench::engine::record::{LatencyOrigin, RequestEnd, TtftPredicate};
use crate::bench::vllm::args::{ChatEnd, LatencyFrom, ServeConfig, TtftFrom};
use crate::bench::vllm::body::BodyBuilder;
use crate::bench::vllm::connection::Connection;
use crate::workload::datasets::DatasetConfig;
use crate::workload::request_id::RequestIds;
use crate::workload::schedule::ScheduleConfig;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// What every request body carries beyond its prompt and model (vLLM's body fields).
pub struct BodyFields {
    pub ignore_eos: bool,
    /// `stream_options.continuous_usage_stats`.
    pub continuous_usage: bool,
    /// Sampling fields and `--extra-body`, merged last.
    pub extra: Map<String, Value>,
}

/// The plan that sends `dataset` to `conn`'s server with vLLM's bodies carrying `fields`: the
/// server as the connection flags say (URL, headers, key, TLS, stamps, `--preconnect`, the
/// ready check, model, tokenizer, endpoint and its dialect), and the rest at its plainest —
/// sent at once (the default schedule, no cap), no warm-ups, no shard or probes, no LoRA, one
/// turn per sample, request ids a UUID tagged with the dataset's seed, no text kept, and
/// vLLM's default record rules. Each caller sets what its own flags change.
pub fn on(conn: &Connection, fields: BodyFields, dataset: DatasetConfig) -> Plan {
    let (dialect, chat) = (conn.dialect(), conn.chat());
    Plan {
        base_url: conn.base_url.clone(),
        headers: conn.headers.clone(),
        api_key: conn.api_key.clone(),
        insecure: conn.insecure,
        system_roots: conn.system_roots,
        ca_cert: conn.ca_cert.clone(),
        kernel_stamps: conn.kernel_stamps,
        packet_stamps: conn.packet_stamps,
        preconnect: conn.preconnect,
        ready_check_timeout_s: conn.ready_check_timeout_s,
        model: conn.model.clone(),
        served_model_name: conn.served_model_name.clone(),
        tokenizer: conn.tokenizer.clone(),
        endpoint: conn.endpoint.clone(),
        dialect,
        chat,
        bodies: Arc::new(BodyBuilder {
            // The engine names the model of each request; this one is only a default.
            model: conn
                .served_model_name
                .clone()
                .or_else(|| conn.model.clone())
                .unwrap_or_default(),
            dialect,
            chat,
            ignore_eos: fields.ignore_eos,
            continuous_usage: fields.continuous_usage,
            extra: fields.extra,
        }),
        keep_text: false,
        request_ids: RequestIds::Uuid {
            run: dataset.seed as u32,
        },
        routing_key: false,
        turns: 1,
        turn_len: 0,
        lora_modules: Vec::new(),
        lora_assignment: LoraAssignment::RoundRobin,
        dataset,
        schedule: ScheduleConfig::default(),
        self_timed: false,
        max_concurrency: None,
        num_warmups: 0,
        warmup: Warmup::default(),
        shard: None,
        start_at_unix_ns: None,
        probe_request_rate: 0.0,
        progress_step: "bench serve",
        latency_origin: LatencyOrigin::Scheduled,
        ttft: TtftPredicate::FirstChoice,
        end: RequestEnd::LastChoice,
    }
}

/// The plan the engine runs for `cfg`.
pub fn of(cfg: &ServeConfig) -> Plan {
    let fields = BodyFields {
        ignore_eos: cfg.ignore_eos,
        continuous_usage: cfg.continuous_usage,
        extra: cfg.extra.clone(),
    };
    Plan {
        keep_text: cfg.save_detailed,
        request_ids: cfg.request_ids.clone(),
        lora_modules: cfg.lora_modules.clone(),
        lora_assignment: cfg.lora_assignment,
        schedule: cfg.schedule,
        self_timed: cfg.self_timed,
        max_concurrency: cfg.max_concurrency,
        num_warmups: cfg.num_warmups,
        // vLLM 0.33's warm-ups each send the first request, within the concurrency cap; with
        // a ready-check timeout, that request is first sent until it succeeds (every 5 s).
        warmup: Warmup {
            repeat_first: true,
            initial_test: (cfg.conn.ready_check_timeout_s > 0).then(|| InitialTest {
                within: Duration::from_secs(cfg.conn.ready_check_timeout_s),
                retry: Duration::from_secs(5),
                passed: "Initial test run completed.",
                failed: "Initial test run failed - Please make sure benchmark arguments are correctly specified. Error: ",
            }),
            ..Warmup::default()
        },
        shard: cfg.shard,
        start_at_unix_ns: cfg.start_at_unix_ns,
        probe_request_rate: cfg.probe_request_rate,
        latency_origin: match cfg.latency_from {
            LatencyFrom::Scheduled => LatencyOrigin::Scheduled,
            LatencyFrom::Sent => LatencyOrigin::Sent,
        },
        ttft: match cfg.ttft_from {
            TtftFrom::Choice => TtftPredicate::FirstChoice,
            TtftFrom::Content => TtftPredicate::FirstContent,
        },
        end: match cfg.chat_end {
            ChatEnd::LastChoice => RequestEnd::LastChoice,
            ChatEnd::LastMessage => RequestEnd::LastMessage,
        },
        ..on(&cfg.conn, fields, cfg.dataset.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::vllm::args::ServeArgs;
    use crate::net::Dialect;
    use crate::workload::datasets::{PromptSource, Sample};
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ServeArgs,
    }

    fn plan(args: &[&str]) -> Plan {
        let t = T::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        of(&t.a.validate().unwrap())
    }

    #[test]
    fn flags_become_the_engines_plan() {
        let p = plan(&[]);
        assert_eq!(
            (p.dialect, p.chat, p.endpoint.as_str()),
            (Dialect::OpenAi, false, "/v1/completions")
        );
        assert_eq!(
            (p.latency_origin, p.ttft, p.end),
            (
                LatencyOrigin::Scheduled,
                TtftPredicate::FirstChoice,
                RequestEnd::LastChoice
            )
        );
        assert!(!p.keep_text);
        let p = plan(&[
            "--backend",
            "openai-chat",
            "--latency-from",
            "sent",
            "--ttft-from",
            "content",
            "--chat-end",
            "last-message",
            "--save-detailed",
            "--max-concurrency",
            "3",
            "--num-warmups",
            "2",
        ]);
        assert_eq!(
            (p.dialect, p.chat, p.endpoint.as_str()),
            (Dialect::OpenAi, true, "/v1/chat/completions")
        );
        assert_eq!(
            (p.latency_origin, p.ttft, p.end),
            (
                LatencyOrigin::Sent,
                TtftPredicate::FirstContent,
                RequestEnd::LastMessage
            )
        );
        assert!(p.keep_text);
        assert_eq!((p.max_concurrency, p.num_warmups), (Some(3), 2));
        // vLLM's old native backend names speak the engines' streams.
        assert_eq!(plan(&["--backend", "sglang"]).dialect, Dialect::Sglang);
        assert_eq!(plan(&["--backend", "tgi"]).dialect, Dialect::Tgi);
    }

    /// Every connection flag reaches the plan's server half as it was checked.
    #[test]
    fn the_connection_flags_become_the_plans_server() {
        let p = plan(&[
            "--base-url",
            "https://h:9/",
            "--header",
            "A=1",
            "--api-key",
            "sk-1",
            "--insecure",
            "--system-roots",
            "--ca-cert",
            "ca.pem",
            "--no-kernel-stamps",
            "--preconnect",
            "--ready-check-timeout-sec",
            "7",
            "--model",
            "m",
            "--served-model-name",
            "s",
            "--tokenizer",
            "org/tok",
        ]);
        assert_eq!(p.base_url, "https://h:9");
        assert_eq!(p.headers, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(p.api_key.as_deref(), Some("sk-1"));
        assert!(p.insecure && p.system_roots && p.preconnect);
        assert_eq!(p.ca_cert.as_deref(), Some(std::path::Path::new("ca.pem")));
        assert!(!p.kernel_stamps && !p.packet_stamps);
        assert_eq!(p.ready_check_timeout_s, 7);
        assert_eq!(
            p.warmup.initial_test.map(|t| t.within),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            (p.model.as_deref(), p.served_model_name.as_deref()),
            (Some("m"), Some("s"))
        );
        assert_eq!(p.tokenizer.as_deref(), Some("org/tok"));
        assert_eq!(p.progress_step, "bench serve");
        let p = plan(&[]);
        assert!(!p.insecure && !p.preconnect && p.kernel_stamps && p.api_key.is_none());
        assert!(p.warmup.repeat_first && p.warmup.initial_test.is_none());
    }

    /// The engine names each request's model (the resolved one, or a LoRA adapter): the body
    /// carries that name, not the builder's default.
    #[test]
    fn bodies_name_the_model_the_engine_asks_for() {
        let p = plan(&["--model", "m"]);
        let s = Sample {
            group: None,
            prompt: PromptSource::Text("hello".into()),
            prompt_len: 1,
            output_len: 4,
        };
        let body = p
            .bodies
            .request_body(&s, "adapter-1", &mut Vec::new())
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "adapter-1");
        assert_eq!(v["prompt"], "hello");
        assert_eq!(v["max_tokens"], 4);
    }
}
