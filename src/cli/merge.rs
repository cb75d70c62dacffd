//! `llmspeed merge RESULT...`: shard results of `bench serve --shard K/N` -> one vLLM-shaped
//! result. Reads and writes the files; the merge itself is `bench::vllm::merge`.

use super::{CliError, CliResult};
use crate::bench::vllm::merge::{self, ShardResult};
use crate::bench::vllm::result;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Shard result files (`bench serve --shard K/N --save-result`), one per shard.
    #[arg(required = true, value_name = "RESULT")]
    pub results: Vec<PathBuf>,
    /// Where to write the merged result [default: merged-{label or backend}-{rate}qps...json].
    #[arg(long)]
    pub result_filename: Option<PathBuf>,
    /// Also write the per-request lists (input_lens, ttfts, itls, ...), as --save-detailed.
    #[arg(long)]
    pub save_detailed: bool,
    /// Exit with status 1 when the shards' clocks disagree beyond the bound (see
    /// docs/distributed.md), instead of only warning.
    #[arg(long)]
    pub strict_clocks: bool,
}

pub fn run(a: MergeArgs) -> CliResult {
    let mut shards = Vec::with_capacity(a.results.len());
    for p in &a.results {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p)
            .map_err(|e| CliError::failed(format!("cannot read {name}: {e}")))?;
        // `--append-result` files hold one result per line: a shard file must hold one.
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::failed(format!("{name} is not one JSON result: {e}")))?;
        shards.push(ShardResult::from_json(&name, &v).map_err(CliError::failed)?);
    }
    let date = result::format_date(SystemTime::now());
    let m = merge::merge(&shards, date).map_err(CliError::failed)?;
    for w in &m.warnings {
        eprintln!("warning: {w}");
    }
    let mut out = std::io::stdout();
    result::write_summary(&mut out, &m.info, &m.metrics)
        .map_err(|e| CliError::failed(format!("stdout: {e}")))?;
    let path = a
        .result_filename
        .unwrap_or_else(|| PathBuf::from(format!("merged-{}", result::default_filename(&m.info))));
    let pairs = result::result_pairs(
        &m.info,
        &m.metrics,
        a.save_detailed.then_some(&m.detailed),
        m.extras,
    );
    result::save(&path, &pairs, false)
        .map_err(|e| CliError::failed(format!("cannot save {}: {e}", path.display())))?;
    eprintln!("saved {} (merged {} shards)", path.display(), shards.len());
    if a.strict_clocks && !m.warnings.is_empty() {
        return Err(CliError::failed(
            "the shards' clocks disagree (--strict-clocks)",
        ));
    }
    Ok(ExitCode::SUCCESS)
}
