//! `llmspeed stream`: one streaming request, its timeline printed for people or as JSON lines.
//!
//! Also owns [`ConnectionArgs`], the connection flags every client command shares.

use super::{runtime, CliError, CliResult};
use crate::clock::Clock;
use crate::net::request::{synthetic_token_ids, synthetic_words, Generation, Prompt};
use crate::net::Dialect;
use crate::net::{parse_header, Cancel, Client, ClientConfig, NoopObserver, Target, Timeouts};
use crate::timeline::{Channel, Timeline};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How to reach and authenticate to the server; shared by every command that sends requests.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Server base URL, e.g. http://localhost:8000 (a trailing /v1 is fine).
    #[arg(long)]
    pub base_url: String,
    /// API key, sent as `Authorization: Bearer <key>`.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Accept any TLS certificate (the handshake still happens).
    #[arg(long)]
    pub insecure: bool,
    /// Trust the operating system's root certificates instead of the bundled ones.
    #[arg(long)]
    pub system_roots: bool,
    /// Also trust the certificates in this PEM file: CAs, or the server's own (a self-signed
    /// one from `openssl req -x509`; its host name and validity are still checked).
    #[arg(long, value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    /// Stamp every read with the client's own clock when it wakes up, instead of the kernel's
    /// receive stamp (plain TCP on Linux): the behaviour before kernel stamps.
    #[arg(long)]
    pub no_kernel_stamps: bool,
    /// Stamp each event with the arrival of the TCP segment that carried it, from a packet
    /// ring of the client, so a client that falls behind and reads several events at once
    /// still times each one. The default wherever a packet socket opens (Linux, plain HTTP,
    /// root or CAP_NET_RAW: `setcap cap_net_raw+ep` on the binary); elsewhere the client says
    /// why and keeps socket stamps. The flag asks for them with --no-kernel-stamps too.
    #[arg(long)]
    pub packet_stamps: bool,
    /// Socket receive stamps instead of packet stamps (no packet ring).
    #[arg(long, conflicts_with = "packet_stamps")]
    pub no_packet_stamps: bool,
    /// Connect + TLS handshake limit (10s, 500ms; a bare number is seconds; 0 = none).
    #[arg(long, value_name = "DURATION", default_value_t = 10.0, value_parser = super::duration::secs)]
    pub connect_timeout: f64,
    /// Limit from sending the request to the first event (a bare number is seconds; 0 = none). Long prompts
    /// take minutes to prefill.
    #[arg(long, value_name = "DURATION", default_value_t = 600.0, value_parser = super::duration::secs)]
    pub first_byte_timeout: f64,
    /// Longest silence between two events (a bare number is seconds; 0 = none).
    #[arg(long, value_name = "DURATION", default_value_t = 120.0, value_parser = super::duration::secs)]
    pub gap_timeout: f64,
    /// Limit on the whole request (a bare number is seconds; 0 = none).
    #[arg(long, value_name = "DURATION", default_value_t = 0.0, value_parser = super::duration::secs)]
    pub total_timeout: f64,
    /// Wait up to this many seconds for the server to come up: `GET /v1/models` is retried on
    /// refused connections and 5xx (a model still loading) until it answers 200 (0: no check),
    /// as `vllm bench serve --ready-check-timeout-sec`; `matrix` and `probe` also probe again
    /// while any endpoint answers 5xx. Default: 600 for `matrix` (a long run must not die in its
    /// first second), 0 otherwise.
    #[arg(long, value_name = "DURATION", value_parser = super::duration::whole_secs)]
    pub ready_check_timeout_sec: Option<u64>,
}

impl ConnectionArgs {
    /// `--ready-check-timeout-sec`, or the command's own default.
    pub fn ready_check_timeout(&self, default_s: u64) -> u64 {
        self.ready_check_timeout_sec.unwrap_or(default_s)
    }

    /// The ready check (`--ready-check-timeout-sec`, else `default_s`) before a command's first
    /// request; none when it is 0 (a server without `/v1/models` must still work).
    pub async fn wait_ready(&self, client: &Client, default_s: u64) -> Result<(), CliError> {
        let timeout_s = self.ready_check_timeout(default_s);
        if timeout_s == 0 {
            return Ok(());
        }
        let mut say = |line: &str| eprintln!("{line}");
        crate::server::wait_ready(client, "/v1/models", timeout_s, &mut say)
            .await
            .map(drop)
            .map_err(|e| CliError::failed(e.to_string()))
    }

    pub fn client_config(&self) -> Result<ClientConfig, CliError> {
        let target = Target::parse(&self.base_url).map_err(|e| CliError::usage(e.to_string()))?;
        let mut cfg = ClientConfig::new(target);
        cfg.api_key = self.api_key.clone().filter(|k| !k.is_empty());
        cfg.headers = self
            .headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<_, _>>()
            .map_err(CliError::usage)?;
        cfg.insecure = self.insecure;
        cfg.system_roots = self.system_roots;
        cfg.ca_file = self.ca_cert.clone();
        cfg.kernel_stamps = !self.no_kernel_stamps;
        cfg.packet_stamps = crate::net::packet_stamps_wanted(
            self.packet_stamps,
            self.no_packet_stamps,
            self.no_kernel_stamps,
        );
        cfg.timeouts = Timeouts {
            connect: secs("--connect-timeout", self.connect_timeout)?,
            first_byte: secs("--first-byte-timeout", self.first_byte_timeout)?,
            gap: secs("--gap-timeout", self.gap_timeout)?,
            total: secs("--total-timeout", self.total_timeout)?,
        };
        Ok(cfg)
    }
}

fn secs(flag: &str, v: f64) -> Result<Option<Duration>, CliError> {
    if !v.is_finite() || v < 0.0 {
        return Err(CliError::usage(format!(
            "{flag} must be a number of seconds >= 0"
        )));
    }
    Ok((v > 0.0).then(|| Duration::from_secs_f64(v)))
}

/// `--api`: which streaming API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    Openai,
    Sglang,
    Tgi,
    #[value(name = "llama.cpp")]
    LlamaCpp,
    /// The OpenAI Responses API, `/v1/responses`.
    Responses,
}

impl Api {
    pub fn dialect(self) -> Dialect {
        match self {
            Api::Openai => Dialect::OpenAi,
            Api::Sglang => Dialect::Sglang,
            Api::Tgi => Dialect::Tgi,
            Api::LlamaCpp => Dialect::LlamaCpp,
            Api::Responses => Dialect::Responses,
        }
    }
}

/// Send one streaming request and print its timeline.
#[derive(Debug, Clone, clap::Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    /// Model name as the server knows it.
    #[arg(long)]
    pub model: String,
    /// Prompt text.
    #[arg(
        long,
        conflicts_with = "prompt_tokens",
        required_unless_present = "prompt_tokens"
    )]
    pub prompt: Option<String>,
    /// Synthetic prompt of N tokens (token ids on completions; about N words with --chat).
    #[arg(long, value_name = "N")]
    pub prompt_tokens: Option<usize>,
    /// Use /v1/chat/completions instead of /v1/completions.
    #[arg(long)]
    pub chat: bool,
    /// The streaming API to speak: OpenAI's, its Responses API (`/v1/responses`), or an
    /// engine's native one (SGLang `/generate`, TGI `/generate_stream`, llama.cpp
    /// `/completion`).
    #[arg(long, value_enum, default_value_t = Api::Openai)]
    pub api: Api,
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_tokens: u32,
    /// Keep generating past end-of-sequence (vLLM, SGLang, llama.cpp).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Do not ask for usage on every chunk (some OpenAI-compatible servers reject it).
    #[arg(long)]
    pub no_continuous_usage: bool,
    /// Print the generated text.
    #[arg(long)]
    pub show_text: bool,
    /// JSON lines: one object per event, then a summary object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StreamArgs) -> CliResult {
    let cfg = args.conn.client_config()?;
    let prompt = match (&args.prompt, args.prompt_tokens) {
        (Some(p), _) => Prompt::Text(p.clone()),
        (None, Some(n)) if args.chat || args.api.dialect().text_only() => {
            let with = if args.chat {
                "--chat".to_string()
            } else {
                format!("--api {}", args.api.dialect().as_str())
            };
            eprintln!(
                "llmspeed: note: --prompt-tokens with {with} sends {n} words; the prompt's token count is approximate"
            );
            Prompt::Text(synthetic_words(n))
        }
        (None, Some(n)) => Prompt::TokenIds(synthetic_token_ids(n)),
        (None, None) => return Err(CliError::usage("give --prompt or --prompt-tokens")),
    };
    if args.chat && args.api != Api::Openai {
        return Err(CliError::usage(
            "--chat picks OpenAI's chat endpoint; the other APIs (--api) have none",
        ));
    }
    let mut gen = Generation::new(args.model.clone(), prompt);
    gen.dialect = args.api.dialect();
    gen.chat = args.chat;
    gen.max_tokens = Some(args.max_tokens);
    gen.ignore_eos = args.ignore_eos;
    gen.continuous_usage = !args.no_continuous_usage;
    let req = gen
        .stream_request(Some(args.show_text))
        .map_err(CliError::usage)?;
    let url = format!("{}{}", cfg.target, req.path);
    let rt = runtime(1)?;
    let clock = Clock::new();
    let (tl, caught) = rt.block_on(async {
        let client =
            Client::new(cfg, clock.clone()).map_err(|e| CliError::failed(e.to_string()))?;
        args.conn.wait_ready(&client, 0).await?;
        let cancel = Cancel::new();
        let caught = super::signal::stop_on_signal(
            cancel.clone(),
            "",
            |sig| {
                format!(
                    "stopping the stream after {}; what arrived so far follows",
                    sig.describe()
                )
            },
            "exiting without output",
        )?;
        let start = clock.raw();
        let tl = client.stream(&req, start, &mut NoopObserver, &cancel).await;
        Ok::<_, CliError>((tl, caught))
    })?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &clock, &tl)
    } else {
        write_human(&mut out, &clock, &tl, &url, &args.model)
    };
    written.map_err(|e| CliError::failed(format!("cannot write output: {e}")))?;
    if let Some(sig) = caught.get() {
        return Ok(ExitCode::from(sig.exit_code()));
    }
    match &tl.outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(CliError::failed(e.to_string())),
    }
}

fn ms(clock: &Clock, from: u64, to: Option<u64>) -> Option<f64> {
    to.map(|t| round3(clock.delta_ms(from, t)))
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Output tokens per second after the first token (the decode rate), when it can be told.
fn decode_rate(clock: &Clock, tl: &Timeline) -> Option<f64> {
    let first = tl.first_token?;
    let last = tl.events.iter().rev().find(|e| e.tokens > 0)?.t;
    let first_tokens = tl
        .events
        .iter()
        .find(|e| e.t >= first && e.tokens > 0)?
        .tokens as u64;
    let after_first = tl.event_tokens().checked_sub(first_tokens)?;
    let secs = clock.delta_ns(first, last) as f64 / 1e9;
    (secs > 0.0 && after_first > 0).then(|| after_first as f64 / secs)
}

fn summary(clock: &Clock, tl: &Timeline) -> Value {
    let start = tl.intended_start;
    json!({
        "type": "summary",
        "status": tl.status,
        "ttft_ms": ms(clock, start, tl.first_token.or(tl.first_event)),
        "first_event_ms": ms(clock, start, tl.first_event),
        "response_head_ms": ms(clock, start, tl.response_head),
        "total_ms": ms(clock, start, tl.end),
        "events": tl.events.len(),
        "output_tokens": tl.output_tokens(),
        "token_count_source": tl.token_count_source.as_str(),
        "decode_tok_per_s": decode_rate(clock, tl).map(|r| (r * 10.0).round() / 10.0),
        "finish_reason": tl.finish_reason.map(|f| match (&tl.finish_reason_raw, f.as_str()) {
            (Some(raw), _) => raw.clone(),
            (None, s) => s.to_string(),
        }),
        "usage": tl.usage.map(|u| json!({
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
            "cached_tokens": u.cached_tokens,
        })),
        "text": tl.content_text,
        "reasoning_text": tl.reasoning_text,
        "error": match &tl.outcome {
            Ok(()) => Value::Null,
            Err(e) => json!({ "kind": e.kind.as_str(), "status": e.status, "message": e.message }),
        },
    })
}

fn write_json(out: &mut impl Write, clock: &Clock, tl: &Timeline) -> std::io::Result<()> {
    let mut prev: Option<u64> = None;
    for e in &tl.events {
        let line = json!({
            "type": "event",
            "t_ms": round3(clock.delta_ms(tl.intended_start, e.t)),
            "gap_ms": prev.map(|p| round3(clock.delta_ms(p, e.t))),
            "tokens": e.tokens,
            "channel": e.channel.as_str(),
        });
        writeln!(out, "{line}")?;
        prev = Some(e.t);
    }
    writeln!(out, "{}", summary(clock, tl))
}

fn write_human(
    out: &mut impl Write,
    clock: &Clock,
    tl: &Timeline,
    url: &str,
    model: &str,
) -> std::io::Result<()> {
    let start = tl.intended_start;
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} ms"));
    writeln!(out, "POST {url}  (model {model})")?;
    if let Some(s) = tl.status {
        writeln!(
            out,
            "status {s}, response head after {}",
            opt(ms(clock, start, tl.response_head))
        )?;
    }
    writeln!(
        out,
        "TTFT {}  (first event {})",
        opt(ms(clock, start, tl.first_token.or(tl.first_event))),
        opt(ms(clock, start, tl.first_event))
    )?;
    if !tl.events.is_empty() {
        writeln!(
            out,
            "{:>6} {:>12} {:>10} {:>7}  channel",
            "event", "t_ms", "gap_ms", "tokens"
        )?;
    }
    let mut prev: Option<u64> = None;
    for (i, e) in tl.events.iter().enumerate() {
        let gap = prev.map_or("-".to_string(), |p| {
            format!("{:.3}", clock.delta_ms(p, e.t))
        });
        let ch = if e.channel == Channel::Empty {
            "(none)"
        } else {
            e.channel.as_str()
        };
        writeln!(
            out,
            "{:>6} {:>12.3} {:>10} {:>7}  {ch}",
            i + 1,
            clock.delta_ms(start, e.t),
            gap,
            e.tokens
        )?;
        prev = Some(e.t);
    }
    let total = ms(clock, start, tl.end);
    writeln!(
        out,
        "events {}, output tokens {} (counted from {}), total {}",
        tl.events.len(),
        tl.output_tokens(),
        tl.token_count_source.as_str(),
        opt(total)
    )?;
    match decode_rate(clock, tl) {
        Some(r) => writeln!(out, "decode {r:.1} tok/s (after the first token)")?,
        None => writeln!(out, "decode rate: not enough tokens to tell")?,
    }
    match tl.usage {
        Some(u) => writeln!(
            out,
            "usage: prompt {} + completion {} = {} tokens{}",
            u.prompt_tokens,
            u.completion_tokens,
            u.total_tokens,
            u.cached_tokens
                .map_or(String::new(), |c| format!(" ({c} cached)"))
        )?,
        None => writeln!(out, "usage: not reported")?,
    }
    let reason = match (&tl.finish_reason_raw, tl.finish_reason) {
        (Some(raw), _) => raw.as_str(),
        (None, Some(f)) => f.as_str(),
        (None, None) => "-",
    };
    writeln!(out, "finish reason: {reason}")?;
    if let Some(r) = tl.reasoning_text.as_ref().filter(|t| !t.is_empty()) {
        writeln!(out, "--- reasoning ---\n{r}")?;
    }
    if let Some(t) = tl.content_text.as_ref().filter(|t| !t.is_empty()) {
        writeln!(out, "--- text ---\n{t}")?;
    }
    Ok(())
}
