//! `maslens inject` for Python (`maslens.inject`): fault injection into a debate's successful
//! runs, writing the runs a fault turned wrong as labelled failure traces, through
//! `maslens_core::inject` as the CLI runs it (the same questions, files and summary).

use crate::methods::{to_text, PyProgress};
use crate::model::core_error;
use crate::model::Model;
use crate::{guarded, Interrupt, OptionsError};
use maslens_core::inject as core_inject;
use maslens_credit::config::DebateConfig;
use maslens_credit::debate::ModelSet;
use maslens_credit::inject::{FaultKind, InjectOptions};
use maslens_credit::simulation::{self, SimulatedMas};
use pyo3::prelude::*;
use serde_json::json;
use std::path::PathBuf;

/// The debate configuration: the TOML text, the file at `config_path`, or (with `simulation`)
/// the simulated system's.
fn debate_config(
    config_toml: Option<&str>,
    config_path: Option<&PathBuf>,
    simulation: bool,
) -> PyResult<DebateConfig> {
    let options = |e: maslens_credit::config::ConfigError| OptionsError::new_err(e.to_string());
    match (config_toml, config_path) {
        (Some(text), _) => DebateConfig::from_toml(text, "config").map_err(options),
        (None, Some(path)) => DebateConfig::from_path(path).map_err(options),
        (None, None) if simulation => simulation::config(2, 0, 0).map_err(options),
        (None, None) => Err(OptionsError::new_err(
            "a debate configuration is needed (or simulation=True)",
        )),
    }
}

/// The fault kinds by name (`wrong-fact`, `dropped-instruction`).
fn fault_kinds(names: &[String]) -> PyResult<Vec<FaultKind>> {
    (names.iter())
        .map(|n| {
            n.parse()
                .map_err(|e: String| OptionsError::new_err(format!("kinds: {e}")))
        })
        .collect()
}

/// Run the injections and write `out/traces.jsonl` and `out/summary.json`; returns
/// `{"summary": <summary.json>, "skipped": [records of the dataset not read], "traces_path",
/// "summary_path"}` as JSON text. Every role calls `model` (a configuration that names models
/// per role is refused: the CLI builds those); with `simulation` the simulated system answers.
#[pyfunction]
#[pyo3(signature = (out, config_toml = None, config_path = None, dataset = None, model = None,
                    questions = 20, kinds = vec!["wrong-fact".to_string(), "dropped-instruction".to_string()],
                    per_run = 4, seed = 0, simulation = false, progress = None))]
#[allow(clippy::too_many_arguments)]
pub fn inject(
    py: Python<'_>,
    out: PathBuf,
    config_toml: Option<&str>,
    config_path: Option<PathBuf>,
    dataset: Option<String>,
    model: Option<Bound<'_, Model>>,
    questions: usize,
    kinds: Vec<String>,
    per_run: usize,
    seed: u64,
    simulation: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let cfg = debate_config(config_toml, config_path.as_ref(), simulation)?;
    let opts = InjectOptions {
        kinds: fault_kinds(&kinds)?,
        per_run,
        seed,
    };
    let picked = core_inject::questions(
        dataset.as_deref(),
        &cfg,
        config_path.as_deref(),
        simulation,
        questions,
        seed,
    )
    .map_err(core_error)?;
    let models = match (simulation, &model) {
        (true, _) => SimulatedMas::models(&picked.items),
        (false, None) => {
            return Err(OptionsError::new_err(
                "a model is needed (or simulation=True)",
            ))
        }
        (false, Some(_)) if !cfg.model_specs().is_empty() => {
            return Err(OptionsError::new_err(format!(
                "the configuration names models per role ({}); maslens.inject calls one model for \
                 every role: use `maslens inject` for this configuration",
                cfg.model_specs().join(", ")
            )))
        }
        (false, Some(m)) => ModelSet::single(m.get().stack().model),
    };
    let interrupt = Interrupt::default();
    let run = crate::run(py, &interrupt, async {
        let progress = PyProgress::new(&progress, &interrupt);
        let (items, name) = (&picked.items, &picked.dataset);
        core_inject::inject_to(&out, &models, &cfg, items, &opts, name, &progress).await
    })?
    .map_err(core_error)?;
    guarded(|| {
        to_text(&json!({
            "summary": run.to_json(),
            "skipped": picked.skipped,
            "traces_path": run.traces_path,
            "summary_path": run.summary_path,
        }))
    })
}
