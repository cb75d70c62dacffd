//! Scoring a client's per-request timings against the fixed-gap server's ground truth, for a
//! client that reports only what vLLM's `--save-detailed` result holds: per request a TTFT and
//! the list of inter-token latencies (ITLs), in seconds, on the client's own clock.
//!
//! Owns: the trace indexed by request id (for the in-process run too), the trace re-keyed by
//! arrival order for a client that sends no request ids ([`key_by_arrival`]), and every figure
//! an external client can be scored on — gap error, coalesced gaps, requests whose ITL count
//! differs from the trace, TTFT, TPOT and E2EL error against the request's arrival at the
//! server ([`Spans`]), tokens matched. The coalesced-gap rule and the per-request spans are
//! also used for llmspeed's own in-process run, so both print the same columns.
//!
//! Pure: no clock, no files. The client's clock and the server's are never compared directly
//! (an external process has its own): only durations are, each measured within one side.

use crate::mock::trace::TraceRec;
use std::collections::HashMap;

/// A client gap under this fraction of the server's gap was read together with the previous
/// token although the server wrote them apart (one read, or one wake-up, for both).
pub const COALESCED_FRACTION: f64 = 0.1;

/// Whether a gap the client measured (`measured_ns`) hides a gap the server really left
/// (`true_ns`): the client saw almost nothing (< 10% of the server's gap) where the server
/// waited at least half the nominal gap. Server gaps shorter than that (the server itself
/// wrote two tokens back to back, e.g. catching up after a stall) are the trace's own
/// coalescing and are not charged to the client.
pub fn is_coalesced(measured_ns: i64, true_ns: i64, nominal_ns: u64) -> bool {
    true_ns.saturating_mul(2) >= nominal_ns as i64
        && (measured_ns as f64) < COALESCED_FRACTION * true_ns as f64
}

/// A client-side time in seconds, as result JSON holds it, to whole nanoseconds: the finest
/// any client reports, and integers keep the differences exact.
pub fn secs_to_ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

/// What the server knows about one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerRequest {
    /// When the read that completed the request returned (ns since the server started).
    pub arrival_ns: u64,
    /// `arrival_ns` as a raw [`crate::clock::Clock`] stamp: an in-process client shares the
    /// server's clock and compares its own stamps with it directly.
    pub arrival_raw: u64,
    /// Write time of each token, by index (ns since the server started); `None` where the
    /// trace has no record for that index.
    pub writes_ns: Vec<Option<u64>>,
    /// The same writes as raw clock stamps, index for index (holes included).
    pub writes_raw: Vec<Option<u64>>,
    /// When each of those writes began, raw: the kernel took the bytes between it and the
    /// write's return.
    pub writes_before_raw: Vec<Option<u64>>,
    /// The kernel's send stamp of each of those writes, raw (`selftest --send-stamps`); `None`
    /// where it gave none.
    pub writes_sent_raw: Vec<Option<u64>>,
}

impl ServerRequest {
    /// The write times when every index from 0 is present.
    fn complete_writes(&self) -> Option<Vec<u64>> {
        self.writes_ns.iter().copied().collect()
    }
}

/// The trace by request id (choice 0 only: the self-test asks for one choice).
pub fn index_trace(trace: &[TraceRec]) -> HashMap<String, ServerRequest> {
    let mut by_id: HashMap<String, ServerRequest> = HashMap::new();
    for r in trace.iter().filter(|r| r.choice == 0) {
        let id = id_of(r);
        let s = by_id.entry(id).or_default();
        let i = r.index as usize;
        if s.writes_ns.len() <= i {
            s.writes_ns.resize(i + 1, None);
            s.writes_raw.resize(i + 1, None);
            s.writes_before_raw.resize(i + 1, None);
            s.writes_sent_raw.resize(i + 1, None);
        }
        s.writes_ns[i] = Some(r.t_ns);
        s.writes_raw[i] = Some(r.t_raw);
        s.writes_before_raw[i] = Some(r.t_before_raw);
        s.writes_sent_raw[i] = (r.t_sent_raw != 0).then_some(r.t_sent_raw);
        s.arrival_ns = r.arrival_ns;
        s.arrival_raw = r.arrival_raw;
    }
    by_id
}

/// A traced request's id as text (the trace holds it JSON-encoded).
fn id_of(r: &TraceRec) -> String {
    serde_json::from_str::<String>(&r.request_id_json)
        .unwrap_or_else(|_| r.request_id_json.trim_matches('"').to_string())
}

/// How a client's requests were matched to the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matching {
    /// Request `i` carried `x-request-id: {prefix}{i}`.
    RequestId,
    /// The client sent no such ids (SGLang's `bench_serving`): request `i` of its result is
    /// the `i`-th to arrive at the server, which holds when it sent one request at a time.
    ArrivalOrder,
}

impl Matching {
    pub fn as_str(self) -> &'static str {
        match self {
            Matching::RequestId => "request_id",
            Matching::ArrivalOrder => "arrival_order",
        }
    }
}

/// The trace as the scoring reads it. When some request carries an id `{prefix}N` the trace
/// is used as it is ([`Matching::RequestId`]). When none does, the client sent no ids: the
/// `k`-th request to arrive is renamed `{prefix}k` ([`Matching::ArrivalOrder`]), which is
/// request `k` of the client's result only if the client sent them one at a time. That is
/// checked, not assumed: each request must arrive after the previous one's last token was
/// written (a client with two requests in flight overlaps them on the server, and then which
/// result entry is which request is a guess: an error). The server must also have seen
/// exactly `expected` requests (a warm-up request would shift every index: an error).
pub fn key_by_arrival(
    trace: &[TraceRec],
    prefix: &str,
    expected: usize,
) -> Result<(Matching, Option<Vec<TraceRec>>), String> {
    let mut spans: HashMap<String, (u64, u64)> = HashMap::new();
    for r in trace {
        let id = id_of(r);
        if id.starts_with(prefix) {
            return Ok((Matching::RequestId, None));
        }
        let e = spans.entry(id).or_insert((r.arrival_ns, r.t_ns));
        e.1 = e.1.max(r.t_ns);
    }
    let mut order: Vec<(String, (u64, u64))> = spans.into_iter().collect();
    order.sort_by_key(|(_, (arrival, _))| *arrival);
    if order.len() != expected {
        return Err(format!(
            "the client sent no x-request-id {prefix}N, so its requests are matched by arrival \
             order, but the server saw {} requests and the self-test expects {expected} (a \
             warm-up request? SGLang: --warmup-requests 0)",
            order.len()
        ));
    }
    for pair in order.windows(2) {
        let ((prev, (_, prev_last)), (next, (arrival, _))) = (&pair[0], &pair[1]);
        if arrival <= prev_last {
            return Err(format!(
                "the client sent no x-request-id {prefix}N, so its requests are matched by \
                 arrival order, which needs one request at a time (SGLang: --max-concurrency \
                 1): request {next} arrived while {prev} was streaming"
            ));
        }
    }
    let rank: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(k, (id, _))| (id.as_str(), k))
        .collect();
    let keyed = trace
        .iter()
        .map(|r| {
            let k = rank[id_of(r).as_str()];
            let id = serde_json::to_string(&format!("{prefix}{k}")).unwrap_or_default();
            TraceRec {
                request_id_json: id.into(),
                ..r.clone()
            }
        })
        .collect();
    Ok((Matching::ArrivalOrder, Some(keyed)))
}

/// One request as the client reported it: entry `i` of its result's arrays is request
/// `{prefix}{i}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientRecord {
    /// Seconds from the client's send to its first token.
    pub ttft_s: f64,
    /// Seconds between consecutive chunks, as vLLM's `itls` (one entry per chunk after the
    /// first).
    pub itls_s: Vec<f64>,
    /// Output tokens the client counted.
    pub output_len: u64,
    /// Empty when the request succeeded (vLLM's `errors` entry).
    pub error: String,
    /// Seconds from the send to the last token as the client reported it (vLLM's `latencies`
    /// entry); `None` when the result holds none (SGLang's details): then TTFT + the ITLs.
    pub latency_s: Option<f64>,
}

impl ClientRecord {
    /// The client's E2EL: its own latency, else TTFT plus every ITL (its last token's time).
    pub fn e2el_s(&self) -> f64 {
        self.latency_s
            .unwrap_or_else(|| self.ttft_s + self.itls_s.iter().sum::<f64>())
    }
}

/// The figures; samples are unsorted (the caller takes percentiles).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scores {
    /// Tokens of requests scored token by token (their every trace token has a client time).
    pub tokens_matched: u64,
    /// Succeeded requests with no trace record under their id.
    pub requests_untraced: usize,
    /// Succeeded requests whose ITL count is not the trace's tokens − 1 (or whose trace has a
    /// hole): counted, not scored token by token.
    pub requests_itl_mismatch: usize,
    pub coalesced_gaps: u64,
    /// |client ITL − server gap| per consecutive token pair, µs.
    pub gap_error_us: Vec<f64>,
    /// Client TTFT − server TTFT (first write − arrival) per request, ms.
    pub ttft_arrival_error_ms: Vec<f64>,
    /// Server TTFT (first write − arrival) per request, ms.
    pub server_ttft_ms: Vec<f64>,
    /// Per-request TPOT and E2EL against the trace (requests scored token by token).
    pub spans: Spans,
}

/// Per request, the client's TPOT and E2EL against the server's: E2EL from the request's
/// arrival to the last token's write, TPOT (E2EL − TTFT) / (n − 1) as vLLM and SGLang compute
/// it, i.e. (last write − first write) / (n − 1) on the server's side. Signed, client minus
/// server, like the TTFT error against arrival.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spans {
    /// Client TPOT − server TPOT per request with two or more tokens, µs.
    pub tpot_error_us: Vec<f64>,
    /// Client E2EL − server E2EL per request, ms.
    pub e2el_error_ms: Vec<f64>,
    /// Server TPOT per request with two or more tokens, ms.
    pub server_tpot_ms: Vec<f64>,
    /// Server E2EL (last write − arrival) per request, ms.
    pub server_e2el_ms: Vec<f64>,
}

/// One request as the client measured it, durations in ns on the client's own clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientSpan {
    pub ttft_ns: i64,
    pub e2el_ns: i64,
    /// Output tokens the client counted (the `n` of its TPOT).
    pub tokens: u64,
}

/// The same request as the server saw it, ns on the server's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerSpan {
    /// First write − arrival.
    pub ttft_ns: i64,
    /// Last write − arrival.
    pub e2el_ns: i64,
    /// Tokens written.
    pub tokens: u64,
}

impl ServerSpan {
    /// A request whose every token the trace holds, from its arrival.
    pub fn of(writes_ns: &[u64], arrival_ns: u64) -> Option<ServerSpan> {
        let (first, last) = (*writes_ns.first()?, *writes_ns.last()?);
        Some(ServerSpan {
            ttft_ns: first as i64 - arrival_ns as i64,
            e2el_ns: last as i64 - arrival_ns as i64,
            tokens: writes_ns.len() as u64,
        })
    }
}

/// TPOT as both references compute it: (E2EL − TTFT) / (n − 1), ns; `None` under two tokens.
pub fn tpot_ns(ttft_ns: i64, e2el_ns: i64, tokens: u64) -> Option<f64> {
    (tokens >= 2).then(|| e2el_ns.saturating_sub(ttft_ns) as f64 / (tokens - 1) as f64)
}

impl Spans {
    /// Score one request matched token by token.
    pub fn add(&mut self, client: ClientSpan, server: ServerSpan) {
        self.server_e2el_ms.push(server.e2el_ns as f64 / 1e6);
        self.e2el_error_ms
            .push(client.e2el_ns.saturating_sub(server.e2el_ns) as f64 / 1e6);
        let c = tpot_ns(client.ttft_ns, client.e2el_ns, client.tokens);
        let s = tpot_ns(server.ttft_ns, server.e2el_ns, server.tokens);
        if let (Some(c), Some(s)) = (c, s) {
            self.server_tpot_ms.push(s / 1e6);
            self.tpot_error_us.push((c - s) / 1e3);
        }
    }
}

/// Score every succeeded request that the trace knows. A request's TTFT is scored whenever the
/// trace has its first token; its gaps only when its ITL count matches the trace exactly, since
/// otherwise which ITL belongs to which server gap is a guess.
pub fn score(
    server: &HashMap<String, ServerRequest>,
    prefix: &str,
    clients: &[ClientRecord],
    nominal_gap_ns: u64,
) -> Scores {
    let mut s = Scores::default();
    for (i, c) in clients.iter().enumerate() {
        if !c.error.is_empty() {
            continue;
        }
        let Some(truth) = server.get(&format!("{prefix}{i}")) else {
            s.requests_untraced += 1;
            continue;
        };
        if let Some(Some(first)) = truth.writes_ns.first() {
            let server_ttft = *first as i64 - truth.arrival_ns as i64;
            s.server_ttft_ms.push(server_ttft as f64 / 1e6);
            s.ttft_arrival_error_ms
                .push(secs_to_ns(c.ttft_s).saturating_sub(server_ttft) as f64 / 1e6);
        }
        let writes = match truth.complete_writes() {
            Some(w) if w.len() == c.itls_s.len() + 1 => w,
            _ => {
                s.requests_itl_mismatch += 1;
                continue;
            }
        };
        s.tokens_matched += writes.len() as u64;
        if let Some(server_span) = ServerSpan::of(&writes, truth.arrival_ns) {
            let client_span = ClientSpan {
                ttft_ns: secs_to_ns(c.ttft_s),
                e2el_ns: secs_to_ns(c.e2el_s()),
                tokens: c.output_len,
            };
            s.spans.add(client_span, server_span);
        }
        for (itl, pair) in c.itls_s.iter().zip(writes.windows(2)) {
            let measured = secs_to_ns(*itl);
            let truth = pair[1] as i64 - pair[0] as i64;
            s.gap_error_us
                .push(measured.saturating_sub(truth).unsigned_abs() as f64 / 1e3);
            if is_coalesced(measured, truth, nominal_gap_ns) {
                s.coalesced_gaps += 1;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rec(id: &str, index: u32, t_ns: u64, arrival_ns: u64) -> TraceRec {
        TraceRec {
            request_id_json: Arc::from(format!("\"{id}\"")),
            choice: 0,
            index,
            t_ns,
            due_ns: t_ns,
            arrival_ns,
            ..TraceRec::default()
        }
    }

    #[test]
    fn coalescing_rule() {
        // Nominal 1 ms: a 1 ms server gap seen as 99 us is coalesced, as 100 us is not.
        assert!(is_coalesced(99_999, 1_000_000, 1_000_000));
        assert!(!is_coalesced(100_000, 1_000_000, 1_000_000));
        // The server itself wrote the two tokens 0.4 ms apart (< half the nominal gap): the
        // client reading them together is not its fault.
        assert!(!is_coalesced(0, 400_000, 1_000_000));
        assert!(is_coalesced(0, 500_000, 1_000_000));
    }

    #[test]
    fn secs_round_to_whole_ns() {
        assert_eq!(secs_to_ns(0.0052), 5_200_000);
        assert_eq!(secs_to_ns(1e-9), 1);
        assert_eq!(secs_to_ns(0.0), 0);
    }

    #[test]
    fn trace_index_keeps_holes_and_arrival() {
        let t = [
            rec("a0", 1, 20, 5),
            rec("a0", 0, 10, 5),
            rec("a1", 2, 30, 7),
        ];
        let ix = index_trace(&t);
        assert_eq!(ix["a0"].writes_ns, [Some(10), Some(20)]);
        assert_eq!(ix["a0"].arrival_ns, 5);
        assert_eq!(ix["a1"].writes_ns, [None, None, Some(30)]);
        assert_eq!(ix["a1"].complete_writes(), None);
    }

    /// Worked by hand. Nominal gap 1 ms. Request p0 arrives at 0.5 ms, server writes at 2, 3,
    /// 4.2 ms (server TTFT 1.5 ms, gaps 1 ms and 1.2 ms); the client reports TTFT 1.7 ms and
    /// ITLs 1.1 ms and 0.05 ms:
    /// - TTFT error against arrival: 1.7 − 1.5 = 0.2 ms;
    /// - gap errors: |1.1 − 1.0| = 100 us, |0.05 − 1.2| = 1150 us;
    /// - 0.05 ms < 10% of 1.2 ms and 1.2 ≥ 0.5: one coalesced gap.
    ///
    /// p1 has 3 trace tokens and 1 ITL (mismatch: TTFT scored, gaps not); p2 failed; p3 has no
    /// trace.
    #[test]
    fn scores_match_hand_worked_values() {
        let ms = 1_000_000u64;
        let trace = [
            rec("p0", 0, 2 * ms, ms / 2),
            rec("p0", 1, 3 * ms, ms / 2),
            rec("p0", 2, 4 * ms + ms / 5, ms / 2),
            rec("p1", 0, 3 * ms, ms),
            rec("p1", 1, 4 * ms, ms),
            rec("p1", 2, 5 * ms, ms),
            rec("p2", 0, 3 * ms, ms),
        ];
        let clients = [
            ClientRecord {
                ttft_s: 0.0017,
                itls_s: vec![0.0011, 0.00005],
                output_len: 3,
                error: String::new(),
                latency_s: None,
            },
            ClientRecord {
                ttft_s: 0.0025,
                itls_s: vec![0.002],
                output_len: 3,
                error: String::new(),
                latency_s: None,
            },
            ClientRecord {
                error: "boom".into(),
                ..ClientRecord::default()
            },
            ClientRecord {
                ttft_s: 0.001,
                itls_s: vec![0.001],
                output_len: 2,
                error: String::new(),
                latency_s: None,
            },
        ];
        let s = score(&index_trace(&trace), "p", &clients, ms);
        assert_eq!(s.tokens_matched, 3);
        assert_eq!(s.requests_itl_mismatch, 1);
        assert_eq!(s.requests_untraced, 1);
        assert_eq!(s.coalesced_gaps, 1);
        assert_eq!(s.gap_error_us, [100.0, 1150.0]);
        // p0: 1.7 − 1.5; p1: 2.5 − 2.0.
        assert_eq!(s.ttft_arrival_error_ms, [0.2, 0.5]);
        assert_eq!(s.server_ttft_ms, [1.5, 2.0]);
        // Spans, p0 only (p1's gaps are not matched): the server's E2EL 4.2 − 0.5 = 3.7 ms,
        // TPOT (3.7 − 1.5) / 2 = 1.1 ms; the client's E2EL 1.7 + 1.1 + 0.05 = 2.85 ms (no
        // latency of its own), TPOT (2.85 − 1.7) / 2 = 0.575 ms.
        assert_eq!(
            s.spans,
            Spans {
                tpot_error_us: vec![-525.0],
                e2el_error_ms: vec![-0.85],
                server_tpot_ms: vec![1.1],
                server_e2el_ms: vec![3.7],
            }
        );
    }

    /// A client that reports its own latency is scored on it: p0 of the test above with a
    /// latency of 3 ms (its last chunk, say, came later than its last ITL says): E2EL error
    /// 3.0 − 3.7 = −0.7 ms, TPOT (3.0 − 1.7) / 2 = 0.65 ms against 1.1 ms: −450 µs. A single
    /// token has an E2EL and no TPOT.
    #[test]
    fn a_reported_latency_is_the_e2el() {
        let ms = 1_000_000u64;
        let trace = [
            rec("p0", 0, 2 * ms, ms / 2),
            rec("p0", 1, 3 * ms, ms / 2),
            rec("p0", 2, 4 * ms + ms / 5, ms / 2),
            rec("p1", 0, 3 * ms, ms),
        ];
        let clients = [
            ClientRecord {
                ttft_s: 0.0017,
                itls_s: vec![0.0011, 0.00005],
                output_len: 3,
                error: String::new(),
                latency_s: Some(0.003),
            },
            ClientRecord {
                ttft_s: 0.0025,
                itls_s: vec![],
                output_len: 1,
                error: String::new(),
                latency_s: None,
            },
        ];
        let s = score(&index_trace(&trace), "p", &clients, ms);
        assert_eq!(s.spans.tpot_error_us, [-450.0]);
        assert_eq!(s.spans.server_tpot_ms, [1.1]);
        // p1: E2EL 2.5 ms (its TTFT) against 3 − 1 = 2 ms.
        assert_eq!(s.spans.e2el_error_ms, [-0.7, 0.5]);
        assert_eq!(s.spans.server_e2el_ms, [3.7, 2.0]);
        assert_eq!(tpot_ns(0, 10, 1), None);
        assert_eq!(tpot_ns(2, 10, 5), Some(2.0));
    }

    /// Times no real client reports (a hand-edited or corrupt result) saturate: a score, never
    /// an overflow.
    #[test]
    fn absurd_client_times_saturate() {
        let trace = [rec("p0", 0, 10, 5), rec("p0", 1, 20, 5)];
        let clients = [ClientRecord {
            ttft_s: -1e300,
            itls_s: vec![1e300],
            output_len: 2,
            error: String::new(),
            latency_s: Some(1e300),
        }];
        let s = score(&index_trace(&trace), "p", &clients, 10);
        assert_eq!(s.tokens_matched, 2);
        assert_eq!(s.ttft_arrival_error_ms, [i64::MIN as f64 / 1e6]);
        assert_eq!(s.spans.e2el_error_ms, [(i64::MAX - 15) as f64 / 1e6]);
        assert_eq!(s.spans.tpot_error_us.len(), 1);
    }

    fn id_rec(id: &str, index: u32, t_ns: u64, arrival_ns: u64) -> TraceRec {
        rec(id, index, t_ns, arrival_ns)
    }

    /// Ids the server made up (no x-request-id): the first to arrive becomes p0. cmpl-9
    /// arrives at 0 and ends at 2; cmpl-3 arrives at 3 and ends at 5.
    #[test]
    fn requests_without_ids_are_keyed_by_arrival() {
        let trace = [
            id_rec("cmpl-3", 0, 4, 3),
            id_rec("cmpl-9", 0, 1, 0),
            id_rec("cmpl-3", 1, 5, 3),
            id_rec("cmpl-9", 1, 2, 0),
        ];
        let (m, keyed) = key_by_arrival(&trace, "p", 2).unwrap();
        assert_eq!(m, Matching::ArrivalOrder);
        let ix = index_trace(&keyed.unwrap());
        assert_eq!(ix["p0"].writes_ns, [Some(1), Some(2)]);
        assert_eq!(ix["p1"].writes_ns, [Some(4), Some(5)]);
        assert_eq!(ix["p1"].arrival_ns, 3);
        // Ids with the prefix: used as they are.
        let (m, keyed) = key_by_arrival(&[id_rec("p7", 0, 1, 0)], "p", 5).unwrap();
        assert_eq!((m, keyed.is_none()), (Matching::RequestId, true));
        // One request too many (a warm-up), or one arriving while another streams: errors.
        let e = key_by_arrival(&trace, "p", 3).unwrap_err();
        assert!(
            e.contains("saw 2 requests") && e.contains("expects 3"),
            "{e}"
        );
        let overlap = [
            id_rec("a", 0, 1, 0),
            id_rec("a", 1, 3, 0),
            id_rec("b", 0, 4, 3),
        ];
        let e = key_by_arrival(&overlap, "p", 2).unwrap_err();
        assert!(e.contains("request b arrived while a was streaming"), "{e}");
        assert!(e.contains("--max-concurrency 1"), "{e}");
    }
}
