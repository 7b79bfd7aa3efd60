//! The prior model: standardized per-step features, an L2-regularized logistic regression
//! trained with `smartcore` (decisive step = 1, every other step = 0), and per-trace
//! normalization of the step scores into a distribution (softmax over the trace's logits).

use crate::features::{extract, StepFeatures, F, FEATURE_NAMES};
pub use crate::head::LinearHead;
use crate::PriorError;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
pub use train::RowCache;

mod train;

/// Format tag written in every model file.
pub const MODEL_FORMAT: &str = "maslens-prior/v1";

/// How step probabilities become an agent-level answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentAggregation {
    /// An agent's probability is the sum of its steps' probabilities.
    #[default]
    Sum,
    /// An agent's probability is its best step's probability (the agent of the top step wins).
    Max,
}

/// How [`PriorModel::predict`] turns the two heads into one (agent, step) answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairRule {
    /// The most probable agent, then that agent's most probable step: the agent always acts
    /// at the step, but a wrong agent drags the step answer with it.
    #[default]
    AgentFirst,
    /// Each question answered by its own head: the agent head's most probable agent and the
    /// step head's most probable step. Who&When scores agent and step accuracy separately, and
    /// each head is better at its own question; the agent need not act at the step.
    Independent,
}

impl PairRule {
    /// Its name on the command line and in reports (`agent-first`, `independent`).
    pub fn name(self) -> &'static str {
        match self {
            PairRule::AgentFirst => "agent-first",
            PairRule::Independent => "independent",
        }
    }
}

/// How a head's weights are fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Binary logistic regression over all rows (smartcore `LogisticRegression`): every row is
    /// an independent positive/negative example.
    #[default]
    Pointwise,
    /// Conditional logit: a softmax over the rows of one trace (its steps, or its agents), the
    /// likelihood of the labelled row(s) maximized, so each trace weighs the same whatever its
    /// length and the model learns what sets the decisive row apart *within* its trace. The
    /// loss is written here, the optimizer is smartcore's LBFGS.
    Listwise,
}

/// Training options.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// L2 penalty on the (standardized) weights: `0.5 * alpha * |w|^2` added to the summed
    /// loss (log-loss over rows for [`Objective::Pointwise`], over traces for
    /// [`Objective::Listwise`]).
    pub alpha: f64,
    /// L2 penalty of the agent head (default: `alpha`).
    pub agent_alpha: Option<f64>,
    /// Objective of the step head.
    pub objective: Objective,
    /// Objective of the agent head.
    pub agent_objective: Objective,
    /// Agent-level aggregation stored in the model.
    pub agent_aggregation: AgentAggregation,
    /// Seed of the inner fold split (agent head) and of the cross-validation folds; the
    /// learner itself (LBFGS) is deterministic.
    pub seed: u64,
    /// How `predict` combines the heads.
    pub pair_rule: PairRule,
    /// Fit the agent head (else agents are ranked by `agent_aggregation`).
    pub agent_head: bool,
    /// Inner folds used to cross-fit step probabilities for the agent head.
    pub inner_folds: usize,
    /// Step features held at zero during training (ablations): their weights come out 0, so
    /// the model ignores them when scoring.
    pub exclude_features: Vec<String>,
    /// What training does with the fault-injected traces (`Trace::is_injected`, docs/inject.md)
    /// among those given; model selection can choose ([`crate::eval::with_injected_choice`]).
    pub injected: InjectedUse,
}

/// How a training uses the fault-injected traces among those it is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InjectedUse {
    /// Both heads, like any trace with a decisive label.
    #[default]
    BothHeads,
    /// The agent head only (the injected agent as the faulty one, like Aegis's agent-level
    /// labels): the step head never sees them.
    AgentHead,
    /// Not at all.
    Unused,
}

impl InjectedUse {
    /// What a candidate's name says about it (empty for [`InjectedUse::BothHeads`]).
    pub fn suffix(self) -> &'static str {
        match self {
            InjectedUse::BothHeads => "",
            InjectedUse::AgentHead => " injected for agents only",
            InjectedUse::Unused => " without injected",
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            alpha: 150.0,
            agent_alpha: Some(50.0),
            objective: Objective::Pointwise,
            agent_objective: Objective::Pointwise,
            agent_aggregation: AgentAggregation::Sum,
            pair_rule: PairRule::Independent,
            seed: 7,
            agent_head: true,
            inner_folds: 5,
            exclude_features: Vec::new(),
            injected: InjectedUse::BothHeads,
        }
    }
}

/// What the model was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingInfo {
    /// Labelled traces used.
    pub traces: usize,
    /// Step rows used.
    pub steps: usize,
    /// Traces skipped (no usable label, or decisive step out of range).
    pub skipped: usize,
    /// Traces with faulty-agent labels only (Aegis), used by the agent head alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agent_only_traces: usize,
    /// Fault-injected traces trained on (docs/inject.md); absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub injected_traces: usize,
    /// Which heads the injected traces trained (absent: both, or none were given).
    #[serde(default, skip_serializing_if = "is_both_heads")]
    pub injected_use: InjectedUse,
    pub alpha: f64,
    /// L2 weight of the agent head (absent: `alpha`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_alpha: Option<f64>,
    /// Objectives of the step and agent heads (absent in older files: pointwise).
    #[serde(default)]
    pub objective: Objective,
    #[serde(default)]
    pub agent_objective: Objective,
    pub seed: u64,
    /// Step features held at zero in training (the `compact` feature set holds out the second
    /// round's); absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_features: Vec<String>,
    /// Free text: data, command, metrics (written by the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The content hash ([`maslens_eval::run::steps_sha256`]) of every trace the model was
    /// trained on, sorted, so that an evaluation on them can say it is in-sample (files from
    /// before this field, and the built-in model, whose list ships beside it: absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_sha256: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_both_heads(u: &InjectedUse) -> bool {
    *u == InjectedUse::BothHeads
}

/// A trained prior: everything needed to score a trace, as plain numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorModel {
    pub format: String,
    /// Step head: decisive step vs other steps, over [`FEATURE_NAMES`].
    pub step: LinearHead,
    /// Agent head: responsible agent vs other acting agents, over [`AGENT_FEATURE_NAMES`].
    /// When absent, agents are ranked by `agent_aggregation` of the step probabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<LinearHead>,
    #[serde(default)]
    pub agent_aggregation: AgentAggregation,
    /// How `predict` combines the heads (files without it: agent first).
    #[serde(default)]
    pub pair_rule: PairRule,
    pub training: TrainingInfo,
}

/// One ranked (agent, step) candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The agent acting at the step.
    pub agent: String,
    pub step: usize,
    /// The model's logit for the step.
    pub score: f64,
    /// Probability over the trace's steps (all candidates of a trace sum to 1).
    pub prob: f64,
}

/// Names of the agent-head features, in row order (see `docs/prior.md`).
pub const AGENT_FEATURE_NAMES: &[&str] = &[
    "log_step_mass",
    "holds_top_step",
    "is_first_actor",
    "is_last_actor",
    "share",
    "log_turns",
    "kind_worker",
    "kind_orchestrator",
    "kind_tool",
    "kind_human",
    "role_verifier",
    "role_planner",
    "role_coder",
    "role_retriever",
    "first_turn_pos",
    "last_turn_pos",
    "mean_error_words",
    "any_code_block",
    "mean_assume_words",
    "mean_novel_numbers",
    "mean_hedge_words",
    "log_max_step_prob",
    "first_actor_x_len",
    "last_actor_x_len",
    "orchestrator_x_len",
    "share_x_len",
    "origin_final_numbers",
    "origin_final_words",
];

/// Agent-head rows of one trace: one row per acting agent (first appearance order), built
/// from the trace's step feature rows and the step head's probabilities.
pub fn agent_rows(trace: &Trace, rows: &[StepFeatures], probs: &[f64]) -> Vec<(String, Vec<f64>)> {
    let top = argmax(probs);
    let mut order: Vec<&str> = Vec::new();
    let mut steps_of: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in trace.steps.iter().enumerate() {
        steps_of
            .entry(s.agent.as_str())
            .or_insert_with(|| {
                order.push(s.agent.as_str());
                Vec::new()
            })
            .push(i);
    }
    let n = trace.steps.len().max(1) as f64;
    let len_factor = n.ln_1p();
    let col = |f: F| f as usize;
    order
        .iter()
        .map(|a| {
            let idx = steps_of.get(a).cloned().unwrap_or_default();
            let k = idx.len().max(1) as f64;
            let first = idx.first().copied().unwrap_or(0);
            let last = idx.last().copied().unwrap_or(0);
            let mass: f64 = idx
                .iter()
                .map(|&i| probs.get(i).copied().unwrap_or(0.0))
                .sum();
            let mean_of = |f: F| idx.iter().map(|&i| rows[i][col(f)]).sum::<f64>() / k;
            let sum_of = |f: F| idx.iter().map(|&i| rows[i][col(f)]).sum::<f64>();
            let max_of = |f: F| idx.iter().map(|&i| rows[i][col(f)]).fold(0.0, f64::max);
            let r = &rows[first];
            let row = vec![
                mass.max(1e-6).ln(),
                f64::from(u8::from(top.is_some_and(|t| idx.contains(&t)))),
                r[col(F::AgentIsFirstActor)],
                r[col(F::AgentIsLastActor)],
                idx.len() as f64 / n,
                (idx.len() as f64).ln_1p(),
                r[col(F::KindWorker)],
                r[col(F::KindOrchestrator)],
                r[col(F::KindTool)],
                r[col(F::KindHuman)],
                r[col(F::RoleVerifier)],
                r[col(F::RolePlanner)],
                r[col(F::RoleCoder)],
                r[col(F::RoleRetriever)],
                rows[first][col(F::PosRel)],
                rows[last][col(F::PosRel)],
                mean_of(F::ErrorWords),
                max_of(F::CodeBlock),
                mean_of(F::AssumeWords),
                mean_of(F::NovelNumbers),
                mean_of(F::HedgeWords),
                idx.iter()
                    .map(|&i| probs.get(i).copied().unwrap_or(0.0))
                    .fold(1e-6, f64::max)
                    .ln(),
                r[col(F::AgentIsFirstActor)] * len_factor,
                r[col(F::AgentIsLastActor)] * len_factor,
                r[col(F::KindOrchestrator)] * len_factor,
                idx.len() as f64 / n * len_factor,
                sum_of(F::OriginFinalNumbers),
                sum_of(F::OriginFinalWords),
            ];
            (a.to_string(), row)
        })
        .collect()
}

fn head_distribution(head: &LinearHead, rows: &[StepFeatures]) -> Vec<f64> {
    softmax(&rows.iter().map(|r| head.logit(r)).collect::<Vec<_>>())
}

impl PriorModel {
    /// Parse a model from JSON text; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<PriorModel, PriorError> {
        let model: PriorModel =
            serde_json::from_str(text).map_err(|source| PriorError::ModelParse {
                origin: origin.to_string(),
                source,
            })?;
        model.check().map_err(|what| PriorError::ModelInvalid {
            origin: origin.to_string(),
            what,
        })?;
        Ok(model)
    }

    /// Load a model file written by [`PriorModel::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<PriorModel, PriorError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PriorError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Write the model as pretty JSON.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), PriorError> {
        let path = path.as_ref();
        maslens_eval::atomic::write_atomic(path, self.to_json().as_bytes()).map_err(|source| {
            PriorError::Io {
                path: path.display().to_string(),
                source,
            }
        })
    }

    /// Pretty JSON of the model.
    pub fn to_json(&self) -> String {
        // Serializing plain numbers, strings and enums cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    fn check(&self) -> Result<(), String> {
        if self.format != MODEL_FORMAT {
            return Err(format!(
                "field `format` is {:?}, expected {MODEL_FORMAT:?}",
                self.format
            ));
        }
        self.step.check(FEATURE_NAMES, "step")?;
        if let Some(a) = &self.agent {
            a.check(AGENT_FEATURE_NAMES, "agent")?;
        }
        Ok(())
    }

    /// Logits of every step.
    pub fn step_scores(&self, trace: &Trace) -> Vec<f64> {
        extract(trace).iter().map(|r| self.step.logit(r)).collect()
    }

    /// Probability of each step being the decisive one (softmax over the trace's logits;
    /// sums to 1; empty for a trace without steps).
    pub fn step_distribution(&self, trace: &Trace) -> Vec<f64> {
        softmax(&self.step_scores(trace))
    }

    fn agents_from(
        &self,
        trace: &Trace,
        rows: &[StepFeatures],
        probs: &[f64],
    ) -> Vec<(String, f64)> {
        match &self.agent {
            Some(head) => {
                let ar = agent_rows(trace, rows, probs);
                let p = softmax(&ar.iter().map(|(_, r)| head.logit(r)).collect::<Vec<_>>());
                let mut out: Vec<(usize, String, f64)> = ar
                    .into_iter()
                    .zip(p)
                    .enumerate()
                    .map(|(i, ((a, _), p))| (i, a, p))
                    .collect();
                out.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
                out.into_iter().map(|(_, a, p)| (a, p)).collect()
            }
            None => aggregate_agents(trace, probs, self.agent_aggregation),
        }
    }

    /// Probability per acting agent (agent head, else aggregation of step probabilities),
    /// best first; sums to 1.
    pub fn agent_distribution(&self, trace: &Trace) -> Vec<(String, f64)> {
        let rows = extract(trace);
        let probs = head_distribution(&self.step, &rows);
        self.agents_from(trace, &rows, &probs)
    }

    /// Every (agent, step) candidate, most probable first (ties: earlier step first).
    pub fn rank(&self, trace: &Trace) -> Vec<Candidate> {
        let scores = self.step_scores(trace);
        let probs = softmax(&scores);
        let mut out: Vec<Candidate> = trace
            .steps
            .iter()
            .zip(scores.iter().zip(&probs))
            .map(|(s, (score, prob))| Candidate {
                agent: s.agent.clone(),
                step: s.index,
                score: *score,
                prob: *prob,
            })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.step.cmp(&b.step)));
        out
    }

    /// Steps an LLM judge should read in full when the trace does not fit its window: the
    /// `top` most probable steps, each with `context` neighbouring steps on either side, as
    /// sorted, distinct positions into `trace.steps`. The others can be shown summarized.
    pub fn focus_steps(&self, trace: &Trace, top: usize, context: usize) -> Vec<usize> {
        let n = trace.steps.len();
        let probs = self.step_distribution(trace);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| probs[*b].total_cmp(&probs[*a]).then(a.cmp(b)));
        let mut keep = vec![false; n];
        for &i in order.iter().take(top) {
            for k in &mut keep[i.saturating_sub(context)..(i + context + 1).min(n)] {
                *k = true;
            }
        }
        (0..n).filter(|i| keep[*i]).collect()
    }

    /// The predicted (agent, step) under the model's [`PairRule`]: agent first (the most
    /// probable agent, then its most probable step; the agent acts at the step) or
    /// independent (the agent head's best agent and the step head's best step; the agent need
    /// not act at the step). `None` for a trace without steps.
    pub fn predict(&self, trace: &Trace) -> Option<(String, usize)> {
        self.predict_with(trace, self.pair_rule)
    }

    /// [`PriorModel::predict`] under a given pair rule.
    pub fn predict_with(&self, trace: &Trace, rule: PairRule) -> Option<(String, usize)> {
        let rows = extract(trace);
        let probs = head_distribution(&self.step, &rows);
        let agent = self.agents_from(trace, &rows, &probs).into_iter().next()?.0;
        if rule == PairRule::Independent {
            let step = argmax(&probs)?;
            return Some((agent, trace.steps[step].index));
        }
        let own: Vec<f64> = probs
            .iter()
            .zip(&trace.steps)
            .map(|(p, s)| if s.agent == agent { *p } else { -1.0 })
            .collect();
        let step = argmax(&own)?;
        Some((agent, trace.steps[step].index))
    }
}

/// Index of the largest value (first one on ties).
pub fn argmax(xs: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, x) in xs.iter().enumerate() {
        match best {
            Some(b) if xs[b] >= *x => {}
            _ => best = Some(i),
        }
    }
    best
}

/// Numerically stable softmax.
pub fn softmax(xs: &[f64]) -> Vec<f64> {
    let Some(max) = xs.iter().copied().max_by(f64::total_cmp) else {
        return Vec::new();
    };
    let exps: Vec<f64> = xs.iter().map(|x| (x - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / total).collect()
}

/// Per-agent probabilities from step probabilities, best first (ties by first appearance).
pub fn aggregate_agents(trace: &Trace, probs: &[f64], how: AgentAggregation) -> Vec<(String, f64)> {
    let mut order: Vec<&str> = Vec::new();
    let mut acc: HashMap<&str, f64> = HashMap::new();
    for (s, p) in trace.steps.iter().zip(probs) {
        let e = acc.entry(s.agent.as_str()).or_insert_with(|| {
            order.push(s.agent.as_str());
            0.0
        });
        match how {
            AgentAggregation::Sum => *e += p,
            AgentAggregation::Max => *e = e.max(*p),
        }
    }
    let mut out: Vec<(usize, String, f64)> = order
        .iter()
        .enumerate()
        .map(|(i, a)| (i, a.to_string(), acc.get(a).copied().unwrap_or(0.0)))
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    out.into_iter().map(|(_, a, p)| (a, p)).collect()
}

#[cfg(test)]
pub(crate) mod tests;
