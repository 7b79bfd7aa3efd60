//! maslens-llm: the one LLM abstraction every maslens method uses.
//!
//! Methods build a [`ChatRequest`] and call [`ChatModel::complete`]. Backends (OpenAI-compatible
//! HTTP, embedded llama.cpp, replay) implement the trait; caching, budgets and usage accounting
//! wrap any backend.

pub mod types;

pub use types::*;
pub mod testing;
pub mod prompt;
pub mod structured;
