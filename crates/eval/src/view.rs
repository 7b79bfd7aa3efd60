//! The locate report as template context: every number formatted once, every data string raw
//! (the Markdown templates pass it through `cell`, the HTML templates auto-escape it).

use crate::metrics::{Accuracy, Scorer};
use crate::page::Figure;
use crate::report::{Bin, LocateReport};
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
    /// `maslens VERSION (git REV)`.
    pub built_by: String,
    /// `ids SHA-256 prefix, content SHA-256 prefix`.
    pub dataset_hash: String,
    /// `(prompt id, SHA-256 prefix)`.
    pub prompts: Vec<(String, String)>,
    pub charts: Charts,
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

pub(crate) fn view(r: &LocateReport) -> View<'_> {
    let pair = r.pair_accuracy.is_some();
    let mut accuracy = vec![AccRow {
        name: r.method.clone(),
        agent: acc(&r.agent_accuracy),
        step: acc(&r.step_accuracy),
        pair: acc(&r.pair_accuracy),
    }];
    accuracy.extend(r.baselines.iter().map(|(name, b)| AccRow {
        name: name.clone(),
        agent: acc(&b.agent_accuracy),
        step: acc(&b.step_accuracy),
        pair: "n/a".into(),
    }));
    let subsets = r
        .subsets
        .iter()
        .map(|(name, s)| SubsetRow {
            name: name.clone(),
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
        })
        .collect();
    let mut tolerance: Vec<(&String, &Accuracy)> = r.tolerance.iter().collect();
    tolerance.sort_by_key(|(k, _)| k.parse::<usize>().unwrap_or(usize::MAX));
    let u = &r.usage;
    View {
        title: &r.title,
        method: &r.method,
        output: r.config.get("output").and_then(|o| o.as_str()),
        model: r.model.as_deref(),
        dataset: &r.dataset,
        cases: r.cases,
        scorer: match r.scorer {
            Scorer::Exact => "exact (normalized agent names, integer steps)",
            Scorer::CompatSubstring => "compat-substring (Who&When reference scorer: gold substring of prediction; unparsed = wrong)",
        },
        scorer_name: format!("{:?}", r.scorer),
        seed: r.seed,
        split: r.split.as_ref().map(|s| {
            format!(
                "{:.0}% refinement / test, seed {} ({} train, {} test; metrics on test)",
                100.0 * s.fraction,
                s.seed,
                s.train,
                s.test
            )
        }),
        abstentions: r.abstentions,
        parse_failures: r.parse_failures,
        pair,
        accuracy,
        subsets,
        tolerance: tolerance
            .into_iter()
            .map(|(k, a)| (k.clone(), a.display()))
            .collect(),
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
        usage: vec![
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
        ],
        cost: match (u.cost_usd, u.per_case.cost_usd) {
            (Some(c), Some(pc)) => Some((format!("{c:.4}"), format!("{pc:.5}"))),
            _ => None,
        },
        per_case: r
            .per_case
            .iter()
            .map(|c| CaseRow {
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
            })
            .collect(),
        errors: &r.errors,
        joint: r.joint_accuracy.as_ref().map(Accuracy::display),
        stopped_early: r.stopped_early.as_deref(),
        in_sample: r.in_sample.as_deref(),
        built_by: match &r.provenance.git_revision {
            Some(rev) => format!(
                "maslens {} (git {})",
                r.provenance.maslens_version,
                short(rev)
            ),
            None => format!("maslens {}", r.provenance.maslens_version),
        },
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
