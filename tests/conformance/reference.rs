//! The reference tools the conformance tests hold llmspeed against, as `scripts/references.sh`
//! installs them: each one's Python (a launcher with the tool first on PYTHONPATH), named by an
//! environment variable `.ci/run` exports; and each one's flags, read from its own argument
//! parser by `argparse_dump.py`.
//!
//! Without the variable a test says NOT RUN, or fails under `CI=true`. The flags of the version
//! the drop-in follows are kept in `tests/conformance/<tool>-<version>-flags.json`, so a run
//! against a moved reference fails naming what moved (and the flags test still runs where the
//! reference is not installed).
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One reference tool.
pub struct Tool {
    pub name: &'static str,
    pub version: &'static str,
    /// The environment variable holding its Python launcher.
    pub env: &'static str,
    /// `python -m <module> <args>` runs the benchmark; `--help` appended shows its flags.
    pub module: &'static str,
    pub args: &'static [&'static str],
}

pub const VLLM: Tool = Tool {
    name: "vllm",
    version: "0.33.0",
    env: "LLMSPEED_VLLM_REF_PYTHON",
    module: "vllm.entrypoints.cli.main",
    args: &["bench", "serve"],
};

pub const SGLANG: Tool = Tool {
    name: "sglang",
    version: "0.5.23",
    env: "LLMSPEED_SGLANG_REF_PYTHON",
    module: "sglang.bench_serving",
    args: &["--"],
};

/// The tiny model of `scripts/vllm-server.sh` (`LLMSPEED_VLLM_MODEL`), whose Hugging Face
/// tokenizer both tools load; `None` (NOT RUN) when it is not set, a failure under `CI=true`.
pub fn tiny_tokenizer() -> Option<PathBuf> {
    match std::env::var_os("LLMSPEED_VLLM_MODEL") {
        Some(m) if Path::new(&m).join("tokenizer.json").exists() => Some(PathBuf::from(m)),
        _ => {
            let msg = "LLMSPEED_VLLM_MODEL (the tiny model of scripts/vllm-server.sh, whose \
                       tokenizer both tools load) is not set";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("NOT RUN: {msg}");
            None
        }
    }
}

/// A tiny vision model of `scripts/vllm-server.sh` by its variable
/// (`LLMSPEED_VLLM_VISION_MODEL`, `LLMSPEED_VLLM_QWEN2VL_MODEL`), a folder with its processor's
/// files; `None` (NOT RUN) when it is not set, a failure under `CI=true`.
#[allow(dead_code)]
pub fn tiny_vision(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(m) if Path::new(&m).join("processor_config.json").is_file() => Some(m.into()),
        _ => {
            let msg = format!("{var} (a tiny vision model of scripts/vllm-server.sh) is not set");
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("NOT RUN: {msg}");
            None
        }
    }
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

impl Tool {
    /// The installed reference's Python launcher; `None` (NOT RUN) when it is not installed,
    /// a failure under `CI=true`.
    pub fn python(&self) -> Option<PathBuf> {
        match std::env::var_os(self.env) {
            Some(p) if Path::new(&p).exists() => Some(p.into()),
            _ => {
                let msg = format!(
                    "{} {} is not installed: run `eval \"$(bash scripts/references.sh)\"` and \
                     export {}=\"$vllm_python\" / \"$sglang_python\" (see .ci/run)",
                    self.name, self.version, self.env
                );
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{msg}");
                }
                eprintln!("NOT RUN against the real tool: {msg}");
                None
            }
        }
    }

    /// The kept copy of this version's flags.
    pub fn snapshot_path(&self) -> PathBuf {
        dir().join(format!("{}-{}-flags.json", self.name, self.version))
    }

    /// `python -m <module> <args>` on the reference's Python, quiet and offline.
    pub fn command(&self, python: &Path) -> Command {
        let mut c = Command::new(python);
        c.arg("-m").arg(self.module);
        c.args(self.args.iter().filter(|a| **a != "--"));
        offline(&mut c);
        c
    }

    /// [`Tool::command`] as one shell line (for `selftest --external`, which runs its command
    /// with `sh -c`): `env` with the same settings, then the reference. `python` must need no
    /// quoting (the installed launchers' paths do not).
    pub fn shell_line(&self, python: &Path) -> String {
        let mut words: Vec<String> = vec!["env".into()];
        words.extend(OFFLINE.iter().map(|(k, v)| format!("{k}={v}")));
        words.push(python.display().to_string());
        words.push("-m".into());
        words.push(self.module.into());
        words.extend(
            self.args
                .iter()
                .filter(|a| **a != "--")
                .map(|a| a.to_string()),
        );
        words.join(" ")
    }

    /// The flags, read from the installed reference's parser.
    pub fn dump_flags(&self, python: &Path) -> Vec<Value> {
        let mut c = Command::new(python);
        c.arg(dir().join("argparse_dump.py")).arg(self.module);
        c.args(self.args.iter().filter(|a| **a != "--"));
        c.arg("--help");
        offline(&mut c);
        let out = c.output().expect("run the reference's Python");
        assert!(
            out.status.success(),
            "{} --help through argparse_dump.py failed:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "argparse_dump.py printed no JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        for f in v.as_array_mut().expect("a JSON list of flags") {
            normalize(f);
        }
        v.as_array().expect("a JSON list of flags").clone()
    }

    /// Asks the installed reference's own parser about each command line (its arguments after
    /// the tool's own words): `{"ok": {dest: value}}` when it parses, `{"error": message}` when
    /// its parser refuses it. Nothing runs beyond the parse (`argparse_probe.py`).
    pub fn probe(&self, python: &Path, probes: &[Vec<String>]) -> Vec<Value> {
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(file.path(), serde_json::to_string(probes).unwrap()).unwrap();
        let mut c = Command::new(python);
        c.arg(dir().join("argparse_probe.py"))
            .arg(file.path())
            .arg(self.module);
        c.args(self.args.iter().filter(|a| **a != "--"));
        offline(&mut c);
        let out = c.output().expect("run the reference's Python");
        assert!(
            out.status.success(),
            "{} through argparse_probe.py failed:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "argparse_probe.py printed no JSON list ({e}):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(v.len(), probes.len(), "one answer per probe");
        v
    }

    /// The reference's flags: read live when it is installed (and then checked against the
    /// kept copy, which `LLMSPEED_CONFORMANCE_UPDATE=1` rewrites), else the kept copy.
    pub fn flags(&self) -> Vec<Value> {
        let kept_path = self.snapshot_path();
        let kept: Option<Vec<Value>> = std::fs::read_to_string(&kept_path)
            .ok()
            .map(|t| serde_json::from_str(&t).expect("the kept flags are JSON"));
        let Some(py) = self.python() else {
            return kept.unwrap_or_else(|| panic!("no {}", kept_path.display()));
        };
        let live = self.dump_flags(&py);
        if std::env::var("LLMSPEED_CONFORMANCE_UPDATE").is_ok_and(|v| v == "1") {
            let text = serde_json::to_string_pretty(&live).unwrap() + "\n";
            std::fs::write(&kept_path, text).unwrap();
            return live;
        }
        if kept.as_ref() != Some(&live) {
            panic!(
                "{} {}'s parser differs from {}:\n{}\nA new reference version: follow it in \
                 src/bench/{}/, then rerun with LLMSPEED_CONFORMANCE_UPDATE=1 to keep its flags.",
                self.name,
                self.version,
                kept_path.display(),
                diff(kept.as_deref().unwrap_or(&[]), &live),
                if self.name == "vllm" {
                    "vllm"
                } else {
                    "sglang"
                }
            );
        }
        live
    }
}

/// A default drawn at random when the parser is built (vLLM's `--request-id-prefix`,
/// `bench-<8 hex digits>-`) is written as its shape, so two reads compare equal.
fn normalize(flag: &mut Value) {
    let random_prefix = flag["default"].as_str().is_some_and(|d| {
        d.len() == 15
            && d.starts_with("bench-")
            && d.ends_with('-')
            && d[6..14].bytes().all(|b| b.is_ascii_hexdigit())
    });
    if random_prefix {
        flag["default"] = Value::String("bench-<8 random hex digits>-".into());
    }
}

/// What moved between two flag lists, one line per flag.
fn diff(kept: &[Value], live: &[Value]) -> String {
    let key = |v: &Value| v["flags"][0].as_str().unwrap_or("?").to_string();
    let mut out = Vec::new();
    for l in live {
        match kept.iter().find(|k| key(k) == key(l)) {
            None => out.push(format!("  new: {l}")),
            Some(k) if k != l => out.push(format!("  changed: {k}\n        -> {l}")),
            Some(_) => {}
        }
    }
    for k in kept {
        if !live.iter().any(|l| key(l) == key(k)) {
            out.push(format!("  gone: {k}"));
        }
    }
    out.join("\n")
}

/// No hub, no telemetry, no colour: the reference runs offline against local servers.
pub const OFFLINE: [(&str, &str); 7] = [
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_DATASETS_OFFLINE", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("DO_NOT_TRACK", "1"),
    ("NO_COLOR", "1"),
    ("PYTHONWARNINGS", "ignore"),
];

fn offline(c: &mut Command) {
    c.envs(OFFLINE);
}

/// Runs one of the suite's scripts on a reference Python (vLLM's, SGLang's or the `datasets`
/// library's own code answering for them): `python SCRIPT ARGS...` (`script` relative to the
/// crate's folder) with `envs` set and `input` as JSON on stdin; its stdout parsed as JSON.
/// Panics with the script's stderr if it fails or answers something else.
pub fn run_script<S: AsRef<std::ffi::OsStr>>(
    python: &Path,
    script: &str,
    args: &[&str],
    envs: &[(&str, S)],
    input: &Value,
) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut child = std::process::Command::new(python)
        .arg(&path)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v.as_ref())))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the reference Python");
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        input.to_string().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script} {args:?} answers no JSON ({e})"))
}
