//! report.html and compare.html in a real browser: headless Chromium loads each page from a
//! file, runs its script, and must log nothing to the console; the DOM it dumps afterwards has
//! the charts and the cells the script opened; a screenshot is decoded and must show the
//! charts' colours.
//!
//! Needs `chromium` (Debian's package; `.ci/run` installs it when missing) or the browser named
//! by `LLMSPEED_CHROMIUM`. Under `CI=true` a missing browser fails the test; elsewhere the test
//! says loudly that it did not run.

#[path = "support/process.rs"]
mod process;
mod report_common;
#[path = "report_common/site.rs"]
mod site_fixture;

use llmspeed::report::{compare, files, html, json, MatrixReport};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RECORDED: &str = include_str!("data/matrix_mock_results.json");

fn browser() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LLMSPEED_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
    .find(|p| p.is_file())
}

/// The browser, or `None` after saying loudly why the test did not run (a failure under CI).
fn browser_or_skip(test: &str) -> Option<PathBuf> {
    let found = browser();
    if found.is_none() {
        let msg = format!(
            "{test}: no Chromium found (install Debian's `chromium`, or set LLMSPEED_CHROMIUM)"
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{msg}; under CI=true the browser test must run");
        }
        // Straight to the process's stderr: the test harness hides eprintln! of passing tests.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "\n!!!!!!!! NOT RUN: {msg} !!!!!!!!\n");
    }
    found
}

struct Run {
    stdout: String,
    stderr: String,
}

/// One headless Chromium run over `url` with `args`, its own profile, killed after 90 s.
fn chromium(bin: &Path, profile: &Path, args: &[&str], url: &str) -> Run {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let out_pipe = child.stdout.take().unwrap();
    let err_pipe = child.stderr.take().unwrap();
    let read = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = p.read_to_string(&mut s);
            s
        })
    };
    let (out_t, err_t) = (read(Box::new(out_pipe)), read(Box::new(err_pipe)));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Run {
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    }
}

/// Lines the page wrote to the console (errors, uncaught exceptions, logs): Chromium prints
/// each as `...:CONSOLE(...)` with `--enable-logging=stderr`.
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

fn url(path: &Path, query: &str) -> String {
    format!("file://{}{query}", path.display())
}

struct Image {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

fn decode_png(path: &Path) -> Image {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("the screenshot exists"));
    let mut decoder = png::Decoder::new(f);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| match channels {
            1 | 2 => [p[0], p[0], p[0]],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    Image {
        width: info.width,
        height: info.height,
        rgb,
    }
}

impl Image {
    fn non_white_share(&self) -> f64 {
        let n = self
            .rgb
            .iter()
            .filter(|p| p.iter().any(|c| *c < 240))
            .count();
        n as f64 / self.rgb.len() as f64
    }

    /// Pixels within a small distance of `hex` (anti-aliasing blends edges).
    fn pixels_near(&self, hex: u32) -> usize {
        let t = [(hex >> 16) as u8, (hex >> 8) as u8, hex as u8];
        self.rgb
            .iter()
            .filter(|p| (0..3).all(|i| p[i].abs_diff(t[i]) <= 12))
            .count()
    }
}

fn write_pages(dir: &Path) -> (PathBuf, PathBuf, MatrixReport) {
    let r = json::read(RECORDED.as_bytes()).unwrap();
    let results = dir.join("results");
    files::write_all(&results, &r).unwrap();
    let mut b = r.clone();
    for c in &mut b.decode {
        c.output_tok_per_s = c.output_tok_per_s.map(|v| v * 1.25);
    }
    b.decode.pop();
    let cmp = compare::matrices("results-a", &r, "results-b", &b);
    let mut page = Vec::new();
    html::write_compare(&mut page, &cmp).unwrap();
    let compare_path = dir.join("compare.html");
    std::fs::write(&compare_path, page).unwrap();
    (results.join(files::HTML), compare_path, r)
}

#[test]
fn the_console_check_catches_a_script_error() {
    let Some(bin) = browser_or_skip("the_console_check_catches_a_script_error") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><p>x</p><script>notDefined();</script></body></html>",
    )
    .unwrap();
    let run = chromium(
        &bin,
        &dir.path().join("profile"),
        &["--dump-dom"],
        &url(&bad, ""),
    );
    assert!(run.stdout.contains("<p>x</p>"), "the DOM was dumped");
    assert!(
        !console_lines(&run.stderr).is_empty(),
        "a broken page must be caught: {}",
        run.stderr
    );
}

#[test]
fn report_html_loads_cleanly_and_draws_its_charts() {
    let Some(bin) = browser_or_skip("report_html_loads_cleanly_and_draws_its_charts") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (report, _, r) = write_pages(dir.path());
    let measured = r.decode.iter().filter(|c| c.status.was_run()).count();

    // ?open: the script opens every cell; the DOM after it ran shows them open.
    let run = chromium(
        &bin,
        &dir.path().join("p1"),
        &["--dump-dom"],
        &url(&report, "?open"),
    );
    assert_eq!(
        console_lines(&run.stderr),
        Vec::<&str>::new(),
        "console output"
    );
    let dom = &run.stdout;
    assert_eq!(dom.matches("<details class=\"cell\"").count(), measured);
    assert_eq!(
        dom.matches(" open=\"\"").count(),
        measured,
        "the script opened every cell"
    );
    // Heat map + 4 curves + 5 charts per cell (the recorded run has token bins and server
    // samples).
    assert_eq!(dom.matches("<svg").count(), 1 + 4 + 5 * measured);
    assert_eq!(dom.matches("class=\"chart cdf\"").count(), 2 * measured);

    // ?only=ID: one cell, opened, everything else hidden.
    let first = r.decode.iter().find(|c| c.status.was_run()).unwrap();
    let id = format!("cell-{}-{}", first.context, first.concurrency);
    let run = chromium(
        &bin,
        &dir.path().join("p2"),
        &["--dump-dom"],
        &url(&report, &format!("?only={id}")),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    assert!(
        run.stdout.contains("only-cell"),
        "body marked by the script"
    );
    assert_eq!(run.stdout.matches(" open=\"\"").count(), 1);

    // The top of the page as pixels: the heat map's shades and the curves' colours are there.
    let shot = dir.path().join("top.png");
    let run = chromium(
        &bin,
        &dir.path().join("p3"),
        &[
            "--window-size=1280,1400",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&report, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let img = decode_png(&shot);
    assert_eq!((img.width, img.height), (1280, 1400));
    let ink = img.non_white_share();
    assert!(ink > 0.03 && ink < 0.9, "non-white share {ink}");
    // The best Valid cell is drawn in the heat map's darkest green, filling most of a cell.
    assert!(img.pixels_near(0x1b6e3a) > 2_000, "heat map missing");
    // The first context's curve colour, on both decode charts.
    assert!(img.pixels_near(0x1f77b4) > 200, "curves missing");
}

#[test]
fn the_machine_panel_gap_histogram_and_gpu_charts_load_cleanly() {
    let Some(bin) = browser_or_skip("the_machine_panel_gap_histogram_and_gpu_charts_load_cleanly")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r: MatrixReport = json::read(RECORDED.as_bytes()).unwrap();
    report_common::add_machine_and_gaps(&mut r);
    let results = dir.path().join("results");
    files::write_all(&results, &r).unwrap();
    let report = results.join(files::HTML);
    let first = r.decode.iter().find(|c| c.status.was_run()).unwrap();
    let id = format!("cell-{}-{}", first.context, first.concurrency);
    let run = chromium(
        &bin,
        &dir.path().join("p1"),
        &["--dump-dom"],
        &url(&report, &format!("?only={id}")),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let dom = &run.stdout;
    assert!(
        dom.contains("AMD EPYC 9654 96-Core Processor"),
        "machine panel"
    );
    // One cell shown, but every cell's charts are in the DOM: one histogram and four GPU
    // charts each.
    let measured = r.decode.iter().filter(|c| c.status.was_run()).count();
    assert_eq!(dom.matches("class=\"chart gaps\"").count(), measured);
    assert_eq!(dom.matches("class=\"chart gpu\"").count(), 4 * measured);
    // The shown cell as pixels: the histogram's bars and GPU lines put ink on the page.
    let shot = dir.path().join("cell.png");
    let run = chromium(
        &bin,
        &dir.path().join("p2"),
        &[
            "--window-size=1280,1800",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&report, &format!("?only={id}")),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let img = decode_png(&shot);
    let ink = img.non_white_share();
    assert!(ink > 0.03 && ink < 0.9, "non-white share {ink}");
    // GPU 1's line (the second palette colour) appears on three GPU charts.
    assert!(img.pixels_near(0xd62728) > 100, "GPU lines missing");
}

#[test]
fn compare_html_loads_cleanly_and_colours_its_rows() {
    let Some(bin) = browser_or_skip("compare_html_loads_cleanly_and_colours_its_rows") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, cmp, _) = write_pages(dir.path());
    let run = chromium(
        &bin,
        &dir.path().join("p1"),
        &["--dump-dom"],
        &url(&cmp, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    assert!(run.stdout.contains("<tr class=\"up\">"));
    assert!(run.stdout.contains("<tr class=\"only\">"));
    let shot = dir.path().join("compare.png");
    let run = chromium(
        &bin,
        &dir.path().join("p2"),
        &[
            // Tall enough for both runs' headers above the tables.
            "--window-size=1100,1800",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&cmp, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let img = decode_png(&shot);
    assert_eq!((img.width, img.height), (1100, 1800));
    assert!(img.non_white_share() > 0.03);
    assert!(
        img.pixels_near(0xd8f0d2) > 5_000,
        "green 'better' rows missing"
    );
}

#[test]
fn the_sweep_page_loads_cleanly_and_draws_its_charts() {
    use llmspeed::bench::vllm::args::Sweep;
    use llmspeed::bench::vllm::sweep::{summary_json, PointResult};
    let Some(bin) = browser_or_skip("the_sweep_page_loads_cleanly_and_draws_its_charts") else {
        return;
    };
    // (concurrency, median TTFT, TPOT (ms), output tok/s); 4 is off the Pareto front.
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
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r-sweep.html");
    std::fs::write(
        &page,
        llmspeed::bench::vllm::sweep_html::render(&summary, &[]),
    )
    .unwrap();

    let run = chromium(
        &bin,
        &dir.path().join("p1"),
        &["--dump-dom"],
        &url(&page, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let dom = &run.stdout;
    assert_eq!(dom.matches("<svg").count(), 3);
    assert_eq!(dom.matches("<circle class=\"pt").count(), 12);
    assert_eq!(dom.matches("<circle class=\"pt hollow\"").count(), 1);
    assert_eq!(dom.matches("<polyline class=\"front\"").count(), 1);

    let shot = dir.path().join("sweep.png");
    let run = chromium(
        &bin,
        &dir.path().join("p2"),
        &[
            "--window-size=1400,900",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&page, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let img = decode_png(&shot);
    assert_eq!((img.width, img.height), (1400, 900));
    // The lines and marks are drawn in the first palette colour.
    assert!(img.pixels_near(0x1f77b4) > 200, "lines and marks missing");
}

/// `llmspeed capacity`'s page (recorded from the ITL search of `capacity_html.rs` against the
/// simulated server): it loads without a console line, draws one chart with a mark per probe,
/// the threshold and the answer, and the pass and fail colours show in a screenshot.
#[test]
fn the_capacity_page_loads_cleanly_and_draws_its_probes() {
    let Some(bin) = browser_or_skip("the_capacity_page_loads_cleanly_and_draws_its_probes") else {
        return;
    };
    let v: serde_json::Value =
        serde_json::from_str(include_str!("data/capacity_mock_results.json")).unwrap();
    let probes = v["probes"].as_array().unwrap().len();
    let (dom, img) = capacity_page(&bin, &v);
    assert_eq!(dom.matches("<svg").count(), 1);
    assert_eq!(dom.matches("<g class=\"probe\"").count(), probes);
    assert_eq!(dom.matches("<tr class=\"probe\"").count(), probes);
    assert_eq!(dom.matches("class=\"threshold\"").count(), 1);
    assert_eq!(dom.matches("class=\"answer\"").count(), 1);
    // Pass marks are drawn green, fail marks red.
    assert!(img.pixels_near(0x2ca02c) > 50, "pass marks missing");
    assert!(img.pixels_near(0xd62728) > 50, "fail marks missing");
}

/// `llmspeed capacity --by rate`'s page (recorded from the rate search of `capacity_rate.rs`
/// against the simulated server: 20 and 40 req/s pass, 80 and 60 fail on keeps-up): it loads
/// without a console line and draws two charts — the objective's and the keeps-up chart, a mark
/// per probe in each, the latter with the arrivals' open circles and the y = x line — and the
/// pass and fail colours show in a screenshot.
#[test]
fn the_rate_capacity_page_draws_its_keeps_up_chart() {
    let Some(bin) = browser_or_skip("the_rate_capacity_page_draws_its_keeps_up_chart") else {
        return;
    };
    let v: serde_json::Value =
        serde_json::from_str(include_str!("data/capacity_rate_mock_results.json")).unwrap();
    let probes = v["probes"].as_array().unwrap().len();
    let (dom, img) = capacity_page(&bin, &v);
    assert_eq!(dom.matches("<svg").count(), 2);
    assert_eq!(dom.matches("<g class=\"probe\"").count(), 2 * probes);
    assert_eq!(dom.matches("<circle class=\"ref\"").count(), probes);
    assert_eq!(dom.matches("class=\"threshold\"").count(), 1);
    assert_eq!(dom.matches("class=\"diagonal\"").count(), 1);
    assert_eq!(dom.matches("class=\"answer\"").count(), 2);
    // The arrivals' shape is in the header, as the file records it.
    assert!(
        dom.contains("<tr><td>Burstiness</td><td>1.0</td></tr>"),
        "no burstiness row"
    );
    assert!(img.pixels_near(0x2ca02c) > 50, "pass marks missing");
    assert!(img.pixels_near(0xd62728) > 50, "fail marks missing");
}

/// A capacity results file's page, rendered and opened twice: its DOM as the browser built it,
/// and a 1400x1400 screenshot; neither load may print a console line.
fn capacity_page(bin: &Path, v: &serde_json::Value) -> (String, Image) {
    let header = llmspeed::report::header::RunHeader::capacity(v);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, html::capacity::render(v, &header)).unwrap();
    let run = chromium(
        bin,
        &dir.path().join("p1"),
        &["--dump-dom"],
        &url(&page, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let shot = dir.path().join("capacity.png");
    let shot_run = chromium(
        bin,
        &dir.path().join("p2"),
        &[
            "--window-size=1400,1400",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&page, ""),
    );
    assert_eq!(console_lines(&shot_run.stderr), Vec::<&str>::new());
    (run.stdout, decode_png(&shot))
}

/// Drives the site as a person would, inside an iframe of the site's own folder (the browser
/// runs with --allow-file-access-from-files, so the page may reach into it): on the index,
/// sort by decode tok/s at C=1, filter, group, select the two matrix runs and the sweep, open
/// the comparison; there, read what it says; follow the first run's link, then go back.
/// Each step's findings go into `#out` as `key=JSON` lines.
const SITE_HARNESS: &str = r##"<!DOCTYPE html>
<html><head><meta charset="utf-8"/><title>harness</title></head><body>
<iframe id="f" src="index.html" width="1400" height="900"></iframe>
<pre id="out"></pre>
<script>
var log = [], step = 0, f = document.getElementById("f");
function say(k, v) { log.push(k + "=" + JSON.stringify(v)); document.getElementById("out").textContent = log.join("\n") + "\n"; }
function all(d, sel) { return Array.prototype.slice.call(d.querySelectorAll(sel)); }
function when(test, then, tries) {
  if (test()) { then(); } else if ((tries || 0) < 200) { setTimeout(function () { when(test, then, (tries || 0) + 1); }, 50); } else { say("timeout", step); }
}
f.onload = function () {
  var w = f.contentWindow, d = f.contentDocument;
  step += 1;
  if (step === 1) {
    say("rows", all(d, "tr.run").length);
    say("groups", all(d, "tr.group").map(function (g) { return g.textContent; }));
    d.querySelector("th[data-k=c1]").click();
    say("sorted_c1", all(d, "tr.run td[data-k=c1]").map(function (td) { return td.getAttribute("data-v"); }));
    d.getElementById("group").value = ""; d.getElementById("group").dispatchEvent(new Event("change"));
    say("groups_off", all(d, "tr.group").length);
    say("sorted_c1_ungrouped", all(d, "tr.run td[data-k=c1]").map(function (td) { return td.getAttribute("data-v"); }));
    var filter = d.getElementById("filter");
    filter.value = "rtx"; filter.dispatchEvent(new Event("input"));
    say("filtered", all(d, "#rows tr.run").map(function (tr) { return tr.getAttribute("data-hardware"); }));
    say("count", d.getElementById("count").textContent);
    filter.value = ""; filter.dispatchEvent(new Event("input"));
    var chosen = all(d, "tr.run").filter(function (tr) {
      var k = tr.querySelector("td[data-k=kind]").textContent;
      return k.indexOf("Speed test matrix") === 0 || k.indexOf("sweep") >= 0;
    });
    chosen.forEach(function (tr) { tr.querySelector("input").click(); });
    say("chosen", chosen.map(function (tr) { return tr.getAttribute("data-id"); }));
    say("compare_enabled", !d.getElementById("compare").disabled);
    d.getElementById("compare").click();
  } else if (step === 2) {
    when(function () { return d.getElementById("status") && d.getElementById("status").textContent === "" && d.getElementById("who").innerHTML !== ""; }, function () {
      say("compare_at", w.location.search);
      say("compare_title", d.getElementById("title").textContent);
      var body = d.body.innerHTML;
      say("differ_before_numbers", body.indexOf("id=\"differ\"") < body.indexOf("id=\"decode-grids\""));
      say("differ", all(d, "#differ li").map(function (li) { return li.textContent; }));
      say("grids", all(d, "#decode-grids table.grid").map(function (t) {
        return { run: t.getAttribute("data-run"), v: all(t, "td[data-v]").map(function (td) { return td.getAttribute("data-v"); }) };
      }));
      say("ratios", all(d, "#decode-ratios table.grid").map(function (t) {
        return { run: t.getAttribute("data-run"), v: all(t, "td[data-v]").map(function (td) { return td.getAttribute("data-v"); }) };
      }));
      say("prefill_lines", all(d, "#prefill polyline.series").length);
      say("sweep_lines", all(d, "#sweep polyline.series").length);
      say("headers", all(d, "#headers details").length);
      d.querySelector("#who a").click();
    });
  } else if (step === 3) {
    say("run_title", d.title);
    say("run_nav", !!d.querySelector("nav.site a[href='../index.html']"));
    say("run_model", d.querySelector("#run .model") ? d.querySelector("#run .model").textContent : null);
    w.history.back();
  } else if (step === 4) {
    say("back_at", w.location.pathname.split("/").pop() + w.location.search);
    say("done", true);
  }
};
</script>
</body></html>
"##;

/// The `key=JSON` lines the harness wrote into `#out`.
fn harness_out(dom: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let at = dom.find("<pre id=\"out\">").expect("the harness's output") + 14;
    let end = dom[at..].find("</pre>").unwrap() + at;
    dom[at..end]
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&");
            (
                k.to_string(),
                serde_json::from_str(&v).unwrap_or_else(|e| panic!("{k}: {e}: {v}")),
            )
        })
        .collect()
}

/// A page that opens `src` in an iframe and, once it has loaded, writes into `#out` what
/// `probe` returns (JavaScript with `f`, the iframe, and `d`, its document, in scope, returning
/// `key=JSON` lines).
fn iframe_probe(src: &str, probe: &str) -> String {
    format!(
        r##"<!DOCTYPE html><html><body><iframe id="f" src="{src}" width="1400" height="900"></iframe><pre id="out"></pre><script>
var f = document.getElementById("f");
f.onload = function () {{ var d = f.contentDocument; document.getElementById("out").textContent = (function () {{ {probe} }})(); }};
</script></body></html>"##
    )
}

/// Writes `page` at `path` and opens it in Chromium, which may reach into the folder's files
/// (and takes `extra` flags); its console must stay clean. The `key=JSON` lines it left.
fn run_harness(
    bin: &Path,
    profile: &Path,
    path: &Path,
    page: &str,
    extra: &[&str],
) -> std::collections::BTreeMap<String, serde_json::Value> {
    std::fs::write(path, page).unwrap();
    let mut args = vec!["--allow-file-access-from-files", "--dump-dom"];
    args.extend_from_slice(extra);
    let run = chromium(bin, profile, &args, &url(path, ""));
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    harness_out(&run.stdout)
}

#[test]
fn the_site_sorts_filters_compares_three_runs_and_links_into_a_run_and_back() {
    let Some(bin) =
        browser_or_skip("the_site_sorts_filters_compares_three_runs_and_links_into_a_run_and_back")
    else {
        return;
    };
    let fx = site_fixture::fixture();
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    site_fixture::llmspeed(&[
        "report",
        "site",
        fx.team.to_str().unwrap(),
        "--out",
        site.to_str().unwrap(),
    ]);
    let out = run_harness(
        &bin,
        &dir.path().join("p1"),
        &site.join("harness.html"),
        SITE_HARNESS,
        &["--virtual-time-budget=60000"],
    );
    assert_eq!(
        out.get("done"),
        Some(&serde_json::json!(true)),
        "every step ran: {out:#?}"
    );
    assert_eq!(out["rows"], 5);
    // Grouped by model and hardware: mock-model on 1x H200 (bench, sweep, sglang has none),
    // on H200, on RTX 6000, and the sglang record's unrecorded hardware.
    let groups: Vec<&str> = out["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect();
    assert!(
        groups
            .iter()
            .any(|g| g.starts_with("mock-model · RTX 6000")),
        "{groups:?}"
    );
    assert!(
        groups
            .iter()
            .any(|g| g.starts_with("mock-model · H200 (1)")),
        "{groups:?}"
    );
    assert_eq!(out["groups_off"], 0);
    // Sorted by decode tok/s at C=1, highest first, runs without it last.
    let sorted: Vec<Option<f64>> = out["sorted_c1_ungrouped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().ok())
        .collect();
    let numbers: Vec<f64> = sorted.iter().flatten().copied().collect();
    assert_eq!(numbers.len(), 2, "two matrix runs: {sorted:?}");
    assert!(numbers[0] >= numbers[1]);
    assert!(
        sorted[..2].iter().all(Option::is_some),
        "figures first: {sorted:?}"
    );
    assert_eq!(out["filtered"], serde_json::json!(["RTX 6000"]));
    assert_eq!(out["count"], "1 of 5 runs shown");
    assert_eq!(out["chosen"].as_array().unwrap().len(), 3);
    assert_eq!(out["compare_enabled"], true);
    // The comparison: what differs is said before any number.
    assert_eq!(out["compare_title"], "Comparison of 3 runs");
    assert_eq!(out["differ_before_numbers"], true);
    let differ: Vec<&str> = out["differ"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(
        differ.iter().any(|d| d.starts_with("hardware:")),
        "{differ:?}"
    );
    assert!(
        differ.iter().any(|d| d.starts_with("setting max_tokens:")),
        "{differ:?}"
    );
    assert!(
        differ.iter().any(|d| d.starts_with("setting Concurrency:")),
        "{differ:?}"
    );
    // Both matrices' grids side by side, each cell the run's own figure; one ratio grid.
    let grids = out["grids"].as_array().unwrap();
    assert_eq!(grids.len(), 2);
    for g in grids {
        let id = g["run"].as_str().unwrap();
        let data = std::fs::read_to_string(site.join("runs").join(format!("{id}.js"))).unwrap();
        let origin = data
            .split("\"origin\":\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(Path::new(origin).join("results.json")).unwrap(),
        )
        .unwrap();
        let mut want: Vec<(u64, u64, f64)> = r["decode"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["context"].as_u64().unwrap(),
                    c["concurrency"].as_u64().unwrap(),
                    c["output_tok_per_s"].as_f64().unwrap(),
                )
            })
            .collect();
        want.sort_by_key(|w| (w.0, w.1));
        let got: Vec<f64> = g["v"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            got,
            want.iter().map(|w| w.2).collect::<Vec<_>>(),
            "grid of {id}"
        );
    }
    assert_eq!(out["ratios"].as_array().unwrap().len(), 1);
    assert_eq!(
        out["prefill_lines"].as_u64(),
        Some(2 * 2),
        "tok/s and TTFT, one line per matrix run"
    );
    assert_eq!(
        out["sweep_lines"].as_u64(),
        Some(2),
        "the sweep against concurrency and against TTFT"
    );
    assert_eq!(out["headers"].as_u64(), Some(3));
    // Into a run and back.
    assert!(out["run_title"].as_str().unwrap().contains("mock-model"));
    assert_eq!(out["run_nav"], true);
    assert_eq!(out["run_model"], "mock-model");
    assert_eq!(
        out["back_at"].as_str().unwrap(),
        format!("compare.html{}", out["compare_at"].as_str().unwrap())
    );
}

/// The index at 300 runs: copies of a real run with edited model, hardware and date. Its size,
/// and its load time in headless Chromium (navigation timing, read from an iframe), printed;
/// the bounds are loose, for a loaded machine (the figures to quote come from a quiet one).
#[test]
fn the_index_of_300_runs_stays_small_and_loads_quickly() {
    let Some(bin) = browser_or_skip("the_index_of_300_runs_stays_small_and_loads_quickly") else {
        return;
    };
    let fx = site_fixture::fixture();
    let dir = tempfile::tempdir().unwrap();
    let team = dir.path().join("team");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.matrix_a.join("results.json")).unwrap())
            .unwrap();
    for i in 0..300 {
        let mut r = r.clone();
        r["metadata"]["model"]["id"] = format!("model-{}", i % 12).into();
        r["metadata"]["hardware"]["gpu"] =
            ["H200", "H100", "B200", "RTX 6000", "MI300X"][i % 5].into();
        r["metadata"]["date"] =
            format!("2026-{:02}-{:02}T10:00:00Z", 1 + i % 12, 1 + i % 28).into();
        for c in r["decode"].as_array_mut().unwrap() {
            if let Some(v) = c["output_tok_per_s"].as_f64() {
                c["output_tok_per_s"] = (v * (1.0 + i as f64 / 300.0)).into();
            }
        }
        let d = team.join(format!("h{}", i % 5)).join(format!("run-{i:03}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("results.json"), serde_json::to_string(&r).unwrap()).unwrap();
    }
    let site = dir.path().join("site");
    let t = Instant::now();
    site_fixture::llmspeed(&[
        "report",
        "site",
        team.to_str().unwrap(),
        "--out",
        site.to_str().unwrap(),
    ]);
    let build_s = t.elapsed().as_secs_f64();
    let index = site.join("index.html");
    let bytes = std::fs::metadata(&index).unwrap().len();
    let probe = r#"var n = f.contentWindow.performance.getEntriesByType("navigation")[0];
  return "rows=" + d.querySelectorAll("tr.run").length + "\ndom_ms=" + JSON.stringify(n.domContentLoadedEventEnd - n.startTime) +
    "\nload_ms=" + JSON.stringify(n.loadEventStart - n.startTime) + "\n";"#;
    let out = run_harness(
        &bin,
        &dir.path().join("p1"),
        &site.join("load.html"),
        &iframe_probe("index.html", probe),
        &[],
    );
    assert_eq!(out["rows"], 300);
    let load_ms = out["load_ms"].as_f64().unwrap();
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "300 runs: site built in {build_s:.1} s; index.html {} KiB; DOMContentLoaded {:.0} ms, load {load_ms:.0} ms",
        bytes / 1024,
        out["dom_ms"].as_f64().unwrap()
    );
    assert!(bytes < 1 << 20, "index.html is {bytes} bytes at 300 runs");
    assert!(
        load_ms > 0.0 && load_ms < 10_000.0,
        "load took {load_ms} ms"
    );
}

/// A cell shown alone (`?only=cell-…`, the cell-details view) still says what was measured:
/// the run's table of the header stays, the rest of the page (settings and machine panels, the
/// grid, the other cells) is hidden.
#[test]
fn a_cell_shown_alone_keeps_the_run_header() {
    let Some(bin) = browser_or_skip("a_cell_shown_alone_keeps_the_run_header") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (report, _, r) = write_pages(dir.path());
    let first = r.decode.iter().find(|c| c.status.was_run()).unwrap();
    let id = format!("cell-{}-{}", first.context, first.concurrency);
    let probe = format!(
        r##"var out = [];
  ["run", "settings", "machine", "decode", "{id}"].forEach(function (k) {{
    out.push(k.replace(/-/g, "_") + "=" + JSON.stringify(d.getElementById(k).offsetParent !== null));
  }});
  out.push("model=" + JSON.stringify(d.querySelector("#run .model").textContent));
  return out.join("\n") + "\n";"##
    );
    let out = run_harness(
        &bin,
        &dir.path().join("p1"),
        &report.with_file_name("only.html"),
        &iframe_probe(&format!("report.html?only={id}"), &probe),
        &[],
    );
    let shown = |k: &str| out[k].as_bool().unwrap_or_else(|| panic!("{k}: {out:?}"));
    assert!(shown("run"), "the run's header is shown: {out:?}");
    assert!(shown(&id.replace('-', "_")), "the cell is shown: {out:?}");
    for hidden in ["settings", "machine", "decode"] {
        assert!(!shown(hidden), "{hidden} is hidden: {out:?}");
    }
    assert_eq!(out["model"], r.metadata.model.id.as_str());
}
