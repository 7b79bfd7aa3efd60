//! maslens-server: HTTP serving.
//!
//! - [`serve`]: `maslens serve`: OpenTelemetry traces in (OTLP/HTTP), the store, diagnosis on
//!   arrival and on request, write-back, the JSON API.
//! - An OpenAI-compatible endpoint (`POST /v1/chat/completions`, `GET /v1/models`) over any
//!   [`ChatModel`], used by `maslens serve-model` to put the embedded GGUF model behind the
//!   protocol every OpenAI client speaks. `response_format` with a JSON schema becomes a grammar
//!   on the embedded model, so the answer matches the schema; usage includes
//!   `prompt_tokens_details.cached_tokens` (prefix-cache reuse).
//!
//! `stream: true` is answered as server-sent events: piece by piece as tokens are generated when
//! the router has a [`StreamingModel`] (the embedded model, feature `local`), else the whole
//! answer in one chunk.

pub mod serve;
pub mod tools;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use maslens_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, Role};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Default `max_tokens` when a request sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// Largest request body `serve-model` reads (2 MiB, axum's default, stated so that the 413
/// answer can say it); a larger one is refused with an OpenAI-shaped 413 before it is parsed.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A model that hands out its answer piece by piece while generating (blocking; the server runs
/// it on a blocking thread).
///
/// `cancelled` is asked while generating; once it says yes the model stops (within a token) and
/// returns [`LlmError::Cancelled`]. The server says yes when the client has gone away, so an
/// abandoned request does not hold the model for the rest of its answer.
pub trait StreamingModel: Send + Sync {
    fn complete_streaming_blocking(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ChatResponse, LlmError>;
}

#[cfg(feature = "local")]
impl StreamingModel for maslens_llm::local::LocalModel {
    fn complete_streaming_blocking(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ChatResponse, LlmError> {
        self.complete_cancellable_blocking(request, on_text, cancelled)
    }
}

/// Sets its flag when dropped: held by a request handler, it tells the generating thread that
/// hyper dropped the handler (the client closed the connection).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

struct AppState {
    model: Arc<dyn ChatModel>,
    streamer: Option<Arc<dyn StreamingModel>>,
    /// The model name clients see in `/v1/models` and in responses.
    name: String,
    created: u64,
    requests: AtomicU64,
}

/// The OpenAI-compatible routes over `model`, announced as `served_name`.
pub fn router(model: Arc<dyn ChatModel>, served_name: impl Into<String>) -> Router {
    router_with_streaming(model, None, served_name)
}

/// Like [`router`]; `stream: true` requests go to `streamer` (the same model) token by token.
pub fn router_with_streaming(
    model: Arc<dyn ChatModel>,
    streamer: Option<Arc<dyn StreamingModel>>,
    served_name: impl Into<String>,
) -> Router {
    let state = Arc::new(AppState {
        model,
        streamer,
        name: served_name.into(),
        created: now_secs(),
        requests: AtomicU64::new(0),
    });
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(list_models))
        .route("/health", get(|| async { "ok" }))
        .fallback(|| async {
            api_error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "no such route",
            )
        })
        .method_not_allowed_fallback(|| async {
            api_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method not allowed on this route (POST /v1/chat/completions, GET /v1/models)",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stopping.send(());
    });
    // In-flight requests get SHUTDOWN_GRACE to finish; then the rest (a live-progress stream,
    // a stalled client) are dropped, so a stop never waits on a client.
    tokio::select! {
        r = std::future::IntoFuture::into_future(server) => r,
        _ = async {
            if stopped.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => Ok(()),
    }
}

/// How long a stopping server waits for in-flight requests.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (what systemd, Docker and Kubernetes send), so that
/// both drain in-flight requests through [`serve`]'s graceful shutdown.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An OpenAI-shaped error response.
fn api_error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": null, "code": null}});
    (status, Json(body)).into_response()
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.name,
            "object": "model",
            "created": state.created,
            "owned_by": "maslens",
            "context_length": state.model.context_size(),
        }]
    }))
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    // axum's own rejection is plain text; OpenAI clients read `error.message` from JSON.
    let body = match body {
        Ok(b) => b,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return api_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!(
                    "the request body is larger than this server's limit of {} bytes ({} MiB)",
                    MAX_BODY_BYTES,
                    MAX_BODY_BYTES / (1024 * 1024)
                ),
            )
        }
        Err(rejection) => {
            return api_error(
                rejection.status(),
                "invalid_request_error",
                format!("cannot read the request body: {}", rejection.body_text()),
            )
        }
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("body is not JSON: {e}"),
            )
        }
    };
    let parsed = match parse_request(&value) {
        Ok(p) => p,
        Err(message) => {
            return api_error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    };
    let n = state.requests.fetch_add(1, Ordering::Relaxed);
    let id = format!("chatcmpl-maslens-{n}");
    // An answer that may be a tool call is generated whole, then sent (streamed as one chunk):
    // whether it is a call is known only at its end.
    let tools = parsed.tools.clone();
    let answer = |response: &ChatResponse| -> Response {
        let calls = tools.as_ref().and_then(|t| t.calls_in(&response.text, &id));
        let mut reply = if parsed.stream {
            sse_response(&state.name, &id, response, calls)
        } else {
            Json(completion_json_with(&state.name, &id, response, calls)).into_response()
        };
        // How long the request waited for the model (behind another request), measured where
        // the model is taken: what a client-side timing cannot separate from its own jitter.
        let ms = |us: u64| header::HeaderValue::from_str(&format!("{:.3}", us as f64 / 1000.0));
        if let Ok(v) = ms(response.queue.waited_us) {
            reply.headers_mut().insert(QUEUE_HEADER, v);
        }
        if let Some(Ok(v)) = response.queue.holder_last_step_us.map(ms) {
            reply.headers_mut().insert(QUEUE_HOLDER_STEP_HEADER, v);
        }
        reply
    };
    if let Some(streamer) = state.streamer.clone() {
        if parsed.stream && tools.is_none() {
            return token_stream(streamer, state.name.clone(), id.clone(), parsed.request);
        }
        // Not streamed: generate on a blocking thread that stops when this handler is dropped.
        let cancel = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(cancel.clone());
        let request = parsed.request;
        let result = tokio::task::spawn_blocking(move || {
            streamer.complete_streaming_blocking(&request, &mut |_| {}, &|| {
                cancel.load(Ordering::Relaxed)
            })
        })
        .await;
        return match result {
            Ok(Ok(response)) => answer(&response),
            Ok(Err(err)) => model_error(err),
            Err(e) => model_error(LlmError::Local(format!("the inference thread failed: {e}"))),
        };
    }
    match state.model.complete(&parsed.request).await {
        Ok(response) => answer(&response),
        Err(err) => model_error(err),
    }
}

fn model_error(err: LlmError) -> Response {
    let message = err.to_string();
    tracing::warn!("chat completion failed: {message}");
    match &err {
        LlmError::Local(m) if m.contains("does not fit the context") => {
            api_error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
        LlmError::Spec { .. } | LlmError::InvalidRequest(_) => {
            api_error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
        LlmError::Budget(_) => {
            api_error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
        }
        _ => api_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message),
    }
}

fn usage_json(r: &ChatResponse) -> Value {
    json!({
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "total_tokens": r.usage.prompt_tokens + r.usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": r.usage.cached_tokens},
    })
}

/// The non-streaming `chat.completion` object.
pub fn completion_json(model: &str, id: &str, r: &ChatResponse) -> Value {
    completion_json_with(model, id, r, None)
}

/// [`completion_json`], answering with `tool_calls` (content null, `finish_reason`
/// `tool_calls`) when the answer made calls.
pub fn completion_json_with(
    model: &str,
    id: &str,
    r: &ChatResponse,
    calls: Option<Vec<Value>>,
) -> Value {
    if let Some(calls) = calls {
        return json!({
            "id": id,
            "object": "chat.completion",
            "created": now_secs(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }],
            "usage": usage_json(r),
        });
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": now_secs(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": r.text},
            "finish_reason": r.finish_reason,
        }],
        "usage": usage_json(r),
    })
}

/// One `chat.completion.chunk` server-sent event.
fn sse_chunk(
    model: &str,
    id: &str,
    created: u64,
    delta: Value,
    finish: Value,
    usage: Option<Value>,
) -> String {
    let mut c = json!({
        "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    if let Some(u) = usage {
        c["usage"] = u;
    }
    format!("data: {c}\n\n")
}

/// Response header of a chat completion answered whole (not token-streamed): milliseconds the
/// request waited for the model while another request held it.
pub const QUEUE_HEADER: &str = "x-maslens-queue-ms";

/// Response header next to [`QUEUE_HEADER`] when the model was busy: milliseconds the request
/// holding it spent on its last step (from its last check for cancellation to handing the model
/// over). An abandoned request stops at its next check, so the wait behind it is about this.
pub const QUEUE_HOLDER_STEP_HEADER: &str = "x-maslens-queue-holder-step-ms";

const SSE_HEADERS: [(header::HeaderName, &str); 2] = [
    (header::CONTENT_TYPE, "text/event-stream"),
    (header::CACHE_CONTROL, "no-cache"),
];

/// The whole answer as one SSE chunk (models without a [`StreamingModel`], and answers that
/// may be tool calls), with its `tool_calls` when it made calls.
fn sse_response(model: &str, id: &str, r: &ChatResponse, calls: Option<Vec<Value>>) -> Response {
    let created = now_secs();
    let (delta, finish) = match calls {
        Some(calls) => {
            let indexed: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    c["index"] = json!(i);
                    c
                })
                .collect();
            (
                json!({"role": "assistant", "content": null, "tool_calls": indexed}),
                json!("tool_calls"),
            )
        }
        None => (
            json!({"role": "assistant", "content": r.text}),
            json!(r.finish_reason),
        ),
    };
    let mut body = sse_chunk(model, id, created, delta, Value::Null, None);
    body.push_str(&sse_chunk(
        model,
        id,
        created,
        json!({}),
        finish,
        Some(usage_json(r)),
    ));
    body.push_str("data: [DONE]\n\n");
    (SSE_HEADERS, body).into_response()
}

/// Stream the answer as it is generated: a role chunk, one chunk per piece, a final chunk with
/// `finish_reason` and usage, `[DONE]`. A failure mid-stream ends it with an `error` event.
fn token_stream(
    streamer: Arc<dyn StreamingModel>,
    model: String,
    id: String,
    request: ChatRequest,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let created = now_secs();
    tokio::task::spawn_blocking(move || {
        let _ = tx.send(sse_chunk(
            &model,
            &id,
            created,
            json!({"role": "assistant", "content": ""}),
            Value::Null,
            None,
        ));
        // The receiver is the response body: hyper drops it when the client goes away.
        let result = streamer.complete_streaming_blocking(
            &request,
            &mut |piece| {
                let _ = tx.send(sse_chunk(
                    &model,
                    &id,
                    created,
                    json!({"content": piece}),
                    Value::Null,
                    None,
                ));
            },
            &|| tx.is_closed(),
        );
        match result {
            Ok(r) => {
                let _ = tx.send(sse_chunk(
                    &model,
                    &id,
                    created,
                    json!({}),
                    json!(r.finish_reason),
                    Some(usage_json(&r)),
                ));
                let _ = tx.send("data: [DONE]\n\n".to_string());
            }
            Err(LlmError::Cancelled(_)) => {
                tracing::debug!("streamed chat completion cancelled: the client went away");
            }
            Err(e) => {
                tracing::warn!("streamed chat completion failed: {e}");
                let err = json!({"error": {"message": e.to_string(), "type": "server_error"}});
                let _ = tx.send(format!("data: {err}\n\n"));
            }
        }
    });
    (
        SSE_HEADERS,
        axum::body::Body::from_stream(ChannelStream(rx)),
    )
        .into_response()
}

/// An mpsc receiver as a byte stream for the response body.
struct ChannelStream(tokio::sync::mpsc::UnboundedReceiver<String>);

impl futures_core::Stream for ChannelStream {
    type Item = Result<Bytes, std::convert::Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|o| o.map(|s| Ok(Bytes::from(s))))
    }
}

/// A parsed `/v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub request: ChatRequest,
    pub stream: bool,
    /// `tools` / `tool_choice` ([`tools`]): the answer may be a tool call.
    pub tools: Option<tools::Tools>,
}

/// Turn an OpenAI chat-completions body into a [`ChatRequest`]; the error says which field is wrong.
///
/// Departures from OpenAI: `temperature` defaults to 0 (greedy, deterministic) rather than 1;
/// `max_tokens` defaults to [`DEFAULT_MAX_TOKENS`]; a non-standard `grammar` field (GBNF, as
/// llama.cpp's server takes it) is honoured. `tools`, `tool_choice`, `tool` messages and
/// assistant `tool_calls` are read as [`tools`] says.
pub fn parse_request(v: &Value) -> Result<ParsedRequest, String> {
    let obj = v.as_object().ok_or("the body must be a JSON object")?;
    let messages_v = obj.get("messages").ok_or("missing field `messages`")?;
    let messages_a = messages_v.as_array().ok_or("`messages` must be an array")?;
    if messages_a.is_empty() {
        return Err("`messages` is empty".into());
    }
    let mut messages = Vec::with_capacity(messages_a.len());
    for (i, m) in messages_a.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or(format!("messages[{i}].role is missing"))?;
        let role = match role {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::User,
            other => return Err(format!("messages[{i}].role {other:?} is not supported (system, developer, user, assistant, tool)")),
        };
        let is_tool = m.get("role").and_then(Value::as_str) == Some("tool");
        let content = match m.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => {
                            return Err(format!(
                                "messages[{i}].content[{j}]: only text parts are supported"
                            ))
                        }
                    }
                }
                text
            }
            Some(_) => {
                return Err(format!(
                    "messages[{i}].content must be a string or an array of text parts"
                ))
            }
        };
        if is_tool {
            messages.push(tools::tool_result_message(m, content));
            continue;
        }
        let content = match m.get("tool_calls") {
            Some(calls) if !calls.is_null() && role == Role::Assistant => {
                let call_text = tools::calls_as_text(calls, i)?;
                if content.is_empty() {
                    call_text
                } else {
                    format!("{content}\n{call_text}")
                }
            }
            _ => content,
        };
        messages.push(Message { role, content });
    }
    let tools = tools::parse_tools(obj)?;
    if let Some(t) = &tools {
        tools::add_instructions(&mut messages, t);
    }
    let mut request = ChatRequest::new(messages);
    request.seed = None;

    let num = |key: &str| -> Result<Option<f64>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .map(Some)
                .ok_or(format!("`{key}` must be a number")),
        }
    };
    if let Some(t) = num("temperature")? {
        if !(0.0..=2.0).contains(&t) {
            return Err(format!("`temperature` {t} is outside [0, 2]"));
        }
        request.temperature = t as f32;
    }
    if let Some(p) = num("top_p")? {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("`top_p` {p} is outside [0, 1]"));
        }
        request.top_p = Some(p as f32);
    }
    let max_tokens = match (obj.get("max_completion_tokens"), obj.get("max_tokens")) {
        (Some(x), _) if !x.is_null() => Some(("max_completion_tokens", x)),
        (_, Some(x)) if !x.is_null() => Some(("max_tokens", x)),
        _ => None,
    };
    request.max_tokens = match max_tokens {
        Some((key, x)) => match x.as_u64() {
            Some(0) => return Err(format!("`{key}` must be at least 1, got 0")),
            Some(n) => u32::try_from(n).map_err(|_| {
                format!(
                    "`{key}` {n} is too large: at most {} (an answer also ends where the model's \
                     context window does; leave it out for the default of {DEFAULT_MAX_TOKENS})",
                    u32::MAX
                )
            })?,
            None => return Err(format!("`{key}` must be a positive integer, got {x}")),
        },
        None => DEFAULT_MAX_TOKENS,
    };
    if let Some(seed) = obj.get("seed").filter(|s| !s.is_null()) {
        request.seed = Some(
            seed.as_u64()
                .or_else(|| seed.as_i64().map(|s| s as u64))
                .ok_or("`seed` must be an integer")?,
        );
    }
    request.stop = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or("`stop` entries must be strings")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`stop` must be a string or an array of strings".into()),
    };
    if let Some(n) = obj.get("n").filter(|n| !n.is_null()) {
        if n.as_u64() != Some(1) {
            return Err("only `n`: 1 is supported".into());
        }
    }
    match obj.get("response_format") {
        None | Some(Value::Null) => {}
        Some(rf) => match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => request.json_schema = Some(json!({"type": "object"})),
            Some("json_schema") => {
                let schema = rf
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .ok_or("`response_format.json_schema.schema` is missing")?;
                if !schema.is_object() && !schema.is_boolean() {
                    return Err("`response_format.json_schema.schema` must be a JSON schema object".into());
                }
                request.json_schema = Some(schema.clone());
            }
            other => {
                return Err(format!(
                    "`response_format.type` {other:?} is not supported (text, json_object, json_schema)"
                ))
            }
        },
    }
    match obj.get("grammar") {
        None | Some(Value::Null) => {}
        Some(Value::String(g)) => request.grammar = Some(g.clone()),
        Some(_) => return Err("`grammar` must be a GBNF string".into()),
    }
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("`stream` must be a boolean".into()),
    };
    if let Some(schema) = tools.as_ref().and_then(tools::Tools::call_schema) {
        if request.json_schema.is_some() || request.grammar.is_some() {
            return Err(
                "`tool_choice` forces a tool call, which cannot be combined with `response_format` or `grammar`"
                    .into(),
            );
        }
        request.json_schema = Some(schema);
    }
    request.stage = "serve".into();
    Ok(ParsedRequest {
        request,
        stream,
        tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_openai_body() {
        let body = json!({
            "model": "whatever",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}
            ],
            "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7, "seed": 3,
            "stop": "END",
            "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}}
        });
        let p = parse_request(&body).unwrap();
        assert!(!p.stream);
        let r = p.request;
        assert_eq!(
            r.messages,
            vec![Message::system("be brief"), Message::user("hello there")]
        );
        assert_eq!(
            (r.temperature, r.top_p, r.max_tokens, r.seed),
            (0.5, Some(0.9), 7, Some(3))
        );
        assert_eq!(r.stop, vec!["END".to_string()]);
        assert_eq!(r.json_schema, Some(json!({"type": "object"})));
    }

    #[test]
    fn defaults_are_greedy_and_bounded() {
        let p = parse_request(
            &json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}),
        )
        .unwrap();
        assert!(p.stream);
        assert_eq!(p.request.temperature, 0.0);
        assert_eq!(p.request.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(p.request.json_schema, None);
    }

    #[test]
    fn tool_requests_render_history_and_constrain_forced_calls() {
        let body = json!({
            "messages": [
                {"role": "system", "content": "You triage."},
                {"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                  "function": {"name": "transfer_to_math", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{\"assistant\": \"Math\"}"},
            ],
            "tools": [{"type": "function", "function": {"name": "transfer_to_math", "parameters":
                {"type": "object", "properties": {}, "additionalProperties": false}}}],
            "tool_choice": "required",
        });
        let p = parse_request(&body).unwrap();
        let m = &p.request.messages;
        assert_eq!(m.len(), 4);
        assert!(m[0]
            .content
            .starts_with("You triage.\n\nYou can call these functions:"));
        assert_eq!(m[2].role, Role::Assistant);
        assert_eq!(
            m[2].content,
            r#"{"name": "transfer_to_math", "arguments": {}}"#
        );
        assert_eq!(m[3].role, Role::User);
        assert!(m[3].content.starts_with("Result of call c1:"));
        let schema = p.request.json_schema.unwrap();
        assert_eq!(schema["properties"]["name"]["const"], "transfer_to_math");
        // A forced call's answer comes back as tool_calls.
        let r = ChatResponse {
            text: r#"{"name": "transfer_to_math", "arguments": {}}"#.into(),
            finish_reason: "stop".into(),
            usage: Default::default(),
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        };
        let calls = p.tools.as_ref().unwrap().calls_in(&r.text, "chatcmpl-1");
        let j = completion_json_with("m", "chatcmpl-1", &r, calls);
        assert_eq!(j["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(j["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            j["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "transfer_to_math"
        );
        // Without tools nothing changes: no schema, no calls.
        let plain =
            parse_request(&json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert!(plain.tools.is_none() && plain.request.json_schema.is_none());
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (json!([]), "JSON object"),
            (json!({}), "messages"),
            (json!({"messages": []}), "empty"),
            (
                json!({"messages": [{"role": "function", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]}),
                "messages[0].tool_calls[0].function",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                       "tools": [{"type": "function", "function": {"name": "f"}}],
                       "response_format": {"type": "json_object"}}),
                "cannot be combined",
            ),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "temperature": 9}),
                "temperature",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "`max_tokens` must be at least 1, got 0",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}),
                "`max_tokens` must be a positive integer, got 1.5",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999u64}),
                "`max_tokens` 99999999999 is too large: at most 4294967295",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}),
                "`max_completion_tokens` must be a positive integer, got -3",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "n": 2}),
                "`n`",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "stop": [1]}),
                "stop",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}),
                "schema",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}),
                "xml",
            ),
        ];
        for (body, needle) in cases {
            let err = parse_request(&body).unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
    }
}
