//! `matrix --slo`: each context row of a finished speed-test matrix read the way an operator
//! reads it — the largest concurrency whose decode cell meets every objective, with every
//! smaller measured concurrency meeting them too. Pure: the matrix report in, the
//! [`SloTable`] out.
//!
//! **Why the grid's cells and not a search per context.** The grid has already measured each
//! (context, concurrency) for `--duration` with a closed loop at that context; a search per
//! context would run the server again for every row (ten probes or so each) to answer at a
//! resolution the grid was not asked for. Reading the grid is honest on three conditions, all
//! kept here: (1) each cell is judged by the same rule as a `capacity` probe — an interval from
//! the cell's own samples at the stated confidence, pass / fail / not yet, never a point
//! estimate against the threshold; (2) the answer is at the grid's resolution: the truth lies
//! between the largest passing and the next measured concurrency, and the row says which; (3) a
//! cell the client could have decided (its lag over 10% of a threshold, the `capacity` rule) or
//! that was not measured (Over capacity, Skipped, Failed without figures) ends the row's
//! reading: nothing past it is claimed. For a finer answer, run `llmspeed capacity` on the
//! context in question.
//!
//! The samples of a cell are the requests its window holds: TTFT of every request sent and
//! answered inside it; E2E and TPOT (its mean time between tokens) of every request that
//! started and ended inside it; errors and attainment over those requests; ITL from the cell's
//! gap histogram (every gap inside the window, binned 10 to a decade), where the interval's
//! ends are the outer edges of the bins holding the bounding order statistics — a wider
//! interval than the gaps themselves would give, never a narrower one.
//!
//! The decode cells' prompt is shared by the row's streams and warmed before the row, so a
//! TTFT read here is the time to first token of a cached prompt under that load (queueing and
//! admission), not of a fresh prompt's prefill: docs/capacity.md says so beside the table.

use crate::capacity::client::{bound_reasons, Lag};
use crate::capacity::decide::{decide, judge, Judged, RequestFigures, Samples, Verdict};
use crate::capacity::interval::order_bounds;
use crate::capacity::slo::{Metric, Objective, Slo};
use crate::report::model::{DecodeCell, GapHistogram, SloCell, SloJudged, SloRow, SloTable};
use crate::report::status::CellStatus;

/// The table for a report's decode grid (`decode`, row-major) under `slo` (given as `specs`).
pub fn read(decode: &[DecodeCell], specs: &[String], slo: &Slo, confidence: f64) -> SloTable {
    let mut contexts: Vec<(u64, String)> = Vec::new();
    for c in decode {
        if !contexts.iter().any(|(t, _)| *t == c.context) {
            contexts.push((c.context, c.context_label.clone()));
        }
    }
    let rows = contexts
        .into_iter()
        .map(|(context, label)| {
            let mut cells: Vec<&DecodeCell> =
                decode.iter().filter(|c| c.context == context).collect();
            cells.sort_by_key(|c| c.concurrency);
            row(context, label, &cells, slo, confidence)
        })
        .collect();
    SloTable {
        objectives: specs.to_vec(),
        confidence,
        rows,
    }
}

fn row(context: u64, label: String, cells: &[&DecodeCell], slo: &Slo, conf: f64) -> SloRow {
    let judged: Vec<SloCell> = cells.iter().map(|c| cell(c, slo, conf)).collect();
    let mut largest = None;
    let mut failing = None;
    let mut failed_objective = None;
    let mut note = "every measured concurrency passed: the answer is at least the largest measured"
        .to_string();
    for (c, j) in cells.iter().zip(&judged) {
        match j.verdict.as_str() {
            "pass" => largest = Some(c.concurrency),
            "fail" => {
                failing = Some(c.concurrency);
                failed_objective = j
                    .objectives
                    .iter()
                    .find(|o| o.verdict == "fail")
                    .map(|o| o.key.clone());
                note = match largest {
                    Some(p) => format!(
                        "between {p} and {} (the grid's resolution here)",
                        c.concurrency
                    ),
                    None => "the smallest measured concurrency failed".into(),
                };
                break;
            }
            "client_bound" => {
                note = format!(
                    "stopped at {}: Client-bound ({})",
                    c.concurrency,
                    j.client_bound_reasons.join("; ")
                );
                break;
            }
            "not_yet" => {
                note = format!(
                    "stopped at {}: undecided (too few samples in its window for the interval; a longer --duration gives more)",
                    c.concurrency
                );
                break;
            }
            _ => {
                note = format!(
                    "stopped at {}: not measured ({})",
                    c.concurrency,
                    c.status.label()
                );
                break;
            }
        }
    }
    SloRow {
        context,
        context_label: label,
        largest_concurrency: largest,
        smallest_failing_concurrency: failing,
        failed_objective,
        note,
        cells: judged,
    }
}

/// Whether a cell's window carries figures to judge.
fn measured(c: &DecodeCell) -> bool {
    c.has_figures()
        && matches!(
            c.status,
            CellStatus::Valid | CellStatus::Queued | CellStatus::ClientBound | CellStatus::Looped
        )
}

/// One cell judged: its samples, each objective's interval and verdict, the cell's verdict.
pub fn cell(c: &DecodeCell, slo: &Slo, confidence: f64) -> SloCell {
    if !measured(c) {
        return SloCell {
            concurrency: c.concurrency,
            verdict: "not_measured".into(),
            objectives: Vec::new(),
            client_bound_reasons: Vec::new(),
        };
    }
    let s = samples(c, slo);
    let mut d = decide(slo, &s, confidence);
    // ITL from the histogram, not from samples (the cell keeps no gap list).
    for j in &mut d.judged {
        if let Objective::Latency {
            metric: Metric::Itl,
            percent,
            max_ms,
        } = j.objective
        {
            *j = itl_judged(
                j.objective,
                c.gap_histogram.as_ref(),
                percent,
                max_ms,
                confidence,
            );
        }
    }
    let verdict = if d.judged.iter().any(|j| j.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if d.judged.iter().all(|j| j.verdict == Verdict::Pass) {
        Verdict::Pass
    } else {
        Verdict::NotYet
    };
    let lag = c.client_lag.as_ref().map_or(Lag::default(), |l| Lag {
        dispatch_p99: l.dispatch_lag_ms.map(|d| d.p99),
        ttft_p99_bound: l.bounds_ms.ttft_p99.map(|b| b.bound),
        gap_p99_bound: l.bounds_ms.itl_p99.map(|b| b.bound),
    });
    let reasons = bound_reasons(&lag, slo);
    let client_bound = !reasons.is_empty();
    SloCell {
        concurrency: c.concurrency,
        verdict: if client_bound {
            "client_bound".into()
        } else {
            match verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "fail",
                Verdict::NotYet => "not_yet",
            }
            .into()
        },
        objectives: d.judged.iter().map(judged).collect(),
        client_bound_reasons: reasons,
    }
}

fn judged(j: &Judged) -> SloJudged {
    SloJudged {
        key: j.objective.key(),
        threshold: j.objective.threshold(),
        samples: j.n,
        estimate: j.estimate,
        lo: j.lo,
        hi: j.hi,
        verdict: match j.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::NotYet => "not_yet",
        }
        .into(),
    }
}

/// The cell's requests as samples (ITL aside).
fn samples(c: &DecodeCell, slo: &Slo) -> Samples {
    let window_ms = c.measured_s.unwrap_or(0.0) * 1000.0;
    let mut s = Samples::default();
    for r in &c.requests {
        let inside = r.start_ms >= 0.0 && r.end_ms.is_some_and(|e| e <= window_ms);
        if !inside {
            // A request sent inside the window and answered there still gives its TTFT.
            if r.error.is_none() {
                s.ttft_ms.extend(r.ttft_ms);
            }
            continue;
        }
        let e2e = r.end_ms.map(|e| e - r.start_ms);
        let figures = RequestFigures {
            ok: r.error.is_none(),
            ttft_ms: r.ttft_ms,
            e2e_ms: e2e,
            tpot_ms: r.tbt_ms_mean.filter(|_| r.output_tokens > 1),
            itl_ms: &[],
        };
        s.push(slo, &figures);
    }
    s
}

/// An ITL percentile judged from the gap histogram: the order statistics that bound it fall in
/// known bins; the interval runs from the lower edge of the lower one's bin to the upper edge
/// of the upper one's. The estimate is the histogram's exact percentile where it keeps that
/// one (p50, p90, p99), else the middle of its bin.
fn itl_judged(
    objective: Objective,
    h: Option<&GapHistogram>,
    percent: f64,
    max_ms: f64,
    confidence: f64,
) -> Judged {
    let Some(h) = h.filter(|h| h.gaps > 0) else {
        return judge(&objective, &Samples::default(), confidence);
    };
    // The bin holding the k-th smallest gap (1-based).
    let bin_of = |k: u64| {
        let mut seen = 0;
        for (i, n) in h.counts.iter().enumerate() {
            seen += n;
            if seen >= k {
                return i;
            }
        }
        h.counts.len() - 1
    };
    let b = order_bounds(h.gaps, percent / 100.0, confidence);
    let lo = b.lower.map(|l| h.edge_ms(bin_of(l)));
    let hi = b.upper.map(|u| h.edge_ms(bin_of(u) + 1));
    let exact = [(50.0, h.p50_ms), (90.0, h.p90_ms), (99.0, h.p99_ms)]
        .iter()
        .find(|(p, _)| *p == percent)
        .map(|(_, v)| *v);
    let rank = ((percent / 100.0) * h.gaps as f64).ceil().max(1.0) as u64;
    let mid = {
        let i = bin_of(rank);
        (h.edge_ms(i) * h.edge_ms(i + 1)).sqrt()
    };
    let verdict = if hi.is_some_and(|hi| hi <= max_ms) {
        Verdict::Pass
    } else if lo.is_some_and(|lo| lo > max_ms) {
        Verdict::Fail
    } else {
        Verdict::NotYet
    };
    Judged {
        objective,
        n: h.gaps,
        estimate: Some(exact.unwrap_or(mid)),
        lo,
        hi,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::RequestSummary;

    fn req(start: f64, ttft: f64, end: f64, tbt: f64) -> RequestSummary {
        RequestSummary {
            stream: 0,
            start_ms: start,
            ttft_ms: Some(ttft),
            tbt_ms_mean: Some(tbt),
            end_ms: Some(end),
            output_tokens: 16,
            window_tokens: 16,
            finish_reason: None,
            error: None,
            looped: false,
            request_id: None,
        }
    }

    fn cell_with(concurrency: u64, ttft: f64) -> DecodeCell {
        let mut c = DecodeCell::empty(1024, "1K", concurrency, CellStatus::Valid);
        c.output_tok_per_s = Some(100.0);
        c.measured_s = Some(100.0);
        c.requests = (0..100)
            .map(|i| req(f64::from(i), ttft, f64::from(i) + 500.0, 10.0))
            .collect();
        c
    }

    #[test]
    fn a_row_passes_up_to_the_first_failing_cell_and_names_its_objective() {
        let slo = Slo::parse(&["ttft_p90=80ms"]).unwrap();
        let decode = vec![
            cell_with(1, 20.0),
            cell_with(2, 30.0),
            cell_with(4, 200.0),
            cell_with(8, 20.0),
        ];
        let t = read(&decode, &["ttft_p90=80ms".into()], &slo, 0.95);
        let row = &t.rows[0];
        assert_eq!(row.largest_concurrency, Some(2));
        assert_eq!(row.smallest_failing_concurrency, Some(4));
        assert_eq!(row.failed_objective.as_deref(), Some("ttft_p90"));
        assert!(row.note.contains("between 2 and 4"), "{}", row.note);
        // Nothing past the first failing cell is claimed, though 8 would pass.
        assert_eq!(row.cells[3].verdict, "pass");
        // Too few samples for a p90: undecided, and the row stops there.
        let mut few = cell_with(16, 20.0);
        few.requests.truncate(10);
        let decode = vec![cell_with(1, 20.0), few];
        let row = &read(&decode, &[], &slo, 0.95).rows[0];
        assert_eq!(row.largest_concurrency, Some(1));
        assert_eq!(row.smallest_failing_concurrency, None);
        assert!(row.note.contains("undecided"), "{}", row.note);
    }

    #[test]
    fn itl_from_the_histogram_is_bounded_by_bin_edges() {
        // 1,000 gaps: 900 in the bin [39.8, 50.1) ms, 100 in [50.1, 63.1) ms.
        let mut counts = vec![0u64; 80];
        counts[46] = 900;
        counts[47] = 100;
        let h = GapHistogram {
            lo_us: 1.0,
            bins_per_decade: 10,
            counts,
            gaps: 1000,
            p50_ms: 45.0,
            p90_ms: 50.0,
            p99_ms: 60.0,
        };
        let o = Objective::Latency {
            metric: Metric::Itl,
            percent: 50.0,
            max_ms: 55.0,
        };
        let j = itl_judged(o, Some(&h), 50.0, 55.0, 0.95);
        assert_eq!(j.verdict, Verdict::Pass);
        assert!((j.hi.unwrap() - h.edge_ms(47)).abs() < 1e-9);
        assert!((j.lo.unwrap() - h.edge_ms(46)).abs() < 1e-9);
        assert_eq!(j.estimate, Some(45.0));
        // p99 lies in the upper bin, which straddles 55 ms: not decidable from bins.
        let j = itl_judged(o, Some(&h), 99.0, 55.0, 0.95);
        assert_eq!(j.verdict, Verdict::NotYet);
        // ...but clearly over 40 ms.
        let j = itl_judged(o, Some(&h), 99.0, 40.0, 0.95);
        assert_eq!(j.verdict, Verdict::Fail);
    }
}
