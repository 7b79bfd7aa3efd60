//! The AgentLocate pipeline for one trace: Judge hypothesis (eq. 1), Evaluators (eq. 2),
//! confidence-weighted vote (eq. 3-4), one [`LocateVerdict`].
//!
//! Variants, named as in the paper's section 5 ([`Variant::output`] says which output a run gives):
//! - [`Variant::Judge`] (the paper's Variant I): output = the Judge's hypothesis (i_hat, t_hat), eq. 1.
//! - [`Variant::Verified`] (the paper's Variant II; maslens's default, formerly `full`): Judge, then
//!   H Evaluators given its hypothesis, output = the vote winner (i_eval, t_eval), eq. 4. This is
//!   the verification stage that produces the refinement data; the paper says it localizes worse
//!   on its own than the fine-tuned Judge.
//! - [`Variant::JudgeFt`] (AgentLocate itself, eq. 6): the Judge alone, run with a model that was
//!   fine-tuned on the exported refinement data (`local:BASE+ADAPTER` or a server with the
//!   adapter); the paper's Variant III when that data had the gold labels as targets.
//! - [`Variant::EvaluatorsOnly`] (maslens's addition, no paper variant): no Judge stage; the
//!   Evaluators analyse the trace without a hypothesis and the vote decides.
//!
//! When every Evaluator abstains, the Verified variant falls back to the Judge's hypothesis and
//! says so in `note`.

use crate::evaluator::{evaluate, EvaluatorResult, SharedView, Style};
use crate::judge::{judge_guided, JudgeResult, Protocol, Settings};
use crate::render::Strategy;
use crate::vote::{prior_ballots, vote, Ballot, VoteOutcome};
use crate::{prompts, LocateError};
use maslens_llm::prompt::Template;
use maslens_llm::ChatModel;
use maslens_llm::Totals;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Which stages run and which output is final (section 5 of the paper names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Variant I: the Judge's hypothesis.
    #[serde(alias = "judge-only")]
    Judge,
    /// Variant II: the Evaluators' vote given the Judge's hypothesis.
    #[serde(alias = "full")]
    Verified,
    /// maslens's addition: the Evaluators' vote without a Judge stage.
    EvaluatorsOnly,
    /// AgentLocate's output (eq. 6): the Judge alone, with a fine-tuned model.
    JudgeFt,
}

/// Which output a variant gives, in the paper's terms (recorded in every report's `config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VariantOutput {
    /// The paper's name for it.
    pub paper: &'static str,
    /// The equation that defines the output.
    pub equation: &'static str,
    /// What the output is, in words.
    pub output: &'static str,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Judge => "judge",
            Variant::Verified => "verified",
            Variant::EvaluatorsOnly => "evaluators-only",
            Variant::JudgeFt => "judge-ft",
        }
    }

    /// Every variant, in the order the docs list them.
    pub fn all() -> [Variant; 4] {
        [
            Variant::Judge,
            Variant::Verified,
            Variant::JudgeFt,
            Variant::EvaluatorsOnly,
        ]
    }

    /// The names `--variant` accepts for it: its own first, then the paper's numeral and the
    /// names of earlier maslens versions (`full`, `judge-only`).
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Variant::Judge => &["judge", "judge-only", "i", "I", "variant-i"],
            Variant::Verified => &["verified", "full", "ii", "II", "variant-ii"],
            Variant::JudgeFt => &["judge-ft", "agentlocate", "iii", "III", "variant-iii"],
            Variant::EvaluatorsOnly => &["evaluators-only"],
        }
    }

    /// Whether the Judge runs.
    pub fn runs_judge(self) -> bool {
        self != Variant::EvaluatorsOnly
    }

    /// Whether the Evaluators run and vote.
    pub fn runs_evaluators(self) -> bool {
        matches!(self, Variant::Verified | Variant::EvaluatorsOnly)
    }

    /// Which output this variant gives.
    pub fn output(self) -> VariantOutput {
        match self {
            Variant::Judge => VariantOutput {
                paper: "Variant I",
                equation: "eq. 1",
                output: "the Judge's hypothesis (i_hat, t_hat), without verification or fine-tuning",
            },
            Variant::Verified => VariantOutput {
                paper: "Variant II",
                equation: "eq. 4",
                output: "the Evaluators' confidence-weighted vote (i_eval, t_eval) on the Judge's hypothesis; AgentLocate's own output is the fine-tuned Judge (--variant judge-ft)",
            },
            Variant::JudgeFt => VariantOutput {
                paper: "AgentLocate (Variant III when the Judge was fine-tuned on gold labels)",
                equation: "eq. 6",
                output: "the fine-tuned Judge's answer (i_final, t_final); the model must be the Judge fine-tuned on the refinement data",
            },
            Variant::EvaluatorsOnly => VariantOutput {
                paper: "none (maslens's addition)",
                equation: "eq. 3-4",
                output: "the Evaluators' confidence-weighted vote without a Judge hypothesis",
            },
        }
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Variant::all()
            .into_iter()
            .find(|v| v.names().contains(&s))
            .ok_or_else(|| {
                format!("unknown variant {s:?} (judge, verified, judge-ft, evaluators-only)")
            })
    }
}

/// Configuration of a localization run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateConfig {
    pub protocol: Protocol,
    pub variant: Variant,
    pub settings: Settings,
    /// Weight of the external prior voter (0 = off).
    pub prior_weight: f64,
    /// Prior-guided narrowing: for traces longer than the window, the prior given to
    /// [`Locator::locate`] picks the steps shown in full (see `render::focused`).
    #[serde(default)]
    pub narrow_with_prior: bool,
}

impl Default for LocateConfig {
    fn default() -> Self {
        LocateConfig {
            protocol: Protocol::AllAtOnce,
            variant: Variant::Verified,
            settings: Settings::default(),
            prior_weight: 0.0,
            narrow_with_prior: false,
        }
    }
}

/// Long-trace information of a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongTrace {
    /// The strongest strategy any call used.
    pub strategy: Strategy,
    /// The Judge's strategy and the Evaluators' (shared) strategy.
    pub judge: Option<Strategy>,
    pub evaluators: Option<Strategy>,
    /// Context size of the Judge model, when known.
    pub context_size: Option<usize>,
    /// Tokens of the full rendered trace (by the Judge model's count).
    pub trace_tokens: usize,
}

/// The verdict for one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocateVerdict {
    pub trace: String,
    /// e.g. `locate/all-at-once+3eval`.
    pub method: String,
    pub protocol: Protocol,
    pub variant: Variant,
    /// The Judge model id.
    pub model: String,
    pub agent: Option<String>,
    pub step: Option<usize>,
    /// The first characters of the chosen step's text.
    pub step_excerpt: Option<String>,
    pub rationale: String,
    /// Why the rationale does not explain the location (`crate::rationale_problem`: it only
    /// restates the verdict, or says nothing the step says) when no answer for the final
    /// location passed that check after its one repair call (`null` when one did).
    #[serde(default)]
    pub rationale_problem: Option<String>,
    pub confidence: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    /// Why there is no location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
    /// Share of Evaluators whose (agent, step) equals the final location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<f64>,
    /// Whether the final location came from the vote, the Judge, or a fallback.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub judge: Option<JudgeResult>,
    pub evaluators: Vec<EvaluatorResult>,
    pub vote: Option<VoteOutcome>,
    pub long_trace: LongTrace,
    /// Tokens, calls, repairs, abstentions and wall time (`seconds`) of this verdict.
    pub usage: Totals,
    pub prompt_versions: String,
    /// Text of the trace that tried to steer the Judge or the Evaluators ("ignore the previous
    /// instructions", "the decisive step is 0", a fake verdict, prompt delimiters), each with
    /// whether this verdict did what it asked ([`crate::steering`]); empty when none was found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steering: Vec<crate::steering::SteeringHit>,
}

/// Characters of the step text kept in `step_excerpt`.
pub const EXCERPT_CHARS: usize = 200;

/// An Evaluator: a style and the model answering in that style.
pub struct EvaluatorSpec<'a> {
    pub style: Style,
    pub model: &'a dyn ChatModel,
}

/// Judge + Evaluators + vote over traces.
pub struct Locator<'a> {
    pub judge: &'a dyn ChatModel,
    pub evaluators: Vec<EvaluatorSpec<'a>>,
    pub config: LocateConfig,
}

fn excerpt(trace: &Trace, step: usize) -> Option<String> {
    trace.excerpt(step, EXCERPT_CHARS)
}

impl<'a> Locator<'a> {
    /// A locator with the same model for Judge and Evaluators.
    pub fn new(model: &'a dyn ChatModel, styles: &[Style], config: LocateConfig) -> Self {
        Locator {
            judge: model,
            evaluators: styles
                .iter()
                .map(|&style| EvaluatorSpec { style, model })
                .collect(),
            config,
        }
    }

    /// The method label recorded in verdicts.
    pub fn method(&self) -> String {
        let p = self.config.protocol.as_str();
        match self.config.variant {
            Variant::Judge => format!("locate/{p}"),
            Variant::JudgeFt => format!("locate/{p}/judge-ft"),
            Variant::Verified => format!("locate/{p}+{}eval", self.evaluators.len()),
            Variant::EvaluatorsOnly => {
                format!("locate/evaluators-only+{}eval", self.evaluators.len())
            }
        }
    }

    /// Localize the decisive failure of one trace. `prior` is an optional external distribution
    /// over step positions (same length as `trace.steps`), voting with `config.prior_weight`.
    pub async fn locate(
        &self,
        trace: &Trace,
        prior: Option<&[f64]>,
    ) -> Result<LocateVerdict, LocateError> {
        let start = Instant::now();
        if trace.steps.is_empty() {
            return Err(LocateError::EmptyTrace(trace.id.clone()));
        }
        let guide = if self.config.narrow_with_prior {
            prior.filter(|p| p.len() == trace.steps.len())
        } else {
            None
        };
        let mut templates = Vec::new();
        let judge_result = self.run_judge(trace, guide, &mut templates).await?;
        let hypothesis = judge_result.as_ref().and_then(|j| j.finding.location());
        let evaluated = self
            .run_evaluators(
                trace,
                guide,
                hypothesis,
                judge_result.is_some(),
                &mut templates,
            )
            .await?;
        let mut stats = Totals::default();
        let judge_stats = judge_result.iter().map(|j| &j.stats);
        for s in judge_stats.chain(evaluated.results.iter().map(|e| &e.stats)) {
            stats += s;
        }
        let vote_outcome = self
            .config
            .variant
            .runs_evaluators()
            .then(|| self.cast_vote(trace, prior, &evaluated.results, hypothesis));
        let decision = self.decide(
            vote_outcome.as_ref(),
            judge_result.as_ref(),
            &evaluated.results,
            prior.is_some(),
        );
        let agreement = agreement(&evaluated.results, decision.agent.as_deref(), decision.step);
        let judge_strategy = judge_result.as_ref().map(|j| j.strategy.clone());
        let long_trace = self.long_trace(trace, judge_strategy, evaluated.strategy);
        templates.dedup_by_key(|t| t.name);
        let mut verdict = LocateVerdict {
            trace: trace.id.clone(),
            method: self.method(),
            protocol: self.config.protocol,
            variant: self.config.variant,
            model: self.judge.id().to_string(),
            step_excerpt: decision.step.and_then(|s| excerpt(trace, s)),
            agent: decision.agent,
            step: decision.step,
            rationale: decision.rationale,
            rationale_problem: decision.rationale_problem,
            confidence: decision.confidence,
            error_mode: decision.error_mode,
            abstain_reason: decision.abstain_reason,
            agreement,
            source: decision.source.to_string(),
            note: decision.note,
            judge: judge_result,
            evaluators: evaluated.results,
            vote: vote_outcome,
            long_trace,
            usage: Totals {
                seconds: start.elapsed().as_secs_f64(),
                ..stats
            },
            prompt_versions: prompts::versions(&templates),
            steering: Vec::new(),
        };
        verdict.steering = crate::steering::check(trace, &verdict);
        Ok(verdict)
    }

    /// The Judge stage (when the variant runs it), adding its prompts to `templates`.
    async fn run_judge(
        &self,
        trace: &Trace,
        guide: Option<&[f64]>,
        templates: &mut Vec<Template>,
    ) -> Result<Option<JudgeResult>, LocateError> {
        if !self.config.variant.runs_judge() {
            return Ok(None);
        }
        let protocol = self.config.protocol;
        templates.push(match protocol {
            Protocol::AllAtOnce => prompts::JUDGE_ALL_AT_ONCE,
            Protocol::StepByStep => prompts::JUDGE_STEP,
            Protocol::BinarySearch => prompts::JUDGE_BINARY,
            Protocol::A2p => prompts::JUDGE_A2P,
            Protocol::Taxonomy => prompts::JUDGE_TAXONOMY,
            Protocol::Echo => prompts::JUDGE_ECHO,
            Protocol::Counterfactual => prompts::JUDGE_COUNTERFACTUAL,
        });
        if protocol == Protocol::Echo {
            templates.push(prompts::JUDGE_ECHO_SCOUT);
        }
        if protocol == Protocol::Counterfactual {
            templates.push(prompts::JUDGE_COUNTERFACTUAL_CHECK);
        }
        let settings = &self.config.settings;
        let r = judge_guided(self.judge, trace, protocol, settings, guide).await?;
        if matches!(r.strategy, Strategy::Windows { .. }) {
            templates.push(prompts::JUDGE_WINDOW);
        }
        Ok(Some(r))
    }

    /// The Evaluator stage (when the variant runs it), given the Judge's `hypothesis`, adding
    /// their prompts to `templates`.
    async fn run_evaluators(
        &self,
        trace: &Trace,
        guide: Option<&[f64]>,
        hypothesis: Option<(&str, usize)>,
        judge_ran: bool,
        templates: &mut Vec<Template>,
    ) -> Result<Evaluated, LocateError> {
        let mut evaluated = Evaluated {
            results: Vec::new(),
            strategy: None,
        };
        if !self.config.variant.runs_evaluators() {
            return Ok(evaluated);
        }
        let settings = &self.config.settings;
        // Views are built per model (token counts and windows depend on it); Evaluators that
        // share a model share the view and hence the prompt prefix.
        let mut views: Vec<(String, SharedView)> = Vec::new();
        for spec in &self.evaluators {
            templates.push(spec.style.template());
            let id = spec.model.id().to_string();
            if !views.iter().any(|(m, _)| *m == id) {
                let focus = hypothesis.map(|h| h.1);
                let v = SharedView::build(spec.model, trace, settings, focus, guide)?;
                views.push((id.clone(), v));
            }
            let Some((_, view)) = views.iter().find(|(m, _)| *m == id) else {
                continue;
            };
            evaluated.strategy = Some(view.strategy.clone());
            let r = evaluate(
                spec.model, trace, view, spec.style, hypothesis, judge_ran, settings,
            )
            .await?;
            evaluated.results.push(r);
        }
        Ok(evaluated)
    }

    /// The confidence-weighted vote over the Evaluators' locations, plus the prior voter when
    /// `prior` is given and `config.prior_weight` is positive.
    fn cast_vote(
        &self,
        trace: &Trace,
        prior: Option<&[f64]>,
        evaluators: &[EvaluatorResult],
        hypothesis: Option<(&str, usize)>,
    ) -> VoteOutcome {
        let mut ballots: Vec<Ballot> = evaluators
            .iter()
            .filter_map(|e| {
                e.finding
                    .location()
                    .map(|(a, t)| Ballot::new(a, t, e.finding.confidence))
            })
            .collect();
        if let Some(p) = prior.filter(|_| self.config.prior_weight > 0.0) {
            let probs: Vec<(String, usize, f64)> = trace
                .steps
                .iter()
                .zip(p.iter())
                .map(|(s, &q)| (s.agent.clone(), s.index, q))
                .collect();
            ballots.extend(prior_ballots(&probs, self.config.prior_weight));
        }
        vote(&ballots, hypothesis)
    }

    /// The final location: the vote's winner when it had ballots (from Evaluators, or the prior
    /// voter), else the Judge's hypothesis, else an abstention.
    fn decide(
        &self,
        vote: Option<&VoteOutcome>,
        judge: Option<&JudgeResult>,
        evaluators: &[EvaluatorResult],
        prior_given: bool,
    ) -> Decision {
        let n_eval_ballots = evaluators
            .iter()
            .filter(|e| e.finding.location().is_some())
            .count();
        // The vote decides when an Evaluator cast a ballot or the prior voter is on.
        let vote_decides = n_eval_ballots > 0 || self.config.prior_weight > 0.0;
        let won = vote
            .filter(|_| vote_decides)
            .and_then(|v| Some((v, v.winner.as_ref()?)));
        if let Some((v, winner)) = won {
            let prior_votes = if prior_given {
                self.config.prior_weight
            } else {
                0.0
            };
            let voters = n_eval_ballots as f64 + prior_votes;
            return vote_decision(winner, v, evaluators, judge, voters);
        }
        match judge {
            Some(j) if j.finding.location().is_some() => {
                let f = &j.finding;
                let note = (self.config.variant == Variant::Verified).then(|| {
                    "every Evaluator abstained: fell back to the Judge's hypothesis".to_string()
                });
                Decision {
                    agent: f.agent.clone(),
                    step: f.step,
                    rationale: f.rationale.clone(),
                    rationale_problem: f.rationale_problem.clone(),
                    confidence: f.confidence,
                    error_mode: f.error_mode.clone(),
                    source: "judge",
                    note,
                    abstain_reason: None,
                }
            }
            _ => abstention(judge, evaluators),
        }
    }

    /// The strategies the Judge and the Evaluators used on a long trace, and its size.
    fn long_trace(
        &self,
        trace: &Trace,
        judge: Option<Strategy>,
        evaluators: Option<Strategy>,
    ) -> LongTrace {
        let strategy = [judge.clone(), evaluators.clone()]
            .into_iter()
            .flatten()
            .max_by_key(Strategy::rank)
            .unwrap_or(Strategy::Full);
        let (full_text, _) = crate::render::render_steps(trace, 0..trace.steps.len(), None);
        LongTrace {
            strategy,
            judge,
            evaluators,
            context_size: self.judge.context_size(),
            trace_tokens: self.judge.count_tokens(&full_text),
        }
    }
}

/// The Evaluators' results and the strategy of the (last) view they were shown.
struct Evaluated {
    results: Vec<EvaluatorResult>,
    strategy: Option<Strategy>,
}

/// A verdict's final location, what explains it and where it came from.
struct Decision {
    agent: Option<String>,
    step: Option<usize>,
    rationale: String,
    rationale_problem: Option<String>,
    confidence: f64,
    error_mode: Option<String>,
    /// `vote`, `judge` or `none`.
    source: &'static str,
    note: Option<String>,
    abstain_reason: Option<String>,
}

/// The vote's `winner`, explained by its best supporter (a rationale that passed the check
/// first, then the most confident); its confidence is the winner's support over `voters`.
fn vote_decision(
    winner: &(String, usize),
    vote: &VoteOutcome,
    evaluators: &[EvaluatorResult],
    judge: Option<&JudgeResult>,
    voters: f64,
) -> Decision {
    let (agent, step) = winner.clone();
    let mut supporters: Vec<&EvaluatorResult> = evaluators
        .iter()
        .filter(|e| e.finding.location() == Some((agent.as_str(), step)))
        .collect();
    supporters.sort_by(|x, y| {
        x.finding
            .rationale_problem
            .is_some()
            .cmp(&y.finding.rationale_problem.is_some())
            .then(y.finding.confidence.total_cmp(&x.finding.confidence))
    });
    let best = supporters.first().map(|e| &e.finding);
    let error_mode = supporters
        .iter()
        .find_map(|e| e.finding.error_mode.clone())
        .or_else(|| judge.and_then(|j| j.finding.error_mode.clone()));
    let score = vote.support.first().map(|s| s.score).unwrap_or(0.0);
    let confidence = if voters > 0.0 {
        (score / voters).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Decision {
        agent: Some(agent),
        step: Some(step),
        rationale: best
            .map(|f| f.rationale.clone())
            .unwrap_or_else(|| "chosen by the prior voter".into()),
        rationale_problem: best.and_then(|f| f.rationale_problem.clone()),
        confidence,
        error_mode,
        source: "vote",
        note: None,
        abstain_reason: None,
    }
}

/// No location: the Judge's reason for abstaining, and that no Evaluator gave one.
fn abstention(judge: Option<&JudgeResult>, evaluators: &[EvaluatorResult]) -> Decision {
    let reason = judge
        .and_then(|j| j.finding.abstain_reason.clone())
        .map(|r| format!("judge: {r}"))
        .unwrap_or_default();
    let reason = if evaluators.is_empty() {
        reason
    } else {
        format!("{reason}; no Evaluator gave a valid location")
            .trim_start_matches("; ")
            .to_string()
    };
    Decision {
        agent: None,
        step: None,
        rationale: String::new(),
        rationale_problem: None,
        confidence: 0.0,
        error_mode: None,
        source: "none",
        note: None,
        abstain_reason: Some(reason),
    }
}

/// Share of the Evaluators whose location is the final one (`None` without Evaluators).
fn agreement(
    evaluators: &[EvaluatorResult],
    agent: Option<&str>,
    step: Option<usize>,
) -> Option<f64> {
    let chosen = agent.zip(step);
    (!evaluators.is_empty()).then(|| {
        let agree = evaluators
            .iter()
            .filter(|e| chosen.is_some() && e.finding.location() == chosen)
            .count();
        agree as f64 / evaluators.len() as f64
    })
}

impl LocateVerdict {
    /// What the pipeline ranked: its final location (probability: the verdict's confidence),
    /// then every pair the vote supported, by its share of the confidence-weighted support.
    pub fn answer(&self) -> maslens_trace::Answer {
        let mut ranked: Vec<(usize, Option<f64>)> = self
            .step
            .map(|s| (s, Some(self.confidence)))
            .into_iter()
            .collect();
        if let Some(vote) = &self.vote {
            let total: f64 = vote.support.iter().map(|s| s.score).sum();
            for s in &vote.support {
                let share = (total > 0.0).then(|| s.score / total);
                ranked.push((s.step, share));
            }
        }
        maslens_trace::Answer {
            ranked_steps: ranked,
            ..Default::default()
        }
    }

    /// The one verdict (`maslens_trace::Verdict`) of this pipeline run on `trace`.
    pub fn to_verdict(&self, trace: &Trace, allow_non_acting: bool) -> maslens_trace::Verdict {
        let mut answer = self.answer();
        answer.allow_non_acting = allow_non_acting;
        let resolved = trace.resolve_answer(&answer);
        let moved = resolved.primary.as_ref().map(|p| p.step) != self.step;
        let mut v = maslens_trace::Verdict {
            model: Some(self.model.clone()),
            prompt_version: Some(self.prompt_versions.clone()),
            abstain_reason: self.abstain_reason.clone(),
            ..maslens_trace::Verdict::new(
                self.method.clone(),
                serde_json::to_value(self).unwrap_or(serde_json::Value::Null),
            )
        }
        .with_answer(resolved);
        // The rationale argues for the pipeline's own location: kept only when that is primary.
        if !moved && self.rationale_problem.is_none() && !self.rationale.trim().is_empty() {
            v.rationale = Some(self.rationale.clone());
        }
        v
    }
}

#[cfg(test)]
mod tests;
