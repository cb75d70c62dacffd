//! The `configs` of a dataset card (the YAML header of the repository's README.md), read from
//! a cached README when there is no network: the hub's API gives the same as JSON (`cardData`).
//! Pure.
//!
//! Reads the YAML the hub's cards use for `configs`: block mappings and sequences (`- ` items,
//! at the key's indentation or deeper), plain, single- and double-quoted scalars, flow lists
//! of scalars (`[a, b]`), `true`/`false`, comments. Anything else in the block makes the whole
//! answer `None`, so the caller asks the hub instead of guessing.

use serde_json::{Map, Value};

/// The card's `configs` as JSON: `Value::Null` when the card declares none, `None` when the
/// block is written in YAML this reader does not take.
pub fn configs(readme: &str) -> Option<Value> {
    let mut lines = readme.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Some(Value::Null);
    }
    let header: Vec<&str> = lines.take_while(|l| l.trim_end() != "---").collect();
    let Some(start) = header.iter().position(|l| l.trim_end() == "configs:") else {
        return Some(Value::Null);
    };
    let mut block: Vec<(usize, String)> = Vec::new();
    for l in &header[start + 1..] {
        let t = strip_comment(l);
        if t.trim().is_empty() {
            continue;
        }
        let indent = t.len() - t.trim_start().len();
        if indent == 0 && !t.starts_with('-') {
            break;
        }
        block.push((indent, t.trim_start().to_string()));
    }
    if block.is_empty() {
        return Some(Value::Null);
    }
    let indent = block[0].0;
    let (v, next) = node(&mut block, 0, indent)?;
    (next == block.len()).then_some(v)
}

fn strip_comment(l: &str) -> &str {
    let mut quote = None;
    for (i, c) in l.char_indices() {
        match (c, quote) {
            ('\'' | '"', None) => quote = Some(c),
            (q, Some(o)) if q == o => quote = None,
            ('#', None) if i == 0 || l[..i].ends_with(' ') => return &l[..i],
            _ => {}
        }
    }
    l
}

/// The node starting at line `i`, whose lines sit at `indent`; the value and the next line.
fn node(lines: &mut Vec<(usize, String)>, i: usize, indent: usize) -> Option<(Value, usize)> {
    if lines.get(i)?.1.starts_with('-') {
        sequence(lines, i, indent)
    } else {
        mapping(lines, i, indent)
    }
}

fn sequence(
    lines: &mut Vec<(usize, String)>,
    mut i: usize,
    indent: usize,
) -> Option<(Value, usize)> {
    let mut items = Vec::new();
    while i < lines.len() && lines[i].0 == indent && lines[i].1.starts_with('-') {
        let rest = lines[i].1[1..].to_string();
        let content = rest.trim_start();
        if content.is_empty() {
            let child = lines.get(i + 1)?.0;
            if child <= indent {
                return None;
            }
            let (v, next) = node(lines, i + 1, child)?;
            items.push(v);
            i = next;
        } else if key_value(content).is_some() {
            // "- key: value" opens a mapping whose keys sit after the dash.
            let inner = indent + 1 + (rest.len() - content.len());
            lines[i] = (inner, content.to_string());
            let (v, next) = mapping(lines, i, inner)?;
            items.push(v);
            i = next;
        } else {
            items.push(scalar(content)?);
            i += 1;
        }
    }
    Some((Value::Array(items), i))
}

fn mapping(
    lines: &mut Vec<(usize, String)>,
    mut i: usize,
    indent: usize,
) -> Option<(Value, usize)> {
    let mut map = Map::new();
    while i < lines.len() && lines[i].0 == indent && !lines[i].1.starts_with('-') {
        let (k, v) = key_value(&lines[i].1)?;
        let (k, v) = (k.to_string(), v.to_string());
        if v.is_empty() {
            match lines.get(i + 1) {
                Some((child, t)) if *child > indent || (*child == indent && t.starts_with('-')) => {
                    let child = *child;
                    let (value, next) = node(lines, i + 1, child)?;
                    map.insert(k, value);
                    i = next;
                }
                _ => {
                    map.insert(k, Value::Null);
                    i += 1;
                }
            }
        } else {
            map.insert(k, scalar(&v)?);
            i += 1;
        }
    }
    Some((Value::Object(map), i))
}

/// `key: value` (value may be empty); `None` when the line is not one.
fn key_value(t: &str) -> Option<(String, &str)> {
    let (k, v) = if let Some(k) = t.strip_suffix(':') {
        (k, "")
    } else {
        let at = t.find(": ")?;
        (&t[..at], t[at + 2..].trim())
    };
    let k = k.trim();
    if k.is_empty() || k.starts_with('[') || k.starts_with('{') {
        return None;
    }
    Some((unquote(k)?, v))
}

fn unquote(s: &str) -> Option<String> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        return serde_json::from_str::<String>(&format!("\"{inner}\"")).ok();
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        return Some(inner.replace("''", "'"));
    }
    if s.starts_with(['"', '\'', '{', '&', '*', '!', '|', '>']) {
        return None;
    }
    Some(s.to_string())
}

fn scalar(s: &str) -> Option<Value> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        if inner.contains(['[', '{', '"', '\'']) && inner.contains(',') {
            // Quoted items with commas inside are beyond this reader.
            if inner.matches(['"', '\'']).count() % 2 != 0 {
                return None;
            }
        }
        return inner
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(scalar)
            .collect::<Option<Vec<_>>>()
            .map(Value::Array);
    }
    match s {
        "true" | "True" => return Some(Value::Bool(true)),
        "false" | "False" => return Some(Value::Bool(false)),
        "null" | "~" => return Some(Value::Null),
        _ => {}
    }
    unquote(s).map(Value::String)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_configs_of_a_hub_card_read_as_the_api_gives_them() {
        let card = "---\nlicense: mit\nconfigs:\n- config_name: main\n  default: true\n  data_files:\n  - split: train\n    path: main/train-*  # shards\n  - split: test\n    path:\n    - \"main/test-*\"\n- config_name: 'socratic'\n  data_files: [socratic/a.parquet, socratic/b.parquet]\ndataset_info:\n  features:\n  - name: x\n---\n# Title\n";
        assert_eq!(
            configs(card),
            Some(json!([
                {"config_name": "main", "default": true, "data_files": [
                    {"split": "train", "path": "main/train-*"},
                    {"split": "test", "path": ["main/test-*"]}]},
                {"config_name": "socratic", "data_files": ["socratic/a.parquet", "socratic/b.parquet"]}
            ]))
        );
        // Indented sequences, as some cards write them.
        let card = "---\nconfigs:\n  - config_name: default\n    data_files:\n      - split: train\n        path: data/*.jsonl\n---\n";
        assert_eq!(
            configs(card),
            Some(
                json!([{"config_name": "default", "data_files": [{"split": "train", "path": "data/*.jsonl"}]}])
            )
        );
        assert_eq!(configs("# no header\n"), Some(Value::Null));
        assert_eq!(configs("---\nlicense: mit\n---\n"), Some(Value::Null));
        assert_eq!(
            configs("---\nconfigs:\n- config_name: x\n  data_files: |\n    a\n---\n"),
            None
        );
    }
}
