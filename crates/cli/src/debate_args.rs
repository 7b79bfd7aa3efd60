//! What the debate commands (`optimize`, `inject`) share: the dataset a debate reads and the
//! models it calls. Beside `cmd/` because command modules never import each other.

use crate::llm_args::{LlmArgs, Stack};
use anyhow::Context;
use maslens_credit::config::DebateConfig;
use maslens_credit::data::Mcq;
use maslens_credit::debate::ModelSet;
use maslens_credit::simulation::SimulatedMas;
use std::path::Path;

/// The questions of a debate's dataset: `--dataset`, else the configuration's `[data]` (relative
/// to the configuration file); skipped records are reported on stderr. Returns the spec read.
pub(crate) fn load_questions(
    dataset: Option<&str>,
    cfg: &DebateConfig,
    config_path: Option<&Path>,
) -> anyhow::Result<(Vec<Mcq>, String)> {
    let (loaded, spec) = maslens_core::optimize::load_questions(dataset, cfg, config_path)?;
    warn_skipped(&loaded.problems);
    Ok((loaded.items, spec))
}

/// One stderr line per dataset record a debate command skipped (the file, record and why).
pub(crate) fn warn_skipped<T: std::fmt::Display>(skipped: &[T]) {
    for p in skipped {
        eprintln!("warning: skipped {p}");
    }
}

/// The models a debate uses: the SIMULATED system over `simulated` questions, or the `--model`
/// default plus every model the configuration names (built with the same LLM options). The
/// stacks come along so that the command can print their usage at the end ([`finish`]).
pub(crate) async fn debate_models(
    llm: &LlmArgs,
    cfg: &DebateConfig,
    simulated: Option<&[Mcq]>,
) -> anyhow::Result<(ModelSet, Vec<Stack>)> {
    if let Some(questions) = simulated {
        let set = SimulatedMas::models(questions);
        return Ok((set, Vec::new()));
    }
    let default = llm.build().await?;
    let mut set = ModelSet::single(default.model.clone());
    let mut stacks = vec![default];
    for spec in cfg.model_specs() {
        let mut a = llm.clone();
        a.model = Some(spec.clone());
        let stack = a
            .build()
            .await
            .with_context(|| format!("building model {spec}"))?;
        set = set.with(spec, stack.model.clone());
        stacks.push(stack);
    }
    Ok((set, stacks))
}

/// The usage line of every model a debate called (none for the simulation), as every
/// LLM-backed command prints at its end.
pub(crate) fn finish(stacks: &[Stack], quiet: bool) {
    for stack in stacks {
        crate::llm_args::finish(stack, quiet);
    }
}
