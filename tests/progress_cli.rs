//! The progress display of `llmspeed matrix --mock`: live (escape sequences, phase words) under
//! a pseudo-terminal made by util-linux `script`, plain lines with no escape sequences when
//! piped or with `--no-progress`.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_llmspeed");

fn matrix_args(dir: &std::path::Path) -> Vec<String> {
    [
        "matrix",
        "--mock",
        "--contexts",
        "1k",
        "--prefill-contexts",
        "1k",
        "--concurrency",
        "1,2",
        "--duration",
        "2",
        "--max-tokens",
        "64",
        "--out",
        dir.join("r").to_str().unwrap(),
        "--prompt-cache",
        dir.join("cache").to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Single quotes for `sh -c` (the temp path has no quote in it, but be exact anyway).
fn quoted(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn has_script() -> bool {
    Command::new("script").arg("--version").output().is_ok()
}

#[test]
fn a_terminal_gets_the_live_display() {
    if !has_script() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "util-linux `script` is needed for the pseudo-terminal test"
        );
        eprintln!("skipped: no `script` here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!("{BIN} {}", quoted(&matrix_args(dir.path())));
    // `script` runs the command on a new pseudo-terminal (stdout and stderr both) and copies
    // what it wrote to our pipe.
    let o = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{all}");
    assert!(all.contains("\x1b["), "no escape sequence: {all}");
    for word in [
        "steps [",
        "waiting for the server",
        "measuring",
        "draining",
        "3/3 steps",
    ] {
        assert!(all.contains(word), "{word:?} missing: {all}");
    }
    // The countdown and live figures of a window.
    assert!(all.contains("s left, "), "no countdown: {all}");
    assert!(dir.path().join("r/results.json").exists());
}

#[test]
fn pipes_and_no_progress_get_plain_lines() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(matrix_args(dir.path()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    assert!(err.contains("[matrix] 3 steps to run\n"), "{err}");
    assert!(err.contains("[matrix] 3 of 3 steps done"), "{err}");
    // The cell's verdict, one plain line: Valid, or Client-bound with its reason when the
    // binary's other test loads the 2 cores beside it (CI on a fresh machine: 67% of the
    // C = 2 cell's gaps read merged). The verdict is the cell's; the line is this test's subject.
    assert!(
        err.lines().any(|l| {
            l.starts_with("[matrix] cell 1K x 2: Valid ")
                || l.starts_with("[matrix] cell 1K x 2: Client-bound ")
        }),
        "{err}"
    );

    if has_script() {
        // A terminal, but --no-progress: plain lines all the same.
        let mut args = matrix_args(dir.path());
        args.push("--no-progress".into());
        let cmd = format!("{BIN} {}", quoted(&args));
        let o = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .output()
            .unwrap();
        let all = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{all}");
        assert!(!all.contains('\x1b'), "{all:?}");
        assert!(all.contains("[matrix] 3 of 3 steps done"), "{all}");
    }
}
