//! Live `/metrics` sampling during a matrix cell: running and waiting requests, the generation
//! token counter and preemptions, polled on its own task at a fixed period (≥ 1 Hz).
//!
//! llama.cpp adds a request's tokens to `llamacpp:tokens_predicted_total` only when it ends;
//! its `/slots` shows each busy slot's live `n_decoded`. Their sum is a live generation counter
//! (a request that ended is in the total, one in flight in its slot), read as `/slots`,
//! `/metrics`, `/slots` and kept only when no slot started or ended a request between the two
//! `/slots` reads, so no request is counted twice or missed.
//!
//! Owns the per-engine metric names. It must never run on the per-token path: streams never
//! wait for it, and a slow or failing `/metrics` only leaves gaps in the samples.

use super::engine::EngineKind;
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
    /// window is not the tokens generated inside it...
    pub generation_counted_at_end: bool,
    /// ...unless `/slots` adds the tokens of the requests in flight (llama.cpp).
    pub live_slots: bool,
    /// The histogram of the time each request waited before the server first scheduled it.
    pub queue_time: Option<Histogram>,
}

/// A Prometheus histogram's `_sum` and `_count` series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Histogram {
    pub sum: &'static str,
    pub count: &'static str,
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
                live_slots: false,
                queue_time: Some(Histogram {
                    sum: "vllm:request_queue_time_seconds_sum",
                    count: "vllm:request_queue_time_seconds_count",
                }),
            }),
            EngineKind::Sglang => Some(MetricNames {
                running: "sglang:num_running_reqs",
                waiting: "sglang:num_queue_reqs",
                generation_tokens: Some("sglang:generation_tokens_total"),
                preemptions: None,
                generation_counted_at_end: false,
                live_slots: false,
                // sgl-project/sglang python/sglang/srt/metrics/collector.py at 00ae9c15.
                queue_time: Some(Histogram {
                    sum: "sglang:queue_time_seconds_sum",
                    count: "sglang:queue_time_seconds_count",
                }),
            }),
            EngineKind::Tgi => Some(MetricNames {
                running: "tgi_batch_current_size",
                waiting: "tgi_queue_size",
                generation_tokens: None,
                preemptions: None,
                generation_counted_at_end: false,
                live_slots: false,
                queue_time: None,
            }),
            EngineKind::LlamaCpp => Some(MetricNames {
                running: "llamacpp:requests_processing",
                waiting: "llamacpp:requests_deferred",
                generation_tokens: Some("llamacpp:tokens_predicted_total"),
                preemptions: None,
                generation_counted_at_end: true,
                live_slots: true,
                queue_time: None,
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
            in_flight_tokens: None,
            queue_time: self
                .queue_time
                .and_then(|h| Some((prometheus::sum(&s, h.sum)?, prometheus::sum(&s, h.count)?))),
        })
    }
}

/// What `/slots` shows: each slot's id, whether it is busy and its task, and the tokens the busy
/// slots have generated so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slots {
    /// `(id, is_processing, id_task)` per slot: equal readings mean no request started or
    /// ended in between.
    pub states: Vec<(i64, bool, Option<i64>)>,
    /// Sum of `n_decoded` over the busy slots.
    pub in_flight_tokens: u64,
}

/// Read llama.cpp's `GET /slots` answer: an array of slots, each with `id`, `is_processing`,
/// `id_task` and `n_decoded` under `next_token` (an array of one object in current versions, an
/// object before) or at the top (older versions). `None` for any other shape (pure).
pub fn parse_slots(body: &[u8]) -> Option<Slots> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut out = Slots {
        states: Vec::new(),
        in_flight_tokens: 0,
    };
    for s in v.as_array()? {
        let busy = s.get("is_processing")?.as_bool()?;
        let id = s.get("id")?.as_i64()?;
        out.states
            .push((id, busy, s.get("id_task").and_then(|t| t.as_i64())));
        if busy {
            let next = s.get("next_token");
            let next = next.and_then(|n| n.get(0)).or(next);
            let n = next
                .and_then(|n| n.get("n_decoded"))
                .or_else(|| s.get("n_decoded"))?
                .as_u64()?;
            out.in_flight_tokens += n;
        }
    }
    Some(out)
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
    /// Tokens generated so far by the requests in flight (llama.cpp's `/slots`), read
    /// consistently with `generation_tokens`; `None` where not read.
    pub in_flight_tokens: Option<f64>,
    /// The queue-time histogram's sum (seconds) and count (requests) so far.
    pub queue_time: Option<(f64, f64)>,
}

impl MetricsSample {
    /// The server's count of tokens generated so far, for a difference over a window: the
    /// generation counter, plus the requests in flight where it counts only ended ones. `None`
    /// when the counter does not measure a window.
    pub fn generated(&self, names: &MetricNames) -> Option<f64> {
        let total = self.generation_tokens?;
        if names.generation_counted_at_end {
            Some(total + self.in_flight_tokens?)
        } else {
            Some(total)
        }
    }
}

/// The mean time, in ms, that the requests the server counted between the first and the last
/// of `samples` had waited in its queue; `None` without the histogram or with none counted.
pub fn mean_queue_wait_ms(samples: &[MetricsSample]) -> Option<f64> {
    let (sum0, n0) = samples.iter().find_map(|s| s.queue_time)?;
    let (sum1, n1) = samples.iter().rev().find_map(|s| s.queue_time)?;
    let n = n1 - n0;
    (n > 0.0).then(|| (sum1 - sum0) / n * 1e3)
}

/// The longest one `/metrics` poll may take. The client's own first-byte limit is minutes (for
/// long prefills); a page that takes longer than this is a gap in the samples, not a stall of
/// the cell waiting on it.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetch and read `/metrics` once (with `/slots` around it where the names need them).
pub async fn sample_once(client: &Client, names: &MetricNames) -> Option<MetricsSample> {
    if !names.live_slots {
        return metrics_once(client, names).await;
    }
    // /slots, /metrics, /slots: when no slot changed request in between, the total and the
    // slots' counts describe the same requests. A few tries; then the total alone.
    let mut last = None;
    for _ in 0..SLOTS_TRIES {
        let before = slots_once(client).await;
        let mut m = metrics_once(client, names).await?;
        let after = slots_once(client).await;
        if let (Some(b), Some(a)) = (before, after) {
            if a.states == b.states {
                // The sum describes the moment of the last read: the total did not move since
                // the first (no request ended), the slots' counts are those of the last.
                m.t = client.clock().raw();
                m.in_flight_tokens = Some(a.in_flight_tokens as f64);
                return Some(m);
            }
        }
        last = Some(m);
    }
    last
}

/// Consistent `/slots`–`/metrics` readings tried per sample.
const SLOTS_TRIES: usize = 4;

async fn metrics_once(client: &Client, names: &MetricNames) -> Option<MetricsSample> {
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

async fn slots_once(client: &Client) -> Option<Slots> {
    let r = tokio::time::timeout(POLL_TIMEOUT, client.get("/slots"))
        .await
        .ok()?
        .ok()?;
    if !r.is_success() {
        return None;
    }
    parse_slots(&r.body)
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
    fn the_queue_time_histogram_gives_the_mean_wait_between_two_samples() {
        let n = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        let page = |sum: f64, count: u32| {
            format!(
                "vllm:num_requests_running{{engine=\"0\"}} 4\n\
                 vllm:request_queue_time_seconds_sum{{engine=\"0\"}} {sum}\n\
                 vllm:request_queue_time_seconds_bucket{{engine=\"0\",le=\"+Inf\"}} {count}\n\
                 vllm:request_queue_time_seconds_count{{engine=\"0\"}} {count}\n"
            )
        };
        let a = n.read(1, &page(0.5, 10)).unwrap();
        assert_eq!(a.queue_time, Some((0.5, 10.0)));
        // Between them, 4 requests waited 0.02 s in all: 5 ms each. A sample without the
        // histogram (a page cut short) is skipped, not read as zero.
        let gap = n.read(2, "vllm:num_requests_running 4\n").unwrap();
        let b = n.read(3, &page(0.52, 14)).unwrap();
        let mean = mean_queue_wait_ms(&[a, gap, b]).unwrap();
        assert!((mean - 5.0).abs() < 1e-9, "{mean}");
        // None counted in between, one sample, or no histogram at all: no figure.
        assert_eq!(mean_queue_wait_ms(&[a, a]), None);
        assert_eq!(mean_queue_wait_ms(&[a]), None);
        assert_eq!(mean_queue_wait_ms(&[gap, gap]), None);
    }

    /// llama.cpp's `/slots` (current shape, trimmed): slot 0 busy with 17 tokens so far, slot 1
    /// idle keeping its last request's count, which must not be added.
    #[test]
    fn slots_add_the_busy_slots_tokens_only() {
        let body = br#"[
          {"id":0,"n_ctx":512,"speculative":false,"is_processing":true,"id_task":12,
           "next_token":[{"has_next_token":true,"has_new_line":false,"n_remain":47,"n_decoded":17}]},
          {"id":1,"n_ctx":512,"speculative":false,"is_processing":false,"id_task":9,
           "next_token":[{"has_next_token":false,"has_new_line":false,"n_remain":0,"n_decoded":64}]},
          {"id":2,"n_ctx":512,"speculative":false,"is_processing":false}
        ]"#;
        let s = parse_slots(body).unwrap();
        assert_eq!(s.in_flight_tokens, 17);
        assert_eq!(
            s.states,
            [(0, true, Some(12)), (1, false, Some(9)), (2, false, None)]
        );
        // The older shapes: `next_token` an object, or `n_decoded` at the top.
        let old = br#"[{"id":0,"is_processing":true,"next_token":{"n_decoded":5}},
                      {"id":1,"is_processing":true,"n_decoded":6}]"#;
        assert_eq!(parse_slots(old).unwrap().in_flight_tokens, 11);
        // Anything else is no reading, never a zero.
        for bad in [
            &b"{}"[..],
            b"[{\"id\":0,\"is_processing\":true}]",
            b"[{\"is_processing\":false}]",
            b"not json",
        ] {
            assert_eq!(parse_slots(bad), None);
        }
    }

    #[test]
    fn a_counter_counted_at_request_end_needs_the_requests_in_flight() {
        let n = MetricNames::for_engine(EngineKind::LlamaCpp).unwrap();
        let mut s = n
            .read(
                0,
                "llamacpp:requests_processing 2\nllamacpp:tokens_predicted_total 100\n",
            )
            .unwrap();
        assert_eq!(s.generated(&n), None);
        s.in_flight_tokens = Some(30.0);
        assert_eq!(s.generated(&n), Some(130.0));
        let v = MetricNames::for_engine(EngineKind::Vllm).unwrap();
        let s = v
            .read(
                0,
                "vllm:num_requests_running 1\nvllm:generation_tokens_total 7\n",
            )
            .unwrap();
        assert_eq!(s.generated(&v), Some(7.0));
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
