//! The benchmark engine, shared by every front end: dataset -> schedule -> requests ->
//! per-request records. A front end fills a [`Plan`] from its tool's flags, calls [`run()`], and
//! turns the [`Measured`] run into its tool's figures and files.
//!
//! Architecture invariant: the engine knows no tool's names — no flag of `vllm bench serve` or
//! of SGLang's `bench_serving`, no result key, no console label. What differs between the tools
//! (request bodies, metric definitions, output) comes in through the plan or is done by the front
//! end with the records.
//!
//! - [`run`](mod@run): the runner, as named steps (ready check, prompts, warm-ups, order, dispatch,
//!   records); [`samples`]: loading and sizing the prompts; [`producer`]: a run's images made
//!   a bounded window ahead of the dispatcher, where they do not fit all at once; [`send`]:
//!   sending on time;
//!   [`connect`]: the client, the ready check, the `/metrics` page.
//! - [`record`]: one request as a [`RequestRecord`]; [`figures`]: our own figures of a run.
//! - [`session`]: the points of a sweep, each run `--num-runs` times, for any front end (the
//!   front end runs one point once through [`session::Runs`]).
//! - Pure pieces any front end reuses: [`shard`] (one machine's share of a run), [`steady`]
//!   (the steady-state window of a closed loop), [`multi_run`] (the spread of repeated runs),
//!   [`lora`] (which adapter each request names), [`conversation`] (multi-turn conversations),
//!   [`probe`] (probe requests beside a run).
//! - [`rounds`]: multi-turn rows ([`Plan::turns`]), each row's rounds sent in its slot.

pub mod connect;
pub mod conversation;
pub mod error;
pub mod figures;
pub mod lora;
pub mod multi_run;
pub mod plan;
pub mod probe;
pub mod producer;
pub mod record;
pub mod rounds;
pub mod run;
pub mod samples;
pub mod send;
pub mod session;
pub mod shard;
pub mod slot;
pub mod steady;

pub use error::RunError;
pub use plan::{Bodies, InitialTest, Plan, Warmup};
pub use record::RequestRecord;
pub use run::{run, Finished, Measured};
