//! The sweep's HTML page, written next to the sweep summary JSON (`<summary>.html`). The page
//! itself is `report::html::sweep` (the results site draws it too); this file names it and
//! builds its header from the points' own result files.

use crate::report::header::RunHeader;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The page's file: the summary's `.json` replaced by `.html`.
pub fn path_for(summary: &Path) -> PathBuf {
    summary.with_extension("html")
}

/// The whole page for a summary as `sweep::summary_json` writes it; `points` are the points'
/// result objects (each point's first run), which say what was measured.
pub fn render(summary: &Value, points: &[Map<String, Value>]) -> String {
    crate::report::html::sweep::render(summary, &RunHeader::bench_sweep(summary, points))
}
