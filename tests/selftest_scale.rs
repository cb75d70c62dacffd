//! The self-test at many streams (issue 25's 10,000-stream scenario, scaled to what a debug
//! build does in seconds on a 2-core machine) and the descriptor limit that bounds it.
//!
//! What is asserted is the invariant — every stream ends, every token is matched to the trace,
//! the stated bound holds the truth for at least 99% of gaps and for every first token — never
//! a timing. The full-size commands are in docs/selftest.md.

use llmspeed::selftest::{run, Report, Shape};
use std::process::Command;
use std::time::Duration;

/// `llmspeed selftest ARGS` under the shell's `ulimit` settings `limits` (e.g. `-Sn 1024`).
fn selftest_under(limits: &[&str], args: &str) -> std::process::Output {
    let mut script = String::new();
    for l in limits {
        script.push_str(&format!("ulimit {l} || exit 99; "));
    }
    script.push_str(&format!("exec \"$0\" selftest {args}"));
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_llmspeed"))
        .output()
        .expect("sh runs")
}

#[test]
fn more_streams_than_the_hard_descriptor_limit_allows_are_refused_before_the_run() {
    // 200 streams need 2 x 200 + 256 = 656 descriptors; the hard limit is 300.
    let out = selftest_under(
        &["-Sn 300", "-Hn 300"],
        "--streams 200 --gap 5ms --tokens 5",
    );
    assert_ne!(out.status.code(), Some(99), "ulimit refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("200 streams need 656 file descriptors")
            && err.contains("hard limit is 300")
            && err.contains("at most 22 streams"),
        "{err}"
    );
    // Refused before anything ran: no report, no failed streams.
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!err.contains("streams failed"), "{err}");
}

#[test]
fn a_run_past_the_soft_descriptor_limit_raises_it_and_loses_nothing() {
    // 300 streams hold 600 descriptors: over a soft limit of 256, under the hard one.
    let out = selftest_under(
        &["-Sn 256", "-Hn 2048"],
        "--streams 300 --gap 100ms --tokens 3 --first-token 100ms --json",
    );
    assert_ne!(out.status.code(), Some(99), "ulimit refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(r["failed_streams"], 0, "{r}");
    assert_eq!(r["tokens_matched"], 900, "{r}");
}

/// The invariants of a run at scale: nothing lost, everything matched, the bounds held.
fn check_scale(r: &Report, streams: usize, tokens: u32) {
    eprintln!(
        "{streams} streams: {:.1} s, true gap error p99 {:.1} us, bound p50/p99 {:?}/{:?} us, coverage {:?}% (first tokens {:?}%, misses {:?} us), merged {:?}%, verdict {:?} {:?}, truth {:?} {:?}, peak RSS {:.0} MB",
        r.wall_s,
        r.gap_error_us_p99,
        r.gap_bound_us_p50,
        r.gap_bound_us_p99,
        r.gap_bound_coverage_percent,
        r.ttft_bound_coverage_percent,
        r.ttft_bound_misses_us,
        r.gaps_merged_percent,
        r.client_bound,
        r.client_bound_reasons,
        r.client_limited_in_truth,
        r.client_limited_in_truth_reasons,
        r.peak_rss_mb
    );
    assert_eq!(r.failed_streams, 0, "{:?} {:?}", r.errors, r.first_error);
    let all = streams as u64 * u64::from(tokens);
    assert_eq!(r.tokens, all, "every token received");
    assert_eq!(r.trace_records, all, "every token traced");
    assert_eq!(r.tokens_matched, all, "every token matched");
    assert_eq!(r.requests_itl_mismatch, 0);
    if !cfg!(target_os = "linux") {
        return; // no kernel stamps, no bound stated
    }
    let cover = r.gap_bound_coverage_percent.expect("gaps were bounded");
    assert!(cover >= 99.0, "the bound held for {cover}% of gaps: {r:?}");
    // First tokens to the same share as gaps (the criterion). 1 first token in 2,000
    // fell outside now and then beside a busy machine (2026-12-03 and -04). Found on
    // 2026-12-05 with `ttft_bound_misses_us`: stamped 20.2 µs before the server began its
    // write, the client's thread descheduled between its TSC and realtime readings (179 in
    // 20 million such pairs split by over 20 µs under a CI run). Since `stamp::clock_pair`
    // reads the pair again when split, 80 runs of these two tests beside a CI run: first
    // tokens 100% and gaps 100% in all 80, against 3 runs with a first token outside (each
    // stamped before the write began: 0.2, 0.9, 156 µs past the bound) and 12 with gaps under
    // 100% in 80 before. Kept at 99%: a VM can still deschedule the client three times running.
    let first = r
        .ttft_bound_coverage_percent
        .expect("first tokens were bounded");
    assert!(
        first >= 99.0,
        "the bound held for {first}% of first tokens: {r:?}"
    );
    // Each first token outside is listed with a side (up to 16), and only those.
    let misses = &r.ttft_bound_misses_us;
    assert_eq!(misses.is_empty(), first == 100.0, "{first}% vs {misses:?}");
    assert!(
        misses.len() <= 16 && misses.iter().all(|&m| m != 0.0),
        "{misses:?}"
    );
}

#[test]
fn two_thousand_streams_match_every_token_and_the_bounds_hold() {
    // 4,000 descriptors (past a common soft limit of 1024) and 2,000 connects at once (past
    // the default SYN backlog on some systems). 200 ms gaps x 8 tokens: 10,000 tokens a
    // second, which a debug client keeps up with on a shared core, in a few seconds.
    let shape = two_thousand(false);
    check_scale(
        &run(&shape).expect("selftest runs"),
        shape.streams,
        shape.tokens,
    );
}

/// 2,000 streams of 8 tokens 200 ms apart, all at once, with or without packet stamps.
fn two_thousand(packet_stamps: bool) -> Shape {
    Shape {
        streams: 2_000,
        gap: Duration::from_millis(200),
        tokens: 8,
        first_token: Duration::from_millis(200),
        client_threads: 1,
        kernel_stamps: true,
        packet_stamps,
        preconnect: false,
        send_stamps: false,
    }
}

/// Packet stamps at thousands of connections: one ring for the client, each connection's
/// segments routed to it by port (`net::packet::hub`). Before, every connection had its own
/// packet socket and filter, the kernel ran all 2,000 filters on every packet, and this run
/// took over a minute in a release build; and some reads' bytes were missing from their
/// rings, unexplained. Here every read must find its segments (`packet`, not `mixed`) and
/// nothing may be lost.
#[test]
fn two_thousand_packet_stamped_streams_keep_every_segment() {
    let shape = two_thousand(true);
    let r = run(&shape).expect("selftest runs");
    if !cfg!(target_os = "linux") {
        return;
    }
    if r.packet_segments_lost.is_none() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true: packet stamps must work here (CI runs as root)"
        );
        eprintln!("skipped: no packet socket here (CAP_NET_RAW)");
        return;
    }
    check_scale(&r, shape.streams, shape.tokens);
    assert_eq!(r.packet_segments_lost, Some(0), "{r:?}");
    assert_eq!(
        (r.stamp_source, r.stamp_fallback),
        (Some("packet"), None),
        "every read found its segments: {r:?}"
    );
}
