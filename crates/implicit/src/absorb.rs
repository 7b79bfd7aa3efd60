//! Absorption classification (MASIF listings 3-4), blind to the outcome.
//!
//! The prompt is built from a [`BlindView`] (task, roster, steps) and the IF annotation only,
//! then checked with [`check_outcome_blind`] before it is sent. After the model answers, the
//! paper's tie-break rules that can be checked against the trace's structure are applied:
//! - no step after the IF: nothing downstream can repair or consume it, so the label is
//!   `trivial_issue` (trace termination);
//! - `peer_repair` / `orchestrator_intervention` need a later step by a different agent;
//!   when there is none the label becomes `trivial_issue` (insufficient evidence);
//! - the hierarchical role of the corrective agent decides between the two: when the trace
//!   declares agent kinds and every later step by another agent is an orchestrator's, a
//!   `peer_repair` becomes `orchestrator_intervention`; when no orchestrator acts later (and
//!   the trace declares at least one orchestrator), an `orchestrator_intervention` becomes
//!   `peer_repair`.
//!
//! Every change is recorded in `AbsorptionResult::adjusted`.

use crate::blind::{check_outcome_blind, BlindView};
use crate::detect::ImplicitFailure;
use crate::render::{render_roster, wrap_trace};
use crate::taxonomy::{Absorption, Level};
use crate::ImplicitError;
use maslens_llm::prompt::{untrusted, Template};
use maslens_llm::typed::complete_as;
use maslens_llm::{ChatModel, ChatRequest, Message, Usage};
use maslens_trace::{AgentKind, Trace};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub const ABSORB_SYSTEM: Template = maslens_llm::prompt_template!("implicit/absorb_system.v1");
pub const ABSORB_USER: Template = maslens_llm::prompt_template!("implicit/absorb_user.v2");

/// An absorption label with the model's confidence and rationale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbsorptionResult {
    /// The label, or `None` when the model abstained (counted as unknown).
    pub label: Option<Absorption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Level>,
    #[serde(default)]
    pub rationale: String,
    /// What the model answered, when a tie-break rule changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjusted: Option<String>,
    /// Why there is no label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
}

/// Absorption settings.
#[derive(Debug, Clone)]
pub struct AbsorbConfig {
    pub max_tokens: u32,
    pub context_tokens: Option<usize>,
    /// Steps shown before the IF step.
    pub steps_before: usize,
    pub max_step_chars: usize,
    pub safety_tokens: usize,
}

impl Default for AbsorbConfig {
    fn default() -> Self {
        AbsorbConfig {
            max_tokens: 256,
            context_tokens: None,
            steps_before: 2,
            max_step_chars: 4000,
            safety_tokens: 64,
        }
    }
}

pub fn absorb_schema() -> Value {
    json!({
        "type": "object",
        "required": ["absorption_pattern", "confidence", "rationale"],
        "properties": {
            "absorption_pattern": {"type": "string", "enum": Absorption::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>()},
            "confidence": {"type": "string", "enum": ["high", "medium", "low"]},
            "rationale": {"type": "string", "maxLength": 400}
        }
    })
}

/// The classifier's answer (`absorb_schema`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AbsorbAnswer {
    #[serde(default)]
    pub absorption_pattern: String,
    #[serde(default)]
    pub confidence: Option<String>,
    #[serde(default)]
    pub rationale: String,
}

/// The annotation shown to the classifier: the detector's fields, nothing else.
pub fn annotation_json(e: &ImplicitFailure) -> String {
    let v = json!({
        "error_step": e.step,
        "error_agent": e.agent,
        "error_type": e.error_type.as_str(),
        "error_description": e.description,
        "error_evidence": e.evidence,
        "severity": e.severity.as_str(),
    });
    serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
}

pub struct AbsorbPrompt {
    pub system: String,
    pub user: String,
    pub data: String,
}

/// Render the classifier prompt for `event`: steps from `steps_before` before the IF step
/// onwards, as many as fit in `budget_tokens` (all when `None`).
pub fn render_absorb_prompt(
    view: &BlindView<'_>,
    event: &ImplicitFailure,
    cfg: &AbsorbConfig,
    budget_tokens: Option<usize>,
    count: &dyn Fn(&str) -> usize,
) -> Result<AbsorbPrompt, ImplicitError> {
    let pos = view.position(event.step).unwrap_or(0);
    let start = pos.saturating_sub(cfg.steps_before);
    // From `steps_before` steps before the IF step, through the IF step at least, then as many
    // later steps as fit.
    let planned = maslens_render::Planner {
        steps: view.steps,
        count,
        budget: budget_tokens,
        cap: cfg.max_step_chars,
    }
    .extend(start, pos + 1, view.steps.len());
    let (end, rendered) = (planned.window.end, planned.text);
    let window_note = if start > 0 || end < view.steps.len() {
        format!(
            "(Excerpt of a longer trace: steps {} to {} of {} total.)",
            view.steps.get(start).map(|s| s.index).unwrap_or(0),
            view.steps
                .get(end.saturating_sub(1))
                .map(|s| s.index)
                .unwrap_or(0),
            view.steps.len()
        )
    } else {
        String::new()
    };
    let task = untrusted("task", view.task);
    let annotation = untrusted("annotation", &annotation_json(event));
    let roster = render_roster(view.agents);
    let trace = wrap_trace(&rendered);
    let system = ABSORB_SYSTEM.render(json!({}))?;
    let user = ABSORB_USER.render(json!({
        "task": task, "annotation": annotation, "roster": roster, "window_note": window_note, "trace": trace
    }))?;
    // The fixed text of the prompt (template with empty data) may legitimately contain any
    // word; the blindness check only counts what the data adds.
    let skeleton = ABSORB_USER.render(json!({
        "task": "", "annotation": "", "roster": "", "window_note": window_note, "trace": ""
    }))?;
    Ok(AbsorbPrompt {
        data: format!("{system}\n{skeleton}\n{task}\n{annotation}\n{roster}\n{trace}"),
        system,
        user,
    })
}

/// Apply the structural tie-break rules (module docs). Returns the final label and, when it
/// changed, a note.
pub fn apply_tie_breaks(
    view: &BlindView<'_>,
    event: &ImplicitFailure,
    label: Absorption,
) -> (Absorption, Option<String>) {
    let pos = view.position(event.step);
    let later: &[maslens_trace::Step] = match pos {
        Some(p) => &view.steps[p + 1..],
        None => &[],
    };
    let note = |to: Absorption, why: &str| {
        Some(format!(
            "model said {}; {why}; set to {}",
            label.as_str(),
            to.as_str()
        ))
    };
    if later.is_empty() && label != Absorption::TrivialIssue {
        return (
            Absorption::TrivialIssue,
            note(
                Absorption::TrivialIssue,
                "no step follows the IF (trace termination)",
            ),
        );
    }
    let origin = view
        .position(event.step)
        .map(|p| view.steps[p].agent.to_lowercase())
        .unwrap_or_default();
    let kind = |name: &str| {
        view.agents
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(name))
            .map(|a| a.kind)
            .unwrap_or_default()
    };
    let others: Vec<&maslens_trace::Step> = later
        .iter()
        .filter(|s| s.agent.to_lowercase() != origin)
        .collect();
    match label {
        Absorption::PeerRepair | Absorption::OrchestratorIntervention if others.is_empty() => (
            Absorption::TrivialIssue,
            note(Absorption::TrivialIssue, "no other agent acts after the IF"),
        ),
        Absorption::PeerRepair => {
            let non_tool: Vec<_> = others
                .iter()
                .filter(|s| !matches!(kind(&s.agent), AgentKind::Tool | AgentKind::Human))
                .collect();
            if !non_tool.is_empty()
                && non_tool
                    .iter()
                    .all(|s| kind(&s.agent) == AgentKind::Orchestrator)
            {
                (
                    Absorption::OrchestratorIntervention,
                    note(
                        Absorption::OrchestratorIntervention,
                        "every later corrective agent is an orchestrator",
                    ),
                )
            } else {
                (label, None)
            }
        }
        Absorption::OrchestratorIntervention => {
            let declares = view
                .agents
                .iter()
                .any(|a| a.kind == AgentKind::Orchestrator);
            let acts = others
                .iter()
                .any(|s| kind(&s.agent) == AgentKind::Orchestrator);
            if declares && !acts {
                (
                    Absorption::PeerRepair,
                    note(Absorption::PeerRepair, "no orchestrator acts after the IF"),
                )
            } else {
                (label, None)
            }
        }
        _ => (label, None),
    }
}

/// Classify the absorption of one IF. Returns the result and the usage of the calls made.
pub async fn classify(
    model: &dyn ChatModel,
    trace: &Trace,
    event: &ImplicitFailure,
    cfg: &AbsorbConfig,
) -> Result<(AbsorptionResult, Usage, u32), ImplicitError> {
    let view = BlindView::of(trace);
    let count = |s: &str| model.count_tokens(s);
    let budget = match cfg.context_tokens.or_else(|| model.context_size()) {
        None => None,
        Some(ctx) => {
            let empty = BlindView { steps: &[], ..view };
            let base = render_absorb_prompt(&empty, event, cfg, None, &count)?;
            let overhead = count(&base.system)
                + count(&base.user)
                + cfg.max_tokens as usize
                + cfg.safety_tokens
                + 40;
            Some(ctx.saturating_sub(overhead).max(1))
        }
    };
    let p = render_absorb_prompt(&view, event, cfg, budget, &count)?;
    check_outcome_blind(trace, &format!("{}\n{}", p.system, p.user), &p.data)?;
    let req = ChatRequest::new(vec![Message::system(p.system), Message::user(p.user)])
        .max_tokens(cfg.max_tokens)
        .stage("implicit/absorb")
        .template(ABSORB_USER.name);
    let out = complete_as::<AbsorbAnswer>(model, req, &absorb_schema()).await?;
    let result = match out.value {
        Some(v) => {
            let raw = v.absorption_pattern.as_str();
            match Absorption::parse(raw) {
                Some(label) => {
                    let (label, adjusted) = apply_tie_breaks(&view, event, label);
                    AbsorptionResult {
                        label: Some(label),
                        confidence: v.confidence.as_deref().and_then(Level::parse),
                        rationale: v.rationale,
                        adjusted,
                        abstain_reason: None,
                    }
                }
                None => AbsorptionResult {
                    label: None,
                    confidence: None,
                    rationale: String::new(),
                    adjusted: None,
                    abstain_reason: Some(format!("unknown absorption_pattern {raw:?}")),
                },
            }
        }
        None => AbsorptionResult {
            label: None,
            confidence: None,
            rationale: String::new(),
            adjusted: None,
            abstain_reason: out.abstain_reason.or(Some("no answer".into())),
        },
    };
    Ok((result, out.usage, out.calls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::ErrorType;
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::{Outcome, TraceBuilder};

    fn trace() -> Trace {
        TraceBuilder::new("abs")
            .task("Compute 17 * 3.")
            .ground_truth("UNIQUE-ANSWER-51")
            .outcome(Outcome::Failure)
            .decisive_because("Solver", 1, "Solver multiplied wrongly at step one")
            .metadata("is_correct", json!("false"))
            .metadata("mistake_agent", json!("Solver"))
            .agent("Manager", AgentKind::Orchestrator)
            .agent("Solver", AgentKind::Worker)
            .agent("Checker", AgentKind::Worker)
            .step("Manager", "Solver, compute 17 * 3.")
            .step("Solver", "17 * 3 = 41")
            .step("Checker", "That is wrong, 17 * 3 = 51.")
            .step("Solver", "Final: 51")
            .build()
    }

    fn event(step: usize, agent: &str) -> ImplicitFailure {
        ImplicitFailure {
            description: "wrong product".into(),
            evidence: "17 * 3 = 41".into(),
            severity: Level::Medium,
            ..ImplicitFailure::fixture(step, agent, ErrorType::ReasoningError)
        }
    }

    #[tokio::test]
    async fn prompt_is_outcome_blind() {
        let t = trace();
        let m = ScriptedModel::new("fixture")
            .then(r#"{"absorption_pattern":"peer_repair","confidence":"high","rationale":"Checker fixed it."}"#);
        let (r, _, _) = classify(&m, &t, &event(1, "Solver"), &AbsorbConfig::default())
            .await
            .unwrap();
        assert_eq!(r.label, Some(Absorption::PeerRepair));
        let calls = m.calls.lock().unwrap();
        let all: String = calls[0]
            .messages
            .iter()
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
            .join("\n");
        let user = &calls[0].messages[1].content;
        for forbidden in [
            "UNIQUE-ANSWER-51",
            "multiplied wrongly",
            "mistake_agent",
            "is_correct",
            "ground_truth",
        ] {
            assert!(!all.contains(forbidden), "prompt leaks {forbidden:?}");
        }
        // (The template's own clarifications use the word "decisive dimension"; no outcome words.)
        for forbidden in [
            "failure",
            "success",
            "outcome",
            "decisive-error",
            "decisive failure",
        ] {
            assert!(
                !user.to_lowercase().contains(forbidden),
                "user prompt mentions {forbidden:?}"
            );
        }
        assert!(user.contains("17 * 3 = 41") && user.contains("Checker"));
    }

    #[test]
    fn rendering_a_leak_is_refused() {
        let t = trace();
        let view = BlindView::of(&t);
        let p = render_absorb_prompt(
            &view,
            &event(1, "Solver"),
            &AbsorbConfig::default(),
            None,
            &|s| s.len() / 4,
        )
        .unwrap();
        assert!(check_outcome_blind(&t, &p.user, &p.data).is_ok());
        let leaky = format!("{}\nReference answer: UNIQUE-ANSWER-51", p.user);
        assert!(check_outcome_blind(&t, &leaky, &p.data).is_err());
    }

    #[tokio::test]
    async fn ground_truth_that_is_a_template_word_is_not_a_false_leak() {
        let mut t = trace();
        t.ground_truth = Some("self_workaround".into()); // a word of the template only
        let m = ScriptedModel::new("fixture")
            .then(r#"{"absorption_pattern":"peer_repair","confidence":"high","rationale":"r"}"#);
        let (r, _, _) = classify(&m, &t, &event(1, "Solver"), &AbsorbConfig::default())
            .await
            .unwrap();
        assert_eq!(r.label, Some(Absorption::PeerRepair));
    }

    #[test]
    fn tie_breaks() {
        let t = trace();
        let v = BlindView::of(&t);
        // Last step: nothing downstream.
        let (l, n) = apply_tie_breaks(&v, &event(3, "Solver"), Absorption::UnresolvedPropagation);
        assert_eq!(l, Absorption::TrivialIssue);
        assert!(n.unwrap().contains("trace termination"));
        // Checker (worker) acts later: peer repair stays.
        assert_eq!(
            apply_tie_breaks(&v, &event(1, "Solver"), Absorption::PeerRepair).0,
            Absorption::PeerRepair
        );
        // No orchestrator acts after step 1: orchestrator_intervention becomes peer_repair.
        assert_eq!(
            apply_tie_breaks(
                &v,
                &event(1, "Solver"),
                Absorption::OrchestratorIntervention
            )
            .0,
            Absorption::PeerRepair
        );
        // Self labels are left alone.
        assert_eq!(
            apply_tie_breaks(&v, &event(1, "Solver"), Absorption::SelfCorrected).0,
            Absorption::SelfCorrected
        );
        // Only the orchestrator acts after step 0? Build a trace where it does.
        let mut t2 = trace();
        t2.steps[2].agent = "Manager".into();
        t2.steps[3].agent = "Solver".into();
        let v2 = BlindView::of(&t2);
        assert_eq!(
            apply_tie_breaks(&v2, &event(1, "Solver"), Absorption::PeerRepair).0,
            Absorption::OrchestratorIntervention
        );
        // Nobody else acts after the IF.
        let mut t3 = trace();
        t3.steps[2].agent = "Solver".into();
        let v3 = BlindView::of(&t3);
        assert_eq!(
            apply_tie_breaks(&v3, &event(1, "Solver"), Absorption::PeerRepair).0,
            Absorption::TrivialIssue
        );
    }

    #[tokio::test]
    async fn abstention_is_unknown() {
        let t = trace();
        let m = ScriptedModel::new("fixture")
            .then("no idea")
            .then("{\"absorption_pattern\":\"other\"}");
        let (r, _, calls) = classify(&m, &t, &event(1, "Solver"), &AbsorbConfig::default())
            .await
            .unwrap();
        assert_eq!(calls, 2);
        assert!(r.label.is_none() && r.abstain_reason.is_some());
    }
}
