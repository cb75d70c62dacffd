//! Server settings and the `--profile` presets. Plain data; the CLI fills it from flags and
//! tests build it directly.

use super::engine::{DecodeCost, EngineParams, PrefillCurve};
use super::faults::FaultRule;
use std::path::PathBuf;

/// A named starting point for every engine parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Roughly the seed report's GPU: KV 1.84M tokens (the seed grid implies 1.57M-2.10M: it ran 8K x 128 and refused 251K x 8), max_model_len 262144, prefill 31.5K tok/s
    /// at 8K falling to 3.5K at 256K, ≈96 tok/s per stream at 128K × 1.
    Seed,
    /// Sub-millisecond token gaps and nearly free prefill, for stress tests of the client.
    Fast,
    /// Small `max_model_len` (32768), fast enough that a whole speed-test matrix takes a minute.
    Demo,
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "seed" => Ok(Profile::Seed),
            "fast" => Ok(Profile::Fast),
            "demo" => Ok(Profile::Demo),
            _ => Err(format!("unknown profile `{s}` (seed, fast, demo)")),
        }
    }
}

/// Everything `serve` needs.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Served model name; requests naming another model get 404.
    pub model: String,
    pub max_model_len: u32,
    pub engine: EngineParams,
    /// What `GET /version` reports.
    pub version: String,
    /// Streams start repeating a fixed period after this many tokens...
    pub loop_after: Option<u64>,
    /// ...in this fraction of requests (chosen by arrival order, exactly).
    pub loop_fraction: f64,
    /// Faults drawn per request (a request header `x-mock-fault` overrides them).
    pub faults: Vec<FaultRule>,
    /// Faults whose probability grows with the load: each rule's probability is per request
    /// already in the engine (running or waiting) when this one arrives, at most 1
    /// (`--load-fault status=500@0.2`: 20% with one other request in, 40% with two). Drawn
    /// after `faults`, by request number like them.
    pub load_faults: Vec<FaultRule>,
    pub trace: Option<PathBuf>,
    /// Log every request as received to this file (see [`super::reqlog`]), one JSON line each.
    pub request_log: Option<PathBuf>,
    /// An in-process trace sink (see [`super::trace::TraceSink::memory`]); used instead of
    /// `trace` when set.
    pub trace_sink: Option<super::trace::TraceSink>,
    /// With a trace: each token's write also carries the kernel's send stamp
    /// ([`super::sendstamp`]; `selftest --send-stamps`). Off by default: one more system call
    /// per write.
    pub send_stamps: bool,
    /// Serve HTTPS with this configuration (the self-test over TLS, `selftest::Shape::tls`):
    /// the trace stamps each TLS write, as it stamps a plain one.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Held before a generation request reaches the engine: a fixed extra time to first token
    /// on top of the engine's own (the self-test's `--first-token`). Zero by default.
    pub admission_delay: std::time::Duration,
    /// Held between reading the counters for `GET /metrics` and answering (a frontend busy with
    /// streams answers late; vLLM's does): zero by default.
    pub metrics_delay: std::time::Duration,
    /// Counts `/tokenize` requests when set; a test keeps a clone of the `Arc` to see how much
    /// calibration a client did.
    pub tokenize_calls: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Test-only: run inside every engine step (see [`super::driver::StepHook`]).
    #[doc(hidden)]
    pub step_hook: Option<super::driver::StepHook>,
    /// Fake speculative-decoding counters in `/metrics` (vLLM's `vllm:spec_decode_*_total`),
    /// for clients that read them: one draft of `len()` tokens per generated token, position
    /// `i` accepted in `floor(drafts x rate[i])` of them. Empty: no such counters (the default).
    pub spec_decode_acceptance: Vec<f64>,
    /// LoRA adapter names served beside `model` (vLLM's `--lora-modules name=path`): requests
    /// may name them, and `/v1/models` lists them with `model` as parent.
    pub lora_modules: Vec<String>,
    /// Counts generation requests by the `model` they named when set (a test keeps a clone).
    pub model_calls:
        Option<std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>>,
    /// Answer `400` with an empty body to every request whose `x-request-id` is not a UUID, as
    /// llama-cpp-python's server does (a request without the header is served).
    pub uuid_request_ids: bool,
    /// The first this-many requests to any endpoint but `/v1/models` and `/health` answer
    /// `503 Loading model`, as llama.cpp's server does while it loads its model.
    pub loading_requests: u64,
    /// vLLM's `--enable-per-request-metrics`: the server's own timing of each request
    /// (`metrics`) on the final usage chunk of a stream with usage, and on a whole answer, for
    /// a single choice; made of the engine's queued, scheduled, first- and last-token times.
    pub per_request_metrics: bool,
    /// How many prompt tokens an image part costs (`mock::image`): by default LLaVA-1.5-style,
    /// 256 whatever its size.
    pub image_tokens: super::image::ImageTokens,
    /// The vision encoder's time per image, in microseconds before `time_scale`, charged in the
    /// prefill step that starts the image's request (the step's first chunk of it).
    pub vision_us_per_image: f64,
    /// vLLM's `--api-key`: every request to a `/v1` path must carry `Authorization: Bearer`
    /// this key, or is answered `401 {"error": "Unauthorized"}` (the other paths are open,
    /// as vLLM's are).
    pub api_key: Option<String>,
}

impl MockConfig {
    /// What makes this server behave as it does, in one line: two configurations with the same
    /// identity answer the same requests with the same tokens at the same simulated speed
    /// (`matrix --resume` of a `--mock` run compares it instead of the server's address).
    /// Test hooks and trace sinks change nothing a client measures and are left out.
    pub fn identity(&self) -> String {
        let e = &self.engine;
        format!(
            "model {}, max_model_len {}, version {}, kv {} tokens in blocks of {}, max_num_seqs {}, \
             max_num_batched_tokens {}, prefill {} tok/s (half at {}), decode step {} us + {} us/seq \
             + {} us per 1K total + {} us per 1K longest, time scale {}, admission delay {:?}, \
             loop after {:?} in {} of requests, faults {:?}, spec decode {:?}, lora {:?}, \
             image tokens {:?}, vision {} us per image",
            self.model,
            self.max_model_len,
            self.version,
            e.kv_tokens,
            e.block_size,
            e.max_num_seqs,
            e.max_num_batched_tokens,
            e.prefill.rate_tok_s,
            e.prefill.half_ctx,
            e.decode.base_us,
            e.decode.per_seq_us,
            e.decode.per_ktok_total_us,
            e.decode.per_ktok_max_us,
            e.time_scale,
            self.admission_delay,
            self.loop_after,
            self.loop_fraction,
            self.faults,
            self.spec_decode_acceptance,
            self.lora_modules,
            self.image_tokens,
            self.vision_us_per_image,
        ) + &if self.load_faults.is_empty() {
            String::new()
        } else {
            format!(", load faults {:?} per request in the engine", self.load_faults)
        }
    }

    pub fn profile(p: Profile) -> Self {
        let engine = match p {
            Profile::Seed => EngineParams {
                kv_tokens: 1_835_008,
                block_size: 16,
                max_num_seqs: 256,
                max_num_batched_tokens: 8192,
                prefill: PrefillCurve {
                    rate_tok_s: 42_600.0,
                    half_ctx: 22_600.0,
                },
                // Fitted to 10.4 ms/step at 128K x 1, 11.3 at 128K x 2, 14.5 at 251K x 1.
                decode: DecodeCost {
                    base_us: 6080.0,
                    per_seq_us: 50.0,
                    per_ktok_total_us: 7.03,
                    per_ktok_max_us: 26.3,
                },
                time_scale: 1.0,
            },
            Profile::Fast => EngineParams {
                kv_tokens: 4_194_304,
                block_size: 16,
                max_num_seqs: 1024,
                max_num_batched_tokens: 65536,
                prefill: PrefillCurve {
                    rate_tok_s: 50_000_000.0,
                    half_ctx: 1e9,
                },
                decode: DecodeCost {
                    base_us: 500.0,
                    per_seq_us: 1.0,
                    per_ktok_total_us: 0.0,
                    per_ktok_max_us: 0.0,
                },
                time_scale: 1.0,
            },
            Profile::Demo => EngineParams {
                kv_tokens: 262_144,
                block_size: 16,
                max_num_seqs: 64,
                max_num_batched_tokens: 8192,
                prefill: PrefillCurve {
                    rate_tok_s: 400_000.0,
                    half_ctx: 22_600.0,
                },
                decode: DecodeCost {
                    base_us: 1500.0,
                    per_seq_us: 20.0,
                    per_ktok_total_us: 2.0,
                    per_ktok_max_us: 10.0,
                },
                time_scale: 1.0,
            },
        };
        let max_model_len = match p {
            Profile::Seed => 262_144,
            Profile::Fast | Profile::Demo => 32_768,
        };
        MockConfig {
            model: "mock-model".into(),
            max_model_len,
            engine,
            version: "0.33.0+mock".into(),
            loop_after: None,
            loop_fraction: 1.0,
            faults: Vec::new(),
            load_faults: Vec::new(),
            trace: None,
            request_log: None,
            trace_sink: None,
            send_stamps: false,
            tls: None,
            admission_delay: std::time::Duration::ZERO,
            metrics_delay: std::time::Duration::ZERO,
            tokenize_calls: None,
            step_hook: None,
            spec_decode_acceptance: Vec::new(),
            image_tokens: Default::default(),
            vision_us_per_image: 2_000.0,
            lora_modules: Vec::new(),
            model_calls: None,
            uuid_request_ids: false,
            loading_requests: 0,
            per_request_metrics: false,
            api_key: None,
        }
    }

    /// One line per setting, for the startup banner.
    pub fn describe(&self) -> String {
        let e = &self.engine;
        format!(
            "model {} | max_model_len {} | KV {} tokens in blocks of {} ({} blocks, max concurrency {:.2} at full length) | max_num_seqs {} | batch budget {} tokens\n\
             prefill {:.0} tok/s / (1 + ctx/{:.0}) | decode step {:.0} us + {:.1} us/seq + {:.2} us/Ktok total + {:.2} us/Ktok longest | time scale {}\n\
             loop after {:?} tokens (fraction {}) | {} fault rule(s) | trace {} | request log {}",
            self.model,
            self.max_model_len,
            e.num_blocks() as u64 * e.block_size as u64,
            e.block_size,
            e.num_blocks(),
            (e.num_blocks() as u64 * e.block_size as u64) as f64 / self.max_model_len as f64,
            e.max_num_seqs,
            e.max_num_batched_tokens,
            e.prefill.rate_tok_s,
            e.prefill.half_ctx,
            e.decode.base_us,
            e.decode.per_seq_us,
            e.decode.per_ktok_total_us,
            e.decode.per_ktok_max_us,
            e.time_scale,
            self.loop_after,
            self.loop_fraction,
            self.faults.len(),
            self.trace
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "off".into()),
            self.request_log
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "off".into()),
        )
    }

    /// Reject settings the engine cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        let e = &self.engine;
        if e.block_size == 0 || e.kv_tokens < e.block_size as u64 {
            return Err("--kv-tokens must hold at least one block".into());
        }
        if e.max_num_seqs == 0 || e.max_num_batched_tokens == 0 {
            return Err("--max-num-seqs and --max-num-batched-tokens must be positive".into());
        }
        if !(e.time_scale > 0.0 && e.time_scale.is_finite()) {
            return Err("--time-scale must be a positive number".into());
        }
        if !(e.prefill.rate_tok_s > 0.0 && e.prefill.half_ctx > 0.0) {
            return Err("prefill rate and half-context must be positive".into());
        }
        if self.max_model_len == 0 {
            return Err("--max-model-len must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.loop_fraction) {
            return Err("--loop-fraction must be in 0..=1".into());
        }
        Ok(())
    }
}
