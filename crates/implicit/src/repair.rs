//! Counterfactual repair (MASIF section 2.4, listings 5-6): a corrected replacement for each
//! IF step, and matched replay plans (no-op and fix) for the user's own system to resume from.

use crate::detect::ImplicitFailure;
use crate::ImplicitError;
use maslens_llm::prompt::{untrusted, Template};
use maslens_llm::{ChatModel, ChatRequest, Message, Usage};
use maslens_trace::{Step, Trace};
use serde::{Deserialize, Serialize};
use serde_json::json;

pub const REPAIR_SYSTEM: Template = maslens_llm::prompt_template!("implicit/repair_system.v1");
pub const REPAIR_USER: Template = maslens_llm::prompt_template!("implicit/repair_user.v3");
pub const PROMPT_VERSION: &str = "implicit/repair_system.v1+implicit/repair_user.v3";

#[derive(Debug, Clone)]
pub struct RepairConfig {
    pub max_tokens: u32,
    pub context_tokens: Option<usize>,
    pub max_step_chars: usize,
    pub safety_tokens: usize,
}

impl Default for RepairConfig {
    fn default() -> Self {
        RepairConfig {
            max_tokens: 512,
            context_tokens: None,
            max_step_chars: 3000,
            safety_tokens: 64,
        }
    }
}

/// One replay plan line: resume the system from `prefix` followed by `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayPlan {
    pub trace: String,
    pub task: String,
    /// Position of the IF in the trace's counted IF list.
    pub if_index: usize,
    /// Source step index of the IF.
    pub if_step: usize,
    pub agent: String,
    pub error_type: String,
    pub description: String,
    /// `noop` (original step kept) or `fix` (corrected step).
    pub intervention: String,
    /// Steps before the IF step, verbatim.
    pub prefix: Vec<Step>,
    /// The step to resume with (original for `noop`, corrected for `fix`).
    pub step: Step,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_version: Option<String>,
}

/// Clean a model's corrected message: trim, drop code fences around the whole answer and a
/// leading "FixedMessage:" label the prompt forbids but small models still write.
pub fn clean_repair(text: &str) -> String {
    let mut t = text.trim();
    if t.starts_with("```") && t.ends_with("```") && t.len() >= 6 {
        t = t[3..t.len() - 3].trim();
        if let Some(nl) = t.find('\n') {
            if !t[..nl].contains(' ') && t[..nl].len() < 16 {
                t = t[nl + 1..].trim();
            }
        }
    }
    for label in ["FixedMessage:", "Fixed message:", "Corrected message:"] {
        if t.len() >= label.len() && t[..label.len()].eq_ignore_ascii_case(label) {
            t = t[label.len()..].trim();
        }
    }
    t.to_string()
}

/// Render the repair prompt; the history keeps the latest steps that fit `budget` tokens.
pub fn render_repair_prompt(
    trace: &Trace,
    pos: usize,
    event: &ImplicitFailure,
    cfg: &RepairConfig,
    budget: Option<usize>,
    count: &dyn Fn(&str) -> usize,
) -> Result<(String, String), ImplicitError> {
    let history = maslens_render::Planner {
        steps: &trace.steps,
        count,
        budget,
        cap: cfg.max_step_chars,
    }
    .tail(0..pos, "earlier history beyond the context budget");
    let buggy = &trace.steps[pos];
    let system = REPAIR_SYSTEM.render(json!({}))?;
    let user = REPAIR_USER.render(json!({
        "question": untrusted("task", &trace.task),
        "prefix": untrusted("history", &history.text),
        "step_index": buggy.index,
        "agent": buggy.agent,
        "buggy_message": untrusted("buggy_message", &maslens_render::truncate_step(&buggy.content, cfg.max_step_chars, buggy.index).0),
        "error_type": event.error_type.as_str(),
        "error_description": event.description,
        "severity": event.severity.as_str(),
    }))?;
    Ok((system, user))
}

/// Generate the corrected step for one IF and return the matched (noop, fix) plans. `Ok(None)`
/// when the IF's step is not in the trace or the model returned nothing usable (reason logged
/// in the returned string).
pub async fn repair_event(
    model: &dyn ChatModel,
    trace: &Trace,
    if_index: usize,
    event: &ImplicitFailure,
    cfg: &RepairConfig,
) -> Result<(Result<[ReplayPlan; 2], String>, Usage), ImplicitError> {
    let Some(pos) = trace.position_of(event.step) else {
        return Ok((
            Err(format!("step {} is not in trace {}", event.step, trace.id)),
            Usage::default(),
        ));
    };
    let count = |s: &str| model.count_tokens(s);
    let budget = match cfg.context_tokens.or_else(|| model.context_size()) {
        None => None,
        Some(ctx) => {
            // The prompt with an empty history (budget 0) is the fixed part.
            let (sys, user) = render_repair_prompt(trace, pos, event, cfg, Some(0), &count)?;
            let overhead = count(&sys) + count(&user) + cfg.max_tokens as usize + cfg.safety_tokens;
            Some(ctx.saturating_sub(overhead).max(1))
        }
    };
    let (system, user) = render_repair_prompt(trace, pos, event, cfg, budget, &count)?;
    let req = ChatRequest::new(vec![Message::system(system), Message::user(user)])
        .max_tokens(cfg.max_tokens)
        .stage("implicit/repair")
        .template(REPAIR_USER.name);
    let resp = model.complete(&req).await?;
    let fixed = clean_repair(&resp.text);
    if fixed.is_empty() {
        return Ok((
            Err(format!(
                "empty correction for trace {} step {}",
                trace.id, event.step
            )),
            resp.usage,
        ));
    }
    let original = trace.steps[pos].clone();
    let base = ReplayPlan {
        trace: trace.id.clone(),
        task: trace.task.clone(),
        if_index,
        if_step: event.step,
        agent: original.agent.clone(),
        error_type: event.error_type.as_str().to_string(),
        description: event.description.clone(),
        intervention: "noop".into(),
        prefix: trace.steps[..pos].to_vec(),
        step: original.clone(),
        model: Some(model.id().to_string()),
        prompt_version: Some(PROMPT_VERSION.into()),
    };
    let mut fix = base.clone();
    fix.intervention = "fix".into();
    fix.step = Step {
        content: fixed,
        tool_calls: Vec::new(),
        tokens: None,
        ..original
    };
    Ok((Ok([base, fix]), resp.usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::{ErrorType, Level};
    use maslens_llm::testing::ScriptedModel;

    /// MASIF listing 6 as in the paper's extraction, with the spaces after punctuation restored
    /// and one line per paragraph (docs/implicit.md, "Prompts").
    const LISTING_6: &str = "\
## Task being solved by the multi-agent system
{question}
## Conversation history up to (but NOT including) the buggy step
{prefix}
## Buggy step (step {step_index}, agent: {agent}) -- this is what the agent actually said and what we want to replace
<<<BUGGY MESSAGE BEGIN>>>
{buggy_message}
<<<BUGGY MESSAGE END>>>
## What was wrong with this step (annotation from an analyzer)
- error_type: {error_type}
- description: {error_description}
- severity: {severity}
## Your job
Produce a single corrected version of the buggy step that the {agent} agent should have output instead.
Stay in the same persona and format. Do not include any text other than the message body itself.";

    #[test]
    fn repair_user_is_listing_6_word_for_word() {
        let vars: serde_json::Map<String, serde_json::Value> = [
            "question",
            "prefix",
            "step_index",
            "agent",
            "buggy_message",
            "error_type",
            "error_description",
            "severity",
        ]
        .iter()
        .map(|k| (k.to_string(), json!(format!("{{{k}}}"))))
        .collect();
        let text = REPAIR_USER.render(serde_json::Value::Object(vars)).unwrap();
        assert!(
            text.trim_end().ends_with(
                "Stay in the same persona and format. Do not include any text other than the message body itself."
            ),
            "{text}"
        );
        // The first paragraph is maslens's added data-not-instructions sentence; the rest is the
        // listing (blank lines aside).
        let (added, listing) = text.split_once("\n\n").unwrap();
        assert!(
            added.starts_with("The task, the conversation history"),
            "{added}"
        );
        let lines: Vec<&str> = listing.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.join("\n"), LISTING_6);
    }

    #[test]
    fn cleaning() {
        assert_eq!(clean_repair("  FixedMessage: 17 * 3 = 51 "), "17 * 3 = 51");
        assert_eq!(clean_repair("```text\n17 * 3 = 51\n```"), "17 * 3 = 51");
        assert_eq!(clean_repair("plain"), "plain");
    }

    #[tokio::test]
    async fn plans_are_matched_noop_and_fix() {
        let mut t = Trace::new("r1");
        t.task = "Compute 17 * 3".into();
        t.ground_truth = Some("SECRET-51".into());
        t.steps = (0..4)
            .map(|i| Step {
                index: i,
                agent: format!("A{}", i % 2),
                content: format!("message {i}"),
                ..Default::default()
            })
            .collect();
        let e = ImplicitFailure {
            description: "wrong product".into(),
            evidence: "message 2".into(),
            severity: Level::High,
            ..ImplicitFailure::fixture(2, "A0", ErrorType::ReasoningError)
        };
        let m = ScriptedModel::new("fixture").then("FixedMessage: corrected message 2");
        let (plans, _) = repair_event(&m, &t, 0, &e, &RepairConfig::default())
            .await
            .unwrap();
        let [noop, fix] = plans.unwrap();
        assert_eq!(noop.intervention, "noop");
        assert_eq!(noop.step.content, "message 2");
        assert_eq!(fix.step.content, "corrected message 2");
        assert_eq!(fix.prefix.len(), 2);
        assert_eq!(fix.prefix, noop.prefix);
        {
            let calls = m.calls.lock().unwrap();
            let user = &calls[0].messages[1].content;
            assert!(
                user.contains("message 1")
                    && user.contains("<<<BUGGY MESSAGE BEGIN>>>\n<buggy_message>\nmessage 2")
            );
            assert!(!user.contains("message 3"), "later steps must not be shown");
            assert!(!user.contains("SECRET-51"));
        }
        // IF at a step that does not exist.
        let mut e2 = e.clone();
        e2.step = 99;
        assert!(repair_event(&m, &t, 1, &e2, &RepairConfig::default())
            .await
            .unwrap()
            .0
            .is_err());
    }

    #[tokio::test]
    async fn long_history_keeps_the_latest_steps() {
        let mut t = Trace::new("r2");
        t.task = "task".into();
        t.steps = (0..20)
            .map(|i| Step {
                index: i,
                agent: "A".into(),
                content: format!("message {i} {}", "word ".repeat(200)),
                ..Default::default()
            })
            .collect();
        let e = ImplicitFailure {
            description: "d".into(),
            confidence: Level::Low,
            ..ImplicitFailure::fixture(19, "A", ErrorType::WrongAction)
        };
        let m = ScriptedModel::new("fixture").then("fixed");
        let cfg = RepairConfig {
            context_tokens: Some(4000),
            ..Default::default()
        };
        let (plans, _) = repair_event(&m, &t, 0, &e, &cfg).await.unwrap();
        // The plan keeps the full prefix even though the prompt could not.
        assert_eq!(plans.unwrap()[1].prefix.len(), 19);
        let calls = m.calls.lock().unwrap();
        let user = &calls[0].messages[1].content;
        assert!(user.contains("left out by maslens: earlier history beyond the context budget"));
        assert!(user.contains("message 18 "));
        assert!(!user.contains("message 0 "));
        let total: usize = calls[0]
            .messages
            .iter()
            .map(|m| maslens_llm::estimate_tokens(&m.content))
            .sum();
        assert!(total + 512 <= 4000, "prompt of {total} tokens does not fit");
    }
}
