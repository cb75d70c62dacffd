//! The client against a scripted server that writes exact bytes with controlled boundaries.

mod support;

use bytes::Bytes;
use llmspeed::clock::Clock;
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, StreamRequest, Target};
use llmspeed::timeline::{Channel, ErrorKind, FinishReason, Timeline, TokenCountSource};
use std::time::Duration;
use support::*;

fn config(server: &Server) -> ClientConfig {
    let mut cfg = ClientConfig::new(Target::parse(&format!("{}/v1", server.base_url())).unwrap());
    cfg.keep_text = true;
    cfg
}

fn request() -> StreamRequest {
    StreamRequest {
        header: None,
        path: "/v1/completions".into(),
        body: Bytes::from_static(br#"{"model":"m","prompt":"hi","stream":true}"#),
        dialect: llmspeed::net::Dialect::OpenAi,
        expected_events: 64,
        keep_text: None,
        request_id: None,
    }
}

async fn stream(client: &Client) -> Timeline {
    let start = client.clock().raw();
    client
        .stream(&request(), start, &mut NoopObserver, &Cancel::new())
        .await
}

async fn one(script: Vec<Step>, tweak: impl FnOnce(&mut ClientConfig)) -> (Server, Timeline) {
    let server = Server::start(vec![script]).await;
    let mut cfg = config(&server);
    tweak(&mut cfg);
    let client = Client::new(cfg, Clock::new()).unwrap();
    let tl = stream(&client).await;
    (server, tl)
}

fn assert_ok_stream(tl: &Timeline, tokens: usize) {
    assert_eq!(tl.outcome, Ok(()), "outcome");
    assert_eq!(tl.status, Some(200));
    assert_eq!(tl.events.len(), tokens);
    assert!(tl.done, "[DONE] seen");
    assert!(tl.events.iter().all(|e| e.channel == Channel::Content));
    let (s, w, h, f) = (
        tl.send_start.unwrap(),
        tl.write_done.unwrap(),
        tl.response_head.unwrap(),
        tl.first_token.unwrap(),
    );
    assert!(
        s <= w && w <= h && h <= f && f <= tl.end.unwrap(),
        "stamps in order"
    );
    assert!(tl.events.windows(2).all(|p| p[0].t <= p[1].t));
}

#[tokio::test]
async fn vllm_chunked_stream_with_usage() {
    let (server, tl) = one(respond(vllm_writes(5, 7)), |cfg| {
        cfg.api_key = Some("sk-test".into());
        cfg.headers.push(("X-Trace".into(), "abc".into()));
    })
    .await;
    assert_ok_stream(&tl, 5);
    assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
    assert!(tl.events.iter().all(|e| e.tokens == 1));
    assert_eq!(
        tl.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((7, 5))
    );
    assert_eq!(tl.finish_reason, Some(FinishReason::Length));
    assert_eq!(
        tl.content_text.as_deref(),
        Some(" tok1 tok2 tok3 tok4 tok5")
    );
    let req = &server.requests()[0];
    assert!(
        req.starts_with("POST /v1/completions HTTP/1.1\r\n"),
        "{req}"
    );
    let lower = req.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: {}\r\n", server.addr)),
        "{req}"
    );
    assert!(lower.contains("user-agent: llmspeed/"), "{req}");
    assert!(lower.contains("authorization: bearer sk-test\r\n"), "{req}");
    assert!(lower.contains("x-trace: abc\r\n"), "{req}");
    assert!(lower.contains("content-type: application/json"), "{req}");
    assert!(!lower.contains("accept-encoding"), "{req}");
    assert!(req.ends_with(r#""stream":true}"#), "{req}");
}

#[tokio::test]
async fn request_id_is_sent_per_request_and_replaces_a_configured_one() {
    // Both requests on one kept-alive connection.
    let mut script = respond(vllm_writes(2, 3));
    script.extend(respond(vllm_writes(2, 3)));
    let server = Server::start(vec![script]).await;
    let mut cfg = config(&server);
    cfg.headers
        .push(("X-Request-Id".into(), "configured".into()));
    // One client for both requests: the id belongs to the request, not the client.
    let client = Client::new(cfg, Clock::new()).unwrap();
    for id in ["bench-0", "bench-1"] {
        let req = StreamRequest {
            request_id: Some(id.into()),
            // A request's own header too: sent with it, after the configured ones.
            header: Some(("X-SMG-Routing-Key", format!("k-{id}"))),
            ..request()
        };
        let start = client.clock().raw();
        let tl = client
            .stream(&req, start, &mut NoopObserver, &Cancel::new())
            .await;
        assert_ok_stream(&tl, 2);
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for (req, id) in reqs.iter().zip(["bench-0", "bench-1"]) {
        let lower = req.to_ascii_lowercase();
        assert!(lower.contains(&format!("x-request-id: {id}\r\n")), "{req}");
        assert_eq!(lower.matches("x-request-id:").count(), 1, "{req}");
        assert!(
            lower.contains(&format!(
                "x-request-id: {id}\r\nx-smg-routing-key: k-{id}\r\n"
            )),
            "{req}"
        );
    }
}

#[tokio::test]
async fn request_id_that_would_break_the_head_is_refused_before_sending() {
    let server = Server::start(vec![respond(vllm_writes(2, 3))]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    let req = StreamRequest {
        request_id: Some("a\r\nX-Evil: 1".into()),
        ..request()
    };
    let start = client.clock().raw();
    let tl = client
        .stream(&req, start, &mut NoopObserver, &Cancel::new())
        .await;
    let e = tl.outcome.expect_err("must fail");
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("request id"), "{}", e.message);
    assert!(tl.send_start.is_none(), "nothing was sent");
    // A request's own header is held to the same rule.
    let req = StreamRequest {
        header: Some(("X-SMG-Routing-Key", "a\r\nX-Evil: 1".into())),
        ..request()
    };
    let tl = client
        .stream(
            &req,
            client.clock().raw(),
            &mut NoopObserver,
            &Cancel::new(),
        )
        .await;
    let e = tl.outcome.expect_err("must fail");
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("X-SMG-Routing-Key"), "{}", e.message);
    assert!(tl.send_start.is_none(), "nothing was sent");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn tgi_style_no_space_and_keepalive_comments() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for i in 0..3 {
        writes.push(Step::Write(chunk(b":\n\n")));
        let ev = format!("data:{{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"w{i}\"}},\"finish_reason\":{}}}]}}\n\n", if i == 2 { "\"stop\"" } else { "null" });
        writes.push(Step::Write(chunk(ev.as_bytes())));
    }
    writes.push(Step::Write(chunk(b"data:[DONE]\n\n")));
    writes.push(Step::Write(LAST_CHUNK.to_vec()));
    let (_s, tl) = one(respond(writes), |_| {}).await;
    assert_ok_stream(&tl, 3);
    assert_eq!(tl.token_count_source, TokenCountSource::Chunks);
    assert_eq!(tl.content_text.as_deref(), Some("w0w1w2"));
    assert_eq!(tl.finish_reason, Some(FinishReason::Stop));
    assert!(tl.usage.is_none());
}

#[tokio::test]
async fn crlf_line_endings() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for e in vllm_events(3, 2) {
        writes.push(Step::Write(chunk(e.replace('\n', "\r\n").as_bytes())));
    }
    writes.push(Step::Write(LAST_CHUNK.to_vec()));
    let (_s, tl) = one(respond(writes), |_| {}).await;
    assert_ok_stream(&tl, 3);
    assert_eq!(tl.output_tokens(), 3);
}

#[tokio::test]
async fn one_byte_per_write() {
    let mut bytes = CHUNKED_HEAD.as_bytes().to_vec();
    for e in vllm_events(2, 2) {
        bytes.extend(chunk(e.as_bytes()));
    }
    bytes.extend_from_slice(LAST_CHUNK);
    let mut writes = Vec::new();
    for b in bytes {
        writes.push(Step::Write(vec![b]));
    }
    let (_s, tl) = one(respond(writes), |_| {}).await;
    assert_ok_stream(&tl, 2);
    assert_eq!(tl.content_text.as_deref(), Some(" tok1 tok2"));
}

#[tokio::test]
async fn several_events_per_write_share_one_stamp() {
    let mut all = CHUNKED_HEAD.as_bytes().to_vec();
    for e in vllm_events(4, 2) {
        all.extend(chunk(e.as_bytes()));
    }
    all.extend_from_slice(LAST_CHUNK);
    let (_s, tl) = one(respond(vec![Step::Write(all)]), |_| {}).await;
    assert_ok_stream(&tl, 4);
    // One write usually arrives as one read; when it does, every event carries the same stamp.
    if tl.response_head == tl.end {
        assert!(tl.events.iter().all(|e| Some(e.t) == tl.response_head));
    }
    assert_eq!(tl.output_tokens(), 4);
}

#[tokio::test]
async fn status_400_surfaces_the_server_message() {
    let body = r#"{"error":{"code":400,"message":"request (3024 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3024,"n_ctx":2048}}"#;
    let (_s, tl) = one(
        respond(vec![Step::Write(json_response("400 Bad Request", body))]),
        |_| {},
    )
    .await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::HttpStatus);
    assert_eq!(e.status, Some(400));
    assert!(
        e.message.contains("exceeds the available context size"),
        "{e}"
    );
    assert_eq!(tl.status, Some(400));
    assert!(tl.events.is_empty());
}

#[tokio::test]
async fn error_event_in_a_200_stream() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    writes.push(Step::Write(chunk(vllm_event(1, 3, None).as_bytes())));
    writes.push(Step::Write(chunk(
        br#"data: {"error":{"message":"EngineCore died unexpectedly","type":"InternalServerError","param":null,"code":500}}

"#,
    )));
    writes.push(Step::Write(chunk(DONE_EVENT.as_bytes())));
    writes.push(Step::Write(LAST_CHUNK.to_vec()));
    let (_s, tl) = one(respond(writes), |_| {}).await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::ServerError);
    assert!(e.message.contains("EngineCore died unexpectedly"), "{e}");
    assert_eq!(tl.events.len(), 1, "the event before the error is kept");
}

#[tokio::test]
async fn connection_closed_mid_chunk() {
    let ev = chunk(vllm_event(2, 3, None).as_bytes());
    let writes = vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Write(chunk(vllm_event(1, 3, None).as_bytes())),
        Step::Write(ev[..ev.len() / 2].to_vec()),
        Step::Close,
    ];
    let (_s, tl) = one(respond(writes), |_| {}).await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(
        e.message.contains("closed before the stream finished"),
        "{e}"
    );
    assert_eq!(tl.events.len(), 1);
}

#[tokio::test]
async fn stall_past_the_gap_timeout() {
    let writes = vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Write(chunk(vllm_event(1, 3, None).as_bytes())),
        Step::Write(chunk(vllm_event(2, 3, None).as_bytes())),
        Step::Pause(Duration::from_secs(5)),
    ];
    let started = std::time::Instant::now();
    let (_s, tl) = one(respond(writes), |cfg| {
        cfg.timeouts.gap = Some(Duration::from_millis(200))
    })
    .await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeoutGap, "{e}");
    assert!(e.message.contains("gap timeout"), "{e}");
    assert_eq!(tl.events.len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "gave up well before the stall ended"
    );
}

#[tokio::test]
async fn first_byte_timeout() {
    let writes = vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Pause(Duration::from_secs(5)),
    ];
    let (_s, tl) = one(respond(writes), |cfg| {
        cfg.timeouts.first_byte = Some(Duration::from_millis(200))
    })
    .await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::TimeoutFirstByte));
    assert_eq!(tl.status, Some(200));
}

#[tokio::test]
async fn total_timeout() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for n in 1..=50 {
        writes.push(Step::Write(chunk(vllm_event(n, 3, None).as_bytes())));
        writes.push(Step::Pause(Duration::from_millis(50)));
    }
    let (_s, tl) = one(respond(writes), |cfg| {
        cfg.timeouts.total = Some(Duration::from_millis(300))
    })
    .await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::TimeoutTotal));
    assert!(
        !tl.events.is_empty() && tl.events.len() < 50,
        "partial timeline kept"
    );
}

#[tokio::test]
async fn keep_alive_reuses_one_connection() {
    let mut script = respond(vllm_writes(2, 2));
    script.extend(respond(vllm_writes(3, 2)));
    let server = Server::start(vec![script]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    let a = stream(&client).await;
    assert_ok_stream(&a, 2);
    assert_eq!(client.idle_connections(), 1);
    let b = stream(&client.clone()).await;
    assert_ok_stream(&b, 3);
    assert_eq!(server.accepted(), 1);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn never_reuses_after_connection_close() {
    let mut first = respond(vec![Step::Write(
        CHUNKED_HEAD
            .replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n")
            .into_bytes(),
    )]);
    for e in vllm_events(1, 1) {
        first.push(Step::Write(chunk(e.as_bytes())));
    }
    first.push(Step::Write(LAST_CHUNK.to_vec()));
    let server = Server::start(vec![first, respond(vllm_writes(1, 1))]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    assert_ok_stream(&stream(&client).await, 1);
    assert_eq!(client.idle_connections(), 0);
    assert_ok_stream(&stream(&client).await, 1);
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn dead_pooled_connection_is_retried_once() {
    // llama.cpp closes idle keep-alive connections after 5 s.
    let mut first = respond(vllm_writes(2, 2));
    first.push(Step::Close);
    let server = Server::start(vec![first, respond(vllm_writes(2, 2))]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    assert_ok_stream(&stream(&client).await, 2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = stream(&client).await;
    assert_ok_stream(&second, 2);
    assert_eq!(server.accepted(), 2);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn fresh_connection_closed_without_response_is_a_protocol_error() {
    let (_s, tl) = one(vec![Step::ReadRequest, Step::Close], |_| {}).await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("without a response"), "{e}");
}

#[tokio::test]
async fn connection_refused() {
    let port = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = ClientConfig::new(Target::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    let client = Client::new(cfg, Clock::new()).unwrap();
    let tl = stream(&client).await;
    let e = tl.outcome.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connect);
    assert_eq!(e.message, format!("connection refused by 127.0.0.1:{port}"));
}

#[tokio::test]
async fn cancel_keeps_the_partial_timeline() {
    let writes = vec![
        Step::Write(CHUNKED_HEAD.as_bytes().to_vec()),
        Step::Write(chunk(vllm_event(1, 3, None).as_bytes())),
        Step::Pause(Duration::from_secs(10)),
    ];
    let server = Server::start(vec![respond(writes)]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    });
    let tl = client
        .stream(&request(), client.clock().raw(), &mut NoopObserver, &cancel)
        .await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::Cancelled));
    assert_eq!(tl.events.len(), 1);
    assert!(tl.end.is_some());
    // Already cancelled: ends at once.
    let tl = client
        .stream(&request(), 0, &mut NoopObserver, &cancel)
        .await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::Cancelled));
}

#[tokio::test]
async fn get_and_post_json_helpers() {
    let models = r#"{"object":"list","data":[{"id":"m","max_model_len":4096}]}"#;
    let mut script = respond(vec![Step::Write(json_response("200 OK", models))]);
    script.extend(respond(vec![Step::Write(json_response(
        "200 OK",
        r#"{"count":3}"#,
    ))]));
    script.extend(respond(vec![Step::Write(json_response(
        "404 Not Found",
        r#"{"detail":"Not Found"}"#,
    ))]));
    let server = Server::start(vec![script]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    let r = client.get("/v1/models").await.unwrap();
    assert_eq!((r.status, &r.body[..]), (200, models.as_bytes()));
    let r = client
        .post_json("/tokenize", br#"{"prompt":"a b c"}"#)
        .await
        .unwrap();
    assert_eq!(&r.body[..], br#"{"count":3}"#);
    let r = client.get("/metrics").await.unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(r.error_message(), "Not Found");
    let reqs = server.requests();
    assert!(
        reqs[0].starts_with("GET /v1/models HTTP/1.1\r\n"),
        "{}",
        reqs[0]
    );
    assert!(
        reqs[1].starts_with("POST /tokenize HTTP/1.1\r\n"),
        "{}",
        reqs[1]
    );
    assert!(reqs[1].ends_with(r#"{"prompt":"a b c"}"#));
    assert!(
        reqs[2].starts_with("GET /metrics HTTP/1.1\r\n"),
        "{}",
        reqs[2]
    );
    assert_eq!(server.accepted(), 1);
}

/// `get`/`post_json` against a server that sends interim heads first: `bytes` written as the
/// given pieces, then the connection stays open, so a client waiting for another read after
/// the interim head would stall until its first-byte timeout (issue 9.9).
async fn full_after_interim(pieces: Vec<Vec<u8>>) {
    let mut steps: Vec<Step> = pieces.into_iter().map(Step::Write).collect();
    steps.push(Step::Pause(Duration::from_secs(5)));
    let server = Server::start(vec![respond(steps)]).await;
    let mut cfg = config(&server);
    cfg.timeouts.first_byte = Some(Duration::from_secs(2));
    let client = Client::new(cfg, Clock::new()).unwrap();
    let started = std::time::Instant::now();
    let r = client
        .post_json("/tokenize", br#"{"prompt":"a b c"}"#)
        .await
        .expect("the final answer after the interim head");
    assert_eq!((r.status, &r.body[..]), (200, &br#"{"count":3}"#[..]));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?} for bytes that were already read",
        started.elapsed()
    );
}

#[tokio::test]
async fn interim_100_continue_and_the_answer_in_one_write() {
    let mut bytes = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
    bytes.extend(json_response("200 OK", r#"{"count":3}"#));
    full_after_interim(vec![bytes]).await;
}

#[tokio::test]
async fn two_interim_heads_then_the_answer_split_mid_head() {
    let mut bytes =
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n".to_vec();
    bytes.extend(json_response("200 OK", r#"{"count":3}"#));
    let (a, b) = bytes.split_at(30);
    full_after_interim(vec![a.to_vec(), b.to_vec()]).await;
}

#[tokio::test]
async fn observer_stops_the_stream() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for n in 1..=5 {
        writes.push(Step::Write(chunk(vllm_event(n, 3, None).as_bytes())));
    }
    writes.push(Step::Pause(Duration::from_secs(10)));
    let server = Server::start(vec![respond(writes)]).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    let mut seen = 0;
    let mut obs = |_: &llmspeed::timeline::EventRecord, text: Option<&[u8]>| {
        seen += 1;
        assert!(text.is_some());
        if seen == 3 {
            llmspeed::net::Flow::Stop
        } else {
            llmspeed::net::Flow::Continue
        }
    };
    let tl = client.stream(&request(), 0, &mut obs, &Cancel::new()).await;
    assert_eq!(tl.error_kind(), Some(ErrorKind::Cancelled));
    assert_eq!(tl.events.len(), 3);
}

#[tokio::test]
async fn done_without_the_body_end_succeeds_but_is_not_reused() {
    let mut writes = vec![Step::Write(CHUNKED_HEAD.as_bytes().to_vec())];
    for e in vllm_events(2, 2) {
        writes.push(Step::Write(chunk(e.as_bytes())));
    }
    // No last chunk: the body never ends.
    writes.push(Step::Pause(Duration::from_secs(10)));
    let server = Server::start(vec![respond(writes)]).await;
    let mut cfg = config(&server);
    cfg.timeouts.gap = Some(Duration::from_millis(200));
    let client = Client::new(cfg, Clock::new()).unwrap();
    let tl = stream(&client).await;
    assert_ok_stream(&tl, 2);
    assert_eq!(client.idle_connections(), 0);
}

#[tokio::test]
async fn non_streaming_json_answer_is_a_protocol_error() {
    let body = r#"{"id":"x","object":"text_completion","choices":[{"text":"hi"}]}"#;
    let (_s, tl) = one(
        respond(vec![Step::Write(json_response("200 OK", body))]),
        |_| {},
    )
    .await;
    let e = tl.outcome.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(
        e.message
            .contains("without any stream event (content-type: application/json)"),
        "{e}"
    );
}

#[tokio::test]
async fn preconnect_opens_the_connections_the_streams_then_use() {
    // Three connections opened before any request, then three concurrent streams: the server
    // accepts no fourth connection, and each pooled connection carries one request.
    let server = Server::start_repeating(respond(vllm_writes(2, 2)), 3).await;
    let client = Client::new(config(&server), Clock::new()).unwrap();
    assert_eq!(client.preconnect(3).await.expect("preconnect"), 3);
    assert_eq!(client.idle_connections(), 3);
    assert_eq!(server.accepted(), 3);
    assert!(server.requests().is_empty(), "no request before the start");
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { stream(&c).await })
        })
        .collect();
    for s in streams {
        assert_ok_stream(&s.await.unwrap(), 2);
    }
    assert_eq!(server.accepted(), 3);
    assert_eq!(server.requests().len(), 3);
    // Asking again tops the pool up to the number asked for, never past the pool's size.
    assert_eq!(client.preconnect(3).await.expect("none to open"), 3);
    assert_eq!(server.accepted(), 3);
}

#[tokio::test]
async fn preconnect_reports_a_refused_connection() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = Target::parse(&format!("http://127.0.0.1:{port}/v1")).unwrap();
    let client = Client::new(ClientConfig::new(target), Clock::new()).unwrap();
    let e = client.preconnect(4).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connect, "{e:?}");
    assert_eq!(client.idle_connections(), 0);
}
