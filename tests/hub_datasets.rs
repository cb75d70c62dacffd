//! `workload::hub::dataset_files_in` against the stand-in hub of `tests/support/hub.rs` (the
//! hub's API and resolve URLs, a 302 to a CDN origin, 206 answers to `Range`, 401 for gated
//! repositories, 404s): a split's files are chosen as the `datasets` library chooses them,
//! downloaded into `huggingface_hub`'s cache layout, found there next time with no network,
//! resumed after a dropped connection, refused offline, and every failure names the URL, the
//! status and what to do. With the reference Python (`LLMSPEED_VLLM_REF_PYTHON`), the cache is
//! shared both ways with `huggingface_hub` itself, pointed at the same stand-in.

#[path = "conformance/reference.rs"]
mod reference;
#[path = "support/hub.rs"]
mod stand_in;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use llmspeed::workload::hub::{dataset_files_in, HubSettings};
use llmspeed::workload::rows::{self, FileFormat, RowOrder};
use serde_json::{json, Value};
use stand_in::{Repo, StandIn};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const CONV_SHA: &str = "fedcba9876543210fedcba9876543210fedcba98";

fn jsonl(range: std::ops::Range<u32>) -> Vec<u8> {
    range
        .map(|i| format!("{{\"id\": {i}, \"prompt\": \"p{i}\"}}\n"))
        .collect::<String>()
        .into_bytes()
}

/// `org/chat`: two subsets declared in its card, JSON Lines shards.
fn chat_repo() -> Repo {
    let mut files = BTreeMap::new();
    files.insert("README.md".into(), b"---\nconfigs:\n- config_name: main\n  default: true\n  data_files:\n  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n- config_name: hard\n  data_files:\n  - split: train\n    path: hard/*.jsonl\n---\n# chat\n".to_vec());
    files.insert("main/train-0.jsonl".into(), jsonl(0..300));
    files.insert("main/train-1.jsonl".into(), jsonl(300..500));
    files.insert("main/test-0.jsonl".into(), jsonl(500..510));
    files.insert("hard/a.jsonl".into(), jsonl(900..905));
    Repo {
        id: "org/chat".into(),
        sha: SHA.into(),
        files,
        configs: json!([
            {"config_name": "main", "default": true, "data_files": [
                {"split": "train", "path": "main/train-*"}, {"split": "test", "path": "main/test-*"}]},
            {"config_name": "hard", "data_files": [{"split": "train", "path": "hard/*.jsonl"}]}
        ]),
        ..Repo::default()
    }
}

fn settings(hub: &str, token: Option<&str>, offline: bool) -> HubSettings {
    HubSettings {
        endpoint: hub.into(),
        token: token.map(str::to_string),
        offline,
    }
}

fn err(r: Result<rows::DatasetFiles, Box<llmspeed::workload::hub::HubError>>) -> String {
    r.err().expect("an error").to_string()
}

#[test]
fn a_split_is_chosen_downloaded_into_the_cache_layout_and_found_there_offline() {
    let hub = StandIn::start(vec![chat_repo()]);
    let cache = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, None, false);
    let got = dataset_files_in("org/chat", None, "train", None, cache.path(), &s).unwrap();
    let repo = cache.path().join("datasets--org--chat");
    let snap = repo.join("snapshots").join(SHA);
    assert_eq!(got.subset.as_deref(), Some("main"));
    assert_eq!(got.format, FileFormat::JsonLines);
    assert_eq!(
        got.files,
        vec![
            snap.join("main/train-0.jsonl"),
            snap.join("main/train-1.jsonl")
        ]
    );
    // huggingface_hub's layout: refs/main, blobs named by etag, relative links, the card.
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        SHA
    );
    let data = chat_repo().files["main/train-0.jsonl"].clone();
    let blob = repo
        .join("blobs")
        .join(stand_in::etag("main/train-0.jsonl", &data));
    assert_eq!(std::fs::read(&blob).unwrap(), data);
    #[cfg(unix)]
    assert_eq!(
        std::fs::read_link(snap.join("main/train-0.jsonl")).unwrap(),
        Path::new("../../../blobs").join(stand_in::etag("main/train-0.jsonl", &data))
    );
    assert!(snap.join("README.md").is_file());
    assert!(!std::fs::read_dir(repo.join("blobs"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".incomplete")));
    let ids: Vec<i64> = rows::open(&got, &["id"], RowOrder::AsStored)
        .unwrap()
        .map(|r| r.unwrap()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (0..500).collect::<Vec<_>>());

    // Next time, offline and with nothing listening: the cache alone answers, card and all.
    let before = hub.seen().len();
    let dead = settings("http://127.0.0.1:9", None, true);
    let again = dataset_files_in("org/chat", None, "train", None, cache.path(), &dead).unwrap();
    assert_eq!(again, got);
    let hard = dataset_files_in("org/chat", Some("hard"), "train", None, cache.path(), &s).unwrap();
    assert_eq!(hard.files, vec![snap.join("hard/a.jsonl")]);
    let e = err(dataset_files_in(
        "org/chat",
        None,
        "dev",
        None,
        cache.path(),
        &dead,
    ));
    assert!(
        e.contains("no split \"dev\"") && e.contains("train, test"),
        "{e}"
    );
    // Only the hard subset, not fetched before, asked the hub: its API, then the file's
    // resolve URL and the CDN.
    assert_eq!(hub.seen().len(), before + 3);
}

#[test]
fn a_dropped_download_resumes_with_a_range_request() {
    let hub = StandIn::start(vec![chat_repo()]);
    let cache = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, None, false);
    hub.cut_next(1000);
    let e = err(dataset_files_in(
        "org/chat",
        None,
        "train",
        None,
        cache.path(),
        &s,
    ));
    assert!(e.contains("/cdn/") && e.contains("resumes"), "{e}");
    let data = chat_repo().files["main/train-0.jsonl"].clone();
    let tag = stand_in::etag("main/train-0.jsonl", &data);
    let part = cache
        .path()
        .join("datasets--org--chat/blobs")
        .join(format!("{tag}.incomplete"));
    assert_eq!(std::fs::metadata(&part).unwrap().len(), 1000);
    let got = dataset_files_in("org/chat", None, "train", None, cache.path(), &s).unwrap();
    assert_eq!(std::fs::read(&got.files[0]).unwrap(), data);
    let ranges: Vec<String> = hub.seen().into_iter().filter_map(|r| r.range).collect();
    assert_eq!(
        ranges,
        vec!["bytes=1000-".to_string(); 2],
        "hub and CDN asked from byte 1000"
    );
    assert!(!part.exists());
}

#[test]
fn failures_name_the_url_the_status_and_what_to_do() {
    let mut gated = chat_repo();
    gated.id = "org/gated".into();
    gated.token = Some("hf_right".into());
    let hub = StandIn::start(vec![chat_repo(), gated]);
    let cache = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, None, false);

    let e = err(dataset_files_in(
        "org/nope",
        None,
        "train",
        None,
        cache.path(),
        &s,
    ));
    assert!(
        e.contains(&format!("{}/api/datasets/org/nope/revision/main", hub.url)),
        "{e}"
    );
    assert!(e.contains("404") && e.contains("check the id"), "{e}");

    let e = err(dataset_files_in(
        "org/gated",
        None,
        "train",
        None,
        cache.path(),
        &s,
    ));
    assert!(
        e.contains("401") && e.contains("HF_TOKEN") && e.contains("accept its terms"),
        "{e}"
    );
    let wrong = settings(&hub.url, Some("hf_wrong"), false);
    let e = err(dataset_files_in(
        "org/gated",
        None,
        "train",
        None,
        cache.path(),
        &wrong,
    ));
    assert!(
        e.contains("401") && e.contains("HF_TOKEN is not allowed"),
        "{e}"
    );
    let right = settings(&hub.url, Some("hf_right"), false);
    dataset_files_in("org/gated", None, "train", None, cache.path(), &right).unwrap();
    // The token goes to the hub, never to the CDN it redirects to.
    for r in hub.seen() {
        if r.path.starts_with("/cdn/") {
            assert_eq!(r.auth, None, "{r:?}");
        }
    }

    let e = err(dataset_files_in(
        "org/chat",
        Some("easy"),
        "train",
        None,
        cache.path(),
        &s,
    ));
    assert!(
        e.contains("no subset \"easy\"") && e.contains("main, hard"),
        "{e}"
    );
    let e = err(dataset_files_in(
        "org/chat",
        Some("hard"),
        "test",
        None,
        cache.path(),
        &s,
    ));
    assert!(
        e.contains("no split \"test\"") && e.contains("its splits: train"),
        "{e}"
    );

    let off = settings(&hub.url, None, true);
    let e = err(dataset_files_in(
        "org/other",
        None,
        "train",
        None,
        cache.path(),
        &off,
    ));
    assert!(
        e.contains("HF_HUB_OFFLINE") && e.contains("datasets--org--other"),
        "{e}"
    );
    let e = err(dataset_files_in(
        "a/b/c",
        None,
        "train",
        None,
        cache.path(),
        &s,
    ));
    assert!(e.contains("owner/name"), "{e}");
}

#[test]
fn a_repository_without_data_files_we_read_uses_the_hubs_parquet_conversion() {
    let mut csv = Repo {
        id: "org/csv".into(),
        sha: SHA.into(),
        ..Repo::default()
    };
    csv.files.insert("data.csv".into(), b"a,b\n1,2\n".to_vec());
    let mut conv = Repo {
        id: "org/csv".into(),
        sha: CONV_SHA.into(),
        revision: Some("refs/convert/parquet".into()),
        ..Repo::default()
    };
    conv.files.insert(
        "default/train/0000.parquet".into(),
        b"PAR1-not-read-here".to_vec(),
    );
    let hub = StandIn::start(vec![csv, conv]);
    let cache = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, None, false);
    let got = dataset_files_in("org/csv", None, "train", None, cache.path(), &s).unwrap();
    let repo = cache.path().join("datasets--org--csv");
    assert_eq!(got.format, FileFormat::Parquet);
    assert_eq!(
        got.files,
        vec![repo
            .join("snapshots")
            .join(CONV_SHA)
            .join("default/train/0000.parquet")]
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/refs/convert/parquet")).unwrap(),
        CONV_SHA
    );
    let e = err(dataset_files_in(
        "org/csv",
        None,
        "test",
        None,
        cache.path(),
        &s,
    ));
    assert!(
        e.contains("no split \"test\"") && e.contains("its splits: train"),
        "{e}"
    );
}

/// Runs `code` on the reference Python with the hub settings of `hub` and `cache`.
fn python(py: &Path, hub: &str, cache: &Path, offline: bool, code: &str) -> String {
    let out = Command::new(py)
        .arg("-c")
        .arg(code)
        .env("HF_ENDPOINT", hub)
        .env("HF_HUB_CACHE", cache)
        .env("HF_HUB_OFFLINE", if offline { "1" } else { "0" })
        .env("HF_HUB_DISABLE_XET", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cache_is_shared_with_huggingface_hub_both_ways_and_parquet_rows_read_back() {
    let Some(py) = reference::VLLM.python() else {
        return;
    };
    // Real parquet files, written by pyarrow.
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repo {
        id: "org/pq".into(),
        sha: SHA.into(),
        ..Repo::default()
    };
    for (k, range) in [(0, 0..700), (1, 700..1300)] {
        let p = dir.path().join(format!("{k}.parquet"));
        python(
            &py,
            "http://127.0.0.1:9",
            dir.path(),
            true,
            &format!(
                "import pyarrow as pa, pyarrow.parquet as pq\n\
                 pq.write_table(pa.table({{'instruction': ['do %d' % i for i in range({}, {})], 'id': list(range({}, {}))}}), {:?}, row_group_size=128)",
                range.start, range.end, range.start, range.end, p.display().to_string()
            ),
        );
        repo.files.insert(
            format!("data/train-0000{k}-of-00002.parquet"),
            std::fs::read(&p).unwrap(),
        );
    }
    repo.files.insert("README.md".into(), b"# pq\n".to_vec());
    let hub = StandIn::start(vec![repo]);

    // Python fetches into one cache: we find it offline, with no request to the hub.
    let by_python = tempfile::tempdir().unwrap();
    python(
        &py,
        &hub.url,
        by_python.path(),
        false,
        "from huggingface_hub import hf_hub_download\n\
         for f in ['README.md', 'data/train-00000-of-00002.parquet', 'data/train-00001-of-00002.parquet']:\n\
         \x20   hf_hub_download('org/pq', f, repo_type='dataset')",
    );
    let seen = hub.seen().len();
    let off = settings("http://127.0.0.1:9", None, true);
    let found = dataset_files_in("org/pq", None, "train", None, by_python.path(), &off).unwrap();
    assert_eq!(found.files.len(), 2);
    assert_eq!(hub.seen().len(), seen);
    let ids: Vec<i64> = rows::open(&found, &["id"], RowOrder::AsStored)
        .unwrap()
        .map(|r| r.unwrap()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (0..1300).collect::<Vec<_>>());

    // We fetch into another: huggingface_hub, offline, finds the same files there.
    let by_us = tempfile::tempdir().unwrap();
    let ours = dataset_files_in(
        "org/pq",
        None,
        "train",
        None,
        by_us.path(),
        &settings(&hub.url, None, false),
    )
    .unwrap();
    let theirs = python(
        &py,
        &hub.url,
        by_us.path(),
        true,
        "from huggingface_hub import hf_hub_download\n\
         for f in ['data/train-00000-of-00002.parquet', 'data/train-00001-of-00002.parquet']:\n\
         \x20   print(hf_hub_download('org/pq', f, repo_type='dataset'))",
    );
    let theirs: Vec<PathBuf> = theirs.lines().map(PathBuf::from).collect();
    assert_eq!(theirs, ours.files);
    let first: Value = Value::Object(
        rows::open(&ours, &[], RowOrder::AsStored)
            .unwrap()
            .next()
            .unwrap()
            .unwrap(),
    );
    assert_eq!(first, json!({"instruction": "do 0", "id": 0}));
}
