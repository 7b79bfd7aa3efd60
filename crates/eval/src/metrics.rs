//! Failure-localization metrics (Who&When, Aegis-Bench), exact by default.
//!
//! - **Exact** (DESIGN.md): agent-level accuracy compares normalized agent names (trimmed,
//!   ASCII case-insensitive) for equality; step-level accuracy compares integers.
//! - **Compat substring** (`--compat-substring`): the Who&When reference scorer
//!   (`evaluate.py`): `actual_agent in predicted_agent` and `actual_step in predicted_step` on
//!   strings, gold contained in the prediction (so a predicted step "12" matches gold "1", while
//!   "1" does not match gold "12"); case-sensitive; unparsed predictions are wrong and stay in
//!   the denominator.
//! - **Aegis**: agent-level = the predicted agent is one of the labelled faulty agents;
//!   pair-level = (agent, error mode) is one of the labelled pairs.
//!
//! Every accuracy carries k/n and a 95% percentile bootstrap interval (seeded).

use crate::stats::{bootstrap_proportion_ci, quantile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How predictions are matched against labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scorer {
    #[default]
    Exact,
    CompatSubstring,
}

impl Scorer {
    /// The Who&When reference scorer when `compat_substring` (`--compat-substring`), else exact.
    pub fn from_compat(compat_substring: bool) -> Scorer {
        if compat_substring {
            Scorer::CompatSubstring
        } else {
            Scorer::Exact
        }
    }
}

/// The labels of one case: the one definition in `maslens-trace` ([`maslens_trace::Trace::gold`]).
pub use maslens_trace::Gold;

/// One prediction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub agent: Option<String>,
    pub step: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    /// The method abstained or its answer could not be parsed (no location).
    #[serde(default)]
    pub abstained: bool,
    /// Structured-output failures (abstentions after a repair) during this case.
    #[serde(default)]
    pub parse_failures: u64,
}

/// Usage of one case: the one aggregate usage type of `maslens-llm` (tokens, calls, repairs,
/// abstentions, seconds, cost when the price is known).
pub type CaseUsage = maslens_llm::Totals;

/// One scored case.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub id: String,
    /// Subset, e.g. `Algorithm-Generated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    pub gold: Gold,
    pub pred: Prediction,
    /// Length of the trace in tokens (for the length quartiles).
    pub trace_tokens: usize,
    #[serde(default)]
    pub usage: CaseUsage,
}

/// An accuracy with its count and 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub value: f64,
    pub k: usize,
    pub n: usize,
    pub ci95: [f64; 2],
}

/// Bootstrap resamples for accuracy intervals.
pub const RESAMPLES: usize = 2000;

/// How accuracy intervals are bootstrapped: resamples and seed. A bare seed means
/// [`RESAMPLES`] resamples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boot {
    pub seed: u64,
    pub resamples: usize,
}

impl From<u64> for Boot {
    fn from(seed: u64) -> Boot {
        Boot {
            seed,
            resamples: RESAMPLES,
        }
    }
}

impl Accuracy {
    /// Accuracy of boolean outcomes with a seeded 95% percentile bootstrap interval.
    pub fn of(outcomes: &[bool], seed: u64) -> Accuracy {
        Self::with_resamples(outcomes, RESAMPLES, seed)
    }

    /// [`Accuracy::of`] with a chosen number of bootstrap resamples.
    pub fn with_resamples(outcomes: &[bool], resamples: usize, seed: u64) -> Accuracy {
        let n = outcomes.len();
        let k = outcomes.iter().filter(|&&b| b).count();
        if n == 0 {
            return Accuracy {
                value: 0.0,
                k: 0,
                n: 0,
                ci95: [0.0, 0.0],
            };
        }
        let value = k as f64 / n as f64;
        let ci = bootstrap_proportion_ci(outcomes, resamples, 0.95, seed)
            .map(|i| [i.lo, i.hi])
            .unwrap_or([value, value]);
        Accuracy {
            value,
            k,
            n,
            ci95: ci,
        }
    }
    /// `k/n (value%, 95% CI lo-hi)`.
    pub fn display(&self) -> String {
        format!(
            "{}/{} ({:.1}%, 95% CI {:.1}-{:.1})",
            self.k,
            self.n,
            100.0 * self.value,
            100.0 * self.ci95[0],
            100.0 * self.ci95[1]
        )
    }
}

/// Normalized agent name for exact comparison.
pub fn norm_agent(s: &str) -> String {
    s.trim().to_ascii_lowercase()
}

/// Who&When reference step test: gold (as a string) contained in the prediction (as a string).
pub fn substring_match(gold: &str, pred: &str) -> bool {
    pred.contains(gold)
}

/// Agent-level correctness of a case (`None` when the case has no agent label).
pub fn agent_correct(case: &Case, scorer: Scorer) -> Option<bool> {
    let pred = case.pred.agent.as_deref();
    if !case.gold.faulty.is_empty() {
        return Some(pred.is_some_and(|p| {
            case.gold
                .faulty
                .iter()
                .any(|(a, _)| norm_agent(a) == norm_agent(p))
        }));
    }
    let gold = case.gold.agent.as_deref()?;
    Some(match (scorer, pred) {
        (_, None) => false,
        (Scorer::Exact, Some(p)) => norm_agent(gold) == norm_agent(p),
        (Scorer::CompatSubstring, Some(p)) => substring_match(gold, p),
    })
}

/// Step-level correctness (`None` when the case has no step label).
pub fn step_correct(case: &Case, scorer: Scorer) -> Option<bool> {
    let gold = case.gold.step?;
    Some(match (scorer, case.pred.step) {
        (_, None) => false,
        (Scorer::Exact, Some(p)) => p == gold,
        (Scorer::CompatSubstring, Some(p)) => substring_match(&gold.to_string(), &p.to_string()),
    })
}

/// Aegis pair-level correctness (`None` without faulty-agent labels).
pub fn pair_correct(case: &Case) -> Option<bool> {
    if case.gold.faulty.is_empty() {
        return None;
    }
    let (Some(a), Some(m)) = (case.pred.agent.as_deref(), case.pred.error_mode.as_deref()) else {
        return Some(false);
    };
    Some(case.gold.faulty.iter().any(|(ga, gm)| {
        norm_agent(ga) == norm_agent(a) && gm.as_deref().is_some_and(|g| g.trim() == m.trim())
    }))
}

/// Accuracy over the cases that have the label.
pub fn accuracy(
    cases: &[Case],
    f: impl Fn(&Case) -> Option<bool>,
    boot: impl Into<Boot>,
) -> Option<Accuracy> {
    let boot = boot.into();
    let outcomes: Vec<bool> = cases.iter().filter_map(f).collect();
    (!outcomes.is_empty()).then(|| Accuracy::with_resamples(&outcomes, boot.resamples, boot.seed))
}

/// Agent and step both right (`None` without a decisive step label).
pub fn joint_correct(case: &Case, scorer: Scorer) -> Option<bool> {
    let step = step_correct(case, scorer)?;
    Some(step && agent_correct(case, scorer) == Some(true))
}

/// Step accuracy within +-k steps, for each k (unparsed = wrong).
pub fn tolerance_curve(
    cases: &[Case],
    ks: &[usize],
    boot: impl Into<Boot>,
) -> BTreeMap<usize, Accuracy> {
    let boot = boot.into();
    ks.iter()
        .filter_map(|&k| {
            let acc = accuracy(
                cases,
                |c| {
                    c.gold
                        .step
                        .map(|g| c.pred.step.is_some_and(|p| p.abs_diff(g) <= k))
                },
                boot,
            )?;
            Some((k, acc))
        })
        .collect()
}

/// Deviation bins of |predicted - gold| step.
pub const DEVIATION_BINS: [(&str, usize, usize); 7] = [
    ("0", 0, 0),
    ("1-2", 1, 2),
    ("3-5", 3, 5),
    ("6-10", 6, 10),
    ("11-20", 11, 20),
    ("21-30", 21, 30),
    (">30", 31, usize::MAX),
];

/// Histogram of step deviations (bins above plus `none` for unparsed), in bin order.
pub fn deviation_histogram(cases: &[Case]) -> Vec<(String, usize)> {
    deviation_histogram_in(cases, &DEVIATION_BINS)
}

/// The step-deviation intervals of AgentLocate's figure 2 (appendix H), as far as the text
/// names them: the figure itself is lost in the extraction. `0-2`, `6-7` and `>30` are named in
/// appendix H; `3-5` completes its "0-5 deviation range"; `8-30` is maslens's filler for the
/// steps in between (the figure's own intervals there are unknown).
pub const DEVIATION_BINS_PAPER: [(&str, usize, usize); 5] = [
    ("0-2", 0, 2),
    ("3-5", 3, 5),
    ("6-7", 6, 7),
    ("8-30", 8, 30),
    (">30", 31, usize::MAX),
];

/// Histogram of step deviations over `bins` (plus `none` for unparsed), in bin order.
pub fn deviation_histogram_in(
    cases: &[Case],
    bins: &[(&str, usize, usize)],
) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> =
        bins.iter().map(|(n, _, _)| (n.to_string(), 0)).collect();
    counts.push(("none".into(), 0));
    for c in cases {
        let Some(g) = c.gold.step else { continue };
        match c.pred.step {
            None => counts[bins.len()].1 += 1,
            Some(p) => {
                let d = p.abs_diff(g);
                if let Some(i) = bins.iter().position(|(_, lo, hi)| d >= *lo && d <= *hi) {
                    counts[i].1 += 1;
                }
            }
        }
    }
    counts
}

/// How concentrated the predicted steps are, next to the gold steps. A method that names the same
/// step in most cases (a model's position bias, or a protocol that degenerates, e.g. a binary
/// search whose every answer is "first half") shows here even when its accuracy looks like a
/// baseline's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSpread {
    /// Cases with a predicted step.
    pub predicted: usize,
    /// Distinct predicted steps.
    pub distinct: usize,
    /// The most often predicted step (smallest on ties) and how many cases name it.
    pub top_step: usize,
    pub top_count: usize,
    /// The same for the gold steps of all cases with a gold step.
    pub gold_cases: usize,
    pub gold_distinct: usize,
    pub gold_top_step: usize,
    pub gold_top_count: usize,
}

/// `(distinct, top value, its count)` of a list of steps; `None` when empty.
fn spread(steps: impl Iterator<Item = usize>) -> Option<(usize, usize, usize)> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for s in steps {
        *counts.entry(s).or_default() += 1;
    }
    // Ascending steps, so `max_by_key` with a reversed step keeps the smallest step on ties.
    let (&top, &n) = counts
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))?;
    Some((counts.len(), top, n))
}

/// [`StepSpread`] of the cases; `None` when no case has both a gold and a predicted step.
pub fn step_spread(cases: &[Case]) -> Option<StepSpread> {
    let (distinct, top_step, top_count) = spread(
        cases
            .iter()
            .filter(|c| c.gold.step.is_some())
            .filter_map(|c| c.pred.step),
    )?;
    let (gold_distinct, gold_top_step, gold_top_count) =
        spread(cases.iter().filter_map(|c| c.gold.step))?;
    Some(StepSpread {
        predicted: cases
            .iter()
            .filter(|c| c.gold.step.is_some() && c.pred.step.is_some())
            .count(),
        distinct,
        top_step,
        top_count,
        gold_cases: cases.iter().filter(|c| c.gold.step.is_some()).count(),
        gold_distinct,
        gold_top_step,
        gold_top_count,
    })
}

/// Accuracy within one trace-length quartile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthBucket {
    /// e.g. `Q1`.
    pub name: String,
    /// Token range `[min, max]` of the cases in the bucket.
    pub tokens: [usize; 2],
    pub agent_accuracy: Option<Accuracy>,
    pub step_accuracy: Option<Accuracy>,
}

/// Accuracy by trace token-length quartile (boundaries: 25/50/75th percentiles of the cases'
/// lengths; a case on a boundary goes to the lower bucket).
pub fn by_length_quartile(
    cases: &[Case],
    scorer: Scorer,
    boot: impl Into<Boot>,
) -> Vec<LengthBucket> {
    let boot = boot.into();
    if cases.is_empty() {
        return Vec::new();
    }
    let lens: Vec<f64> = cases.iter().map(|c| c.trace_tokens as f64).collect();
    let q: Vec<f64> = [0.25, 0.5, 0.75]
        .iter()
        .map(|&p| quantile(&lens, p).unwrap_or(0.0))
        .collect();
    let bucket_of = |t: usize| q.iter().position(|&b| (t as f64) <= b).unwrap_or(3);
    (0..4)
        .filter_map(|b| {
            let sub: Vec<Case> = cases
                .iter()
                .filter(|c| bucket_of(c.trace_tokens) == b)
                .cloned()
                .collect();
            if sub.is_empty() {
                return None;
            }
            let min = sub.iter().map(|c| c.trace_tokens).min().unwrap_or(0);
            let max = sub.iter().map(|c| c.trace_tokens).max().unwrap_or(0);
            Some(LengthBucket {
                name: format!("Q{}", b + 1),
                tokens: [min, max],
                agent_accuracy: accuracy(&sub, |c| agent_correct(c, scorer), boot),
                step_accuracy: accuracy(&sub, |c| step_correct(c, scorer), boot),
            })
        })
        .collect()
}

/// A named token range `(name, lo, hi)`: a case with `lo <= tokens < hi`.
pub type TokenRange = (&'static str, usize, usize);

/// AgentLocate's fixed token-length ranges (appendix J, tables 4-5), one set per Who&When
/// subset: `(subset, ranges)`.
pub const LENGTH_RANGES_PAPER: [(&str, [TokenRange; 4]); 2] = [
    (
        "Algorithm-Generated",
        [
            ("<2000", 0, 2000),
            ("2000-2500", 2000, 2500),
            ("2500-2900", 2500, 2900),
            (">=2900", 2900, usize::MAX),
        ],
    ),
    (
        "Hand-Crafted",
        [
            ("<3000", 0, 3000),
            ("3000-5200", 3000, 5200),
            ("5200-12000", 5200, 12000),
            (">=12000", 12000, usize::MAX),
        ],
    ),
];

/// Accuracy in the paper's token-length ranges of one Who&When subset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaperLengthBuckets {
    /// `Algorithm-Generated` or `Hand-Crafted`: whose ranges, and which cases.
    pub subset: String,
    pub cases: usize,
    /// The non-empty ranges, in order; `tokens` is the range of the cases in it.
    pub buckets: Vec<LengthBucket>,
}

fn subset_key(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Accuracy by the paper's fixed token-length ranges ([`LENGTH_RANGES_PAPER`]), for the cases of
/// each Who&When subset (matched case- and punctuation-insensitively). When no case names a
/// subset, both sets of ranges are applied to all cases; subsets without cases are left out.
pub fn by_length_paper(
    cases: &[Case],
    scorer: Scorer,
    boot: impl Into<Boot>,
) -> Vec<PaperLengthBuckets> {
    let boot = boot.into();
    let any_subset = cases.iter().any(|c| c.subset.is_some());
    LENGTH_RANGES_PAPER
        .iter()
        .filter_map(|(subset, ranges)| {
            let key = subset_key(subset);
            let sub: Vec<&Case> = cases
                .iter()
                .filter(|c| {
                    !any_subset || c.subset.as_deref().is_some_and(|s| subset_key(s) == key)
                })
                .collect();
            if sub.is_empty() {
                return None;
            }
            let buckets = ranges
                .iter()
                .filter_map(|(name, lo, hi)| {
                    let b: Vec<Case> = sub
                        .iter()
                        .filter(|c| c.trace_tokens >= *lo && c.trace_tokens < *hi)
                        .map(|c| (*c).clone())
                        .collect();
                    let min = b.iter().map(|c| c.trace_tokens).min()?;
                    let max = b.iter().map(|c| c.trace_tokens).max()?;
                    Some(LengthBucket {
                        name: name.to_string(),
                        tokens: [min, max],
                        agent_accuracy: accuracy(&b, |c| agent_correct(c, scorer), boot),
                        step_accuracy: accuracy(&b, |c| step_correct(c, scorer), boot),
                    })
                })
                .collect();
            Some(PaperLengthBuckets {
                subset: subset.to_string(),
                cases: sub.len(),
                buckets,
            })
        })
        .collect()
}

/// How often an agent was blamed wrongly, and how often it was the true culprit but missed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mislocalized {
    pub agent: String,
    /// Wrong predictions naming this agent.
    pub wrongly_blamed: usize,
    /// Cases where this agent was the gold agent and the prediction named another (or none).
    pub missed: usize,
}

/// Agents most often mislocalized (wrongly blamed), top `n`, ties by name.
pub fn mislocalized_agents(cases: &[Case], scorer: Scorer, n: usize) -> Vec<Mislocalized> {
    let mut map: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for c in cases {
        if agent_correct(c, scorer) != Some(false) {
            continue;
        }
        if let Some(p) = &c.pred.agent {
            map.entry(p.clone()).or_default().0 += 1;
        }
        if let Some(g) = &c.gold.agent {
            map.entry(g.clone()).or_default().1 += 1;
        }
    }
    let mut v: Vec<Mislocalized> = map
        .into_iter()
        .map(|(agent, (wrongly_blamed, missed))| Mislocalized {
            agent,
            wrongly_blamed,
            missed,
        })
        .collect();
    v.sort_by(|a, b| {
        b.wrongly_blamed
            .cmp(&a.wrongly_blamed)
            .then(b.missed.cmp(&a.missed))
            .then(a.agent.cmp(&b.agent))
    });
    v.truncate(n);
    v
}

/// Deterministic train/test split: cases are grouped by subset, each group put in its seeded
/// order ([`maslens_trace::seeded_order`]: by the seeded hash of the id, independent of input
/// order); the first `round(frac * len)` of each group go to the refinement (train) side.
/// Returns (train ids, test ids), each sorted.
pub fn split_ids(
    cases: &[(String, Option<String>)],
    frac: f64,
    seed: u64,
) -> (Vec<String>, Vec<String>) {
    let mut groups: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for (id, subset) in cases {
        groups.entry(subset.clone()).or_default().push(id.clone());
    }
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (_, mut ids) in groups {
        ids.sort();
        ids.dedup();
        maslens_trace::seeded_order(&mut ids, seed);
        let k = ((frac.clamp(0.0, 1.0)) * ids.len() as f64).round() as usize;
        train.extend(ids[..k].iter().cloned());
        test.extend(ids[k..].iter().cloned());
    }
    train.sort();
    test.sort();
    (train, test)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(gold: (&str, usize), pred: Option<(&str, usize)>, tokens: usize) -> Case {
        Case {
            id: format!("c{tokens}"),
            subset: None,
            gold: Gold {
                agent: Some(gold.0.into()),
                step: Some(gold.1),
                faulty: vec![],
            },
            pred: Prediction {
                agent: pred.map(|p| p.0.to_string()),
                step: pred.map(|p| p.1),
                abstained: pred.is_none(),
                ..Default::default()
            },
            trace_tokens: tokens,
            usage: CaseUsage::default(),
        }
    }

    #[test]
    fn step_spread_counts_the_most_common_steps() {
        // Predictions 0, 0, 2, 2 and one abstention; gold 1, 3, 3, 5, 2.
        let cases = vec![
            case(("A", 1), Some(("A", 2)), 1),
            case(("A", 3), Some(("A", 0)), 2),
            case(("A", 3), Some(("A", 2)), 3),
            case(("A", 5), Some(("A", 0)), 4),
            case(("A", 2), None, 5),
        ];
        let sp = step_spread(&cases).unwrap();
        // 0 and 2 tie at 2 cases each: the smaller step is reported.
        assert_eq!(
            (sp.predicted, sp.distinct, sp.top_step, sp.top_count),
            (4, 2, 0, 2)
        );
        assert_eq!(
            (
                sp.gold_cases,
                sp.gold_distinct,
                sp.gold_top_step,
                sp.gold_top_count
            ),
            (5, 4, 3, 2)
        );
        // Nothing predicted: no spread.
        assert_eq!(step_spread(&cases[4..]), None);
    }

    #[test]
    fn exact_versus_substring_on_step_1_and_12() {
        // Gold step 1, predicted 12: substring scorer counts it ("1" in "12"), exact does not.
        let c = case(("WebSurfer", 1), Some(("WebSurfer", 12)), 10);
        assert_eq!(step_correct(&c, Scorer::Exact), Some(false));
        assert_eq!(step_correct(&c, Scorer::CompatSubstring), Some(true));
        // Gold 12, predicted 1: wrong under both (gold must be inside the prediction).
        let c = case(("WebSurfer", 12), Some(("WebSurfer", 1)), 10);
        assert_eq!(step_correct(&c, Scorer::Exact), Some(false));
        assert_eq!(step_correct(&c, Scorer::CompatSubstring), Some(false));
        // Agent: "Orchestrator" inside "Orchestrator (thought)" counts for substring only;
        // case differs: exact (normalized) counts, substring (case-sensitive) does not.
        let mut c = case(("Orchestrator", 3), Some(("Orchestrator (thought)", 3)), 10);
        assert_eq!(agent_correct(&c, Scorer::Exact), Some(false));
        assert_eq!(agent_correct(&c, Scorer::CompatSubstring), Some(true));
        c.pred.agent = Some("orchestrator".into());
        assert_eq!(agent_correct(&c, Scorer::Exact), Some(true));
        assert_eq!(agent_correct(&c, Scorer::CompatSubstring), Some(false));
        // Unparsed = wrong, still counted in n.
        let c = case(("A", 1), None, 10);
        assert_eq!(agent_correct(&c, Scorer::CompatSubstring), Some(false));
        assert_eq!(step_correct(&c, Scorer::Exact), Some(false));
    }

    #[test]
    fn hand_computed_accuracies_tolerance_and_histogram() {
        let cases = vec![
            case(("A", 1), Some(("A", 1)), 100),  // agent ok, step ok
            case(("A", 2), Some(("A", 12)), 200), // agent ok, step off by 10 (substring: "2" in "12")
            case(("B", 5), Some(("A", 3)), 300),  // both wrong, off by 2
            case(("B", 40), None, 400),           // unparsed
        ];
        let a = accuracy(&cases, |c| agent_correct(c, Scorer::Exact), 1).unwrap();
        assert_eq!((a.k, a.n), (2, 4));
        assert_eq!(a.value, 0.5);
        assert!(a.ci95[0] <= 0.5 && a.ci95[1] >= 0.5 && a.ci95[0] >= 0.0 && a.ci95[1] <= 1.0);
        let s = accuracy(&cases, |c| step_correct(c, Scorer::Exact), 1).unwrap();
        assert_eq!((s.k, s.n), (1, 4));
        let s = accuracy(&cases, |c| step_correct(c, Scorer::CompatSubstring), 1).unwrap();
        assert_eq!((s.k, s.n), (2, 4));
        let tol = tolerance_curve(&cases, &[0, 2, 10], 1);
        assert_eq!((tol[&0].k, tol[&2].k, tol[&10].k), (1, 2, 3));
        assert!(tol.values().all(|a| a.n == 4));
        let h: BTreeMap<String, usize> = deviation_histogram(&cases).into_iter().collect();
        assert_eq!(
            (h["0"], h["1-2"], h["6-10"], h["none"], h["3-5"]),
            (1, 1, 1, 1, 0)
        );
        let mis = mislocalized_agents(&cases, Scorer::Exact, 5);
        assert_eq!(
            mis[0],
            Mislocalized {
                agent: "A".into(),
                wrongly_blamed: 1,
                missed: 0
            }
        );
        assert!(mis.contains(&Mislocalized {
            agent: "B".into(),
            wrongly_blamed: 0,
            missed: 2
        }));
        let q = by_length_quartile(&cases, Scorer::Exact, 1);
        assert_eq!(q.len(), 4);
        assert_eq!(q[0].tokens, [100, 100]);
        assert_eq!(q[0].step_accuracy.unwrap().k, 1);
        assert_eq!(q[3].agent_accuracy.unwrap().k, 0);
    }

    #[test]
    fn paper_deviation_intervals_and_length_ranges() {
        // Deviations 0, 2, 3, 7, 8, 31 and one unparsed.
        let cases = vec![
            case(("A", 4), Some(("A", 4)), 1999),
            case(("A", 4), Some(("A", 6)), 2000),
            case(("A", 4), Some(("A", 7)), 2499),
            case(("A", 10), Some(("A", 3)), 2500),
            case(("A", 10), Some(("A", 2)), 2900),
            case(("A", 40), Some(("A", 9)), 12000),
            case(("A", 40), None, 5200),
        ];
        let h = deviation_histogram_in(&cases, &DEVIATION_BINS_PAPER);
        let names: Vec<&str> = h.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["0-2", "3-5", "6-7", "8-30", ">30", "none"]);
        let counts: Vec<usize> = h.iter().map(|(_, c)| *c).collect();
        assert_eq!(counts, [2, 1, 1, 1, 1, 1]);
        // The quartile histogram is unchanged.
        assert_eq!(deviation_histogram(&cases)[0], ("0".to_string(), 1));

        // No case names a subset: both sets of ranges over all cases.
        let p = by_length_paper(&cases, Scorer::Exact, 1);
        assert_eq!(p.len(), 2);
        let (ag, hc) = (&p[0], &p[1]);
        assert_eq!((ag.subset.as_str(), ag.cases), ("Algorithm-Generated", 7));
        let rows: Vec<(&str, [usize; 2], usize)> = ag
            .buckets
            .iter()
            .map(|b| (b.name.as_str(), b.tokens, b.agent_accuracy.unwrap().n))
            .collect();
        assert_eq!(
            rows,
            [
                ("<2000", [1999, 1999], 1),
                ("2000-2500", [2000, 2499], 2),
                ("2500-2900", [2500, 2500], 1),
                (">=2900", [2900, 12000], 3),
            ]
        );
        let rows: Vec<(&str, usize)> = hc
            .buckets
            .iter()
            .map(|b| (b.name.as_str(), b.agent_accuracy.unwrap().n))
            .collect();
        assert_eq!(rows, [("<3000", 5), ("5200-12000", 1), (">=12000", 1)]);
        assert_eq!(hc.buckets[0].step_accuracy.unwrap().k, 1);

        // With subsets, each subset gets its own ranges; other subsets none.
        let mut cases = cases;
        for (i, c) in cases.iter_mut().enumerate() {
            c.subset = Some(if i < 3 { "Hand-Crafted" } else { "aegis" }.into());
        }
        let p = by_length_paper(&cases, Scorer::Exact, 1);
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].subset.as_str(), p[0].cases), ("Hand-Crafted", 3));
        assert_eq!(p[0].buckets.len(), 1);
        assert_eq!(p[0].buckets[0].name, "<3000");
    }

    #[test]
    fn aegis_agent_and_pair_level() {
        let mut c = Case {
            id: "x".into(),
            gold: Gold {
                agent: None,
                step: None,
                faulty: vec![
                    ("assistant1".into(), Some("FM-2.2".into())),
                    ("Critic".into(), Some("FM-1.3".into())),
                ],
            },
            pred: Prediction {
                agent: Some("Assistant1".into()),
                error_mode: Some("FM-1.3".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(agent_correct(&c, Scorer::Exact), Some(true));
        assert_eq!(
            pair_correct(&c),
            Some(false),
            "mode belongs to another agent"
        );
        c.pred.error_mode = Some("FM-2.2".into());
        assert_eq!(pair_correct(&c), Some(true));
        assert_eq!(step_correct(&c, Scorer::Exact), None);
    }

    #[test]
    fn accuracy_interval_is_seeded_and_degenerate_cases() {
        let o = [true, false, true, true, false, false, true];
        assert_eq!(Accuracy::of(&o, 3), Accuracy::of(&o, 3));
        let all = Accuracy::of(&[true; 5], 3);
        assert_eq!(all.ci95, [1.0, 1.0]);
        assert_eq!(Accuracy::of(&[], 3).n, 0);
        assert_eq!(all.display(), "5/5 (100.0%, 95% CI 100.0-100.0)");
    }

    #[test]
    fn split_is_deterministic_disjoint_and_per_subset() {
        let ids: Vec<(String, Option<String>)> = (0..10)
            .map(|i| (format!("AG/{i}"), Some("AG".to_string())))
            .chain((0..5).map(|i| (format!("HC/{i}"), Some("HC".to_string()))))
            .collect();
        let (tr, te) = split_ids(&ids, 0.6, 42);
        assert_eq!((tr.len(), te.len()), (6 + 3, 4 + 2));
        assert!(tr.iter().all(|t| !te.contains(t)));
        assert_eq!(split_ids(&ids, 0.6, 42), (tr.clone(), te));
        assert_ne!(split_ids(&ids, 0.6, 43).0, tr);
    }
}
