//! The client against the simulated server (`llmspeed::mock`), in process on 127.0.0.1:0:
//! 128 parallel streams through one pooled `Client`, then a second wave on the kept-alive
//! connections. Each side's HTTP code is independent of the other's.

use llmspeed::clock::Clock;
use llmspeed::mock::{serve, MockConfig, Profile};
use llmspeed::net::request::{synthetic_token_ids, Generation, Prompt};
use llmspeed::net::{Cancel, Client, ClientConfig, NoopObserver, Target};
use llmspeed::timeline::{Channel, FinishReason, TokenCountSource};
use tokio::net::TcpListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_streams_against_the_mock() {
    const STREAMS: usize = 128;
    const MAX_TOKENS: u32 = 16;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut cfg = MockConfig::profile(Profile::Fast);
    cfg.engine.decode.base_us = 500.0;
    let model = cfg.model.clone();
    let server = tokio::spawn(serve(listener, cfg, async move {
        let _ = stopped.await;
    }));

    let target = Target::parse(&format!("http://{addr}/v1")).unwrap();
    let client = Client::new(ClientConfig::new(target), Clock::new()).unwrap();
    let mut gen = Generation::new(model, Prompt::TokenIds(synthetic_token_ids(64)));
    gen.max_tokens = Some(MAX_TOKENS);
    gen.ignore_eos = true;
    let req = gen.stream_request(None).unwrap();

    for wave in 0..2 {
        let mut tasks = Vec::new();
        for _ in 0..STREAMS {
            let (client, req) = (client.clone(), req.clone());
            tasks.push(tokio::spawn(async move {
                let start = client.clock().raw();
                client
                    .stream(&req, start, &mut NoopObserver, &Cancel::new())
                    .await
            }));
        }
        for t in tasks {
            let tl = t.await.unwrap();
            assert_eq!(tl.outcome, Ok(()), "wave {wave}");
            assert!(tl.done);
            assert_eq!(tl.output_tokens(), MAX_TOKENS as u64);
            assert_eq!(
                tl.event_tokens(),
                MAX_TOKENS as u64,
                "per-event counts add up"
            );
            assert_eq!(tl.token_count_source, TokenCountSource::ContinuousUsage);
            assert_eq!(tl.finish_reason, Some(FinishReason::Length));
            assert_eq!(tl.usage.map(|u| u.prompt_tokens), Some(64));
            assert!(tl.events.iter().any(|e| e.channel == Channel::Content));
            assert!(tl.first_token.unwrap() >= tl.write_done.unwrap());
        }
        // Every connection came back to the pool after its complete keep-alive response, and
        // the second wave reused them (new connections would have grown the pool past 128).
        assert_eq!(client.idle_connections(), STREAMS, "wave {wave}");
    }
    let _ = stop.send(());
    let _ = server.await;
}
