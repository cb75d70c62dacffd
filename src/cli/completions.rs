//! `llmspeed completions SHELL` and `llmspeed man`: shell completion scripts and man pages made
//! from the same clap definitions that parse the command line, so they cannot drift from it.
//! Packagers run them at build time (`scripts/package.sh` for the wheel, `scripts/build-image.sh`
//! for the image); nothing generated is kept in the repository.

use super::{Cli, CliError, CliResult};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write llmspeed.1 and one page per subcommand (llmspeed-bench-serve.1, ...) into DIR
    /// (made if missing) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The completion script for `shell`, registering the command name `llmspeed`.
pub fn completion_script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "llmspeed", &mut script);
    script
}

/// The command as the man pages describe it. A page names the package version only (not the
/// commit): the same release has the same pages.
fn man_command() -> clap::Command {
    Cli::command().version(env!("CARGO_PKG_VERSION"))
}

/// The main man page (`llmspeed.1`) as roff.
pub fn man_page() -> Vec<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(man_command())
        .render(&mut page)
        .expect("rendering into memory cannot fail");
    page
}

pub fn run_completions(a: CompletionsArgs) -> CliResult {
    print(&completion_script(a.shell))
}

pub fn run_man(a: ManArgs) -> CliResult {
    match a.dir {
        None => print(&man_page()),
        Some(dir) => {
            let failed = |e: std::io::Error| {
                CliError::failed(format!(
                    "cannot write man pages into {}: {e}",
                    dir.display()
                ))
            };
            std::fs::create_dir_all(&dir).map_err(failed)?;
            clap_mangen::generate_to(man_command(), &dir).map_err(failed)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print(bytes: &[u8]) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| CliError::failed(format!("cannot write to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
