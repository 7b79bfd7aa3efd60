//! IF detection (MASIF listings 1-2): windows over long traces, schema-validated answers,
//! evidence checks, merging of events found twice in overlapping windows.

use crate::absorb::AbsorptionResult;
use crate::blind::{check_outcome_blind, BlindView};
use crate::evidence::{self, EvidenceCheck};
use crate::render::{render_roster, wrap_trace, Window};
use crate::taxonomy::{ErrorType, Level};
use crate::ImplicitError;
use maslens_llm::prompt::{untrusted, Template};
use maslens_llm::typed::{complete_as, lenient};
use maslens_llm::{ChatModel, ChatRequest, Message, Usage};
use maslens_render::{PlannedWindow, Planner};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub const DETECT_SYSTEM: Template = maslens_llm::prompt_template!("implicit/detect_system.v1");
pub const DETECT_USER: Template = maslens_llm::prompt_template!("implicit/detect_user.v2");

/// One implicit failure as reported by a detector, with the checks maslens ran on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImplicitFailure {
    /// Source step index (`Step::index`).
    pub step: usize,
    /// The agent the detector blamed.
    pub agent: String,
    pub error_type: ErrorType,
    pub description: String,
    pub evidence: String,
    pub severity: Level,
    pub confidence: Level,
    /// Evidence check against the trace.
    pub evidence_check: EvidenceCheck,
    /// Problems found with this event (unsupported evidence, agent mismatch, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Windows (0-based) in which the detector reported it.
    #[serde(default)]
    pub windows: Vec<usize>,
    /// Absorption classification, when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absorption: Option<AbsorptionResult>,
    /// Group of repeated manifestations this event belongs to (see [`crate::group`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Models that reported this event (multi-judge mode), first one is the representative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<String>,
    /// Share of judges that reported it (multi-judge mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<f64>,
}

impl ImplicitFailure {
    /// Test fixture: a supported (verbatim-evidence) event with empty text, low severity, high
    /// confidence, seen in window 0; tests override fields with struct-update syntax.
    #[cfg(test)]
    pub(crate) fn fixture(step: usize, agent: &str, error_type: ErrorType) -> Self {
        ImplicitFailure {
            step,
            agent: agent.into(),
            error_type,
            description: String::new(),
            evidence: String::new(),
            severity: Level::Low,
            confidence: Level::High,
            evidence_check: crate::evidence::EvidenceCheck {
                status: crate::evidence::EvidenceStatus::Verbatim,
                coverage: 1.0,
                agent_matches: true,
            },
            flags: vec![],
            windows: vec![0],
            absorption: None,
            group: None,
            judges: vec![],
            agreement: None,
        }
    }

    /// Whether the event's evidence was found in the trace.
    pub fn supported(&self) -> bool {
        self.evidence_check.status.supported()
    }
    /// Key used to match the same event across windows and judges.
    pub fn match_key(&self) -> (usize, String, ErrorType) {
        (self.step, self.agent.trim().to_lowercase(), self.error_type)
    }
}

/// Detection settings.
#[derive(Debug, Clone)]
pub struct DetectConfig {
    /// Completion token limit per call.
    pub max_tokens: u32,
    /// Context window to plan for; `None` uses `ChatModel::context_size()`, and when that is
    /// unknown the whole trace goes in one window.
    pub context_tokens: Option<usize>,
    /// Steps repeated between consecutive windows.
    pub overlap_steps: usize,
    /// Longest rendering of one step, in characters (longer steps are cut in the middle).
    pub max_step_chars: usize,
    /// Minimum share of the excerpt's content words found in the step for a paraphrase.
    pub paraphrase_threshold: f64,
    /// Tokens kept free besides the prompt and the answer.
    pub safety_tokens: usize,
    /// Most events accepted per window (schema `maxItems`).
    pub max_events: usize,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            max_tokens: 1024,
            context_tokens: None,
            overlap_steps: 2,
            max_step_chars: 4000,
            paraphrase_threshold: 0.6,
            safety_tokens: 64,
            max_events: 10,
        }
    }
}

/// What detection on one trace produced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Detection {
    /// Events after checking and merging (unsupported ones included, flagged).
    pub events: Vec<ImplicitFailure>,
    /// Windows scanned.
    pub windows: Vec<(usize, usize)>,
    /// Windows where the model gave no valid answer, with the reason.
    pub abstentions: Vec<String>,
    /// Entries of valid answers that could not be read as events (e.g. unknown type), with the reason.
    pub rejected: Vec<String>,
    pub usage: Usage,
    pub calls: u32,
}

/// JSON schema of the detector answer (listing 2). `max_events` caps the list and string
/// lengths are capped, so that a grammar-constrained small model closes its JSON in time.
pub fn detect_schema(max_events: usize) -> Value {
    json!({
        "type": "object",
        "required": ["implicit_failures"],
        "properties": {
            "implicit_failures": {
                "type": "array",
                "maxItems": max_events,
                "items": {
                    "type": "object",
                    "required": ["error_step", "error_agent", "error_type", "error_description", "error_evidence", "severity", "confidence"],
                    "properties": {
                        "error_step": {"type": "integer", "minimum": 0},
                        "error_agent": {"type": "string", "maxLength": 80},
                        "error_type": {"type": "string", "enum": ErrorType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>()},
                        "error_description": {"type": "string", "maxLength": 400},
                        "error_evidence": {"type": "string", "maxLength": 300},
                        "severity": {"type": "string", "enum": ["low", "medium", "high"]},
                        "confidence": {"type": "string", "enum": ["high", "medium", "low"]}
                    }
                }
            },
            "summary": {
                "type": "object",
                "properties": {
                    "total_implicit_failures": {"type": "integer", "minimum": 0},
                    "overall_process_assessment": {"type": "string", "maxLength": 400}
                }
            }
        }
    })
}

/// Rendered detector messages for one window, plus the data text used by the blindness check.
pub struct DetectPrompt {
    pub system: String,
    pub user: String,
    pub data: String,
}

/// Render the detector prompt for the steps at positions `window` of `view`.
pub fn render_detect_prompt(
    view: &BlindView<'_>,
    window: Window,
    n_windows: usize,
    window_no: usize,
    max_step_chars: usize,
) -> Result<DetectPrompt, ImplicitError> {
    let (steps, _) = maslens_render::render(&view.steps[window.range()], Some(max_step_chars));
    let window_note = if n_windows > 1 {
        let first = view.steps[window.start].index;
        let last = view.steps[window.end - 1].index;
        format!(
            "(This is part {} of {} of a long trace: steps {first}-{last} of {}. Report only errors at steps shown here.)",
            window_no + 1,
            n_windows,
            view.steps.len()
        )
    } else {
        String::new()
    };
    let roster = render_roster(view.agents);
    let task = untrusted("task", view.task);
    let trace = wrap_trace(&steps);
    let system = DETECT_SYSTEM.render(json!({}))?;
    let user = DETECT_USER.render(
        json!({"task": task, "roster": roster, "window_note": window_note, "trace": trace}),
    )?;
    // The fixed text of the prompt (template with empty data) may legitimately contain any
    // word; the blindness check only counts what the data adds.
    let skeleton = DETECT_USER
        .render(json!({"task": "", "roster": "", "window_note": window_note, "trace": ""}))?;
    let data = format!("{system}\n{skeleton}\n{task}\n{roster}\n{trace}");
    Ok(DetectPrompt { system, user, data })
}

/// The windows of one trace: the budget for steps in one window is the context minus the
/// prompt without steps, the answer and the safety margin (no limit when the context is unknown).
fn window_plan(
    model: &dyn ChatModel,
    view: &BlindView<'_>,
    cfg: &DetectConfig,
) -> Result<Vec<PlannedWindow>, ImplicitError> {
    let count = |t: &str| model.count_tokens(t);
    let planner = |budget| Planner {
        steps: view.steps,
        count: &count,
        budget,
        cap: cfg.max_step_chars,
    };
    let Some(ctx) = cfg.context_tokens.or_else(|| model.context_size()) else {
        return Ok(planner(None).plan(0..view.steps.len(), 0));
    };
    // Overhead: the prompt with no steps at all.
    let empty = BlindView {
        steps: &[],
        ..*view
    };
    let system = DETECT_SYSTEM.render(json!({}))?;
    let user = DETECT_USER.render(json!({
        "task": untrusted("task", empty.task),
        "roster": render_roster(empty.agents),
        "window_note": "(This is part 10 of 10 of a long trace: steps 1000-1000 of 1000. Report only errors at steps shown here.)",
        "trace": wrap_trace(""),
    }))?;
    let overhead = model.count_tokens(&system)
        + model.count_tokens(&user)
        + cfg.safety_tokens
        + cfg.max_tokens as usize;
    let budget = ctx.saturating_sub(overhead).max(1);
    Ok(planner(Some(budget)).plan(0..view.steps.len(), cfg.overlap_steps))
}

/// The detector's answer (`detect_schema`); the optional `summary` is not read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DetectAnswer {
    #[serde(default)]
    pub implicit_failures: Vec<EventAnswer>,
}

/// One entry of `implicit_failures` as the detector wrote it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EventAnswer {
    /// The step index; a string holding one is accepted too.
    #[serde(default)]
    pub error_step: lenient::UintOrString,
    #[serde(default)]
    pub error_agent: String,
    #[serde(default)]
    pub error_type: String,
    #[serde(default)]
    pub error_description: String,
    #[serde(default)]
    pub error_evidence: String,
    #[serde(default)]
    pub severity: Option<String>,
    #[serde(default)]
    pub confidence: Option<String>,
}

/// One entry of a detector answer, before checking.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    pub step: usize,
    pub agent: String,
    pub error_type: ErrorType,
    pub description: String,
    pub evidence: String,
    pub severity: Level,
    pub confidence: Level,
}

/// Read one entry of `implicit_failures`; `Err` says why it was rejected.
pub fn parse_event(v: &EventAnswer) -> Result<RawEvent, String> {
    let step = v
        .error_step
        .value
        .ok_or_else(|| format!("error_step is not a step index: {}", v.error_step.written))?;
    let ty = v.error_type.as_str();
    let error_type = ErrorType::parse(ty).ok_or_else(|| format!("unknown error_type {ty:?}"))?;
    let level = |l: &Option<String>| l.as_deref().and_then(Level::parse);
    Ok(RawEvent {
        step: step as usize,
        agent: v.error_agent.trim().to_string(),
        error_type,
        description: v.error_description.trim().to_string(),
        evidence: v.error_evidence.trim().to_string(),
        severity: level(&v.severity).unwrap_or(Level::Medium),
        confidence: level(&v.confidence).unwrap_or(Level::Low),
    })
}

/// Turn the events of a validated answer into checked [`ImplicitFailure`]s.
pub fn events_from_answer(
    view: &BlindView<'_>,
    answer: &DetectAnswer,
    window: Window,
    window_no: usize,
    cfg: &DetectConfig,
    rejected: &mut Vec<String>,
) -> Vec<ImplicitFailure> {
    let mut out = Vec::new();
    for (i, item) in answer.implicit_failures.iter().enumerate() {
        let RawEvent {
            step,
            agent,
            error_type,
            description,
            evidence,
            severity,
            confidence,
        } = match parse_event(item) {
            Ok(e) => e,
            Err(why) => {
                rejected.push(format!("window {window_no}, entry {i}: {why}"));
                continue;
            }
        };
        let check = evidence::check(view, step, &agent, &evidence, cfg.paraphrase_threshold);
        let mut flags = Vec::new();
        match check.status {
            evidence::EvidenceStatus::StepNotFound => {
                flags.push(format!("step {step} does not exist in the trace"))
            }
            evidence::EvidenceStatus::Unsupported => flags.push(format!(
                "evidence not found in step {step} (coverage {:.2})",
                check.coverage
            )),
            _ => {}
        }
        if check.status != evidence::EvidenceStatus::StepNotFound {
            let in_window = view.steps[window.start..window.end]
                .iter()
                .any(|s| s.index == step);
            if !in_window {
                flags.push(format!(
                    "step {step} is outside the window the detector saw"
                ));
            }
            if !check.agent_matches {
                flags.push(format!(
                    "agent {agent:?} is not the agent acting at step {step}"
                ));
            }
        }
        out.push(ImplicitFailure {
            step,
            agent,
            error_type,
            description,
            evidence,
            severity,
            confidence,
            evidence_check: check,
            flags,
            windows: vec![window_no],
            absorption: None,
            group: None,
            judges: Vec::new(),
            agreement: None,
        });
    }
    out
}

/// Merge events with the same (step, agent, type): union of windows, highest confidence and
/// best evidence kept. Order: by step, then first appearance.
pub fn merge_duplicates(events: Vec<ImplicitFailure>) -> Vec<ImplicitFailure> {
    let mut out: Vec<ImplicitFailure> = Vec::new();
    for e in events {
        if let Some(prev) = out.iter_mut().find(|p| p.match_key() == e.match_key()) {
            for w in &e.windows {
                if !prev.windows.contains(w) {
                    prev.windows.push(*w);
                }
            }
            let better_evidence =
                e.evidence_check.status.supported() && !prev.evidence_check.status.supported();
            if better_evidence
                || (e.confidence > prev.confidence && e.supported() == prev.supported())
            {
                let windows = std::mem::take(&mut prev.windows);
                *prev = ImplicitFailure { windows, ..e };
            }
        } else {
            out.push(e);
        }
    }
    out.sort_by_key(|e| e.step);
    out
}

/// Detect IFs in one trace with one model.
pub async fn detect(
    model: &dyn ChatModel,
    trace: &Trace,
    cfg: &DetectConfig,
) -> Result<Detection, ImplicitError> {
    let view = BlindView::of(trace);
    let mut det = Detection::default();
    if view.steps.is_empty() {
        return Ok(det);
    }
    let windows = window_plan(model, &view, cfg)?;
    let schema = detect_schema(cfg.max_events);
    let mut all = Vec::new();
    for (no, planned) in windows.iter().enumerate() {
        let w = &planned.window;
        let p = render_detect_prompt(&view, *w, windows.len(), no, planned.cap)?;
        check_outcome_blind(trace, &format!("{}\n{}", p.system, p.user), &p.data)?;
        let req = ChatRequest::new(vec![Message::system(p.system), Message::user(p.user)])
            .max_tokens(cfg.max_tokens)
            .stage("implicit/detect")
            .template(DETECT_USER.name);
        let out = complete_as::<DetectAnswer>(model, req, &schema).await?;
        det.usage += out.usage;
        det.calls += out.calls;
        det.windows
            .push((view.steps[w.start].index, view.steps[w.end - 1].index));
        match out.value {
            Some(v) => all.extend(events_from_answer(
                &view,
                &v,
                *w,
                no,
                cfg,
                &mut det.rejected,
            )),
            None => det.abstentions.push(format!(
                "window {no}: {}",
                out.abstain_reason
                    .unwrap_or_else(|| "no answer".to_string())
            )),
        }
    }
    det.events = merge_duplicates(all);
    Ok(det)
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::{Outcome, Step};

    pub(crate) fn sample_trace(n: usize) -> Trace {
        let mut t = Trace::new("sample");
        t.task = "Find the population of Paris in 2020.".into();
        t.ground_truth = Some("2,148,000".into());
        t.outcome = Outcome::Success;
        t.ensure_agent("Orchestrator", maslens_trace::AgentKind::Orchestrator);
        t.ensure_agent("WebSurfer", maslens_trace::AgentKind::Worker);
        t.steps = (0..n)
            .map(|i| Step {
                index: i,
                agent: if i % 2 == 0 {
                    "Orchestrator".into()
                } else {
                    "WebSurfer".into()
                },
                content: format!(
                    "step {i} content: searched the census page number {i} and read the table"
                ),
                ..Default::default()
            })
            .collect();
        t
    }

    fn answer(events: &[(usize, &str, &str, &str)]) -> String {
        let items: Vec<Value> = events
            .iter()
            .map(|(s, a, ty, ev)| {
                json!({"error_step": s, "error_agent": a, "error_type": ty, "error_description": "d",
                       "error_evidence": ev, "severity": "medium", "confidence": "high"})
            })
            .collect();
        json!({"implicit_failures": items, "summary": {"total_implicit_failures": items.len(), "overall_process_assessment": "x"}})
            .to_string()
    }

    #[tokio::test]
    async fn single_window_checks_evidence_and_flags() {
        let t = sample_trace(4);
        // Fixture answers (hand-written, not a model).
        let m = ScriptedModel::new("fixture").then(answer(&[
            (
                1,
                "WebSurfer",
                "wrong_action",
                "searched the census page number 1",
            ),
            (
                2,
                "Orchestrator",
                "hallucination",
                "the mayor confirmed 3 million",
            ),
            (9, "WebSurfer", "failed_tool_use", "timeout"),
        ]));
        let d = detect(&m, &t, &DetectConfig::default()).await.unwrap();
        assert_eq!(d.windows.len(), 1);
        assert_eq!(d.events.len(), 3);
        assert!(d.events[0].supported() && d.events[0].flags.is_empty());
        assert!(!d.events[1].supported() && d.events[1].flags[0].contains("evidence not found"));
        assert!(d.events[2].flags[0].contains("does not exist"));
        // The prompt never contains the ground truth.
        let calls = m.calls.lock().unwrap();
        assert!(!calls[0]
            .messages
            .iter()
            .any(|m| m.content.contains("2,148,000")));
    }

    #[tokio::test]
    async fn long_trace_uses_overlapping_windows_and_merges_duplicates() {
        let mut t = sample_trace(12);
        for s in &mut t.steps {
            s.content.push_str(&" filler".repeat(250));
        }
        let cfg = DetectConfig {
            context_tokens: Some(4000),
            max_tokens: 256,
            ..Default::default()
        };
        // Dry run to learn the windows, then pick a step inside the first overlap.
        let dry = ScriptedModel::new("fixture").on("implicit/detect_user", answer(&[]));
        let plan = detect(&dry, &t, &cfg).await.unwrap().windows;
        assert!(plan.len() >= 2, "expected several windows, got {plan:?}");
        assert!(plan[1].0 <= plan[0].1, "windows must overlap: {plan:?}");
        let k = plan[1].0;
        let needle = format!("Step {k} | agent:");
        let evidence = format!("searched the census page number {k}");
        // Every window that shows step k reports the same event (fixture answers, not a model).
        let m = ScriptedModel::new("fixture")
            .on_with(
                "implicit/detect_user",
                needle.clone(),
                answer(&[(k, "WebSurfer", "unnecessary_action", evidence.as_str())]),
            )
            .on("implicit/detect_user", answer(&[]));
        let d = detect(&m, &t, &cfg).await.unwrap();
        assert_eq!(d.windows, plan);
        // Task and roster repeated in every window.
        for c in m.calls.lock().unwrap().iter() {
            let user = &c.messages[1].content;
            assert!(user.contains("Find the population of Paris"));
            assert!(user.contains("Agents: Orchestrator (orchestrator), WebSurfer (worker)"));
        }
        let seen_in = m
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.messages[1].content.contains(&needle))
            .count();
        assert!(
            seen_in >= 2,
            "step {k} should be in an overlap (seen in {seen_in} windows)"
        );
        assert_eq!(d.events.len(), 1);
        assert_eq!(d.events[0].windows.len(), seen_in);
    }

    #[tokio::test]
    async fn invalid_answers_abstain_and_bad_entries_are_rejected() {
        let t = sample_trace(3);
        let m = ScriptedModel::new("fixture")
            .then("I think it is fine")
            .then("still not json");
        let d = detect(&m, &t, &DetectConfig::default()).await.unwrap();
        assert!(d.events.is_empty());
        assert_eq!(d.abstentions.len(), 1);
        let mut rejected = Vec::new();
        let view = BlindView::of(&t);
        let v: DetectAnswer = serde_json::from_value(json!({"implicit_failures": [{"error_step": "x", "error_type": "wrong_action"}, {"error_step": 1, "error_type": "nope"}]})).unwrap();
        let ev = events_from_answer(
            &view,
            &v,
            Window { start: 0, end: 3 },
            0,
            &DetectConfig::default(),
            &mut rejected,
        );
        assert!(ev.is_empty());
        assert_eq!(rejected.len(), 2);
        assert!(rejected[0].contains("error_step is not a step index: \"x\""));
    }

    #[test]
    fn an_entry_reads_a_step_given_as_a_string() {
        let e: EventAnswer =
            serde_json::from_value(json!({"error_step": " 2 ", "error_agent": " Coder ",
            "error_type": "wrong_action", "severity": "HIGH"}))
            .unwrap();
        let r = parse_event(&e).unwrap();
        assert_eq!((r.step, r.agent.as_str()), (2, "Coder"));
        assert_eq!((r.severity, r.confidence), (Level::High, Level::Low));
        let e: EventAnswer = serde_json::from_value(json!({"error_step": 2.0})).unwrap();
        assert!(parse_event(&e).unwrap_err().contains("2.0"));
    }
}
