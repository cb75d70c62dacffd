//! `llmspeed capacity`'s page: a search against the simulated server (the ITL case of
//! `capacity_mock.rs`, truth 4) writes `report.html` beside `results.json`; the page, parsed as
//! XML (it is written as polyglot markup), holds every probe's figures exactly as the file does
//! — load, outcome and per objective the estimate, interval ends and verdict, in the table and
//! as the chart's marks — the threshold line at the objective's threshold and the answer line at
//! the answer. Then `report site` over the folder links the run and draws the same page.
//! Cost: one search of six probes, about 15 s.

mod support;

use llmspeed::capacity::plan::Workload;
use llmspeed::capacity::run::CapacityConfig;
use llmspeed::capacity::search::SearchConfig;
use llmspeed::capacity::slo::Slo;
use llmspeed::mock::MockConfig;
use llmspeed::net::Cancel;
use quick_xml::events::Event;
use quick_xml::Reader;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use support::mock::{runtime, MockThread};

/// One element: its name and attributes.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: BTreeMap<String, String>,
}

impl Element {
    fn attr(&self, k: &str) -> &str {
        self.attrs.get(k).map_or("", String::as_str)
    }
}

/// Every element of the page; panics when it is not well-formed (a tag left open or closed out
/// of order).
fn parse(page: &str) -> Vec<Element> {
    let mut reader = Reader::from_str(page);
    reader.config_mut().check_end_names = true;
    let mut out = Vec::new();
    let mut depth = 0i64;
    loop {
        let ev = reader.read_event().unwrap_or_else(|e| {
            panic!("not well-formed at byte {}: {e}", reader.buffer_position())
        });
        match ev {
            Event::Start(ref t) | Event::Empty(ref t) => {
                let attrs = t
                    .attributes()
                    .map(|a| {
                        let a = a.expect("a well-formed attribute");
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                            String::from_utf8(a.value.to_vec()).unwrap(),
                        )
                    })
                    .collect();
                out.push(Element {
                    name: String::from_utf8(t.name().as_ref().to_vec()).unwrap(),
                    attrs,
                });
                if matches!(ev, Event::Start(_)) {
                    depth += 1;
                }
            }
            Event::End(_) => depth -= 1,
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "every element closed");
    out
}

/// A JSON figure as the page's `data-*` writes it: the number's own digits, empty for null.
fn data(v: &Value) -> String {
    v.as_f64().map_or(String::new(), |x| x.to_string())
}

fn mock() -> MockConfig {
    support::mock::analytic(64, 10_000.0, 10_000.0)
}

/// Checks `page` against `v` (results.json): every probe's row and marks, the lines.
fn assert_page_holds(page: &str, v: &Value) {
    let els = parse(page);
    let probes = v["probes"].as_array().unwrap();
    assert!(probes.len() >= 3, "a search of several probes: {v}");
    let rows: Vec<&Element> = els
        .iter()
        .filter(|e| e.name == "tr" && e.attr("class") == "probe")
        .collect();
    assert_eq!(rows.len(), probes.len());
    let cells: Vec<&Element> = els
        .iter()
        .filter(|e| e.name == "td" && e.attr("class") == "judged")
        .collect();
    let marks: Vec<&Element> = els
        .iter()
        .filter(|e| e.name == "g" && e.attr("class") == "probe")
        .collect();
    let objectives = v["slo"].as_array().unwrap().len();
    assert_eq!(cells.len(), probes.len() * objectives);
    assert_eq!(marks.len(), probes.len() * objectives);
    for (i, p) in probes.iter().enumerate() {
        assert_eq!(rows[i].attr("data-load"), p["concurrency"].to_string());
        assert_eq!(rows[i].attr("data-outcome"), p["outcome"].as_str().unwrap());
        for (k, j) in p["objectives"].as_array().unwrap().iter().enumerate() {
            let c = cells[i * objectives + k];
            assert_eq!(c.attr("data-key"), j["key"].as_str().unwrap());
            assert_eq!(c.attr("data-samples"), j["samples"].to_string());
            assert_eq!(c.attr("data-estimate"), data(&j["estimate"]), "probe {i}");
            assert_eq!(c.attr("data-lo"), data(&j["lo"]), "probe {i}");
            assert_eq!(c.attr("data-hi"), data(&j["hi"]), "probe {i}");
            assert_eq!(c.attr("data-verdict"), j["verdict"].as_str().unwrap());
            // The chart draws the figures in its own unit: ms as they are.
            let m = marks[k * probes.len() + i];
            assert_eq!(m.attr("data-x"), p["concurrency"].to_string());
            assert_eq!(m.attr("data-estimate"), data(&j["estimate"]));
            assert_eq!(m.attr("data-lo"), data(&j["lo"]));
            assert_eq!(m.attr("data-hi"), data(&j["hi"]));
            assert_eq!(m.attr("data-verdict"), p["outcome"].as_str().unwrap());
        }
    }
    let line = |class: &str| {
        els.iter()
            .filter(|e| e.name == "line" && e.attr("class") == class)
            .map(|e| e.attr("data-v").to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(line("threshold"), vec!["55".to_string()]);
    assert_eq!(line("answer"), vec![v["answer"]["concurrency"].to_string()]);
    let answer_cell = |id: &str| {
        let at = els.iter().position(|e| e.attr("id") == id).unwrap();
        els[at + 2].attr("data-v").to_string()
    };
    assert_eq!(
        answer_cell("a-pass"),
        v["answer"]["concurrency"].to_string()
    );
    assert_eq!(
        answer_cell("a-fail"),
        v["answer"]["smallest_failing_concurrency"].to_string()
    );
}

#[test]
fn the_page_holds_every_probe_and_the_site_links_it() {
    let server = MockThread::start(mock());
    let cfg = CapacityConfig {
        workload: Workload::random(&server.url(), None, 32, 16, 1),
        by: llmspeed::capacity::plan::By::Concurrency,
        slo: Slo::parse(&["itl_p95=55ms"]).unwrap(),
        confidence: 0.95,
        search: SearchConfig {
            start: 1,
            growth: 2.0,
            resolution: 1,
            max: 64,
        },
        round: 12,
        max_rounds: 6,
        max_time: Duration::from_secs(240),
        drain_timeout: Duration::from_secs(10),
        settle: Duration::from_millis(100),
        simulated: Some("the simulated server (test)".into()),
    };
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("cap");
    runtime()
        .block_on(llmspeed::cli::capacity::run_async(
            &cfg,
            &out,
            &Cancel::new(),
        ))
        .map_err(|e| e.message)
        .unwrap();
    server.stop();
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_page_holds(&page, &v);
    assert!(
        page.contains(
            "<title>Capacity under an SLO · mock-model on the simulated server (test)</title>"
        ),
        "the title says what ran"
    );

    // The site: the folder is one run, its page linked from the index and drawn the same.
    let site = root.path().join("site");
    let built = llmspeed::report::site::build(std::slice::from_ref(&out), &site).unwrap();
    assert_eq!(built.runs, 1, "skipped: {:?}", built.skipped);
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    // The index carries a script, so it is not polyglot markup: its links are read as text.
    let links: Vec<String> = index
        .split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|h| h.starts_with("runs/") && h.ends_with(".html"))
        .map(String::from)
        .collect();
    assert!(!links.is_empty(), "the index links the run");
    let run_page = std::fs::read_to_string(site.join(&links[0])).unwrap();
    assert!(run_page.contains("href=\"../index.html\""), "a way back");
    assert_page_holds(&run_page, &v);
}
