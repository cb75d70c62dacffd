//! What to send and when: synthetic prompts of exact token counts, datasets, schedules.

pub mod chat_template;
pub mod datasets;
pub mod hub;
pub mod image;
pub mod image_header;
pub mod numpy;
pub mod processor;
pub mod prompt_cache;
pub mod prose;
pub mod pyrandom;
pub mod request_id;
pub mod rows;
pub mod sample;
pub mod schedule;
pub mod tokenizer;
pub mod trace;
