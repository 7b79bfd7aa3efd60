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
//!
//! By default no protocol sees the reference answer; `Settings::with_ground_truth` adds it.

mod a2p;

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
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::AllAtOnce => "all-at-once",
            Protocol::StepByStep => "step-by-step",
            Protocol::BinarySearch => "binary-search",
            Protocol::A2p => "a2p",
        }
    }
    pub fn all() -> [Protocol; 4] {
        [
            Protocol::AllAtOnce,
            Protocol::StepByStep,
            Protocol::BinarySearch,
            Protocol::A2p,
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
            other => Err(format!(
                "unknown protocol {other:?} (all-at-once, step-by-step, binary-search, a2p)"
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

fn step_schema() -> Value {
    json!({"type": "object", "required": ["reason", "decisive", "confidence"], "properties": {
        "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
        "decisive": {"type": "boolean"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
}

fn binary_schema() -> Value {
    json!({"type": "object", "required": ["reason", "part", "confidence"], "properties": {
        "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
        "part": {"type": "string", "enum": ["first", "second"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
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
        Protocol::StepByStep => step_by_step(model, trace, settings, prior).await,
        Protocol::BinarySearch => binary_search(model, trace, settings, prior).await,
        Protocol::A2p => a2p::a2p(model, trace, settings, prior).await,
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

async fn step_by_step(
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

/// Smallest per-step cap binary search halves down to before it samples the range.
const SAMPLED_CHARS: usize = 60;

async fn binary_search(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{trace, ContextFixture};
    use maslens_llm::testing::ScriptedModel;

    #[tokio::test]
    async fn all_at_once_normalizes_agent_and_records_mismatch() {
        let t = trace(6);
        // Fixture answer naming the wrong agent for step 3 (acted by A1).
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A0","step":3,"confidence":0.8}"#);
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A1", 3)));
        assert!(r.finding.agent_mismatch);
        assert_eq!(r.finding.named_agent.as_deref(), Some("A0"));
        assert_eq!(r.stats.calls, 1);
        assert_eq!(r.strategy, Strategy::Full);
        let user = &m.calls.lock().unwrap()[0].messages[1].content;
        assert!(!user.contains("reference_answer"));
    }

    #[tokio::test]
    async fn all_at_once_out_of_range_step_abstains() {
        let t = trace(3);
        let out = r#"{"reason":"the message gives no total for the task","agent":"A0","step":9,"confidence":0.8}"#;
        let m = ScriptedModel::new("fixture").then(out).then(out);
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert!(r.finding.location().is_none());
        assert!(r
            .finding
            .abstain_reason
            .unwrap()
            .contains("step 9 is not in the trace"));
        // the step was sent back once, naming the steps shown
        let calls = m.calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        let repair = &calls[1].messages.last().unwrap().content;
        assert!(
            repair.contains("step 9 is not one of the steps shown (0 to 2)"),
            "{repair}"
        );
    }

    #[tokio::test]
    async fn a_tautological_reason_is_sent_back_once() {
        let t = trace(4);
        let m = ScriptedModel::new("fixture")
            .on(
                "locate/judge_all_at_once",
                r#"{"reason":"The decisive failure step is step 2.","agent":"A0","step":2,"confidence":0.8}"#,
            )
            .on(
                "llm/repair",
                r#"{"reason":"\"message 2\" gives no total, so the task is not answered","agent":"A0","step":2,"confidence":0.8}"#,
            );
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A0", 2)));
        assert!(r.finding.rationale.starts_with("\"message 2\""));
        assert_eq!(r.finding.rationale_problem, None);
        assert_eq!((r.stats.calls, r.stats.repairs), (2, 1));
        let repair = m.calls.lock().unwrap()[1]
            .messages
            .last()
            .unwrap()
            .content
            .clone();
        assert!(repair.contains("only restates the verdict"), "{repair}");
        // still a tautology after the repair: the location is kept, the rationale flagged
        let m = ScriptedModel::new("fixture")
            .on(
                "locate/judge_all_at_once",
                r#"{"reason":"A0 made the mistake at step 2.","agent":"A0","step":2,"confidence":0.8}"#,
            )
            .on(
                "llm/repair",
                r#"{"reason":"Step 2 is the decisive failure.","agent":"A0","step":2,"confidence":0.8}"#,
            );
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A0", 2)));
        assert!(r
            .finding
            .rationale_problem
            .as_deref()
            .is_some_and(|p| p.contains("only restates the verdict")));
    }

    #[tokio::test]
    async fn with_ground_truth_shows_the_answer() {
        let mut t = trace(3);
        t.ground_truth = Some("42".into());
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A0","step":0,"confidence":0.5}"#);
        let s = Settings {
            with_ground_truth: true,
            ..Settings::default()
        };
        judge(&m, &t, Protocol::AllAtOnce, &s).await.unwrap();
        assert!(m.calls.lock().unwrap()[0].messages[1]
            .content
            .contains("<reference_answer>\n42\n</reference_answer>"));
    }

    #[tokio::test]
    async fn step_by_step_stops_at_first_flagged_step() {
        let t = trace(8);
        let no = r#"{"reason":"fine","decisive":false,"confidence":0.9}"#;
        let m = ScriptedModel::new("fixture")
            .on_with(
                "locate/judge_step",
                "ends at step 4 ",
                r#"{"reason":"wrong tool","decisive":true,"confidence":0.7}"#,
            )
            .on_with(
                "locate/judge_step",
                "ends at step 6 ",
                r#"{"reason":"also","decisive":true,"confidence":0.9}"#,
            )
            .then(no)
            .then(no)
            .then(no)
            .then(no);
        let r = judge(&m, &t, Protocol::StepByStep, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A0", 4)));
        assert_eq!(r.finding.confidence, 0.7);
        assert_eq!(m.n_calls(), 5, "steps 0..=4 reviewed, then stop");
        // Each call sees exactly the prefix up to the step under review.
        let calls = m.calls.lock().unwrap();
        assert!(calls[2].messages[1].content.contains("Step 2 | agent"));
        assert!(!calls[2].messages[1].content.contains("Step 3 | agent"));
    }

    #[tokio::test]
    async fn step_by_step_without_flag_abstains_and_counts_parse_failures() {
        let t = trace(3);
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"fine","decisive":false,"confidence":0.9}"#)
            .then("garbage")
            .then("still garbage")
            .then(r#"{"reason":"fine","decisive":false,"confidence":0.9}"#);
        let r = judge(&m, &t, Protocol::StepByStep, &Settings::default())
            .await
            .unwrap();
        assert!(r.finding.location().is_none());
        assert_eq!(
            r.finding.abstain_reason.as_deref(),
            Some("no step was flagged as decisive")
        );
        assert_eq!(r.stats.calls, 4);
        assert_eq!(r.stats.abstentions, 1);
        assert_eq!(r.stats.repairs, 1);
    }

    #[tokio::test]
    async fn binary_search_samples_ranges_too_long_for_the_window() {
        // 120 steps of 3,000 characters in a 2,200-token window: even 60 characters per step do
        // not fit, so the first ranges are sampled; every prompt fits and the search still
        // converges to the step the answers point at (always "second": the last step).
        let t = crate::test_support::long_trace(120, 3000);
        let m = ContextFixture::new(
            ScriptedModel::new("fixture").on(
                "locate/judge_binary",
                r#"{"reason":"r","part":"second","confidence":0.8}"#,
            ),
            2200,
        );
        let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
            .await
            .unwrap();
        m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
        assert_eq!(r.finding.location(), Some(("A1", 119)));
        assert!(
            matches!(r.strategy, Strategy::Sampled { stride, .. } if stride >= 2),
            "{:?}",
            r.strategy
        );
        let calls = m.inner.calls.lock().unwrap();
        let first = &calls[0].messages[1].content;
        // The halves' boundaries (0, 59, 60, 119) are shown; left-out runs are marked.
        for k in [0, 59, 60, 119] {
            assert!(first.contains(&format!("Step {k} | agent")), "step {k}");
        }
        assert!(first.contains("left out by maslens: long-trace sampling"));
        assert!(first.contains("only every"));
        // Once a range fits, it is shown without sampling.
        let last = &calls[calls.len() - 1].messages[1].content;
        assert!(!last.contains("left out by maslens"));
    }

    #[tokio::test]
    async fn binary_search_halves_correctly() {
        // 10 steps (0..=9), decisive step 6: [0,9] -> second [5,9] -> first [5,7] -> second [7,7]?
        // mid(0,9)=4: second -> [5,9]; mid=7: first -> [5,7]; mid=6: first -> [5,6]; mid=5: second -> [6,6].
        let t = trace(10);
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"a","part":"second","confidence":0.9}"#)
            .then(r#"{"reason":"b","part":"first","confidence":0.6}"#)
            .then(r#"{"reason":"c","part":"first","confidence":0.8}"#)
            .then(r#"{"reason":"d","part":"second","confidence":0.7}"#);
        let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A0", 6)));
        assert_eq!(r.finding.confidence, 0.6);
        assert_eq!(m.n_calls(), 4);
        let ranges: Vec<(u64, u64)> = r
            .trail
            .iter()
            .map(|v| (v["lo"].as_u64().unwrap(), v["hi"].as_u64().unwrap()))
            .collect();
        assert_eq!(ranges, vec![(0, 9), (5, 9), (5, 7), (5, 6)]);
        // The prompt shows exactly the current range, with step numbers.
        let calls = m.calls.lock().unwrap();
        let third = &calls[2].messages[1].content;
        assert!(third.contains("Step 5 | agent") && third.contains("Step 7 | agent"));
        assert!(!third.contains("Step 4 | agent") && !third.contains("Step 8 | agent"));
        assert!(third.contains("steps 5 to 6") && third.contains("steps 7 to 7"));
    }

    #[tokio::test]
    async fn binary_search_ambiguous_answer_goes_to_first_half() {
        let t = trace(4);
        // Invalid twice (abstain) -> first half [0,1]; then "second" -> [1,1].
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"?","part":"both","confidence":0.5}"#)
            .then("no idea")
            .then(r#"{"reason":"x","part":"second","confidence":0.4}"#);
        let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.location(), Some(("A1", 1)));
        assert_eq!(r.trail[0]["ambiguous"], true);
        assert_eq!(r.stats.abstentions, 1);
    }

    #[tokio::test]
    async fn long_trace_uses_truncation_then_windows_and_reports_it() {
        let t = crate::test_support::long_trace(12, 3000);
        // Context large enough for truncated steps: one call, strategy truncate.
        let m = ContextFixture::new(
            ScriptedModel::new("fixture")
                .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":5,"confidence":0.6}"#),
            9000,
        );
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert!(
            matches!(r.strategy, Strategy::TruncateSteps { .. }),
            "{:?}",
            r.strategy
        );
        assert!(m.inner.calls.lock().unwrap()[0].messages[1]
            .content
            .contains("omitted by maslens"));
        // Tiny context: windows; the second window flags its step.
        let t = crate::test_support::long_trace(40, 3000);
        let m = ContextFixture::new(
            ScriptedModel::new("fixture")
                .on_with("locate/judge_window", "Window 1 of", r#"{"reason":"the message gives no total for the task","in_window":false,"agent":"A0","step":0,"confidence":0.3,"summary":"setup"}"#)
                .on_with("locate/judge_window", "Window 2 of", r#"{"reason":"the message gives no total for the task","in_window":true,"agent":"A1","step":10,"confidence":0.6,"summary":"error"}"#),
            2200,
        );
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        assert!(
            matches!(r.strategy, Strategy::Windows { .. }),
            "{:?}",
            r.strategy
        );
        assert_eq!(m.inner.n_calls(), 2);
        assert_eq!(r.finding.location(), Some(("A0", 10)));
        assert!(r.finding.agent_mismatch);
        // The second window carries the first window's summary as untrusted notes.
        let second = m.inner.calls.lock().unwrap()[1].messages[1].content.clone();
        assert!(second.contains("<notes>\nSteps 0-"), "{second}");
        m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
    }

    #[tokio::test]
    async fn prior_guided_narrowing_replaces_windows_with_one_focused_call() {
        // 40 steps of 3000 chars and a window of 2200 tokens: without a prior, several windows.
        let t = crate::test_support::long_trace(40, 3000);
        let mut prior = vec![0.001; 40];
        prior[17] = 0.9;
        prior[3] = 0.05;
        let m = ContextFixture::new(
            ScriptedModel::new("fixture")
                .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":17,"confidence":0.7}"#),
            2200,
        );
        let r = judge_guided(
            &m,
            &t,
            Protocol::AllAtOnce,
            &Settings::default(),
            Some(&prior),
        )
        .await
        .unwrap();
        let Strategy::Focused {
            steps_full,
            steps_abridged,
            ..
        } = r.strategy
        else {
            panic!("unexpected {:?}", r.strategy)
        };
        assert!(steps_full >= 1 && steps_full + steps_abridged == 40);
        assert_eq!(m.inner.n_calls(), 1, "one call instead of windows");
        assert_eq!(r.finding.location(), Some(("A1", 17)));
        let user = m.inner.calls.lock().unwrap()[0].messages[1].content.clone();
        assert!(user.contains("a learned prior ranks most likely to be decisive"));
        assert!(user.contains("characters of step 0 abridged by maslens"));
        assert!(
            !user.contains("characters of step 17 abridged"),
            "top step in full"
        );
        // Every step is still in the prompt.
        for i in 0..40 {
            assert!(
                user.contains(&format!("Step {i} | agent:")),
                "step {i} missing"
            );
        }
        m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
    }

    #[tokio::test]
    async fn prior_is_ignored_when_the_trace_fits() {
        let t = trace(6);
        let m = ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":3,"confidence":0.8}"#);
        let prior = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let r = judge_guided(
            &m,
            &t,
            Protocol::AllAtOnce,
            &Settings::default(),
            Some(&prior),
        )
        .await
        .unwrap();
        assert_eq!(r.strategy, Strategy::Full);
        assert!(!m.calls.lock().unwrap()[0].messages[1]
            .content
            .contains("abridged"));
    }

    /// Review every step of `t` with a model that never flags; return how many calls did not
    /// extend the previous call's prompt up to the previous step under review.
    async fn step_by_step_prefix_breaks(t: &Trace, ctx: usize) -> (usize, usize, Strategy) {
        let m = ContextFixture::new(
            ScriptedModel::new("fixture").on(
                "locate/judge_step",
                r#"{"reason":"r","decisive":false,"confidence":0.6}"#,
            ),
            ctx,
        );
        let r = judge(&m, t, Protocol::StepByStep, &Settings::default())
            .await
            .unwrap();
        m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
        let calls = m.inner.calls.lock().unwrap();
        assert_eq!(calls.len(), t.steps.len());
        let mut breaks = 0;
        for i in 1..calls.len() {
            let prev = &calls[i - 1].messages[1].content;
            let next = &calls[i].messages[1].content;
            let head = format!("Step {} | agent", i - 1);
            let upto = prev.find(&head).expect("step under review shown");
            if !next.starts_with(&prev[..upto]) {
                breaks += 1;
            }
        }
        (breaks, calls.len(), r.strategy)
    }

    #[tokio::test]
    async fn step_by_step_prompts_extend_each_other_on_long_traces() {
        // Fits in full: every prompt extends the previous one.
        let (breaks, _, strategy) = step_by_step_prefix_breaks(&trace(12), 8000).await;
        assert_eq!((breaks, strategy), (0, Strategy::Full));
        // Fits only truncated: the cap is chosen once for the whole trace, so the view changes
        // once (from full prefixes to capped ones) and never again.
        let t = crate::test_support::long_trace(20, 3000);
        let (breaks, _, strategy) = step_by_step_prefix_breaks(&t, 9000).await;
        assert!(
            matches!(strategy, Strategy::TruncateSteps { .. }),
            "{strategy:?}"
        );
        assert_eq!(breaks, 1);
        // Needs a sliding window: it moves in jumps, not every step.
        let t = crate::test_support::long_trace(120, 3000);
        let (breaks, calls, strategy) = step_by_step_prefix_breaks(&t, 2200).await;
        assert!(
            matches!(strategy, Strategy::SlidingWindow { .. }),
            "{strategy:?}"
        );
        assert!(breaks >= 2, "the window must move: {breaks}");
        assert!(breaks * 3 <= calls, "{breaks} breaks in {calls} calls");
    }

    #[tokio::test]
    async fn step_by_step_narrowing_keeps_the_step_under_review_in_full() {
        let t = crate::test_support::long_trace(30, 3000);
        // The prior favours step 0; the step under review must still be shown in full.
        let mut prior = vec![0.0; 30];
        prior[0] = 1.0;
        let m = ContextFixture::new(
            ScriptedModel::new("fixture")
                .on_with(
                    "locate/judge_step",
                    "Step 29 |",
                    r#"{"reason":"r","decisive":true,"confidence":0.6}"#,
                )
                .on(
                    "locate/judge_step",
                    r#"{"reason":"r","decisive":false,"confidence":0.6}"#,
                ),
            2200,
        );
        let r = judge_guided(
            &m,
            &t,
            Protocol::StepByStep,
            &Settings::default(),
            Some(&prior),
        )
        .await
        .unwrap();
        assert!(
            matches!(r.strategy, Strategy::Focused { .. }),
            "{:?}",
            r.strategy
        );
        let calls = m.inner.calls.lock().unwrap();
        let last = &calls[calls.len() - 1].messages[1].content;
        assert!(
            !last.contains("characters of step 29 abridged"),
            "step under review in full"
        );
    }

    #[tokio::test]
    async fn many_windows_with_long_summaries_never_overflow_the_window() {
        // 120 steps in a 2,200-token window: many windows, each answering with a long summary.
        let t = crate::test_support::long_trace(120, 3000);
        let long = "s".repeat(3000);
        let answer = format!(
            r#"{{"reason":"the message gives no total for the task","in_window":false,"agent":"A0","step":0,"confidence":0.1,"summary":"{long}"}}"#
        );
        // Step 0 lies outside every window but the first: each such answer gets one repair
        // call (which must fit the window too) and, answered alike, the window abstains.
        let m = ContextFixture::new(
            ScriptedModel::new("fixture")
                .on("locate/judge_window", answer.clone())
                .on("llm/repair", answer),
            2200,
        );
        let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
            .await
            .unwrap();
        let Strategy::Windows { windows, .. } = r.strategy else {
            panic!("unexpected {:?}", r.strategy)
        };
        assert!(windows > 10, "{windows} windows");
        m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
        let calls = m.inner.calls.lock().unwrap();
        let last = &calls[calls.len() - 1].messages[1].content;
        assert!(
            last.contains("windows left out: too long for the context window"),
            "{last}"
        );
        assert!(last.contains(" [...]"));
    }
}
