//! A2P, Abduct-Act-Predict (West, Weng, Zhu, Lin, Zhang 2025, "Abduct, Act, Predict:
//! Scaffolding Causal Inference for Automated Failure Attribution in Multi-Agent Systems",
//! arXiv 2509.10401), as a Judge protocol: one call over the whole trace in which the model
//! reasons in the paper's three stages before it answers (`prompts/locate/judge_a2p.v1.j2`):
//!
//! 1. **abduction**: the hidden cause that best explains the failure, and where it first shows;
//! 2. **action**: the smallest correction of that step;
//! 3. **prediction**: the rest of the run, predicted forward with the correction: whether the
//!    task would then be solved (`resolves`); if not, the model is told to try the next candidate.
//!
//! The three stages come before the verdict in the answer's JSON, so under constrained decoding
//! the model writes its reasoning first, as the paper's single pass does. They are kept in the
//! result's trail. Departures (docs/locate.md): the prompt is ours, written from the paper's
//! description of the stages, not the authors' text; a trace too long for one call goes to
//! all-at-once's windows (the paper has no windowed form); the decisive-step definition is the
//! one every maslens protocol shares (`criterion.v1`).

use super::one_pass::{one_pass, schema_with, Pass, Reasoned};
use super::{JudgeResult, Protocol, Settings};
use crate::{prompts, LocateError, LocationAnswer};
use maslens_llm::ChatModel;
use maslens_trace::Trace;
use serde::Deserialize;
use serde_json::{json, Value};

/// Longest text of each reasoning stage (the prompt asks for one sentence each). Like the
/// reason's limit, it ends a runaway stage under constrained decoding so the verdict still fits.
pub const STAGE_MAX_CHARS: usize = 300;

/// The answer: the three stages, then a location.
#[derive(Debug, Deserialize)]
struct A2pAnswer {
    #[serde(default)]
    abduction: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    prediction: String,
    #[serde(default)]
    resolves: Option<bool>,
    #[serde(flatten)]
    location: LocationAnswer,
}

impl Reasoned for A2pAnswer {
    fn location(&self) -> &LocationAnswer {
        &self.location
    }
    fn trail(&self) -> Value {
        json!({"abduction": self.abduction, "action": self.action,
               "prediction": self.prediction, "resolves": self.resolves})
    }
}

/// JSON schema of an A2P answer: the stages first, then [`super::location_schema`]'s fields.
pub fn a2p_schema(error_modes: &[String]) -> Value {
    let stage = json!({"type": "string", "maxLength": STAGE_MAX_CHARS});
    let reasoning = vec![
        ("abduction", stage.clone()),
        ("action", stage.clone()),
        ("prediction", stage),
        ("resolves", json!({"type": "boolean"})),
    ];
    schema_with(reasoning, error_modes)
}

/// Run A2P on `trace` (module docs).
pub(crate) async fn a2p(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let make = || {
        Ok(Pass {
            protocol: Protocol::A2p,
            instructions: prompts::JUDGE_A2P.rendered(json!({
                "criterion": prompts::criterion()?,
                "error_modes": crate::error_mode_lines(&settings.error_modes)
            }))?,
            schema: a2p_schema(&settings.error_modes),
            stage: "judge/a2p",
        })
    };
    one_pass::<A2pAnswer>(model, trace, settings, prior, Protocol::A2p, make).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::judge;
    use maslens_llm::testing::ScriptedModel;

    fn trace() -> Trace {
        crate::test_support::arithmetic()
    }

    /// The prompt asks for the three stages before the verdict, keyed by template; the answer's
    /// location is the verdict and the stages are kept in the trail.
    #[tokio::test]
    async fn a2p_reasons_in_three_stages_then_locates() {
        let answer = json!({
            "abduction": "The Solver added wrongly, so every later step inherits 6.",
            "action": "Step 1 should say 2 + 3 = 5.",
            "prediction": "With 5 the product is 20 and the Checker accepts it: solved.",
            "resolves": true,
            "reason": "\"2 + 3 = 6, so the product is 24\": two and three make five, so the product is wrong.",
            "agent": "Solver", "step": 1, "confidence": 0.8
        });
        let model = ScriptedModel::new("fixture").on("locate/judge_a2p.v1", answer.to_string());
        let r = judge(&model, &trace(), Protocol::A2p, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.protocol, Protocol::A2p);
        assert_eq!(
            (r.finding.agent.as_deref(), r.finding.step),
            (Some("Solver"), Some(1))
        );
        assert_eq!(r.trail[0]["resolves"], true);
        assert!(r.trail[0]["action"].as_str().unwrap().contains("2 + 3 = 5"));
        let calls = model.calls.lock().unwrap();
        assert_eq!(calls.len(), 1, "one pass");
        let prompt = &calls[0].messages.last().unwrap().content;
        let stages: Vec<usize> = ["Abduction:", "Action:", "Prediction:", "\"abduction\""]
            .iter()
            .map(|s| prompt.find(s).unwrap_or(usize::MAX))
            .collect();
        assert!(
            stages.windows(2).all(|w| w[0] < w[1]),
            "the stages in order, then the answer: {prompt}"
        );
        // Constrained decoding writes the properties in `required` order: the stages first.
        let schema = a2p_schema(&[]);
        assert_eq!(
            schema["required"],
            json!([
                "abduction",
                "action",
                "prediction",
                "resolves",
                "reason",
                "agent",
                "step",
                "confidence"
            ])
        );
    }

    /// An answer naming a step out of range is checked like every location answer.
    #[tokio::test]
    async fn an_a2p_answer_outside_the_trace_abstains() {
        let answer = json!({"abduction": "a", "action": "b", "prediction": "c", "resolves": false,
            "reason": "r", "agent": "Solver", "step": 9, "confidence": 0.5});
        let answer = answer.to_string();
        let model = ScriptedModel::new("fixture").then(&answer).then(&answer);
        let r = judge(&model, &trace(), Protocol::A2p, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.step, None, "{:?}", r.finding);
        assert_eq!(model.calls.lock().unwrap().len(), 2, "sent back once");
        assert!(r.finding.abstain_reason.is_some());
    }
}
