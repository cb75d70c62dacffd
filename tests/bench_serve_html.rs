//! `bench serve --plot-timeline` and the requests-completed progress bar, through the binary
//! against the simulated server on 127.0.0.1:0.

use llmspeed::mock::{serve, MockConfig, Profile};
use std::process::Command;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const BIN: &str = env!("CARGO_BIN_EXE_llmspeed");

/// The simulated server on its own runtime; dropped, it stops.
struct Mock {
    url: String,
    _stop: oneshot::Sender<()>,
    _rt: tokio::runtime::Runtime,
}

fn mock() -> Mock {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(serve(
        listener,
        MockConfig::profile(Profile::Fast),
        async move {
            let _ = rx.await;
        },
    ));
    Mock {
        url,
        _stop: stop,
        _rt: rt,
    }
}

fn serve_args(url: &str, file: &std::path::Path) -> Vec<String> {
    [
        "bench",
        "serve",
        "--base-url",
        url,
        "--num-prompts",
        "7",
        "--random-input-len",
        "16",
        "--random-output-len",
        "6",
        "--save-result",
        "--result-filename",
        file.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn plot_timeline_writes_one_bar_per_request_self_contained() {
    let m = mock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    let o = Command::new(BIN)
        .args(serve_args(&m.url, &file))
        .args(["--plot-timeline", "--timeline-itl-thresholds", "1,2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html_path = dir.path().join("run.timeline.html");
    assert!(stdout.contains("Timeline plot saved to:"), "{stdout}");
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("<g class=\"req\">").count(), 7, "{html}");
    // Self-contained: no URL but the SVG namespace, which is never fetched.
    let rest = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!rest.contains("http:") && !rest.contains("https:") && !rest.contains("src="));
    // The thresholds given are the legend's.
    assert!(
        html.contains("ITL &lt; 1 ms") && html.contains("ITL &ge; 2 ms"),
        "{html}"
    );
    assert!(file.exists());
}

/// vLLM makes `--result-dir` when it does not exist before writing either file; the timeline page
/// is written first, so it must not fail on a folder that is not there yet.
#[test]
fn plot_timeline_makes_a_result_dir_that_does_not_exist_yet() {
    let m = mock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("not/yet");
    let o = Command::new(BIN)
        .args(serve_args(&m.url, std::path::Path::new("run.json")))
        .args(["--plot-timeline", "--result-dir", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(out.join("run.timeline.html")).unwrap();
    assert_eq!(html.matches("<g class=\"req\">").count(), 7, "{html}");
    assert!(out.join("run.json").exists());
}

#[test]
fn bad_thresholds_are_a_usage_error() {
    for bad in ["25", "25,50,75", "50,25", "a,b"] {
        let o = Command::new(BIN)
            .args([
                "bench",
                "serve",
                "--base-url",
                "http://127.0.0.1:9",
                "--plot-timeline",
                "--timeline-itl-thresholds",
                bad,
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--timeline-itl-thresholds"),
            "{bad}"
        );
    }
}

#[test]
fn a_terminal_shows_requests_completed() {
    if Command::new("script").arg("--version").output().is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "`script` needed"
        );
        return;
    }
    let m = mock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    let cmd = std::iter::once(BIN.to_string())
        .chain(serve_args(&m.url, &file))
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{all}");
    assert!(all.contains("\x1b["), "{all}");
    assert!(all.contains("7/7 requests"), "{all}");
    // --disable-tqdm: vLLM's switch for the bar.
    let o = Command::new("script")
        .args(["-qfec", &format!("{cmd} --disable-tqdm"), "/dev/null"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{all}");
    assert!(
        !all.contains("\x1b[") && !all.contains("7/7 requests"),
        "{all}"
    );
}
