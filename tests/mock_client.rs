//! Our streaming client (`net`) against our simulated server (`mock`), over real sockets on
//! 127.0.0.1:0. The two share no HTTP code, so each checks the other: token accounting, chat
//! chunk shapes, the prefix cache, KV queueing seen through `/metrics`, vLLM's error answers,
//! and the client-side error kind every injected fault must produce.

use llmspeed::clock::Clock;
use llmspeed::mock::{MockConfig, Profile};
use llmspeed::net::request::{Generation, Prompt};
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target};
use llmspeed::proto::prometheus;
use llmspeed::timeline::{Channel, ErrorKind, Timeline, TokenCountSource};
use std::time::Duration;

mod support;
use support::mock::MockServer as Server;

/// A client for the mock at `s`, with extra headers and an optional gap timeout.
fn client_for(s: &Server, headers: &[(&str, &str)], gap: Option<Duration>) -> Client {
    let mut cfg = ClientConfig::new(Target::parse(&format!("{}/v1", s.url())).unwrap());
    cfg.headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if gap.is_some() {
        cfg.timeouts.gap = gap;
    }
    // Generous: nothing here should take long, but a loaded CI machine must not fail us.
    cfg.timeouts.total = Some(Duration::from_secs(60));
    Client::new(cfg, Clock::new()).unwrap()
}

/// Fast profile, 1 ms steps: quick but with real gaps between tokens.
fn fast() -> MockConfig {
    let mut c = MockConfig::profile(Profile::Fast);
    c.engine.decode.base_us = 1000.0;
    c
}

fn gen(prompt: &str, max_tokens: u32) -> Generation {
    let mut g = Generation::new("mock-model", Prompt::Text(prompt.into()));
    g.max_tokens = Some(max_tokens);
    g.ignore_eos = true;
    g
}

fn req(g: &Generation) -> StreamRequest {
    g.stream_request(Some(true)).unwrap()
}

async fn run(client: &Client, r: &StreamRequest) -> Timeline {
    let start = client.clock().raw();
    client
        .stream(r, start, &mut NoopObserver, &Cancel::new())
        .await
}

fn ttft_ns(client: &Client, tl: &Timeline) -> u64 {
    client
        .clock()
        .delta_ns(tl.send_start.unwrap(), tl.first_token.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_and_continuous_usage_agree() {
    let s = Server::start(fast()).await;
    let c = client_for(&s, &[], None);
    let tl = run(&c, &req(&gen(" the house", 40))).await;
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert!(tl.done);
    assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
    let usage = tl.usage.expect("final usage");
    assert_eq!(usage.completion_tokens, 40);
    assert_eq!(usage.prompt_tokens, 2);
    assert_eq!(tl.event_tokens(), 40, "per-event counts must sum to usage");
    assert_eq!(tl.output_tokens(), 40);
    // Every content event carried exactly one token (one engine token per chunk), in order.
    let content: Vec<_> = tl
        .events
        .iter()
        .filter(|e| e.channel == Channel::Content)
        .collect();
    assert_eq!(content.len(), 40);
    assert!(content.iter().all(|e| e.tokens == 1));
    assert!(tl.events.windows(2).all(|w| w[0].t <= w[1].t));
    assert!(!tl.content_text.as_deref().unwrap_or("").is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_role_only_first_chunk_is_the_first_event() {
    let s = Server::start(fast()).await;
    let c = client_for(&s, &[], None);
    let mut g = gen("Say something.", 10);
    g.chat = true;
    let tl = run(&c, &req(&g)).await;
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    let first = tl.events[0];
    assert_eq!(first.channel, Channel::Empty, "role-only chunk first");
    assert_eq!(first.tokens, 0);
    assert_eq!(tl.first_event, Some(first.t));
    assert!(tl.first_token.unwrap() >= tl.first_event.unwrap());
    assert_eq!(tl.event_tokens(), 10);
    assert_eq!(tl.usage.unwrap().completion_tokens, 10);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_makes_the_repeat_ttft_far_smaller() {
    // Seed profile: an uncached 8000-token prompt prefills in ~250 ms, a cached one recomputes
    // one block (a few ms). Real time, not 10x faster: a loaded machine's late wake-up (tens of
    // ms) must not make the cached TTFT look uncached.
    let cfg = MockConfig::profile(Profile::Seed);
    let s = Server::start(cfg).await;
    let c = client_for(&s, &[], None);
    let prompt = " the".repeat(8000);
    let r = req(&gen(&prompt, 4));
    let cold = run(&c, &r).await;
    assert!(cold.is_ok(), "{:?}", cold.outcome);
    let warm = run(&c, &r).await;
    assert!(warm.is_ok(), "{:?}", warm.outcome);
    // The streaming usage carries no cached-token count; the server's own counter says it hit.
    let m = c.get("/metrics").await.unwrap();
    let page = prometheus::parse(std::str::from_utf8(&m.body).unwrap()).unwrap();
    let hits = prometheus::sum(&page, "vllm:prefix_cache_hits_total").unwrap();
    assert!(
        hits >= 7900.0,
        "second request should hit the prefix cache, hits {hits}"
    );
    let (a, b) = (ttft_ns(&c, &cold), ttft_ns(&c, &warm));
    assert!(
        b * 3 < a,
        "cached TTFT {b} ns should be far below uncached {a} ns"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_kv_capacity_wait_and_metrics_show_it() {
    // 512 KV tokens = 32 blocks; each request reserves ceil((1 + 200) / 16) = 13: two fit.
    // 20 ms steps: the first two run for about 4 s, so the steady state (two running, two
    // waiting) lasts long enough for a poll to see it on a loaded machine.
    let mut cfg = fast();
    cfg.engine.kv_tokens = 512;
    cfg.engine.decode.base_us = 20_000.0;
    let s = Server::start(cfg).await;
    let c = client_for(&s, &[], None);
    let r = req(&gen(" the", 200));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (c, r) = (c.clone(), r.clone());
        tasks.push(tokio::spawn(async move { run(&c, &r).await }));
    }
    // The invariant holds in every sample: never more than two running (what the KV cache
    // holds), never more than the four sent in all. Transient states are legitimate (three
    // waiting before the engine admits the second request); the steady state with exactly two
    // running and two waiting must be reached. No fixed sleep decides the outcome.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let steady = loop {
        let m = c.get("/metrics").await.unwrap();
        assert_eq!(m.status, 200);
        let page = prometheus::parse(std::str::from_utf8(&m.body).unwrap()).unwrap();
        let running = prometheus::sum(&page, "vllm:num_requests_running").unwrap();
        let waiting = prometheus::sum(&page, "vllm:num_requests_waiting").unwrap();
        assert!(
            running <= 2.0,
            "only two requests fit in the KV cache, {running} run"
        );
        assert!(
            running + waiting <= 4.0,
            "{running} running, {waiting} waiting"
        );
        seen.push((running, waiting));
        if (running, waiting) == (2.0, 2.0) {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(steady, "never two running and two waiting: {seen:?}");
    for t in tasks {
        let tl = t.await.unwrap();
        assert!(tl.is_ok(), "{:?}", tl.outcome);
        assert_eq!(tl.output_tokens(), 200);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_model_len_overflow_is_a_400_with_the_servers_message() {
    let s = Server::start(fast()).await;
    let c = client_for(&s, &[], None);
    let tl = run(&c, &req(&gen(" the", 40_000))).await;
    let e = tl.outcome.unwrap_err();
    assert_eq!(e.kind, ErrorKind::HttpStatus);
    assert_eq!(e.status, Some(400));
    assert!(e.message.contains("32768"), "server message kept: {e}");
    assert!(tl.events.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_is_a_404() {
    let s = Server::start(fast()).await;
    let c = client_for(&s, &[], None);
    let mut g = gen(" the", 4);
    g.model = "no-such-model".into();
    let e = run(&c, &req(&g)).await.outcome.unwrap_err();
    assert_eq!(e.kind, ErrorKind::HttpStatus);
    assert_eq!(e.status, Some(404));
    assert!(e.message.contains("no-such-model"), "{e}");
    s.stop().await;
}

/// One request with `x-mock-fault: spec`; returns its timeline.
async fn with_fault(s: &Server, spec: &str, max_tokens: u32, gap: Option<Duration>) -> Timeline {
    let c = client_for(s, &[("x-mock-fault", spec)], gap);
    run(&c, &req(&gen(" the house", max_tokens))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_faults_are_http_status_errors() {
    let s = Server::start(fast()).await;
    for code in [500u16, 429, 503] {
        let tl = with_fault(&s, &format!("status={code}"), 8, None).await;
        let e = tl.outcome.unwrap_err();
        assert_eq!(e.kind, ErrorKind::HttpStatus, "status={code}: {e}");
        assert_eq!(e.status, Some(code));
        assert!(!e.message.is_empty());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_faults_map_to_their_error_kinds() {
    let s = Server::start(fast()).await;
    // A reset mid-stream is a broken transport after the response began: Protocol (the client
    // classifies both "connection error after N events" and a reset before any byte so).
    let cases: [(&str, ErrorKind); 4] = [
        ("reset-after=3", ErrorKind::Protocol),
        ("error-after=3", ErrorKind::ServerError),
        ("malformed-after=3", ErrorKind::Protocol),
        ("truncate-after=3", ErrorKind::Protocol),
    ];
    for (spec, want) in cases {
        let tl = with_fault(&s, spec, 20, None).await;
        let e = tl.outcome.as_ref().unwrap_err();
        assert_eq!(e.kind, want, "{spec}: {e}");
        assert!(
            tl.event_tokens() < 20,
            "{spec}: the stream must not complete"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_past_the_gap_timeout_is_timeout_gap() {
    let s = Server::start(fast()).await;
    // A 1 s gap limit: a loaded machine's late token (tens of ms) stays well inside it, the
    // 5 s stall well past it.
    let tl = with_fault(&s, "stall-after=3:5000", 10, Some(Duration::from_secs(1))).await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeoutGap, "{e}");
    assert!(
        tl.event_tokens() >= 3,
        "the tokens before the stall were recorded"
    );
    // A stall shorter than the gap timeout is just a slow token.
    let tl = with_fault(&s, "stall-after=3:50", 10, Some(Duration::from_secs(5))).await;
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert_eq!(tl.output_tokens(), 10);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drip_is_slow_but_complete() {
    let s = Server::start(fast()).await;
    let tl = with_fault(&s, "drip", 3, None).await;
    assert!(tl.is_ok(), "{:?}", tl.outcome);
    assert!(tl.done);
    assert_eq!(tl.output_tokens(), 3);
    assert_eq!(tl.event_tokens(), 3);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_carries_each_request_arrival() {
    use llmspeed::mock::trace::TraceSink;
    let (sink, records) = TraceSink::memory();
    let mut cfg = fast();
    cfg.trace_sink = Some(sink);
    // Held after arrival, before the engine sees it: the arrival must be stamped before this.
    cfg.admission_delay = Duration::from_millis(30);
    let s = Server::start(cfg).await;
    let client = client_for(&s, &[], None);
    let mut tls = Vec::new();
    // Two requests on one kept-alive connection: each gets its own arrival.
    for id in ["arrive-1", "arrive-2"] {
        let mut r = req(&gen(" the", 4));
        r.request_id = Some(id.into());
        let tl = run(&client, &r).await;
        assert!(tl.is_ok(), "{:?}", tl.outcome);
        tls.push(tl);
    }
    s.stop().await;
    let recs: Vec<_> = records.try_iter().collect();
    assert_eq!(recs.len(), 8);
    let c = client.clock();
    for (id, tl) in ["arrive-1", "arrive-2"].iter().zip(&tls) {
        let mine: Vec<_> = recs
            .iter()
            .filter(|r| *r.request_id_json == format!("\"{id}\""))
            .collect();
        assert_eq!(mine.len(), 4, "{id}");
        let a = (mine[0].arrival_ns, mine[0].arrival_raw);
        assert!(mine.iter().all(|r| (r.arrival_ns, r.arrival_raw) == a));
        let (send, first) = (tl.send_start.unwrap(), tl.first_token.unwrap());
        // On the one shared clock: sent, then arrived, then the first token written and read.
        assert!(
            c.signed_delta_ns(send, a.1) >= 0,
            "{id}: arrival before the send"
        );
        assert!(c.signed_delta_ns(a.1, first) > 0, "{id}");
        // The 30 ms hold lies between arrival and the engine making the first token.
        assert!(mine[0].due_ns >= a.0 + 30_000_000, "{id}: {:?}", mine[0]);
        assert!(mine[0].t_ns >= mine[0].due_ns);
    }
}
