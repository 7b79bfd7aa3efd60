//! Failure cases from trace files (`maslens modes FILES`, `maslens.modes(traces)`): a trace
//! written by `maslens locate -o` carries its verdicts in `labels.verdicts`; the latest one
//! is its localization. Implicit failures come from `labels.implicit`, most severe first.

use maslens_trace::{Outcome, Trace};

use super::FailureCase;
use crate::CoreError;

/// The outcomes a selection accepts: `failure`, `unknown`, `success`, or `any` (every trace with
/// a localization).
pub const OUTCOMES: &[&str] = &["failure", "unknown", "success", "any"];

/// What the grouping needs of one trace (gold agent only when `gold`).
pub fn case_of_trace(trace: &Trace, gold: bool) -> FailureCase {
    let verdict = trace.labels.verdicts.last();
    let mut implicit: Vec<_> = trace.labels.implicit.iter().collect();
    implicit.sort_by(|a, b| {
        let sev = |s: Option<f64>| s.unwrap_or(0.0);
        sev(b.severity).total_cmp(&sev(a.severity))
    });
    let mut failure_types: Vec<String> = Vec::new();
    for i in implicit {
        if !failure_types.contains(&i.error_type) {
            failure_types.push(i.error_type.clone());
        }
    }
    FailureCase {
        run: trace.id.clone(),
        system: (!trace.source.format.is_empty()).then(|| trace.source.format.clone()),
        time_ns: None,
        agent: verdict.and_then(|v| v.agent.clone()),
        step: verdict.and_then(|v| v.step),
        failure_types,
        reason: verdict
            .and_then(|v| v.rationale.clone().or_else(|| v.abstain_reason.clone()))
            .unwrap_or_default(),
        gold_agent: if gold {
            trace.gold().and_then(|g| g.agent)
        } else {
            None
        },
        in_sample: gold && crate::in_sample::trained_on(trace),
    }
}

/// Which traces [`of_traces`] groups.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// One of [`OUTCOMES`].
    pub outcome: String,
    /// Only traces of this system (`Trace.source.format`).
    pub system: Option<String>,
    /// Read gold decisive agents (for purity).
    pub gold: bool,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            outcome: "failure".into(),
            system: None,
            gold: false,
        }
    }
}

/// The modes of the traces `selection` picks (what `maslens modes FILES` and `maslens.modes`
/// report); a note says how many carry no verdict.
pub fn of_traces(
    traces: &[Trace],
    selection: &Selection,
    options: super::ModesOptions,
) -> Result<super::ModesReport, CoreError> {
    let options = options.checked()?;
    let picked: Vec<Trace> = traces
        .iter()
        .filter(|t| {
            selection
                .system
                .as_ref()
                .is_none_or(|s| &t.source.format == s)
        })
        .cloned()
        .collect();
    let cases = cases_of_traces(&picked, &selection.outcome, selection.gold)?;
    let mut report = super::group(&cases, options);
    let by_run: std::collections::HashMap<&str, &Trace> =
        picked.iter().map(|t| (t.id.as_str(), t)).collect();
    crate::improve::propose::mark(&mut report, |run| by_run.get(run).copied());
    let unlocated = cases.iter().filter(|c| c.agent.is_none()).count();
    if unlocated > 0 {
        report.notes.push(format!(
            "{unlocated} of {} traces carry no verdict (locate them first: `maslens locate -o \
             FILE`, or `maslens.modes(traces, verdicts)`)",
            cases.len()
        ));
    }
    Ok(report)
}

/// The traces of `outcome` as failure cases, in input order.
pub fn cases_of_traces(
    traces: &[Trace],
    outcome: &str,
    gold: bool,
) -> Result<Vec<FailureCase>, CoreError> {
    let wanted = match outcome {
        "failure" => Some(Outcome::Failure),
        "unknown" => Some(Outcome::Unknown),
        "success" => Some(Outcome::Success),
        "any" => None,
        other => {
            return Err(CoreError::Invalid(format!(
                "outcome {other:?}: expected one of {}",
                OUTCOMES.join(", ")
            )))
        }
    };
    Ok(traces
        .iter()
        .filter(|t| match wanted {
            Some(o) => t.outcome == o,
            None => !t.labels.verdicts.is_empty(),
        })
        .map(|t| case_of_trace(t, gold))
        .collect())
}
