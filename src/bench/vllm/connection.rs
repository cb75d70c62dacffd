//! The server and how requests reach it: `vllm bench serve`'s connection flags (backend and
//! endpoint, URL, headers, API key, TLS, the model and tokenizer, and our stamping switches) as
//! one clap group, [`ConnectionArgs`], which `bench serve` and `llmspeed capacity` both flatten,
//! so the two commands take the same flags with the same meanings and cannot drift. Checked into
//! a [`Connection`].
//!
//! Parsing and checking only: no IO beyond checking that a `--tokenizer` path holds a
//! tokenizer.

use crate::bench::vllm::flags::{refuse, REFUSED};
use crate::proto::native::Dialect;

/// Which API flavour to speak.
///
/// `tgi`, `sglang` and `llama.cpp` are the names of vLLM's older `benchmarks/
/// backend_request_func.py` (`ASYNC_REQUEST_FUNCS`; current vLLM, 0.32.0's
/// `vllm/benchmarks/lib/endpoint_request_func.py`, keeps none of them). There `tgi` spoke TGI's
/// native `/generate_stream` and `sglang` / `llama.cpp` the OpenAI completions endpoint; here
/// each defaults to its engine's native endpoint and decoder, and an explicit
/// `--endpoint /v1/completions` keeps vLLM's old meaning (see [`Backend::dialect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Vllm,
    OpenAi,
    OpenAiChat,
    /// vLLM 0.33's `openai-responses`: the Responses API, `/v1/responses`.
    OpenAiResponses,
    Tgi,
    Sglang,
    LlamaCpp,
}

const SUPPORTED: &str = "vllm, openai, openai-chat, openai-responses, tgi, sglang, llama.cpp";

impl Backend {
    pub fn parse(s: &str) -> Result<Backend, String> {
        match s {
            "vllm" => Ok(Backend::Vllm),
            "openai" => Ok(Backend::OpenAi),
            "openai-chat" => Ok(Backend::OpenAiChat),
            "openai-responses" => Ok(Backend::OpenAiResponses),
            "tgi" => Ok(Backend::Tgi),
            "sglang" => Ok(Backend::Sglang),
            "llama.cpp" => Ok(Backend::LlamaCpp),
            _ if crate::bench::refusal::find(REFUSED, &format!("--backend {s}")).is_some() => {
                Err(refuse(&format!("--backend {s}")))
            }
            _ => Err(format!("unknown --backend {s:?} (supported: {SUPPORTED})")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Vllm => "vllm",
            Backend::OpenAi => "openai",
            Backend::OpenAiChat => "openai-chat",
            Backend::OpenAiResponses => "openai-responses",
            Backend::Tgi => "tgi",
            Backend::Sglang => "sglang",
            Backend::LlamaCpp => "llama.cpp",
        }
    }

    pub fn is_chat(self) -> bool {
        self == Backend::OpenAiChat
    }

    /// The engine whose native API this backend names, if any.
    fn native(self) -> Option<Dialect> {
        match self {
            Backend::Tgi => Some(Dialect::Tgi),
            Backend::Sglang => Some(Dialect::Sglang),
            Backend::LlamaCpp => Some(Dialect::LlamaCpp),
            Backend::Vllm | Backend::OpenAi | Backend::OpenAiChat | Backend::OpenAiResponses => {
                None
            }
        }
    }

    /// The endpoint the backend talks to when `--endpoint` is not given: vLLM's for the OpenAI
    /// ones, the engine's native one for `tgi`, `sglang` and `llama.cpp`.
    pub fn default_endpoint(self) -> &'static str {
        if let Some(p) = self.native().and_then(Dialect::native_path) {
            return p;
        }
        if self == Backend::OpenAiResponses {
            return "/v1/responses";
        }
        if self.is_chat() {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        }
    }

    /// The stream dialect for `endpoint`: a native backend speaks its engine's native API on
    /// that engine's path and OpenAI completions on any other (vLLM's old `sglang` and
    /// `llama.cpp`); `openai-responses` speaks the Responses API, the other OpenAI backends
    /// OpenAI completions or chat.
    pub fn dialect(self, endpoint: &str) -> Dialect {
        if self == Backend::OpenAiResponses {
            return Dialect::Responses;
        }
        match self.native() {
            Some(d) if d.native_path().is_some_and(|p| endpoint.ends_with(p)) => d,
            _ => Dialect::OpenAi,
        }
    }
}

/// vLLM's server flags and ours beside them (their `--help` headings are vLLM's groups).
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// API flavour: vllm and openai use /v1/completions, openai-chat /v1/chat/completions,
    /// openai-responses /v1/responses.
    #[arg(long, default_value = "openai", help_heading = "Server")]
    pub backend: String,
    /// Server base URL (overrides --host/--port), e.g. http://localhost:8000.
    #[arg(long, help_heading = "Server")]
    pub base_url: Option<String>,
    #[arg(long, default_value = "127.0.0.1", help_heading = "Server")]
    pub host: String,
    #[arg(long, default_value_t = 8000, help_heading = "Server")]
    pub port: u16,
    /// API path [default: /v1/completions, /v1/chat/completions for openai-chat, /v1/responses
    /// for openai-responses].
    #[arg(long, help_heading = "Server")]
    pub endpoint: Option<String>,
    /// Extra request headers, KEY=VALUE (also 'Key: value'); several may follow one flag.
    #[arg(long = "header", num_args = 1.., value_name = "KEY=VALUE", help_heading = "Server")]
    pub header: Vec<String>,
    /// Accept any TLS certificate.
    #[arg(long, help_heading = "Server")]
    pub insecure: bool,
    /// Trust the operating system's root certificates instead of the bundled ones.
    #[arg(long, help_heading = "llmspeed extras")]
    pub system_roots: bool,
    /// Also trust the certificates in this PEM file: CAs, or the server's own (a self-signed
    /// one from `openssl req -x509`; its host name and validity are still checked).
    #[arg(long, value_name = "PEM", help_heading = "llmspeed extras")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Stamp every read with the client's own clock when it wakes up, instead of the kernel's
    /// receive stamp (plain TCP on Linux): the behaviour before kernel stamps.
    #[arg(long, help_heading = "llmspeed extras")]
    pub no_kernel_stamps: bool,
    /// Stamp each event with the arrival of the TCP segment that carried it, from a packet
    /// ring of the client, so a client that falls behind still times each token. The default
    /// wherever a packet socket opens (Linux, plain HTTP, root or CAP_NET_RAW: `setcap
    /// cap_net_raw+ep` on the binary); elsewhere the client says why and keeps socket stamps.
    #[arg(long, help_heading = "llmspeed extras")]
    pub packet_stamps: bool,
    /// Socket receive stamps instead of packet stamps (no packet ring).
    #[arg(
        long,
        help_heading = "llmspeed extras",
        conflicts_with = "packet_stamps"
    )]
    pub no_packet_stamps: bool,
    /// Open the run's connections (one per concurrent request, up to 1024) after the warm-ups
    /// and before the first request, so no request's latency includes a TCP or TLS handshake
    /// and a burst of starts does not keep the client busy connecting while the first tokens
    /// arrive. vLLM's clients connect inside the first requests.
    #[arg(long, help_heading = "llmspeed extras")]
    pub preconnect: bool,
    /// Model name [default: the first model in /v1/models].
    #[arg(long, help_heading = "Server")]
    pub model: Option<String>,
    /// Name sent in the request's "model" field when it differs from --model.
    #[arg(long, help_heading = "Server")]
    pub served_model_name: Option<String>,
    /// Tokenizer, recorded as tokenizer_id. A tokenizer.json, a directory holding one, or a
    /// model id found in the local Hugging Face cache counts dataset texts locally (builds with
    /// --features hf-tokenizer); otherwise texts are counted with the server's /tokenize.
    #[arg(long, help_heading = "Server")]
    pub tokenizer: Option<String>,
    /// Only "auto": a local tokenizer is a tokenizer.json.
    #[arg(long, default_value = "auto", help_heading = "Server")]
    pub tokenizer_mode: String,
    /// Load no local tokenizer, even with --tokenizer: texts are counted by the server.
    #[arg(long, help_heading = "Server")]
    pub skip_tokenizer_init: bool,
    /// Accepted for compatibility: no model code is ever loaded.
    #[arg(long, help_heading = "Server")]
    pub trust_remote_code: bool,
    /// Seconds to wait for the server to answer /v1/models before starting (0, the default as
    /// in vLLM: one attempt, no wait).
    #[arg(long, default_value_t = 0, value_parser = crate::cli::duration::whole_secs, help_heading = "Server")]
    pub ready_check_timeout_sec: u64,
    /// API key [env: OPENAI_API_KEY].
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        help_heading = "llmspeed extras"
    )]
    pub api_key: Option<String>,
}

/// The connection flags, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    pub backend: Backend,
    /// `http://host:port` or `https://...`, without a trailing slash.
    pub base_url: String,
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    pub insecure: bool,
    pub system_roots: bool,
    pub ca_cert: Option<std::path::PathBuf>,
    /// Kernel receive stamps on plain connections (`--no-kernel-stamps` turns them off).
    pub kernel_stamps: bool,
    /// Packet stamps asked for (the default; `net::packet_stamps_wanted`).
    pub packet_stamps: bool,
    /// `--preconnect`.
    pub preconnect: bool,
    /// `--api-key` or `OPENAI_API_KEY` (an empty one is none).
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub served_model_name: Option<String>,
    /// `--tokenizer`, unless `--skip-tokenizer-init`.
    pub tokenizer: Option<String>,
    pub ready_check_timeout_s: u64,
    /// `--skip-tokenizer-init`: the dataset's chat template rule reads it too.
    pub skip_tokenizer_init: bool,
}

impl Connection {
    /// A plain connection to `base_url` speaking OpenAI completions, everything else at its
    /// default (kernel stamps on, packet stamps off).
    pub fn plain(base_url: &str, model: Option<String>) -> Connection {
        Connection {
            backend: Backend::OpenAi,
            base_url: base_url.trim_end_matches('/').to_string(),
            endpoint: Backend::OpenAi.default_endpoint().to_string(),
            headers: Vec::new(),
            insecure: false,
            system_roots: false,
            ca_cert: None,
            kernel_stamps: true,
            packet_stamps: false,
            preconnect: false,
            api_key: None,
            model,
            served_model_name: None,
            tokenizer: None,
            ready_check_timeout_s: 0,
            skip_tokenizer_init: false,
        }
    }

    /// The stream the endpoint answers with.
    pub fn dialect(&self) -> Dialect {
        self.backend.dialect(&self.endpoint)
    }

    /// Whether the endpoint takes chat messages.
    pub fn chat(&self) -> bool {
        self.backend.is_chat()
    }
}

impl ConnectionArgs {
    /// Checks the flags: the backend, its endpoint, the headers, the tokenizer.
    pub fn validate(&self) -> Result<Connection, String> {
        if self.tokenizer_mode != "auto" {
            return Err(refuse("--tokenizer-mode"));
        }
        self.check_tokenizer()?;
        let backend = Backend::parse(&self.backend)?;
        let endpoint = self.endpoint_for(backend)?;
        Ok(Connection {
            backend,
            base_url: self.target_url(),
            endpoint,
            headers: self.headers()?,
            insecure: self.insecure,
            system_roots: self.system_roots,
            ca_cert: self.ca_cert.clone(),
            kernel_stamps: !self.no_kernel_stamps,
            packet_stamps: crate::net::packet_stamps_wanted(
                self.packet_stamps,
                self.no_packet_stamps,
                self.no_kernel_stamps,
            ),
            preconnect: self.preconnect,
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            model: self.model.clone(),
            served_model_name: self.served_model_name.clone(),
            tokenizer: self.local_tokenizer().map(str::to_string),
            ready_check_timeout_s: self.ready_check_timeout_sec,
            skip_tokenizer_init: self.skip_tokenizer_init,
        })
    }

    /// `--tokenizer`, unless `--skip-tokenizer-init` says to load none.
    pub fn local_tokenizer(&self) -> Option<&str> {
        self.tokenizer
            .as_deref()
            .filter(|_| !self.skip_tokenizer_init)
    }

    /// A `--tokenizer` path must hold a tokenizer this build can load.
    fn check_tokenizer(&self) -> Result<(), String> {
        if let Some(t) = self.local_tokenizer() {
            if std::path::Path::new(t).exists() {
                if !crate::workload::tokenizer::LocalTokenizer::AVAILABLE {
                    return Err(format!(
                        "--tokenizer {t}: this build has no hf-tokenizer feature (rebuild with --features hf-tokenizer); pass the tokenizer's hub id or leave it out to count with the server's /tokenize"
                    ));
                }
                // A path that holds no tokenizer.json is a mistake to report now, not after
                // the server checks.
                crate::workload::tokenizer::resolve(t).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// `--base-url`, else `--host` and `--port` (an IPv6 host in brackets).
    pub fn target_url(&self) -> String {
        match &self.base_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None if self.host.contains(':') && !self.host.starts_with('[') => {
                format!("http://[{}]:{}", self.host, self.port)
            }
            None => format!("http://{}:{}", self.host, self.port),
        }
    }

    /// `--endpoint`, else the backend's; it must match the backend.
    fn endpoint_for(&self, backend: Backend) -> Result<String, String> {
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| backend.default_endpoint().to_string());
        if !endpoint.starts_with('/') {
            return Err(format!("--endpoint {endpoint:?} must start with /"));
        }
        if backend == Backend::Tgi && backend.dialect(&endpoint) != Dialect::Tgi {
            return Err(format!(
                "--backend tgi speaks TGI's /generate_stream (vLLM's tgi backend asserted the same), not --endpoint {endpoint}"
            ));
        }
        // vLLM's request function checks the same suffix.
        if (backend == Backend::OpenAiResponses) != endpoint.ends_with("responses") {
            return Err(format!(
                "--backend {} does not match --endpoint {endpoint} (openai-responses goes with /v1/responses)",
                backend.as_str()
            ));
        }
        if backend.is_chat() != endpoint.ends_with("/chat/completions") {
            return Err(format!(
                "--backend {} does not match --endpoint {endpoint} (openai-chat goes with /v1/chat/completions, vllm and openai with /v1/completions)",
                backend.as_str()
            ));
        }
        Ok(endpoint)
    }

    /// `--header`, each checked as a header line.
    fn headers(&self) -> Result<Vec<(String, String)>, String> {
        self.header
            .iter()
            .map(|h| {
                let (k, v) = split_kv(h, "--header")?;
                crate::proto::http1::validate_header(&k, &v).map_err(|e| e.to_string())?;
                Ok((k, v))
            })
            .collect()
    }
}

/// `KEY=VALUE` (vLLM) or `Key: value`.
pub fn split_kv(s: &str, what: &str) -> Result<(String, String), String> {
    let (k, v) = match (s.find('='), s.find(':')) {
        (Some(e), Some(c)) if c < e => s.split_at(c),
        (Some(e), _) => s.split_at(e),
        (None, Some(c)) => s.split_at(c),
        (None, None) => return Err(format!("{what} {s:?} must look like KEY=VALUE")),
    };
    let (k, v) = (k.trim(), v[1..].trim());
    if k.is_empty() {
        return Err(format!("{what} {s:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}
