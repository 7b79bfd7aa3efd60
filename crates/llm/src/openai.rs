//! OpenAI-compatible `/v1/chat/completions` backend (OpenAI, vLLM, SGLang, llama.cpp server,
//! Ollama, `maslens serve-model`).
//!
//! Bounded concurrency (a semaphore), an error that quotes the server's answer and carries its
//! `Retry-After` / `retry-after-ms`. Retries (429, 5xx, timeouts, connection resets, unreadable
//! bodies; none on other 4xx) are the [`RetryModel`] layer above it ([`OpenAiModel::retrying`]). JSON schemas go out as `response_format: json_schema`; a server
//! that rejects it is retried with `json_object` and then without, and the downgrade is
//! remembered for the rest of the run.

use crate::retry::{RetryModel, RetryPolicy};
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;

/// How a request's JSON schema is passed to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaMode {
    /// `json_schema`, falling back to `json_object` and then to nothing when the server rejects it.
    #[default]
    Auto,
    /// Always `response_format: {type: json_schema}`; a rejection is an error.
    JsonSchema,
    /// Always `response_format: {type: json_object}` (servers without schema support).
    JsonObject,
    /// Never send `response_format` (the schema is enforced only by validation and repair).
    Off,
}

const LEVEL_SCHEMA: u8 = 0;
const LEVEL_OBJECT: u8 = 1;
const LEVEL_NONE: u8 = 2;

/// Settings of the HTTP backend.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Model name sent in the body (`gpt-4o-mini`).
    pub model: String,
    /// Model id for cache keys and reports (`openai:gpt-4o-mini`).
    pub id: String,
    /// Base URL ending in `/v1` (no trailing slash).
    pub base_url: String,
    pub api_key: Option<String>,
    /// The variable the key was to come from, for the message a 401 without a key gets.
    pub key_env: Option<String>,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Per-request timeout (whole request, body included).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries, backoff and the longest `Retry-After` honoured (the retry layer's policy).
    pub retry: RetryPolicy,
    pub schema_mode: SchemaMode,
    /// Context window, when the user knows it.
    pub context_size: Option<usize>,
}

impl OpenAiConfig {
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        let model = model.into();
        OpenAiConfig {
            id: format!("openai:{model}"),
            model,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
            key_env: None,
            concurrency: 8,
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            schema_mode: SchemaMode::Auto,
            context_size: None,
        }
    }
}

/// The request body for `/v1/chat/completions` (also the `body` of an OpenAI Batch line).
pub fn chat_body(model: &str, request: &ChatRequest, schema_mode: SchemaMode) -> Value {
    let level = match schema_mode {
        SchemaMode::Auto | SchemaMode::JsonSchema => LEVEL_SCHEMA,
        SchemaMode::JsonObject => LEVEL_OBJECT,
        SchemaMode::Off => LEVEL_NONE,
    };
    body_at_level(model, request, level)
}

fn body_at_level(model: &str, request: &ChatRequest, level: u8) -> Value {
    use crate::openai_wire::{ChatBody, Content, JsonSchemaFormat, RequestMessage, ResponseFormat};
    let messages = (request.messages.iter())
        .map(|m| RequestMessage {
            role: role_name(m.role).to_string(),
            content: Some(Content::Text(m.content.clone())),
            ..RequestMessage::default()
        })
        .collect();
    let response_format = match (&request.json_schema, level) {
        (Some(schema), LEVEL_SCHEMA) => Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "response".into(),
                schema: schema.clone(),
                strict: Some(false),
            },
        }),
        (Some(_), LEVEL_OBJECT) => Some(ResponseFormat::JsonObject),
        _ => None,
    };
    let body = ChatBody {
        model: model.to_string(),
        messages,
        temperature: Some(request.temperature),
        top_p: request.top_p,
        max_tokens: Some(u64::from(request.max_tokens)),
        seed: request.seed,
        stop: (!request.stop.is_empty())
            .then(|| crate::openai_wire::Stop::Many(request.stop.clone())),
        response_format,
        ..ChatBody::default()
    };
    // A body of plain fields and JSON values always serializes.
    serde_json::to_value(&body).unwrap_or(Value::Null)
}

/// A role's name on the wire.
fn role_name(role: crate::Role) -> &'static str {
    match role {
        crate::Role::System => "system",
        crate::Role::User => "user",
        crate::Role::Assistant => "assistant",
    }
}

/// Parse a chat-completions response body (the [`crate::openai_wire`] types `serve-model` writes).
pub fn parse_chat_response(body: &Value) -> Result<ChatResponse, String> {
    let completion = crate::openai_wire::Completion::deserialize(body)
        .map_err(|e| format!("not a chat completion: {e}"))?;
    completion.into_response()
}

/// The HTTP backend.
pub struct OpenAiModel {
    cfg: OpenAiConfig,
    url: String,
    client: reqwest::Client,
    permits: Semaphore,
    level: AtomicU8,
    /// Parameter compatibility learnt from the server's 400s (`COMPAT_*` bits).
    compat: AtomicU8,
    attempts: AtomicU64,
}

/// The HTTP client of the HTTP backends: connect timeout, a keep-alive pool as large as the
/// concurrency, no Nagle.
pub(crate) fn http_client(
    connect_timeout: Duration,
    concurrency: usize,
) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_max_idle_per_host(concurrency.max(1))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| LlmError::Other(format!("cannot build the HTTP client: {e}")))
}

/// Send one request and read its JSON body. A non-2xx answer is [`LlmError::Http`] with the body
/// `describe` makes of the status and the raw answer, and the server's `Retry-After`; a
/// connection error or timeout is [`LlmError::Transport`] / [`LlmError::Timeout`]; a body that is
/// not JSON is [`LlmError::BadResponse`].
pub(crate) async fn post_json(
    req: reqwest::RequestBuilder,
    url: &str,
    timeout: Duration,
    describe: impl FnOnce(u16, &[u8]) -> String,
) -> Result<Value, LlmError> {
    let transport = |e| transport_error(url, timeout, e);
    let resp = req.send().await.map_err(transport)?;
    let status = resp.status();
    let retry_after = retry_after(resp.headers());
    let bytes = resp.bytes().await.map_err(transport)?;
    if !status.is_success() {
        return Err(LlmError::Http {
            status: status.as_u16(),
            url: url.to_string(),
            body: describe(status.as_u16(), &bytes),
            retry_after,
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        let mut snippet = String::from_utf8_lossy(&bytes).to_string();
        truncate_chars(&mut snippet, 300);
        LlmError::BadResponse {
            url: url.to_string(),
            message: format!("body is not JSON ({e}): {snippet:?}"),
        }
    })
}

/// A server's error answer as text, trimmed and cut at 2000 characters.
pub(crate) fn error_text(bytes: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(bytes).trim().to_string();
    truncate_chars(&mut text, 2000);
    text
}

pub(crate) fn transport_error(url: &str, timeout: Duration, e: reqwest::Error) -> LlmError {
    if e.is_timeout() {
        LlmError::Timeout {
            url: url.to_string(),
            seconds: timeout.as_secs_f64(),
        }
    } else {
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        LlmError::Transport {
            url: url.to_string(),
            message,
        }
    }
}

impl OpenAiModel {
    pub fn new(cfg: OpenAiConfig) -> Result<Self, LlmError> {
        let client = http_client(cfg.connect_timeout, cfg.concurrency)?;
        let level = match cfg.schema_mode {
            SchemaMode::Auto | SchemaMode::JsonSchema => LEVEL_SCHEMA,
            SchemaMode::JsonObject => LEVEL_OBJECT,
            SchemaMode::Off => LEVEL_NONE,
        };
        Ok(OpenAiModel {
            url: format!("{}/chat/completions", cfg.base_url),
            permits: Semaphore::new(cfg.concurrency.max(1)),
            level: AtomicU8::new(level),
            compat: AtomicU8::new(0),
            attempts: AtomicU64::new(0),
            client,
            cfg,
        })
    }

    /// The backend under the retry layer its configuration asks for (`max_retries`, the
    /// backoff settings): what `maslens_llm::open` builds.
    pub fn retrying(cfg: OpenAiConfig) -> Result<RetryModel<OpenAiModel>, LlmError> {
        let policy = cfg.retry;
        Ok(RetryModel::new(OpenAiModel::new(cfg)?, policy))
    }

    /// HTTP requests sent so far (retries included).
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }

    async fn send_once(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let url = &self.url;
        let mut req = self
            .client
            .post(url)
            .timeout(self.cfg.timeout)
            .json(&crate::schema_order::SchemaOrdered(body));
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key);
        }
        let value = post_json(req, url, self.cfg.timeout, |status, bytes| {
            let mut text = error_text(bytes);
            if status == 401 && self.cfg.api_key.is_none() {
                let var = self.cfg.key_env.as_deref().unwrap_or("OPENAI_API_KEY");
                text.push_str(&format!(
                    " (no API key was sent: set {var}, --api-key-env or `api_key` in the config)"
                ));
            }
            text
        })
        .await?;
        parse_chat_response(&value).map_err(|m| LlmError::BadResponse {
            url: url.clone(),
            message: m,
        })
    }

    /// Whether a 400/422 answer is the server rejecting our `response_format`.
    fn rejects_response_format(err: &LlmError) -> bool {
        match err {
            LlmError::Http {
                status: 400 | 422 | 501,
                body,
                ..
            } => {
                let b = body.to_ascii_lowercase();
                b.contains("response_format")
                    || b.contains("json_schema")
                    || b.contains("json_object")
            }
            _ => false,
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiModel {
    fn id(&self) -> &str {
        &self.cfg.id
    }

    fn context_size(&self) -> Option<usize> {
        self.cfg.context_size
    }

    /// One attempt, adapted to the server: a server that rejects `response_format` or a
    /// parameter gets the request again without it (not a retry: the change is remembered for
    /// the run). Retries are the [`RetryModel`] layer's.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let start = Instant::now();
        loop {
            let level = self.level.load(Ordering::Relaxed);
            let mut body = body_at_level(&self.cfg.model, request, level);
            apply_compat(&mut body, self.compat.load(Ordering::Relaxed));
            let permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| LlmError::Other("backend closed".into()))?;
            let result = self.send_once(&body).await;
            drop(permit);
            let failure = match result {
                Ok(mut resp) => {
                    resp.latency_ms = start.elapsed().as_millis() as u64;
                    return Ok(resp);
                }
                Err(e) => e,
            };
            if request.json_schema.is_some()
                && self.cfg.schema_mode == SchemaMode::Auto
                && level < LEVEL_NONE
                && Self::rejects_response_format(&failure)
            {
                // Downgrade once for the whole run; this is not a retry.
                let _ = self.level.compare_exchange(
                    level,
                    level + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                tracing::warn!(url = %self.url, "server rejected response_format ({failure}); falling back");
                continue;
            }
            if let Some(bit) = compat_fix(&failure) {
                let before = self.compat.fetch_or(bit, Ordering::Relaxed);
                if before & bit == 0 {
                    tracing::warn!(url = %self.url, "adapting the request to the server ({failure}); not a retry");
                    continue;
                }
            }
            return Err(failure);
        }
    }
}

/// Send `max_completion_tokens` instead of `max_tokens` (OpenAI reasoning models).
const COMPAT_MAX_COMPLETION_TOKENS: u8 = 1;
/// Omit `temperature` and `top_p` (models that accept only their defaults).
const COMPAT_NO_SAMPLING_PARAMS: u8 = 2;

/// Which compatibility change a 400 asks for, if any.
fn compat_fix(err: &LlmError) -> Option<u8> {
    let LlmError::Http {
        status: 400, body, ..
    } = err
    else {
        return None;
    };
    let b = body.to_ascii_lowercase();
    if b.contains("max_tokens") && b.contains("max_completion_tokens") {
        return Some(COMPAT_MAX_COMPLETION_TOKENS);
    }
    let unsupported =
        b.contains("unsupported") || b.contains("not supported") || b.contains("does not support");
    if unsupported
        && (b.contains("'temperature'")
            || b.contains("\"temperature\"")
            || b.contains("`temperature`"))
    {
        return Some(COMPAT_NO_SAMPLING_PARAMS);
    }
    None
}

fn apply_compat(body: &mut Value, compat: u8) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    if compat & COMPAT_MAX_COMPLETION_TOKENS != 0 {
        if let Some(n) = obj.remove("max_tokens") {
            obj.insert("max_completion_tokens".into(), n);
        }
    }
    if compat & COMPAT_NO_SAMPLING_PARAMS != 0 {
        obj.remove("temperature");
        obj.remove("top_p");
    }
}

pub(crate) fn truncate_chars(s: &mut String, max: usize) {
    if let Some((idx, _)) = s.char_indices().nth(max) {
        s.truncate(idx);
        s.push_str("...");
    }
}

/// `retry-after-ms` (OpenAI), else `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers.get("retry-after-ms").and_then(|v| v.to_str().ok()) {
        if let Ok(ms) = ms.trim().parse::<f64>() {
            if ms.is_finite() && ms >= 0.0 {
                return Some(Duration::from_secs_f64(ms / 1000.0));
            }
        }
    }
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    parse_retry_after(v, SystemTime::now())
}

/// Parse a `Retry-After` value: delta-seconds, or an IMF-fixdate relative to `now`.
pub fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(v)?;
    let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` -> seconds since the Unix epoch.
fn parse_http_date(v: &str) -> Option<u64> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" {
        return None;
    }
    let day: i64 = parts[1].parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])? as i64
        + 1;
    let year: i64 = parts[3].parse().ok()?;
    let hms: Vec<i64> = parts[4]
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if hms.len() != 3 || !(1..=31).contains(&day) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    u64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Usage};
    use serde_json::json;

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784111777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("0.5", now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:30 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn body_levels() {
        let req =
            ChatRequest::new(vec![Message::user("hi")]).json_schema(json!({"type": "object"}));
        let b = chat_body("m", &req, SchemaMode::Auto);
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(
            b["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert_eq!(b["seed"], 0);
        assert_eq!(
            chat_body("m", &req, SchemaMode::JsonObject)["response_format"]["type"],
            "json_object"
        );
        assert!(chat_body("m", &req, SchemaMode::Off)
            .get("response_format")
            .is_none());
        let plain = chat_body(
            "m",
            &ChatRequest::new(vec![Message::user("hi")]),
            SchemaMode::Auto,
        );
        assert!(plain.get("response_format").is_none());
        assert!(plain.get("stop").is_none());
    }

    #[test]
    fn parses_usage_with_cached_tokens() {
        let body = json!({"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}});
        let r = parse_chat_response(&body).unwrap();
        assert_eq!((r.text.as_str(), r.finish_reason.as_str()), ("ok", "stop"));
        assert_eq!(
            r.usage,
            Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                cached_tokens: 8
            }
        );
        assert!(parse_chat_response(&json!({"choices": []})).is_err());
        let refusal = json!({"choices":[{"message":{"content":null,"refusal":"no"}}]});
        assert!(parse_chat_response(&refusal)
            .unwrap_err()
            .contains("refused"));
    }
}
