//! The results folder: six files written atomically, readable back for `--resume`, and the
//! terminal summary.

mod report_common;

use llmspeed::report::{console, files};

#[test]
fn writes_six_files_and_reads_json_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results").join("run-1");
    let report = report_common::report();
    files::write_all(&out, &report).unwrap();
    // Overwriting (after the next cell) works and leaves no temporary files.
    files::write_all(&out, &report).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "decode.svg",
            "prefill.svg",
            "report.html",
            "report.md",
            "results.csv",
            "results.json"
        ]
    );
    assert_eq!(files::read_json(&out).unwrap(), report);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("# Speed test matrix\n"));
}

#[test]
fn re_rendering_rewrites_the_pages_and_leaves_results_json_alone() {
    let dir = tempfile::tempdir().unwrap();
    let report = report_common::report();
    files::write_all(dir.path(), &report).unwrap();
    let json_before = std::fs::read(dir.path().join(files::JSON)).unwrap();
    let mut edited = report.clone();
    edited.metadata.model.name = Some("renamed-model".into());
    files::write_rendered(dir.path(), &edited).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join(files::JSON)).unwrap(),
        json_before
    );
    for page in [files::HTML, files::MARKDOWN] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains("renamed-model"), "{page}");
    }
}

#[test]
fn read_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = files::read_json(dir.path()).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot read ") && e.contains("results.json"),
        "{e}"
    );
    std::fs::write(dir.path().join("results.json"), "{\"schema_version\": 1}").unwrap();
    let e = files::read_json(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("is not a results file this version can resume from"),
        "{e}"
    );
}

#[test]
fn console_summary_grid() {
    let s = console::summary(&report_common::report());
    let expected = "\
prefill     8K:    31.4K tok/s  TTFT 261 ms  [Valid]
prefill   128K:  6,473.0 tok/s  TTFT 19,927 ms  [Valid]
prefill   256K:        — tok/s  TTFT —  [Failed]
decode        1       2       4       8
8K        101.2 190.4 L 310.0 Q    over
128K       95.7   176.9    FAIL    over
251K       68.4       ·    skip    skip
total output tok/s; L = looped, Q = queued (figures kept), over = over capacity, skip = does not fit, · = not run
failed prefill 256K: http_status (HTTP 400): This model's maximum context length is 262144 tokens.
";
    assert_eq!(s, expected, "\n{s}");
}
