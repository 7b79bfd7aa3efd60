//! `maslens.Model`: an opened model stack (backend, cache, budgets, usage), kept open across
//! calls so the embedded model loads once and usage adds up over a session.

use crate::options::{from_dict, LlmOptions};
use crate::{guarded, BudgetExceeded, Interrupt, ModelError, OptionsError};
use maslens_llm::{LlmError, Stack};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The Python exception for an error of the application layer (`maslens-core`), the one mapping
/// every function uses: the model's failure (`ModelError`, `BudgetExceeded`), a file's (`OSError`),
/// ours (`InternalError`: a compiled-in prompt that does not render), else what was asked for does
/// not fit the input (`OptionsError`: a bad option, nothing to work on, a name that does not exist).
pub(crate) fn core_error(err: maslens_core::CoreError) -> PyErr {
    use maslens_core::CoreError;
    match err {
        CoreError::Llm(l) | CoreError::Credit(maslens_credit::CreditError::Llm(l)) => {
            model_error(&l)
        }
        CoreError::Io { .. } => pyo3::exceptions::PyOSError::new_err(err.to_string()),
        CoreError::Prompt(_) => crate::InternalError::new_err(err.to_string()),
        other => crate::OptionsError::new_err(other.to_string()),
    }
}

/// The Python exception for a model error: budget stops apart, since a rerun resumes them.
pub(crate) fn model_error(e: &LlmError) -> PyErr {
    match e {
        LlmError::Budget(_) => BudgetExceeded::new_err(e.to_string()),
        _ => ModelError::new_err(e.to_string()),
    }
}

/// A model opened with maslens' LLM options.
#[pyclass(module = "maslens._native", name = "Model", frozen)]
pub struct Model {
    stack: Stack,
    /// Concurrent requests the options allow (methods that run traces side by side use it).
    concurrency: usize,
}

impl Model {
    /// Another handle on the same stack (the same backend, cache, budget and usage totals).
    pub(crate) fn stack(&self) -> Stack {
        Stack {
            model: self.stack.model.clone(),
            usage: self.stack.usage.clone(),
            cache: self.stack.cache.clone(),
            exporter: self.stack.exporter.clone(),
        }
    }
}

/// Why a `local:` model cannot open in a wheel built with `--no-default-features`, and what to do
/// (wheel advice, not the CLI's `cargo build` advice).
const NO_LOCAL_IN_WHEEL: &str = "this wheel was built without the embedded model. Point maslens at \
any OpenAI-compatible server instead: maslens.Model(\"openai:NAME@http://HOST:PORT/v1\") or \
MASLENS_MODEL=openai:NAME@http://HOST:PORT/v1 (`maslens serve-model` serves the embedded model that \
way), or install the default wheel, which has it (`pip install .` without \
`--no-default-features`, docs/python.md)";

/// A `local:` spec opened by a wheel built without the embedded model.
fn needs_local_wheel(spec: &str) -> bool {
    spec.starts_with("local:") && !cfg!(feature = "local")
}

#[pymethods]
impl Model {
    /// Open `spec` (`None`: `$MASLENS_MODEL`, the config file's `model`, else the embedded
    /// default) with `options` (the CLI's LLM flags as keys: `cache`, `max_calls`,
    /// `base_url`, ...).
    #[new]
    #[pyo3(signature = (spec = None, options = None))]
    fn new(
        py: Python<'_>,
        spec: Option<String>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Model> {
        guarded(|| {
            let llm: LlmOptions = from_dict("model", options)?;
            let (spec, opts) = llm.resolve(spec).map_err(OptionsError::new_err)?;
            let concurrency = opts.concurrency;
            let interrupt = Interrupt::default();
            let stack = crate::run(py, &interrupt, async move {
                maslens_llm::open(&spec, &opts)
                    .await
                    .map_err(|e| (spec.clone(), e))
            })?
            .map_err(|(spec, e)| match e {
                LlmError::Budget(_) => model_error(&e),
                LlmError::ModelUnavailable(_) if needs_local_wheel(&spec) => {
                    ModelError::new_err(format!("opening model {spec}: {NO_LOCAL_IN_WHEEL}"))
                }
                e => ModelError::new_err(format!("opening model {spec}: {e}")),
            })?;
            Ok(Model { stack, concurrency })
        })
    }

    /// The model's id (`provider:MODEL`).
    #[getter]
    fn id(&self) -> String {
        self.stack.model.id().to_string()
    }

    /// Concurrent requests allowed (`concurrency` option, config file, default 8).
    #[getter]
    fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Usage so far: calls, cache hits, tokens, cost, per stage (a dict).
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.stack.usage.report())
            .map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    /// Requests written to the batch file in `cache="export:FILE"` mode.
    fn exported(&self) -> u64 {
        self.stack
            .exporter
            .as_ref()
            .map(|e| e.exported() as u64)
            .unwrap_or(0)
    }

    fn __repr__(&self) -> String {
        format!("Model({:?})", self.stack.model.id())
    }
}
