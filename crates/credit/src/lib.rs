//! maslens-credit: debate runtime, LLM critics, structural/temporal credit, and credit-guided
//! prompt optimization by verbalized block coordinate descent (BCD).
//!
//! Implements "Unifying Temporal and Structural Credit Assignment in LLM-Based Multi-Agent Prompt
//! Optimization" (Li et al., 2026), sections 3-5 and appendix B, on the maslens trace model and
//! LLM layer. See `docs/credit.md` for the readings chosen where the paper is ambiguous.
//!
//! - [`debate`]: N roles with stationary prompts, R rounds, a per-round aggregator producing the
//!   shared state S_t, written as maslens traces.
//! - [`data`], [`answer`]: MCQ loaders, splits and the fixed answer rule.
//! - [`critic`]: AgentTurnEval (B.1), the peer-view judge, the aggregator critic.
//! - [`credit`]: fusion, structural and temporal credit, EMA temporal credit, selection.
//! - [`optimize`]: Phase A (AgentDiagnosis B.2 + RolePromptOptimize B.3) and Phase B (aggregator
//!   rewrite), the black-box baseline, ablations, budgets.
//! - [`inject`]: fault injection into successful debates (labelled failure traces).
//! - [`simulation`]: a **simulated** multi-agent system (not a model) for testing the optimizer.
//! - [`trace_credit`]: role x round credit for any imported trace.
//! - [`report`]: tables, JSON, Markdown and HTML with plots.

pub mod answer;
mod bcd_state;
pub mod config;
pub mod credit;
pub mod credit_run;
pub mod critic;
pub mod data;
pub mod data_mcq;
pub mod debate;
pub mod experiment;
pub mod inject;
pub mod optimize;
pub mod report;
pub mod simulation;
pub mod trace_credit;

pub use config::{DebateConfig, PromptSet};
pub use data::Mcq;
pub use debate::{DebateRun, ModelSet};

/// Errors of the credit crate.
#[derive(Debug, thiserror::Error)]
pub enum CreditError {
    #[error(transparent)]
    Llm(#[from] maslens_llm::LlmError),
    #[error(transparent)]
    Prompt(#[from] maslens_llm::prompt::PromptError),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Data(#[from] data::DataError),
    #[error("model spec {0:?} was not built by the caller")]
    UnknownModel(String),
    #[error("{0}")]
    Other(String),
}
