//! The improvement loop's steps for `python/maslens/improve.py` (the loop runs in Python, where
//! the user's system lives): credit from located failures, a prompt rewrite, the black-box
//! baseline's proposal, the held-out acceptance and the report. JSON in, JSON out.

use crate::methods::{attach_verdicts, verdict_of};
use crate::model::{core_error, Model};
use crate::options::{from_dict, ModesOpts};
use crate::trace::Trace;
use crate::{guarded, InternalError, Interrupt, OptionsError};
use maslens_core::improve::{self, blackbox::FailedTask, Evidence, ImproveReport};
use maslens_trace::Verdict;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> PyResult<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de)
        .map_err(|e| OptionsError::new_err(format!("{what}: at {}: {}", e.path(), e.inner())))
}

fn text(v: &Value) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| InternalError::new_err(e.to_string()))
}

/// Credit of the prompted `agents` from failed `traces` and their `verdicts` (a JSON array in the
/// traces' order, each a verdict as `locate` gives it, or null), and `chosen`: the `k` weakest
/// agents to rewrite, leaving out `exclude` ([`improve::Blame::weakest`]).
#[pyfunction]
#[pyo3(signature = (traces, verdicts, agents, k = 1, exclude = Vec::new()))]
pub fn improve_blame(
    traces: Vec<Bound<'_, Trace>>,
    verdicts: &str,
    agents: Vec<String>,
    k: usize,
    exclude: Vec<String>,
) -> PyResult<String> {
    guarded(|| {
        let verdicts: Vec<Option<Value>> = parse("verdicts", verdicts)?;
        if verdicts.len() != traces.len() {
            return Err(OptionsError::new_err(format!(
                "{} verdicts for {} traces",
                verdicts.len(),
                traces.len()
            )));
        }
        let owned: Vec<_> = traces.iter().map(|t| t.get().inner.clone()).collect();
        let mut parsed: Vec<Verdict> = Vec::new();
        let mut pairs = Vec::new();
        for (i, v) in verdicts.into_iter().enumerate() {
            let Some(v) = v else { continue };
            parsed.push(verdict_of(v, i)?.1);
            pairs.push(i);
        }
        let failed: Vec<_> = pairs
            .iter()
            .zip(&parsed)
            .map(|(&i, v)| (&*owned[i], v))
            .collect();
        let blame = improve::blame(&failed, &agents);
        let chosen = blame.weakest(k, &exclude.into_iter().collect());
        let mut out =
            serde_json::to_value(&blame).map_err(|e| InternalError::new_err(e.to_string()))?;
        out["chosen"] = json!(chosen);
        text(&out)
    })
}

/// One agent's prompt rewritten from its located failures (`evidence`: JSON array of the
/// `evidence` entries `improve_blame` gave).
#[pyfunction]
#[pyo3(signature = (model, agent, prompt, evidence, max_tokens = 400, seed = 0))]
pub fn improve_rewrite(
    py: Python<'_>,
    model: Bound<'_, Model>,
    agent: &str,
    prompt: &str,
    evidence: &str,
    max_tokens: u32,
    seed: u64,
) -> PyResult<String> {
    guarded(|| {
        let evidence: Vec<Evidence> = parse("evidence", evidence)?;
        let m = model.get().stack().model;
        let out = crate::run(py, &Interrupt::default(), async {
            improve::rewrite(m.as_ref(), agent, prompt, &evidence, max_tokens, seed).await
        })?
        .map_err(core_error)?;
        text(&serde_json::to_value(out).map_err(|e| InternalError::new_err(e.to_string()))?)
    })
}

/// The black-box baseline's proposal: `{"prompts": {...}}` or `{"rejected": "why"}`.
#[pyfunction]
#[pyo3(signature = (model, prompts, failures, max_tokens = 800, seed = 0))]
pub fn improve_blackbox(
    py: Python<'_>,
    model: Bound<'_, Model>,
    prompts: &str,
    failures: &str,
    max_tokens: u32,
    seed: u64,
) -> PyResult<String> {
    guarded(|| {
        let prompts: BTreeMap<String, String> = parse("prompts", prompts)?;
        let failures: Vec<FailedTask> = parse("failures", failures)?;
        let m = model.get().stack().model;
        let out = crate::run(py, &Interrupt::default(), async {
            improve::blackbox(m.as_ref(), &prompts, &failures, max_tokens, seed).await
        })?
        .map_err(core_error)?;
        text(&match out {
            Ok(p) => json!({"prompts": p}),
            Err(why) => json!({"rejected": why}),
        })
    })
}

/// Keep a change only when the held-out gain's bootstrap interval is above 0.
#[pyfunction]
#[pyo3(signature = (before, after, resamples = 2000, level = 0.95, seed = 0))]
pub fn improve_accept(
    before: Vec<f64>,
    after: Vec<f64>,
    resamples: usize,
    level: f64,
    seed: u64,
) -> PyResult<String> {
    guarded(|| {
        let a = improve::accept(&before, &after, resamples, level, seed).map_err(core_error)?;
        text(&serde_json::to_value(a).map_err(|e| InternalError::new_err(e.to_string()))?)
    })
}

/// SPR, RR and delta-RR per configuration from replay outcomes (`rows`: JSON array of
/// `{config, task, trace, if_step, original_success, intervention, success}`).
#[pyfunction]
#[pyo3(signature = (rows, resamples = 2000, seed = 0))]
pub fn improve_replay(rows: &str, resamples: usize, seed: u64) -> PyResult<String> {
    guarded(|| {
        let rows: Vec<maslens_implicit::replay::ReplayOutcome> = parse("rows", rows)?;
        let stats = improve::replay::stats(&rows, resamples, seed).map_err(core_error)?;
        text(&serde_json::to_value(stats).map_err(|e| InternalError::new_err(e.to_string()))?)
    })
}

/// The report's Markdown and HTML, and the agents it changed.
#[pyfunction]
pub fn improve_render(report: &str) -> PyResult<String> {
    guarded(|| {
        let r: ImproveReport = parse("report", report)?;
        text(&json!({"markdown": r.to_markdown(), "html": r.to_html(), "changed": r.changed()}))
    })
}

/// A fix proposed for failure mode `mode` of `traces` (`maslens modes --propose`): the modes
/// grouped as `modes` groups them (`verdicts` and `options` as there), the mode's agent's
/// recorded prompt rewritten by `model` from up to 8 example runs. Returns `{"proposal": ...,
/// "markdown": ...}` as JSON.
#[pyfunction]
#[pyo3(signature = (traces, mode, model, verdicts = None, options = None))]
pub fn modes_propose(
    py: Python<'_>,
    traces: Vec<Bound<'_, Trace>>,
    mode: &str,
    model: Bound<'_, Model>,
    verdicts: Option<&str>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use maslens_core::modes::Selection;
    guarded(|| {
        let o: ModesOpts = from_dict("propose_fix", options)?;
        let grouping = o.grouping().map_err(OptionsError::new_err)?;
        let mut owned: Vec<maslens_trace::Trace> =
            traces.iter().map(|t| (*t.get().inner).clone()).collect();
        if let Some(text) = verdicts {
            attach_verdicts(&mut owned, text)?;
        }
        let selection = Selection {
            outcome: o.outcome.clone(),
            system: o.system.clone(),
            gold: false,
        };
        let found =
            improve::mode_of_traces(owned, &selection, grouping, mode).map_err(core_error)?;
        let m = model.get().stack().model;
        let proposal = crate::run(py, &Interrupt::default(), async {
            improve::propose(
                m.as_ref(),
                &found.system,
                &found.mode,
                &found.traces,
                400,
                0,
            )
            .await
        })?
        .map_err(core_error)?;
        let out = json!({"markdown": proposal.to_markdown(), "proposal": proposal});
        text(&out)
    })
}
