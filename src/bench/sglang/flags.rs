//! Where `llmspeed bench sglang` parts from SGLang 0.5.23's `python -m sglang.bench_serving`
//! (`sglang.benchmark.serving`'s parser): the one table of refused flags ([`REFUSED`]) and the
//! flags parsed only to be refused ([`RefusedFlags`]), so that a reference command line never
//! ends in clap's "unexpected argument".
//!
//! Every other flag of the reference is accepted with its meaning (`args.rs`). The conformance
//! test (`tests/conformance_flags.rs`) reads the reference's own parser and checks both halves.
//! Owns no IO.

use crate::bench::refusal::{self, Refusal};

const COMMAND: &str = "bench sglang";

const PROFILER: &str = "it drives SGLang's torch profiler on the server; profile the server \
                        with its own tools while llmspeed runs";

const NO_DATASET: &str = "llmspeed builds no Hugging Face or agentic dataset (datasets: \
                          sharegpt, custom, openai, random, random-ids, generated-shared-prefix, \
                          mooncake, image)";

const POOLING: &str = "embeddings return no tokens to time; llmspeed measures generation";

/// Each reference flag (or `--flag value` for a refused choice) llmspeed refuses, and why.
/// Checked against SGLang 0.5.23's parser by `tests/conformance_flags.rs`.
pub const REFUSED: &[Refusal] = &[
    Refusal {
        flag: "--disable-stream",
        reason: "llmspeed times streamed tokens (TTFT and ITL need a stream)",
    },
    Refusal {
        flag: "--profile",
        reason: PROFILER,
    },
    Refusal {
        flag: "--profile-*",
        reason: PROFILER,
    },
    Refusal {
        flag: "--pd-separated",
        reason: "it only matters with --profile",
    },
    Refusal {
        flag: "--plot-throughput",
        reason: "llmspeed draws no terminal plot; the record has the peak figures",
    },
    Refusal {
        flag: "--print-requests",
        reason: "printing each request would cost time on the read path being measured",
    },
    Refusal {
        flag: "--fake-prefill",
        reason: "it bootstraps a disaggregated decode server, which llmspeed does not speak to",
    },
    Refusal {
        flag: "--flush-cache-timeout",
        reason: "llmspeed posts /flush_cache once its warm-ups have finished and does not poll \
                 the server for idleness",
    },
    Refusal {
        flag: "--rust-worker-threads",
        reason: "bench sglang sizes its runtime itself (one thread per core)",
    },
    Refusal {
        flag: "--agentic-max-turns",
        reason: NO_DATASET,
    },
    Refusal {
        flag: "--speed-bench-category",
        reason: NO_DATASET,
    },
    Refusal {
        flag: "--speed-bench-output-len",
        reason: NO_DATASET,
    },
    Refusal {
        flag: "--use-trace-timestamps",
        reason: "it is only valid for the mooncake dataset",
    },
    Refusal {
        flag: "--lora-request-distribution skewed",
        reason: "adapters are assigned uniformly or in turn (uniform, distinct)",
    },
    Refusal {
        flag: "--backend sglang-embedding",
        reason: POOLING,
    },
    Refusal {
        flag: "--backend vllm-embedding",
        reason: POOLING,
    },
    Refusal {
        flag: "--backend trt",
        reason: "TensorRT-LLM's streaming API is not one llmspeed reads",
    },
    Refusal {
        flag: "--backend gserver",
        reason: "it speaks gRPC; llmspeed reads HTTP streams",
    },
    Refusal {
        flag: "--backend truss",
        reason: "Truss's API is not one llmspeed reads",
    },
    Refusal {
        flag: "--dataset-name agentic-trace",
        reason: NO_DATASET,
    },
    Refusal {
        flag: "--dataset-name speed-bench",
        reason: NO_DATASET,
    },
];

/// Accepted flags whose default reads differently from the reference parser's, and why.
/// Checked against SGLang 0.5.23's parser by `tests/conformance_flags.rs`: every other
/// accepted flag has the reference's default.
pub const DEFAULTS_DIFFER: &[(&str, &str)] = &[];

/// The message refusing `flag` (a [`REFUSED`] row).
pub fn refuse(flag: &str) -> String {
    refusal::message(REFUSED, COMMAND, flag)
}

/// The refusal of a `--flag value` choice, if that choice is in [`REFUSED`].
pub fn refuse_choice(flag: &str, value: &str) -> Result<(), String> {
    let choice = format!("{flag} {value}");
    match refusal::find(REFUSED, &choice) {
        Some(_) => Err(refuse(&choice)),
        None => Ok(()),
    }
}

/// SGLang's flags llmspeed parses only to refuse them, hidden from `--help`. An option is
/// refused when given a value other than the reference's default (the default changes
/// nothing); a switch whenever it is given.
#[derive(Debug, Clone, clap::Args)]
pub struct RefusedFlags {
    #[arg(long, hide = true)]
    pub disable_stream: bool,
    #[arg(long, hide = true)]
    pub profile: bool,
    #[arg(long, hide = true, num_args = 1..)]
    pub profile_activities: Vec<String>,
    #[arg(long, hide = true)]
    pub profile_start_step: Option<String>,
    #[arg(long, hide = true)]
    pub profile_steps: Option<String>,
    #[arg(long, hide = true)]
    pub profile_num_steps: Option<String>,
    #[arg(long, hide = true)]
    pub profile_by_stage: bool,
    #[arg(long, hide = true, num_args = 1..)]
    pub profile_stages: Vec<String>,
    #[arg(long, hide = true)]
    pub profile_output_dir: Option<String>,
    #[arg(long, hide = true)]
    pub profile_prefix: Option<String>,
    #[arg(long, hide = true, num_args = 0..)]
    pub profile_prefill_url: Option<Vec<String>>,
    #[arg(long, hide = true, num_args = 0..)]
    pub profile_decode_url: Option<Vec<String>>,
    #[arg(long, hide = true)]
    pub pd_separated: bool,
    #[arg(long, hide = true)]
    pub plot_throughput: bool,
    #[arg(long, hide = true)]
    pub print_requests: bool,
    #[arg(long, hide = true)]
    pub fake_prefill: bool,
    #[arg(long, hide = true)]
    pub flush_cache_timeout: Option<String>,
    #[arg(long, hide = true)]
    pub rust_worker_threads: Option<String>,
    #[arg(long, hide = true)]
    pub agentic_max_turns: Option<String>,
    #[arg(long, hide = true)]
    pub speed_bench_category: Option<String>,
    #[arg(long, hide = true)]
    pub speed_bench_output_len: Option<String>,
}

impl RefusedFlags {
    /// Each refused flag of this struct with whether it was given.
    fn given(&self) -> [(&'static str, bool); 12] {
        let profiler = !self.profile_activities.is_empty()
            || self.profile_start_step.is_some()
            || self.profile_steps.is_some()
            || self.profile_num_steps.is_some()
            || self.profile_by_stage
            || !self.profile_stages.is_empty()
            || self.profile_output_dir.is_some()
            || self.profile_prefix.is_some()
            || self.profile_prefill_url.is_some()
            || self.profile_decode_url.is_some();
        [
            ("--disable-stream", self.disable_stream),
            ("--profile", self.profile),
            ("--profile-*", profiler),
            ("--pd-separated", self.pd_separated),
            ("--plot-throughput", self.plot_throughput),
            ("--print-requests", self.print_requests),
            ("--fake-prefill", self.fake_prefill),
            ("--flush-cache-timeout", self.flush_cache_timeout.is_some()),
            ("--rust-worker-threads", self.rust_worker_threads.is_some()),
            ("--agentic-max-turns", self.agentic_max_turns.is_some()),
            (
                "--speed-bench-category",
                self.speed_bench_category.is_some(),
            ),
            (
                "--speed-bench-output-len",
                self.speed_bench_output_len.is_some(),
            ),
        ]
    }

    /// The first refused flag given, as its refusal.
    pub fn check(&self) -> Result<(), String> {
        refusal::check_given(REFUSED, COMMAND, &self.given())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        r: RefusedFlags,
    }

    #[test]
    fn every_parsed_refusal_has_a_row_and_every_row_is_raised_somewhere() {
        let parsed: Vec<&str> = T::parse_from(["x"])
            .r
            .given()
            .iter()
            .map(|(f, _)| *f)
            .collect();
        for f in &parsed {
            assert!(refusal::find(REFUSED, f).is_some(), "{f} has no row");
        }
        // The other rows are raised by args.rs, each where its flag is mapped.
        let in_args = include_str!("args.rs");
        for r in REFUSED {
            let flag = r.flag.split(' ').next().unwrap_or(r.flag);
            assert!(
                parsed.contains(&r.flag) || in_args.contains(&format!("\"{}", flag)),
                "{} is never raised",
                r.flag
            );
        }
    }

    #[test]
    fn defaults_refuse_nothing() {
        assert_eq!(T::parse_from(["x"]).r.check(), Ok(()));
        let e = T::parse_from(["x", "--print-requests"])
            .r
            .check()
            .unwrap_err();
        assert!(
            e.starts_with("--print-requests is not supported by llmspeed bench sglang: "),
            "{e}"
        );
    }
}
