//! What the debate commands (`optimize`, `inject`) share: the dataset a debate reads and the
//! models it calls. Beside `cmd/` because command modules never import each other.

use crate::llm_args::LlmArgs;
use anyhow::Context;
use maslens_credit::config::DebateConfig;
use maslens_credit::data::{load_spec, Mcq};
use maslens_credit::debate::ModelSet;
use maslens_credit::optimize_run::dataset_spec;
use maslens_credit::simulation::SimulatedMas;
use std::path::Path;
use std::sync::Arc;

/// The questions of a debate's dataset: `--dataset`, else the configuration's `[data]` (relative
/// to the configuration file); skipped records are reported on stderr. Returns the spec read.
pub(crate) fn load_questions(
    dataset: Option<&str>,
    cfg: &DebateConfig,
    config_path: Option<&Path>,
) -> anyhow::Result<(Vec<Mcq>, String)> {
    let spec = dataset_spec(dataset, cfg.data.as_ref(), config_path)?;
    let loaded = load_spec(&spec)?;
    for p in &loaded.problems {
        eprintln!("warning: skipped {p}");
    }
    Ok((loaded.items, spec))
}

/// The models a debate uses: the SIMULATED system over `simulated` questions, or the `--model`
/// default plus every model the configuration names (built with the same LLM options).
pub(crate) async fn debate_models(
    llm: &LlmArgs,
    cfg: &DebateConfig,
    simulated: Option<&[Mcq]>,
) -> anyhow::Result<ModelSet> {
    if let Some(questions) = simulated {
        return Ok(ModelSet::single(Arc::new(SimulatedMas::new(questions))));
    }
    let mut set = ModelSet::single(llm.build().await?.model);
    for spec in cfg.model_specs() {
        let mut a = llm.clone();
        a.model = Some(spec.clone());
        let m = a
            .build()
            .await
            .with_context(|| format!("building model {spec}"))?
            .model;
        set = set.with(spec, m);
    }
    Ok(set)
}
