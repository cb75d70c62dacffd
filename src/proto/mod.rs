//! sans-IO protocol layer: HTTP/1.1 request encoding and response heads, chunked bodies, SSE
//! framing, OpenAI stream chunks, the Responses API's events, the engines' native streams
//! (SGLang, TGI, llama.cpp), Prometheus text.
//!
//! Architecture invariant: nothing here touches tokio, a clock or a socket. Every parser takes
//! bytes and returns `Result<Option<T>, E>`, where `Ok(None)` means "need more bytes"; parsers
//! are resumable and keep a scan offset so a stream arriving one byte at a time stays O(n).

pub mod body;
pub mod chunked;
pub mod http1;
pub mod json;
pub mod native;
pub mod openai;
pub mod prometheus;
pub mod responses;
pub mod sse;
