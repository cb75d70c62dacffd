//! `llmspeed bench`: drop-ins for the Python serving benchmarks, as one shared engine and one
//! front end per tool (hyper's split between `proto` and `client`/`server` is the picture).
//!
//! - [`engine`]: dataset -> schedule -> requests -> per-request records, plus the pure pieces
//!   every front end reuses (shards, steady state, repeated runs, LoRA, conversations, probes).
//! - [`vllm`]: `llmspeed bench serve`, the drop-in for `vllm bench serve` — its flags, request
//!   bodies, metric definitions, result JSON, console summary, sessions, sweeps and merge.
//!
//! Architecture invariant: a front end maps flags in and results out; the engine knows no
//! tool's names. Front ends never import each other.

pub mod engine;
pub mod vllm;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The engine imports no front end: no file under `src/bench/engine/` names one.
    #[test]
    fn engine_imports_no_front_end() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bench/engine");
        let mut read = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(
                !text.contains("bench::vllm"),
                "{} names the vLLM front end",
                p.display()
            );
            read += 1;
        }
        assert!(read >= 10, "src/bench/engine was not read: {read} files");
    }
}
