//! maslens-prior: a learned failure localizer that needs no LLM.
//!
//! Per-step features ([`features`]) computed from the trace alone feed an L2-regularized
//! logistic regression ([`model`], trained with `smartcore`) that scores every step, hence
//! every (agent, step) pair: the agent is the one acting at the step. Scores become a
//! distribution over the trace's steps (softmax), and an agent distribution by summing the
//! agent's step probabilities. [`eval`] holds the metrics, baselines and the deterministic
//! cross-validation protocols; [`run`] trains, evaluates and ranks from typed options (the
//! library path of `maslens prior`). `docs/prior.md` documents the features and the protocol.

pub mod eval;
pub mod explain;
pub mod features;
pub mod head;
pub mod model;
pub mod probs;
pub mod run;
pub mod text;

pub use eval::{EvalConfig, Prediction};
pub use features::{extract, FEATURE_NAMES, N_FEATURES};
pub use maslens_eval::metrics::Accuracy;
pub use model::AGENT_FEATURE_NAMES;
pub use model::{
    AgentAggregation, Candidate, InjectedUse, Objective, PairRule, PriorModel, TrainConfig,
    MODEL_FORMAT,
};

/// The default model shipped with maslens (trained on the Who&When dev traces; provenance in
/// `crates/prior/models/README.md`).
pub const DEFAULT_MODEL_JSON: &str = include_str!("../models/whowhen-v1.json");

/// Errors of the prior.
#[derive(Debug, thiserror::Error)]
pub enum PriorError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not a maslens prior model: {source}")]
    ModelParse {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: invalid prior model: {what}")]
    ModelInvalid { origin: String, what: String },
    #[error("training failed: {0}")]
    Train(String),
}

/// The shipped default model.
pub fn load_default() -> Result<PriorModel, PriorError> {
    PriorModel::from_json(DEFAULT_MODEL_JSON, "built-in model whowhen-v1")
}
