//! The stacked verdict and the stacked localizer.

use super::*;
use maslens_locate::{Finding, LocateVerdict};
use maslens_trace::Trace;
use serde::Serialize;

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
        let mut ranked: Vec<(usize, Option<f64>)> = self
            .ranked_steps
            .iter()
            .map(|(s, p)| (*s, Some(*p)))
            .collect();
        if ranked.is_empty() {
            ranked.extend(self.step.map(|s| (s, None)));
        }
        let mut others = Vec::new();
        if let Some(p) = self
            .pipeline
            .as_ref()
            .and_then(|p| Some((p.agent.clone()?, p.step?)))
        {
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
    let step_agent = a.step.and_then(|s| trace.actor_at(s)).map(String::from);
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
    /// The stacked verdict of a trace; a budget stop of the pipeline, or its calls written to a
    /// batch file (export mode: nothing to combine yet), is returned as an error.
    pub async fn verdict(
        &self,
        trace: &Trace,
    ) -> Result<StackedVerdict, maslens_locate::LocateError> {
        let pipeline = match self.llm.verdict(trace).await {
            Ok(v) => Ok(v),
            Err(
                e @ maslens_locate::LocateError::Llm {
                    source:
                        maslens_llm::LlmError::Budget(_) | maslens_llm::LlmError::Deferred { .. },
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
        let v = self.verdict(trace).await.map_err(|e| match e {
            maslens_locate::LocateError::Llm {
                source: maslens_llm::LlmError::Deferred { .. },
                ..
            } => LocalizeError::case(e),
            e => LocalizeError::stop(e),
        })?;
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
