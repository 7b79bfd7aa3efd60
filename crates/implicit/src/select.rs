//! Best-of-N trace selection (MASIF section 3.1) and the weight-sensitivity study (appendix A).
//!
//! Candidates are grouped by task. Tasks are split 20/80 (seeded) into tuning and test sets.
//! For each N, every task with at least N candidates contributes one seeded random subset of N
//! candidates, shared by all scorers. Scorers:
//! - IF: lowest risk r;
//! - PRM: highest pooled step score, pooling (min, mean, product, geometric mean, last) chosen
//!   on the tuning split;
//! - PRM+IF: highest w * s_prm + (1 - w) * (1 - s_if), pooling and w (grid 0, 0.1, ..., 1)
//!   chosen jointly on the tuning split; s_if = r clipped to [0, 1];
//! - random: a seeded uniform pick.
//!
//! Ties are broken by the subset's (seeded random) order. Reported: the accuracy (share of
//! tasks whose selected candidate succeeded) on the test split, with k/n.

use crate::taxonomy::{Absorption, ErrorType};
use crate::weights::Weights;
use maslens_eval::stats::{mean, quantile, spearman};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One candidate trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    pub id: String,
    /// Task key (candidates with the same key compete).
    pub task: String,
    pub success: bool,
    /// Parsed steps L.
    pub steps: usize,
    /// Counted IFs as (type, absorption).
    pub events: Vec<(ErrorType, Option<Absorption>)>,
    /// Step scores from an external PRM (already in [0, 1] or normalized by the caller).
    #[serde(default)]
    pub prm: Option<Vec<f64>>,
}

impl Candidate {
    pub fn risk(&self, w: &Weights) -> f64 {
        w.risk(self.events.iter().copied(), self.steps)
    }
}

/// Pooling of step scores into a trace score. MASIF section 3.1 lists four pooling functions,
/// "min, mean, product/geometric mean, and last-step"; maslens tunes over both readings of the
/// third (five candidates). The product favours shorter traces (every step below 1 lowers it);
/// the geometric mean (the product's `1/n`-th power) does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    Min,
    Mean,
    /// The product of the step scores.
    Product,
    /// The geometric mean of the step scores (`geo_mean` in reports before the product existed).
    #[serde(alias = "geo_mean")]
    GeometricMean,
    Last,
}

impl Pooling {
    /// The candidates tuned on the tuning split, in tie-break order (the first wins).
    pub const ALL: [Pooling; 5] = [
        Pooling::Min,
        Pooling::Mean,
        Pooling::Product,
        Pooling::GeometricMean,
        Pooling::Last,
    ];

    /// Name in reports: `min`, `mean`, `product`, `geometric-mean`, `last`.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Min => "min",
            Pooling::Mean => "mean",
            Pooling::Product => "product",
            Pooling::GeometricMean => "geometric-mean",
            Pooling::Last => "last",
        }
    }

    /// Pool scores; `None` for no scores. A score at or below 0 makes the product and the
    /// geometric mean 0.
    pub fn pool(self, xs: &[f64]) -> Option<f64> {
        if xs.is_empty() {
            return None;
        }
        Some(match self {
            Pooling::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
            Pooling::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
            Pooling::Product => {
                if xs.iter().any(|x| *x <= 0.0) {
                    0.0
                } else {
                    xs.iter().product()
                }
            }
            Pooling::GeometricMean => {
                if xs.iter().any(|x| *x <= 0.0) {
                    0.0
                } else {
                    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
                }
            }
            Pooling::Last => *xs.last()?,
        })
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Map raw scores from `[lo, hi]` to `[0, 1]` (e.g. PRInTS' [-4, 4]), clipping outside values.
pub fn normalize_scores(xs: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    xs.iter()
        .map(|x| {
            if hi > lo {
                ((x - lo) / (hi - lo)).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct SelectConfig {
    pub ns: Vec<usize>,
    pub tune_fraction: f64,
    pub seed: u64,
    pub w_grid: Vec<f64>,
    pub weights: Weights,
}

impl Default for SelectConfig {
    fn default() -> Self {
        SelectConfig {
            ns: vec![4, 8, 16],
            tune_fraction: 0.2,
            seed: 0,
            w_grid: (0..=10).map(|i| i as f64 / 10.0).collect(),
            weights: Weights::default(),
        }
    }
}

/// Accuracy of one scorer on one split.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Accuracy {
    pub correct: usize,
    pub tasks: usize,
    pub accuracy: Option<f64>,
}

impl Accuracy {
    fn of(picks: &[bool]) -> Self {
        let correct = picks.iter().filter(|b| **b).count();
        Accuracy {
            correct,
            tasks: picks.len(),
            accuracy: (!picks.is_empty()).then(|| correct as f64 / picks.len() as f64),
        }
    }
}

/// Results for one N.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NResult {
    pub n: usize,
    pub tuning_tasks: usize,
    pub test_tasks: usize,
    /// Tasks skipped for having fewer than N candidates.
    pub skipped_tasks: usize,
    pub random: Accuracy,
    /// Expected accuracy of a uniform random pick (mean success rate of the subsets).
    pub random_expected: Option<f64>,
    pub if_scorer: Accuracy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prm: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prm_pooling: Option<Pooling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prm_if: Option<Accuracy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prm_if_pooling: Option<Pooling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prm_if_w: Option<f64>,
    /// Oracle: share of test tasks where at least one candidate succeeded.
    pub oracle: Accuracy,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelectionReport {
    pub tasks: usize,
    pub candidates: usize,
    pub seed: u64,
    pub tune_fraction: f64,
    /// Whether every candidate had PRM scores (PRM scorers run only then).
    pub prm_available: bool,
    pub results: Vec<NResult>,
}

/// Index of the best candidate by `score` (higher is better); ties go to the earliest.
fn argmax(scores: &[f64]) -> usize {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    best
}

fn prm_score(c: &Candidate, p: Pooling) -> f64 {
    c.prm
        .as_deref()
        .and_then(|xs| p.pool(xs))
        .unwrap_or(f64::NEG_INFINITY)
}

/// Pick with the IF scorer: lowest risk.
pub fn pick_if(cands: &[&Candidate], w: &Weights) -> usize {
    let scores: Vec<f64> = cands.iter().map(|c| -c.risk(w)).collect();
    argmax(&scores)
}

pub fn pick_prm(cands: &[&Candidate], p: Pooling) -> usize {
    let scores: Vec<f64> = cands.iter().map(|c| prm_score(c, p)).collect();
    argmax(&scores)
}

pub fn pick_prm_if(cands: &[&Candidate], p: Pooling, wt: f64, w: &Weights) -> usize {
    let scores: Vec<f64> = cands
        .iter()
        .map(|c| wt * prm_score(c, p) + (1.0 - wt) * (1.0 - c.risk(w).clamp(0.0, 1.0)))
        .collect();
    argmax(&scores)
}

/// Run best-of-N selection.
pub fn best_of_n(cands: &[Candidate], cfg: &SelectConfig) -> SelectionReport {
    let mut by_task: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in cands {
        by_task.entry(c.task.as_str()).or_default().push(c);
    }
    let mut tasks: Vec<&str> = by_task.keys().copied().collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    tasks.shuffle(&mut rng);
    let n_tune = ((tasks.len() as f64) * cfg.tune_fraction).round() as usize;
    let (tune, test) = tasks.split_at(n_tune.min(tasks.len()));
    let prm_available = !cands.is_empty()
        && cands
            .iter()
            .all(|c| c.prm.as_ref().is_some_and(|p| !p.is_empty()));
    let mut results = Vec::new();
    for &n in &cfg.ns {
        let mut rng =
            ChaCha8Rng::seed_from_u64(cfg.seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut subset = |keys: &[&str]| -> Vec<Vec<&Candidate>> {
            keys.iter()
                .filter_map(|k| by_task.get(k))
                .filter(|v| v.len() >= n)
                .map(|v| {
                    let mut v = v.clone();
                    v.shuffle(&mut rng);
                    v.truncate(n);
                    v
                })
                .collect()
        };
        let tune_sets = subset(tune);
        let test_sets = subset(test);
        let skipped = tune.len() + test.len() - tune_sets.len() - test_sets.len();
        let acc = |sets: &[Vec<&Candidate>], pick: &dyn Fn(&[&Candidate]) -> usize| -> Accuracy {
            Accuracy::of(&sets.iter().map(|s| s[pick(s)].success).collect::<Vec<_>>())
        };
        let w = &cfg.weights;
        let random_picks: Vec<bool> = test_sets
            .iter()
            .map(|s| s[rng.gen_range(0..s.len())].success)
            .collect();
        let expected: Vec<f64> = test_sets
            .iter()
            .map(|s| s.iter().filter(|c| c.success).count() as f64 / s.len() as f64)
            .collect();
        let mut r = NResult {
            n,
            tuning_tasks: tune_sets.len(),
            test_tasks: test_sets.len(),
            skipped_tasks: skipped,
            random: Accuracy::of(&random_picks),
            random_expected: mean(&expected),
            if_scorer: acc(&test_sets, &|s| pick_if(s, w)),
            prm: None,
            prm_pooling: None,
            prm_if: None,
            prm_if_pooling: None,
            prm_if_w: None,
            oracle: Accuracy::of(
                &test_sets
                    .iter()
                    .map(|s| s.iter().any(|c| c.success))
                    .collect::<Vec<_>>(),
            ),
        };
        if prm_available {
            let best_p = Pooling::ALL
                .iter()
                .copied()
                .max_by(|a, b| {
                    let ka = acc(&tune_sets, &|s| pick_prm(s, *a)).correct;
                    let kb = acc(&tune_sets, &|s| pick_prm(s, *b)).correct;
                    // max_by returns the last maximum; compare reversed index to prefer the first.
                    ka.cmp(&kb).then(
                        Pooling::ALL
                            .iter()
                            .position(|x| x == b)
                            .cmp(&Pooling::ALL.iter().position(|x| x == a)),
                    )
                })
                .unwrap_or(Pooling::Mean);
            r.prm = Some(acc(&test_sets, &|s| pick_prm(s, best_p)));
            r.prm_pooling = Some(best_p);
            let mut best: Option<(usize, Pooling, f64)> = None;
            for p in Pooling::ALL {
                for &wt in &cfg.w_grid {
                    let k = acc(&tune_sets, &|s| pick_prm_if(s, p, wt, w)).correct;
                    if best.is_none_or(|(bk, _, _)| k > bk) {
                        best = Some((k, p, wt));
                    }
                }
            }
            if let Some((_, p, wt)) = best {
                r.prm_if = Some(acc(&test_sets, &|s| pick_prm_if(s, p, wt, w)));
                r.prm_if_pooling = Some(p);
                r.prm_if_w = Some(wt);
            }
        }
        results.push(r);
    }
    SelectionReport {
        tasks: tasks.len(),
        candidates: cands.len(),
        seed: cfg.seed,
        tune_fraction: cfg.tune_fraction,
        prm_available,
        results,
    }
}

/// Weight sensitivity (appendix A): trials perturbing every weight independently by up to
/// `spread`; Spearman correlation of the candidates' risks (global ranking) with the
/// unperturbed ones, and the mean within-task Spearman.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sensitivity {
    pub trials: usize,
    pub spread: f64,
    pub seed: u64,
    pub candidates: usize,
    /// Trials where the correlation is defined (rankings not constant).
    pub defined: usize,
    pub global_mean: Option<f64>,
    pub global_min: Option<f64>,
    pub global_p05: Option<f64>,
    pub within_task_mean: Option<f64>,
}

pub fn weight_sensitivity(
    cands: &[Candidate],
    base: &Weights,
    trials: usize,
    spread: f64,
    seed: u64,
) -> Sensitivity {
    let orig: Vec<f64> = cands.iter().map(|c| c.risk(base)).collect();
    let mut by_task: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        by_task.entry(c.task.as_str()).or_default().push(i);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut global = Vec::new();
    let mut within = Vec::new();
    for _ in 0..trials {
        let w = base.perturbed(spread, &mut rng);
        let pert: Vec<f64> = cands.iter().map(|c| c.risk(&w)).collect();
        if let Some(r) = spearman(&orig, &pert) {
            global.push(r);
        }
        for idx in by_task.values() {
            let a: Vec<f64> = idx.iter().map(|&i| orig[i]).collect();
            let b: Vec<f64> = idx.iter().map(|&i| pert[i]).collect();
            if let Some(r) = spearman(&a, &b) {
                within.push(r);
            }
        }
    }
    Sensitivity {
        trials,
        spread,
        seed,
        candidates: cands.len(),
        defined: global.len(),
        global_mean: mean(&global),
        global_min: global.iter().copied().reduce(f64::min),
        global_p05: quantile(&global, 0.05),
        within_task_mean: mean(&within),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Absorption::*;
    use ErrorType::*;

    fn cand(
        task: usize,
        i: usize,
        success: bool,
        events: Vec<(ErrorType, Option<Absorption>)>,
        prm: Vec<f64>,
    ) -> Candidate {
        Candidate {
            id: format!("t{task}-c{i}"),
            task: format!("t{task}"),
            success,
            steps: 10,
            events,
            prm: Some(prm),
        }
    }

    #[test]
    fn pooling() {
        let xs = [0.5, 0.25, 1.0];
        assert_eq!(Pooling::Min.pool(&xs), Some(0.25));
        assert!((Pooling::Mean.pool(&xs).unwrap() - 0.5833333333333334).abs() < 1e-12);
        assert!((Pooling::GeometricMean.pool(&xs).unwrap() - 0.5).abs() < 1e-12); // (0.125)^(1/3)
        assert!((Pooling::Product.pool(&xs).unwrap() - 0.125).abs() < 1e-12);
        assert_eq!(Pooling::Last.pool(&xs), Some(1.0));
        assert_eq!(Pooling::Min.pool(&[]), None);
        assert_eq!(
            normalize_scores(&[-4.0, 0.0, 4.0, 9.0], -4.0, 4.0),
            vec![0.0, 0.5, 1.0, 1.0]
        );
    }

    #[test]
    fn product_is_the_product_and_geometric_mean_its_nth_root() {
        assert_eq!(Pooling::Product.pool(&[0.5, 0.5]), Some(0.25));
        assert_eq!(Pooling::GeometricMean.pool(&[0.5, 0.5]), Some(0.5));
        assert_eq!(Pooling::Product.pool(&[0.5, 0.0]), Some(0.0));
        // The product prefers the shorter of two traces with equal step scores.
        let short = [0.9, 0.9];
        let long = [0.9, 0.9, 0.9, 0.9];
        assert!(Pooling::Product.pool(&short) > Pooling::Product.pool(&long));
        assert_eq!(
            Pooling::GeometricMean
                .pool(&short)
                .map(|x| (x * 1e9).round()),
            Pooling::GeometricMean
                .pool(&long)
                .map(|x| (x * 1e9).round())
        );
        // Names: JSON snake_case (old reports' `geo_mean` still reads), reports kebab-case.
        assert_eq!(
            serde_json::to_string(&Pooling::Product).unwrap(),
            "\"product\""
        );
        assert_eq!(
            serde_json::to_string(&Pooling::GeometricMean).unwrap(),
            "\"geometric_mean\""
        );
        let old: Pooling = serde_json::from_str("\"geo_mean\"").unwrap();
        assert_eq!(old, Pooling::GeometricMean);
        assert_eq!(Pooling::GeometricMean.to_string(), "geometric-mean");
    }

    /// 10 tasks x 4 candidates: the successful candidate has no IFs; failures have a propagated
    /// hallucination. PRM scores are uninformative except through the last step.
    fn corpus() -> Vec<Candidate> {
        let mut v = Vec::new();
        for t in 0..10 {
            for i in 0..4 {
                let ok = i == (t % 4);
                let events = if ok {
                    vec![]
                } else {
                    vec![(Hallucination, Some(UnresolvedPropagation))]
                };
                let prm = vec![0.9, if ok { 0.2 } else { 0.8 }];
                v.push(cand(t, i, ok, events, prm));
            }
        }
        v
    }

    #[test]
    fn if_scorer_picks_clean_candidate() {
        let cfg = SelectConfig {
            ns: vec![4, 8],
            ..Default::default()
        };
        let r = best_of_n(&corpus(), &cfg);
        assert_eq!(r.tasks, 10);
        assert!(r.prm_available);
        let n4 = &r.results[0];
        assert_eq!((n4.tuning_tasks, n4.test_tasks), (2, 8));
        assert_eq!(n4.if_scorer.accuracy, Some(1.0));
        assert_eq!(n4.random_expected, Some(0.25));
        // min and last pooling favour failures; mean too (0.55 vs 0.85) -> PRM accuracy 0.
        assert_eq!(n4.prm.as_ref().unwrap().accuracy, Some(0.0));
        // PRM+IF tuned on the tuning split puts enough weight on IF.
        assert_eq!(n4.prm_if.as_ref().unwrap().accuracy, Some(1.0));
        assert!(n4.prm_if_w.unwrap() < 0.5);
        // N = 8: no task has 8 candidates.
        assert_eq!(r.results[1].test_tasks, 0);
        assert_eq!(r.results[1].skipped_tasks, 10);
        assert_eq!(r.results[1].if_scorer.accuracy, None);
        // Deterministic.
        let again = best_of_n(&corpus(), &cfg);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            serde_json::to_string(&again).unwrap()
        );
    }

    #[test]
    fn sensitivity_high_for_stable_rankings() {
        let mut v = corpus();
        // vary the risks: different types and absorption per candidate
        for (k, c) in v.iter_mut().enumerate() {
            c.events = match k % 5 {
                0 => vec![],
                1 => vec![(UnnecessaryAction, Some(TrivialIssue))],
                2 => vec![
                    (WrongAction, Some(SelfCorrected)),
                    (FailedToolUse, Some(TrivialIssue)),
                ],
                3 => vec![(Hallucination, Some(UnresolvedPropagation))],
                _ => vec![
                    (ReasoningError, Some(PeerRepair)),
                    (Hallucination, Some(UnresolvedPropagation)),
                ],
            };
        }
        let s = weight_sensitivity(&v, &Weights::default(), 200, 0.1, 1);
        assert_eq!(s.defined, 200);
        assert!(s.global_min.unwrap() > 0.9, "{s:?}");
        assert!(s.global_mean.unwrap() <= 1.0);
        // With 100% perturbation, rankings move more.
        let wild = weight_sensitivity(&v, &Weights::default(), 200, 0.99, 1);
        assert!(wild.global_mean.unwrap() < s.global_mean.unwrap());
    }
}
