//! Scoring a client's per-request timings against the fixed-gap server's ground truth, for a
//! client that reports only what vLLM's `--save-detailed` result holds: per request a TTFT and
//! the list of inter-token latencies (ITLs), in seconds, on the client's own clock.
//!
//! Owns: the trace indexed by request id (for the in-process run too), and every figure an external client can be scored
//! on — gap error, coalesced gaps, requests whose ITL count differs from the trace, TTFT error
//! against the request's arrival at the server, tokens matched. The coalesced-gap rule is also
//! used for llmspeed's own in-process run, so both print the same columns.
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
        let id = serde_json::from_str::<String>(&r.request_id_json)
            .unwrap_or_else(|_| r.request_id_json.trim_matches('"').to_string());
        let s = by_id.entry(id).or_default();
        let i = r.index as usize;
        if s.writes_ns.len() <= i {
            s.writes_ns.resize(i + 1, None);
            s.writes_raw.resize(i + 1, None);
            s.writes_before_raw.resize(i + 1, None);
        }
        s.writes_ns[i] = Some(r.t_ns);
        s.writes_raw[i] = Some(r.t_raw);
        s.writes_before_raw[i] = Some(r.t_before_raw);
        s.arrival_ns = r.arrival_ns;
        s.arrival_raw = r.arrival_raw;
    }
    by_id
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
                .push((secs_to_ns(c.ttft_s) - server_ttft) as f64 / 1e6);
        }
        let writes = match truth.complete_writes() {
            Some(w) if w.len() == c.itls_s.len() + 1 => w,
            _ => {
                s.requests_itl_mismatch += 1;
                continue;
            }
        };
        s.tokens_matched += writes.len() as u64;
        for (itl, pair) in c.itls_s.iter().zip(writes.windows(2)) {
            let measured = secs_to_ns(*itl);
            let truth = pair[1] as i64 - pair[0] as i64;
            s.gap_error_us
                .push((measured - truth).unsigned_abs() as f64 / 1e3);
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
            arrival_raw: 0,
            queued_ns: 0,
            scheduled_ns: 0,
            t_raw: 0,
            t_before_raw: 0,
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
            },
            ClientRecord {
                ttft_s: 0.0025,
                itls_s: vec![0.002],
                output_len: 3,
                error: String::new(),
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
    }
}
