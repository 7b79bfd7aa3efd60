//! Hand-written test fixtures: a [`ScriptedModel`] that answers from a fixed script.
//!
//! This is **not a model**. It exists so that control flow (step-by-step stopping, binary
//! search halving, vote aggregation, repair loops) can be unit-tested with fixed, hand-written
//! responses. End-to-end tests use the embedded GGUF model or a real server instead.

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Usage};
use std::sync::Mutex;

/// Which requests a rule answers.
struct Rule {
    /// The request's template name starts with this (`""`: any template).
    template: String,
    /// The last user message contains this (`""`: any message).
    needle: String,
    response: String,
}

/// Answers each call with the first matching rule, or the next queued response when no rule
/// matches. Rules are keyed by the prompt template a request was rendered from
/// ([`ScriptedModel::on`]), optionally narrowed by the data in the prompt (a window number, a
/// round, an agent: [`ScriptedModel::on_with`]), never by the template's wording.
pub struct ScriptedModel {
    id: String,
    rules: Vec<Rule>,
    queue: Mutex<std::collections::VecDeque<String>>,
    /// Every request received, in order.
    pub calls: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    pub fn new(id: impl Into<String>) -> Self {
        ScriptedModel {
            id: id.into(),
            rules: Vec::new(),
            queue: Mutex::new(Default::default()),
            calls: Mutex::new(Vec::new()),
        }
    }
    /// Answer `response` to requests rendered from a template whose name starts with
    /// `template` (e.g. `locate/judge_all_at_once`, any version).
    pub fn on(self, template: impl Into<String>, response: impl Into<String>) -> Self {
        self.on_with(template, "", response)
    }
    /// [`ScriptedModel::on`], only when the last user message also contains `needle` (data the
    /// prompt carries, such as `Window 2 of`).
    pub fn on_with(
        mut self,
        template: impl Into<String>,
        needle: impl Into<String>,
        response: impl Into<String>,
    ) -> Self {
        self.rules.push(Rule {
            template: template.into(),
            needle: needle.into(),
            response: response.into(),
        });
        self
    }
    /// Answer `response` to every request whose last user message contains `needle`, whatever
    /// its template (for requests built without one, and for catch-alls: `rule("", ...)`).
    pub fn rule(self, needle: impl Into<String>, response: impl Into<String>) -> Self {
        self.on_with("", needle, response)
    }
    /// Queue a response used (in order) when no rule matches.
    pub fn then(self, response: impl Into<String>) -> Self {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back(response.into());
        }
        self
    }
    /// Number of calls received so far.
    pub fn n_calls(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedModel {
    fn id(&self) -> &str {
        &self.id
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(request.clone());
        }
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == crate::Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        let text = self
            .rules
            .iter()
            .find(|r| request.template.starts_with(&r.template) && last_user.contains(&r.needle))
            .map(|r| r.response.clone())
            .or_else(|| self.queue.lock().ok().and_then(|mut q| q.pop_front()))
            .ok_or_else(|| LlmError::Other("scripted model: script exhausted".into()))?;
        let prompt_tokens: usize = request
            .messages
            .iter()
            .map(|m| crate::estimate_tokens(&m.content))
            .sum();
        Ok(ChatResponse {
            usage: Usage {
                prompt_tokens: prompt_tokens as u64,
                completion_tokens: crate::estimate_tokens(&text) as u64,
                cached_tokens: 0,
            },
            text,
            finish_reason: "stop".into(),
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        })
    }
}

pub mod server;
