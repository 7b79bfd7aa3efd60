//! Evaluation of decisive-failure predictions: exact agent- and step-level accuracy with
//! counts and seeded 95% bootstrap intervals, step tolerance (+-k), the trivial baselines, and
//! the deterministic cross-validation protocols used to measure the prior.
//!
//! The bootstrap is the shared one in `maslens_eval::stats`; metrics follow the conventions of
//! `maslens_eval::metrics` (exact name/integer comparison, `{value, k, n, ci95}`).

use crate::model::{PriorModel, TrainConfig};
use crate::PriorError;
use maslens_eval::metrics::{Accuracy, Scorer};
use maslens_eval::run::{evaluate_now, EvalSpec, LabelledCase, Table};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Step accuracy when a prediction within +-`within` steps of the label counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub within: usize,
    #[serde(flatten)]
    pub metric: Accuracy,
}

/// The metrics of one method on one set of labelled traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateMetrics {
    pub agent: Accuracy,
    pub step: Accuracy,
    /// Agent and step both right (`pair` in reports of format 1).
    #[serde(alias = "pair")]
    pub joint: Accuracy,
    pub tolerance: Vec<Tolerance>,
}

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

/// An accuracy from 0/1 outcomes (the one `maslens eval locate` reports), with this
/// configuration's bootstrap resamples and seed.
pub fn metric(hits: &[bool], cfg: &EvalConfig) -> Accuracy {
    Accuracy::with_resamples(hits, cfg.bootstrap, cfg.seed)
}

/// Whether a trace carries a label the metrics can use: a decisive (agent, step) label, or
/// faulty agents (Aegis-style, agent level only).
pub fn is_labelled(t: &Trace) -> bool {
    t.gold().is_some()
}

/// Score predictions against the labels of `traces` (matched by trace id; unlabelled traces are
/// ignored, a labelled trace without prediction counts as wrong), through the evaluation path
/// of `maslens eval locate` ([`maslens_eval::run::evaluate_now`], exact scorer): decisive labels
/// score agent (exact name), step (exact index), joint (both) and step tolerance; traces with
/// only faulty-agent labels score the agent level alone (right when the predicted agent is one
/// of the faulty agents, names compared case-insensitively as Aegis labels differ in case).
pub fn score(traces: &[&Trace], preds: &[Prediction], cfg: &EvalConfig) -> LocateMetrics {
    let cases: Vec<LabelledCase> = traces
        .iter()
        .filter_map(|t| {
            Some(LabelledCase {
                gold: t.gold()?,
                trace: (*t).clone(),
            })
        })
        .collect();
    let table = Table {
        label: "prior".into(),
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
        title: String::new(),
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
    let r = evaluate_now(&cases, &table, &[], &spec).report;
    let none = || metric(&[], cfg);
    LocateMetrics {
        agent: r.agent_accuracy.unwrap_or_else(none),
        step: r.step_accuracy.unwrap_or_else(none),
        joint: r.joint_accuracy.unwrap_or_else(none),
        tolerance: cfg
            .tolerances
            .iter()
            .map(|&w| Tolerance {
                within: w,
                metric: r
                    .tolerance
                    .get(&w.to_string())
                    .copied()
                    .unwrap_or_else(none),
            })
            .collect(),
    }
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

/// Deterministic K-fold assignment: traces are put in their seeded order
/// ([`maslens_trace::seeded_hash`] of the id, ties by id) and dealt round-robin into `k` folds,
/// so folds are balanced and independent of input order.
pub fn fold_assignment(traces: &[&Trace], k: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<(u64, &str, usize)> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| (maslens_trace::seeded_hash(seed, &t.id), t.id.as_str(), i))
        .collect();
    order.sort();
    let mut folds = vec![0; traces.len()];
    for (rank, (_, _, i)) in order.into_iter().enumerate() {
        folds[i] = rank % k.max(1);
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
    let labelled: Vec<&Trace> = traces
        .iter()
        .copied()
        .filter(|t| t.labels.decisive.is_some())
        .collect();
    let agent_only: Vec<&Trace> = traces
        .iter()
        .copied()
        .filter(|t| t.labels.decisive.is_none() && !t.labels.faulty_agents.is_empty())
        .collect();
    let folds = fold_assignment(&labelled, k, cfg.seed);
    let mut out: Vec<Option<T>> = (0..labelled.len()).map(|_| None).collect();
    for fold in 0..k {
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .chain(agent_only.iter().copied())
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

/// Leave-one-group-out: for each group, train on all other groups and predict it.
/// Groups with no other labelled group to train on are skipped.
pub fn leave_group_out(
    traces: &[&Trace],
    cfg: &TrainConfig,
) -> Result<Vec<Prediction>, PriorError> {
    let labelled: Vec<&Trace> = traces
        .iter()
        .copied()
        .filter(|t| t.labels.decisive.is_some())
        .collect();
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

/// One method's metrics per group and pooled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodReport {
    pub method: String,
    /// Group name -> metrics; `all` is every labelled trace pooled.
    pub groups: BTreeMap<String, LocateMetrics>,
}

/// Metrics of `preds` for each group of `traces` and pooled (`all`).
pub fn report(
    method: &str,
    traces: &[&Trace],
    preds: &[Prediction],
    cfg: &EvalConfig,
) -> MethodReport {
    let mut groups: BTreeMap<String, Vec<&Trace>> = BTreeMap::new();
    for t in traces.iter().filter(|t| is_labelled(t)) {
        groups.entry(group_of(t)).or_default().push(t);
    }
    let mut out = BTreeMap::new();
    let pooled: Vec<&Trace> = traces.iter().copied().filter(|t| is_labelled(t)).collect();
    if groups.len() > 1 {
        for (g, ts) in &groups {
            out.insert(g.clone(), score(ts, preds, cfg));
        }
    }
    out.insert("all".to_string(), score(&pooled, preds, cfg));
    MethodReport {
        method: method.to_string(),
        groups: out,
    }
}

/// A baseline's prediction for a trace (the one baseline set, `maslens_eval::baselines`).
pub fn baseline_prediction(name: &str, trace: &Trace, seed: u64) -> Prediction {
    let g = maslens_eval::baselines::run(name, trace, seed);
    Prediction {
        trace: trace.id.clone(),
        agent: g.as_ref().map(|g| g.agent.clone()),
        step: g.map(|g| g.step),
    }
}

/// Reports for the baselines of `maslens_eval::baselines` on `traces`, named `baseline/NAME`.
pub fn baseline_reports(traces: &[&Trace], cfg: &EvalConfig) -> Vec<MethodReport> {
    maslens_eval::baselines::NAMES
        .iter()
        .map(|name| {
            let preds: Vec<Prediction> = traces
                .iter()
                .map(|t| baseline_prediction(name, t, cfg.seed))
                .collect();
            report(&format!("baseline/{name}"), traces, &preds, cfg)
        })
        .collect()
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

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_estimate() {
        let hits: Vec<bool> = (0..50).map(|i| i % 3 == 0).collect();
        let cfg = EvalConfig {
            bootstrap: 1000,
            seed: 1,
            ..EvalConfig::default()
        };
        let a = metric(&hits, &cfg).ci95;
        assert_eq!(a, metric(&hits, &cfg).ci95);
        let v = 17.0 / 50.0;
        assert!(a[0] < v && v < a[1], "{a:?}");
        assert_eq!(metric(&[true; 10], &cfg).ci95, [1.0, 1.0]);
        assert_eq!(metric(&[], &cfg).ci95, [0.0, 0.0]);
    }

    #[test]
    fn baselines_and_exact_scoring() {
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
        let first = baseline_prediction("first-agent", &t, 0);
        assert_eq!((first.agent.as_deref(), first.step), (Some("A"), Some(1)));
        let last = baseline_prediction("last-agent", &t, 0);
        assert_eq!((last.agent.as_deref(), last.step), (Some("B"), Some(3)));
        let r1 = baseline_prediction("random", &t, 9);
        assert_eq!(r1, baseline_prediction("random", &t, 9));
        assert!(matches!(r1.step, Some(1) | Some(3)), "acting steps only");

        let cfg = EvalConfig {
            bootstrap: 100,
            ..EvalConfig::default()
        };
        let m = score(&[&t], std::slice::from_ref(&last), &cfg);
        assert_eq!((m.agent.k, m.agent.n, m.step.k), (0, 1, 0));
        assert_eq!(m.tolerance[0].within, 1);
        assert_eq!(m.tolerance[0].metric.k, 0, "|3-1| = 2 > 1");
        assert_eq!(m.tolerance[1].metric.k, 1, "|3-1| = 2 <= 3");
        let m = score(&[&t], &[first], &cfg);
        assert_eq!((m.agent.k, m.step.k, m.agent.value), (1, 1, 1.0));
        assert_eq!((m.joint.k, m.joint.n), (1, 1));
        // a trace without prediction counts as wrong
        let m = score(&[&t], &[], &cfg);
        assert_eq!((m.agent.k, m.agent.n), (0, 1));
    }

    #[test]
    fn faulty_agent_labels_score_the_agent_level_only() {
        let t = TraceBuilder::new("aegis/1")
            .agent("Solver", AgentKind::Worker)
            .faulty("solver", None)
            .build();
        assert!(is_labelled(&t));
        let pred = Prediction {
            trace: "aegis/1".into(),
            agent: Some("Solver".into()),
            step: Some(0),
        };
        let cfg = EvalConfig {
            bootstrap: 50,
            ..EvalConfig::default()
        };
        let m = score(&[&t], &[pred], &cfg);
        assert_eq!((m.agent.k, m.agent.n), (1, 1));
        assert_eq!((m.step.n, m.joint.n), (0, 0));
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
        assert_eq!(r.groups.len(), 3, "even, odd, all");
        assert_eq!(r.groups["all"].step.n, 30);
        assert!(r.groups["all"].step.value > 0.8);
        let lgo = leave_group_out(&refs, &cfg).unwrap();
        assert_eq!(lgo.len(), 30);
        assert!(cross_validate(&refs, 1, &cfg).is_err());
        assert_eq!(
            baseline_reports(&refs, &ecfg).len(),
            maslens_eval::baselines::NAMES.len()
        );
        assert_eq!(group_of(&Trace::new("plain")), "default");
    }
}
