//! One duration syntax for every command's duration flags (`30s`, `500ms`, `2m`, `1.5s`), with a
//! bare number in each flag's documented unit. Parsed through the real `Cli`, as `main` does.

use clap::Parser;
use llmspeed::cli::{bench::BenchCommand, Cli, Command};
use std::time::Duration;

fn parse(args: &[&str]) -> Command {
    let mut argv = vec!["llmspeed"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(&argv) {
        Ok(c) => c.command,
        Err(e) => panic!("{args:?} was refused: {e}"),
    }
}

fn matrix(extra: &[&str]) -> llmspeed::matrix::run::MatrixConfig {
    let mut args = vec!["matrix", "--base-url", "http://127.0.0.1:9"];
    args.extend_from_slice(extra);
    match parse(&args) {
        Command::Matrix(a) => llmspeed::cli::matrix::config(&a, "http://127.0.0.1:9")
            .unwrap_or_else(|e| panic!("{extra:?}: {e}")),
        other => panic!("not matrix: {other:?}"),
    }
}

#[test]
fn matrix_takes_units_and_bare_seconds() {
    // Before the shared parser, `--duration 3s` failed with "invalid float literal".
    let c = matrix(&[
        "--duration",
        "3s",
        "--ready-timeout",
        "2m",
        "--ready-stable",
        "500ms",
    ]);
    assert_eq!(c.duration, Duration::from_secs(3));
    assert_eq!(c.ready_timeout, Duration::from_secs(120));
    assert_eq!(c.ready_stable, Duration::from_millis(500));
    let c = matrix(&["--duration", "1.5s"]);
    assert_eq!(c.duration, Duration::from_millis(1500));
    // A bare number keeps the documented unit: seconds.
    let c = matrix(&["--duration", "45", "--ready-timeout", "7"]);
    assert_eq!(c.duration, Duration::from_secs(45));
    assert_eq!(c.ready_timeout, Duration::from_secs(7));
}

#[test]
fn stream_timeouts_take_units() {
    let a = match parse(&[
        "stream",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--prompt",
        "hi",
        "--connect-timeout",
        "250ms",
        "--first-byte-timeout",
        "2m",
        "--gap-timeout",
        "30",
    ]) {
        Command::Stream(a) => a,
        other => panic!("not stream: {other:?}"),
    };
    let t = a.conn.client_config().unwrap().timeouts;
    assert_eq!(t.connect, Some(Duration::from_millis(250)));
    assert_eq!(t.first_byte, Some(Duration::from_secs(120)));
    assert_eq!(t.gap, Some(Duration::from_secs(30)));
    assert_eq!(t.total, None);
}

#[test]
fn bench_serve_and_selftest_share_the_syntax() {
    let ready = |v: &str| match parse(&["bench", "serve", "--ready-check-timeout-sec", v]) {
        Command::Bench(b) => match b.command {
            BenchCommand::Serve(s) => s.conn.ready_check_timeout_sec,
            other => panic!("not bench serve: {other:?}"),
        },
        other => panic!("not bench: {other:?}"),
    };
    assert_eq!(ready("2m"), 120);
    assert_eq!(ready("90"), 90);
    // Rounded up: never waits less than asked.
    assert_eq!(ready("1.5s"), 2);
    match parse(&["selftest", "--gap", "2", "--first-token", "0.5s"]) {
        Command::Selftest(s) => {
            // selftest's bare number stays milliseconds, as documented.
            assert_eq!(s.gap, Duration::from_millis(2));
            assert_eq!(s.first_token, Duration::from_millis(500));
        }
        other => panic!("not selftest: {other:?}"),
    }
}

#[test]
fn a_bad_duration_is_refused_with_the_text() {
    let e = Cli::try_parse_from(["llmspeed", "matrix", "--mock", "--duration", "soon"])
        .expect_err("`soon` is not a duration");
    assert!(e.to_string().contains("`soon` is not a duration"), "{e}");
}
