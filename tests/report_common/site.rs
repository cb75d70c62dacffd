//! Real results for the site tests, made once per test binary by the binary itself: two
//! `matrix --mock` runs (different hardware and settings), a `bench serve` run with
//! `--metadata` and `--plot-timeline` and a `bench serve` sweep against `llmspeed mock`, a
//! `bench sglang` record, and a folder that is not a result. A test that includes this module
//! also includes `support/process.rs` as `process`.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The folder of results (`team/`) under a kept temporary folder.
pub struct Fixture {
    pub root: PathBuf,
    pub team: PathBuf,
    pub matrix_a: PathBuf,
    pub matrix_b: PathBuf,
    /// The single `bench serve` result and its timeline page.
    pub bench: PathBuf,
    pub timeline: PathBuf,
    /// The sweep summary, its page and its points' result files.
    pub sweep: PathBuf,
    pub sweep_page: PathBuf,
    pub sglang: PathBuf,
}

/// The launch command the first matrix run was told.
pub const LAUNCH: &str = "vllm serve mock-model --max-num-seqs 8";

/// Runs the binary; its stderr, after checking it succeeded.
pub fn llmspeed(args: &[&str]) -> String {
    let o = Command::new(crate::process::bin())
        .args(args)
        .output()
        .expect("run llmspeed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "llmspeed {args:?} failed: {text}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(make)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn matrix(out: &Path, extra: &[&str]) {
    let mut args = vec![
        "matrix",
        "--mock",
        "--contexts",
        "1k,2k",
        "--duration",
        "1s",
        "--prefill-samples",
        "1",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    llmspeed(&args);
}

fn make() -> Fixture {
    // Under cargo's folder for integration tests' files, one per test binary, made afresh.
    let binary = std::env::current_exe().expect("the test binary");
    // `report_site-<hash>`: the name without cargo's hash, so rebuilds reuse the folder.
    let stem = binary
        .file_stem()
        .and_then(|n| n.to_str())
        .unwrap_or("report");
    let name = stem.split('-').next().unwrap_or(stem);
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("site-fixture-{name}"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("the fixture folder");
    let team = root.join("team");
    let matrix_a = team.join("h200").join("vllm-a");
    let matrix_b = team.join("rtx").join("vllm-b");
    matrix(
        &matrix_a,
        &[
            "--concurrency",
            "1,2",
            "--max-tokens",
            "32",
            "--gpu",
            "H200",
            "--launch-command",
            LAUNCH,
        ],
    );
    matrix(
        &matrix_b,
        &[
            "--concurrency",
            "1,2,4",
            "--max-tokens",
            "64",
            "--gpu",
            "RTX 6000",
        ],
    );
    let (mut mock, url) = crate::process::mock(&[]);
    let bench_dir = team.join("bench");
    // `--plot-timeline` writes its page before the result creates the folder.
    std::fs::create_dir_all(&bench_dir).unwrap();
    // Both tools' small random dataset.
    let random = [
        "--dataset-name",
        "random",
        "--random-input-len",
        "64",
        "--random-output-len",
        "16",
        "--num-prompts",
        "8",
    ];
    let bench = |tool: &str, extra: &[&str]| {
        let mut args = vec!["bench", tool, "--base-url", &url];
        args.extend_from_slice(&random);
        args.extend_from_slice(extra);
        llmspeed(&args);
    };
    let told = [
        "--metadata",
        "hardware=1x H200",
        "engine=vllm",
        "engine_version=0.11.0",
    ];
    let saved = |dir: &Path, name: &str| -> Vec<String> {
        [
            "--save-result",
            "--result-dir",
            s(dir),
            "--result-filename",
            name,
        ]
        .iter()
        .chain(&told)
        .map(|a| a.to_string())
        .collect()
    };
    let mut single = saved(&bench_dir, "single.json");
    single.extend(["--max-concurrency", "4", "--plot-timeline"].map(String::from));
    bench(
        "serve",
        &single.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let sweep_dir = team.join("sweep");
    let mut sweep = saved(&sweep_dir, "s.json");
    sweep.extend(["--sweep-max-concurrency", "1,2,4"].map(String::from));
    bench(
        "serve",
        &sweep.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let sglang_dir = team.join("sglang");
    std::fs::create_dir_all(&sglang_dir).unwrap();
    let sglang = sglang_dir.join("runs.jsonl");
    bench(
        "sglang",
        &[
            "--backend",
            "sglang",
            "--max-concurrency",
            "2",
            "--output-file",
            s(&sglang),
        ],
    );
    mock.signal(libc::SIGTERM);
    mock.wait();
    let notes = team.join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("readme.txt"), "not a result\n").unwrap();
    let sweep_summary = std::fs::read_dir(&sweep_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-sweep.json"))
        .expect("the sweep summary");
    Fixture {
        root,
        matrix_a,
        matrix_b,
        bench: bench_dir.join("single.json"),
        timeline: bench_dir.join("single.timeline.html"),
        sweep_page: sweep_summary.with_extension("html"),
        sweep: sweep_summary,
        sglang,
        team,
    }
}

pub fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Copy a folder's files (one level), for tests that edit a run.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}
