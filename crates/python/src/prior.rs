//! The learned prior without an LLM, as `maslens prior train/eval/rank` runs it
//! (`maslens_core::prior`): each takes traces and returns JSON text (the report, or the ranked
//! candidates) that `python/maslens` turns into dicts.

use crate::methods::to_text;
use crate::trace::Trace;
use crate::{guarded, OptionsError};
use maslens_core::prior;
use maslens_prior::model::PairRule;
use maslens_trace::Trace as RsTrace;
use pyo3::prelude::*;
use serde_json::json;
use std::path::PathBuf;

/// The traces as the core takes them: borrowed from the Python objects, not copied.
fn borrowed<'a>(traces: &'a [Bound<'_, Trace>]) -> Vec<&'a RsTrace> {
    traces.iter().map(|t| t.get().inner.as_ref()).collect()
}

fn options_error(e: impl std::fmt::Display) -> PyErr {
    OptionsError::new_err(e.to_string())
}

fn load(model_path: Option<PathBuf>) -> PyResult<prior::LoadedModel> {
    prior::load_model(model_path.as_deref()).map_err(options_error)
}

/// Evaluate a fixed prior model (the built-in one, or the file at `model_path`) on labelled
/// traces next to the baselines: the report (`maslens prior eval --json`), whose `in_sample`
/// says when the model was trained on some of them.
#[pyfunction]
#[pyo3(signature = (traces, model_path = None, seed = 7, bootstrap = 2000))]
pub fn prior_eval(
    traces: Vec<Bound<'_, Trace>>,
    model_path: Option<PathBuf>,
    seed: u64,
    bootstrap: usize,
) -> PyResult<String> {
    guarded(|| {
        let model = load(model_path)?;
        let report = prior::evaluate(
            &borrowed(&traces),
            0,
            &model,
            &prior::eval_config(seed, bootstrap),
        )
        .map_err(options_error)?;
        to_text(&json!(report))
    })
}

/// Train a prior model on labelled traces (the frozen protocol of `maslens prior train`, or one
/// configuration when `alpha`, `agent_alpha` or `objective` is given), write it to `out`, and
/// return the report.
#[pyfunction]
#[pyo3(signature = (traces, out, folds = 10, inner_folds = 5, alpha = None, agent_alpha = None,
                    objective = None, pair_rule = "independent", agent_head = true, seed = 7,
                    bootstrap = 2000))]
#[allow(clippy::too_many_arguments)]
pub fn prior_train(
    traces: Vec<Bound<'_, Trace>>,
    out: PathBuf,
    folds: usize,
    inner_folds: usize,
    alpha: Option<f64>,
    agent_alpha: Option<f64>,
    objective: Option<String>,
    pair_rule: &str,
    agent_head: bool,
    seed: u64,
    bootstrap: usize,
) -> PyResult<String> {
    guarded(|| {
        let objective =
            match objective.as_deref() {
                None => None,
                Some(o) => Some(maslens_prior::run::parse_objective(o).ok_or_else(|| {
                    options_error(format!("objective {o:?}: pointwise or listwise"))
                })?),
            };
        let pair_rule: PairRule =
            maslens_prior::run::parse_pair_rule(pair_rule).ok_or_else(|| {
                options_error(format!(
                    "pair_rule {pair_rule:?}: independent or agent-first"
                ))
            })?;
        let request = prior::TrainRequest {
            folds,
            inner_folds,
            alpha,
            agent_alpha,
            objective,
            pair_rule,
            agent_head,
            seed,
            bootstrap,
            oof_probs: false,
            inputs: vec!["python".into()],
        };
        let trained = prior::train(&borrowed(&traces), 0, &request).map_err(options_error)?;
        trained
            .model
            .save(&out)
            .map_err(|e| options_error(format!("writing the model to {}: {e}", out.display())))?;
        to_text(&json!(trained.report))
    })
}

/// The `top` most likely (agent, step) candidates of each trace under the prior model (the
/// built-in one, or the file at `model_path`), as `maslens prior rank --json` prints them.
#[pyfunction]
#[pyo3(signature = (traces, model_path = None, top = 5))]
pub fn prior_rank(
    traces: Vec<Bound<'_, Trace>>,
    model_path: Option<PathBuf>,
    top: usize,
) -> PyResult<String> {
    guarded(|| {
        let model = load(model_path)?.model;
        let ranked: Vec<prior::Ranked> = traces
            .iter()
            .map(|t| prior::rank(&model, &t.get().inner, top))
            .collect();
        to_text(&json!(ranked))
    })
}
