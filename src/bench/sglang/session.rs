//! A `bench sglang` session: llmspeed's sweeps and `--num-runs` on the engine's session loop.
//! Every run is a single run as SGLang writes it (its block printed, its record appended, as
//! separate invocations would append them); with several runs, each point's spread across them
//! is printed and appended to `<output file>.runs.jsonl`.
//!
//! Owns only where SGLang's files go and how a point sets SGLang's settings. The order of runs
//! and the spread are `bench::engine::session`'s and `bench::engine::multi_run`'s.

use super::args::SglangConfig;
use super::{record, run};
use crate::bench::engine::multi_run::{self, Spread};
use crate::bench::engine::session::{self, Io, Point, Ran, Runs, Setting};
use crate::bench::engine::RunError;
use crate::clock::Clock;
use crate::net::Cancel;
use crate::progress::Progress;
use std::io::Write;
use std::path::PathBuf;

/// Runs every point `--num-runs` times; returns the files written, each once, in order. One
/// run without a sweep is exactly `run::run`.
pub async fn execute(
    cfg: &SglangConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    out: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Vec<PathBuf>, RunError> {
    let points = points(cfg);
    if points.len() == 1 && cfg.num_runs == 1 {
        let done = run::run(cfg, clock, cancel, log, out, progress).await?;
        return Ok(vec![done.path]);
    }
    let mut runs = SglangRuns { clock };
    let mut io = Io { log, out, progress };
    let done = session::run(&mut runs, &points, cfg.num_runs, cancel, &mut io).await?;
    let mut files = Vec::new();
    for f in done.written {
        if !files.contains(&f) {
            files.push(f);
        }
    }
    Ok(files)
}

/// The session's points: each sweep value set where SGLang's run reads it (the record's
/// settings and the engine's plan alike).
pub fn points(cfg: &SglangConfig) -> Vec<Point<SglangConfig>> {
    session::points(cfg, cfg.sweep.as_ref(), None, |c, s| match s {
        Setting::MaxConcurrency { n, .. } => {
            c.max_concurrency = Some(n);
            c.plan.max_concurrency = Some(n);
        }
        Setting::RequestRate(r) => {
            c.request_rate = r;
            c.plan.schedule.rate = r;
        }
    })
}

/// `bench sglang`'s part of a session.
struct SglangRuns {
    clock: Clock,
}

impl Runs for SglangRuns {
    type Config = SglangConfig;

    async fn run(
        &mut self,
        p: &Point<SglangConfig>,
        _k: usize,
        _num_runs: usize,
        cancel: &Cancel,
        io: &mut Io<'_>,
    ) -> Result<Ran, RunError> {
        let o = run::run(
            &p.cfg,
            self.clock.clone(),
            cancel,
            io.log,
            io.out,
            io.progress,
        )
        .await?;
        Ok(Ran {
            figures: o.figures,
            files: vec![o.path],
        })
    }

    fn save_spread(
        &mut self,
        p: &Point<SglangConfig>,
        spreads: &[Spread],
        runs: usize,
        run_files: &[PathBuf],
    ) -> Result<Vec<PathBuf>, RunError> {
        let mut records: Vec<String> = Vec::new();
        for f in run_files.iter().map(|f| f.display().to_string()) {
            if !records.contains(&f) {
                records.push(f);
            }
        }
        let summary = multi_run::summary_json(spreads, runs, &records);
        let records_file = run_files
            .first()
            .cloned()
            .unwrap_or_else(|| run::output_path(&p.cfg));
        let path = record::runs_file(&records_file);
        record::append(
            &path,
            &record::spread_pairs(&run::run_args(&p.cfg), summary),
        )
        .map_err(|e| RunError::Save(path.display().to_string(), e))?;
        Ok(vec![path])
    }
}
