//! The version string that `llmspeed --version` prints and every result file records
//! (`LLMSPEED_VERSION`): the package version, the git commit the binary was built from, and the
//! target triple. A build from a package (crates.io, an sdist) has no repository of its own and
//! says "release" instead of a commit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("set by cargo");
    let target = std::env::var("TARGET").expect("set by cargo");
    let commit = git_commit(&dir).unwrap_or_else(|| {
        // In a checkout whose git call failed (a commit or merge in progress at that moment),
        // watch its HEAD so the next build asks again instead of keeping "release".
        watch(&dir.join(".git"));
        watch(&dir.join(".git/HEAD"));
        "release".to_string()
    });
    println!("cargo:rustc-env=LLMSPEED_VERSION={version} ({commit} {target})");
    println!("cargo:rerun-if-changed=build.rs");
}

/// HEAD's commit (12 hex digits) when `dir` is the top of a git work tree; `None` otherwise.
/// Only this package's own repository counts: a package unpacked inside some other repository
/// (cargo's registry cache under a home folder kept in git, `target/package/`) is a release.
fn git_commit(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // Run again when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) and
    // the packed refs. A worktree keeps HEAD in its own git folder and the refs in the common one.
    let git_dir = PathBuf::from(git(dir, &["rev-parse", "--absolute-git-dir"])?);
    let common = dir.join(git(dir, &["rev-parse", "--git-common-dir"])?);
    watch(&git_dir.join("HEAD"));
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch(&common.join(branch));
    }
    watch(&common.join("packed-refs"));
    Some(commit)
}

/// Ask cargo to run this script again when `path` changes. Only existing paths: cargo would take
/// a missing one as always changed and run the script on every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}
