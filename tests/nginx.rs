//! Through a real nginx (Debian's 1.22: tests/support/nginx.rs) in front of the simulated
//! server, as production endpoints are measured: plain and TLS, `proxy_buffering` off and on,
//! 32 and 128 streams.
//!
//! - Buffering off: the self-test's scoring through nginx (`selftest::run_fronted`: the trace
//!   is the server's, the client goes through nginx). nginx relays each token with a delay of
//!   its own, which no client can see apart from the engine's: a gap through it is off by the
//!   difference of two tokens' delays. So the check allows for the proxy's delay, as measured
//!   on the same tokens (each token's stamp against the server's write of it, `delivery`): a
//!   gap may be off by the bound the client states plus the spread of those delays, and the
//!   median gap by the bound plus one decode step (a relay passes each token on before the
//!   next is written; holding it longer is batching, the other verdict's business).
//! - Buffering on: `bench serve` as a user runs it; the upstream-batching verdict against
//!   Client-bound.
//! - Certificates as users make them (`openssl req -x509`, a CA-signed chain) with `--ca-cert`,
//!   and a wrong CA refused before anything is measured.
//!
//! Cost: about 10 s for the whole file on the shared 2-core machine in a debug build (each
//! nginx starts in tens of ms; each run is 40 tokens at 5 ms a token).

mod support;

use llmspeed::selftest::{run_fronted, Front, Report, Shape};
use serde_json::Value;
use std::process::Output;
use std::time::Duration;
use support::mock::MockThread;
use support::nginx::{Cert, Config, Nginx};

/// The server's decode step: the true gap between a stream's tokens.
const STEP: Duration = Duration::from_millis(5);

fn shape(streams: usize) -> Shape {
    Shape {
        streams,
        gap: STEP,
        tokens: 40,
        first_token: Duration::from_millis(20),
        client_threads: 1,
        kernel_stamps: true,
        packet_stamps: support::mock::default_stamp_source() == "packet",
        send_stamps: false,
        preconnect: true,
    }
}

/// The self-test through nginx configured as `cfg`; `None` without nginx.
fn selftest_through(streams: usize, cfg: Config) -> Option<Report> {
    support::nginx::binary()?;
    let report = run_fronted(&shape(streams), |server| {
        let nginx = Nginx::start(server, cfg).expect("nginx, found above");
        Front {
            url: nginx.url(),
            ca_file: Some(nginx.ca_file()),
            keep: Box::new(nginx),
        }
    })
    .expect("the self-test through nginx");
    Some(report)
}

/// Buffering off: every token arrived and was matched to the server's write of it, and the
/// client's figures are the truth's within their bounds plus the proxy's delay (module docs).
fn check_relayed(name: &str, r: &Report) {
    eprintln!(
        "{name}: stamps {:?}; gap error p99 {:.1} us, beyond the truth p50 {:?} p99 {:?} us; bound p50 {:?} p99 {:?} us; coverage {:?}%; proxy delay (delivery) min {:?} p50 {:?} p99 {:?} us; merged {:?}%; Client-bound {:?} {:?}; no bound: {:?}",
        r.stamp_source,
        r.gap_error_us_p99,
        r.gap_error_beyond_truth_us_p50,
        r.gap_error_beyond_truth_us_p99,
        r.gap_bound_us_p50,
        r.gap_bound_us_p99,
        r.gap_bound_coverage_percent,
        r.delivery_us_min,
        r.delivery_us_p50,
        r.delivery_us_p99,
        r.gaps_merged_percent,
        r.client_bound,
        r.client_bound_reasons,
        r.no_bound_reason,
    );
    assert_eq!(r.failed_streams, 0, "{name}: {:?}", r.first_error);
    assert_eq!(r.tokens_matched, r.trace_records, "{name}: {r:?}");
    if !cfg!(target_os = "linux") {
        return;
    }
    let bound_p50 = r
        .gap_bound_us_p50
        .unwrap_or_else(|| panic!("{name}: no bound stated: {:?}", r.no_bound_reason));
    let bound_p99 = r.gap_bound_us_p99.expect("a p99 bound beside the p50");
    let (min, p99) = (
        r.delivery_us_min.expect("each token's delay"),
        r.delivery_us_p99.expect("each token's delay"),
    );
    // The gaps are off by no more than their bound and the spread of the delays (each token's
    // stamp against the return of the server's write, whose thread may stamp it late: `min`
    // can be below 0).
    let beyond_p99 = r.gap_error_beyond_truth_us_p99.unwrap();
    assert!(
        beyond_p99 <= bound_p99 + (p99 - min),
        "{name}: gaps off by {beyond_p99} us p99, more than the bound {bound_p99} us and the proxy's delay spread {} us: {r:?}",
        p99 - min
    );
    let beyond_p50 = r.gap_error_beyond_truth_us_p50.unwrap();
    let step_us = STEP.as_secs_f64() * 1e6;
    assert!(
        beyond_p50 <= bound_p50 + step_us,
        "{name}: the median gap off by {beyond_p50} us: {r:?}"
    );
}

#[test]
fn plain_without_buffering_the_figures_are_the_truths_within_bound_and_proxy_delay() {
    for streams in [32, 128] {
        let Some(r) = selftest_through(streams, Config::plain(false)) else {
            return;
        };
        check_relayed(&format!("plain, buffering off, {streams} streams"), &r);
    }
}

#[test]
fn tls_without_buffering_the_figures_are_the_truths_within_bound_and_proxy_delay() {
    for streams in [32, 128] {
        let Some(r) = selftest_through(streams, Config::tls(false, Cert::SelfSigned)) else {
            return;
        };
        check_relayed(&format!("TLS, buffering off, {streams} streams"), &r);
        // Over TLS as in plain text: the stamps of the socket's reads (`net::tls_conn`).
        if cfg!(target_os = "linux") {
            assert_eq!(r.no_bound_reason, None, "{r:?}");
            assert_ne!(r.stamp_source, Some("client_clock"), "{r:?}");
        }
    }
}

/// Over TLS with buffering on, nginx holds the response's records to its `ssl_buffer_size`
/// (16 KiB) and writes them together: the verdict fires, every time, with the evidence and
/// the fix; Client-bound does not blame the stamps; `--fail-on-upstream-batching` fails the run.
#[test]
fn tls_with_buffering_the_upstream_batching_verdict_fires_and_client_bound_does_not() {
    for streams in [32, 128] {
        let Some((v, out)) = bench_through_with(
            Config::tls(true, Cert::SelfSigned),
            streams,
            &["--fail-on-upstream-batching"],
        ) else {
            return;
        };
        let lag = &v["llmspeed"]["client_lag"];
        eprintln!(
            "TLS, buffering on, {streams} streams: {}",
            lag["upstream_batching_reason"]
        );
        no_stamp_reason_for_client_bound(lag);
        if lag["stamp_source"] != "packet" {
            // Socket stamps group tokens by event, and nginx's events carry one token each.
            continue;
        }
        assert_eq!(lag["upstream_batched"], true, "{lag}");
        assert!(
            lag["tokens_batched_percent"].as_f64().unwrap() >= 50.0,
            "{lag}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("WARNING: llmspeed: upstream batching: ")
                && stdout.contains("proxy_buffering off"),
            "{stdout}"
        );
        assert!(!out.status.success(), "--fail-on-upstream-batching");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--fail-on-upstream-batching"), "{stderr}");
    }
}

fn llmspeed(args: &[&str]) -> Output {
    std::process::Command::new(support::process::bin())
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

/// `bench serve` at `url` (`streams` at once, twice as many prompts, 40 tokens each) with
/// `extra`; the saved result (`null` without one) and the process's output.
fn bench_serve(url: &str, streams: usize, extra: &[&str]) -> (Value, Output) {
    let tmp = tempfile::tempdir().unwrap();
    let (prompts, streams) = ((2 * streams).to_string(), streams.to_string());
    let mut args = vec![
        "bench",
        "serve",
        "--base-url",
        url,
        "--num-prompts",
        &prompts,
        "--max-concurrency",
        &streams,
        "--random-input-len",
        "16",
        "--random-output-len",
        "40",
        "--save-result",
        "--result-dir",
        tmp.path().to_str().unwrap(),
        "--disable-tqdm",
    ];
    args.extend_from_slice(extra);
    let out = llmspeed(&args);
    let file = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"));
    let v = match file {
        Some(f) => serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap(),
        None => Value::Null,
    };
    (v, out)
}

fn server() -> MockThread {
    let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    cfg.engine.decode.base_us = STEP.as_secs_f64() * 1e6;
    MockThread::start(cfg)
}

/// `bench serve` through nginx as `cfg` (with `--ca-cert` over TLS) at `streams`.
fn bench_through(cfg: Config, streams: usize) -> Option<(Value, Output)> {
    bench_through_with(cfg, streams, &[])
}

/// [`bench_through`] with `more` flags.
fn bench_through_with(cfg: Config, streams: usize, more: &[&str]) -> Option<(Value, Output)> {
    let mock = server();
    let nginx = Nginx::start(mock.addr, cfg.clone())?;
    let ca = nginx.ca_file();
    let mut extra = more.to_vec();
    if cfg.tls.is_some() {
        extra.extend(["--ca-cert", ca.to_str().unwrap()]);
    }
    let got = bench_serve(&nginx.url(), streams, &extra);
    drop(nginx);
    mock.stop();
    Some(got)
}

/// Client-bound said nothing of the stamps: each token's arrival was known (the client kept
/// up with what nginx passed on).
fn no_stamp_reason_for_client_bound(lag: &Value) {
    let reasons = lag["client_bound_reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .all(|r| !r.as_str().unwrap().contains("is known only to")),
        "{lag}"
    );
}

#[test]
fn plain_with_buffering_is_not_client_bound_and_the_verdict_follows_its_evidence() {
    for streams in [32, 128] {
        let Some((v, out)) = bench_through(Config::plain(true), streams) else {
            return;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let lag = &v["llmspeed"]["client_lag"];
        eprintln!(
            "plain, buffering on, {streams} streams: batched {} ({}% of tokens, {} a batch p50)",
            lag["upstream_batched"], lag["tokens_batched_percent"], lag["batch_tokens_p50"]
        );
        no_stamp_reason_for_client_bound(lag);
        // nginx 1.22 over plain HTTP passes on what it read as it reads it, buffering or not:
        // tokens come together only when it falls behind. The verdict says so exactly then.
        let share = lag["tokens_batched_percent"].as_f64().unwrap();
        let batches = lag["batch_tokens_p50"].is_number();
        if lag["upstream_batched"] == true {
            assert!(share >= 50.0 && batches, "{lag}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("WARNING: llmspeed: upstream batching: "),
                "{stdout}"
            );
        } else {
            assert!(share < 50.0 || lag["stamp_source"] != "packet", "{lag}");
        }
    }
}

/// A run over TLS with `--ca-cert` as `cert` needs it: every request succeeded, and the
/// certificate was checked (not `--insecure`).
fn passes_with_ca_cert(cert: Cert) {
    let Some((v, out)) = bench_through(Config::tls(false, cert), 4) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cert:?}: {stderr}");
    assert_eq!(v["completed"], 8, "{cert:?}: {v}");
    assert_eq!(v["llmspeed"]["insecure"], false, "{}", v["llmspeed"]);
}

#[test]
fn a_self_signed_certificate_from_openssl_req_x509_passes_with_ca_cert() {
    passes_with_ca_cert(Cert::SelfSigned);
}

#[test]
fn a_ca_signed_chain_passes_with_its_ca_as_ca_cert() {
    passes_with_ca_cert(Cert::CaSigned);
}

#[test]
fn a_wrong_ca_is_refused_with_its_reason_and_nothing_is_measured() {
    for cert in [Cert::SelfSigned, Cert::CaSigned] {
        let mock = server();
        let Some(nginx) = Nginx::start(mock.addr, Config::tls(false, cert)) else {
            return;
        };
        let other = nginx.other_ca();
        let (v, out) = bench_serve(&nginx.url(), 4, &["--ca-cert", other.to_str().unwrap()]);
        drop(nginx);
        mock.stop();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cert:?}: {stderr}");
        assert!(
            stderr.contains("TLS handshake with 127.0.0.1:")
                && (stderr.contains("certificate not trusted")
                    || stderr.contains("no --ca-cert file holds")),
            "{cert:?}: {stderr}"
        );
        assert!(stderr.contains("--ca-cert"), "{cert:?}: {stderr}");
        assert_eq!(v, Value::Null, "nothing measured, nothing saved: {v}");
    }
}

/// The engine behind nginx killed mid-run (SIGKILL, as a crash or an OOM kill ends it): the
/// streams under way are cut by nginx (it closes them without their last chunk) and the
/// requests that follow get nginx's `502 Bad Gateway`. `bench serve` counts both as a class of
/// its own (`proxy`), none as `protocol`, and explains them: the cut naming the proxy, and (a
/// run started after the kill, so its first proxy failure is a 502) nginx's own page, in its
/// result and on its console.
#[test]
fn the_engine_dying_behind_nginx_is_a_proxy_error_with_the_proxys_page() {
    if support::nginx::binary().is_none() {
        return;
    }
    let (mut engine, url) =
        support::process::mock(&["--profile", "fast", "--decode-base-us", "10000"]);
    let backend: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let nginx = Nginx::start(backend, Config::plain(false)).unwrap();
    // Killed mid-run: once it has generated more tokens than one request's (the ready check's
    // request is one), by its own counter, asked directly.
    let killer = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + support::process::PATIENCE;
        while std::time::Instant::now() < deadline
            && generated_tokens(backend).is_none_or(|n| n < 60.0)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        engine.child.kill().unwrap();
        engine.child.wait().unwrap();
    });
    let (v, out) = bench_serve(&nginx.url(), 6, &["--save-detailed"]);
    killer.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ls = &v["llmspeed"];
    let by_kind = ls["failures_by_kind"].as_object().unwrap();
    assert!(
        by_kind["proxy"].as_u64().unwrap_or(0) >= 1,
        "{ls}\n{stdout}"
    );
    assert!(!by_kind.contains_key("protocol"), "{ls}");
    // Each failed request's message: the six streams under way when it died (ten tokens or so
    // into their 40) were cut; the rest, sent after, got the 502.
    let errors: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .filter(|e| !e.is_empty())
        .collect();
    let cuts = errors
        .iter()
        .filter(|e| {
            e.starts_with("proxy: the proxy in front of the engine (nginx/")
                && e.contains(" cut the stream after ")
        })
        .count();
    let pages = errors
        .iter()
        .filter(|e| {
            e.starts_with("proxy (HTTP 502): the proxy in front of the engine answered 502 (its page: \"502 Bad Gateway / nginx/")
        })
        .count();
    assert_eq!((cuts, pages), (6, 6), "{errors:?}");
    assert!(stdout.contains("First proxy"), "{stdout}");
    // Nothing lost: every request is counted, done or failed.
    let failed: u64 = by_kind.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(v["completed"].as_u64().unwrap() + failed, 12, "{v}");

    // A request after the kill: nginx answers 502 with its page.
    let tl = stream_once(&nginx, 4);
    let e = tl.outcome.expect_err("the engine is dead");
    assert_eq!(e.kind, llmspeed::timeline::ErrorKind::Proxy, "{e:?}");
    assert_eq!(e.status, Some(502), "{e:?}");
    assert!(
        e.message.starts_with(
            "the proxy in front of the engine answered 502 (its page: \"502 Bad Gateway / nginx/"
        ),
        "{}",
        e.message
    );
    assert!(e.message.contains("the engine died"), "{}", e.message);
}

/// An engine slower to answer than nginx's `proxy_read_timeout`: nginx's `504 Gateway
/// Time-out`, classified and explained with its page and the setting that caused it.
#[test]
fn an_engine_slower_than_the_proxys_read_timeout_is_a_proxy_error_naming_the_timeout() {
    let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    cfg.admission_delay = Duration::from_secs(2);
    let mock = MockThread::start(cfg);
    let nginx_cfg = Config {
        read_timeout_ms: Some(100),
        ..Config::plain(false)
    };
    let Some(nginx) = Nginx::start(mock.addr, nginx_cfg) else {
        mock.stop();
        return;
    };
    let got = stream_once(&nginx, 4);
    drop(nginx);
    mock.stop();
    let e = got.outcome.expect_err("nginx gave up on the engine");
    assert_eq!(e.kind, llmspeed::timeline::ErrorKind::Proxy, "{e:?}");
    assert_eq!(e.status, Some(504), "{e:?}");
    assert!(e.message.contains("504 Gateway Time-out"), "{}", e.message);
    assert!(e.message.contains("proxy_read_timeout"), "{}", e.message);
}

/// One streamed completion of `max_tokens` from `nginx`, by the client as a run uses it (over
/// TLS trusting nginx's certificate as `--ca-cert`).
fn stream_once(nginx: &Nginx, max_tokens: u32) -> llmspeed::timeline::Timeline {
    let target = llmspeed::net::Target::parse(&nginx.url()).unwrap();
    let mut cfg = llmspeed::net::ClientConfig::new(target);
    cfg.ca_file = Some(nginx.ca_file());
    let client = llmspeed::net::Client::new(cfg, llmspeed::clock::Clock::new()).unwrap();
    let rt = support::mock::runtime();
    rt.block_on(async {
        let mut g = llmspeed::net::request::Generation::new(
            "mock-model",
            llmspeed::net::request::Prompt::Text(" the".into()),
        );
        g.max_tokens = Some(max_tokens);
        let req = g.stream_request(Some(false)).unwrap();
        let cancel = llmspeed::net::Cancel::new();
        client
            .stream(&req, 0, &mut llmspeed::net::NoopObserver, &cancel)
            .await
    })
}

/// One streamed request (12 tokens) through nginx as `front` to a simulated server with
/// `fault`; its timeline and nginx's error log.
fn one_stream_through_nginx(
    fault: llmspeed::mock::faults::Fault,
    front: Config,
) -> Option<(llmspeed::timeline::Timeline, String)> {
    let mut cfg = llmspeed::mock::MockConfig::profile(llmspeed::mock::Profile::Fast);
    cfg.engine.decode.base_us = STEP.as_secs_f64() * 1e6;
    cfg.faults = vec![llmspeed::mock::faults::FaultRule {
        fault,
        probability: 1.0,
    }];
    let mock = MockThread::start(cfg);
    let Some(nginx) = Nginx::start(mock.addr, front) else {
        mock.stop();
        return None;
    };
    let tl = stream_once(&nginx, 12);
    // nginx writes its log line as it ends the client's response; give it a moment.
    std::thread::sleep(Duration::from_millis(50));
    let log = nginx.error_log();
    drop(nginx);
    mock.stop();
    Some((tl, log))
}

/// The engine dying mid-stream behind nginx (its connection reset after 5 tokens, or closed in
/// the middle of a chunk): nginx has already sent `200` and its head, so it cannot answer 502;
/// it logs the upstream's end and closes the client's connection without the chunked body's
/// last chunk. That is the proxy cutting the stream for its upstream, not a malformed response:
/// a proxy error naming the proxy, the tokens received and what to check, never `protocol`.
/// Over TLS the same (nginx ends the TLS session as it closes the connection).
#[test]
fn the_engine_dying_mid_stream_behind_nginx_is_a_proxy_cut_not_a_protocol_error() {
    use llmspeed::mock::faults::Fault;
    let cases = [
        (
            Fault::ResetAfter(5),
            "Connection reset by peer) while reading upstream",
        ),
        (
            Fault::TruncateAfter(5),
            "upstream prematurely closed connection while reading upstream",
        ),
    ];
    let fronts = [Config::plain(false), Config::tls(false, Cert::SelfSigned)];
    for ((fault, logged), front) in fronts
        .iter()
        .flat_map(|f| cases.iter().map(move |c| (*c, f.clone())))
    {
        let tls = front.tls.is_some();
        let Some((tl, log)) = one_stream_through_nginx(fault, front) else {
            return;
        };
        let fault = format!("{fault:?}, TLS {tls}");
        eprintln!("{fault}: {:?}\nnginx logged: {log}", tl.outcome);
        assert!(log.contains(logged), "{fault}: nginx logged {log}");
        assert_eq!(tl.status, Some(200), "{fault}");
        assert_eq!(tl.output_tokens(), 5, "{fault}: {:?}", tl.outcome);
        let e = tl.outcome.as_ref().expect_err("the stream was cut");
        assert_eq!(
            e.kind,
            llmspeed::timeline::ErrorKind::Proxy,
            "{fault}: {e:?}"
        );
        assert!(
            e.message
                .starts_with("the proxy in front of the engine (nginx/"),
            "{fault}: {}",
            e.message
        );
        assert!(
            e.message.contains("cut the stream after 5 events"),
            "{}",
            e.message
        );
        assert!(e.message.contains("the engine"), "{}", e.message);
    }
}

/// The simulated server's `vllm:generation_tokens_total`, asked on its own port.
fn generated_tokens(server: std::net::SocketAddr) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    page.lines()
        .find_map(|l| l.strip_prefix("vllm:generation_tokens_total"))
        .and_then(|rest| rest.rsplit(' ').next()?.parse().ok())
}
