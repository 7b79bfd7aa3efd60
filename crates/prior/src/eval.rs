//! Evaluation of decisive-failure predictions: exact agent- and step-level accuracy with
//! counts and seeded 95% bootstrap intervals, step tolerance (+-k), the trivial baselines, and
//! the deterministic cross-validation protocols used to measure the prior.
//!
//! The bootstrap is the shared one in `maslens_eval::stats`; metrics follow the conventions of
//! `maslens_eval::metrics` (exact name/integer comparison, `{value, k, n, ci95}`).

use crate::model::{PriorModel, TrainConfig};
use crate::text::fnv1a;
use crate::PriorError;
use maslens_eval::stats::bootstrap_proportion_ci;
use maslens_trace::{AgentKind, Trace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An accuracy with its count and 95% bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub value: f64,
    /// Correct cases.
    pub k: usize,
    /// Cases.
    pub n: usize,
    /// 95% percentile bootstrap interval over cases.
    pub ci95: [f64; 2],
}

/// Step accuracy when a prediction within +-`within` steps of the label counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub within: usize,
    #[serde(flatten)]
    pub metric: Metric,
}

/// The metrics of one method on one set of labelled traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateMetrics {
    pub agent: Metric,
    pub step: Metric,
    /// Agent and step both right.
    pub pair: Metric,
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

/// Seeded 95% percentile bootstrap interval of a share of `true` outcomes, computed with the
/// shared `maslens_eval::stats::bootstrap_proportion_ci` (the one `maslens eval locate` uses).
pub fn bootstrap_ci(hits: &[bool], resamples: usize, seed: u64) -> [f64; 2] {
    let n = hits.len();
    if n == 0 {
        return [0.0, 0.0];
    }
    let v = hits.iter().filter(|h| **h).count() as f64 / n as f64;
    bootstrap_proportion_ci(hits, resamples, 0.95, seed)
        .map(|i| [i.lo, i.hi])
        .unwrap_or([v, v])
}

/// A metric from 0/1 outcomes.
pub fn metric(hits: &[bool], cfg: &EvalConfig) -> Metric {
    let k = hits.iter().filter(|h| **h).count();
    let n = hits.len();
    Metric {
        value: if n == 0 { 0.0 } else { k as f64 / n as f64 },
        k,
        n,
        ci95: bootstrap_ci(hits, cfg.bootstrap, cfg.seed),
    }
}

/// Whether a trace carries a label the metrics can use: a decisive (agent, step) label, or
/// faulty agents (Aegis-style, agent level only).
pub fn is_labelled(t: &Trace) -> bool {
    t.labels.decisive.is_some() || !t.labels.faulty_agents.is_empty()
}

/// Score predictions against the labels of `traces` (matched by trace id; unlabelled traces are
/// ignored, a labelled trace without prediction counts as wrong). Decisive labels score agent
/// (exact name), step (exact index), pair (both) and step tolerance; traces with only faulty-agent
/// labels score the agent level alone (right when the predicted agent is one of the faulty
/// agents, names compared case-insensitively as Aegis labels differ in case).
pub fn score(traces: &[&Trace], preds: &[Prediction], cfg: &EvalConfig) -> LocateMetrics {
    let by_id: BTreeMap<&str, &Prediction> = preds.iter().map(|p| (p.trace.as_str(), p)).collect();
    let mut agent_hits = Vec::new();
    let mut step_hits = Vec::new();
    let mut pair_hits = Vec::new();
    let mut dist: Vec<Option<usize>> = Vec::new();
    for t in traces {
        let p = by_id.get(t.id.as_str());
        let agent = p.and_then(|p| p.agent.as_deref());
        if let Some(label) = t.labels.decisive.as_ref() {
            let agent_ok = agent == Some(label.agent.as_str());
            agent_hits.push(agent_ok);
            let step = p.and_then(|p| p.step);
            step_hits.push(step == Some(label.step));
            pair_hits.push(agent_ok && step == Some(label.step));
            dist.push(step.map(|s| s.abs_diff(label.step)));
        } else if !t.labels.faulty_agents.is_empty() {
            agent_hits.push(agent.is_some_and(|a| {
                t.labels
                    .faulty_agents
                    .iter()
                    .any(|f| f.agent.eq_ignore_ascii_case(a))
            }));
        }
    }
    let tolerance = cfg
        .tolerances
        .iter()
        .map(|&w| {
            let hits: Vec<bool> = dist.iter().map(|d| d.is_some_and(|d| d <= w)).collect();
            Tolerance {
                within: w,
                metric: metric(&hits, cfg),
            }
        })
        .collect();
    LocateMetrics {
        agent: metric(&agent_hits, cfg),
        step: metric(&step_hits, cfg),
        pair: metric(&pair_hits, cfg),
        tolerance,
    }
}

fn nonterminal(kind: AgentKind) -> bool {
    matches!(kind, AgentKind::Worker | AgentKind::Orchestrator)
}

/// The trivial baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    /// A uniformly random step (seeded per trace id) and its acting agent.
    Random,
    /// The first step whose agent is a worker or orchestrator (not tool, not human).
    FirstNonTerminal,
    /// The last step whose agent is a worker or orchestrator.
    LastNonTerminal,
}

impl Baseline {
    pub const ALL: [Baseline; 3] = [
        Baseline::Random,
        Baseline::FirstNonTerminal,
        Baseline::LastNonTerminal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Baseline::Random => "baseline/random",
            Baseline::FirstNonTerminal => "baseline/first-non-terminal",
            Baseline::LastNonTerminal => "baseline/last-non-terminal",
        }
    }

    /// This baseline's prediction for a trace.
    pub fn predict(self, trace: &Trace, seed: u64) -> Prediction {
        let kinds: Vec<bool> = trace
            .steps
            .iter()
            .map(|s| nonterminal(trace.agent_kind(&s.agent)))
            .collect();
        let pos = match self {
            Baseline::Random => {
                if trace.steps.is_empty() {
                    None
                } else {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(trace.id.as_bytes()));
                    Some(rng.gen_range(0..trace.steps.len()))
                }
            }
            Baseline::FirstNonTerminal => kinds.iter().position(|k| *k),
            Baseline::LastNonTerminal => kinds.iter().rposition(|k| *k),
        };
        Prediction {
            trace: trace.id.clone(),
            agent: pos.map(|i| trace.steps[i].agent.clone()),
            step: pos.map(|i| trace.steps[i].index),
        }
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

/// The group a trace belongs to for per-subset reporting: its id up to the last `/`
/// (`Hand-Crafted/12` -> `Hand-Crafted`), else `default`.
pub fn group_of(trace: &Trace) -> String {
    match trace.id.rsplit_once('/') {
        Some((g, _)) if !g.is_empty() => g.to_string(),
        _ => "default".to_string(),
    }
}

/// Deterministic K-fold assignment: traces are ordered by FNV-1a(seed, id) (ties by id) and
/// dealt round-robin into `k` folds, so folds are balanced and independent of input order.
pub fn fold_assignment(traces: &[&Trace], k: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<(u64, &str, usize)> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut key = seed.to_le_bytes().to_vec();
            key.extend_from_slice(t.id.as_bytes());
            (fnv1a(&key), t.id.as_str(), i)
        })
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

/// Reports for the three baselines on `traces`.
pub fn baseline_reports(traces: &[&Trace], cfg: &EvalConfig) -> Vec<MethodReport> {
    Baseline::ALL
        .iter()
        .map(|b| {
            let preds: Vec<Prediction> = traces.iter().map(|t| b.predict(t, cfg.seed)).collect();
            report(b.name(), traces, &preds, cfg)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::synthetic_corpus;
    use maslens_trace::{DecisiveLabel, Step};

    fn labelled(id: &str, agents: &[(&str, AgentKind)], label: (&str, usize)) -> Trace {
        let mut t = Trace::new(id);
        for (i, (a, k)) in agents.iter().enumerate() {
            t.ensure_agent(a, *k);
            t.steps.push(Step {
                index: i,
                agent: a.to_string(),
                ..Step::default()
            });
        }
        t.labels.decisive = Some(DecisiveLabel {
            agent: label.0.into(),
            step: label.1,
            reason: None,
        });
        t
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_estimate() {
        let hits: Vec<bool> = (0..50).map(|i| i % 3 == 0).collect();
        let a = bootstrap_ci(&hits, 1000, 1);
        assert_eq!(a, bootstrap_ci(&hits, 1000, 1));
        let v = 17.0 / 50.0;
        assert!(a[0] < v && v < a[1], "{a:?}");
        assert_eq!(bootstrap_ci(&[true; 10], 500, 2), [1.0, 1.0]);
        assert_eq!(bootstrap_ci(&[], 500, 2), [0.0, 0.0]);
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
        let first = Baseline::FirstNonTerminal.predict(&t, 0);
        assert_eq!((first.agent.as_deref(), first.step), (Some("A"), Some(1)));
        let last = Baseline::LastNonTerminal.predict(&t, 0);
        assert_eq!((last.agent.as_deref(), last.step), (Some("B"), Some(3)));
        let r1 = Baseline::Random.predict(&t, 9);
        assert_eq!(r1, Baseline::Random.predict(&t, 9));
        assert!(r1.step.unwrap() < 5);

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
        assert_eq!((m.pair.k, m.pair.n), (1, 1));
        // a trace without prediction counts as wrong
        let m = score(&[&t], &[], &cfg);
        assert_eq!((m.agent.k, m.agent.n), (0, 1));
    }

    #[test]
    fn faulty_agent_labels_score_the_agent_level_only() {
        use maslens_trace::FaultyAgent;
        let mut t = Trace::new("aegis/1");
        t.ensure_agent("Solver", AgentKind::Worker);
        t.labels.faulty_agents.push(FaultyAgent {
            agent: "solver".into(),
            error_mode: None,
            strategy: None,
            description: None,
        });
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
        assert_eq!((m.step.n, m.pair.n), (0, 0));
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
        assert_eq!(baseline_reports(&refs, &ecfg).len(), 3);
        assert_eq!(group_of(&Trace::new("plain")), "default");
    }
}
