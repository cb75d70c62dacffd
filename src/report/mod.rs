//! Report model (the only `Serialize` types) and one writer per format.
//!
//! `model` holds what a matrix run measured; `markdown`, `json` and `csv` each write it in one
//! function; `svg` draws the decode grid and the prefill rows; `html` writes the self-contained
//! `report.html` (and `compare.html` for `compare`, which sets two runs side by side); `files` writes them all into a results folder atomically; `console` renders the
//! end-of-run summary; `format` holds the number formatting the human-facing writers share. Writers never
//! compute statistics and never decide verdicts: they print what the model says.

pub mod compare;
pub mod console;
pub mod csv;
pub mod files;
pub mod format;
pub mod html;
pub mod json;
pub mod markdown;
pub mod model;
pub mod svg;

pub use model::*;
