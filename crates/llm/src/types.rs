//! Request / response types and the [`ChatModel`] trait.

use serde::{Deserialize, Serialize};

/// Who speaks a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// A chat completion request. Everything except `stage` is part of the cache key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Sampling temperature; 0 means greedy (the default).
    #[serde(default)]
    pub temperature: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// JSON schema the answer must satisfy (`response_format` on HTTP, GBNF on local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
    /// Raw GBNF grammar (local backend only); takes precedence over `json_schema` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    /// Accounting label (e.g. `judge`, `evaluator/concise`); not part of the cache key.
    #[serde(default, skip)]
    pub stage: String,
    /// Name of the prompt template the request's last message was rendered from (e.g.
    /// `locate/judge_step.v1`); like `stage`, not sent and not part of the cache key. Test
    /// fixtures answer by it ([`crate::testing::ScriptedModel::on`]).
    #[serde(default, skip)]
    pub template: String,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            temperature: 0.0,
            top_p: None,
            max_tokens: 512,
            seed: Some(0),
            stop: Vec::new(),
            json_schema: None,
            grammar: None,
            stage: String::new(),
            template: String::new(),
        }
    }
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = t;
        self
    }
    pub fn json_schema(mut self, schema: serde_json::Value) -> Self {
        self.json_schema = Some(schema);
        self
    }
    pub fn stage(mut self, stage: impl Into<String>) -> Self {
        self.stage = stage.into();
        self
    }
    /// Record the template the request was rendered from ([`ChatRequest::template`]).
    pub fn template(mut self, name: impl Into<String>) -> Self {
        self.template = name.into();
        self
    }
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens served from a prefix / prompt cache instead of being evaluated.
    #[serde(default)]
    pub cached_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.prompt_tokens += rhs.prompt_tokens;
        self.completion_tokens += rhs.completion_tokens;
        self.cached_tokens += rhs.cached_tokens;
    }
}

/// A chat completion response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub text: String,
    /// `stop`, `length`, ... as the backend reports it.
    #[serde(default)]
    pub finish_reason: String,
    #[serde(default)]
    pub usage: Usage,
    /// Wall time of the backend call in milliseconds (of the original call when replayed).
    #[serde(default)]
    pub latency_ms: u64,
    /// True when this response came from the maslens cache rather than the backend.
    #[serde(default, skip_serializing)]
    pub from_cache: bool,
    /// How long this call waited for the embedded model while another call held it (zero for
    /// remote backends and cached answers). Not stored in the cache. `serve-model` reports it in
    /// the `x-maslens-queue-ms` and `x-maslens-queue-holder-step-ms` headers.
    #[serde(skip)]
    pub queue: QueueWait,
}

/// The time a call waited for an embedded model that another call held ([`ChatResponse::queue`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueWait {
    /// Microseconds between asking for the model and getting it.
    pub waited_us: u64,
    /// When the model was busy: microseconds the call holding it spent from its last check for
    /// cancellation (made before every generated token and prompt batch) to handing the model
    /// over, i.e. the one step it was computing. A waiting time not much above this says the
    /// holder stopped within its current step (the bound for an abandoned request).
    pub holder_last_step_us: Option<u64>,
}

/// Errors of the LLM layer.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("invalid model spec {spec:?}: {reason}")]
    Spec { spec: String, reason: String },
    #[error("HTTP {status} from {url}: {body}")]
    Http {
        status: u16,
        url: String,
        body: String,
        /// The wait the server asked for (`Retry-After`, `retry-after-ms`), if any.
        retry_after: Option<std::time::Duration>,
    },
    #[error("transport error talking to {url}: {message}")]
    Transport { url: String, message: String },
    #[error("request timed out after {seconds:.1}s ({url})")]
    Timeout { url: String, seconds: f64 },
    #[error("malformed response from {url}: {message}")]
    BadResponse { url: String, message: String },
    #[error("replay mode: no cached response for key {key} (model {model})")]
    ReplayMiss { key: String, model: String },
    #[error("budget exhausted: {0}")]
    Budget(String),
    /// Export mode: the request was written to a batch file instead of being sent.
    #[error("deferred: request {key} written to the batch file {file}")]
    Deferred { key: String, file: String },
    #[error("model not available: {0}")]
    ModelUnavailable(String),
    #[error("local backend error: {0}")]
    Local(String),
    /// The request itself cannot be served (a JSON schema or grammar that is invalid or admits
    /// no answer): retrying it cannot help; an HTTP server answers 400.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("cache error: {0}")]
    Cache(String),
    /// The caller gave up on the request (an HTTP client that went away): generation stopped at
    /// the next token. Nothing to answer, nothing to retry.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// The model cannot be used (no key, unreachable, key refused): found before any work.
    #[error(transparent)]
    Preflight(#[from] crate::preflight::PreflightError),
    #[error("{0}")]
    Other(String),
}

impl LlmError {
    /// Whether retrying the same request may succeed (429, 5xx, timeouts, connection resets).
    /// The wait the server asked for before a retry, when it said.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            LlmError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn is_retryable(&self) -> bool {
        match self {
            // As the OpenAI SDKs do: request timeout, conflict (lock contention), rate limit, 5xx.
            LlmError::Http { status, .. } => matches!(*status, 408 | 409 | 429) || *status >= 500,
            LlmError::Transport { .. } | LlmError::Timeout { .. } => true,
            LlmError::BadResponse { .. } => true,
            _ => false,
        }
    }
}

/// The one abstraction every method talks to.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// The model id used in cache keys and reports, e.g. `openai:gpt-4o-mini` or `local:smollm2-135m`.
    fn id(&self) -> &str;
    /// Context window in tokens, when known; methods pick long-trace strategies from it.
    fn context_size(&self) -> Option<usize> {
        None
    }
    /// Count tokens of a text as this model would, when the backend can; else an estimate.
    fn count_tokens(&self, text: &str) -> usize {
        estimate_tokens(text)
    }
    /// Run one chat completion.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;
}

/// A rough token estimate (about 4 characters per token) for backends without a tokenizer.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}
