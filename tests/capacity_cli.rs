//! `llmspeed capacity`'s flags, parsed through the real `Cli` as `main` parses them, and the
//! checks that refuse a bad setting before any server is started.

mod support;

use support::capacity_args as parse;

use llmspeed::workload::datasets::DatasetKind;
use std::time::Duration;

fn config(args: &[&str]) -> Result<llmspeed::capacity::run::CapacityConfig, String> {
    let a = parse(args)?;
    llmspeed::cli::capacity::config(&a, "http://127.0.0.1:9".into()).map_err(|e| e.message)
}

#[test]
fn flags_become_the_search_config() {
    let c = config(&[
        "--base-url",
        "http://127.0.0.1:9",
        "--slo",
        "ttft_p99=500ms",
        "--slo",
        "errors=1%",
        "--confidence",
        "99",
        "--resolution",
        "2",
        "--max-time",
        "90s",
        "--settle",
        "250ms",
        "--out",
        "o",
    ])
    .unwrap();
    assert_eq!(c.slo.objectives.len(), 2);
    assert!((c.confidence - 0.99).abs() < 1e-12);
    assert_eq!(
        (c.search.start, c.search.resolution, c.search.max),
        (1, 2, 512)
    );
    assert_eq!(c.max_time, Duration::from_secs(90));
    assert_eq!(c.settle, Duration::from_millis(250));
    // The default workload: random ids of exactly 128 tokens asking for exactly 64, plain
    // completions.
    let d = &c.workload.dataset;
    assert_eq!(d.kind, DatasetKind::Random);
    assert_eq!((d.random_input_len, d.random_output_len), (128, 64));
    assert_eq!(
        (d.random_range_ratio, d.random_output_range_ratio),
        (0.0, None)
    );
    assert_eq!(c.workload.connection.endpoint, "/v1/completions");
    assert!(c.workload.draws_per_round());
}

#[test]
fn bench_serves_connection_and_dataset_flags_mean_the_same_here() {
    let c = config(&[
        "--slo",
        "ttft_p99=2s",
        "--out",
        "o",
        "--backend",
        "openai-chat",
        "--header",
        "X-Tenant=blue",
        "--api-key",
        "sk-1",
        "--insecure",
        "--model",
        "m",
        "--served-model-name",
        "served",
        "--input-len",
        "300",
        "--random-output-len",
        "20",
    ])
    .unwrap();
    let w = &c.workload;
    assert_eq!(w.connection.endpoint, "/v1/chat/completions");
    assert!(w.connection.chat());
    assert_eq!(
        w.connection.headers,
        vec![("X-Tenant".to_string(), "blue".to_string())]
    );
    assert_eq!(w.connection.api_key.as_deref(), Some("sk-1"));
    assert!(w.connection.insecure);
    assert_eq!(
        (
            w.connection.model.as_deref(),
            w.connection.served_model_name.as_deref()
        ),
        (Some("m"), Some("served"))
    );
    // --input-len sets the random dataset's length, as in bench serve.
    assert_eq!(
        (w.dataset.random_input_len, w.dataset.random_output_len),
        (300, 20)
    );
    // Without --base-url, bench serve's --host and --port.
    let a = parse(&["--slo", "errors=1%", "--out", "o", "--port", "8123"]).unwrap();
    let w = llmspeed::cli::capacity::workload(&a, String::new()).unwrap();
    assert_eq!(w.connection.base_url, "http://127.0.0.1:8123");
    // A text dataset is read once, not drawn per round.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.json");
    std::fs::write(&file, "[]").unwrap();
    let c = config(&[
        "--slo",
        "errors=1%",
        "--out",
        "o",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        file.to_str().unwrap(),
        "--num-prompts",
        "50",
    ])
    .unwrap();
    assert_eq!(c.workload.dataset.kind, DatasetKind::ShareGpt);
    assert_eq!(c.workload.dataset.num_prompts, 50);
    assert!(!c.workload.draws_per_round());
}

#[test]
fn a_context_is_written_as_the_matrix_writes_it() {
    let with = |extra: &[&str]| {
        let mut v = vec!["--slo", "errors=1%", "--out", "o"];
        v.extend_from_slice(extra);
        config(&v)
    };
    for (spelled, tokens) in [
        ("32K", 32_768),
        ("8k", 8_192),
        ("1.5k", 1_536),
        ("4096", 4_096),
    ] {
        let c = with(&["--context", spelled]).unwrap();
        assert_eq!(c.workload.dataset.random_input_len, tokens, "{spelled}");
    }
    for (bad, says) in [
        ("32Q", "--context"),
        ("0", "at least 1 token"),
        ("8k,16k", "one context"),
        ("max,8k", "one context"),
    ] {
        let e = with(&["--context", bad]).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    // `max`: the largest that fits, found from the server before the first probe.
    let c = with(&["--context", "max"]).unwrap();
    assert!(c.workload.context_max);
    assert!(!with(&["--context", "8k"]).unwrap().workload.context_max);
    let e = with(&["--context", "8k", "--input-len", "100"]).unwrap_err();
    assert!(e.contains("--input-len"), "{e}");
    // bench serve's spelling of the same length is refused too (it was silently overridden).
    let e = with(&["--context", "8k", "--random-input-len", "100"]).unwrap_err();
    assert!(e.contains("--random-input-len"), "{e}");
}

#[test]
fn datasets_capacity_cannot_send_are_refused() {
    let with = |extra: &[&str]| {
        let mut v = vec!["--slo", "errors=1%", "--out", "o"];
        v.extend_from_slice(extra);
        config(&v).unwrap_err()
    };
    let e = with(&["--dataset-name", "timed_trace", "--dataset-path", "t.jsonl"]);
    assert!(e.contains("timed_trace"), "{e}");
    let e = with(&["--dataset-name", "sharegpt"]);
    assert!(e.contains("needs --dataset-path"), "{e}");
    let e = with(&["--dataset-name", "random-mm"]);
    assert!(e.contains("openai-chat"), "{e}");
    let e = with(&["--dataset-name", "nope"]);
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn bad_settings_are_refused_by_name() {
    let base = ["--base-url", "http://127.0.0.1:9", "--out", "o"];
    let with = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        config(&v).unwrap_err()
    };
    assert!(with(&["--slo", "ttft_p99=500"]).contains("needs a unit"));
    assert!(with(&["--slo", "errors=1%", "--confidence", "100"]).contains("--confidence"));
    assert!(with(&["--slo", "errors=1%", "--resolution", "0"]).contains("--resolution"));
    assert!(with(&["--slo", "errors=1%", "--max-concurrency", "0"]).contains("--max-concurrency"));
    assert!(with(&["--slo", "errors=1%", "--output-len", "1"]).contains("--output-len"));
    // No objective, no server, or both a server and --mock: clap refuses.
    assert!(parse(&base).unwrap_err().contains("--slo"));
    // No server named: bench serve's default, --host 127.0.0.1 --port 8000.
    let a = parse(&["--slo", "errors=1%", "--out", "o"]).unwrap();
    let w = llmspeed::cli::capacity::workload(&a, String::new()).unwrap();
    assert_eq!(w.connection.base_url, "http://127.0.0.1:8000");
    assert!(parse(&[
        "--mock",
        "--base-url",
        "http://x",
        "--slo",
        "errors=1%",
        "--out",
        "o"
    ])
    .is_err());
    assert!(parse(&["--mock", "--port", "9", "--slo", "errors=1%", "--out", "o"]).is_err());
}

#[test]
fn by_rate_takes_its_steps_in_requests_per_second() {
    let base = [
        "--base-url",
        "http://127.0.0.1:9",
        "--slo",
        "ttft_p99=500ms",
        "--out",
        "o",
        "--by",
        "rate",
    ];
    let with = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        config(&v)
    };
    // Loads are whole steps of --resolution: --start rounds up to one, --max-rate down.
    let c = with(&[
        "--resolution",
        "0.5",
        "--start",
        "2.2",
        "--max-rate",
        "40.7",
    ])
    .unwrap();
    assert_eq!(
        c.by,
        llmspeed::capacity::plan::By::Rate {
            step: 0.5,
            burstiness: 1.0
        }
    );
    assert_eq!(
        (c.search.start, c.search.resolution, c.search.max),
        (5, 1, 81)
    );
    assert_eq!(c.by.value(c.search.start), 2.5);
    // By default the search starts at one step.
    let c = with(&["--resolution", "2"]).unwrap();
    assert_eq!((c.search.start, c.search.max), (1, 500));
    assert!(with(&["--resolution", "0"])
        .unwrap_err()
        .contains("--resolution"));
    assert!(with(&["--start", "50", "--max-rate", "10"])
        .unwrap_err()
        .contains("--max-rate"));
    // A fractional step is for rates only.
    let mut v = base[..6].to_vec();
    v.extend_from_slice(&["--resolution", "0.5"]);
    assert!(config(&v).unwrap_err().contains("whole number"));
}
