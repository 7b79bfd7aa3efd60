//! `maslens locate` over the method a user chose (`stacked`, `llm` or `prior`), as one call:
//! [`Setup::new`] builds the localizer from [`LocateOptions`] once (loading the prior and the
//! stack's weights), [`Chosen::verdict`] answers one trace with an [`AnyVerdict`], which renders
//! itself as JSON, as a trace label and as text lines. The CLI, the server and the Python package
//! call this, so the three front ends choose and combine localizers the same way.

use crate::locate::{
    prior_verdict_text, LlmLocalizer, LocateOptions, Method, Models, PriorLocalizer, PriorSource,
};
use crate::stack::{StackSource, StackWeights, StackedLocalizer, StackedVerdict};
use crate::CoreError;
use maslens_eval::run::{LocalizeError, Localizer};
use maslens_locate::steering::SteeringHit;
use maslens_locate::{LocateError, LocateVerdict};
use maslens_trace::Trace;

/// The localizer a run uses.
pub enum Chosen<'m> {
    Llm(LlmLocalizer<'m>),
    Stacked(Box<StackedLocalizer<'m>>),
    Prior(PriorLocalizer),
}

/// A [`Chosen`] localizer and what loading it had to say: `warnings` (records skipped in a
/// prior-probabilities file) and `notes` (generic stack weights for a model without its own).
pub struct Setup<'m> {
    pub localizer: Chosen<'m>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
}

/// One trace's verdict, whichever method gave it.
#[derive(Debug, Clone)]
pub enum AnyVerdict {
    Llm(Box<LocateVerdict>),
    Stacked(Box<StackedVerdict>),
    /// The prior's verdict as JSON ([`crate::locate::prior_verdict_explained`]).
    Prior(serde_json::Value),
}

fn load_prior(
    opts: &LocateOptions,
    warnings: &mut Vec<String>,
) -> Result<Option<PriorSource>, CoreError> {
    match opts.prior_spec() {
        Some(spec) => {
            let (p, skipped) = PriorSource::load(spec)?;
            warnings.extend(skipped);
            Ok(Some(p))
        }
        None => Ok(None),
    }
}

impl<'m> Setup<'m> {
    /// The localizer `opts.method` names. `models` are the opened Judge and Evaluator models
    /// (needed by `llm` and `stacked`); `any_aegis` asks for error modes when `opts` says `auto`.
    pub fn new(
        opts: &LocateOptions,
        models: Option<&'m Models>,
        any_aegis: bool,
    ) -> Result<Setup<'m>, CoreError> {
        let mut warnings = Vec::new();
        let mut notes = Vec::new();
        let prior = load_prior(opts, &mut warnings)?;
        let config = opts.config(opts.wants_error_modes(any_aegis));
        let need_models = || {
            models.ok_or_else(|| {
                CoreError::Invalid(format!("--method {} needs a model", opts.method.as_str()))
            })
        };
        let need_prior = |p: Option<PriorSource>| {
            p.ok_or_else(|| CoreError::Invalid("the prior did not load".into()))
        };
        let localizer = match opts.method {
            Method::Prior => Chosen::Prior(PriorLocalizer(need_prior(prior)?)),
            Method::Llm => Chosen::Llm(LlmLocalizer {
                models: need_models()?,
                config,
                styles: opts.evaluators.clone(),
                prior,
            }),
            Method::Stacked => {
                let models = need_models()?;
                let spec = opts.stack.as_deref().unwrap_or("builtin");
                let (weights, note) = StackWeights::load(spec)?.for_model(models.judge.model.id());
                notes.extend(note);
                // The pipeline's prior-guided narrowing uses the stack's prior (its own copy).
                let narrowing = load_prior(opts, &mut Vec::new())?;
                Chosen::Stacked(Box::new(StackedLocalizer {
                    llm: LlmLocalizer {
                        models,
                        config,
                        styles: opts.evaluators.clone(),
                        prior: narrowing,
                    },
                    prior: need_prior(prior)?,
                    weights,
                }))
            }
        };
        Ok(Setup {
            localizer,
            warnings,
            notes,
        })
    }
}

impl<'m> Chosen<'m> {
    /// The opened models, when the method uses an LLM.
    pub fn models(&self) -> Option<&'m Models> {
        match self {
            Chosen::Llm(l) => Some(l.models),
            Chosen::Stacked(s) => Some(s.llm.models),
            Chosen::Prior(_) => None,
        }
    }

    /// The prior the method answers with (`prior` and `stacked`).
    pub fn prior(&self) -> Option<&PriorSource> {
        match self {
            Chosen::Llm(_) => None,
            Chosen::Stacked(s) => Some(&s.prior),
            Chosen::Prior(p) => Some(&p.0),
        }
    }

    /// The verdict on `trace`. [`LocalizeError::Stop`] (a spent budget) ends a run;
    /// [`LocalizeError::Case`] concerns this trace only.
    pub async fn verdict(&self, trace: &Trace) -> Result<AnyVerdict, LocalizeError> {
        match self {
            Chosen::Llm(l) => match l.verdict(trace).await {
                Ok(v) => Ok(AnyVerdict::Llm(Box::new(v))),
                Err(
                    e @ LocateError::Llm {
                        source: maslens_llm::LlmError::Budget(_),
                        ..
                    },
                ) => Err(LocalizeError::Stop(e.to_string())),
                Err(e) => Err(LocalizeError::Case(e.to_string())),
            },
            // The stacked localizer falls back to the prior on any other pipeline error.
            Chosen::Stacked(s) => s
                .verdict(trace)
                .await
                .map(|v| AnyVerdict::Stacked(Box::new(v)))
                .map_err(|e| LocalizeError::Stop(e.to_string())),
            Chosen::Prior(p) => p
                .localize(trace)
                .await
                .map(|l| AnyVerdict::Prior(l.verdict.unwrap_or_default())),
        }
    }
}

impl AnyVerdict {
    /// The verdict as JSON (what `maslens --json locate` prints per trace).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            AnyVerdict::Llm(v) => serde_json::to_value(v).unwrap_or_default(),
            AnyVerdict::Stacked(v) => serde_json::to_value(v).unwrap_or_default(),
            AnyVerdict::Prior(v) => v.clone(),
        }
    }

    /// The trace's attempts to steer the Judge or the Evaluators (issue 16).
    pub fn steering(&self) -> &[SteeringHit] {
        match self {
            AnyVerdict::Llm(v) => &v.steering,
            AnyVerdict::Stacked(v) => v.pipeline.as_ref().map_or(&[], |p| &p.steering),
            AnyVerdict::Prior(_) => &[],
        }
    }

    /// The verdict as a trace label (`labels.verdicts`).
    pub fn to_label(&self) -> maslens_trace::Verdict {
        match self {
            AnyVerdict::Llm(v) => v.to_label(),
            AnyVerdict::Stacked(v) => v.to_label(),
            AnyVerdict::Prior(v) => maslens_trace::Verdict {
                method: "prior".into(),
                model: None,
                prompt_version: None,
                payload: v.clone(),
            },
        }
    }

    /// The pipeline's verdict (the stacked answers in place of its own for `stacked`), for
    /// consumers that store pipeline verdicts; `None` for the prior and a failed pipeline.
    pub fn pipeline_verdict(&self) -> Option<LocateVerdict> {
        match self {
            AnyVerdict::Llm(v) => Some((**v).clone()),
            AnyVerdict::Stacked(v) => v.as_pipeline_verdict(),
            AnyVerdict::Prior(_) => None,
        }
    }

    /// The verdict for a person, one line each (the first names the trace). Text from the trace
    /// or the model is not escaped here: a terminal front end escapes every line.
    pub fn text_lines(&self, trace: &Trace) -> Vec<String> {
        let mut out = match self {
            AnyVerdict::Llm(v) => llm_lines(v),
            AnyVerdict::Stacked(v) => stacked_lines(v, trace),
            AnyVerdict::Prior(v) => prior_lines(v, trace),
        };
        out.extend(
            self.steering()
                .iter()
                .map(|h| format!("  steering: {}", h.describe())),
        );
        out
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

fn llm_lines(v: &LocateVerdict) -> Vec<String> {
    let mut out = Vec::new();
    match (&v.agent, v.step) {
        (Some(a), Some(s)) => {
            let agree = match (v.agreement, v.evaluators.len()) {
                (Some(x), n) if n > 0 => format!(
                    ", Evaluators agree {}/{}",
                    (x * n as f64).round() as usize,
                    n
                ),
                _ => String::new(),
            };
            out.push(format!(
                "{}: {a} at step {s} (confidence {:.2}{agree})",
                v.trace, v.confidence
            ));
            if let Some(m) = &v.error_mode {
                out.push(format!("  error mode: {m}"));
            }
            if let Some(e) = &v.step_excerpt {
                out.push(format!("  step {s}: {}", one_line(e)));
            }
            if !v.rationale.is_empty() {
                out.push(format!("  why: {}", one_line(&v.rationale)));
            }
        }
        _ => out.push(format!(
            "{}: no location ({})",
            v.trace,
            v.abstain_reason.clone().unwrap_or_default()
        )),
    }
    if v.long_trace.strategy != maslens_locate::render::Strategy::Full {
        out.push(format!(
            "  long trace: {}",
            v.long_trace.strategy.describe()
        ));
    }
    if let Some(n) = &v.note {
        out.push(format!("  note: {n}"));
    }
    out
}

fn stacked_lines(v: &StackedVerdict, t: &Trace) -> Vec<String> {
    let from = match (v.step_source, &v.fallback) {
        (StackSource::PriorFallback, Some(why)) => format!("the prior alone: {why}"),
        (StackSource::LlmOnly, _) => "the LLM pipeline alone: no prior for this trace".into(),
        _ => "LLM pipeline + prior, stacked".to_string(),
    };
    let mut out = vec![format!("{}: {} ({from})", v.trace, v.headline(t))];
    if let (Some(s), Some(e)) = (v.step, &v.step_excerpt) {
        out.push(format!("  step {s}: {}", one_line(e)));
    }
    if !v.rationale.is_empty() {
        let whose = match v.rationale_from.as_str() {
            "llm" => "the model",
            _ => "the prior's evidence",
        };
        out.push(format!("  why ({whose}): {}", one_line(&v.rationale)));
    }
    let llm = match &v.pipeline {
        Some(p) => match (&p.agent, p.step) {
            (Some(a), Some(s)) => format!("{a} at step {s}"),
            _ => format!(
                "no location ({})",
                p.abstain_reason.clone().unwrap_or_default()
            ),
        },
        None => format!("failed ({})", v.pipeline_error.clone().unwrap_or_default()),
    };
    let prior = match &v.prior {
        Some((a, s)) => {
            prior_verdict_text(t, a, *s).replace(" (the prior's two heads answer separately)", "")
        }
        None => "none".into(),
    };
    out.push(format!("  LLM pipeline: {llm}; prior: {prior}"));
    out
}

fn prior_lines(v: &serde_json::Value, t: &Trace) -> Vec<String> {
    match (v["agent"].as_str(), v["step"].as_u64()) {
        (Some(a), Some(s)) => {
            let mut out = vec![format!(
                "{}: {} (prior)",
                t.id,
                prior_verdict_text(t, a, s as usize)
            )];
            if let Some(why) = v["rationale"].as_str() {
                out.push(format!("  why: {}", one_line(why)));
            }
            out
        }
        _ => vec![format!("{}: no location (prior)", t.id)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::Step;
    use std::collections::HashMap;

    fn trace() -> Trace {
        let mut t = Trace::new("x/1");
        for (i, a) in ["human", "Planner", "Coder"].iter().enumerate() {
            t.steps.push(Step {
                index: i,
                agent: a.to_string(),
                content: format!("step {i}:\nthe value is {}", i * 7),
                ..Default::default()
            });
        }
        t
    }

    #[test]
    fn llm_methods_without_models_are_refused() {
        for method in [Method::Llm, Method::Stacked] {
            let o = LocateOptions {
                method,
                ..Default::default()
            };
            let e = Setup::new(&o, None, false).err().map(|e| e.to_string());
            assert_eq!(
                e.as_deref(),
                Some(format!("--method {} needs a model", method.as_str()).as_str())
            );
        }
    }

    #[tokio::test]
    async fn prior_verdicts_render_label_and_never_steer() {
        let o = LocateOptions {
            method: Method::Prior,
            ..Default::default()
        };
        let setup = Setup::new(&o, None, false).unwrap();
        assert!(setup.localizer.models().is_none());
        assert!(setup.localizer.prior().is_some());
        // A file prior: the prior answers step 2 (Coder's).
        let mut map = HashMap::new();
        map.insert("x/1".to_string(), vec![0.1, 0.2, 0.7]);
        let chosen = Chosen::Prior(PriorLocalizer(PriorSource::File(map)));
        let t = trace();
        let v = chosen.verdict(&t).await.unwrap();
        assert_eq!(v.to_json()["step"], 2);
        assert_eq!(v.to_label().method, "prior");
        assert!(v.steering().is_empty() && v.pipeline_verdict().is_none());
        let lines = v.text_lines(&t);
        assert_eq!(lines[0], "x/1: Coder at step 2 (prior)");
        assert!(lines.iter().all(|l| !l.contains('\n')), "{lines:?}");
        // No distribution for a trace: an error for this case only, not a stop.
        let mut other = trace();
        other.id = "y".into();
        assert!(matches!(
            chosen.verdict(&other).await,
            Err(LocalizeError::Case(_))
        ));
    }
}
