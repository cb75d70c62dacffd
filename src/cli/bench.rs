//! `llmspeed bench serve` and `llmspeed bench sglang`: the drop-ins for `vllm bench serve` and
//! `python -m sglang.bench_serving`. Parses and validates the flags, builds the runtime, runs
//! the front end's session (`bench::vllm::session`, `bench::sglang::session`) and prints or saves the result.
//! Owns no measurement.

use super::progress::{live_wanted, Display};
use super::signal::stop_on_signal;
use super::{runtime, CliError, CliResult};
use crate::bench;
use crate::bench::sglang::args::SglangArgs;
use crate::bench::vllm::args::ServeArgs;
use crate::clock::Clock;
use crate::net::Cancel;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
    /// Exit with an error (status 1, after saving the results) when the client's own lag made
    /// a run's figures untrustworthy (`llmspeed.client_lag.client_bound`; docs/methodology.md).
    /// llmspeed's own flag, beside the reference tool's.
    #[arg(long, global = true)]
    pub fail_on_client_bound: bool,
    /// Exit with an error (status 1, after saving the results) when the tokens came batched by
    /// something upstream — a buffering proxy, a gateway, the engine's output coalescing — so
    /// ITL and TTFT describe the batching (`llmspeed.client_lag.upstream_batched`).
    /// llmspeed's own flag, beside the reference tool's.
    #[arg(long, global = true)]
    pub fail_on_upstream_batching: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Benchmark online serving like `vllm bench serve`: same flags, same result JSON.
    Serve(Box<ServeArgs>),
    /// Benchmark online serving like `python -m sglang.bench_serving`: same flags, same
    /// console block, same JSONL record.
    Sglang(Box<SglangArgs>),
}

pub fn run(args: BenchArgs) -> CliResult {
    let done = match args.command {
        BenchCommand::Serve(a) => serve(&a),
        BenchCommand::Sglang(a) => sglang(&a),
    };
    let done = judge(args.fail_on_client_bound, done);
    judge_batching(args.fail_on_upstream_batching, done)
}

/// The session's exit, turned into an error when a run completed no request, or when
/// `--fail-on-client-bound` asks and a run was Client-bound (an interrupted or failed session
/// keeps its own exit). Either comes after the results were saved.
fn judge(fail_on_client_bound: bool, done: CliResult) -> CliResult {
    let bound = bench::engine::figures::client_bound_runs();
    let empty = bench::engine::run::runs_without_completion();
    match done {
        Ok(code) if empty > 0 && code == ExitCode::SUCCESS => Err(CliError::failed(format!(
            "{empty} run(s) completed no request: every request failed (the server's messages are above and in the result)"
        ))),
        Ok(code) if fail_on_client_bound && bound > 0 && code == ExitCode::SUCCESS => {
            Err(CliError::failed(format!(
                "{bound} run(s) were Client-bound (--fail-on-client-bound): see the WARNING line and llmspeed.client_lag"
            )))
        }
        other => other,
    }
}

/// The session's exit, turned into an error when `--fail-on-upstream-batching` asks and a
/// run's tokens were batched upstream (a failed session keeps its own exit).
fn judge_batching(fail: bool, done: CliResult) -> CliResult {
    let batched = bench::engine::figures::upstream_batched_runs();
    match done {
        Ok(code) if fail && batched > 0 && code == ExitCode::SUCCESS => Err(CliError::failed(format!(
            "{batched} run(s) had their tokens batched upstream (--fail-on-upstream-batching): see the WARNING line and llmspeed.client_lag"
        ))),
        other => other,
    }
}

fn serve(a: &ServeArgs) -> CliResult {
    let cfg = a.validate().map_err(CliError::usage)?;
    if let (Some(t), false) = (
        &cfg.conn.tokenizer,
        crate::workload::tokenizer::LocalTokenizer::AVAILABLE,
    ) {
        eprintln!("note: --tokenizer {t} is recorded as tokenizer_id; llmspeed loads no tokenizer and counts text with the server's /tokenize");
    }
    run_session(
        cfg.threads,
        a.disable_tqdm,
        Ends {
            saved: "saved",
            interrupted: "a result the stop cut short says so (`llmspeed.interrupted`)",
        },
        async |cancel, log, stdout, display| {
            bench::vllm::session::execute(&cfg, Clock::new(), cancel, log, stdout, display).await
        },
    )
}

fn sglang(a: &SglangArgs) -> CliResult {
    let cfg = a.validate().map_err(CliError::usage)?;
    run_session(
        0,
        a.disable_tqdm,
        Ends {
            saved: "Results saved to",
            interrupted: "the record covers only the requests that ran",
        },
        async |cancel, log, stdout, display| {
            bench::sglang::session::execute(&cfg, Clock::new(), cancel, log, stdout, display).await
        },
    )
}

/// What a front end says of the files it saved and of an interrupted run.
struct Ends {
    saved: &'static str,
    interrupted: &'static str,
}

/// Runs a front end's session on its own runtime. A signal ends the run early but keeps (and
/// reports) what was measured; in a set-up step (the ready check, the dataset, the prompts'
/// /tokenize calls, the warm-up) it ends the step and the session with nothing measured, and
/// the error says which step. Sweeps and repeated runs print each run as it ends, so stdout is
/// written from inside the runtime. An interrupted run is not a success, whatever it saved: it
/// exits 128 + the signal, also when it ends with an error.
fn run_session<E: std::fmt::Display>(
    threads: usize,
    disable_tqdm: bool,
    ends: Ends,
    session: impl AsyncFnOnce(
        &Cancel,
        &mut (dyn Write + Send),
        &mut (dyn Write + Send),
        &mut Display,
    ) -> Result<Vec<PathBuf>, E>,
) -> CliResult {
    let rt = runtime(threads)?;
    let cancel = Cancel::new();
    let caught = {
        let _in_runtime = rt.enter();
        stop_on_signal(
            cancel.clone(),
            "",
            |sig| {
                format!(
                    "interrupted by {}: cancelling requests in flight (again to quit without a result)",
                    sig.describe()
                )
            },
            "exiting without a result",
        )?
    };
    let ran = rt.block_on(async {
        let mut log = std::io::stderr();
        let mut stdout = std::io::stdout();
        let mut display = Display::new("bench", "requests", live_wanted(disable_tqdm));
        let r = session(&cancel, &mut log, &mut stdout, &mut display).await;
        display.finish();
        r
    });
    // A set-up step the stop abandoned may still hold a blocking thread (dataset loading):
    // its result is not wanted, so the runtime is not waited for.
    rt.shutdown_background();
    let saved = ran.map_err(|e| match caught.get() {
        Some(sig) => CliError {
            message: e.to_string(),
            code: sig.exit_code(),
        },
        None => CliError::failed(e.to_string()),
    })?;
    for p in saved {
        eprintln!("{} {}", ends.saved, p.display());
    }
    if let Some(sig) = caught.get() {
        eprintln!("interrupted by {}: {}", sig.describe(), ends.interrupted);
        return Ok(ExitCode::from(sig.exit_code()));
    }
    Ok(ExitCode::SUCCESS)
}
