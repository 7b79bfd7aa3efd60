//! `maslens eval compare`: several localizers on the same cases, with the same model and cache,
//! in one report: agent and step accuracy (exact and with step tolerance) with intervals, calls,
//! tokens, cost and time per method, exact McNemar tests and paired bootstrap intervals between
//! every two methods, and the length-quartile breakdown. Each method runs as `maslens eval
//! locate --method ...` runs it ([`crate::eval_locate`]); this module only chooses the options and
//! puts the reports side by side.

use crate::eval_locate::{eval_locate_with, EvalLocateOptions};
use crate::locate::{LocateOptions, Method, Models};
use crate::CoreError;
use maslens_eval::metrics::{agent_correct, step_correct, Accuracy, Case, LengthBucket, Scorer};
use maslens_eval::report::{BaselineScores, LocateReport, UsageSummary};
use maslens_eval::run::Progress;
use maslens_eval::stats::{mcnemar_exact, paired_cluster_bootstrap, PairedUnit};
use maslens_locate::{Protocol, Variant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The version of [`CompareReport`]'s JSON.
pub const FORMAT_VERSION: u32 = 1;

/// A method of the comparison, as `--methods` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompareMethod {
    /// maslens' learned prior (no model).
    Prior,
    /// The LLM pipeline and the prior stacked (the default of `maslens locate`).
    Stacked,
    /// AgentLocate: Judge (all-at-once) + Evaluators + confidence-weighted vote.
    Agentlocate,
    /// Who&When's all-at-once protocol: one Judge call over the whole log.
    AllAtOnce,
    /// Who&When's step-by-step protocol: the Judge asked step after step.
    StepByStep,
    /// Who&When's binary search: the Judge halves the log until one step is left.
    BinarySearch,
    /// A2P: one Judge call that reasons abduction, action, prediction, then locates.
    A2p,
    /// AEGIS-style: one Judge call that lists the taxonomy's failure modes it sees, then locates
    /// the decisive one with its mode.
    Taxonomy,
    /// ECHO-style: hierarchical context, six analysts, a confidence-weighted consensus.
    Echo,
    /// AgenTracer-style counterfactual checking: a step with its correction proposed, the
    /// corrected run predicted by the model, up to three rounds.
    Counterfactual,
}

impl CompareMethod {
    pub const ALL: [CompareMethod; 10] = [
        CompareMethod::Prior,
        CompareMethod::Stacked,
        CompareMethod::Agentlocate,
        CompareMethod::AllAtOnce,
        CompareMethod::StepByStep,
        CompareMethod::BinarySearch,
        CompareMethod::A2p,
        CompareMethod::Taxonomy,
        CompareMethod::Echo,
        CompareMethod::Counterfactual,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CompareMethod::Prior => "prior",
            CompareMethod::Stacked => "stacked",
            CompareMethod::Agentlocate => "agentlocate",
            CompareMethod::AllAtOnce => "all-at-once",
            CompareMethod::StepByStep => "step-by-step",
            CompareMethod::BinarySearch => "binary-search",
            CompareMethod::A2p => "a2p",
            CompareMethod::Taxonomy => "taxonomy",
            CompareMethod::Echo => "echo",
            CompareMethod::Counterfactual => "counterfactual",
        }
    }

    /// Where the method comes from.
    pub fn source(self) -> &'static str {
        match self {
            CompareMethod::Prior => "maslens (learned prior, no model)",
            CompareMethod::Stacked => "maslens (prior + AgentLocate ballots, stacked)",
            CompareMethod::Agentlocate => "AgentLocate (Judge + Evaluators, variant II)",
            CompareMethod::AllAtOnce | CompareMethod::StepByStep | CompareMethod::BinarySearch => {
                "Who&When (Zhang et al., 2025)"
            }
            CompareMethod::A2p => "A2P, Abduct-Act-Predict (West et al., 2025)",
            CompareMethod::Taxonomy => "AEGIS-style taxonomy judge (Kong et al., 2025)",
            CompareMethod::Echo => "ECHO-style panel (Banerjee et al., 2025)",
            CompareMethod::Counterfactual => {
                "AgenTracer-style counterfactual check, replay predicted (Zhang et al., 2025)"
            }
        }
    }

    /// A name from `--methods`; an unknown one is an error listing the names there are.
    pub fn parse(name: &str) -> Result<CompareMethod, CoreError> {
        let name = name.trim();
        CompareMethod::ALL
            .into_iter()
            .find(|m| m.name() == name || (name == "llm" && *m == CompareMethod::Agentlocate))
            .ok_or_else(|| {
                let names: Vec<&str> = CompareMethod::ALL.iter().map(|m| m.name()).collect();
                CoreError::Invalid(format!(
                    "unknown method {name:?} in --methods (methods: {})",
                    names.join(", ")
                ))
            })
    }

    /// The localizer options of this method, the rest (model settings, prior, scoring rule)
    /// from `base`.
    pub fn options(self, base: &LocateOptions) -> LocateOptions {
        let judge_alone = |protocol| LocateOptions {
            method: Method::Llm,
            protocol,
            variant: Variant::Judge,
            ..base.clone()
        };
        match self {
            CompareMethod::Prior => LocateOptions {
                method: Method::Prior,
                ..base.clone()
            },
            CompareMethod::Stacked => LocateOptions {
                method: Method::Stacked,
                ..base.clone()
            },
            CompareMethod::Agentlocate => LocateOptions {
                method: Method::Llm,
                protocol: Protocol::AllAtOnce,
                variant: Variant::Verified,
                ..base.clone()
            },
            CompareMethod::AllAtOnce => judge_alone(Protocol::AllAtOnce),
            CompareMethod::StepByStep => judge_alone(Protocol::StepByStep),
            CompareMethod::BinarySearch => judge_alone(Protocol::BinarySearch),
            CompareMethod::A2p => judge_alone(Protocol::A2p),
            CompareMethod::Taxonomy => judge_alone(Protocol::Taxonomy),
            CompareMethod::Echo => judge_alone(Protocol::Echo),
            CompareMethod::Counterfactual => judge_alone(Protocol::Counterfactual),
        }
    }
}

/// Everything `maslens eval compare` takes: the `eval locate` options every method shares, and
/// the methods in the order the report lists them.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub base: EvalLocateOptions,
    pub methods: Vec<CompareMethod>,
    /// Run each method that prompts a model twice, without and with the reference answer in
    /// its prompts (Who&When's two settings), as rows `NAME` and `NAME+gt` of one table.
    pub both_ground_truth: bool,
}

/// One row of the comparison: a method, and whether its prompts carried the reference answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub method: CompareMethod,
    pub with_ground_truth: bool,
}

impl Entry {
    /// The row's name: the method's, with `+gt` when the prompts carried the reference answer
    /// in a comparison of both settings.
    pub fn name(&self, both: bool) -> String {
        match both && self.with_ground_truth {
            true => format!("{}+gt", self.method.name()),
            false => self.method.name().to_string(),
        }
    }
}

impl CompareOptions {
    /// The rows in report order: each method once, or with `both_ground_truth` each method that
    /// prompts a model twice (without, then with the reference answer).
    pub fn entries(&self) -> Vec<Entry> {
        let base = self.base.locate.with_ground_truth;
        let mut rows = Vec::new();
        for &method in &self.methods {
            rows.push(Entry {
                method,
                with_ground_truth: base,
            });
            let prompts = method.options(&self.base.locate).method.needs_llm();
            if self.both_ground_truth && prompts {
                rows.push(Entry {
                    method,
                    with_ground_truth: true,
                });
            }
        }
        rows
    }
}

/// One method's results in the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodResult {
    /// The method's name, `+gt` added in a comparison of both ground-truth settings for the
    /// row whose prompts carried the reference answer.
    pub name: String,
    pub source: String,
    /// The method label of its `eval locate` report (e.g. `locate/all-at-once`).
    pub label: String,
    pub cases: usize,
    pub agent_accuracy: Option<Accuracy>,
    pub step_accuracy: Option<Accuracy>,
    pub joint_accuracy: Option<Accuracy>,
    /// Step accuracy within ±k steps, by k.
    pub tolerance: BTreeMap<String, Accuracy>,
    pub abstentions: usize,
    /// Cases whose calls failed (scored as wrong).
    pub errors: usize,
    pub usage: UsageSummary,
    pub by_length: Vec<LengthBucket>,
    #[serde(default)]
    pub stopped_early: Option<String>,
    #[serde(default)]
    pub in_sample: Option<String>,
    /// Whether its prompts carried the reference answer.
    #[serde(default)]
    pub with_ground_truth: bool,
}

/// Two methods on the cases both scored: the exact McNemar test of their per-case outcomes and a
/// paired bootstrap interval of the accuracy difference (`b - a`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedTest {
    /// `agent` or `step`.
    pub metric: String,
    pub a: String,
    pub b: String,
    /// Cases both methods were scored on for this metric.
    pub n: usize,
    pub both: usize,
    pub only_a: usize,
    pub only_b: usize,
    pub neither: usize,
    /// Accuracy of `b` minus accuracy of `a` on these cases, with its 95% interval.
    pub difference: f64,
    pub ci95: Option<[f64; 2]>,
    pub p_value: f64,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    pub format_version: u32,
    pub dataset: String,
    pub model: String,
    pub scorer: Scorer,
    /// How a verdict's (agent, step) was scored (`coherent` or `independent`).
    pub pair_rule: maslens_trace::ScoringRule,
    pub with_ground_truth: bool,
    /// Each method that prompts a model ran in both settings (rows `NAME` and `NAME+gt`).
    #[serde(default)]
    pub both_ground_truth: bool,
    pub seed: u64,
    pub methods: Vec<MethodResult>,
    /// The trivial baselines on the same cases (from the first method's run).
    pub baselines: BTreeMap<String, BaselineScores>,
    pub paired: Vec<PairedTest>,
    pub notes: Vec<String>,
}

/// A finished comparison: the report, each method's full `eval locate` report (for `--out`),
/// and the records skipped or cases that failed, as messages.
pub struct CompareOutput {
    pub report: CompareReport,
    /// Each row's name (the report's) and its run.
    pub runs: Vec<(String, maslens_eval::run::EvalRun)>,
    pub problems: Vec<String>,
}

impl CompareOutput {
    /// Whether a method stopped early or a case or record failed: what the exit code reports.
    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
            || self
                .report
                .methods
                .iter()
                .any(|m| m.errors > 0 || m.stopped_early.is_some())
    }
}

impl CompareOutput {
    /// `compare.json`, `compare.md`, and each method's `eval locate` reports in `DIR/METHOD/`.
    pub fn write(&self, dir: &std::path::Path) -> std::io::Result<()> {
        use maslens_eval::run::{write_atomic, write_run};
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_string_pretty(&self.report).map_err(std::io::Error::other)?;
        write_atomic(dir.join("compare.json"), (json + "\n").as_bytes())?;
        write_atomic(dir.join("compare.md"), self.report.to_markdown().as_bytes())?;
        for (name, run) in &self.runs {
            write_run(run, &dir.join(name))?;
        }
        Ok(())
    }
}

/// Run every method of `opts` on the same cases (one after the other; each method's usage is the
/// sum over its cases; the model's cache is shared, so a rerun repeats no paid call). Call
/// inside a tokio runtime.
pub async fn eval_compare(
    opts: &CompareOptions,
    progress: &dyn Progress,
) -> Result<CompareOutput, CoreError> {
    eval_compare_with(opts, None, progress).await
}

/// [`eval_compare`] with models the caller already opened (the Python package's); `None` opens
/// `opts.base.model` for each method that needs one.
pub async fn eval_compare_with(
    opts: &CompareOptions,
    opened: Option<Models>,
    progress: &dyn Progress,
) -> Result<CompareOutput, CoreError> {
    if opts.methods.is_empty() {
        return Err(CoreError::Invalid("--methods names no method".into()));
    }
    if opts.base.predictions.is_some() || opts.base.export_refinement.is_some() {
        return Err(CoreError::Invalid(
            "eval compare runs the methods: --predictions and --export-refinement belong to \
             eval locate"
                .into(),
        ));
    }
    if opts.both_ground_truth && opts.base.locate.with_ground_truth {
        return Err(CoreError::Invalid(
            "--both-ground-truth runs each method without and with the ground truth: leave out \
             --with-ground-truth"
                .into(),
        ));
    }
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for entry in opts.entries() {
        let o = EvalLocateOptions {
            locate: LocateOptions {
                with_ground_truth: entry.with_ground_truth,
                ..entry.method.options(&opts.base.locate)
            },
            ..opts.base.clone()
        };
        let out = eval_locate_with(&o, opened.clone(), progress).await?;
        for p in &out.problems {
            if !problems.contains(p) {
                problems.push(p.clone());
            }
        }
        rows.push((entry, out.run));
    }
    let report = compare(opts, &rows);
    let runs = rows
        .into_iter()
        .map(|(e, run)| (e.name(opts.both_ground_truth), run))
        .collect();
    Ok(CompareOutput {
        report,
        runs,
        problems,
    })
}

/// The report of finished runs.
fn compare(opts: &CompareOptions, runs: &[(Entry, maslens_eval::run::EvalRun)]) -> CompareReport {
    let scorer = opts.base.scorer;
    let both = opts.both_ground_truth;
    let methods: Vec<MethodResult> = runs
        .iter()
        .map(|(e, run)| method_result(*e, both, &run.report))
        .collect();
    let mut paired = Vec::new();
    for (i, (ma, a)) in runs.iter().enumerate() {
        for (mb, b) in &runs[i + 1..] {
            let outcomes: [(&str, Outcome); 2] = [("agent", agent_correct), ("step", step_correct)];
            for (metric, correct) in outcomes {
                let (name_a, name_b) = (ma.name(both), mb.name(both));
                let first = (name_a.as_str(), a.report.per_case.as_slice());
                let second = (name_b.as_str(), b.report.per_case.as_slice());
                let outcome = |c: &Case| correct(c, scorer);
                if let Some(t) = paired_test(metric, first, second, outcome, opts.base.seed) {
                    paired.push(t);
                }
            }
        }
    }
    let mut notes = Vec::new();
    if methods.iter().any(|m| m.in_sample.is_some()) {
        notes.push(
            "figures marked in-sample are a fit to the training data (the built-in prior has \
             seen these traces), not an estimate for new traces"
                .to_string(),
        );
    }
    let model = runs
        .iter()
        .find_map(|(_, r)| r.report.model.clone())
        .unwrap_or_else(|| "none".into());
    CompareReport {
        format_version: FORMAT_VERSION,
        dataset: opts.base.dataset.clone(),
        model,
        scorer,
        pair_rule: opts.base.locate.pair_rule,
        with_ground_truth: opts.base.locate.with_ground_truth,
        both_ground_truth: both,
        seed: opts.base.seed,
        methods,
        baselines: runs
            .first()
            .map(|(_, r)| r.report.baselines.clone())
            .unwrap_or_default(),
        paired,
        notes,
    }
}

type Outcome = fn(&Case, Scorer) -> Option<bool>;

fn method_result(entry: Entry, both: bool, r: &LocateReport) -> MethodResult {
    MethodResult {
        name: entry.name(both),
        source: entry.method.source().to_string(),
        label: r.method.clone(),
        cases: r.cases,
        agent_accuracy: r.agent_accuracy,
        step_accuracy: r.step_accuracy,
        joint_accuracy: r.joint_accuracy,
        tolerance: r.tolerance.clone(),
        abstentions: r.abstentions,
        errors: r.errors.len(),
        usage: r.usage.clone(),
        by_length: r.by_length.clone(),
        stopped_early: r.stopped_early.clone(),
        in_sample: r.in_sample.clone(),
        with_ground_truth: entry.with_ground_truth,
    }
}

/// The paired test of `metric` between two methods' cases, on the cases both scored; `None`
/// when there is none.
fn paired_test(
    metric: &str,
    (a_name, a_cases): (&str, &[Case]),
    (b_name, b_cases): (&str, &[Case]),
    outcome: impl Fn(&Case) -> Option<bool>,
    seed: u64,
) -> Option<PairedTest> {
    let of_b: HashMap<&str, bool> = b_cases
        .iter()
        .filter_map(|c| Some((c.id.as_str(), outcome(c)?)))
        .collect();
    let pairs: Vec<(&str, bool, bool)> = a_cases
        .iter()
        .filter_map(|c| Some((c.id.as_str(), outcome(c)?, *of_b.get(c.id.as_str())?)))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let count = |f: fn(bool, bool) -> bool| pairs.iter().filter(|(_, a, b)| f(*a, *b)).count();
    let (only_a, only_b) = (count(|a, b| a && !b), count(|a, b| !a && b));
    let units: Vec<PairedUnit> = pairs
        .iter()
        .map(|(id, a, b)| PairedUnit {
            cluster: id.to_string(),
            a: f64::from(u8::from(*a)),
            b: f64::from(u8::from(*b)),
        })
        .collect();
    let n = pairs.len();
    Some(PairedTest {
        metric: metric.to_string(),
        a: a_name.to_string(),
        b: b_name.to_string(),
        n,
        both: count(|a, b| a && b),
        only_a,
        only_b,
        neither: count(|a, b| !a && !b),
        difference: (only_b as f64 - only_a as f64) / n as f64,
        ci95: paired_cluster_bootstrap(&units, maslens_eval::metrics::RESAMPLES, 0.95, seed)
            .map(|i| [i.lo, i.hi]),
        p_value: mcnemar_exact(only_a, only_b),
    })
}

const TEMPLATES: [(&str, &str); 1] =
    [("compare.md.j2", include_str!("../templates/compare.md.j2"))];

impl CompareReport {
    pub fn to_markdown(&self) -> String {
        maslens_eval::page::render_or_note(&TEMPLATES, "compare.md.j2", self.context())
    }

    fn context(&self) -> serde_json::Value {
        let acc = |a: &Option<Accuracy>| a.map(|a| a.display()).unwrap_or_else(|| "-".into());
        let rows: Vec<serde_json::Value> = self
            .methods
            .iter()
            .map(|m| {
                let tol = |k: &str| m.tolerance.get(k).map(|a| a.display());
                serde_json::json!({
                    "m": m,
                    "agent": acc(&m.agent_accuracy),
                    "step": acc(&m.step_accuracy),
                    "step1": tol("1").unwrap_or_else(|| "-".into()),
                    "step3": tol("3").unwrap_or_else(|| "-".into()),
                    "cost": m.usage.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_else(|| "-".into()),
                    "buckets": m.by_length.iter().map(|b| serde_json::json!({
                        "name": b.name, "tokens": b.tokens,
                        "agent": acc(&b.agent_accuracy), "step": acc(&b.step_accuracy),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let baselines: Vec<serde_json::Value> = self
            .baselines
            .iter()
            .map(|(name, b)| {
                serde_json::json!({"name": name, "agent": acc(&b.agent_accuracy),
                                   "step": acc(&b.step_accuracy)})
            })
            .collect();
        let paired: Vec<serde_json::Value> = self
            .paired
            .iter()
            .map(|t| {
                let mut v = serde_json::to_value(t).unwrap_or_default();
                v["p"] = serde_json::Value::String(p_text(t.p_value));
                v
            })
            .collect();
        serde_json::json!({"r": self, "rows": rows, "baselines": baselines, "paired": paired})
    }
}

/// A p-value for a table: three significant digits, `<0.001` below.
fn p_text(p: f64) -> String {
    if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

#[cfg(test)]
mod tests;
