//! Synthetic prompts for the matrix: seeded, natural-looking English prose that never repeats
//! an 8-word sequence, the three-turn chat (or single completions text) built around it, exact
//! token counts by calibration against a caller's counter, and token-id prompts.
//!
//! Why prose and not filler: a prompt that repeats itself invites the model to repeat itself,
//! which is how the seed report lost its grid to "Looped". Why a uniqueness guarantee rather
//! than "probably unique": the no-repeat property is what the detector downstream relies on.
//!
//! This module is pure and deterministic: same seed, same text, on every platform and every
//! version of `rand` (it carries its own SplitMix64). It must never touch the network, a clock
//! or the file system; the caller passes the counting function (e.g. a `/tokenize` call).
//!
//! Three jobs, one file each: `text` generates the prose, `prompt` frames it as a chat or
//! completions prompt, `calibrate` sizes a prompt to a token count; `token_ids` draws
//! token-id prompts.

mod calibrate;
mod prompt;
mod text;
mod token_ids;

pub use calibrate::{CalibrateError, Calibrated};
pub use prompt::{prompt_prefix, ChatMessage, Framing, Prompt, PromptBuilder, PromptKind, Role};
pub use text::{generate, Prose};
pub use token_ids::{token_ids, TokenIdError};
