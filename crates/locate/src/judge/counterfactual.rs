//! Counterfactual checking in the style of AgenTracer (Zhang et al. 2025, "AgenTracer: Who Is
//! Inducing Failure in the LLM Agentic Systems?", arXiv 2509.03312), whose annotation pipeline
//! proposes a decisive step with a corrected action, replays the run from it, and keeps the
//! step only when the corrected run succeeds, trying again with the rejected diagnoses as
//! history. maslens cannot replay a recorded trace, so the replay is predicted by the model:
//!
//! 1. **Propose** (`judge_counterfactual.v1`): over the whole trace, the decisive step, the agent
//!    acting there, and the message it should have written (`correction`); the steps already
//!    rejected are listed, and naming one again is sent back for repair.
//! 2. **Check** (`judge_counterfactual_check.v1`): the trace with that step replaced by the
//!    correction (marked `[CORRECTED]`); the model predicts the rest of the run and whether the
//!    task would then be solved (`solved`, `confidence`).
//! 3. A step the check accepts is the verdict (its confidence the check's); a rejected one goes
//!    to the next round's list. After [`ROUNDS`] rounds without an accepted step, the verdict is
//!    the candidate the checks found most likely to fix the run (`solved` with its confidence,
//!    else one minus it), said so in the trail.
//!
//! At most `2 x ROUNDS` calls. Departures (docs/locate.md): the replay is the model's prediction,
//! not a run of the system (for systems that can resume, `maslens.improve`'s replay does the
//! real thing); AgenTracer-8B, the model trained on such data, is not used; the prompts are ours.
//! A trace too long for one call goes to all-at-once's windows, unchecked.

use super::{all_at_once, budget, call, last_index, JudgeResult, Protocol, Settings};
use crate::render::{self, MIN_STEP_CHARS};
use crate::{finding_from_answer, prompts, Finding, LocateError, LocationAnswer};
use maslens_llm::structured::StructuredOutput;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde::Deserialize;
use serde_json::{json, Value};

/// Propose-and-check rounds at most.
pub const ROUNDS: usize = 3;
/// Longest correction and predicted continuation (the prompts ask for one or two sentences).
pub const TEXT_MAX_CHARS: usize = 300;
/// Tokens kept free in the propose prompt for the rejected candidates' lines.
const REJECTED_RESERVE_TOKENS: usize = ROUNDS * TEXT_MAX_CHARS * 2 / 3;

/// A proposal: a location and the message that should have been written there.
#[derive(Debug, Deserialize)]
struct Proposal {
    #[serde(flatten)]
    location: LocationAnswer,
    #[serde(default)]
    correction: String,
}

/// The check's prediction of the corrected run.
#[derive(Debug, Deserialize)]
struct Prediction {
    #[serde(default)]
    continuation: String,
    #[serde(default)]
    solved: bool,
    #[serde(default)]
    confidence: f64,
}

/// A checked candidate.
struct Checked {
    finding: Finding,
    correction: String,
    prediction: Prediction,
}

impl Checked {
    /// How likely the check found it that this correction fixes the run.
    fn fixes(&self) -> f64 {
        let c = self.prediction.confidence.clamp(0.0, 1.0);
        if self.prediction.solved {
            c
        } else {
            1.0 - c
        }
    }
}

fn proposal_schema(error_modes: &[String]) -> Value {
    let mut s = super::location_schema(error_modes);
    s["properties"]["correction"] = json!({"type": "string", "maxLength": TEXT_MAX_CHARS});
    if let Some(r) = s["required"].as_array_mut() {
        r.push(json!("correction"));
    }
    s
}

fn prediction_schema() -> Value {
    json!({"type": "object",
        "properties": {
            "continuation": {"type": "string", "maxLength": TEXT_MAX_CHARS},
            "solved": {"type": "boolean"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["continuation", "solved", "confidence"]})
}

/// Run counterfactual checking on `trace` (module docs).
pub(crate) async fn counterfactual(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let n = trace.steps.len();
    let guide = prior.map(|p| (p, None));
    let limit = budget(model, trace, settings).map(|l| l.saturating_sub(REJECTED_RESERVE_TOKENS));
    let Some(fitted) = render::fit_guided(model, trace, 0..n, limit, MIN_STEP_CHARS, guide) else {
        let mut windowed = all_at_once(model, trace, settings, prior).await?;
        windowed.protocol = Protocol::Counterfactual;
        return Ok(windowed);
    };
    let ctx = prompts::fitted_context(trace, &fitted, settings.with_ground_truth)?;
    let mut stats = Totals::default();
    let mut trail = Vec::new();
    let mut checked: Vec<Checked> = Vec::new();
    for round in 1..=ROUNDS {
        let (finding, correction) =
            propose(model, trace, &ctx, settings, &checked, &mut stats).await?;
        let Some(pos) = finding.step.and_then(|s| trace.position_of(s)) else {
            trail.push(json!({"round": round, "abstain_reason": finding.abstain_reason}));
            break;
        };
        // Still a rejected step after the repair: the model has no other candidate.
        if checked.iter().any(|c| c.finding.step == finding.step) {
            trail.push(json!({"round": round, "repeated_step": finding.step}));
            break;
        }
        let prediction = check(model, trace, pos, &correction, settings, &mut stats).await?;
        let accepted = prediction.as_ref().is_none_or(|p| p.solved);
        trail.push(
            json!({"round": round, "agent": finding.agent, "step": finding.step,
            "correction": correction,
            "continuation": prediction.as_ref().map(|p| p.continuation.as_str()),
            "solved": prediction.as_ref().map(|p| p.solved),
            "check_confidence": prediction.as_ref().map(|p| p.confidence),
            "accepted": accepted}),
        );
        let Some(prediction) = prediction else {
            // The corrected trace does not fit one call: the proposal stands unchecked.
            return Ok(result(finding, stats, fitted.strategy, trail));
        };
        let candidate = Checked {
            finding,
            correction,
            prediction,
        };
        if accepted {
            let finding = Finding {
                confidence: candidate.prediction.confidence.clamp(0.0, 1.0),
                ..candidate.finding
            };
            return Ok(result(finding, stats, fitted.strategy, trail));
        }
        checked.push(candidate);
    }
    let best = checked
        .into_iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.fixes().total_cmp(&b.fixes()).then(j.cmp(i)));
    let finding = match best {
        Some((_, c)) => {
            trail.push(json!({"none_accepted": true, "chosen_step": c.finding.step,
                              "fixes": c.fixes()}));
            Finding {
                confidence: c.fixes(),
                ..c.finding
            }
        }
        None => Finding::abstain("no candidate step was proposed"),
    };
    Ok(result(finding, stats, fitted.strategy, trail))
}

fn result(
    finding: Finding,
    stats: Totals,
    strategy: render::Strategy,
    trail: Vec<Value>,
) -> JudgeResult {
    JudgeResult {
        protocol: Protocol::Counterfactual,
        finding,
        stats,
        strategy,
        trail,
    }
}

/// One proposal, not one of the steps already checked.
async fn propose(
    model: &dyn ChatModel,
    trace: &Trace,
    ctx: &str,
    settings: &Settings,
    checked: &[Checked],
    stats: &mut Totals,
) -> Result<(Finding, String), LocateError> {
    let rejected: Vec<Value> = checked
        .iter()
        .map(|c| {
            json!({"step": c.finding.step, "agent": c.finding.agent,
                   "correction": c.correction, "continuation": c.prediction.continuation})
        })
        .collect();
    let instr = prompts::JUDGE_COUNTERFACTUAL.rendered(json!({
        "criterion": prompts::criterion()?,
        "rejected": rejected,
        "error_modes": crate::error_mode_lines(&settings.error_modes)
    }))?;
    let done: Vec<usize> = checked.iter().filter_map(|c| c.finding.step).collect();
    let check = |a: &Proposal| {
        if let Some(p) = crate::location_problem(trace, 0..=last_index(trace), &a.location) {
            return Some(p);
        }
        let step = a.location.step.and_then(|s| usize::try_from(s).ok());
        if let Some(s) = step.filter(|s| done.contains(s)) {
            return Some(format!(
                "step {s} was already checked and rejected: name a different step"
            ));
        }
        a.correction
            .trim()
            .is_empty()
            .then(|| "the correction is empty: write the message that step should have had".into())
    };
    let schema = proposal_schema(&settings.error_modes);
    let out: StructuredOutput<Proposal> = call(
        model,
        trace,
        ctx,
        &instr,
        &schema,
        settings,
        "judge/counterfactual",
        stats,
        &check,
    )
    .await?;
    let answer = out.value.as_ref();
    let finding = finding_from_answer(
        trace,
        answer.map(|a| &a.location),
        out.abstain_reason.as_deref(),
    );
    Ok((
        finding,
        answer.map(|a| a.correction.clone()).unwrap_or_default(),
    ))
}

/// The model's prediction of the run with the step at `pos` replaced by `correction`; `None`
/// when the corrected trace does not fit one call.
async fn check(
    model: &dyn ChatModel,
    trace: &Trace,
    pos: usize,
    correction: &str,
    settings: &Settings,
    stats: &mut Totals,
) -> Result<Option<Prediction>, LocateError> {
    let mut corrected = trace.clone();
    let step = &mut corrected.steps[pos];
    step.content = format!("[CORRECTED] {correction}");
    let (index, agent) = (step.index, step.agent.clone());
    let n = corrected.steps.len();
    let limit = budget(model, &corrected, settings);
    let Some(fitted) = render::fit_guided(model, &corrected, 0..n, limit, MIN_STEP_CHARS, None)
    else {
        return Ok(None);
    };
    let ctx = prompts::fitted_context(&corrected, &fitted, settings.with_ground_truth)?;
    let instr =
        prompts::JUDGE_COUNTERFACTUAL_CHECK.rendered(json!({"step": index, "agent": agent}))?;
    let valid = |p: &Prediction| {
        (!(0.0..=1.0).contains(&p.confidence))
            .then(|| format!("confidence {} is not between 0 and 1", p.confidence))
    };
    let out: StructuredOutput<Prediction> = call(
        model,
        trace,
        &ctx,
        &instr,
        &prediction_schema(),
        settings,
        "judge/counterfactual-check",
        stats,
        &valid,
    )
    .await?;
    // A check that does not answer rejects nothing: the candidate stands, marked unchecked.
    Ok(Some(out.value.unwrap_or(Prediction {
        continuation: format!(
            "the check did not answer ({})",
            out.abstain_reason.as_deref().unwrap_or("no valid answer")
        ),
        solved: true,
        confidence: 0.0,
    })))
}

#[cfg(test)]
mod tests;
