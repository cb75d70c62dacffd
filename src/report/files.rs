//! The results folder: `report.md`, `report.html`, `results.json`, `results.csv`, `decode.svg`
//! and `prefill.svg` written together, each
//! atomically (temporary file, sync, rename), so the folder holds a complete, valid report
//! after every cell and after Ctrl-C — never a half-written file. Also reading `results.json`
//! back for `--resume`.
//!
//! File I/O only; no sockets, no clock (the caller stamps the report), no console output.

use crate::report::model::MatrixReport;
use crate::report::{csv, html, json, markdown, svg};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const MARKDOWN: &str = "report.md";
pub const HTML: &str = "report.html";
pub const JSON: &str = "results.json";
pub const CSV: &str = "results.csv";
pub const DECODE_SVG: &str = "decode.svg";
pub const PREFILL_SVG: &str = "prefill.svg";
/// `matrix --slo`'s answer per context (only with `--slo`).
pub const SLO_CSV: &str = "slo.csv";

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a results file this version can resume from: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Render with `render` into a buffer, then replace `path` with it atomically.
pub(crate) fn write_atomic(
    path: &Path,
    render: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
) -> Result<(), FilesError> {
    let err = |source| FilesError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut buf = Vec::with_capacity(64 * 1024);
    render(&mut buf).map_err(err)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(())
}

/// Write the six files into `dir` (created if missing). JSON first: it is what `--resume`
/// reads, so it must never lag behind the human-facing files.
pub fn write_all(dir: &Path, report: &MatrixReport) -> Result<(), FilesError> {
    std::fs::create_dir_all(dir).map_err(|source| FilesError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write_atomic(&dir.join(JSON), |w| json::write(w, report))?;
    write_rendered(dir, report)
}

/// Write every file made from the model but `results.json` (`llmspeed report DIR`, which
/// re-renders them from the JSON without touching it).
pub fn write_rendered(dir: &Path, report: &MatrixReport) -> Result<(), FilesError> {
    write_atomic(&dir.join(MARKDOWN), |w| markdown::write(w, report))?;
    write_atomic(&dir.join(HTML), |w| html::write(w, report))?;
    write_atomic(&dir.join(CSV), |w| csv::write(w, report))?;
    if let Some(t) = &report.slo {
        write_atomic(&dir.join(SLO_CSV), |w| csv::write_slo(w, t))?;
    }
    write_atomic(&dir.join(DECODE_SVG), |w| svg::write_decode(w, report))?;
    write_atomic(&dir.join(PREFILL_SVG), |w| svg::write_prefill(w, report))
}

/// Read `results.json` from a results folder.
pub fn read_json(dir: &Path) -> Result<MatrixReport, FilesError> {
    let path = dir.join(JSON);
    let f = std::fs::File::open(&path).map_err(|source| FilesError::Read {
        path: path.clone(),
        source,
    })?;
    json::read(std::io::BufReader::new(f)).map_err(|source| FilesError::Parse { path, source })
}
