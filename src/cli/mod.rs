//! Command line: clap arguments -> validated config, one file per command. Each command builds
//! the runtime it needs (the simulated server and the client may want separate ones).

pub mod abbrev;
pub mod argv;
pub mod bench;
pub mod capacity;
pub mod completions;
pub mod duration;
pub mod matrix;
pub mod merge;
pub mod mock;
pub mod probe;
pub mod progress;
pub mod report;
pub mod selftest;
pub mod signal;
pub mod stream;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// An error that ends the process: printed as one line, with the exit code to use.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: u8,
}

impl CliError {
    /// A usage or configuration error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 2,
        }
    }

    /// A run that failed (exit code 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 1,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

pub type CliResult = Result<ExitCode, CliError>;

#[derive(Debug, Parser)]
#[command(
    name = "llmspeed",
    version = crate::VERSION,
    about = "How fast does your LLM server serve tokens?"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send one streaming request and print its timeline (TTFT, gaps, tokens per event).
    Stream(stream::StreamArgs),
    /// Run a simulated vLLM-like server (for trying llmspeed without a GPU, and for tests).
    Mock(Box<mock::MockArgs>),
    /// Benchmarks in other tools' shapes (`bench serve` = `vllm bench serve`).
    Bench(bench::BenchArgs),
    /// Detect a server's engine, model, limits and KV capacity.
    Probe(probe::ProbeArgs),
    /// The speed-test matrix: prefill per context, sustained decode per (context, concurrency).
    Matrix(Box<matrix::MatrixArgs>),
    /// The largest concurrency a server carries while every service-level objective holds.
    Capacity(Box<capacity::CapacityArgs>),
    /// Re-render a results folder from its results.json, or compare two runs (`report compare A B`).
    Report(report::ReportArgs),
    /// Merge the shard results of `bench serve --shard K/N` into one result.
    Merge(merge::MergeArgs),
    /// Measure this machine's measurement error against a simulated server's ground truth.
    Selftest(selftest::SelftestArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per command into a folder.
    Man(completions::ManArgs),
}

/// The process's command line, parsed as `main` does (see [`try_parse`]). Exits with clap's
/// message on a bad one.
pub fn parse_env() -> Cli {
    try_parse(std::env::args_os().collect()).unwrap_or_else(|e| e.exit())
}

/// A command line (program name first) parsed as `main` parses it: `bench serve` takes vLLM's
/// underscore spellings, `bench serve` and `bench sglang` take a flag shortened as their
/// reference takes it (see [`abbrev`]), and a flag's value that starts with a hyphen reaches the
/// flag's own parser (see [`argv`]).
pub fn try_parse(given: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let cmd = Cli::command();
    let given = argv::vllm_spellings(given);
    let given = abbrev::expand(&cmd, given)?;
    let joined = argv::join_hyphen_values(&cmd, given.clone());
    Cli::try_parse_from(joined).map_err(|e| argv::explain(&cmd, &given, e))
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Stream(args) => stream::run(args),
        Command::Mock(a) => mock::run(*a),
        Command::Bench(a) => bench::run(a),
        Command::Probe(args) => probe::run(args),
        Command::Matrix(args) => matrix::run(*args),
        Command::Capacity(a) => capacity::run(*a),
        Command::Report(args) => report::run(args),
        Command::Selftest(args) => selftest::run(args),
        Command::Merge(a) => merge::run(a),
        Command::Completions(a) => completions::run_completions(a),
        Command::Man(a) => completions::run_man(a),
    }
}

/// A multi-threaded tokio runtime with `threads` workers (0 = one per core).
pub fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, CliError> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        b.worker_threads(threads);
    }
    b.enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))
}
