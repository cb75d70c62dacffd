//! Live `/metrics` sampling during a matrix cell: running and waiting requests, the generation
//! token counter and preemptions, polled on its own task at a fixed period (≥ 1 Hz).
//!
//! Owns the per-engine metric names. It must never run on the per-token path: streams never
//! wait for it, and a slow or failing `/metrics` only leaves gaps in the samples.

use super::probe::EngineKind;
use crate::clock::Clock;
use crate::net::{Cancel, Client};
use crate::proto::prometheus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The metric names of one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricNames {
    pub running: &'static str,
    pub waiting: &'static str,
    pub generation_tokens: Option<&'static str>,
    pub preemptions: Option<&'static str>,
    /// The generation counter moves only when a request ends (llama.cpp), so its delta over a
    /// window is not the tokens generated inside it.
    pub generation_counted_at_end: bool,
}

impl MetricNames {
    pub fn for_engine(e: EngineKind) -> Option<MetricNames> {
        match e {
            EngineKind::Vllm => Some(MetricNames {
                running: "vllm:num_requests_running",
                waiting: "vllm:num_requests_waiting",
                generation_tokens: Some("vllm:generation_tokens_total"),
                preemptions: Some("vllm:num_preemptions_total"),
                generation_counted_at_end: false,
            }),
            EngineKind::Sglang => Some(MetricNames {
                running: "sglang:num_running_reqs",
                waiting: "sglang:num_queue_reqs",
                generation_tokens: Some("sglang:generation_tokens_total"),
                preemptions: None,
                generation_counted_at_end: false,
            }),
            EngineKind::Tgi => Some(MetricNames {
                running: "tgi_batch_current_size",
                waiting: "tgi_queue_size",
                generation_tokens: None,
                preemptions: None,
                generation_counted_at_end: false,
            }),
            EngineKind::LlamaCpp => Some(MetricNames {
                running: "llamacpp:requests_processing",
                waiting: "llamacpp:requests_deferred",
                generation_tokens: Some("llamacpp:tokens_predicted_total"),
                preemptions: None,
                generation_counted_at_end: true,
            }),
            EngineKind::Ollama | EngineKind::OpenAi => None,
        }
    }

    /// Read one page into a sample; `None` when the page lacks the running gauge.
    pub fn read(&self, t: u64, text: &str) -> Option<MetricsSample> {
        let s = prometheus::parse(text).ok()?;
        Some(MetricsSample {
            t,
            running: prometheus::sum(&s, self.running)?,
            waiting: prometheus::sum(&s, self.waiting).unwrap_or(0.0),
            generation_tokens: self.generation_tokens.and_then(|n| prometheus::sum(&s, n)),
            preemptions: self.preemptions.and_then(|n| prometheus::sum(&s, n)),
        })
    }
}

/// One `/metrics` reading.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricsSample {
    /// Raw clock stamp taken when the page arrived.
    pub t: u64,
    pub running: f64,
    pub waiting: f64,
    pub generation_tokens: Option<f64>,
    pub preemptions: Option<f64>,
}

/// Fetch and read `/metrics` once.
/// The longest one `/metrics` poll may take. The client's own first-byte limit is minutes (for
/// long prefills); a page that takes longer than this is a gap in the samples, not a stall of
/// the cell waiting on it.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn sample_once(client: &Client, names: &MetricNames) -> Option<MetricsSample> {
    let r = tokio::time::timeout(POLL_TIMEOUT, client.get("/metrics"))
        .await
        .ok()?
        .ok()?;
    if !r.is_success() {
        return None;
    }
    let t = client.clock().raw();
    names.read(t, std::str::from_utf8(&r.body).ok()?)
}

/// A polling task; samples accumulate until [`Sampler::stop`].
pub struct Sampler {
    samples: Arc<Mutex<Vec<MetricsSample>>>,
    cancel: Cancel,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Start polling every `period` (keep it ≤ 1 s).
    pub fn start(client: Client, names: MetricNames, period: Duration) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::with_capacity(256)));
        let cancel = Cancel::new();
        let (s, c) = (samples.clone(), cancel.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = c.cancelled() => break,
                    _ = tick.tick() => {}
                }
                // `stop` must not wait for a poll the server is slow to answer.
                let got = tokio::select! {
                    _ = c.cancelled() => break,
                    m = sample_once(&client, &names) => m,
                };
                if let Some(m) = got {
                    if let Ok(mut v) = s.lock() {
                        v.push(m);
                    }
                }
            }
        });
        Sampler {
            samples,
            cancel,
            task,
        }
    }

    /// The newest sample, if any.
    pub fn latest(&self) -> Option<MetricsSample> {
        self.samples.lock().ok().and_then(|v| v.last().copied())
    }

    /// Samples stamped in `[from, to]`.
    pub fn between(&self, from: u64, to: u64) -> Vec<MetricsSample> {
        self.samples
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|s| s.t >= from && s.t <= to)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn stop(self) -> Vec<MetricsSample> {
        self.cancel.cancel();
        let _ = self.task.await;
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// How the wait for an idle server ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drain {
    /// The server reported 0 running and 0 waiting.
    Drained,
    /// It still reported running or waiting requests (or no readable page) at the timeout.
    Busy,
    /// Its connection was refused: a dead server cannot drain, so the wait ends at once. The
    /// error is the refusal, as the client classified it.
    Unreachable(crate::timeline::RequestError),
}

/// Whether a failed request says the server cannot be reached at all (nothing listens, or
/// nothing answers the connection), as opposed to a server that answered badly.
pub fn unreachable(e: &crate::timeline::RequestError) -> bool {
    use crate::timeline::ErrorKind;
    matches!(e.kind, ErrorKind::Connect | ErrorKind::TimeoutConnect)
}

/// Wait until the server reports no running and no waiting requests, for at most `timeout`.
pub async fn wait_drained(
    client: &Client,
    names: &MetricNames,
    timeout: Duration,
    clock: &Clock,
) -> Drain {
    let start = clock.raw();
    let limit_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    loop {
        // Each poll gets only the time left, so a hanging `/metrics` cannot outlast `timeout`.
        let left =
            Duration::from_nanos(limit_ns.saturating_sub(clock.delta_ns(start, clock.raw())));
        let poll = tokio::time::timeout(left.min(POLL_TIMEOUT), client.get("/metrics")).await;
        match poll {
            Ok(Err(e)) if unreachable(&e) => return Drain::Unreachable(e),
            Ok(Ok(r)) if r.is_success() => {
                let t = clock.raw();
                let idle = std::str::from_utf8(&r.body)
                    .ok()
                    .and_then(|page| names.read(t, page))
                    .is_some_and(|s| s.running <= 0.0 && s.waiting <= 0.0);
                if idle {
                    return Drain::Drained;
                }
            }
            _ => {}
        }
        if clock.delta_ns(start, clock.raw()) >= limit_ns {
            return Drain::Busy;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_page_summing_engines() {
        let n = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        let page = "vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"1\"} 2\n\
                    vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:generation_tokens_total{engine=\"0\"} 100\n";
        let s = n.read(7, page).unwrap();
        assert_eq!(s.t, 7);
        assert_eq!(s.running, 5.0);
        assert_eq!(s.waiting, 1.0);
        assert_eq!(s.generation_tokens, Some(100.0));
        assert_eq!(s.preemptions, None);
    }

    #[test]
    fn page_without_running_gauge_is_no_sample() {
        let n = MetricNames::for_engine(EngineKind::LlamaCpp).unwrap();
        assert_eq!(n.read(0, "vllm:num_requests_running 1\n"), None);
        assert_eq!(n.read(0, "not { prometheus"), None);
        assert!(MetricNames::for_engine(EngineKind::Ollama).is_none());
    }

    /// A server that accepts connections and reads requests but never answers.
    async fn silent_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        });
        (addr, task)
    }

    fn client_for(addr: std::net::SocketAddr) -> Client {
        let target = crate::net::Target::parse(&format!("http://{addr}")).unwrap();
        Client::new(crate::net::ClientConfig::new(target), Clock::new()).unwrap()
    }

    #[tokio::test]
    async fn a_hanging_metrics_page_stalls_neither_stop_nor_the_drain_wait() {
        // Before: `stop` waited for the poll in flight and `wait_drained` for a whole poll,
        // each up to the client's 600 s first-byte limit. Bounds here are 100x the expected.
        let (addr, server) = silent_server().await;
        let client = client_for(addr);
        let names = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        let sampler = Sampler::start(client.clone(), names, Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = std::time::Instant::now();
        assert!(sampler.stop().await.is_empty());
        assert!(t.elapsed() < POLL_TIMEOUT / 2, "{:?}", t.elapsed());

        let t = std::time::Instant::now();
        let drained =
            wait_drained(&client, &names, Duration::from_millis(50), client.clock()).await;
        assert_eq!(drained, Drain::Busy);
        assert!(t.elapsed() < POLL_TIMEOUT / 2, "{:?}", t.elapsed());
        server.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_ends_the_drain_wait_at_once() {
        // Before: a dead server was polled for the whole drain timeout (60 s in a matrix) and
        // then called busy. A port that was bound and closed again refuses connections.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let client = client_for(addr);
        let names = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        let t = std::time::Instant::now();
        let drained = wait_drained(&client, &names, Duration::from_secs(600), client.clock()).await;
        match drained {
            Drain::Unreachable(e) => assert_eq!(e.kind, crate::timeline::ErrorKind::Connect),
            other => panic!("{other:?}"),
        }
        // Half the limit: a bound no loaded machine comes near, which a wait that ran the
        // limit out cannot meet.
        assert!(t.elapsed() < Duration::from_secs(300), "{:?}", t.elapsed());
    }
}
