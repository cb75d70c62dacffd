//! `llmspeed bench sglang`: the drop-in for `python -m sglang.bench_serving`. A front end
//! only: SGLang's flags map onto the engine's run ([`args`]; the refused ones and why in
//! [`flags`]), SGLang's definitions read the
//! engine's per-request timelines ([`metrics`]), and its console block and JSONL record come out
//! ([`console`], [`record`]). Requests are built by [`body`] and sent by [`run`]; sweeps and
//! repeated runs are the engine's session loop around it ([`session`]); `--shard K/N` saves
//! [`shard`]'s block, from which [`merge`] recomputes the whole run. `--goodput` and
//! `--cache-report` add SGLang's [`goodput`] and [`cache`] figures; the image dataset its vision
//! tokens and llmspeed's per-request image figures ([`images`]).

pub mod args;
pub mod body;
pub mod cache;
pub mod console;
pub mod flags;
pub mod goodput;
pub mod images;
pub mod merge;
pub mod metrics;
pub mod mooncake;
pub mod record;
pub mod run;
pub mod session;
pub mod shard;
