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

pub mod listen;
pub mod memory;
mod request;
pub mod serve;
pub mod tools;

pub use request::{parse_request, ParsedRequest};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use maslens_llm::openai_wire::{Chunk, Completion, Delta, ErrorBody};
use maslens_llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
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

/// Serve `router` on `listener` until `shutdown` resolves: HTTP/1 with a header-read timeout and
/// a cap on open connections ([`listen`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    memory::return_large_buffers_to_the_system();
    listen::serve_with(listener, router, shutdown, listen::Limits::default()).await
}

pub use listen::SHUTDOWN_GRACE;

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
    (status, Json(ErrorBody::new(kind, message))).into_response()
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
    serde_json::to_value(Completion::answer(model, id, now_secs(), r, calls)).unwrap_or_default()
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
            let delta = Delta {
                role: Some("assistant".into()),
                tool_calls: Some(indexed),
                ..Delta::default()
            };
            (delta, "tool_calls")
        }
        None => {
            let delta = Delta {
                role: Some("assistant".into()),
                content: Some(r.text.clone()),
                ..Delta::default()
            };
            (delta, r.finish_reason.as_str())
        }
    };
    let mut body = Chunk::new(model, id, created, delta, None).sse();
    let last = Chunk::new(
        model,
        id,
        created,
        Delta::default(),
        Some((finish, &r.usage)),
    );
    body.push_str(&last.sse());
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
        let role = Delta {
            role: Some("assistant".into()),
            content: Some(String::new()),
            ..Delta::default()
        };
        let _ = tx.send(Chunk::new(&model, &id, created, role, None).sse());
        // The receiver is the response body: hyper drops it when the client goes away.
        let result = streamer.complete_streaming_blocking(
            &request,
            &mut |piece| {
                let delta = Delta {
                    content: Some(piece.to_string()),
                    ..Delta::default()
                };
                let _ = tx.send(Chunk::new(&model, &id, created, delta, None).sse());
            },
            &|| tx.is_closed(),
        );
        match result {
            Ok(r) => {
                let last = Some((r.finish_reason.as_str(), &r.usage));
                let _ = tx.send(Chunk::new(&model, &id, created, Delta::default(), last).sse());
                let _ = tx.send("data: [DONE]\n\n".to_string());
            }
            Err(LlmError::Cancelled(_)) => {
                tracing::debug!("streamed chat completion cancelled: the client went away");
            }
            Err(e) => {
                tracing::warn!("streamed chat completion failed: {e}");
                let err = serde_json::to_string(&ErrorBody::new("server_error", e.to_string()))
                    .unwrap_or_default();
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
