//! The locate report as template context: every number formatted once, every data string raw
//! (the Markdown templates pass it through `cell`, the HTML templates auto-escape it).

use crate::metrics::{Accuracy, Case, Scorer};
use crate::page::Figure;
use crate::report::{Bin, LocateReport, SplitInfo, SubsetReport, UsageSummary};
use crate::run::Provenance;
use serde::Serialize;

fn acc(a: &Option<Accuracy>) -> String {
    a.as_ref()
        .map(Accuracy::display)
        .unwrap_or_else(|| "n/a".into())
}

/// One accuracy row (the method, a baseline, a subset or a length quartile).
#[derive(Debug, Serialize)]
pub(crate) struct AccRow {
    pub name: String,
    pub agent: String,
    pub step: String,
    pub pair: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct SubsetRow {
    pub name: String,
    pub cases: usize,
    pub agent: String,
    pub step: String,
    pub best: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct LengthRow {
    pub name: String,
    pub tokens: String,
    pub agent: String,
    pub step: String,
}

/// The paper's token-length ranges for one Who&When subset.
#[derive(Debug, Serialize)]
pub(crate) struct PaperLengthRows {
    pub subset: String,
    pub cases: usize,
    pub rows: Vec<LengthRow>,
}

fn length_row(b: &crate::metrics::LengthBucket) -> LengthRow {
    LengthRow {
        name: b.name.clone(),
        tokens: format!("{}-{}", b.tokens[0], b.tokens[1]),
        agent: acc(&b.agent_accuracy),
        step: acc(&b.step_accuracy),
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct CaseRow {
    pub id: String,
    pub gold: String,
    pub pred: String,
    pub tokens: usize,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Charts {
    pub accuracy: Option<Figure>,
    pub tolerance: Option<Figure>,
    pub deviation: Option<Figure>,
    pub by_length: Option<Figure>,
}

#[derive(Debug, Serialize)]
pub(crate) struct View<'a> {
    pub title: &'a str,
    pub method: &'a str,
    /// Which output the run gives, in the paper's terms (the localizer's `config.output`).
    pub output: Option<&'a str>,
    pub model: Option<&'a str>,
    pub dataset: &'a str,
    pub cases: usize,
    pub scorer: &'static str,
    pub scorer_name: String,
    pub seed: u64,
    pub split: Option<String>,
    pub abstentions: usize,
    pub parse_failures: u64,
    pub pair: bool,
    /// The method first, then the baselines.
    pub accuracy: Vec<AccRow>,
    pub subsets: Vec<SubsetRow>,
    /// `(k, accuracy)` by increasing k.
    pub tolerance: Vec<(String, String)>,
    pub deviation: &'a [Bin],
    /// The deviations in the paper's figure-2 intervals.
    pub deviation_paper: &'a [Bin],
    pub spread: Option<String>,
    pub by_length: Vec<LengthRow>,
    pub by_length_paper: Vec<PaperLengthRows>,
    pub mislocalized: &'a [crate::metrics::Mislocalized],
    /// `(label, total, per case)`.
    pub usage: Vec<(&'static str, String, String)>,
    /// `(total, per case)` when a price was given.
    pub cost: Option<(String, String)>,
    pub per_case: Vec<CaseRow>,
    /// `(case id, error)`.
    pub errors: &'a [(String, String)],
    /// Agent and step both right, for the method (decisive labels only).
    pub joint: Option<String>,
    /// Why the run stopped before the last case.
    pub stopped_early: Option<&'a str>,
    /// Why the figures are in-sample, when they are.
    pub in_sample: Option<&'a str>,
    /// What the `random` baseline's score means on these cases (its expected accuracy).
    pub random_note: Option<String>,
    /// `maslens VERSION (git REV)`.
    pub built_by: String,
    /// `ids SHA-256 prefix, content SHA-256 prefix`.
    pub dataset_hash: String,
    /// `(prompt id, SHA-256 prefix)`.
    pub prompts: Vec<(String, String)>,
    pub charts: Charts,
}

/// The line under the accuracy table that says what `random`'s score is worth here.
fn random_note(chance: f64) -> String {
    let pct = 100.0 * chance;
    let why = match chance >= 0.5 {
        true => ": the labelled agents take most of the acting steps here (Aegis labels several faulty agents per case, often every acting one), so a high `random` score is chance, not skill",
        false => "",
    };
    format!("`random` draws one acting step uniformly; its expected agent-level accuracy on these cases is {pct:.1}%{why}.")
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

pub(crate) fn view(r: &LocateReport) -> View<'_> {
    View {
        title: &r.title,
        method: &r.method,
        output: r.config.get("output").and_then(|o| o.as_str()),
        model: r.model.as_deref(),
        dataset: &r.dataset,
        cases: r.cases,
        scorer: scorer_text(r.scorer),
        scorer_name: format!("{:?}", r.scorer),
        seed: r.seed,
        split: r.split.as_ref().map(split_line),
        abstentions: r.abstentions,
        parse_failures: r.parse_failures,
        pair: r.pair_accuracy.is_some(),
        accuracy: accuracy_rows(r),
        subsets: r
            .subsets
            .iter()
            .map(|(name, s)| subset_row(name, s))
            .collect(),
        tolerance: tolerance_rows(r),
        deviation: &r.deviation_histogram,
        spread: r.step_spread.as_ref().map(crate::markdown::spread_line),
        deviation_paper: &r.deviation_histogram_paper,
        by_length: r.by_length.iter().map(length_row).collect(),
        by_length_paper: r
            .by_length_paper
            .iter()
            .map(|p| PaperLengthRows {
                subset: p.subset.clone(),
                cases: p.cases,
                rows: p.buckets.iter().map(length_row).collect(),
            })
            .collect(),
        mislocalized: &r.mislocalized,
        usage: usage_rows(&r.usage),
        cost: match (r.usage.cost_usd, r.usage.per_case.cost_usd) {
            (Some(c), Some(pc)) => Some((format!("{c:.4}"), format!("{pc:.5}"))),
            _ => None,
        },
        per_case: r.per_case.iter().map(case_row).collect(),
        errors: &r.errors,
        joint: r.joint_accuracy.as_ref().map(Accuracy::display),
        stopped_early: r.stopped_early.as_deref(),
        in_sample: r.in_sample.as_deref(),
        random_note: r.random_chance.map(random_note),
        built_by: built_by(&r.provenance),
        dataset_hash: format!(
            "ids {}, content {}",
            short(&r.provenance.dataset.ids_sha256),
            short(&r.provenance.dataset.content_sha256)
        ),
        prompts: r
            .provenance
            .prompts
            .iter()
            .map(|p| (p.id.clone(), short(&p.sha256)))
            .collect(),
        charts: Charts::default(),
    }
}

/// How the scorer compares answers, in words.
fn scorer_text(scorer: Scorer) -> &'static str {
    match scorer {
        Scorer::Exact => "exact (normalized agent names, integer steps)",
        Scorer::CompatSubstring => "compat-substring (Who&When reference scorer: gold substring of prediction; unparsed = wrong)",
    }
}

fn split_line(s: &SplitInfo) -> String {
    format!(
        "{:.0}% refinement / test, seed {} ({} train, {} test; metrics on test)",
        100.0 * s.fraction,
        s.seed,
        s.train,
        s.test
    )
}

/// The method's accuracy row, then one per baseline (no pair accuracy).
fn accuracy_rows(r: &LocateReport) -> Vec<AccRow> {
    let mut rows = vec![AccRow {
        name: r.method.clone(),
        agent: acc(&r.agent_accuracy),
        step: acc(&r.step_accuracy),
        pair: acc(&r.pair_accuracy),
    }];
    rows.extend(r.baselines.iter().map(|(name, b)| AccRow {
        name: name.clone(),
        agent: acc(&b.agent_accuracy),
        step: acc(&b.step_accuracy),
        pair: "n/a".into(),
    }));
    rows
}

/// One subset's accuracies, with its best baseline by agent accuracy.
fn subset_row(name: &str, s: &SubsetReport) -> SubsetRow {
    SubsetRow {
        name: name.to_string(),
        cases: s.cases,
        agent: acc(&s.agent_accuracy),
        step: acc(&s.step_accuracy),
        best: s
            .baselines
            .iter()
            .filter_map(|(n, b)| b.agent_accuracy.map(|a| (n, a)))
            .max_by(|a, b| a.1.value.total_cmp(&b.1.value))
            .map(|(n, a)| format!("{n}: {}", a.display()))
            .unwrap_or_else(|| "n/a".into()),
    }
}

/// `(k, accuracy)` by increasing k (keys that are not numbers last).
fn tolerance_rows(r: &LocateReport) -> Vec<(String, String)> {
    let mut tolerance: Vec<(&String, &Accuracy)> = r.tolerance.iter().collect();
    tolerance.sort_by_key(|(k, _)| k.parse::<usize>().unwrap_or(usize::MAX));
    tolerance
        .into_iter()
        .map(|(k, a)| (k.clone(), a.display()))
        .collect()
}

/// `(label, total, per case)` of tokens, calls and seconds.
fn usage_rows(u: &UsageSummary) -> Vec<(&'static str, String, String)> {
    vec![
        (
            "prompt tokens",
            u.prompt_tokens.to_string(),
            format!("{:.0}", u.per_case.prompt_tokens),
        ),
        (
            "cached prompt tokens",
            format!(
                "{} ({:.1}% prefix reuse)",
                u.cached_tokens,
                100.0 * u.prefix_reuse
            ),
            format!("{:.0}", u.per_case.cached_tokens),
        ),
        (
            "completion tokens",
            u.completion_tokens.to_string(),
            format!("{:.0}", u.per_case.completion_tokens),
        ),
        (
            "calls",
            u.calls.to_string(),
            format!("{:.1}", u.per_case.calls),
        ),
        (
            "seconds",
            format!("{:.1}", u.seconds),
            format!("{:.2}", u.per_case.seconds),
        ),
    ]
}

/// One case: gold `agent @ step` (else the faulty agents with their modes), prediction
/// `agent @ step`, `agent` or `(none)`.
fn case_row(c: &Case) -> CaseRow {
    CaseRow {
        id: c.id.clone(),
        gold: match (&c.gold.agent, c.gold.step) {
            (Some(a), Some(s)) => format!("{a} @ {s}"),
            _ => c
                .gold
                .faulty
                .iter()
                .map(|(a, m)| format!("{a} {}", m.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", "),
        },
        pred: match (&c.pred.agent, c.pred.step) {
            (Some(a), Some(s)) => format!("{a} @ {s}"),
            (Some(a), None) => a.clone(),
            _ => "(none)".into(),
        },
        tokens: c.trace_tokens,
    }
}

/// `maslens VERSION (git REV)`, without the revision when the build had none.
fn built_by(p: &Provenance) -> String {
    match &p.git_revision {
        Some(rev) => format!("maslens {} (git {})", p.maslens_version, short(rev)),
        None => format!("maslens {}", p.maslens_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Case, CaseUsage, Gold, Prediction};
    use crate::report::{build, ReportOptions};
    use crate::run::{DatasetInfo, PromptRef, Provenance};

    fn case(id: &str, gold: Gold, pred: Prediction, cost: Option<f64>) -> Case {
        Case {
            id: id.into(),
            subset: Some(if id.starts_with('A') { "AG" } else { "HC" }.into()),
            gold,
            pred,
            trace_tokens: 100 * id.len(),
            usage: CaseUsage {
                prompt_tokens: 900,
                cached_tokens: 300,
                completion_tokens: 40,
                calls: 2,
                seconds: 1.5,
                cost_usd: cost,
                ..Default::default()
            },
        }
    }

    fn at(agent: &str, step: usize) -> Prediction {
        Prediction {
            agent: Some(agent.into()),
            step: Some(step),
            ..Default::default()
        }
    }

    /// Cases for every gold and prediction shape: decisive gold, agent-level (Aegis) gold with
    /// and without a mode, a located, an agent-only and an abstained prediction.
    fn report(scorer: Scorer, cost: Option<f64>, git: Option<&str>) -> LocateReport {
        let decisive = |agent: &str, step| Gold {
            agent: Some(agent.into()),
            step: Some(step),
            ..Default::default()
        };
        let faulty = Gold {
            faulty: vec![
                ("Solver".into(), Some("FM-2.4".into())),
                ("Critic".into(), None),
            ],
            ..Default::default()
        };
        let agent_only = Prediction {
            agent: Some("Solver".into()),
            ..Default::default()
        };
        let abstained = Prediction {
            abstained: true,
            ..Default::default()
        };
        let cases = vec![
            case("A1", decisive("Coder", 2), at("Coder", 2), cost),
            case("A2", decisive("Coder", 4), at("Planner", 1), cost),
            case("H1", faulty.clone(), agent_only, cost),
            case("H22", faulty, abstained, cost),
        ];
        let base = vec![
            case("A1", decisive("Coder", 2), at("Coder", 3), cost),
            case("A2", decisive("Coder", 4), at("Coder", 4), cost),
        ];
        let mut r = build(
            &cases,
            &[("last-agent".into(), base)],
            vec![("A9".into(), "timed out".into())],
            &ReportOptions {
                method: "locate/all-at-once".into(),
                dataset: "sample".into(),
                scorer,
                seed: 5,
                tolerances: vec![10, 2, 0],
                resamples: 50,
                ..Default::default()
            },
        );
        r.provenance = Provenance {
            maslens_version: "0.0.0-test".into(),
            git_revision: git.map(str::to_string),
            dataset: DatasetInfo {
                spec: "sample".into(),
                cases: 4,
                ids_sha256: "c".repeat(64),
                content_sha256: "d".repeat(64),
            },
            prompts: vec![PromptRef::new("locate/judge.v1", "Which agent?")],
        };
        r
    }

    /// The template context of two reports, pinned whole: every row, label and formatted number
    /// `view` derives from a report.
    #[test]
    fn view_of_reports_is_pinned() {
        let mut exact = report(Scorer::Exact, Some(0.0125), Some("fedcba9876543210"));
        exact.split = Some(crate::report::SplitInfo {
            fraction: 0.25,
            seed: 9,
            train: 1,
            test: 4,
        });
        let compat = report(Scorer::CompatSubstring, None, None);
        insta::assert_json_snapshot!(serde_json::json!({
            "exact, priced, split, from a checkout": view(&exact),
            "compat, no price, no revision": view(&compat),
        }));
    }
}
