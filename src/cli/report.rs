//! `llmspeed report DIR` (re-render a results folder from its `results.json`) and
//! `llmspeed report compare A B` (two runs side by side, on stdout and in `compare.html`) and
//! `llmspeed report site DIR... --out SITE` (the static site over many runs, `report::site`).

use super::{CliError, CliResult};
use crate::report::compare::{self, Comparison};
use crate::report::{files, html, json, MatrixReport};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Re-render a results folder, or compare two runs.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: Option<ReportCommand>,
    /// A results folder: report.md, report.html, results.csv and the SVGs are written again from
    /// its results.json (which is left as it is).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ReportCommand {
    /// Compare two matrix results folders (or two `bench serve` result JSON files): markdown
    /// on stdout, and compare.html.
    Compare(CompareArgs),
    /// One static site over many runs: results folders and `bench serve`/`bench sglang` result
    /// files (nested folders too) -> an index, every run's page, and a comparison of any runs
    /// chosen in the index. Loads nothing from anywhere; copy the folder to any file server.
    Site(SiteArgs),
}

#[derive(Debug, clap::Args)]
pub struct SiteArgs {
    /// Results folders, result files, or folders holding them (searched to any depth).
    #[arg(value_name = "DIR", required = true)]
    pub inputs: Vec<PathBuf>,
    /// The site's folder (created; its pages are written again on every run).
    #[arg(long, value_name = "SITE")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline: a results folder, its results.json, or a `bench serve` result file.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run compared with it (same kind as A).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Folder to write compare.html into.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

pub fn run(args: ReportArgs) -> CliResult {
    match (args.command, args.dir) {
        (Some(ReportCommand::Compare(c)), _) => run_compare(c),
        (Some(ReportCommand::Site(s)), _) => run_site(s),
        (None, Some(dir)) => rerender(&dir),
        (None, None) => Err(CliError::usage(
            "report needs a results folder (llmspeed report DIR) or `compare A B`",
        )),
    }
}

fn rerender(dir: &Path) -> CliResult {
    let report = files::read_json(dir).map_err(|e| CliError::failed(e.to_string()))?;
    files::write_rendered(dir, &report).map_err(|e| CliError::failed(e.to_string()))?;
    eprintln!(
        "re-rendered {} from {}",
        dir.join(files::HTML).display(),
        files::JSON
    );
    Ok(ExitCode::SUCCESS)
}

/// What one side of a comparison holds.
enum Input {
    Matrix(Box<MatrixReport>),
    Bench(serde_json::Map<String, serde_json::Value>),
}

fn load(path: &Path) -> Result<Input, CliError> {
    if path.is_dir() {
        return files::read_json(path)
            .map(|r| Input::Matrix(Box::new(r)))
            .map_err(|e| CliError::failed(e.to_string()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::failed(format!("cannot read {}: {e}", path.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::failed(format!("{} is not JSON: {e}", path.display())))?;
    let serde_json::Value::Object(map) = value else {
        return Err(CliError::failed(format!(
            "{} is not a results object",
            path.display()
        )));
    };
    // A matrix results.json carries its schema version and decode cells; anything else is
    // taken as a `bench serve` result (vLLM's flat object of figures).
    if map.contains_key("schema_version") && map.contains_key("decode") {
        json::read(text.as_bytes())
            .map(|r| Input::Matrix(Box::new(r)))
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))
    } else {
        Ok(Input::Bench(map))
    }
}

fn run_compare(args: CompareArgs) -> CliResult {
    let (a_name, b_name) = (args.a.display().to_string(), args.b.display().to_string());
    let comparison: Comparison = match (load(&args.a)?, load(&args.b)?) {
        (Input::Matrix(a), Input::Matrix(b)) => compare::matrices(&a_name, &a, &b_name, &b),
        (Input::Bench(a), Input::Bench(b)) => compare::bench_results(&a_name, &a, &b_name, &b),
        _ => {
            return Err(CliError::usage(
                "compare needs two of a kind: two matrix results, or two bench serve results",
            ))
        }
    };
    let mut md = Vec::new();
    compare::markdown(&mut md, &comparison)
        .map_err(|e| CliError::failed(format!("cannot write the comparison: {e}")))?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", args.out.display())))?;
    let path = args.out.join("compare.html");
    let mut page = Vec::new();
    html::write_compare(&mut page, &comparison)
        .and_then(|()| std::fs::write(&path, &page))
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    use std::io::Write as _;
    std::io::stdout()
        .write_all(&md)
        .map_err(|e| CliError::failed(format!("cannot write to stdout: {e}")))?;
    eprintln!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn run_site(args: SiteArgs) -> CliResult {
    let built = crate::report::site::build(&args.inputs, &args.out)
        .map_err(|e| CliError::failed(e.to_string()))?;
    for s in &built.skipped {
        eprintln!("skipped {s}");
    }
    eprintln!(
        "wrote {} ({} run{})",
        built.index.display(),
        built.runs,
        if built.runs == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
