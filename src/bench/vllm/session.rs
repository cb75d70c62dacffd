//! A `bench serve` session: every sweep point, each run `--num-runs` times, one after the
//! other; each run printed and saved as a single run is, then the spread across runs and the
//! sweep summary. Also `--dry-run`.
//!
//! The order of runs, their title lines and the spread across runs are the engine's
//! (`bench::engine::session`); this file owns where `bench serve`'s files go and its sweep
//! summary. It must never measure or compute figures itself: runs are `bench::vllm::run`,
//! spreads `bench::engine::multi_run`, sweep points and names `bench::vllm::sweep`.

use crate::bench::engine::multi_run::{self, Spread};
use crate::bench::engine::samples::{
    chat_fns, check_image_memory, local_tokenizer, note_images, DatasetTokens, ImagesKept,
};
use crate::bench::engine::session::{self, Io, Ran, Runs};
use crate::bench::engine::RunError;
use crate::bench::vllm::args::{ServeConfig, Sweep};
use crate::bench::vllm::result;
use crate::bench::vllm::run;
use crate::bench::vllm::sweep::{self, Point, PointResult};
use crate::clock::Clock;
use crate::net::Cancel;
use crate::progress::Progress;
use crate::workload::datasets;
use crate::workload::image::{Image, ImageTotals, Making};
use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

/// Runs the session; returns the files written. Progress goes to `log`, results to `out`.
/// A single run without a sweep is exactly `run::run` then `run::report`.
pub async fn execute(
    cfg: &ServeConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    out: &mut (dyn Write + Send),
    progress: &mut (dyn Progress + Send),
) -> Result<Vec<PathBuf>, RunError> {
    if cfg.dry_run {
        dry_run(cfg, out)?;
        return Ok(Vec::new());
    }
    if let Some(mt) = &cfg.multi_turn {
        return multi_turn(cfg, mt, clock, cancel, log, out).await;
    }
    let mut out = out;
    let points = sweep::points(cfg);
    if points.len() == 1 && cfg.num_runs == 1 {
        let o = run::run_shown(cfg, clock, cancel, log, progress).await?;
        return Ok(run::report(cfg, &o, &mut out)?.into_iter().collect());
    }
    let mut runs = VllmRuns {
        cfg,
        clock,
        // One date names every file of the session, so its files sort together.
        date: result::format_date(SystemTime::now()),
        model_id: None,
        base: None,
    };
    let mut io = Io { log, out, progress };
    let done = session::run(&mut runs, &points, cfg.num_runs, cancel, &mut io).await?;
    let results: Vec<PointResult> = done
        .points
        .iter()
        .map(|d| {
            let files = d.run_files.iter().map(|p| p.display().to_string());
            PointResult::new(&points[d.index], &d.spreads, files.collect())
        })
        .collect();
    let mut written = done.written;
    if let (Some(sw), false) = (&cfg.sweep, results.is_empty()) {
        written.extend(runs.sweep_summary(sw, &results, io.out)?);
    }
    Ok(written)
}

/// `bench serve`'s part of a session: each run printed and saved as a single run is, under the
/// session's file names.
struct VllmRuns<'a> {
    cfg: &'a ServeConfig,
    clock: Clock,
    date: String,
    /// The model of the first run, which names the sweep summary.
    model_id: Option<String>,
    /// The current point's result file name before `-run{k}`, from its first run.
    base: Option<String>,
}

impl Runs for VllmRuns<'_> {
    type Config = ServeConfig;

    async fn run(
        &mut self,
        p: &Point,
        k: usize,
        num_runs: usize,
        cancel: &Cancel,
        io: &mut Io<'_>,
    ) -> Result<Ran, RunError> {
        if k == 1 {
            self.base = None;
        }
        let mut o = run::run_shown(&p.cfg, self.clock.clone(), cancel, io.log, io.progress).await?;
        o.info.date = self.date.clone();
        self.model_id.get_or_insert_with(|| o.info.model_id.clone());
        let cfg = self.cfg;
        let name = self
            .base
            .get_or_insert_with(|| point_base_name(cfg, p, &o.info))
            .clone();
        let mut rcfg = p.cfg.clone();
        rcfg.result_filename = Some(sweep::file_name(&name, "", (num_runs > 1).then_some(k)));
        let mut out = &mut *io.out;
        let files = run::report(&rcfg, &o, &mut out)?.into_iter().collect();
        Ok(Ran {
            figures: multi_run::figures(&o.pairs(false)),
            files,
        })
    }

    fn save_spread(
        &mut self,
        _p: &Point,
        spreads: &[Spread],
        runs: usize,
        run_files: &[PathBuf],
    ) -> Result<Vec<PathBuf>, RunError> {
        if !self.saving() {
            return Ok(Vec::new());
        }
        let name = sweep::file_name(self.base.as_deref().unwrap_or("result.json"), "-runs", None);
        let files: Vec<String> = run_files.iter().map(|p| p.display().to_string()).collect();
        let v = multi_run::summary_json(spreads, runs, &files);
        Ok(vec![save(self.cfg, &name, &v)?])
    }
}

impl VllmRuns<'_> {
    fn saving(&self) -> bool {
        self.cfg.save_result || self.cfg.append_result
    }

    /// The sweep's table, and its summary JSON and page when saving; returns the files.
    fn sweep_summary(
        &self,
        sw: &Sweep,
        results: &[PointResult],
        mut out: &mut (dyn Write + Send),
    ) -> Result<Vec<PathBuf>, RunError> {
        let cfg = self.cfg;
        let io = |e: std::io::Error| RunError::Save("stdout".into(), e);
        let p = cfg
            .percentiles
            .last()
            .map(|&p| crate::bench::vllm::metrics::percentile_label(p))
            .unwrap_or_else(|| "99".into());
        sweep::write_table(&mut out, results, &p).map_err(io)?;
        if !self.saving() {
            return Ok(Vec::new());
        }
        let name = sweep_file_name(cfg, self.model_id.as_deref(), &self.date, sw.key());
        let v = sweep::summary_json(sw, cfg.num_runs, results);
        let json_path = save(cfg, &name, &v)?;
        let html_path = crate::bench::vllm::sweep_html::path_for(&json_path);
        // The page's header comes from the points' own result files, just saved.
        let first_runs: Vec<serde_json::Map<String, serde_json::Value>> = results
            .iter()
            .filter_map(|p| std::fs::read_to_string(p.result_files.first()?).ok())
            .filter_map(|text| serde_json::from_str(&text).ok())
            .collect();
        let page = crate::bench::vllm::sweep_html::render(&v, &first_runs);
        std::fs::write(&html_path, page)
            .map_err(|e| RunError::Save(html_path.display().to_string(), e))?;
        Ok(vec![json_path, html_path])
    }
}

/// The point's result file name before `-run{k}`: `--result-filename` with the point's tag,
/// or vLLM's default name (which already carries the rate and concurrency).
fn point_base_name(cfg: &ServeConfig, p: &Point, info: &result::RunInfo) -> String {
    match &cfg.result_filename {
        Some(f) => sweep::file_name(f, &p.file_tag, None),
        None => result::default_filename(info),
    }
}

/// `{label or backend}-sweep-{key}-{model}-{date}.json` (vLLM's name with the sweep in place of
/// the rate and concurrency), or `--result-filename` + `-sweep`.
fn sweep_file_name(cfg: &ServeConfig, model: Option<&str>, date: &str, key: &str) -> String {
    if let Some(f) = &cfg.result_filename {
        return sweep::file_name(f, "-sweep", None);
    }
    let label = cfg.label.as_deref().unwrap_or(cfg.conn.backend.as_str());
    let model = model.unwrap_or("model");
    let model = model.rsplit('/').next().unwrap_or(model);
    format!("{label}-sweep-{key}-{model}-{date}.json")
}

fn save(cfg: &ServeConfig, name: &str, v: &serde_json::Value) -> Result<PathBuf, RunError> {
    let path = match &cfg.result_dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    };
    let err = |e: std::io::Error| RunError::Save(path.display().to_string(), e);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut text = serde_json::to_vec_pretty(v).map_err(|e| err(e.into()))?;
    text.push(b'\n');
    std::fs::write(&path, text).map_err(err)?;
    Ok(path)
}

/// `--multi-turn`: one conversation benchmark, its result saved as vllm-bench's
/// (`--result-filename`, else `{label or backend}-multi-turn-{model}-{date}.json`).
async fn multi_turn(
    cfg: &ServeConfig,
    mt: &crate::bench::engine::conversation::MultiTurnConfig,
    clock: Clock,
    cancel: &Cancel,
    log: &mut (dyn Write + Send),
    out: &mut (dyn Write + Send),
) -> Result<Vec<PathBuf>, RunError> {
    let v = crate::bench::vllm::multiturn::run(cfg, mt, clock, cancel, log, out).await?;
    if !(cfg.save_result || cfg.append_result) {
        return Ok(Vec::new());
    }
    let name = cfg.result_filename.clone().unwrap_or_else(|| {
        let model = v["model_id"].as_str().unwrap_or("model");
        let date = result::format_date(SystemTime::now()).replace([' ', ':'], "");
        format!(
            "{}-multi-turn-{}-{date}.json",
            cfg.label.as_deref().unwrap_or(cfg.conn.backend.as_str()),
            model.rsplit('/').next().unwrap_or(model)
        )
    });
    let path = match &cfg.result_dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    };
    let pairs: Vec<(String, serde_json::Value)> = v
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    result::save(&path, &pairs, cfg.append_result)
        .map_err(|e| RunError::Save(path.display().to_string(), e))?;
    Ok(vec![path])
}

/// What `--dry-run` prints about one dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRunStats {
    pub prompts: usize,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub min_input: u64,
    pub max_input: u64,
    pub min_output: u32,
    pub max_output: u32,
    /// The prompts' images (an image dataset's), `None` where none carries one.
    pub images: Option<crate::workload::image::ImageTotals>,
}

impl DryRunStats {
    pub fn of(samples: &[datasets::Sample]) -> DryRunStats {
        DryRunStats {
            prompts: samples.len(),
            total_input_tokens: samples.iter().map(|s| s.prompt_len).sum(),
            total_output_tokens: samples.iter().map(|s| u64::from(s.output_len)).sum(),
            min_input: samples.iter().map(|s| s.prompt_len).min().unwrap_or(0),
            max_input: samples.iter().map(|s| s.prompt_len).max().unwrap_or(0),
            min_output: samples.iter().map(|s| s.output_len).min().unwrap_or(0),
            max_output: samples.iter().map(|s| s.output_len).max().unwrap_or(0),
            images: crate::workload::image::ImageTotals::of(
                samples.iter().map(datasets::random_mm::images),
            ),
        }
    }

    /// vllm-bench's dry-run lines, then the ranges and how texts were counted.
    pub fn write(&self, w: &mut (dyn Write + Send), counting: &str) -> std::io::Result<()> {
        let n = self.prompts.max(1) as f64;
        writeln!(w, "Dry run stats:")?;
        writeln!(w, "  Total prompts: {}", self.prompts)?;
        writeln!(w, "  Total input tokens: {}", self.total_input_tokens)?;
        writeln!(
            w,
            "  Total expected output tokens: {}",
            self.total_output_tokens
        )?;
        writeln!(
            w,
            "  Avg input tokens: {:.1}",
            self.total_input_tokens as f64 / n
        )?;
        writeln!(
            w,
            "  Avg output tokens: {:.1}",
            self.total_output_tokens as f64 / n
        )?;
        writeln!(
            w,
            "  Input tokens min/max: {}/{}",
            self.min_input, self.max_input
        )?;
        writeln!(
            w,
            "  Output tokens min/max: {}/{}",
            self.min_output, self.max_output
        )?;
        if let Some(images) = &self.images {
            images.write(w, "  ")?;
        }
        writeln!(w, "  Prompt token counting: {counting}")
    }
}

/// `--dry-run`: builds each point's dataset and prints its statistics; contacts no server.
/// Token-id datasets are exact; texts are counted with `--tokenizer` when it loads locally,
/// else estimated as bytes / 4 (the server's `/tokenize` is not asked), and it says which.
fn dry_run(cfg: &ServeConfig, out: &mut (dyn Write + Send)) -> Result<(), RunError> {
    let io = |e: std::io::Error| RunError::Save("stdout".into(), e);
    let local = local_tokenizer(
        cfg.conn.tokenizer.as_deref(),
        "an estimate (bytes / 4)",
        &mut std::io::stderr(),
    )?;
    let mut seen = Vec::new();
    for p in sweep::points(cfg) {
        // Points differ in the dataset only through --sweep-num-prompts-factor.
        if seen.contains(&p.cfg.dataset.num_prompts) {
            continue;
        }
        seen.push(p.cfg.dataset.num_prompts);
        let count = |t: &str| match &local {
            Some(tok) => tok.count(t).map_err(|e| e.to_string()),
            None => Ok(datasets::estimate_tokens(t)),
        };
        let chat = chat_fns(
            &p.cfg.dataset,
            cfg.conn.tokenizer.as_deref(),
            local.as_ref(),
            &mut std::io::stderr(),
        )?;
        // No tokenizer to cut texts with: vLLM's datasets never cut.
        let mut tokens = DatasetTokens {
            count,
            chat,
            tokenizer: None,
        };
        // Images read from files (custom_image) are held: refused where they would not fit.
        check_image_memory(&p.cfg.dataset)?;
        // Synthetic images are planned, then each made, counted and dropped: the dry run of a
        // run too large to hold counts the same bytes the run sends, in bounded memory.
        let started = std::time::Instant::now();
        let samples = datasets::load_with(&p.cfg.dataset, &mut tokens, Making::Planned)?;
        let per_prompt: Vec<&[Image]> = samples.iter().map(datasets::random_mm::images).collect();
        let images = ImageTotals::counted(&per_prompt).map_err(RunError::Setup)?;
        drop(per_prompt);
        note_images(
            images.as_ref(),
            started.elapsed(),
            ImagesKept::Dropped,
            &mut std::io::stderr(),
        );
        let counting = match (p.cfg.dataset.kind.token_ids(), &local) {
            (true, _) => "exact (token ids)",
            (false, Some(_)) => "local_tokenizer",
            (false, None) => "estimate_bytes_div_4 (a real run counts with the server's /tokenize)",
        };
        if !p.label.is_empty() {
            writeln!(out, "{}:", p.label).map_err(io)?;
        }
        let stats = DryRunStats {
            images,
            ..DryRunStats::of(&samples)
        };
        stats.write(out, counting).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::{PromptSource, Sample};

    #[test]
    fn dry_run_stats_by_hand() {
        let s = |i: u64, o: u32| Sample {
            group: None,
            prompt: PromptSource::Text(String::new()),
            prompt_len: i,
            output_len: o,
        };
        let st = DryRunStats::of(&[s(10, 5), s(30, 7), s(20, 3)]);
        assert_eq!(
            st,
            DryRunStats {
                prompts: 3,
                total_input_tokens: 60,
                total_output_tokens: 15,
                min_input: 10,
                max_input: 30,
                min_output: 3,
                max_output: 7,
                images: None,
            }
        );
        let mut out = Vec::new();
        st.write(&mut out, "exact").unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("  Avg input tokens: 20.0\n  Avg output tokens: 5.0\n"),
            "{t}"
        );
    }
}
