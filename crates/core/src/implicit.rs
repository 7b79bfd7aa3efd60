//! The implicit-failure commands after a scan, one function each, as the CLI, the server and
//! the Python package start them: [`select_from_scans`] with [`read_prm_scores`] (`select`),
//! [`repair_scanned`] (`repair`), [`replay_stats_from_jsonl`] (`replay-stats`) and
//! [`advantages_from_jsonl`] (`advantages`). The scan itself is [`crate::scan`]. They return
//! values and warnings and never print.

use maslens_implicit::grpo::{if_grpo_advantages, AdvantageInput, AdvantageOutput};
use maslens_implicit::jsonl::{read_jsonl, WithWarnings};
use maslens_implicit::repair::{repair_event, RepairConfig, ReplayPlan};
use maslens_implicit::replay::{replay_stats, ConfigStats, ReplayOutcome};
use maslens_implicit::scan::TraceScan;
use maslens_implicit::select::{
    best_of_n, normalize_scores, weight_sensitivity, Accuracy, Candidate, Pooling, SelectConfig,
    SelectionReport, Sensitivity,
};
use maslens_implicit::weights::Weights;
use maslens_implicit::ImplicitError;
use maslens_llm::{ChatModel, Usage};
use maslens_trace::{Outcome, Trace};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// select

/// Raw range of PRM scores, mapped to [0, 1] before pooling (`"LO,HI"`, e.g. `-4,4` for PRInTS).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrmRange {
    pub lo: f64,
    pub hi: f64,
}

impl std::str::FromStr for PrmRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (lo, hi) = s.split_once(',').ok_or("must look like LO,HI")?;
        let lo: f64 = lo.trim().parse().map_err(|_| "LO is not a number")?;
        let hi: f64 = hi.trim().parse().map_err(|_| "HI is not a number")?;
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err("needs finite LO < HI".into());
        }
        Ok(PrmRange { lo, hi })
    }
}

/// Step scores of an external process reward model, by trace id.
pub type PrmScores = HashMap<String, Vec<f64>>;

#[derive(Deserialize)]
struct PrmLine {
    id: String,
    #[serde(alias = "step_scores")]
    scores: Vec<f64>,
}

/// Read PRM step scores: JSONL lines `{"id": TRACE_ID, "scores": [..]}` (`step_scores` also
/// accepted), normalized with `range` when given. Unreadable lines and non-finite scores are
/// warnings; a later line for the same id replaces an earlier one.
pub fn read_prm_scores(
    path: &Path,
    range: Option<PrmRange>,
) -> Result<WithWarnings<PrmScores>, ImplicitError> {
    let name = path.display().to_string();
    let lines = read_jsonl::<PrmLine>(&name, maslens_implicit::jsonl::open(path)?, "", |l| {
        if l.scores.iter().all(|x| x.is_finite()) {
            Ok(())
        } else {
            Err(format!("field scores: non-finite score for {}", l.id))
        }
    })?;
    let value = lines
        .value
        .into_iter()
        .map(|l| match range {
            Some(r) => (l.id, normalize_scores(&l.scores, r.lo, r.hi)),
            None => (l.id, l.scores),
        })
        .collect();
    Ok(WithWarnings {
        value,
        warnings: lines.warnings,
    })
}

/// Best-of-N settings (the `maslens select` flags).
#[derive(Debug, Clone)]
pub struct SelectOptions {
    /// Candidate counts N.
    pub ns: Vec<usize>,
    /// Share of tasks used to tune pooling and w, in [0, 1).
    pub tune_fraction: f64,
    /// Seed of the split, the candidate subsets, the random scorer and the sensitivity trials.
    pub seed: u64,
    pub weights: Weights,
    /// Weight-sensitivity trials (0: none).
    pub trials: usize,
    /// Largest relative perturbation of each weight in the sensitivity study.
    pub spread: f64,
}

impl Default for SelectOptions {
    fn default() -> Self {
        SelectOptions {
            ns: vec![4, 8, 16],
            tune_fraction: 0.2,
            seed: 0,
            weights: Weights::default(),
            trials: 1000,
            spread: 0.1,
        }
    }
}

/// What `maslens select` reports (its JSON output).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelectResult {
    pub selection: SelectionReport,
    pub sensitivity: Option<Sensitivity>,
}

/// Best-of-N selection over scanned candidates (traces with an unknown outcome are left out
/// with a warning; PRM scorers run only if every candidate has PRM scores) and the
/// weight-sensitivity study.
pub fn select_from_scans(
    scans: &[TraceScan],
    prm: Option<&PrmScores>,
    opts: &SelectOptions,
) -> Result<WithWarnings<SelectResult>, ImplicitError> {
    if !(0.0..1.0).contains(&opts.tune_fraction) {
        return Err(ImplicitError::Config(format!(
            "tune fraction must be in [0, 1), got {}",
            opts.tune_fraction
        )));
    }
    let mut warnings = Vec::new();
    let mut cands = Vec::new();
    for s in scans {
        let success = match s.outcome {
            Outcome::Success => true,
            Outcome::Failure => false,
            Outcome::Unknown => {
                warnings.push(format!(
                    "trace {}: outcome unknown, left out of selection",
                    s.id
                ));
                continue;
            }
        };
        cands.push(Candidate {
            id: s.id.clone(),
            task: s.task.clone(),
            success,
            steps: s.steps,
            events: s.weighted_events(),
            prm: prm.and_then(|p| p.get(&s.id).cloned()),
        });
    }
    let missing = cands.iter().filter(|c| c.prm.is_none()).count();
    if prm.is_some() && missing > 0 {
        warnings.push(format!(
            "{missing} candidate(s) have no PRM scores; PRM scorers are skipped"
        ));
    }
    let cfg = SelectConfig {
        ns: opts.ns.clone(),
        tune_fraction: opts.tune_fraction,
        seed: opts.seed,
        weights: opts.weights.clone(),
        ..Default::default()
    };
    let selection = best_of_n(&cands, &cfg);
    let sensitivity = (opts.trials > 0)
        .then(|| weight_sensitivity(&cands, &opts.weights, opts.trials, opts.spread, opts.seed));
    Ok(WithWarnings {
        value: SelectResult {
            selection,
            sensitivity,
        },
        warnings,
    })
}

fn pct(a: &Accuracy) -> String {
    match a.accuracy {
        Some(v) => format!("{:.1} ({}/{})", v * 100.0, a.correct, a.tasks),
        None => "n/a".into(),
    }
}

impl SelectResult {
    /// The JSON `maslens select` prints and writes: pretty-printed, object keys sorted
    /// alphabetically at every level (the shape it has always had).
    pub fn to_json(&self) -> String {
        // Numbers, strings, options and vectors only: converting cannot fail.
        serde_json::to_value(self)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_default()
    }

    /// Why cells of the report are `n/a`: an N no test task has that many candidates for, no
    /// `--prm` scores. Printed under the table and, by the CLI, on stderr.
    pub fn notes(&self) -> Vec<String> {
        let sel = &self.selection;
        let mut notes: Vec<String> = sel
            .results
            .iter()
            .filter(|r| r.test_tasks == 0)
            .map(|r| {
                format!(
                    "N = {}: n/a, no test task has {} candidates ({} tasks have fewer); pass a smaller --n",
                    r.n, r.n, r.skipped_tasks
                )
            })
            .collect();
        if sel.results.iter().all(|r| r.prm.is_none()) {
            notes.push("PRM and PRM+IF: n/a without `--prm` step scores".into());
        }
        notes
    }

    /// The Markdown report: accuracy per N and scorer, and the weight-sensitivity summary.
    pub fn markdown(&self) -> String {
        let sel = &self.selection;
        let mut md = String::new();
        let _ = writeln!(md, "# Best-of-N selection\n");
        let _ = writeln!(
            md,
            "{} candidates over {} tasks; {:.0}/{:.0} tuning/test split of tasks (seed {}). Accuracy on the test split, % (k/n).\n",
            sel.candidates,
            sel.tasks,
            sel.tune_fraction * 100.0,
            (1.0 - sel.tune_fraction) * 100.0,
            sel.seed
        );
        let _ = writeln!(
            md,
            "| N | test tasks | random | random (expected) | PRM | IF | PRM+IF | oracle |"
        );
        let _ = writeln!(md, "|---:|---:|---|---:|---|---|---|---|");
        for r in &sel.results {
            let prm = r
                .prm
                .as_ref()
                .map(|a| format!("{} [{}]", pct(a), r.prm_pooling.unwrap_or(Pooling::Mean)))
                .unwrap_or_else(|| "n/a".into());
            let prm_if = r
                .prm_if
                .as_ref()
                .map(|a| format!("{} [w={:.1}]", pct(a), r.prm_if_w.unwrap_or(0.0)))
                .unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.n,
                r.test_tasks,
                pct(&r.random),
                r.random_expected
                    .map(|v| format!("{:.1}", v * 100.0))
                    .unwrap_or_else(|| "n/a".into()),
                prm,
                pct(&r.if_scorer),
                prm_if,
                pct(&r.oracle)
            );
        }
        for note in self.notes() {
            let _ = writeln!(md, "\n{note}");
        }
        if let Some(s) = &self.sensitivity {
            let f = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                md,
                "\nWeight sensitivity: {} trials, each weight perturbed independently by up to ±{:.0}%: global Spearman of candidate risks mean {}, min {}, 5th percentile {} ({} trials defined); mean within-task Spearman {}.",
                s.trials,
                s.spread * 100.0,
                f(s.global_mean),
                f(s.global_min),
                f(s.global_p05),
                s.defined,
                f(s.within_task_mean)
            );
        }
        md
    }
}

// ---------------------------------------------------------------------------------------------
// repair

/// Repair settings (the `maslens repair` flags).
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    pub config: RepairConfig,
    /// Repair at most this many IFs per trace (`None`: all).
    pub max_per_trace: Option<usize>,
}

/// One result of [`repair_scanned`], in trace and IF order.
#[derive(Debug)]
pub enum RepairEvent<'a> {
    /// The matched no-op and fix replay plans of one IF (two JSONL lines of `repair --out`).
    Plans(&'a [ReplayPlan; 2]),
    /// An IF that could not be repaired (step not in the trace, empty correction), with why.
    Skipped(&'a str),
}

/// What [`repair_scanned`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepairSummary {
    /// Replay plans produced (two per repaired IF).
    pub plans: usize,
    /// IFs skipped.
    pub skipped: usize,
    /// Ids of scanned traces that were not among the traces given.
    pub unmatched_scans: Vec<String>,
    pub usage: Usage,
}

/// For each trace (in order) with a scan, repair its counted IFs (listings 5-6) and hand each
/// matched no-op / fix pair to `on_event` as it is made. An error of `on_event` (e.g. writing
/// the output) stops the run; so does a model error.
pub async fn repair_scanned(
    model: &dyn ChatModel,
    traces: &[Trace],
    scans: &[TraceScan],
    opts: &RepairOptions,
    mut on_event: impl FnMut(RepairEvent<'_>) -> std::io::Result<()>,
) -> Result<RepairSummary, ImplicitError> {
    let by_id: HashMap<&str, &TraceScan> = scans.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut summary = RepairSummary::default();
    for t in traces {
        let Some(scan) = by_id.get(t.id.as_str()) else {
            continue;
        };
        let events = scan
            .events
            .iter()
            .take(opts.max_per_trace.unwrap_or(usize::MAX));
        for (i, e) in events.enumerate() {
            let (plans, usage) = repair_event(model, t, i, e, &opts.config).await?;
            summary.usage += usage;
            match plans {
                Ok(pair) => {
                    on_event(RepairEvent::Plans(&pair))?;
                    summary.plans += pair.len();
                }
                Err(why) => {
                    on_event(RepairEvent::Skipped(&why))?;
                    summary.skipped += 1;
                }
            }
        }
    }
    let ids: HashSet<&str> = traces.iter().map(|t| t.id.as_str()).collect();
    summary.unmatched_scans = scans
        .iter()
        .filter(|s| !ids.contains(s.id.as_str()))
        .map(|s| s.id.clone())
        .collect();
    Ok(summary)
}

// ---------------------------------------------------------------------------------------------
// replay-stats and advantages

/// Replay statistics settings (the `maslens replay-stats` flags).
#[derive(Debug, Clone)]
pub struct ReplayStatsOptions {
    /// Bootstrap resamples.
    pub resamples: usize,
    pub seed: u64,
}

impl Default for ReplayStatsOptions {
    fn default() -> Self {
        ReplayStatsOptions {
            resamples: maslens_eval::stats::DEFAULT_RESAMPLES,
            seed: 0,
        }
    }
}

/// SPR, RR and delta-RR per configuration from JSONL replay outcomes (`name` names the input in
/// warnings). Unreadable lines, interventions other than `noop` / `fix`, and traces without a
/// matched pair are warnings.
pub fn replay_stats_from_jsonl(
    name: &str,
    reader: impl BufRead,
    opts: &ReplayStatsOptions,
) -> Result<WithWarnings<Vec<ConfigStats>>, ImplicitError> {
    let rows = read_jsonl::<ReplayOutcome>(name, reader, "", |r| {
        if r.intervention == "noop" || r.intervention == "fix" {
            Ok(())
        } else {
            Err(format!(
                "field intervention: {:?} is not noop or fix",
                r.intervention
            ))
        }
    })?;
    let mut warnings = rows.warnings;
    let stats =
        replay_stats(&rows.value, opts.resamples, opts.seed).map_err(ImplicitError::Input)?;
    for s in &stats {
        if !s.unmatched_traces.is_empty() {
            warnings.push(format!(
                "config {}: {} trace(s) lack a matched noop/fix pair and were left out: {}",
                s.config,
                s.unmatched_traces.len(),
                s.unmatched_traces.join(", ")
            ));
        }
    }
    Ok(WithWarnings {
        value: stats,
        warnings,
    })
}

/// IF-GRPO advantages of JSONL lines `{"group","id","success":bool,"if_cost":number}`, in input
/// order (`name` names the input in warnings). Unreadable lines and non-finite costs are
/// warnings and left out.
pub fn advantages_from_jsonl(
    name: &str,
    reader: impl BufRead,
) -> Result<WithWarnings<Vec<AdvantageOutput>>, ImplicitError> {
    let hint = r#" (expected {"group","id","success":bool,"if_cost":number})"#;
    let inputs = read_jsonl::<AdvantageInput>(name, reader, hint, |x| {
        if x.if_cost.is_finite() {
            Ok(())
        } else {
            Err(format!(
                "field if_cost: {} is not a finite number (id {:?})",
                x.if_cost, x.id
            ))
        }
    })?;
    let value =
        if_grpo_advantages(&inputs.value).map_err(|e| ImplicitError::Input(e.to_string()))?;
    Ok(WithWarnings {
        value,
        warnings: inputs.warnings,
    })
}

#[cfg(test)]
mod tests;
