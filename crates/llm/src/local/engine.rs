//! llama.cpp inference: process-wide weight registry, one context per opened model with
//! prefix-reusing KV-cache slots, grammar-constrained sampling.
//!
//! Here: opening an engine ([`open`]), its counters and [`LocalModel`]. The parts of a call:
//! `load` (backend, weights, context), `prompt` (chat template, tokenizing), `slots` (KV-cache
//! slots and prefix reuse), `sampler` (grammar-constrained sampling), `generate` (the loop).

mod generate;
mod load;
mod prompt;
mod sampler;
mod slots;

use super::{LocalOptions, LocalSpec};
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, Totals};
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use load::{load_weights, new_context, Context};
use prompt::control_texts;
use slots::State;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Default cap on the context window when the caller sets none.
const DEFAULT_MAX_CONTEXT: u32 = 8192;

type EngineKey = (String, LocalOptions);

/// Open (or reuse) the engine for a resolved spec and options.
pub(super) fn open(spec: LocalSpec, opts: &LocalOptions) -> Result<Arc<LocalModel>, LlmError> {
    static ENGINES: OnceLock<Mutex<HashMap<EngineKey, Arc<LocalModel>>>> = OnceLock::new();
    let engines = ENGINES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut engines = engines.lock().unwrap_or_else(|p| p.into_inner());
    let key = (spec.spec.clone(), opts.clone());
    if let Some(engine) = engines.get(&key) {
        return Ok(engine.clone());
    }
    let engine = Arc::new(LocalModel {
        inner: Arc::new(Inner::new(spec, opts)?),
    });
    engines.insert(key, engine.clone());
    Ok(engine)
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    evaluated_tokens: AtomicU64,
    prompt_ns: AtomicU64,
    generation_ns: AtomicU64,
}

/// Where an embedded model's time went since it was opened: prompt evaluation (the uncached
/// prompt tokens, in batches) and generation (per token: sampling with the grammar, evaluation,
/// detokenizing, stop strings). `maslens model bench` turns these into tokens per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineTimings {
    /// Prompt tokens evaluated (not served from the prefix cache).
    pub prompt_tokens: u64,
    pub prompt_ns: u64,
    /// Tokens generated (the end-of-generation token not counted).
    pub generated_tokens: u64,
    pub generation_ns: u64,
}

impl EngineTimings {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &EngineTimings) -> EngineTimings {
        EngineTimings {
            prompt_tokens: self.prompt_tokens.saturating_sub(earlier.prompt_tokens),
            prompt_ns: self.prompt_ns.saturating_sub(earlier.prompt_ns),
            generated_tokens: self
                .generated_tokens
                .saturating_sub(earlier.generated_tokens),
            generation_ns: self.generation_ns.saturating_sub(earlier.generation_ns),
        }
    }
}

/// The shared part of an embedded model: weights, template, the context and its slots.
struct Inner {
    id: String,
    model: &'static LlamaModel,
    template: Option<LlamaChatTemplate>,
    /// Texts of the model's control tokens (`<|im_start|>`, ...), defused in message contents.
    control_texts: Vec<String>,
    /// The control tokens the chat template writes around messages after which a templated
    /// prompt may be cut for tokenizing ([`Inner::tokenize_prompt`]).
    cut_texts: Vec<String>,
    /// Context window of one slot.
    n_ctx: u32,
    batch_size: u32,
    prefix_reuse: bool,
    state: Mutex<State>,
    counters: Counters,
}

impl Inner {
    fn new(spec: LocalSpec, opts: &LocalOptions) -> Result<Inner, LlmError> {
        let (model, adapter) = load_weights(&spec)?;
        let Context {
            ctx,
            slots,
            n_ctx,
            batch_size,
        } = new_context(&spec, model, adapter, opts)?;
        let template = model.chat_template(None).ok();
        if template.is_none() {
            tracing::warn!(
                "{} has no chat template: messages are joined as plain text (completion only)",
                spec.model_path.display()
            );
        }
        let control_texts = control_texts(model);
        let mut inner = Inner {
            id: format!("local:{}", spec.spec),
            model,
            template,
            control_texts,
            cut_texts: Vec::new(),
            n_ctx,
            batch_size,
            prefix_reuse: opts.prefix_reuse,
            state: Mutex::new(State::new(ctx, slots)),
            counters: Counters::default(),
        };
        inner.cut_texts = inner.find_cut_texts();
        Ok(inner)
    }

    /// Counters since the model was opened: calls and tokens (`cached_tokens`: prompt tokens
    /// served from the KV cache by prefix reuse; the rest were evaluated).
    pub fn stats(&self) -> Totals {
        let c = &self.counters;
        Totals {
            calls: c.calls.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed),
            cached_tokens: c.cached_tokens.load(Ordering::Relaxed),
            completion_tokens: c.completion_tokens.load(Ordering::Relaxed),
            ..Default::default()
        }
    }

    fn timings(&self) -> EngineTimings {
        let c = &self.counters;
        EngineTimings {
            prompt_tokens: c.evaluated_tokens.load(Ordering::Relaxed),
            prompt_ns: c.prompt_ns.load(Ordering::Relaxed),
            generated_tokens: c.completion_tokens.load(Ordering::Relaxed),
            generation_ns: c.generation_ns.load(Ordering::Relaxed),
        }
    }
}

/// An embedded GGUF model behind [`ChatModel`]; cheap to clone (clones share the context).
#[derive(Clone)]
pub struct LocalModel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("id", &self.inner.id)
            .field("n_ctx", &self.inner.n_ctx)
            .finish()
    }
}

impl LocalModel {
    /// Counters since the model was opened (shared by every handle on the same context).
    pub fn stats(&self) -> Totals {
        self.inner.stats()
    }

    /// Time spent on prompts and on generation since the model was opened.
    pub fn timings(&self) -> EngineTimings {
        self.inner.timings()
    }

    /// The prompt text the model's chat template makes of these messages.
    pub fn format_prompt(&self, messages: &[Message]) -> Result<String, LlmError> {
        self.inner.format_prompt(messages)
    }

    /// Like [`LocalModel::complete_blocking`], handing out the answer text piece by piece as it is
    /// generated (the pieces concatenate to the response's text; stop strings are never emitted).
    pub fn complete_streaming_blocking(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        self.inner.generate_with(request, on_text, &|| false)
    }

    /// Like [`LocalModel::complete_streaming_blocking`], stopping as soon as `cancelled` says so
    /// (asked before every prompt batch and every token): the call ends with
    /// [`LlmError::Cancelled`] and the context is free for the next request within one token's
    /// time. `serve-model` cancels this way when a client disconnects.
    pub fn complete_cancellable_blocking(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ChatResponse, LlmError> {
        self.inner.generate_with(request, on_text, cancelled)
    }

    /// Token ids of the prompt these messages make: templated, then tokenized as a request's
    /// prompt is (piece by piece when it holds many messages; the same ids as [`Self::tokenize`]
    /// of [`Self::format_prompt`] with `special`, in linear time).
    pub fn prompt_tokens(&self, messages: &[Message]) -> Result<Vec<i32>, LlmError> {
        let prompt = self.inner.format_prompt(messages)?;
        let tokens = self
            .inner
            .tokenize_prompt(&prompt, usize::MAX)
            .map_err(|n| LlmError::Local(format!("more than {n} tokens")))?;
        Ok(tokens.into_iter().map(|t| t.0).collect())
    }

    /// Token ids of a text; with `special`, control-token texts become control tokens (as for
    /// the templated prompt, whose message contents are defused first).
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<i32> {
        self.inner
            .tokenize(text, special)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// Run one request on the calling thread (blocking); `complete` does this on a blocking task.
    pub fn complete_blocking(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.inner.generate(request)
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalModel {
    fn id(&self) -> &str {
        &self.inner.id
    }
    fn context_size(&self) -> Option<usize> {
        Some(self.inner.n_ctx as usize)
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.inner.tokenize(text, false).len()
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let inner = self.inner.clone();
        let request = request.clone();
        // A dropped call (a job stopped when `serve` shuts down, a caller's timeout) stops its
        // inference at the next token: left running on the blocking pool, it would hold the
        // model from the next request and keep the runtime from shutting down until it ended.
        let dropped = CancelOnDrop::default();
        let cancelled = dropped.0.clone();
        let generate = move || {
            inner.generate_with(&request, &mut |_| {}, &|| {
                cancelled.load(std::sync::atomic::Ordering::Relaxed)
            })
        };
        match tokio::task::spawn_blocking(generate).await {
            Ok(result) => result,
            Err(e) => Err(LlmError::Local(format!("the inference thread failed: {e}"))),
        }
    }
}

/// Sets its flag when dropped: with the call's future, so the inference thread sees it.
#[derive(Default)]
struct CancelOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
