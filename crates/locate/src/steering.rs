//! Steering checks of a locate verdict: the text of its trace that tried to steer the Judge or
//! the Evaluators ([`maslens_render::steering`]), and for each piece whether the verdict did
//! what it asked (named the step or agent it asked for, or abstained over the out-of-range step
//! it asked for). The verdict itself is not changed: `steering` says "check this one by hand",
//! and `maslens locate` exits 1 when a trace tried.

use crate::LocateVerdict;
use maslens_render::steering::{detect, mark_location};
pub use maslens_render::steering::{SteeringHit, SteeringKind};
use maslens_trace::Trace;

/// The steering hits of `trace`, each marked followed or not by `verdict`.
pub fn check(trace: &Trace, verdict: &LocateVerdict) -> Vec<SteeringHit> {
    let mut hits = detect(trace);
    if hits.is_empty() {
        return hits;
    }
    let refused = refused_steps(verdict);
    mark_location(&mut hits, verdict.step, verdict.agent.as_deref(), &refused);
    hits
}

/// The steps the Judge or an Evaluator answered that were refused for not being in the trace
/// (or not among the steps shown): read from their abstention reasons (`step 99 is not ...`).
fn refused_steps(verdict: &LocateVerdict) -> Vec<i64> {
    let reasons = verdict
        .judge
        .iter()
        .map(|j| &j.finding)
        .chain(verdict.evaluators.iter().map(|e| &e.finding))
        .filter_map(|f| f.abstain_reason.as_deref())
        .chain(verdict.abstain_reason.as_deref());
    let mut steps = Vec::new();
    for reason in reasons {
        let mut rest = reason;
        while let Some(at) = rest.find("step ") {
            let after = &rest[at + 5..];
            let digits: String = after
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            let tail = &after[digits.len()..];
            if tail.starts_with(" is not") {
                if let Ok(n) = digits.parse::<i64>() {
                    steps.push(n);
                }
            }
            rest = after;
        }
    }
    steps.sort_unstable();
    steps.dedup();
    steps
}
