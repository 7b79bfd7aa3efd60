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

/// A labelled trace with its feature rows.
struct Prepared<'a> {
    trace: &'a Trace,
    rows: Vec<StepFeatures>,
    step: usize,
    agent: &'a str,
}

/// Feature rows of a set of traces, extracted once and reused by the many trainings of one
/// protocol run (selection, nested cross-validation): feature extraction, not the fit, dominates
/// a training. Keyed by the borrowed trace's address, which cannot change or be reused while the
/// cache borrows the traces.
pub struct RowCache<'a> {
    rows: HashMap<usize, Vec<StepFeatures>>,
    _traces: std::marker::PhantomData<&'a Trace>,
}

impl<'a> RowCache<'a> {
    /// Extract the rows of every trace.
    pub fn new(traces: &[&'a Trace]) -> RowCache<'a> {
        RowCache {
            rows: traces
                .iter()
                .map(|t| (*t as *const Trace as usize, extract(t)))
                .collect(),
            _traces: std::marker::PhantomData,
        }
    }

    /// An empty cache (every lookup extracts).
    pub fn empty() -> RowCache<'a> {
        RowCache {
            rows: HashMap::new(),
            _traces: std::marker::PhantomData,
        }
    }

    /// The rows of `t`: cached, else extracted now.
    pub fn rows(&self, t: &Trace) -> Vec<StepFeatures> {
        match self.rows.get(&(t as *const Trace as usize)) {
            Some(r) => r.clone(),
            None => extract(t),
        }
    }
}

fn prepare<'a>(
    traces: &[&'a Trace],
    exclude: &[String],
    cache: &RowCache,
) -> (Vec<Prepared<'a>>, usize) {
    let drop: Vec<usize> = FEATURE_NAMES
        .iter()
        .enumerate()
        .filter(|(_, n)| exclude.iter().any(|e| e == *n))
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::new();
    let mut skipped = 0;
    for t in traces {
        let Some(label) = t.labels.decisive.as_ref() else {
            skipped += 1;
            continue;
        };
        if label.step >= t.steps.len() {
            tracing::warn!(
                trace = %t.id,
                step = label.step,
                steps = t.steps.len(),
                "labels.decisive.step is out of range; trace skipped"
            );
            skipped += 1;
            continue;
        }
        let mut rows = cache.rows(t);
        for r in &mut rows {
            for j in &drop {
                r[*j] = 0.0;
            }
        }
        out.push(Prepared {
            trace: t,
            rows,
            step: label.step,
            agent: label.agent.as_str(),
        });
    }
    (out, skipped)
}

fn fit_step_head(data: &[&Prepared], cfg: &TrainConfig) -> Result<LinearHead, PriorError> {
    let groups: Vec<(Vec<Vec<f64>>, Vec<usize>)> = data
        .iter()
        .map(|p| (p.rows.iter().map(|r| r.to_vec()).collect(), vec![p.step]))
        .collect();
    fit_head(FEATURE_NAMES, &groups, cfg.alpha, cfg.objective)
}

/// Fit a head on per-trace groups of rows (with the positions of the positive rows) under
/// `objective`.
fn fit_head(
    names: &[&str],
    groups: &[(Vec<Vec<f64>>, Vec<usize>)],
    alpha: f64,
    objective: Objective,
) -> Result<LinearHead, PriorError> {
    match objective {
        Objective::Listwise => LinearHead::fit_listwise(names, groups, alpha),
        Objective::Pointwise => {
            let mut xs = Vec::new();
            let mut ys = Vec::new();
            for (rows, pos) in groups {
                for (i, row) in rows.iter().enumerate() {
                    xs.push(row.clone());
                    ys.push(u32::from(pos.contains(&i)));
                }
            }
            LinearHead::fit(names, &xs, &ys, alpha)
        }
    }
}

fn head_distribution(head: &LinearHead, rows: &[StepFeatures]) -> Vec<f64> {
    softmax(&rows.iter().map(|r| head.logit(r)).collect::<Vec<_>>())
}

impl TrainingInfo {
    /// The training configuration these settings describe (with `pair_rule` and the agent head
    /// as given), to retrain a model from its file.
    pub fn config(&self, pair_rule: PairRule, agent_head: bool) -> TrainConfig {
        TrainConfig {
            alpha: self.alpha,
            agent_alpha: self.agent_alpha,
            objective: self.objective,
            agent_objective: self.agent_objective,
            seed: self.seed,
            pair_rule,
            agent_head,
            exclude_features: self.exclude_features.clone(),
            injected: if self.injected_traces > 0 {
                self.injected_use
            } else {
                InjectedUse::Unused
            },
            ..TrainConfig::default()
        }
    }
}

impl PriorModel {
    /// Train on the labelled traces among `traces` (those with `labels.decisive`).
    ///
    /// The step head is fit on every step row. The agent head (when enabled) is fit on
    /// agent rows whose step-probability features come from step heads cross-fitted over
    /// `inner_folds` folds, so it learns how much to trust out-of-sample step scores.
    pub fn train(traces: &[&Trace], cfg: &TrainConfig) -> Result<PriorModel, PriorError> {
        let alpha = cfg.agent_alpha.unwrap_or(cfg.alpha);
        let mut models = Self::train_agent_variants(traces, cfg, &[alpha])?;
        models
            .pop()
            .ok_or_else(|| PriorError::Train("no model trained".into()))
    }

    /// [`PriorModel::train`] once per agent-head L2 weight in `agent_alphas` (in that order),
    /// sharing everything but the agent head's fit: the step head and the cross-fitted step
    /// probabilities the agent head learns from depend only on the step head's settings. Model
    /// selection over agent weights costs one training instead of one per weight.
    pub fn train_agent_variants(
        traces: &[&Trace],
        cfg: &TrainConfig,
        agent_alphas: &[f64],
    ) -> Result<Vec<PriorModel>, PriorError> {
        Self::train_cached(traces, cfg, agent_alphas, &RowCache::empty())
    }

    /// [`PriorModel::train_agent_variants`] with feature rows from `cache` (the same models).
    pub fn train_cached(
        traces: &[&Trace],
        cfg: &TrainConfig,
        agent_alphas: &[f64],
        cache: &RowCache,
    ) -> Result<Vec<PriorModel>, PriorError> {
        let (injected, traces): (Vec<&Trace>, Vec<&Trace>) =
            traces.iter().copied().partition(|t| t.is_injected());
        let (step_injected, agent_injected) = match cfg.injected {
            InjectedUse::BothHeads => (injected, Vec::new()),
            InjectedUse::AgentHead => (Vec::new(), injected),
            InjectedUse::Unused => (Vec::new(), Vec::new()),
        };
        let traces: Vec<&Trace> = traces.into_iter().chain(step_injected).collect();
        let (data, skipped) = prepare(&traces, &cfg.exclude_features, cache);
        if data.is_empty() {
            return Err(PriorError::Train(format!(
                "no usable labelled traces ({skipped} skipped: no decisive label or step out of range)"
            )));
        }
        let all: Vec<&Prepared> = data.iter().collect();
        let step = fit_step_head(&all, cfg)?;
        // Agent-level training only: (trace, its faulty agents).
        let agent_only: Vec<(&Trace, Vec<&str>)> = if cfg.agent_head {
            traces
                .iter()
                .copied()
                .filter(|t| {
                    t.labels.decisive.is_none()
                        && !t.labels.faulty_agents.is_empty()
                        && !t.steps.is_empty()
                })
                .map(|t| {
                    let faulty = t.labels.faulty_agents.iter().map(|f| f.agent.as_str());
                    (t, faulty.collect())
                })
                .chain(agent_injected.iter().filter_map(|t| {
                    let label = t.labels.decisive.as_ref()?;
                    (!t.steps.is_empty()).then(|| (*t, vec![label.agent.as_str()]))
                }))
                .collect()
        } else {
            Vec::new()
        };
        let agent_injected_used = agent_only.iter().filter(|(t, _)| t.is_injected()).count();
        let injected_step = data.iter().filter(|p| p.trace.is_injected()).count();
        let agent = if cfg.agent_head && data.len() >= 2 * cfg.inner_folds.max(2) {
            let k = cfg.inner_folds.max(2);
            let ts: Vec<&Trace> = data.iter().map(|p| p.trace).collect();
            let folds = crate::eval::fold_assignment(&ts, k, cfg.seed);
            let mut probs: Vec<Vec<f64>> = vec![Vec::new(); data.len()];
            for fold in 0..k {
                let train: Vec<&Prepared> = data
                    .iter()
                    .zip(&folds)
                    .filter(|(_, f)| **f != fold)
                    .map(|(p, _)| p)
                    .collect();
                let head = fit_step_head(&train, cfg)?;
                for (i, p) in data.iter().enumerate() {
                    if folds[i] == fold {
                        probs[i] = head_distribution(&head, &p.rows);
                    }
                }
            }
            let mut groups: Vec<(Vec<Vec<f64>>, Vec<usize>)> = Vec::new();
            for (p, pr) in data.iter().zip(&probs) {
                let ar = agent_rows(p.trace, &p.rows, pr);
                let pos: Vec<usize> = ar
                    .iter()
                    .enumerate()
                    .filter(|(_, (name, _))| name == p.agent)
                    .map(|(i, _)| i)
                    .collect();
                groups.push((ar.into_iter().map(|(_, r)| r).collect(), pos));
            }
            // Agent-level labels only (Aegis faulty agents, injected traces for the agent
            // head): the step head above never saw these traces, so its probabilities are out
            // of sample for them too.
            for (t, faulty) in &agent_only {
                let rows = cache.rows(t);
                let pr = head_distribution(&step, &rows);
                let ar = agent_rows(t, &rows, &pr);
                let pos: Vec<usize> = ar
                    .iter()
                    .enumerate()
                    .filter(|(_, (name, _))| faulty.iter().any(|f| f.eq_ignore_ascii_case(name)))
                    .map(|(i, _)| i)
                    .collect();
                groups.push((ar.into_iter().map(|(_, r)| r).collect(), pos));
            }
            let mut heads = Vec::with_capacity(agent_alphas.len());
            for &alpha in agent_alphas {
                heads.push(Some(fit_head(
                    AGENT_FEATURE_NAMES,
                    &groups,
                    alpha,
                    cfg.agent_objective,
                )?));
            }
            heads
        } else {
            vec![None; agent_alphas.len()]
        };
        Ok(agent
            .into_iter()
            .zip(agent_alphas)
            .map(|(agent, &alpha)| {
                let (agent_used, injected_agent) = if agent.is_some() {
                    (agent_only.len() - agent_injected_used, agent_injected_used)
                } else {
                    (0, 0)
                };
                let agent_alpha = agent.as_ref().map(|_| alpha);
                PriorModel {
                    format: MODEL_FORMAT.to_string(),
                    step: step.clone(),
                    agent,
                    agent_aggregation: cfg.agent_aggregation,
                    pair_rule: cfg.pair_rule,
                    training: TrainingInfo {
                        traces: data.len(),
                        steps: data.iter().map(|p| p.rows.len()).sum(),
                        skipped: skipped - agent_used,
                        agent_only_traces: agent_used,
                        injected_traces: injected_step + injected_agent,
                        injected_use: if injected_agent > 0 {
                            InjectedUse::AgentHead
                        } else {
                            InjectedUse::BothHeads
                        },
                        alpha: cfg.alpha,
                        agent_alpha,
                        objective: cfg.objective,
                        agent_objective: cfg.agent_objective,
                        seed: cfg.seed,
                        exclude_features: cfg.exclude_features.clone(),
                        note: None,
                        trace_sha256: Vec::new(),
                    },
                }
            })
            .collect())
    }

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
pub(crate) mod tests {
    use super::*;
    use maslens_trace::{AgentKind, DecisiveLabel, Step};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Synthetic labelled traces (a fixture, not data): a planner, two workers and a terminal;
    /// the decisive step is the one worker step that introduces a placeholder value and is
    /// followed by a failing terminal output. Position is random, so only content can tell.
    pub(crate) fn synthetic_corpus(n: usize, seed: u64) -> Vec<Trace> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|k| {
                let mut t = Trace::new(format!("synthetic/{k}"));
                t.task = format!("Compute the total revenue of shop {k} in 2021.");
                t.ensure_agent("Planner", AgentKind::Orchestrator);
                t.ensure_agent("Analyst", AgentKind::Worker);
                t.ensure_agent("Reviewer", AgentKind::Worker);
                t.ensure_agent("terminal", AgentKind::Tool);
                let len = rng.gen_range(6..14);
                let bad = rng.gen_range(1..len - 1);
                let mut steps = Vec::new();
                let mut i = 0;
                while i < len {
                    let (agent, content) = if i == bad {
                        (
                            if rng.gen_bool(0.5) {
                                "Analyst"
                            } else {
                                "Reviewer"
                            },
                            format!(
                                "Assume a placeholder revenue of {} as an example.",
                                rng.gen_range(1000..9999)
                            ),
                        )
                    } else if i == bad + 1 {
                        ("terminal", "exitcode: 1 Traceback error".to_string())
                    } else {
                        match rng.gen_range(0..3) {
                            0 => ("Planner", "Please compute the revenue.".to_string()),
                            1 => ("Analyst", "The revenue table looks fine.".to_string()),
                            _ => ("terminal", "exitcode: 0 ok".to_string()),
                        }
                    };
                    steps.push(Step {
                        index: i,
                        agent: agent.into(),
                        content,
                        ..Step::default()
                    });
                    i += 1;
                }
                t.labels.decisive = Some(DecisiveLabel {
                    agent: steps[bad].agent.clone(),
                    step: bad,
                    reason: None,
                });
                t.steps = steps;
                t
            })
            .collect()
    }

    /// At least 36 of the 40 held-out synthetic traces right at step and at agent level.
    fn assert_predicts_held_out(m: &PriorModel, test: &[Trace]) {
        let (mut step_ok, mut agent_ok) = (0, 0);
        for t in test {
            let label = t.labels.decisive.as_ref().unwrap();
            let (a, s) = m.predict(t).unwrap();
            step_ok += usize::from(s == label.step);
            agent_ok += usize::from(a == label.agent);
        }
        assert!(step_ok >= 36, "step {step_ok}/40");
        assert!(agent_ok >= 36, "agent {agent_ok}/40");
    }

    #[test]
    fn learns_a_content_signal_and_generalizes() {
        let train = synthetic_corpus(60, 1);
        let test = synthetic_corpus(40, 2);
        let refs: Vec<&Trace> = train.iter().collect();
        let cfg = TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        };
        let m = PriorModel::train(&refs, &cfg).unwrap();
        assert!(m.agent.is_some());
        assert_predicts_held_out(&m, &test);
    }

    #[test]
    fn listwise_objective_learns_the_signal_too() {
        let train = synthetic_corpus(60, 11);
        let test = synthetic_corpus(40, 12);
        let refs: Vec<&Trace> = train.iter().collect();
        let cfg = TrainConfig {
            alpha: 1.0,
            objective: Objective::Listwise,
            agent_objective: Objective::Listwise,
            ..TrainConfig::default()
        };
        let m = PriorModel::train(&refs, &cfg).unwrap();
        assert_eq!(
            m.step.intercept, 0.0,
            "a conditional logit has no intercept"
        );
        assert_predicts_held_out(&m, &test);
        // deterministic
        assert_eq!(PriorModel::train(&refs, &cfg).unwrap(), m);
    }

    #[test]
    fn listwise_fit_prefers_the_labelled_row_and_shrinks_with_alpha() {
        // one feature that marks the labelled row in every group
        let groups: Vec<(Vec<Vec<f64>>, Vec<usize>)> = (0..20)
            .map(|g| {
                let rows = (0..5)
                    .map(|i| vec![f64::from(u8::from(i == g % 5)), (i * g) as f64 % 3.0])
                    .collect();
                (rows, vec![g % 5])
            })
            .collect();
        let weak = LinearHead::fit_listwise(&["mark", "noise"], &groups, 1.0).unwrap();
        let strong = LinearHead::fit_listwise(&["mark", "noise"], &groups, 100.0).unwrap();
        assert!(weak.weights[0] > 1.0, "{:?}", weak.weights);
        assert!(weak.weights[0].abs() > weak.weights[1].abs());
        assert!(strong.weights[0] < weak.weights[0]);
        assert!(strong.weights[0] > 0.0);
        // nothing usable: an error, not a panic
        assert!(LinearHead::fit_listwise(&["mark"], &[(vec![vec![1.0]], vec![0])], 1.0).is_err());
        assert!(LinearHead::fit_listwise(&["mark", "noise"], &groups, f64::NAN).is_err());
    }

    #[test]
    fn pair_rules() {
        let data = synthetic_corpus(40, 13);
        let refs: Vec<&Trace> = data.iter().collect();
        let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
        assert_eq!(m.pair_rule, PairRule::Independent);
        let mut differ = 0;
        for t in &data {
            let (a1, s1) = m.predict_with(t, PairRule::AgentFirst).unwrap();
            assert_eq!(
                t.steps[s1].agent, a1,
                "agent first: the agent acts at the step"
            );
            let (a2, s2) = m.predict_with(t, PairRule::Independent).unwrap();
            assert_eq!(a1, a2, "both rules take the agent head's agent");
            let best = argmax(&m.step_distribution(t)).unwrap();
            assert_eq!(
                s2, t.steps[best].index,
                "independent: the step head's best step"
            );
            assert_eq!(m.predict(t), Some((a2, s2)));
            differ += usize::from(s1 != s2);
        }
        assert!(differ < data.len());
        // the rule travels with the model file
        let mut m2 = m.clone();
        m2.pair_rule = PairRule::AgentFirst;
        let back = PriorModel::from_json(&m2.to_json(), "m2").unwrap();
        assert_eq!(back.pair_rule, PairRule::AgentFirst);
    }

    #[test]
    fn excluded_features_get_zero_weight() {
        let data = synthetic_corpus(40, 14);
        let refs: Vec<&Trace> = data.iter().collect();
        let cfg = TrainConfig {
            exclude_features: vec!["assume_words".into(), "next_tool_error".into()],
            ..TrainConfig::default()
        };
        let m = PriorModel::train(&refs, &cfg).unwrap();
        let full = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
        for name in ["assume_words", "next_tool_error"] {
            let j = crate::features::feature_index(name).unwrap();
            assert_eq!(m.step.weights[j], 0.0, "{name}");
            assert!(full.step.weights[j] != 0.0, "{name}");
        }
    }

    #[test]
    fn training_is_deterministic_for_a_fixed_seed() {
        let data = synthetic_corpus(40, 3);
        let refs: Vec<&Trace> = data.iter().collect();
        let cfg = TrainConfig::default();
        let a = PriorModel::train(&refs, &cfg).unwrap().to_json();
        let b = PriorModel::train(&refs, &cfg).unwrap().to_json();
        assert_eq!(a, b);
        // input order does not matter either (folds are keyed by trace id)
        let rev: Vec<&Trace> = data.iter().rev().collect();
        let c = PriorModel::train(&rev, &cfg).unwrap();
        let a = PriorModel::from_json(&a, "a").unwrap();
        for (x, y) in a.step.weights.iter().zip(&c.step.weights) {
            assert!((x - y).abs() < 1e-6);
        }
    }

    #[test]
    fn distributions_sum_to_one_and_rank_is_sorted() {
        let data = synthetic_corpus(30, 4);
        let refs: Vec<&Trace> = data.iter().collect();
        let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
        let t = &data[0];
        let d = m.step_distribution(t);
        assert_eq!(d.len(), t.steps.len());
        assert!((d.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let agents = m.agent_distribution(t);
        assert!((agents.iter().map(|(_, p)| p).sum::<f64>() - 1.0).abs() < 1e-9);
        let r = m.rank(t);
        assert_eq!(r.len(), t.steps.len());
        assert!(r.windows(2).all(|w| w[0].score >= w[1].score));
        assert!((r.iter().map(|c| c.prob).sum::<f64>() - 1.0).abs() < 1e-9);
        for c in &r {
            assert_eq!(t.steps[c.step].agent, c.agent);
        }
        let (a, s) = m.predict(t).unwrap();
        assert_eq!(t.steps[s].agent, a, "predicted pair is consistent");
        assert!(m.predict(&Trace::new("empty")).is_none());
        assert!(m.rank(&Trace::new("empty")).is_empty());
    }

    #[test]
    fn focus_steps_keep_the_top_steps_and_their_neighbours() {
        let data = synthetic_corpus(30, 8);
        let refs: Vec<&Trace> = data.iter().collect();
        let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
        let t = &data[0];
        let probs = m.step_distribution(t);
        let best = argmax(&probs).unwrap();
        assert_eq!(m.focus_steps(t, 1, 0), vec![best]);
        let f = m.focus_steps(t, 2, 1);
        assert!(f.contains(&best));
        assert!(f.windows(2).all(|w| w[0] < w[1]));
        assert!(f.len() <= 6 && f.len() >= 2);
        assert_eq!(m.focus_steps(t, 1000, 0).len(), t.steps.len());
        assert!(m.focus_steps(&Trace::new("e"), 3, 1).is_empty());
    }

    #[test]
    fn save_load_round_trip_and_invalid_models() {
        let data = synthetic_corpus(30, 5);
        let refs: Vec<&Trace> = data.iter().collect();
        let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
        let dir = std::env::temp_dir().join(format!("maslens-prior-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.json");
        m.save(&path).unwrap();
        assert_eq!(PriorModel::load(&path).unwrap(), m);
        let _ = std::fs::remove_dir_all(&dir);

        let err = PriorModel::load("/nonexistent/model.json").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/model.json"));
        let err = PriorModel::from_json("{", "x.json").unwrap_err();
        assert!(err.to_string().starts_with("x.json"));
        let mut bad = m.clone();
        bad.step.features.pop();
        let err = PriorModel::from_json(&bad.to_json(), "y.json").unwrap_err();
        assert!(err.to_string().contains("step.features"), "{err}");
        let mut bad = m.clone();
        bad.step.weights[0] = 0.0;
        bad.format = "other".into();
        assert!(PriorModel::from_json(&bad.to_json(), "z").is_err());
        // a NaN cannot even be written as JSON number; a negative scale is caught
        let mut bad = m;
        bad.step.scale[0] = -1.0;
        assert!(PriorModel::from_json(&bad.to_json(), "z")
            .unwrap_err()
            .to_string()
            .contains("scale"));
    }

    #[test]
    fn faulty_agent_labels_train_the_agent_head() {
        use maslens_trace::FaultyAgent;
        let data = synthetic_corpus(30, 9);
        // the same kind of traces with agent-level labels only (names differ in case)
        let mut extra = synthetic_corpus(10, 10);
        for t in &mut extra {
            let d = t.labels.decisive.take().unwrap();
            t.labels.faulty_agents.push(FaultyAgent {
                agent: d.agent.to_uppercase(),
                error_mode: None,
                strategy: None,
                description: None,
            });
        }
        let cfg = TrainConfig::default();
        let only: Vec<&Trace> = data.iter().collect();
        let both: Vec<&Trace> = data.iter().chain(&extra).collect();
        let a = PriorModel::train(&only, &cfg).unwrap();
        let b = PriorModel::train(&both, &cfg).unwrap();
        assert_eq!(b.training.agent_only_traces, 10);
        assert_eq!(b.training.skipped, 0);
        assert_eq!(a.step, b.step, "the step head uses decisive labels only");
        assert_ne!(a.agent, b.agent);
        // the conditional logit takes them too (a trace whose faulty agent never acts is
        // skipped by the listwise head, not a panic)
        let listwise = TrainConfig {
            objective: Objective::Listwise,
            agent_objective: Objective::Listwise,
            ..TrainConfig::default()
        };
        let mut odd = extra[0].clone();
        odd.labels.faulty_agents[0].agent = "nobody".into();
        let with_odd: Vec<&Trace> = data.iter().chain(&extra).chain([&odd]).collect();
        let c = PriorModel::train(&only, &listwise).unwrap();
        let d = PriorModel::train(&with_odd, &listwise).unwrap();
        assert_eq!(d.training.agent_only_traces, 11);
        assert_eq!(c.step, d.step);
        assert_ne!(c.agent, d.agent);
    }

    #[test]
    fn training_needs_labels() {
        let mut t = Trace::new("x");
        t.ensure_agent("a", AgentKind::Worker);
        t.steps.push(Step {
            index: 0,
            agent: "a".into(),
            ..Step::default()
        });
        let err = PriorModel::train(&[&t], &TrainConfig::default()).unwrap_err();
        assert!(err.to_string().contains("no usable labelled traces"));
        // a label pointing past the last step is skipped, not a panic
        t.labels.decisive = Some(DecisiveLabel {
            agent: "a".into(),
            step: 5,
            reason: None,
        });
        assert!(PriorModel::train(&[&t], &TrainConfig::default()).is_err());
        let bad_alpha = TrainConfig {
            alpha: f64::NAN,
            ..TrainConfig::default()
        };
        let data = synthetic_corpus(20, 6);
        let refs: Vec<&Trace> = data.iter().collect();
        assert!(PriorModel::train(&refs, &bad_alpha).is_err());
    }

    #[test]
    fn helpers() {
        assert_eq!(argmax(&[0.1, 0.5, 0.5]), Some(1));
        assert_eq!(argmax(&[]), None);
        let s = softmax(&[1000.0, 1000.0]);
        assert!((s[0] - 0.5).abs() < 1e-12);
        assert!(softmax(&[]).is_empty());
    }

    #[test]
    fn shipped_default_model_loads() {
        let m = crate::load_default().unwrap();
        assert_eq!(m.format, MODEL_FORMAT);
        assert!(m.training.traces > 0);
    }
}
