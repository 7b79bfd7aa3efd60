//! Model and context loading: the llama.cpp backend, the process-wide registry of loaded
//! weights (GGUF and LoRA), and a context sized for the requested slots.

use super::{LocalOptions, LocalSpec, DEFAULT_MAX_CONTEXT};
use crate::LlmError;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaLoraAdapter, LlamaModel};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

pub(super) fn backend() -> Result<&'static LlamaBackend, LlmError> {
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

pub(super) fn load_weights(
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

/// A context over loaded weights and how it is divided.
pub(super) struct Context {
    pub ctx: LlamaContext<'static>,
    /// KV-cache sequences (slots) in the context.
    pub slots: usize,
    /// Context window of one slot.
    pub n_ctx: u32,
    /// Tokens evaluated per `decode` call.
    pub batch_size: u32,
}

/// A context of `opts.slots` sequences of the requested size (at most the model's training
/// context each), with the LoRA adapter applied.
pub(super) fn new_context(
    spec: &LocalSpec,
    model: &'static LlamaModel,
    adapter: Option<&'static Mutex<LlamaLoraAdapter>>,
    opts: &LocalOptions,
) -> Result<Context, LlmError> {
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
    let total = per_slot
        .checked_mul(slots as u32)
        .ok_or_else(|| LlmError::Local(format!("context {per_slot} x {slots} slots overflows")))?;
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
    Ok(Context {
        ctx,
        slots,
        n_ctx,
        batch_size,
    })
}
