//! `llmspeed capacity` against a real llama.cpp `llama-server` with N = 2 slots (`-np 2`, one
//! thread, the tiny model of `scripts/llama-server.sh`): under a TTFT objective set between its
//! unqueued and its queued TTFT, the search finds N.
//!
//! **How the objective is chosen.** The truth is the server's slot count: with at most N
//! requests there is a free slot for each, and a request's first token comes after its own
//! prefill and one decode step (a few ms here); with N + 1 closed-loop streams one request always
//! waits for a slot, a fraction of a whole request (512 tokens, some 0.2-0.5 s here).
//! The test first measures both — the TTFT p90 of one closed-loop round at N (unqueued) and at
//! N + 1 (queued), from the requests inside each round's steady window, as a probe takes them —
//! checks that they are well apart (queued at least 4 x unqueued), and sets `ttft_p90` a third
//! of the way from unqueued to queued. Not the geometric mean: 10% of the threshold is the share
//! of it the client's own lag may take before a probe is Client-bound, and it must stay well
//! above what a busy 2-core machine's client lag reaches (16 ms seen). Not the midpoint: the
//! queued p90 of one round varies with how the streams' phases fall (357 to 714 ms in five
//! runs), and a probe at N + 1 must still lie wholly above the threshold. Then the search, from
//! 1 stream, must answer N with N + 1 failing on `ttft_p90`.
//!
//! Cost: 30-60 s on 2 busy cores (two measuring rounds, then the probes 1, 2, 4, 3).

#[path = "capacity/real.rs"]
mod real;
#[path = "support/real_server.rs"]
mod real_server;
#[path = "real_llama/server.rs"]
mod server;

use llmspeed::capacity::plan::Workload;
use server::LlamaServer;

const SLOTS: u64 = 2;
const OUTPUT: u32 = 512;

fn workload(url: &str) -> Workload {
    Workload::random(url, Some("tiny".into()), 32, OUTPUT, 11)
}

#[test]
fn a_ttft_objective_between_unqueued_and_queued_finds_the_slot_count() {
    // 2 slots of 1,024 tokens: room for the prompt and the 512-token output.
    let Some(s) = LlamaServer::start(SLOTS, 2 * 1024) else {
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
        queued >= 4.0 * unqueued,
        "queued {queued:.1} ms is not well above unqueued {unqueued:.1} ms:\n{}",
        s.log()
    );
    let threshold = (unqueued + (queued - unqueued) / 3.0).round().max(1.0);
    let spec = format!("ttft_p90={threshold}ms");
    real::finds_slots(&rt, workload(&s.url), &spec, 16, SLOTS, "llama.cpp");
}
