//! SGLang's native `/generate` stream through the whole decode path (head, body, SSE, the native decoder, timeline):
//! never panics, accepted text unescapes, and split reads record what the whole body records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::net::Dialect;

fuzz_target!(|data: &[u8]| llmspeed_fuzz::check_native(Dialect::Sglang, data));
