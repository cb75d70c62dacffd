//! report.html and compare.html in a real browser: headless Chromium loads each page from a
//! file, runs its script, and must log nothing to the console; the DOM it dumps afterwards has
//! the charts and the cells the script opened; a screenshot is decoded and must show the
//! charts' colours.
//!
//! Needs `chromium` (Debian's package; `.ci/run` installs it when missing) or the browser named
//! by `LLMSPEED_CHROMIUM`. Under `CI=true` a missing browser fails the test; elsewhere the test
//! says loudly that it did not run.

mod report_common;

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
            "--window-size=1100,900",
            &format!("--screenshot={}", shot.display()),
        ],
        &url(&cmp, ""),
    );
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    let img = decode_png(&shot);
    assert_eq!((img.width, img.height), (1100, 900));
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
    std::fs::write(&page, llmspeed::bench::vllm::sweep_html::render(&summary)).unwrap();

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
