//! SGLang's `--dataset-name mooncake` trace file: where it is read from and, when it is not
//! there, where it is downloaded from, as SGLang 0.5.23 does it. Without `--dataset-path` the
//! file is `/tmp/<workload>_trace.jsonl`; a path given that does not exist is downloaded to
//! that path too; the source is the Mooncake repository's published trace of the workload
//! (`--mooncake-workload`: mooncake, conversation, synthetic, toolagent). The file left in
//! `/tmp` is the one SGLang would read, so the two tools share it.
//!
//! Owns: the workloads' URLs (under a base a user may point at a mirror with
//! `LLMSPEED_MOONCAKE_BASE_URL`), the default path, and [`ensure`], the one function doing IO:
//! a download written under a temporary name beside the file and renamed, so an interrupted one
//! never leaves a truncated trace where the next run would read it.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::net::fetch;

/// Where SGLang 0.5.23 fetches the traces from (its `MOONCAKE_DATASET_URL`'s common part).
pub const DEFAULT_BASE: &str =
    "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release";

/// The environment variable that replaces [`DEFAULT_BASE`] (a mirror, or a test's server).
pub const BASE_VAR: &str = "LLMSPEED_MOONCAKE_BASE_URL";

/// Each `--mooncake-workload` and its file under the base.
pub const WORKLOADS: &[(&str, &str)] = &[
    ("mooncake", "arxiv-trace/mooncake_trace.jsonl"),
    ("conversation", "traces/conversation_trace.jsonl"),
    ("synthetic", "traces/synthetic_trace.jsonl"),
    ("toolagent", "traces/toolagent_trace.jsonl"),
];

/// A trace to read at `path`, fetched from `url` first when the file is not there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    pub path: PathBuf,
    pub url: String,
}

impl TraceFile {
    /// The workload's file: at `path` if given (SGLang's `--dataset-path`), else
    /// `/tmp/<workload>_trace.jsonl`; its URL under `base` (`None`: [`DEFAULT_BASE`]).
    /// `Err` names the workloads for an unknown one.
    pub fn for_workload(
        workload: &str,
        path: Option<PathBuf>,
        base: Option<&str>,
    ) -> Result<Self, String> {
        let (_, file) = WORKLOADS
            .iter()
            .find(|(w, _)| *w == workload)
            .ok_or_else(|| {
                let names: Vec<&str> = WORKLOADS.iter().map(|(w, _)| *w).collect();
                format!(
                    "unknown --mooncake-workload {workload:?} (SGLang's: {})",
                    names.join(", ")
                )
            })?;
        let base = base.unwrap_or(DEFAULT_BASE).trim_end_matches('/');
        Ok(Self {
            path: path.unwrap_or_else(|| PathBuf::from(format!("/tmp/{workload}_trace.jsonl"))),
            url: format!("{base}/{file}"),
        })
    }
}

/// The base from the environment ([`BASE_VAR`]), empty counting as unset.
pub fn base_from_env() -> Option<String> {
    std::env::var(BASE_VAR)
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// Makes sure the trace is at `t.path`: nothing to do when a file is there; else says so on
/// `log` and downloads it. Returns whether it downloaded. The error names the URL, why, and
/// where to put the file by hand.
pub fn ensure(t: &TraceFile, log: &mut dyn Write) -> Result<bool, String> {
    if t.path.exists() {
        return Ok(false);
    }
    let _ = writeln!(
        log,
        "llmspeed: downloading {} to {}",
        t.url,
        t.path.display()
    );
    download(t).map_err(|cause| {
        format!(
            "--dataset-name mooncake: {} is not there and could not be downloaded: {cause}; \
             without network, fetch {} elsewhere and put it at {}, or give a local trace with \
             --dataset-path",
            t.path.display(),
            t.url,
            t.path.display()
        )
    })?;
    Ok(true)
}

fn download(t: &TraceFile) -> Result<(), String> {
    let tmp = partial_name(&t.path);
    let result = (|| {
        let file =
            fs::File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let mut w = BufWriter::new(file);
        fetch::fetch(&t.url, None, &mut w).map_err(|e| e.to_string())?;
        let file = w
            .into_inner()
            .map_err(|e| format!("cannot write {}: {}", tmp.display(), e.error()))?;
        file.sync_all()
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        fs::rename(&tmp, &t.path)
            .map_err(|e| format!("cannot move {} to {}: {e}", tmp.display(), t.path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `<name>.partial-<pid>` beside the file: never a name a run reads.
fn partial_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workload_has_its_file_and_tmp_path() {
        let t = TraceFile::for_workload("conversation", None, None).unwrap();
        assert_eq!(t.path, PathBuf::from("/tmp/conversation_trace.jsonl"));
        assert_eq!(
            t.url,
            "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/conversation_trace.jsonl"
        );
        let t = TraceFile::for_workload("mooncake", None, None).unwrap();
        assert_eq!(t.path, PathBuf::from("/tmp/mooncake_trace.jsonl"));
        assert!(t
            .url
            .ends_with("/FAST25-release/arxiv-trace/mooncake_trace.jsonl"));
    }

    #[test]
    fn a_given_path_and_a_mirror_replace_the_defaults() {
        let t = TraceFile::for_workload(
            "toolagent",
            Some(PathBuf::from("here/t.jsonl")),
            Some("http://127.0.0.1:9/m/"),
        )
        .unwrap();
        assert_eq!(t.path, PathBuf::from("here/t.jsonl"));
        assert_eq!(t.url, "http://127.0.0.1:9/m/traces/toolagent_trace.jsonl");
    }

    #[test]
    fn an_unknown_workload_names_the_known_ones() {
        let e = TraceFile::for_workload("chat", None, None).unwrap_err();
        assert!(e.contains("\"chat\"") && e.contains("toolagent"), "{e}");
    }

    #[test]
    fn the_partial_file_sits_beside_the_trace() {
        let p = partial_name(Path::new("/tmp/x_trace.jsonl"));
        assert_eq!(p.parent(), Some(Path::new("/tmp")));
        assert!(p
            .to_str()
            .unwrap()
            .starts_with("/tmp/x_trace.jsonl.partial-"));
    }
}
