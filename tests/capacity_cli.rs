//! `llmspeed capacity`'s flags, parsed through the real `Cli` as `main` parses them, and the
//! checks that refuse a bad setting before any server is started.

use llmspeed::cli::{try_parse, Command};
use std::time::Duration;

fn parse(args: &[&str]) -> Result<llmspeed::cli::capacity::CapacityArgs, String> {
    let mut argv: Vec<std::ffi::OsString> = vec!["llmspeed".into(), "capacity".into()];
    argv.extend(args.iter().map(|a| a.into()));
    match try_parse(argv) {
        Ok(c) => match c.command {
            Command::Capacity(a) => Ok(*a),
            other => panic!("not capacity: {other:?}"),
        },
        Err(e) => Err(e.to_string()),
    }
}

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
    assert_eq!((c.workload.input_len, c.workload.output_len), (128, 64));
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
    assert!(parse(&["--slo", "errors=1%", "--out", "o"])
        .unwrap_err()
        .contains("--base-url"));
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
    assert_eq!(c.by, llmspeed::capacity::plan::By::Rate { step: 0.5 });
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
