//! The methods, as the CLI runs them: `locate`, `scan`, `credit`, `advantages`, `eval_locate`,
//! `modes`.
//! Each takes traces and opened models, an options dict and an optional progress callback, and
//! returns JSON text that `python/maslens` turns into typed results.

use crate::model::{core_error, model_error, Model};
use crate::options::{from_dict, CreditOpts, EvalOpts, LocateOpts, ModesOpts, ScanOpts};
use crate::trace::Trace;
use crate::{guarded, report_progress, InternalError, Interrupt, OptionsError};
use maslens_core::eval_locate::{eval_locate_with, EvalLocateOptions, RefineExport};
use maslens_core::localize::{LocateRun, Setup};
use maslens_core::locate::Models;
use maslens_eval::metrics::Scorer;
use maslens_eval::run::Progress;
use maslens_llm::ChatModel;
use maslens_trace::Trace as RsTrace;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn owned(traces: &[Bound<'_, Trace>]) -> Vec<Arc<RsTrace>> {
    traces.iter().map(|t| t.get().inner.clone()).collect()
}

pub(crate) fn to_text(v: &Value) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| InternalError::new_err(e.to_string()))
}

fn need_model<'a, 'py>(
    model: &'a Option<Bound<'py, Model>>,
    what: &str,
) -> PyResult<&'a Bound<'py, Model>> {
    model
        .as_ref()
        .ok_or_else(|| OptionsError::new_err(format!("{what} needs a model")))
}

/// Failure localization over `traces`: one entry per trace in `results` (`{"trace", "verdict"}`
/// or `{"trace", "error"}`), `problems` (records skipped in a prior file), and `stopped` (why
/// the run stopped early: a budget), as JSON.
#[pyfunction]
#[pyo3(signature = (traces, model = None, evaluator_models = Vec::new(), options = None, progress = None))]
pub fn locate(
    py: Python<'_>,
    traces: Vec<Bound<'_, Trace>>,
    model: Option<Bound<'_, Model>>,
    evaluator_models: Vec<Bound<'_, Model>>,
    options: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    guarded(|| {
        let lopts: LocateOpts = from_dict("locate", options)?;
        let opts = lopts.options(
            evaluator_models
                .iter()
                .map(|m| m.get().stack().model.id().to_string())
                .collect(),
        );
        let traces = owned(&traces);
        let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
        let models = if opts.method.needs_llm() {
            let judge = need_model(&model, "locate with an LLM (method \"llm\" or \"stacked\")")?
                .get()
                .stack();
            let n = evaluator_models.len();
            if n > 1 && n != opts.evaluators.len() {
                return Err(OptionsError::new_err(format!(
                    "evaluator_models: give one model (all Evaluators) or one per style ({} styles), not {n}",
                    opts.evaluators.len()
                )));
            }
            Some(Models {
                judge,
                evaluators: evaluator_models.iter().map(|m| m.get().stack()).collect(),
            })
        } else {
            None
        };
        // The localizer `maslens locate` would build for these options.
        let setup = Setup::new(&opts, models.as_ref(), any_aegis)
            .map_err(|e| OptionsError::new_err(e.to_string()))?;
        let mut problems = setup.warnings;
        problems.extend(setup.notes);
        let chosen = setup.localizer;
        // The prior answers in microseconds: report its progress every 64 traces.
        let every = if opts.method.needs_llm() { 1 } else { 64 };
        let interrupt = Interrupt::default();
        let total = traces.len();
        let (results, stopped) = crate::run(py, &interrupt, async {
            let mut results = Vec::with_capacity(total);
            // The CLI's loop: after a budget stop the remaining traces are answered "not run".
            let mut each = LocateRun::new(&chosen);
            for (i, t) in traces.iter().enumerate() {
                if interrupt.is_set() {
                    break;
                }
                match each.verdict(t).await {
                    Ok(v) => results.push(
                        json!({"trace": t.id, "verdict": v.to_json(), "text": v.text_lines(t)}),
                    ),
                    Err(e) => results.push(json!({"trace": t.id, "error": e.to_string()})),
                }
                if (i + 1) % every == 0 || i + 1 == total {
                    report_progress(&progress, &interrupt, i + 1, total, &t.id);
                }
            }
            let stopped = each.stopped().map(String::from);
            (results, stopped)
        })?;
        to_text(&json!({"results": results, "problems": problems, "stopped": stopped}))
    })
}

/// Implicit failures (MASIF) over `traces`: the scan file as JSON (`maslens scan --out`).
/// `models[0]` detects and classifies absorption; further models are extra judges.
#[pyfunction]
#[pyo3(signature = (traces, models, options = None, progress = None))]
pub fn scan(
    py: Python<'_>,
    traces: Vec<Bound<'_, Trace>>,
    models: Vec<Bound<'_, Model>>,
    options: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    guarded(|| {
        let sopts: ScanOpts = from_dict("scan", options)?;
        let opts = sopts.options().map_err(OptionsError::new_err)?;
        if models.is_empty() {
            return Err(OptionsError::new_err("scan needs a model"));
        }
        let stacks: Vec<_> = models.iter().map(|m| m.get().stack()).collect();
        let traces: Vec<RsTrace> = owned(&traces).iter().map(|t| (**t).clone()).collect();
        let interrupt = Interrupt::default();
        let file = crate::run(py, &interrupt, async {
            let models: Vec<&dyn ChatModel> = stacks.iter().map(|s| s.model.as_ref()).collect();
            let progress = PyProgress::new(&progress, &interrupt);
            maslens_core::scan::scan_traces(&models, &traces, &opts, &progress).await
        })?
        .map_err(|e| match e {
            maslens_implicit::ImplicitError::Llm(e) => model_error(&e),
            e => OptionsError::new_err(e.to_string()),
        })?;
        Ok(file.to_json())
    })
}

/// Structural (role) and temporal (segment) credit over `traces`: the credit file as JSON
/// (`maslens credit --out`).
#[pyfunction]
#[pyo3(signature = (traces, model, options = None, concurrency = 8, progress = None))]
pub fn credit(
    py: Python<'_>,
    traces: Vec<Bound<'_, Trace>>,
    model: Bound<'_, Model>,
    options: Option<&Bound<'_, PyDict>>,
    concurrency: usize,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    guarded(|| {
        let copts: CreditOpts = from_dict("credit", options)?;
        let opts = copts.options().map_err(OptionsError::new_err)?;
        let m = model.get().stack().model;
        let traces: Vec<RsTrace> = owned(&traces).iter().map(|t| (**t).clone()).collect();
        let interrupt = Interrupt::default();
        let run = crate::run(py, &interrupt, async {
            let progress = PyProgress::new(&progress, &interrupt);
            maslens_core::credit::credit_traces(m, &traces, &opts, concurrency, &progress).await
        })?;
        serde_json::to_string(&run).map_err(|e| InternalError::new_err(e.to_string()))
    })
}

/// IF-GRPO advantages of JSONL text (`{"group","id","success","if_cost"}` per line), as
/// `{"advantages": [...], "warnings": [...]}` JSON; `name` names the input in warnings.
#[pyfunction]
#[pyo3(signature = (jsonl, name = "<records>"))]
pub fn advantages(jsonl: &str, name: &str) -> PyResult<String> {
    guarded(|| {
        let out = maslens_core::implicit::advantages_from_jsonl(name, jsonl.as_bytes())
            .map_err(|e| OptionsError::new_err(e.to_string()))?;
        to_text(&json!({"advantages": out.value, "warnings": out.warnings}))
    })
}

/// The `eval locate` options of the Python call, with its models opened when `needs_model`
/// says the run needs them (an error when it does and there is none).
pub(crate) fn eval_setup(
    dataset: String,
    model: Option<Bound<'_, Model>>,
    evaluator_models: &[Bound<'_, Model>],
    options: Option<&Bound<'_, PyDict>>,
    eval_options: Option<&Bound<'_, PyDict>>,
    needs_model: impl Fn(&maslens_core::locate::LocateOptions, &EvalOpts) -> bool,
) -> PyResult<(EvalLocateOptions, Option<Models>, EvalOpts)> {
    let lopts: LocateOpts = from_dict("locate", options)?;
    let e: EvalOpts = from_dict("eval", eval_options)?;
    let locate = lopts.options(
        evaluator_models
            .iter()
            .map(|m| m.get().stack().model.id().to_string())
            .collect(),
    );
    let opened = match (&model, needs_model(&locate, &e)) {
        (Some(m), true) => Some(Models {
            judge: m.get().stack(),
            evaluators: evaluator_models.iter().map(|m| m.get().stack()).collect(),
        }),
        (None, true) => return Err(OptionsError::new_err(
            "this evaluation runs the LLM pipeline (or exports refinement data): it needs a model",
        )),
        (_, false) => None,
    };
    let opts = EvalLocateOptions {
        dataset,
        locate,
        model: opened
            .as_ref()
            .map(|m| m.judge.model.id().to_string())
            .unwrap_or_default(),
        llm: Default::default(),
        scorer: if e.compat_substring {
            Scorer::CompatSubstring
        } else {
            Scorer::Exact
        },
        split: e.split,
        seed: e.seed,
        predictions: e.predictions.clone().map(PathBuf::from),
        limit: e.limit,
        subset: e.subset.clone(),
        tolerances: e.tolerances.clone(),
        export_refinement: e.export_refinement.clone().map(|dir| RefineExport {
            dir: PathBuf::from(dir),
            targets: e.refine_targets,
            round: e.round,
            base_model: e.base_model.clone(),
        }),
    };
    Ok((opts, opened, e))
}

/// Progress of a run (`eval_locate`, `eval_compare`, `scan`, `credit`) to a Python callback
/// `progress(done, total, trace id)`.
pub(crate) struct PyProgress<'a> {
    callback: &'a Option<Py<PyAny>>,
    interrupt: &'a Interrupt,
    total: std::sync::atomic::AtomicUsize,
    done: std::sync::atomic::AtomicUsize,
    current: std::sync::Mutex<String>,
}

impl<'a> PyProgress<'a> {
    pub(crate) fn new(callback: &'a Option<Py<PyAny>>, interrupt: &'a Interrupt) -> Self {
        PyProgress {
            callback,
            interrupt,
            total: Default::default(),
            done: Default::default(),
            current: Default::default(),
        }
    }
}

impl Progress for PyProgress<'_> {
    fn start(&self, cases: usize) {
        use std::sync::atomic::Ordering;
        self.total.store(cases, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
    }
    fn case(&self, id: &str) {
        if let Ok(mut c) = self.current.lock() {
            *c = id.to_string();
        }
    }
    fn case_done(&self) {
        use std::sync::atomic::Ordering;
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let id = self.current.lock().map(|c| c.clone()).unwrap_or_default();
        report_progress(
            self.callback,
            self.interrupt,
            done,
            self.total.load(Ordering::Relaxed),
            &id,
        );
    }
}

/// `maslens eval locate` over a dataset spec (`whowhen:DIR`, `aegis:FILE`, a path): the report
/// (`report.json`) and the problems met, as JSON; with `out` in the options, the report files
/// are written there too.
#[pyfunction]
#[pyo3(signature = (dataset, model = None, evaluator_models = Vec::new(), options = None, eval_options = None, progress = None))]
pub fn eval_locate(
    py: Python<'_>,
    dataset: String,
    model: Option<Bound<'_, Model>>,
    evaluator_models: Vec<Bound<'_, Model>>,
    options: Option<&Bound<'_, PyDict>>,
    eval_options: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    guarded(|| {
        let (opts, opened, e) = eval_setup(
            dataset,
            model,
            &evaluator_models,
            options,
            eval_options,
            |l, e| {
                (e.predictions.is_none() && l.method.needs_llm()) || e.export_refinement.is_some()
            },
        )?;
        let interrupt = Interrupt::default();
        let p = PyProgress::new(&progress, &interrupt);
        let out =
            crate::run(py, &interrupt, eval_locate_with(&opts, opened, &p))?.map_err(core_error)?;
        write_reports(e.out.as_deref(), |dir| {
            maslens_eval::run::write_run(&out.run, dir)
        })?;
        let markdown = maslens_eval::markdown::render(&out.run.report);
        report_text(&out.run.report, &out.problems, &markdown)
    })
}

/// An evaluation's report files written into `out` by `write`, when `out` was given; an
/// `OSError` naming the directory when they could not be.
pub(crate) fn write_reports(
    out: Option<&str>,
    write: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
) -> PyResult<()> {
    let Some(dir) = out else { return Ok(()) };
    write(std::path::Path::new(dir)).map_err(|err| {
        pyo3::exceptions::PyOSError::new_err(format!("writing reports to {dir}: {err}"))
    })
}

/// `{"report", "problems", "markdown"}` as JSON: what the evaluations return to Python.
pub(crate) fn report_text(
    report: &impl serde::Serialize,
    problems: &[String],
    markdown: &str,
) -> PyResult<String> {
    let report = serde_json::to_value(report).map_err(|e| InternalError::new_err(e.to_string()))?;
    to_text(&json!({"report": report, "problems": problems, "markdown": markdown}))
}

/// Failure modes across `traces` (`maslens modes`): `verdicts` (JSON array of verdicts as
/// `locate` gives them, each with its `trace`) replace the verdicts the traces carry; a `model`
/// writes one summary per mode. Returns `{"report": ..., "markdown": ...}` as JSON.
#[pyfunction]
#[pyo3(signature = (traces, verdicts = None, model = None, options = None))]
pub fn modes(
    py: Python<'_>,
    traces: Vec<Bound<'_, Trace>>,
    verdicts: Option<&str>,
    model: Option<Bound<'_, Model>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use maslens_core::modes;
    guarded(|| {
        let o: ModesOpts = from_dict("modes", options)?;
        let grouping = o.grouping().map_err(OptionsError::new_err)?;
        let mut traces: Vec<RsTrace> = owned(&traces).iter().map(|t| (**t).clone()).collect();
        if let Some(text) = verdicts {
            attach_verdicts(&mut traces, text)?;
        }
        let selection = modes::Selection {
            outcome: o.outcome.clone(),
            system: o.system.clone(),
            gold: o.gold,
        };
        let mut report = modes::of_traces(&traces, &selection, grouping)
            .map_err(|e| OptionsError::new_err(e.to_string()))?;
        if let Some(m) = model {
            let m = m.get().stack().model;
            let interrupt = Interrupt::default();
            crate::run(py, &interrupt, async {
                modes::summarize(&mut report, m.as_ref(), Some(o.summarize_top)).await
            })?
            .map_err(|e| InternalError::new_err(e.to_string()))?;
        }
        to_text(&json!({"markdown": report.to_markdown(), "report": report}))
    })
}

/// The verdict at `verdicts[i]` as `locate` gives it (`{"trace": ID, ...verdict}`): its trace id
/// (when it names one) and the verdict.
pub(crate) fn verdict_of(
    mut v: Value,
    i: usize,
) -> PyResult<(Option<String>, maslens_trace::Verdict)> {
    let id = v
        .as_object_mut()
        .and_then(|o| o.remove("trace"))
        .and_then(|t| t.as_str().map(str::to_string));
    let verdict = serde_json::from_value(v).map_err(|e| match &id {
        Some(id) => OptionsError::new_err(format!("verdicts[{i}] (trace {id}): {e}")),
        None => OptionsError::new_err(format!("verdicts[{i}]: {e}")),
    })?;
    Ok((id, verdict))
}

/// Each verdict (`{"trace": ID, ...verdict}`) becomes the latest of its trace's verdicts.
pub(crate) fn attach_verdicts(traces: &mut [RsTrace], text: &str) -> PyResult<()> {
    let list: Vec<Value> =
        serde_json::from_str(text).map_err(|e| OptionsError::new_err(format!("verdicts: {e}")))?;
    for (i, v) in list.into_iter().enumerate() {
        let (id, verdict) = verdict_of(v, i)?;
        let id =
            id.ok_or_else(|| OptionsError::new_err(format!("verdicts[{i}]: no `trace` id")))?;
        match traces.iter_mut().find(|t| t.id == id) {
            Some(t) => t.labels.verdicts.push(verdict),
            None => {
                return Err(OptionsError::new_err(format!(
                    "verdicts[{i}]: trace {id:?} is not among the traces"
                )))
            }
        }
    }
    Ok(())
}
