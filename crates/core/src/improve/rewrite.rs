//! One agent's prompt rewritten from the failures located at it (the credit paper's
//! RolePromptOptimize, `prompts/improve/rewrite.v1.j2`, fed with the located steps and reasons).

use maslens_llm::prompt::Template;
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{clean_prompt, Evidence};
use crate::CoreError;

pub const REWRITE: Template = prompt_template!("improve/rewrite.v1");
pub const REWRITE_INPUT: Template = prompt_template!("improve/rewrite_input.v1");

/// Located failures shown to the rewrite at most (the first ones: [`super::blame`] puts the
/// strongest evidence first).
pub const MAX_EVIDENCE: usize = 8;

/// A rewrite, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rewritten {
    pub agent: String,
    /// The new prompt; none when the model returned nothing usable.
    pub prompt: Option<String>,
    /// Why there is no new prompt (empty answer, the same prompt).
    pub rejected: Option<String>,
    /// Failures the rewrite was given.
    pub evidence: usize,
}

/// Rewrite `agent`'s `prompt` from `evidence` with `model` (`seed` for backends that take one).
/// A budget stop or a failed call is an error; an unusable answer is [`Rewritten::rejected`].
pub async fn rewrite(
    model: &dyn ChatModel,
    agent: &str,
    prompt: &str,
    evidence: &[Evidence],
    max_tokens: u32,
    seed: u64,
) -> Result<Rewritten, CoreError> {
    let shown = &evidence[..evidence.len().min(MAX_EVIDENCE)];
    let user =
        REWRITE_INPUT.render(json!({"agent": agent, "prompt": prompt, "failures": shown}))?;
    let system = REWRITE.render(json!({}))?;
    let mut request = ChatRequest::new(vec![Message::system(system), Message::user(user)])
        .max_tokens(max_tokens)
        .temperature(0.0)
        .stage("improve/rewrite")
        .template(REWRITE_INPUT.name);
    request.seed = Some(seed);
    let answer = model.complete(&request).await?;
    let new = clean_prompt(&answer.text);
    let rejected = if new.is_empty() {
        Some("the model returned no prompt".to_string())
    } else if new == prompt.trim() {
        Some("the model returned the same prompt".to_string())
    } else {
        None
    };
    Ok(Rewritten {
        agent: agent.to_string(),
        prompt: rejected.is_none().then_some(new),
        rejected,
        evidence: shown.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;

    fn evidence(n: usize) -> Vec<Evidence> {
        (0..n)
            .map(|i| Evidence {
                trace: format!("t{i}"),
                task: format!("task {i}"),
                step: 1,
                share: 1.0,
                primary: true,
                turn: 1,
                excerpt: "total = 12".into(),
                reason: "summed the wrong column".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn the_rewrite_sees_the_located_failures_and_returns_a_clean_prompt() {
        let model = ScriptedModel::new("m").on(
            "improve/rewrite_input",
            "```\nYou are Coder. Check every column.\n```",
        );
        let out = rewrite(&model, "Coder", "You are Coder.", &evidence(10), 200, 1)
            .await
            .unwrap();
        assert_eq!(
            out.prompt.as_deref(),
            Some("You are Coder. Check every column.")
        );
        assert_eq!(out.evidence, MAX_EVIDENCE);
        let calls = model.calls.lock().unwrap();
        let user = &calls[0].messages[1].content;
        assert!(
            user.contains("summed the wrong column") && user.contains("task 7"),
            "{user}"
        );
        assert!(
            !user.contains("task 8\""),
            "only the first {MAX_EVIDENCE} failures"
        );
    }

    #[tokio::test]
    async fn the_same_or_an_empty_prompt_is_rejected() {
        let same = ScriptedModel::new("m").on("improve/rewrite_input", "You are Coder.");
        let out = rewrite(&same, "Coder", "You are Coder.", &evidence(1), 200, 1)
            .await
            .unwrap();
        assert_eq!(
            (out.prompt, out.rejected.as_deref()),
            (None, Some("the model returned the same prompt"))
        );
        let empty = ScriptedModel::new("m").on("improve/rewrite_input", "  ");
        let out = rewrite(&empty, "Coder", "You are Coder.", &evidence(1), 200, 1)
            .await
            .unwrap();
        assert_eq!(
            out.rejected.as_deref(),
            Some("the model returned no prompt")
        );
    }
}
