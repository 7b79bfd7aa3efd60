//! Failure localization as a library call: the AgentLocate LLM pipeline (Judge + Evaluators +
//! vote) or the learned prior, each a [`Localizer`] that the CLI, `eval locate`, the server and
//! the Python package use alike. This is where the two method crates meet: the prior votes in the
//! LLM pipeline and picks the steps a long trace shows in full, passed as a plain distribution
//! per trace, so `maslens-locate` never depends on `maslens-prior`.

use crate::CoreError;
use maslens_eval::metrics::{CaseUsage, Prediction};
use maslens_eval::run::{LocalizeError, Localized, Localizer, PromptRef};
use maslens_llm::{ChatModel, OpenOptions, Stack};
use maslens_locate::pipeline::EvaluatorSpec;
use maslens_locate::{
    LocateConfig, LocateError, LocateVerdict, Locator, Protocol, Settings, Style, Variant,
};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Which localizer answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// AgentLocate: Judge protocol + Evaluators + confidence-weighted vote.
    Llm,
    /// The learned localizer of maslens-prior (no LLM).
    Prior,
    /// The pipeline's ballots and the prior combined by weights learned by cross-validation
    /// ([`crate::stack`]): the one default of `locate`, `eval locate`, `serve` and Python.
    #[default]
    Stacked,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Llm => "llm",
            Method::Prior => "prior",
            Method::Stacked => "stacked",
        }
    }

    /// Whether the method runs the LLM pipeline (and so needs a model).
    pub fn needs_llm(self) -> bool {
        matches!(self, Method::Llm | Method::Stacked)
    }

    /// Whether the method needs the prior.
    pub fn needs_prior(self) -> bool {
        matches!(self, Method::Prior | Method::Stacked)
    }
}

/// Whether an error-mode answer (the Aegis/MAST taxonomy) is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorModes {
    /// For Aegis traces only.
    #[default]
    Auto,
    Aegis,
    None,
}

/// How failures are localized: the options `maslens locate` and `maslens eval locate` share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateOptions {
    pub method: Method,
    pub protocol: Protocol,
    pub variant: Variant,
    /// Evaluator styles (their number is H).
    pub evaluators: Vec<Style>,
    /// Model specs of the Evaluators: none (the Judge's), one for all, or one per style.
    pub evaluator_models: Vec<String>,
    pub with_ground_truth: bool,
    pub error_modes: ErrorModes,
    pub max_answer_tokens: u32,
    /// `builtin` or a prior-probabilities file (`maslens_prior::probs`).
    pub prior: Option<String>,
    pub prior_weight: f64,
    pub prior_narrowing: bool,
    /// Stack weights of `--method stacked`: `builtin` (fit for the embedded model), `generic`, or
    /// a weights file (`maslens eval stack -o`); `None`: `builtin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// Allow a tool, terminal or human as the primary agent (never by default).
    #[serde(default)]
    pub allow_non_acting: bool,
    /// Which pair `eval locate` scores: the coherent primary pair (default) or, to reproduce
    /// Who&When's tables, the agent-level and step-level answers apart.
    #[serde(default)]
    pub pair_rule: maslens_trace::ScoringRule,
    /// `--fallback prior`: when the stacked method's LLM pipeline fails on a trace, answer with
    /// the prior alone (the verdict says so and the run counts it as a problem). Off: the trace
    /// gets an error instead of a silent prior-only answer.
    #[serde(default)]
    pub fallback_prior: bool,
}

impl Default for LocateOptions {
    fn default() -> Self {
        LocateOptions {
            method: Method::default(),
            protocol: Protocol::AllAtOnce,
            variant: Variant::Verified,
            evaluators: vec![Style::Base, Style::Concise, Style::Evidence],
            evaluator_models: Vec::new(),
            with_ground_truth: false,
            error_modes: ErrorModes::Auto,
            max_answer_tokens: 384,
            prior: None,
            prior_weight: 1.0,
            prior_narrowing: false,
            stack: None,
            allow_non_acting: false,
            pair_rule: maslens_trace::ScoringRule::Coherent,
            fallback_prior: false,
        }
    }
}

impl LocateOptions {
    /// The prior to load: `prior`, else `builtin` when narrowing, `--method prior` or
    /// `--method stacked` needs one.
    pub fn prior_spec(&self) -> Option<&str> {
        self.prior
            .as_deref()
            .or((self.prior_narrowing || self.method.needs_prior()).then_some("builtin"))
    }

    /// Whether error modes are asked for a trace set (`any_aegis`: it holds Aegis traces).
    pub fn wants_error_modes(&self, any_aegis: bool) -> bool {
        match self.error_modes {
            ErrorModes::Aegis => true,
            ErrorModes::None => false,
            ErrorModes::Auto => any_aegis,
        }
    }

    /// The pipeline configuration these options describe.
    pub fn config(&self, error_modes: bool) -> LocateConfig {
        LocateConfig {
            protocol: self.protocol,
            variant: self.variant,
            settings: Settings {
                with_ground_truth: self.with_ground_truth,
                error_modes: if error_modes {
                    maslens_locate::aegis_error_modes()
                } else {
                    Vec::new()
                },
                max_answer_tokens: self.max_answer_tokens,
            },
            // The stack combines the prior with the pipeline's ballots itself: no prior voter.
            prior_weight: if self.prior.is_some() && self.method != Method::Stacked {
                self.prior_weight
            } else {
                0.0
            },
            // The stack loads the prior anyway: it also picks the steps a long trace shows in full.
            narrow_with_prior: self.prior_narrowing || self.method == Method::Stacked,
        }
    }
}

/// Prior distributions over steps, per trace.
pub enum PriorSource {
    Builtin(Box<maslens_prior::PriorModel>),
    /// Step distributions by trace id.
    File(HashMap<String, Vec<f64>>),
    /// A prior-probabilities file as read (step distributions, and agent distributions where
    /// the lines carry them): what [`PriorSource::load`] returns for a file.
    Probs(maslens_prior::probs::ProbsFile),
}

impl PriorSource {
    /// `builtin`, or a prior-probabilities file. Lines skipped in the file are returned as
    /// messages (file, line, reason).
    pub fn load(spec: &str) -> Result<(PriorSource, Vec<String>), CoreError> {
        if spec == "builtin" {
            let m = maslens_prior::load_default()?;
            return Ok((PriorSource::Builtin(Box::new(m)), Vec::new()));
        }
        let f = maslens_prior::probs::read(Path::new(spec))?;
        let skipped = f.skipped.iter().map(|e| e.to_string()).collect();
        Ok((PriorSource::Probs(f), skipped))
    }

    /// The step and agent distributions for a trace, when known (a file without agent
    /// distributions gives an empty agent list: summed step probabilities stand in).
    pub fn view(&self, trace: &Trace) -> Option<crate::stack::PriorView> {
        let steps = self.probs(trace)?;
        let agents = match self {
            PriorSource::Builtin(m) => m.agent_distribution(trace),
            PriorSource::Probs(f) => f
                .agents_by_trace
                .get(&trace.id)
                .cloned()
                .unwrap_or_default(),
            PriorSource::File(_) => Vec::new(),
        };
        Some(crate::stack::PriorView { steps, agents })
    }

    /// The built-in model, when this is it (its evidence explains a verdict).
    pub fn model(&self) -> Option<&maslens_prior::PriorModel> {
        match self {
            PriorSource::Builtin(m) => Some(m),
            _ => None,
        }
    }

    /// Step distribution (by position) for a trace, when known.
    pub fn probs(&self, trace: &Trace) -> Option<Vec<f64>> {
        match self {
            PriorSource::Builtin(m) => {
                let mut probs = vec![0.0; trace.steps.len()];
                for c in m.rank(trace) {
                    if let Some(p) = trace.position_of(c.step) {
                        probs[p] = c.prob;
                    }
                }
                Some(probs)
            }
            PriorSource::File(map) => map
                .get(&trace.id)
                .filter(|p| p.len() == trace.steps.len())
                .cloned(),
            PriorSource::Probs(f) => f
                .by_trace
                .get(&trace.id)
                .filter(|p| p.len() == trace.steps.len())
                .cloned(),
        }
    }

    /// Prior-only prediction (the `prior` method): the built-in model's own pair rule (as
    /// `maslens prior eval` scores it); for a probabilities file, the most probable step and the
    /// agent acting there.
    pub fn predict(&self, trace: &Trace) -> Option<(String, usize)> {
        if let PriorSource::Builtin(m) = self {
            return m.predict(trace);
        }
        let probs = self.probs(trace)?;
        let best = probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))?
            .0;
        // A file's agent distribution, when it has one, answers the agent level (as the model's
        // independent pair rule does).
        let agent = match self {
            PriorSource::Probs(f) => f
                .agents_by_trace
                .get(&trace.id)
                .and_then(|a| a.first())
                .map(|(a, _)| a.clone()),
            _ => None,
        };
        Some((
            agent.unwrap_or_else(|| trace.steps[best].agent.clone()),
            trace.steps[best].index,
        ))
    }
}

/// A prior verdict as JSON: the agent-level answer (`agent`, what agent accuracy scores), the
/// decisive step (`step`) and the agent acting there (`step_agent`). Under the `independent`
/// pair rule the two heads answer separately, so `agent` need not act at `step`; `coherent`
/// says whether it does, and a display shows two answers when it does not
/// ([`prior_verdict_text`]), never "AGENT at step N" for an agent that does not act there.
pub fn prior_verdict_json(trace: &Trace, p: Option<&(String, usize)>) -> serde_json::Value {
    let step_agent = p.and_then(|(_, s)| trace.actor_at(*s));
    serde_json::json!({
        "trace": trace.id,
        "agent": p.map(|x| &x.0),
        "step": p.map(|x| x.1),
        "step_agent": step_agent,
        "coherent": p.map(|(a, _)| Some(a.as_str()) == step_agent),
        "method": "prior",
    })
}

/// Why the prior chose `step` (a step index): its strongest features in words, quoting the trace
/// ([`maslens_prior::PriorModel::explain_text`]), when the source is a model; a probabilities
/// file only gives the step's probability.
pub fn prior_evidence(source: &PriorSource, trace: &Trace, step: usize) -> Option<String> {
    let pos = trace.position_of(step)?;
    match source.model() {
        Some(m) => Some(m.explain_text(trace, pos, 3)),
        None => source.probs(trace).map(|p| {
            format!(
                "Step {step} ({}): the prior gives it probability {:.2}, the highest of the trace's steps.",
                trace.steps[pos].agent, p[pos]
            )
        }),
    }
}

/// [`prior_verdict_json`] with the evidence for the step ([`prior_evidence`]) as `rationale`.
pub fn prior_verdict_explained(
    source: &PriorSource,
    trace: &Trace,
    p: Option<&(String, usize)>,
) -> serde_json::Value {
    let mut v = prior_verdict_json(trace, p);
    if let Some(text) = p.and_then(|(_, s)| prior_evidence(source, trace, *s)) {
        v["rationale"] = text.into();
    }
    if let (Some(m), Some((_, s))) = (source.model(), p) {
        if let Some(pos) = trace.position_of(*s) {
            v["evidence"] = serde_json::to_value(m.explain(trace, pos, 3)).unwrap_or_default();
        }
    }
    v
}

/// One line for a prior verdict: `AGENT at step N` when the agent acts at the step, else the
/// two answers apart (`step N (ACTOR's); agent-level answer: AGENT`).
pub fn prior_verdict_text(trace: &Trace, agent: &str, step: usize) -> String {
    match trace.actor_at(step) {
        Some(actor) if actor == agent => format!("{agent} at step {step}"),
        Some(actor) => format!(
            "decisive step {step} ({actor}'s step); agent-level answer: {agent} (the prior's two \
             heads answer separately)"
        ),
        None => format!("step {step} (not in the trace); agent-level answer: {agent}"),
    }
}

/// The one verdict (`maslens_trace::Verdict`) of the prior on `trace`: its ranked steps (the
/// model's own step answer first, then by probability) and its agent-level answer; `payload` is
/// [`prior_verdict_explained`]. `None` when the prior has no distribution for the trace.
pub fn prior_to_verdict(
    source: &PriorSource,
    trace: &Trace,
    allow_non_acting: bool,
) -> Option<maslens_trace::Verdict> {
    let p = source.predict(trace)?;
    let probs = source.probs(trace).unwrap_or_default();
    let prob_at = |s: usize| trace.position_of(s).and_then(|pos| probs.get(pos).copied());
    let mut ranked: Vec<(usize, Option<f64>)> = vec![(p.1, prob_at(p.1))];
    let mut by_prob: Vec<(usize, f64)> = trace
        .steps
        .iter()
        .zip(&probs)
        .map(|(st, q)| (st.index, *q))
        .collect();
    by_prob.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.extend(by_prob.into_iter().map(|(s, q)| (s, Some(q))));
    let answer = maslens_trace::Answer {
        ranked_steps: ranked,
        agent_head: Some(p.0.clone()),
        others: Vec::new(),
        allow_non_acting,
    };
    let resolved = trace.resolve_answer(&answer);
    let mut payload = prior_verdict_explained(source, trace, Some(&p));
    // The evidence for the primary step: the payload's when it is the prior's own step.
    let rationale = match &resolved.primary {
        Some(prim) if prim.step == p.1 => payload["rationale"].as_str().map(String::from),
        Some(prim) => prior_evidence(source, trace, prim.step),
        None => None,
    };
    let model = match source {
        PriorSource::Builtin(_) => "builtin".to_string(),
        _ => "prior-probabilities file".to_string(),
    };
    // The step distribution by position (the UI draws it as the prior strip).
    payload["probs"] = serde_json::json!(probs);
    let mut v = maslens_trace::Verdict {
        model: Some(model),
        ..maslens_trace::Verdict::new("prior", payload)
    }
    .with_answer(resolved);
    v.rationale = rationale;
    Some(v)
}

/// The prior as a localizer (`--method prior`, and the `prior` baseline of `eval locate`),
/// scored under `pair_rule`.
pub struct PriorLocalizer {
    pub source: PriorSource,
    pub allow_non_acting: bool,
    pub pair_rule: maslens_trace::ScoringRule,
}

impl PriorLocalizer {
    /// The prior with the default rule (coherent pairs, acting agents only).
    pub fn new(source: PriorSource) -> PriorLocalizer {
        PriorLocalizer {
            source,
            allow_non_acting: false,
            pair_rule: maslens_trace::ScoringRule::Coherent,
        }
    }

    /// The one verdict of the prior `source` on `trace` ([`prior_to_verdict`]), or why there is
    /// none.
    pub fn verdict_of(
        source: &PriorSource,
        trace: &Trace,
        allow_non_acting: bool,
    ) -> Result<maslens_trace::Verdict, LocalizeError> {
        match prior_to_verdict(source, trace, allow_non_acting) {
            Some(v) => Ok(v),
            None if trace.steps.is_empty() => Err(LocalizeError::case(format!(
                "{}: the trace has no steps to localize",
                trace.id
            ))),
            None => Err(LocalizeError::case(format!(
                "{}: the prior has no distribution for this trace",
                trace.id
            ))),
        }
    }
}

#[async_trait::async_trait]
impl Localizer for PriorLocalizer {
    fn method(&self) -> String {
        "prior".into()
    }
    async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError> {
        // The same verdict `--method prior` gives (`crate::localize::prior_located`).
        let l = crate::localize::prior_located(&self.source, trace, self.allow_non_acting)?;
        Ok(Localized {
            prediction: l.prediction(self.pair_rule),
            usage: l.usage,
            verdict: Some(l.to_json()),
        })
    }
}

/// The model stacks of a run: the Judge's, and those of distinct Evaluator models.
#[derive(Clone)]
pub struct Models {
    pub judge: Stack,
    pub evaluators: Vec<Stack>,
}

impl Models {
    /// Open the Judge `model` and the Evaluator models of `opts` with the same LLM options.
    /// Call inside a tokio runtime.
    pub async fn open(
        model: &str,
        llm: &OpenOptions,
        opts: &LocateOptions,
    ) -> Result<Models, CoreError> {
        let n = opts.evaluator_models.len();
        if n > 1 && n != opts.evaluators.len() {
            return Err(CoreError::Invalid(format!(
                "--evaluator-model given {n} times: give it once (all Evaluators) or once per style ({} styles)",
                opts.evaluators.len()
            )));
        }
        let judge = maslens_llm::open(model, llm).await?;
        let mut evaluators = Vec::new();
        for spec in &opts.evaluator_models {
            evaluators.push(maslens_llm::open(spec, llm).await?);
        }
        Ok(Models { judge, evaluators })
    }

    /// A pipeline over these models.
    pub fn locator<'a>(&'a self, config: LocateConfig, styles: &[Style]) -> Locator<'a> {
        let judge: &dyn ChatModel = self.judge.model.as_ref();
        let evaluators = styles
            .iter()
            .enumerate()
            .map(|(i, &style)| {
                let model: &dyn ChatModel = match self.evaluators.len() {
                    0 => judge,
                    1 => self.evaluators[0].model.as_ref(),
                    _ => self.evaluators[i].model.as_ref(),
                };
                EvaluatorSpec { style, model }
            })
            .collect();
        Locator {
            judge,
            evaluators,
            config,
        }
    }
}

/// The AgentLocate pipeline as a localizer over opened models.
pub struct LlmLocalizer<'m> {
    pub models: &'m Models,
    pub config: LocateConfig,
    pub styles: Vec<Style>,
    /// Distributions for the prior voter and prior-guided narrowing.
    pub prior: Option<PriorSource>,
}

impl LlmLocalizer<'_> {
    /// The pipeline over `trace`, with its typed verdict.
    pub async fn verdict(&self, trace: &Trace) -> Result<LocateVerdict, LocateError> {
        let locator = self.models.locator(self.config.clone(), &self.styles);
        let p = self.prior.as_ref().and_then(|p| p.probs(trace));
        locator.locate(trace, p.as_deref()).await
    }

    /// Per-case usage of a verdict, priced with the Judge model's price when known.
    pub fn usage_of(&self, v: &LocateVerdict) -> CaseUsage {
        let mut u = v.usage;
        u.cost_usd = self
            .models
            .judge
            .usage
            .price()
            .map(|p| p.cost(&v.usage.usage()));
        u
    }
}

/// The prediction a pipeline verdict stands for.
pub fn prediction_of(v: &LocateVerdict) -> Prediction {
    Prediction {
        agent: v.agent.clone(),
        step: v.step,
        error_mode: v.error_mode.clone(),
        abstained: v.step.is_none(),
        parse_failures: v.usage.abstentions,
    }
}

#[async_trait::async_trait]
impl Localizer for LlmLocalizer<'_> {
    fn method(&self) -> String {
        self.models
            .locator(self.config.clone(), &self.styles)
            .method()
    }
    fn model(&self) -> Option<String> {
        Some(self.models.judge.model.id().to_string())
    }
    fn prompts(&self) -> Vec<PromptRef> {
        maslens_locate::prompts::all()
            .map(|t| PromptRef::new(t.name, t.source))
            .collect()
    }
    async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError> {
        match self.verdict(trace).await {
            Ok(v) => Ok(Localized {
                prediction: prediction_of(&v),
                usage: self.usage_of(&v),
                verdict: serde_json::to_value(&v).ok(),
            }),
            Err(
                e @ LocateError::Llm {
                    source: maslens_llm::LlmError::Budget(_),
                    ..
                },
            ) => Err(LocalizeError::stop(e)),
            Err(e) => Err(LocalizeError::case(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::{DecisiveLabel, Step};

    fn trace() -> Trace {
        let mut t = Trace::new("x/1");
        for (i, a) in ["human", "Planner", "Coder"].iter().enumerate() {
            t.steps.push(Step {
                index: i,
                agent: a.to_string(),
                content: format!("step {i}: the value is {}", i * 7),
                ..Default::default()
            });
        }
        t.labels.decisive = Some(DecisiveLabel {
            agent: "Coder".into(),
            step: 2,
            reason: None,
        });
        t
    }

    #[test]
    fn method_prior_needs_no_prior_flag() {
        let o = LocateOptions {
            method: Method::Prior,
            ..Default::default()
        };
        assert_eq!(o.prior_spec(), Some("builtin"));
        // The default (stacked) combines the pipeline with the built-in prior.
        assert_eq!(LocateOptions::default().method, Method::Stacked);
        assert_eq!(LocateOptions::default().prior_spec(), Some("builtin"));
        let llm = LocateOptions {
            method: Method::Llm,
            ..Default::default()
        };
        assert_eq!(llm.prior_spec(), None);
        let narrowing = LocateOptions {
            prior_narrowing: true,
            ..llm
        };
        assert_eq!(narrowing.prior_spec(), Some("builtin"));
        assert_eq!(
            narrowing.config(false).prior_weight,
            0.0,
            "narrowing alone does not vote"
        );
    }

    #[test]
    fn file_prior_predicts_the_most_probable_step_and_its_agent() {
        let mut map = HashMap::new();
        map.insert("x/1".to_string(), vec![0.1, 0.7, 0.2]);
        map.insert("short".to_string(), vec![1.0]);
        let p = PriorSource::File(map);
        let t = trace();
        assert_eq!(p.predict(&t), Some(("Planner".to_string(), 1)));
        let mut other = trace();
        other.id = "short".into();
        assert_eq!(
            p.probs(&other),
            None,
            "a distribution of the wrong length is not used"
        );
    }

    #[tokio::test]
    async fn prior_localizer_answers_and_explains_missing_answers() {
        let mut map = HashMap::new();
        map.insert("x/1".to_string(), vec![0.1, 0.2, 0.7]);
        let l = PriorLocalizer::new(PriorSource::File(map));
        let r = l.localize(&trace()).await.unwrap();
        assert_eq!(r.prediction.agent.as_deref(), Some("Coder"));
        assert_eq!(r.verdict.unwrap()["step"], 2);
        let mut empty = Trace::new("e");
        let e = l.localize(&empty).await.unwrap_err();
        assert!(e.to_string().contains("no steps"), "{e}");
        empty.steps = trace().steps;
        let e = l.localize(&empty).await.unwrap_err();
        assert!(e.to_string().contains("no distribution"), "{e}");
    }
}
