//! `llmspeed report site DIR... --out SITE`: one static site over many runs. An index with one
//! row per run (sortable, filterable, grouped by model and hardware, in the page), every run's
//! own page, and a comparison of any runs chosen in the index — all plain files that load
//! nothing from anywhere but the site's own folder.
//!
//! `gather` finds the runs (the only reading), `runs` turns each into what the site shows
//! (pure), `pages` draws the index and the comparison page (pure); [`build`] reads as those
//! steps and writes the files. Re-running over a grown folder writes the site again with the
//! new runs; a run's id (and so its page) stays the same while its path does.

pub mod gather;
pub mod pages;
pub mod runs;

use crate::report::files::{write_atomic, FilesError};
use crate::report::header::RunHeader;
use crate::report::html;
use gather::Source;
use runs::SiteRun;
use std::path::{Path, PathBuf};

/// The site's index page.
pub const INDEX: &str = "index.html";
/// The comparison page the index's selection opens.
pub const COMPARE: &str = "compare.html";
/// The folder of the runs' pages and data.
pub const RUNS: &str = "runs";

/// What a build wrote.
#[derive(Debug)]
pub struct Built {
    pub runs: usize,
    /// `path: why` for each input skipped.
    pub skipped: Vec<String>,
    pub index: PathBuf,
}

/// Gather the runs under `inputs`, and write the site into `out`.
pub fn build(inputs: &[PathBuf], out: &Path) -> Result<Built, FilesError> {
    let found = gather::gather(inputs, out);
    let mut site: Vec<SiteRun> = found
        .runs
        .iter()
        .map(|s| runs::site_run(s, run_page))
        .collect();
    dedupe_ids(&mut site);
    let inputs_text = inputs
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    write_site(out, &site, &found.skipped, &inputs_text)?;
    Ok(Built {
        runs: site.len(),
        skipped: found.skipped,
        index: out.join(INDEX),
    })
}

/// A run's own page, with a way back to the index.
fn run_page(src: &Source, header: &RunHeader) -> String {
    let page = match src {
        Source::Matrix { report, .. } => {
            let mut buf = Vec::with_capacity(256 * 1024);
            match html::write(&mut buf, report) {
                Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
                Err(e) => format!("<!DOCTYPE html><html><body><p>This run's page could not be drawn: {}</p></body></html>", crate::report::svg::escape(&e.to_string())),
            }
        }
        Source::BenchServe { result: m, .. } | Source::Sglang { record: m, .. } => {
            let figures: Vec<(String, f64)> = m
                .iter()
                .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
                .collect();
            html::bench::render(header, &figures)
        }
        Source::Sweep { summary, .. } => html::sweep::render(summary, header),
        Source::Capacity { results, .. } => html::capacity::render(results, header),
    };
    page.replacen(
        "<body>",
        "<body><nav class=\"site\"><a href=\"../index.html\">← all runs</a></nav>",
        1,
    )
}

/// Two origins whose ids are alike (never seen, but possible) get `-2`, `-3`.
fn dedupe_ids(site: &mut [SiteRun]) {
    for i in 1..site.len() {
        let base = site[i].id.clone();
        let mut n = 1;
        while site[..i].iter().any(|r| r.id == site[i].id) {
            n += 1;
            site[i].id = format!("{base}-{n}");
        }
    }
}

fn write_site(
    out: &Path,
    site: &[SiteRun],
    skipped: &[String],
    inputs: &str,
) -> Result<(), FilesError> {
    let dir = out.join(RUNS);
    std::fs::create_dir_all(&dir).map_err(|source| FilesError::Write {
        path: dir.clone(),
        source,
    })?;
    for r in site {
        write_atomic(&dir.join(format!("{}.html", r.id)), |w| {
            w.extend_from_slice(r.page.as_bytes());
            Ok(())
        })?;
        write_atomic(&dir.join(format!("{}.js", r.id)), |w| {
            pages::write_data(w, r)
        })?;
    }
    write_atomic(&out.join(COMPARE), |w| {
        w.extend_from_slice(pages::compare().as_bytes());
        Ok(())
    })?;
    write_atomic(&out.join(INDEX), |w| {
        w.extend_from_slice(pages::index(site, skipped, inputs).as_bytes());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alike_ids_are_numbered() {
        let run = |id: &str| SiteRun {
            id: id.into(),
            origin: String::new(),
            header: RunHeader::default(),
            headline: runs::Headline::default(),
            page: String::new(),
            data: serde_json::Value::Null,
        };
        let mut site = vec![run("a-12"), run("a-12"), run("b"), run("a-12")];
        dedupe_ids(&mut site);
        let ids: Vec<&str> = site.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a-12", "a-12-2", "b", "a-12-3"]);
    }
}
