//! maslens' debate runtime for `maslens.DebateSystem` (python/maslens/systems.py): the credit
//! paper's setting behind the improvement loop's system protocol. One debate on one question,
//! from its start or resumed after recorded turns, and the questions of a dataset.

use crate::model::{model_error, Model};
use crate::trace::Trace;
use crate::{guarded, InternalError, Interrupt, OptionsError};
use maslens_credit::config::DebateConfig;
use maslens_credit::data::{load_spec, Mcq};
use maslens_credit::debate::{resume_debate, to_trace, ModelSet};
use maslens_credit::CreditError;
use maslens_trace::Outcome;
use pyo3::prelude::*;
use serde::Deserialize;
use std::collections::BTreeMap;

fn credit_error(e: CreditError) -> PyErr {
    match e {
        CreditError::Llm(e) => model_error(&e),
        e => OptionsError::new_err(e.to_string()),
    }
}

fn config(text: &str) -> PyResult<DebateConfig> {
    DebateConfig::from_toml(text, "config").map_err(|e| OptionsError::new_err(e.to_string()))
}

/// The roles' prompts of a debate configuration (TOML text), in role order.
#[pyfunction]
pub fn debate_prompts(config_toml: &str) -> PyResult<Vec<(String, String)>> {
    guarded(|| {
        let cfg = config(config_toml)?;
        Ok(cfg
            .roles
            .iter()
            .map(|r| (r.name.clone(), r.prompt.clone()))
            .collect())
    })
}

/// A question as `DebateSystem` passes it: the gold letter when the task has one.
#[derive(Deserialize)]
struct Question {
    id: String,
    question: String,
    options: Vec<String>,
    answer: Option<char>,
}

/// One debate on `question` (JSON: id, question, options, answer or null) with the roles'
/// `prompts` (JSON: role name -> prompt; roles not named keep the configuration's), resumed after
/// `recorded` (the first turns' texts in trace order). Returns the trace (outcome unknown without
/// a gold letter) and the final answer letter.
#[pyfunction]
#[pyo3(signature = (model, config_toml, prompts, question, recorded = Vec::new(), seed = 0))]
pub fn debate_run(
    py: Python<'_>,
    model: Bound<'_, Model>,
    config_toml: &str,
    prompts: &str,
    question: &str,
    recorded: Vec<String>,
    seed: u64,
) -> PyResult<(Trace, Option<String>)> {
    let cfg = config(config_toml)?;
    let by_role: BTreeMap<String, String> = serde_json::from_str(prompts)
        .map_err(|e| OptionsError::new_err(format!("prompts: {e}")))?;
    if let Some(unknown) = by_role
        .keys()
        .find(|n| !cfg.roles.iter().any(|r| &r.name == *n))
    {
        return Err(OptionsError::new_err(format!(
            "prompts: {unknown:?} is not a role of the debate ({:?})",
            cfg.role_names()
        )));
    }
    let mut set = cfg.prompts();
    for (i, role) in cfg.roles.iter().enumerate() {
        if let Some(p) = by_role.get(&role.name) {
            set.roles[i] = p.clone();
        }
    }
    let q: Question = serde_json::from_str(question)
        .map_err(|e| OptionsError::new_err(format!("question: {e}")))?;
    let gold = q.answer;
    let mcq = Mcq {
        id: q.id,
        question: q.question,
        options: q.options,
        answer: gold.unwrap_or('?'),
        subject: None,
    };
    let models = ModelSet::single(model.get().stack().model);
    let run = crate::run(py, &Interrupt::default(), async {
        resume_debate(&models, &cfg, &set, &mcq, seed, &recorded).await
    })?
    .map_err(credit_error)?;
    let mut trace = to_trace(&run, &cfg, &set, "debate");
    if gold.is_none() {
        trace.outcome = Outcome::Unknown;
        trace.ground_truth = None;
    }
    Ok((
        Trace::new(trace, Vec::new()),
        run.final_answer.map(|c| c.to_string()),
    ))
}

/// The questions of a dataset spec (`mmlu:PATH`, `aqua:PATH`, ... as `maslens optimize
/// --dataset` takes it) as JSON `{"items": [...], "problems": ["file: record N: field: why"]}`.
#[pyfunction]
pub fn debate_questions(spec: &str) -> PyResult<String> {
    guarded(|| {
        let loaded = load_spec(spec).map_err(|e| OptionsError::new_err(e.to_string()))?;
        let problems: Vec<String> = loaded.problems.iter().map(|p| p.to_string()).collect();
        serde_json::to_string(&serde_json::json!({"items": loaded.items, "problems": problems}))
            .map_err(|e| InternalError::new_err(e.to_string()))
    })
}
