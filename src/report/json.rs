//! `results.json`: the whole report, pretty-printed; and reading it back (for `--resume`).
//! Never writes anything the schema in `docs/results.schema.json` does not describe.

use crate::report::model::MatrixReport;
use std::io::{Read, Write};

/// Write `report` as pretty JSON with a trailing newline.
pub fn write(w: &mut impl Write, report: &MatrixReport) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, report)?;
    w.write_all(b"\n")
}

/// Read a report written by [`write`].
pub fn read(r: impl Read) -> Result<MatrixReport, serde_json::Error> {
    serde_json::from_reader(r)
}
