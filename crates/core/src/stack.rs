//! The default localizer (`maslens locate`, `--method stacked`): the LLM pipeline's ballots (the
//! Judge's answer and each Evaluator's) and the learned prior's distributions combined by a small
//! linear model whose weights are chosen by cross-validation (stacking). The agent-level and the
//! step-level answers are chosen apart, each by its own weights, and a verdict whose two answers
//! disagree shows them as two answers (the agent need not act at the step).
//!
//! Score of a step position `s` and of an agent `a`:
//!
//! ```text
//! step(s)  = ln p_prior(s) + w_judge * [Judge's step = s] + w_eval * sum_h c_h [Evaluator h's step = s]
//! agent(a) = ln q_prior(a) + v_judge * [Judge's agent = a] + v_eval * sum_h c_h [Evaluator h's agent = a]
//! ```
//!
//! (`c_h` the Evaluator's confidence; a ballot whose named agent does not act at its step is
//! dropped when the level's `drop_incoherent` is set.) The answer is each level's argmax. With no
//! usable ballot the prior answers alone (the model abstained or answered incoherently); with no
//! prior distribution the ballots decide. The weights depend on the model: `maslens eval stack`
//! measures the combination by nested cross-validation and fits the weights for a user's model
//! and traces; the built-in weights were fit for the embedded model ([`builtin`]).

use crate::CoreError;
use maslens_locate::{Finding, LocateVerdict};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Format tag of a weights file.
pub const STACK_FORMAT: &str = "maslens-stack/v1";

/// The weights fit for the embedded model (`maslens eval stack`; provenance in the file's `note`).
pub const BUILTIN_JSON: &str = include_str!("../stacks/embedded.json");

/// Weights of one answer level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LevelWeights {
    /// Added to the score of the Judge's answer.
    pub judge: f64,
    /// Times each Evaluator's confidence, added to the score of its answer.
    pub evaluators: f64,
    /// Drop ballots whose named agent does not act at their step (`agent_mismatch`).
    #[serde(default)]
    pub drop_incoherent: bool,
}

/// A weights file: both levels, the model they were fit for, and their provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackWeights {
    pub format: String,
    /// The Judge model the weights were fit for (`None`: [`StackWeights::generic`]).
    #[serde(default)]
    pub model: Option<String>,
    pub step: LevelWeights,
    pub agent: LevelWeights,
    /// How they were fit: command, data, and the nested cross-validation figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StackWeights {
    /// Weights for a model nobody fit weights for: a Judge or Evaluator ballot outweighs any
    /// difference in the prior's log-probabilities below 3 (a factor of 20), so the LLM decides
    /// where it answers and the prior breaks ties and stands in where it does not. Not fit on
    /// data: `maslens eval stack` fits them for a model.
    pub fn generic() -> StackWeights {
        let level = LevelWeights {
            judge: 3.0,
            evaluators: 3.0,
            drop_incoherent: true,
        };
        StackWeights {
            format: STACK_FORMAT.into(),
            model: None,
            step: level,
            agent: level,
            note: Some("generic weights (not fit): the LLM's ballots decide, the prior breaks ties and answers when the LLM does not".into()),
        }
    }

    /// Parse a weights file's text; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<StackWeights, CoreError> {
        let w: StackWeights = serde_json::from_str(text).map_err(|e| {
            CoreError::Invalid(format!("{origin}: not a maslens stack weights file: {e}"))
        })?;
        if w.format != STACK_FORMAT {
            return Err(CoreError::Invalid(format!(
                "{origin}: field `format` is {:?}, expected {STACK_FORMAT:?}",
                w.format
            )));
        }
        for (name, l) in [("step", &w.step), ("agent", &w.agent)] {
            for (field, v) in [("judge", l.judge), ("evaluators", l.evaluators)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(CoreError::Invalid(format!(
                        "{origin}: field `{name}.{field}` must be a number >= 0, got {v}"
                    )));
                }
            }
        }
        Ok(w)
    }

    /// `builtin` (the embedded model's weights), `generic`, or a weights file.
    pub fn load(spec: &str) -> Result<StackWeights, CoreError> {
        match spec {
            "builtin" => builtin(),
            "generic" => Ok(StackWeights::generic()),
            path => {
                let text = std::fs::read_to_string(path).map_err(|source| CoreError::Io {
                    what: format!("reading stack weights {path}"),
                    source,
                })?;
                StackWeights::from_json(&text, path)
            }
        }
    }

    /// The weights for `model`: these when they were fit for it (or name no model), else the
    /// generic ones, with a message saying so.
    pub fn for_model(self, model: &str) -> (StackWeights, Option<String>) {
        match &self.model {
            Some(m) if m != model => (
                StackWeights::generic(),
                Some(format!(
                    "the stack weights were fit for {m}, not {model}: using generic weights \
                     (fit yours with `maslens eval stack DATASET --model {model} -o FILE`, \
                     then --stack FILE)"
                )),
            ),
            _ => (self, None),
        }
    }

    /// Write as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), CoreError> {
        let text = serde_json::to_string_pretty(self).unwrap_or_default() + "\n";
        std::fs::write(path, text).map_err(|source| CoreError::Io {
            what: format!("writing {}", path.display()),
            source,
        })
    }
}

/// The built-in weights (fit for the embedded model).
pub fn builtin() -> Result<StackWeights, CoreError> {
    StackWeights::from_json(BUILTIN_JSON, "built-in stack weights")
}

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
fn ballots(v: &LocateVerdict) -> Vec<(bool, &Finding)> {
    v.judge
        .iter()
        .map(|j| (true, &j.finding))
        .chain(v.evaluators.iter().map(|e| (false, &e.finding)))
        .filter(|(_, f)| f.location().is_some())
        .collect()
}

fn ln(p: f64) -> f64 {
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
fn ranked_by_score(trace: &Trace, score: &[f64], prior: Option<&[f64]>) -> Vec<(usize, f64)> {
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

/// One labelled case of a fit: the trace, its pipeline verdict (none: the pipeline failed) and
/// an out-of-fold prior view (never from a prior trained on this trace).
pub struct FitCase<'a> {
    pub trace: &'a Trace,
    pub verdict: Option<&'a LocateVerdict>,
    pub prior: PriorView,
}

/// The candidate weights of one level, in the order ties are broken (smallest LLM weight first:
/// on a tie the answer stays closest to the prior).
pub fn level_grid() -> Vec<LevelWeights> {
    const VALUES: [f64; 9] = [0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 1000.0];
    let mut out = Vec::new();
    for judge in VALUES {
        for evaluators in VALUES {
            for drop_incoherent in [false, true] {
                out.push(LevelWeights {
                    judge,
                    evaluators,
                    drop_incoherent,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        (a.judge + a.evaluators)
            .total_cmp(&(b.judge + b.evaluators))
            .then(a.judge.total_cmp(&b.judge))
            .then(a.drop_incoherent.cmp(&b.drop_incoherent))
    });
    out
}

fn same(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Choose both levels' weights on `cases` (the most hits at each level over [`level_grid`],
/// ties to the earlier candidate). Returns the weights (model and note unset) and the hits.
pub fn fit(cases: &[FitCase]) -> (StackWeights, usize, usize) {
    let grid = level_grid();
    let best = |step_level: bool| -> (LevelWeights, usize) {
        let mut best = (grid[0], 0usize);
        for (i, l) in grid.iter().enumerate() {
            let w = StackWeights {
                format: STACK_FORMAT.into(),
                model: None,
                step: *l,
                agent: *l,
                note: None,
            };
            let hits = cases
                .iter()
                .filter(|c| {
                    let Some(gold) = c.trace.labels.decisive.as_ref() else {
                        return false;
                    };
                    let a = combine(c.trace, c.verdict, Some(&c.prior), &w);
                    if step_level {
                        a.step == Some(gold.step)
                    } else {
                        a.agent.as_deref().is_some_and(|x| same(x, &gold.agent))
                    }
                })
                .count();
            if i == 0 || hits > best.1 {
                best = (*l, hits);
            }
        }
        best
    };
    let (step, step_hits) = best(true);
    let (agent, agent_hits) = best(false);
    (
        StackWeights {
            format: STACK_FORMAT.into(),
            model: None,
            step,
            agent,
            note: None,
        },
        agent_hits,
        step_hits,
    )
}

/// A stacked verdict: the agent-level and the step-level answer (chosen apart: `coherent` says
/// whether the agent acts at the step; a display shows two answers when not), where each came
/// from, the rationale (an LLM ballot's for that step when one passed the rationale check, else
/// the prior's evidence), and the pipeline's own verdict.
#[derive(Debug, Clone, Serialize)]
pub struct StackedVerdict {
    pub trace: String,
    /// `stacked`.
    pub method: String,
    /// The agent-level answer (what agent accuracy scores).
    pub agent: Option<String>,
    /// The decisive step (index).
    pub step: Option<usize>,
    /// Every step best first with its stacked probability (not written: the verdict's
    /// alternatives show the best of them).
    #[serde(skip)]
    pub ranked_steps: Vec<(usize, f64)>,
    /// The agent acting at `step`.
    pub step_agent: Option<String>,
    /// Whether `agent` acts at `step`.
    pub coherent: Option<bool>,
    pub step_source: StackSource,
    pub agent_source: StackSource,
    /// The first characters of the step's text.
    pub step_excerpt: Option<String>,
    pub rationale: String,
    /// `llm` (a ballot for this step whose rationale passed the check) or `prior` (its evidence).
    pub rationale_from: String,
    /// Why the prior answered alone, when it did: the pipeline failed, abstained, or named only
    /// agents that do not act at their steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The prior's answer alone (agent level, step level).
    pub prior: Option<(String, usize)>,
    /// The weights used (model they were fit for, both levels).
    pub weights: StackWeights,
    /// The LLM pipeline's verdict (`None` when it failed: `pipeline_error`).
    pub pipeline: Option<LocateVerdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_error: Option<String>,
}

impl StackedVerdict {
    /// The one verdict (`maslens_trace::Verdict`) of this stacked run on `trace`: the step level
    /// decides the primary pair; the agent level, the prior alone and the pipeline alone are
    /// alternatives where they differ.
    pub fn to_verdict(&self, trace: &Trace, allow_non_acting: bool) -> maslens_trace::Verdict {
        let mut ranked: Vec<(usize, Option<f64>)> =
            self.ranked_steps.iter().map(|(s, p)| (*s, Some(*p))).collect();
        if ranked.is_empty() {
            ranked.extend(self.step.map(|s| (s, None)));
        }
        let mut others = Vec::new();
        if let Some(p) = self.pipeline.as_ref().and_then(|p| Some((p.agent.clone()?, p.step?))) {
            others.push(maslens_trace::Pick {
                agent: p.0,
                step: p.1,
                probability: None,
                kind: "the LLM pipeline alone".into(),
            });
        }
        if let Some((_, s)) = &self.prior {
            if let Some(actor) = trace.actor_at(*s) {
                others.push(maslens_trace::Pick {
                    agent: actor.to_string(),
                    step: *s,
                    probability: None,
                    kind: "the prior alone".into(),
                });
            }
        }
        let answer = maslens_trace::Answer {
            ranked_steps: ranked,
            agent_head: self.agent.clone(),
            others,
            allow_non_acting,
        };
        let resolved = trace.resolve_answer(&answer);
        let moved = resolved.primary.as_ref().map(|p| p.step) != self.step;
        let mut v = maslens_trace::Verdict {
            model: self.pipeline.as_ref().map(|p| p.model.clone()),
            prompt_version: self.pipeline.as_ref().map(|p| p.prompt_versions.clone()),
            abstain_reason: self.step.is_none().then(|| {
                self.fallback
                    .clone()
                    .unwrap_or_else(|| "neither the pipeline nor the prior located a step".into())
            }),
            ..maslens_trace::Verdict::new(
                self.method.clone(),
                serde_json::to_value(self).unwrap_or(serde_json::Value::Null),
            )
        }
        .with_answer(resolved);
        if !moved && !self.rationale.trim().is_empty() {
            v.rationale = Some(self.rationale.clone());
        }
        v
    }

    /// The pipeline's verdict with the stacked answers in place of its own (`source: stack`),
    /// for consumers that store pipeline verdicts; `None` when the pipeline failed.
    pub fn as_pipeline_verdict(&self) -> Option<LocateVerdict> {
        let mut v = self.pipeline.clone()?;
        v.agent = self.agent.clone();
        v.step = self.step;
        v.step_excerpt = self.step_excerpt.clone();
        v.rationale = self.rationale.clone();
        v.source = "stack".into();
        Some(v)
    }

    /// One line: `AGENT at step N` when coherent, else the two answers apart.
    pub fn headline(&self, trace: &Trace) -> String {
        match (&self.agent, self.step) {
            (Some(a), Some(s)) => crate::locate::prior_verdict_text(trace, a, s)
                .replace(" (the prior's two heads answer separately)", ""),
            (Some(a), None) => format!("agent-level answer: {a} (no step)"),
            (None, Some(s)) => format!("decisive step {s} (no agent-level answer)"),
            (None, None) => "no location".into(),
        }
    }
}

/// Build the stacked verdict of a trace from the pipeline's verdict (or its error) and the prior.
pub fn stacked_verdict(
    trace: &Trace,
    pipeline: Result<LocateVerdict, String>,
    prior: &crate::locate::PriorSource,
    weights: &StackWeights,
) -> StackedVerdict {
    let (verdict, error) = match pipeline {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    let view = prior.view(trace);
    let a = combine(trace, verdict.as_ref(), view.as_ref(), weights);
    let step_agent = a
        .step
        .and_then(|s| trace.actor_at(s))
        .map(String::from);
    // A ballot for the chosen step whose rationale passed the check, most confident first.
    let llm_reason = verdict.as_ref().and_then(|v| {
        let mut bs: Vec<&Finding> = ballots(v)
            .into_iter()
            .map(|(_, f)| f)
            .filter(|f| f.step == a.step && f.rationale_problem.is_none())
            .filter(|f| !f.rationale.trim().is_empty())
            .collect();
        bs.sort_by(|x, y| y.confidence.total_cmp(&x.confidence));
        bs.first().map(|f| f.rationale.clone())
    });
    let (rationale, rationale_from) = match (llm_reason, a.step) {
        (Some(r), _) => (r, "llm"),
        (None, Some(s)) => (
            crate::locate::prior_evidence(prior, trace, s).unwrap_or_default(),
            "prior",
        ),
        (None, None) => (String::new(), "none"),
    };
    let fallback = (a.step_source == StackSource::PriorFallback
        || a.agent_source == StackSource::PriorFallback)
        .then(|| match (&verdict, &error) {
            (_, Some(e)) => format!("the LLM pipeline failed: {e}"),
            (Some(v), _) if ballots(v).is_empty() => {
                "the LLM pipeline gave no location (every answer abstained)".to_string()
            }
            _ => "every LLM answer named an agent who does not act at its step (incoherent; \
                  these weights drop such answers)"
                .to_string(),
        });
    let step_excerpt = a
        .step
        .and_then(|s| trace.excerpt(s, maslens_locate::pipeline::EXCERPT_CHARS));
    StackedVerdict {
        trace: trace.id.clone(),
        method: "stacked".into(),
        coherent: match (&a.agent, &step_agent) {
            (Some(x), Some(y)) => Some(x == y),
            _ => None,
        },
        agent: a.agent,
        step: a.step,
        ranked_steps: a.ranked_steps,
        step_agent,
        step_source: a.step_source,
        agent_source: a.agent_source,
        step_excerpt,
        rationale,
        rationale_from: rationale_from.into(),
        fallback,
        prior: prior.predict(trace),
        weights: weights.clone(),
        pipeline: verdict,
        pipeline_error: error,
    }
}

/// The stacked localizer: the pipeline (without a prior voter) and the prior, combined.
pub struct StackedLocalizer<'m> {
    pub llm: crate::locate::LlmLocalizer<'m>,
    pub prior: crate::locate::PriorSource,
    pub weights: StackWeights,
}

impl StackedLocalizer<'_> {
    /// The stacked verdict of a trace; a budget stop of the pipeline is returned as an error.
    pub async fn verdict(
        &self,
        trace: &Trace,
    ) -> Result<StackedVerdict, maslens_locate::LocateError> {
        let pipeline = match self.llm.verdict(trace).await {
            Ok(v) => Ok(v),
            Err(
                e @ maslens_locate::LocateError::Llm {
                    source: maslens_llm::LlmError::Budget(_),
                    ..
                },
            ) => return Err(e),
            Err(e) => Err(e.to_string()),
        };
        Ok(stacked_verdict(trace, pipeline, &self.prior, &self.weights))
    }
}

#[async_trait::async_trait]
impl maslens_eval::run::Localizer for StackedLocalizer<'_> {
    fn method(&self) -> String {
        format!("stacked({} + prior)", self.llm.method())
    }
    fn model(&self) -> Option<String> {
        self.llm.model()
    }
    fn prompts(&self) -> Vec<maslens_eval::run::PromptRef> {
        self.llm.prompts()
    }
    async fn localize(
        &self,
        trace: &Trace,
    ) -> Result<maslens_eval::run::Localized, maslens_eval::run::LocalizeError> {
        use maslens_eval::run::{LocalizeError, Localized};
        let v = self
            .verdict(trace)
            .await
            .map_err(|e| LocalizeError::Stop(e.to_string()))?;
        let usage = v
            .pipeline
            .as_ref()
            .map(|p| self.llm.usage_of(p))
            .unwrap_or_default();
        Ok(Localized {
            prediction: maslens_eval::metrics::Prediction {
                agent: v.agent.clone(),
                step: v.step,
                error_mode: v.pipeline.as_ref().and_then(|p| p.error_mode.clone()),
                abstained: v.step.is_none() && v.agent.is_none(),
                parse_failures: v.pipeline.as_ref().map_or(0, |p| p.usage.abstentions),
            },
            usage,
            verdict: serde_json::to_value(&v).ok(),
        })
    }
}

/// Options of [`evaluate_and_fit`].
#[derive(Debug, Clone)]
pub struct StackFitOptions {
    /// Outer folds of the nested cross-validation (grouped by task question).
    pub folds: usize,
    /// Folds of every selection inside (the prior's configuration, and the out-of-fold prior
    /// views the weights are chosen on).
    pub inner_folds: usize,
    pub seed: u64,
    pub eval: maslens_prior::EvalConfig,
    /// The prior's candidate configurations (empty: the frozen protocol's,
    /// `maslens_prior::eval::protocol_settings`).
    pub settings: Vec<maslens_prior::eval::Setting>,
    /// The Judge model the verdicts came from (recorded in the weights).
    pub model: String,
    /// The command line, for the weights' note.
    pub command: String,
    /// Further fold seeds: the same nested protocol on other outer folds, pooled hits per seed
    /// ([`StackFitOutput::seeds`]), to see how much one split's differences are noise.
    pub repeat_seeds: Vec<u64>,
}

impl StackFitOptions {
    /// `maslens eval stack`'s options: `folds` outer folds, `inner_folds` inside each, `seed`
    /// for the folds, the bootstrap and the random baseline, the frozen protocol's candidates;
    /// the model is filled in from the verdicts.
    pub fn nested(folds: usize, inner_folds: usize, seed: u64, command: String) -> StackFitOptions {
        StackFitOptions {
            folds,
            inner_folds,
            seed,
            eval: maslens_prior::EvalConfig {
                seed,
                ..Default::default()
            },
            settings: Vec::new(),
            model: String::new(),
            command,
            repeat_seeds: Vec::new(),
        }
    }
}

/// What [`evaluate_and_fit`] measured and fit.
pub struct StackFitOutput {
    /// Nested cross-validation of {prior alone, LLM pipeline alone, stacked} on the same outer
    /// folds, next to the trivial baselines, per group and pooled, with 95% intervals.
    pub report: maslens_prior::run::EvalReport,
    /// The weights fit on every case (out-of-fold prior views), to ship or pass as `--stack`.
    pub weights: StackWeights,
    /// The weights each outer fold chose.
    pub chosen: Vec<StackWeights>,
    /// Pooled hits of the three methods per fold seed: the report's seed first, then
    /// [`StackFitOptions::repeat_seeds`].
    pub seeds: Vec<SeedHits>,
}

/// Pooled hits of {stacked, prior alone, pipeline alone} under one fold seed's nested protocol,
/// each `[agent, step]` of `cases`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedHits {
    pub seed: u64,
    pub cases: usize,
    pub stacked: [usize; 2],
    pub prior: [usize; 2],
    pub llm: [usize; 2],
}

impl SeedHits {
    fn of(seed: u64, protocol: &maslens_prior::run::Protocol) -> SeedHits {
        let hits = |name: &str| -> ([usize; 2], usize) {
            protocol
                .methods
                .iter()
                .find(|m| m.method == name)
                .and_then(|m| m.groups.get("all"))
                .map_or(([0, 0], 0), |g| ([g.agent.k, g.step.k], g.agent.n))
        };
        let (stacked, cases) = hits(STACKED_METHOD);
        SeedHits {
            seed,
            cases,
            stacked,
            prior: hits(PRIOR_METHOD).0,
            llm: hits(LLM_METHOD).0,
        }
    }
}

const STACKED_METHOD: &str = "stacked (nested)";
const PRIOR_METHOD: &str = "prior (nested)";
const LLM_METHOD: &str = "llm pipeline";

/// The per-seed table of [`SeedHits`] with the sums, as text (Markdown table).
pub fn render_seed_table(seeds: &[SeedHits]) -> String {
    let pair = |h: [usize; 2]| format!("{} / {}", h[0], h[1]);
    let mut out = String::from(
        "agent / step hits per fold seed (nested, grouped):\n\n| fold seed | cases | stacked | prior alone | pipeline alone |\n| --- | --- | --- | --- | --- |\n",
    );
    let mut sum = SeedHits {
        seed: 0,
        cases: 0,
        stacked: [0, 0],
        prior: [0, 0],
        llm: [0, 0],
    };
    for h in seeds {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            h.seed,
            h.cases,
            pair(h.stacked),
            pair(h.prior),
            pair(h.llm)
        ));
        sum.cases += h.cases;
        for (acc, x) in [
            (&mut sum.stacked, h.stacked),
            (&mut sum.prior, h.prior),
            (&mut sum.llm, h.llm),
        ] {
            acc[0] += x[0];
            acc[1] += x[1];
        }
    }
    out.push_str(&format!(
        "| sum of {} | {} | {} | {} | {} |",
        seeds.len(),
        sum.cases,
        pair(sum.stacked),
        pair(sum.prior),
        pair(sum.llm)
    ));
    out
}

fn view(m: &maslens_prior::PriorModel, t: &Trace) -> PriorView {
    PriorView {
        steps: m.step_distribution(t),
        agents: m.agent_distribution(t),
    }
}

fn describe_weights(w: &StackWeights) -> String {
    let l = |x: &LevelWeights| {
        format!(
            "judge {} evaluators {}{}",
            x.judge,
            x.evaluators,
            if x.drop_incoherent {
                " (incoherent ballots dropped)"
            } else {
                ""
            }
        )
    };
    format!("step: {}; agent: {}", l(&w.step), l(&w.agent))
}

/// Out-of-fold prior views of `labelled` under grouped `k`-fold cross-fitting with `cfg` (the
/// traces in `extra`, agent-level labels only, join every training set).
fn cross_fitted_views(
    labelled: &[&Trace],
    extra: &[&Trace],
    k: usize,
    seed: u64,
    cfg: &maslens_prior::TrainConfig,
    cache: &maslens_prior::model::RowCache,
) -> Result<Vec<PriorView>, CoreError> {
    let folds = maslens_prior::eval::fold_assignment(labelled, k, seed);
    let mut out: Vec<PriorView> = vec![PriorView::default(); labelled.len()];
    for fold in 0..k {
        if !folds.contains(&fold) {
            continue;
        }
        let train: Vec<&Trace> = labelled
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .chain(extra.iter().copied())
            .collect();
        let alpha = cfg.agent_alpha.unwrap_or(cfg.alpha);
        let Some(m) = maslens_prior::PriorModel::train_cached(&train, cfg, &[alpha], cache)?.pop()
        else {
            continue;
        };
        for (i, t) in labelled.iter().enumerate() {
            if folds[i] == fold {
                out[i] = view(&m, t);
            }
        }
    }
    Ok(out)
}

/// The prior's candidate configurations for fold seed `seed`: the options' own, or the frozen
/// protocol's (offered three ways when fault-injected traces are among `refs`).
fn candidate_settings(
    refs: &[&Trace],
    opts: &StackFitOptions,
    seed: u64,
) -> Vec<maslens_prior::eval::Setting> {
    if opts.settings.is_empty() {
        let base = maslens_prior::eval::protocol_settings(&maslens_prior::TrainConfig {
            seed,
            ..Default::default()
        });
        maslens_prior::eval::with_injected_choice(refs, &base)
    } else {
        opts.settings.clone()
    }
}

/// One fold seed's nested protocol: {baselines, prior alone, pipeline alone, stacked} on the same
/// outer folds, and the weights each outer fold chose.
#[allow(clippy::too_many_arguments)] // private: the data, the seed and the config of one run
fn nested_protocol(
    labelled: &[&Trace],
    agent_only: &[&Trace],
    verdicts: &std::collections::HashMap<String, LocateVerdict>,
    opts: &StackFitOptions,
    seed: u64,
    settings: &[maslens_prior::eval::Setting],
    cache: &maslens_prior::model::RowCache,
    ecfg: &maslens_prior::EvalConfig,
) -> Result<(maslens_prior::run::Protocol, Vec<StackWeights>), CoreError> {
    use maslens_prior::eval::{
        baseline_reports, fold_assignment, report, select_and_train_cached, Prediction,
    };
    let (k, inner) = (opts.folds.max(2), opts.inner_folds.max(2));
    let folds = fold_assignment(labelled, k, seed);
    let n = labelled.len();
    let mut prior_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut llm_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut stack_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut chosen = Vec::new();
    let mut notes = Vec::new();
    for fold in 0..k {
        let test: Vec<usize> = (0..n).filter(|&i| folds[i] == fold).collect();
        if test.is_empty() {
            continue;
        }
        let train_lab: Vec<&Trace> = (0..n)
            .filter(|&i| folds[i] != fold)
            .map(|i| labelled[i])
            .collect();
        let train: Vec<&Trace> = train_lab
            .iter()
            .copied()
            .chain(agent_only.iter().copied())
            .collect();
        let (model, sel) = select_and_train_cached(&train, inner, seed, settings, cache)?;
        let cfg = &settings[sel.chosen].cfg;
        let views = cross_fitted_views(&train_lab, agent_only, inner, seed, cfg, cache)?;
        let cases: Vec<FitCase> = train_lab
            .iter()
            .zip(views)
            .map(|(t, prior)| FitCase {
                trace: t,
                verdict: verdicts.get(&t.id),
                prior,
            })
            .collect();
        let (w, _, _) = fit(&cases);
        notes.push(format!(
            "fold {fold}: prior {}; {}",
            sel.name,
            describe_weights(&w)
        ));
        for i in test {
            let t = labelled[i];
            let v = verdicts.get(&t.id);
            let a = combine(t, v, Some(&view(&model, t)), &w);
            stack_preds[i] = Some(Prediction {
                trace: t.id.clone(),
                agent: a.agent,
                step: a.step,
            });
            prior_preds[i] = Some(maslens_prior::eval::model_prediction(&model, t));
            llm_preds[i] = Some(Prediction {
                trace: t.id.clone(),
                agent: v.and_then(|v| v.agent.clone()),
                step: v.and_then(|v| v.step),
            });
        }
        chosen.push(w);
    }
    let flat =
        |p: Vec<Option<Prediction>>| -> Vec<Prediction> { p.into_iter().flatten().collect() };
    let mut methods = baseline_reports(labelled, ecfg);
    methods.push(report(PRIOR_METHOD, labelled, &flat(prior_preds), ecfg));
    methods.push(report(LLM_METHOD, labelled, &flat(llm_preds), ecfg));
    methods.push(report(STACKED_METHOD, labelled, &flat(stack_preds), ecfg));
    let with_verdict = labelled
        .iter()
        .filter(|t| verdicts.contains_key(&t.id))
        .count();
    let protocol = maslens_prior::run::Protocol {
        protocol: format!("nested-cv{k}x{inner}-grouped"),
        description: format!(
            "the same {k} outer folds for every method, grouped by task question (seed {seed});              inside each outer training set the prior's configuration is chosen among {} by              grouped {inner}-fold CV and the stack's weights on prior views cross-fitted over              {inner} folds; llm pipeline = the verdicts of model {} ({with_verdict} of {n} cases              have one, the rest count as abstentions); chosen per outer fold: {}",
            settings.len(),
            opts.model,
            notes.join(" | ")
        ),
        methods,
    };
    Ok((protocol, chosen))
}

/// Measure the stacked localizer by nested cross-validation, grouped by task question, and fit
/// its weights: for each outer fold, the prior's configuration is chosen and the prior trained on
/// the outer training traces only; the stack's weights are chosen on those traces with prior
/// views cross-fitted inside them; the outer fold is then answered by the prior alone, by the
/// pipeline alone (its verdict as given) and by the stack. `verdicts` are the LLM pipeline's
/// verdicts by trace id (a labelled trace without one counts as an abstention of the pipeline).
/// The weights returned are fit on every case with cross-fitted prior views.
pub fn evaluate_and_fit(
    traces: &[Trace],
    verdicts: &std::collections::HashMap<String, LocateVerdict>,
    opts: &StackFitOptions,
) -> Result<StackFitOutput, CoreError> {
    use maslens_prior::eval::select_cached;
    let refs: Vec<&Trace> = traces.iter().collect();
    let (labelled, agent_only) = maslens_prior::eval::sides(&refs);
    if labelled.len() < 2 * opts.folds.max(2) {
        return Err(CoreError::Invalid(format!(
            "{} traces with a decisive label: the nested cross-validation needs at least {}",
            labelled.len(),
            2 * opts.folds.max(2)
        )));
    }
    let (k, inner, seed) = (opts.folds.max(2), opts.inner_folds.max(2), opts.seed);
    let cache = maslens_prior::model::RowCache::new(&refs);
    let settings = candidate_settings(&refs, opts, seed);
    let (protocol, chosen) = nested_protocol(
        &labelled,
        &agent_only,
        verdicts,
        opts,
        seed,
        &settings,
        &cache,
        &opts.eval,
    )?;
    let mut seeds = vec![SeedHits::of(seed, &protocol)];
    for &s in &opts.repeat_seeds {
        if seeds.iter().any(|h| h.seed == s) {
            continue;
        }
        let settings = candidate_settings(&refs, opts, s);
        let ecfg = maslens_prior::EvalConfig {
            seed: s,
            ..opts.eval.clone()
        };
        let (p, _) = nested_protocol(
            &labelled,
            &agent_only,
            verdicts,
            opts,
            s,
            &settings,
            &cache,
            &ecfg,
        )?;
        seeds.push(SeedHits::of(s, &p));
    }
    let n = labelled.len();
    let with_verdict = labelled
        .iter()
        .filter(|t| verdicts.contains_key(&t.id))
        .count();
    let ecfg = &opts.eval;
    // The weights to ship: chosen on every case, with cross-fitted prior views of the
    // configuration the prior's selection chooses on every case.
    let sel = select_cached(&refs, inner, seed, &settings, &cache)?;
    let views = cross_fitted_views(
        &labelled,
        &agent_only,
        k,
        seed,
        &settings[sel.chosen].cfg,
        &cache,
    )?;
    let cases: Vec<FitCase> = labelled
        .iter()
        .zip(views)
        .map(|(t, prior)| FitCase {
            trace: t,
            verdict: verdicts.get(&t.id),
            prior,
        })
        .collect();
    let (mut weights, agent_hits, step_hits) = fit(&cases);
    weights.model = Some(opts.model.clone());
    weights.note = Some(format!(
        "fit by `{}` on {n} labelled cases ({with_verdict} with a pipeline verdict): agent {agent_hits}/{n}, \
         step {step_hits}/{n} on the fitting cases with prior views cross-fitted over {k} grouped folds \
         (prior configuration {}); nested CV figures in the command's report",
        opts.command, sel.name
    ));
    let report = maslens_prior::run::EvalReport {
        format_version: maslens_prior::run::REPORT_FORMAT_VERSION,
        traces: traces.len(),
        labelled: n,
        skipped: 0,
        seed: ecfg.seed,
        bootstrap: ecfg.bootstrap,
        protocols: vec![protocol],
        selection: None,
    };
    Ok(StackFitOutput {
        report,
        weights,
        chosen,
        seeds,
    })
}

/// Everything `maslens eval stack` takes.
#[derive(Debug, Clone)]
pub struct EvalStackOptions {
    /// `whowhen:DIR`, `aegis:FILE`, or a path (labelled traces).
    pub dataset: String,
    /// Only cases whose id starts with this.
    pub subset: Option<String>,
    /// The pipeline's settings (protocol, variant, Evaluators; the method is ignored).
    pub locate: crate::locate::LocateOptions,
    /// The Judge's model spec and the LLM options (cache, budgets, backend).
    pub model: String,
    pub llm: maslens_llm::OpenOptions,
    /// Verdict files (`verdicts.jsonl` of `maslens eval locate`, or `maslens locate --json`
    /// lines) read instead of running the pipeline.
    pub verdicts: Vec<std::path::PathBuf>,
    pub fit: StackFitOptions,
}

/// A finished `maslens eval stack`.
pub struct EvalStackOutput {
    pub fit: StackFitOutput,
    /// The pipeline's verdicts by trace id (run or read).
    pub verdicts: std::collections::HashMap<String, LocateVerdict>,
    /// Records skipped and cases whose pipeline failed, as messages.
    pub problems: Vec<String>,
    /// The Judge's model stack, when the pipeline ran (for a usage summary).
    pub judge: Option<maslens_llm::Stack>,
}

impl EvalStackOutput {
    /// The pipeline's verdicts as JSONL, one line per trace in id order (what `--verdicts` reads
    /// back).
    pub fn verdicts_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut ids: Vec<&String> = self.verdicts.keys().collect();
        ids.sort();
        let mut text = String::new();
        for id in ids {
            text.push_str(&serde_json::to_string(&self.verdicts[id])?);
            text.push('\n');
        }
        Ok(text)
    }

    /// The report, the weights fit on every case and the pooled hits per fold seed, as one JSON
    /// object (`--json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "report": self.fit.report,
            "weights": self.fit.weights,
            "seeds": self.fit.seeds,
        })
    }

    /// The report as text, then the weights fit on every case and, when they were written to
    /// `written` (`-o`), how to use them; no final newline.
    pub fn render_text(&self, written: Option<&Path>) -> Result<String, serde_json::Error> {
        let weights = &self.fit.weights;
        let text = maslens_prior::run::render_text(&self.fit.report);
        let mut out = text.strip_suffix('\n').unwrap_or(&text).to_string();
        if self.fit.seeds.len() > 1 {
            out.push_str("\n\n");
            out.push_str(&render_seed_table(&self.fit.seeds));
        }
        out.push_str(&format!(
            "\n\nweights fit on every case (model {}): {}",
            weights.model.as_deref().unwrap_or("?"),
            serde_json::to_string(&(&weights.step, &weights.agent))?
        ));
        if let Some(path) = written {
            out.push_str(&format!(
                "\nwritten to {} (use: maslens locate --stack {})",
                path.display(),
                path.display()
            ));
        }
        Ok(out)
    }
}

/// Read pipeline verdicts from JSONL files: lines that are a `LocateVerdict`, or a stacked
/// verdict holding one in `pipeline`. Other lines are skipped with a message naming file and line.
pub fn read_verdicts(
    paths: &[std::path::PathBuf],
) -> Result<
    (
        std::collections::HashMap<String, LocateVerdict>,
        Vec<String>,
    ),
    CoreError,
> {
    let mut map = std::collections::HashMap::new();
    let mut problems = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| CoreError::Io {
            what: format!("reading {}", path.display()),
            source,
        })?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let at = format!("{}: line {}", path.display(), i + 1);
            let value: serde_json::Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{at}: not JSON: {e}; skipped"));
                    continue;
                }
            };
            let inner = value.get("pipeline").cloned().unwrap_or(value);
            match serde_json::from_value::<LocateVerdict>(inner) {
                Ok(v) => {
                    if map.contains_key(&v.trace) {
                        problems.push(format!(
                            "{at}: a second verdict for trace {:?}; the first is kept",
                            v.trace
                        ));
                    } else {
                        map.insert(v.trace.clone(), v);
                    }
                }
                Err(e) => problems.push(format!(
                    "{at}: not a locate verdict (field error: {e}); skipped"
                )),
            }
        }
    }
    Ok((map, problems))
}

/// Run `maslens eval stack`: the pipeline's verdicts for every labelled case (read, or run with
/// the LLM cache), then [`evaluate_and_fit`].
pub async fn eval_stack(
    opts: &EvalStackOptions,
    progress: &dyn maslens_eval::run::Progress,
) -> Result<EvalStackOutput, CoreError> {
    let (path, format) = crate::traces::parse_dataset(&opts.dataset);
    let ds = crate::traces::load_dataset(&path, format, opts.subset.as_deref());
    let mut problems = ds.problems();
    let traces: Vec<Trace> = ds.cases.into_iter().map(|c| c.trace).collect();
    if traces.is_empty() {
        return Err(CoreError::Invalid(format!(
            "no labelled traces in {}",
            path.display()
        )));
    }
    let mut fit_opts = opts.fit.clone();
    let mut judge = None;
    let verdicts = if opts.verdicts.is_empty() {
        // The pipeline as the stacked method runs it (no prior voter, prior-guided narrowing of
        // long traces), narrowed by out-of-fold step distributions: grouped cross-fitting with the
        // prior's default configuration, so no case is narrowed by a prior trained on it.
        let mut lopts = opts.locate.clone();
        lopts.method = crate::locate::Method::Stacked;
        let refs: Vec<&Trace> = traces.iter().collect();
        let (labelled, agent_only) = maslens_prior::eval::sides(&refs);
        let cfg = maslens_prior::TrainConfig {
            seed: fit_opts.seed,
            ..Default::default()
        };
        let views = cross_fitted_views(
            &labelled,
            &agent_only,
            fit_opts.folds.max(2),
            fit_opts.seed,
            &cfg,
            &maslens_prior::model::RowCache::new(&refs),
        )?;
        let narrowing: std::collections::HashMap<String, Vec<f64>> = labelled
            .iter()
            .zip(views)
            .map(|(t, v)| (t.id.clone(), v.steps))
            .collect();
        let models = crate::locate::Models::open(&opts.model, &opts.llm, &lopts).await?;
        let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
        let llm = crate::locate::LlmLocalizer {
            models: &models,
            config: lopts.config(lopts.wants_error_modes(any_aegis)),
            styles: lopts.evaluators.clone(),
            prior: Some(crate::locate::PriorSource::File(narrowing)),
        };
        let mut map = std::collections::HashMap::new();
        progress.start(traces.len());
        for t in &traces {
            progress.case(&t.id);
            match llm.verdict(t).await {
                Ok(v) => {
                    map.insert(t.id.clone(), v);
                }
                Err(
                    e @ maslens_locate::LocateError::Llm {
                        source: maslens_llm::LlmError::Budget(_),
                        ..
                    },
                ) => {
                    progress.finish();
                    return Err(CoreError::Invalid(format!(
                        "stopped: {e} (rerun to continue: answers so far are cached)"
                    )));
                }
                Err(e) => {
                    progress.error(&t.id, &e.to_string());
                    problems.push(format!("{}: the pipeline failed: {e}", t.id));
                }
            }
            progress.case_done();
        }
        progress.finish();
        fit_opts.model = models.judge.model.id().to_string();
        judge = Some(models.judge);
        map
    } else {
        let (map, skipped) = read_verdicts(&opts.verdicts)?;
        problems.extend(skipped);
        let mut models: Vec<&str> = map.values().map(|v| v.model.as_str()).collect();
        models.sort();
        models.dedup();
        if models.len() > 1 {
            problems.push(format!(
                "the verdicts come from several models ({}): the weights are recorded for {}",
                models.join(", "),
                models[0]
            ));
        }
        if let Some(m) = models.first() {
            fit_opts.model = m.to_string();
        }
        map
    };
    let fit = evaluate_and_fit(&traces, &verdicts, &fit_opts)?;
    Ok(EvalStackOutput {
        fit,
        verdicts,
        problems,
        judge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_locate::evaluator::{EvaluatorResult, Style};
    use maslens_trace::{AgentKind, TraceBuilder};

    fn trace() -> Trace {
        TraceBuilder::new("x/1")
            .agent("human", AgentKind::Human)
            .steps(&["human", "Planner", "Coder", "Coder"])
            .decisive("Coder", 2)
            .build()
    }

    fn finding(agent: &str, step: usize, confidence: f64, mismatch: bool) -> Finding {
        Finding {
            agent: Some(agent.into()),
            step: Some(step),
            confidence,
            agent_mismatch: mismatch,
            ..Default::default()
        }
    }

    fn verdict(evals: Vec<Finding>) -> LocateVerdict {
        let mut v: LocateVerdict = serde_json::from_value(serde_json::json!({
            "trace": "x/1", "method": "m", "protocol": "all-at-once", "variant": "full",
            "model": "fixture", "agent": null, "step": null, "step_excerpt": null,
            "rationale": "", "confidence": 0.0, "source": "none", "judge": null,
            "evaluators": [], "vote": null,
            "long_trace": {"strategy": {"kind": "full"}, "judge": null, "evaluators": null,
                           "context_size": null, "trace_tokens": 0},
            "usage": {}, "prompt_versions": ""
        }))
        .unwrap();
        v.evaluators = evals
            .into_iter()
            .map(|finding| EvaluatorResult {
                style: Style::Base,
                model: "fixture".into(),
                finding,
                stats: Default::default(),
            })
            .collect();
        v
    }

    fn weights(judge: f64, evaluators: f64, drop: bool) -> StackWeights {
        let l = LevelWeights {
            judge,
            evaluators,
            drop_incoherent: drop,
        };
        StackWeights {
            format: STACK_FORMAT.into(),
            model: None,
            step: l,
            agent: l,
            note: None,
        }
    }

    #[test]
    fn ballots_move_the_answer_away_from_the_prior_only_with_weight() {
        let t = trace();
        let prior = PriorView {
            steps: vec![0.05, 0.6, 0.3, 0.05],
            agents: vec![("Planner".into(), 0.7), ("Coder".into(), 0.3)],
        };
        let v = verdict(vec![
            finding("Coder", 2, 1.0, false),
            finding("Coder", 2, 0.8, false),
        ]);
        let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 0.0, false));
        assert_eq!((a.agent.as_deref(), a.step), (Some("Planner"), Some(1)));
        assert_eq!(a.step_source, StackSource::Stack);
        let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 1.0, false));
        assert_eq!((a.agent.as_deref(), a.step), (Some("Coder"), Some(2)));
        // the model abstained: the prior answers
        let a = combine(
            &t,
            Some(&verdict(vec![])),
            Some(&prior),
            &weights(0.0, 1.0, false),
        );
        assert_eq!(
            (a.step, a.step_source),
            (Some(1), StackSource::PriorFallback)
        );
        let a = combine(&t, None, Some(&prior), &weights(5.0, 5.0, false));
        assert_eq!(a.agent.as_deref(), Some("Planner"));
        // an incoherent ballot is dropped when the weights say so
        let v = verdict(vec![finding("Coder", 2, 1.0, true)]);
        let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 5.0, true));
        assert_eq!(
            (a.step, a.step_source),
            (Some(1), StackSource::PriorFallback)
        );
        let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 5.0, false));
        assert_eq!(a.step, Some(2));
        // no prior: the ballots alone; neither: no answer
        let a = combine(&t, Some(&v), None, &weights(0.0, 1.0, false));
        assert_eq!((a.step, a.step_source), (Some(2), StackSource::LlmOnly));
        let a = combine(&t, None, None, &weights(1.0, 1.0, false));
        assert_eq!(
            (a.step, a.agent, a.step_source),
            (None, None, StackSource::None)
        );
    }

    #[test]
    fn fit_chooses_weights_that_help_and_stays_near_the_prior_on_ties() {
        let t = trace();
        // the prior is wrong (step 1), the Evaluators right (step 2)
        let wrong_prior = PriorView {
            steps: vec![0.05, 0.6, 0.3, 0.05],
            agents: vec![("Planner".into(), 0.7), ("Coder".into(), 0.3)],
        };
        let right = verdict(vec![finding("Coder", 2, 1.0, false)]);
        let cases = vec![FitCase {
            trace: &t,
            verdict: Some(&right),
            prior: wrong_prior.clone(),
        }];
        let (w, agent_hits, step_hits) = fit(&cases);
        assert_eq!((agent_hits, step_hits), (1, 1));
        assert!(w.step.evaluators > 0.0);
        // the prior is right and the Evaluators wrong: the weights stay at zero
        let wrong = verdict(vec![finding("Planner", 1, 1.0, false)]);
        let right_prior = PriorView {
            steps: vec![0.05, 0.3, 0.6, 0.05],
            agents: vec![("Coder".into(), 0.7), ("Planner".into(), 0.3)],
        };
        let cases = vec![FitCase {
            trace: &t,
            verdict: Some(&wrong),
            prior: right_prior,
        }];
        let (w, _, step_hits) = fit(&cases);
        assert_eq!(step_hits, 1);
        assert_eq!((w.step.judge, w.step.evaluators), (0.0, 0.0));
        assert_eq!(level_grid().len(), 162);
    }

    #[test]
    fn weights_files_load_check_and_fall_back_for_other_models() {
        let w = builtin().unwrap();
        assert_eq!(w.format, STACK_FORMAT);
        let text = serde_json::to_string(&weights(1.0, 2.0, true)).unwrap();
        assert_eq!(
            StackWeights::from_json(&text, "w.json")
                .unwrap()
                .step
                .evaluators,
            2.0
        );
        let bad = text.replace("2.0", "-1.0");
        let e = StackWeights::from_json(&bad, "w.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.json") && e.contains("step.evaluators"), "{e}");
        let e = StackWeights::from_json("{}", "w.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("w.json"), "{e}");
        let mut fitted = weights(0.0, 0.0, false);
        fitted.model = Some("local:smollm2-135m".into());
        let (same, msg) = fitted.clone().for_model("local:smollm2-135m");
        assert_eq!((same, msg), (fitted.clone(), None));
        let (other, msg) = fitted.for_model("openai:gpt-4o");
        assert_eq!(other, StackWeights::generic());
        assert!(msg.unwrap().contains("maslens eval stack"));
        assert!(StackWeights::load("/nonexistent/w.json").is_err());
    }
}
