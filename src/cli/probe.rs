//! `llmspeed probe`: detect the engine and print what the server says about itself.

use super::stream::ConnectionArgs;
use super::{runtime, CliError, CliResult};
use crate::clock::Clock;
use crate::net::Client;
use crate::server::probe::collect_when_ready;
use crate::server::{detect, Overrides};
use std::process::ExitCode;
use std::time::Duration;

/// Limits the user knows better than the server (they override anything probed).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitArgs {
    /// KV-cache capacity in tokens (for servers that do not expose it).
    #[arg(long, value_name = "TOKENS")]
    pub kv_budget: Option<u64>,
    /// Longest request (prompt + output) the server accepts, in tokens.
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<u64>,
    /// Most requests the server runs at once.
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u64>,
}

impl LimitArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            kv_budget: self.kv_budget,
            max_model_len: self.max_model_len,
            max_num_seqs: self.max_num_seqs,
        }
    }
}

/// Detect the engine, model, limits and KV capacity of a server.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Model to test token-id prompts and /tokenize with (default: the first served model).
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ProbeArgs) -> CliResult {
    let mut cfg = args.conn.client_config()?;
    // Probing times nothing: no packet ring to open.
    cfg.packet_stamps = false;
    let rt = runtime(1)?;
    let client = Client::new(cfg, Clock::new()).map_err(|e| CliError::usage(e.to_string()))?;
    rt.block_on(args.conn.wait_ready(&client, 0))?;
    // A server still loading (5xx) is waited for as long as the flag says, never reported as
    // one without the endpoint.
    let wait = Duration::from_secs(args.conn.ready_check_timeout(0));
    let collected = rt
        .block_on(collect_when_ready(
            &client,
            args.model.as_deref(),
            wait,
            &mut |w| eprintln!("[probe] {w}"),
        ))
        .map_err(CliError::failed)?;
    let info = detect(&collected, &args.limits.overrides());
    if args.json {
        println!("{}", info.to_json());
    } else {
        print!("{}", info.render());
    }
    Ok(ExitCode::SUCCESS)
}
