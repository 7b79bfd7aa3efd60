//! The embedded backend: GGUF models run in-process through llama.cpp (`llama-cpp-2`, feature
//! `local`), plus the local model store (`maslens model pull`), which works without the feature.
//!
//! `local:` specs: a known model name (`smollm2-135m`, `gemma3-270m`, fetched into
//! `$MASLENS_HOME/models`), a GGUF path (`/path/m.gguf`), or a GGUF plus a LoRA adapter
//! (`/path/m.gguf+/path/adapter.gguf`).
//!
//! Decoding is greedy and deterministic by default; `temperature > 0` samples with `top_p` and
//! `seed`. A request's JSON schema becomes a GBNF grammar (llama.cpp's own converter), a raw
//! `grammar` is used as given. Calls that share a token prefix with what a context last evaluated
//! (the same trace under a Judge and several Evaluators) reuse its KV cache and only evaluate the
//! rest; the reused tokens are reported as `usage.cached_tokens`.

pub mod store;

#[cfg(feature = "local")]
pub mod bench;
#[cfg(feature = "local")]
mod engine;

use crate::{ChatModel, LlmError};
use std::path::PathBuf;
use std::sync::Arc;

/// Options of the embedded backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalOptions {
    /// CPU threads (default: all available cores).
    pub threads: Option<usize>,
    /// Context window per slot in tokens (default: the model's training context, at most 8192).
    pub context_size: Option<u32>,
    /// KV-cache slots (sequences) kept per context; each remembers the last prompt it evaluated,
    /// so interleaved calls over different traces still find their prefix (default 1).
    pub slots: usize,
    /// Reuse the longest common token prefix of the KV cache between calls (default true;
    /// off only to measure what reuse saves).
    pub prefix_reuse: bool,
    /// Tokens evaluated per `decode` call while reading a prompt (default 512).
    pub batch_size: u32,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            threads: None,
            context_size: None,
            slots: 1,
            prefix_reuse: true,
            batch_size: 512,
        }
    }
}

/// What a `local:` spec names: the GGUF and an optional LoRA adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSpec {
    /// The spec as given (after `local:`); the model id is `local:<spec>`.
    pub spec: String,
    pub model_path: PathBuf,
    pub adapter_path: Option<PathBuf>,
}

/// Resolve a `local:` spec (without the `local:` prefix) against the default model store.
pub fn resolve_spec(spec: &str) -> Result<LocalSpec, LlmError> {
    resolve_spec_in(spec, &store::ModelStore::default())
}

/// Resolve a `local:` spec against a given model store.
pub fn resolve_spec_in(spec: &str, store: &store::ModelStore) -> Result<LocalSpec, LlmError> {
    let spec = spec.strip_prefix("local:").unwrap_or(spec).trim();
    if spec.is_empty() {
        return Err(LlmError::Spec {
            spec: "local:".into(),
            reason: "missing model name or GGUF path after `local:`".into(),
        });
    }
    let (model_part, adapter_part) = match spec.split_once('+') {
        Some((m, a)) => (m.trim(), Some(a.trim())),
        None => (spec, None),
    };
    let model_path = resolve_model(model_part, store)?;
    let adapter_path = match adapter_part {
        Some("") => {
            return Err(LlmError::Spec {
                spec: format!("local:{spec}"),
                reason: "empty LoRA adapter path after `+`".into(),
            })
        }
        Some(a) => {
            let p = PathBuf::from(a);
            store::check_gguf_magic(&p)?;
            Some(p)
        }
        None => None,
    };
    Ok(LocalSpec {
        spec: spec.to_string(),
        model_path,
        adapter_path,
    })
}

fn resolve_model(part: &str, store: &store::ModelStore) -> Result<PathBuf, LlmError> {
    let looks_like_path = part.contains('/') || part.contains('\\') || part.ends_with(".gguf");
    if !looks_like_path {
        if store::known_model(part).is_some() || store.manifest(part)?.is_some() {
            return store.resolve(part);
        }
        return Err(LlmError::ModelUnavailable(format!(
            "unknown embedded model {part:?}: give a GGUF path or one of {} (fetch with `maslens model pull NAME`)",
            store::KNOWN_MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        )));
    }
    let path = PathBuf::from(part);
    store::check_gguf_magic(&path)?;
    Ok(path)
}

/// Open an embedded model. `spec` is what follows `local:` (`smollm2-135m`, `/path/m.gguf`,
/// `/p/m.gguf+/p/adapter.gguf`). Weights are loaded once per process and shared; opening the
/// same spec with the same options again shares the context (and its prefix cache) too.
pub fn open_local(spec: &str, opts: &LocalOptions) -> Result<Arc<dyn ChatModel>, LlmError> {
    let resolved = resolve_spec(spec)?;
    open_resolved(resolved, opts)
}

#[cfg(feature = "local")]
fn open_resolved(resolved: LocalSpec, opts: &LocalOptions) -> Result<Arc<dyn ChatModel>, LlmError> {
    let model: Arc<dyn ChatModel> = engine::open(resolved, opts)?;
    Ok(model)
}

#[cfg(not(feature = "local"))]
fn open_resolved(
    resolved: LocalSpec,
    _opts: &LocalOptions,
) -> Result<Arc<dyn ChatModel>, LlmError> {
    Err(LlmError::ModelUnavailable(format!(
        "local:{} needs the embedded llama.cpp backend, but this maslens was built without the `local` \
         feature; rebuild with default features (needs cmake, clang, libclang-dev) or use an \
         `openai:` model",
        resolved.spec
    )))
}

/// Open an embedded model and return it with its concrete type (prefix-cache statistics,
/// tokenizer access); see [`open_local`].
#[cfg(feature = "local")]
pub fn open_local_model(spec: &str, opts: &LocalOptions) -> Result<Arc<LocalModel>, LlmError> {
    engine::open(resolve_spec(spec)?, opts)
}

#[cfg(feature = "local")]
pub use engine::{EngineTimings, LocalModel};

#[cfg(feature = "local")]
pub use bench::{bench_spec, BenchOptions};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_errors_name_the_problem() {
        let home = std::env::temp_dir().join(format!("maslens-spec-{}", std::process::id()));
        let store = store::ModelStore::new(&home);
        let err = resolve_spec_in("local:", &store).unwrap_err().to_string();
        assert!(err.contains("missing model name"), "{err}");
        let err = resolve_spec_in("no-such-model", &store)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown embedded model") && err.contains("smollm2-135m"),
            "{err}"
        );
        let err = resolve_spec_in("smollm2-135m", &store)
            .unwrap_err()
            .to_string();
        assert!(err.contains("maslens model pull smollm2-135m"), "{err}");
        let err = resolve_spec_in("/nonexistent/m.gguf", &store)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/m.gguf"), "{err}");
        let not_gguf = home.join("x.gguf");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(&not_gguf, b"hello world").unwrap();
        let err = resolve_spec_in(&format!("{}", not_gguf.display()), &store)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a GGUF file"), "{err}");
        let err = resolve_spec_in(&format!("{}+", not_gguf.display()), &store)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a GGUF file"),
            "model checked first: {err}"
        );
        std::fs::remove_dir_all(&home).unwrap();
    }
}
