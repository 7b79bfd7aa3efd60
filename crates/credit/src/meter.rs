//! Call accounting: a [`ChatModel`] wrapper counting requests and tokens per stage, so that the
//! optimizer and the black-box baseline can be compared at the same number of LLM calls.

use async_trait::async_trait;
use maslens_llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Counts of calls and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests issued (cache hits included, so that counts do not depend on the cache state).
    pub calls: u64,
    /// Requests answered by the backend (not from the cache).
    pub backend_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Counts {
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            calls: self.calls.saturating_sub(earlier.calls),
            backend_calls: self.backend_calls.saturating_sub(earlier.backend_calls),
            prompt_tokens: self.prompt_tokens.saturating_sub(earlier.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_sub(earlier.completion_tokens),
        }
    }
}

/// Shared call counter.
#[derive(Debug, Default)]
pub struct Meter {
    inner: Mutex<(Counts, BTreeMap<String, Counts>)>,
}

impl Meter {
    pub fn new() -> Arc<Self> {
        Arc::new(Meter::default())
    }
    /// Totals so far.
    pub fn total(&self) -> Counts {
        self.inner.lock().map(|g| g.0).unwrap_or_default()
    }
    /// Totals per stage group (the stage up to its first `/`, e.g. `debate`, `critic`).
    pub fn by_group(&self) -> BTreeMap<String, Counts> {
        self.inner.lock().map(|g| g.1.clone()).unwrap_or_default()
    }
    fn record(&self, stage: &str, resp: &ChatResponse) {
        if let Ok(mut g) = self.inner.lock() {
            let group = stage.split('/').next().unwrap_or("").to_string();
            let (total, groups) = &mut *g;
            add(total, resp);
            add(groups.entry(group).or_default(), resp);
        }
    }
}

fn add(c: &mut Counts, resp: &ChatResponse) {
    c.calls += 1;
    if !resp.from_cache {
        c.backend_calls += 1;
    }
    c.prompt_tokens += resp.usage.prompt_tokens;
    c.completion_tokens += resp.usage.completion_tokens;
}

/// A model whose calls are counted in a [`Meter`].
pub struct Metered {
    inner: Arc<dyn ChatModel>,
    meter: Arc<Meter>,
}

impl Metered {
    pub fn wrap(inner: Arc<dyn ChatModel>, meter: Arc<Meter>) -> Arc<dyn ChatModel> {
        Arc::new(Metered { inner, meter })
    }
}

#[async_trait]
impl ChatModel for Metered {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn context_size(&self) -> Option<usize> {
        self.inner.context_size()
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.inner.count_tokens(text)
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let resp = self.inner.complete(request).await?;
        self.meter.record(&request.stage, &resp);
        Ok(resp)
    }
}
