//! `matrix --resume`: which finished measurements of an earlier `results.json` may be kept.
//!
//! Owns the pure check that an earlier run measured the same thing (model, base URL, or the
//! built-in simulated server's profile and parameters for `--mock`,
//! `--max-tokens`, `--duration`, prompt mode, `--chat`, ignore-eos and the loop rule) and the
//! merge. A run with other settings is refused with a message naming each difference, or, with
//! `--resume-force`, kept with its old settings written on every kept row and cell
//! ([`MeasuredUnder`]), so a mixed report says so in its data. No IO: the caller reads the old
//! file and reports progress.

use crate::matrix::status::CellStatus;
use crate::report::{MatrixReport, MeasuredUnder};

/// The settings a report's measurements were taken under (`differs` left empty).
pub fn measured_under(r: &MatrixReport) -> MeasuredUnder {
    let s = &r.metadata.settings;
    MeasuredUnder {
        model: r.metadata.model.id.clone(),
        base_url: r.metadata.base_url.clone(),
        simulated_server: r.metadata.simulated_server.clone(),
        max_tokens: s.max_tokens,
        duration_s: s.duration_s,
        endpoint: s.endpoint.clone(),
        prompt_tokens: s.prompt_tokens,
        ignore_eos: s.ignore_eos,
        loop_rule: s.loop_rule,
        images: s.images,
        differs: Vec::new(),
    }
}

/// One setting that differs: its name as the user knows it, the old and the new value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub setting: &'static str,
    pub old: String,
    pub new: String,
}

/// Every setting in which `old` was measured differently from `new`, in a fixed order.
pub fn differences(new: &MatrixReport, old: &MatrixReport) -> Vec<Difference> {
    let (n, o) = (measured_under(new), measured_under(old));
    let mut out = Vec::new();
    let mut check = |setting: &'static str, old: String, new: String| {
        if old != new {
            out.push(Difference { setting, old, new });
        }
    };
    check("model", o.model, n.model);
    // The built-in simulated server is the same server when its profile and parameters are:
    // it takes a new port every run. Any other server is known by its address.
    match (o.simulated_server, n.simulated_server) {
        (Some(o), Some(n)) => check("simulated server", o, n),
        (o_sim, n_sim) => check(
            "base URL",
            server_text(o.base_url, o_sim),
            server_text(n.base_url, n_sim),
        ),
    }
    check(
        "--max-tokens",
        o.max_tokens.to_string(),
        n.max_tokens.to_string(),
    );
    // Seconds as written in the file: 30 and 30.0 are the same window.
    check(
        "--duration",
        format!("{}s", o.duration_s),
        format!("{}s", n.duration_s),
    );
    check(
        "prompt mode",
        format!("{:?}", o.prompt_tokens),
        format!("{:?}", n.prompt_tokens),
    );
    check("--chat (endpoint)", o.endpoint, n.endpoint);
    check(
        "ignore-eos",
        o.ignore_eos.to_string(),
        n.ignore_eos.to_string(),
    );
    let rule = |r: Option<crate::report::LoopRule>| match r {
        Some(r) => format!(
            "--loop-min-repeats {} --loop-min-span {} (period <= {})",
            r.min_repeats, r.min_span_chars, r.max_period_chars
        ),
        // Files from before the rule was saved: it cannot be shown to be the same.
        None => "not recorded".into(),
    };
    check("loop rule", rule(o.loop_rule), rule(n.loop_rule));
    // The images asked for; their measured token count is not a setting.
    let images = |i: Option<crate::report::ImageSettings>| match i {
        Some(i) => format!("{} x {}x{}", i.per_prompt, i.width, i.height),
        None => "none".into(),
    };
    check("--images", images(o.images), images(n.images));
    out
}

/// A server as the difference message names it.
fn server_text(base_url: Option<String>, simulated: Option<String>) -> String {
    match (simulated, base_url) {
        (Some(_), _) => "the built-in simulated server (--mock)".into(),
        (None, Some(u)) => u,
        (None, None) => "unknown".into(),
    }
}

/// Why a resume was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "the earlier run was measured with other settings: {}; rerun with its settings, or pass \
     --resume-force to keep its measurements (each kept row and cell records the settings it \
     was measured under)",
    list(.0)
)]
pub struct Incompatible(pub Vec<Difference>);

fn list(d: &[Difference]) -> String {
    d.iter()
        .map(|d| format!("{} {} (now {})", d.setting, d.old, d.new))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Keeps the finished measurements of `old` in `report` when both were measured the same way;
/// with `force`, also when not, marking each kept row and cell with the old settings. Returns
/// how many were kept.
pub fn resume(
    report: &mut MatrixReport,
    old: &MatrixReport,
    force: bool,
) -> Result<usize, Incompatible> {
    let diffs = differences(report, old);
    if diffs.is_empty() {
        return Ok(merge_resumed(report, old));
    }
    if !force {
        return Err(Incompatible(diffs));
    }
    let mut under = measured_under(old);
    under.differs = diffs.iter().map(|d| d.setting.to_string()).collect();
    let before_p: Vec<bool> = report
        .prefill
        .iter()
        .map(|r| r.status == CellStatus::Pending)
        .collect();
    let before_d: Vec<bool> = report
        .decode
        .iter()
        .map(|c| c.status == CellStatus::Pending)
        .collect();
    let kept = merge_resumed(report, old);
    // A kept row that already carries older settings (resumed twice) keeps those: they are
    // what it was measured under.
    for (row, was_pending) in report.prefill.iter_mut().zip(before_p) {
        if was_pending && row.status != CellStatus::Pending && row.measured_under.is_none() {
            row.measured_under = Some(under.clone());
        }
    }
    for (cell, was_pending) in report.decode.iter_mut().zip(before_d) {
        if was_pending && cell.status != CellStatus::Pending && cell.measured_under.is_none() {
            cell.measured_under = Some(under.clone());
        }
    }
    Ok(kept)
}

/// Copy finished measurements of an earlier report into `report` (same contexts and
/// concurrency only; a cell stopped inside its window is not finished); returns how many were
/// kept. Checks nothing: see [`resume`].
pub fn merge_resumed(report: &mut MatrixReport, old: &MatrixReport) -> usize {
    let mut kept = 0;
    for row in &mut report.prefill {
        if row.status != CellStatus::Pending {
            continue;
        }
        if let Some(o) = old
            .prefill
            .iter()
            .find(|o| o.context == row.context && o.status == CellStatus::Valid)
        {
            *row = o.clone();
            kept += 1;
        }
    }
    for cell in &mut report.decode {
        if cell.status != CellStatus::Pending {
            continue;
        }
        if let Some(o) = old.decode.iter().find(|o| {
            // A cell stopped inside its window is measured again: its window was short.
            o.context == cell.context
                && o.concurrency == cell.concurrency
                && o.status.was_run()
                && !o.interrupted
        }) {
            *cell = o.clone();
            kept += 1;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> MatrixReport {
        crate::report::json::read(
            include_str!("../../tests/data/matrix_mock_results.json").as_bytes(),
        )
        .expect("the recorded results.json reads")
    }

    fn settings(d: &[Difference]) -> Vec<&str> {
        d.iter().map(|d| d.setting).collect()
    }

    #[test]
    fn the_simulated_server_is_known_by_its_identity_not_its_port() {
        let mut old = recorded();
        old.metadata.simulated_server = Some("demo profile: kv 262144".into());
        old.metadata.base_url = Some("http://127.0.0.1:40001".into());
        let mut new = old.clone();
        new.metadata.base_url = Some("http://127.0.0.1:40002".into());
        // Before: "base URL http://127.0.0.1:40001 (now http://127.0.0.1:40002)".
        assert_eq!(differences(&new, &old), []);
        new.metadata.simulated_server = Some("demo profile: kv 131072".into());
        let d = differences(&new, &old);
        assert_eq!(settings(&d), ["simulated server"]);
        assert_eq!(d[0].old, "demo profile: kv 262144");
        // A real server at the old address is another server, and said so.
        new.metadata.simulated_server = None;
        new.metadata.base_url = old.metadata.base_url.clone();
        let d = differences(&new, &old);
        assert_eq!(settings(&d), ["base URL"]);
        assert_eq!(
            (d[0].old.as_str(), d[0].new.as_str()),
            (
                "the built-in simulated server (--mock)",
                "http://127.0.0.1:40001"
            )
        );
        // Two real servers: by address, as before.
        old.metadata.simulated_server = None;
        assert_eq!(differences(&new, &old), []);
        new.metadata.base_url = Some("http://10.0.0.2:8000".into());
        assert_eq!(settings(&differences(&new, &old)), ["base URL"]);
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;

    /// `--images` is a setting a resumed run must share: another count or size is a difference;
    /// the measured token count is not (the same images count the same on the same server).
    #[test]
    fn other_images_are_a_difference_their_measured_tokens_are_not() {
        let old = crate::report::json::read(
            include_str!("../../tests/data/matrix_mock_results.json").as_bytes(),
        )
        .expect("the recorded results.json reads");
        let mut with = old.clone();
        let images = crate::report::ImageSettings {
            per_prompt: 2,
            width: 1280,
            height: 720,
            image_tokens_per_prompt: Some(2396),
        };
        with.metadata.settings.images = Some(images);
        let d = differences(&with, &old);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].setting, d[0].old.as_str(), d[0].new.as_str()),
            ("--images", "none", "2 x 1280x720")
        );
        let mut measured_later = with.clone();
        if let Some(i) = measured_later.metadata.settings.images.as_mut() {
            i.image_tokens_per_prompt = None;
        }
        assert!(differences(&measured_later, &with).is_empty());
        let mut smaller = with.clone();
        if let Some(i) = smaller.metadata.settings.images.as_mut() {
            i.width = 640;
        }
        assert_eq!(differences(&smaller, &with)[0].new, "2 x 640x720");
    }
}
