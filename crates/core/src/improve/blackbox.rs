//! The black-box baseline (OPRO/GEPA-style reflective rewrite): one call rewrites every agent's
//! prompt from the failed tasks and the system's outputs, without any localization.

use std::collections::BTreeMap;

use maslens_llm::prompt::Template;
use maslens_llm::typed::complete_as;
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::clean_prompt;
use crate::CoreError;

pub const BLACKBOX: Template = prompt_template!("improve/blackbox.v1");
pub const BLACKBOX_INPUT: Template = prompt_template!("improve/blackbox_input.v1");

/// Failed tasks shown at most.
pub const MAX_FAILURES: usize = 8;

/// A failed task as the baseline sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedTask {
    pub task: String,
    pub output: String,
}

#[derive(Debug, Deserialize)]
struct Answer {
    prompts: BTreeMap<String, String>,
}

/// New prompts for every agent of `prompts`, or why there are none (the answer was not JSON,
/// or left an agent out, or changed nothing).
pub async fn blackbox(
    model: &dyn ChatModel,
    prompts: &BTreeMap<String, String>,
    failures: &[FailedTask],
    max_tokens: u32,
    seed: u64,
) -> Result<Result<BTreeMap<String, String>, String>, CoreError> {
    let shown = &failures[failures.len().saturating_sub(MAX_FAILURES)..];
    let listed: Vec<_> = prompts
        .iter()
        .map(|(agent, prompt)| json!({"agent": agent, "prompt": prompt}))
        .collect();
    let user = BLACKBOX_INPUT.render(json!({"prompts": listed, "failures": shown}))?;
    let system = BLACKBOX.render(json!({}))?;
    let schema = json!({
        "type": "object",
        "properties": {"prompts": {"type": "object",
            "properties": prompts.keys().map(|k| (k.clone(), json!({"type": "string"}))).collect::<serde_json::Map<_, _>>(),
            "required": prompts.keys().collect::<Vec<_>>()}},
        "required": ["prompts"]
    });
    let mut request = ChatRequest::new(vec![Message::system(system), Message::user(user)])
        .max_tokens(max_tokens)
        .temperature(0.0)
        .stage("improve/blackbox")
        .template(BLACKBOX_INPUT.name);
    request.seed = Some(seed);
    let out = complete_as::<Answer>(model, request, &schema).await?;
    let Some(answer) = out.value else {
        return Ok(Err(out.abstain_reason.unwrap_or_else(|| {
            "the model's answer was not the JSON asked for".into()
        })));
    };
    let mut new = BTreeMap::new();
    for (agent, old) in prompts {
        let p = answer
            .prompts
            .get(agent)
            .map(|p| clean_prompt(p))
            .unwrap_or_default();
        new.insert(agent.clone(), if p.is_empty() { old.clone() } else { p });
    }
    if &new == prompts {
        return Ok(Err("the model changed no prompt".into()));
    }
    Ok(Ok(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;

    fn prompts() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("A".into(), "You are A.".into()),
            ("B".into(), "You are B.".into()),
        ])
    }

    #[tokio::test]
    async fn the_baseline_rewrites_every_prompt_it_is_given() {
        let model = ScriptedModel::new("m").on(
            "improve/blackbox_input",
            r#"{"prompts": {"A": "You are A. Check.", "B": ""}}"#,
        );
        let failed = [FailedTask {
            task: "2+2".into(),
            output: "5".into(),
        }];
        let new = blackbox(&model, &prompts(), &failed, 300, 0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(new["A"], "You are A. Check.");
        assert_eq!(
            new["B"], "You are B.",
            "an empty answer keeps the old prompt"
        );
        let user = &model.calls.lock().unwrap()[0].messages[1].content;
        assert!(
            user.contains("Final output: 5") && user.contains("<prompt agent=\"B\">"),
            "{user}"
        );
    }

    #[tokio::test]
    async fn an_unchanged_answer_is_no_proposal() {
        let model = ScriptedModel::new("m").on(
            "improve/blackbox_input",
            r#"{"prompts": {"A": "You are A.", "B": "You are B."}}"#,
        );
        let out = blackbox(&model, &prompts(), &[], 300, 0).await.unwrap();
        assert_eq!(out, Err("the model changed no prompt".into()));
    }
}
