//! Report model (the only `Serialize` types) and one writer per format.
//!
//! `model` holds what a matrix run measured (`client_lag`, the client's lag of a cell); `markdown`, `json` and `csv` each write it in one
//! function; `svg` draws the decode grid and the prefill rows; `html` writes the self-contained
//! `report.html` (and `compare.html` for `compare`, which sets two runs side by side); `files` writes them all into a results folder atomically; `console` renders the
//! end-of-run summary; `header` is what every HTML page says a run measured; `site` writes the
//! static site over many runs (`report site`); `format` holds the number formatting the human-facing writers share. Writers never
//! compute statistics and never decide verdicts: they print what the model says. `status` is
//! the verdict vocabulary the matrix fills in.
//!
//! Architecture invariant: `report` depends on nothing above it — only on `analysis`, `clock`
//! and `timeline` — so the matrix, `bench serve` and the CLI fill its plain data and call its
//! writers, never the other way round (checked by `report_depends_on_nothing_above_it`).

pub mod client_lag;
pub mod compare;
pub mod console;
pub mod csv;
pub mod files;
pub mod format;
pub mod header;
pub mod html;
pub mod json;
pub mod markdown;
pub mod model;
pub mod site;
pub mod status;
pub mod svg;

pub use model::*;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The modules `report` may use: itself and the layers below it.
    const BELOW: &[&str] = &["report", "analysis", "clock", "timeline"];

    /// `crate` and its path separator, spelt so that this file does not match itself.
    const CRATE: &str = concat!("crate", "::");

    /// The first segment of every path from the crate root in `text`: `a` for `CRATE a::b`,
    /// `a` and `c` for `CRATE {a::b, c}`.
    fn crate_roots(text: &str) -> Vec<String> {
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut roots = Vec::new();
        for (at, _) in text.match_indices(CRATE) {
            let rest = &text[at + CRATE.len()..];
            let Some(group) = rest.strip_prefix('{') else {
                roots.push(ident(rest));
                continue;
            };
            // A group: split at its top-level commas.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        roots.push(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        roots.push(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        }
        roots.retain(|r| !r.is_empty());
        roots
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().and_then(|x| x.to_str()) == Some("rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn crate_roots_sees_plain_and_grouped_paths() {
        let text = "use @matrix::status::CellStatus;\n\
                    use @{clock::Clock, report::{model, json}, compat};\n\
                    fn f(x: &@matrix::plan::Plan) {}"
            .replace('@', CRATE);
        assert_eq!(
            crate_roots(&text),
            ["matrix", "clock", "report", "compat", "matrix"]
        );
    }

    #[test]
    fn report_depends_on_nothing_above_it() {
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report"),
            &mut files,
        );
        assert!(
            files.iter().any(|f| f.ends_with("report/model.rs")),
            "src/report was not read: {files:?}"
        );
        let mut above = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for root in crate_roots(&text) {
                if !BELOW.contains(&root.as_str()) {
                    above.push(format!("{}: {CRATE}{root}", f.display()));
                }
            }
        }
        assert!(above.is_empty(), "report imports from above it: {above:#?}");
    }
}
