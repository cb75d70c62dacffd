//! A finished search -> `results.json` (checked against `docs/capacity.schema.json`) and the
//! console summary. Pure: the caller writes the files.

use crate::capacity::flow::KeepsUp;
use crate::capacity::plan::By;
use crate::capacity::run::{CapacityConfig, CapacityRun, Probe};
use crate::capacity::search::{Ending, Outcome};
use crate::capacity::slo::Objective;
use serde_json::{json, Value};

/// The version of `results.json`'s shape.
pub const SCHEMA_VERSION: u32 = 1;

fn outcome_str(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::NotYet => "not_yet",
        Outcome::ClientBound => "client_bound",
    }
}

fn ending_str(e: Ending) -> &'static str {
    match e {
        Ending::Resolved => "resolved",
        Ending::PassedAtMax => "passed_at_max",
        Ending::ClientBound { .. } => "client_bound",
        Ending::Stopped => "stopped",
    }
}

fn objective_json(o: &Objective) -> Value {
    match *o {
        Objective::Latency {
            percent, max_ms, ..
        } => {
            json!({"key": o.key(), "percentile": percent, "max_ms": max_ms})
        }
        Objective::Errors { max } => json!({"key": o.key(), "max_fraction": max}),
        Objective::Attainment { min } => json!({"key": o.key(), "min_fraction": min}),
    }
}

/// A load as written: whole streams, or a rate in requests per second.
fn load_json(by: By, load: u64) -> Value {
    match by {
        By::Concurrency => json!(load),
        By::Rate { .. } => json!(by.value(load)),
    }
}

fn keeps_up_json(k: &KeepsUp) -> Value {
    json!({
        "arrival_per_s": k.arrival_per_s,
        "completion_per_s": k.completion_per_s,
        "lo": k.lo,
        "hi": k.hi,
        "floor_per_s": k.floor_per_s,
        "dispersion": k.dispersion,
        "verdict": verdict_str(k.verdict),
    })
}

fn verdict_str(v: crate::capacity::decide::Verdict) -> &'static str {
    match v {
        crate::capacity::decide::Verdict::Pass => "pass",
        crate::capacity::decide::Verdict::Fail => "fail",
        crate::capacity::decide::Verdict::NotYet => "not_yet",
    }
}

fn probe_json(p: &Probe, by: By) -> Value {
    let objectives: Vec<Value> = p
        .decision
        .judged
        .iter()
        .map(|j| {
            let unit = match j.objective {
                Objective::Latency { .. } => "ms",
                _ => "fraction",
            };
            json!({
                "key": j.objective.key(),
                "threshold": j.objective.threshold(),
                "unit": unit,
                "samples": j.n,
                "estimate": j.estimate,
                "lo": j.lo,
                "hi": j.hi,
                "verdict": verdict_str(j.verdict),
            })
        })
        .collect();
    let mut v = json!({
        "outcome": outcome_str(p.outcome),
        "rounds": p.rounds,
        "wall_s": p.wall_s,
        "settled": p.settled.as_str(),
        "client_bound_reasons": p.client_bound,
        "output_tok_per_s": p.throughput.output_tok_per_s(),
        "requests_per_s": p.throughput.requests_per_s(),
        "goodput_requests_per_s": p.throughput.goodput_requests_per_s(),
        "objectives": objectives,
    });
    v[by.key()] = load_json(by, p.load);
    if let Some(k) = &p.keeps_up {
        v["keeps_up"] = keeps_up_json(k);
    }
    v
}

/// The probe that speaks for a load in the answer: its last one (a Client-bound probe is
/// repeated at the same load).
fn last_at(run: &CapacityRun, load: Option<u64>) -> Option<&Probe> {
    let load = load?;
    run.probes.iter().rev().find(|p| p.load == load)
}

/// The `answer` object: the loads under `by`'s key (`concurrency`, or `request_rate` in
/// requests per second).
pub fn answer(run: &CapacityRun, by: By) -> Value {
    let c = run.conclusion;
    let at = last_at(run, c.largest_pass);
    let failed_objective = last_at(run, c.smallest_fail).and_then(|p| p.first_failed());
    let load = |l: Option<u64>| l.map_or(Value::Null, |l| load_json(by, l));
    let mut v = json!({
        "failing_certain": c.fail_certain,
        "failed_objective": failed_objective,
        "ending": ending_str(c.ending),
        "client_bound_at": load(match c.ending { Ending::ClientBound { load } => Some(load), _ => None }),
        "stopped_by": run.stopped,
        "output_tok_per_s": at.and_then(|p| p.throughput.output_tok_per_s()),
        "requests_per_s": at.and_then(|p| p.throughput.requests_per_s()),
        "goodput_requests_per_s": at.and_then(|p| p.throughput.goodput_requests_per_s()),
    });
    v[by.key()] = load(c.largest_pass);
    v[format!("smallest_failing_{}", by.key())] = load(c.smallest_fail);
    v
}

/// The arrivals' gamma shape as written: a number, or `"inf"` for constant gaps (JSON has no
/// infinity, and `null` would say "not recorded").
fn burstiness_json(b: f64) -> Value {
    if b.is_finite() {
        json!(b)
    } else {
        json!("inf")
    }
}

/// The arrivals in words: `Poisson arrivals`, `gamma arrivals, burstiness 0.5`, `constant gaps`.
pub fn arrivals_text(burstiness: f64) -> String {
    if burstiness == 1.0 {
        "Poisson arrivals".into()
    } else if burstiness.is_infinite() {
        "constant gaps (burstiness inf)".into()
    } else {
        format!("gamma arrivals, burstiness {burstiness}")
    }
}

/// The whole `results.json`.
pub fn to_json(cfg: &CapacityConfig, run: &CapacityRun) -> Value {
    // The workload sent (`--context max` resolved).
    let w = &run.workload;
    // Exact lengths are the random dataset's with no range; other datasets bring their own.
    let random = w.dataset.kind == crate::workload::datasets::DatasetKind::Random
        && w.dataset.random_range_ratio == 0.0
        && w.dataset.random_output_range_ratio.is_none();
    let by = cfg.by;
    let mut workload = json!({
        "by": match by { By::Concurrency => "concurrency", By::Rate { .. } => "rate" },
        "input_len": random.then_some(w.dataset.random_input_len),
        "output_len": random.then_some(w.dataset.random_output_len),
        "seed": w.dataset.seed,
        "dataset": w.dataset.kind.as_str(),
        "dataset_path": w.dataset.path.as_ref().map(|p| p.display().to_string()),
        "endpoint": w.connection.endpoint,
        "dataset_samples": run.dataset.map(|d| d.samples),
        "dataset_requests": run.dataset.map(|d| d.sent),
    });
    if let By::Rate { burstiness, .. } = by {
        workload["burstiness"] = burstiness_json(burstiness);
    }
    let settings = match by {
        By::Concurrency => json!({
            "confidence": cfg.confidence,
            "resolution": cfg.search.resolution,
            "start": cfg.search.start,
            "growth": cfg.search.growth,
            "max_concurrency": cfg.search.max,
            "round_requests": cfg.round,
            "max_rounds": cfg.max_rounds,
            "max_time_s": cfg.max_time.as_secs_f64(),
        }),
        By::Rate { step, .. } => json!({
            "confidence": cfg.confidence,
            "resolution": step,
            "start": by.value(cfg.search.start),
            "growth": cfg.search.growth,
            "max_request_rate": by.value(cfg.search.max),
            "round_requests": cfg.round,
            "max_rounds": cfg.max_rounds,
            "max_time_s": cfg.max_time.as_secs_f64(),
        }),
    };
    json!({
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "llmspeed", "version": crate::VERSION},
        "server": {
            "base_url": w.connection.base_url, "model": run.model, "engine": run.engine,
            "simulated_server": cfg.simulated,
        },
        "started_unix_s": run.started_unix_s,
        "workload": workload,
        "slo": cfg.slo.objectives.iter().map(objective_json).collect::<Vec<_>>(),
        "settings": settings,
        "answer": answer(run, by),
        "probes": run.probes.iter().map(|p| probe_json(p, by)).collect::<Vec<_>>(),
        "wall_s": run.wall_s,
    })
}

/// The console summary: the answer in a sentence or two, then one line per probe.
pub fn summary(cfg: &CapacityConfig, run: &CapacityRun) -> String {
    let c = run.conclusion;
    let slo: Vec<String> = cfg.slo.objectives.iter().map(|o| o.to_string()).collect();
    let by = cfg.by;
    let resolution = match by {
        By::Concurrency => cfg.search.resolution.to_string(),
        By::Rate { step, burstiness } => format!(
            "{} req/s, {}",
            crate::capacity::plan::fmt_rate(step),
            arrivals_text(burstiness)
        ),
    };
    let mut s = format!(
        "Capacity under {} (confidence {:.0}%, resolution {resolution}):\n",
        slo.join(", "),
        cfg.confidence * 100.0,
    );
    let fail = match (c.smallest_fail, c.fail_certain) {
        (Some(f), true) => {
            let why = last_at(run, Some(f))
                .and_then(|p| p.first_failed())
                .map_or(String::new(), |k| format!(" ({k} failed first)"));
            format!("{} fails{why}", by.describe(f))
        }
        (Some(f), false) => format!(
            "{} was not shown to pass (not certain: its probe ran out of rounds undecided)",
            by.describe(f)
        ),
        (None, _) => "no failing load was found".into(),
    };
    match c.largest_pass {
        Some(p) => s += &format!("  largest passing {}; {fail}\n", by.describe(p)),
        None => s += &format!("  no {} passed; {fail}\n", by.key().replace('_', " ")),
    }
    if let Some(p) = last_at(run, c.largest_pass) {
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        s += &format!(
            "  at {}: {} output tok/s, {} requests/s, goodput {} requests/s\n",
            by.describe(p.load),
            f(p.throughput.output_tok_per_s()),
            f(p.throughput.requests_per_s()),
            f(p.throughput.goodput_requests_per_s())
        );
    }
    match c.ending {
        Ending::Resolved => {}
        Ending::PassedAtMax => {
            s += match by {
                By::Concurrency => "  every concurrency up to --max-concurrency passed\n",
                By::Rate { .. } => "  every request rate up to --max-rate passed\n",
            }
        }
        Ending::ClientBound { load } => {
            s += &format!("  stopped: the client fell behind twice at {} (Client-bound): the figures there are the client's, not the server's\n", by.describe(load))
        }
        Ending::Stopped => {
            s += &format!(
                "  stopped by {} before the search resolved: not certain\n",
                run.stopped.unwrap_or("a stop")
            )
        }
    }
    for (i, p) in run.probes.iter().enumerate() {
        s += &format!(
            "  probe {}: {} {} ({} round(s), {:.1} s): {}\n",
            i + 1,
            by.describe(p.load),
            outcome_str(p.outcome),
            p.rounds,
            p.wall_s,
            p.judged_text()
        );
    }
    s
}
