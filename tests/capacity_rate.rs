//! `llmspeed capacity --by rate` against the simulated server, whose capacity in requests per
//! second follows from its own settings: the search must land on that knee within its
//! resolution, and the probe past it must fail because the server fell behind.
//!
//! **The knee.** The mock (`mock::engine`) runs at most S = `max_num_seqs` sequences; a new one
//! is admitted at the start of a step, its prompt is prefilled in that step (nearly free here:
//! 32 tokens at 10^9 tok/s) and its first token comes at the step's end; each later step
//! decodes one token of every prefilled sequence and lasts base + per_seq x d, d the number
//! decoding (the prefill step's sequence is not among them; the context terms are 0 here). A
//! request of L output tokens thus holds a slot for exactly L steps: one prefill step and L - 1
//! decode steps. With a queue, all S slots stay full: over K steps there are K·S slot-steps,
//! so K·S / L completions, and the decode batches sum to K·S·(L - 1) / L. A step pays `base`
//! unless every running sequence is new in it, which can happen at most once in L steps. So
//! the most the server completes per second, μ, lies between
//!
//!   S / (L·base + (L - 1)·S·per_seq)   and   S / ((L - 1)·(base + S·per_seq)),
//!
//! and arrivals faster than μ grow the queue without bound, slower ones do not. (Not
//! S / (L · step(S)): the first token's step is a prefill step, not a full decode.) With
//! S = 4, L = 8, base = 2 ms, per_seq = 2.5 ms: μ is between 4 / 86 ms = 46.51 and
//! 4 / 84 ms = 47.62 requests per second.
//!
//! **The search.** Resolution 20 req/s, so the loads are 20, 40, 60, 80: the knee sits inside
//! (40, 60), 16% above 40 and 21% below 60, and more than half a step (the keeps-up rule's
//! slack, `capacity::flow`) under 60 — short probes can tell both sides apart. From 20 the
//! bracket doubles (20, 40, 80), then bisects (60): the answer is 40, the smallest failing 60.
//! At 40 (ρ = 0.86) the queue is bounded: `ttft_p90=1s` is far above its p90 (waits of a
//! fraction of a request's ~90 ms). At 60 the queue grows by about 13 requests a second, so
//! within a 2-second round the last arrivals wait about half a second — under the 1 s
//! threshold: TTFT alone would pass this over-capacity probe. It fails on **keeps-up**: the
//! server completes about 47 requests per second while 60 arrive, and the completions'
//! interval lies wholly under the arrival rate.
//!
//! **ITL in rate.** No objective on the gaps has a crisp analytic answer here: below the knee
//! the decode batch is random (its distribution under Poisson arrivals has no closed form for
//! this engine), so the rate at which a gap percentile crosses a threshold is not computable by
//! hand; only the trivial cases are (a threshold at or above step(S) never fails, so the answer
//! is the knee; one under step(1) never passes).

mod support;

use llmspeed::capacity::plan::{By, Workload};
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::{Ending, SearchConfig};
use llmspeed::capacity::slo::Slo;
use llmspeed::mock::MockConfig;
use llmspeed::net::Cancel;
use serde_json::Value;
use std::time::Duration;
use support::mock::{runtime, MockThread};

const S: u32 = 4;
const L: u32 = 8;
const BASE_US: f64 = 2_000.0;
const PER_SEQ_US: f64 = 2_500.0;

fn mock() -> MockConfig {
    support::mock::analytic(S, BASE_US, PER_SEQ_US)
}

/// The knee's bounds from the settings (see the module's derivation), requests per second.
fn knee() -> (f64, f64) {
    let (s, l) = (f64::from(S), f64::from(L));
    let (base, per_seq) = (BASE_US / 1e6, PER_SEQ_US / 1e6);
    (
        s / (l * base + (l - 1.0) * s * per_seq),
        s / ((l - 1.0) * (base + s * per_seq)),
    )
}

fn schema_errors(v: &Value) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/capacity.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    val.iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// One search at a time: each is a client and a server measuring real time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs a rate search in steps of `step` req/s from one step up to `max` steps against a mock
/// with `m`'s settings, Poisson arrivals; returns results.json and the summary.
fn search(m: MockConfig, slo: &[&str], output_len: u32, step: f64, max: u64) -> (Value, String) {
    search_with(m, slo, output_len, step, 1.0, max)
}

/// [`search`] with arrivals of gamma shape `burstiness`.
fn search_with(
    m: MockConfig,
    slo: &[&str],
    output_len: u32,
    step: f64,
    burstiness: f64,
    max: u64,
) -> (Value, String) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = MockThread::start(m);
    let cfg = CapacityConfig {
        workload: Workload::random(&server.url(), None, 32, output_len, 1),
        by: By::Rate { step, burstiness },
        slo: Slo::parse(slo).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max,
        },
        round: 120,
        max_rounds: 8,
        max_time: Duration::from_secs(120),
        drain_timeout: Duration::from_secs(10),
        settle: Duration::from_millis(100),
        simulated: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let run = runtime()
        .block_on(llmspeed::cli::capacity::run_async(
            &cfg,
            dir.path(),
            &Cancel::new(),
        ))
        .map_err(|e| e.message)
        .unwrap();
    server.stop();
    let summary = llmspeed::capacity::results::summary(&cfg, &run);
    eprintln!("{summary}");
    let text = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(schema_errors(&v), Vec::<String>::new());
    // The arrivals' shape is recorded, and every keeps-up interval was built for it.
    let b = &v["workload"]["burstiness"];
    if burstiness.is_finite() {
        assert_eq!(b.as_f64(), Some(burstiness));
    } else {
        assert_eq!(b, "inf");
    }
    for p in v["probes"].as_array().unwrap() {
        let phi = p["keeps_up"]["dispersion"].as_f64().unwrap();
        assert_eq!(phi, (1.0 / burstiness).max(1.0), "{p}");
    }
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    page_holds_keeps_up(&page, &v);
    assert_eq!(run.conclusion.ending, Ending::Resolved, "{summary}");
    (v, summary)
}

/// The page's probe table carries each probe's rate and keeps-up figures exactly as
/// results.json has them.
fn page_holds_keeps_up(page: &str, v: &Value) {
    let rows: Vec<&str> = page.split("<tr class=\"probe\"").skip(1).collect();
    let probes = v["probes"].as_array().unwrap();
    assert_eq!(rows.len(), probes.len());
    let attr = |row: &str, name: &str| -> String {
        let at = row
            .find(&format!("{name}=\""))
            .unwrap_or_else(|| panic!("{name} in {row}"));
        let rest = &row[at + name.len() + 2..];
        rest[..rest.find('"').unwrap()].to_string()
    };
    for (row, p) in rows.iter().zip(probes) {
        assert_eq!(attr(row, "data-load"), p["request_rate"].to_string());
        let cell = &row[row.find("class=\"keeps-up\"").expect("a keeps-up cell")..];
        let k = &p["keeps_up"];
        for (a, f) in [
            ("data-completion", "completion_per_s"),
            ("data-lo", "lo"),
            ("data-hi", "hi"),
            ("data-arrival", "arrival_per_s"),
        ] {
            assert_eq!(
                attr(cell, a).parse::<f64>().unwrap(),
                k[f].as_f64().unwrap(),
                "{a}"
            );
        }
        assert_eq!(attr(cell, "data-verdict"), k["verdict"].as_str().unwrap());
    }
    // The keeps-up chart: a mark per probe, its completions and interval, the arrivals it was
    // held to, and its keeps-up verdict, as the file has them.
    let chart = &page[page.find("id=\"o-keeps_up\"").expect("a keeps-up chart")..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    let marks: Vec<&str> = chart.split("<g class=\"probe\"").skip(1).collect();
    assert_eq!(marks.len(), probes.len());
    for (mark, p) in marks.iter().zip(probes) {
        let k = &p["keeps_up"];
        assert_eq!(
            attr(mark, "data-x").parse::<f64>().unwrap(),
            p["request_rate"].as_f64().unwrap()
        );
        for (a, f) in [
            ("data-estimate", "completion_per_s"),
            ("data-lo", "lo"),
            ("data-hi", "hi"),
            ("data-reference", "arrival_per_s"),
        ] {
            assert_eq!(
                attr(mark, a).parse::<f64>().unwrap(),
                k[f].as_f64().unwrap(),
                "{a}"
            );
        }
        assert_eq!(attr(mark, "data-verdict"), k["verdict"].as_str().unwrap());
    }
}

#[test]
fn a_rate_search_finds_the_knee_where_the_queue_stops_being_bounded() {
    let (lo, hi) = knee();
    assert!((46.5..46.6).contains(&lo) && (47.6..47.7).contains(&hi));
    let step = 20.0;
    let (v, summary) = search(mock(), &["ttft_p90=1s"], L, step, 10);
    let a = &v["answer"];
    assert_eq!(v["workload"]["by"], "rate");
    assert!(a.get("concurrency").is_none(), "{a}");
    // The knee lies between the answer and the smallest failing rate, one step apart.
    let (pass, fail) = (
        a["request_rate"].as_f64().unwrap(),
        a["smallest_failing_request_rate"].as_f64().unwrap(),
    );
    assert!(pass < lo && hi < fail && fail - pass <= step, "{a}");
    assert_eq!((pass, fail), (40.0, 60.0), "{a}");
    assert_eq!(a["failing_certain"], true);
    // Past the knee TTFT held within this short probe: the server falling behind failed it.
    assert_eq!(a["failed_objective"], "keeps_up", "{summary}");
    let probes = v["probes"].as_array().unwrap();
    // The loads the search decided, in order; a Client-bound probe (the busy machine's client
    // fell behind) is repeated at its load and decides nothing.
    let rates: Vec<f64> = probes
        .iter()
        .filter(|p| p["outcome"] != "client_bound")
        .map(|p| p["request_rate"].as_f64().unwrap())
        .collect();
    assert_eq!(rates, vec![20.0, 40.0, 80.0, 60.0], "{summary}");
    let at = |r: f64| probes.iter().rfind(|p| p["request_rate"] == r).unwrap();
    let over = &at(60.0)["keeps_up"];
    assert_eq!(over["verdict"], "fail");
    // What the server completed past the knee is its capacity: μ within the interval's
    // reach of the bounds above (the interval's upper end under the 60 arriving).
    let done = over["completion_per_s"].as_f64().unwrap();
    assert!(over["hi"].as_f64().unwrap() < over["arrival_per_s"].as_f64().unwrap());
    assert!(done > 0.9 * lo && done < 1.1 * hi, "{over}");
    // Below the knee it kept up, and the throughput at the answer is the offered 40 req/s
    // (each of L tokens).
    assert_eq!(at(40.0)["keeps_up"]["verdict"], "pass");
    let rps = a["requests_per_s"].as_f64().unwrap();
    assert!((rps - 40.0).abs() < 8.0, "{rps}");
    let tok = a["output_tok_per_s"].as_f64().unwrap();
    assert!((tok / rps - f64::from(L)).abs() < 1e-9, "{tok} {rps}");
}

/// **Errors in rate.** With `--load-fault status=500@0.2` a request fails with probability
/// 0.2 per request already in the engine when it arrives. Poisson arrivals see the engine as
/// it is on average over time (PASTA), and by Little's law the mean number in the engine is
/// the accepted rate times the mean time in it, W: the failed share s obeys
/// s = 0.2 · λ (1 − s) · W, so s = x / (1 + x) with x = 0.2 λ W (a failed request never enters
/// the engine). With `max_num_seqs` 64, per_seq 0 (every step base = 2 ms) and L = 32 tokens
/// nothing waits: a request is admitted at the next step boundary (at once if the engine is
/// idle), so W lies between (L − 1) and (L + 1) steps, 62 to 66 ms. `errors=30%` is
/// x = 3/7, so the largest rate is λ* = 3 / (7 · 0.2 · W): between 32.5 and 34.6 req/s. In steps
/// of 22 req/s: at 22, s is 21-23% (passes); at 44, 35-37% (fails). The truth is 22.
#[test]
fn an_error_objective_in_rate_finds_where_the_load_dependent_fault_rate_crosses_it() {
    let mut m = support::mock::analytic(64, 2_000.0, 0.0);
    m.load_faults = vec!["status=500@0.2".parse().unwrap()];
    let (v, summary) = search(m, &["errors=30%"], 32, 22.0, 8);
    let a = &v["answer"];
    assert_eq!(a["request_rate"], 22.0, "{summary}");
    assert_eq!(a["smallest_failing_request_rate"], 44.0, "{summary}");
    assert_eq!(a["failed_objective"], "errors", "{summary}");
    // Each probe's share sits where PASTA and Little's law put it.
    for p in v["probes"].as_array().unwrap() {
        let rate = p["request_rate"].as_f64().unwrap();
        let share = p["objectives"][0]["estimate"].as_f64().unwrap();
        let x = |w: f64| 0.2 * rate * w;
        let (lo, hi) = (x(0.062) / (1.0 + x(0.062)), x(0.066) / (1.0 + x(0.066)));
        assert!(
            share > lo - 0.06 && share < hi + 0.06,
            "{rate}: {share} vs [{lo}, {hi}]"
        );
    }
}

/// **Bursty and smooth arrivals.** The knee is where the queue stops being bounded, μ from the
/// settings above whatever the arrivals' shape: with a queue all S slots stay full, and the
/// derivation never looks at when the requests came. So the answer is the same 40 with 60
/// failing at burstiness 0.5 (gamma gaps with CV² = 2: clumps of arrivals, and the keeps-up
/// interval twice the Poisson variance, `capacity::flow`) and at 4 (CV² = 1/4: nearly even
/// gaps, the Poisson width kept). At 40 (ρ = 0.86) even the bursty queue's TTFT p90 stays far
/// under 1 s; at 60 the server completes about 47 a second of 60 arriving, and either the
/// rate check or the growing wait fails it.
#[test]
fn bursty_and_smooth_arrivals_find_the_same_knee() {
    let (lo, hi) = knee();
    for burstiness in [0.5, 4.0] {
        let (v, summary) = search_with(mock(), &["ttft_p90=1s"], L, 20.0, burstiness, 10);
        let a = &v["answer"];
        let (pass, fail) = (
            a["request_rate"].as_f64().unwrap(),
            a["smallest_failing_request_rate"].as_f64().unwrap(),
        );
        assert!(pass < lo && hi < fail, "{burstiness}: {summary}");
        assert_eq!((pass, fail), (40.0, 60.0), "{burstiness}: {summary}");
        assert_eq!(a["failing_certain"], true, "{burstiness}: {summary}");
        let probes = v["probes"].as_array().unwrap();
        let at = |r: f64| probes.iter().rfind(|p| p["request_rate"] == r).unwrap();
        assert_eq!(at(40.0)["keeps_up"]["verdict"], "pass", "{summary}");
        // Past the knee the completions are the server's capacity, whatever the arrivals.
        let over = &at(60.0)["keeps_up"];
        let done = over["completion_per_s"].as_f64().unwrap();
        assert!(done > 0.9 * lo && done < 1.1 * hi, "{burstiness}: {over}");
        assert!(
            summary.contains(&format!("burstiness {burstiness}")),
            "{summary}"
        );
    }
}

fn parse(args: &[&str]) -> Result<CapacityConfig, String> {
    use llmspeed::cli::{try_parse, Command};
    let mut argv: Vec<std::ffi::OsString> = vec!["llmspeed".into(), "capacity".into()];
    argv.extend(args.iter().map(|a| a.into()));
    let a = match try_parse(argv).map_err(|e| e.to_string())?.command {
        Command::Capacity(a) => a,
        other => panic!("not capacity: {other:?}"),
    };
    llmspeed::cli::capacity::config(&a, "http://127.0.0.1:9".into()).map_err(|e| e.message)
}

#[test]
fn burstiness_is_a_rate_flag_with_bench_serves_values() {
    let base = [
        "--base-url",
        "http://127.0.0.1:9",
        "--slo",
        "ttft_p99=1s",
        "--out",
        "/nonexistent",
    ];
    let with = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        parse(&v)
    };
    let burst = |c: CapacityConfig| match c.by {
        By::Rate { burstiness, .. } => burstiness,
        By::Concurrency => panic!("not rate"),
    };
    assert_eq!(burst(with(&["--by", "rate"]).unwrap()), 1.0);
    assert_eq!(
        burst(with(&["--by", "rate", "--burstiness", "0.5"]).unwrap()),
        0.5
    );
    assert!(burst(with(&["--by", "rate", "--burstiness", "inf"]).unwrap()).is_infinite());
    for bad in ["0", "-1", "nan"] {
        let e = with(&["--by", "rate", "--burstiness", bad]).unwrap_err();
        assert!(e.contains("--burstiness"), "{bad}: {e}");
    }
    // A closed loop has no arrival process to shape: refused, by name.
    let e = with(&["--burstiness", "0.5"]).unwrap_err();
    assert!(e.contains("--burstiness") && e.contains("--by rate"), "{e}");
}
