//! `maslens._native`: the Rust side of the Python package (`python/maslens`).
//!
//! A front end like the CLI: typed options in (a dict checked field by field), one call into
//! `maslens-core` and the method crates, results out as JSON that `python/maslens` turns into
//! typed objects. Nothing here decides anything a method decides.
//!
//! Every entry point:
//! - releases the GIL while it works (model calls, reading files), so other Python threads and
//!   `asyncio.to_thread` callers run meanwhile;
//! - checks for Ctrl-C between model calls and stops with `KeyboardInterrupt`;
//! - turns a Rust panic into `maslens.InternalError` (never a `PanicException`);
//! - raises typed exceptions: `TraceError` (file, record, path), `OptionsError` (the option),
//!   `ModelError` / `BudgetExceeded` (the model), all subclasses of `MaslensError`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

mod compare;
mod debate;
mod improve;
mod inject;
mod methods;
mod model;
mod options;
mod prior;
mod trace;

create_exception!(
    _native,
    MaslensError,
    PyException,
    "Base class of every error maslens raises."
);
create_exception!(
    _native,
    TraceError,
    MaslensError,
    "A trace or record could not be read; `file`, `record`, `path` and `message` say where and why."
);
create_exception!(
    _native,
    OptionsError,
    MaslensError,
    "An option has a value maslens cannot use; the message names the option."
);
create_exception!(
    _native,
    ModelError,
    MaslensError,
    "The model could not be opened or answered with an error."
);
create_exception!(
    _native,
    BudgetExceeded,
    ModelError,
    "A budget (max_calls, max_tokens_total, max_cost) ran out; rerun to resume from the cache."
);
create_exception!(
    _native,
    InternalError,
    MaslensError,
    "A bug in maslens (a Rust panic, caught before it reached Python)."
);

/// The one tokio runtime of the module (worker threads for model calls and I/O).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("maslens")
            .build()
            .ok()
    })
    .as_ref()
    .ok_or_else(|| InternalError::new_err("could not start the async runtime"))
}

/// Run `f`, turning a panic into [`InternalError`].
pub(crate) fn guarded<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(InternalError::new_err(format!(
                "internal error in maslens (a bug; please report it with the input that caused \
                 it): {what}"
            )))
        }
    }
}

/// The first error a Python callback raised during a run (progress bars, Ctrl-C): the run stops
/// at the next check and raises it.
#[derive(Clone, Default)]
pub(crate) struct Interrupt(Arc<Mutex<Option<PyErr>>>);

impl Interrupt {
    pub(crate) fn set(&self, e: PyErr) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(e);
        }
    }
    fn take(&self) -> Option<PyErr> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
    pub(crate) fn is_set(&self) -> bool {
        self.0.lock().map(|s| s.is_some()).unwrap_or(false)
    }
}

/// Run a future to completion with the GIL released, stopping early (and dropping the future,
/// which cancels its model calls) when Ctrl-C arrives or a callback raised into `interrupt`.
pub(crate) fn run<T: Send, F: Future<Output = T> + Send>(
    py: Python<'_>,
    interrupt: &Interrupt,
    fut: F,
) -> PyResult<T> {
    let rt = runtime()?;
    let out = py.detach(|| {
        guarded(|| {
            rt.block_on(async {
                tokio::pin!(fut);
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        out = &mut fut => return Ok(out),
                        _ = tick.tick() => {
                            Python::attach(|py| py.check_signals())?;
                            if let Some(e) = interrupt.take() {
                                return Err(e);
                            }
                        }
                    }
                }
            })
        })
    })?;
    // A callback may have raised after the last tick.
    match interrupt.take() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Call a Python progress callback `progress(done, total, label)`; an exception it raises stops
/// the run (see [`Interrupt`]).
pub(crate) fn report_progress(
    callback: &Option<Py<PyAny>>,
    interrupt: &Interrupt,
    done: usize,
    total: usize,
    label: &str,
) {
    if let Some(cb) = callback {
        Python::attach(|py| {
            if let Err(e) = cb.call1(py, (done, total, label)) {
                interrupt.set(e);
            }
        });
    }
}

/// Test hook: panics inside the guard, so the tests can check a panic arrives as
/// `InternalError` and never as `PanicException`.
#[pyfunction]
fn _panic_for_test() -> PyResult<()> {
    guarded(|| -> PyResult<()> { panic!("deliberate panic for the test suite") })
}

/// The version of maslens this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Whether this build holds the embedded llama.cpp model (`local:` specs).
#[pyfunction]
fn has_local_model() -> bool {
    cfg!(feature = "local")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("MaslensError", py.get_type::<MaslensError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("OptionsError", py.get_type::<OptionsError>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("BudgetExceeded", py.get_type::<BudgetExceeded>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add_class::<trace::Trace>()?;
    m.add_class::<model::Model>()?;
    m.add_function(wrap_pyfunction!(trace::read, m)?)?;
    m.add_function(wrap_pyfunction!(methods::locate, m)?)?;
    m.add_function(wrap_pyfunction!(methods::scan, m)?)?;
    m.add_function(wrap_pyfunction!(methods::credit, m)?)?;
    m.add_function(wrap_pyfunction!(methods::advantages, m)?)?;
    m.add_function(wrap_pyfunction!(methods::eval_locate, m)?)?;
    m.add_function(wrap_pyfunction!(compare::eval_compare, m)?)?;
    m.add_function(wrap_pyfunction!(compare::compare_methods, m)?)?;
    m.add_function(wrap_pyfunction!(methods::modes, m)?)?;
    m.add_function(wrap_pyfunction!(inject::inject, m)?)?;
    m.add_function(wrap_pyfunction!(prior::prior_eval, m)?)?;
    m.add_function(wrap_pyfunction!(prior::prior_train, m)?)?;
    m.add_function(wrap_pyfunction!(prior::prior_rank, m)?)?;
    m.add_function(wrap_pyfunction!(improve::modes_propose, m)?)?;
    m.add_function(wrap_pyfunction!(debate::debate_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(debate::debate_run, m)?)?;
    m.add_function(wrap_pyfunction!(debate::debate_questions, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_blame, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_rewrite, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_blackbox, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_accept, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_replay, m)?)?;
    m.add_function(wrap_pyfunction!(improve::improve_render, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(has_local_model, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    Ok(())
}
