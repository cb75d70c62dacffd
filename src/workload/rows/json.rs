//! A JSON Lines or JSON file's rows. JSON Lines is read a line at a time; a JSON file (one
//! array of objects, or an object whose one list-valued key holds them, as the `datasets`
//! library's json loader takes it) is parsed whole, as that loader does. A `.json` file that
//! holds JSON Lines is read as JSON Lines, as the loader also does.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Row, RowsError};

/// Rows of a JSON Lines file, blank lines skipped; a line that is not a JSON object is an
/// error naming the file and the line.
pub fn lines(
    path: &Path,
) -> Result<Box<dyn Iterator<Item = Result<Row, RowsError>> + Send>, RowsError> {
    let file = File::open(path).map_err(|e| open_err(path, &e))?;
    Ok(Box::new(Lines {
        path: path.to_path_buf(),
        lines: BufReader::new(file),
        line: 0,
        buf: String::new(),
        failed: false,
    }))
}

struct Lines {
    path: PathBuf,
    lines: BufReader<File>,
    line: usize,
    buf: String,
    failed: bool,
}

impl Iterator for Lines {
    type Item = Result<Row, RowsError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed {
            self.buf.clear();
            self.line += 1;
            match self.lines.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    self.failed = true;
                    return Some(Err(RowsError(format!(
                        "{} line {}: {e}",
                        self.path.display(),
                        self.line
                    ))));
                }
            }
            let l = self.buf.trim();
            if l.is_empty() {
                continue;
            }
            return Some(match serde_json::from_str::<Value>(l) {
                Ok(Value::Object(row)) => Ok(row),
                Ok(_) => {
                    self.failed = true;
                    Err(RowsError(format!(
                        "{} line {}: not a JSON object (each line of a JSON Lines dataset is one row)",
                        self.path.display(),
                        self.line
                    )))
                }
                Err(e) => {
                    self.failed = true;
                    Err(RowsError(format!(
                        "{} line {}: not JSON ({e}); the file is corrupt or truncated",
                        self.path.display(),
                        self.line
                    )))
                }
            });
        }
        None
    }
}

/// Rows of a JSON file, parsed whole.
pub fn whole(path: &Path) -> Result<Vec<Row>, RowsError> {
    let mut text = String::new();
    File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| open_err(path, &e))?;
    parse_whole(&text).map_err(|why| RowsError(format!("{}: {why}", path.display())))
}

/// [`whole`] on text: an array of objects, an object with exactly one list of objects, or
/// JSON Lines.
pub fn parse_whole(text: &str) -> Result<Vec<Row>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => objects(items),
        Ok(Value::Object(obj)) => {
            let lists: Vec<&String> = obj
                .iter()
                .filter(|(_, v)| v.is_array())
                .map(|(k, _)| k)
                .collect();
            match lists.as_slice() {
                [k] => {
                    let k = (*k).clone();
                    match obj.into_iter().find(|(kk, _)| *kk == k) {
                        Some((_, Value::Array(items))) => objects(items),
                        _ => Err("no list of rows".into()),
                    }
                }
                // One object that is itself one row.
                [] => Ok(vec![obj]),
                _ => Err(format!(
                    "an object with several lists ({}): which one holds the rows is ambiguous",
                    lists
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        Ok(_) => Err("neither a JSON array of rows nor an object holding one".into()),
        Err(whole_err) => {
            let mut rows = Vec::new();
            for (i, l) in text.lines().enumerate() {
                let l = l.trim();
                if l.is_empty() {
                    continue;
                }
                match serde_json::from_str::<Value>(l) {
                    Ok(Value::Object(r)) => rows.push(r),
                    _ => {
                        return Err(format!(
                            "not JSON ({whole_err}), nor JSON Lines (line {} is not a JSON object); the file is corrupt or truncated",
                            i + 1
                        ))
                    }
                }
            }
            Ok(rows)
        }
    }
}

fn objects(items: Vec<Value>) -> Result<Vec<Row>, String> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(r) => Ok(r),
            _ => Err(format!("item {i} of the list of rows is not a JSON object")),
        })
        .collect()
}

fn open_err(path: &Path, e: &std::io::Error) -> RowsError {
    RowsError(format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_objects_holding_one_list_and_json_lines_all_read() {
        let a = parse_whole(r#"[{"a":1},{"a":2}]"#).unwrap();
        assert_eq!(a.len(), 2);
        let b = parse_whole(r#"{"version":"1","data":[{"a":1}]}"#).unwrap();
        assert_eq!(b[0]["a"], 1);
        let c = parse_whole("{\"a\":1}\n\n{\"a\":2}\n").unwrap();
        assert_eq!(c[1]["a"], 2);
        let e = parse_whole(r#"{"x":[1],"y":[2]}"#).unwrap_err();
        assert!(e.contains("x, y"), "{e}");
        let e = parse_whole("[{\"a\":1},").unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let e = parse_whole("[1]").unwrap_err();
        assert!(e.contains("item 0"), "{e}");
    }
}
