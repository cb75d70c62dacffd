//! The self-test's TTFT against the request's arrival at the server (the trace's
//! `arrival_ns`): the server's own TTFT contains the server-side hold, and the client's error against
//! arrival adds the request's trip to the server to its error against first write.

use llmspeed::selftest::{run, write_table, Shape};
use std::time::Duration;

#[test]
fn ttft_against_arrival_is_reported_and_consistent() {
    let shape = Shape {
        streams: 4,
        gap: Duration::from_millis(2),
        tokens: 20,
        // Held between arrival and the engine: part of the server's own TTFT.
        first_token: Duration::from_millis(20),
        client_threads: 1,
        kernel_stamps: true,
        packet_stamps: false,
        send_stamps: false,
        preconnect: false,
    };
    let r = run(&shape).expect("selftest runs");
    assert_eq!(r.failed_streams, 0, "{:?}", r.first_error);
    assert_eq!(r.trace_records, 4 * 20);
    assert_eq!(r.tokens_matched, 4 * 20);
    // Arrival is stamped before the 20 ms hold, and the first token needs one more 2 ms step.
    assert!(r.server_ttft_ms_mean >= 22.0, "{r:?}");
    // The request reached the server after the client sent it, so the server saw less TTFT
    // than the client's send stamp implies, and the error against arrival is the error against
    // first write plus that trip.
    assert!(
        r.server_ttft_ms_mean <= r.true_ttft_ms_mean.unwrap(),
        "{r:?}"
    );
    assert!(
        r.ttft_arrival_error_ms_mean >= r.ttft_error_ms_mean.unwrap(),
        "{r:?}"
    );
    assert!(r.ttft_arrival_error_ms_p50 <= r.ttft_arrival_error_ms_max);
    let json = serde_json::to_value(&r).unwrap();
    for k in [
        "server_ttft_ms_mean",
        "ttft_arrival_error_ms_mean",
        "ttft_arrival_error_ms_p50",
        "ttft_arrival_error_ms_p99",
        "ttft_arrival_error_ms_max",
    ] {
        assert!(json[k].as_f64().is_some(), "missing {k} in {json}");
    }
    let mut table = Vec::new();
    write_table(&mut table, &r).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(table.contains("vs arrival ms"), "{table}");
}
