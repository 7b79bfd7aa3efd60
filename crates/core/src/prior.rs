//! `maslens prior train`, `eval` and `rank` as every front end starts them: the choice between
//! the frozen selection protocol and one fixed configuration ([`TrainRequest`]), the model to
//! apply (the built-in one or a file, [`load_model`]), and the in-sample note of an evaluation
//! on traces the model was trained on ([`evaluate`]). The protocols themselves (nested
//! cross-validation, leave-group-out, the baselines) are `maslens_prior::run`'s.

use crate::CoreError;
use maslens_prior::eval::Setting;
use maslens_prior::model::{Objective, PairRule};
use maslens_prior::run::TrainOptions;
use maslens_prior::{AgentAggregation, EvalConfig, PriorModel, TrainConfig};
use maslens_trace::Trace;
use std::path::Path;

pub use maslens_prior::run::{rank, render_text, EvalReport, Ranked, Trained};

/// What `maslens prior train` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRequest {
    /// Outer cross-validation folds, grouped by task question (< 2: no cross-validation).
    pub folds: usize,
    /// Folds of the selection among configurations.
    pub inner_folds: usize,
    /// Any of these fixes the configuration (the others take the built-in defaults); with none
    /// the protocol chooses among its configurations.
    pub alpha: Option<f64>,
    pub agent_alpha: Option<f64>,
    pub objective: Option<Objective>,
    pub pair_rule: PairRule,
    /// The learned agent head (else agents are ranked by summed step probability).
    pub agent_head: bool,
    pub seed: u64,
    pub bootstrap: usize,
    /// Also compute the out-of-fold step distributions (`--oof-probs`).
    pub oof_probs: bool,
    /// The inputs as given, for the model's provenance note.
    pub inputs: Vec<String>,
}

impl TrainRequest {
    /// Whether the request fixes the configuration (nothing is selected).
    pub fn is_fixed(&self) -> bool {
        self.alpha.is_some() || self.agent_alpha.is_some() || self.objective.is_some()
    }

    /// The options of `maslens_prior::run::train` this request means.
    pub fn options(&self) -> TrainOptions {
        let defaults = TrainConfig::default();
        let base = TrainConfig {
            alpha: self.alpha.unwrap_or(defaults.alpha),
            agent_alpha: self.agent_alpha.or(defaults.agent_alpha),
            objective: self.objective.unwrap_or_default(),
            pair_rule: self.pair_rule,
            seed: self.seed,
            agent_head: self.agent_head,
            agent_aggregation: AgentAggregation::Sum,
            ..defaults
        };
        TrainOptions {
            folds: self.folds,
            inner_folds: self.inner_folds,
            candidates: if self.is_fixed() {
                vec![Setting::new("all", base.clone())]
            } else {
                Vec::new()
            },
            train: base,
            eval: eval_config(self.seed, self.bootstrap),
            oof_probs: self.oof_probs,
            inputs: self.inputs.clone(),
        }
    }
}

/// The metrics' settings: bootstrap resamples and seed.
pub fn eval_config(seed: u64, bootstrap: usize) -> EvalConfig {
    EvalConfig {
        bootstrap,
        seed,
        ..EvalConfig::default()
    }
}

/// Train: the evaluation protocols, then the model chosen on all traces, which records the
/// traces it was trained on (so a later evaluation on them says it is in-sample).
pub fn train(traces: &[&Trace], skipped: usize, req: &TrainRequest) -> Result<Trained, CoreError> {
    Ok(maslens_prior::run::train(traces, skipped, &req.options())?)
}

/// A model to apply, and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub model: PriorModel,
    /// The file it was read from (`None`: the built-in model).
    pub path: Option<String>,
}

/// The model at `path`, else the built-in one.
pub fn load_model(path: Option<&Path>) -> Result<LoadedModel, CoreError> {
    Ok(match path {
        Some(p) => LoadedModel {
            model: PriorModel::load(p)?,
            path: Some(p.display().to_string()),
        },
        None => LoadedModel {
            model: maslens_prior::load_default()?,
            path: None,
        },
    })
}

/// Evaluate a fixed model on labelled traces next to the baselines; the report's `in_sample`
/// says when the model was trained on some of them ([`crate::in_sample::model_note`]).
pub fn evaluate(
    traces: &[&Trace],
    skipped: usize,
    model: &LoadedModel,
    ecfg: &EvalConfig,
) -> Result<EvalReport, CoreError> {
    let mut report =
        maslens_prior::run::evaluate(traces, skipped, &model.model, model.path.as_deref(), ecfg)?;
    report.in_sample = crate::in_sample::model_note(&model.model, model.path.is_none(), traces);
    for method in report.protocols.iter_mut().flat_map(|p| &mut p.methods) {
        method.in_sample.clone_from(&report.in_sample);
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
