//! Evaluation of decisive-failure predictions: exact agent- and step-level accuracy with
//! counts and seeded 95% bootstrap intervals, step tolerance (+-k), the trivial baselines, and
//! the deterministic cross-validation protocols used to measure the prior. The candidate
//! configurations and the choice among them are in the `select` module (re-exported here).
//!
//! The bootstrap is the shared one in `maslens_eval::stats`; metrics follow the conventions of
//! `maslens_eval::metrics` (exact name/integer comparison, `{value, k, n, ci95}`).

use crate::model::{PriorModel, RowCache, TrainConfig};
use crate::PriorError;
use maslens_eval::metrics::Scorer;
use maslens_eval::report::LocateReport;
use maslens_eval::run::{evaluate_now, EvalSpec, LabelledCase, Table};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod select;

pub use select::*;

/// One method's prediction for one trace (`None`: abstained, counted wrong).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub trace: String,
    pub agent: Option<String>,
    pub step: Option<usize>,
}

/// Evaluation options.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalConfig {
    /// Bootstrap resamples.
    pub bootstrap: usize,
    /// Seed for the bootstrap and the random baseline.
    pub seed: u64,
    /// Step tolerances reported.
    pub tolerances: Vec<usize>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            bootstrap: 2000,
            seed: 7,
            tolerances: vec![1, 3],
        }
    }
}

/// Whether a trace carries a label the metrics can use: a decisive (agent, step) label, or
/// faulty agents (Aegis-style, agent level only). Fault-injected traces (`Trace::is_injected`)
/// are training data only and never scored.
pub fn is_labelled(t: &Trace) -> bool {
    t.gold().is_some() && !t.is_injected()
}

/// The two sides of every cross-validation loop here: the traces that are scored (a decisive
/// label, not fault-injected), split into folds; and the training-only traces, which join every
/// training set and are never predicted: traces with agent-level labels only (they train the
/// agent head) and fault-injected traces with a decisive label (docs/inject.md).
pub fn sides<'a>(traces: &[&'a Trace]) -> (Vec<&'a Trace>, Vec<&'a Trace>) {
    traces
        .iter()
        .copied()
        .filter(|t| t.labels.decisive.is_some() || !t.labels.faulty_agents.is_empty())
        .partition(|t| t.labels.decisive.is_some() && !t.is_injected())
}

/// The model's prediction for a trace.
pub fn model_prediction(model: &PriorModel, trace: &Trace) -> Prediction {
    let p = model.predict(trace);
    Prediction {
        trace: trace.id.clone(),
        agent: p.as_ref().map(|(a, _)| a.clone()),
        step: p.map(|(_, s)| s),
    }
}

/// The group a trace is reported under: [`Trace::group`], `default` when it has none.
pub fn group_of(trace: &Trace) -> String {
    trace.group().unwrap_or_else(|| "default".to_string())
}

/// Deterministic K-fold assignment, grouped by task question ([`Trace::task_key`]) so that runs
/// of one question never sit on both sides of a split. Each group is keyed by its smallest trace
/// id; groups are put in the seeded order of that key ([`maslens_trace::seeded_hash`], ties by
/// key) and each goes to the fold holding the fewest traces so far (the lowest fold on ties).
/// With one trace per question this is the round-robin deal of the seeded order: balanced,
/// deterministic and independent of input order. When there are fewer questions than folds
/// (traces without a usable task), every trace is its own group, with a warning.
pub fn fold_assignment(traces: &[&Trace], k: usize, seed: u64) -> Vec<usize> {
    let k = k.max(1);
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, t) in traces.iter().enumerate() {
        groups.entry(t.task_key()).or_default().push(i);
    }
    if groups.len() < k && traces.len() >= k {
        tracing::warn!(
            questions = groups.len(),
            folds = k,
            "fewer task questions than folds: folds are formed by trace instead of by question"
        );
        groups = traces
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("trace:{}\u{0}{i}", t.id), vec![i]))
            .collect();
    }
    let mut order: Vec<(u64, &str, &Vec<usize>)> = groups
        .values()
        .map(|members| {
            let key = members
                .iter()
                .map(|&i| traces[i].id.as_str())
                .min()
                .unwrap_or("");
            (maslens_trace::seeded_hash(seed, key), key, members)
        })
        .collect();
    order.sort();
    let mut folds = vec![0; traces.len()];
    let mut load = vec![0usize; k];
    for (_, _, members) in order {
        let f = (0..k).min_by_key(|&f| (load[f], f)).unwrap_or(0);
        for &i in members {
            folds[i] = f;
        }
        load[f] += members.len();
    }
    folds
}

/// The training side of `fold`: the `labelled` traces that [`fold_assignment`]'s `folds` put in
/// another fold, then every one of `train_only` (traces that only ever train: injected or
/// agent-only ones, [`sides`]). The one rule of every cross-validation loop over the prior.
pub fn fold_train<'a>(
    labelled: &[&'a Trace],
    folds: &[usize],
    fold: usize,
    train_only: &[&'a Trace],
) -> Vec<&'a Trace> {
    labelled
        .iter()
        .zip(folds)
        .filter(|(_, f)| **f != fold)
        .map(|(t, _)| *t)
        .chain(train_only.iter().copied())
        .collect()
}

/// Out-of-fold predictions of K-fold cross-validation over the labelled traces.
pub fn cross_validate(
    traces: &[&Trace],
    k: usize,
    cfg: &TrainConfig,
) -> Result<Vec<Prediction>, PriorError> {
    out_of_fold(traces, k, cfg, model_prediction)
}

/// K-fold cross-fitting over the traces with a decisive label: for each fold, a model trained on
/// the other folds (plus every trace with agent-level labels only, which joins each training set
/// for the agent head and is never predicted) is applied to the fold's traces with `f`. Results
/// come in the order of the labelled traces (folds by [`fold_assignment`]).
pub fn out_of_fold<T>(
    traces: &[&Trace],
    k: usize,
    cfg: &TrainConfig,
    mut f: impl FnMut(&PriorModel, &Trace) -> T,
) -> Result<Vec<T>, PriorError> {
    if k < 2 {
        return Err(PriorError::Train(format!("folds must be >= 2, got {k}")));
    }
    let (labelled, train_only) = sides(traces);
    let folds = fold_assignment(&labelled, k, cfg.seed);
    let mut out: Vec<Option<T>> = (0..labelled.len()).map(|_| None).collect();
    for fold in 0..k {
        let train = fold_train(&labelled, &folds, fold, &train_only);
        let test: Vec<usize> = (0..labelled.len()).filter(|&i| folds[i] == fold).collect();
        if test.is_empty() {
            continue;
        }
        let model = PriorModel::train(&train, cfg)?;
        for i in test {
            out[i] = Some(f(&model, labelled[i]));
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// What nested cross-validation chose and predicted.
#[derive(Debug, Clone)]
pub struct Nested<T> {
    /// Per labelled trace (in the order of the decisive-labelled traces): the outer fold's
    /// output for it.
    pub out: Vec<T>,
    /// Per outer fold: the candidate its inner selection chose.
    pub chosen: Vec<String>,
    /// Outer fold of each labelled trace.
    pub folds: Vec<usize>,
}

/// Nested cross-validation of the whole training procedure: outer folds grouped by task question
/// ([`fold_assignment`], `seed`); inside each outer training set, [`select`] over `candidates`
/// with `inner` grouped folds; the chosen configuration, trained on the outer training set,
/// answers for the outer fold's traces through `f`. No choice sees the traces it is scored on.
pub fn nested_out_of_fold<T>(
    traces: &[&Trace],
    outer: usize,
    inner: usize,
    seed: u64,
    candidates: &[Setting],
    mut f: impl FnMut(&PriorModel, &Trace) -> T,
) -> Result<Nested<T>, PriorError> {
    if outer < 2 || inner < 2 {
        return Err(PriorError::Train(format!(
            "folds must be >= 2, got {outer} outer and {inner} inner"
        )));
    }
    let (labelled, train_only) = sides(traces);
    let cache = RowCache::new(traces);
    let folds = fold_assignment(&labelled, outer, seed);
    let mut out: Vec<Option<T>> = (0..labelled.len()).map(|_| None).collect();
    let mut chosen = Vec::new();
    for fold in 0..outer {
        let test: Vec<usize> = (0..labelled.len()).filter(|&i| folds[i] == fold).collect();
        if test.is_empty() {
            continue;
        }
        let train = fold_train(&labelled, &folds, fold, &train_only);
        let (model, sel) = select_and_train_cached(&train, inner, seed, candidates, &cache)?;
        chosen.push(sel.name);
        for i in test {
            out[i] = Some(f(&model, labelled[i]));
        }
    }
    Ok(Nested {
        out: out.into_iter().flatten().collect(),
        chosen,
        folds,
    })
}

/// [`nested_out_of_fold`] with the model's predictions.
pub fn nested_cv(
    traces: &[&Trace],
    outer: usize,
    inner: usize,
    seed: u64,
    candidates: &[Setting],
) -> Result<Nested<Prediction>, PriorError> {
    nested_out_of_fold(traces, outer, inner, seed, candidates, model_prediction)
}

/// A held-out group and the configuration the selection on the other groups chose for it.
pub type GroupChoice = (String, String);

/// Leave-one-group-out with the selection inside: for each group, [`select`] (grouped `inner`
/// folds) and train on the other groups only, then predict the group (transfer to an unseen
/// system). Groups with no other labelled group to train on are skipped. Returns the
/// predictions and, per group, the candidate chosen for it.
pub fn leave_group_out_selected(
    traces: &[&Trace],
    inner: usize,
    seed: u64,
    candidates: &[Setting],
) -> Result<(Vec<Prediction>, Vec<GroupChoice>), PriorError> {
    let (labelled, train_only) = sides(traces);
    let groups: Vec<String> = labelled.iter().map(|t| group_of(t)).collect();
    let mut names: Vec<&String> = groups.iter().collect();
    names.sort();
    names.dedup();
    let mut preds = Vec::new();
    let mut chosen = Vec::new();
    if names.len() < 2 {
        return Ok((preds, chosen));
    }
    let cache = RowCache::new(traces);
    for g in names {
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&groups)
            .filter(|(_, gg)| *gg != g)
            .map(|(t, _)| *t)
            .chain(train_only.iter().copied())
            .collect();
        let (model, sel) = select_and_train_cached(&train, inner, seed, candidates, &cache)?;
        chosen.push((g.clone(), sel.name));
        preds.extend(
            labelled
                .iter()
                .zip(&groups)
                .filter(|(_, gg)| *gg == g)
                .map(|(t, _)| model_prediction(&model, t)),
        );
    }
    Ok((preds, chosen))
}

/// Leave-one-group-out: for each group, train on all other groups and predict it.
/// Groups with no other labelled group to train on are skipped.
pub fn leave_group_out(
    traces: &[&Trace],
    cfg: &TrainConfig,
) -> Result<Vec<Prediction>, PriorError> {
    let (labelled, train_only) = sides(traces);
    let groups: Vec<String> = labelled.iter().map(|t| group_of(t)).collect();
    let mut names: Vec<&String> = groups.iter().collect();
    names.sort();
    names.dedup();
    let mut preds = Vec::new();
    if names.len() < 2 {
        return Ok(preds);
    }
    for g in names {
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&groups)
            .filter(|(_, gg)| *gg != g)
            .map(|(t, _)| *t)
            .chain(train_only.iter().copied())
            .collect();
        let model = PriorModel::train(&train, cfg)?;
        preds.extend(
            labelled
                .iter()
                .zip(&groups)
                .filter(|(_, gg)| *gg == g)
                .map(|(t, _)| model_prediction(&model, t)),
        );
    }
    Ok(preds)
}

/// One method's evaluation report, in the format of `maslens eval locate`
/// ([`LocateReport`], built by [`maslens_eval::run::evaluate_now`], exact scorer), on the
/// labelled traces of `traces` ([`is_labelled`]; fault-injected ones are never scored): agent,
/// step, joint and step-tolerance accuracy pooled, the same per group (`subsets`, by
/// [`Trace::group`]), and the trivial baselines on the same cases (`baselines`). Predictions
/// are matched by trace id; a labelled trace without one counts as wrong (an abstention).
/// Traces with only faulty-agent labels (Aegis-style) score the agent level alone.
pub fn report(
    method: &str,
    traces: &[&Trace],
    preds: &[Prediction],
    cfg: &EvalConfig,
) -> LocateReport {
    let cases: Vec<LabelledCase> = (traces.iter().filter(|t| is_labelled(t)))
        .filter_map(|t| {
            Some(LabelledCase {
                gold: t.gold()?,
                trace: (*t).clone(),
            })
        })
        .collect();
    let table = Table {
        label: method.into(),
        predictions: preds
            .iter()
            .map(|p| {
                let pred = maslens_eval::metrics::Prediction {
                    agent: p.agent.clone(),
                    step: p.step,
                    abstained: p.step.is_none() && p.agent.is_none(),
                    ..Default::default()
                };
                (p.trace.clone(), pred)
            })
            .collect(),
    };
    let steps = |t: &Trace| t.steps.len();
    let spec = EvalSpec {
        title: method.to_string(),
        dataset: String::new(),
        scorer: Scorer::Exact,
        seed: cfg.seed,
        resamples: cfg.bootstrap,
        tolerances: cfg.tolerances.clone(),
        top_mislocalized: 0,
        split: None,
        config: serde_json::Value::Null,
        trace_tokens: &steps,
        git_revision: None,
    };
    evaluate_now(&cases, &table, &[], &spec).report
}

/// `report` with the pair rule that made its predictions in `config.pair_rule` (`independent`,
/// `agent-first`, `coherent`), as `maslens eval locate` records the rule it scored: the reports
/// say which (agent, step) pairs their figures are for.
pub fn scored_pairs(mut report: LocateReport, rule: &str) -> LocateReport {
    report.config = serde_json::json!({ "pair_rule": rule });
    report
}

#[cfg(test)]
mod tests;
