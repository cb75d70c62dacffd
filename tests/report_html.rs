//! report.html and compare.html, golden structure (not pixels): for a recorded `matrix --mock`
//! results.json and for the hand-built report with every status, the page is well-formed, has
//! every required section and chart element, and holds no address that would load anything.

mod report_common;

use llmspeed::matrix::status::CellStatus;
use llmspeed::report::{compare, files, html, json, DecodeCell, MatrixReport, RequestSummary};
use quick_xml::events::Event;
use quick_xml::Reader;

/// Recorded with `llmspeed matrix --mock --contexts 1k,4k --concurrency 1,2,4 --duration 1s
/// --max-tokens 64 --prefill-samples 2`.
const RECORDED: &str = include_str!("data/matrix_mock_results.json");

fn recorded() -> MatrixReport {
    json::read(RECORDED.as_bytes()).expect("the recorded results.json reads")
}

fn render(r: &MatrixReport) -> String {
    let mut out = Vec::new();
    html::write(&mut out, r).expect("report.html renders");
    String::from_utf8(out).expect("UTF-8")
}

/// One element as the parser saw it: its name, its attributes, and the `id`s of the elements
/// around it (innermost last).
#[derive(Debug)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    inside: Vec<String>,
}

impl Element {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn class_has(&self, class: &str) -> bool {
        self.attr("class")
            .is_some_and(|c| c.split_whitespace().any(|x| x == class))
    }
}

/// Parse the page as XML (the templates are written as polyglot markup: every element closed,
/// attributes quoted, only XML's own entities and numeric references), which checks that every
/// tag is closed in order and nothing is left open; an HTML parser would silently repair those.
fn parse(page: &str) -> Vec<Element> {
    let mut reader = Reader::from_str(page);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<(String, Option<String>)> = Vec::new();
    let mut out = Vec::new();
    let mut roots = 0;
    loop {
        let ev = reader.read_event().unwrap_or_else(|e| {
            panic!("not well-formed at byte {}: {e}", reader.buffer_position())
        });
        match ev {
            Event::Start(ref t) | Event::Empty(ref t) => {
                let name = String::from_utf8(t.name().as_ref().to_vec()).unwrap();
                let attrs: Vec<(String, String)> = t
                    .attributes()
                    .map(|a| {
                        let a = a.expect("a well-formed attribute");
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                            String::from_utf8(a.value.to_vec()).unwrap(),
                        )
                    })
                    .collect();
                let id = attrs
                    .iter()
                    .find(|(k, _)| k == "id")
                    .map(|(_, v)| v.clone());
                if stack.is_empty() {
                    roots += 1;
                }
                out.push(Element {
                    name: name.clone(),
                    attrs,
                    inside: stack.iter().filter_map(|(_, id)| id.clone()).collect(),
                });
                if matches!(ev, Event::Start(_)) {
                    stack.push((name, id));
                }
            }
            Event::End(_) => {
                stack.pop().expect("an end tag closes an open element");
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(stack.is_empty(), "left open: {stack:?}");
    assert_eq!(roots, 1, "one root element");
    out
}

/// Every character reference or entity is one XML and HTML both know.
fn assert_entities_known(page: &str) {
    for (i, _) in page.match_indices('&') {
        let rest = &page[i + 1..];
        let end = rest.find(';').unwrap_or_else(|| panic!("bare & at {i}"));
        let name = &rest[..end];
        let ok = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
            || name
                .strip_prefix("#x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            || name
                .strip_prefix('#')
                .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        assert!(ok, "unknown entity &{name}; at {i}");
    }
}

/// Nothing on the page loads anything: no attribute that fetches, no CSS import or url(), and
/// `http(s)://` only inside the base URL the user gave, shown as text.
fn assert_self_contained(page: &str, elements: &[Element], base_url: Option<&str>) {
    for e in elements {
        for (k, v) in &e.attrs {
            assert!(
                !matches!(
                    k.as_str(),
                    "href" | "src" | "srcset" | "action" | "poster" | "data"
                ) && !k.ends_with(":href"),
                "<{} {k}=\"{v}\"> would load or link something",
                e.name
            );
        }
        assert!(
            !matches!(
                e.name.as_str(),
                "a" | "link" | "img" | "iframe" | "object" | "embed"
            ),
            "<{}> element",
            e.name
        );
    }
    assert!(!page.contains("url("), "CSS url()");
    assert!(!page.contains("@import"), "CSS @import");
    let mut rest = page.to_string();
    if let Some(u) = base_url {
        let shown = format!("<span class=\"cmd\">{}</span>", u.replace('/', "&#x2f;"));
        let shown_plain = format!("<span class=\"cmd\">{u}</span>");
        assert!(
            rest.contains(&shown) || rest.contains(&shown_plain),
            "the base URL is shown as text"
        );
        rest = rest.replace(&shown, "").replace(&shown_plain, "");
    }
    for scheme in [
        "http://",
        "https://",
        "http:&#x2f;&#x2f;",
        "https:&#x2f;&#x2f;",
        "//cdn",
    ] {
        assert!(
            !rest.contains(scheme),
            "an address ({scheme}) outside the base URL"
        );
    }
}

fn count(elements: &[Element], name: &str, class: &str) -> usize {
    elements
        .iter()
        .filter(|e| e.name == name && e.class_has(class))
        .count()
}

#[test]
fn the_recorded_run_renders_every_section_and_chart() {
    let r = recorded();
    let page = render(&r);
    let el = parse(&page);
    assert_entities_known(&page);
    assert_self_contained(&page, &el, r.metadata.base_url.as_deref());
    assert!(page.starts_with("<!DOCTYPE html>"));
    for id in [
        "header",
        "settings",
        "decode",
        "prefill",
        "cells",
        "methodology",
        "legend",
    ] {
        assert!(
            el.iter().any(|e| e.attr("id") == Some(id)),
            "section #{id} missing"
        );
    }
    // The heat map: one group per planned cell, inside the decode section.
    let heat: Vec<&Element> = el
        .iter()
        .filter(|e| e.name == "g" && e.attr("data-concurrency").is_some())
        .collect();
    assert_eq!(heat.len(), r.decode.len());
    assert!(heat.iter().all(|e| e.inside.iter().any(|i| i == "decode")));
    // The curves: one polyline per context with two or more measured points, in both charts.
    let logx: Vec<&Element> = el
        .iter()
        .filter(|e| e.name == "svg" && e.class_has("logx"))
        .collect();
    assert_eq!(logx.len(), 4, "two decode curves and two prefill curves");
    let contexts = r.metadata.settings.contexts.len();
    let decode_lines = el
        .iter()
        .filter(|e| e.name == "polyline" && e.inside.iter().any(|i| i == "decode"))
        .count();
    assert_eq!(decode_lines, 2 * contexts);
    // Prefill: each context's samples dotted (the run took 2 per context), in both charts.
    let samples: usize = r.prefill.iter().map(|p| p.ttft_ms_samples.len()).sum();
    assert_eq!(
        el.iter()
            .filter(|e| e.class_has("sample") && e.inside.iter().any(|i| i == "prefill"))
            .count(),
        2 * samples
    );
    // Every measured cell has its details, with both distributions (p50/p90/p99 marks), its
    // tokens and requests over time with the window shaded, and the server's load.
    let measured: Vec<&DecodeCell> = r.decode.iter().filter(|c| c.status.was_run()).collect();
    assert!(!measured.is_empty());
    assert_eq!(count(&el, "details", "cell"), measured.len());
    for c in &measured {
        let id = format!("cell-{}-{}", c.context, c.concurrency);
        let inside = |e: &&Element| e.inside.contains(&id);
        let charts: Vec<&Element> = el
            .iter()
            .filter(|e| e.name == "svg")
            .filter(inside)
            .collect();
        let kinds: Vec<&str> = charts.iter().filter_map(|e| e.attr("class")).collect();
        assert_eq!(
            kinds,
            [
                "chart cdf",
                "chart cdf",
                "chart tokens",
                "chart timeline",
                "chart load"
            ],
            "{id}"
        );
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.class_has("pct"))
                .count(),
            6,
            "{id}: p50, p90, p99 on both distributions"
        );
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.class_has("window"))
                .count(),
            3,
            "{id}: window shaded on the tokens, timeline and load charts"
        );
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.class_has("req"))
                .count(),
            2 * c.requests.len(),
            "{id}: every request on the timeline"
        );
        assert!(el.iter().filter(inside).any(|e| e.class_has("overhead")));
    }
    // The methodology, sentence by sentence, and the legend, status by status.
    assert_eq!(
        el.iter()
            .filter(|e| e.name == "li" && e.inside.iter().any(|i| i == "methodology"))
            .count(),
        r.methodology.len()
    );
    for s in [
        "valid",
        "looped",
        "queued",
        "failed",
        "over_capacity",
        "skipped",
        "pending",
    ] {
        assert!(
            el.iter()
                .any(|e| e.inside.iter().any(|i| i == "legend") && e.class_has(&format!("s-{s}"))),
            "legend: {s}"
        );
    }
}

#[test]
fn the_machine_panel_gap_histograms_and_gpu_charts_render() {
    let mut r = recorded();
    report_common::add_machine_and_gaps(&mut r);
    let page = render(&r);
    let el = parse(&page);
    assert_entities_known(&page);
    assert_self_contained(&page, &el, r.metadata.base_url.as_deref());
    // The machine panel, inside the header: every fact of the client and each GPU.
    let panel = page
        .split("id=\"machine\"")
        .nth(1)
        .and_then(|p| p.split("</table>").next())
        .expect("a machine panel");
    for fact in [
        "AMD EPYC 9654 96-Core Processor",
        ">192<",
        "1,511.6 GiB",
        "Ubuntu 24.04.1 LTS",
        "6.8.0-49-generic · x86_64",
        ">GPU 0<",
        ">GPU 1<",
        "NVIDIA H200 · 140.4 GiB",
        ">nvidia-smi<",
    ] {
        assert!(panel.contains(fact), "machine panel lacks {fact}: {panel}");
    }
    assert!(el
        .iter()
        .any(|e| e.attr("id") == Some("machine") && e.inside.iter().any(|i| i == "header")));
    let measured: Vec<&DecodeCell> = r.decode.iter().filter(|c| c.status.was_run()).collect();
    assert!(!measured.is_empty());
    for c in &measured {
        let id = format!("cell-{}-{}", c.context, c.concurrency);
        let inside = |e: &&Element| e.inside.contains(&id);
        let kinds: Vec<&str> = el
            .iter()
            .filter(|e| e.name == "svg")
            .filter(inside)
            .filter_map(|e| e.attr("class"))
            .collect();
        // The gap histogram replaces the per-request means; GPU utilisation, memory, power
        // (GPU 0 only) and clock follow.
        assert_eq!(
            kinds,
            [
                "chart cdf",
                "chart gaps",
                "chart tokens",
                "chart timeline",
                "chart load",
                "chart gpu",
                "chart gpu",
                "chart gpu",
                "chart gpu"
            ],
            "{id}"
        );
        let in_gaps = |e: &&Element| inside(e) && e.class_has("bar");
        assert_eq!(
            el.iter().filter(in_gaps).count(),
            2,
            "{id}: two filled bins"
        );
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.class_has("pct"))
                .count(),
            6,
            "{id}: p50, p90, p99 on TTFT and on the gaps"
        );
        // The window shaded on tokens, timeline, load and the four GPU charts.
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.class_has("window"))
                .count(),
            7,
            "{id}"
        );
        // Two GPUs: a line each on utilisation, memory and clock; one on power.
        assert_eq!(
            el.iter()
                .filter(inside)
                .filter(|e| e.name == "polyline")
                .filter(|e| e.class_has("line"))
                .count(),
            // TTFT CDF 1, gaps cumulative 1, tokens 1, load 2, GPUs 2 + 2 + 1 + 2.
            1 + 1 + 1 + 2 + 7,
            "{id}"
        );
    }
    for p in [">p50 10.2 ms<", ">p90 11.9 ms<", ">p99 26.0 ms<"] {
        assert_eq!(page.matches(p).count(), measured.len(), "{p}");
    }
    assert_eq!(
        page.matches("1,000 gaps); p50, p90 and p99 are exact")
            .count(),
        measured.len()
    );
}

#[test]
fn absent_gpu_tools_are_said_and_old_files_say_what_they_lack() {
    let mut r = recorded();
    report_common::add_machine_and_gaps(&mut r);
    r.metadata.hardware.gpus.clear();
    r.metadata.hardware.gpu_source =
        Some("absent: neither nvidia-smi nor rocm-smi is on PATH".into());
    for c in &mut r.decode {
        c.gpu_samples.clear();
    }
    let page = render(&r);
    parse(&page);
    assert!(page.contains("absent: neither nvidia-smi nor rocm-smi is on PATH"));
    assert!(!page.contains("chart gpu"));
    assert!(!page.contains(">GPU 0<"));
    // The recorded file predates the machine panel and the gaps: each is said, not drawn empty.
    let old = render(&recorded());
    assert!(old.contains("The machine was not measured"));
    assert!(!old.contains("chart gaps"));
    assert!(old.contains("this file has no per-gap data"));
}

/// The Run table's Hardware cell, as rendered.
fn hardware_cell(page: &str) -> &str {
    let at = page
        .find("<tr><td>Hardware</td><td>")
        .expect("a Hardware row")
        + "<tr><td>Hardware</td><td>".len();
    let end = page[at..].find("</td>").expect("the cell ends") + at;
    &page[at..end]
}

#[test]
fn the_run_table_shows_hardware_told_or_measured_never_the_os_name() {
    // A `matrix --mock` run without --gpu on a machine without GPUs: it printed "linux".
    let mut r = recorded();
    r.metadata.hardware = Default::default();
    r.metadata.hardware.os = Some("linux".into());
    assert_eq!(
        hardware_cell(&render(&r)),
        "no GPU seen on the client; pass --gpu for the server&#x27;s"
    );
    report_common::add_machine_and_gaps(&mut r);
    assert_eq!(
        hardware_cell(&render(&r)),
        "NVIDIA H200 (140.4 GiB); NVIDIA H200 (140.4 GiB) (listed by nvidia-smi on the client)"
    );
    // What the user told wins, as typed.
    r.metadata.hardware.gpu = Some("RTX PRO 6000".into());
    r.metadata.hardware.vram_gb = Some(96.0);
    assert_eq!(hardware_cell(&render(&r)), "RTX PRO 6000 · 96.0 GB");
}

/// The page's `<title>`.
fn title(page: &str) -> &str {
    let at = page.find("<title>").expect("a title") + "<title>".len();
    &page[at..at + page[at..].find("</title>").expect("the title ends")]
}

#[test]
fn the_title_says_what_ran_never_the_hint_to_pass_gpu() {
    // `matrix --mock` with nothing told and no GPU seen: the title named the hint sentence
    // ("mock-model on no GPU seen on the client; pass --gpu for the server's").
    let mut r = recorded();
    r.metadata.hardware = Default::default();
    r.metadata.simulated_server = Some("demo profile: decode 1.5 ms".into());
    let model = r.metadata.model.id.clone();
    assert_eq!(
        title(&render(&r)),
        format!("Speed test matrix · {model} on the simulated server (demo profile)")
    );
    // The hint stays where it belongs: in the hardware row.
    assert!(hardware_cell(&render(&r)).starts_with("no GPU seen on the client"));
    // A real server, nothing told or seen: unrecorded, said as such.
    r.metadata.simulated_server = None;
    assert_eq!(
        title(&render(&r)),
        format!("Speed test matrix · {model} on unrecorded hardware")
    );
    // Hardware told wins over the simulated server.
    r.metadata.simulated_server = Some("demo profile: x".into());
    r.metadata.hardware.gpu = Some("H200".into());
    assert_eq!(
        title(&render(&r)),
        format!("Speed test matrix · {model} on H200")
    );
}

#[test]
fn every_status_and_hostile_text_render_escaped() {
    let mut r = report_common::report();
    r.metadata.model.name = Some("<script>alert(1)</script> & co".into());
    r.metadata.base_url = Some("https://api.example.com/v1?a=1&b=2".into());
    r.metadata.launch_command = Some("vllm serve x --chat-template '<b>'".into());
    let page = render(&r);
    let el = parse(&page);
    assert_entities_known(&page);
    assert!(!page.contains("<script>alert"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt; &amp; co"));
    assert_self_contained(
        &page,
        &el,
        Some("https:&#x2f;&#x2f;api.example.com&#x2f;v1?a=1&amp;b=2"),
    );
    // The one script on the page is ours.
    assert_eq!(el.iter().filter(|e| e.name == "script").count(), 1);
    // Cells that were not run have no details; the ones that ran (valid, looped, queued,
    // failed) do, and a failed one says why.
    let ran = r.decode.iter().filter(|c| c.status.was_run()).count();
    assert_eq!(count(&el, "details", "cell"), ran);
    assert!(r
        .decode
        .iter()
        .any(|c| matches!(c.status, CellStatus::Failed(_))));
    assert!(page.contains("timeout_gap"));
    // A file from before token bins were saved says so instead of drawing an empty chart.
    assert!(r.decode.iter().all(|c| c.token_bins.is_none()));
    assert_eq!(
        page.matches("Tokens over time were not recorded").count(),
        ran
    );
}

/// The first Valid cell (8K × 1, report_common's client lag with gaps of 9.9 ms).
fn first_valid(r: &mut MatrixReport) -> &mut DecodeCell {
    r.decode
        .iter_mut()
        .find(|c| c.status == CellStatus::Valid)
        .unwrap()
}

#[test]
fn each_cell_shows_the_client_lag_verdict_its_reasons_and_the_bounds_from_its_figures() {
    // The page escapes `/` in values (`&#x2f;`); read it back as text.
    let quiet = render(&report_common::report()).replace("&#x2f;", "/");
    assert!(!quiet.contains("Client-bound: the figures are kept"));
    assert!(!quiet.contains("may have limited"));
    assert!(quiet.contains("kept up: each printed figure"));
    // 8K × 1's figures, from its client_lag: the bounds to the µs, the lags, the shares.
    assert!(quiet.contains("9.900 ± 0.020 ms"), "gap p50 and its bound");
    assert!(quiet.contains("14.850 ± 0.020 ms"), "gap p99 and its bound");
    assert!(
        quiet.contains("45.000 ± 0.020 ms"),
        "TTFT p50 and its bound"
    );
    assert!(quiet.contains("12.5 µs / 48.0 µs / 310.0 µs"), "read lag");
    assert!(
        quiet.contains("0.050 ms / 0.200 ms / 0.400 ms"),
        "dispatch lag"
    );
    assert!(quiet.contains("99.9% / 0.1% / 0.0% of 2,997"), "gap kinds");
    assert!(quiet.contains("0.8% of 2 core(s)"), "CPU share");

    // The older thresholds are gone: a busy CPU, late timers or a 3% share of gaps read
    // together mark nothing by themselves; only the verdict does.
    let mut r = report_common::report();
    let cell = first_valid(&mut r);
    cell.client_cpu_percent = Some(97.0);
    cell.timer_lag_ms_p99 = Some(12.0);
    cell.client_lag.as_mut().unwrap().gaps_merged_percent = Some(3.0);
    let page = render(&r);
    assert!(!page.contains("Client-bound: the figures are kept"));
    assert!(!page.contains("may have limited") && !page.contains("over 80%"));
    assert!(page.contains("97.0% of one core"), "the CPU is still shown");

    // The verdict and its reasons, as the figures carry them.
    let reason = "the gap p50 of 0.000 ms is known only to ±1.000 ms (over 10%): 60% of gaps had an end read together with other tokens";
    let cell = first_valid(&mut r);
    cell.status = CellStatus::ClientBound;
    let lag = cell.client_lag.as_mut().unwrap();
    lag.client_bound = true;
    lag.client_bound_reasons = vec![reason.into()];
    let page = render(&r);
    assert!(
        page.contains("made 1 cell Client-bound"),
        "the page says how many"
    );
    assert!(page.contains("Client-bound: its figures are not trustworthy"));
    assert!(page.contains(reason));
    assert!(!page.contains("also Client-bound"));
    // A cell whose status is another (Looped comes first) still says it.
    let looped = r
        .decode
        .iter_mut()
        .find(|c| c.status == CellStatus::Looped)
        .unwrap();
    let lag = looped.client_lag.as_mut().unwrap();
    lag.client_bound = true;
    lag.client_bound_reasons =
        vec!["the TTFT p50 of 52.000 ms is known only to ±9.000 ms (over 10%)".into()];
    let page = render(&r);
    assert!(page.contains("made 2 cells Client-bound"));
    assert_eq!(page.matches("also Client-bound").count(), 1);

    // Reads on the client's own clock: no bound, and the verdict says it has no basis.
    let mut r = report_common::report();
    let lag = first_valid(&mut r).client_lag.as_mut().unwrap();
    lag.bounds_ms = Default::default();
    lag.gaps_unbounded_percent = Some(100.0);
    assert!(render(&r).contains("no bound: the reads carry the client"));
    // A file from before the figures were recorded says so.
    first_valid(&mut r).client_lag = None;
    assert!(render(&r).contains("The client's lag was not recorded for this cell"));
}

#[test]
fn a_token_count_off_the_servers_by_over_one_percent_is_flagged_apart_from_the_verdict() {
    let mut r = report_common::report();
    let cell = first_valid(&mut r);
    let server = cell.server_output_tokens.unwrap();
    cell.token_count_diff = Some((server / 100) as i64);
    assert!(!render(&r).contains("client counted"), "1% is not over 1%");
    first_valid(&mut r).token_count_diff = Some(-((server / 100) as i64 + 1));
    let page = render(&r);
    assert!(page.contains(&format!(
        "client counted -{} tokens against the server",
        server / 100 + 1
    )));
    assert!(!page.contains("Client-bound: the figures are kept"));
}

/// A full 8 × 8 grid, every cell with 64 requests and 30 server samples: it renders, with all
/// 64 cells' details. (How long it takes is for a bench, not a test.)
#[test]
fn an_eight_by_eight_report_renders() {
    let mut r = report_common::report();
    let contexts: Vec<u64> = (0..8).map(|i| 1024 << i).collect();
    let conc: Vec<u64> = (0..8).map(|i| 1 << i).collect();
    let template = r
        .decode
        .iter()
        .find(|c| c.status == CellStatus::Valid)
        .unwrap()
        .clone();
    r.metadata.settings.contexts = contexts.clone();
    r.metadata.settings.concurrency = conc.clone();
    r.decode.clear();
    for &ctx in &contexts {
        for &c in &conc {
            let mut cell = template.clone();
            cell.context = ctx;
            cell.context_label = format!("{}K", ctx / 1024);
            cell.concurrency = c;
            cell.output_tok_per_s = Some(100.0 * c as f64);
            cell.requests = (0..64)
                .map(|i| RequestSummary {
                    stream: (i % c) as u32,
                    start_ms: -500.0 + 40.0 * i as f64,
                    ttft_ms: Some(20.0 + i as f64),
                    tbt_ms_mean: Some(10.0 + (i % 7) as f64),
                    end_ms: Some(800.0 + 40.0 * i as f64),
                    output_tokens: 100,
                    window_tokens: 80,
                    finish_reason: None,
                    error: None,
                    looped: false,
                    request_id: None,
                })
                .collect();
            cell.server_samples = (0..30)
                .map(|i| llmspeed::report::ServerSample {
                    t_ms: 1000.0 * i as f64,
                    running: c as f64,
                    waiting: 0.0,
                })
                .collect();
            r.decode.push(cell);
        }
    }
    let page = render(&r);
    let el = parse(&page);
    assert_eq!(count(&el, "details", "cell"), 64);
    assert_eq!(count(&el, "svg", "load"), 64);
}

#[test]
fn compare_html_marks_changes_and_cells_in_one_run_only() {
    let a = report_common::report();
    let mut b = a.clone();
    // B: the first valid cell 20% faster, and one cell dropped.
    let i = b
        .decode
        .iter()
        .position(|c| c.status == CellStatus::Valid)
        .unwrap();
    b.decode[i].output_tok_per_s = b.decode[i].output_tok_per_s.map(|v| v * 1.2);
    let dropped = b.decode.pop().unwrap();
    let c = compare::matrices("runs/a", &a, "runs/b", &b);
    let mut out = Vec::new();
    html::write_compare(&mut out, &c).unwrap();
    let page = String::from_utf8(out).unwrap();
    let el = parse(&page);
    assert_entities_known(&page);
    // Each run's header shows its server's base URL, as text.
    assert_self_contained(&page, &el, a.metadata.base_url.as_deref());
    let rows = |class: &str| {
        el.iter()
            .filter(|e| e.name == "tr" && e.class_has(class))
            .count()
    };
    assert_eq!(rows("up"), 1, "one metric better");
    assert_eq!(rows("down"), 0);
    // Every metric of the dropped cell is marked as being in A only.
    assert_eq!(rows("only"), 5);
    assert!(page.contains(&format!(
        "{} × {}",
        dropped.context_label, dropped.concurrency
    )));
    assert!(page.contains("1.200×"));
    let mut md = Vec::new();
    compare::markdown(&mut md, &c).unwrap();
    let md = String::from_utf8(md).unwrap();
    assert_eq!(md.matches("| only in A |").count(), 5);
    assert_eq!(md.matches("| better |").count(), 1);
}

#[test]
fn the_results_folder_has_a_report_html() {
    let dir = tempfile::tempdir().unwrap();
    files::write_all(dir.path(), &recorded()).unwrap();
    let page = std::fs::read_to_string(dir.path().join(files::HTML)).unwrap();
    parse(&page);
}

mod cli {
    use super::RECORDED;
    use std::process::Command;

    fn llmspeed(args: &[&std::ffi::OsStr]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(args)
            .output()
            .expect("run llmspeed")
    }

    #[test]
    fn report_dir_re_renders_everything_but_results_json() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("results.json");
        std::fs::write(&json, RECORDED).unwrap();
        let out = llmspeed(&["report".as_ref(), dir.path().as_os_str()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for f in [
            "report.md",
            "report.html",
            "results.csv",
            "decode.svg",
            "prefill.svg",
        ] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        assert_eq!(std::fs::read_to_string(&json).unwrap(), RECORDED);
        let missing = llmspeed(&["report".as_ref(), dir.path().join("nope").as_os_str()]);
        assert_eq!(missing.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&missing.stderr).contains("results.json"));
    }

    #[test]
    fn report_compare_writes_markdown_and_compare_html() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("results.json"), RECORDED).unwrap();
        let mut r = llmspeed::report::json::read(RECORDED.as_bytes()).unwrap();
        r.decode.remove(0);
        let mut buf = Vec::new();
        llmspeed::report::json::write(&mut buf, &r).unwrap();
        std::fs::write(b.join("results.json"), buf).unwrap();
        let out_dir = dir.path().join("out");
        let out = llmspeed(&[
            "report".as_ref(),
            "compare".as_ref(),
            a.as_os_str(),
            b.join("results.json").as_os_str(),
            "--out".as_ref(),
            out_dir.as_os_str(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = String::from_utf8(out.stdout).unwrap();
        assert!(md.starts_with("# Comparison\n"));
        // The first cell is only in A: each of its five metrics marked.
        assert_eq!(md.matches("| only in A |").count(), 5);
        assert!(out_dir.join("compare.html").is_file());

        // Two bench serve results, key by key; a matrix and a bench result do not mix.
        let (x, y) = (dir.path().join("x.json"), dir.path().join("y.json"));
        std::fs::write(&x, r#"{"output_throughput": 100.0, "mean_ttft_ms": 20.0}"#).unwrap();
        std::fs::write(&y, r#"{"output_throughput": 50.0, "mean_ttft_ms": 20.0}"#).unwrap();
        let out = llmspeed(&[
            "report".as_ref(),
            "compare".as_ref(),
            x.as_os_str(),
            y.as_os_str(),
            "--out".as_ref(),
            out_dir.as_os_str(),
        ]);
        assert!(out.status.success());
        let md = String::from_utf8(out.stdout).unwrap();
        assert!(
            md.contains("| output_throughput | 100.0 | 50.0 | -50.0 | 0.500× | worse |"),
            "{md}"
        );
        assert!(
            md.contains("| mean_ttft_ms | 20.0 | 20.0 | 0.00 | 1.000× | same |"),
            "{md}"
        );
        let mixed = llmspeed(&[
            "report".as_ref(),
            "compare".as_ref(),
            a.as_os_str(),
            x.as_os_str(),
        ]);
        assert_eq!(mixed.status.code(), Some(2));
    }
}

/// The fields the HTML report draws from (request ends, server samples, token bins) are in the
/// committed schema: the recorded run validates, and a 601st token bin does not.
#[test]
fn the_recorded_run_validates_against_the_schema() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/results.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let mut instance: serde_json::Value = serde_json::from_str(RECORDED).unwrap();
    let cell = &instance["decode"][0];
    assert!(cell["requests"][0]["end_ms"].is_number());
    assert!(cell["server_samples"]
        .as_array()
        .is_some_and(|s| !s.is_empty()));
    assert!(cell["token_bins"]["tokens"].is_array());
    let errs: Vec<String> = v.iter_errors(&instance).map(|e| e.to_string()).collect();
    assert!(errs.is_empty(), "{errs:?}");
    instance["decode"][0]["token_bins"]["tokens"] = serde_json::json!(vec![1; 601]);
    assert!(!v.is_valid(&instance));
    // With the machine panel, GPU samples and gap histograms too; a histogram with a bin
    // missing is refused.
    let mut full = recorded();
    report_common::add_machine_and_gaps(&mut full);
    let mut full = serde_json::to_value(full).unwrap();
    let errs: Vec<String> = v.iter_errors(&full).map(|e| e.to_string()).collect();
    assert!(errs.is_empty(), "{errs:?}");
    assert!(full["decode"][0]["gap_histogram"]["counts"].is_array());
    full["decode"][0]["gap_histogram"]["counts"] = serde_json::json!(vec![1; 79]);
    assert!(!v.is_valid(&full));
}

/// The sweep page (`<sweep summary>.html`): both latency charts and the Pareto chart mark every
/// point once, the front's line runs through exactly the points the summary flags (the others
/// hollow), the table has a row per point, and nothing on it loads anything.
#[test]
fn the_sweep_page_draws_the_pareto_front_through_the_flagged_points() {
    use llmspeed::bench::vllm::args::Sweep;
    use llmspeed::bench::vllm::sweep::{summary_json, PointResult};
    use llmspeed::bench::vllm::sweep_html;
    // (concurrency, median TTFT, mean = median TPOT (ms), output tok/s): 4 is beaten by 2 on
    // both per-user (83 > 50) and total (150 > 140) tok/s, so it is the one off the front.
    let rows = [
        (1u64, 20.0, 10.0, 100.0),
        (2, 30.0, 12.0, 150.0),
        (4, 45.0, 20.0, 140.0),
        (8, 90.0, 25.0, 300.0),
    ];
    let points: Vec<PointResult> = rows
        .iter()
        .map(|&(n, ttft, tpot, out)| PointResult {
            label: format!("concurrency={n}"),
            value: serde_json::json!(n),
            num_prompts: n as usize * 4,
            figures: vec![
                ("request_throughput".into(), out / 8.0),
                ("output_throughput".into(), out),
                ("median_ttft_ms".into(), ttft),
                ("mean_tpot_ms".into(), tpot),
                ("median_tpot_ms".into(), tpot),
            ],
            unstable: vec![],
            result_files: vec![],
        })
        .collect();
    let summary = summary_json(&Sweep::MaxConcurrency(vec![1, 2, 4, 8]), 1, &points);
    let flags: Vec<bool> = (0..4)
        .map(|i| summary["points"][i]["pareto"].as_bool().unwrap())
        .collect();
    assert_eq!(flags, [true, true, false, true]);

    let page = sweep_html::render(&summary, &[]);
    let els = parse(&page);
    assert_entities_known(&page);
    assert_self_contained(&page, &els, None);
    for id in ["latency", "pareto", "table"] {
        assert!(
            els.iter()
                .any(|e| e.name == "section" && e.attr("id") == Some(id)),
            "section {id}"
        );
    }
    let circles = |section: &str| -> Vec<&Element> {
        els.iter()
            .filter(|e| e.name == "circle" && e.class_has("pt"))
            .filter(|e| e.inside.iter().any(|i| i == section))
            .collect()
    };
    // Two latency charts, one mark per point each, none hollow.
    let lat = circles("latency");
    assert_eq!(lat.len(), 8);
    assert!(lat.iter().all(|e| !e.class_has("hollow")));
    let par = circles("pareto");
    assert_eq!(par.len(), 4, "one mark per point");
    let hollow: Vec<bool> = par.iter().map(|e| e.class_has("hollow")).collect();
    assert_eq!(hollow, [false, false, true, false]);
    // The front's polyline: exactly the flagged marks' centres, in order of total tok/s.
    let fronts: Vec<&Element> = els
        .iter()
        .filter(|e| e.name == "polyline" && e.class_has("front"))
        .collect();
    assert_eq!(fronts.len(), 1);
    let line: Vec<String> = fronts[0]
        .attr("points")
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let centre = |e: &Element| format!("{},{}", e.attr("cx").unwrap(), e.attr("cy").unwrap());
    let want: Vec<String> = [0, 1, 3].iter().map(|&i| centre(par[i])).collect();
    assert_eq!(line, want);
    // Points are labelled by their concurrency; a row per point plus the heading.
    assert!(page.contains(">8</text>"));
    let trs = els
        .iter()
        .filter(|e| e.name == "tr" && e.inside.iter().any(|i| i == "table"))
        .count();
    assert_eq!(trs, 5);
}
