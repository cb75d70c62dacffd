//! Renders `progress::Event`s: one live display (indicatif) on a terminal, plain log lines
//! otherwise (CI, pipes, `--no-progress`). Owns the choice of mode and the words; what a run
//! reports, and when, is the runner's.

use crate::progress::{time_left_s, Event, Headroom, Pace, Phase, Progress, TimeLeft};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Plain mode prints live figures at most this often (the display redraws on every event).
const PLAIN_LIVE_EVERY: Duration = Duration::from_secs(5);

/// Whether the live display is used: asked for, and both stdout and stderr are terminals (a
/// redirected stdout means a log is being kept; escape sequences would spoil it).
pub fn live_wanted(no_progress: bool) -> bool {
    !no_progress && std::io::stderr().is_terminal() && std::io::stdout().is_terminal()
}

enum Mode {
    Live(ProgressBar),
    Plain { last_live: Option<Instant> },
}

/// The CLI's progress sink; `tag` prefixes every plain line (`[matrix]`).
pub struct Display {
    tag: &'static str,
    /// What a finished step is called in the counts ("steps", "requests").
    unit: &'static str,
    mode: Mode,
    total: u64,
    done: u64,
    done_here: u64,
    estimate_s: f64,
    estimate_done_s: f64,
    started: Instant,
    step: String,
    phase: Option<Phase>,
    live: Option<(f64, u64, f64)>,
    /// The client's headroom, as last reported while measuring.
    headroom: Option<Headroom>,
    /// The plan's time left, once the runner sent its plan (the matrix); else the count pace.
    eta: Option<TimeLeft>,
}

impl Display {
    pub fn new(tag: &'static str, unit: &'static str, live: bool) -> Self {
        let mode = if live {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{spinner} {pos}/{len} {prefix} [{bar:24}] {elapsed} | {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(unit);
            Mode::Live(bar)
        } else {
            Mode::Plain { last_live: None }
        };
        Self {
            tag,
            unit,
            mode,
            total: 0,
            done: 0,
            done_here: 0,
            estimate_s: 0.0,
            estimate_done_s: 0.0,
            started: Instant::now(),
            step: String::new(),
            phase: None,
            live: None,
            headroom: None,
            eta: None,
        }
    }

    /// Clears the display (the summary that follows is printed on a clean terminal).
    pub fn finish(&self) {
        if let Mode::Live(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }

    /// "about 1m05s left", or "estimating…" before anything measured says.
    fn left_text(&self) -> String {
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let left = match &self.eta {
            Some(eta) => eta.left_s(elapsed_s),
            None => time_left_s(&Pace {
                left: self.total.saturating_sub(self.done),
                done_here: self.done_here,
                estimate_at_start_s: self.estimate_s,
                estimate_done_s: self.estimate_done_s,
                elapsed_s,
            }),
        };
        left.map_or_else(
            || "estimating…".into(),
            |s| format!("about {} left", clock_text(s)),
        )
    }

    fn message(&self) -> String {
        let mut m = self.step.clone();
        if let Some(p) = self.phase {
            m.push_str(": ");
            m.push_str(p.as_str());
        }
        if let (Some(Phase::Measuring), Some((tps, active, left))) = (self.phase, self.live) {
            m.push_str(&format!(
                " {left:.0} s left, {tps:.0} tok/s live, {active} streams"
            ));
        }
        let running = matches!(self.phase, Some(Phase::Measuring | Phase::Requests));
        if let Some(h) = self.headroom.filter(|_| running) {
            let text = h.text();
            if !text.is_empty() {
                m.push_str("; ");
                m.push_str(&text);
            }
        }
        m.push_str(&format!(" | run: {}", self.left_text()));
        m
    }

    fn plain(&self, s: &str) {
        eprintln!("[{}] {s}", self.tag);
    }
}

/// `1h02m`, `3m05s`, `42s`.
pub fn clock_text(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

impl Progress for Display {
    fn event(&mut self, e: &Event<'_>) {
        if matches!(e, Event::Plan(_)) {
            self.eta.get_or_insert_with(TimeLeft::default);
        }
        if let Some(eta) = &mut self.eta {
            eta.observe(self.started.elapsed().as_secs_f64(), e);
        }
        match *e {
            Event::Plan(_) | Event::PrefillRate { .. } => {}
            Event::Line(s) => match &self.mode {
                Mode::Live(bar) => bar.println(format!("[{}] {s}", self.tag)),
                Mode::Plain { .. } => self.plain(s),
            },
            Event::Start {
                total,
                done,
                estimate_s,
            } => {
                (self.total, self.done, self.estimate_s) = (total, done, estimate_s);
                self.started = Instant::now();
                match &self.mode {
                    Mode::Live(bar) => {
                        bar.set_length(total);
                        bar.set_position(done);
                        // Ticking from here: setup before it (warm-up logs of bench serve)
                        // writes its lines without a spinner redrawing between them.
                        bar.enable_steady_tick(Duration::from_millis(200));
                    }
                    Mode::Plain { .. } if done > 0 => self.plain(&format!(
                        "{} {} to run, {done} already done",
                        total.saturating_sub(done),
                        self.unit
                    )),
                    Mode::Plain { .. } => self.plain(&format!("{total} {} to run", self.unit)),
                }
            }
            Event::Phase { step, phase } => {
                self.step.clear();
                self.step.push_str(step);
                self.phase = Some(phase);
                self.live = None;
                self.headroom = None;
            }
            Event::Live {
                tok_per_s,
                active,
                left_s,
            } => {
                self.live = Some((tok_per_s, active, left_s));
                if let Mode::Plain { last_live } = &mut self.mode {
                    if last_live.is_some_and(|t| t.elapsed() < PLAIN_LIVE_EVERY) {
                        return;
                    }
                    *last_live = Some(Instant::now());
                    let mut line = format!(
                        "{}: {tok_per_s:.0} tok/s live, {active} streams active, {left_s:.0} s left",
                        self.step
                    );
                    let room = self.headroom.map(|h| h.text()).unwrap_or_default();
                    if !room.is_empty() {
                        line.push_str("; ");
                        line.push_str(&room);
                    }
                    self.plain(&line);
                }
            }
            Event::Headroom(h) => {
                self.headroom = Some(h);
                // Plain mode prints it with the matrix's next live line; `bench serve` sends no
                // live line, so its requests phase prints it alone, as often.
                if let (Mode::Plain { last_live }, Some(Phase::Requests)) =
                    (&mut self.mode, self.phase)
                {
                    let text = h.text();
                    if text.is_empty() || last_live.is_some_and(|t| t.elapsed() < PLAIN_LIVE_EVERY)
                    {
                        return;
                    }
                    *last_live = Some(Instant::now());
                    let line = format!("{}: {text}", self.step);
                    self.plain(&line);
                }
            }
            Event::StepDone { estimate_s } => {
                self.done += 1;
                self.done_here += 1;
                self.estimate_done_s += estimate_s;
                match &self.mode {
                    Mode::Live(bar) => bar.set_position(self.done),
                    // Requests finish by the hundred: their count is the bar's job only.
                    Mode::Plain { .. } if self.unit != "requests" => self.plain(&format!(
                        "{} of {} {} done, {}",
                        self.done,
                        self.total,
                        self.unit,
                        self.left_text()
                    )),
                    Mode::Plain { .. } => {}
                }
            }
        }
        if let Mode::Live(bar) = &self.mode {
            bar.set_message(self.message());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_text_units() {
        assert_eq!(clock_text(0.4), "0s");
        assert_eq!(clock_text(42.0), "42s");
        assert_eq!(clock_text(185.0), "3m05s");
        assert_eq!(clock_text(3720.0), "1h02m");
        assert_eq!(clock_text(-5.0), "0s");
    }

    #[test]
    fn the_message_shows_phase_countdown_and_live_figures() {
        let mut d = Display::new("matrix", "steps", false);
        d.event(&Event::Start {
            total: 4,
            done: 0,
            estimate_s: 400.0,
        });
        d.event(&Event::Phase {
            step: "cell 8K x 4",
            phase: Phase::Measuring,
        });
        d.event(&Event::Live {
            tok_per_s: 123.4,
            active: 4,
            left_s: 17.2,
        });
        let m = d.message();
        assert!(
            m.starts_with(
                "cell 8K x 4: measuring 17 s left, 123 tok/s live, 4 streams | run: about "
            ),
            "{m}"
        );
        // The client's headroom joins the live figures while measuring, and goes with them.
        d.event(&Event::Headroom(Headroom::of(
            2,
            60_000,
            50_000,
            Some(0.3),
            1.0,
            2,
        )));
        let m = d.message();
        assert!(
            m.starts_with("cell 8K x 4: measuring 17 s left, 123 tok/s live, 4 streams; client: read lag 30 µs mean, 50 µs max, CPU 15% of 2 cores | run: "),
            "{m}"
        );
        d.event(&Event::Phase {
            step: "cell 8K x 4",
            phase: Phase::Draining,
        });
        assert!(d.message().starts_with("cell 8K x 4: draining | run:"));
        assert!(!d.message().contains("client:"));
        // `bench serve`'s requests phase shows it too.
        d.event(&Event::Phase {
            step: "requests",
            phase: Phase::Requests,
        });
        d.event(&Event::Headroom(Headroom::of(
            1, 2_500_000, 2_500_000, None, 1.0, 2,
        )));
        assert!(
            d.message()
                .starts_with("requests: requests; client: read lag 2.5 ms mean, 2.5 ms max | run:"),
            "{}",
            d.message()
        );
    }

    #[test]
    fn the_matrix_says_it_is_estimating_until_a_step_of_each_kind_was_measured() {
        let mut d = Display::new("matrix", "steps", false);
        d.event(&Event::Start {
            total: 2,
            done: 0,
            estimate_s: 0.0,
        });
        let work = [
            crate::progress::Work::Prefill {
                tokens: 1000,
                samples: 1,
            },
            crate::progress::Work::Cell { window_s: 30.0 },
        ];
        d.event(&Event::Plan(&work));
        assert!(
            d.message().ends_with("| run: estimating…"),
            "{}",
            d.message()
        );
        d.event(&Event::PrefillRate {
            tokens: 1000,
            tok_per_s: 1e9,
        });
        d.event(&Event::StepDone { estimate_s: 0.0 });
        // The cell has no measured ramp and drain yet.
        assert!(
            d.message().ends_with("| run: estimating…"),
            "{}",
            d.message()
        );
        d.event(&Event::StepDone { estimate_s: 0.0 });
        assert!(
            d.message().ends_with("| run: about 0s left"),
            "{}",
            d.message()
        );
    }
}
