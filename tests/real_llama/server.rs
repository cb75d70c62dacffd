//! A real llama.cpp `llama-server` for the integration tests: the binary and the tiny model come
//! from `scripts/llama-server.sh` (paths in `LLMSPEED_LLAMA_SERVER` / `LLMSPEED_LLAMA_MODEL`,
//! else the script's cache folder). Each test starts its own server on `127.0.0.1:0`; the port
//! is read from the server's own "listening on" log line. Under `CI=true` a missing server is a
//! test failure; elsewhere the test says loudly that it did not run.
#![allow(dead_code)]

use crate::real_server::{raw_request, spawn_logged, Spawned};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The llama.cpp release the script builds (keep in step with scripts/llama-server.sh).
const VERSION: &str = "11434.0.0";

/// One real server at a time: they share the machine's two cores with the client.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub struct Paths {
    pub server: PathBuf,
    pub model: PathBuf,
}

/// The server and model, or `None` (with a loud message) when they are not built here.
/// Panics under `CI=true`: CI must build them (`.ci/run` runs the script first).
pub fn paths() -> Option<Paths> {
    let cache = crate::real_server::scripts_cache().join(format!("llama.cpp-{VERSION}"));
    let server = std::env::var_os("LLMSPEED_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("bin/llama-server"));
    let model = std::env::var_os("LLMSPEED_LLAMA_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| newest_model(&cache));
    if server.is_file() && model.is_file() {
        return Some(Paths { server, model });
    }
    crate::real_server::missing(&format!(
        "real llama.cpp server not available ({} / {}): run scripts/llama-server.sh",
        server.display(),
        model.display()
    ))
}

/// The newest `tiny-<hash>.gguf` the script wrote (its name changes with the script).
fn newest_model(cache: &std::path::Path) -> PathBuf {
    crate::real_server::newest_model(cache, "tiny-<hash>.gguf", |e| {
        let n = e.file_name();
        let n = n.to_string_lossy();
        n.starts_with("tiny-") && n.ends_with(".gguf")
    })
}

pub struct LlamaServer {
    child: Child,
    pub url: String,
    pub slots: u64,
    pub ctx: u64,
    log: Arc<Mutex<Vec<String>>>,
    _turn: MutexGuard<'static, ()>,
}

impl LlamaServer {
    /// `llama-server -c ctx -np slots` on 127.0.0.1:0 with `/metrics`, one thread, waiting
    /// until `/health` answers 200. `None` when the server is not built (see [`paths`]).
    pub fn start(slots: u64, ctx: u64) -> Option<LlamaServer> {
        Self::start_on(0, slots, ctx)
    }

    /// As [`start`](Self::start) on a given port: only for a port the test obtained by
    /// binding 127.0.0.1:0 (the ready-check test starts the client before the server).
    pub fn start_on(port: u16, slots: u64, ctx: u64) -> Option<LlamaServer> {
        let p = paths()?;
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new(&p.server);
        cmd.args(["-m"])
            .arg(&p.model)
            .args(["--host", "127.0.0.1", "--metrics"])
            .args(["--port", &port.to_string()])
            .args(["-c", &ctx.to_string(), "-np", &slots.to_string()])
            .args(["-t", "1", "-tb", "1", "--no-warmup", "-a", "tiny"]);
        let Spawned { child, port, log } = spawn_logged(
            &mut cmd,
            "llama-server",
            listening_port,
            Duration::from_secs(60),
        );
        let s = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            slots,
            ctx,
            log,
            _turn: turn,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while s.get("/health").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "llama-server never became healthy:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(s)
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// An independent HTTP/1.1 GET (not llmspeed's client): status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        raw_request(self.port(), "GET", path, None)
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, String) {
        raw_request(self.port(), "POST", path, Some(&body.to_string()))
    }

    /// The server's own token count of `text` (`/tokenize`, llama.cpp's dialect, with BOS).
    pub fn count(&self, text: &str) -> usize {
        let (status, body) = self.post(
            "/tokenize",
            &serde_json::json!({"content": text, "add_special": true}),
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["tokens"].as_array().unwrap().len()
    }

    /// A `/metrics` counter or gauge (summed over label sets), `None` when absent.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        crate::real_server::metric(&body, name)
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port of `... listening on http://127.0.0.1:PORT`.
fn listening_port(line: &str) -> Option<u16> {
    let rest = &line[line.find("listening on http://127.0.0.1:")? + 30..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
