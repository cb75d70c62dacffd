//! A small, realistic matrix report shared by the report tests: every status appears once or
//! more, with the figures the seed report shows for its valid cells.

#![allow(dead_code)]

use llmspeed::matrix::status::{CapacityReason, CellStatus, KvSource, ServerLimits};
use llmspeed::report::*;
use llmspeed::timeline::{Channel, ErrorKind, FinishReason, TokenCountSource};

pub fn report() -> MatrixReport {
    let limits = ServerLimits {
        max_model_len: Some(262_144),
        kv_tokens: Some((1_600_000, KvSource::KvCacheSizeTokens)),
        max_running: Some(4),
    };
    let metadata = Metadata {
        tool: "llmspeed".into(),
        tool_version: "0.1.0".into(),
        date: "2026-11-30T04:00:00Z".into(),
        finished: Some("2026-11-30T04:12:05Z".into()),
        interrupted: None,
        base_url: Some("http://127.0.0.1:8000".into()),
        simulated_server: None,
        hardware: Hardware {
            kind: Some("Discrete GPU".into()),
            gpu: Some("RTX PRO 6000 Blackwell Server Edition".into()),
            vram_gb: Some(96.0),
            os: Some("linux".into()),
            description: None,
            ..Hardware::default()
        },
        engine: Engine {
            name: Some("vllm".into()),
            version: Some("0.30.1rc1.dev452+g73a583112".into()),
            quantization: Some("NVFP4".into()),
            backend: Some("cuda".into()),
            repository: Some("github.com/vllm-project/vllm".into()),
            build: Some("cuda-13.2".into()),
            commit: Some("73a5831127a9".into()),
        },
        model: ModelInfo {
            id: "gemma".into(),
            name: Some("RedHatAI/gemma-4-26B-A4B-it-NVFP4".into()),
            revision: Some("main".into()),
        },
        server_limits: limits.into(),
        settings: Settings {
            duration_s: 30.0,
            max_tokens: 4096,
            prefill_mode: PrefillMode::DuringDecodeWarmup,
            prefill_samples: 1,
            contexts: vec![8192, 131_072, 257_984],
            prefill_contexts: vec![8192, 131_072, 262_143],
            concurrency: vec![1, 2, 4, 8],
            endpoint: "chat".into(),
            prompt_tokens: PromptTokens::TokenizeEndpoint,
            seed: 1,
            ignore_eos: true,
            insecure: false,
            loop_rule: Some(LoopRule {
                min_repeats: 4,
                min_span_chars: 4096,
                max_period_chars: 2048,
            }),
            images: None,
        },
        launch_command: Some(
            "vllm serve RedHatAI/gemma-4-26B-A4B-it-NVFP4 --served-model-name gemma --max-model-len 262144 --limit-mm-per-prompt '{\"image\":4}'"
                .into(),
        ),
        notes: Some("Example run | hand-built".into()),
    };
    let prefill = vec![
        PrefillRow {
            context: 8192,
            context_label: "8K".into(),
            status: CellStatus::Valid,
            prompt_tokens: Some(8_190),
            ttft_ms: Some(261.0),
            prefill_tok_per_s: Some(31_379.3),
            samples: 1,
            ttft_ms_samples: vec![261.0],
            server_prompt_tokens: Some(8_190),
            image_tokens: None,
            error_messages: vec![],
            measured_under: None,
        },
        PrefillRow {
            context: 131_072,
            context_label: "128K".into(),
            status: CellStatus::Valid,
            prompt_tokens: Some(131_070),
            ttft_ms: Some(19_927.4),
            prefill_tok_per_s: Some(6_473.0),
            samples: 1,
            ttft_ms_samples: vec![19_927.4],
            server_prompt_tokens: None,
            image_tokens: None,
            error_messages: vec![],
            measured_under: None,
        },
        PrefillRow {
            context: 262_143,
            context_label: "256K".into(),
            status: CellStatus::Failed(vec![(ErrorKind::HttpStatus, 1)]),
            prompt_tokens: None,
            ttft_ms: None,
            prefill_tok_per_s: None,
            samples: 1,
            ttft_ms_samples: vec![],
            server_prompt_tokens: None,
            image_tokens: None,
            error_messages: vec![ErrorMessage::new(
                Some(ErrorKind::HttpStatus),
                Some(400),
                "This model's maximum context length is 262144 tokens.",
            )],
            measured_under: None,
        },
    ];

    let valid =
        |ctx: u64, label: &str, c: u64, total: f64, per: f64, ttft: f64, tbt: f64, toks: u64| {
            let mut cell = DecodeCell::empty(ctx, label, c, CellStatus::Valid);
            cell.output_tok_per_s = Some(total);
            cell.per_request_tok_per_s = Some(per);
            cell.ttft_ms_p50 = Some(ttft);
            cell.tbt_ms_p50 = Some(tbt);
            cell.avg_active_requests = Some(c as f64);
            cell.completed_requests = Some(0);
            cell.output_tokens = Some(toks);
            cell.measured_s = Some(30.0);
            cell.token_count_source = Some(TokenCountSource::ContinuousUsage);
            cell.server_output_tokens = Some(toks);
            cell.token_count_diff = Some(0);
            cell.client_cpu_percent = Some(1.5);
            cell.timer_lag_ms_p99 = Some(0.2);
            cell.timer_lag_ms_max = Some(0.9);
            cell.client_lag = Some(client_lag(tbt));
            cell.requests = (0..c as u32)
                .map(|s| RequestSummary {
                    stream: s,
                    start_ms: -1_200.0,
                    ttft_ms: Some(ttft),
                    tbt_ms_mean: Some(tbt),
                    end_ms: None,
                    output_tokens: toks / c,
                    window_tokens: toks / c,
                    finish_reason: None,
                    error: Some(ErrorKind::Cancelled),
                    looped: false,
                    request_id: None,
                })
                .collect();
            cell
        };

    let mut decode = Vec::new();
    // 8K row: valid, looped (figures kept), queued, over capacity (running limit).
    decode.push(valid(8192, "8K", 1, 101.2, 101.5, 45.3, 9.9, 3_036));
    let mut looped = valid(8192, "8K", 2, 190.4, 95.3, 52.0, 10.5, 5_712);
    looped.status = CellStatus::Looped;
    looped.loop_info = Some(LoopInfo {
        streams: 1,
        channel: Channel::Reasoning,
        period_chars: 41,
        repeats: 112,
        excerpt: "The answer is the answer, \"as\" noted. ".into(),
    });
    looped.requests[1].looped = true;
    looped.requests[1].finish_reason = Some(FinishReason::Length);
    looped.requests[1].error = None;
    decode.push(looped);
    let mut queued = valid(8192, "8K", 4, 310.0, 88.1, 2_450.0, 11.3, 9_300);
    queued.status = CellStatus::Queued;
    queued.avg_active_requests = Some(3.2);
    queued.token_count_diff = Some(-12);
    queued.server_output_tokens = Some(9_312);
    decode.push(queued);
    decode.push(DecodeCell::empty(
        8192,
        "8K",
        8,
        CellStatus::OverCapacity(CapacityReason::RunningLimit { max_running: 4 }),
    ));
    // 128K row: the seed's two valid cells, a failed one, one over the KV cache.
    decode.push(valid(131_072, "128K", 1, 95.7, 95.9, 446.0, 10.4, 2_869));
    decode.push(valid(131_072, "128K", 2, 176.9, 88.6, 603.0, 11.3, 5_308));
    let mut failed = DecodeCell::empty(
        131_072,
        "128K",
        4,
        CellStatus::Failed(vec![(ErrorKind::TimeoutGap, 3), (ErrorKind::HttpStatus, 1)]),
    );
    failed.errors = vec![
        ErrorCount {
            kind: ErrorKind::TimeoutGap,
            count: 3,
        },
        ErrorCount {
            kind: ErrorKind::HttpStatus,
            count: 1,
        },
    ];
    failed.completed_requests = Some(0);
    failed.output_tokens = Some(0);
    decode.push(failed);
    decode.push(DecodeCell::empty(
        131_072,
        "128K",
        8,
        CellStatus::OverCapacity(CapacityReason::KvCache {
            needed_tokens: 8 * 135_168,
            kv_tokens: 1_000_000,
        }),
    ));
    // 251K row: one short valid cell, then pending (run interrupted) and skipped.
    let mut short = valid(257_984, "251K", 1, 68.4, 68.9, 998.0, 14.5, 605);
    short.measured_s = Some(8.8);
    decode.push(short);
    decode.push(DecodeCell::empty(257_984, "251K", 2, CellStatus::Pending));
    decode.push(DecodeCell::empty(257_984, "251K", 4, CellStatus::Skipped));
    decode.push(DecodeCell::empty(257_984, "251K", 8, CellStatus::Skipped));

    MatrixReport {
        schema_version: SCHEMA_VERSION,
        metadata,
        methodology: vec![
            "Total tok/s: output tokens stamped inside the window divided by the window length."
                .into(),
        ],
        prefill,
        decode,
        slo: None,
    }
}

/// `r` as a machine with two GPUs would have written it: the client machine, the
/// GPUs, four readings per GPU per cell (the second GPU reporting no power), and every measured
/// cell's gap histogram (two filled bins).
pub fn add_machine_and_gaps(r: &mut MatrixReport) {
    let h = &mut r.metadata.hardware;
    h.client = Some(ClientMachine {
        cpu_model: Some("AMD EPYC 9654 96-Core Processor".into()),
        cpu_logical: Some(192),
        memory_gib: Some(1511.6),
        os: Some("Ubuntu 24.04.1 LTS".into()),
        kernel: Some("6.8.0-49-generic".into()),
        arch: Some("x86_64".into()),
    });
    h.gpus = vec![
        GpuInfo {
            index: 0,
            name: "NVIDIA H200".into(),
            memory_total_mib: Some(143_771.0),
        },
        GpuInfo {
            index: 1,
            name: "NVIDIA H200".into(),
            memory_total_mib: Some(143_771.0),
        },
    ];
    h.gpu_source = Some("nvidia-smi".into());
    for c in r.decode.iter_mut().filter(|c| c.status.was_run()) {
        c.gpu_samples = (0..4)
            .flat_map(|k| {
                (0..2).map(move |index| GpuSample {
                    t_s: k as f64 * 0.5,
                    index,
                    utilization_pct: Some(90.0 + k as f64),
                    memory_used_mib: Some(130_000.0),
                    power_w: (index == 0).then_some(600.0),
                    sm_clock_mhz: Some(1980.0),
                })
            })
            .collect();
        let mut counts = vec![0u64; 80];
        counts[40] = 900;
        counts[44] = 100;
        c.gap_histogram = Some(GapHistogram {
            lo_us: 1.0,
            bins_per_decade: 10,
            counts,
            gaps: 1000,
            p50_ms: 10.2,
            p90_ms: 11.9,
            p99_ms: 26.0,
        });
    }
}

/// The client's lag of a cell that kept up, its gaps of `gap_ms` read apart: every figure set.
pub fn client_lag(gap_ms: f64) -> client_lag::ClientLagFigures {
    use client_lag::{BoundedMs, ClientLagFigures, FigureBounds, LagSpread};
    let b = |value: f64, bound: f64| Some(BoundedMs { value, bound });
    ClientLagFigures {
        client_bound: false,
        client_bound_reasons: Vec::new(),
        reads: 3_000,
        read_lag_us: Some(LagSpread {
            p50: 12.5,
            p99: 48.0,
            max: 310.0,
        }),
        tokens_per_read_mean: Some(1.0),
        tokens_per_read_max: Some(2.0),
        reads_with_several_tokens_percent: Some(0.1),
        reads_left_data_percent: Some(0.2),
        socket_bytes_at_read: Some(LagSpread {
            p50: 180.0,
            p99: 360.0,
            max: 1_440.0,
        }),
        dispatch_lag_ms: Some(LagSpread {
            p50: 0.05,
            p99: 0.2,
            max: 0.4,
        }),
        dispatch_late_ms_p99: Some(0.01),
        dispatch_connect_ms_p99: Some(0.15),
        dispatch_write_ms_p99: Some(0.03),
        gaps: 2_997,
        gaps_apart_percent: Some(99.9),
        gaps_merged_percent: Some(0.1),
        gaps_unbounded_percent: Some(0.0),
        bounds_ms: FigureBounds {
            itl_p50: b(gap_ms, 0.02),
            itl_p99: b(gap_ms * 1.5, 0.02),
            itl_mean: b(gap_ms, 0.021),
            ttft_p50: b(45.0, 0.02),
            ttft_p99: b(60.0, 0.02),
            tpot_p50: b(gap_ms, 0.0004),
            tpot_p99: b(gap_ms * 1.2, 0.0004),
        },
        throughput_bound_percent: Some(0.0),
        client_cpu_percent_of_cores: Some(0.75),
        cores: Some(2),
        stamp_source: Some("kernel".into()),
        no_bound_reason: None,
        upstream_batched: false,
        upstream_batching_reason: None,
        upstream_batching_cause: None,
        tokens_batched_percent: Some(0.0),
        tokens_in_multi_token_events_percent: Some(0.0),
        batch_tokens_p50: None,
        batch_period_ms_p50: None,
    }
}
