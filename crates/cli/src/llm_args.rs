//! LLM options shared by every LLM-backed command (flatten `LlmArgs` into a command's Args).

use std::path::PathBuf;
use std::sync::Arc;

/// How the LLM call cache is used.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Answer from the cache when possible, record every new call (default).
    #[default]
    ReadWrite,
    /// No cache.
    Off,
    /// Answer only from the cache; a miss is an error.
    Replay,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LlmArgs {
    /// Model spec: `local:smollm2-135m`, `local:/path/model.gguf`, `openai:gpt-4o-mini`,
    /// `openai:NAME@http://host:8000/v1`.
    #[arg(long, env = "MASLENS_MODEL", default_value = "local:smollm2-135m")]
    pub model: String,
    /// Base URL of an OpenAI-compatible server (overrides the one in the spec).
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub base_url: Option<String>,
    /// Cache mode.
    #[arg(long, value_enum, default_value_t = CacheMode::ReadWrite)]
    pub cache_mode: CacheMode,
    /// Cache file (SQLite); default `$MASLENS_HOME/cache.sqlite`.
    #[arg(long, env = "MASLENS_CACHE")]
    pub cache: Option<PathBuf>,
    /// Stop cleanly after this many backend calls.
    #[arg(long)]
    pub max_calls: Option<u64>,
    /// Stop cleanly after this many tokens (prompt + completion).
    #[arg(long)]
    pub max_tokens_total: Option<u64>,
    /// Stop cleanly after this cost in USD.
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// Concurrent requests to the backend.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// CPU threads for the embedded model.
    #[arg(long)]
    pub threads: Option<usize>,
}

impl LlmArgs {
    /// Build the model stack (backend + cache + budget) these options describe.
    pub async fn build(&self) -> anyhow::Result<Arc<dyn maslens_llm::ChatModel>> {
        anyhow::bail!("LLM backends are not implemented yet (model {})", self.model)
    }
}
