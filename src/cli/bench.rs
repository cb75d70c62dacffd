//! `llmspeed bench serve` and `llmspeed bench sglang`: the drop-ins for `vllm bench serve` and
//! `python -m sglang.bench_serving`. Parses and validates the flags, builds the runtime, runs
//! the front end's session (`bench::vllm::session`, `bench::sglang::session`) and prints or saves the result.
//! Owns no measurement.

use super::progress::{live_wanted, Display};
use super::signal::stop_on_signal;
use super::{runtime, CliError, CliResult};
use crate::bench::sglang::args::SglangArgs;
use crate::bench::vllm::args::ServeArgs;
use crate::bench::vllm::session;
use crate::clock::Clock;
use crate::net::Cancel;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
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
    match args.command {
        BenchCommand::Serve(a) => serve(&a),
        BenchCommand::Sglang(a) => sglang(&a),
    }
}

fn serve(a: &ServeArgs) -> CliResult {
    let cfg = a.validate().map_err(CliError::usage)?;
    if let Some(t) = &cfg.tokenizer {
        eprintln!("note: --tokenizer {t} is recorded as tokenizer_id; llmspeed loads no tokenizer and counts text with the server's /tokenize");
    }
    let rt = runtime(cfg.threads)?;
    let cancel = Cancel::new();
    // A signal ends the run early but keeps (and reports) what was measured. Setup steps (the
    // readiness wait, the /tokenize calls) do not watch `cancel`: a second signal ends the
    // process at once.
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
    let saved = rt
        .block_on(async {
            let mut log = std::io::stderr();
            // Sweeps and repeated runs print each run as it ends, so stdout is written from
            // here rather than after the runtime returns.
            let mut stdout = std::io::stdout();
            let mut display = Display::new("bench", "requests", live_wanted(a.disable_tqdm));
            let r = session::execute(
                &cfg,
                Clock::new(),
                &cancel,
                &mut log,
                &mut stdout,
                &mut display,
            )
            .await;
            display.finish();
            r
        })
        .map_err(|e| CliError::failed(e.to_string()))?;
    for p in saved {
        eprintln!("saved {}", p.display());
    }
    // An interrupted run is not a success, whatever it saved.
    if let Some(sig) = caught.get() {
        eprintln!(
            "interrupted by {}: what was saved is partial and says so (`llmspeed.interrupted`)",
            sig.describe()
        );
        return Ok(ExitCode::from(sig.exit_code()));
    }
    Ok(ExitCode::SUCCESS)
}

fn sglang(a: &SglangArgs) -> CliResult {
    let cfg = a.validate().map_err(CliError::usage)?;
    let rt = runtime(0)?;
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
    let saved = rt
        .block_on(async {
            let mut log = std::io::stderr();
            let mut stdout = std::io::stdout();
            let mut display = Display::new("bench", "requests", live_wanted(a.disable_tqdm));
            let r = crate::bench::sglang::session::execute(
                &cfg,
                Clock::new(),
                &cancel,
                &mut log,
                &mut stdout,
                &mut display,
            )
            .await;
            display.finish();
            r
        })
        .map_err(|e| CliError::failed(e.to_string()))?;
    for p in saved {
        eprintln!("Results saved to {}", p.display());
    }
    if let Some(sig) = caught.get() {
        eprintln!(
            "interrupted by {}: the record covers only the requests that ran",
            sig.describe()
        );
        return Ok(ExitCode::from(sig.exit_code()));
    }
    Ok(ExitCode::SUCCESS)
}
