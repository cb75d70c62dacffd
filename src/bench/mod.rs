//! `llmspeed bench`: drop-ins for the Python serving benchmarks, as one shared engine and one
//! front end per tool (hyper's split between `proto` and `client`/`server` is the picture).
//!
//! - [`engine`]: dataset -> schedule -> requests -> per-request records, plus the pure pieces
//!   every front end reuses (shards, steady state, repeated runs, LoRA, conversations, probes).
//! - [`vllm`]: `llmspeed bench serve`, the drop-in for `vllm bench serve` — its flags, request
//!   bodies, metric definitions, result JSON, console summary, sessions, sweeps and merge.
//! - [`sglang`]: `llmspeed bench sglang`, the drop-in for `python -m sglang.bench_serving` — its
//!   flags, request bodies, stream readers and metrics, console block and JSONL record.
//!
//! Architecture invariant: a front end maps flags in and results out; the engine knows no
//! tool's names. Front ends never import each other.

pub mod engine;
pub mod refusal;
pub mod sglang;
pub mod vllm;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The files of `src/bench/<dir>/` must not name any of `paths`; returns how many were read.
    fn check_names_none(dir: &str, paths: &[&str]) -> usize {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bench")
            .join(dir);
        let mut read = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            for name in paths {
                assert!(!text.contains(name), "{} names {name}", p.display());
            }
            read += 1;
        }
        read
    }

    /// The engine imports no front end: no file under `src/bench/engine/` names one.
    #[test]
    fn engine_imports_no_front_end() {
        let read = check_names_none("engine", &["bench::vllm", "bench::sglang"]);
        assert!(read >= 10, "src/bench/engine was not read: {read} files");
    }

    /// Front ends never import each other.
    #[test]
    fn front_ends_import_no_other_front_end() {
        assert!(check_names_none("sglang", &["bench::vllm"]) >= 6);
        assert!(check_names_none("vllm", &["bench::sglang"]) >= 10);
    }
}
