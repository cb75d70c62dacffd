//! `llmspeed mock`: flags -> [`MockConfig`], bind, print the settings and URL, serve until
//! Ctrl-C or SIGTERM (either one drains open streams and flushes the trace). The server runs on its own current-thread runtime (the engine has its own thread).

use super::{CliError, CliResult};
use crate::mock::faults::FaultRule;
use crate::mock::{MockConfig, Profile};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct MockArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0 = any free port).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Preset: seed (a real GPU's shape), fast (sub-ms token gaps), demo (small and quick).
    #[arg(long, default_value = "seed", value_parser = |s: &str| s.parse::<Profile>())]
    pub profile: Profile,
    /// Multiply every simulated duration (0.01 runs the profile 100x faster).
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Served model name.
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long)]
    pub max_model_len: Option<u32>,
    /// KV cache size in tokens.
    #[arg(long)]
    pub kv_tokens: Option<u64>,
    #[arg(long)]
    pub block_size: Option<u32>,
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Token budget of one engine step (chunked prefill size).
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Prefill speed for short prompts, tokens/s.
    #[arg(long)]
    pub prefill_rate: Option<f64>,
    /// Context (tokens) at which prefill speed has halved.
    #[arg(long)]
    pub prefill_half_ctx: Option<f64>,
    /// Decode step: fixed part, microseconds.
    #[arg(long, value_parser = super::duration::micros)]
    pub decode_base_us: Option<f64>,
    /// Decode step: added per sequence in the batch, microseconds.
    #[arg(long, value_parser = super::duration::micros)]
    pub decode_per_seq_us: Option<f64>,
    /// Decode step: added per 1000 tokens of context summed over the batch, microseconds.
    #[arg(long, value_parser = super::duration::micros)]
    pub decode_per_ktok_us: Option<f64>,
    /// Decode step: added per 1000 tokens of the longest context, microseconds.
    #[arg(long, value_parser = super::duration::micros)]
    pub decode_per_ktok_max_us: Option<f64>,
    /// Streams repeat a fixed 24-token period from token N on (any N; below 24 the first 24
    /// tokens are the period).
    #[arg(long)]
    pub loop_after: Option<u64>,
    /// Fraction of requests that loop (with --loop-after).
    #[arg(long, default_value_t = 1.0)]
    pub loop_fraction: f64,
    /// Inject a fault: SPEC or SPEC@PROBABILITY; SPEC is status=500, reset-after=N,
    /// stall-after=N:MS, error-after=N, malformed-after=N, truncate-after=N or drip. Repeatable.
    #[arg(long = "fault", value_parser = |s: &str| s.parse::<FaultRule>())]
    pub faults: Vec<FaultRule>,
    /// Inject a fault whose probability grows with the load: SPEC@P fires with probability
    /// P x (requests already running or waiting in the engine), at most 1. Repeatable.
    #[arg(long = "load-fault", value_parser = |s: &str| s.parse::<FaultRule>())]
    pub load_faults: Vec<FaultRule>,
    /// Write one JSON line per token write (ground truth) to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Write one JSON line per request received (method, path, x-request-id, the answer's
    /// status, the body as sent, arrival time in the trace's base) to this file.
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<PathBuf>,
    /// Expose fake speculative-decoding counters (vLLM's `vllm:spec_decode_*_total`): one
    /// draft per generated token, one acceptance rate per draft position, e.g. 0.8,0.5.
    #[arg(long, value_delimiter = ',', value_name = "RATE,RATE,...")]
    pub spec_decode_acceptance: Vec<f64>,
    /// LoRA adapter names accepted as `model` beside --model and listed in /v1/models.
    #[arg(long, num_args = 1..)]
    pub lora_modules: Vec<String>,
    /// Answer 400 with an empty body to a request whose x-request-id is not a UUID (as
    /// llama-cpp-python's server does).
    #[arg(long)]
    pub uuid_request_ids: bool,
    /// Require `Authorization: Bearer KEY` on every /v1 request (401 Unauthorized without it),
    /// as vLLM started with --api-key does; /health, /metrics and /tokenize stay open.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Answer the first N requests (but /v1/models and /health) with 503 Loading model, as
    /// llama.cpp's server does while it loads.
    #[arg(long, default_value_t = 0)]
    pub loading_requests: u64,
    /// Put the server's own timing of each request (queue time, time to first token from
    /// scheduling, generation time, mean ITL: `metrics`) on the final usage chunk, as vLLM
    /// started with this flag does. The values are the engine's own times, also in --trace.
    #[arg(long)]
    pub enable_per_request_metrics: bool,
    /// Prompt tokens per image_url part of a chat message: fixed:N (N whatever the size, as
    /// LLaVA-1.5-style models), patch:P (one per P x P patch, partial ones counted), qwen2vl
    /// (Qwen2-VL's resize to multiples of 28 within its area bounds, one per 28 x 28, plus its
    /// start and end tokens), or none (a text-only model: a request with an image is refused
    /// with 400).
    #[arg(
        long,
        default_value = "fixed:256",
        value_name = "fixed:N|patch:P|qwen2vl|none"
    )]
    pub image_tokens: crate::mock::image::ImageTokens,
    /// The vision encoder's time per image, in milliseconds (scaled by --time-scale), charged
    /// in the prefill step that starts the image's request.
    #[arg(long, value_name = "MS")]
    pub vision_ms_per_image: Option<f64>,
}

impl MockArgs {
    pub fn config(&self) -> Result<MockConfig, CliError> {
        let mut c = MockConfig::profile(self.profile);
        let e = &mut c.engine;
        macro_rules! set {
            ($dst:expr, $src:expr) => {
                if let Some(v) = $src {
                    $dst = v;
                }
            };
        }
        set!(e.time_scale, self.time_scale);
        set!(e.kv_tokens, self.kv_tokens);
        set!(e.block_size, self.block_size);
        set!(e.max_num_seqs, self.max_num_seqs);
        set!(e.max_num_batched_tokens, self.max_num_batched_tokens);
        set!(e.prefill.rate_tok_s, self.prefill_rate);
        set!(e.prefill.half_ctx, self.prefill_half_ctx);
        set!(e.decode.base_us, self.decode_base_us);
        set!(e.decode.per_seq_us, self.decode_per_seq_us);
        set!(e.decode.per_ktok_total_us, self.decode_per_ktok_us);
        set!(e.decode.per_ktok_max_us, self.decode_per_ktok_max_us);
        set!(c.max_model_len, self.max_model_len);
        set!(c.model, self.model.clone());
        c.loop_after = self.loop_after;
        c.loop_fraction = self.loop_fraction;
        c.faults = self.faults.clone();
        c.load_faults = self.load_faults.clone();
        c.trace = self.trace.clone();
        c.request_log = self.request_log.clone();
        if self
            .spec_decode_acceptance
            .iter()
            .any(|r| !(0.0..=1.0).contains(r))
        {
            return Err(CliError::usage(
                "--spec-decode-acceptance rates must be in 0..=1".to_string(),
            ));
        }
        c.spec_decode_acceptance = self.spec_decode_acceptance.clone();
        c.lora_modules = self.lora_modules.clone();
        c.uuid_request_ids = self.uuid_request_ids;
        c.loading_requests = self.loading_requests;
        c.api_key = self.api_key.clone();
        c.per_request_metrics = self.enable_per_request_metrics;
        c.image_tokens = self.image_tokens;
        if let Some(ms) = self.vision_ms_per_image {
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(CliError::usage(format!(
                    "--vision-ms-per-image must be a time of 0 or more, got {ms}"
                )));
            }
            c.vision_us_per_image = ms * 1000.0;
        }
        c.validate().map_err(CliError::usage)?;
        Ok(c)
    }
}

pub fn run(args: MockArgs) -> CliResult {
    let config = args.config()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| CliError::failed(format!("cannot bind {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| CliError::failed(format!("cannot read the bound address: {e}")))?;
        // SIGTERM (a supervisor's stop, `kill`, `docker stop`) must take the same clean path
        // as Ctrl-C: its default action would end the process with the trace's buffer unwritten.
        // A server asked to stop has done its job: it exits 0, unlike the commands that measure.
        let mut signals = super::signal::Signals::watch()?;
        // Printed only once both signals are watched: a supervisor may stop us as soon as it
        // reads the URL.
        println!("llmspeed mock ({:?} profile)", args.profile);
        println!("{}", config.describe());
        println!("serving on http://{local}/v1  (Ctrl-C or SIGTERM to stop)");
        let shutdown = async move {
            signals.next().await;
        };
        crate::mock::serve(listener, config, shutdown)
            .await
            .map_err(|e| CliError::failed(format!("mock server failed: {e}")))?;
        eprintln!("llmspeed mock: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use crate::mock::faults::Fault;
    use clap::Parser;

    fn config(args: &[&str]) -> Result<crate::mock::MockConfig, String> {
        let cli = Cli::try_parse_from(["llmspeed", "mock"].iter().chain(args))
            .map_err(|e| e.to_string())?;
        match cli.command {
            Command::Mock(a) => a.config().map_err(|e| e.message),
            #[allow(unreachable_patterns)]
            _ => Err("not the mock command".into()),
        }
    }

    #[test]
    fn flags_override_the_profile() {
        let c = config(&[
            "--profile",
            "demo",
            "--kv-tokens",
            "4096",
            "--block-size",
            "32",
            "--max-num-seqs",
            "3",
            "--time-scale",
            "0.01",
            "--model",
            "m",
            "--max-model-len",
            "2048",
            "--decode-base-us",
            "7",
            "--prefill-rate",
            "1000",
            "--loop-after",
            "64",
            "--loop-fraction",
            "0.5",
            "--fault",
            "drip@0.25",
            "--fault",
            "reset-after=3",
            "--request-log",
            "requests.jsonl",
        ])
        .unwrap();
        assert_eq!(
            (
                c.engine.kv_tokens,
                c.engine.block_size,
                c.engine.max_num_seqs
            ),
            (4096, 32, 3)
        );
        assert_eq!((c.model.as_str(), c.max_model_len), ("m", 2048));
        assert_eq!(
            (
                c.engine.time_scale,
                c.engine.decode.base_us,
                c.engine.prefill.rate_tok_s
            ),
            (0.01, 7.0, 1000.0)
        );
        assert_eq!((c.loop_after, c.loop_fraction), (Some(64), 0.5));
        assert_eq!(c.faults.len(), 2);
        assert_eq!(c.faults[1].fault, Fault::ResetAfter(3));
        assert_eq!(c.request_log, Some("requests.jsonl".into()));
        let s = config(&[
            "--spec-decode-acceptance",
            "0.8,0.5",
            "--lora-modules",
            "a",
            "b",
            "--api-key",
            "sk-1",
        ])
        .unwrap();
        assert_eq!(s.spec_decode_acceptance, [0.8, 0.5]);
        assert_eq!(s.lora_modules, ["a", "b"]);
        assert_eq!(
            (s.api_key.as_deref(), c.api_key.as_deref()),
            (Some("sk-1"), None)
        );
        // Untouched values keep the demo profile's.
        assert_eq!(c.engine.decode.per_seq_us, 20.0);
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        assert!(config(&["--time-scale", "0"])
            .unwrap_err()
            .contains("--time-scale"));
        assert!(config(&["--loop-fraction", "2"])
            .unwrap_err()
            .contains("--loop-fraction"));
        assert!(config(&["--fault", "status=200"]).is_err());
        assert!(config(&["--spec-decode-acceptance", "0.5,1.5"])
            .unwrap_err()
            .contains("--spec-decode-acceptance"));
        assert!(config(&["--profile", "gpu"])
            .unwrap_err()
            .contains("unknown profile"));
    }
}
