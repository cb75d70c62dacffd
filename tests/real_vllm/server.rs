//! A real vLLM (`vllm serve`, CPU build) for the integration tests: the command and the tiny
//! model come from `scripts/vllm-server.sh` (paths in `LLMSPEED_VLLM` / `LLMSPEED_VLLM_MODEL`,
//! else the script's cache folder). vLLM takes 30–90 s to start, so the test binary starts one
//! server, on first use, and its tests take turns on it ([`shared`]): each test has the server
//! to itself, so the server's counters move only with that test's requests.
//!
//! The vision suite (`tests/real_vision.rs`) starts its own server the same way on the
//! script's tiny vision-language model ([`shared_vision`]: `LLMSPEED_VLLM_VISION_MODEL`).
//!
//! Stopping: vLLM runs as a process group of its own (the API server and its engine-core
//! process) under a small `sh` that also holds a pipe from this process on its stdin. When the
//! test process ends, however it ends (a panic, a kill), the pipe closes and that `sh` stops the
//! whole group: TERM, then KILL after a grace period.
#![allow(dead_code)]

use crate::real_server::{free_port, metric, missing, raw_request, scripts_cache};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The vLLM release the script installs (keep in step with scripts/vllm-server.sh).
pub const VERSION: &str = "0.32.0";
/// What the tests run: 2,048 tokens per request, 4 running at once, and a KV cache of 64
/// blocks of 128 tokens (8,192 tokens: small enough that a grid overflows it cheaply).
pub const MAX_MODEL_LEN: u64 = 2048;
pub const MAX_NUM_SEQS: u64 = 4;
pub const KV_BLOCKS: u64 = 64;
pub const MODEL: &str = "tiny";
/// The vision model's served name and the most images a prompt may carry there.
pub const VISION_MODEL: &str = "tiny-vlm";
pub const VISION_IMAGE_LIMIT: u64 = 2;
/// The Qwen2-VL-style model's served name and context (a 1280 x 720 image alone is 1,198 tokens).
pub const QWEN2VL_MODEL: &str = "tiny-qwen2vl";
pub const QWEN2VL_MAX_MODEL_LEN: u64 = 4096;
/// The longest wait for a start on a machine shared with builds (32–50 s when it is idle).
const START_LIMIT: Duration = Duration::from_secs(600);

pub struct Paths {
    pub vllm: PathBuf,
    pub model: PathBuf,
}

/// The command and model, or `None` (with a loud message) when they are not installed here.
/// Panics under `CI=true`: CI must install them (`.ci/run` runs the script first).
pub fn paths() -> Option<Paths> {
    let cache = scripts_cache().join(format!("vllm-{VERSION}"));
    let vllm = std::env::var_os("LLMSPEED_VLLM")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("venv/bin/vllm"));
    let model = std::env::var_os("LLMSPEED_VLLM_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| newest_model(&cache));
    if vllm.is_file() && model.join("config.json").is_file() {
        return Some(Paths { vllm, model });
    }
    missing(&format!(
        "real vLLM not available ({} / {}): run scripts/vllm-server.sh",
        vllm.display(),
        model.display()
    ))
}

/// The vision model (`LLMSPEED_VLLM_VISION_MODEL`, else the script's newest `vlm-<hash>/`), with
/// the command of [`paths`]; `None` (loud, or a failure under `CI=true`) when either is missing.
pub fn vision_paths() -> Option<Paths> {
    let cache = scripts_cache().join(format!("vllm-{VERSION}"));
    let text = paths()?;
    let model = std::env::var_os("LLMSPEED_VLLM_VISION_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| newest(&cache, "vlm-"));
    if model.join("config.json").is_file() {
        return Some(Paths {
            vllm: text.vllm,
            model,
        });
    }
    missing(&format!(
        "the tiny vision model is not available ({}): run scripts/vllm-server.sh",
        model.display()
    ))
}

/// The Qwen2-VL-style model (`LLMSPEED_VLLM_QWEN2VL_MODEL`, else the script's newest
/// `qwen2vl-<hash>/`), as [`vision_paths`].
pub fn qwen2vl_paths() -> Option<Paths> {
    let cache = scripts_cache().join(format!("vllm-{VERSION}"));
    let text = paths()?;
    let model = std::env::var_os("LLMSPEED_VLLM_QWEN2VL_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| newest(&cache, "qwen2vl-"));
    if model.join("config.json").is_file() {
        return Some(Paths {
            vllm: text.vllm,
            model,
        });
    }
    missing(&format!(
        "the tiny Qwen2-VL-style model is not available ({}): run scripts/vllm-server.sh",
        model.display()
    ))
}

/// The newest complete `tiny-<hash>/` the script wrote (its name changes with the script).
fn newest_model(cache: &std::path::Path) -> PathBuf {
    newest(cache, "tiny-")
}

/// The newest complete `<prefix><hash>/` in the script's cache.
fn newest(cache: &std::path::Path, prefix: &str) -> PathBuf {
    crate::real_server::newest_model(cache, &format!("{prefix}<hash>"), |e| {
        e.file_name().to_string_lossy().starts_with(prefix) && e.path().join(".complete").is_file()
    })
}

/// What a server is started with: the model, its served name and the flags of its kind
/// (`--max-model-len` [`MAX_MODEL_LEN`] unless they say otherwise: the last one given counts).
struct Launch {
    paths: Paths,
    name: &'static str,
    args: Vec<String>,
}

/// The text suite's: 4 running at once and a KV cache of 64 blocks.
fn text_launch() -> Option<Launch> {
    Some(Launch {
        paths: paths()?,
        name: MODEL,
        args: vec![
            "--max-num-seqs".into(),
            MAX_NUM_SEQS.to_string(),
            "--num-gpu-blocks-override".into(),
            KV_BLOCKS.to_string(),
        ],
    })
}

/// The vision suite's: 4 running at once, at most [`VISION_IMAGE_LIMIT`] images a prompt.
fn vision_launch() -> Option<Launch> {
    Some(Launch {
        paths: vision_paths()?,
        name: VISION_MODEL,
        args: vec![
            "--max-num-seqs".into(),
            MAX_NUM_SEQS.to_string(),
            "--limit-mm-per-prompt".into(),
            format!("{{\"image\":{VISION_IMAGE_LIMIT}}}"),
        ],
    })
}

/// The Qwen2-VL-style suite's: as [`vision_launch`], with a context of [`QWEN2VL_MAX_MODEL_LEN`].
fn qwen2vl_launch() -> Option<Launch> {
    Some(Launch {
        paths: qwen2vl_paths()?,
        name: QWEN2VL_MODEL,
        args: vec![
            "--max-model-len".into(),
            QWEN2VL_MAX_MODEL_LEN.to_string(),
            "--max-num-seqs".into(),
            MAX_NUM_SEQS.to_string(),
            "--limit-mm-per-prompt".into(),
            format!("{{\"image\":{VISION_IMAGE_LIMIT}}}"),
        ],
    })
}

pub struct VllmServer {
    /// The `sh` holding the group; its stdin is the pipe whose closing stops everything.
    keeper: Child,
    pub url: String,
    pub port: u16,
    /// The served model name.
    pub name: &'static str,
    pub model_dir: PathBuf,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

/// The test binary's one server, started on first use; `None` when vLLM is not installed (see
/// [`paths`]). The guard gives the calling test the server to itself until it is dropped. A
/// start that failed fails every later test at once with the same message, rather than each
/// trying again for minutes.
pub fn shared() -> Option<MutexGuard<'static, VllmServer>> {
    static SERVER: Shared = OnceLock::new();
    shared_of(&SERVER, text_launch)
}

/// The vision suite's one server, as [`shared`] (`vllm serve` on the tiny vision model).
pub fn shared_vision() -> Option<MutexGuard<'static, VllmServer>> {
    static SERVER: Shared = OnceLock::new();
    shared_of(&SERVER, vision_launch)
}

/// The Qwen2-VL-style suite's one server, as [`shared`].
pub fn shared_qwen2vl() -> Option<MutexGuard<'static, VllmServer>> {
    static SERVER: Shared = OnceLock::new();
    shared_of(&SERVER, qwen2vl_launch)
}

type Shared = OnceLock<Result<Option<Mutex<VllmServer>>, String>>;

fn shared_of(
    cell: &'static Shared,
    launch: fn() -> Option<Launch>,
) -> Option<MutexGuard<'static, VllmServer>> {
    let server = cell.get_or_init(|| {
        std::panic::catch_unwind(|| VllmServer::start(launch()?).map(Mutex::new)).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    });
    match server {
        // A test that panicked while holding the server left it as it was: the next one goes on.
        Ok(s) => s
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner())),
        Err(e) => panic!("the shared vLLM did not start: {e}"),
    }
}

impl VllmServer {
    fn start(launch: Launch) -> Option<VllmServer> {
        let p = launch.paths;
        let port = free_port();
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("vllm.log");
        let out = std::fs::File::create(&log).unwrap();
        // The group leader runs vLLM in the background, then ignores TERM itself; a watcher
        // waits for this process's pipe (fd 3: a background job's stdin is /dev/null) to close
        // and stops the group. If vLLM exits on its own the leader exits with its status (a
        // start that failed is seen at once).
        let keeper_script = r#"
exec 3<&0
"$@" </dev/null 3<&- &
server=$!
trap '' TERM
{ read -r _ <&3; kill -TERM 0; sleep 15; kill -KILL 0; } &
exec 3<&-
wait "$server"
"#;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(keeper_script)
            .arg("sh")
            .arg(&p.vllm)
            .arg("serve")
            .arg(&p.model)
            .args(["--served-model-name", launch.name])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--max-model-len", &MAX_MODEL_LEN.to_string()])
            .args(&launch.args)
            .args(["--dtype", "bfloat16", "--enforce-eager"])
            .env("VLLM_TARGET_DEVICE", "cpu")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_HOST_IP", "127.0.0.1")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("HF_DATASETS_OFFLINE", "1")
            .env("VLLM_NO_USAGE_STATS", "1")
            .env("DO_NOT_TRACK", "1")
            .stdin(Stdio::piped())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let keeper = cmd.spawn().expect("spawn sh for vllm serve");
        let mut s = VllmServer {
            keeper,
            url: format!("http://127.0.0.1:{port}"),
            port,
            name: launch.name,
            model_dir: p.model,
            log,
            _log_dir: log_dir,
        };
        s.wait_healthy();
        Some(s)
    }

    /// Until `/health` answers 200 (the engine is up), failing at once if vLLM exits.
    fn wait_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if raw_request(self.port, "GET", "/health", None).0 == 200 {
                eprintln!(
                    "vllm serve ready on {} after {:.0} s",
                    self.url,
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            if let Ok(Some(status)) = self.keeper.try_wait() {
                panic!(
                    "vllm serve exited ({status}) before it was ready:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "vllm serve not ready after {START_LIMIT:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The last 80 lines vLLM wrote.
    pub fn log_tail(&self) -> String {
        let all = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(80)..].join("\n")
    }

    /// An independent HTTP/1.1 GET (not llmspeed's client): status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        raw_request(self.port, "GET", path, None)
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, String) {
        raw_request(self.port, "POST", path, Some(&body.to_string()))
    }

    /// The server's own token count of `text` (`/tokenize`, with BOS).
    pub fn count(&self, text: &str) -> u64 {
        let (status, body) = self.post(
            "/tokenize",
            &serde_json::json!({"model": self.name, "prompt": text}),
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["count"].as_u64().unwrap()
    }

    /// The `/metrics` page.
    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// A `/metrics` counter or gauge (summed over label sets), `None` when absent.
    pub fn metric(&self, name: &str) -> Option<f64> {
        metric(&self.metrics(), name)
    }
}
