//! `llmspeed merge RESULT...`: shard results of `bench serve --shard K/N` -> one vLLM-shaped
//! result, or shard records of `bench sglang --shard K/N` -> one SGLang record. Reads and
//! writes the files; the merges themselves are `bench::vllm::merge` and `bench::sglang::merge`.

use super::{CliError, CliResult};
use crate::bench::sglang::merge as sglang_merge;
use crate::bench::vllm::merge::{self, ShardResult};
use crate::bench::vllm::result;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Shard result files (`bench serve --shard K/N --save-result`, or the JSONL files of
    /// `bench sglang --shard K/N`), one per shard.
    #[arg(required = true, value_name = "RESULT")]
    pub results: Vec<PathBuf>,
    /// Where to write the merged result [default: merged-{label or backend}-{rate}qps...json;
    /// bench sglang: merged-{first shard's file name}, appended to].
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
    let mut sglang = Vec::new();
    for p in &a.results {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p)
            .map_err(|e| CliError::failed(format!("cannot read {name}: {e}")))?;
        if let Some(r) = sglang_merge::read_shard(&name, &text) {
            sglang.push(r.map_err(CliError::failed)?);
            continue;
        }
        // `--append-result` files hold one result per line: a shard file must hold one.
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::failed(format!("{name} is not one JSON result: {e}")))?;
        shards.push(ShardResult::from_json(&name, &v).map_err(CliError::failed)?);
    }
    match (shards.is_empty(), sglang.is_empty()) {
        (true, false) => return merge_sglang(&a, &sglang),
        (false, false) => {
            return Err(CliError::failed(
                "bench serve results and bench sglang records cannot be merged together",
            ))
        }
        _ => {}
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
    // As a single run writes them: the server's lists with the per-request lists only.
    let mut optional = Vec::new();
    if a.save_detailed {
        optional.extend(m.server_lists.iter().cloned());
    }
    optional.extend(m.vllm_extra.iter().cloned());
    let pairs = result::result_pairs(
        &m.info,
        &m.metrics,
        a.save_detailed.then_some(&m.detailed),
        &optional,
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

/// `bench sglang` shards: SGLang's block printed, the merged record appended.
fn merge_sglang(a: &MergeArgs, shards: &[sglang_merge::ShardRecord]) -> CliResult {
    use crate::bench::sglang::{console, record};
    if a.save_detailed {
        return Err(CliError::failed(
            "--save-detailed: bench sglang shard records keep no generated texts to list",
        ));
    }
    let m = sglang_merge::merge(shards).map_err(CliError::failed)?;
    for w in &m.warnings {
        eprintln!("warning: {w}");
    }
    let args = m.first.block.settings.run_args();
    console::write(
        &mut std::io::stdout(),
        &console::Header {
            backend: args.backend,
            request_rate: args.request_rate,
            max_concurrency: args.max_concurrency,
            duration_s: m.duration_s,
            accept_length: m.first.block.accept_length,
            goodput: None,
            cache: None,
        },
        &m.metrics,
    )
    .map_err(|e| CliError::failed(format!("stdout: {e}")))?;
    let path = a.result_filename.clone().unwrap_or_else(|| {
        let first = std::path::Path::new(&m.first.name);
        let name = first.file_name().map(|n| n.to_string_lossy().into_owned());
        PathBuf::from(format!("merged-{}", name.unwrap_or_default()))
    });
    let pairs = record::pairs(
        &args,
        Some(m.first.server_info.clone()),
        m.duration_s,
        &m.metrics,
        &record::Extra {
            accept_length: m.first.block.accept_length,
            ..record::Extra::default()
        },
        None,
        m.extras.clone(),
    );
    record::append(&path, &pairs)
        .map_err(|e| CliError::failed(format!("cannot append to {}: {e}", path.display())))?;
    eprintln!("saved {} (merged {} shards)", path.display(), shards.len());
    if a.strict_clocks && !m.warnings.is_empty() {
        return Err(CliError::failed(
            "the shards' clocks disagree (--strict-clocks)",
        ));
    }
    Ok(ExitCode::SUCCESS)
}
