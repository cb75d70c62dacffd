//! `vllm bench serve`'s checked flags in the engine's words: a [`ServeConfig`] -> the engine's
//! [`Plan`], with vLLM's request bodies. Pure.

use crate::bench::engine::plan::{InitialTest, Plan, Warmup};
use crate::bench::engine::record::{LatencyOrigin, RequestEnd, TtftPredicate};
use crate::bench::vllm::args::{ChatEnd, LatencyFrom, ServeConfig, TtftFrom};
use crate::bench::vllm::body::BodyBuilder;
use std::sync::Arc;
use std::time::Duration;

/// The plan the engine runs for `cfg`.
pub fn of(cfg: &ServeConfig) -> Plan {
    let dialect = cfg.backend.dialect(&cfg.endpoint);
    let chat = cfg.backend.is_chat();
    Plan {
        base_url: cfg.base_url.clone(),
        headers: cfg.headers.clone(),
        api_key: cfg.api_key.clone(),
        insecure: cfg.insecure,
        system_roots: cfg.system_roots,
        ca_cert: cfg.ca_cert.clone(),
        kernel_stamps: cfg.kernel_stamps,
        packet_stamps: cfg.packet_stamps,
        preconnect: cfg.preconnect,
        ready_check_timeout_s: cfg.ready_check_timeout_s,
        model: cfg.model.clone(),
        served_model_name: cfg.served_model_name.clone(),
        tokenizer: cfg.tokenizer.clone(),
        endpoint: cfg.endpoint.clone(),
        dialect,
        chat,
        bodies: Arc::new(BodyBuilder {
            // The engine names the model of each request; this one is only a default.
            model: cfg
                .served_model_name
                .clone()
                .or_else(|| cfg.model.clone())
                .unwrap_or_default(),
            dialect,
            chat,
            ignore_eos: cfg.ignore_eos,
            continuous_usage: cfg.continuous_usage,
            extra: cfg.extra.clone(),
        }),
        keep_text: cfg.save_detailed,
        request_ids: cfg.request_ids.clone(),
        lora_modules: cfg.lora_modules.clone(),
        lora_assignment: cfg.lora_assignment,
        dataset: cfg.dataset.clone(),
        schedule: cfg.schedule,
        self_timed: cfg.self_timed,
        max_concurrency: cfg.max_concurrency,
        num_warmups: cfg.num_warmups,
        // vLLM 0.33's warm-ups each send the first request, within the concurrency cap; with
        // a ready-check timeout, that request is first sent until it succeeds (every 5 s).
        warmup: Warmup {
            repeat_first: true,
            initial_test: (cfg.ready_check_timeout_s > 0).then(|| InitialTest {
                within: Duration::from_secs(cfg.ready_check_timeout_s),
                retry: Duration::from_secs(5),
                passed: "Initial test run completed.",
                failed: "Initial test run failed - Please make sure benchmark arguments are correctly specified. Error: ",
            }),
            ..Warmup::default()
        },
        shard: cfg.shard,
        start_at_unix_ns: cfg.start_at_unix_ns,
        probe_request_rate: cfg.probe_request_rate,
        progress_step: "bench serve",
        routing_key: false,
        turns: 1,
        turn_len: 0,
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
