//! A probe round's records -> the decision's samples and the round's throughput. Pure.
//!
//! Which requests speak for the load: a closed loop opens with a burst (all C requests sent at
//! once, prefilled together) and closes with a tail (fewer than C in flight). Neither is the
//! load being probed, so a request counts — its latencies, and its success or failure for
//! `errors` and `attainment` — only when it lies inside the round's steady window, the span in
//! which all C slots were busy (`bench::engine::steady` at 100% of the target): it started at
//! or after the window opened and ended by the time it closed (a failed request: started
//! inside it), and it was not one of the C that opened the round. Without a steady window
//! (no request succeeded) every request but the burst counts.
//!
//! Throughput is the window's: successful requests that ended inside it, their output
//! tokens, and those that met every per-request threshold (goodput), over its length.

use crate::bench::engine::record::RequestRecord;
use crate::bench::engine::steady::detect_window;
use crate::capacity::decide::{attains, RequestFigures, Samples};
use crate::capacity::slo::Slo;

const NS_PER_MS: f64 = 1e6;

/// What a round adds besides its samples: the throughput inside its steady window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throughput {
    /// Seconds of steady window.
    pub window_s: f64,
    /// Successful requests that ended inside the window, and their output tokens.
    pub completed: u64,
    pub output_tokens: u64,
    /// Of those, the requests that met every per-request threshold (goodput's numerator).
    pub good: u64,
}

impl Throughput {
    pub fn add(&mut self, o: Throughput) {
        self.window_s += o.window_s;
        self.completed += o.completed;
        self.output_tokens += o.output_tokens;
        self.good += o.good;
    }

    pub fn output_tok_per_s(&self) -> Option<f64> {
        (self.window_s > 0.0).then(|| self.output_tokens as f64 / self.window_s)
    }

    pub fn requests_per_s(&self) -> Option<f64> {
        (self.window_s > 0.0).then(|| self.completed as f64 / self.window_s)
    }

    pub fn goodput_requests_per_s(&self) -> Option<f64> {
        (self.window_s > 0.0).then(|| self.good as f64 / self.window_s)
    }
}

/// One request's figures in milliseconds (its gaps written into `gaps`).
pub(crate) fn figures<'a>(r: &RequestRecord, gaps: &'a mut Vec<f64>) -> RequestFigures<'a> {
    gaps.clear();
    gaps.extend(r.itls_ns().map(|g| g as f64 / NS_PER_MS));
    let ok = r.is_success();
    RequestFigures {
        ok,
        ttft_ms: r.ttft_ns().filter(|_| ok).map(|t| t as f64 / NS_PER_MS),
        e2e_ms: r.e2el_ns().filter(|_| ok).map(|t| t as f64 / NS_PER_MS),
        tpot_ms: r.tpot_ns().filter(|_| ok).map(|t| t / NS_PER_MS),
        itl_ms: if ok { gaps } else { &[] },
    }
}

/// The samples and throughput of one round: `records` by request number (dispatch order: the
/// first `concurrency` are the opening burst), `duration_s` the round's.
pub fn of_round(
    slo: &Slo,
    records: &[(usize, &RequestRecord)],
    concurrency: u64,
    duration_s: f64,
) -> (Samples, Throughput) {
    let only: Vec<RequestRecord> = records.iter().map(|(_, r)| (*r).clone()).collect();
    let window = detect_window(&only, concurrency as usize, 1.0, 0.0, duration_s);
    let (open, close) = window
        .as_ref()
        .map_or((0, u64::MAX), |w| (w.open_ns, w.close_ns));
    let mut samples = Samples::default();
    let mut through = Throughput {
        window_s: window
            .as_ref()
            .map_or(0.0, |w| (w.close_ns - w.open_ns) as f64 / 1e9),
        ..Throughput::default()
    };
    let mut gaps = Vec::new();
    for (index, r) in records {
        let f = figures(r, &mut gaps);
        let end = r.end_time_ns();
        if window.is_some() && r.is_success() && open < end && end <= close {
            through.completed += 1;
            through.output_tokens += r.output_tokens;
            through.good += u64::from(attains(slo, &f));
        }
        let burst = (*index as u64) < concurrency;
        let inside = open <= r.start_ns
            && if r.is_success() {
                end <= close
            } else {
                r.start_ns < close
            };
        if !burst && inside {
            samples.push(slo, &f);
        }
    }
    (samples, through)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::ErrorKind;

    const MS: u64 = 1_000_000;

    /// A successful request from `start` ms with tokens at the given ms offsets.
    fn req(start: u64, tokens: &[u64]) -> RequestRecord {
        RequestRecord {
            start_ns: start * MS,
            chunk_times_ns: tokens.iter().map(|t| (start + t) * MS).collect(),
            output_tokens: tokens.len() as u64,
            input_tokens: 10,
            ..RequestRecord::default()
        }
    }

    #[test]
    fn the_opening_burst_and_the_tail_are_left_out() {
        let slo = Slo::parse(&["ttft_p50=1s", "errors=50%"]).unwrap();
        // Concurrency 2: requests 0 and 1 open at 0 (the burst); 2 starts at 100 when 0 ends,
        // 3 at 110 when 1 ends; 4 at 200 when 2 ends. 3 ends at 210 and nothing replaces it:
        // the slots were all busy over [0, 210) ms.
        let recs = [
            req(0, &[50, 100]),
            req(0, &[60, 110]),
            req(100, &[10, 100]),
            req(110, &[10, 100]),
            req(200, &[20, 30]),
        ];
        let indexed: Vec<(usize, &RequestRecord)> = recs.iter().enumerate().collect();
        let (s, t) = of_round(&slo, &indexed, 2, 0.25);
        // 0 and 1 are the burst; 4 ends at 230, after the window: 2 and 3 remain.
        assert_eq!(s.ttft_ms, vec![10.0, 10.0]);
        assert_eq!(s.itl_ms, vec![90.0, 90.0]);
        assert_eq!(s.e2e_ms, vec![100.0, 100.0]);
        assert_eq!((s.requests, s.failed), (2, 0));
        // Ended inside (0, 210]: requests 0 to 3, two tokens each, over 0.21 s.
        assert_eq!((t.completed, t.output_tokens, t.good), (4, 8, 4));
        assert!((t.window_s - 0.21).abs() < 1e-12);
        assert!((t.output_tok_per_s().unwrap() - 8.0 / 0.21).abs() < 1e-9);
    }

    #[test]
    fn a_failed_request_counts_as_an_error_without_latencies() {
        let slo = Slo::parse(&["ttft_p50=1s", "errors=50%"]).unwrap();
        let mut bad = req(5, &[]);
        bad.error = Some(ErrorKind::HttpStatus);
        let recs = [req(0, &[5, 10]), bad.clone(), bad];
        let indexed: Vec<(usize, &RequestRecord)> = recs.iter().enumerate().collect();
        // Concurrency 1: request 0 is the burst and the window is its span, [0, 10) ms; the
        // failed requests started inside it.
        let (s, _) = of_round(&slo, &indexed, 1, 1.0);
        assert_eq!((s.requests, s.failed), (2, 2));
        assert!(s.ttft_ms.is_empty());
    }
}
