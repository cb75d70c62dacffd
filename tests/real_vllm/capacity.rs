//! `llmspeed capacity` against real vLLM (the CPU build and tiny model of
//! `scripts/vllm-server.sh`, the suite's shared server with `--max-num-seqs 4`): under a TTFT
//! objective set between its unqueued and its queued TTFT, the search finds N = 4. The method
//! is `capacity_real_llama.rs`'s, with vLLM's running batch cap in place of llama.cpp's slots.
//!
//! **How the objective is chosen.** The truth is `--max-num-seqs`: with at most N streams every
//! request is admitted at the next engine step, so its TTFT is its wait for that step plus its
//! prefill (on the CPU build a step is long: the unqueued TTFT p90 at 4 was 226 ms); with
//! N + 1 closed-loop streams one request always waits for a running one to end, a fraction of
//! a whole 64-token request (queued p90 766 ms). The test first measures both — the TTFT p90 of
//! one closed-loop round at N and at N + 1, from the requests inside each round's steady
//! window, as a probe takes them — checks that they are well apart (queued at least 2.5 x
//! unqueued: vLLM's unqueued TTFT is a good part of a step, so the gap is narrower than
//! llama.cpp's), and sets `ttft_p90` at their midpoint: here the client's 10% share of it
//! (some 50 ms) is far above a busy client's lag, so the threshold can sit where it leaves the
//! most room on both sides. Then the search, from 1 stream, must answer N with N + 1 failing.
//!
//! Part of `tests/real_vllm.rs`'s binary, on its one server (a binary of its own started a
//! second vLLM: 30-50 s on idle cores, 150 s seen on busy ones). Cost: two measuring rounds
//! and the probes 1, 2, 4, 8, 6, 5, about 60-120 s, holding the server's turn.

use super::{real, server};
use llmspeed::capacity::plan::Workload;

const SLOTS: u64 = server::MAX_NUM_SEQS;
const OUTPUT: u32 = 64;

fn workload(url: &str) -> Workload {
    Workload::random(url, Some(server::MODEL.into()), 32, OUTPUT, 11)
}

#[test]
fn a_ttft_objective_between_unqueued_and_queued_finds_max_num_seqs() {
    let Some(s) = server::shared() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (unqueued, queued) = rt.block_on(async {
        (
            real::ttft_p90(&workload(&s.url), SLOTS).await,
            real::ttft_p90(&workload(&s.url), SLOTS + 1).await,
        )
    });
    eprintln!(
        "TTFT p90: {unqueued:.1} ms at {SLOTS} streams, {queued:.1} ms at {}",
        SLOTS + 1
    );
    assert!(
        queued >= 2.5 * unqueued,
        "queued {queued:.1} ms is not well above unqueued {unqueued:.1} ms:\n{}",
        s.log_tail()
    );
    let threshold = ((unqueued + queued) / 2.0).round().max(1.0);
    let spec = format!("ttft_p90={threshold}ms");
    real::finds_slots(&rt, workload(&s.url), &spec, 32, SLOTS, "vllm");
}
