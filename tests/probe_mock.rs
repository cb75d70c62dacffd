//! `llmspeed probe` against the in-process simulated server (`127.0.0.1:0`): the library probe
//! and the command both report what the mock was configured with.

use llmspeed::clock::Clock;
use llmspeed::matrix::status::KvSource;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::{Cancel, Client, ClientConfig, Target};
use llmspeed::server::{collect, detect, EngineKind, Overrides, TokenizeDialect};
use serde_json::Value;

fn with_mock<T>(cfg: MockConfig, f: impl FnOnce(String) -> T + Send + 'static) -> T
where
    T: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Cancel::new();
        let s = stop.clone();
        let server = tokio::spawn(async move {
            llmspeed::mock::serve(listener, cfg, async move { s.cancelled().await }).await
        });
        let out = tokio::task::spawn_blocking(move || f(url)).await.unwrap();
        stop.cancel();
        server.await.unwrap().unwrap();
        out
    })
}

#[test]
fn library_probe_reads_the_mock() {
    let mut cfg = MockConfig::profile(Profile::Demo);
    cfg.engine.kv_tokens = 65_536;
    let info = with_mock(cfg, |url| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = Client::new(
                ClientConfig::new(Target::parse(&url).unwrap()),
                Clock::new(),
            )
            .unwrap();
            let c = collect(&client, None).await.unwrap();
            detect(
                &c,
                &Overrides {
                    max_num_seqs: Some(32),
                    ..Overrides::default()
                },
            )
        })
    });
    assert_eq!(info.engine, EngineKind::Vllm);
    assert_eq!(info.model.as_deref(), Some("mock-model"));
    assert_eq!(info.version.as_deref(), Some("0.33.0+mock"));
    assert_eq!(info.max_model_len.map(|f| f.value), Some(32_768));
    assert_eq!(info.kv_tokens, Some((65_536, KvSource::KvCacheSizeTokens)));
    assert_eq!(info.max_running.map(|f| f.value), Some(32));
    assert!(info.has_metrics);
    let t = info.tokenize.expect("the mock's /tokenize is verified");
    assert_eq!(t.dialect, TokenizeDialect::Prompt);
    assert!(t.count > 0, "{t:?}");
    assert_eq!(info.tokenize_error, None);
    assert_eq!(info.token_ids, Some(true));
    assert!(info.missing.is_empty(), "{:?}", info.missing);
}

#[test]
fn probe_command_prints_json() {
    let out = with_mock(MockConfig::profile(Profile::Fast), |url| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
            .args(["probe", "--base-url", &url, "--json"])
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "vllm");
    assert_eq!(v["kv_cache_tokens"], 4_194_304);
    assert_eq!(v["kv_cache_source"], "kv_cache_size_tokens");
    assert_eq!(v["token_id_prompts"], true);
    assert!(v["missing"][0]
        .as_str()
        .unwrap()
        .contains("running-request limit"));
}

#[test]
fn probe_command_fails_cleanly_on_a_closed_port() {
    // Bind and drop: the port is (almost certainly) closed afterwards.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmspeed"))
        .args(["probe", "--base-url", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the server"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
