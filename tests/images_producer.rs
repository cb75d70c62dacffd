//! The image producer (`bench::engine::producer`): a run whose images are made during the run,
//! a bounded window of requests ahead of the dispatcher, sends the same bytes as the run whose
//! images are all made before it; its memory stays bounded by the window; and a producer that
//! falls behind shows as the client's dispatch lag (Client-bound), not as the server's time.
//!
//! Each run is the `llmspeed` binary in a child process (`LLMSPEED_IMAGE_WINDOW` forces the
//! producer and its window there, and the child's peak RSS is its own), against the simulated
//! server on a thread of this process, which logs every request body.

use llmspeed::mock::{MockConfig, Profile};
use llmspeed::workload::request_id::RequestId;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use support::mock::MockThread;

mod support;

const WINDOW: &str = "LLMSPEED_IMAGE_WINDOW";
const DELAY: &str = "LLMSPEED_TEST_PRODUCER_DELAY_MS";

/// `llmspeed args` against a fresh simulated server logging its requests to `log`, with
/// `env` set (and the producer's variables removed otherwise).
fn run(args: &[&str], env: &[(&str, &str)], log: Option<&Path>) -> Output {
    let mut mcfg = MockConfig::profile(Profile::Fast);
    mcfg.request_log = log.map(Path::to_path_buf);
    let mock = MockThread::start(mcfg);
    let url = mock.url();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llmspeed"));
    cmd.args(&args[..2])
        .args(["--base-url", &url])
        .args(&args[2..]);
    cmd.env_remove(WINDOW).env_remove(DELAY);
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    mock.stop();
    out
}

/// Each benchmark request's body as the server received it, by request index (warm-ups and the
/// initial test carry no index).
fn bodies(log: &Path) -> BTreeMap<u64, Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|r| match RequestId::parse(r["request_id"].as_str()?) {
            Some(RequestId::Bench { index, .. }) => Some((index, r["body"].clone())),
            _ => None,
        })
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const RANDOM_MM: &[&str] = &[
    "bench",
    "serve",
    "--backend",
    "openai-chat",
    "--dataset-name",
    "random-mm",
    "--num-prompts",
    "12",
    "--random-input-len",
    "16",
    "--random-output-len",
    "3",
    "--random-mm-base-items-per-request",
    "2",
    "--random-mm-num-mm-items-range-ratio",
    "1.0",
    "--random-mm-limit-mm-per-prompt",
    r#"{"image": 3, "video": 0}"#,
    "--random-mm-bucket-config",
    "{(32, 48, 1): 0.5, (16, 24, 1): 0.5}",
    "--max-concurrency",
    "3",
    "--seed",
    "5",
    "--save-result",
];

/// The result file `bench serve --save-result` wrote in `dir`.
fn vllm_result(dir: &Path) -> Value {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a result file");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// For a seed, `random-mm` through the producer (a window of 2) sends every request's body
/// byte for byte as the run whose images were made before it, and its results count the same
/// images, pixels and encoded bytes per request.
#[test]
fn random_mm_through_the_producer_sends_the_up_front_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut got = Vec::new();
    for (name, env) in [("up", vec![]), ("producer", vec![(WINDOW, "2")])] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let log = dir.join("requests.jsonl");
        let mut args = RANDOM_MM.to_vec();
        args.extend(["--result-dir", dir.to_str().unwrap()]);
        let out = run(&args, &env, Some(&log));
        let err = stderr(&out);
        assert!(out.status.success(), "{name}: {err}");
        match name {
            "up" => assert!(err.contains(" made before the run in "), "{err}"),
            _ => assert!(
                err.contains("made during the run by a producer 2 request(s) ahead of the dispatcher (of 12)"),
                "{err}"
            ),
        }
        let result = vllm_result(&dir);
        assert_eq!(result["completed"], 12, "{name}");
        got.push((bodies(&log), result["llmspeed"]["images"].clone()));
    }
    let (up, producer) = (&got[0], &got[1]);
    assert_eq!(up.0.len(), 12);
    assert_eq!(
        up.0.keys().collect::<Vec<_>>(),
        producer.0.keys().collect::<Vec<_>>()
    );
    let mut images = 0;
    for (i, body) in &up.0 {
        images += body["messages"][0]["content"].as_array().unwrap().len() - 1;
        assert_eq!(body, &producer.0[i], "request {i}");
    }
    // From 0 to 3 a request (base 2, range ratio 1).
    assert!(images > 12, "{images} images");
    assert!(up.1["encoded_bytes"].is_array(), "{}", up.1);
    assert_eq!(up.1, producer.1);
}

/// The same for SGLang's `image` dataset on its native endpoint (`image_data`), counts and
/// sizes drawn at random.
#[test]
fn sglang_image_through_the_producer_sends_the_up_front_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = support::processor::folder(tmp.path());
    let mut got = Vec::new();
    for (name, env) in [("up", vec![]), ("producer", vec![(WINDOW, "1")])] {
        let log = tmp.path().join(format!("{name}.jsonl"));
        let file = tmp.path().join(format!("{name}-out.jsonl"));
        let args = [
            "bench",
            "sglang",
            "--dataset-name",
            "image",
            "--num-prompts",
            "10",
            "--random-input-len",
            "8",
            "--random-output-len",
            "2",
            "--image-count",
            "3",
            "--random-image-count",
            "--image-resolution",
            "random:8x8-40x48",
            "--seed",
            "9",
            // The native backend sends the processor's chat template: the folder holds it.
            "--tokenizer",
            folder.to_str().unwrap(),
            "--output-file",
            file.to_str().unwrap(),
        ];
        let out = run(&args, &env, Some(&log));
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        // SGLang's records write Python's NaN and Infinity where JSON has no number.
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("Infinity", "null")
            .replace("NaN", "null");
        let rec: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        got.push((bodies(&log), rec["llmspeed"]["images"].clone()));
    }
    let (up, producer) = (&got[0], &got[1]);
    assert_eq!(up.0.len(), 10);
    for (i, body) in &up.0 {
        assert!(body["image_data"].as_array().is_some_and(|a| !a.is_empty()));
        // SGLang's native prompt: the processor's template around the images and the text.
        let text = body["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("<s><|user|>\n<image>"), "{text:?}");
        assert_eq!(Some(body), producer.0.get(i), "request {i}");
    }
    assert_eq!(up.0.len(), producer.0.len());
    assert!(up.1["encoded_bytes"].is_array(), "{}", up.1);
    assert_eq!(up.1, producer.1);
}

/// A run whose images, made before it, would hold about 325 MiB of data URLs (400 requests of
/// four 640x360 noise JPEGs: the estimate `image_bytes_estimate` gives, which
/// `tests/image_setup.rs` holds within 10% of the made bytes) runs through a producer window
/// of 2 requests with the peak RSS of a run of 2 requests, give or take an eighth of those
/// images: what it holds is the window's, never the run's. (Made up front, the same run peaks
/// near 1 GB: the URLs, and the request bodies built from them before the start.)
#[test]
fn a_small_window_bounds_the_runs_peak_memory() {
    let args = |n: &'static str| {
        [
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--dataset-name",
            "random-mm",
            "--num-prompts",
            n,
            "--random-input-len",
            "8",
            "--random-output-len",
            "1",
            "--random-mm-base-items-per-request",
            "4",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 4, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(360, 640, 1): 1.0}",
            "--max-concurrency",
            "2",
        ]
    };
    let up_front = {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: llmspeed::bench::vllm::args::ServeArgs,
        }
        let mut argv = vec!["x", "--base-url", "http://127.0.0.1:9"];
        argv.extend_from_slice(&args("400")[2..]);
        let cfg = Wrap::parse_from(argv).a.validate().unwrap();
        llmspeed::workload::datasets::image_bytes_estimate(&cfg.dataset)
    };
    assert!(up_front > 300 << 20, "{up_front}");
    let tmp = tempfile::tempdir().unwrap();
    let peak = |n: &'static str| {
        let err_file = tmp.path().join(format!("stderr-{n}.txt"));
        let mock = MockThread::start(MockConfig::profile(Profile::Fast));
        let url = mock.url();
        let a = args(n);
        // Reaped by `wait_child` (wait4, which hands over the child's peak RSS).
        #[allow(clippy::zombie_processes)]
        let child = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(&a[..2])
            .args(["--base-url", &url])
            .args(&a[2..])
            .env(WINDOW, "2")
            .env_remove(DELAY)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_file).unwrap())
            .spawn()
            .unwrap();
        let (status, _cpu, peak) = llmspeed::sys::wait_child(child.id()).unwrap();
        mock.stop();
        let err = std::fs::read_to_string(&err_file).unwrap();
        assert_eq!(status, 0, "the run failed: {err}");
        assert!(err.contains("a producer 2 request(s) ahead"), "{err}");
        peak
    };
    let (small, whole) = (peak("2"), peak("400"));
    eprintln!(
        "peak RSS {:.1} MiB for 400 requests through a window of 2, {:.1} MiB for 2; up front \
         {:.1} MiB of data URLs",
        whole as f64 / 1048576.0,
        small as f64 / 1048576.0,
        up_front as f64 / 1048576.0
    );
    assert!(
        whole.saturating_sub(small) < up_front / 8,
        "peak RSS {whole} bytes, {small} for 2 requests, the images made up front {up_front}"
    );
}

/// A producer made slow (each image 300 ms late, a window of 1) leaves every request waiting
/// for its images past its send time: the wait is the client's dispatch lag (each request's
/// at least the 300 ms of its own image), the run is Client-bound for it, and the TTFT from the
/// moment the request was written (`--latency-from sent`, vLLM's origin) holds none of it. So
/// too under a concurrency cap, where the wait runs from the moment the request's slot came
/// free. (By default latency starts at the scheduled send, so the TTFT holds the wait, and the
/// verdict says why.)
#[test]
fn a_slow_producer_is_the_clients_dispatch_lag_not_the_servers_ttft() {
    for cap in [None, Some("1")] {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = vec![
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--dataset-name",
            "random-mm",
            "--num-prompts",
            "6",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--random-mm-bucket-config",
            "{(16, 16, 1): 1.0}",
            "--latency-from",
            "sent",
            "--save-result",
            "--result-dir",
            tmp.path().to_str().unwrap(),
        ];
        if let Some(c) = cap {
            args.extend(["--max-concurrency", c]);
        }
        let out = run(&args, &[(WINDOW, "1"), (DELAY, "300")], None);
        assert!(out.status.success(), "{}", stderr(&out));
        let v = vllm_result(tmp.path());
        assert_eq!(v["completed"], 6);
        let lag = &v["llmspeed"]["client_lag"];
        let dispatch_p50 = lag["dispatch_lag_ms"]["p50"].as_f64().unwrap();
        // Uncapped, each request waits from its send time at least its own image's 300 ms
        // (the window of 1 starts it when the one before is taken). Capped at 1, from the
        // moment its slot came free: 300 ms less the request before's time at the simulated
        // server (a few ms; under 100 even on a loaded machine).
        let least = match cap {
            None => 300.0,
            Some(_) => 200.0,
        };
        assert!(dispatch_p50 >= least, "{cap:?}: {lag}");
        assert_eq!(lag["client_bound"], true, "{cap:?}: {lag}");
        let reasons = lag["client_bound_reasons"].to_string();
        assert!(reasons.contains("requests were written"), "{reasons}");
        let ttft = v["median_ttft_ms"].as_f64().unwrap();
        assert!(
            ttft < dispatch_p50,
            "{cap:?}: TTFT {ttft} ms holds the wait"
        );
    }
}

/// `bench serve --dry-run` with `args` (no server: a dry run sends nothing), reaped by
/// `wait_child` for its peak RSS: its exit status, stdout, stderr and peak RSS in bytes. On a
/// pool of 2 threads whatever the machine: each thread holds the image it makes, so a large
/// dry run's peak grows with the cores that a small one leaves idle.
fn dry_run_peak(args: &[&str], tmp: &Path) -> (i32, String, String, u64) {
    let (out_file, err_file) = (tmp.join("dry.out"), tmp.join("dry.err"));
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "bench",
            "serve",
            "--base-url",
            "http://127.0.0.1:9",
            "--dry-run",
        ])
        .args(args)
        .env_remove(WINDOW)
        .env_remove(DELAY)
        .env("RAYON_NUM_THREADS", "2")
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let (status, _cpu, peak) = llmspeed::sys::wait_child(child.id()).unwrap();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    (status, read(&out_file), read(&err_file), peak)
}

/// The value after `label` on the dry run's line that starts with it.
fn field<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .unwrap_or_else(|| panic!("no line {label:?} in:\n{out}"))
        .trim()
}

/// The dry run makes each image from its recipe, counts it and drops it: for the run of
/// `a_small_window_bounds_the_runs_peak_memory` (400 requests of four 640x360 noise JPEGs,
/// about 325 MiB of data URLs made up front, 1600 images and 1600 × 640 × 360 pixels by hand)
/// its peak RSS is that of the dry run of 2 requests, give or take an eighth of those images,
/// where it used to hold them all; and for a small run its totals are those of the images
/// made up front (`datasets::load`, the run's path), byte for byte.
#[test]
fn the_dry_run_counts_the_images_without_holding_them() {
    let args = |n: &'static str| {
        [
            "--backend",
            "openai-chat",
            "--model",
            "m",
            "--dataset-name",
            "random-mm",
            "--num-prompts",
            n,
            "--random-input-len",
            "8",
            "--random-output-len",
            "1",
            "--random-mm-base-items-per-request",
            "4",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 4, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(360, 640, 1): 1.0}",
        ]
    };
    let cfg = |n: &'static str| {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: llmspeed::bench::vllm::args::ServeArgs,
        }
        let mut argv = vec!["x", "--base-url", "http://127.0.0.1:9"];
        argv.extend_from_slice(&args(n));
        Wrap::parse_from(argv).a.validate().unwrap()
    };
    let up_front = llmspeed::workload::datasets::image_bytes_estimate(&cfg("400").dataset);
    assert!(up_front > 300 << 20, "{up_front}");
    let tmp = tempfile::tempdir().unwrap();

    // A small run: the same totals as its images made up front.
    let (status, out, err, small) = dry_run_peak(&args("2"), tmp.path());
    assert_eq!(status, 0, "{err}");
    let made = llmspeed::workload::datasets::load(&cfg("2").dataset, &mut |_: &str| Ok(0)).unwrap();
    let images = made
        .iter()
        .map(llmspeed::workload::datasets::random_mm::images);
    let t = llmspeed::workload::image::ImageTotals::of(images).unwrap();
    assert_eq!(field(&out, "Images:"), "8 (per prompt min/max: 4/4)");
    assert_eq!(field(&out, "Image pixels:"), (8 * 640 * 360).to_string());
    assert_eq!(
        field(&out, "Image bytes (encoded):"),
        t.encoded_bytes.to_string()
    );
    assert_eq!(
        field(&out, "Image data URLs held in memory:"),
        format!(
            "{} bytes ({:.1} MiB)",
            t.url_bytes,
            t.url_bytes as f64 / 1048576.0
        )
    );
    assert!(err.contains("images: 8 made and counted in "), "{err}");

    // A run too large to hold: counted in the memory of the small one.
    let (status, out, err, whole) = dry_run_peak(&args("400"), tmp.path());
    assert_eq!(status, 0, "{err}");
    assert_eq!(field(&out, "Images:"), "1600 (per prompt min/max: 4/4)");
    assert_eq!(field(&out, "Image pixels:"), (1600 * 640 * 360).to_string());
    let urls: u64 = field(&out, "Image data URLs held in memory:")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The images counted are the ones the estimate weighed (held within 10% by image_setup).
    assert!(urls.abs_diff(up_front) < up_front / 10, "{urls} {up_front}");
    eprintln!(
        "dry run peak RSS {:.1} MiB for 400 requests, {:.1} MiB for 2; up front {:.1} MiB of \
         data URLs",
        whole as f64 / 1048576.0,
        small as f64 / 1048576.0,
        urls as f64 / 1048576.0
    );
    assert!(
        whole.saturating_sub(small) < urls / 8,
        "peak RSS {whole} bytes, {small} for 2 requests, the data URLs {urls}"
    );
}

/// A `custom_image` run whose files, sent as data URLs (`--custom-ensure-client-side-data`),
/// would not fit in memory is refused before any file is read, run and dry run alike: one
/// sparse file twice the memory available (no disk taken, and reading it would take minutes),
/// whose data URL is 23 + 4·⌈n/3⌉ bytes for its n bytes, the figure the message gives.
#[test]
fn a_custom_image_run_too_large_to_hold_is_refused_before_reading_a_file() {
    let available = llmspeed::sys::mem_available().expect("MemAvailable");
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.png");
    let n = 2 * available + 1;
    std::fs::File::create(&big).unwrap().set_len(n).unwrap();
    let data = tmp.path().join("d.jsonl");
    let line = serde_json::json!({"prompt": "a b", "image_files": [big.to_str().unwrap()]});
    std::fs::write(&data, format!("{line}\n")).unwrap();
    let need = 23 + 4 * n.div_ceil(3);
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / 1073741824.0);
    let flags = [
        "--backend",
        "openai-chat",
        "--model",
        "mock",
        "--dataset-name",
        "custom_image",
        "--dataset-path",
        data.to_str().unwrap(),
        "--custom-ensure-client-side-data",
        "--custom-output-len",
        "3",
        "--num-prompts",
        "1",
    ];
    let check = |status: bool, err: &str| {
        assert!(!status, "{err}");
        assert!(
            err.contains("image files are read before the run")
                && err.contains(&format!("about {}", gib(need)))
                && err.contains("MemAvailable")
                && err.contains("--custom-ensure-client-side-data"),
            "{err} (need {need})"
        );
    };
    let (status, _, err, _) = dry_run_peak(&flags, tmp.path());
    check(status == 0, &err);
    let mut argv = vec!["bench", "serve"];
    argv.extend_from_slice(&flags);
    let out = run(&argv, &[], None);
    check(out.status.success(), &stderr(&out));
}
