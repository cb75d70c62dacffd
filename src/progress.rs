//! Progress events: what a run tells the person watching it, as values. The runners
//! (`matrix::run`, `matrix::cell`, `compat::run`) emit them; the CLI renders them (a live
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
    /// A step (decode cell, prefill row, or a `bench serve` request) finished; the plan's
    /// estimate for it (0 when there is none), which scales the estimate of the steps left.
    StepDone { estimate_s: f64 },
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
