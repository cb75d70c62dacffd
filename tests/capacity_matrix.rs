//! `llmspeed matrix --slo`: the finished grid read per context row (`capacity::grid`) against
//! the simulated server whose answer follows from its settings, and the answer in every file
//! of the results folder: results.json (schema-checked), report.md, report.html, slo.csv.
//!
//! **The truth.** As in `capacity_mock.rs`'s TTFT case: decode steps of 10 ms + 5 ms per
//! running sequence, at most `max_num_seqs` = 3 running, prefill made nearly free, 16-token
//! outputs, the context terms of the step set to 0 (so every context row has the same answer).
//! Below the cap no request waits: its first token comes at the end of the step that admits it,
//! under two steps (2 x 25 ms = 50 ms at 3). At 4 one stream is always queued: the mean wait is
//! (C - M) x L x step / M = 1 x 16 x 25 / 3 = 133 ms, no wait exceeds L + 1 steps (425 ms), so
//! more than 10% of waits exceed 100 ms (P(w > x) >= (133 - x) / (425 - x)): `ttft_p90=100ms`
//! holds at 3 and fails at 4. (The threshold is 100 ms, not the 80 of `capacity_mock.rs`, so
//! that 10% of it, the client's allowed share, is 10 ms: the first cell of a run on a busy
//! machine showed a dispatch lag p99 over 8 ms, and was rightly called Client-bound.) Grid 2, 3, 4:
//! every row's answer is 3, the smallest failing 4, `ttft_p90` failing.
//! Cost: 6 decode cells of 8 s (the one at 4 waits 2 s for its gate first), about 70 s.

mod support;

use llmspeed::analysis::repetition::RepetitionConfig;
use llmspeed::capacity::slo::Slo;
use llmspeed::clock::Clock;
use llmspeed::matrix::plan::{ContextSpec, PlanConfig};
use llmspeed::matrix::run::{HeaderFacts, MatrixConfig, PromptMode};
use llmspeed::mock::MockConfig;
use llmspeed::net::{Cancel, Client, ClientConfig, Target};
use llmspeed::server::Overrides;
use quick_xml::events::Event;
use quick_xml::Reader;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use support::mock::{runtime, MockThread};

const CONTEXTS: [u64; 2] = [256, 512];

fn mock() -> MockConfig {
    support::mock::analytic(3, 10_000.0, 5_000.0)
}

fn config(out: &Path, url: &str) -> MatrixConfig {
    MatrixConfig {
        tokenizer: None,
        images: None,
        plan: PlanConfig {
            contexts: Some(CONTEXTS.iter().map(|&c| ContextSpec::Tokens(c)).collect()),
            prefill_contexts: Some(Vec::new()),
            concurrency: Some(vec![2, 3, 4]),
            max_tokens: 16,
            margin: 64,
            prefill_samples: 1,
        },
        duration: Duration::from_secs(8),
        model: None,
        chat: false,
        prompt_mode: PromptMode::Auto,
        seed: 3,
        ignore_eos: true,
        out_dir: out.to_path_buf(),
        resume: false,
        resume_force: false,
        retry_looped: false,
        repetition: RepetitionConfig {
            min_repeats: 4,
            min_span: 600,
            max_period: 512,
        },
        overrides: Overrides::default(),
        header: HeaderFacts::default(),
        ready_timeout: Duration::from_secs(2),
        ready_stable: Duration::from_millis(300),
        drain_timeout: Duration::from_secs(10),
        ready_check_timeout: Duration::ZERO,
        base_url: url.into(),
        insecure: false,
        skip_warmup: false,
        prompt_cache: None,
    }
}

fn schema_errors(v: &Value) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/results.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    val.iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// `(context, largest, failing)` of each `tr.slo-row` of report.html, parsed as XML.
fn html_rows(page: &str) -> Vec<(String, String, String)> {
    let mut reader = Reader::from_str(page);
    let mut rows = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    loop {
        match reader.read_event().expect("well-formed") {
            Event::Start(t) | Event::Empty(t) => {
                let attr = |k: &str| {
                    t.attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == k.as_bytes())
                        .map(|a| String::from_utf8(a.value.to_vec()).unwrap())
                };
                if t.name().as_ref() == b"tr" && attr("class").as_deref() == Some("slo-row") {
                    current = Some((attr("data-context").unwrap(), Vec::new()));
                } else if t.name().as_ref() == b"td" {
                    if let (Some((_, vs)), Some(v)) = (current.as_mut(), attr("data-v")) {
                        vs.push(v);
                    }
                }
            }
            Event::End(t) if t.name().as_ref() == b"tr" => {
                if let Some((c, vs)) = current.take() {
                    rows.push((c, vs[0].clone(), vs[1].clone()));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    rows
}

#[test]
fn every_context_row_answers_the_batch_cap_in_every_file() {
    let server = MockThread::start(mock());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    let cfg = config(&out, &server.url());
    let client = Client::new(
        ClientConfig::new(Target::parse(&server.url()).unwrap()),
        Clock::new(),
    )
    .unwrap();
    let specs = vec!["ttft_p90=100ms".to_string()];
    let slo = Slo::parse(&specs).unwrap();
    let mut report = runtime()
        .block_on(llmspeed::cli::matrix::run_async(
            &client,
            &cfg,
            false,
            &Cancel::new(),
        ))
        .map_err(|e| e.message)
        .unwrap();
    server.stop();
    llmspeed::cli::matrix::add_slo(&mut report, &specs, &slo, 0.95, &out)
        .map_err(|e| e.message)
        .unwrap();
    eprintln!("{}", llmspeed::report::console::summary(&report));

    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(schema_errors(&v), Vec::<String>::new());
    let rows = v["slo"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), CONTEXTS.len());
    // A row whose reading a Client-bound cell stopped claims nothing past it (and never a wrong
    // answer); every other row answers exactly. On this busy machine the run's very first cell
    // has shown a dispatch lag p99 of 16 ms (over 10% of 100 ms) in each of three runs, the
    // later ones none: at least one row must answer.
    let mut answered = Vec::new();
    for r in rows {
        let cells = r["cells"].as_array().unwrap();
        let verdicts: Vec<&str> = cells
            .iter()
            .map(|c| c["verdict"].as_str().unwrap())
            .collect();
        if let Some(at) = verdicts.iter().position(|v| *v == "client_bound") {
            assert!(at < 2, "{r}");
            assert!(verdicts[..at].iter().all(|v| *v == "pass"), "{r}");
            assert_eq!(r["smallest_failing_concurrency"], Value::Null, "{r}");
            assert!(
                r["note"].as_str().unwrap().contains("Client-bound ("),
                "{r}"
            );
            continue;
        }
        assert_eq!(r["largest_concurrency"], 3, "{r}");
        assert_eq!(r["smallest_failing_concurrency"], 4, "{r}");
        assert_eq!(r["failed_objective"], "ttft_p90", "{r}");
        assert_eq!(verdicts, ["pass", "pass", "fail"]);
        // The failing cell's interval lies above the threshold; the passing ones' below.
        assert!(cells[2]["objectives"][0]["lo"].as_f64().unwrap() > 100.0);
        assert!(cells[1]["objectives"][0]["hi"].as_f64().unwrap() <= 100.0);
        answered.push(r);
    }
    assert!(!answered.is_empty(), "no row answered: {rows:?}");

    // report.md: one table row per context with the answer.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Capacity under the SLO"));
    for r in &answered {
        let line = format!(
            "| {} | 3 | 4 | ttft_p90 |",
            r["context_label"].as_str().unwrap()
        );
        assert!(md.contains(&line), "{line} in:\n{md}");
    }

    // report.html: the rows' exact values.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let got = html_rows(&page);
    let want: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let s = |v: &Value| v.as_u64().map_or(String::new(), |v| v.to_string());
            (
                r["context"].to_string(),
                s(&r["largest_concurrency"]),
                s(&r["smallest_failing_concurrency"]),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert!(got.iter().any(|g| g.1 == "3" && g.2 == "4"));

    // slo.csv: the answer row of each context, then each cell's objective with the JSON's
    // figures.
    let csv = std::fs::read_to_string(out.join("slo.csv")).unwrap();
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(lines[0][0], "context");
    for (i, r) in rows.iter().enumerate() {
        let ctx = r["context"].to_string();
        let of_ctx: Vec<&Vec<&str>> = lines[1..].iter().filter(|l| l[0] == ctx).collect();
        assert_eq!(of_ctx.len(), 1 + 3, "context {i}");
        let s = |v: &Value| v.as_u64().map_or(String::new(), |v| v.to_string());
        assert_eq!(of_ctx[0][2], s(&r["largest_concurrency"]));
        assert_eq!(of_ctx[0][3], s(&r["smallest_failing_concurrency"]));
        for (cell, line) in r["cells"].as_array().unwrap().iter().zip(&of_ctx[1..]) {
            let j = &cell["objectives"][0];
            assert_eq!(line[5], cell["concurrency"].to_string());
            assert_eq!(line[6], cell["verdict"].as_str().unwrap());
            assert_eq!(
                line[8].parse::<f64>().unwrap(),
                j["estimate"].as_f64().unwrap()
            );
        }
    }
}
