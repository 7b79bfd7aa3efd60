//! `maslens locate` over the method a user chose (`stacked`, `llm` or `prior`), as one call:
//! [`Setup::new`] builds the localizer from [`LocateOptions`] once (loading the prior and the
//! stack's weights), [`Chosen::verdict`] answers one trace with a [`Located`]: the one verdict
//! ([`maslens_trace::Verdict`]: a coherent primary pair, its probability, alternatives, evidence,
//! provenance) and the method's own detail ([`AnyVerdict`]). The CLI, the server's worker, the
//! Python package and `eval locate` all build their localizer here, so the same options give the
//! same verdict everywhere.

use crate::locate::{
    prior_verdict_text, LlmLocalizer, LocateOptions, Method, Models, PriorLocalizer, PriorSource,
};
use crate::stack::{StackSource, StackWeights, StackedLocalizer, StackedVerdict};
use crate::CoreError;
use maslens_eval::metrics::{CaseUsage, Prediction};
use maslens_eval::run::{LocalizeError, Localized, Localizer, PromptRef};
use maslens_locate::steering::SteeringHit;
use maslens_locate::{LocateError, LocateVerdict};
use maslens_trace::{ScoringRule, Trace};

/// The localizer a run uses.
pub enum Kind<'m> {
    Llm(LlmLocalizer<'m>),
    Stacked(Box<StackedLocalizer<'m>>),
    Prior(PriorLocalizer),
}

/// The chosen localizer and how its verdicts are made and scored.
pub struct Chosen<'m> {
    pub kind: Kind<'m>,
    /// Allow a tool, terminal or human as the primary agent (`--allow-non-acting`).
    pub allow_non_acting: bool,
    /// Which pair `eval` scores ([`ScoringRule`]): the primary pair, or the two heads apart.
    pub pair_rule: ScoringRule,
    /// Let a stacked verdict be the prior's alone when the LLM pipeline fails (`--fallback
    /// prior`); otherwise such a trace is an error.
    pub fallback_prior: bool,
}

/// A [`Chosen`] localizer and what loading it had to say: `warnings` (records skipped in a
/// prior-probabilities file) and `notes` (generic stack weights for a model without its own).
pub struct Setup<'m> {
    pub localizer: Chosen<'m>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
}

/// The method's own verdict, beside the one verdict made of it.
#[derive(Debug, Clone)]
pub enum AnyVerdict {
    Llm(Box<LocateVerdict>),
    Stacked(Box<StackedVerdict>),
    /// The prior (its detail is the verdict's payload).
    Prior,
}

/// One trace's answer: the one verdict and the method's detail.
#[derive(Debug, Clone)]
pub struct Located {
    pub trace: String,
    pub verdict: maslens_trace::Verdict,
    pub detail: AnyVerdict,
    /// Per-case usage (tokens, calls, seconds, cost when the price is known).
    pub usage: CaseUsage,
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
        let kind = match opts.method {
            Method::Prior => Kind::Prior(PriorLocalizer::new(need_prior(prior)?)),
            Method::Llm => Kind::Llm(LlmLocalizer {
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
                Kind::Stacked(Box::new(StackedLocalizer {
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
            localizer: Chosen {
                kind,
                allow_non_acting: opts.allow_non_acting,
                pair_rule: opts.pair_rule,
                fallback_prior: opts.fallback_prior,
            },
            warnings,
            notes,
        })
    }
}

fn budget_spent(e: &LocateError) -> bool {
    matches!(
        e,
        LocateError::Llm {
            source: maslens_llm::LlmError::Budget(_),
            ..
        }
    )
}

impl<'m> Chosen<'m> {
    /// A localizer with the default scoring (coherent pairs, acting agents only).
    pub fn new(kind: Kind<'m>) -> Chosen<'m> {
        Chosen {
            kind,
            allow_non_acting: false,
            pair_rule: ScoringRule::Coherent,
            fallback_prior: false,
        }
    }

    /// The opened models, when the method uses an LLM.
    pub fn models(&self) -> Option<&'m Models> {
        match &self.kind {
            Kind::Llm(l) => Some(l.models),
            Kind::Stacked(s) => Some(s.llm.models),
            Kind::Prior(_) => None,
        }
    }

    /// The prior the method answers with (`prior` and `stacked`).
    pub fn prior(&self) -> Option<&PriorSource> {
        match &self.kind {
            Kind::Llm(_) => None,
            Kind::Stacked(s) => Some(&s.prior),
            Kind::Prior(p) => Some(&p.source),
        }
    }

    /// The method's name as verdicts and diagnoses record it (`stacked`, `llm`, `prior`).
    pub fn method_name(&self) -> &'static str {
        match &self.kind {
            Kind::Llm(_) => Method::Llm.as_str(),
            Kind::Stacked(_) => Method::Stacked.as_str(),
            Kind::Prior(_) => Method::Prior.as_str(),
        }
    }

    /// The prompts the method sends, id -> SHA-256 of the template's text (empty for the prior):
    /// what a stored diagnosis records.
    pub fn prompt_hashes(&self) -> serde_json::Value {
        self.prompts()
            .into_iter()
            .map(|p| (p.id, serde_json::Value::String(p.sha256)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// The job kind a stored diagnosis is filed under: `prior`, else `locate`.
    pub fn diagnosis_kind(&self) -> &'static str {
        match &self.kind {
            Kind::Prior(_) => "prior",
            _ => "locate",
        }
    }

    /// The verdict on `trace`. [`LocalizeError::Stop`] (a spent budget) ends a run;
    /// [`LocalizeError::Case`] concerns this trace only.
    pub async fn verdict(&self, trace: &Trace) -> Result<Located, LocalizeError> {
        let started = std::time::Instant::now();
        refuse_not_understood(trace)?;
        let allow = self.allow_non_acting;
        let (verdict, mut usage, detail) = match &self.kind {
            Kind::Llm(l) => match l.verdict(trace).await {
                Ok(v) => (
                    v.to_verdict(trace, allow),
                    l.usage_of(&v),
                    AnyVerdict::Llm(Box::new(v)),
                ),
                Err(e) if budget_spent(&e) => return Err(LocalizeError::stop(e)),
                Err(e) => return Err(LocalizeError::case(e)),
            },
            // A pipeline that failed leaves the prior alone: an answer only when asked for.
            Kind::Stacked(s) => match s.verdict(trace).await {
                Ok(v) if v.pipeline_error.is_some() && !self.fallback_prior => {
                    return Err(LocalizeError::case(format!(
                        "{}: the LLM pipeline failed ({}); pass --fallback prior to answer with \
                         the prior alone",
                        trace.id,
                        v.pipeline_error.as_deref().unwrap_or_default()
                    )))
                }
                Ok(v) => {
                    let usage = v
                        .pipeline
                        .as_ref()
                        .map(|p| s.llm.usage_of(p))
                        .unwrap_or_default();
                    (
                        v.to_verdict(trace, allow),
                        usage,
                        AnyVerdict::Stacked(Box::new(v)),
                    )
                }
                Err(e) if budget_spent(&e) => return Err(LocalizeError::stop(e)),
                // Its calls went to the batch file (export mode): this trace waits for them.
                Err(e) => return Err(LocalizeError::case(e)),
            },
            Kind::Prior(p) => return prior_located(&p.source, trace, allow),
        };
        usage.seconds = started.elapsed().as_secs_f64();
        Ok(Located {
            trace: trace.id.clone(),
            verdict: maslens_trace::Verdict {
                revision: Some(crate::revision()),
                ..verdict
            },
            detail,
            usage,
        })
    }
}

/// No verdict on a run maslens could not understand (no step, or steps with no text: its
/// [`Trace::not_understood`] warning): the error says why and how to fix the instrumentation,
/// where a verdict would only have been read from nothing.
fn refuse_not_understood(trace: &Trace) -> Result<(), LocalizeError> {
    match trace.not_understood() {
        Some(w) => Err(LocalizeError::case(format!(
            "{}: not diagnosed, the run was not understood: {}",
            trace.id,
            w.line()
        ))),
        None => Ok(()),
    }
}

/// One run of a localizer over traces in order, the loop every front end shares: after a
/// budget stop ([`LocalizeError::Stop`]) each further trace is answered "not run" without a model
/// call, so a caller still reports (and writes) every trace it was given.
pub struct LocateRun<'c, 'm> {
    chosen: &'c Chosen<'m>,
    stopped: Option<String>,
}

impl<'c, 'm> LocateRun<'c, 'm> {
    pub fn new(chosen: &'c Chosen<'m>) -> LocateRun<'c, 'm> {
        LocateRun {
            chosen,
            stopped: None,
        }
    }

    /// The next trace's verdict (or why there is none).
    pub async fn verdict(&mut self, trace: &Trace) -> Result<Located, LocalizeError> {
        if let Some(why) = &self.stopped {
            return Err(LocalizeError::case(format!(
                "{}: not run ({why})",
                trace.id
            )));
        }
        let r = self.chosen.verdict(trace).await;
        if let Err(LocalizeError::Stop(why)) = &r {
            self.stopped = Some(why.to_string());
        }
        r
    }

    /// Why the run stopped early, when it did.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }
}

/// The prior's answer on `trace` as a [`Located`] (what `--method prior` and `serve`'s verdict
/// on arrival give).
pub fn prior_located(
    source: &PriorSource,
    trace: &Trace,
    allow_non_acting: bool,
) -> Result<Located, LocalizeError> {
    let started = std::time::Instant::now();
    refuse_not_understood(trace)?;
    let verdict = PriorLocalizer::verdict_of(source, trace, allow_non_acting)?;
    Ok(Located {
        trace: trace.id.clone(),
        verdict: maslens_trace::Verdict {
            revision: Some(crate::revision()),
            ..verdict
        },
        detail: AnyVerdict::Prior,
        usage: CaseUsage {
            seconds: started.elapsed().as_secs_f64(),
            ..CaseUsage::default()
        },
    })
}

#[async_trait::async_trait]
impl Localizer for Chosen<'_> {
    fn method(&self) -> String {
        match &self.kind {
            Kind::Llm(l) => l.method(),
            Kind::Stacked(s) => s.method(),
            Kind::Prior(p) => p.method(),
        }
    }
    fn model(&self) -> Option<String> {
        self.models().map(|m| m.judge.model.id().to_string())
    }
    fn prompts(&self) -> Vec<PromptRef> {
        match &self.kind {
            Kind::Prior(_) => Vec::new(),
            _ => maslens_locate::prompts::all()
                .map(|t| PromptRef::new(t.name, t.source))
                .collect(),
        }
    }
    async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError> {
        let l = self.verdict(trace).await?;
        Ok(Localized {
            prediction: l.prediction(self.pair_rule),
            usage: l.usage,
            verdict: Some(l.to_json()),
        })
    }
}

impl Located {
    /// The verdict as JSON (what `maslens --json locate` prints per trace, what `serve` stores
    /// and what the Python package returns): the trace id and the one verdict.
    pub fn to_json(&self) -> serde_json::Value {
        self.verdict.to_json(&self.trace)
    }

    /// The trace's attempts to steer the Judge or the Evaluators (issue 16).
    pub fn steering(&self) -> &[SteeringHit] {
        match &self.detail {
            AnyVerdict::Llm(v) => &v.steering,
            AnyVerdict::Stacked(v) => v.pipeline.as_ref().map_or(&[], |p| &p.steering),
            AnyVerdict::Prior => &[],
        }
    }

    /// Why the LLM pipeline failed when the answer is the prior's alone (`--fallback prior`):
    /// a front end states it and counts it as a problem (exit code 1).
    pub fn fell_back(&self) -> Option<&str> {
        match &self.detail {
            AnyVerdict::Stacked(v) => v.pipeline_error.as_deref(),
            _ => None,
        }
    }

    /// The verdict as a trace label (`labels.verdicts`).
    pub fn to_label(&self) -> maslens_trace::Verdict {
        self.verdict.clone()
    }

    /// The prediction a report scores under `rule` ([`maslens_trace::Verdict::scored`]).
    pub fn prediction(&self, rule: ScoringRule) -> Prediction {
        let (agent, step) = self.verdict.scored(rule);
        let (error_mode, parse_failures) = match &self.detail {
            AnyVerdict::Llm(v) => (v.error_mode.clone(), v.usage.abstentions),
            AnyVerdict::Stacked(v) => (
                v.pipeline.as_ref().and_then(|p| p.error_mode.clone()),
                v.pipeline.as_ref().map_or(0, |p| p.usage.abstentions),
            ),
            AnyVerdict::Prior => (None, 0),
        };
        Prediction {
            abstained: step.is_none(),
            agent,
            step,
            error_mode,
            parse_failures,
        }
    }

    /// The verdict for a person, one line each (the first names the trace). Text from the trace
    /// or the model is not escaped here: a terminal front end escapes every line.
    pub fn text_lines(&self, trace: &Trace) -> Vec<String> {
        let v = &self.verdict;
        let mut out = vec![headline(self, trace)];
        if let Some(s) = v.step {
            if let Some(e) = trace.excerpt(s, maslens_locate::pipeline::EXCERPT_CHARS) {
                out.push(format!("  step {s}: {}", one_line(&e)));
            }
            match &v.rationale {
                Some(r) => out.push(format!("  why ({}): {}", self.rationale_from(), one_line(r))),
                None => out.push(
                    "  why: no rationale that explains this step (see the alternatives and the detail)"
                        .into(),
                ),
            }
        }
        for a in &v.alternatives {
            let p = a
                .probability
                .map(|p| format!(", {p:.2}"))
                .unwrap_or_default();
            out.push(format!(
                "  alternative ({}{p}): {} at step {}",
                a.kind, a.agent, a.step
            ));
        }
        out.extend(match &self.detail {
            AnyVerdict::Llm(d) => llm_detail(d),
            AnyVerdict::Stacked(d) => stacked_detail(d, trace),
            AnyVerdict::Prior => Vec::new(),
        });
        out.extend(
            self.steering()
                .iter()
                .map(|h| format!("  steering: {}", h.describe())),
        );
        out
    }

    /// Where the rationale came from, in words.
    fn rationale_from(&self) -> &'static str {
        match &self.detail {
            AnyVerdict::Llm(_) => "the model",
            AnyVerdict::Stacked(d) if d.rationale_from == "llm" => "the model",
            _ => "the prior's evidence",
        }
    }

    /// The pipeline's own verdict, for consumers that want its ballots (`None` for the prior
    /// and a failed pipeline).
    pub fn pipeline_verdict(&self) -> Option<&LocateVerdict> {
        match &self.detail {
            AnyVerdict::Llm(v) => Some(v),
            AnyVerdict::Stacked(v) => v.pipeline.as_ref(),
            AnyVerdict::Prior => None,
        }
    }
}

/// `ID: AGENT at step N (method, probability)` or `ID: no location (why)`.
fn headline(l: &Located, trace: &Trace) -> String {
    let v = &l.verdict;
    let from = match &l.detail {
        AnyVerdict::Llm(d) => {
            let agree = match (d.agreement, d.evaluators.len()) {
                (Some(x), n) if n > 0 => format!(
                    ", Evaluators agree {}/{}",
                    (x * n as f64).round() as usize,
                    n
                ),
                _ => String::new(),
            };
            format!("LLM pipeline{agree}")
        }
        AnyVerdict::Stacked(d) => match (d.step_source, &d.fallback) {
            (StackSource::PriorFallback, Some(why)) => format!("the prior alone: {why}"),
            (StackSource::LlmOnly, _) => "the LLM pipeline alone: no prior for this trace".into(),
            _ => "LLM pipeline + prior, stacked".to_string(),
        },
        AnyVerdict::Prior => "prior".into(),
    };
    let p = v
        .probability
        .map(|p| format!(", probability {p:.2}"))
        .unwrap_or_default();
    match (&v.agent, v.step) {
        (Some(a), Some(s)) => format!("{}: {a} at step {s} ({from}{p})", trace.id),
        _ => format!(
            "{}: no location ({from}: {})",
            trace.id,
            v.abstain_reason
                .clone()
                .unwrap_or_else(|| "no answer".into())
        ),
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

fn llm_detail(v: &LocateVerdict) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = &v.error_mode {
        out.push(format!("  error mode: {m}"));
    }
    if let Some(problem) = &v.rationale_problem {
        out.push(format!(
            "  the model's rationale was not used: {}",
            one_line(problem)
        ));
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

fn stacked_detail(v: &StackedVerdict, t: &Trace) -> Vec<String> {
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
    vec![format!("  LLM pipeline alone: {llm}; prior alone: {prior}")]
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
        let chosen = Chosen::new(Kind::Prior(PriorLocalizer::new(PriorSource::File(map))));
        let t = trace();
        let v = chosen.verdict(&t).await.unwrap();
        assert_eq!(v.to_json()["step"], 2);
        assert_eq!(v.to_json()["trace"], "x/1");
        assert_eq!(v.to_label().method, "prior");
        assert_eq!(v.verdict.probability, Some(0.7));
        assert!(v
            .verdict
            .revision
            .as_deref()
            .is_some_and(|r| r.starts_with("maslens ")));
        assert!(v.steering().is_empty() && v.pipeline_verdict().is_none());
        let lines = v.text_lines(&t);
        assert_eq!(lines[0], "x/1: Coder at step 2 (prior, probability 0.70)");
        assert!(lines.iter().all(|l| !l.contains('\n')), "{lines:?}");
        // Planner's step is the runner-up; the human's step is never an answer.
        assert!(
            lines
                .iter()
                .any(|l| l == "  alternative (runner-up, 0.20): Planner at step 1"),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("human at step")),
            "{lines:?}"
        );
        // No distribution for a trace: an error for this case only, not a stop.
        let mut other = trace();
        other.id = "y".into();
        assert!(matches!(
            chosen.verdict(&other).await,
            Err(LocalizeError::Case(_))
        ));
    }

    #[tokio::test]
    async fn a_human_step_ranked_first_moves_to_the_next_acting_step() {
        let mut map = HashMap::new();
        map.insert("x/1".to_string(), vec![0.8, 0.05, 0.15]);
        let chosen = Chosen::new(Kind::Prior(PriorLocalizer::new(PriorSource::File(map))));
        let t = trace();
        let v = chosen.verdict(&t).await.unwrap().verdict;
        assert_eq!((v.agent.as_deref(), v.step), (Some("Coder"), Some(2)));
        // Scored the Who&When way, the step head's own answer (the human's step 0) stays.
        assert_eq!(v.scored(ScoringRule::Independent).1, Some(0));
        assert_eq!(v.scored(ScoringRule::Coherent).1, Some(2));
    }

    /// Issue 36 item 3: a run with nothing to read (a `no_content` run warning) gets no
    /// verdict from any localizer, and the error names the warning and its fix.
    #[tokio::test]
    async fn a_run_not_understood_gets_no_verdict_and_says_why() {
        let mut map = HashMap::new();
        map.insert("x/1".to_string(), vec![0.1, 0.2, 0.7]);
        let source = PriorSource::File(map.clone());
        let chosen = Chosen::new(Kind::Prior(PriorLocalizer::new(PriorSource::File(map))));
        let mut t = trace();
        t.metadata.insert(
            maslens_trace::WARNINGS_KEY.into(),
            serde_json::json!([{"code": "agents_from_service", "message": "m"}]),
        );
        assert!(
            chosen.verdict(&t).await.is_ok(),
            "a warning that leaves steps to read"
        );
        t.metadata.insert(
            maslens_trace::WARNINGS_KEY.into(),
            serde_json::json!([{"code": "no_content", "message": "no text", "fix": "turn capture on"}]),
        );
        for e in [
            chosen.verdict(&t).await.err(),
            prior_located(&source, &t, false).err(),
        ] {
            let e = e.expect("no verdict").to_string();
            assert!(
                e.contains("not understood")
                    && e.contains("no_content: no text (fix: turn capture on)"),
                "{e}"
            );
        }
    }
}
