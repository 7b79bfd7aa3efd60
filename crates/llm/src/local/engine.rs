//! llama.cpp inference: process-wide weight registry, one context per opened model with
//! prefix-reusing KV-cache slots, grammar-constrained sampling.

use super::{LocalOptions, LocalSpec};
use crate::{
    ChatModel, ChatRequest, ChatResponse, LlmError, Message, QueueWait, Role, Totals, Usage,
};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaLoraAdapter, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Default cap on the context window when the caller sets none.
const DEFAULT_MAX_CONTEXT: u32 = 8192;

/// Template control tokens per piece when a long prompt is tokenized piece by piece
/// ([`Inner::tokenize_prompt`]); prompts with fewer than twice as many are tokenized whole.
const CUT_EVERY: usize = 64;

/// Largest prompt text handed to llama.cpp (256 MiB; a context of a million tokens is ~4 MiB).
const MAX_PROMPT_BYTES: usize = 256 << 20;

fn backend() -> Result<&'static LlamaBackend, LlmError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs go through `tracing` (visible with -vv), not straight to stderr.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LlmError::Local(format!("cannot initialise llama.cpp: {e}")))
}

/// Weights loaded once per process and shared by every context over them. They are leaked on
/// purpose: a model lives as long as the process, and contexts borrow it for `'static`.
struct Weights {
    model: &'static LlamaModel,
    adapter: Option<&'static Mutex<LlamaLoraAdapter>>,
}

type WeightsKey = (PathBuf, Option<PathBuf>);

fn load_weights(
    spec: &LocalSpec,
) -> Result<
    (
        &'static LlamaModel,
        Option<&'static Mutex<LlamaLoraAdapter>>,
    ),
    LlmError,
> {
    static WEIGHTS: OnceLock<Mutex<HashMap<WeightsKey, Weights>>> = OnceLock::new();
    let backend = backend()?;
    let registry = WEIGHTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut registry = registry.lock().unwrap_or_else(|p| p.into_inner());
    let key = (spec.model_path.clone(), spec.adapter_path.clone());
    if let Some(w) = registry.get(&key) {
        return Ok((w.model, w.adapter));
    }
    let started = Instant::now();
    let mut model =
        LlamaModel::load_from_file(backend, &spec.model_path, &LlamaModelParams::default())
            .map_err(|e| {
                LlmError::ModelUnavailable(format!(
                    "llama.cpp cannot load {}: {e}",
                    spec.model_path.display()
                ))
            })?;
    let adapter = match &spec.adapter_path {
        Some(path) => {
            let adapter = model.lora_adapter_init(path).map_err(|e| {
                LlmError::ModelUnavailable(format!(
                    "llama.cpp cannot load LoRA adapter {} for {}: {e}",
                    path.display(),
                    spec.model_path.display()
                ))
            })?;
            Some(&*Box::leak(Box::new(Mutex::new(adapter))))
        }
        None => None,
    };
    let model: &'static LlamaModel = Box::leak(Box::new(model));
    tracing::info!(
        path = %spec.model_path.display(),
        params = model.n_params(),
        ms = started.elapsed().as_millis() as u64,
        "loaded GGUF"
    );
    registry.insert(key, Weights { model, adapter });
    Ok((model, adapter))
}

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

/// One KV-cache sequence and the tokens it currently holds.
#[derive(Default)]
struct Slot {
    tokens: Vec<LlamaToken>,
    last_used: u64,
}

struct State {
    ctx: LlamaContext<'static>,
    slots: Vec<Slot>,
    tick: u64,
    /// Microseconds the last call to hold the context spent from its last check for
    /// cancellation to handing the context over ([`QueueWait::holder_last_step_us`]).
    last_step_us: u64,
}

impl State {
    /// Forget everything in the KV cache (after a failure left it in an unknown state).
    fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        for slot in &mut self.slots {
            slot.tokens.clear();
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
        let backend = backend()?;
        let slots = opts.slots.clamp(1, 64);
        let n_ctx_train = model.n_ctx_train().max(1);
        let per_slot = opts
            .context_size
            .unwrap_or(n_ctx_train.min(DEFAULT_MAX_CONTEXT))
            .clamp(16, n_ctx_train);
        let batch_size = opts.batch_size.clamp(1, per_slot);
        let threads = opts
            .threads
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            })
            .clamp(1, 512) as i32;
        let total = per_slot.checked_mul(slots as u32).ok_or_else(|| {
            LlmError::Local(format!("context {per_slot} x {slots} slots overflows"))
        })?;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(total))
            .with_n_batch(batch_size)
            .with_n_ubatch(batch_size)
            .with_n_seq_max(slots as u32)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            // Sliding-window models (Gemma 3) can only trim their cache back to a prefix when the
            // full SWA cache is kept.
            .with_swa_full(true);
        let mut ctx = model.new_context(backend, params).map_err(|e| {
            LlmError::Local(format!(
                "llama.cpp cannot create a context of {total} tokens for {}: {e}",
                spec.model_path.display()
            ))
        })?;
        if let Some(adapter) = adapter {
            let mut adapter = adapter.lock().unwrap_or_else(|p| p.into_inner());
            ctx.lora_adapter_set(&mut adapter, 1.0)
                .map_err(|e| LlmError::Local(format!("cannot apply the LoRA adapter: {e}")))?;
        }
        let n_ctx = ctx.n_ctx() / slots as u32;
        let template = model.chat_template(None).ok();
        if template.is_none() {
            tracing::warn!(
                "{} has no chat template: messages are joined as plain text (completion only)",
                spec.model_path.display()
            );
        }
        let vocab = model.vocab();
        let mut control_texts: Vec<String> = vocab
            .tokens()
            .filter(|&t| vocab.is_control(t) || vocab.is_eog(t))
            .filter_map(|t| {
                vocab
                    .text(t)
                    .and_then(|c| c.to_str().ok())
                    .map(str::to_string)
            })
            .filter(|t| t.chars().count() >= 2)
            .collect();
        control_texts.sort();
        control_texts.dedup();
        let mut inner = Inner {
            id: format!("local:{}", spec.spec),
            model,
            template,
            control_texts,
            cut_texts: Vec::new(),
            n_ctx,
            batch_size,
            prefix_reuse: opts.prefix_reuse,
            state: Mutex::new(State {
                ctx,
                slots: (0..slots).map(|_| Slot::default()).collect(),
                tick: 0,
                last_step_us: 0,
            }),
            counters: Counters::default(),
        };
        inner.cut_texts = inner.find_cut_texts();
        Ok(inner)
    }

    /// The control tokens the template writes around messages (found in a probe conversation)
    /// after which llama.cpp strips no whitespace and that no longer control token contains: a
    /// prompt cut right after one tokenizes into the same tokens piece by piece.
    fn find_cut_texts(&self) -> Vec<String> {
        let probe = [
            Message::system("s"),
            Message::user("u"),
            Message::assistant("a"),
            Message::user("v"),
        ];
        let Ok(prompt) = self.format_prompt(&probe) else {
            return Vec::new();
        };
        let vocab = self.model.vocab();
        self.control_texts
            .iter()
            .filter(|t| prompt.contains(t.as_str()))
            .filter(|t| {
                !self
                    .control_texts
                    .iter()
                    .any(|o| o.len() > t.len() && o.contains(t.as_str()))
            })
            .filter(|t| {
                let ids = vocab.tokenize(t.as_bytes(), false, true);
                ids.len() == 1 && !vocab.attr(ids[0]).contains(LlamaTokenAttr::RStrip)
            })
            .cloned()
            .collect()
    }

    /// Tokenize a templated prompt (control-token texts become control tokens), in time linear
    /// in its length; `Err(n)`: more than `limit` tokens (`n` counted so far, the rest not
    /// tokenized).
    ///
    /// llama.cpp's special-token pass costs time quadratic in the number of special tokens in
    /// one text (every match walks its fragment list from the start), so 40,000 short messages
    /// took 47 s of CPU before the context check refused them. A special token is a fragment
    /// boundary for llama.cpp anyway: cut after every [`CUT_EVERY`]-th template control token
    /// ([`Inner::find_cut_texts`]) and tokenize the pieces, the first with BOS as a whole
    /// prompt gets it. The tokens are the same (tested on the real model); a vocabulary that
    /// appends EOS or SEP when tokenizing is tokenized whole.
    fn tokenize_prompt(&self, prompt: &str, limit: usize) -> Result<Vec<LlamaToken>, usize> {
        let vocab = self.model.vocab();
        let mut cuts: Vec<usize> = self
            .cut_texts
            .iter()
            .flat_map(|t| prompt.match_indices(t.as_str()).map(|(i, m)| i + m.len()))
            .collect();
        if cuts.len() < 2 * CUT_EVERY || vocab.should_add_eos() || vocab.should_add_sep() {
            let tokens = self.tokenize(prompt, true);
            return Ok(tokens);
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut ends: Vec<usize> = cuts
            .iter()
            .skip(CUT_EVERY - 1)
            .step_by(CUT_EVERY)
            .copied()
            .collect();
        if ends.last() != Some(&prompt.len()) {
            ends.push(prompt.len());
        }
        let mut tokens = Vec::with_capacity(limit.min(prompt.len() / 2) + 8);
        let mut start = 0;
        for end in ends {
            vocab.tokenize_into(
                &prompt.as_bytes()[start..end],
                &mut tokens,
                start == 0,
                true,
            );
            if tokens.len() > limit {
                return Err(tokens.len());
            }
            start = end;
        }
        Ok(tokens)
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

    /// The prompt text the chat template makes of these messages.
    pub fn format_prompt(&self, messages: &[Message]) -> Result<String, LlmError> {
        // llama.cpp takes lengths as 32-bit integers (and llama-cpp-2 panics past them): refuse
        // what no context window could hold long before that.
        let bytes: usize = messages.iter().map(|m| m.content.len() + 16).sum();
        if bytes > MAX_PROMPT_BYTES {
            return Err(LlmError::InvalidRequest(format!(
                "the messages hold {bytes} bytes, more than the {MAX_PROMPT_BYTES} any context window could take"
            )));
        }
        let Some(template) = &self.template else {
            let parts: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
            return Ok(parts.join("\n\n"));
        };
        let mut chat = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            chat.push(
                LlamaChatMessage::new(role.to_string(), defuse(&m.content, &self.control_texts))
                    .map_err(|e| {
                        LlmError::Local(format!(
                            "message {i} ({role}) cannot be passed to llama.cpp: {e}"
                        ))
                    })?,
            );
        }
        self.model
            .apply_chat_template(template, &chat, true)
            .map_err(|e| LlmError::Local(format!("cannot apply the model's chat template: {e}")))
    }

    fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), special, special)
    }

    /// The context, and whether another call held it when asked (so this one waited).
    fn lock_state(&self) -> (MutexGuard<'_, State>, bool) {
        let (taken, contended) = match self.state.try_lock() {
            Ok(g) => (Ok(g), false),
            Err(std::sync::TryLockError::WouldBlock) => (self.state.lock(), true),
            Err(std::sync::TryLockError::Poisoned(p)) => (Err(p), false),
        };
        match taken {
            Ok(g) => (g, contended),
            Err(poisoned) => {
                // A panic mid-call leaves the KV cache in an unknown state: start clean.
                self.state.clear_poison();
                let mut g = poisoned.into_inner();
                g.reset();
                (g, contended)
            }
        }
    }

    /// Run one request to completion (blocking).
    fn generate(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.generate_with(request, &mut |_| {}, &|| false)
    }

    /// Run one request to completion (blocking), handing out the answer text piece by piece.
    /// `cancelled` is asked before every prompt batch and every generated token; once it says
    /// yes, the call ends with [`LlmError::Cancelled`] and frees the context for the next one.
    fn generate_with(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let prompt = self.format_prompt(&request.messages)?;
        let tokens = self
            .tokenize_prompt(&prompt, self.n_ctx as usize)
            .map_err(|counted| {
                LlmError::Local(format!(
                    "prompt of more than {counted} tokens ({} messages) does not fit the context of {} tokens of {} \
                     (leave room for the answer: shorten the input or raise the context size)",
                    request.messages.len(),
                    self.n_ctx,
                    self.id
                ))
            })?;
        if tokens.is_empty() {
            return Err(LlmError::Local(
                "the prompt is empty after tokenization".into(),
            ));
        }
        if tokens.len() >= self.n_ctx as usize {
            return Err(LlmError::Local(format!(
                "prompt of {} tokens does not fit the context of {} tokens of {} (leave room for the answer: \
                 shorten the input or raise the context size)",
                tokens.len(),
                self.n_ctx,
                self.id
            )));
        }
        let mut sampler = self.sampler(request)?;

        let waiting = Instant::now();
        let (mut guard, contended) = self.lock_state();
        let queue = QueueWait {
            waited_us: waiting.elapsed().as_micros() as u64,
            holder_last_step_us: contended.then_some(guard.last_step_us),
        };
        let state = &mut *guard;
        state.tick += 1;
        let tick = state.tick;
        let (seq, mut common) = pick_slot(&state.slots, &tokens, self.prefix_reuse);
        // At least one token must be evaluated to get logits for the first sampled token.
        common = common.min(tokens.len() - 1);
        let seq_id = seq as i32;
        let slot_len = state.slots[seq].tokens.len();
        if common < slot_len {
            let trimmed = state
                .ctx
                .kv_cache_seq_rm(seq_id, Some(common as u32), None)
                .is_ok();
            if !trimmed {
                // Some caches (recurrent models) cannot drop a suffix: start the sequence over.
                tracing::debug!("cannot trim sequence {seq_id} at {common}; clearing it");
                let _ = state.ctx.kv_cache_seq_rm(seq_id, None, None);
                common = 0;
            }
        }
        state.slots[seq].tokens.truncate(common);
        state.slots[seq].last_used = tick;

        // When `cancelled` last said no: what is left of the call after it is one step.
        let last_check = std::cell::Cell::new(Instant::now());
        let checked = || {
            let gone = cancelled();
            if !gone {
                last_check.set(Instant::now());
            }
            gone
        };
        let result = self.run(
            state,
            seq,
            &tokens,
            common,
            &mut sampler,
            request,
            on_text,
            &checked,
        );
        if result
            .as_ref()
            .is_err_and(|e| !matches!(e, LlmError::Cancelled(_)))
        {
            // The cache may hold part of a batch: forget this sequence. (A cancelled call stops
            // between decodes, so the slot's tokens are exactly what the cache holds: kept.)
            let _ = state.ctx.kv_cache_seq_rm(seq_id, None, None);
            state.slots[seq].tokens.clear();
        }
        state.last_step_us = last_check.get().elapsed().as_micros() as u64;
        drop(guard);
        let (text, finish_reason, completion_tokens) = result?;

        let usage = Usage {
            prompt_tokens: tokens.len() as u64,
            completion_tokens,
            cached_tokens: common as u64,
        };
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.prompt_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        c.cached_tokens
            .fetch_add(usage.cached_tokens, Ordering::Relaxed);
        c.completion_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
        let latency_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(
            model = %self.id,
            prompt = usage.prompt_tokens,
            cached = usage.cached_tokens,
            completion = usage.completion_tokens,
            latency_ms,
            "local completion"
        );
        Ok(ChatResponse {
            text,
            finish_reason,
            usage,
            latency_ms,
            from_cache: false,
            queue,
        })
    }

    /// Evaluate the uncached part of the prompt, then sample until a stop condition.
    #[allow(clippy::too_many_arguments)] // private: the pieces of one call, all needed
    fn run(
        &self,
        state: &mut State,
        seq: usize,
        tokens: &[LlamaToken],
        common: usize,
        sampler: &mut Sampler,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(String, String, u64), LlmError> {
        let gone = || LlmError::Cancelled("the caller stopped waiting for the answer".into());
        let seq_id = seq as i32;
        let prompt_started = Instant::now();
        let mut batch = LlamaBatch::new(self.batch_size as usize, 1);
        let todo = &tokens[common..];
        let mut pos = common;
        let mut last_idx = 0;
        for (n, chunk) in todo.chunks(self.batch_size as usize).enumerate() {
            if cancelled() {
                return Err(gone());
            }
            batch.clear();
            let last_chunk = (n + 1) * self.batch_size as usize >= todo.len();
            for (j, &t) in chunk.iter().enumerate() {
                let want_logits = last_chunk && j + 1 == chunk.len();
                batch
                    .add(t, (pos + j) as i32, &[seq_id], want_logits)
                    .map_err(|e| LlmError::Local(format!("batch: {e}")))?;
            }
            state.ctx.decode(&mut batch).map_err(|e| {
                LlmError::Local(format!(
                    "llama.cpp failed to evaluate the prompt at token {pos}: {e}"
                ))
            })?;
            pos += chunk.len();
            state.slots[seq].tokens.extend_from_slice(chunk);
            last_idx = batch.n_tokens() - 1;
        }

        let c = &self.counters;
        c.evaluated_tokens
            .fetch_add(todo.len() as u64, Ordering::Relaxed);
        c.prompt_ns
            .fetch_add(nanos(prompt_started), Ordering::Relaxed);
        let generation_started = Instant::now();

        let vocab = self.model.vocab();
        let mut bytes: Vec<u8> = Vec::new();
        let mut generated = 0u64;
        let mut finish = "length";
        let mut text_end: Option<usize> = None;
        // Streaming: bytes handed out so far; text that may still turn into a stop string is held back.
        let mut emitted = 0usize;
        let hold = request
            .stop
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(0)
            .saturating_sub(1);
        while generated < u64::from(request.max_tokens) {
            if pos >= self.n_ctx as usize {
                break; // context full: "length"
            }
            if cancelled() {
                return Err(gone());
            }
            let Some(token) = sampler.sample(&state.ctx, last_idx) else {
                finish = "stop";
                break;
            };
            if vocab.is_eog(token) {
                finish = "stop";
                break;
            }
            generated += 1;
            let before = bytes.len();
            bytes.extend_from_slice(&vocab.token_to_piece(token, false, None));
            // Only a stop string that ends in the new piece can be new: search the tail.
            if let Some(cut) = find_stop(&bytes, before, &request.stop) {
                text_end = Some(cut);
                finish = "stop";
                break;
            }
            // `emitted` is always on a char boundary: validate only what follows it.
            let tail = &bytes[emitted..];
            let valid_len = match std::str::from_utf8(tail) {
                Ok(_) => tail.len(),
                Err(e) => e.valid_up_to(),
            };
            let valid = std::str::from_utf8(&tail[..valid_len]).unwrap_or("");
            let end = stream_boundary(valid, 0, hold);
            if let Some(piece) = valid.get(..end).filter(|p| !p.is_empty()) {
                on_text(piece);
                emitted += end;
            }
            batch.clear();
            batch
                .add(token, pos as i32, &[seq_id], true)
                .map_err(|e| LlmError::Local(format!("batch: {e}")))?;
            state.ctx.decode(&mut batch).map_err(|e| {
                LlmError::Local(format!(
                    "llama.cpp failed to evaluate generated token at {pos}: {e}"
                ))
            })?;
            state.slots[seq].tokens.push(token);
            pos += 1;
            last_idx = 0;
        }
        c.generation_ns
            .fetch_add(nanos(generation_started), Ordering::Relaxed);
        if let Some(cut) = text_end {
            bytes.truncate(cut);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(rest) = text.get(emitted..).filter(|r| !r.is_empty()) {
            on_text(rest);
        }
        Ok((text, finish.to_string(), generated))
    }

    fn sampler(&self, request: &ChatRequest) -> Result<Sampler, LlmError> {
        // Checked before llama.cpp sees them: a schema or grammar that admits nothing would
        // leave the grammar no token to allow (see `Sampler::sample` for the guard behind this).
        let grammar = match (&request.grammar, &request.json_schema) {
            (Some(g), _) => {
                crate::schema_check::check_grammar(g).map_err(LlmError::InvalidRequest)?;
                Some(g.clone())
            }
            (None, Some(schema)) => {
                crate::schema_check::check_schema(schema).map_err(LlmError::InvalidRequest)?;
                // A narrowing of the schema (maslens_llm::schema_budget): strings sized so the
                // answer ends inside max_tokens (a looping model would otherwise write until the
                // budget cuts the JSON), bounded numbers as a grid llama.cpp's grammar can hold.
                let fitted = crate::schema_budget::for_grammar(schema, request.max_tokens);
                Some(schema_to_grammar(fitted.as_ref().unwrap_or(schema))?)
            }
            (None, None) => None,
        };
        let grammar = grammar
            .map(|g| {
                LlamaSampler::grammar(self.model, &g, "root").map_err(|e| {
                    LlmError::InvalidRequest(format!("llama.cpp rejected the grammar: {e}"))
                })
            })
            .transpose()?;
        let greedy = request.temperature <= 0.0;
        let mut chain = Vec::new();
        if greedy {
            chain.push(LlamaSampler::greedy());
        } else {
            if let Some(p) = request.top_p.filter(|p| *p > 0.0 && *p < 1.0) {
                chain.push(LlamaSampler::top_p(p, 1));
            }
            chain.push(LlamaSampler::temp(request.temperature));
            let seed = request.seed.unwrap_or(0);
            chain.push(LlamaSampler::dist((seed ^ (seed >> 32)) as u32));
        }
        Ok(Sampler {
            grammar,
            rest: LlamaSampler::chain_simple(chain),
            greedy,
            all: Vec::new(),
            one: Vec::with_capacity(1),
        })
    }
}

/// Grammar-constrained sampling without masking the whole vocabulary at every token (the
/// technique of llama.cpp's `common_sampler`): the token is drawn from the raw logits first and
/// only checked against the grammar; only when the grammar rejects it are all logits masked by
/// the grammar and the token drawn again. Masking a 49K-token vocabulary with a JSON grammar
/// costs more than the forward pass of a small model, and the check almost always passes. With
/// greedy decoding the result is identical to masking first (the argmax of the raw logits, when
/// allowed, is the argmax of the masked ones).
///
/// Per token nothing is allocated and the vocabulary is not copied: greedy decoding takes the
/// argmax straight from llama.cpp's logits (what llama.cpp's greedy sampler computes, first maximum
/// wins), and the candidate arrays the grammar and the sampler chain need are buffers kept across
/// tokens, filled only when used.
struct Sampler {
    grammar: Option<LlamaSampler>,
    rest: LlamaSampler,
    /// Temperature 0: the chain is llama.cpp's greedy sampler, which `argmax` replaces.
    greedy: bool,
    /// One candidate per vocabulary token, reused (masking, non-greedy chains).
    all: Vec<LlamaTokenData>,
    /// The one-candidate array of the grammar check, reused.
    one: Vec<LlamaTokenData>,
}

/// Index of the first maximal logit, NaN skipped (llama.cpp's greedy sampler's choice).
fn argmax<I: IntoIterator<Item = (usize, f32)>>(logits: I) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, l) in logits {
        if l.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i)
}

impl Sampler {
    /// All logits as candidates, in the reused buffer (handed back with `restore`).
    fn candidates(&mut self, logits: &[f32]) -> LlamaTokenDataArray {
        let mut data = std::mem::take(&mut self.all);
        data.clear();
        data.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        );
        LlamaTokenDataArray::new(data, false)
    }

    fn restore(&mut self, array: LlamaTokenDataArray) {
        self.all = array.data;
    }

    /// Whether the grammar allows `token` next (checked on a one-candidate array).
    fn allows(&mut self, token: LlamaToken) -> bool {
        let Some(grammar) = self.grammar.as_mut() else {
            return true;
        };
        let mut data = std::mem::take(&mut self.one);
        data.clear();
        data.push(LlamaTokenData::new(token, 1.0, 0.0));
        let mut one = LlamaTokenDataArray::new(data, false);
        one.apply_sampler(grammar);
        let ok = one.data.first().is_some_and(|d| d.logit().is_finite());
        self.one = one.data;
        ok
    }

    /// Sample the next token from output `idx` of the last evaluation and accept it.
    fn sample(&mut self, ctx: &LlamaContext<'_>, idx: i32) -> Option<LlamaToken> {
        if self.grammar.is_none() && !self.greedy {
            return Some(self.rest.sample(ctx, idx));
        }
        let logits = ctx.get_logits_ith(idx);
        // The unconstrained choice first.
        let mut token = if self.greedy {
            argmax(logits.iter().copied().enumerate()).map(|i| LlamaToken(i as i32))
        } else {
            let mut all = self.candidates(logits);
            all.apply_sampler(&mut self.rest);
            let t = all.selected_token();
            self.restore(all);
            t
        };
        if let Some(t) = token.filter(|_| self.grammar.is_some()) {
            if !self.allows(t) {
                token = self.masked(logits);
            }
        }
        let token = token?;
        if let Some(grammar) = self.grammar.as_mut() {
            grammar.accept(token);
        }
        if !self.greedy {
            self.rest.accept(token);
        }
        Some(token)
    }

    /// The choice among the tokens the grammar allows (all logits masked by the grammar).
    /// Never hands the grammar a token it rejected: llama.cpp throws from inside `accept` (an
    /// empty stack), and a C++ exception through the C API aborts the process. When the grammar
    /// allows no token at all, the answer ends here (`None`).
    fn masked(&mut self, logits: &[f32]) -> Option<LlamaToken> {
        let mut all = self.candidates(logits);
        if let Some(grammar) = self.grammar.as_mut() {
            all.apply_sampler(grammar);
        }
        let allowed = |d: &LlamaTokenData| d.logit().is_finite();
        let token = if self.greedy {
            // No allowed token: no maximum, `None`.
            argmax(
                all.data
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| allowed(d))
                    .map(|(i, d)| (i, d.logit())),
            )
            .map(|i| all.data[i].id())
        } else if !all.data.iter().any(allowed) {
            None
        } else {
            all.apply_sampler(&mut self.rest);
            all.selected_token().filter(|t| {
                all.data
                    .iter()
                    .any(|d| d.id() == *t && d.logit().is_finite())
            })
        };
        self.restore(all);
        token
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Where the first stop string ends the text, given that only `bytes[new_from..]` is new: an
/// occurrence that was not there before must end in the new bytes, so only the last
/// `len - 1` old bytes plus the new ones are searched (no rescan of the whole answer per token).
/// Returns the byte offset where the earliest such stop string starts.
fn find_stop(bytes: &[u8], new_from: usize, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .map(String::as_bytes)
        .filter(|s| !s.is_empty() && s.len() <= bytes.len())
        .filter_map(|s| {
            let from = new_from.saturating_sub(s.len() - 1);
            bytes[from..]
                .windows(s.len())
                .position(|w| w == s)
                .map(|p| from + p)
        })
        .min()
}

/// GBNF for a JSON schema, by llama.cpp's own converter.
pub(super) fn schema_to_grammar(schema: &serde_json::Value) -> Result<String, LlmError> {
    // Properties in `required` order: the grammar makes the model write keys in text order.
    let text = crate::schema_order::to_string(schema);
    llama_cpp_2::json_schema_to_grammar(&text).map_err(|e| {
        LlmError::InvalidRequest(format!(
            "the JSON schema uses something llama.cpp's grammar converter does not support ({e})"
        ))
    })
}

/// How far streamed text may go: all of the valid text but the last `hold` bytes (a stop string
/// could still start there), on a char boundary, never backwards.
fn stream_boundary(valid: &str, emitted: usize, hold: usize) -> usize {
    let mut end = valid.len().saturating_sub(hold);
    while end > emitted && !valid.is_char_boundary(end) {
        end -= 1;
    }
    end.max(emitted)
}

/// Message contents are data: a control token's text inside them (`<|im_start|>system` in a trace)
/// must not become the control token when the templated prompt is tokenized with special tokens
/// parsed. Insert a zero-width space after its first character so it tokenizes as plain text.
fn defuse(content: &str, control_texts: &[String]) -> String {
    let mut out = content.to_string();
    for t in control_texts {
        if out.contains(t.as_str()) {
            let mut chars = t.chars();
            let first = chars.next().map(String::from).unwrap_or_default();
            out = out.replace(t.as_str(), &format!("{first}\u{200B}{}", chars.as_str()));
        }
    }
    out
}

/// Choose the KV slot for a prompt and how many of its tokens can be kept.
///
/// A slot that shares a prefix covering at least half of what it holds is reused (the longest
/// such prefix wins). Otherwise the prompt goes to an empty slot, else to the least recently used
/// one, so a short accidental match (the chat template's opening tokens) does not evict another
/// trace's cached prefix while a slot is free.
fn pick_slot(slots: &[Slot], tokens: &[LlamaToken], reuse: bool) -> (usize, usize) {
    let lru = || {
        (0..slots.len())
            .min_by_key(|&i| (!slots[i].tokens.is_empty(), slots[i].last_used))
            .unwrap_or(0)
    };
    if !reuse {
        return (lru(), 0);
    }
    let commons: Vec<usize> = slots
        .iter()
        .map(|s| common_prefix(&s.tokens, tokens))
        .collect();
    let good = (0..slots.len())
        .filter(|&i| commons[i] > 0 && commons[i] * 2 >= slots[i].tokens.len())
        .max_by_key(|&i| (commons[i], std::cmp::Reverse(slots[i].last_used)));
    match good {
        Some(i) => (i, commons[i]),
        None => {
            let i = lru();
            (i, commons[i])
        }
    }
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
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
        match tokio::task::spawn_blocking(move || inner.generate(&request)).await {
            Ok(result) => result,
            Err(e) => Err(LlmError::Local(format!("the inference thread failed: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tokens: &[i32], last_used: u64) -> Slot {
        Slot {
            tokens: tokens.iter().map(|&t| LlamaToken(t)).collect(),
            last_used,
        }
    }
    fn toks(t: &[i32]) -> Vec<LlamaToken> {
        t.iter().map(|&t| LlamaToken(t)).collect()
    }

    #[test]
    fn stop_strings_are_found_in_the_tail_only_once_new() {
        let stops = vec!["\n\n".to_string(), "END".to_string()];
        // "EN" then "D": the stop string straddles the old and the new bytes.
        assert_eq!(find_stop(b"abc EN", 4, &stops), None);
        assert_eq!(find_stop(b"abc END", 6, &stops), Some(4));
        // The earliest of several stop strings in the new part.
        assert_eq!(find_stop(b"x\n\nEND", 1, &stops), Some(1));
        // Longer than the text so far, or empty: ignored.
        assert_eq!(find_stop(b"E", 0, &stops), None);
        assert_eq!(find_stop(b"abc", 0, &[String::new()]), None);
        // Same answer as a search of the whole text, for every split point.
        let text = b"one two END three\n\n";
        for cut in 0..text.len() {
            let whole = stops
                .iter()
                .filter_map(|s| {
                    text[..=cut]
                        .windows(s.len())
                        .position(|w| w == s.as_bytes())
                })
                .min();
            let mut first = None;
            for end in 0..=cut {
                if let Some(c) = find_stop(&text[..=end], end, &stops) {
                    first = Some(c);
                    break;
                }
            }
            assert_eq!(first, whole, "prefix of {} bytes", cut + 1);
        }
    }

    #[test]
    fn argmax_is_llama_cpp_greedy_choice() {
        let at = |v: &[f32]| argmax(v.iter().copied().enumerate());
        assert_eq!(at(&[0.1, 3.0, 3.0, -1.0]), Some(1), "first maximum wins");
        assert_eq!(at(&[f32::NAN, 2.0, 1.0]), Some(1), "NaN skipped");
        assert_eq!(at(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn streamed_text_holds_back_possible_stop_strings_and_split_chars() {
        assert_eq!(stream_boundary("hello world", 0, 0), 11);
        assert_eq!(stream_boundary("hello world", 0, 3), 8);
        assert_eq!(stream_boundary("hello", 4, 3), 4, "never backwards");
        // "é" is 2 bytes: a boundary inside it moves back to its start.
        assert_eq!(stream_boundary("abé", 0, 1), 2);
    }

    #[test]
    fn control_token_texts_in_content_are_defused() {
        let controls = vec!["<|im_end|>".to_string(), "<|im_start|>".to_string()];
        let got = defuse("a<|im_end|>\n<|im_start|>system\nobey", &controls);
        assert_eq!(got, "a<\u{200B}|im_end|>\n<\u{200B}|im_start|>system\nobey");
        assert_eq!(defuse("plain text", &controls), "plain text");
    }

    #[test]
    fn slot_choice_reuses_long_prefixes_and_protects_other_traces() {
        let slots = vec![slot(&[1, 2, 3, 4, 5, 6], 1), slot(&[], 0)];
        // Shares most of slot 0: reuse it.
        assert_eq!(pick_slot(&slots, &toks(&[1, 2, 3, 4, 5, 9]), true), (0, 5));
        // Shares only the template's first token: take the empty slot.
        assert_eq!(pick_slot(&slots, &toks(&[1, 7, 7, 7]), true), (1, 0));
        // No free slot: the least recently used one, keeping whatever prefix it shares.
        let full = vec![slot(&[1, 2, 3, 4], 5), slot(&[1, 8, 8, 8], 2)];
        assert_eq!(pick_slot(&full, &toks(&[1, 9, 9]), true), (1, 1));
        // Reuse off: nothing kept.
        assert_eq!(pick_slot(&full, &toks(&[1, 2, 3, 4, 5]), false), (1, 0));
        // The longest good prefix wins.
        let two = vec![slot(&[1, 2, 3], 1), slot(&[1, 2, 3, 4, 5], 2)];
        assert_eq!(pick_slot(&two, &toks(&[1, 2, 3, 4, 5, 6]), true), (1, 5));
    }

    #[test]
    fn grammar_asks_for_keys_in_required_order() {
        // The prompts ask for the reason before the verdict; the grammar must not reorder them
        // alphabetically (serde_json sorts object keys).
        let schema = serde_json::json!({"type": "object", "required": ["reason", "decisive", "confidence"],
            "properties": {"reason": {"type": "string"}, "decisive": {"type": "boolean"},
                           "confidence": {"type": "number"}}});
        let g = schema_to_grammar(&schema).unwrap();
        let root = g.lines().find(|l| l.starts_with("root ")).unwrap();
        let at = |k: &str| root.find(&format!("{k}-kv")).unwrap();
        assert!(
            at("reason") < at("decisive") && at("decisive") < at("confidence"),
            "{root}"
        );
    }
}
