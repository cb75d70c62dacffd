//! `bench serve`'s run: the engine's measured run turned into vLLM's result — its metrics,
//! per-request lists and optional keys, our own figures (the steady state among them) under
//! `llmspeed` — then vLLM's console summary and result file.
//!
//! Owns the mapping out, as named steps (`output`). It must never send a request (that is
//! `bench::engine::run`), compute vLLM's metrics itself (that is `bench::vllm::metrics`) or lay
//! out the JSON (that is `bench::vllm::result`).

use crate::bench::engine::figures::{
    self, failure_message, one_read_line, stamps_line, NO_TOKEN_CHUNK,
};
use crate::bench::engine::plan::Plan;
use crate::bench::engine::record::{FailureKind, RequestRecord};
use crate::bench::engine::run::Measured;
use crate::bench::engine::shard::Ran;
use crate::bench::engine::steady::{self, SteadyState};
use crate::bench::engine::RunError;
use crate::bench::vllm::args::ServeConfig;
use crate::bench::vllm::metrics::{compute, BenchMetrics, MetricsConfig};
use crate::bench::vllm::result::{self, Detailed, RunInfo};
use crate::bench::vllm::server_timing::{self, ServerLists};
use crate::bench::vllm::shard::{RunInfoData, ShardBlock};
use crate::bench::vllm::{plan, probe, ramp, spec_decode, timeline_html};
use crate::clock::Clock;
use crate::net::Cancel;
use crate::progress::Progress;
use crate::server::diagnose;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

/// Everything a finished run produced.
#[derive(Debug)]
pub struct RunOutput {
    pub info: RunInfo,
    pub metrics: BenchMetrics,
    pub detailed: Detailed,
    /// The `llmspeed` key of the result JSON (`steady_state` is in it).
    pub extras: Value,
    /// `None` outside a closed loop or with `--no-steady-state` (no `llmspeed.steady_state`);
    /// `Some(None)` when the slots never got busy enough (`null`).
    pub steady_state: Option<Option<SteadyState>>,
    /// The server's per-request lists (`server_queue_times`, `server_ttfts`) when it sent its
    /// own timing; vLLM writes them only with `--save-detailed`.
    pub server_lists: Vec<(String, Value)>,
    /// Keys vLLM adds only for features in use, in its order: `--probe-request-rate`'s
    /// `probe_*`, the ramp's `rps_change_events`, the server's `spec_decode_*` figures. Empty
    /// otherwise.
    pub vllm_extra: Vec<(String, Value)>,
}

impl RunOutput {
    /// The result JSON as ordered pairs (`--save-detailed` decides the per-request lists).
    pub fn pairs(&self, detailed: bool) -> Vec<(String, Value)> {
        let mut optional = Vec::new();
        if detailed {
            optional.extend(self.server_lists.iter().cloned());
        }
        optional.extend(self.vllm_extra.iter().cloned());
        result::result_pairs(
            &self.info,
            &self.metrics,
            detailed.then_some(&self.detailed),
            &optional,
            self.extras.clone(),
        )
    }
}

/// Runs the whole benchmark: ready check, model, dataset, warm-ups, the measured run. Progress
/// lines go to `log`. Cancelling `cancel` (Ctrl-C) stops dispatching, ends the requests in
/// flight as `cancelled`, and still reports what was measured.
pub async fn run(
    cfg: &ServeConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
) -> Result<RunOutput, RunError> {
    run_shown(cfg, clock, cancel, log, &mut |_: &str| {}).await
}

/// [`run`], telling `progress` how many requests have completed (vLLM's progress bar).
pub async fn run_shown(
    cfg: &ServeConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<RunOutput, RunError> {
    let plan = plan::of(cfg);
    let measured = crate::bench::engine::run(&plan, clock, cancel, log, progress).await?;
    Ok(output(cfg, &plan, measured, log))
}

/// vLLM's result of a measured run.
fn output(
    cfg: &ServeConfig,
    plan: &Plan,
    mut m: Measured,
    log: &mut (dyn Write + Send),
) -> RunOutput {
    let vllm_extra = optional_keys(cfg, &m);
    let refusal = m
        .refusal
        .as_ref()
        .map(|c| diagnose::explain(c, diagnose::Command::BenchServe));
    if let Some(h) = &refusal {
        let _ = writeln!(log, "the first request was refused: {h}");
    }
    let ours = figures::ours(plan, &m);
    let images =
        (cfg.dataset.kind == crate::workload::datasets::DatasetKind::RandomMm).then(|| {
            let samples = &m.samples;
            result::images_json(
                m.requests
                    .iter()
                    .map(|f| crate::workload::datasets::random_mm::images(&samples[f.index])),
            )
        });
    let lists = Lists::of(&mut m, refusal.as_deref());
    let metrics = compute(
        &lists.records,
        m.duration_ns,
        &MetricsConfig {
            percentiles: cfg.percentiles.clone(),
            goodput: cfg.goodput,
        },
    );
    let steady_state = steady_state_of(cfg, &lists.records, metrics.duration_s);
    let mut extras = extras(cfg, ours, &metrics, &lists);
    if let Some(images) = images {
        extras["images"] = images;
    }
    // vLLM 0.33 has no steady state: ours goes under our own key.
    if let Some(ss) = &steady_state {
        extras["steady_state"] = ss.as_ref().map_or(Value::Null, SteadyState::to_json);
    }
    let server_lists = lists.server.keys();
    if let Some(line) = figures::stop_line(&m) {
        let _ = writeln!(log, "{line}");
    }
    let info = run_info(cfg, &m);
    if let Some(sh) = cfg.shard {
        let block = ShardBlock {
            ran: Ran {
                shard: sh,
                start_at_unix_ns: cfg.start_at_unix_ns,
                start_unix_ns: m.start_unix_ns,
                end_unix_ns: m.start_unix_ns + m.duration_ns,
            },
            seed: cfg.dataset.seed,
            info: RunInfoData::new(&info, &cfg.percentiles, cfg.goodput),
            requests: lists.indices.into_iter().zip(lists.records).collect(),
            server: match server_lists.is_empty() {
                true => ServerLists::default(),
                false => lists.server,
            },
            dispatched_ns: match cfg.schedule.ramp {
                Some(_) => m.dispatched_ns.clone(),
                None => Vec::new(),
            },
        };
        extras["shard"] = block.to_json();
    }
    RunOutput {
        info,
        metrics,
        detailed: lists.detailed,
        extras,
        steady_state,
        server_lists,
        vllm_extra,
    }
}

/// The keys vLLM adds only for features in use, in its order: probes, the ramp's rate changes,
/// speculative decoding.
fn optional_keys(cfg: &ServeConfig, m: &Measured) -> Vec<(String, Value)> {
    let mut keys = probe::stats(&m.probes).unwrap_or_default();
    let changes = ramp::rps_changes(
        &cfg.schedule,
        m.samples.len(),
        m.start_unix_ns,
        &m.dispatched_ns,
    );
    if !changes.is_empty() {
        keys.push(("rps_change_events".into(), ramp::to_json(&changes)));
    }
    let before = m.metrics_before.as_deref().and_then(spec_decode::parse);
    let after = m.metrics_after.as_deref().and_then(spec_decode::parse);
    if let (Some(b), Some(a)) = (before, after) {
        keys.extend(spec_decode::keys(&b, &a).unwrap_or_default());
    }
    keys
}

/// The run's requests as vLLM's lists, in request order.
struct Lists {
    records: Vec<RequestRecord>,
    /// Each record's request number.
    indices: Vec<usize>,
    detailed: Detailed,
    /// What the dataset asked for, beside vLLM's `input_lens` (the server's counts).
    dataset_input_lens: Vec<u64>,
    /// The first message of each failure kind.
    first_failures: BTreeMap<FailureKind, Value>,
    /// The server's own queue time and TTFT of each request, where it sent them.
    server: ServerLists,
}

impl Lists {
    /// Takes the requests out of `m`. `refusal` explains a `400` with an empty body.
    fn of(m: &mut Measured, refusal: Option<&str>) -> Lists {
        let n = m.requests.len();
        let mut l = Lists {
            records: Vec::with_capacity(n),
            indices: Vec::with_capacity(n),
            detailed: Detailed::default(),
            dataset_input_lens: Vec::with_capacity(n),
            first_failures: BTreeMap::new(),
            server: ServerLists::default(),
        };
        for f in std::mem::take(&mut m.requests) {
            let rec = f.record;
            let d = &mut l.detailed;
            l.indices.push(f.index);
            l.dataset_input_lens.push(m.samples[f.index].prompt_len);
            d.input_lens.push(f.input_len);
            d.output_lens.push(if rec.is_success() {
                rec.output_tokens
            } else {
                0
            });
            d.ttfts.push(rec.ttft_ns().unwrap_or(0) as f64 / 1e9);
            d.itls.push(rec.itls_ns().map(|g| g as f64 / 1e9).collect());
            d.start_times.push(rec.start_ns as f64 / 1e9);
            d.errors.push(match rec.failure() {
                None => String::new(),
                Some(kind) => {
                    let (status, message) = match &f.timeline.outcome {
                        Err(e) => (e.status, e.message.as_str()),
                        Ok(()) => (f.timeline.status, NO_TOKEN_CHUNK),
                    };
                    l.first_failures
                        .entry(kind)
                        .or_insert_with(|| match refusal {
                            Some(h) if status == Some(400) => {
                                failure_message(status, &format!("{message}: {h}"))
                            }
                            _ => failure_message(status, message),
                        });
                    match &f.timeline.outcome {
                        Err(e) => e.to_string(),
                        Ok(()) => format!("{kind}: {NO_TOKEN_CHUNK}"),
                    }
                }
            });
            l.server.push(f.timeline.server_timing);
            d.generated_texts
                .push(f.timeline.content_text.unwrap_or_default());
            l.records.push(rec);
        }
        l
    }
}

/// The `llmspeed` key: the engine's figures and those only vLLM's metrics and flags give.
fn extras(cfg: &ServeConfig, ours: Value, metrics: &BenchMetrics, lists: &Lists) -> Value {
    let mut x = ours;
    let failures: Map<String, Value> = metrics
        .failures
        .iter()
        .map(|(k, n)| (k.as_str().to_string(), json!(n)))
        .collect();
    x["failures_by_kind"] = json!(failures);
    x["first_failure_by_kind"] = json!(lists
        .first_failures
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.clone()))
        .collect::<Map<String, Value>>());
    // Our exact peak of overlapping requests; vLLM's bucketed figure is under its own key.
    x["max_concurrent_requests_exact"] = json!(metrics.max_concurrent_requests);
    if cfg.save_detailed {
        x["dataset_input_lens"] = json!(lists.dataset_input_lens);
    }
    let ttfts: Vec<Option<f64>> = lists
        .records
        .iter()
        .map(|r| {
            r.is_success()
                .then(|| r.ttft_ns())
                .flatten()
                .map(|t| t as f64 / 1e9)
        })
        .collect();
    if let Some(split) = server_timing::split_json(&server_timing::splits(&ttfts, &lists.server)) {
        x["ttft_split_ms"] = split;
    }
    x
}

/// The result's header. A stopped run counts only the requests that ran.
fn run_info(cfg: &ServeConfig, m: &Measured) -> RunInfo {
    let mut num_prompts = cfg.dataset.num_prompts;
    if m.stopped {
        num_prompts = num_prompts.saturating_sub(m.unsent + m.cut);
    }
    RunInfo {
        date: result::format_date(SystemTime::now()),
        backend: cfg.conn.backend.as_str().to_string(),
        label: cfg.label.clone(),
        model_id: m.model.clone(),
        tokenizer_id: cfg
            .conn
            .tokenizer
            .clone()
            .unwrap_or_else(|| m.model.clone()),
        num_prompts,
        metadata: cfg.metadata.clone(),
        request_rate: cfg.request_rate,
        burstiness: cfg.schedule.burstiness,
        max_concurrency: cfg.max_concurrency,
        ramp: cfg.schedule.ramp,
        // The queue metrics exist only where vLLM 0.33 reports them.
        selected: cfg
            .metrics
            .iter()
            .copied()
            .filter(|k| k.reported(cfg.max_concurrency, cfg.request_rate))
            .collect(),
        goodput: cfg.goodput.is_some(),
    }
}

/// The steady-state window and its figures where vllm-bench computes them: a closed loop
/// (`--max-concurrency` with `--request-rate inf`, no ramp) without `--no-steady-state`.
fn steady_state_of(
    cfg: &ServeConfig,
    records: &[RequestRecord],
    duration_s: f64,
) -> Option<Option<SteadyState>> {
    let ss = cfg.steady_state?;
    let target = cfg.max_concurrency?;
    if cfg.request_rate.is_finite() || cfg.schedule.ramp.is_some() {
        return None;
    }
    let min_window = ss
        .min_window_s
        .unwrap_or_else(|| steady::default_min_window_s(duration_s));
    Some(
        steady::detect_window(records, target, ss.threshold, min_window, duration_s)
            .map(|w| steady::compute(records, &w, &cfg.percentiles)),
    )
}

/// The steady-state block printed after vLLM's summary.
fn write_steady_state(w: &mut impl Write, ss: Option<&SteadyState>) -> std::io::Result<()> {
    let Some(ss) = ss else {
        return writeln!(
            w,
            "Steady state: no window (the busy slots never reached the threshold)"
        );
    };
    let win = &ss.window;
    writeln!(w, "{:-^50}", "Steady State")?;
    writeln!(
        w,
        "{:<40} {:.2}-{:.2} ({:.2})",
        "Window (s after start, duration):", win.start_s, win.end_s, win.duration_s
    )?;
    writeln!(
        w,
        "{:<40} {} of {} ({:.0}%)",
        "Busy slots needed:",
        win.threshold_abs,
        win.target_concurrency,
        100.0 * win.threshold
    )?;
    // Labels of our own: a script that reads vLLM's console by label (grep, or a dict of label
    // to value) must find each of vLLM's labels once, with vLLM's meaning.
    for (label, v) in [
        ("Steady request throughput (req/s):", ss.request_throughput),
        ("Steady output throughput (tok/s):", ss.output_throughput),
        (
            "Steady total throughput (tok/s):",
            ss.total_token_throughput,
        ),
        ("Steady mean TTFT (ms):", ss.ttft_ms.mean),
        ("Steady mean TPOT (ms):", ss.tpot_ms.mean),
        ("Steady mean ITL (ms):", ss.itl_ms.mean),
    ] {
        writeln!(w, "{label:<40} {v:<10.2}")?;
    }
    if let Some(warn) = &win.warning {
        writeln!(w, "warning: {warn}")?;
    }
    writeln!(w, "{}", "=".repeat(50))
}

/// Where `--save-result` writes: `--result-dir` joined with `--result-filename` or vLLM's name.
pub fn result_path(cfg: &ServeConfig, info: &RunInfo) -> PathBuf {
    let name = cfg
        .result_filename
        .clone()
        .unwrap_or_else(|| result::default_filename(info));
    match &cfg.result_dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    }
}

/// Prints vLLM's summary (and failures by kind) and saves the JSON when asked; returns the
/// saved path.
pub fn report(
    cfg: &ServeConfig,
    out: &RunOutput,
    w: &mut impl Write,
) -> Result<Option<PathBuf>, RunError> {
    let io = |e: std::io::Error| RunError::Save("stdout".into(), e);
    // vLLM prints its traffic lines before the run; on stdout the order is the same.
    result::write_lead_in(w, &out.info, cfg.self_timed).map_err(io)?;
    if !out.metrics.failures.is_empty() {
        let kinds: Vec<String> = out
            .metrics
            .failures
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(w, "Failed requests by kind: {}", kinds.join(", ")).map_err(io)?;
        if let Some(first) = out.extras["first_failure_by_kind"].as_object() {
            for (kind, m) in first {
                let status = match m["status"].as_u64() {
                    Some(s) => format!(" (HTTP {s})"),
                    None => String::new(),
                };
                let msg = m["message"].as_str().unwrap_or("");
                writeln!(w, "First {kind}{status}: {msg}").map_err(io)?;
            }
        }
    }
    result::write_summary(w, &out.info, &out.metrics).map_err(io)?;
    probe::write_block(w, &out.vllm_extra).map_err(io)?;
    spec_decode::write_block(w, &out.vllm_extra).map_err(io)?;
    if let Some(ss) = &out.steady_state {
        write_steady_state(w, ss.as_ref()).map_err(io)?;
    }
    let x = &out.extras;
    writeln!(
        w,
        "llmspeed: send lag p99 {:.2} ms, timer lag p99 {:.2} ms, client CPU {:.2} s ({:.0}% of one core)",
        x["send_lag_ms"]["p99"].as_f64().unwrap_or(0.0),
        x["timer_lag_ms"]["p99"].as_f64().unwrap_or(0.0),
        x["client_cpu_user_s"].as_f64().unwrap_or(0.0) + x["client_cpu_sys_s"].as_f64().unwrap_or(0.0),
        x["client_cpu_percent_of_one_core"].as_f64().unwrap_or(0.0),
    )
    .map_err(io)?;
    writeln!(w, "{}", stamps_line(x)).map_err(io)?;
    if let Some(line) = one_read_line(x) {
        writeln!(w, "{line}").map_err(io)?;
    }
    for line in figures::client_lag_lines(x) {
        writeln!(w, "{line}").map_err(io)?;
    }
    if let Some(line) = server_timing::split_line(x) {
        writeln!(w, "{line}").map_err(io)?;
    }
    let path = result_path(cfg, &out.info);
    if let Some(th) = cfg.plot_timeline {
        // Where vLLM puts it, also when the JSON itself is not saved.
        let html_path = timeline_html::path_for(&path);
        let run: serde_json::Map<String, Value> = out.pairs(false).into_iter().collect();
        let header = crate::report::header::RunHeader::bench_serve(&run);
        let html = timeline_html::render(&timeline_html::requests(&out.detailed), th, &header);
        let err = |e| RunError::Save(html_path.display().to_string(), e);
        // vLLM makes --result-dir before either file is written; the page may come first.
        if let Some(dir) = html_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        std::fs::write(&html_path, html).map_err(err)?;
        writeln!(w, "Timeline plot saved to: {}", html_path.display()).map_err(io)?;
    }
    if !(cfg.save_result || cfg.append_result) {
        return Ok(None);
    }
    result::save(&path, &out.pairs(cfg.save_detailed), cfg.append_result)
        .map_err(|e| RunError::Save(path.display().to_string(), e))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    // The engine's join loop sends the headroom; it is tested through this front end, since
    // the engine names none (`bench::tests::engine_imports_no_front_end`).
    use super::*;
    use crate::progress::{Event, Headroom, Phase};
    use std::time::Instant;

    /// The events a run sends, in order: the phase they came in, and each headroom.
    #[derive(Default)]
    struct Seen {
        phase: Option<Phase>,
        finished: usize,
        headroom: Vec<(Option<Phase>, usize, Headroom)>,
    }

    impl Progress for Seen {
        fn event(&mut self, e: &Event<'_>) {
            match e {
                Event::Phase { phase, .. } => self.phase = Some(*phase),
                Event::StepDone { .. } => self.finished += 1,
                Event::Headroom(h) => self.headroom.push((self.phase, self.finished, *h)),
                _ => {}
            }
        }
    }

    /// Runs `bench serve` with `args` against the fast mock (its decode step `decode_us`),
    /// recording the events; and the run's wall time, s.
    fn run_seen(decode_us: f64, args: &[&str]) -> (Seen, f64) {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: crate::bench::vllm::args::ServeArgs,
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut mock = crate::mock::MockConfig::profile(crate::mock::Profile::Fast);
            mock.engine.decode.base_us = decode_us;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let (stop, rx) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(crate::mock::serve(listener, mock, async move {
                let _ = rx.await;
            }));
            let mut argv = vec!["x", "--base-url", &url];
            argv.extend_from_slice(args);
            let cfg = Wrap::parse_from(argv).a.validate().expect("valid flags");
            let mut seen = Seen::default();
            let t0 = Instant::now();
            run_shown(
                &cfg,
                Clock::new(),
                &Cancel::new(),
                &mut Vec::new(),
                &mut seen,
            )
            .await
            .expect("run");
            let wall_s = t0.elapsed().as_secs_f64();
            let _ = stop.send(());
            let _ = server.await;
            (seen, wall_s)
        })
    }

    #[test]
    fn the_steady_state_block_repeats_none_of_vllms_labels() {
        use crate::bench::vllm::metrics::MetricKind;
        use crate::bench::vllm::result::write_summary;
        // Two requests side by side for most of a second: a closed loop of 2 whose window is
        // found, so both blocks are printed.
        let r = RequestRecord::succeeded;
        let records = [
            r(0, &[100_000_000, 500_000_000, 900_000_000]),
            r(0, &[120_000_000, 520_000_000, 910_000_000]),
        ];
        let m = compute(&records, 1_000_000_000, &MetricsConfig::default());
        let window = steady::detect_window(&records, 2, 0.95, 0.1, 1.0).expect("a window");
        let ss = steady::compute(&records, &window, &[99.0]);
        let info = RunInfo {
            date: "20261207-000000".into(),
            backend: "openai".into(),
            label: None,
            model_id: "m".into(),
            tokenizer_id: "m".into(),
            num_prompts: 2,
            metadata: vec![],
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            max_concurrency: Some(2),
            ramp: None,
            selected: vec![MetricKind::Ttft, MetricKind::Tpot, MetricKind::Itl],
            goodput: false,
        };
        let mut vllm = Vec::new();
        write_summary(&mut vllm, &info, &m).unwrap();
        let mut all = vllm.clone();
        write_steady_state(&mut all, Some(&ss)).unwrap();
        let (vllm, all) = (
            String::from_utf8(vllm).unwrap(),
            String::from_utf8(all).unwrap(),
        );
        assert!(all.contains("Steady mean TTFT (ms):"), "{all}");
        let label = |l: &str| l.split(':').next().unwrap_or("").to_string() + ":";
        for l in vllm.lines().filter(|l| l.contains(':')) {
            let times = all.lines().filter(|x| label(x) == label(l)).count();
            assert_eq!(times, 1, "{:?} printed {times} times:\n{all}", label(l));
        }
    }

    #[test]
    fn the_live_display_hears_the_clients_headroom_while_requests_finish() {
        // Six requests, two at a time, each 200 tokens 2.5 ms apart: three waves of about
        // 0.5 s (more on a busy machine, never less), so a once-a-second report falls between
        // the first wave's end and the run's.
        let (seen, wall_s) = run_seen(
            2500.0,
            &[
                "--num-prompts",
                "6",
                "--max-concurrency",
                "2",
                "--random-input-len",
                "16",
                "--random-output-len",
                "200",
                "--ignore-eos",
            ],
        );
        assert_eq!(seen.finished, 6);
        assert!(!seen.headroom.is_empty(), "no headroom in {wall_s:.2} s");
        // At most once a second, and only in the requests phase.
        assert!(
            seen.headroom.len() as f64 <= wall_s + 1.0,
            "{} reports in {wall_s:.2} s",
            seen.headroom.len()
        );
        for (phase, _, h) in &seen.headroom {
            assert_eq!(*phase, Some(Phase::Requests));
            if let (Some(mean), Some(max)) = (h.read_lag_us_mean, h.read_lag_us_max) {
                assert!(0.0 <= mean && mean <= max, "{h:?}");
            }
            if let Some(c) = h.cpu_percent_of_cores {
                assert!((0.0..=100.0 * 1.05).contains(&c), "{h:?}");
            }
        }
        // The read lags are those of requests that finished before the report (on Linux every
        // read carries the kernel's stamp): a report after the first wave carries them, and
        // none before any request finished does.
        for (_, finished, h) in &seen.headroom {
            if *finished == 0 {
                assert_eq!(h.read_lag_us_mean, None, "{h:?}");
            }
        }
        if cfg!(target_os = "linux") {
            assert!(
                seen.headroom
                    .iter()
                    .any(|(_, f, h)| *f > 0 && h.read_lag_us_mean.is_some()),
                "{:?}",
                seen.headroom
            );
        }
    }

    #[test]
    fn a_rate_limited_run_reports_headroom_while_it_still_dispatches() {
        // Twelve short requests at 4 per second, evenly spaced (burstiness 1000): the last is
        // sent about 2.75 s after the first, each ends within milliseconds of its send. The
        // headroom must come while the dispatcher waits for the next send time (before, it
        // came only from the join loop after the last send, by when every request had ended).
        let (seen, wall_s) = run_seen(
            1000.0,
            &[
                "--num-prompts",
                "12",
                "--request-rate",
                "4",
                "--burstiness",
                "1000",
                "--random-input-len",
                "16",
                "--random-output-len",
                "4",
                "--ignore-eos",
            ],
        );
        assert_eq!(seen.finished, 12);
        let during: Vec<_> = seen.headroom.iter().filter(|(_, f, _)| *f < 12).collect();
        assert!(
            !during.is_empty(),
            "no headroom before the last request ended in {wall_s:.2} s: {:?}",
            seen.headroom
        );
        for (phase, _, _) in &seen.headroom {
            assert_eq!(*phase, Some(Phase::Requests));
        }
        if cfg!(target_os = "linux") {
            assert!(
                during
                    .iter()
                    .any(|(_, f, h)| *f > 0 && h.read_lag_us_mean.is_some()),
                "{during:?}"
            );
        }
    }
}
