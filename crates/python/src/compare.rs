//! `eval_compare`: several localizers on the same cases, as `maslens eval compare` runs them.

use crate::methods::{eval_setup, report_text, write_reports, PyProgress};
use crate::model::core_error;
use crate::model::Model;
use crate::{guarded, Interrupt, OptionsError};
use maslens_core::eval_compare::{eval_compare_with, CompareMethod, CompareOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The method names `eval_compare` takes, in the report's default order (`maslens eval compare
/// --methods`; `llm` is also accepted for `agentlocate`).
#[pyfunction]
pub fn compare_methods() -> Vec<&'static str> {
    CompareMethod::ALL.iter().map(|m| m.name()).collect()
}

/// `maslens eval compare` over a dataset spec: `methods` by name (`prior`, `stacked`,
/// `agentlocate`, `all-at-once`, `step-by-step`, `binary-search`, `a2p`), the other options as
/// `eval_locate` takes them (their method, protocol and variant are set per method). Returns
/// `{"report", "problems", "markdown"}` as JSON; with `out` in the eval options, compare.json,
/// compare.md and each method's report directory are written there. `both_ground_truth` runs
/// each method that prompts a model without and with the reference answer (rows `NAME+gt`).
#[pyfunction]
#[pyo3(signature = (dataset, methods, model = None, evaluator_models = Vec::new(), options = None, eval_options = None, progress = None, both_ground_truth = false))]
#[allow(clippy::too_many_arguments)]
pub fn eval_compare(
    py: Python<'_>,
    dataset: String,
    methods: Vec<String>,
    model: Option<Bound<'_, Model>>,
    evaluator_models: Vec<Bound<'_, Model>>,
    options: Option<&Bound<'_, PyDict>>,
    eval_options: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
    both_ground_truth: bool,
) -> PyResult<String> {
    guarded(|| {
        let methods = methods
            .iter()
            .map(|m| CompareMethod::parse(m))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OptionsError::new_err(e.to_string()))?;
        let needs_llm = methods.iter().any(|m| *m != CompareMethod::Prior);
        let (base, opened, e) = eval_setup(
            dataset,
            model,
            &evaluator_models,
            options,
            eval_options,
            |_, _| needs_llm,
        )?;
        let opts = CompareOptions {
            base,
            methods,
            both_ground_truth,
        };
        let interrupt = Interrupt::default();
        let p = PyProgress::new(&progress, &interrupt);
        let out = crate::run(py, &interrupt, eval_compare_with(&opts, opened, &p))?
            .map_err(core_error)?;
        write_reports(e.out.as_deref(), |dir| out.write(dir))?;
        report_text(&out.report, &out.problems, &out.report.to_markdown())
    })
}
