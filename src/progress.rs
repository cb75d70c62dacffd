//! Progress events: what a run tells the person watching it, as values. The runners
//! (`matrix::run`, `matrix::cell`, `bench::engine::run`) emit them, the client's headroom
//! among them (`Headroom`: its read lag and CPU share, over the last second); the CLI renders them (a live
//! display on a terminal, plain lines otherwise, see `cli::progress`).
//!
//! Owns no IO and no clock: events carry numbers, and rendering decides what to show and how
//! often. Events are sent from the run's own loops at most a few times a second, never from the
//! per-token path.

/// The phase of the step now running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Building (or calibrating) a prompt of an exact size.
    Preparing,
    /// Warm-up requests, whose figures are thrown away.
    Warming,
    /// Cold prefill samples.
    Prefill,
    /// Streams started; waiting for every stream's first token and the server's gate.
    WaitingReady,
    /// Inside the measurement window.
    Measuring,
    /// Window closed; waiting for the server to finish and go idle.
    Draining,
    /// `bench serve`: requests sent and being answered.
    Requests,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Warming => "warming",
            Phase::Prefill => "prefill",
            Phase::WaitingReady => "waiting for the server to be ready",
            Phase::Measuring => "measuring",
            Phase::Draining => "draining",
            Phase::Requests => "requests",
        }
    }
}

/// One thing a run reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event<'a> {
    /// A log line: what plain mode prints, and a live display shows above its bars.
    Line(&'a str),
    /// The run's size, once before the first step: `done` of `total` steps are already finished
    /// (resume), and the plan's estimate for the steps still to run (0 when there is none).
    Start {
        total: u64,
        done: u64,
        estimate_s: f64,
    },
    /// The step now running (`step` names it, e.g. "cell 8K x 4") entered `phase`.
    Phase { step: &'a str, phase: Phase },
    /// Live figures while measuring: tokens per second since the last one, streams in a
    /// request, seconds left in the window.
    Live {
        tok_per_s: f64,
        active: u64,
        left_s: f64,
    },
    /// The client's headroom while measuring (`Headroom`), from the runner's loop once a
    /// second beside `Live`.
    Headroom(Headroom),
    /// A step (decode cell, prefill row, or a `bench serve` request) finished; the plan's
    /// estimate for it (0 when there is none), which scales the estimate of the steps left.
    StepDone { estimate_s: f64 },
    /// The steps still to run, in the order they will run (the matrix, after its warm-up):
    /// from here the time left is [`TimeLeft`]'s, from the plan and what this run measured.
    Plan(&'a [Work]),
    /// A prefill row of `tokens` prompt tokens measured this many prompt tokens per second
    /// (sent before its `StepDone`).
    PrefillRate { tokens: u64, tok_per_s: f64 },
}

/// How much room the client has, as it runs: how late it woke up to its reads, and the share
/// of its cores it used, over the last second. The read lag is that of the requests that ended
/// in that second (a request's reads are summed once, when it ends: never per token), `None`
/// when none ended or no read carried the kernel's stamp; the same read lag as
/// `analysis::client_lag`'s, which judges the run when it ends.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Headroom {
    pub read_lag_us_mean: Option<f64>,
    pub read_lag_us_max: Option<f64>,
    /// The client's CPU over the second, percent of the cores it may run on, and how many.
    pub cpu_percent_of_cores: Option<f64>,
    pub cores: u64,
}

impl Headroom {
    /// From counts the runner keeps: `reads` read lags summing to `sum_ns` with the largest
    /// `max_ns`, and `cpu_s` of the client's CPU over `wall_s` seconds on `cores` cores.
    pub fn of(
        reads: u64,
        sum_ns: u64,
        max_ns: u64,
        cpu_s: Option<f64>,
        wall_s: f64,
        cores: u64,
    ) -> Self {
        let cores = cores.max(1);
        Headroom {
            read_lag_us_mean: (reads > 0).then(|| sum_ns as f64 / reads as f64 / 1e3),
            read_lag_us_max: (reads > 0).then(|| max_ns as f64 / 1e3),
            cpu_percent_of_cores: cpu_s
                .filter(|_| wall_s > 0.0)
                .map(|c| 100.0 * c.max(0.0) / wall_s / cores as f64),
            cores,
        }
    }

    /// `client: read lag 35 µs mean, 1.2 ms max, CPU 12% of 2 cores` (parts it has).
    pub fn text(&self) -> String {
        let lag = |us: f64| {
            if us >= 1000.0 {
                format!("{:.1} ms", us / 1e3)
            } else {
                format!("{us:.0} µs")
            }
        };
        let mut parts = Vec::new();
        if let (Some(mean), Some(max)) = (self.read_lag_us_mean, self.read_lag_us_max) {
            parts.push(format!("read lag {} mean, {} max", lag(mean), lag(max)));
        }
        if let Some(c) = self.cpu_percent_of_cores {
            parts.push(format!(
                "CPU {c:.0}% of {} core{}",
                self.cores,
                if self.cores == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("client: {}", parts.join(", "))
        }
    }
}

/// A step still to run, as the plan has it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// A prefill row: `samples` cold requests of `tokens` prompt tokens each.
    Prefill { tokens: u64, samples: u32 },
    /// A decode cell with a window of `window_s` seconds.
    Cell { window_s: f64 },
}

/// Where events go. Any `FnMut(&str)` is a sink that keeps only the lines, so a test (or a
/// caller that wants the old log) passes a closure.
pub trait Progress {
    fn event(&mut self, e: &Event<'_>);

    fn line(&mut self, s: &str) {
        self.event(&Event::Line(s));
    }
}

impl<F: FnMut(&str)> Progress for F {
    fn event(&mut self, e: &Event<'_>) {
        if let Event::Line(s) = e {
            self(s);
        }
    }
}

/// Where a run stands, for its time left.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pace {
    /// Steps not yet finished.
    pub left: u64,
    /// Steps finished in this run (resumed ones took no time here).
    pub done_here: u64,
    /// The plan's estimate for the steps left at the start, and for those finished since.
    pub estimate_at_start_s: f64,
    pub estimate_done_s: f64,
    pub elapsed_s: f64,
}

/// Seconds the run still needs; `None` when nothing says yet. The plan's estimate for the steps
/// left, scaled by how this run's finished steps compared with their estimates (a fast prefill
/// row then says little about a 30 s cell); without estimates, the count pace of the steps.
pub fn time_left_s(p: &Pace) -> Option<f64> {
    if p.left == 0 {
        return Some(0.0);
    }
    let estimate_left = (p.estimate_at_start_s - p.estimate_done_s).max(0.0);
    if estimate_left > 0.0 {
        return Some(if p.estimate_done_s > 0.0 {
            estimate_left * p.elapsed_s / p.estimate_done_s
        } else {
            (estimate_left - p.elapsed_s).max(0.0)
        });
    }
    (p.done_here > 0).then(|| p.elapsed_s / p.done_here as f64 * p.left as f64)
}

/// The matrix's time left, from the plan: each remaining cell takes its window plus the ramp
/// and drain measured on this run's cells; each remaining prefill row its samples at the
/// prefill time measured on the largest context so far, scaled by (context / that context)^1.5
/// (prefill slows as contexts grow: linear where the weights dominate, quadratic where
/// attention does), plus the time this run's prefill rows took besides their samples
/// (preparing the context's prompt). Extra times are medians: one cell that waited long for
/// its gate says little about the others. Until a kind of step still to run has a measurement
/// there is no basis, and it says so (`None`). Pure: times are seconds on any clock the caller
/// keeps, so tests script them.
#[derive(Clone, Debug, Default)]
pub struct TimeLeft {
    /// Steps not yet finished; the first is running.
    left: std::collections::VecDeque<Work>,
    /// When the running step began (the plan, or the previous step's end).
    step_start: f64,
    /// The largest context measured so far: (tokens, seconds per sample).
    prefill: Option<(u64, f64)>,
    /// Seconds besides the samples of each finished prefill row.
    prefill_extra_s: Vec<f64>,
    /// Seconds besides the window of each finished cell: ramp-up, gate, drain, and the
    /// context's prompt and warm request when the cell came first.
    cell_extra_s: Vec<f64>,
}

/// How prefill time grows with the context between measured and planned sizes.
const PREFILL_EXPONENT: f64 = 1.5;

impl TimeLeft {
    /// The steps still to run, from time `t`; what earlier steps measured is kept.
    pub fn plan(&mut self, t: f64, work: &[Work]) {
        self.left = work.iter().copied().collect();
        self.step_start = t;
    }

    /// What the run reported at time `t`.
    pub fn observe(&mut self, t: f64, e: &Event<'_>) {
        match *e {
            Event::Plan(work) => self.plan(t, work),
            // The largest context measured so far is the best guide to the larger ones left.
            Event::PrefillRate { tokens, tok_per_s }
                if tokens > 0
                    && tok_per_s > 0.0
                    && tok_per_s.is_finite()
                    && self.prefill.is_none_or(|(n, _)| tokens >= n) =>
            {
                self.prefill = Some((tokens, tokens as f64 / tok_per_s));
            }
            Event::StepDone { .. } => {
                let took = t - self.step_start;
                match self.left.pop_front() {
                    Some(Work::Cell { window_s }) => {
                        self.cell_extra_s.push((took - window_s).max(0.0))
                    }
                    Some(w @ Work::Prefill { .. }) => {
                        if let Some(s) = self.samples_s(&w) {
                            self.prefill_extra_s.push((took - s).max(0.0));
                        }
                    }
                    None => {}
                }
                self.step_start = t;
            }
            _ => {}
        }
    }

    /// The samples of a prefill row, from the measured prefill time.
    fn samples_s(&self, w: &Work) -> Option<f64> {
        let Work::Prefill { tokens, samples } = *w else {
            return None;
        };
        let (n0, s0) = self.prefill?;
        let per_sample = s0 * (tokens as f64 / n0 as f64).powf(PREFILL_EXPONENT);
        Some(per_sample * samples.max(1) as f64)
    }

    /// The seconds a step should take; `None` without a measurement for its kind.
    fn step_s(&self, w: &Work) -> Option<f64> {
        let median = |v: &[f64]| crate::analysis::stats::median(v);
        match *w {
            Work::Prefill { .. } => {
                Some(self.samples_s(w)? + median(&self.prefill_extra_s).unwrap_or(0.0))
            }
            Work::Cell { window_s } => median(&self.cell_extra_s).map(|x| window_s + x),
        }
    }

    /// Seconds left at time `t`; `None` while a step still to run has no basis.
    pub fn left_s(&self, t: f64) -> Option<f64> {
        let mut total = 0.0;
        for (i, w) in self.left.iter().enumerate() {
            let s = self.step_s(w)?;
            // The running step has already had part of its time.
            total += if i == 0 {
                (s - (t - self.step_start)).max(0.0)
            } else {
                s
            };
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_from_the_runners_counts() {
        // Four reads woken 10, 20, 30 and 2,000 us late; 0.5 s of CPU over 2 s on 2 cores.
        let h = Headroom::of(4, 2_060_000, 2_000_000, Some(0.5), 2.0, 2);
        assert_eq!(h.read_lag_us_mean, Some(515.0));
        assert_eq!(h.read_lag_us_max, Some(2_000.0));
        assert_eq!(h.cpu_percent_of_cores, Some(12.5));
        assert_eq!(
            h.text(),
            "client: read lag 515 µs mean, 2.0 ms max, CPU 12% of 2 cores"
        );
        // No request ended, no CPU reading: nothing to say, and no division by zero.
        let none = Headroom::of(0, 0, 0, None, 1.0, 0);
        assert_eq!((none.read_lag_us_mean, none.cores), (None, 1));
        assert_eq!(none.text(), "");
        let cpu_only = Headroom::of(0, 0, 0, Some(1.0), 1.0, 1);
        assert_eq!(cpu_only.text(), "client: CPU 100% of 1 core");
        assert_eq!(
            Headroom::of(1, 5, 5, Some(1.0), 0.0, 1).cpu_percent_of_cores,
            None
        );
    }

    #[test]
    fn closures_keep_only_lines() {
        let mut got = Vec::new();
        let mut sink = |s: &str| got.push(s.to_string());
        let p: &mut dyn Progress = &mut sink;
        p.line("a");
        p.event(&Event::StepDone { estimate_s: 1.0 });
        p.event(&Event::Phase {
            step: "cell",
            phase: Phase::Measuring,
        });
        p.event(&Event::Line("b"));
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn time_left_scales_the_estimate_by_the_measured_pace() {
        let p = |left, done_here, at_start, done, elapsed| Pace {
            left,
            done_here,
            estimate_at_start_s: at_start,
            estimate_done_s: done,
            elapsed_s: elapsed,
        };
        // 100 s estimated, 20 s into the first step: 80 s.
        assert_eq!(time_left_s(&p(10, 0, 100.0, 0.0, 20.0)), Some(80.0));
        // Past the estimate with nothing done: never negative.
        assert_eq!(time_left_s(&p(10, 0, 100.0, 0.0, 150.0)), Some(0.0));
        // A 1 s prefill row and a 39 s cell done in 80 s (twice the estimate of 40 s): the
        // 60 s estimated for the rest become 120 s. Count pace would have said 40 s per step.
        assert_eq!(time_left_s(&p(2, 2, 100.0, 40.0, 80.0)), Some(120.0));
        assert_eq!(time_left_s(&p(0, 2, 100.0, 40.0, 80.0)), Some(0.0));
        // No estimates (bench serve requests): the count pace, unknown before the first.
        assert_eq!(time_left_s(&p(4, 2, 0.0, 0.0, 30.0)), Some(60.0));
        assert_eq!(time_left_s(&p(4, 0, 0.0, 0.0, 30.0)), None);
    }

    /// One step of a scripted run: what the plan says, how long it really takes, and the
    /// prefill rate its samples measured.
    struct True {
        work: Work,
        took_s: f64,
        rate: Option<f64>,
    }

    fn prefill(tokens: u64, rate: f64, prep_s: f64) -> True {
        True {
            work: Work::Prefill { tokens, samples: 1 },
            took_s: prep_s + tokens as f64 / rate,
            rate: Some(rate),
        }
    }

    fn cell(window_s: f64, extra_s: f64) -> True {
        True {
            work: Work::Cell { window_s },
            took_s: window_s + extra_s,
            rate: None,
        }
    }

    /// Drives the estimator through `run` (the plan sent at `t0`, after a warm-up it never
    /// sees), checking at every step's start, middle and end that the estimate, once it has a
    /// basis, is within a factor of 2 of the true time left (give or take 5 s for the
    /// running step). Returns the estimates at each step's end, `None` before a basis.
    fn drive(t0: f64, run: &[True]) -> Vec<Option<f64>> {
        let work: Vec<Work> = run.iter().map(|s| s.work).collect();
        let end: f64 = t0 + run.iter().map(|s| s.took_s).sum::<f64>();
        let mut est = TimeLeft::default();
        est.observe(t0, &Event::Plan(&work));
        let check = |est: &TimeLeft, t: f64| {
            let truth = end - t;
            if let Some(e) = est.left_s(t) {
                assert!(
                    e <= 2.0 * truth + 5.0 && e >= truth / 2.0 - 5.0,
                    "at {t:.1} s: estimate {e:.1} s, truly {truth:.1} s left"
                );
            }
        };
        let mut t = t0;
        let mut at_ends = Vec::new();
        for s in run {
            check(&est, t);
            check(&est, t + s.took_s / 2.0);
            t += s.took_s;
            if let (Some(r), Work::Prefill { tokens, .. }) = (s.rate, s.work) {
                est.observe(
                    t,
                    &Event::PrefillRate {
                        tokens,
                        tok_per_s: r,
                    },
                );
            }
            est.observe(t, &Event::StepDone { estimate_s: 0.0 });
            check(&est, t);
            at_ends.push(est.left_s(t));
        }
        assert_eq!(est.left_s(t), Some(0.0));
        at_ends
    }

    #[test]
    fn time_left_comes_from_the_plan_and_holds_after_a_slow_first_prefill() {
        // A slow real server: a 2-minute cold warm-up (never seen: the plan comes after it),
        // the first prefill slow and its prompt calibrated for a minute, then 30 s cells
        // whose ramp grows with concurrency, and prefill slowing as contexts grow. The old
        // pace rule scaled every cell by the first step's overrun (hours for 8 minutes).
        let mut run = Vec::new();
        for (ctx, rate, prep) in [(8_192, 800.0, 60.0), (32_768, 500.0, 20.0)] {
            run.push(prefill(ctx, rate, prep));
            for c in [1.0, 4.0, 16.0, 64.0] {
                run.push(cell(30.0, 3.0 + 0.2 * c));
            }
        }
        run.push(prefill(65_535, 300.0, 20.0));
        let ends = drive(120.0, &run);
        // No basis for the cells until one ran: "estimating…", never a guess.
        assert_eq!(ends[0], None);
        assert!(ends[1].is_some());
    }

    #[test]
    fn time_left_for_a_fast_simulated_run_and_one_short_cell_left() {
        // `matrix --mock`: fast prefill, 5 s windows.
        let mut run = Vec::new();
        for ctx in [2_048, 8_192, 28_608] {
            run.push(prefill(ctx, 200_000.0, 0.2));
            for c in [1.0, 4.0, 16.0, 64.0] {
                run.push(cell(5.0, 1.5 + 0.02 * c));
            }
        }
        run.push(prefill(32_767, 150_000.0, 0.2));
        drive(0.5, &run);
        // Long prefills, then one 5-second cell (it said "about 36m03s" for this).
        let run = [
            prefill(131_072, 400.0, 30.0),
            cell(5.0, 2.0),
            prefill(262_143, 250.0, 30.0),
            cell(5.0, 2.0),
        ];
        let ends = drive(10.0, &run);
        assert_eq!(ends[2], Some(7.0));
    }

    #[test]
    fn a_resumed_plan_keeps_what_was_measured() {
        let mut est = TimeLeft::default();
        est.observe(0.0, &Event::Plan(&[Work::Cell { window_s: 30.0 }]));
        assert_eq!(est.left_s(0.0), None);
        est.observe(36.0, &Event::StepDone { estimate_s: 0.0 });
        let rest = [
            Work::Prefill {
                tokens: 10_000,
                samples: 2,
            },
            Work::Cell { window_s: 30.0 },
        ];
        est.observe(40.0, &Event::Plan(&rest));
        // The cell's 6 s besides its window is kept; the prefill rate is not known yet.
        assert_eq!(est.left_s(40.0), None);
        est.observe(
            40.0,
            &Event::PrefillRate {
                tokens: 10_000,
                tok_per_s: 1000.0,
            },
        );
        assert_eq!(est.left_s(40.0), Some(20.0 + 36.0));
        // Ten seconds into the prefill row: ten of its twenty are gone.
        assert_eq!(est.left_s(50.0), Some(10.0 + 36.0));
        // Past its estimate, the running step counts 0, never less.
        assert_eq!(est.left_s(70.0), Some(36.0));
    }
}
