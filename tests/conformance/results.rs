//! What one tool's `bench serve` run left behind, read the same way for every conformance
//! test: its exit code, its result file (the keys in the order written, `NaN` read as null),
//! its console block and labels, and what the simulated server received; and the reasons for
//! the differences every llmspeed run has from the references' (its server probe, its
//! request ids). Pure, but for [`ran`], which reads the files.
#![allow(dead_code)]

use super::bodies;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// Why llmspeed makes calls before the run that the references do not.
pub const SERVER_PROBE: &str = "llmspeed identifies the server before the run (its engine, \
    version, limits and tokenizer endpoint: /v1/models, /version, /metrics, a /tokenize of one \
    sentence, and one non-streamed 1-token completion of 8 token ids that proves the server \
    takes ids): its `llmspeed` result key and its token-id prompts rest on it";

/// Why llmspeed's requests carry their own `x-request-id`.
pub const UUID_REQUEST_IDS: &str = "without --request-id-prefix every request carries a UUID \
    (the run's tag and the request's index encoded), which servers that check the header as a \
    UUID (llama-cpp-python's) accept too: vLLM sends `bench-xxxxxxxx-{i}` (none on \
    prefix_repetition), SGLang none";

/// What one tool's run left behind.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub result: Option<Value>,
    /// The result's keys in file order.
    pub keys: Vec<String>,
    /// What the server received, in order of arrival.
    pub requests: Vec<bodies::Logged>,
}

/// A run from its process's output, its result file and the server's request log.
pub fn ran(out: Output, file: &Path, requests: &Path) -> Ran {
    ran_with(
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        file,
        requests,
    )
}

/// [`ran`] from an exit code and the texts the run printed (a run inside a longer process).
pub fn ran_with(
    code: Option<i32>,
    stdout: String,
    stderr: String,
    file: &Path,
    requests: &Path,
) -> Ran {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    // vLLM writes one JSON object; SGLang appends one JSON line.
    let line = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let result: Option<Value> = serde_json::from_str(&python_json(line)).ok();
    Ran {
        code,
        stdout,
        stderr,
        keys: keys_in_order(line),
        result,
        requests: bodies::read(requests),
    }
}

/// Python's `json.dump` writes `NaN` and `Infinity` bare; as JSON they are read as null.
pub fn python_json(line: &str) -> String {
    let mut s = line.to_string();
    for bare in ["-Infinity", "Infinity", "NaN"] {
        for lead in [": ", ", ", "["] {
            s = s.replace(&format!("{lead}{bare}"), &format!("{lead}null"));
        }
    }
    s
}

/// The keys of the JSON object `text` in the order written (a parsed map would sort them).
pub fn keys_in_order(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let (mut depth, mut i, mut keys) = (0i32, 0usize, Vec::new());
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let rest = text[(i + 1).min(text.len())..].trim_start();
                if depth == 1 && rest.starts_with(':') {
                    if let Ok(k) = serde_json::from_str::<String>(&text[start..=i]) {
                        keys.push(k);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    keys
}

/// The console block: from the "Serving Benchmark Result" line to the closing `=` line.
pub fn block(stdout: &str) -> Vec<String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| l.contains(" Serving Benchmark Result "))
    else {
        return Vec::new();
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| !l.is_empty() && l.chars().all(|c| c == '='))
        .map_or(lines.len(), |e| start + 1 + e + 1);
    lines[start..end].iter().map(|l| l.to_string()).collect()
}

/// A console row's label (the text before the value column), or the whole line for headers.
pub fn label(line: &str) -> String {
    match line.get(..40) {
        Some(l) if line.len() > 40 && line.as_bytes()[40] == b' ' => l.trim_end().to_string(),
        _ => line.trim_end().to_string(),
    }
}

/// The value printed on the row labelled `label`.
pub fn value<'a>(block: &'a [String], label_text: &str) -> Option<&'a str> {
    block
        .iter()
        .find(|l| label(l) == label_text)
        .and_then(|l| l.get(41..))
        .map(str::trim)
}

/// vLLM's traffic lines before the run (ours prints them too).
pub fn traffic_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| {
            l.starts_with("Traffic ")
                || l.starts_with("Burstiness factor: ")
                || l.starts_with("Maximum request concurrency: ")
                || l.starts_with("Will increase RPS")
        })
        .collect()
}

/// A value's JSON type, a list's by its first element (an empty one is any list).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(a) if a.is_empty() => "list",
        Value::Array(a) => match json_type(&a[0]) {
            "int" => "list[int]",
            "float" => "list[float]",
            "str" => "list[str]",
            _ => "list",
        },
        Value::Object(_) => "object",
    }
}

pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The comparison steps every conformance test takes, the same way; each test adds its own
/// rules around them (which exit codes must match, which totals, which console rows).
/// `deliberate` says which keys and labels differ on purpose (the test's list of reasons).
/// Each returns the differences it found, as sentences.
pub mod check {
    use super::{block, json_type, label, tail, value, Ran};
    use serde_json::Value;

    /// Both runs' exit codes: the same (`both_succeed`: and both 0).
    pub fn exit_codes(r: &Ran, o: &Ran, both_succeed: bool) -> Option<String> {
        let ok = if both_succeed {
            r.code == Some(0) && o.code == Some(0)
        } else {
            r.code == o.code
        };
        (!ok).then(|| {
            format!(
                "exit code: reference {:?}, llmspeed {:?}{}\nreference stderr tail: {}\n\
                 llmspeed stderr: {}",
                r.code,
                o.code,
                if both_succeed {
                    " (both must succeed)"
                } else {
                    ""
                },
                tail(&r.stderr),
                tail(&o.stderr)
            )
        })
    }

    /// Both result objects, or the difference: which run wrote none.
    pub fn results<'a>(r: &'a Ran, o: &'a Ran) -> Result<(&'a Value, &'a Value), String> {
        match (&r.result, &o.result) {
            (Some(rv), Some(ov)) => Ok((rv, ov)),
            _ => Err(format!(
                "result file: reference {}, llmspeed {}\nreference stderr tail: {}",
                r.result.is_some(),
                o.result.is_some(),
                tail(&r.stderr)
            )),
        }
    }

    /// The result's keys: ours are the reference's in its order plus `llmspeed`, last; each
    /// shared key's value of the reference's JSON type (an int stays an int).
    pub fn keys(r: &Ran, o: &Ran, deliberate: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        let theirs: Vec<&String> = r.keys.iter().filter(|k| !deliberate(k)).collect();
        let ours: Vec<&String> = o
            .keys
            .iter()
            .filter(|k| *k != "llmspeed" && !deliberate(k))
            .collect();
        if ours != theirs {
            out.push(format!(
                "result keys differ:\n  reference: {theirs:?}\n  llmspeed:  {ours:?}"
            ));
        }
        if o.keys.last().map(String::as_str) != Some("llmspeed") {
            out.push("llmspeed's own figures are not the last key, `llmspeed`".into());
        }
        let Ok((rv, ov)) = results(r, o) else {
            return out;
        };
        let types: Vec<String> = theirs
            .iter()
            .filter_map(|k| {
                let (a, b) = (rv.get(*k)?, ov.get(*k)?);
                (json_type(a) != json_type(b))
                    .then(|| format!("{k}: {} vs {}", json_type(a), json_type(b)))
            })
            .collect();
        if !types.is_empty() {
            out.push(format!(
                "value types differ (reference vs llmspeed): {}",
                types.join(", ")
            ));
        }
        out
    }

    /// Each of `keys` with the same value in both results.
    pub fn same_values(rv: &Value, ov: &Value, keys: &[&str]) -> Vec<String> {
        keys.iter()
            .filter(|k| rv.get(**k) != ov.get(**k))
            .map(|k| format!("{k}: reference {:?}, llmspeed {:?}", rv.get(*k), ov.get(*k)))
            .collect()
    }

    /// The console blocks: the same labels in the same order (deliberate ones left out), and
    /// the same value on each of `rows`.
    pub fn console(
        r: &Ran,
        o: &Ran,
        deliberate: &dyn Fn(&str) -> bool,
        rows: &[&str],
    ) -> Vec<String> {
        let mut out = Vec::new();
        let (rb, ob) = (block(&r.stdout), block(&o.stdout));
        let (rl, ol) = (labels(&rb, deliberate), labels(&ob, deliberate));
        if rl != ol {
            out.push(format!(
                "console block labels differ:\n  reference: {rl:?}\n  llmspeed:  {ol:?}"
            ));
        }
        for l in rows {
            if value(&rb, l) != value(&ob, l) {
                out.push(format!(
                    "console {l:?}: reference {:?}, llmspeed {:?}",
                    value(&rb, l),
                    value(&ob, l)
                ));
            }
        }
        out
    }

    /// A console block's labels in order, deliberate ones left out.
    pub fn labels(b: &[String], deliberate: &dyn Fn(&str) -> bool) -> Vec<String> {
        b.iter()
            .map(|l| label(l))
            .filter(|l| !deliberate(l))
            .collect()
    }

    /// How many requests a result measured: completed and failed.
    pub fn measured(v: &Value) -> usize {
        ["completed", "failed"]
            .iter()
            .map(|k| v[*k].as_u64().unwrap_or(0) as usize)
            .sum()
    }
}
