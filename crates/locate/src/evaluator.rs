//! Evaluators (AgentLocate eq. 2): each re-analyses the trace given the Judge's hypothesis
//! (agent, step) with its own prompt style and returns its own (agent, step, rationale,
//! confidence), free to depart from the Judge.
//!
//! Evaluators see the same context as the all-at-once Judge (same system message, same rendered
//! trace), so the prefix is shared. When the trace does not fit the window even with per-step
//! truncation, the Evaluators see the largest window of steps around the hypothesis (or the
//! last steps when there is none) that fits, with a note saying which steps are shown
//! (`Strategy::Windows { windows: 1, .. }`).

use crate::judge::{call, location_schema, Settings};
use crate::render::{self, Strategy, MIN_STEP_CHARS};
use crate::{finding_from_answer, prompts, Finding, LocateError, LocationAnswer};
use maslens_llm::prompt::Template;
use maslens_llm::structured::StructuredOutput;
use maslens_llm::ChatModel;
use maslens_llm::Totals;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// An Evaluator's prompt style (Appendix D).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    Base,
    Concise,
    Evidence,
}

impl Style {
    pub fn as_str(self) -> &'static str {
        match self {
            Style::Base => "base",
            Style::Concise => "concise",
            Style::Evidence => "evidence",
        }
    }
    pub fn template(self) -> Template {
        match self {
            Style::Base => prompts::EVALUATOR_BASE,
            Style::Concise => prompts::EVALUATOR_CONCISE,
            Style::Evidence => prompts::EVALUATOR_EVIDENCE,
        }
    }
    /// The paper's default set of three.
    pub fn defaults() -> Vec<Style> {
        vec![Style::Base, Style::Concise, Style::Evidence]
    }
    /// `n` styles cycling through base, concise, evidence.
    pub fn cycle(n: usize) -> Vec<Style> {
        Style::defaults().into_iter().cycle().take(n).collect()
    }
}

impl std::str::FromStr for Style {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "base" => Ok(Style::Base),
            "concise" => Ok(Style::Concise),
            "evidence" => Ok(Style::Evidence),
            other => Err(format!(
                "unknown evaluator style {other:?} (base, concise, evidence)"
            )),
        }
    }
}

/// One Evaluator's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorResult {
    pub style: Style,
    /// Model id of this Evaluator.
    pub model: String,
    pub finding: Finding,
    pub stats: Totals,
}

/// The trace view shared by the all-at-once Judge and the Evaluators of one trace.
#[derive(Debug, Clone)]
pub struct SharedView {
    /// The rendered context (task, answer, agents, steps).
    pub context: String,
    pub strategy: Strategy,
}

impl SharedView {
    /// Build the shared context for a trace; `focus` is the step to centre a window on when the
    /// whole trace cannot fit; `prior` (one probability per step position) turns on prior-guided
    /// narrowing for that case (see [`render::focused`]).
    pub fn build(
        model: &dyn ChatModel,
        trace: &Trace,
        settings: &Settings,
        focus: Option<usize>,
        prior: Option<&[f64]>,
    ) -> Result<SharedView, LocateError> {
        let n = trace.steps.len();
        let budget = crate::judge::budget(model, trace, settings);
        let guide = prior.map(|p| (p, None));
        if let Some(f) = render::fit_guided(model, trace, 0..n, budget, MIN_STEP_CHARS, guide) {
            let context = prompts::fitted_context(trace, &f, settings.with_ground_truth)?;
            return Ok(SharedView {
                context,
                strategy: f.strategy,
            });
        }
        let budget = budget.unwrap_or(usize::MAX);
        let centre = focus
            .and_then(|s| trace.position_of(s))
            .unwrap_or(n.saturating_sub(1));
        let (mut lo, mut hi) = (centre, centre);
        let fits = |lo: usize, hi: usize| {
            let (t, _) = render::render_steps(trace, lo..hi + 1, Some(MIN_STEP_CHARS));
            model.count_tokens(&t) <= budget
        };
        loop {
            let mut grew = false;
            if lo > 0 && fits(lo - 1, hi) {
                lo -= 1;
                grew = true;
            }
            if hi + 1 < n && fits(lo, hi + 1) {
                hi += 1;
                grew = true;
            }
            if !grew {
                break;
            }
        }
        let (text, _) = render::render_steps(trace, lo..hi + 1, Some(MIN_STEP_CHARS));
        let note = format!(
            "The trace (steps {} to {}) is too long for the context window: only steps {} to {} are shown, each cut to at most {} characters.",
            trace.steps[0].index,
            trace.steps[n - 1].index,
            trace.steps[lo].index,
            trace.steps[hi].index,
            MIN_STEP_CHARS
        );
        let context = prompts::context(trace, &text, Some(&note), settings.with_ground_truth)?;
        Ok(SharedView {
            context,
            strategy: Strategy::Windows {
                windows: 1,
                max_chars_per_step: MIN_STEP_CHARS,
            },
        })
    }
}

/// Run one Evaluator. `hypothesis` is the Judge's (agent, step); `judge_ran` says whether a Judge
/// ran at all (variant II runs the Evaluators without one).
pub async fn evaluate(
    model: &dyn ChatModel,
    trace: &Trace,
    view: &SharedView,
    style: Style,
    hypothesis: Option<(&str, usize)>,
    judge_ran: bool,
    settings: &Settings,
) -> Result<EvaluatorResult, LocateError> {
    let mut stats = Totals::default();
    let instr = style.template().rendered(json!({
        "criterion": prompts::criterion()?,
        "hypothesis": hypothesis.map(|(a, t)| json!({"agent": a, "step": t})),
        "judge_ran": judge_ran,
        "error_modes": crate::error_mode_lines(&settings.error_modes),
    }))?;
    let schema = location_schema(&settings.error_modes);
    let stage = format!("evaluator/{}", style.as_str());
    let out: StructuredOutput<LocationAnswer> = call(
        model,
        trace,
        &view.context,
        &instr,
        &schema,
        settings,
        &stage,
        &mut stats,
        &crate::judge::location_check(trace, 0..=crate::judge::last_index(trace)),
    )
    .await?;
    Ok(EvaluatorResult {
        style,
        model: model.id().to_string(),
        finding: finding_from_answer(trace, out.value.as_ref(), out.abstain_reason.as_deref()),
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::trace;
    use maslens_llm::testing::ScriptedModel;

    #[tokio::test]
    async fn evaluator_sees_hypothesis_and_may_depart() {
        let t = trace(5);
        let s = Settings::default();
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":1,"confidence":0.9}"#);
        let view = SharedView::build(&m, &t, &s, None, None).unwrap();
        let r = evaluate(&m, &t, &view, Style::Evidence, Some(("A1", 3)), true, &s)
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A1", 1)));
        let calls = m.calls.lock().unwrap();
        let user = &calls[0].messages[1].content;
        assert!(user.contains("proposed that the decisive failure is step 3, by agent A1"));
        assert!(user.contains("quote the exact words"));
        assert!(user.starts_with(&view.context));
    }

    #[tokio::test]
    async fn evaluator_without_judge_says_so() {
        let t = trace(3);
        let s = Settings::default();
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A0","step":0,"confidence":0.2}"#);
        let view = SharedView::build(&m, &t, &s, None, None).unwrap();
        evaluate(&m, &t, &view, Style::Concise, None, false, &s)
            .await
            .unwrap();
        let user = m.calls.lock().unwrap()[0].messages[1].content.clone();
        assert!(user.contains("No hypothesis is given"));
        assert!(!user.contains("You are not required to agree"));
    }

    #[test]
    fn styles_parse_and_cycle() {
        assert_eq!("evidence".parse::<Style>().unwrap(), Style::Evidence);
        assert!("loud".parse::<Style>().is_err());
        assert_eq!(
            Style::cycle(4),
            vec![Style::Base, Style::Concise, Style::Evidence, Style::Base]
        );
    }
}
