//! Evaluation of decisive-failure predictions: exact agent- and step-level accuracy with
//! counts and seeded 95% bootstrap intervals, step tolerance (+-k), the trivial baselines, and
//! the deterministic cross-validation protocols used to measure the prior.
//!
//! The bootstrap is the shared one in `maslens_eval::stats`; metrics follow the conventions of
//! `maslens_eval::metrics` (exact name/integer comparison, `{value, k, n, ci95}`).

use crate::model::{InjectedUse, PriorModel, RowCache, TrainConfig};
use crate::PriorError;
use maslens_eval::metrics::Scorer;
use maslens_eval::report::LocateReport;
use maslens_eval::run::{evaluate_now, EvalSpec, LabelledCase, Table};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .chain(train_only.iter().copied())
            .collect();
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
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .chain(train_only.iter().copied())
            .collect();
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
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .chain(train_only.iter().copied())
            .collect();
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
mod tests {
    use super::*;
    use crate::model::tests::synthetic_corpus;
    use maslens_trace::{AgentKind, TraceBuilder};

    fn labelled(id: &str, agents: &[(&str, AgentKind)], label: (&str, usize)) -> Trace {
        let mut b = TraceBuilder::new(id);
        for (a, k) in agents {
            b = b.agent(a, *k).step(a, "");
        }
        b.decisive(label.0, label.1).build()
    }

    fn pred(trace: &str, agent: &str, step: usize) -> Prediction {
        Prediction {
            trace: trace.into(),
            agent: Some(agent.into()),
            step: Some(step),
        }
    }

    #[test]
    fn reports_score_exactly_next_to_the_baselines() {
        use AgentKind::*;
        let t = labelled(
            "g/1",
            &[
                ("human", Human),
                ("A", Worker),
                ("term", Tool),
                ("B", Worker),
                ("term", Tool),
            ],
            ("A", 1),
        );
        let cfg = EvalConfig {
            bootstrap: 100,
            ..EvalConfig::default()
        };
        let hits = |r: &LocateReport| {
            let (a, s) = (r.agent_accuracy.unwrap(), r.step_accuracy.unwrap());
            (a.k, a.n, s.k)
        };
        let r = report("m", &[&t], &[pred("g/1", "B", 3)], &cfg);
        assert_eq!(
            (r.method.as_str(), r.format_version),
            ("m", maslens_eval::run::REPORT_FORMAT_VERSION)
        );
        assert_eq!(hits(&r), (0, 1, 0));
        assert_eq!(r.tolerance["1"].k, 0, "|3-1| = 2 > 1");
        assert_eq!(r.tolerance["3"].k, 1, "|3-1| = 2 <= 3");
        // the baselines on the same case: first-agent names A at step 1, last-agent B at 3
        let base = |name: &str| r.baselines[name].step_accuracy.unwrap().k;
        assert_eq!((base("first-agent"), base("last-agent")), (1, 0));
        let r = report("m", &[&t], &[pred("g/1", "A", 1)], &cfg);
        assert_eq!(hits(&r), (1, 1, 1));
        let joint = r.joint_accuracy.unwrap();
        assert_eq!((joint.k, joint.n), (1, 1));
        // a trace without prediction counts as wrong, as an abstention
        let r = report("m", &[&t], &[], &cfg);
        assert_eq!((hits(&r), r.abstentions), ((0, 1, 0), 1));
    }

    #[test]
    fn faulty_agent_labels_score_the_agent_level_only() {
        let t = TraceBuilder::new("aegis/1")
            .agent("Solver", AgentKind::Worker)
            .faulty("solver", None)
            .build();
        assert!(is_labelled(&t));
        let cfg = EvalConfig {
            bootstrap: 50,
            ..EvalConfig::default()
        };
        let r = report("m", &[&t], &[pred("aegis/1", "Solver", 0)], &cfg);
        let agent = r.agent_accuracy.unwrap();
        assert_eq!((agent.k, agent.n), (1, 1));
        assert_eq!(r.step_accuracy.map_or(0, |a| a.n), 0);
        assert_eq!(r.joint_accuracy.map_or(0, |a| a.n), 0);
        assert!(!is_labelled(&Trace::new("none")));
    }

    #[test]
    fn folds_are_balanced_and_order_independent() {
        let data = synthetic_corpus(23, 1);
        let refs: Vec<&Trace> = data.iter().collect();
        let f = fold_assignment(&refs, 5, 7);
        let mut counts = [0usize; 5];
        for x in &f {
            counts[*x] += 1;
        }
        assert!(counts.iter().all(|c| *c == 4 || *c == 5), "{counts:?}");
        let rev: Vec<&Trace> = data.iter().rev().collect();
        let g = fold_assignment(&rev, 5, 7);
        let rev_back: Vec<usize> = g.into_iter().rev().collect();
        assert_eq!(f, rev_back);
        assert_ne!(
            f,
            fold_assignment(&refs, 5, 8),
            "another seed, another split"
        );
    }

    #[test]
    fn folds_keep_runs_of_one_question_together() {
        let mut data = synthetic_corpus(24, 5);
        for (i, t) in data.iter_mut().enumerate() {
            t.task = format!("Question {} of the benchmark?", i / 2);
        }
        // a question id wins over the text: 0 and 23 are one question, 1 another
        data[0].metadata.insert("question_ID".into(), "q-1".into());
        data[23].metadata.insert("question_ID".into(), "q-1".into());
        data[1]
            .metadata
            .insert("question_ID".into(), "other".into());
        let refs: Vec<&Trace> = data.iter().collect();
        for seed in 0..8 {
            let f = fold_assignment(&refs, 5, seed);
            assert_eq!(f[0], f[23], "seed {seed}");
            for q in 1..11 {
                assert_eq!(f[2 * q], f[2 * q + 1], "seed {seed}, question {q}");
            }
            let mut counts = [0usize; 5];
            for x in &f {
                counts[*x] += 1;
            }
            assert!(counts.iter().all(|c| (4..=6).contains(c)), "{counts:?}");
        }
        // fewer questions than folds: folds by trace
        for t in data.iter_mut() {
            t.task = "the same task".into();
            t.metadata.clear();
        }
        let refs: Vec<&Trace> = data.iter().collect();
        let f = fold_assignment(&refs, 5, 1);
        assert!((0..5).all(|k| f.contains(&k)));
    }

    #[test]
    fn nested_cross_validation_selects_inside_each_outer_fold() {
        let mut data = synthetic_corpus(30, 2);
        for (i, t) in data.iter_mut().enumerate() {
            t.id = format!("{}/{i}", if i % 2 == 0 { "even" } else { "odd" });
        }
        let refs: Vec<&Trace> = data.iter().collect();
        let good = Setting::new(
            "all",
            TrainConfig {
                alpha: 1.0,
                ..TrainConfig::default()
            },
        );
        // every step feature held at zero: nothing to learn from
        let useless = Setting::new(
            "none",
            TrainConfig {
                alpha: 1.0,
                exclude_features: crate::FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
                ..TrainConfig::default()
            },
        );
        let settings = [useless.clone(), good.clone()];
        let sel = select(&refs, 3, 7, &settings).unwrap();
        assert_eq!(
            (sel.chosen, sel.name.as_str()),
            (1, good.name.as_str()),
            "{sel:?}"
        );
        assert!(sel.scores[1].step_hits > sel.scores[0].step_hits, "{sel:?}");
        let nested = nested_cv(&refs, 3, 3, 7, &settings).unwrap();
        assert_eq!(nested.out.len(), 30);
        assert_eq!(nested.chosen, vec![good.name.clone(); 3]);
        let ecfg = EvalConfig {
            bootstrap: 100,
            ..EvalConfig::default()
        };
        let r = report("prior/nested", &refs, &nested.out, &ecfg);
        let step = r.step_accuracy.unwrap();
        assert!(step.value > 0.8, "{step:?}");
        let (lgo, chosen) = leave_group_out_selected(&refs, 3, 7, &settings).unwrap();
        assert_eq!(lgo.len(), 30);
        assert_eq!(chosen.len(), 2);
        // the agent weights of one step setting share their trainings and still differ
        let cfg = TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        };
        let models = PriorModel::train_agent_variants(&refs, &cfg, &[0.1, 1e6]).unwrap();
        assert_eq!(models[0].step, models[1].step);
        assert_ne!(models[0].agent, models[1].agent);
        assert_eq!(models[1].training.agent_alpha, Some(1e6));
        assert_eq!(protocol_settings(&TrainConfig::default()).len(), 18);
    }

    /// `n` synthetic traces marked fault-injected, each its own task question.
    fn injected_corpus(n: usize) -> Vec<Trace> {
        let mut injected = synthetic_corpus(n, 9);
        for (i, t) in injected.iter_mut().enumerate() {
            t.id = format!("injected/{i}");
            t.task = format!("Injected question {i}?");
            t.metadata
                .insert(maslens_trace::INJECTION_KEY.into(), serde_json::json!({}));
        }
        injected
    }

    #[test]
    fn injected_traces_train_every_fold_and_are_never_scored() {
        let mut data = synthetic_corpus(20, 2);
        let injected = injected_corpus(20);
        let plain: Vec<&Trace> = data.iter().collect();
        let oof_plain =
            out_of_fold(&plain, 4, &TrainConfig::default(), |m, _| m.step.clone()).unwrap();
        data.extend(injected);
        let refs: Vec<&Trace> = data.iter().collect();
        let (scored, train_only) = sides(&refs);
        assert_eq!((scored.len(), train_only.len()), (20, 20));
        assert!(scored.iter().all(|t| !t.is_injected()));
        assert!(refs
            .iter()
            .filter(|t| is_labelled(t))
            .all(|t| !t.is_injected()));
        // Same folds over the scored traces, and every fold's model saw the injected traces.
        let oof = out_of_fold(&refs, 4, &TrainConfig::default(), |m, _| m.step.clone()).unwrap();
        assert_eq!(oof.len(), 20);
        assert!(oof.iter().zip(&oof_plain).all(|(a, b)| a != b));
        let settings = [Setting::new(
            "all",
            TrainConfig {
                alpha: 1.0,
                ..TrainConfig::default()
            },
        )];
        let nested = nested_cv(&refs, 4, 2, 7, &settings).unwrap();
        assert_eq!(nested.out.len(), 20);
        assert!(nested.out.iter().all(|p| !p.trace.starts_with("injected/")));
        let ecfg = EvalConfig {
            bootstrap: 20,
            ..EvalConfig::default()
        };
        let r = report("prior/nested", &refs, &nested.out, &ecfg);
        assert_eq!(r.step_accuracy.unwrap().n, 20);
    }

    #[test]
    fn selection_chooses_where_injected_traces_train() {
        let mut data = synthetic_corpus(24, 2);
        // Injected traces whose labels point at the first step instead of the placeholder
        // step: training on them teaches the wrong cue.
        let mut injected = injected_corpus(48);
        for t in &mut injected {
            let first = t.steps[0].agent.clone();
            if let Some(l) = t.labels.decisive.as_mut() {
                (l.agent, l.step) = (first, 0);
            }
        }
        let plain: Vec<&Trace> = data.iter().collect();
        let base = TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        };
        let oof_plain = out_of_fold(&plain, 4, &base, |m, _| m.step.clone()).unwrap();
        let plain_data = data.clone();
        let plain_refs: Vec<&Trace> = plain_data.iter().collect();
        let one = [Setting::new("all", base.clone())];
        assert_eq!(with_injected_choice(&plain, &one), one.to_vec());
        data.extend(injected);
        let refs: Vec<&Trace> = data.iter().collect();
        // Without injected traces a model is the one trained on the plain corpus.
        let without = TrainConfig {
            injected: InjectedUse::Unused,
            ..base.clone()
        };
        let oof = out_of_fold(&refs, 4, &without, |m, _| m.step.clone()).unwrap();
        assert_eq!(oof, oof_plain);
        let with = PriorModel::train(&refs, &base).unwrap();
        assert_eq!(with.training.injected_traces, 48);
        assert_eq!(
            PriorModel::train(&refs, &without)
                .unwrap()
                .training
                .injected_traces,
            0
        );
        // The choice doubles the candidates only when there are injected traces.
        let both = with_injected_choice(&refs, &one);
        assert_eq!(both.len(), 3);
        assert_eq!(both[1].name, "all a=1 agent a=50 injected for agents only");
        assert_eq!(both[2].name, "all a=1 agent a=50 without injected");
        assert_eq!(both[2].name, Setting::new("all", without).name);
        // For the agent head only: the step head is the plain corpus's, the agent head saw them.
        let agents_only = PriorModel::train(&refs, &both[1].cfg).unwrap();
        let plain_model = PriorModel::train(&plain_refs, &base).unwrap();
        assert_eq!(agents_only.step, plain_model.step);
        assert_ne!(agents_only.agent, plain_model.agent);
        assert_eq!(agents_only.training.injected_traces, 48);
        assert_eq!(agents_only.training.injected_use, InjectedUse::AgentHead);
        assert_eq!(agents_only.training.traces, 24);
        // The selection sees that the misleading steps hurt.
        let sel = select(&refs, 3, 7, &both).unwrap();
        assert_ne!(sel.chosen, 0, "{sel:?}");
        assert!(sel.scores[2].step_hits > sel.scores[0].step_hits, "{sel:?}");
        let nested = nested_cv(&refs, 3, 3, 7, &both).unwrap();
        assert_eq!(nested.out.len(), 24);
        assert!(
            nested.chosen.iter().all(|c| c != &both[0].name),
            "{:?}",
            nested.chosen
        );
    }

    #[test]
    fn cross_validation_and_reports() {
        let mut data = synthetic_corpus(30, 2);
        for (i, t) in data.iter_mut().enumerate() {
            t.id = format!("{}/{i}", if i % 2 == 0 { "even" } else { "odd" });
        }
        let refs: Vec<&Trace> = data.iter().collect();
        let cfg = TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        };
        let preds = cross_validate(&refs, 3, &cfg).unwrap();
        assert_eq!(preds.len(), 30);
        let ecfg = EvalConfig {
            bootstrap: 200,
            ..EvalConfig::default()
        };
        let r = report("prior", &refs, &preds, &ecfg);
        let subsets: Vec<&str> = r.subsets.keys().map(String::as_str).collect();
        assert_eq!(subsets, ["even", "odd"]);
        assert_eq!(r.subsets["even"].step_accuracy.unwrap().n, 15);
        let step = r.step_accuracy.unwrap();
        assert_eq!(step.n, 30);
        assert!(step.value > 0.8);
        let lgo = leave_group_out(&refs, &cfg).unwrap();
        assert_eq!(lgo.len(), 30);
        assert!(cross_validate(&refs, 1, &cfg).is_err());
        assert_eq!(r.baselines.len(), maslens_eval::baselines::NAMES.len());
        assert_eq!(group_of(&Trace::new("plain")), "default");
    }
}
