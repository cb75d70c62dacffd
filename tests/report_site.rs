//! Every page says what was measured, and `report site` over real results: each HTML page's
//! header holds the values of the run's own files (matrix report, `bench serve` timeline and
//! sweep pages, compare), and every number the site shows (index, run pages, the comparison's
//! data) equals the one in the run's own file. The results are made by the binary against the
//! built-in simulated server (`report_common/site.rs`).

#[path = "support/process.rs"]
mod process;
#[path = "report_common/site.rs"]
mod site_fixture;

use serde_json::Value;
use site_fixture::{copy_dir, fixture, llmspeed, read_json, LAUNCH};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&apos;", "'")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
}

/// Text without its tags.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    unescape(&out)
}

/// The rows (`label -> text`) of the table with `id` on `page`.
fn kv_table(page: &str, id: &str) -> BTreeMap<String, String> {
    let at = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id}"));
    let end = page[at..].find("</table>").expect("the table ends") + at;
    page[at..end]
        .split("<tr><td>")
        .skip(1)
        .filter_map(|row| {
            let (k, v) = row.split_once("</td><td>")?;
            let v = v.split("</td></tr>").next()?;
            Some((text(k), text(v)))
        })
        .collect()
}

/// Seconds since the epoch of a date, by the system's `date` (independent of ours).
fn unix(date: &str) -> i64 {
    let o = std::process::Command::new("date")
        .args(["-u", "-d", date, "+%s"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("seconds")
}

/// The header's duration text for `s` seconds, as the page writes it.
fn duration_text(s: f64) -> String {
    if s < 60.0 {
        format!("{:.1} s", s)
    } else if s < 3600.0 {
        let w = s.round() as u64;
        format!("{} min {} s", w / 60, w % 60)
    } else {
        let w = s.round() as u64;
        format!("{} h {} min", w / 3600, w % 3600 / 60)
    }
}

/// `20261202-092510` as `2026-12-02 09:25:10 UTC`, by the system's `date`.
fn compact_date(d: &str) -> String {
    let (day, time) = d.split_once('-').expect("date-time");
    let o = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("{day} {}:{}:{}", &time[..2], &time[2..4], &time[4..]),
            "+%F %T UTC",
        ])
        .output()
        .expect("date");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn title(page: &str) -> String {
    let a = page.find("<title>").expect("a title") + 7;
    let b = page.find("</title>").expect("the title ends");
    unescape(&page[a..b])
}

#[test]
fn the_matrix_page_says_what_was_measured() {
    let f = fixture();
    let r = read_json(&f.matrix_a.join("results.json"));
    let md = &r["metadata"];
    let page = read(&f.matrix_a.join("report.html"));
    let run = kv_table(&page, "run");
    assert_eq!(run["Model"], md["model"]["id"].as_str().unwrap());
    assert_eq!(
        run["Engine"],
        format!(
            "{} {}",
            md["engine"]["name"].as_str().unwrap(),
            md["engine"]["version"].as_str().unwrap()
        )
    );
    assert_eq!(run["Hardware"], "H200");
    assert_eq!(md["hardware"]["gpu"], "H200");
    assert_eq!(run["Launch command"], LAUNCH);
    assert_eq!(md["launch_command"], LAUNCH);
    assert_eq!(run["Server"], md["base_url"].as_str().unwrap());
    assert_eq!(
        run["Tool"],
        format!("llmspeed {}", md["tool_version"].as_str().unwrap())
    );
    let date = md["date"].as_str().unwrap();
    assert_eq!(
        run["Date"],
        date.replace('T', " ").replace('Z', " UTC"),
        "the start as the file has it"
    );
    let finished = md["finished"]
        .as_str()
        .expect("a finished run records its end");
    assert_eq!(
        run["Duration"],
        duration_text((unix(finished) - unix(date)) as f64)
    );
    let settings = kv_table(&page, "settings");
    assert_eq!(
        settings["max_tokens"],
        r["metadata"]["settings"]["max_tokens"].to_string()
    );
    assert_eq!(settings["Concurrency"], "1, 2");
    assert_eq!(settings["Decode contexts"], "1K, 2K");
    let t = title(&page);
    assert!(t.contains("mock-model") && t.contains("H200"), "{t}");
    // A cell alone (?only=cell-...) keeps the header: the stylesheet hides all but the cells,
    // the title and the header.
    assert!(page.contains("body.only-cell>*:not(#cells):not(#header):not(h1)"));
}

#[test]
fn the_bench_serve_pages_say_what_was_measured() {
    let f = fixture();
    let r = read_json(&f.bench);
    let page = read(&f.timeline);
    let run = kv_table(&page, "run");
    assert_eq!(run["Model"], r["model_id"].as_str().unwrap());
    assert_eq!(run["Engine"], "vllm 0.11.0");
    assert_eq!(
        (r["engine"].as_str(), r["engine_version"].as_str()),
        (Some("vllm"), Some("0.11.0"))
    );
    assert_eq!(run["Hardware"], r["hardware"].as_str().unwrap());
    assert_eq!(
        run["Tool"],
        format!("llmspeed {}", r["llmspeed"]["version"].as_str().unwrap())
    );
    assert_eq!(run["Date"], compact_date(r["date"].as_str().unwrap()));
    assert_eq!(
        run["Duration"],
        duration_text(r["duration"].as_f64().unwrap())
    );
    let settings = kv_table(&page, "settings");
    assert_eq!(
        settings["Max concurrency"],
        r["max_concurrency"].to_string()
    );
    assert_eq!(settings["Prompts"], r["num_prompts"].to_string());
    let t = title(&page);
    assert!(
        t.contains(r["model_id"].as_str().unwrap()) && t.contains("1x H200"),
        "{t}"
    );

    // The sweep page: the first point's result says what was measured; the swept values and
    // the points' durations together.
    let summary = read_json(&f.sweep);
    let points: Vec<Value> = summary["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let file = PathBuf::from(p["result_files"][0].as_str().unwrap());
            read_json(&file)
        })
        .collect();
    assert_eq!(points.len(), 3);
    let page = read(&f.sweep_page);
    let run = kv_table(&page, "run");
    assert_eq!(run["Model"], points[0]["model_id"].as_str().unwrap());
    assert_eq!(run["Hardware"], "1x H200");
    assert_eq!(
        run["Tool"],
        format!(
            "llmspeed {}",
            points[0]["llmspeed"]["version"].as_str().unwrap()
        )
    );
    assert_eq!(
        run["Date"],
        compact_date(points[0]["date"].as_str().unwrap())
    );
    let total: f64 = points.iter().map(|p| p["duration"].as_f64().unwrap()).sum();
    assert_eq!(run["Duration"], duration_text(total));
    let settings = kv_table(&page, "settings");
    assert_eq!(settings["Sweep over"], "max_concurrency: 1, 2, 4");
    assert!(
        !settings.contains_key("Max concurrency"),
        "the swept setting is the sweep's"
    );
    assert!(title(&page).contains("sweep over max_concurrency"));
}

#[test]
fn the_compare_page_says_what_each_run_measured_and_how_their_settings_differ() {
    let f = fixture();
    let out = tempfile::tempdir().unwrap();
    llmspeed(&[
        "report",
        "compare",
        f.matrix_a.to_str().unwrap(),
        f.matrix_b.to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let page = read(&out.path().join("compare.html"));
    for (slot, dir) in [("-a", &f.matrix_a), ("-b", &f.matrix_b)] {
        let md = read_json(&dir.join("results.json"))["metadata"].clone();
        let run = kv_table(&page, &format!("run{slot}"));
        assert_eq!(run["Model"], md["model"]["id"].as_str().unwrap());
        assert_eq!(run["Hardware"], md["hardware"]["gpu"].as_str().unwrap());
        assert_eq!(
            run["Tool"],
            format!("llmspeed {}", md["tool_version"].as_str().unwrap())
        );
        let settings = kv_table(&page, &format!("settings{slot}"));
        assert_eq!(
            settings["max_tokens"],
            md["settings"]["max_tokens"].to_string()
        );
    }
    // The differing settings are named before the first number.
    let differ = page.find("id=\"differ\"").expect("the differences");
    let first_number = page.find("<section class=\"compare\">").expect("a table");
    assert!(differ < first_number);
    let line = text(&page[differ..page[differ..].find("</p>").unwrap() + differ]);
    assert!(
        line.contains("max_tokens") && line.contains("Concurrency"),
        "{line}"
    );
    assert!(
        !line.contains("Window"),
        "the same window is no difference: {line}"
    );
    let t = title(&page);
    assert!(t.contains("H200") && t.contains("RTX 6000"), "{t}");
}

/// `report site` over `inputs` into `out`; its stderr.
fn site(inputs: &[&Path], out: &Path) -> String {
    let mut args = vec!["report", "site"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--out", out.to_str().unwrap()]);
    llmspeed(&args)
}

/// One index row: its id and each headline figure's exact value (`None`: shown as missing).
fn index_rows(index: &str) -> BTreeMap<String, BTreeMap<String, Option<f64>>> {
    index
        .split("<tr class=\"run\" id=\"run-")
        .skip(1)
        .map(|row| {
            let id = row.split('"').next().unwrap().to_string();
            let row = row.split("</tr>").next().unwrap();
            let figures = row
                .split("<td class=\"num\" data-k=\"")
                .skip(1)
                .map(|cell| {
                    let k = cell.split('"').next().unwrap().to_string();
                    let v = cell
                        .split("data-v=\"")
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap();
                    (
                        k,
                        (!v.is_empty()).then(|| v.parse::<f64>().expect("a number")),
                    )
                })
                .collect();
            (id, figures)
        })
        .collect()
}

/// A run's data file (`runs/<id>.js`) as JSON.
fn run_data(site: &Path, id: &str) -> Value {
    let js = read(&site.join("runs").join(format!("{id}.js")));
    let json = js.split("] = ").nth(1).expect("an assignment");
    serde_json::from_str(json.trim_end().trim_end_matches(';')).expect("JSON data")
}

/// SGLang's lines, read with Python's non-finite floats as null.
fn sglang_records(p: &Path) -> Vec<Value> {
    read(p)
        .lines()
        .map(|l| {
            serde_json::from_str(&l.replace("Infinity", "null").replace("NaN", "null")).unwrap()
        })
        .collect()
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The headline figures a matrix `results.json` gives, computed here from the JSON.
fn matrix_headline(r: &Value) -> BTreeMap<String, Option<f64>> {
    let valid = |c: &&Value| c["status"]["kind"] == "valid";
    let prefill = r["prefill"]
        .as_array()
        .unwrap()
        .iter()
        .min_by_key(|p| p["context"].as_u64().unwrap())
        .filter(valid);
    let first = r["decode"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["context"].as_u64().unwrap())
        .min();
    let cells: Vec<&Value> = r["decode"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["context"].as_u64() == first)
        .filter(|c| matches!(c["status"]["kind"].as_str(), Some("valid" | "client_bound")))
        .collect();
    let c1 = cells.iter().find(|c| c["concurrency"] == 1);
    let top = cells
        .iter()
        .max_by_key(|c| c["concurrency"].as_u64().unwrap());
    BTreeMap::from([
        (
            "prefill".into(),
            prefill.and_then(|p| f(&p["prefill_tok_per_s"])),
        ),
        ("c1".into(), c1.and_then(|c| f(&c["output_tok_per_s"]))),
        ("top".into(), top.and_then(|c| f(&c["output_tok_per_s"]))),
        ("bench".into(), None),
        ("ttft".into(), None),
    ])
}

fn bench_headline(out: Option<f64>, ttft: Option<f64>) -> BTreeMap<String, Option<f64>> {
    BTreeMap::from([
        ("prefill".into(), None),
        ("c1".into(), None),
        ("top".into(), None),
        ("bench".into(), out),
        ("ttft".into(), ttft),
    ])
}

#[test]
fn every_number_on_the_site_is_the_runs_own() {
    let fx = fixture();
    let out = tempfile::tempdir().unwrap();
    let site_dir = out.path().join("site");
    let stderr = site(&[&fx.team], &site_dir);
    assert!(stderr.contains("(5 runs)"), "{stderr}");
    let index = read(&site_dir.join("index.html"));
    let rows = index_rows(&index);
    assert_eq!(
        rows.len(),
        5,
        "two matrices, a bench run, a sweep, an sglang record"
    );
    let mut kinds = Vec::new();
    for (id, figures) in &rows {
        let data = run_data(&site_dir, id);
        let origin = PathBuf::from(data["origin"].as_str().unwrap());
        let page = read(&site_dir.join("runs").join(format!("{id}.html")));
        let kind = data["kind"].as_str().unwrap().to_string();
        kinds.push(kind.clone());
        match kind.as_str() {
            "Speed test matrix" => {
                let r = read_json(&origin.join("results.json"));
                assert_eq!(figures, &matrix_headline(&r), "{id}");
                // The comparison's grid and prefill rows: the file's, cell for cell.
                let cells = r["decode"].as_array().unwrap();
                let got = data["decode"].as_array().unwrap();
                assert_eq!(got.len(), cells.len());
                for (g, c) in got.iter().zip(cells) {
                    assert_eq!(g["tok_s"], c["output_tok_per_s"]);
                    assert_eq!(g["per_request_tok_s"], c["per_request_tok_per_s"]);
                    assert_eq!(
                        (&g["context"], &g["concurrency"]),
                        (&c["context"], &c["concurrency"])
                    );
                }
                for (g, p) in data["prefill"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .zip(r["prefill"].as_array().unwrap())
                {
                    assert_eq!(g["tok_s"], p["prefill_tok_per_s"]);
                    assert_eq!(g["ttft_ms"], p["ttft_ms"]);
                }
                // The run's page is the folder's own report.html, with a way back.
                let own = read(&origin.join("report.html"));
                assert_eq!(
                    page.replacen(
                        "<nav class=\"site\"><a href=\"../index.html\">← all runs</a></nav>",
                        "",
                        1
                    ),
                    own
                );
            }
            "bench serve" => {
                let r = read_json(&origin);
                assert_eq!(
                    figures,
                    &bench_headline(f(&r["output_throughput"]), f(&r["median_ttft_ms"]))
                );
                check_bench_figures(&r, &data, &page);
            }
            "bench sglang" => {
                let (file, line) = data["origin"].as_str().unwrap().rsplit_once(':').unwrap();
                let r = &sglang_records(Path::new(file))[line.parse::<usize>().unwrap() - 1];
                assert_eq!(
                    figures,
                    &bench_headline(f(&r["output_throughput"]), f(&r["median_ttft_ms"]))
                );
                check_bench_figures(r, &data, &page);
                // Its header: what the server reported of itself, and the tool's version.
                let run = kv_table(&page, "run");
                let info = &r["server_info"];
                assert_eq!(run["Model"], info["served_model_name"].as_str().unwrap());
                assert_eq!(
                    run["Engine"],
                    format!("sglang {}", info["version"].as_str().unwrap())
                );
                assert_eq!(
                    run["Tool"],
                    format!("llmspeed {}", r["llmspeed"]["version"].as_str().unwrap())
                );
                assert_eq!(run["Date"], "not recorded", "SGLang's record has no date");
                assert_eq!(
                    run["Duration"],
                    duration_text(r["duration"].as_f64().unwrap())
                );
            }
            k if k.starts_with("bench serve sweep") => {
                let s = read_json(&origin);
                let pts = s["points"].as_array().unwrap();
                let best = pts
                    .iter()
                    .max_by(|a, b| {
                        a["output_throughput"]
                            .as_f64()
                            .unwrap()
                            .total_cmp(&b["output_throughput"].as_f64().unwrap())
                    })
                    .unwrap();
                assert_eq!(
                    figures,
                    &bench_headline(f(&best["output_throughput"]), f(&best["median_ttft_ms"]))
                );
                let got = data["sweep"]["points"].as_array().unwrap();
                assert_eq!(got.len(), pts.len());
                for (g, p) in got.iter().zip(pts) {
                    assert_eq!(g["x"].as_f64(), p["max_concurrency"].as_f64());
                    assert_eq!(g["output_throughput"], p["output_throughput"]);
                    assert_eq!(g["median_ttft_ms"], p["median_ttft_ms"]);
                }
                // The page's table: each point's figures as the summary has them (2 decimals).
                for p in pts {
                    let cell = format!("<td>{:.2}</td>", p["output_throughput"].as_f64().unwrap());
                    assert!(page.contains(&cell), "{cell} on the sweep page");
                }
            }
            other => panic!("unexpected kind {other}"),
        }
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "Speed test matrix",
            "Speed test matrix",
            "bench serve",
            "bench serve sweep over max_concurrency",
            "bench sglang"
        ]
    );
    // The sweep's points are the sweep's, not runs of their own; the folder that is not a
    // result is named with why.
    assert!(
        stderr.contains(&format!(
            "skipped {}: not a result",
            fx.team.join("notes").display()
        )),
        "{stderr}"
    );
    // Nothing loads from anywhere: no address but the site's own files.
    for p in [site_dir.join("index.html"), site_dir.join("compare.html")] {
        let page = read(&p);
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "{}",
            p.display()
        );
    }
}

/// Every number of a bench result is on its page and in its data, under its own key.
fn check_bench_figures(r: &Value, data: &Value, page: &str) {
    let numbers: Vec<(&String, f64)> = r
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(k, v)| v.as_f64().map(|v| (k, v)))
        .collect();
    assert!(numbers.len() > 10);
    let figures = data["figures"].as_array().unwrap();
    assert_eq!(figures.len(), numbers.len());
    for ((k, v), g) in numbers.iter().zip(figures) {
        assert_eq!(g[0].as_str(), Some(k.as_str()));
        assert_eq!(g[1].as_f64(), Some(*v));
        let cell = format!("<tr><td>{k}</td><td class=\"num\" data-v=\"{v}\">");
        assert!(page.contains(&cell), "{cell}");
    }
}

#[test]
fn a_grown_folder_adds_its_new_runs_and_old_or_odd_results_say_what_they_are() {
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let team = tmp.path().join("team");
    copy_dir(&fx.matrix_a, &team.join("a"));
    let site_dir = tmp.path().join("site");
    let first = site(&[&team], &site_dir);
    assert!(first.contains("(1 run)"), "{first}");
    let before = index_rows(&read(&site_dir.join("index.html")));

    // A new run in a nested folder, and a result from an older llmspeed (none of the fields
    // added since: no end, no machine, no loop rule, no per-gap data).
    copy_dir(&fx.matrix_b, &team.join("more").join("b"));
    let old = team.join("more").join("old");
    copy_dir(&fx.matrix_a, &old);
    let mut r = read_json(&old.join("results.json"));
    let md = r["metadata"].as_object_mut().unwrap();
    md.remove("finished");
    md["tool_version"] = "0.0.9 (old release)".into();
    let hw = md["hardware"].as_object_mut().unwrap();
    for k in ["client", "gpus", "gpu_source"] {
        hw.remove(k);
    }
    md["settings"].as_object_mut().unwrap().remove("loop_rule");
    for c in r["decode"].as_array_mut().unwrap() {
        let c = c.as_object_mut().unwrap();
        for k in [
            "gap_histogram",
            "token_bins",
            "window_start_ns",
            "window_end_ns",
        ] {
            c.remove(k);
        }
    }
    std::fs::write(old.join("results.json"), serde_json::to_string(&r).unwrap()).unwrap();
    // A result from a newer llmspeed, which this one cannot read.
    let newer = team.join("newer");
    copy_dir(&fx.matrix_a, &newer);
    let mut n = read_json(&newer.join("results.json"));
    n["schema_version"] = 99.into();
    n["metadata"]["tool_version"] = "9.0.0 (future)".into();
    std::fs::write(
        newer.join("results.json"),
        serde_json::to_string(&n).unwrap(),
    )
    .unwrap();

    let second = site(&[&team], &site_dir);
    assert!(second.contains("(3 runs)"), "{second}");
    assert!(
        second.contains(&format!(
            "skipped {}: written by llmspeed 9.0.0 (future) with results schema 99",
            newer.display()
        )) && second.contains("it needs an llmspeed that reads schema 99"),
        "{second}"
    );
    let after = index_rows(&read(&site_dir.join("index.html")));
    assert_eq!(after.len(), 3);
    for (id, figures) in &before {
        assert_eq!(
            after.get(id),
            Some(figures),
            "an old run keeps its id and figures"
        );
    }
    // The older result renders, saying what it lacks.
    let old_id = after
        .keys()
        .find(|id| run_data(&site_dir, id)["origin"].as_str() == Some(old.to_str().unwrap()))
        .expect("the older result is a run");
    let page = read(&site_dir.join("runs").join(format!("{old_id}.html")));
    assert_eq!(kv_table(&page, "run")["Duration"], "not recorded");
    assert_eq!(
        kv_table(&page, "run")["Tool"],
        "llmspeed 0.0.9 (old release)"
    );
    assert!(page.contains("The machine was not measured"));
}

#[test]
fn a_folder_with_no_result_is_skipped_with_why() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("deeper")).unwrap();
    std::fs::write(empty.join("deeper").join("notes.json"), "{\"todo\": 1}").unwrap();
    let stderr = site(&[&empty], &tmp.path().join("site"));
    assert!(stderr.contains("(0 runs)"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "skipped {}: not a result: no matrix, bench serve or sweep keys",
            empty.join("deeper").join("notes.json").display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "skipped {}: not a result (no results.json",
            empty.display()
        )),
        "{stderr}"
    );
    assert!(tmp.path().join("site").join("index.html").is_file());
}

#[test]
fn a_sweep_run_several_times_is_one_run_and_its_spreads_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let (mut mock, url) = process::mock(&[]);
    llmspeed(&[
        "bench",
        "serve",
        "--base-url",
        &url,
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--num-prompts",
        "4",
        "--sweep-max-concurrency",
        "1,2",
        "--num-runs",
        "2",
        "--save-result",
        "--result-dir",
        out.to_str().unwrap(),
        "--result-filename",
        "s.json",
    ]);
    mock.signal(libc::SIGTERM);
    mock.wait();
    let site_dir = tmp.path().join("site");
    let stderr = site(&[&out], &site_dir);
    // Four runs' files and two spreads: one sweep.
    assert!(stderr.contains("(1 run)"), "{stderr}");
    for point in ["concurrency1", "concurrency2"] {
        let spread = out.join(format!("s-{point}-runs.json"));
        assert!(
            stderr.contains(&format!(
                "skipped {}: the spread across repeated runs (--num-runs), not a run",
                spread.display()
            )),
            "{stderr}"
        );
    }
    let rows = index_rows(&read(&site_dir.join("index.html")));
    let (id, _) = rows.iter().next().unwrap();
    let data = run_data(&site_dir, id);
    assert_eq!(data["sweep"]["points"].as_array().unwrap().len(), 2);
}
