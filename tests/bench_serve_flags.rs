//! Every flag of `vllm bench serve` (the list in shared/reference/peers.md) parses under
//! `llmspeed bench serve`, and the ones we do not support yet are refused with a message that
//! says so.

use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::cli::bench::BenchCommand;
use llmspeed::cli::{Cli, Command};
use llmspeed::net::Dialect;

fn args(argv: &[&str]) -> Result<ServeArgs, String> {
    let full = ["llmspeed", "bench", "serve"].iter().chain(argv).copied();
    let cli = Cli::try_parse_from(full).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Bench(b) => match b.command {
            BenchCommand::Serve(a) => Ok(*a),
            _ => Err("not bench serve".into()),
        },
        _ => Err("not bench serve".into()),
    }
}

fn check(argv: &[&str]) -> Result<ServeConfig, String> {
    args(argv)?.validate()
}

#[test]
fn every_vllm_flag_parses() {
    // (flag and value(s), a check on the validated config)
    type Check = fn(&ServeConfig) -> bool;
    let table: &[(&[&str], Check)] = &[
        (&["--backend", "vllm"], |c| {
            c.conn.backend.as_str() == "vllm"
        }),
        (&["--backend", "openai"], |c| {
            c.conn.endpoint == "/v1/completions"
        }),
        (&["--backend", "openai-chat"], |c| {
            c.conn.endpoint == "/v1/chat/completions"
        }),
        // vLLM's older native backends: each engine's own endpoint and stream by default, and
        // vLLM's old OpenAI completions meaning when that endpoint is named.
        (&["--backend", "tgi"], |c| {
            c.conn.endpoint == "/generate_stream" && c.conn.dialect() == Dialect::Tgi
        }),
        (&["--backend", "sglang"], |c| {
            c.conn.endpoint == "/generate" && c.conn.dialect() == Dialect::Sglang
        }),
        (&["--backend", "llama.cpp"], |c| {
            c.conn.endpoint == "/completion" && c.conn.dialect() == Dialect::LlamaCpp
        }),
        (
            &["--backend", "sglang", "--endpoint", "/v1/completions"],
            |c| c.conn.dialect() == Dialect::OpenAi,
        ),
        (
            &["--backend", "llama.cpp", "--endpoint", "/v1/completions"],
            |c| c.conn.dialect() == Dialect::OpenAi,
        ),
        (&["--base-url", "https://h:9/"], |c| {
            c.conn.base_url == "https://h:9"
        }),
        (&["--host", "10.1.2.3", "--port", "9000"], |c| {
            c.conn.base_url == "http://10.1.2.3:9000"
        }),
        (&["--host", "::1"], |c| {
            c.conn.base_url == "http://[::1]:8000"
        }),
        (&["--endpoint", "/v2/completions"], |c| {
            c.conn.endpoint == "/v2/completions"
        }),
        (&["--header", "A=1", "B=2"], |c| c.conn.headers.len() == 2),
        (&["--insecure"], |c| c.conn.insecure),
        (&["--no-kernel-stamps"], |c| !c.conn.kernel_stamps),
        (&["--model", "org/m"], |c| {
            c.conn.model.as_deref() == Some("org/m")
        }),
        (&["--served-model-name", "m2"], |c| {
            c.conn.served_model_name.as_deref() == Some("m2")
        }),
        (&["--tokenizer", "org/tok"], |c| {
            c.conn.tokenizer.as_deref() == Some("org/tok")
        }),
        (&["--max-concurrency", "64"], |c| {
            c.max_concurrency == Some(64)
        }),
        (&["--num-prompts", "10"], |c| c.dataset.num_prompts == 10),
        (&["--request-rate", "inf"], |c| c.request_rate.is_infinite()),
        (&["--request-rate", "2.5"], |c| c.request_rate == 2.5),
        (&["--burstiness", "0.5"], |c| c.schedule.burstiness == 0.5),
        (
            &[
                "--ramp-up-strategy",
                "linear",
                "--ramp-up-start-rps",
                "1",
                "--ramp-up-end-rps",
                "9",
            ],
            |c| c.schedule.ramp.is_some_and(|r| r.end_rps == 9.0),
        ),
        (
            &[
                "--ramp-up-strategy",
                "exponential",
                "--ramp-up-start-rps",
                "1",
                "--ramp-up-end-rps",
                "9",
            ],
            |c| c.schedule.ramp.is_some(),
        ),
        (&["--num-warmups", "3"], |c| c.num_warmups == 3),
        (&["--ready-check-timeout-sec", "5"], |c| {
            c.conn.ready_check_timeout_s == 5
        }),
        (&["--seed", "42"], |c| {
            c.schedule.seed == 42 && c.dataset.seed == 42
        }),
        (&["--disable-tqdm"], |_| true),
        (
            &[
                "--ignore-eos",
                "--dataset-name",
                "custom",
                "--dataset-path",
                "x",
            ],
            |c| c.ignore_eos,
        ),
        (
            &["--dataset-name", "sharegpt", "--dataset-path", "x.json"],
            |c| c.dataset.kind.as_str() == "sharegpt" && !c.ignore_eos,
        ),
        (
            &["--dataset-name", "sonnet", "--dataset-path", "s.txt"],
            |c| c.dataset.kind.as_str() == "sonnet",
        ),
        (&["--dataset-name", "prefix_repetition"], |c| {
            c.dataset.kind.as_str() == "prefix_repetition"
        }),
        (&["--random-input-len", "8192"], |c| {
            c.dataset.random_input_len == 8192
        }),
        (&["--random-output-len", "7"], |c| {
            c.dataset.random_output_len == 7
        }),
        (&["--random-range-ratio", "0.3"], |c| {
            c.dataset.random_range_ratio == 0.3
        }),
        (&["--random-prefix-len", "100"], |c| {
            c.dataset.random_prefix_len == 100
        }),
        (&["--sharegpt-output-len", "33"], |c| {
            c.dataset.sharegpt_output_len == Some(33)
        }),
        (&["--sonnet-input-len", "600"], |c| {
            c.dataset.sonnet_input_len == 600
        }),
        (&["--sonnet-output-len", "50"], |c| {
            c.dataset.sonnet_output_len == 50
        }),
        (&["--sonnet-prefix-len", "100"], |c| {
            c.dataset.sonnet_prefix_len == 100
        }),
        (&["--prefix-repetition-prefix-len", "5"], |c| {
            c.dataset.prefix_repetition_prefix_len == 5
        }),
        (&["--prefix-repetition-suffix-len", "6"], |c| {
            c.dataset.prefix_repetition_suffix_len == 6
        }),
        (&["--prefix-repetition-num-prefixes", "7"], |c| {
            c.dataset.prefix_repetition_num_prefixes == 7
        }),
        (&["--prefix-repetition-output-len", "8"], |c| {
            c.dataset.prefix_repetition_output_len == 8
        }),
        (&["--custom-output-len", "9"], |c| {
            c.dataset.custom_output_len == Some(9)
        }),
        (&["--custom-output-len", "-1"], |c| {
            c.dataset.custom_output_len.is_none()
        }),
        (&["--input-len", "77", "--output-len", "5"], |c| {
            c.dataset.random_input_len == 77
                && c.dataset.random_output_len == 5
                && c.dataset.sharegpt_output_len == Some(5)
                && c.dataset.custom_output_len == Some(5)
                && c.dataset.prefix_repetition_output_len == 5
        }),
        (
            &["--random-range-ratio", r#"{"input": 0.5, "output": 0.25}"#],
            // Each ratio kept for the draw, whose bounds take the tokenizer's special tokens
            // off the input length first (vLLM 0.33).
            |c| {
                c.dataset.random_range_ratio == 0.5
                    && c.dataset.random_output_range_ratio == Some(0.25)
                    && c.dataset.random_bounds.is_none()
            },
        ),
        (&["--disable-shuffle", "--no-oversample"], |c| {
            !c.dataset.shuffle && !c.dataset.oversample
        }),
        (
            &["--dataset-name", "custom", "--dataset-path", "x.jsonl"],
            |c| {
                c.dataset
                    .chat_template
                    .as_ref()
                    .is_some_and(|w| !w.strip_bos && !w.required && w.kwargs.is_none())
            },
        ),
        (
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                "x.jsonl",
                "--skip-chat-template",
            ],
            |c| c.dataset.chat_template.is_none(),
        ),
        (
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                "x.jsonl",
                "--custom-skip-chat-template",
            ],
            |c| c.dataset.chat_template.is_none(),
        ),
        (
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                "x.jsonl",
                "--skip-tokenizer-init",
            ],
            |c| c.dataset.chat_template.is_none(),
        ),
        (
            &[
                "--dataset-name",
                "custom",
                "--dataset-path",
                "x.jsonl",
                "--chat-template-kwargs",
                r#"{"enable_thinking": false}"#,
            ],
            |c| {
                c.dataset
                    .chat_template
                    .as_ref()
                    .is_some_and(|w| w.kwargs.is_some())
            },
        ),
        // vLLM renders a template for custom only.
        (
            &[
                "--dataset-name",
                "sharegpt",
                "--dataset-path",
                "x.json",
                "--chat-template-kwargs",
                "{}",
            ],
            |c| c.dataset.chat_template.is_none(),
        ),
        (&["--tokenizer", "org/m", "--skip-tokenizer-init"], |c| {
            c.conn.tokenizer.is_none()
        }),
        (&["--logprobs", "3"], |c| c.extra["logprobs"] == 3),
        (&["--use-beam-search"], |_| true),
        (&[], |c| !c.extra.contains_key("temperature")),
        (&["--temperature", "0.6"], |c| c.extra["temperature"] == 0.6),
        (&["--top-p", "0.9"], |c| c.extra["top_p"] == 0.9),
        (&["--top-k", "20"], |c| c.extra["top_k"] == 20),
        (&["--min-p", "0.1"], |c| c.extra["min_p"] == 0.1),
        (&["--frequency-penalty", "0.2"], |c| {
            c.extra["frequency_penalty"] == 0.2
        }),
        (&["--presence-penalty", "0.3"], |c| {
            c.extra["presence_penalty"] == 0.3
        }),
        (&["--repetition-penalty", "1.1"], |c| {
            c.extra["repetition_penalty"] == 1.1
        }),
        (&["--extra-body", "{\"seed\": 1}"], |c| c.extra["seed"] == 1),
        (&["--percentile-metrics", "ttft,tpot,itl,e2el"], |c| {
            c.metrics.len() == 4
        }),
        (&["--metric-percentiles", "25,50,99.9"], |c| {
            c.percentiles == [25.0, 50.0, 99.9]
        }),
        (&["--goodput", "ttft:500", "tpot:50"], |c| {
            c.goodput.is_some_and(|g| g.tpot_ms == Some(50.0))
        }),
        (&["--save-result"], |c| c.save_result),
        (&["--save-detailed"], |c| c.save_detailed),
        (&["--append-result"], |c| c.append_result),
        (&["--result-dir", "out"], |c| {
            c.result_dir.as_deref() == Some(std::path::Path::new("out"))
        }),
        (&["--result-filename", "r.json"], |c| {
            c.result_filename.as_deref() == Some("r.json")
        }),
        (&["--metadata", "a=1", "b=x"], |c| c.metadata.len() == 2),
        (&["--label", "L"], |c| c.label.as_deref() == Some("L")),
        (&["--request-id-prefix", "run7-"], |c| {
            c.request_ids == llmspeed::workload::request_id::RequestIds::Prefix("run7-".into())
        }),
        (&["--trust-remote-code"], |_| true),
        (&["--tokenizer-mode", "auto"], |_| true),
        (
            &[
                "--lora-modules",
                "a",
                "b",
                "--lora-assignment",
                "round-robin",
            ],
            |c| {
                c.lora_modules == ["a", "b"]
                    && c.lora_assignment
                        == llmspeed::bench::engine::lora::LoraAssignment::RoundRobin
            },
        ),
        (
            &[
                "--multi-turn",
                "--multi-turn-num-turns",
                "4",
                "--multi-turn-delay-ms",
                "50",
            ],
            |c| {
                c.multi_turn
                    .as_ref()
                    .is_some_and(|m| m.num_turns == 4 && m.delay_ms == 50)
            },
        ),
        (&["--probe-request-rate", "2.5"], |c| {
            c.probe_request_rate == 2.5
        }),
        (
            &[
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                "t.jsonl",
                "--timed-trace-sec-multiplier",
                "0.001",
                "--timed-trace-chunk-hash-size",
                "512",
                "--timed-trace-label-hash-ids",
                "blocks",
            ],
            |c| {
                c.self_timed
                    && c.dataset.trace.sec_multiplier == 0.001
                    && c.dataset.trace.chunk_hash_size == 512
                    && c.dataset.trace.label_hash_ids == "blocks"
            },
        ),
        (
            &[
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                "t.jsonl",
                "--self-timed",
                "--no-self-timed",
            ],
            |c| !c.self_timed,
        ),
    ];
    for (argv, ok) in table {
        let c = check(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert!(ok(&c), "{argv:?} parsed but did not take effect");
    }
}

#[test]
fn hf_ids_vllm_does_not_know_are_refused_with_its_message_unless_mapped() {
    let a = args(&["--dataset-name", "hf", "--dataset-path", "org/ds"]).unwrap();
    let e = a.validate().unwrap_err();
    assert!(
        e.starts_with("Unsupported dataset path: org/ds. Huggingface dataset only supports")
            && e.contains("'likaixin/InstructCoder'")
            && e.contains("--hf-prompt-column"),
        "{e}"
    );
    let a = args(&[
        "--dataset-name",
        "hf",
        "--dataset-path",
        "org/ds",
        "--hf-prompt-column",
        "text",
        "--hf-split",
        "test",
        "--hf-output-len",
        "9",
    ])
    .unwrap();
    let c = a.validate().unwrap();
    assert_eq!(c.dataset.hf.split.as_deref(), Some("test"));
    assert_eq!(c.dataset.hf.output_len, Some(9));
    assert!(!c.dataset.hf.no_stream);
    // vLLM's --no-stream loads the dataset whole: accepted, the full shuffle's order.
    let a = args(&[
        "--dataset-name",
        "hf",
        "--dataset-path",
        "openai/gsm8k",
        "--no-stream",
    ]);
    let c = a.unwrap().validate().unwrap();
    assert!(c.dataset.hf.no_stream);
    assert_eq!(
        llmspeed::workload::datasets::hf::row_order(&c.dataset),
        llmspeed::workload::rows::RowOrder::Full {
            seed: c.dataset.seed
        }
    );
    // A vision id needs the chat backend (vLLM's check); the video id is refused.
    let a = args(&["--dataset-name", "hf", "--dataset-path", "Lin-Chen/MMStar"]).unwrap();
    let e = a.validate().unwrap_err();
    assert!(
        e.contains("Multi-modal content is not supported on backend 'openai'"),
        "{e}"
    );
    let a = args(&[
        "--dataset-name",
        "hf",
        "--dataset-path",
        "Lin-Chen/MMStar",
        "--backend",
        "openai-chat",
    ]);
    assert!(a.unwrap().validate().is_ok());
    let a = args(&["--dataset-name", "hf", "--dataset-path", "yale-nlp/MMVU"]).unwrap();
    assert!(a.validate().unwrap_err().contains("video dataset"));
}

#[test]
fn unsupported_flags_are_refused_clearly() {
    let table: &[&[&str]] = &[
        &["--profile"],
        &["--dataset-name", "speed_bench"],
        &["--spec-bench-output-len", "5"],
        &["--backend", "openai-embeddings"],
        &["--tokenizer-mode", "slow"],
    ];
    for argv in table {
        let a = args(argv).unwrap_or_else(|e| panic!("{argv:?} must parse: {e}"));
        let e = a.validate().expect_err("must be refused");
        assert!(
            e.contains("is not supported by llmspeed bench serve: "),
            "{argv:?}: {e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn a_local_tokenizer_needs_the_feature_and_a_tokenizer_json() {
    // This crate's own folder exists and holds no tokenizer.json.
    let a = args(&["--tokenizer", "."]).unwrap();
    let e = a.validate().expect_err("must be refused");
    if llmspeed::workload::tokenizer::LocalTokenizer::AVAILABLE {
        assert!(e.contains("without a tokenizer.json"), "{e}");
    } else {
        assert!(e.contains("--features hf-tokenizer"), "{e}");
    }
    assert!(!e.contains('\n'), "one line: {e}");
}

#[test]
fn bad_values_get_one_line_errors() {
    let table: &[(&[&str], &str)] = &[
        (&["--request-rate", "0"], "above 0"),
        (&["--request-rate", "fast"], "number or inf"),
        (&["--burstiness", "0"], "burstiness"),
        (&["--ramp-up-strategy", "linear"], "needs both"),
        (
            &[
                "--ramp-up-strategy",
                "linear",
                "--ramp-up-start-rps",
                "1",
                "--ramp-up-end-rps",
                "2",
                "--request-rate",
                "5",
            ],
            "leave --request-rate",
        ),
        (
            &["--percentile-metrics", "ttft,foo"],
            "unknown percentile metric",
        ),
        (&["--metric-percentiles", "101"], "0 to 100"),
        (&["--goodput", "ttft"], "KEY:VALUE"),
        (&["--dataset-name", "sonnet"], "--dataset-path"),
        (&["--dataset-name", "nope"], "unknown --dataset-name"),
        (&["--max-concurrency", "0"], "at least 1"),
        (&["--endpoint", "v1/completions"], "must start with /"),
        (&["--request-id-prefix", "a\r\nb"], "--request-id-prefix"),
    ];
    for (argv, want) in table {
        let e = match args(argv) {
            Err(e) => e,
            Ok(a) => a.validate().expect_err("must fail"),
        };
        assert!(e.contains(want), "{argv:?}: {e}");
    }
}

#[test]
fn help_groups_flags_like_vllm() {
    let e = Cli::try_parse_from(["llmspeed", "bench", "serve", "--help"]).unwrap_err();
    let help = e.to_string();
    for heading in [
        "Random dataset options:",
        "ShareGPT dataset options:",
        "Sonnet dataset options:",
        "Custom dataset options:",
        "Prefix repetition dataset options:",
        "Sampling parameters:",
        "Metric options:",
        "Output options:",
    ] {
        assert!(help.contains(heading), "missing {heading}");
    }
}

/// The README promises every client command the TLS flags; `bench serve` hands them to its
/// client (a bad CA file is refused by the client itself, before any request).
#[test]
fn tls_flags_reach_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("bad.pem");
    std::fs::write(&pem, "not a certificate").unwrap();
    let cfg = check(&[
        "--base-url",
        "https://127.0.0.1:9",
        "--system-roots",
        "--ca-cert",
        pem.to_str().unwrap(),
    ])
    .expect("flags accepted");
    assert!(cfg.conn.system_roots);
    assert_eq!(cfg.conn.ca_cert.as_deref(), Some(pem.as_path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt
        .block_on(llmspeed::bench::vllm::run::run(
            &cfg,
            llmspeed::clock::Clock::new(),
            &llmspeed::net::Cancel::new(),
            &mut Vec::new(),
        ))
        .expect_err("an unreadable CA file must stop the run");
    assert!(err.to_string().contains("no PEM certificates"), "{err}");
}

#[test]
fn chat_end_rule_is_chat_only() {
    let cfg = check(&["--backend", "openai-chat", "--chat-end", "last-message"]).unwrap();
    assert_eq!(
        cfg.chat_end,
        llmspeed::bench::vllm::args::ChatEnd::LastMessage
    );
    let default = check(&["--backend", "openai-chat"]).unwrap();
    assert_eq!(
        default.chat_end,
        llmspeed::bench::vllm::args::ChatEnd::LastChoice
    );
    let e = check(&["--chat-end", "last-message"]).unwrap_err();
    assert!(e.contains("--backend openai-chat"), "{e}");
}

#[test]
fn trace_replay_probe_and_multi_turn_flags_refuse_what_cannot_work() {
    for (argv, want) in [
        (
            &["--self-timed"][..],
            "only go with --dataset-name timed_trace",
        ),
        (
            &["--no-self-timed"][..],
            "only go with --dataset-name timed_trace",
        ),
        (
            &[
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                "t",
                "--request-rate",
                "5",
            ][..],
            "or pass --no-self-timed",
        ),
        (
            &[
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                "t",
                "--self-timed",
                "--request-rate",
                "5",
            ][..],
            "leave --request-rate",
        ),
        (
            &["--dataset-name", "timed_trace"][..],
            "needs --dataset-path",
        ),
        (
            &[
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                "t",
                "--timed-trace-chunk-hash-size",
                "0",
            ][..],
            "at least 1",
        ),
        (&["--probe-request-rate=-1"][..], "--probe-request-rate"),
        (
            &[
                "--multi-turn",
                "--dataset-name",
                "sonnet",
                "--dataset-path",
                "s",
            ][..],
            "--dataset-name random",
        ),
        (&["--multi-turn", "--num-runs", "2"][..], "is one run"),
        (
            &[
                "--multi-turn",
                "--multi-turn-prefix-global-ratio",
                "0.5",
                "--multi-turn-prefix-conversation-ratio",
                "0.5",
            ][..],
            "sum to less than 1",
        ),
        (
            &[
                "--multi-turn",
                "--multi-turn-prefix-global-ratio",
                "0.5",
                "--dataset-name",
                "sharegpt",
                "--dataset-path",
                "s",
            ][..],
            "use --dataset-name random",
        ),
        (
            &["--multi-turn", "--multi-turn-num-turns", "0"][..],
            "at least 1",
        ),
    ] {
        let a = args(argv).unwrap_or_else(|e| panic!("{argv:?} must parse: {e}"));
        let e = a.validate().expect_err("must be refused");
        assert!(e.contains(want), "{argv:?}: {e}");
    }
}
