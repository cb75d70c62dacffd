//! `llmspeed selftest`: flags -> [`Shape`] (plus `--pin` and `--external`), run, print a table
//! or one JSON object. Exits 1 when any stream failed, so scripts can trust a zero exit.

use super::signal::{at_second_signal, stop_on_signal_thread, StopSignal};
use super::{CliError, CliResult};
use crate::net::Cancel;
use crate::selftest::external::{self, External};
use crate::selftest::pin::{self, Pin};
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
    #[arg(long, default_value_t = 1, conflicts_with = "external")]
    pub client_threads: usize,
    /// Score another benchmark client instead of our own: a command run with `sh -c` after
    /// replacing {url}, {model}, {dataset} (vLLM `custom` JSONL, one prompt per stream),
    /// {result_dir}, {prefix} (request-id prefix), {streams} and {tokens}. It must save
    /// vLLM's detailed result JSON (--save-result --save-detailed) into {result_dir}, or
    /// SGLang's (--output-file {result_dir}/r.jsonl --output-details; a client sending no
    /// request ids is matched by arrival order: run it with --max-concurrency 1
    /// --warmup-requests 0).
    #[arg(long, value_name = "CMD")]
    pub external: Option<String>,
    /// Pin the server and the client to CPUs: SERVER_CPUS:CLIENT_CPUS, e.g. 0:1 or 0-1:2,3
    /// (Linux only).
    #[arg(long, value_name = "SERVER_CPUS:CLIENT_CPUS", value_parser = Pin::parse)]
    pub pin: Option<Pin>,
    /// Spin a thread on each of the client's --pin CPUs for the whole run: a client that must
    /// share its cores (the verdict should call it Client-bound).
    #[arg(long, requires = "pin", conflicts_with = "external")]
    pub busy_loop: bool,
    /// Keep the external client's work folder (dataset, result, output); it is always kept
    /// when the run fails.
    #[arg(long, requires = "external")]
    pub keep: bool,
    /// Stamp reads with the client's own clock when it wakes up, not the kernel's receive
    /// stamp: measures what a client without kernel stamps would report.
    #[arg(long, conflicts_with = "external")]
    pub no_kernel_stamps: bool,
    /// Stamp each event with the arrival of the TCP segment that carried it, from a packet
    /// ring of the client (Linux, needs CAP_NET_RAW; otherwise says so and keeps socket
    /// stamps). The report's stamps line says which were scored.
    #[arg(long, conflicts_with = "external")]
    pub packet_stamps: bool,
    /// The simulated server takes the kernel's stamp of when each write's bytes went to the
    /// device (Linux's SO_TIMESTAMPING; one more system call per write), and the client is
    /// also scored against those: a truth known to a point, not to the span of a write.
    #[arg(long, conflicts_with = "external")]
    pub send_stamps: bool,
    /// Open every stream's connection before the start, so the simultaneous start is requests
    /// only (as `bench serve --preconnect`; give an external client its own flag).
    #[arg(long, conflicts_with = "external")]
    pub preconnect: bool,
    /// Serve HTTPS with this certificate (PEM; `openssl req -x509 ... -addext
    /// subjectAltName=IP:127.0.0.1` makes one), which the client trusts as --ca-cert: the
    /// self-test over TLS. Needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "external"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
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
        packet_stamps: a.packet_stamps,
        send_stamps: a.send_stamps,
        preconnect: a.preconnect,
    };
    shape.validate().map_err(CliError::usage)?;
    if let Some(p) = &a.pin {
        check_pin(p)?;
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => {
            Some(selftest::TlsSetup::from_pem_files(cert, key).map_err(CliError::usage)?)
        }
        _ => None,
    };
    // Both signals stop either client: the in-process one's streams are cut; an external
    // command gets the same signal (a second one kills it and ends us at once).
    let stop = Cancel::new();
    let announce: fn(StopSignal) -> String = match a.external {
        Some(_) => {
            |sig| {
                format!("stopping after {}: the command gets it too, and the report covers what it wrote", sig.describe())
            }
        }
        None => |sig| {
            format!(
                "stopping after {}: the streams are cut and the report covers what arrived",
                sig.describe()
            )
        },
    };
    let caught = stop_on_signal_thread(
        stop.clone(),
        "selftest: ",
        announce,
        "exiting without a report",
    )?;
    let report = match &a.external {
        Some(command) => {
            external::check_placeholders(command).map_err(CliError::usage)?;
            let ext = External {
                command: command.clone(),
                keep: a.keep,
            };
            at_second_signal(external::kill_client);
            eprintln!(
                "selftest: {} streams x {} tokens by the external command; Ctrl-C or SIGTERM stops it early with a partial report",
                shape.streams, shape.tokens
            );
            external::run_stoppable(&shape, &ext, a.pin.as_ref(), &stop)
        }
        None => {
            eprintln!(
                "selftest: {} streams x {} tokens; Ctrl-C or SIGTERM stops early with a partial report",
                shape.streams, shape.tokens
            );
            selftest::run_stoppable_over(
                &shape,
                a.pin.as_ref(),
                a.busy_loop,
                &stop,
                tls.as_ref(),
            )
        }
    }
    .map_err(|e| CliError::failed(e.to_string()))?;
    if let Some(d) = &report.work_dir {
        eprintln!("selftest: work folder kept: {d}");
    }
    let mut out = std::io::stdout().lock();
    let written = if a.json {
        serde_json::to_writer(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|_| std::io::Write::write_all(&mut out, b"\n"))
    } else {
        selftest::write_table(&mut out, &report)
    };
    written.map_err(|e| CliError::failed(format!("cannot write the report: {e}")))?;
    if let Some(sig) = caught.get() {
        eprintln!(
            "selftest: interrupted by {}: the report above is partial",
            sig.describe()
        );
        return Ok(ExitCode::from(sig.exit_code()));
    }
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

/// `--pin` needs `sched_setaffinity`, and CPUs this process may use.
fn check_pin(p: &Pin) -> Result<(), CliError> {
    if !pin::SUPPORTED {
        return Err(CliError::usage(
            "--pin needs sched_setaffinity, which only Linux has; run without --pin",
        ));
    }
    let allowed = pin::allowed_cpus()
        .map_err(|e| CliError::usage(format!("--pin: cannot read the allowed CPUs: {e}")))?;
    p.check_allowed(&allowed).map_err(CliError::usage)
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
