//! Native Anthropic Messages API backend (`anthropic:MODEL`, `anthropic/MODEL`).
//!
//! `POST {base}/messages` with `x-api-key` and `anthropic-version: 2023-06-01`. System messages
//! go to the top-level `system` as text blocks, the last one marked
//! `cache_control: {type: ephemeral}`, so the prefix judge and evaluator calls share (tool
//! definition and system prompt) is read from Anthropic's prompt cache. Turns of one role in a
//! row are merged (the API wants user and assistant to alternate, starting with the user).
//!
//! Structured output is a forced tool call: a request's JSON schema becomes the `input_schema`
//! of one tool, `answer`, with `tool_choice` naming it, and the call's `input` is the answer text
//! (serialized JSON) the structured-output parser validates. A schema whose top-level type is not
//! `object` (tools take object inputs only) is wrapped as `{"value": SCHEMA}` and the answer
//! unwrapped.
//!
//! Concurrency and timeouts are those of [`crate::openai`]; retries (429, 5xx including 529
//! `overloaded_error`, timeouts, connection errors; `Retry-After` honoured) are the
//! [`RetryModel`] layer above it, as for the OpenAI backend.

use crate::openai::{error_text, http_client, post_json, truncate_chars};
use crate::retry::{RetryModel, RetryPolicy};
use crate::schema_order::SchemaOrdered;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, Role, Usage};
use reqwest::header::HeaderValue;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The tool a structured answer is given through.
pub const TOOL_NAME: &str = "answer";
const TOOL_DESCRIPTION: &str = "Give your answer: the input of this call is the answer.";
/// The description of a wrapped (non-object) schema's tool; marks the wrapping in batch files.
const TOOL_DESCRIPTION_WRAPPED: &str =
    "Give your answer: the `value` of the input of this call is the answer.";
/// The user turn put first when a conversation has none there (the API requires one).
const FIRST_USER_TURN: &str = "Continue.";

/// Settings of the Anthropic backend.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Model name sent in the body (`claude-3-5-haiku-latest`).
    pub model: String,
    /// Model id for cache keys and reports (`anthropic:claude-3-5-haiku-latest`).
    pub id: String,
    /// Base URL ending in `/v1` (no trailing slash).
    pub base_url: String,
    pub api_key: Option<String>,
    /// The variable the key was to come from, named by the message of a 401 / 403.
    pub key_env: Option<String>,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Per-request timeout (whole request, body included).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries, backoff and the longest `Retry-After` honoured (the retry layer's policy).
    pub retry: RetryPolicy,
    /// Context window, when the user gives it.
    pub context_size: Option<usize>,
}

impl AnthropicConfig {
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        let model = model.into();
        AnthropicConfig {
            id: format!("anthropic:{model}"),
            model,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
            key_env: None,
            concurrency: 8,
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            context_size: None,
        }
    }
}

/// Whether a JSON schema is sent wrapped as `{"value": SCHEMA}` (its top-level type is not
/// `object`).
pub fn wraps(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) != Some("object")
}

/// The tool's `input_schema` for a request schema: the schema itself, or the `{"value": ..}`
/// wrapper with the definitions (`$defs`, `definitions`) moved up so that `#/$defs/..` references
/// still resolve.
fn input_schema(schema: &Value) -> Value {
    if !wraps(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    let mut outer = Map::new();
    if let Some(o) = inner.as_object_mut() {
        for k in ["$defs", "definitions"] {
            if let Some(d) = o.remove(k) {
                outer.insert(k.into(), d);
            }
        }
    }
    outer.insert("type".into(), json!("object"));
    outer.insert("properties".into(), json!({ "value": inner }));
    outer.insert("required".into(), json!(["value"]));
    Value::Object(outer)
}

/// The request body for `POST /v1/messages` (also the `params` of a Message Batches line).
pub fn messages_body(model: &str, request: &ChatRequest) -> Value {
    let mut system: Vec<Value> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.is_empty())
        .map(|m| json!({"type": "text", "text": m.content}))
        .collect();
    if let Some(last) = system.last_mut().and_then(Value::as_object_mut) {
        last.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
    let mut turns: Vec<(Role, String)> = Vec::new();
    for m in &request.messages {
        if m.role == Role::System || m.content.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, text)) if *role == m.role => {
                text.push_str("\n\n");
                text.push_str(&m.content);
            }
            _ => turns.push((m.role, m.content.clone())),
        }
    }
    if turns.first().is_none_or(|(r, _)| *r != Role::User) {
        turns.insert(0, (Role::User, FIRST_USER_TURN.into()));
    }
    // A final assistant turn is a prefill, which may not end in whitespace.
    if let Some((Role::Assistant, text)) = turns.last_mut() {
        text.truncate(text.trim_end().len());
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(request.max_tokens.max(1)));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("temperature".into(), json!(request.temperature));
    if let Some(p) = request.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !request.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(request.stop));
    }
    if let Some(schema) = &request.json_schema {
        let description = if wraps(schema) {
            TOOL_DESCRIPTION_WRAPPED
        } else {
            TOOL_DESCRIPTION
        };
        body.insert(
            "tools".into(),
            json!([{"name": TOOL_NAME, "description": description,
                    "input_schema": input_schema(schema)}]),
        );
        body.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": TOOL_NAME}),
        );
    }
    Value::Object(body)
}

/// Parse a Messages API response (a batch result's `message` too). `wrapped`: the request's
/// schema was wrapped ([`wraps`]), so the answer is the `value` of the tool input.
pub fn parse_messages_response(body: &Value, wrapped: bool) -> Result<ChatResponse, String> {
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or("no `content` array in the response")?;
    let mut text = String::new();
    let mut tool_input = None;
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") if block.get("name").and_then(Value::as_str) == Some(TOOL_NAME) => {
                tool_input = block.get("input");
            }
            _ => {}
        }
    }
    let stop = body
        .get("stop_reason")
        .and_then(Value::as_str)
        .unwrap_or("");
    if stop == "refusal" {
        return Err(format!("the model refused: {text:?}"));
    }
    if let Some(input) = tool_input {
        let answer = match input.get("value") {
            Some(v) if wrapped => v,
            _ => input,
        };
        text = answer.to_string();
    }
    let finish_reason = match stop {
        "end_turn" | "stop_sequence" | "tool_use" => "stop",
        "max_tokens" => "length",
        other => other,
    }
    .to_string();
    let u = body.get("usage");
    let num = |k: &str| {
        u.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    // `input_tokens` counts only the tokens after the last cache breakpoint.
    let cache_read = num("cache_read_input_tokens");
    let usage = Usage {
        prompt_tokens: num("input_tokens") + num("cache_creation_input_tokens") + cache_read,
        completion_tokens: num("output_tokens"),
        cached_tokens: cache_read,
    };
    Ok(ChatResponse {
        text,
        finish_reason,
        usage,
        latency_ms: 0,
        from_cache: false,
        queue: Default::default(),
    })
}

/// `TYPE: MESSAGE` of an Anthropic error object (`{"type": "error", "error": {"type",
/// "message"}}`), as answered by the API and found in an errored batch result.
pub fn error_summary(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    let kind = e.get("type").and_then(Value::as_str)?;
    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
    let mut s = format!("{kind}: {message}");
    truncate_chars(&mut s, 2000);
    Some(s)
}

/// Whether `id` is a valid Message Batches `custom_id` (`^[a-zA-Z0-9_-]{1,64}$`). maslens cache
/// keys (64 hex digits) are.
pub fn valid_custom_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// One Message Batches request line.
pub fn batch_line(custom_id: &str, params: Value) -> Value {
    json!({"custom_id": custom_id, "params": params})
}

/// Turn the `params` of a Message Batches line back into a [`ChatRequest`]. Not exact: the API
/// has no seed (the request gets [`ChatRequest::new`]'s), system blocks come first, and merged
/// turns stay merged.
pub fn request_from_params(params: &Value) -> Result<ChatRequest, String> {
    let text_of = |v: &Value, at: &str| -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Array(blocks) => blocks
                .iter()
                .map(|b| {
                    b.get("text")
                        .and_then(Value::as_str)
                        .ok_or(format!("{at}: non-text block"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|parts| parts.join("")),
            _ => Err(format!("{at}: expected a string or an array of blocks")),
        }
    };
    let mut messages = Vec::new();
    match params.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(Message::system(s.clone())),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                let text = b.get("text").and_then(Value::as_str);
                messages.push(Message::system(
                    text.ok_or(format!("system[{i}]: non-text block"))?,
                ));
            }
        }
        Some(_) => return Err("system: expected a string or an array of blocks".into()),
    }
    let msgs = params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("missing `messages` array")?;
    for (i, m) in msgs.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => return Err(format!("messages[{i}].role: unsupported role {other:?}")),
        };
        let content = m.get("content").unwrap_or(&Value::Null);
        let content = text_of(content, &format!("messages[{i}].content"))?;
        messages.push(Message { role, content });
    }
    let mut req = ChatRequest::new(messages);
    req.max_tokens = params
        .get("max_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or("max_tokens: expected an integer")?;
    let num = |k: &str| params.get(k).and_then(Value::as_f64);
    if let Some(t) = num("temperature") {
        req.temperature = t as f32;
    }
    req.top_p = num("top_p").map(|p| p as f32);
    req.stop = params
        .get("stop_sequences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let tool = params.get("tools").and_then(Value::as_array).and_then(|t| {
        t.iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(TOOL_NAME))
    });
    req.json_schema = match tool {
        Some(t) => {
            let schema = t.get("input_schema").ok_or("tools: no `input_schema`")?;
            let wrapped =
                t.get("description").and_then(Value::as_str) == Some(TOOL_DESCRIPTION_WRAPPED);
            Some(if wrapped {
                unwrap_schema(schema)
            } else {
                schema.clone()
            })
        }
        None => None,
    };
    Ok(req)
}

/// The inverse of the wrapping in [`input_schema`].
fn unwrap_schema(wrapper: &Value) -> Value {
    let mut inner = wrapper
        .pointer("/properties/value")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(o) = inner.as_object_mut() {
        for k in ["$defs", "definitions"] {
            if let Some(d) = wrapper.get(k) {
                o.insert(k.into(), d.clone());
            }
        }
    }
    inner
}

/// The Messages API backend.
pub struct AnthropicModel {
    cfg: AnthropicConfig,
    url: String,
    key: Option<HeaderValue>,
    client: reqwest::Client,
    permits: Semaphore,
    attempts: AtomicU64,
}

impl AnthropicModel {
    pub fn new(cfg: AnthropicConfig) -> Result<Self, LlmError> {
        let key = match &cfg.api_key {
            Some(k) => {
                let mut v = HeaderValue::from_str(k).map_err(|_| {
                    LlmError::Other("the Anthropic API key is not a valid HTTP header value".into())
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(AnthropicModel {
            url: format!("{}/messages", cfg.base_url),
            key,
            client: http_client(cfg.connect_timeout, cfg.concurrency)?,
            permits: Semaphore::new(cfg.concurrency.max(1)),
            attempts: AtomicU64::new(0),
            cfg,
        })
    }

    /// The backend under the retry layer its configuration asks for (`max_retries`, the
    /// backoff settings): what `maslens_llm::open` builds.
    pub fn retrying(cfg: AnthropicConfig) -> Result<RetryModel<AnthropicModel>, LlmError> {
        let policy = cfg.retry;
        Ok(RetryModel::new(AnthropicModel::new(cfg)?, policy))
    }

    /// HTTP requests sent so far (retries included).
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    pub fn config(&self) -> &AnthropicConfig {
        &self.cfg
    }

    /// The text of an error answer: the API's `type: message` when it sent one, and for 401 /
    /// 403 the variable the key comes from.
    fn describe_error(&self, status: u16, bytes: &[u8]) -> String {
        let mut text = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| error_summary(&v))
            .unwrap_or_else(|| error_text(bytes));
        if matches!(status, 401 | 403) {
            let var = self.cfg.key_env.as_deref().unwrap_or("ANTHROPIC_API_KEY");
            text.push_str(&match self.cfg.api_key {
                None => format!(
                    " (no API key was sent: set {var}, --api-key-env or `api_key` in the config)"
                ),
                Some(_) => format!(" (check the API key, read from {var} or the config)"),
            });
        }
        text
    }

    async fn send_once(&self, body: &Value, wrapped: bool) -> Result<ChatResponse, LlmError> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let mut req = self
            .client
            .post(&self.url)
            .timeout(self.cfg.timeout)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&SchemaOrdered(body));
        if let Some(key) = &self.key {
            req = req.header("x-api-key", key.clone());
        }
        let value = post_json(req, &self.url, self.cfg.timeout, |status, bytes| {
            self.describe_error(status, bytes)
        })
        .await?;
        parse_messages_response(&value, wrapped).map_err(|message| LlmError::BadResponse {
            url: self.url.clone(),
            message,
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for AnthropicModel {
    fn id(&self) -> &str {
        &self.cfg.id
    }

    fn context_size(&self) -> Option<usize> {
        self.cfg.context_size
    }

    /// One attempt; retries are the [`RetryModel`] layer's ([`AnthropicModel::retrying`]).
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let start = Instant::now();
        let wrapped = request.json_schema.as_ref().is_some_and(wraps);
        let body = messages_body(&self.cfg.model, request);
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| LlmError::Other("backend closed".into()))?;
        let mut resp = self.send_once(&body, wrapped).await?;
        drop(permit);
        resp.latency_ms = start.elapsed().as_millis() as u64;
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_merges_turns_and_caches_the_system_prefix() {
        let req = ChatRequest::new(vec![
            Message::system("rules"),
            Message::system("more rules"),
            Message::assistant("hello"),
            Message::user("a"),
            Message::user("b"),
            Message::assistant("ok "),
        ]);
        let b = messages_body("claude-x", &req);
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "rules"},
                   {"type": "text", "text": "more rules", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            b["messages"],
            json!([{"role": "user", "content": FIRST_USER_TURN},
                   {"role": "assistant", "content": "hello"},
                   {"role": "user", "content": "a\n\nb"},
                   {"role": "assistant", "content": "ok"}])
        );
        assert_eq!(
            (b["max_tokens"].clone(), b["temperature"].clone()),
            (json!(512), json!(0.0))
        );
        assert!(b.get("seed").is_none() && b.get("tools").is_none() && b.get("top_p").is_none());
        let plain = messages_body("m", &ChatRequest::new(vec![Message::user("q")]));
        assert!(plain.get("system").is_none());
    }

    #[test]
    fn schemas_become_a_forced_tool_and_round_trip_through_params() {
        let object = json!({"type": "object", "properties": {"x": {"type": "integer"}}});
        let list = json!({"$defs": {"S": {"type": "integer"}}, "type": "array",
                          "items": {"$ref": "#/$defs/S"}});
        for (schema, wrapped) in [(object, false), (list, true)] {
            let mut req = ChatRequest::new(vec![Message::system("s"), Message::user("q")])
                .json_schema(schema.clone());
            req.stop = vec!["END".into()];
            req.top_p = Some(0.5);
            let b = messages_body("m", &req);
            assert_eq!(b["tool_choice"], json!({"type": "tool", "name": "answer"}));
            let input = &b["tools"][0]["input_schema"];
            assert_eq!(input["type"], "object");
            assert_eq!(wraps(&schema), wrapped);
            if wrapped {
                assert_eq!(input["required"], json!(["value"]));
                assert_eq!(input["$defs"], schema["$defs"], "definitions move up");
                assert!(input["properties"]["value"].get("$defs").is_none());
            } else {
                assert_eq!(*input, schema);
            }
            assert_eq!(b["stop_sequences"], json!(["END"]));
            assert_eq!(request_from_params(&b).unwrap(), req);
        }
    }

    #[test]
    fn parses_text_tool_use_usage_and_stop_reasons() {
        let body = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 10,
                      "cache_read_input_tokens": 20}});
        let r = parse_messages_response(&body, false).unwrap();
        assert_eq!(
            (r.text.as_str(), r.finish_reason.as_str()),
            ("ab", "length")
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt_tokens: 33,
                completion_tokens: 2,
                cached_tokens: 20
            }
        );
        let tool = json!({"content": [{"type": "tool_use", "id": "t", "name": "answer",
            "input": {"value": [1, 2]}}], "stop_reason": "tool_use"});
        let r = parse_messages_response(&tool, true).unwrap();
        assert_eq!(
            (r.text.as_str(), r.finish_reason.as_str()),
            ("[1,2]", "stop")
        );
        assert_eq!(
            parse_messages_response(&tool, false).unwrap().text,
            r#"{"value":[1,2]}"#
        );
        assert!(parse_messages_response(&json!({}), false).is_err());
        let refusal = json!({"content": [], "stop_reason": "refusal"});
        assert!(parse_messages_response(&refusal, false)
            .unwrap_err()
            .contains("refused"));
    }

    #[test]
    fn cache_keys_are_valid_custom_ids() {
        let key = crate::cache::cache_key("anthropic:m", &ChatRequest::new(vec![]));
        assert!(valid_custom_id(&key), "{key}");
        assert!(
            !valid_custom_id("") && !valid_custom_id("a.b") && !valid_custom_id(&"a".repeat(65))
        );
    }

    #[test]
    fn error_bodies_are_summarised() {
        let v = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert_eq!(
            error_summary(&v).as_deref(),
            Some("overloaded_error: Overloaded")
        );
        assert_eq!(error_summary(&json!({"error": "x"})), None);
    }
}
