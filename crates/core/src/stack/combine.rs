//! The combination: the pipeline's ballots and the prior's distributions scored per step and per agent.

use super::*;
use maslens_locate::{Finding, LocateVerdict};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};

/// The prior's view of one trace: its step distribution (by position) and its agent-level
/// distribution (best first; empty: from the step distribution).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriorView {
    pub steps: Vec<f64>,
    pub agents: Vec<(String, f64)>,
}

/// Where a stacked answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StackSource {
    /// Ballots and prior combined.
    Stack,
    /// No usable ballot: the prior alone (the model abstained or answered incoherently).
    PriorFallback,
    /// No prior distribution for the trace: the ballots alone.
    LlmOnly,
    /// Neither: no answer.
    None,
}

/// A stacked answer: the agent-level and the step-level answer, chosen apart.
#[derive(Debug, Clone, PartialEq)]
pub struct StackAnswer {
    pub agent: Option<String>,
    /// Step index (as in the trace).
    pub step: Option<usize>,
    /// Every step best first with its stacked probability (`step` is the first).
    pub ranked_steps: Vec<(usize, f64)>,
    pub step_source: StackSource,
    pub agent_source: StackSource,
}

/// The ballots of a verdict: the Judge's finding and the Evaluators', with their weights'
/// roles (`true`: the Judge).
pub(crate) fn ballots(v: &LocateVerdict) -> Vec<(bool, &Finding)> {
    v.judge
        .iter()
        .map(|j| (true, &j.finding))
        .chain(v.evaluators.iter().map(|e| (false, &e.finding)))
        .filter(|(_, f)| f.location().is_some())
        .collect()
}

pub(crate) fn ln(p: f64) -> f64 {
    p.max(1e-9).ln()
}

/// Combine a pipeline verdict (or none: the pipeline failed) with the prior's view of the trace.
pub fn combine(
    trace: &Trace,
    verdict: Option<&LocateVerdict>,
    prior: Option<&PriorView>,
    w: &StackWeights,
) -> StackAnswer {
    let n = trace.steps.len();
    let all = verdict.map(ballots).unwrap_or_default();
    let usable = |l: &LevelWeights| -> Vec<(bool, &Finding)> {
        all.iter()
            .copied()
            .filter(|(_, f)| !(l.drop_incoherent && f.agent_mismatch))
            .collect()
    };
    let source = |has_ballots: bool| match (has_ballots, prior.is_some()) {
        (true, true) => StackSource::Stack,
        (false, true) => StackSource::PriorFallback,
        (true, false) => StackSource::LlmOnly,
        (false, false) => StackSource::None,
    };
    let weight = |l: &LevelWeights, judge: bool, f: &Finding| {
        if judge {
            l.judge
        } else {
            l.evaluators * f.confidence.clamp(0.0, 1.0)
        }
    };

    // step level
    let sb = usable(&w.step);
    let steps_prior: Option<&[f64]> = prior.map(|p| p.steps.as_slice()).filter(|p| p.len() == n);
    let mut step_score: Vec<f64> = match steps_prior {
        Some(p) => p.iter().map(|&x| ln(x)).collect(),
        None => vec![0.0; n],
    };
    for (judge, f) in &sb {
        if let Some(pos) = f.step.and_then(|s| trace.position_of(s)) {
            step_score[pos] += weight(&w.step, *judge, f);
        }
    }
    let step_src = source(!sb.is_empty());
    let ranked_steps = if step_src == StackSource::None || n == 0 {
        Vec::new()
    } else {
        ranked_by_score(trace, &step_score, steps_prior)
    };
    let step = ranked_steps.first().map(|(s, _)| *s);

    // agent level
    let ab = usable(&w.agent);
    let mut agents: Vec<String> = Vec::new();
    for s in &trace.steps {
        if !agents.contains(&s.agent) {
            agents.push(s.agent.clone());
        }
    }
    let agent_prior: Option<Vec<f64>> = prior.map(|p| {
        if p.agents.is_empty() {
            // from the step distribution: each agent's summed step probability
            agents
                .iter()
                .map(|a| {
                    trace
                        .steps
                        .iter()
                        .zip(&p.steps)
                        .filter(|(s, _)| &s.agent == a)
                        .map(|(_, q)| q)
                        .sum()
                })
                .collect()
        } else {
            agents
                .iter()
                .map(|a| {
                    p.agents
                        .iter()
                        .find(|(b, _)| b == a)
                        .map_or(0.0, |(_, q)| *q)
                })
                .collect()
        }
    });
    let mut agent_score: Vec<f64> = match &agent_prior {
        Some(q) => q.iter().map(|&x| ln(x)).collect(),
        None => vec![0.0; agents.len()],
    };
    for (judge, f) in &ab {
        if let Some(i) = f
            .agent
            .as_deref()
            .and_then(|a| agents.iter().position(|b| b == a))
        {
            agent_score[i] += weight(&w.agent, *judge, f);
        }
    }
    let agent_src = source(!ab.is_empty());
    let agent = if agent_src == StackSource::None {
        None
    } else {
        let tie = |i: usize| agent_prior.as_ref().map_or(0.0, |q| q[i]);
        (0..agents.len())
            .max_by(|&a, &b| {
                agent_score[a]
                    .total_cmp(&agent_score[b])
                    .then(tie(a).total_cmp(&tie(b)))
                    .then(b.cmp(&a))
            })
            .map(|i| agents[i].clone())
    };
    StackAnswer {
        agent,
        step,
        ranked_steps,
        step_source: step_src,
        agent_source: agent_src,
    }
}

/// Steps (source indices) best first by `score` (ties: the prior's probability, then the earlier
/// step), each with its probability under the log-linear model `softmax(score)`.
pub(crate) fn ranked_by_score(
    trace: &Trace,
    score: &[f64],
    prior: Option<&[f64]>,
) -> Vec<(usize, f64)> {
    let tie = |i: usize| prior.map_or(0.0, |p| p[i]);
    let mut order: Vec<usize> = (0..score.len()).collect();
    order.sort_by(|&a, &b| {
        score[b]
            .total_cmp(&score[a])
            .then(tie(b).total_cmp(&tie(a)))
            .then(a.cmp(&b))
    });
    let top = order.first().map_or(0.0, |&p| score[p]);
    let weights: Vec<f64> = score.iter().map(|x| (x - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    order
        .into_iter()
        .map(|p| (trace.steps[p].index, weights[p] / total))
        .collect()
}
