//! `llmspeed selftest --external` and `--pin`: another benchmark client scored against the
//! fixed-gap server's trace. llmspeed's own `bench serve` plays the external client (it keeps
//! vLLM's contract: `x-request-id: {prefix}{i}`, `--save-detailed` arrays in request order); a
//! shell script writing a hand-made result checks the plumbing with exact counts; a hand-made
//! trace and result check the scores exactly; and a spawned shell shows the CPU mask it got.
//! Everything binds 127.0.0.1:0 (the mock inside the self-test).

use llmspeed::mock::trace::TraceRec;
use llmspeed::selftest::external::{self, External, PREFIX};
use llmspeed::selftest::pin::{allowed_cpus, CpuList, Pin};
use llmspeed::selftest::{run_pinned, score_result, CpuScope, Shape};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_llmspeed");

fn small() -> Shape {
    Shape {
        streams: 4,
        gap: Duration::from_millis(5),
        tokens: 30,
        first_token: Duration::ZERO,
        client_threads: 1,
        kernel_stamps: true,
        packet_stamps: false,
        send_stamps: false,
        preconnect: false,
    }
}

/// llmspeed's own `bench serve`, written as a user would write it for `--external`.
fn bench_serve_command() -> String {
    format!(
        "{BIN} bench serve --base-url {{url}} --model {{model}} --dataset-name custom \
         --dataset-path {{dataset}} --num-prompts {{streams}} --custom-output-len {{tokens}} \
         --ignore-eos --request-id-prefix {{prefix}} --save-result --save-detailed \
         --result-dir {{result_dir}}"
    )
}

#[test]
fn llmspeed_bench_serve_as_an_external_client_is_matched_token_by_token() {
    let ext = External {
        command: bench_serve_command(),
        keep: false,
    };
    let r = external::run(&small(), &ext, None).expect("the external self-test runs");
    assert_eq!(r.failed_streams, 0, "{:?}", r.first_error);
    assert_eq!(r.tokens, 4 * 30);
    assert_eq!(r.trace_records, 4 * 30);
    assert_eq!(r.tokens_matched, 4 * 30, "{r:?}");
    assert_eq!(r.requests_itl_mismatch, 0, "{r:?}");
    assert_eq!(r.client, ext.command);
    assert_eq!(r.client_threads, None);
    // Half the gaps within a whole gap of the truth, on however loaded a machine.
    assert!(r.gap_error_us_p50 < 5_000.0, "{r:?}");
    assert!(r.gap_error_us_p50 <= r.gap_error_us_max);
    // The server's own TTFT: at least one 5 ms step.
    assert!(r.server_ttft_ms_mean >= 4.0, "{r:?}");
    let cpu = r.client_cpu_ns_per_token.expect("tokens were measured");
    assert!(cpu > 0.0 && cpu.is_finite(), "{r:?}");
    let (user, sys) = (
        r.client_cpu_user_ns_per_token,
        r.client_cpu_sys_ns_per_token,
    );
    assert!(cpu >= user.unwrap().max(sys.unwrap()));
    // CPU is counted while the client streamed, not its start-up or result writing: the
    // whole process's figure must be larger.
    assert_eq!(r.client_cpu_scope, CpuScope::StreamingWindow, "{r:?}");
    let whole = r
        .client_cpu_whole_run_ns_per_token
        .expect("whole-run figure");
    assert!(whole > cpu, "{r:?}");
    assert!(r.peak_rss_mb > 1.0, "{r:?}");
    assert_eq!(r.work_dir, None, "the work folder is removed after success");
    // What an external client cannot be scored on is null, never 0.
    let json = serde_json::to_value(&r).unwrap();
    for k in [
        "delivery_us_p50",
        "delivery_us_min",
        "ttft_error_ms_mean",
        "true_ttft_ms_mean",
        "client_threads",
    ] {
        assert!(json[k].is_null(), "{k} should be null: {json}");
    }
    for k in [
        "ttft_arrival_error_ms_p50",
        "gap_error_us_p99",
        "coalesced_gaps",
    ] {
        assert!(json[k].as_f64().is_some(), "{k} missing: {json}");
    }
}

/// The script makes the server trace every id with the real client (into a side folder), then
/// writes its own result: request 0 is scored, request 1 failed, request 2 has one ITL too
/// few, request 3 reports every gap as 10 s.
#[test]
fn a_hand_made_result_is_read_and_counted_exactly() {
    let shape = Shape {
        tokens: 4,
        ..small()
    };
    let real = bench_serve_command().replace("{result_dir}", "{result_dir}/../real");
    let result = r#"{"ttfts": [100.0, 0.0, 0.01, 0.01],
        "itls": [[10.0, 10.0, 10.0], [], [0.005, 0.005], [10.0, 10.0, 10.0]],
        "output_lens": [4, 0, 4, 3], "errors": ["", "HTTP 500: boom", "", ""]}"#;
    let ext = External {
        command: format!("{real} >/dev/null && printf '%s' '{result}' > {{result_dir}}/fake.json"),
        keep: true,
    };
    let r = external::run(&shape, &ext, None).expect("the external self-test runs");
    let dir = r.work_dir.clone().expect("--keep keeps the work folder");
    assert!(std::path::Path::new(&dir).join("result/fake.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(r.tokens, 11, "the sum of output_lens");
    assert_eq!(r.failed_streams, 1);
    assert_eq!(
        r.first_error.as_deref(),
        Some("request selftest-ext-1: HTTP 500: boom")
    );
    assert_eq!(r.requests_itl_mismatch, 1);
    assert_eq!(r.tokens_matched, 8, "requests 0 and 3, 4 tokens each");
    assert_eq!(r.trace_records, 16);
    // Every scored gap is 10 s against a server gap of about 5 ms.
    assert!(
        r.gap_error_us_p50 > 9_900_000.0 && r.gap_error_us_max <= 10_000_000.0,
        "{r:?}"
    );
    assert_eq!(r.coalesced_gaps, 0);
    // Request 0 claims 100 s to its first token: the largest TTFT error against arrival.
    assert!(r.ttft_arrival_error_ms_max > 99_000.0, "{r:?}");
}

fn rec(id: &str, index: u32, t_ns: u64, arrival_ns: u64) -> TraceRec {
    TraceRec {
        request_id_json: Arc::from(format!("\"{id}\"")),
        choice: 0,
        index,
        t_ns,
        due_ns: t_ns - 100_000,
        arrival_ns,
        ..TraceRec::default()
    }
}

/// Worked by hand, nominal gap 1 ms. Request 0: arrival 1 ms, writes at 2, 3, 4 ms (server
/// TTFT 1 ms); the client's ITLs are the true 1 ms gaps shifted by +0.25 ms and -0.95 ms, its
/// TTFT 1.4 ms. Request 1: arrival 0, writes at 5, 6, 7 ms (server TTFT 5 ms); ITLs shifted by
/// 0 and +0.5 ms, TTFT 5.1 ms.
/// - gap errors 250, 950, 0, 500 us: p50 (numpy-linear) 375, max 950, mean 425;
/// - 0.05 ms < 10% of the 1 ms gap: one coalesced gap;
/// - TTFT errors against arrival 0.4 and 0.1 ms: mean 0.25; server TTFT mean 3 ms;
/// - server lag 100 us on every token.
#[test]
fn scores_equal_the_hand_worked_values() {
    let ms = 1_000_000;
    let p = PREFIX;
    let trace = [
        rec(&format!("{p}0"), 0, 2 * ms, ms),
        rec(&format!("{p}0"), 1, 3 * ms, ms),
        rec(&format!("{p}0"), 2, 4 * ms, ms),
        rec(&format!("{p}1"), 0, 5 * ms, 0),
        rec(&format!("{p}1"), 1, 6 * ms, 0),
        rec(&format!("{p}1"), 2, 7 * ms, 0),
    ];
    let json = r#"{"ttfts": [0.0014, 0.0051], "itls": [[0.00125, 0.00005], [0.001, 0.0015]],
        "output_lens": [3, 3], "errors": ["", ""], "start_times": [0.0, 0.0]}"#;
    let shape = Shape {
        streams: 2,
        gap: Duration::from_millis(1),
        tokens: 3,
        ..small()
    };
    let r = score_result(&shape, &trace, json, p).unwrap();
    assert_eq!(r.tokens, 6);
    assert_eq!(r.tokens_matched, 6);
    assert_eq!(r.failed_streams, 0);
    assert_eq!(r.requests_itl_mismatch, 0);
    assert_eq!(r.coalesced_gaps, 1);
    assert_eq!(r.gap_error_us_p50, 375.0);
    assert_eq!(r.gap_error_us_max, 950.0);
    assert_eq!(r.gap_error_us_mean, 425.0);
    assert!((r.ttft_arrival_error_ms_mean - 0.25).abs() < 1e-12, "{r:?}");
    assert_eq!(r.ttft_arrival_error_ms_max, 0.4);
    assert_eq!(r.server_ttft_ms_mean, 3.0);
    assert_eq!(r.server_write_lag_us_max, 100.0);
    assert_eq!(r.delivery_us_p50, None);
    assert_eq!(r.ttft_error_ms_mean, None);
    assert_eq!(r.matched_by, "request_id");
    // Spans (no latencies in the result: E2EL = TTFT + ITLs). Request 0: server E2EL 4 − 1 =
    // 3 ms, TPOT (3 − 1) / 2 = 1 ms; client E2EL 1.4 + 1.25 + 0.05 = 2.7 ms (−0.3), TPOT
    // (2.7 − 1.4) / 2 = 0.65 ms (−350 us). Request 1: server E2EL 7 ms, TPOT 1 ms; client
    // E2EL 5.1 + 1 + 1.5 = 7.6 ms (+0.6), TPOT (7.6 − 5.1) / 2 = 1.25 ms (+250 us).
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(near(r.tpot_error_us_mean, -50.0), "{r:?}");
    assert!(near(r.tpot_error_us_p50, -50.0), "{r:?}");
    assert!(near(r.tpot_error_us_max, 250.0), "{r:?}");
    assert!(near(r.e2el_error_ms_mean, 0.15), "{r:?}");
    assert!(near(r.e2el_error_ms_max, 0.6), "{r:?}");
    assert!(near(r.server_tpot_ms_mean, 1.0), "{r:?}");
    assert!(near(r.server_e2el_ms_mean, 5.0), "{r:?}");

    let e = score_result(
        &Shape {
            streams: 3,
            ..shape
        },
        &trace,
        json,
        p,
    )
    .unwrap_err();
    assert!(
        e.contains("holds 2 requests") && e.contains("expects 3"),
        "{e}"
    );
}

#[test]
fn a_failing_command_is_an_error_with_its_stderr_tail() {
    let ext = External {
        command: "echo starting; echo 'no route to {url}' >&2; exit 3".into(),
        keep: false,
    };
    let e = external::run(&small(), &ext, None).unwrap_err().to_string();
    assert!(e.contains("no route to http://127.0.0.1:"), "{e}");
    assert!(e.contains("exit status: 3"), "{e}");
    // The folder is kept on failure and named.
    let dir = e
        .rsplit("the work folder is kept: ")
        .next()
        .expect("the error names the work folder")
        .trim();
    assert!(std::path::Path::new(dir).join("stderr.txt").exists(), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_command_that_writes_no_result_is_an_error() {
    let ext = External {
        command: "true".into(),
        keep: false,
    };
    let e = external::run(&small(), &ext, None).unwrap_err().to_string();
    assert!(e.contains("wrote no *.json"), "{e}");
    let dir = e.rsplit("the work folder is kept: ").next().unwrap().trim();
    std::fs::remove_dir_all(dir).unwrap();
}

/// The child gets the client CPUs before `sh` starts: the shell's own view of its mask.
#[cfg(target_os = "linux")]
#[test]
fn a_pinned_child_runs_on_the_client_cpus() {
    let allowed = allowed_cpus().unwrap();
    // The last allowed CPU: unlike the unpinned mask whenever there are two or more.
    let cpu = *allowed.last().unwrap();
    let list = CpuList::parse(&cpu.to_string()).unwrap();
    let out = std::env::temp_dir().join(format!("llmspeed-pin-{}.txt", std::process::id()));
    let file = std::fs::File::create(&out).unwrap();
    let child = external::spawn(
        "grep Cpus_allowed_list /proc/self/status",
        Some(&list),
        file.into(),
        Stdio::null(),
    )
    .unwrap();
    let run = external::wait(child).unwrap();
    assert!(run.status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert_eq!(text.trim(), format!("Cpus_allowed_list:\t{cpu}"));
    assert!(run.cpu.total_ns() < 10_000_000_000, "{:?}", run.cpu);
}

#[cfg(target_os = "linux")]
#[test]
fn an_in_process_pinned_run_reports_its_cpus() {
    let allowed = allowed_cpus().unwrap();
    let (s, c) = (allowed[0], *allowed.last().unwrap());
    let pin = Pin::parse(&format!("{s}:{c}")).unwrap();
    let shape = Shape {
        tokens: 10,
        ..small()
    };
    let r = run_pinned(&shape, &pin).expect("selftest runs");
    assert_eq!(r.failed_streams, 0, "{:?}", r.first_error);
    assert_eq!(r.tokens_matched, 40);
    assert_eq!(r.server_cpus, Some(vec![s]));
    assert_eq!(r.client_cpus, Some(vec![c]));
    assert_eq!(r.client, "llmspeed (in-process)");
    // Per-stream spans are scored for our own client too: the server's TPOT is its 5 ms gap
    // (a late write moves a stream's last write, not the pace), and our TPOT, from kernel
    // stamps of the first and last token, is within a tenth of that.
    assert!(
        r.server_tpot_ms_mean > 4.0 && r.server_tpot_ms_mean < 10.0,
        "{r:?}"
    );
    assert!(r.server_e2el_ms_mean > r.server_ttft_ms_mean, "{r:?}");
    assert!(r.tpot_error_us_p50.abs() < 500.0, "{r:?}");
    assert_eq!(r.matched_by, "request_id");
    // The caller's thread got its own mask back.
    assert_eq!(allowed_cpus().unwrap(), allowed);
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_name_what_is_wrong() {
    let (code, _, err) = cli(&["selftest", "--pin", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("SERVER_CPUS:CLIENT_CPUS"), "{err}");
    let (code, _, err) = cli(&["selftest", "--pin", "0:2-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("backwards"), "{err}");
    let (code, _, err) = cli(&["selftest", "--external", "x --url {base}"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown placeholder {base}"), "{err}");
    let (code, _, err) = cli(&["selftest", "--keep"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cli(&["selftest", "--client-threads", "2", "--external", "true"]);
    assert_eq!(code, 2, "{err}");
    if cfg!(target_os = "linux") {
        let (code, _, err) = cli(&["selftest", "--pin", "1023:0"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("server CPU 1023 is not one this process may use"),
            "{err}"
        );
    }
}

#[test]
fn cli_external_json_is_one_object() {
    let cmd = bench_serve_command();
    let (code, out, err) = cli(&[
        "selftest",
        "--streams",
        "2",
        "--gap",
        "5ms",
        "--tokens",
        "10",
        "--json",
        "--external",
        &cmd,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["tokens_matched"], 20);
    assert_eq!(v["client"], cmd.as_str());
    assert!(v["delivery_us_p99"].is_null());
    assert!(v["server_cpus"].is_null());
}

/// A client that sends no ids (SGLang's): the server names the requests itself, and request
/// `i` of the result is the `i`-th to arrive. Worked by hand, nominal gap 1 ms: cmpl-b arrives
/// at 0 and is written at 1, 2, 3 ms; cmpl-a arrives at 4 ms (after cmpl-b's last write) and
/// is written at 5, 7, 9 ms. The result, SGLang's JSON lines (the last line is the run's, with
/// Python's bare NaN), reports request 0 with 1 ms ITLs and request 1 with 2 ms ITLs: matched
/// by arrival, every gap error is 0 (by name, cmpl-a first, each would be 1000 us); TTFT
/// errors 1.1 − 1 and 1.2 − 1 ms.
#[test]
fn a_client_without_ids_is_matched_by_arrival_order() {
    let ms = 1_000_000;
    let trace = [
        rec("cmpl-a", 0, 5 * ms, 4 * ms),
        rec("cmpl-a", 1, 7 * ms, 4 * ms),
        rec("cmpl-a", 2, 9 * ms, 4 * ms),
        rec("cmpl-b", 0, ms, 0),
        rec("cmpl-b", 1, 2 * ms, 0),
        rec("cmpl-b", 2, 3 * ms, 0),
    ];
    let jsonl = concat!(
        r#"{"ttfts": [1.0], "itls": [[]], "output_lens": [1], "errors": [""]}"#,
        "\n",
        r#"{"std_e2e_latency_ms": NaN, "ttfts": [0.0011, 0.0012], "#,
        r#""itls": [[0.001, 0.001], [0.002, 0.002]], "output_lens": [3, 3], "#,
        r#""errors": ["", ""], "generated_texts": ["a", "b"]}"#,
        "\n"
    );
    let shape = Shape {
        streams: 2,
        gap: Duration::from_millis(1),
        tokens: 3,
        ..small()
    };
    let r = score_result(&shape, &trace, jsonl, PREFIX).unwrap();
    assert_eq!(r.matched_by, "arrival_order");
    assert_eq!(r.tokens_matched, 6);
    assert_eq!(r.requests_itl_mismatch, 0);
    assert_eq!(r.gap_error_us_max, 0.0, "{r:?}");
    assert!((r.ttft_arrival_error_ms_max - 0.2).abs() < 1e-9, "{r:?}");
    assert!((r.ttft_arrival_error_ms_mean - 0.15).abs() < 1e-9, "{r:?}");
    // E2EL: request 0 1.1 + 2 = 3.1 ms against 3; request 1 1.2 + 4 = 5.2 ms against 5.
    assert!((r.e2el_error_ms_mean - 0.15).abs() < 1e-9, "{r:?}");
    assert!((r.server_e2el_ms_mean - 4.0).abs() < 1e-9, "{r:?}");

    // cmpl-a arriving while cmpl-b streams: which entry is which is a guess, so an error.
    let mut overlapping = trace.clone();
    for r in overlapping
        .iter_mut()
        .filter(|r| &*r.request_id_json == "\"cmpl-a\"")
    {
        r.arrival_ns = 2 * ms;
    }
    let e = score_result(&shape, &overlapping, jsonl, PREFIX).unwrap_err();
    assert!(e.contains("one request at a time"), "{e}");
}
