//! The step-by-step protocol (module docs of [`super`]): the Judge sees the growing prefix and
//! says whether its last step is decisive.

use super::{budget, call, no_check, strongest, JudgeResult, Protocol, Settings, REASON_MAX_CHARS};
use crate::render::{self, Strategy, MIN_STEP_CHARS};
use crate::{prompts, Finding, LocateError};
use maslens_llm::structured::StructuredOutput;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde::Deserialize;
use serde_json::{json, Value};

fn step_schema() -> Value {
    json!({"type": "object", "required": ["reason", "decisive", "confidence"], "properties": {
        "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
        "decisive": {"type": "boolean"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
}

/// A step-by-step answer (`step_schema`).
#[derive(Debug, Deserialize)]
struct StepAnswer {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    decisive: Option<bool>,
    #[serde(default)]
    confidence: f64,
}

/// How step-by-step renders the growing prefix once it no longer fits in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefixMode {
    /// Every prefix so far fitted in full.
    Full,
    /// Every step cut to the cap that fits the whole trace: each prefix is then a string prefix
    /// of the next one, so its prompt stays a prefix of the next prompt.
    Capped(usize),
    /// Even the minimum cap does not fit the whole trace: the last steps from `start` are shown.
    Sliding { start: usize },
}

/// Step-by-step's view of the growing prefix `0..=pos`, kept stable from step to step so that
/// the prompt for step t+1 extends the one for step t and a backend's prefix (KV) cache reuses
/// it: the per-step cap is chosen once for the whole trace rather than per prefix, and the
/// sliding window moves in jumps (when the shown steps outgrow the budget, it restarts with the
/// last steps that fill at most half of it) instead of one step at a time. A view that changed
/// every step would make every call re-read the whole window.
struct PrefixView {
    mode: PrefixMode,
}

impl PrefixView {
    fn new() -> Self {
        PrefixView {
            mode: PrefixMode::Full,
        }
    }

    fn render(
        &mut self,
        model: &dyn ChatModel,
        trace: &Trace,
        pos: usize,
        budget: Option<usize>,
        prior: Option<&[f64]>,
    ) -> (String, Option<String>, Strategy) {
        let Some(budget) = budget else {
            let (text, _) = render::render_steps(trace, 0..pos + 1, None);
            return (text, None, Strategy::Full);
        };
        if self.mode == PrefixMode::Full {
            let (text, _) = render::render_steps(trace, 0..pos + 1, None);
            if model.count_tokens(&text) <= budget {
                return (text, None, Strategy::Full);
            }
            self.mode = match render::fit(
                model,
                trace,
                0..trace.steps.len(),
                Some(budget),
                MIN_STEP_CHARS,
            )
            .map(|f| f.strategy)
            {
                Some(Strategy::TruncateSteps {
                    max_chars_per_step, ..
                }) => PrefixMode::Capped(max_chars_per_step),
                _ => PrefixMode::Sliding { start: 0 },
            };
        }
        // Prior-guided narrowing re-ranks the steps for every prefix (the step under review first),
        // so its prompts do not extend each other; it is opt-in and used while it fits.
        if let Some(p) = prior {
            if let Some(f) = render::focused(model, trace, 0..pos + 1, budget, p, Some(pos)) {
                let note = render::view_note(&f.strategy);
                return (f.text, note, f.strategy);
            }
        }
        if let PrefixMode::Capped(cap) = self.mode {
            let (text, n) = render::render_steps(trace, 0..pos + 1, Some(cap));
            if model.count_tokens(&text) <= budget {
                let strategy = if n == 0 {
                    Strategy::Full
                } else {
                    Strategy::TruncateSteps {
                        max_chars_per_step: cap,
                        steps_truncated: n,
                    }
                };
                return (text, None, strategy);
            }
            // Token counts are not exactly additive; fall back to the sliding window.
            self.mode = PrefixMode::Sliding { start: 0 };
        }
        let mut start = match self.mode {
            PrefixMode::Sliding { start } => start.min(pos),
            _ => 0,
        };
        let fits = |from: usize, limit: usize| {
            let (t, _) = render::render_steps(trace, from..pos + 1, Some(MIN_STEP_CHARS));
            model.count_tokens(&t) <= limit
        };
        if !fits(start, budget) {
            // Jump: the last steps that fill at most half the budget (at least the step under review).
            start = pos;
            while start > 0 && fits(start - 1, budget / 2) {
                start -= 1;
            }
        }
        self.mode = PrefixMode::Sliding { start };
        let (text, _) = render::render_steps(trace, start..pos + 1, Some(MIN_STEP_CHARS));
        let note = (start > 0).then(|| {
            format!(
                "Steps {} to {} were reviewed earlier and not judged decisive; they are left out here because the trace is too long for the context window. The trace below starts at step {}.",
                trace.steps[0].index,
                trace.steps[start - 1].index,
                trace.steps[start].index
            )
        });
        (
            text,
            note,
            Strategy::SlidingWindow {
                steps_shown: pos + 1 - start,
                max_chars_per_step: MIN_STEP_CHARS,
            },
        )
    }
}

pub(super) async fn step_by_step(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let mut stats = Totals::default();
    let budget = budget(model, trace, settings);
    let criterion = prompts::criterion()?;
    let schema = step_schema();
    let mut strategy = Strategy::Full;
    let mut trail = Vec::new();
    let mut view = PrefixView::new();
    for pos in 0..trace.steps.len() {
        let step = &trace.steps[pos];
        let (text, note, s) = view.render(model, trace, pos, budget, prior);
        strategy = strongest(strategy, s);
        let ctx = prompts::context(trace, &text, note.as_deref(), settings.with_ground_truth)?;
        let instr = prompts::JUDGE_STEP
            .rendered(json!({"criterion": criterion, "step": step.index, "agent": step.agent}))?;
        let out: StructuredOutput<StepAnswer> = call(
            model,
            trace,
            &ctx,
            &instr,
            &schema,
            settings,
            "judge/step-by-step",
            &mut stats,
            &no_check,
        )
        .await?;
        let decisive = out.value.as_ref().and_then(|v| v.decisive);
        trail.push(json!({"step": step.index, "decisive": decisive}));
        if decisive == Some(true) {
            let v = out.value.as_ref();
            let finding = Finding {
                agent: Some(step.agent.clone()),
                step: Some(step.index),
                rationale: v.map(|v| v.reason.clone()).unwrap_or_default(),
                confidence: v.map_or(0.0, |v| v.confidence).clamp(0.0, 1.0),
                ..Default::default()
            };
            return Ok(JudgeResult {
                protocol: Protocol::StepByStep,
                finding,
                stats,
                strategy,
                trail,
            });
        }
    }
    Ok(JudgeResult {
        protocol: Protocol::StepByStep,
        finding: Finding::abstain("no step was flagged as decisive"),
        stats,
        strategy,
        trail,
    })
}
