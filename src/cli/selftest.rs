//! `llmspeed selftest`: flags -> [`Shape`], run, print a table or one JSON object. Exits 1 when
//! any stream failed, so scripts can trust a zero exit.

use super::{CliError, CliResult};
use crate::selftest::{self, Shape};
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// Concurrent streams, all started together.
    #[arg(long, default_value_t = 128)]
    pub streams: usize,
    /// True gap between tokens (the simulated decode step): 1ms, 250us, 0.01s.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub gap: Duration,
    /// Output tokens per stream.
    #[arg(long, default_value_t = 500)]
    pub tokens: u32,
    /// Server-side delay before each request reaches the engine (TTFT is this plus one or two
    /// gaps).
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    pub first_token: Duration,
    /// Worker threads of the client's runtime (the server has its own threads).
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// Stamp reads with the client's own clock when it wakes up, not the kernel's receive
    /// stamp: measures what a client without kernel stamps would report.
    #[arg(long)]
    pub no_kernel_stamps: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `10ms`, `250us`, `1.5s`, `2m`; a bare number is milliseconds (the shared syntax of
/// [`super::duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    super::duration::millis(s)
}

pub fn run(a: SelftestArgs) -> CliResult {
    let shape = Shape {
        streams: a.streams,
        gap: a.gap,
        tokens: a.tokens,
        first_token: a.first_token,
        client_threads: a.client_threads,
        kernel_stamps: !a.no_kernel_stamps,
    };
    shape.validate().map_err(CliError::usage)?;
    let report = selftest::run(&shape).map_err(|e| CliError::failed(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    let written = if a.json {
        serde_json::to_writer(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|_| std::io::Write::write_all(&mut out, b"\n"))
    } else {
        selftest::write_table(&mut out, &report)
    };
    written.map_err(|e| CliError::failed(format!("cannot write the report: {e}")))?;
    if report.failed_streams > 0 {
        return Err(CliError::failed(format!(
            "{} of {} streams failed; first: {}",
            report.failed_streams,
            report.streams,
            report.first_error.as_deref().unwrap_or("unknown")
        )));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            ("10ms", Duration::from_millis(10)),
            ("250us", Duration::from_micros(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("50", Duration::from_millis(50)),
            ("2m", Duration::from_secs(120)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).unwrap(), want, "{s}");
        }
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
