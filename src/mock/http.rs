//! The HTTP face of the mock: hyper 1 service, routing, vLLM-shaped JSON (and SGLang's and TGI's
//! native endpoints, shaped by [`super::native`], and the Responses API's, by
//! [`super::responses`]), and the SSE body that turns engine emissions into one chunk per event
//! (uvicorn-style). Byte-level faults are
//! delegated to [`super::faults::FaultIo`]; this module only decides when they fire.
//! It must never use the client's HTTP code (`crate::net`, `crate::proto`).

use super::engine::{AdmitError, Emission, NewSeq};
use super::faults::{self, ConnCtl, Fault};
use super::native::{self, EventFacts, Flavor, Output};
use super::reqlog::RequestRec;
use super::request::GenRequest;
use super::responses;
use super::text::mix64;
use super::tokenizer::{apply_chat_template, content_text, ChatMessage, Tokenizer};
use super::trace::TraceRec;
use super::App;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc::UnboundedReceiver;

/// Largest request body accepted (a 256K-token prompt as an id array is ~2 MB).
const MAX_BODY: usize = 64 << 20;

/// Every response body the mock sends.
pub enum MockBody {
    Full(Option<Bytes>),
    Sse(Box<SseBody>),
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Sse(s) => s.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Sse(_) => SizeHint::default(),
        }
    }
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<MockBody> {
    let mut r = Response::new(MockBody::Full(Some(body.into())));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<MockBody> {
    respond(status, "application/json", v.to_string())
}

/// vLLM's error body: `{"error":{"message","type","param","code"}}`.
fn error_response(status: StatusCode, message: &str, param: Option<&str>) -> Response<MockBody> {
    let kind = match status.as_u16() {
        400 => "BadRequestError",
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": param, "code": status.as_u16()}}),
    )
}

fn bad_request(message: &str) -> Response<MockBody> {
    error_response(StatusCode::BAD_REQUEST, message, None)
}

/// Every path the mock serves, for the 405 of a wrong method.
const ROUTES: &[&str] = &[
    "/health",
    "/version",
    "/v1/models",
    "/metrics",
    "/tokenize",
    "/detokenize",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/responses",
    "/generate",
    "/generate_stream",
    "/get_server_info",
    "/server_info",
    "/flush_cache",
];

/// A request with its whole body read (or why it could not be).
type Received = Request<Result<Bytes, String>>;

/// Answer one request: the body read, the request id checked and echoed, a loading server's
/// 503, the route; then the request logged with its answer's status (when the log is on).
pub async fn handle(
    app: Arc<App>,
    ctl: Arc<ConnCtl>,
    req: Request<Incoming>,
) -> Response<MockBody> {
    ctl.clear();
    let (parts, body) = req.into_parts();
    let req = Request::from_parts(parts, read_body(body).await);
    let arrival_ns = app.request_log.as_ref().map(|_| arrival_ns(&app, &ctl));
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut resp = answer(&app, &ctl, &req, request_id.clone()).await;
    if let (Some(log), Some(arrival_ns)) = (&app.request_log, arrival_ns) {
        log.record(RequestRec {
            arrival_ns,
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
            request_id: request_id.clone(),
            routing_key: req
                .headers()
                .get("x-smg-routing-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            status: resp.status().as_u16(),
            body: req.body().clone().unwrap_or_default(),
        });
    }
    if let Some(id) = request_id.and_then(|id| header::HeaderValue::from_str(&id).ok()) {
        resp.headers_mut().insert("x-request-id", id);
    }
    resp
}

/// When the request being handled was complete, in ns since the server started (the trace's
/// base): its last read when reads are stamped (the trace is on), else now.
fn arrival_ns(app: &App, ctl: &ConnCtl) -> u64 {
    match &ctl.stamper {
        Some(s) => s.arrival().0,
        None => app.driver.now_ns(),
    }
}

/// A refused request id, a loading server's 503, or the route's answer.
async fn answer(
    app: &Arc<App>,
    ctl: &Arc<ConnCtl>,
    req: &Received,
    request_id: Option<String>,
) -> Response<MockBody> {
    if app.cfg.uuid_request_ids && request_id.as_deref().is_some_and(|id| !python_uuid(id)) {
        return respond(StatusCode::BAD_REQUEST, "text/plain", Bytes::new());
    }
    let path = req.uri().path();
    if !authorized(app, req, path) {
        return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "Unauthorized"}));
    }
    if still_loading(app, path) {
        return error_response(StatusCode::SERVICE_UNAVAILABLE, "Loading model", None);
    }
    route(app, ctl, req, path, request_id).await
}

/// The endpoint `path` names, by method; 405 for a known path and the wrong method, else 404.
async fn route(
    app: &Arc<App>,
    ctl: &Arc<ConnCtl>,
    req: &Received,
    path: &str,
    request_id: Option<String>,
) -> Response<MockBody> {
    let method = req.method().clone();
    match (&method, path) {
        (&Method::GET, "/health") => respond(StatusCode::OK, "application/json", Bytes::new()),
        (&Method::GET, "/version") => {
            json_response(StatusCode::OK, &json!({"version": app.cfg.version}))
        }
        (&Method::GET, "/v1/models") => json_response(StatusCode::OK, &models(app)),
        (&Method::GET, "/metrics") => metrics(app).await,
        (&Method::GET, "/get_server_info" | "/server_info") => server_info(app),
        (&Method::GET | &Method::POST, "/flush_cache") => flush_cache(app).await,
        (
            &Method::POST,
            "/tokenize"
            | "/detokenize"
            | "/v1/completions"
            | "/v1/chat/completions"
            | "/v1/responses"
            | "/generate"
            | "/generate_stream",
        ) => post(app, ctl, req, path, request_id).await,
        (_, p) if ROUTES.contains(&p) => error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {method} not allowed on {path}"),
            None,
        ),
        _ => error_response(StatusCode::NOT_FOUND, &format!("no route {path}"), None),
    }
}

/// `/metrics`, after the configured delay.
async fn metrics(app: &App) -> Response<MockBody> {
    let page = super::metrics::render(&app.cfg, &app.driver.stats().await);
    if !app.cfg.metrics_delay.is_zero() {
        tokio::time::sleep(app.cfg.metrics_delay).await;
    }
    respond(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        page,
    )
}

/// SGLang's `/get_server_info` (also `/server_info`).
fn server_info(app: &App) -> Response<MockBody> {
    let p = app.driver.params();
    json_response(
        StatusCode::OK,
        &native::server_info(
            &app.cfg.model,
            &app.cfg.version,
            app.cfg.max_model_len,
            p.kv_tokens,
            p.block_size,
            p.max_num_seqs,
        ),
    )
}

/// SGLang's `/flush_cache`: plain text, refused while requests run or wait.
async fn flush_cache(app: &App) -> Response<MockBody> {
    if app.driver.flush_cache().await {
        respond(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        )
    } else {
        respond(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            "Flush cache failed.\n",
        )
    }
}

/// The endpoints that take a JSON body: tokenizing, and generating in each flavor (with the
/// `x-mock-fault` a test asked for).
async fn post(
    app: &Arc<App>,
    ctl: &Arc<ConnCtl>,
    req: &Received,
    path: &str,
    request_id: Option<String>,
) -> Response<MockBody> {
    let fault_header = req
        .headers()
        .get("x-mock-fault")
        .map(|v| v.to_str().map(str::parse::<Fault>));
    let body = match parse_json(req.body()) {
        Ok(v) => v,
        Err(e) => return bad_request(&e),
    };
    let flavor = match path {
        "/tokenize" => return tokenize(app, &body),
        "/detokenize" => return detokenize(app, &body),
        "/v1/chat/completions" => Flavor::Chat,
        "/v1/responses" => Flavor::Responses,
        "/generate" => Flavor::Sglang,
        "/generate_stream" => Flavor::Tgi,
        _ => Flavor::Completions,
    };
    let fault = match fault_header {
        Some(Ok(Ok(f))) => Some(f),
        Some(Ok(Err(e))) => return bad_request(&format!("x-mock-fault: {e}")),
        Some(Err(_)) => return bad_request("x-mock-fault is not ASCII"),
        None => None,
    };
    generate(app, ctl, &body, flavor, request_id, fault).await
}

/// vLLM's `--api-key` rule: a `/v1` path needs `Authorization: Bearer KEY`.
fn authorized(app: &App, req: &Received, path: &str) -> bool {
    let Some(key) = &app.cfg.api_key else {
        return true;
    };
    !path.starts_with("/v1")
        || req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| k == key)
}

/// Whether this request is one of the first `loading_requests` (llama.cpp's public endpoints
/// aside), which a loading server refuses.
fn still_loading(app: &App, path: &str) -> bool {
    let n = app.cfg.loading_requests;
    n > 0
        && !matches!(path, "/v1/models" | "/health")
        && app
            .loading_answered
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                (k < n).then_some(k + 1)
            })
            .is_ok()
}

/// Whether Python's `uuid.UUID(s)` accepts `s` (what starlette-context's request-id plugin
/// checks): an optional `urn:`/`uuid:` prefix and braces, hyphens anywhere, 32 hex digits.
fn python_uuid(s: &str) -> bool {
    let s = s.strip_prefix("urn:").unwrap_or(s);
    let s = s.strip_prefix("uuid:").unwrap_or(s);
    let s = s.trim_matches(|c| c == '{' || c == '}');
    let digits = s.bytes().filter(|&b| b != b'-');
    digits.clone().count() == 32 && digits.into_iter().all(|b| b.is_ascii_hexdigit())
}

/// The whole body, at most [`MAX_BODY`] bytes.
async fn read_body(body: Incoming) -> Result<Bytes, String> {
    Ok(http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("cannot read the request body: {e}"))?
        .to_bytes())
}

/// The body as JSON, or why not (the 400's message).
fn parse_json(body: &Result<Bytes, String>) -> Result<Value, String> {
    let body = body.as_ref().map_err(String::clone)?;
    serde_json::from_slice(body).map_err(|e| format!("request body is not valid JSON: {e}"))
}

fn models(app: &App) -> Value {
    let mut data = vec![json!({
        "id": app.cfg.model, "object": "model", "created": app.created, "owned_by": "vllm",
        "root": app.cfg.model, "parent": null, "max_model_len": app.cfg.max_model_len,
        "permission": []
    })];
    // vLLM lists each LoRA adapter after the base model, with the base as its parent.
    for l in &app.cfg.lora_modules {
        data.push(json!({
            "id": l, "object": "model", "created": app.created, "owned_by": "vllm",
            "root": l, "parent": app.cfg.model, "max_model_len": app.cfg.max_model_len,
            "permission": []
        }));
    }
    json!({"object": "list", "data": data})
}

/// `messages` -> text through the fixed chat template.
fn chat_prompt(body: &Value) -> Result<String, String> {
    let msgs = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` must be an array")?;
    let mut joined = Vec::with_capacity(msgs.len());
    for m in msgs {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or("every message needs a string `role`")?;
        let content = match m.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(c) => {
                content_text(c).ok_or("message `content` must be a string or a list of parts")?
            }
        };
        joined.push((role, content));
    }
    let parts: Vec<ChatMessage<'_>> = joined
        .iter()
        .map(|(role, content)| ChatMessage { role, content })
        .collect();
    let add = body
        .get("add_generation_prompt")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    Ok(apply_chat_template(&parts, add))
}

/// A completions `prompt` -> one token list per choice.
fn completion_prompts(tok: &Tokenizer, body: &Value) -> Result<Vec<Vec<u32>>, String> {
    let ids = |a: &[Value]| -> Result<Vec<u32>, String> {
        a.iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&id| id < tok.vocab_size() as u64)
                    .map(|id| id as u32)
                    .ok_or_else(|| {
                        format!(
                            "token id {v} is outside the vocabulary (0..{})",
                            tok.vocab_size()
                        )
                    })
            })
            .collect()
    };
    let prompts = match body.get("prompt") {
        Some(Value::String(s)) => vec![tok.encode(s)],
        Some(Value::Array(a)) if a.is_empty() => return Err("`prompt` is empty".into()),
        Some(Value::Array(a)) => match &a[0] {
            Value::Number(_) => vec![ids(a)?],
            Value::String(_) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(|s| tok.encode(s))
                        .ok_or("mixed `prompt` list".to_string())
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => a
                .iter()
                .map(|v| {
                    v.as_array()
                        .ok_or("mixed `prompt` list".to_string())
                        .and_then(|x| ids(x))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("`prompt` must be a string, a list of strings or token ids".into()),
        },
        _ => return Err("`prompt` is required (string, list of strings, or token ids)".into()),
    };
    if prompts.iter().any(Vec::is_empty) {
        return Err("a prompt must have at least one token".into());
    }
    Ok(prompts)
}

fn tokenize(app: &App, body: &Value) -> Response<MockBody> {
    if let Some(n) = &app.cfg.tokenize_calls {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let tokens = if body.get("messages").is_some() {
        let images = chat_images(body);
        match (chat_prompt(body), images) {
            (Ok(s), Ok(images)) => {
                let mut t = app.tok.encode(&s);
                super::image::add_image_tokens(
                    &mut t,
                    &images,
                    app.cfg.image_tokens,
                    app.tok.vocab_size(),
                );
                t
            }
            (Err(e), _) | (_, Err(e)) => return bad_request(&e),
        }
    } else {
        match body.get("prompt").and_then(Value::as_str) {
            Some(s) => app.tok.encode(s),
            None => return bad_request("`prompt` (string) or `messages` is required"),
        }
    };
    json_response(
        StatusCode::OK,
        &json!({"count": tokens.len(), "max_model_len": app.cfg.max_model_len, "tokens": tokens, "token_strs": null}),
    )
}

fn detokenize(app: &App, body: &Value) -> Response<MockBody> {
    let Some(arr) = body.get("tokens").and_then(Value::as_array) else {
        return bad_request("`tokens` must be a list of token ids");
    };
    let mut ids = Vec::with_capacity(arr.len());
    for v in arr {
        match v.as_u64().and_then(|x| u32::try_from(x).ok()) {
            Some(id) => ids.push(id),
            None => return bad_request(&format!("token id {v} is not a non-negative integer")),
        }
    }
    match app.tok.decode(&ids) {
        Ok(s) => json_response(StatusCode::OK, &json!({"prompt": s})),
        Err(id) => bad_request(&format!(
            "token id {id} is outside the vocabulary (0..{})",
            app.tok.vocab_size()
        )),
    }
}

fn get_u32(body: &Value, key: &str) -> Result<Option<u32>, String> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

fn get_bool(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool).unwrap_or(false)
}

/// Validate a completions (`chat == false`) or chat completions body. Pure, so it is fuzzed
/// (`fuzz/fuzz_targets/mock_request.rs`). Every error is a 400 with this message.
pub fn parse_generate(
    tok: &Tokenizer,
    max_model_len: u32,
    body: &Value,
    chat: bool,
) -> Result<GenRequest, String> {
    let prompts = if chat {
        chat_prompt(body).map(|s| vec![tok.encode(&s)])
    } else {
        completion_prompts(tok, body)
    }?;
    let images = match chat {
        true => chat_images(body)?,
        false => Vec::new(),
    };
    let max_key = if chat && body.get("max_completion_tokens").is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = get_u32(body, max_key)?;
    let min_tokens = get_u32(body, "min_tokens")?.unwrap_or(0);
    let mml = max_model_len;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0) as u64;
    let want = longest + max_tokens.unwrap_or(0) as u64;
    if longest >= mml as u64 || want > mml as u64 {
        let what = if chat { "messages" } else { "prompt" };
        return Err(format!(
            "This model's maximum context length is {mml} tokens. However, you requested {want} tokens ({longest} in the {what}, {} in the completion). Please reduce the length of the {what} or completion.",
            max_tokens.unwrap_or(0)
        ));
    }
    if max_tokens == Some(0) {
        return Err(format!("`{max_key}` must be at least 1"));
    }
    let opts = body.get("stream_options");
    Ok(GenRequest {
        prompts,
        max_tokens,
        min_tokens,
        stream: get_bool(body.get("stream")),
        include_usage: get_bool(opts.and_then(|o| o.get("include_usage"))),
        continuous: get_bool(opts.and_then(|o| o.get("continuous_usage_stats"))),
        return_token_ids: get_bool(body.get("return_token_ids")),
        ignore_eos: get_bool(body.get("ignore_eos")),
        salt: body
            .get("cache_salt")
            .and_then(Value::as_str)
            .map(str::to_owned),
        user_seed: body.get("seed").and_then(Value::as_u64).unwrap_or(0),
        details: false,
        images,
    })
}

/// The `image_url` parts of a chat body's messages (`messages` checked by [`chat_prompt`]).
fn chat_images(body: &Value) -> Result<Vec<super::image::Seen>, String> {
    match body.get("messages").and_then(Value::as_array) {
        Some(msgs) => super::image::images_of(msgs),
        None => Ok(Vec::new()),
    }
}

/// Puts the request's image tokens into its prompt by the server's rule, and checks the
/// context again with them; returns how many there are.
pub fn with_image_tokens(
    g: &mut GenRequest,
    rule: super::image::ImageTokens,
    vocab: u32,
    max_model_len: u32,
) -> Result<u64, String> {
    let Some(prompt) = g.prompts.first_mut().filter(|_| !g.images.is_empty()) else {
        return Ok(0);
    };
    if rule == super::image::ImageTokens::Refused {
        return Err(super::image::REFUSED.into());
    }
    let added = super::image::add_image_tokens(prompt, &g.images, rule, vocab);
    let (len, max) = (prompt.len() as u64, g.max_tokens.unwrap_or(0) as u64);
    if len >= max_model_len as u64 || len + max > max_model_len as u64 {
        return Err(format!(
            "This model's maximum context length is {max_model_len} tokens. However, you requested {} tokens ({len} in the messages, {max} in the completion; {added} of them for {} image(s)). Please reduce the length of the messages or completion.",
            len + max,
            g.images.len()
        ));
    }
    Ok(added)
}

/// Validates a generation request of any flavor. Pure, so it is fuzzed.
pub fn parse_request(
    tok: &Tokenizer,
    max_model_len: u32,
    body: &Value,
    flavor: Flavor,
) -> Result<GenRequest, String> {
    match flavor {
        Flavor::Completions => parse_generate(tok, max_model_len, body, false),
        Flavor::Chat => parse_generate(tok, max_model_len, body, true),
        Flavor::Sglang => native::parse_sglang(tok, max_model_len, body),
        Flavor::Tgi => native::parse_tgi(tok, max_model_len, body),
        Flavor::Responses => responses::parse_responses(tok, max_model_len, body),
    }
}

/// Completions, chat completions, SGLang's `/generate` and TGI's `/generate_stream`, streaming
/// or not.
async fn generate(
    app: &Arc<App>,
    ctl: &Arc<ConnCtl>,
    body: &Value,
    flavor: Flavor,
    request_id: Option<String>,
    header_fault: Option<Fault>,
) -> Response<MockBody> {
    if let Some(r) = refuse_model(app, body) {
        return r;
    }
    // Taken first: the read that completed this request is the connection's last one so far.
    let arrival = ctl.stamper.as_ref().map(|t| t.arrival()).unwrap_or((0, 0));
    let n = app.requests.fetch_add(1, Ordering::Relaxed);
    let mut fault = header_fault.or_else(|| faults::pick(&app.cfg.faults, n));
    if fault.is_none() && !app.cfg.load_faults.is_empty() {
        let s = app.driver.stats().await;
        let in_engine = u64::from(s.running) + u64::from(s.waiting);
        fault = faults::pick_loaded(&app.cfg.load_faults, n, in_engine);
    }
    if let Some(Fault::Status(code)) = fault {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error_response(status, &format!("mock fault: HTTP {code}"), None);
    }
    let mut g = match parse_request(&app.tok, app.cfg.max_model_len, body, flavor) {
        Ok(g) => g,
        Err(e) => return bad_request(&e),
    };
    let vocab = app.tok.vocab_size();
    let image_tokens =
        match with_image_tokens(&mut g, app.cfg.image_tokens, vocab, app.cfg.max_model_len) {
            Ok(n) => n,
            Err(e) => return bad_request(&e),
        };
    let choices = g.prompts.len() as u64;
    let base = app.tags.fetch_add(choices, Ordering::Relaxed);
    let prompt_tokens: u64 = g.prompts.iter().map(|p| p.len() as u64).sum();
    let seqs = sequences(app, n, base, std::mem::take(&mut g.prompts), &g);
    if !app.cfg.admission_delay.is_zero() {
        tokio::time::sleep(app.cfg.admission_delay).await;
    }
    let id = response_id(flavor, n, base);
    let rid = request_id.unwrap_or_else(|| id.clone());
    let rid_json: Arc<str> = serde_json::to_string(&rid)
        .unwrap_or_else(|_| "\"?\"".into())
        .into();
    let rx = match app.driver.submit(seqs) {
        Ok(rx) => rx,
        Err(e @ AdmitError::LargerThanCache { .. }) => return bad_request(&e.to_string()),
        Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), None),
    };
    let meta = Meta {
        chat: flavor == Flavor::Chat,
        flavor,
        details: g.details,
        rid,
        id,
        model: answer_model(app, body),
        created: app.created,
        include_usage: g.include_usage,
        continuous: g.continuous,
        return_token_ids: g.return_token_ids,
        prompt_tokens,
        max_tokens: g.max_tokens,
        images: g.images.len() as u32,
        image_tokens,
    };
    let guard = AbortGuard {
        app: app.clone(),
        base,
        choices,
    };
    if !g.stream {
        return collect_full(app, meta, rx, guard).await;
    }
    if fault == Some(Fault::Drip) {
        ctl.set_drip();
    }
    let stream = Stream {
        rx,
        meta,
        guard,
        rid_json,
        arrival,
        fault,
        choices,
    };
    sse_response(app, ctl, stream)
}

/// Count the call by the model it names; the answer for a model that is neither ours nor one of
/// our LoRA adapters (vLLM's 404), `None` for any other.
fn refuse_model(app: &App, body: &Value) -> Option<Response<MockBody>> {
    let m = body.get("model").and_then(Value::as_str)?;
    if let Some(calls) = &app.cfg.model_calls {
        if let Ok(mut c) = calls.lock() {
            *c.entry(m.to_string()).or_default() += 1;
        }
    }
    let known = m == app.cfg.model || app.cfg.lora_modules.iter().any(|l| l == m);
    (!known).then(|| {
        error_response(
            StatusCode::NOT_FOUND,
            &format!("The model `{m}` does not exist."),
            Some("model"),
        )
    })
}

/// The engine's sequences of request `n`, one per prompt, tagged from `base`; each one's
/// sampling seed follows from its prompt, the user's seed and its choice.
fn sequences(app: &App, n: u64, base: u64, prompts: Vec<Vec<u32>>, g: &GenRequest) -> Vec<NewSeq> {
    let mml = app.cfg.max_model_len;
    let loops = app.cfg.loop_after.filter(|_| {
        let f = app.cfg.loop_fraction;
        ((n + 1) as f64 * f).floor() > (n as f64 * f).floor()
    });
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&prompt, &mut h);
            let seed = mix64(std::hash::Hasher::finish(&h) ^ g.user_seed ^ i as u64);
            NewSeq {
                tag: base + i as u64,
                max_tokens: g.max_tokens.unwrap_or(mml - prompt.len() as u32),
                prompt,
                salt: g.salt.clone(),
                min_tokens: g.min_tokens,
                ignore_eos: g.ignore_eos,
                seed,
                loop_after: loops,
                vision_us: g.images.len() as f64 * app.cfg.vision_us_per_image,
            }
        })
        .collect()
}

/// The answer's id, in the engine's shape for the endpoint.
fn response_id(flavor: Flavor, n: u64, base: u64) -> String {
    let prefix = match flavor {
        Flavor::Chat => "chatcmpl",
        Flavor::Completions => "cmpl",
        Flavor::Sglang | Flavor::Tgi => "gen",
        // vLLM's `resp_<uuid>`.
        Flavor::Responses => {
            return format!("resp_{:016x}{:016x}", mix64(n ^ 0xC0FFEE), mix64(base))
        }
    };
    format!("{prefix}-{:016x}{:016x}", mix64(n ^ 0xC0FFEE), mix64(base))
}

/// vLLM names the LoRA adapter a request asked for in `model` of its answer, and the base
/// model otherwise (an absent `model` included).
fn answer_model(app: &App, body: &Value) -> String {
    body.get("model")
        .and_then(Value::as_str)
        .filter(|m| app.cfg.lora_modules.iter().any(|l| l == m))
        .unwrap_or(&app.cfg.model)
        .to_string()
}

/// A submitted request's stream, before its body is built.
struct Stream {
    rx: UnboundedReceiver<Emission>,
    meta: Meta,
    guard: AbortGuard,
    rid_json: Arc<str>,
    arrival: (u64, u64),
    fault: Option<Fault>,
    choices: u64,
}

/// The streaming answer: an SSE body that nothing has been sent of yet.
fn sse_response(app: &Arc<App>, ctl: &Arc<ConnCtl>, s: Stream) -> Response<MockBody> {
    let body = SseBody {
        app: app.clone(),
        ctl: ctl.clone(),
        rx: s.rx,
        meta: s.meta,
        guard: s.guard,
        rid_json: s.rid_json,
        arrival: s.arrival,
        pending: VecDeque::with_capacity(4),
        role_sent: vec![false; s.choices as usize],
        finished: 0,
        completion_tokens: 0,
        sent_tokens: 0,
        fault: s.fault,
        stall: None,
        state: State::Streaming,
        truncate_flushed: false,
        line: String::with_capacity(512),
        output: Output::default(),
        cached_tokens: 0,
        times: EngineTimes::default(),
        responses: None,
    };
    let mut body = Box::new(body);
    if body.meta.flavor == Flavor::Responses {
        // vLLM writes these two as soon as the request is accepted, before any token.
        let mut w = responses::Writer::new(body.meta.responses_facts(app), body.meta.item_id());
        for line in w.start() {
            body.pending.push_back(Pending {
                bytes: Bytes::from(line),
                token: None,
            });
        }
        body.responses = Some(Box::new(w));
    }
    let mut r = Response::new(MockBody::Sse(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r
}

/// Frees the engine's sequences if the response is dropped before they finish.
struct AbortGuard {
    app: Arc<App>,
    base: u64,
    choices: u64,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        let tags: Vec<u64> = (self.base..self.base + self.choices).collect();
        self.app.driver.abort(&tags);
    }
}

struct Meta {
    chat: bool,
    flavor: Flavor,
    /// TGI `details` asked for.
    details: bool,
    /// The request id (`x-request-id`, else `id`): SGLang's `meta_info.id`.
    rid: String,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    continuous: bool,
    return_token_ids: bool,
    prompt_tokens: u64,
    /// The request's output limit (`None`: up to the context).
    max_tokens: Option<u32>,
    /// Its images and the prompt tokens they took (in `prompt_tokens`), for the trace.
    images: u32,
    image_tokens: u64,
}

impl Meta {
    /// What every Responses event names.
    fn responses_facts(&self, app: &App) -> responses::Facts {
        responses::Facts {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            max_output_tokens: self.max_tokens.unwrap_or(app.cfg.max_model_len),
            prompt_tokens: self.prompt_tokens,
        }
    }

    /// The Responses message item's `msg_…` id, after the response's.
    fn item_id(&self) -> String {
        self.id.replacen("resp_", "msg_", 1)
    }
}

async fn collect_full(
    app: &App,
    meta: Meta,
    mut rx: UnboundedReceiver<Emission>,
    guard: AbortGuard,
) -> Response<MockBody> {
    let n = guard.choices as usize;
    let mut toks: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut fin: Vec<Option<&'static str>> = vec![None; n];
    let mut cached = 0u64;
    let mut times = EngineTimes::default();
    let mut left = n;
    while left > 0 {
        let Some(e) = rx.recv().await else {
            return error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "server is shutting down",
                None,
            );
        };
        let c = (e.tag - guard.base) as usize;
        if e.index == 0 {
            cached += e.cached_tokens as u64;
        }
        if c == 0 {
            times.note(&e);
        }
        toks[c].push(e.token);
        if let Some(f) = e.finish {
            fin[c] = Some(f.as_str());
            left -= 1;
        }
    }
    let completion: u64 = toks.iter().map(|t| t.len() as u64).sum();
    if meta.flavor == Flavor::Responses {
        let text = app.tok.decode(&toks[0]).unwrap_or_default();
        let done = responses::Done {
            output_tokens: completion,
            cached_tokens: cached,
            incomplete: fin[0] == Some("length"),
        };
        let answer = responses::full(&meta.responses_facts(app), &meta.item_id(), &text, &done);
        return json_response(StatusCode::OK, &answer);
    }
    if meta.flavor == Flavor::Sglang {
        let text = app.tok.decode(&toks[0]).unwrap_or_default();
        let finish = if fin[0] == Some("length") {
            super::engine::Finish::Length
        } else {
            super::engine::Finish::Stop
        };
        return json_response(
            StatusCode::OK,
            &native::sglang_full(
                &text,
                &toks[0],
                &meta.rid,
                meta.prompt_tokens,
                cached,
                finish,
            ),
        );
    }
    let choices: Vec<Value> = toks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let text = app.tok.decode(t).unwrap_or_default();
            let mut c = if meta.chat {
                json!({"index": i, "message": {"role": "assistant", "content": text, "reasoning_content": null, "tool_calls": []}, "logprobs": null, "finish_reason": fin[i], "stop_reason": null})
            } else {
                json!({"index": i, "text": text, "logprobs": null, "finish_reason": fin[i], "stop_reason": null, "prompt_logprobs": null})
            };
            if meta.return_token_ids {
                c["token_ids"] = json!(t);
            }
            c
        })
        .collect();
    let object = if meta.chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    let mut answer = json!({"id": meta.id, "object": object, "created": meta.created, "model": meta.model, "choices": choices,
        "usage": {"prompt_tokens": meta.prompt_tokens, "completion_tokens": completion, "total_tokens": meta.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}});
    if app.cfg.per_request_metrics && n == 1 {
        answer["metrics"] = times.to_json();
    }
    json_response(StatusCode::OK, &answer)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Streaming,
    /// Emit `Err` on the next poll so hyper drops the connection.
    Abort,
    Ended,
}

/// One queued chunk; token chunks carry what the trace needs.
struct Pending {
    bytes: Bytes,
    token: Option<TokenFacts>,
}

/// What the trace records of a token chunk.
#[derive(Clone, Copy)]
struct TokenFacts {
    choice: u32,
    index: u32,
    due_ns: u64,
    queued_ns: u64,
    scheduled_ns: u64,
}

impl TokenFacts {
    fn of(choice: u32, e: &Emission) -> Self {
        TokenFacts {
            choice,
            index: e.index,
            due_ns: e.due_ns,
            queued_ns: e.queued_ns,
            scheduled_ns: e.scheduled_ns,
        }
    }
}

/// The engine's times of a request's first choice, for vLLM's per-request `metrics`.
#[derive(Clone, Copy, Default)]
struct EngineTimes {
    queued_ns: u64,
    scheduled_ns: u64,
    first_ns: u64,
    last_ns: u64,
    tokens: u64,
}

impl EngineTimes {
    fn note(&mut self, e: &Emission) {
        if self.tokens == 0 {
            self.queued_ns = e.queued_ns;
            self.scheduled_ns = e.scheduled_ns;
            self.first_ns = e.due_ns;
        }
        self.last_ns = e.due_ns;
        self.tokens += 1;
    }

    /// vLLM's `build_per_request_timing_metrics` over the same four times, in pydantic's field
    /// order: milliseconds; `mean_itl_ms` only past one token, `tokens_per_second` only over a
    /// positive time (vLLM leaves out what is None).
    fn fields(&self) -> [(&'static str, Option<f64>); 5] {
        let ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e6;
        let generation = ms(self.first_ns, self.last_ns);
        let inference = ms(self.scheduled_ns, self.last_ns);
        [
            (
                "time_to_first_token_ms",
                Some(ms(self.scheduled_ns, self.first_ns)),
            ),
            ("generation_time_ms", Some(generation)),
            ("queue_time_ms", Some(ms(self.queued_ns, self.scheduled_ns))),
            (
                "mean_itl_ms",
                (self.tokens > 1).then(|| generation / (self.tokens - 1) as f64),
            ),
            (
                "tokens_per_second",
                (inference > 0.0).then(|| self.tokens as f64 / inference * 1000.0),
            ),
        ]
    }

    /// `,"metrics":{...}` for a stream's final usage chunk.
    fn write_into(&self, out: &mut String) {
        out.push_str(",\"metrics\":{");
        let mut sep = "";
        for (k, v) in self.fields() {
            if let Some(v) = v {
                let _ = write!(out, "{sep}\"{k}\":{v:?}");
                sep = ",";
            }
        }
        out.push('}');
    }

    /// The same object for a whole answer.
    fn to_json(self) -> Value {
        let m: serde_json::Map<String, Value> = self
            .fields()
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), json!(v?))))
            .collect();
        Value::Object(m)
    }
}

/// The streaming body: emissions in, one SSE event per chunk out.
pub struct SseBody {
    app: Arc<App>,
    ctl: Arc<ConnCtl>,
    rx: UnboundedReceiver<Emission>,
    meta: Meta,
    guard: AbortGuard,
    rid_json: Arc<str>,
    /// The request's arrival (ns since server start, raw), for the trace.
    arrival: (u64, u64),
    pending: VecDeque<Pending>,
    role_sent: Vec<bool>,
    finished: u64,
    completion_tokens: u64,
    /// Token chunks handed to hyper so far (fault triggers count these).
    sent_tokens: u32,
    fault: Option<Fault>,
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    state: State,
    truncate_flushed: bool,
    line: String,
    /// The output so far (SGLang's cumulative events, TGI's `generated_text`; one choice).
    output: Output,
    cached_tokens: u64,
    /// The first choice's engine times (vLLM's per-request `metrics`).
    times: EngineTimes,
    /// The Responses API's event writer (that flavor only).
    responses: Option<Box<responses::Writer>>,
}

fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

impl SseBody {
    fn usage_into(&mut self) {
        let (p, c) = (self.meta.prompt_tokens, self.completion_tokens);
        let _ = write!(
            self.line,
            ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c}}}",
            p + c
        );
    }

    fn head_into(&mut self) {
        let object = if self.meta.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        self.line.clear();
        let _ = write!(
            self.line,
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"created\":{},\"model\":\"",
            self.meta.id, self.meta.created
        );
        let model = std::mem::take(&mut self.meta.model);
        escape_into(&mut self.line, &model);
        self.meta.model = model;
        self.line.push_str("\",\"choices\":[");
    }

    fn push_line(&mut self, token: Option<TokenFacts>) {
        self.line.push_str("}\n\n");
        self.pending.push_back(Pending {
            bytes: Bytes::copy_from_slice(self.line.as_bytes()),
            token,
        });
    }

    /// The event for one emission on a native endpoint (one choice).
    fn on_native_emission(&mut self, e: Emission) {
        self.completion_tokens += 1;
        if e.index == 0 {
            self.cached_tokens = e.cached_tokens as u64;
        }
        let app = self.app.clone();
        let piece = String::from_utf8_lossy(app.tok.piece(e.token).unwrap_or(b""));
        self.output.text.push_str(&piece);
        self.output.ids.push(e.token);
        let facts = EventFacts {
            rid: &self.meta.rid,
            prompt_tokens: self.meta.prompt_tokens,
            cached_tokens: self.cached_tokens,
            token: e.token,
            piece: &piece,
            finish: e.finish,
            details: self.meta.details,
        };
        let mut line = std::mem::take(&mut self.line);
        if self.meta.flavor == Flavor::Sglang {
            native::sglang_event(&mut line, &self.output, &facts);
        } else {
            native::tgi_event(&mut line, self.completion_tokens, &self.output, &facts);
        }
        self.line = line;
        self.push_line(Some(TokenFacts::of(0, &e)));
        if e.finish.is_some() {
            self.finished += 1;
            self.finish_stream();
        }
    }

    /// The Responses events for one emission (one choice): the message item opened before
    /// the first token, one delta per token, the `.done` events and `response.completed` after
    /// the last.
    fn on_responses_emission(&mut self, e: Emission) {
        self.completion_tokens += 1;
        if e.index == 0 {
            self.cached_tokens = e.cached_tokens as u64;
        }
        let app = self.app.clone();
        let piece = String::from_utf8_lossy(app.tok.piece(e.token).unwrap_or(b""));
        let Some(w) = self.responses.as_mut() else {
            return;
        };
        for line in w.open() {
            self.pending.push_back(Pending {
                bytes: Bytes::from(line),
                token: None,
            });
        }
        self.pending.push_back(Pending {
            bytes: Bytes::from(w.delta(&piece)),
            token: Some(TokenFacts::of(0, &e)),
        });
        if let Some(f) = e.finish {
            let done = responses::Done {
                output_tokens: self.completion_tokens,
                cached_tokens: self.cached_tokens,
                incomplete: f.as_str() == "length",
            };
            for line in w.finish(&done) {
                self.pending.push_back(Pending {
                    bytes: Bytes::from(line),
                    token: None,
                });
            }
            self.finished += 1;
            self.state = State::Ended;
        }
    }

    /// The chunk(s) for one emission.
    fn on_emission(&mut self, e: Emission) {
        if matches!(self.meta.flavor, Flavor::Sglang | Flavor::Tgi) {
            return self.on_native_emission(e);
        }
        if self.meta.flavor == Flavor::Responses {
            return self.on_responses_emission(e);
        }
        let choice = (e.tag - self.guard.base) as u32;
        if self.meta.chat && !self.role_sent[choice as usize] {
            self.role_sent[choice as usize] = true;
            self.head_into();
            let _ = write!(
                self.line,
                "{{\"index\":{choice},\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]"
            );
            if self.meta.continuous {
                self.usage_into();
            }
            self.push_line(None);
        }
        self.completion_tokens += 1;
        if choice == 0 {
            self.times.note(&e);
        }
        let app = self.app.clone();
        let piece = String::from_utf8_lossy(app.tok.piece(e.token).unwrap_or(b""));
        self.head_into();
        let _ = write!(self.line, "{{\"index\":{choice},");
        if self.meta.chat {
            self.line.push_str("\"delta\":{\"content\":\"");
            escape_into(&mut self.line, &piece);
            self.line
                .push_str("\"},\"logprobs\":null,\"finish_reason\":");
        } else {
            self.line.push_str("\"text\":\"");
            escape_into(&mut self.line, &piece);
            self.line
                .push_str("\",\"logprobs\":null,\"finish_reason\":");
        }
        match e.finish {
            Some(f) => {
                let _ = write!(self.line, "\"{}\"", f.as_str());
            }
            None => self.line.push_str("null"),
        }
        self.line.push_str(",\"stop_reason\":null");
        if self.meta.return_token_ids {
            let _ = write!(self.line, ",\"token_ids\":[{}]", e.token);
        }
        self.line.push_str("}]");
        if self.meta.continuous {
            self.usage_into();
        }
        self.push_line(Some(TokenFacts::of(choice, &e)));
        if e.finish.is_some() {
            self.finished += 1;
            if self.finished == self.guard.choices {
                self.finish_stream();
            }
        }
    }

    fn finish_stream(&mut self) {
        if self.meta.include_usage {
            self.head_into();
            self.line.push(']');
            self.usage_into();
            // vLLM: on the final usage chunk only, and not for several choices.
            if self.app.cfg.per_request_metrics && self.guard.choices == 1 {
                let times = self.times;
                times.write_into(&mut self.line);
            }
            self.push_line(None);
        }
        // TGI's stream simply ends after the event that carries `generated_text`.
        if self.meta.flavor != Flavor::Tgi {
            self.pending.push_back(Pending {
                bytes: Bytes::from_static(b"data: [DONE]\n\n"),
                token: None,
            });
        }
        self.state = State::Ended;
    }

    /// Return `Pending` for a moment: hyper flushes its buffer whenever the body is pending,
    /// so the bytes handed out so far reach the socket before a byte-level fault.
    fn flush_pause(&mut self, cx: &mut Context<'_>) {
        let mut s = Box::pin(tokio::time::sleep(std::time::Duration::from_millis(1)));
        let _ = s.as_mut().poll(cx);
        self.stall = Some(s);
    }

    /// Faults that fire once `sent_tokens` tokens are out.
    fn fire_faults(&mut self, cx: &mut Context<'_>) {
        let Some(f) = self.fault else { return };
        let n = self.sent_tokens;
        match f {
            Fault::ResetAfter(k) if n >= k => {
                self.fault = None;
                self.ctl.reset_on_close();
                self.pending.clear();
                self.state = State::Abort;
                // Let hyper flush what it already holds before the RST, else it is lost.
                self.flush_pause(cx);
            }
            Fault::StallAfter { after, ms } if n >= after => {
                self.fault = None;
                let mut s = Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms)));
                // Register the timer now so its wake-up is not lost.
                let _ = s.as_mut().poll(cx);
                self.stall = Some(s);
            }
            Fault::ErrorAfter(k) if n >= k => {
                self.fault = None;
                self.pending.clear();
                self.app.driver.abort(
                    &(self.guard.base..self.guard.base + self.guard.choices).collect::<Vec<_>>(),
                );
                let msg = "mock fault: the engine failed while generating";
                let event = match self.meta.flavor {
                    // TGI: `InferError` as an event, no `[DONE]`.
                    Flavor::Tgi => format!(
                        "data:{}\n\n",
                        json!({"error": msg, "error_type": "generation"})
                    ),
                    Flavor::Sglang => format!(
                        "data: {}\n\ndata: [DONE]\n\n",
                        json!({"error": {"message": msg, "type": "invalid_request_error", "code": 500, "retryable": false}})
                    ),
                    Flavor::Responses => self
                        .responses
                        .as_mut()
                        .map(|w| w.error(msg))
                        .unwrap_or_default(),
                    Flavor::Completions | Flavor::Chat => format!(
                        "data: {}\n\ndata: [DONE]\n\n",
                        json!({"error": {"message": msg, "type": "InternalServerError", "param": null, "code": 500}})
                    ),
                };
                self.pending.push_back(Pending {
                    bytes: Bytes::from(event),
                    token: None,
                });
                self.state = State::Ended;
            }
            Fault::MalformedAfter(k) if n >= k => {
                self.fault = None;
                let bad = format!(
                    "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"choices\":[{{\"index\":0,\"text\":\n\n",
                    self.meta.id
                );
                self.pending.push_front(Pending {
                    bytes: Bytes::from(bad),
                    token: None,
                });
            }
            _ => {}
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        loop {
            if let Some(s) = self.stall.as_mut() {
                if s.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.stall = None;
            }
            if self.state == State::Abort {
                self.state = State::Ended;
                self.pending.clear();
                return Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock fault: connection reset",
                ))));
            }
            if self.stall.is_none() && self.state != State::Ended {
                self.fire_faults(cx);
                if self.stall.is_some() || self.state == State::Abort {
                    continue;
                }
            }
            if let Some(p) = self.pending.pop_front() {
                if let Some(TokenFacts {
                    choice,
                    index,
                    due_ns,
                    queued_ns,
                    scheduled_ns,
                }) = p.token
                {
                    if let Some(Fault::TruncateAfter(k)) = self.fault {
                        if self.sent_tokens >= k {
                            if !self.truncate_flushed {
                                // First get the earlier chunks out whole, then cut this one.
                                self.truncate_flushed = true;
                                self.pending.push_front(p);
                                self.flush_pause(cx);
                                continue;
                            }
                            self.fault = None;
                            self.ctl.arm_truncate();
                            self.state = State::Abort;
                            self.pending.clear();
                            // Pending next, so hyper writes (and cuts) this chunk first.
                            self.flush_pause(cx);
                        }
                    }
                    self.sent_tokens += 1;
                    if let Some(t) = &self.ctl.stamper {
                        t.queue(TraceRec {
                            request_id_json: self.rid_json.clone(),
                            choice,
                            index,
                            t_ns: 0,
                            due_ns,
                            t_raw: 0,
                            t_before_raw: 0,
                            t_sent_raw: 0,
                            arrival_ns: self.arrival.0,
                            arrival_raw: self.arrival.1,
                            queued_ns,
                            scheduled_ns,
                            images: self.meta.images,
                            image_tokens: self.meta.image_tokens,
                        });
                    }
                }
                return Poll::Ready(Some(Ok(Frame::data(p.bytes))));
            }
            if self.state == State::Ended {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(e)) => {
                    self.on_emission(e);
                    // Drain whatever else is already due (usually nothing) so the queue of
                    // chunks reflects the engine, one chunk per poll.
                }
                Poll::Ready(None) => {
                    // The engine stopped (server shutting down): end the stream as vLLM does
                    // when aborted, with [DONE] and no usage (the Responses stream just ends).
                    if self.meta.flavor != Flavor::Responses {
                        self.pending.push_back(Pending {
                            bytes: Bytes::from_static(b"data: [DONE]\n\n"),
                            token: None,
                        });
                    }
                    self.state = State::Ended;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One table row: body, chat?, expected Ok(prompt lengths, max_tokens) or Err(substring).
    fn check(body: Value, chat: bool, expect: Result<(Vec<usize>, Option<u32>), &str>) {
        let tok = Tokenizer::new();
        let got = parse_generate(&tok, 100, &body, chat);
        match (got, expect) {
            (Ok(g), Ok((lens, max))) => {
                assert_eq!(
                    g.prompts.iter().map(Vec::len).collect::<Vec<_>>(),
                    lens,
                    "{body}"
                );
                assert_eq!(g.max_tokens, max, "{body}");
            }
            (Err(e), Err(want)) => assert!(e.contains(want), "{body}: {e}"),
            (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn generate_requests_parse_like_vllm() {
        check(
            json!({"prompt": " the the", "max_tokens": 5}),
            false,
            Ok((vec![2], Some(5))),
        );
        check(json!({"prompt": [1, 2, 3]}), false, Ok((vec![3], None)));
        check(
            json!({"prompt": ["a", " the house"]}),
            false,
            Ok((vec![1, 2], None)),
        );
        check(
            json!({"prompt": [[1], [2, 3]]}),
            false,
            Ok((vec![1, 2], None)),
        );
        check(json!({"prompt": []}), false, Err("empty"));
        check(
            json!({"prompt": [1, "a"]}),
            false,
            Err("outside the vocabulary"),
        );
        check(json!({"prompt": ""}), false, Err("at least one token"));
        check(json!({"prompt": 5}), false, Err("`prompt` is required"));
        check(
            json!({"prompt": "the", "max_tokens": -1}),
            false,
            Err("non-negative"),
        );
        check(
            json!({"prompt": "the", "max_tokens": 0}),
            false,
            Err("at least 1"),
        );
        check(
            json!({"prompt": " the".repeat(90), "max_tokens": 11}),
            false,
            Err("maximum context length is 100"),
        );
        check(
            json!({"prompt": " the".repeat(100)}),
            false,
            Err("maximum context length"),
        );
        let msgs = json!([{"role": "user", "content": "the"}]);
        check(
            json!({"messages": msgs, "max_completion_tokens": 3, "max_tokens": 9}),
            true,
            Ok((vec![6], Some(3))),
        );
        check(
            json!({"messages": msgs, "max_tokens": 9}),
            true,
            Ok((vec![6], Some(9))),
        );
        check(json!({"messages": [{"content": "x"}]}), true, Err("`role`"));
        check(json!({"prompt": "x"}), true, Err("`messages`"));
    }
}
