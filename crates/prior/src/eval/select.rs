//! Model selection for the prior: the candidate configurations of the frozen protocol
//! ([`protocol_settings`], [`with_injected_choice`]) and the choice among them by grouped
//! cross-validation ([`select`], [`select_and_train`]).

use super::{fold_assignment, fold_train, sides};
use crate::model::{InjectedUse, PriorModel, RowCache, TrainConfig};
use crate::PriorError;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};

/// Step features of the second feature round (docs/prior.md), held out by the `compact`
/// feature set of [`protocol_settings`]: the first round's 40 features are the simpler, more
/// general set; the second round's were added after looking at cross-validated errors.
pub const SECOND_ROUND_FEATURES: &[&str] = &[
    "nt_ord_2",
    "nt_ord_3",
    "nt_ord_log",
    "pos_rel_x_len",
    "log_index_x_len",
    "agent_first_turn_x_len",
    "orchestrator_x_len",
    "first_step_code",
    "cause_of_first_error",
    "prev_tool_error",
    "errors_before",
    "next_tool_short",
    "agent_turn_2",
    "agent_turn_3",
    "origin_final_numbers",
    "origin_final_words",
];

/// One configuration (a candidate) that model selection may choose.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// e.g. `all a=150 agent a=50`.
    pub name: String,
    pub cfg: TrainConfig,
}

impl Setting {
    /// A candidate named after its settings.
    pub fn new(features: &str, cfg: TrainConfig) -> Setting {
        let name = format!(
            "{features} a={} agent a={}{}",
            cfg.alpha,
            cfg.agent_alpha.unwrap_or(cfg.alpha),
            match cfg.objective {
                crate::Objective::Listwise => " listwise",
                crate::Objective::Pointwise => "",
            },
        ) + cfg.injected.suffix();
        Setting { name, cfg }
    }
}

/// The candidate set of the frozen protocol (`maslens prior train`): step-head L2 weight
/// {50, 150, 400} x agent-head L2 weight {10, 50, 150} x feature set {`all`, `compact` (without
/// [`SECOND_ROUND_FEATURES`])}, pointwise heads, `base`'s other settings (pair rule, seed,
/// inner folds). 18 candidates; the agent weights share one training
/// ([`PriorModel::train_agent_variants`]).
pub fn protocol_settings(base: &TrainConfig) -> Vec<Setting> {
    let mut out = Vec::new();
    for (features, exclude) in [("all", Vec::new()), ("compact", second_round())] {
        for alpha in [50.0, 150.0, 400.0] {
            for agent_alpha in [10.0, 50.0, 150.0] {
                out.push(Setting::new(
                    features,
                    TrainConfig {
                        alpha,
                        agent_alpha: Some(agent_alpha),
                        objective: crate::Objective::Pointwise,
                        agent_objective: crate::Objective::Pointwise,
                        exclude_features: exclude.clone(),
                        ..base.clone()
                    },
                ));
            }
        }
    }
    out
}

/// `candidates`, and when `traces` hold fault-injected traces (docs/inject.md) each candidate
/// that trains both heads on them again with them for the agent head only (named `... injected
/// for agents only`) and without them (`... without injected`), so that model selection, on
/// training folds only, decides whether and where the injected traces help. With no injected
/// trace: `candidates` unchanged.
pub fn with_injected_choice(traces: &[&Trace], candidates: &[Setting]) -> Vec<Setting> {
    let mut out = candidates.to_vec();
    if traces.iter().any(|t| t.is_injected()) {
        for use_ in [InjectedUse::AgentHead, InjectedUse::Unused] {
            out.extend(
                candidates
                    .iter()
                    .filter(|c| c.cfg.injected == InjectedUse::BothHeads)
                    .map(|c| {
                        let mut cfg = c.cfg.clone();
                        cfg.injected = use_;
                        let name = format!("{}{}", c.name, use_.suffix());
                        Setting { name, cfg }
                    }),
            );
        }
    }
    out
}

fn second_round() -> Vec<String> {
    SECOND_ROUND_FEATURES
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A candidate's cross-validated hits in a selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateScore {
    pub name: String,
    pub agent_hits: usize,
    pub step_hits: usize,
    /// Traces predicted.
    pub n: usize,
}

/// The outcome of [`select`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// Index of the chosen candidate.
    pub chosen: usize,
    pub name: String,
    pub scores: Vec<CandidateScore>,
}

fn same_name(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Choose among `candidates` by grouped `k`-fold cross-validation ([`fold_assignment`], `seed`)
/// on the traces with a decisive label (traces with agent-level labels only join every training
/// set): the candidate with the most agent hits plus step hits under its own pair rule; ties go
/// to the earlier candidate. Candidates that differ only in the agent head's L2 weight share
/// their trainings.
pub fn select(
    traces: &[&Trace],
    k: usize,
    seed: u64,
    candidates: &[Setting],
) -> Result<Selection, PriorError> {
    select_cached(traces, k, seed, candidates, &RowCache::new(traces))
}

/// [`select`] with feature rows from `cache`.
pub fn select_cached(
    traces: &[&Trace],
    k: usize,
    seed: u64,
    candidates: &[Setting],
    cache: &RowCache,
) -> Result<Selection, PriorError> {
    if candidates.is_empty() {
        return Err(PriorError::Train("no candidate configuration".into()));
    }
    if candidates.len() == 1 {
        // Nothing to choose: no cross-validation needed.
        return Ok(Selection {
            chosen: 0,
            name: candidates[0].name.clone(),
            scores: Vec::new(),
        });
    }
    let (labelled, train_only) = sides(traces);
    let mut scores: Vec<CandidateScore> = candidates
        .iter()
        .map(|c| CandidateScore {
            name: c.name.clone(),
            agent_hits: 0,
            step_hits: 0,
            n: 0,
        })
        .collect();
    // Candidates sharing everything but the agent head's weight train together.
    let mut families: Vec<(TrainConfig, Vec<usize>)> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let key = TrainConfig {
            agent_alpha: None,
            ..c.cfg.clone()
        };
        match families.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => families.push((key, vec![i])),
        }
    }
    let folds = fold_assignment(&labelled, k.max(2), seed);
    for fold in 0..k.max(2) {
        let train = fold_train(&labelled, &folds, fold, &train_only);
        let test: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f == fold)
            .map(|(t, _)| *t)
            .collect();
        if test.is_empty() {
            continue;
        }
        for (family, members) in &families {
            let alphas: Vec<f64> = members
                .iter()
                .map(|&i| {
                    let c = &candidates[i].cfg;
                    c.agent_alpha.unwrap_or(c.alpha)
                })
                .collect();
            let cfg = TrainConfig {
                agent_alpha: candidates[members[0]].cfg.agent_alpha,
                ..family.clone()
            };
            let models = PriorModel::train_cached(&train, &cfg, &alphas, cache)?;
            for (model, &i) in models.iter().zip(members) {
                for t in &test {
                    let Some(label) = t.labels.decisive.as_ref() else {
                        continue;
                    };
                    let (agent, step) = model.predict(t).unzip();
                    let sc = &mut scores[i];
                    sc.n += 1;
                    sc.agent_hits +=
                        usize::from(agent.is_some_and(|a| same_name(&a, &label.agent)));
                    sc.step_hits += usize::from(step == Some(label.step));
                }
            }
        }
    }
    let mut chosen = 0;
    for (i, sc) in scores.iter().enumerate() {
        let best = &scores[chosen];
        if sc.agent_hits + sc.step_hits > best.agent_hits + best.step_hits {
            chosen = i;
        }
    }
    Ok(Selection {
        chosen,
        name: candidates[chosen].name.clone(),
        scores,
    })
}

/// Train the model the frozen protocol ships: [`select`] over `candidates` on all `traces`, then
/// the chosen configuration trained on all of them.
pub fn select_and_train(
    traces: &[&Trace],
    inner: usize,
    seed: u64,
    candidates: &[Setting],
) -> Result<(PriorModel, Selection), PriorError> {
    select_and_train_cached(traces, inner, seed, candidates, &RowCache::new(traces))
}

/// [`select_and_train`] with feature rows from `cache`.
pub fn select_and_train_cached(
    traces: &[&Trace],
    inner: usize,
    seed: u64,
    candidates: &[Setting],
    cache: &RowCache,
) -> Result<(PriorModel, Selection), PriorError> {
    let sel = select_cached(traces, inner, seed, candidates, cache)?;
    let cfg = &candidates[sel.chosen].cfg;
    let alpha = cfg.agent_alpha.unwrap_or(cfg.alpha);
    let model = PriorModel::train_cached(traces, cfg, &[alpha], cache)?
        .pop()
        .ok_or_else(|| PriorError::Train("no model trained".into()))?;
    Ok((model, sel))
}
