//! The binary-search protocol (module docs of [`super`]): the Judge halves the range until one
//! step is left.

use super::{budget, call, no_check, strongest, JudgeResult, Protocol, Settings, REASON_MAX_CHARS};
use crate::render::{self, Strategy, MIN_STEP_CHARS};
use crate::{prompts, Finding, LocateError};
use maslens_llm::structured::StructuredOutput;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde::Deserialize;
use serde_json::{json, Value};

fn binary_schema() -> Value {
    json!({"type": "object", "required": ["reason", "part", "confidence"], "properties": {
        "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
        "part": {"type": "string", "enum": ["first", "second"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
}

/// A binary-search answer (`binary_schema`).
#[derive(Debug, Deserialize)]
struct BinaryAnswer {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    part: Option<String>,
    #[serde(default)]
    confidence: f64,
}

/// Smallest per-step cap binary search halves down to before it samples the range.
const SAMPLED_CHARS: usize = 60;

pub(super) async fn binary_search(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let mut stats = Totals::default();
    let budget = budget(model, trace, settings);
    let criterion = prompts::criterion()?;
    let schema = binary_schema();
    let mut strategy = Strategy::Full;
    let mut trail = Vec::new();
    let (mut lo, mut hi) = (0usize, trace.steps.len() - 1);
    let mut confidence: Option<f64> = None;
    let mut reason = String::new();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // Fit the range; when even the minimum cap is too long, halve the cap down to
        // SAMPLED_CHARS (explicit markers; reported as truncation with the cap used), then show
        // every k-th step and the halves' boundaries at that cap (reported as sampled).
        let mut cap = MIN_STEP_CHARS;
        let fitted = loop {
            let guide = prior.map(|p| (p, None));
            if let Some(f) = render::fit_guided(model, trace, lo..hi + 1, budget, cap, guide) {
                break f;
            }
            if cap / 2 < SAMPLED_CHARS {
                let keep = [lo, mid, mid + 1, hi];
                if let Some(f) =
                    budget.and_then(|b| render::sampled(model, trace, lo..hi + 1, b, &keep, cap))
                {
                    break f;
                }
                // Not even the boundaries fit: send the range and let the backend say so.
                let (text, n) = render::render_steps(trace, lo..hi + 1, Some(cap));
                break render::Fitted {
                    tokens: model.count_tokens(&text),
                    text,
                    strategy: Strategy::TruncateSteps {
                        max_chars_per_step: cap,
                        steps_truncated: n,
                    },
                };
            }
            cap /= 2;
        };
        strategy = strongest(strategy, fitted.strategy.clone());
        let (ilo, imid, inext, ihi) = (
            trace.steps[lo].index,
            trace.steps[mid].index,
            trace.steps[mid + 1].index,
            trace.steps[hi].index,
        );
        let ctx = prompts::fitted_context(trace, &fitted, settings.with_ground_truth)?;
        let instr = prompts::JUDGE_BINARY.rendered(
            json!({"criterion": criterion, "lo": ilo, "mid": imid, "mid_next": inext, "hi": ihi}),
        )?;
        let out: StructuredOutput<BinaryAnswer> = call(
            model,
            trace,
            &ctx,
            &instr,
            &schema,
            settings,
            "judge/binary-search",
            &mut stats,
            &no_check,
        )
        .await?;
        let part = out.value.as_ref().and_then(|v| v.part.clone());
        let ambiguous = !matches!(part.as_deref(), Some("first") | Some("second"));
        if let Some(v) = &out.value {
            let c = v.confidence.clamp(0.0, 1.0);
            confidence = Some(confidence.map_or(c, |m: f64| m.min(c)));
            reason = v.reason.clone();
        }
        trail
            .push(json!({"lo": ilo, "hi": ihi, "mid": imid, "part": part, "ambiguous": ambiguous}));
        if part.as_deref() == Some("second") {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let step = &trace.steps[lo];
    let finding = Finding {
        agent: Some(step.agent.clone()),
        step: Some(step.index),
        rationale: if reason.is_empty() {
            format!("binary search narrowed the range to step {}", step.index)
        } else {
            reason
        },
        confidence: confidence.unwrap_or(if trace.steps.len() == 1 { 1.0 } else { 0.0 }),
        ..Default::default()
    };
    Ok(JudgeResult {
        protocol: Protocol::BinarySearch,
        finding,
        stats,
        strategy,
        trail,
    })
}
