//! maslens-llm: the one LLM abstraction every maslens method uses.
//!
//! Methods build a [`ChatRequest`] and call [`ChatModel::complete`]. Backends (OpenAI-compatible
//! HTTP, the Anthropic Messages API, embedded llama.cpp, replay) implement the trait; caching,
//! budgets and usage accounting wrap any backend.

pub mod types;

pub use types::*;
pub mod anthropic;
pub mod batch;
pub mod batch_run;
pub mod budget;
pub mod cache;
pub mod catalog;
pub mod config;
/// Embedded llama.cpp backend (feature `local`) and the local model store.
pub mod local;
pub mod openai;
pub mod openai_wire;
pub mod preflight;
pub mod prompt;
pub mod retry;
pub mod schema_budget;
pub mod schema_check;
pub mod schema_order;
pub mod spec;
pub mod stack;
pub mod structured;
pub mod testing;
pub mod typed;
pub mod usage;
pub mod wrap;

pub use stack::{maslens_home, open, CacheMode, OpenOptions, Stack};
pub use usage::Totals;
