//! A model's one-sentence summary of each failure mode (`maslens modes --model`, optional: the
//! grouping itself needs no model). The prompt is `prompts/modes/summary.v1.j2`; it quotes the
//! mode's example reasons as data.

use maslens_llm::prompt::Template;
use maslens_llm::{prompt_template, ChatModel, ChatRequest, LlmError, Message};
use serde_json::json;

use super::{Mode, ModesReport, SystemModes};
use crate::CoreError;

pub const SUMMARY: Template = prompt_template!("modes/summary.v1");

/// What [`summarize`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summarized {
    pub written: usize,
    /// Modes whose call failed, with why (the others go on).
    pub failed: Vec<(String, String)>,
    /// Why the summaries stopped early (a budget), when they did.
    pub stopped: Option<String>,
}

/// Writes a summary into the `limit` largest modes of each system (every mode when `None`).
/// A failed call leaves that mode without one and is reported (also in the report's notes); a
/// budget stop ends the pass.
pub async fn summarize(
    report: &mut ModesReport,
    model: &dyn ChatModel,
    limit: Option<usize>,
) -> Result<Summarized, CoreError> {
    let mut done = Summarized::default();
    report.summaries_by = Some(model.id().to_string());
    'systems: for system in &mut report.systems {
        let SystemModes {
            system: name,
            modes,
            ..
        } = system;
        for mode in modes.iter_mut().take(limit.unwrap_or(usize::MAX)) {
            let request = request(name, mode)?;
            match model.complete(&request).await {
                Ok(r) => {
                    let text = r.text.split_whitespace().collect::<Vec<_>>().join(" ");
                    mode.summary = Some(text);
                    done.written += 1;
                }
                Err(LlmError::Budget(why)) => {
                    done.stopped = Some(why);
                    break 'systems;
                }
                Err(e) => done.failed.push((mode.id.clone(), e.to_string())),
            }
        }
    }
    for (id, why) in &done.failed {
        report
            .notes
            .push(format!("no summary for mode {id}: {why}"));
    }
    if let Some(why) = &done.stopped {
        report.notes.push(format!("summaries stopped: {why}"));
    }
    Ok(done)
}

fn request(system: &str, mode: &Mode) -> Result<ChatRequest, CoreError> {
    let prompt = SUMMARY.render(json!({
        "system": system,
        "agent": mode.agent.as_deref().unwrap_or("(not located)"),
        "failure_type": mode.failure_type.as_deref().unwrap_or("(none found)"),
        "runs": mode.runs,
        "share": format!("{:.0}%", mode.share * 100.0),
        "words": mode.words.join(", "),
        "reasons": mode.examples,
    }))?;
    Ok(ChatRequest::new(vec![Message::user(prompt)])
        .max_tokens(80)
        .temperature(0.0)
        .stage("modes/summary")
        .template(SUMMARY.name))
}
