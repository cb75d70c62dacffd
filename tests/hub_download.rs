//! `workload::hub` against a local HTTP server standing in for the Hugging Face hub (raw
//! `std::net`, sharing no code with our client): the hub answers a file with a 302 to its CDN
//! carrying `X-Repo-Commit` and `X-Linked-Etag`, as huggingface.co does. The download lands in
//! `huggingface_hub`'s cache layout, a second run uses the cache with no server, the token goes
//! to the hub only, and a 404 or a refused connection names the file, the URL and where to put
//! the file by hand. With `hf-tokenizer`, `--tokenizer org/name` resolved through the download
//! counts exactly as the same `tokenizer.json` read from a local path.
//!
//! The same stand-in serves the Mooncake traces SGLang's `mooncake` dataset downloads from
//! GitHub (`LLMSPEED_MOONCAKE_BASE_URL` points `bench sglang` at it).

#[path = "support/mock.rs"]
mod mock_server;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use llmspeed::workload::hub::{self, HubFile, HubSettings, RepoKind, SHAREGPT};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const ETAG: &str = "5ec0ffee";

/// A WordLevel tokenizer with a `[BOS]` post-processor: the count of `s` is its word count + 1.
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
"added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
{"id":1,"content":"[BOS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},
"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[BOS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
"pair":[{"SpecialToken":{"id":"[BOS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],
"special_tokens":{"[BOS]":{"id":"[BOS]","ids":[1],"tokens":["[BOS]"]}}},
"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"[BOS]":1,"the":2,"cat":3},"unk_token":"[UNK]"}}"#;

/// The tokenizer's settings with a chat template; the repository has no `chat_template.jinja`
/// nor `special_tokens_map.json` (the hub answers 404).
const TOKENIZER_CONFIG: &str = r#"{"bos_token": "[BOS]", "chat_template": "{{ bos_token }}{% for m in messages %}<{{ m.role }}> {{ m.content }}{% endfor %}{% if add_generation_prompt %} <assistant>{% endif %}"}"#;

const SHAREGPT_BODY: &str = r#"[
{"id":"a","conversations":[{"from":"human","value":"Tell me about the sea and the ships on it."},{"from":"gpt","value":"The sea is wide and the ships sail on it every day of the year."}]},
{"id":"b","conversations":[{"from":"human","value":"Name three colours you can see in a rainbow."},{"from":"gpt","value":"Red, orange and yellow are three of the colours in a rainbow."}]},
{"id":"c","conversations":[{"from":"human","value":"only one turn here"}]}
]"#;

/// Three requests of a Mooncake trace (milliseconds; blocks of 512 tokens).
const MOONCAKE_BODY: &str = r#"{"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [0, 1]}
{"timestamp": 20, "input_length": 300, "output_length": 4, "hash_ids": [0]}
{"timestamp": 40, "input_length": 700, "output_length": 5, "hash_ids": [0, 2]}
"#;

/// One request the stand-in saw: its target and its `Authorization` header.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    auth: Option<String>,
}

struct FakeHub {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// Serves, on two listeners on 127.0.0.1 port 0 (two origins, as huggingface.co and its CDN):
/// hub file URLs (`/org/tok/...` and the ShareGPT dataset) as a 302 to the CDN's
/// `/cdn/<name>?sig=..` with the hub's revision headers; on the CDN the tokenizer chunked and the
/// dataset with a length; anything else 404.
fn fake_hub() -> FakeHub {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cdn = serve(seen.clone(), String::new());
    let url = serve(seen.clone(), cdn);
    FakeHub { url, seen }
}

/// One listener answering with [`answer`]; returns its URL.
fn serve(log: Arc<Mutex<Vec<Seen>>>, cdn: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let Some(req) = read_request(&mut conn) else {
                continue;
            };
            log.lock().unwrap().push(req.clone());
            let _ = conn.write_all(answer(&cdn, &req.path).as_bytes());
        }
    });
    url
}

fn read_request(conn: &mut TcpStream) -> Option<Seen> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8(head).ok()?;
    let path = head.split(' ').nth(1)?.to_string();
    let auth = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization")
            .then(|| v.trim().to_string())
    });
    Some(Seen { path, auth })
}

fn answer(cdn: &str, path: &str) -> String {
    let redirect = |name: &str| {
        // Each file of a repository is its own blob.
        let etag = match name {
            "tok" | "sharegpt" => ETAG.to_string(),
            other => format!("{ETAG}-{other}"),
        };
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {cdn}/cdn/{name}?sig=s1\r\nX-Repo-Commit: {COMMIT}\r\n\
             X-Linked-Etag: \"{etag}\"\r\nETag: W/\"small\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    match path {
        "/org/tok/resolve/main/tokenizer.json" => redirect("tok"),
        "/org/tok/resolve/main/tokenizer_config.json" => redirect("config"),
        "/cdn/config?sig=s1" => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOKENIZER_CONFIG}",
            TOKENIZER_CONFIG.len()
        ),
        p if p == format!("/datasets/{}/resolve/main/{}", SHAREGPT.repo, SHAREGPT.file) => {
            redirect("sharegpt")
        }
        "/cdn/tok?sig=s1" => {
            let (a, b) = TOKENIZER.split_at(100);
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
                 {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                a.len(),
                b.len()
            )
        }
        "/mooncake/traces/toolagent_trace.jsonl" => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{MOONCAKE_BODY}",
            MOONCAKE_BODY.len()
        ),
        "/cdn/sharegpt?sig=s1" => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SHAREGPT_BODY}",
            SHAREGPT_BODY.len()
        ),
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
    }
}

fn settings(endpoint: &str, token: Option<&str>) -> HubSettings {
    HubSettings {
        endpoint: endpoint.into(),
        token: token.map(str::to_string),
        offline: false,
    }
}

const TOK: HubFile<'static> = HubFile {
    kind: RepoKind::Model,
    repo: "org/tok",
    file: "tokenizer.json",
    flag: "--tokenizer",
};

/// A URL nothing listens on: a port bound and released.
fn refused_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

#[test]
fn download_follows_the_cdn_redirect_into_the_cache_layout_then_serves_from_the_cache() {
    let hub = fake_hub();
    let cache = tempfile::tempdir().unwrap();
    let got = hub::get(cache.path(), &TOK, &settings(&hub.url, Some("hf_secret"))).unwrap();
    let repo = cache.path().join("models--org--tok");
    assert_eq!(
        got,
        repo.join("snapshots").join(COMMIT).join("tokenizer.json")
    );
    assert_eq!(std::fs::read_to_string(&got).unwrap(), TOKENIZER);
    // huggingface_hub's layout: the blob named by the linked etag, the snapshot a relative
    // link to it, refs/main naming the commit; nothing half-written left in blobs/.
    assert_eq!(
        std::fs::read_to_string(repo.join("blobs").join(ETAG)).unwrap(),
        TOKENIZER
    );
    #[cfg(unix)]
    assert_eq!(
        std::fs::read_link(&got).unwrap(),
        Path::new("../../blobs").join(ETAG)
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        COMMIT
    );
    assert_eq!(std::fs::read_dir(repo.join("blobs")).unwrap().count(), 1);
    // The token went to the hub and not to the CDN.
    let seen = hub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].path, "/org/tok/resolve/main/tokenizer.json");
    assert_eq!(seen[0].auth.as_deref(), Some("Bearer hf_secret"));
    assert_eq!(seen[1].path, "/cdn/tok?sig=s1");
    assert_eq!(seen[1].auth, None);
    // A second run needs no server, offline or not.
    let gone = refused_url();
    assert_eq!(
        hub::get(cache.path(), &TOK, &settings(&gone, None)).unwrap(),
        got
    );
    let offline = HubSettings {
        offline: true,
        ..settings(&gone, None)
    };
    assert_eq!(hub::get(cache.path(), &TOK, &offline).unwrap(), got);
    assert_eq!(hub.seen.lock().unwrap().len(), 2);
}

#[test]
fn sharegpt_lands_in_the_dataset_cache_where_huggingface_hub_looks() {
    let hub = fake_hub();
    let cache = tempfile::tempdir().unwrap();
    let got = hub::get(cache.path(), &SHAREGPT, &settings(&hub.url, None)).unwrap();
    assert_eq!(
        got,
        cache
            .path()
            .join("datasets--anon8231489123--ShareGPT_Vicuna_unfiltered/snapshots")
            .join(COMMIT)
            .join("ShareGPT_V3_unfiltered_cleaned_split.json")
    );
    assert_eq!(std::fs::read_to_string(&got).unwrap(), SHAREGPT_BODY);
    assert_eq!(hub.seen.lock().unwrap()[0].auth, None);
}

#[test]
fn failures_name_the_file_the_url_and_where_to_put_it() {
    let hub = fake_hub();
    let cache = tempfile::tempdir().unwrap();
    let missing = HubFile {
        repo: "org/missing",
        ..TOK
    };
    let e = hub::get(cache.path(), &missing, &settings(&hub.url, None))
        .unwrap_err()
        .to_string();
    let url = format!("{}/org/missing/resolve/main/tokenizer.json", hub.url);
    for want in [
        "tokenizer.json of org/missing",
        &url,
        "404",
        "snapshots/manual/tokenizer.json",
        "--tokenizer",
    ] {
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    let gone = refused_url();
    let e = hub::get(cache.path(), &SHAREGPT, &settings(&gone, None))
        .unwrap_err()
        .to_string();
    for want in [
        "cannot download ShareGPT_V3_unfiltered_cleaned_split.json",
        "cannot connect",
        &format!("{gone}/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/"),
        "datasets--anon8231489123--ShareGPT_Vicuna_unfiltered/snapshots/manual/",
        "--dataset-path",
    ] {
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    assert!(!e.contains('\n'));
    // Nothing is left behind that a lookup could take for the file.
    assert_eq!(hub::cached(cache.path(), &missing), None);
    assert_eq!(hub::cached(cache.path(), &SHAREGPT), None);
}

/// `LocalTokenizer::load("org/tok")`: not in the cache that `HF_HUB_CACHE` names, so fetched
/// from `HF_ENDPOINT`; its counts equal those of the same file loaded by path. The only test
/// here that sets the process environment (the others pass settings explicitly).
#[cfg(feature = "hf-tokenizer")]
#[test]
fn a_downloaded_tokenizer_counts_as_the_same_file_read_locally() {
    use llmspeed::workload::tokenizer::LocalTokenizer;
    let hub = fake_hub();
    let cache = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let local = local.path().join("tokenizer.json");
    std::fs::write(&local, TOKENIZER).unwrap();
    std::env::set_var("HF_HUB_CACHE", cache.path());
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::remove_var("HF_HUB_OFFLINE");
    let fetched = LocalTokenizer::load("org/tok").unwrap();
    assert!(fetched.path().starts_with(cache.path()));
    let read = LocalTokenizer::load_file(&local).unwrap();
    for text in ["", "the cat", "the dog ate the cat", "a b c d e f g"] {
        let n = fetched.count(text).unwrap();
        assert_eq!(n, read.count(text).unwrap(), "{text:?}");
        assert_eq!(n, text.split_whitespace().count() as u64 + 1, "{text:?}");
    }
    // Its chat template: tokenizer_config.json fetched beside it into the same snapshot; the
    // two files the repository lacks asked for and taken as absent.
    let t = llmspeed::workload::tokenizer::chat_template("org/tok", fetched.path())
        .unwrap()
        .expect("the config's template");
    let wrapped = llmspeed::workload::chat_template::Message::user("the cat");
    assert_eq!(
        t.render(&[wrapped], true, None).unwrap(),
        "[BOS]<user> the cat <assistant>"
    );
    assert!(
        t.origin().ends_with("tokenizer_config.json"),
        "{}",
        t.origin()
    );
    let asked: Vec<String> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.path.clone())
        .collect();
    for f in [
        "chat_template.jinja",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        let p = format!("/org/tok/resolve/main/{f}");
        assert!(asked.contains(&p), "{p} not asked: {asked:?}");
    }
    assert!(fetched
        .path()
        .with_file_name("tokenizer_config.json")
        .is_file());
    // A second look finds the cached config and asks the hub nothing more.
    let before = hub.seen.lock().unwrap().len();
    llmspeed::workload::tokenizer::chat_template("org/tok", fetched.path()).unwrap();
    assert_eq!(hub.seen.lock().unwrap().len(), before);
}

/// A command's hub settings: `cache` as `HF_HUB_CACHE`, the hub at `endpoint`, no token, and
/// `HF_HUB_OFFLINE=1` when `offline`.
fn hub_env(cmd: &mut std::process::Command, cache: &Path, endpoint: &str, offline: bool) {
    cmd.env("HF_HUB_CACHE", cache)
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_TOKEN")
        .env_remove("OPENAI_API_KEY");
    if offline {
        cmd.env("HF_HUB_OFFLINE", "1");
    } else {
        cmd.env_remove("HF_HUB_OFFLINE");
    }
}

/// `llmspeed bench sglang --dataset-name sharegpt` without `--dataset-path`, as SGLang runs it:
/// the ShareGPT file fetched from `HF_ENDPOINT` into `HF_HUB_CACHE`, then the run; a second
/// run with `HF_HUB_OFFLINE=1` and no hub uses the cache; offline with an empty cache the
/// command fails naming the file and where to put it.
#[test]
fn bench_sglang_fetches_sharegpt_when_no_path_is_given() {
    let hub = fake_hub();
    let mock = mock_server::TracedMock::start(500.0);
    let base = format!("http://{}", mock.addr);
    let cache = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let record = out_dir.path().join("runs.jsonl");
    let run = |cache: &Path, endpoint: &str, offline: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"));
        cmd.args(["bench", "sglang", "--base-url", &base])
            .args(["--dataset-name", "sharegpt", "--num-prompts", "2"])
            .args(["--sharegpt-output-len", "8", "--disable-tqdm"])
            .arg("--output-file")
            .arg(&record);
        hub_env(&mut cmd, cache, endpoint, offline);
        cmd.output().unwrap()
    };
    let completed = |line: usize| -> u64 {
        let text = std::fs::read_to_string(&record).unwrap();
        // SGLang's record may hold NaN (Python's json writes it), so read the one key by hand.
        let l = text.lines().nth(line).unwrap();
        let at = l.find("\"completed\": ").unwrap() + "\"completed\": ".len();
        let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    let out = run(cache.path(), &hub.url, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(completed(0), 2);
    assert!(hub::cached(cache.path(), &SHAREGPT).is_some());
    let fetched = hub.seen.lock().unwrap().len();
    assert_eq!(fetched, 2, "one hub request, one CDN request");
    let out = run(cache.path(), &refused_url(), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(completed(1), 2);
    assert_eq!(hub.seen.lock().unwrap().len(), fetched);
    let empty = tempfile::tempdir().unwrap();
    let out = run(empty.path(), &hub.url, true);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "ShareGPT_V3_unfiltered_cleaned_split.json",
        "HF_HUB_OFFLINE",
        "snapshots/manual/",
        "--dataset-path",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    drop(mock);
}

/// A WordLevel tokenizer of the ShareGPT stand-in's words, with a `[BOS]` post-processor and no
/// decoder (a decoded text is its tokens joined by spaces).
fn sharegpt_words_tokenizer() -> String {
    let mut vocab = serde_json::Map::new();
    for w in ["[UNK]", "[BOS]"]
        .into_iter()
        .chain(SHAREGPT_BODY.split(|c: char| c.is_whitespace() || c == '"'))
    {
        let id = vocab.len();
        vocab.entry(w.to_string()).or_insert(id.into());
    }
    let t: serde_json::Value = serde_json::from_str(TOKENIZER).unwrap();
    let mut t = t.as_object().unwrap().clone();
    t["model"]["vocab"] = serde_json::Value::Object(vocab);
    serde_json::Value::Object(t).to_string()
}

/// `llmspeed bench sglang --dataset-name random --tokenizer DIR` with no ShareGPT file, as SGLang
/// runs it: the file fetched from `HF_ENDPOINT`, each conversation's first turn cut to its drawn
/// length (here 6, less the one special token) with the tokenizer, decoded and sent as text,
/// one prompt per usable conversation (two); offline with an empty cache a `note:` names the file
/// and the run sends token ids of the lengths instead.
#[test]
fn bench_sglang_random_cuts_the_fetched_sharegpt_with_the_tokenizer() {
    let hub = fake_hub();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tok")).unwrap();
    std::fs::write(
        dir.path().join("tok/tokenizer.json"),
        sharegpt_words_tokenizer(),
    )
    .unwrap();
    let run = |cache: &Path, offline: bool, log: &Path| {
        let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
        cfg.request_log = Some(log.to_path_buf());
        let mock = mock_server::MockThread::start(cfg);
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"));
        cmd.args(["bench", "sglang", "--base-url", &mock.url()])
            .args(["--backend", "sglang-oai", "--dataset-name", "random"])
            .args(["--num-prompts", "4", "--random-input-len", "6"])
            .args(["--random-output-len", "2", "--random-range-ratio", "1.0"])
            .args(["--warmup-requests", "0", "--disable-tqdm", "--tokenizer"])
            .arg(dir.path().join("tok"))
            .arg("--output-file")
            .arg(dir.path().join("runs.jsonl"));
        hub_env(&mut cmd, cache, &hub.url, offline);
        let out = cmd.output().unwrap();
        mock.stop();
        let prompts: Vec<serde_json::Value> = std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["path"] == "/v1/completions" && r["body"]["stream"] == true)
            .map(|r| r["body"]["prompt"].clone())
            .collect();
        (out, prompts)
    };
    let cache = tempfile::tempdir().unwrap();
    let (out, mut prompts) = run(cache.path(), false, &dir.path().join("online.jsonl"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    prompts.sort_by_key(|p| p.to_string());
    assert_eq!(
        prompts,
        ["[BOS] Name three colours you", "[BOS] Tell me about the"]
    );
    assert!(hub::cached(cache.path(), &SHAREGPT).is_some());
    let empty = tempfile::tempdir().unwrap();
    let (out, prompts) = run(empty.path(), true, &dir.path().join("offline.jsonl"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for want in [
        "note: --dataset-name random cuts SGLang's ShareGPT file, which could not be had",
        "ShareGPT_V3_unfiltered_cleaned_split.json",
        "random token ids of the drawn lengths instead",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    assert_eq!(prompts.len(), 4);
    assert!(
        prompts
            .iter()
            .all(|p| p.as_array().is_some_and(|ids| ids.len() == 6)),
        "{prompts:?}"
    );
}

/// SGLang's `--dataset-name mooncake` with a trace file that is not there: SGLang downloads the
/// workload's trace from GitHub to that path (`/tmp/<workload>_trace.jsonl` without a path, as
/// the unit tests check), and so does `bench sglang`; the next run reads the file with no
/// server; a download that fails names the URL and where to put the file, and leaves nothing.
#[test]
fn bench_sglang_fetches_a_missing_mooncake_trace_once() {
    let hub = fake_hub();
    let mock = mock_server::TracedMock::start(500.0);
    let base = format!("http://{}", mock.addr);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("toolagent.jsonl");
    let record = dir.path().join("runs.jsonl");
    let run = |mirror: &str, trace: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(["bench", "sglang", "--base-url", &base])
            .args([
                "--dataset-name",
                "mooncake",
                "--mooncake-workload",
                "toolagent",
            ])
            .args(["--num-prompts", "3", "--disable-tqdm", "--output-details"])
            .arg("--dataset-path")
            .arg(trace)
            .arg("--output-file")
            .arg(&record)
            .env("LLMSPEED_MOONCAKE_BASE_URL", mirror)
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap()
    };
    let out = run(&format!("{}/mooncake", hub.url), &trace);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("/mooncake/traces/toolagent_trace.jsonl"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), MOONCAKE_BODY);
    let input_lens = |line: usize| -> Vec<u64> {
        let text = std::fs::read_to_string(&record).unwrap();
        let l = text.lines().nth(line).unwrap();
        let at = l.find("\"input_lens\": [").unwrap() + "\"input_lens\": [".len();
        let list = &l[at..at + l[at..].find(']').unwrap()];
        list.split(',').map(|n| n.trim().parse().unwrap()).collect()
    };
    // The trace's lengths, in its order: the downloaded file is the one read.
    assert_eq!(input_lens(0), [600, 300, 700]);
    let fetched = hub.seen.lock().unwrap().len();
    assert_eq!(fetched, 1);
    // Cached: no server needed.
    let out = run(&refused_url(), &trace);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(input_lens(1), [600, 300, 700]);
    assert_eq!(hub.seen.lock().unwrap().len(), fetched);
    // Nothing there and no network: the URL, the path, and nothing left behind.
    let missing = dir.path().join("again.jsonl");
    let url = refused_url();
    let out = run(&url, &missing);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        format!("{url}/traces/toolagent_trace.jsonl"),
        format!("put it at {}", missing.display()),
        "--dataset-path".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    drop(mock);
}

/// `--tokenizer org/name` that the hub does not have: the run goes on counting with the server,
/// and says so — which file, from where, where to put it by hand, and what counts instead —
/// for `bench sglang` and `bench serve` alike (one engine step loads the tokenizer).
#[cfg(feature = "hf-tokenizer")]
#[test]
fn a_hub_tokenizer_that_cannot_be_fetched_is_named_with_what_counts_instead() {
    let hub = fake_hub();
    let mock = mock_server::TracedMock::start(500.0);
    let base = format!("http://{}", mock.addr);
    let cache = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let url = format!("{}/org/missing/resolve/main/tokenizer.json", hub.url);
    for (sub, out) in [
        (
            "sglang",
            ["--output-file", "s.jsonl", "--disable-tqdm"].as_slice(),
        ),
        (
            "serve",
            ["--save-result", "--result-filename", "v.json"].as_slice(),
        ),
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"));
        cmd.current_dir(out_dir.path())
            .args([
                "bench",
                sub,
                "--base-url",
                &base,
                "--tokenizer",
                "org/missing",
            ])
            .args(["--dataset-name", "random", "--num-prompts", "2"])
            .args(["--random-input-len", "8", "--random-output-len", "4"])
            .args(out)
            .env("HF_HUB_CACHE", cache.path())
            .env("HF_ENDPOINT", &hub.url)
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("OPENAI_API_KEY");
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "bench {sub}: {err}");
        for want in [
            "note: --tokenizer org/missing is not used: cannot download tokenizer.json of org/missing",
            url.as_str(),
            "404",
            "snapshots/manual/tokenizer.json",
            "counting with the server's /tokenize (else its usage counts) instead",
        ] {
            assert!(err.contains(want), "bench {sub}: {want:?} not in {err}");
        }
        assert_eq!(
            err.matches("note: --tokenizer org/missing").count(),
            1,
            "bench {sub} says it once: {err}"
        );
    }
    // bench sglang then counted the generated texts with the server, and its record says so.
    let record = std::fs::read_to_string(out_dir.path().join("s.jsonl")).unwrap();
    assert!(
        record.contains("\"retokenized_with\":\"server_tokenize\""),
        "{record}"
    );
    drop(mock);
}
