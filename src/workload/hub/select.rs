//! Which files of a dataset repository make a subset's split, as the `datasets` library (5.2)
//! chooses them. Pure: it works on a list of the repository's file paths and the `configs` of
//! its card (README.md's YAML header, which the hub also returns as JSON).
//!
//! - With `configs`: the subset named (else the one marked `default: true`, else the one named
//!   `default`, else the only one); its `data_files` are patterns, a list of them (the split
//!   `train`), or `{split, path}` entries.
//! - Without: `data/{split}-NNNNN-of-NNNNN*.*` when files are named so, else the first of the
//!   library's default pattern sets (split in a folder name, split in a file name, everything
//!   as `train`) that matches a file.
//!
//! Each pattern's matches are sorted (the library globs through fsspec, which sorts); hidden
//! files and folders and `__special__` folders are skipped unless the pattern names them, and
//! only data files of a format we read are kept (parquet, JSON Lines, JSON): the most common one
//! wins, as the library infers its loader from the most common extension.

use serde_json::Value;

use crate::workload::rows::FileFormat;

/// The split keywords the default patterns look for, in the library's order.
const SPLITS: [(&str, &[&str]); 3] = [
    ("train", &["train", "training"]),
    ("validation", &["validation", "valid", "dev", "val"]),
    ("test", &["test", "testing", "eval", "evaluation"]),
];
const SEP: &str = "[-._ 0-9]";
/// Files the library never takes as data.
const IGNORED: [&str; 6] = [
    "README.md",
    "config.json",
    "dataset_info.json",
    "dataset_infos.json",
    "dummy_data.zip",
    "dataset_dict.json",
];

/// The subsets (configs) a card declares, in its order: name and whether it is the default.
pub fn config_names(configs: &Value) -> Vec<(String, bool)> {
    configs
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| {
                    let name = c.get("config_name")?.as_str()?.to_string();
                    let default = c.get("default").and_then(Value::as_bool).unwrap_or(false);
                    Some((name, default))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Why no files were chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The subset asked for is not declared; the ones that are.
    Subset(Vec<String>),
    /// The split asked for has no files; the splits that have.
    Split(Vec<String>),
    /// The split is declared but no file matches its patterns (which are given).
    NoFiles(Vec<String>),
    /// No file of a format we read (parquet, JSON Lines, JSON); the extensions seen.
    Format(Vec<String>),
}

/// The split's files and their format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The subset's name as the card declares it (`None` without configs).
    pub subset: Option<String>,
    pub format: FileFormat,
    pub files: Vec<String>,
}

/// The files of `split` of `subset` among `paths`, given the card's `configs` (`Value::Null`
/// when it has none).
pub fn choose(
    paths: &[String],
    configs: &Value,
    subset: Option<&str>,
    split: &str,
) -> Result<Chosen, Missing> {
    let names = config_names(configs);
    let (subset, splits) = if names.is_empty() {
        if subset.is_some_and(|s| s != "default") {
            return Err(Missing::Subset(vec!["default".into()]));
        }
        (None, default_patterns(paths))
    } else {
        let pick = match subset {
            Some(s) => names.iter().position(|(n, _)| n == s),
            None => names
                .iter()
                .position(|(_, d)| *d)
                .or_else(|| names.iter().position(|(n, _)| n == "default"))
                .or_else(|| (names.len() == 1).then_some(0)),
        };
        let Some(i) = pick else {
            return Err(Missing::Subset(names.into_iter().map(|(n, _)| n).collect()));
        };
        let config = configs
            .as_array()
            .and_then(|a| a.iter().find(|c| c["config_name"] == names[i].0.as_str()))
            .unwrap_or(&Value::Null);
        (Some(names[i].0.clone()), declared(&config["data_files"]))
    };
    let Some((_, patterns)) = splits.iter().find(|(s, _)| s == split) else {
        return Err(Missing::Split(splits.into_iter().map(|(s, _)| s).collect()));
    };
    let files = resolve(paths, patterns);
    if files.is_empty() {
        return Err(Missing::NoFiles(patterns.clone()));
    }
    let (format, files) = by_format(files)?;
    Ok(Chosen {
        subset,
        format,
        files,
    })
}

/// A config's `data_files`: one pattern or a list (`train`), or `{split, path}` entries.
fn declared(data_files: &Value) -> Vec<(String, Vec<String>)> {
    let strings = |v: &Value| -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    };
    match data_files {
        Value::Array(a) if a.iter().all(Value::is_object) && !a.is_empty() => a
            .iter()
            .filter_map(|e| {
                Some((
                    e.get("split")?.as_str()?.to_string(),
                    strings(e.get("path")?),
                ))
            })
            .collect(),
        Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), strings(v))).collect(),
        Value::Null => vec![("train".to_string(), vec!["**".to_string()])],
        other => vec![("train".to_string(), strings(other))],
    }
}

/// The library's default splits and patterns for a repository without configs.
pub fn default_patterns(paths: &[String]) -> Vec<(String, Vec<String>)> {
    let sharded = "data/*-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*";
    let hits = resolve(paths, &[sharded.to_string()]);
    if !hits.is_empty() {
        let mut splits: Vec<String> = hits
            .iter()
            .filter_map(|p| {
                let base = p.rsplit('/').next()?;
                let cut = base.find(|c: char| c == '-').and_then(|_| {
                    // The split is the name before "-NNNNN-of-NNNNN".
                    let b = base.as_bytes();
                    (0..b.len()).find(|&i| {
                        b[i] == b'-'
                            && base.len() >= i + 16
                            && glob_match(
                                "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*",
                                &base[i..],
                            )
                    })
                })?;
                Some(base[..cut].to_string())
            })
            .collect();
        splits.sort();
        splits.dedup();
        let mut ordered: Vec<String> = SPLITS
            .iter()
            .map(|(s, _)| s.to_string())
            .filter(|s| splits.contains(s))
            .collect();
        ordered.extend(
            splits
                .into_iter()
                .filter(|s| !SPLITS.iter().any(|(d, _)| d == s)),
        );
        return ordered
            .into_iter()
            .map(|s| {
                let p =
                    format!("data/{s}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*");
                (s, vec![p])
            })
            .collect();
    }
    let in_dir = [
        "**/{k}/**",
        "**/{k}{sep}*/**",
        "**/*{sep}{k}/**",
        "**/*{sep}{k}{sep}*/**",
    ];
    let in_name = ["**/{k}{sep}*", "**/*{sep}{k}{sep}*"];
    for bases in [&in_dir[..], &in_name[..]] {
        let sets: Vec<(String, Vec<String>)> = SPLITS
            .iter()
            .map(|(split, keys)| {
                let pats = keys
                    .iter()
                    .flat_map(|k| {
                        bases
                            .iter()
                            .map(move |b| b.replace("{k}", k).replace("{sep}", SEP))
                    })
                    .collect();
                (split.to_string(), pats)
            })
            .collect();
        let found: Vec<(String, Vec<String>)> = sets
            .into_iter()
            .filter(|(_, pats)| {
                pats.iter()
                    .any(|p| !resolve(paths, &[p.clone()]).is_empty())
            })
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    vec![("train".to_string(), vec!["**".to_string()])]
}

/// The files `patterns` match, each pattern's matches sorted, in pattern order, once each.
pub fn resolve(paths: &[String], patterns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for pat in patterns {
        let mut hits: Vec<&String> = paths
            .iter()
            .filter(|p| {
                glob_match(pat, p)
                    && !IGNORED.contains(&p.rsplit('/').next().unwrap_or(p))
                    && !hidden_unasked(p, pat)
            })
            .collect();
        hits.sort();
        for h in hits {
            if !out.contains(h) {
                out.push(h.clone());
            }
        }
    }
    out
}

/// A path part starting with `.` or `__` that the pattern does not spell out.
fn hidden_unasked(path: &str, pattern: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let pat: Vec<&str> = pattern.split('/').collect();
    parts.iter().enumerate().any(|(i, p)| {
        let hidden = (p.starts_with('.') && *p != "." && *p != "..") || p.starts_with("__");
        hidden
            && !pat
                .get(i)
                .is_some_and(|q| q.starts_with('.') || q.starts_with("__"))
    })
}

/// Keeps the files of the most common format we read.
fn by_format(files: Vec<String>) -> Result<(FileFormat, Vec<String>), Missing> {
    let fmt = |p: &str| -> Option<FileFormat> {
        let base = p.rsplit('/').next().unwrap_or(p);
        let exts: Vec<&str> = base.split('.').skip(1).collect();
        if exts.contains(&"parquet") {
            Some(FileFormat::Parquet)
        } else if exts.contains(&"jsonl") {
            Some(FileFormat::JsonLines)
        } else if exts.contains(&"json") {
            Some(FileFormat::Json)
        } else {
            None
        }
    };
    let count = |f: FileFormat| {
        files
            .iter()
            .filter(|p| match (fmt(p), f) {
                (Some(FileFormat::Parquet), FileFormat::Parquet) => true,
                (Some(FileFormat::Parquet), _) | (None, _) => false,
                (Some(_), FileFormat::Json) => true,
                _ => false,
            })
            .count()
    };
    let (pq, js) = (count(FileFormat::Parquet), count(FileFormat::Json));
    if pq == 0 && js == 0 {
        let mut exts: Vec<String> = files
            .iter()
            .filter_map(|p| {
                p.rsplit('/')
                    .next()?
                    .split_once('.')
                    .map(|(_, e)| e.to_string())
            })
            .collect();
        exts.sort();
        exts.dedup();
        return Err(Missing::Format(exts));
    }
    if pq >= js {
        let kept = files
            .into_iter()
            .filter(|p| fmt(p) == Some(FileFormat::Parquet))
            .collect();
        return Ok((FileFormat::Parquet, kept));
    }
    let kept: Vec<String> = files
        .into_iter()
        .filter(|p| matches!(fmt(p), Some(FileFormat::Json | FileFormat::JsonLines)))
        .collect();
    // The json loader reads both; JSON Lines is streamed when every file is one.
    let format = if kept.iter().all(|p| fmt(p) == Some(FileFormat::JsonLines)) {
        FileFormat::JsonLines
    } else {
        FileFormat::Json
    };
    Ok((format, kept))
}

/// fsspec's glob over a repository path: `**` any run of folders (none included) or, at the
/// end, anything; `*` any run within one name; `?` one character; `[..]` a class (`a-z`
/// ranges, a leading `!` or `^` negates).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    matches(&p, &s)
}

fn matches(p: &[char], s: &[char]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    if p.len() >= 2 && p[0] == '*' && p[1] == '*' {
        let rest = &p[2..];
        // `**/` also matches no folder at all.
        if rest.first() == Some(&'/') && matches(&rest[1..], s) {
            return true;
        }
        return (0..=s.len()).any(|i| matches(rest, &s[i..]));
    }
    match p[0] {
        '*' => (0..=s.len())
            .take_while(|&i| i == 0 || s[i - 1] != '/')
            .any(|i| matches(&p[1..], &s[i..])),
        '?' => !s.is_empty() && s[0] != '/' && matches(&p[1..], &s[1..]),
        '[' => {
            let Some(end) = p.iter().skip(2).position(|&c| c == ']').map(|i| i + 2) else {
                return !s.is_empty() && s[0] == '[' && matches(&p[1..], &s[1..]);
            };
            if s.is_empty() || s[0] == '/' {
                return false;
            }
            let (neg, class) = match p[1] {
                '!' | '^' => (true, &p[2..end]),
                _ => (false, &p[1..end]),
            };
            let c = s[0];
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != neg && matches(&p[end + 1..], &s[1..])
        }
        c => !s.is_empty() && s[0] == c && matches(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn globs_follow_fsspec() {
        assert!(glob_match("**/train[-._ 0-9]*", "train-00000.parquet"));
        assert!(glob_match("**/train[-._ 0-9]*", "data/train.jsonl"));
        assert!(!glob_match("**/train[-._ 0-9]*", "data/trainer.jsonl"));
        assert!(glob_match("**/*[-._ 0-9]test[-._ 0-9]*", "x/my_test.json"));
        assert!(glob_match("**/train/**", "data/train/a/b.parquet"));
        assert!(!glob_match("data/*.parquet", "data/x/y.parquet"));
        assert!(glob_match("**", "a/b/c"));
        assert!(glob_match("[!a]?", "bc"));
    }

    #[test]
    fn sharded_names_then_split_names_then_everything() {
        let p = v(&[
            "README.md",
            "data/test-00000-of-00001.parquet",
            "data/train-00001-of-00002.parquet",
            "data/train-00000-of-00002.parquet",
            "data/extra-00000-of-00001.parquet",
        ]);
        let c = choose(&p, &Value::Null, None, "train").unwrap();
        assert_eq!(
            c.files,
            v(&[
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ])
        );
        assert_eq!(
            choose(&p, &Value::Null, None, "dev"),
            Err(Missing::Split(v(&["train", "test", "extra"])))
        );
        let p = v(&[
            "README.md",
            "train.jsonl",
            "valid.jsonl",
            ".hidden/train.jsonl",
        ]);
        let c = choose(&p, &Value::Null, None, "validation").unwrap();
        assert_eq!(
            (c.format, c.files),
            (FileFormat::JsonLines, v(&["valid.jsonl"]))
        );
        let c = choose(&p, &Value::Null, None, "train").unwrap();
        assert_eq!(c.files, v(&["train.jsonl"]));
        let p = v(&["README.md", "prompts.json", "notes.txt"]);
        let c = choose(&p, &Value::Null, None, "train").unwrap();
        assert_eq!(
            (c.format, c.files),
            (FileFormat::Json, v(&["prompts.json"]))
        );
        assert_eq!(
            choose(&p, &Value::Null, Some("other"), "train"),
            Err(Missing::Subset(v(&["default"])))
        );
        assert_eq!(
            choose(&v(&["a.csv"]), &Value::Null, None, "train"),
            Err(Missing::Format(v(&["csv"])))
        );
    }

    #[test]
    fn configs_pick_the_subset_and_its_split_patterns() {
        let configs = json!([
            {"config_name": "main", "default": true, "data_files": [
                {"split": "train", "path": "main/train-*"},
                {"split": "test", "path": ["main/test-*"]}]},
            {"config_name": "socratic", "data_files": [{"split": "train", "path": "socratic/train-*"}]},
            {"config_name": "flat", "data_files": "flat/*.jsonl"}
        ]);
        let p = v(&[
            "main/train-0.parquet",
            "main/test-0.parquet",
            "socratic/train-0.parquet",
            "flat/b.jsonl",
            "flat/a.jsonl",
        ]);
        let c = choose(&p, &configs, None, "test").unwrap();
        assert_eq!(
            (c.subset.as_deref(), c.files),
            (Some("main"), v(&["main/test-0.parquet"]))
        );
        let c = choose(&p, &configs, Some("socratic"), "train").unwrap();
        assert_eq!(c.files, v(&["socratic/train-0.parquet"]));
        let c = choose(&p, &configs, Some("flat"), "train").unwrap();
        assert_eq!(c.files, v(&["flat/a.jsonl", "flat/b.jsonl"]));
        assert_eq!(
            choose(&p, &configs, Some("nope"), "train"),
            Err(Missing::Subset(v(&["main", "socratic", "flat"])))
        );
        assert_eq!(
            choose(&p, &configs, Some("socratic"), "test"),
            Err(Missing::Split(v(&["train"])))
        );
    }
}
