//! The failure-localization report (`maslens eval locate`): every metric of one method on one
//! case set, next to trivial baselines on the same cases. Serialized as JSON; rendered as
//! Markdown ([`crate::markdown`]) and self-contained HTML ([`crate::html`]).
//!
//! JSON keys guaranteed: `cases` (n), `agent_accuracy` and `step_accuracy` as
//! `{value, k, n, ci95: [lo, hi]}` (null when the dataset has no such label), `tolerance`
//! `{k: accuracy}`, `usage` `{prompt_tokens, cached_tokens, completion_tokens, calls, seconds}`,
//! and `baselines` `{name: {agent_accuracy, step_accuracy}}`.

use crate::metrics::{
    accuracy, agent_correct, by_length_paper, by_length_quartile, deviation_histogram,
    deviation_histogram_in, joint_correct, mislocalized_agents, pair_correct, step_correct,
    step_spread, tolerance_curve, Accuracy, Boot, Case, CaseUsage, LengthBucket, Mislocalized,
    PaperLengthBuckets, Scorer, StepSpread, DEVIATION_BINS_PAPER,
};
use crate::run::Provenance;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Scores of a baseline on the same cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineScores {
    pub agent_accuracy: Option<Accuracy>,
    pub step_accuracy: Option<Accuracy>,
}

/// Token, call and time totals plus per-case means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    pub calls: u64,
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Means per case.
    pub per_case: PerCase,
    /// Share of prompt tokens served from a prefix / prompt cache.
    pub prefix_reuse: f64,
}

/// Per-case means.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerCase {
    pub prompt_tokens: f64,
    pub cached_tokens: f64,
    pub completion_tokens: f64,
    pub calls: f64,
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Accuracy on one subset (e.g. Algorithm-Generated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubsetReport {
    pub cases: usize,
    pub agent_accuracy: Option<Accuracy>,
    pub step_accuracy: Option<Accuracy>,
    /// Agent and step both right; absent in reports before format 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_accuracy: Option<Accuracy>,
    /// Step accuracy within +-k, as the report's `tolerance`; absent in reports before format 5.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tolerance: BTreeMap<String, Accuracy>,
    pub baselines: BTreeMap<String, BaselineScores>,
}

/// Step accuracy within +-k for each k, keyed by k as text (the reports' `tolerance`).
fn tolerances(cases: &[Case], ks: &[usize], boot: Boot) -> BTreeMap<String, Accuracy> {
    (tolerance_curve(cases, ks, boot).into_iter())
        .map(|(k, a)| (k.to_string(), a))
        .collect()
}

/// One bin of the deviation histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bin {
    pub bin: String,
    pub count: usize,
}

/// The train/test split used, when any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitInfo {
    pub fraction: f64,
    pub seed: u64,
    pub train: usize,
    pub test: usize,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateReport {
    /// Report format ([`crate::run::REPORT_FORMAT_VERSION`]); 1 for reports written before it existed.
    #[serde(default = "format_v1")]
    pub format_version: u32,
    pub title: String,
    /// Method label, e.g. `locate/all-at-once+3eval` or `predictions:FILE`.
    pub method: String,
    pub model: Option<String>,
    pub dataset: String,
    pub scorer: Scorer,
    pub seed: u64,
    pub cases: usize,
    pub agent_accuracy: Option<Accuracy>,
    pub step_accuracy: Option<Accuracy>,
    /// Aegis: agent + error mode.
    pub pair_accuracy: Option<Accuracy>,
    /// Agent and step both right (cases with a decisive step label); absent in reports before
    /// format 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_accuracy: Option<Accuracy>,
    pub tolerance: BTreeMap<String, Accuracy>,
    pub deviation_histogram: Vec<Bin>,
    /// The same deviations in the intervals of AgentLocate's figure 2
    /// ([`crate::metrics::DEVIATION_BINS_PAPER`]); absent in reports before format 4.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deviation_histogram_paper: Vec<Bin>,
    /// How concentrated the predicted steps are next to the gold ones (position bias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_spread: Option<StepSpread>,
    pub by_length: Vec<LengthBucket>,
    /// Accuracy in AgentLocate's fixed token-length ranges (appendix J), per Who&When subset
    /// ([`crate::metrics::by_length_paper`]); absent in reports before format 4 and when the
    /// cases name subsets but none is a Who&When one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_length_paper: Vec<PaperLengthBuckets>,
    pub mislocalized: Vec<Mislocalized>,
    /// Cases without a location (abstained or unparsed).
    pub abstentions: usize,
    /// Structured-output failures (after one repair) over all calls.
    pub parse_failures: u64,
    pub usage: UsageSummary,
    pub baselines: BTreeMap<String, BaselineScores>,
    pub subsets: BTreeMap<String, SubsetReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitInfo>,
    /// Cases whose calls failed (id and error); `eval locate` counts them as unparsed (wrong).
    pub errors: Vec<(String, String)>,
    /// Why the run stopped before the last case (a budget), when it did; the report covers the
    /// cases run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// Set when the method's model was trained on some of these cases (the built-in prior on
    /// the bundled Who&When traces, recognised by content): the figures are in-sample, a fit to
    /// the training data, not an estimate for new traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_sample: Option<String>,
    /// The `random` baseline's expected agent-level accuracy on these cases (the share of acting
    /// steps taken by a labelled agent, averaged over cases): what its score means. Aegis labels
    /// several faulty agents per case, often every acting one, so chance there can be 100%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_chance: Option<f64>,
    /// The localizer's typed configuration, serialized (protocol, variant, flags).
    pub config: serde_json::Value,
    /// maslens version, git revision, dataset hashes, prompt ids with content hashes.
    #[serde(default)]
    pub provenance: Provenance,
    pub per_case: Vec<Case>,
}

fn format_v1() -> u32 {
    1
}

/// Options of [`build`].
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub title: String,
    pub method: String,
    pub model: Option<String>,
    pub dataset: String,
    pub scorer: Scorer,
    pub seed: u64,
    pub tolerances: Vec<usize>,
    pub top_mislocalized: usize,
    /// Bootstrap resamples of every interval.
    pub resamples: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            title: "Failure localization".into(),
            method: String::new(),
            model: None,
            dataset: String::new(),
            scorer: Scorer::Exact,
            seed: 0,
            tolerances: vec![0, 1, 2, 3, 5, 10],
            top_mislocalized: 10,
            resamples: crate::metrics::RESAMPLES,
        }
    }
}

fn usage_summary(cases: &[Case]) -> UsageSummary {
    let mut total = CaseUsage::default();
    for c in cases {
        total += c.usage;
    }
    let n = cases.len().max(1) as f64;
    UsageSummary {
        prompt_tokens: total.prompt_tokens,
        cached_tokens: total.cached_tokens,
        completion_tokens: total.completion_tokens,
        calls: total.calls,
        seconds: total.seconds,
        cost_usd: total.cost_usd,
        per_case: PerCase {
            prompt_tokens: total.prompt_tokens as f64 / n,
            cached_tokens: total.cached_tokens as f64 / n,
            completion_tokens: total.completion_tokens as f64 / n,
            calls: total.calls as f64 / n,
            seconds: total.seconds / n,
            cost_usd: total.cost_usd.map(|c| c / n),
        },
        prefix_reuse: if total.prompt_tokens > 0 {
            total.cached_tokens as f64 / total.prompt_tokens as f64
        } else {
            0.0
        },
    }
}

fn baseline_scores(cases: &[Case], scorer: Scorer, boot: Boot) -> BaselineScores {
    BaselineScores {
        agent_accuracy: accuracy(cases, |c| agent_correct(c, scorer), boot),
        step_accuracy: accuracy(cases, |c| step_correct(c, scorer), boot),
    }
}

/// Build the report. `baselines` are (name, cases) with the same ids as `cases`.
pub fn build(
    cases: &[Case],
    baselines: &[(String, Vec<Case>)],
    errors: Vec<(String, String)>,
    opts: &ReportOptions,
) -> LocateReport {
    let s = opts.scorer;
    let seed = opts.seed;
    let boot = Boot {
        seed,
        resamples: opts.resamples,
    };
    let mut subsets = BTreeMap::new();
    let names: std::collections::BTreeSet<String> =
        cases.iter().filter_map(|c| c.subset.clone()).collect();
    if names.len() > 1 {
        for name in names {
            let sub: Vec<Case> = cases
                .iter()
                .filter(|c| c.subset.as_deref() == Some(&name))
                .cloned()
                .collect();
            let sb = baselines
                .iter()
                .map(|(b, bc)| {
                    let bsub: Vec<Case> = bc
                        .iter()
                        .filter(|c| c.subset.as_deref() == Some(&name))
                        .cloned()
                        .collect();
                    (b.clone(), baseline_scores(&bsub, s, boot))
                })
                .collect();
            subsets.insert(
                name,
                SubsetReport {
                    cases: sub.len(),
                    agent_accuracy: accuracy(&sub, |c| agent_correct(c, s), boot),
                    step_accuracy: accuracy(&sub, |c| step_correct(c, s), boot),
                    joint_accuracy: accuracy(&sub, |c| joint_correct(c, s), boot),
                    tolerance: tolerances(&sub, &opts.tolerances, boot),
                    baselines: sb,
                },
            );
        }
    }
    LocateReport {
        format_version: crate::run::REPORT_FORMAT_VERSION,
        title: opts.title.clone(),
        method: opts.method.clone(),
        model: opts.model.clone(),
        dataset: opts.dataset.clone(),
        scorer: s,
        seed,
        cases: cases.len(),
        agent_accuracy: accuracy(cases, |c| agent_correct(c, s), boot),
        step_accuracy: accuracy(cases, |c| step_correct(c, s), boot),
        pair_accuracy: accuracy(cases, pair_correct, boot),
        joint_accuracy: accuracy(cases, |c| joint_correct(c, s), boot),
        tolerance: tolerances(cases, &opts.tolerances, boot),
        deviation_histogram: if cases.iter().any(|c| c.gold.step.is_some()) {
            deviation_histogram(cases)
                .into_iter()
                .map(|(bin, count)| Bin { bin, count })
                .collect()
        } else {
            Vec::new()
        },
        deviation_histogram_paper: if cases.iter().any(|c| c.gold.step.is_some()) {
            deviation_histogram_in(cases, &DEVIATION_BINS_PAPER)
                .into_iter()
                .map(|(bin, count)| Bin { bin, count })
                .collect()
        } else {
            Vec::new()
        },
        step_spread: step_spread(cases),
        by_length: by_length_quartile(cases, s, boot),
        by_length_paper: by_length_paper(cases, s, boot),
        mislocalized: mislocalized_agents(cases, s, opts.top_mislocalized),
        abstentions: cases
            .iter()
            .filter(|c| c.pred.agent.is_none() && c.pred.step.is_none())
            .count(),
        parse_failures: cases.iter().map(|c| c.pred.parse_failures).sum(),
        usage: usage_summary(cases),
        baselines: baselines
            .iter()
            .map(|(name, bc)| (name.clone(), baseline_scores(bc, s, boot)))
            .collect(),
        subsets,
        split: None,
        errors,
        stopped_early: None,
        in_sample: None,
        random_chance: None,
        config: serde_json::Value::Null,
        provenance: Provenance::default(),
        per_case: cases.to_vec(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::{Gold, Prediction};

    pub(crate) fn sample() -> LocateReport {
        let mk =
            |id: &str, subset: &str, g: (&str, usize), p: Option<(&str, usize)>, tokens: usize| {
                Case {
                    id: id.into(),
                    subset: Some(subset.into()),
                    gold: Gold {
                        agent: Some(g.0.into()),
                        step: Some(g.1),
                        faulty: vec![],
                    },
                    pred: Prediction {
                        agent: p.map(|x| x.0.into()),
                        step: p.map(|x| x.1),
                        abstained: p.is_none(),
                        ..Default::default()
                    },
                    trace_tokens: tokens,
                    usage: CaseUsage {
                        prompt_tokens: 1000,
                        cached_tokens: 400,
                        completion_tokens: 50,
                        calls: 4,
                        seconds: 2.0,
                        cost_usd: None,
                        ..Default::default()
                    },
                }
            };
        let cases = vec![
            mk("AG/1", "AG", ("A", 1), Some(("A", 1)), 100),
            mk("AG/2", "AG", ("B", 2), Some(("A", 3)), 200),
            mk("HC/1", "HC", ("C", 9), None, 900),
        ];
        let base = vec![
            mk("AG/1", "AG", ("A", 1), Some(("A", 0)), 100),
            mk("AG/2", "AG", ("B", 2), Some(("B", 2)), 200),
            mk("HC/1", "HC", ("C", 9), Some(("C", 9)), 900),
        ];
        build(
            &cases,
            &[("last-agent".into(), base)],
            vec![("AG/9".into(), "boom".into())],
            &ReportOptions {
                method: "m".into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn json_has_the_required_keys_and_values() {
        let r = sample();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["cases"], 3);
        for key in ["agent_accuracy", "step_accuracy"] {
            for f in ["value", "k", "n", "ci95"] {
                assert!(v[key].get(f).is_some(), "{key}.{f}");
            }
        }
        assert_eq!(v["agent_accuracy"]["k"], 1);
        assert_eq!(v["step_accuracy"]["n"], 3);
        assert_eq!(v["tolerance"]["2"]["k"], 2);
        for f in [
            "prompt_tokens",
            "cached_tokens",
            "completion_tokens",
            "calls",
            "seconds",
        ] {
            assert!(v["usage"].get(f).is_some(), "usage.{f}");
        }
        assert_eq!(v["usage"]["calls"], 12);
        assert!((r.usage.prefix_reuse - 0.4).abs() < 1e-12);
        assert_eq!(v["baselines"]["last-agent"]["agent_accuracy"]["k"], 3);
        assert_eq!(v["baselines"]["last-agent"]["step_accuracy"]["k"], 2);
        assert_eq!(r.abstentions, 1);
        assert_eq!(r.subsets["HC"].cases, 1);
        assert_eq!(
            r.subsets["AG"].baselines["last-agent"]
                .step_accuracy
                .unwrap()
                .k,
            1
        );
        assert!(v["pair_accuracy"].is_null());
        assert_eq!(r.errors.len(), 1);
    }
}
