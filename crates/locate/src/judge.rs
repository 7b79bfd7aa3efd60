//! The Judge protocols (AgentLocate eq. 1 with the prompts `p` of `prompts/locate/judge_*`).
//!
//! - **all-at-once**: one call over the whole trace returns (agent, step, reason, confidence).
//!   Too long for the context window even with per-step truncation: consecutive windows, each
//!   shown with the task and the summaries of the earlier windows; the first window whose answer
//!   says the decisive step lies inside it wins; if no window says so, the window candidate with
//!   the highest confidence wins (earliest on ties).
//! - **step-by-step**: for t = 0, 1, ... the Judge sees the prefix up to step t and says whether
//!   step t is decisive; the first flagged step wins with agent rho(t). An answer that cannot be
//!   parsed counts as "not flagged" (and as an abstention in the accounting). **No step flagged**:
//!   the Judge abstains (`abstain_reason = "no step was flagged as decisive"`); the pipeline's
//!   Evaluators then run without a hypothesis, and scorers count the case as unparsed. Prefixes
//!   too long for the window are shown as the last steps that fit (earlier steps were already
//!   cleared) with a note saying so.
//! - **binary search** (the Who&When baseline): the current range [lo, hi] is shown with step
//!   numbers and the Judge says whether the decisive step lies in the first half [lo, mid] or the
//!   second half [mid+1, hi], mid = (lo + hi) / 2, until one step is left. An ambiguous or
//!   unparsable answer deterministically goes to the **first** half (the decisive step is the
//!   earliest one). Confidence is the minimum over the answered rounds.
//!
//! - **a2p** (Abduct-Act-Predict, West et al. 2025, arXiv 2509.10401; [`a2p`]): one call over
//!   the whole trace that reasons in the paper's three stages (the hidden cause, the smallest
//!   correction, the run predicted forward with it) before it names the step and agent. Too
//!   long for one call: all-at-once's windows.
//! - **taxonomy** (AEGIS-style, Kong et al. 2025; [`taxonomy`]): one call that lists the failure
//!   modes of a fixed taxonomy (Aegis-Bench's 14 MAST modes) seen in the trace, each with its
//!   step, then names the decisive one with its step, agent and mode. Too long for one call:
//!   all-at-once's windows.
//! - **echo** (ECHO-style, Banerjee et al. 2025; [`echo`]): a hierarchical context around a focus
//!   step (the prior's, or a scout call's), six analysts with different stances over it, and a
//!   confidence-weighted consensus vote of their answers.
//!
//! By default no protocol sees the reference answer; `Settings::with_ground_truth` adds it.

mod a2p;
mod binary;
mod counterfactual;
mod echo;
mod one_pass;
mod step_by_step;
mod taxonomy;

pub use taxonomy::{taxonomy_codes, taxonomy_schema};

use crate::render::{self, Strategy, MIN_STEP_CHARS};
use crate::{finding_from_answer, prompts, Finding, LocateError, LocationAnswer};
use maslens_llm::prompt::{untrusted, Rendered};
use maslens_llm::structured::StructuredOutput;
use maslens_llm::typed::complete_as_checked;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How the Judge reads the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    AllAtOnce,
    StepByStep,
    BinarySearch,
    /// Abduct-Act-Predict ([`a2p`]).
    A2p,
    /// The AEGIS-style taxonomy-guided Judge ([`taxonomy`]).
    Taxonomy,
    /// The ECHO-style panel: hierarchical context, analysts, consensus ([`echo`]).
    Echo,
    /// AgenTracer-style counterfactual checking, the replay predicted by the model
    /// ([`counterfactual`]).
    Counterfactual,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::AllAtOnce => "all-at-once",
            Protocol::StepByStep => "step-by-step",
            Protocol::BinarySearch => "binary-search",
            Protocol::A2p => "a2p",
            Protocol::Taxonomy => "taxonomy",
            Protocol::Echo => "echo",
            Protocol::Counterfactual => "counterfactual",
        }
    }
    pub fn all() -> [Protocol; 7] {
        [
            Protocol::AllAtOnce,
            Protocol::StepByStep,
            Protocol::BinarySearch,
            Protocol::A2p,
            Protocol::Taxonomy,
            Protocol::Echo,
            Protocol::Counterfactual,
        ]
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all-at-once" | "all_at_once" => Ok(Protocol::AllAtOnce),
            "step-by-step" | "step_by_step" => Ok(Protocol::StepByStep),
            "binary-search" | "binary_search" | "binary" => Ok(Protocol::BinarySearch),
            "a2p" | "abduct-act-predict" => Ok(Protocol::A2p),
            "taxonomy" | "aegis-taxonomy" => Ok(Protocol::Taxonomy),
            "echo" => Ok(Protocol::Echo),
            "counterfactual" => Ok(Protocol::Counterfactual),
            other => Err(format!(
                "unknown protocol {other:?} (all-at-once, step-by-step, binary-search, a2p, \
                 taxonomy, echo, counterfactual)"
            )),
        }
    }
}

/// Settings shared by the Judge and the Evaluators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Show the reference answer (the Who&When "with ground truth" setting).
    pub with_ground_truth: bool,
    /// Error-mode codes to choose from (Aegis); empty = no error mode asked.
    pub error_modes: Vec<String>,
    /// Answer token limit per call.
    pub max_answer_tokens: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            with_ground_truth: false,
            error_modes: Vec::new(),
            max_answer_tokens: 384,
        }
    }
}

/// The Judge's result for one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeResult {
    pub protocol: Protocol,
    pub finding: Finding,
    pub stats: Totals,
    /// The strongest long-trace strategy any call of this protocol used.
    pub strategy: Strategy,
    /// Protocol trail: steps reviewed (step-by-step), ranges and answers (binary search),
    /// windows (all-at-once over windows).
    pub trail: Vec<Value>,
}

/// Longest reason an answer may give (the prompts ask for at most two sentences). Under
/// constrained decoding it ends a runaway reason (small models repeat a phrase until the answer
/// budget runs out and the JSON is cut) while the verdict fields that follow still fit.
pub const REASON_MAX_CHARS: usize = 600;

/// Longest agent name an answer may give (names in traces are short; a model that writes a
/// sentence here is not naming an agent). Under constrained decoding the embedded backend fits
/// the reason into what the answer budget leaves (`maslens_llm::schema_budget`): at the default
/// 384 answer tokens, 240 characters, so a looping reason ends and the verdict still fits.
pub const AGENT_MAX_CHARS: usize = 64;

/// JSON schema of an (agent, step) answer.
pub fn location_schema(error_modes: &[String]) -> Value {
    let mut props = json!({
        "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
        "agent": {"type": "string", "maxLength": AGENT_MAX_CHARS},
        "step": {"type": "integer", "minimum": 0},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}
    });
    let mut required = vec!["reason", "agent", "step", "confidence"];
    if !error_modes.is_empty() {
        props["error_mode"] = json!({"type": "string", "enum": error_modes});
        required.push("error_mode");
    }
    json!({"type": "object", "properties": props, "required": required})
}

fn window_schema(error_modes: &[String]) -> Value {
    let mut s = location_schema(error_modes);
    s["properties"]["in_window"] = json!({"type": "boolean"});
    s["properties"]["summary"] = json!({"type": "string"});
    if let Some(req) = s["required"].as_array_mut() {
        req.push(json!("in_window"));
        req.push(json!("summary"));
    }
    s
}

/// A window answer (`window_schema`): a location plus whether it lies in the window.
#[derive(Debug, Deserialize)]
struct WindowAnswer {
    #[serde(flatten)]
    location: LocationAnswer,
    #[serde(default)]
    in_window: bool,
    #[serde(default)]
    summary: Option<String>,
}

/// The check of every answer that carries a location: [`crate::location_problem`] over the
/// steps in `range`.
pub(crate) fn location_check(
    trace: &Trace,
    range: std::ops::RangeInclusive<usize>,
) -> impl Fn(&LocationAnswer) -> Option<String> + Send + Sync + '_ {
    move |a: &LocationAnswer| crate::location_problem(trace, range.clone(), a)
}

/// Index of a trace's last step (the whole trace as a range of step indices).
pub(crate) fn last_index(trace: &Trace) -> usize {
    trace.steps.last().map(|s| s.index).unwrap_or(0)
}

/// No check beyond the schema (answers without a location).
pub(crate) fn no_check<T>(_: &T) -> Option<String> {
    None
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn call<T: DeserializeOwned>(
    model: &dyn ChatModel,
    trace: &Trace,
    context: &str,
    instructions: &Rendered,
    schema: &Value,
    settings: &Settings,
    stage: &str,
    stats: &mut Totals,
    check: &(dyn Fn(&T) -> Option<String> + Send + Sync),
) -> Result<StructuredOutput<T>, LocateError> {
    let req = prompts::request(context, instructions, settings.max_answer_tokens, stage)?;
    let out = complete_as_checked(model, req, schema, check)
        .await
        .map_err(|source| LocateError::Llm {
            trace: trace.id.clone(),
            source,
        })?;
    *stats += out.totals();
    Ok(out)
}

fn strongest(a: Strategy, b: Strategy) -> Strategy {
    if b.rank() > a.rank() {
        b
    } else {
        a
    }
}

/// Run one Judge protocol on a trace.
pub async fn judge(
    model: &dyn ChatModel,
    trace: &Trace,
    protocol: Protocol,
    settings: &Settings,
) -> Result<JudgeResult, LocateError> {
    judge_guided(model, trace, protocol, settings, None).await
}

/// [`judge`] with prior-guided narrowing: when the trace (or a protocol's range or prefix) does
/// not fit the model's window, `prior` (one probability per position in `trace.steps`) picks the
/// steps shown in full; the others are abridged (see [`render::focused`]).
pub async fn judge_guided(
    model: &dyn ChatModel,
    trace: &Trace,
    protocol: Protocol,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    if trace.steps.is_empty() {
        return Err(LocateError::EmptyTrace(trace.id.clone()));
    }
    match protocol {
        Protocol::AllAtOnce => all_at_once(model, trace, settings, prior).await,
        Protocol::StepByStep => step_by_step::step_by_step(model, trace, settings, prior).await,
        Protocol::BinarySearch => binary::binary_search(model, trace, settings, prior).await,
        Protocol::A2p => a2p::a2p(model, trace, settings, prior).await,
        Protocol::Taxonomy => taxonomy::taxonomy(model, trace, settings, prior).await,
        Protocol::Echo => echo::echo(model, trace, settings, prior).await,
        Protocol::Counterfactual => {
            counterfactual::counterfactual(model, trace, settings, prior).await
        }
    }
}

/// Tokens left for a trace's steps in one locate prompt (system, context, instructions and
/// the answer excluded); `None` when the model's context is unknown. Judge, Evaluators and the
/// refinement export all render against this budget.
pub(crate) fn budget(model: &dyn ChatModel, trace: &Trace, settings: &Settings) -> Option<usize> {
    let overhead = prompts::overhead_tokens(
        model,
        trace,
        settings.with_ground_truth,
        &settings.error_modes,
    );
    render::trace_budget(model, overhead, settings.max_answer_tokens as usize)
}

pub(crate) async fn all_at_once(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let mut stats = Totals::default();
    let n = trace.steps.len();
    let budget = budget(model, trace, settings);
    let criterion = prompts::criterion()?;
    let guide = prior.map(|p| (p, None));
    if let Some(fitted) = render::fit_guided(model, trace, 0..n, budget, MIN_STEP_CHARS, guide) {
        let ctx = prompts::fitted_context(trace, &fitted, settings.with_ground_truth)?;
        let instr = prompts::JUDGE_ALL_AT_ONCE.rendered(json!({"criterion": criterion, "error_modes": crate::error_mode_lines(&settings.error_modes)}))?;
        let schema = location_schema(&settings.error_modes);
        let out: StructuredOutput<LocationAnswer> = call(
            model,
            trace,
            &ctx,
            &instr,
            &schema,
            settings,
            "judge/all-at-once",
            &mut stats,
            &location_check(trace, 0..=last_index(trace)),
        )
        .await?;
        let finding = finding_from_answer(trace, out.value.as_ref(), out.abstain_reason.as_deref());
        return Ok(JudgeResult {
            protocol: Protocol::AllAtOnce,
            finding,
            stats,
            strategy: fitted.strategy,
            trail: Vec::new(),
        });
    }
    // Windows over the step sequence, with the task and a running summary carried forward.
    const NOTES_RESERVE: usize = 400;
    let window_budget = budget
        .unwrap_or(usize::MAX)
        .saturating_sub(NOTES_RESERVE)
        .max(64);
    let wins = render::windows(model, trace, 0..n, window_budget, MIN_STEP_CHARS);
    let strategy = Strategy::Windows {
        windows: wins.len(),
        max_chars_per_step: MIN_STEP_CHARS,
    };
    let schema = window_schema(&settings.error_modes);
    let mut notes: Vec<String> = Vec::new();
    let mut candidates: Vec<Finding> = Vec::new();
    let mut trail = Vec::new();
    let mut chosen: Option<Finding> = None;
    for (k, (range, text)) in wins.iter().enumerate() {
        let lo = trace.steps[range.start].index;
        let hi = trace.steps[range.end - 1].index;
        let note = format!(
            "Window {} of {}: steps {lo} to {hi} of a trace with steps 0 to {}.",
            k + 1,
            wins.len(),
            n - 1
        );
        let ctx = prompts::context(trace, text, Some(&note), settings.with_ground_truth)?;
        let carried =
            carried_notes(model, &notes, NOTES_RESERVE).map(|text| untrusted("notes", &text));
        let instr = prompts::JUDGE_WINDOW.rendered(json!({
            "criterion": criterion, "windows": wins.len(), "window": k + 1, "lo": lo, "hi": hi,
            "notes": carried, "error_modes": crate::error_mode_lines(&settings.error_modes)}))?;
        let out: StructuredOutput<WindowAnswer> = call(
            model,
            trace,
            &ctx,
            &instr,
            &schema,
            settings,
            "judge/all-at-once/window",
            &mut stats,
            &|a: &WindowAnswer| crate::location_problem(trace, lo..=hi, &a.location),
        )
        .await?;
        let answer = out.value.as_ref();
        let mut finding = finding_from_answer(
            trace,
            answer.map(|a| &a.location),
            out.abstain_reason.as_deref(),
        );
        // A window answer must point inside its window.
        if let Some(step) = finding.step {
            if step < lo || step > hi {
                finding = Finding {
                    rationale: finding.rationale.clone(),
                    ..Finding::abstain(format!(
                        "window {}: step {step} is outside steps {lo} to {hi}",
                        k + 1
                    ))
                };
            }
        }
        let in_window = answer.is_some_and(|a| a.in_window);
        let summary = answer
            .and_then(|a| a.summary.as_deref())
            .unwrap_or("(no summary)");
        let mut short: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
        if short.len() < summary.len() {
            short.push_str(" [...]");
        }
        notes.push(format!("Steps {lo}-{hi}: {}", short.replace('\n', " ")));
        trail.push(json!({"window": k + 1, "lo": lo, "hi": hi, "in_window": in_window, "step": finding.step}));
        if in_window && finding.step.is_some() {
            chosen = Some(finding);
            break;
        }
        if finding.step.is_some() {
            candidates.push(finding);
        }
    }
    let finding = chosen.unwrap_or_else(|| {
        candidates
            .into_iter()
            .max_by(|a, b| {
                a.confidence
                    .total_cmp(&b.confidence)
                    .then_with(|| b.step.cmp(&a.step))
            })
            .unwrap_or_else(|| Finding::abstain("no window produced a valid answer"))
    });
    Ok(JudgeResult {
        protocol: Protocol::AllAtOnce,
        finding,
        stats,
        strategy,
        trail,
    })
}

/// Longest window summary carried forward (characters; a longer one is cut with a marker).
const MAX_SUMMARY_CHARS: usize = 400;

/// The window summaries carried into the next window, within `reserve` tokens: the most recent
/// ones that fit, after a line saying how many earlier ones were left out. `None` when there are
/// none. The window budget keeps `reserve` tokens free for them, so a trace with many windows
/// cannot push a prompt past the context window.
fn carried_notes(model: &dyn ChatModel, notes: &[String], reserve: usize) -> Option<String> {
    // Room for the `<notes>` wrapper and the "left out" line.
    const FRAME: usize = 40;
    let mut kept: Vec<&str> = Vec::new();
    let mut used = 0;
    for note in notes.iter().rev() {
        let t = model.count_tokens(note) + 1;
        if used + t + FRAME > reserve {
            break;
        }
        used += t;
        kept.push(note);
    }
    kept.reverse();
    let dropped = notes.len() - kept.len();
    let mut lines: Vec<String> = Vec::new();
    if dropped > 0 {
        lines.push(format!(
            "(summaries of the first {dropped} windows left out: too long for the context window)"
        ));
    }
    lines.extend(kept.iter().map(|s| s.to_string()));
    (!notes.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests;
