//! `maslens.Trace`: the one trace model, read from any input maslens reads, from a dict, or from
//! OpenAI-style messages. Immutable from Python; methods that add verdicts return new traces.

use crate::{guarded, Interrupt, TraceError};
use maslens_trace::import::{parse_record, Format, ImportError, RecordCtx};
use maslens_trace::Trace as RsTrace;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::Arc;

/// One run of a multi-agent system: task, agents, steps, labels (see docs/trace-format.md).
#[pyclass(module = "maslens._native", name = "Trace", frozen)]
pub struct Trace {
    pub(crate) inner: Arc<RsTrace>,
    /// What import and validation found odd but readable (`Diagnostic`s, as JSON).
    diagnostics: Vec<serde_json::Value>,
}

impl Trace {
    pub(crate) fn new(t: RsTrace, diagnostics: Vec<serde_json::Value>) -> Trace {
        Trace {
            inner: Arc::new(t),
            diagnostics,
        }
    }
}

fn format_of(name: &str) -> PyResult<Format> {
    name.parse::<Format>()
        .map_err(|e| crate::OptionsError::new_err(format!("format: {}", e.0)))
}

/// The typed exception for an import error, with its place as attributes.
pub(crate) fn trace_error(py: Python<'_>, e: &ImportError) -> PyErr {
    let err = TraceError::new_err(e.to_string());
    let v = err.value(py);
    // Attribute assignment on a fresh exception object cannot fail in practice; a failure would
    // only lose the attributes, never the message.
    let _ = v.setattr("file", &e.file);
    let _ = v.setattr("record", e.record.as_deref());
    let _ = v.setattr("path", e.path.as_deref());
    let _ = v.setattr("message", &e.message);
    err
}

fn import_error_dict<'py>(py: Python<'py>, e: &ImportError) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("file", &e.file)?;
    d.set_item("record", e.record.as_deref())?;
    d.set_item("path", e.path.as_deref())?;
    d.set_item("message", &e.message)?;
    d.set_item("text", e.to_string())?;
    Ok(d)
}

fn parse(py: Python<'_>, bytes: &[u8], format: Format, name: &str) -> PyResult<Trace> {
    let ctx = RecordCtx::memory(name);
    match parse_record(bytes, format, &ctx) {
        Ok(imp) => Ok(Trace::new(
            imp.trace,
            imp.diagnostics
                .iter()
                .filter_map(|d| serde_json::to_value(d).ok())
                .collect(),
        )),
        Err(e) => Err(trace_error(py, &e)),
    }
}

#[pymethods]
impl Trace {
    /// A trace from a JSON document in any format maslens reads (`format`: auto, native,
    /// whowhen, aegis, chat). `name` names the input in error messages.
    #[staticmethod]
    #[pyo3(signature = (text, format = "auto", name = "<json>"))]
    fn from_json(py: Python<'_>, text: &str, format: &str, name: &str) -> PyResult<Trace> {
        guarded(|| parse(py, text.as_bytes(), format_of(format)?, name))
    }

    /// A trace from a dict (a parsed JSON record) in any format maslens reads.
    #[staticmethod]
    #[pyo3(signature = (data, format = "auto", name = "<dict>"))]
    fn from_dict(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        format: &str,
        name: &str,
    ) -> PyResult<Trace> {
        guarded(|| {
            let value: serde_json::Value = pythonize::depythonize(data)
                .map_err(|e| TraceError::new_err(format!("{name}: not a JSON-like value: {e}")))?;
            let bytes = serde_json::to_vec(&value)
                .map_err(|e| TraceError::new_err(format!("{name}: {e}")))?;
            parse(py, &bytes, format_of(format)?, name)
        })
    }

    /// A trace from OpenAI-style chat messages (dicts with `role`, `content`, and optionally
    /// `name`, `tool_calls`, `tool_call_id`): the acting agent is `name`, else `role`. `id`
    /// defaults to a hash of the messages; `task` to the first user message.
    #[staticmethod]
    #[pyo3(signature = (messages, id = None, task = None, ground_truth = None, outcome = None, metadata = None))]
    fn from_messages(
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        id: Option<String>,
        task: Option<String>,
        ground_truth: Option<String>,
        outcome: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Trace> {
        guarded(|| {
            let name = "<messages>";
            let msgs: serde_json::Value = pythonize::depythonize(messages).map_err(|e| {
                TraceError::new_err(format!("{name}: messages must be a list of dicts: {e}"))
            })?;
            if !msgs.is_array() {
                return Err(TraceError::new_err(format!(
                    "{name}: messages must be a list of dicts"
                )));
            }
            let id = id.unwrap_or_else(|| {
                format!(
                    "run-{:016x}",
                    maslens_trace::concepts::fnv1a(&msgs.to_string())
                )
            });
            let mut obj = serde_json::Map::new();
            obj.insert("id".into(), id.into());
            obj.insert("messages".into(), msgs);
            if let Some(t) = task {
                obj.insert("task".into(), t.into());
            }
            if let Some(g) = ground_truth {
                obj.insert("ground_truth".into(), g.into());
            }
            if let Some(o) = outcome {
                obj.insert("outcome".into(), o.into());
            }
            if let Some(m) = metadata {
                let m: serde_json::Value = pythonize::depythonize(m).map_err(|e| {
                    TraceError::new_err(format!("{name}: metadata must be a JSON-like dict: {e}"))
                })?;
                obj.insert("metadata".into(), m);
            }
            let bytes = serde_json::to_vec(&serde_json::Value::Object(obj))
                .map_err(|e| TraceError::new_err(format!("{name}: {e}")))?;
            parse(py, &bytes, Format::Chat, name)
        })
    }

    /// The trace as a dict in the native format (what `to_json` writes).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, self.inner.as_ref())
            .map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    /// The trace as native JSON (one line, or indented).
    #[pyo3(signature = (indent = false))]
    fn to_json(&self, indent: bool) -> PyResult<String> {
        let r = if indent {
            serde_json::to_string_pretty(self.inner.as_ref())
        } else {
            serde_json::to_string(self.inner.as_ref())
        };
        r.map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    #[getter]
    fn id(&self) -> &str {
        &self.inner.id
    }

    #[getter]
    fn task(&self) -> &str {
        &self.inner.task
    }

    #[getter]
    fn ground_truth(&self) -> Option<&str> {
        self.inner.ground_truth.as_deref()
    }

    /// `success`, `failure` or `unknown`.
    #[getter]
    fn outcome(&self) -> String {
        serde_json::to_value(self.inner.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".into())
    }

    /// The format the trace was read from (`native`, `whowhen`, `aegis`, `chat`, `otlp`, ...).
    #[getter]
    fn source_format(&self) -> &str {
        &self.inner.source.format
    }

    /// Names of the agents that act, in order of first appearance.
    #[getter]
    fn agents(&self) -> Vec<String> {
        self.inner
            .acting_agents()
            .into_iter()
            .map(|a| a.to_string())
            .collect()
    }

    /// The steps as dicts (`index`, `agent`, `content`, and what else the step holds).
    #[getter]
    fn steps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.inner.steps)
            .map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    /// Labels: the decisive step, faulty agents, implicit failures, verdicts.
    #[getter]
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.inner.labels)
            .map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pythonize::pythonize(py, &self.inner.metadata)
            .map_err(|e| crate::InternalError::new_err(e.to_string()))
    }

    /// What import and validation found odd but readable, as dicts (`severity`, `path`,
    /// `message`, ...), plus what `maslens validate` checks on the trace itself.
    fn diagnostics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut all = self.diagnostics.clone();
        if all.is_empty() {
            all = maslens_trace::validate(&self.inner)
                .iter()
                .filter_map(|d| serde_json::to_value(d).ok())
                .collect();
        }
        let list = PyList::empty(py);
        for d in &all {
            list.append(
                pythonize::pythonize(py, d)
                    .map_err(|e| crate::InternalError::new_err(e.to_string()))?,
            )?;
        }
        Ok(list)
    }

    fn __len__(&self) -> usize {
        self.inner.steps.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Trace(id={:?}, steps={}, agents={}, outcome={})",
            self.inner.id,
            self.inner.steps.len(),
            self.inner.acting_agents().len(),
            self.outcome()
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Trace>()
            .map(|o| *o.get().inner == *self.inner)
            .unwrap_or(false)
    }
}

/// Read every trace under `paths` (files or directories) in `format`. Returns the traces and
/// the records that could not be read (dicts: file, record, path, message, text); reading goes
/// on past a bad record.
#[pyfunction]
#[pyo3(signature = (paths, format = "auto"))]
pub fn read<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    format: &str,
) -> PyResult<(Vec<Trace>, Bound<'py, PyList>)> {
    let format = format_of(format)?;
    let interrupt = Interrupt::default();
    let (traces, errors) = crate::run(py, &interrupt, async move {
        let mut traces = Vec::new();
        let mut errors = Vec::new();
        for r in maslens_trace::import::read_paths(&paths, format) {
            match r {
                Ok(imp) => traces.push(Trace::new(
                    imp.trace,
                    imp.diagnostics
                        .iter()
                        .filter_map(|d| serde_json::to_value(d).ok())
                        .collect(),
                )),
                Err(e) => errors.push(e),
            }
        }
        (traces, errors)
    })?;
    let list = PyList::empty(py);
    for e in &errors {
        list.append(import_error_dict(py, e)?)?;
    }
    Ok((traces, list))
}
