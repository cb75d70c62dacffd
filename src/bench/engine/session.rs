//! A session: every point of a sweep, each run `--num-runs` times, one after the other, for any
//! front end. The front end runs one point once and writes its files ([`Runs`]); the session
//! owns the order, the title line of each run, the stop between runs and the spread across a
//! point's runs ([`multi_run`]).
//!
//! Owns: what a sweep varies ([`Sweep`], parsed from llmspeed's shared sweep flags), its
//! points ([`points`]: one config per value, labelled and tagged), and the loop ([`run`]). It
//! never measures or computes a figure itself: runs are the front end's, spreads
//! `multi_run`'s.

use super::multi_run::{self, Spread};
use super::RunError;
use crate::net::Cancel;
use crate::progress::Progress;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

/// What a sweep varies: each value is one point, run as if given to the single-run flag.
#[derive(Clone, Debug, PartialEq)]
pub enum Sweep {
    MaxConcurrency(Vec<usize>),
    /// `f64::INFINITY` for `inf`.
    RequestRate(Vec<f64>),
}

impl Sweep {
    /// The result key the sweep varies (both tools' records name it so).
    pub fn key(&self) -> &'static str {
        match self {
            Sweep::MaxConcurrency(_) => "max_concurrency",
            Sweep::RequestRate(_) => "request_rate",
        }
    }

    /// The sweep flags (`--sweep-max-concurrency`, `--sweep-request-rate`,
    /// `--sweep-num-prompts-factor`), checked: one sweep at a time, the factor only with
    /// concurrency.
    pub fn parse(
        max_concurrency: Option<&str>,
        request_rate: Option<&str>,
        factor: Option<usize>,
    ) -> Result<Option<Sweep>, String> {
        let most = tokio::sync::Semaphore::MAX_PERMITS;
        let sweep = match (max_concurrency, request_rate) {
            (Some(_), Some(_)) => {
                return Err("--sweep-max-concurrency and --sweep-request-rate cannot be combined: sweep one at a time (fix the other with --max-concurrency or --request-rate)".into())
            }
            (Some(s), None) => Some(Sweep::MaxConcurrency(parse_list("--sweep-max-concurrency", s, |v| {
                match v.parse::<usize>() {
                    Ok(n) if (1..=most).contains(&n) => Ok(n),
                    _ => Err(format!("invalid concurrency {v:?}: expected a whole number from 1 to {most}")),
                }
            })?)),
            (None, Some(s)) => Some(Sweep::RequestRate(parse_list("--sweep-request-rate", s, parse_rate)?)),
            (None, None) => None,
        };
        match (&sweep, factor) {
            (Some(Sweep::MaxConcurrency(_)), Some(0)) => {
                Err("--sweep-num-prompts-factor must be at least 1".into())
            }
            (Some(Sweep::MaxConcurrency(_)), _) | (_, None) => Ok(sweep),
            (_, Some(_)) => Err("--sweep-num-prompts-factor goes with --sweep-max-concurrency (prompts per point = concurrency x factor)".into()),
        }
    }
}

/// What every front end checks of how its runs combine: at least one run, and a concurrency
/// sweep sets `--max-concurrency` at each point, so the flag itself is left out.
pub fn check_runs(
    sweep: &Option<Sweep>,
    max_concurrency: Option<usize>,
    num_runs: usize,
) -> Result<(), String> {
    if num_runs == 0 {
        return Err("--num-runs must be at least 1".into());
    }
    if max_concurrency.is_some() && matches!(sweep, Some(Sweep::MaxConcurrency(_))) {
        return Err("--sweep-max-concurrency sets --max-concurrency at each point: leave --max-concurrency out".into());
    }
    Ok(())
}

/// A request rate: a number above 0, or `inf`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid request rate {s:?}: expected a number or inf"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!(
            "invalid request rate {s:?}: must be above 0 (or inf)"
        ));
    }
    Ok(v)
}

/// A comma-separated list of at least one value, each parsed by `one`, no repeats.
fn parse_list<T: PartialEq>(
    flag: &str,
    s: &str,
    one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for v in s.split(',').map(str::trim) {
        let x = one(v).map_err(|e| format!("{flag}: {e}"))?;
        if out.contains(&x) {
            return Err(format!("{flag}: {v} is listed twice"));
        }
        out.push(x);
    }
    Ok(out)
}

/// Python's `str(float)` (`10.0`, `0.5`, `inf`, `nan`): how both tools print rates.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// What one point sets, for the front end to apply to its config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setting {
    /// The concurrency cap, and the prompts to send when `--sweep-num-prompts-factor` is given.
    MaxConcurrency {
        n: usize,
        num_prompts: Option<usize>,
    },
    RequestRate(f64),
}

/// One point of a session: the config it runs with, and how it is named.
#[derive(Clone, Debug)]
pub struct Point<C> {
    /// `concurrency=8`, `rate=10.0`, `rate=inf`; empty without a sweep.
    pub label: String,
    /// The value the sweep set, as a result JSON writes it (`8`, `10.0`, `"inf"`).
    pub value: Value,
    /// Inserted into a file name so points do not overwrite each other (`-concurrency8`,
    /// `-10.0qps`).
    pub file_tag: String,
    pub cfg: C,
}

/// The points of a session: every sweep value applied to a copy of `base` by `apply`, or
/// `base` as it is without a sweep.
pub fn points<C: Clone>(
    base: &C,
    sweep: Option<&Sweep>,
    factor: Option<usize>,
    apply: impl Fn(&mut C, Setting),
) -> Vec<Point<C>> {
    let point = |label: String, value: Value, file_tag: String, s: Setting| {
        let mut cfg = base.clone();
        apply(&mut cfg, s);
        Point {
            label,
            value,
            file_tag,
            cfg,
        }
    };
    match sweep {
        None => vec![Point {
            label: String::new(),
            value: Value::Null,
            file_tag: String::new(),
            cfg: base.clone(),
        }],
        Some(Sweep::MaxConcurrency(values)) => values
            .iter()
            .map(|&n| {
                let num_prompts = factor.map(|f| n.saturating_mul(f));
                point(
                    format!("concurrency={n}"),
                    json!(n),
                    format!("-concurrency{n}"),
                    Setting::MaxConcurrency { n, num_prompts },
                )
            })
            .collect(),
        Some(Sweep::RequestRate(values)) => values
            .iter()
            .map(|&r| {
                let value = if r.is_finite() {
                    json!(r)
                } else {
                    json!("inf")
                };
                point(
                    format!("rate={}", py_float(r)),
                    value,
                    format!("-{}qps", py_float(r)),
                    Setting::RequestRate(r),
                )
            })
            .collect(),
    }
}

/// Where a session writes: progress and notes to `log`, results to `out`.
pub struct Io<'a> {
    pub log: &'a mut (dyn Write + Send),
    pub out: &'a mut (dyn Write + Send),
    pub progress: &'a mut (dyn Progress + Send),
}

/// One run as the front end reports it to the session.
#[derive(Clone, Debug, Default)]
pub struct Ran {
    /// The figures compared across runs, `(key, value)` in the result's own keys
    /// (`multi_run::figures` picks them from a result JSON).
    pub figures: Vec<(String, f64)>,
    /// The files the run wrote.
    pub files: Vec<PathBuf>,
}

/// A front end's part of a session.
// The session is driven by `block_on` or awaited in place, never spawned: no `Send` bound is
// needed on these futures.
#[allow(async_fn_in_trait)]
pub trait Runs {
    type Config;

    /// Runs `point` once as run `k` (1-based) of its `num_runs`, prints its result to `io.out`
    /// and writes its files.
    async fn run(
        &mut self,
        point: &Point<Self::Config>,
        k: usize,
        num_runs: usize,
        cancel: &Cancel,
        io: &mut Io<'_>,
    ) -> Result<Ran, RunError>;

    /// After the runs of a point (more than one): writes their spread; returns the files
    /// written. The session has printed the spread's table already.
    fn save_spread(
        &mut self,
        point: &Point<Self::Config>,
        spreads: &[Spread],
        runs: usize,
        run_files: &[PathBuf],
    ) -> Result<Vec<PathBuf>, RunError>;
}

/// One point that ran all its runs.
#[derive(Clone, Debug)]
pub struct PointDone {
    /// Its index in the points given to [`run`].
    pub index: usize,
    /// Each figure across the runs (one run: each holds its one value).
    pub spreads: Vec<Spread>,
    /// The files its runs wrote, in order.
    pub run_files: Vec<PathBuf>,
}

/// What a session did: the points that ran (in order) and every file written.
#[derive(Clone, Debug, Default)]
pub struct Done {
    pub points: Vec<PointDone>,
    pub written: Vec<PathBuf>,
}

/// Runs every point `num_runs` times, in order. A stop before a run, or in a later run's
/// set-up steps, ends the session there and leaves that point out (what its earlier runs
/// wrote stays written and listed).
pub async fn run<R: Runs>(
    runs: &mut R,
    points: &[Point<R::Config>],
    num_runs: usize,
    cancel: &Cancel,
    io: &mut Io<'_>,
) -> Result<Done, RunError> {
    let mut done = Done::default();
    for (index, p) in points.iter().enumerate() {
        match point(runs, p, num_runs, index > 0, cancel, io, &mut done.written).await? {
            Some((spreads, run_files)) => done.points.push(PointDone {
                index,
                spreads,
                run_files,
            }),
            None => break,
        }
    }
    Ok(done)
}

/// One point's runs, each under its title line, then their spread (printed, and saved by the
/// front end) when there are several. `None` when a stop came before one of its runs, or in
/// one of its set-up steps after an `earlier` run of the session (the stop is logged; the
/// session's very first run stopped so ends the session with its error, nothing measured).
async fn point<R: Runs>(
    runs: &mut R,
    p: &Point<R::Config>,
    num_runs: usize,
    earlier: bool,
    cancel: &Cancel,
    io: &mut Io<'_>,
    written: &mut Vec<PathBuf>,
) -> Result<Option<(Vec<Spread>, Vec<PathBuf>)>, RunError> {
    let stdout = |e: std::io::Error| RunError::Save("stdout".into(), e);
    let mut figures = Vec::new();
    let mut files = Vec::new();
    for k in 1..=num_runs {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        writeln!(
            io.out,
            "{:-^50}",
            format!(" {} ", title(&p.label, k, num_runs))
        )
        .map_err(stdout)?;
        let ran = match runs.run(p, k, num_runs, cancel, io).await {
            // A stop in one of this run's set-up steps, after other runs: the session ends
            // there as at a stop between runs, so the files written so far are listed.
            Err(e @ RunError::Interrupted { .. }) if earlier || k > 1 => {
                writeln!(io.log, "{}: {e}", title(&p.label, k, num_runs)).map_err(stdout)?;
                return Ok(None);
            }
            r => r?,
        };
        files.extend(ran.files.iter().cloned());
        written.extend(ran.files);
        figures.push(ran.figures);
    }
    if figures.is_empty() {
        return Ok(None);
    }
    let spreads = multi_run::spread(&figures);
    if num_runs > 1 {
        multi_run::write_table(&mut io.out, &spreads, figures.len()).map_err(stdout)?;
        written.extend(runs.save_spread(p, &spreads, figures.len(), &files)?);
    }
    Ok(Some((spreads, files)))
}

/// The title of run `k` of `n` at a point labelled `label`.
fn title(label: &str, k: usize, n: usize) -> String {
    match (label.is_empty(), n) {
        (false, 1) => label.to_string(),
        (true, n) => format!("run {k}/{n}"),
        (false, n) => format!("{label}, run {k}/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_combine_with_one_run_at_least_and_a_concurrency_sweep_owns_the_flag() {
        let conc = Some(Sweep::MaxConcurrency(vec![1, 8]));
        let rate = Some(Sweep::RequestRate(vec![1.0, f64::INFINITY]));
        assert_eq!(check_runs(&conc, None, 3), Ok(()));
        assert_eq!(check_runs(&rate, Some(8), 1), Ok(()));
        assert_eq!(check_runs(&None, Some(8), 1), Ok(()));
        let e = check_runs(&conc, Some(8), 1).unwrap_err();
        assert!(e.contains("leave --max-concurrency out"), "{e}");
        assert_eq!(
            check_runs(&None, None, 0).unwrap_err(),
            "--num-runs must be at least 1"
        );
    }

    #[test]
    fn sweeps_parse_and_refuse_as_documented() {
        assert_eq!(
            Sweep::parse(Some("1, 8,64"), None, Some(2)),
            Ok(Some(Sweep::MaxConcurrency(vec![1, 8, 64])))
        );
        assert_eq!(
            Sweep::parse(None, Some("1,inf"), None),
            Ok(Some(Sweep::RequestRate(vec![1.0, f64::INFINITY])))
        );
        assert_eq!(Sweep::parse(None, None, None), Ok(None));
        for (c, r, f, says) in [
            (Some("1"), Some("2"), None, "cannot be combined"),
            (Some("1,1"), None, None, "listed twice"),
            (Some("0"), None, None, "invalid concurrency"),
            (None, Some("0"), None, "must be above 0"),
            (None, Some("x"), None, "expected a number"),
            (
                None,
                Some("1"),
                Some(2),
                "goes with --sweep-max-concurrency",
            ),
            (Some("1"), None, Some(0), "at least 1"),
        ] {
            let e = Sweep::parse(c, r, f).unwrap_err();
            assert!(e.contains(says), "{c:?} {r:?} {f:?}: {e}");
        }
    }

    #[test]
    fn points_apply_each_value_and_name_it() {
        let apply = |c: &mut (usize, f64, usize), s: Setting| match s {
            Setting::MaxConcurrency { n, num_prompts } => {
                c.0 = n;
                c.2 = num_prompts.unwrap_or(c.2);
            }
            Setting::RequestRate(r) => c.1 = r,
        };
        let base = (0usize, 1.0f64, 7usize);
        let p = points(
            &base,
            Some(&Sweep::MaxConcurrency(vec![2, 4])),
            Some(3),
            apply,
        );
        let got: Vec<_> = p
            .iter()
            .map(|x| {
                (
                    x.label.as_str(),
                    x.file_tag.as_str(),
                    x.value.clone(),
                    x.cfg,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("concurrency=2", "-concurrency2", json!(2), (2, 1.0, 6)),
                ("concurrency=4", "-concurrency4", json!(4), (4, 1.0, 12)),
            ]
        );
        let p = points(
            &base,
            Some(&Sweep::RequestRate(vec![2.5, f64::INFINITY])),
            None,
            apply,
        );
        assert_eq!((p[0].label.as_str(), p[0].cfg.1), ("rate=2.5", 2.5));
        assert_eq!(
            (p[1].file_tag.as_str(), &p[1].value),
            ("-infqps", &json!("inf"))
        );
        let p = points(&base, None, None, apply);
        assert_eq!((p.len(), p[0].label.as_str(), p[0].cfg), (1, "", base));
    }

    /// A front end that "runs" by handing out the next of its figures and records the calls.
    struct Fake {
        values: Vec<f64>,
        calls: Vec<(String, usize)>,
        spreads_saved: Vec<(String, usize, usize)>,
        cancel_after: Option<(usize, Cancel)>,
        /// The call whose set-up a stop interrupts (1-based).
        stopped_in_setup: Option<usize>,
    }

    impl Runs for Fake {
        type Config = ();
        async fn run(
            &mut self,
            point: &Point<()>,
            k: usize,
            _num_runs: usize,
            _cancel: &Cancel,
            _io: &mut Io<'_>,
        ) -> Result<Ran, RunError> {
            self.calls.push((point.label.clone(), k));
            if self.stopped_in_setup == Some(self.calls.len()) {
                return Err(RunError::Interrupted {
                    step: "warming up",
                    signal: "SIGTERM",
                });
            }
            if let Some((n, c)) = &self.cancel_after {
                if self.calls.len() == *n {
                    c.cancel();
                }
            }
            let x = self.values[self.calls.len() - 1];
            Ok(Ran {
                figures: vec![("x".into(), x)],
                files: vec![PathBuf::from(format!("{}-{k}", point.label))],
            })
        }

        fn save_spread(
            &mut self,
            point: &Point<()>,
            spreads: &[Spread],
            runs: usize,
            run_files: &[PathBuf],
        ) -> Result<Vec<PathBuf>, RunError> {
            self.spreads_saved
                .push((point.label.clone(), runs, run_files.len()));
            assert_eq!(spreads[0].values.len(), runs);
            Ok(vec![PathBuf::from(format!("{}-runs", point.label))])
        }
    }

    fn session(fake: &mut Fake, num_runs: usize, cancel: &Cancel) -> (Done, String) {
        let (done, out, _) = session_logged(fake, num_runs, cancel);
        (done.unwrap(), out)
    }

    /// The session's result, stdout and log.
    fn session_logged(
        fake: &mut Fake,
        num_runs: usize,
        cancel: &Cancel,
    ) -> (Result<Done, RunError>, String, String) {
        let pts = points(
            &(),
            Some(&Sweep::MaxConcurrency(vec![1, 2])),
            None,
            |_, _| {},
        );
        let (mut log, mut out) = (Vec::new(), Vec::new());
        let mut progress = |_: &str| {};
        let mut io = Io {
            log: &mut log,
            out: &mut out,
            progress: &mut progress,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let done = rt.block_on(run(fake, &pts, num_runs, cancel, &mut io));
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (done, text(out), text(log))
    }

    #[test]
    fn every_point_runs_n_times_in_order_then_its_spread() {
        let mut fake = Fake {
            values: vec![1.0, 2.0, 3.0, 10.0, 10.0, 10.0],
            calls: vec![],
            spreads_saved: vec![],
            cancel_after: None,
            stopped_in_setup: None,
        };
        let (done, out) = session(&mut fake, 3, &Cancel::new());
        let order: Vec<(&str, usize)> = fake.calls.iter().map(|(l, k)| (l.as_str(), *k)).collect();
        assert_eq!(
            order,
            [
                ("concurrency=1", 1),
                ("concurrency=1", 2),
                ("concurrency=1", 3),
                ("concurrency=2", 1),
                ("concurrency=2", 2),
                ("concurrency=2", 3)
            ]
        );
        assert_eq!(done.points.len(), 2);
        // Mean 2, sample std 1 (not the population's sqrt(2/3)).
        assert_eq!(
            (
                done.points[0].spreads[0].mean,
                done.points[0].spreads[0].std
            ),
            (2.0, 1.0)
        );
        assert_eq!(done.points[1].spreads[0].std, 0.0);
        assert_eq!(
            fake.spreads_saved,
            [
                (String::from("concurrency=1"), 3, 3),
                (String::from("concurrency=2"), 3, 3)
            ]
        );
        let names: Vec<String> = done
            .written
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "concurrency=1-1",
                "concurrency=1-2",
                "concurrency=1-3",
                "concurrency=1-runs",
                "concurrency=2-1",
                "concurrency=2-2",
                "concurrency=2-3",
                "concurrency=2-runs"
            ]
        );
        assert!(out.contains("--- concurrency=1, run 2/3 ---"), "{out}");
        assert_eq!(
            out.matches("Multi-Run Summary (3 runs)").count(),
            2,
            "{out}"
        );
    }

    #[test]
    fn a_stop_between_runs_leaves_the_point_out_and_ends_the_session() {
        let cancel = Cancel::new();
        let mut fake = Fake {
            values: vec![1.0; 6],
            calls: vec![],
            spreads_saved: vec![],
            cancel_after: Some((3, cancel.clone())),
            stopped_in_setup: None,
        };
        let (done, _) = session(&mut fake, 2, &cancel);
        // Point 1 ran both runs; point 2's first run ran, then the stop came.
        assert_eq!(fake.calls.len(), 3);
        assert_eq!(done.points.len(), 1);
        assert_eq!(done.written.len(), 2 + 1 + 1);
    }

    #[test]
    fn a_stop_in_a_later_runs_set_up_ends_the_session_with_what_was_written() {
        let cancel = Cancel::new();
        let fake = |at| Fake {
            values: vec![1.0; 6],
            calls: vec![],
            spreads_saved: vec![],
            cancel_after: None,
            stopped_in_setup: Some(at),
        };
        // Point 1 ran both runs (2 files and their spread); point 2's first run was stopped
        // while warming up: the session ends with the 3 files, and the log says why.
        let mut f = fake(3);
        let (done, _, log) = session_logged(&mut f, 2, &cancel);
        let done = done.expect("the files written are handed back");
        assert_eq!(done.points.len(), 1);
        assert_eq!(done.written.len(), 3, "{:?}", done.written);
        assert!(
            log.contains("concurrency=2, run 1/2: stopped by SIGTERM while warming up"),
            "{log}"
        );
        // The second run of point 1: its first run's file is listed, the point left out.
        let mut f = fake(2);
        let done = session_logged(&mut f, 2, &cancel).0.unwrap();
        assert_eq!((done.points.len(), done.written.len()), (0, 1));
        assert_eq!(f.calls.len(), 2);
        // The very first run: nothing was measured, and the error says so.
        let mut f = fake(1);
        let e = session_logged(&mut f, 2, &cancel).0.unwrap_err();
        assert!(matches!(e, RunError::Interrupted { .. }), "{e:?}");
    }
}
