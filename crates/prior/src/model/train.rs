//! Training a prior model: feature rows extracted once per protocol run ([`RowCache`]), the
//! step head fit on every step row, the agent head on cross-fitted agent rows
//! ([`PriorModel::train_agent_variants`]), and the configuration a model file describes
//! ([`TrainingInfo::config`]). Inference and the file format are [`super`]'s.

use super::*;

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
}
