//! `llmspeed bench sglang`: the drop-in for `python -m sglang.bench_serving`. A front end
//! only: SGLang's flags map onto the engine's run ([`args`]), SGLang's definitions read the
//! engine's per-request timelines ([`metrics`]), and its console block and JSONL record come out
//! ([`console`], [`record`]). Requests are built by [`body`] and sent by [`run`].

pub mod args;
pub mod body;
pub mod console;
pub mod metrics;
pub mod record;
pub mod run;
