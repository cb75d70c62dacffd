//! `llmspeed --version` names the package version, the git commit the binary was built from and
//! the target, each checked against an independent source (Cargo.toml, `git rev-parse HEAD`,
//! the platform the test runs on). The result files record the same string: their tests compare
//! their tool field with `llmspeed::VERSION` (matrix_cli, bench_serve_e2e, bench_serve_shard,
//! selftest), and this test ties that constant to what the binary prints.

use std::process::Command;

fn printed_version() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

fn git_head() -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["rev-parse", "--show-toplevel", "HEAD"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let top = std::path::Path::new(lines.next()?).canonicalize().ok()?;
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .ok()?;
    (out.status.success() && top == here).then(|| lines.next().map(str::to_string))?
}

#[test]
fn version_names_the_package_the_commit_and_the_target() {
    let line = printed_version();
    assert_eq!(line, format!("llmspeed {}", llmspeed::VERSION));
    // `llmspeed 0.1.0 (COMMIT TARGET)`
    let rest = line.strip_prefix("llmspeed ").unwrap();
    let (version, paren) = rest.split_once(' ').unwrap();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let inner = paren
        .strip_prefix('(')
        .and_then(|p| p.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no (COMMIT TARGET) in {line:?}"));
    let (commit, target) = inner.split_once(' ').unwrap();

    match git_head() {
        Some(head) => {
            assert_eq!(commit.len(), 12, "{commit}");
            assert!(
                head.starts_with(commit),
                "built from {commit}, HEAD is {head}"
            );
        }
        // A package build (crates.io, an sdist) has no repository of its own.
        None => assert_eq!(commit, "release"),
    }
    let arch = std::env::consts::ARCH;
    assert!(
        target.starts_with(&format!("{arch}-")),
        "{target} is not for {arch}"
    );
    assert!(target.contains(std::env::consts::OS), "{target}");
}
