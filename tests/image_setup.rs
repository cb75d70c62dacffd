//! The set-up of image datasets: made on every core, the same bytes at any thread count, and
//! the dry run's image lines checked against a hand computation from the settings.
//!
//! Each image is made from its own copy of the generator (`workload::image::make_in_parallel`);
//! here the whole dataset is built in a pool of one thread and in pools of several, and every
//! sample (each prompt, each image's data URL) must come out byte for byte the same.

use base64::Engine as _;
use clap::Parser;
use llmspeed::bench::vllm::args::{ServeArgs, ServeConfig};
use llmspeed::workload::datasets::sglang_image::{ImageSettings, Resolution};
use llmspeed::workload::datasets::{self, random_mm, DatasetConfig, DatasetKind, RandomDraws};
use llmspeed::workload::image::Format;
use llmspeed::workload::sample::Sample;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    a: ServeArgs,
}

/// `bench serve --dataset-name random-mm` with these flags after the common ones.
fn random_mm_flags(n: usize, more: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "m",
        "--dataset-name",
        "random-mm",
        "--random-input-len",
        "12",
        "--random-output-len",
        "3",
        "--seed",
        "9",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(["--num-prompts".to_string(), n.to_string()]);
    v.extend(more.iter().map(|s| s.to_string()));
    v
}

fn serve_config(flags: &[String]) -> ServeConfig {
    let mut argv = vec!["x".to_string()];
    argv.extend_from_slice(flags);
    Wrap::parse_from(argv).a.validate().expect("valid flags")
}

/// The dataset built inside a rayon pool of `threads` threads.
fn load_with(threads: usize, cfg: &DatasetConfig) -> Vec<Sample> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| datasets::load(cfg, &mut |_: &str| Ok(0)).expect("dataset loads"))
}

/// Every sample, images included, the same for 1, 2 and 5 threads.
fn same_at_any_thread_count(cfg: &DatasetConfig) -> Vec<Sample> {
    let one = load_with(1, cfg);
    for n in [2, 5] {
        let many = load_with(n, cfg);
        assert_eq!(many.len(), one.len());
        for (i, (a, b)) in one.iter().zip(&many).enumerate() {
            assert!(a == b, "sample {i} differs between 1 and {n} threads");
        }
    }
    one
}

#[test]
fn random_mm_is_the_same_bytes_at_any_thread_count() {
    let flags = random_mm_flags(
        24,
        &[
            "--random-mm-base-items-per-request",
            "3",
            "--random-mm-num-mm-items-range-ratio",
            "0.67",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 4, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(24, 40, 1): 0.5, (17, 9, 1): 0.3, (64, 48, 1): 0.2}",
        ],
    );
    let cfg = serve_config(&flags);
    let samples = same_at_any_thread_count(&cfg.dataset);
    let per: Vec<usize> = samples.iter().map(|s| random_mm::images(s).len()).collect();
    // floor(3 * 0.33) = 0 to ceil(3 * 1.67) = 5, capped at 4: counts vary, so images are
    // made out of step with prompts.
    assert!(per.iter().min() < per.iter().max(), "{per:?}");
    assert!(per.iter().all(|&k| k <= 4), "{per:?}");
    // Noise images differ from one another: each got its own pixels, not a shared copy.
    let urls: std::collections::HashSet<&str> = samples
        .iter()
        .flat_map(random_mm::images)
        .map(|i| &*i.url)
        .collect();
    assert_eq!(urls.len(), per.iter().sum::<usize>());
}

#[test]
fn sglang_image_is_the_same_bytes_at_any_thread_count() {
    for (resolution, format) in [
        (
            Resolution::Random {
                min: (8, 5),
                max: (40, 30),
            },
            Format::Png,
        ),
        (
            Resolution::Fixed {
                width: 33,
                height: 21,
            },
            Format::Jpeg,
        ),
    ] {
        let cfg = DatasetConfig {
            kind: DatasetKind::SglangImage,
            num_prompts: 16,
            seed: 4,
            random_input_len: 10,
            random_output_len: 3,
            random_range_ratio: 0.5,
            random_draws: RandomDraws::Sglang {
                vocab: 0,
                offsets: false,
                text: true,
            },
            sglang_image: ImageSettings {
                count: 3,
                random_count: true,
                resolution,
                format,
                ..ImageSettings::default()
            },
            ..Default::default()
        };
        let samples = same_at_any_thread_count(&cfg);
        let total: usize = samples.iter().map(|s| random_mm::images(s).len()).sum();
        assert!(total > 16, "{resolution:?}: {total} images");
    }
}

/// The value after `label` on the dry run's line that starts with it.
fn field<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .unwrap_or_else(|| panic!("no line {label:?} in:\n{out}"))
        .trim()
}

/// The dry run of 5 prompts with 4 images of 72x128 each (fixed: count and pixels follow from
/// the settings alone), its image lines against the hand computation and the samples' URLs
/// decoded.
#[test]
fn the_dry_run_states_the_images_and_the_memory_their_urls_hold() {
    let (n, h, w) = (5u64, 72u64, 128u64);
    let flags = random_mm_flags(
        n as usize,
        &[
            "--random-mm-base-items-per-request",
            "4",
            "--random-mm-num-mm-items-range-ratio",
            "0",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 4, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(72, 128, 1): 1.0}",
        ],
    );
    let out = dry_run(&flags);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // By hand: 4 images a prompt, each 72 x 128 pixels.
    assert_eq!(
        field(&stdout, "Images:"),
        format!("{} (per prompt min/max: 4/4)", 4 * n)
    );
    assert_eq!(field(&stdout, "Image pixels:"), (4 * n * h * w).to_string());

    // The files' bytes: every URL of the same draw decoded, each a JPEG of that size.
    let samples = datasets::load(&serve_config(&flags).dataset, &mut |_: &str| Ok(0)).unwrap();
    let mut files = 0u64;
    let mut urls = 0u64;
    for img in samples.iter().flat_map(random_mm::images) {
        let b64 = img.url.strip_prefix("data:image/jpeg;base64,").unwrap();
        let file = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(&file[..2], &[0xFF, 0xD8]);
        files += file.len() as u64;
        // A data URL: its 23-byte prefix and 4 base64 characters for each 3 bytes, padded.
        urls += 23 + 4 * (file.len() as u64).div_ceil(3);
    }
    assert_eq!(field(&stdout, "Image bytes (encoded):"), files.to_string());
    let held = field(&stdout, "Image data URLs held in memory:");
    assert_eq!(
        held,
        format!("{urls} bytes ({:.1} MiB)", urls as f64 / 1048576.0)
    );
    // Noise hardly compresses: at quality 75 with 4:2:0 chroma the files stay above a sixth
    // of the pixels' bytes (a black image of that size is a few hundred bytes).
    assert!(files > 4 * n * h * w * 3 / 6, "{files}");
    // The set-up note says how many images were made and counted (each dropped: the dry
    // run of a run too large to hold counts it in bounded memory, tests/images_producer.rs).
    assert!(
        stderr.contains(&format!("images: {} made and counted in ", 4 * n)),
        "{stderr}"
    );
}

/// The estimate the memory check adds up, against the URLs the load makes: random-mm (its own
/// draw, sizes exact) and SGLang's image dataset, fixed (counts exact) and `random:` (expected
/// sizes), within 10%.
#[test]
fn the_memory_estimate_is_close_to_the_urls_made() {
    let urls = |samples: &[Sample]| -> u64 {
        samples
            .iter()
            .flat_map(random_mm::images)
            .map(|i| i.url.len() as u64)
            .sum()
    };
    let close = |what: &str, est: u64, made: u64| {
        let r = est as f64 / made as f64;
        assert!(
            (r - 1.0).abs() < 0.10,
            "{what}: estimate {est}, made {made}"
        );
    };
    let flags = random_mm_flags(
        10,
        &[
            "--random-mm-base-items-per-request",
            "2",
            "--random-mm-num-mm-items-range-ratio",
            "1",
            "--random-mm-limit-mm-per-prompt",
            r#"{"image": 4, "video": 0}"#,
            "--random-mm-bucket-config",
            "{(256, 256, 1): 0.5, (360, 640, 1): 0.5}",
        ],
    );
    let cfg = serve_config(&flags).dataset;
    close(
        "random-mm",
        datasets::image_bytes_estimate(&cfg),
        urls(&datasets::load(&cfg, &mut |_: &str| Ok(0)).unwrap()),
    );
    for (resolution, format) in [
        (
            Resolution::Fixed {
                width: 320,
                height: 256,
            },
            Format::Jpeg,
        ),
        (
            Resolution::Random {
                min: (200, 150),
                max: (400, 350),
            },
            Format::Png,
        ),
    ] {
        let cfg = DatasetConfig {
            kind: DatasetKind::SglangImage,
            num_prompts: 20,
            seed: 2,
            random_input_len: 10,
            random_output_len: 3,
            random_draws: RandomDraws::Sglang {
                vocab: 0,
                offsets: false,
                text: true,
            },
            sglang_image: ImageSettings {
                count: 3,
                random_count: true,
                resolution,
                format,
                ..ImageSettings::default()
            },
            ..Default::default()
        };
        close(
            &format!("{resolution:?}"),
            datasets::image_bytes_estimate(&cfg),
            urls(&datasets::load(&cfg, &mut |_: &str| Ok(0)).unwrap()),
        );
    }
}

/// `llmspeed bench serve --dry-run` with `flags`, against an address nothing listens on (a dry
/// run sends nothing).
fn dry_run(flags: &[String]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args([
            "bench",
            "serve",
            "--base-url",
            "http://127.0.0.1:9",
            "--dry-run",
        ])
        .args(flags)
        .output()
        .unwrap()
}
