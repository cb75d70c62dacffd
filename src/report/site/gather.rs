//! Finding the runs under the folders and files `report site` is given: matrix and `capacity`
//! results folders (`results.json`), `bench serve` result files and sweep summaries, and `bench sglang` JSONL
//! records, nested folders included. Everything else is skipped with a line saying why.
//!
//! The only file reading of the site; what a file *is* is decided by [`classify`], pure.

use crate::report::model::{MatrixReport, SCHEMA_VERSION};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// One run found, with what its own file holds.
#[derive(Clone, Debug)]
pub enum Source {
    Matrix {
        dir: PathBuf,
        report: Box<MatrixReport>,
    },
    BenchServe {
        file: PathBuf,
        result: Map<String, Value>,
    },
    /// A `bench serve` sweep: its summary and each point's first run's result.
    Sweep {
        file: PathBuf,
        summary: Value,
        points: Vec<Map<String, Value>>,
    },
    /// A `capacity` search's folder and its `results.json`.
    Capacity { dir: PathBuf, results: Value },
    /// One record (line, counted from 1) of a `bench sglang` JSONL file.
    Sglang {
        file: PathBuf,
        line: usize,
        record: Map<String, Value>,
    },
}

impl Source {
    /// Where the run came from, as given (`dir`, `file`, `file:line`).
    pub fn origin(&self) -> String {
        match self {
            Source::Matrix { dir, .. } | Source::Capacity { dir, .. } => dir.display().to_string(),
            Source::BenchServe { file, .. } | Source::Sweep { file, .. } => {
                file.display().to_string()
            }
            Source::Sglang { file, line, .. } => format!("{}:{line}", file.display()),
        }
    }
}

/// What the inputs held.
#[derive(Debug, Default)]
pub struct Found {
    pub runs: Vec<Source>,
    /// `path: why` for each folder or file that is not a result.
    pub skipped: Vec<String>,
}

/// What one JSON file is.
#[derive(Debug, PartialEq)]
pub enum Kind {
    Matrix,
    BenchServe,
    Sweep,
    Capacity,
    /// Not a result: why.
    Not(String),
}

/// What a parsed JSON object is, by its keys: a matrix `results.json` carries its schema version
/// and decode cells, a sweep summary its swept key and points, a `bench serve` result vLLM's
/// header and output throughput.
pub fn classify(m: &Map<String, Value>) -> Kind {
    let has = |k: &str| m.contains_key(k);
    if has("schema_version") && has("decode") {
        Kind::Matrix
    } else if has("schema_version") && has("answer") && has("probes") && has("slo") {
        Kind::Capacity
    } else if has("sweep") && has("points") {
        Kind::Sweep
    } else if has("model_id") && has("output_throughput") && has("date") {
        Kind::BenchServe
    } else if has("cv_flag") && has("metrics") && has("num_runs") {
        Kind::Not(
            "the spread across repeated runs (--num-runs), not a run: its runs' own files are"
                .into(),
        )
    } else {
        Kind::Not("not a result: no matrix, bench serve or sweep keys".into())
    }
}

/// A `bench sglang` JSONL record: SGLang's keys and our own.
pub fn is_sglang_record(m: &Map<String, Value>) -> bool {
    ["server_info", "dataset_name", "output_throughput"]
        .iter()
        .all(|k| m.contains_key(*k))
}

/// Whether a matrix file written by another version can be read, and if not, what it needs.
pub fn matrix_version_note(m: &Map<String, Value>) -> Option<String> {
    let v = m.get("schema_version").and_then(Value::as_u64)?;
    let by = written_by(m).unwrap_or("an unknown version");
    (v > u64::from(SCHEMA_VERSION)).then(|| {
        format!(
            "written by llmspeed {by} with results schema {v}; this llmspeed ({}) reads schema {SCHEMA_VERSION}: it needs an llmspeed that reads schema {v}",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// Every run under `inputs`, in a stable order (inputs as given, folders sorted by name);
/// `out` (the site being written) is never read.
pub fn gather(inputs: &[PathBuf], out: &Path) -> Found {
    let mut found = Found::default();
    for input in inputs {
        if input.is_dir() {
            let before = found.runs.len();
            walk(input, out, &mut found);
            if found.runs.len() == before {
                found.skipped.push(not_a_result(input));
            }
        } else if input.is_file() {
            file(input, &mut found);
        } else {
            found
                .skipped
                .push(format!("{}: no such file or folder", input.display()));
        }
    }
    fold_sweep_points(&mut found.runs);
    found
}

fn not_a_result(dir: &Path) -> String {
    format!(
        "{}: not a result (no results.json, bench serve result or bench sglang record in it or below it)",
        dir.display()
    )
}

fn walk(dir: &Path, out: &Path, found: &mut Found) {
    if same_path(dir, out) {
        return;
    }
    let results = dir.join(crate::report::files::JSON);
    if results.is_file() {
        matrix(dir, &results, found);
        return;
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            found
                .skipped
                .push(format!("{}: cannot read the folder: {e}", dir.display()));
            return;
        }
    };
    entries.sort();
    for p in entries {
        if p.is_dir() {
            let before = found.runs.len();
            walk(&p, out, found);
            if found.runs.len() == before && !same_path(&p, out) {
                found.skipped.push(not_a_result(&p));
            }
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("json" | "jsonl")
        ) {
            file(&p, found);
        }
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A file's text, or a line saying why it could not be read.
fn read_text(path: &Path, found: &mut Found) -> Option<String> {
    std::fs::read_to_string(path)
        .map_err(|e| {
            found
                .skipped
                .push(format!("{}: cannot read: {e}", path.display()))
        })
        .ok()
}

/// The llmspeed version a matrix results file records.
fn written_by(m: &Map<String, Value>) -> Option<&str> {
    m.get("metadata")?.get("tool_version")?.as_str()
}

fn matrix(dir: &Path, results: &Path, found: &mut Found) {
    if let Some(text) = read_text(results, found) {
        matrix_text(dir, &text, found);
    }
}

fn matrix_text(dir: &Path, text: &str, found: &mut Found) {
    let raw: Option<Map<String, Value>> = serde_json::from_str(text).ok();
    // A `capacity` search writes its own `results.json`.
    if let Some(m) = raw.as_ref().filter(|m| classify(m) == Kind::Capacity) {
        found.runs.push(Source::Capacity {
            dir: dir.to_path_buf(),
            results: Value::Object(m.clone()),
        });
        return;
    }
    if let Some(note) = raw.as_ref().and_then(matrix_version_note) {
        found.skipped.push(format!("{}: {note}", dir.display()));
        return;
    }
    match crate::report::json::read(text.as_bytes()) {
        Ok(report) => found.runs.push(Source::Matrix {
            dir: dir.to_path_buf(),
            report: Box::new(report),
        }),
        Err(e) => {
            let by = raw
                .as_ref()
                .and_then(written_by)
                .map(|v| format!(" (written by llmspeed {v})"))
                .unwrap_or_default();
            found.skipped.push(format!(
                "{}: results.json cannot be read by this llmspeed{by}: {e}",
                dir.display()
            ));
        }
    }
}

fn file(path: &Path, found: &mut Found) {
    let Some(text) = read_text(path, found) else {
        return;
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    if path.file_name().and_then(|n| n.to_str()) == Some(crate::report::files::JSON) {
        return matrix_text(dir, &text, found);
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) if is_sglang_record(&m) => found.runs.push(Source::Sglang {
            file: path.to_path_buf(),
            line: 1,
            record: m,
        }),
        Ok(Value::Object(m)) => match classify(&m) {
            Kind::Matrix | Kind::Capacity => matrix_text(dir, &text, found),
            Kind::BenchServe => found.runs.push(Source::BenchServe {
                file: path.to_path_buf(),
                result: m,
            }),
            Kind::Sweep => found.runs.push(Source::Sweep {
                file: path.to_path_buf(),
                summary: Value::Object(m),
                points: Vec::new(),
            }),
            Kind::Not(why) => found.skipped.push(format!("{}: {why}", path.display())),
        },
        Ok(_) => found.skipped.push(format!(
            "{}: not a result: not a JSON object",
            path.display()
        )),
        // Not one JSON value: JSON lines, as bench sglang appends them.
        Err(_) => jsonl(path, &text, found),
    }
}

/// Python's `json` writes non-finite floats as bare `Infinity`, `-Infinity` and `NaN`, which
/// JSON lacks (SGLang's records carry `"request_rate": Infinity`): outside strings each becomes
/// the string `"inf"`, `"-inf"` or `"nan"`. Everything else is kept byte for byte.
pub fn python_floats_as_strings(text: &str) -> std::borrow::Cow<'_, str> {
    const WORDS: [(&str, &str); 3] = [
        ("-Infinity", "\"-inf\""),
        ("Infinity", "\"inf\""),
        ("NaN", "\"nan\""),
    ];
    if !WORDS.iter().any(|(w, _)| text.contains(w)) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !in_string {
            if let Some((w, to)) = WORDS.iter().find(|(w, _)| rest.starts_with(w)) {
                out.push_str(to);
                rest = &rest[w.len()..];
                continue;
            }
        }
        if in_string && escaped {
            escaped = false;
        } else if in_string && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_string = !in_string;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out.into()
}

fn jsonl(path: &Path, text: &str, found: &mut Found) {
    let before = found.runs.len();
    for (i, line) in text.lines().enumerate() {
        let line = python_floats_as_strings(line);
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&line) {
            if is_sglang_record(&m) {
                found.runs.push(Source::Sglang {
                    file: path.to_path_buf(),
                    line: i + 1,
                    record: m,
                });
            }
        }
    }
    if found.runs.len() == before {
        found.skipped.push(format!(
            "{}: not a result: neither one JSON object nor bench sglang records",
            path.display()
        ));
    }
}

/// A sweep's points are its own: each point's result file leaves the list of runs and its
/// first run's result goes into the sweep (the points' files are named in the summary).
fn fold_sweep_points(runs: &mut Vec<Source>) {
    let named: Vec<(usize, Vec<Vec<PathBuf>>)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Source::Sweep { file, summary, .. } => Some((i, point_files(file, summary))),
            _ => None,
        })
        .collect();
    let mut taken: Vec<PathBuf> = Vec::new();
    for (i, per_point) in named {
        // Each point's first run says what was measured; every run's file is the sweep's.
        let points = per_point
            .iter()
            .filter_map(|files| point_result(runs, files.first()?))
            .collect();
        taken.extend(per_point.into_iter().flatten());
        if let Source::Sweep { points: p, .. } = &mut runs[i] {
            *p = points;
        }
    }
    runs.retain(|r| match r {
        Source::BenchServe { file, .. } => !taken.iter().any(|t| same_path(file, t)),
        _ => true,
    });
}

/// A point's result: found among the inputs, else read from where the summary says.
fn point_result(runs: &[Source], f: &Path) -> Option<Map<String, Value>> {
    let found = runs.iter().find_map(|r| match r {
        Source::BenchServe { file, result } if same_path(file, f) => Some(result.clone()),
        _ => None,
    });
    found.or_else(|| serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok())
}

/// Every run's result file of each point, as the summary names them (relative names are taken
/// from the summary's folder when they are not found as written).
fn point_files(summary_file: &Path, summary: &Value) -> Vec<Vec<PathBuf>> {
    let dir = summary_file.parent().unwrap_or(Path::new("."));
    let locate = |f: &str| {
        let p = PathBuf::from(f);
        if p.is_file() {
            p
        } else {
            dir.join(p.file_name().unwrap_or_default())
        }
    };
    summary
        .get("points")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            p.get("result_files")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(locate)
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn files_are_told_apart_by_their_keys() {
        assert_eq!(
            classify(&obj(json!({"schema_version": 1, "decode": []}))),
            Kind::Matrix
        );
        assert_eq!(
            classify(&obj(json!({"sweep": "max_concurrency", "points": []}))),
            Kind::Sweep
        );
        assert_eq!(
            classify(&obj(
                json!({"schema_version": 1, "answer": {}, "probes": [], "slo": []})
            )),
            Kind::Capacity
        );
        assert_eq!(
            classify(&obj(
                json!({"date": "x", "model_id": "m", "output_throughput": 1.0})
            )),
            Kind::BenchServe
        );
        assert!(matches!(
            classify(&obj(json!({"name": "package.json"}))),
            Kind::Not(_)
        ));
        let spread = json!({"num_runs": 3, "cv_flag": 0.05, "unstable": [], "result_files": [], "metrics": {}});
        match classify(&obj(spread)) {
            Kind::Not(why) => assert!(why.starts_with("the spread across repeated runs"), "{why}"),
            other => panic!("a spread file is no run: {other:?}"),
        }
        assert!(is_sglang_record(&obj(
            json!({"server_info": null, "dataset_name": "random", "output_throughput": 1.0})
        )));
        assert!(!is_sglang_record(&obj(
            json!({"date": "x", "model_id": "m", "output_throughput": 1.0})
        )));
    }

    #[test]
    fn pythons_non_finite_floats_become_strings_outside_strings_only() {
        let line = r#"{"request_rate": Infinity, "x": -Infinity, "y": NaN, "tag": "NaN \" Infinity", "z": 1.5}"#;
        let fixed = python_floats_as_strings(line);
        let v: Value = serde_json::from_str(&fixed).expect("JSON now");
        assert_eq!(v["request_rate"], "inf");
        assert_eq!(v["x"], "-inf");
        assert_eq!(v["y"], "nan");
        assert_eq!(v["tag"], "NaN \" Infinity", "strings are kept");
        assert_eq!(v["z"], 1.5);
        let plain = r#"{"a": 1}"#;
        assert!(matches!(
            python_floats_as_strings(plain),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_newer_schema_says_what_it_needs() {
        let m = obj(json!({"schema_version": SCHEMA_VERSION + 1, "decode": [],
                           "metadata": {"tool_version": "9.0.0 (x)"}}));
        let note = matrix_version_note(&m).expect("a newer schema is refused");
        assert!(note.contains("written by llmspeed 9.0.0 (x)"), "{note}");
        assert!(
            note.contains(&format!("reads schema {SCHEMA_VERSION}")),
            "{note}"
        );
        let now = obj(json!({"schema_version": SCHEMA_VERSION, "decode": []}));
        assert_eq!(matrix_version_note(&now), None);
    }
}
