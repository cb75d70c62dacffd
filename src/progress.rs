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
    /// (resume), and the plan's estimate for the whole run.
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
    /// A step (decode cell, prefill row, or a `bench serve` request) finished.
    StepDone,
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

/// Seconds the run still needs: the plan's estimate until a step has finished, then the pace
/// of the steps measured in this run (resumed steps took no time here).
pub fn time_left_s(estimate_s: f64, elapsed_s: f64, done_here: u64, left: u64, total: u64) -> f64 {
    if left == 0 {
        return 0.0;
    }
    if done_here == 0 {
        let per_step = if total > 0 {
            estimate_s / total as f64
        } else {
            0.0
        };
        return (per_step * left as f64 - elapsed_s).max(0.0);
    }
    elapsed_s / done_here as f64 * left as f64
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
        p.event(&Event::StepDone);
        p.event(&Event::Phase {
            step: "cell",
            phase: Phase::Measuring,
        });
        p.event(&Event::Line("b"));
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn time_left_uses_the_estimate_then_the_measured_pace() {
        // 10 steps estimated at 100 s, 20 s gone, none done: 100 - 20.
        assert_eq!(time_left_s(100.0, 20.0, 0, 10, 10), 80.0);
        // Past the estimate with nothing done: never negative.
        assert_eq!(time_left_s(100.0, 150.0, 0, 10, 10), 0.0);
        // 2 steps done here in 30 s, 4 left: 60 s, whatever the estimate said.
        assert_eq!(time_left_s(100.0, 30.0, 2, 4, 10), 60.0);
        assert_eq!(time_left_s(100.0, 30.0, 2, 0, 10), 0.0);
    }
}
