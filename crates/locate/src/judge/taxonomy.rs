//! A taxonomy-guided Judge in the style of AEGIS (Kong et al. 2025, "AEGIS: Automated Error
//! Generation and Identification for Multi-Agent Systems", the source of Aegis-Bench), which
//! attributes a failure by matching the agents' behaviour to a fixed taxonomy of error modes:
//! one call over the whole trace (`prompts/locate/judge_taxonomy.v1.j2`) in which the model
//!
//! 1. lists the failure modes of the taxonomy it sees (at most three, `modes_seen`), each with
//!    the step where it first shows, then
//! 2. names the decisive one: the earliest mode that made the run fail, its step, the agent
//!    acting there, and the mode's code as the verdict's `error_mode`.
//!
//! The taxonomy is Aegis-Bench's 14 MAST modes ([`crate::AEGIS_ERROR_MODES`]), or the codes of
//! `--error-modes` when given. Departures (docs/locate.md): the prompt is ours, written from the
//! paper's description, not the authors' text; AEGIS attributes agents only, this Judge also
//! names the step (every maslens verdict has one), with the decisive-step definition every
//! maslens protocol shares (`criterion.v1`); the paper's trained models are not used; a trace
//! too long for one call goes to all-at-once's windows ([`super::one_pass`]).

use super::one_pass::{one_pass, schema_with, Pass, Reasoned};
use super::{JudgeResult, Protocol, Settings};
use crate::{prompts, LocateError, LocationAnswer};
use maslens_llm::ChatModel;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// At most this many modes are listed before the verdict.
pub const MAX_MODES_SEEN: usize = 3;

/// A failure mode the model saw, and where it first shows.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct ModeSeen {
    #[serde(default)]
    code: String,
    #[serde(default, deserialize_with = "maslens_llm::typed::lenient::int")]
    step: Option<i64>,
}

/// The answer: the modes seen, then a location whose `error_mode` is the decisive mode.
#[derive(Debug, Deserialize)]
struct TaxonomyAnswer {
    #[serde(default)]
    modes_seen: Vec<ModeSeen>,
    #[serde(flatten)]
    location: LocationAnswer,
}

impl Reasoned for TaxonomyAnswer {
    fn location(&self) -> &LocationAnswer {
        &self.location
    }
    fn trail(&self) -> Value {
        json!({"modes_seen": self.modes_seen})
    }
}

/// The taxonomy's codes: `--error-modes` when given, else Aegis-Bench's 14.
pub fn taxonomy_codes(settings: &Settings) -> Vec<String> {
    match settings.error_modes.is_empty() {
        true => crate::aegis_error_modes(),
        false => settings.error_modes.clone(),
    }
}

/// JSON schema of a taxonomy answer: `modes_seen` first, then the location with `error_mode`.
pub fn taxonomy_schema(codes: &[String]) -> Value {
    let mode = json!({"type": "object",
        "properties": {"code": {"type": "string", "enum": codes},
                       "step": {"type": "integer", "minimum": 0}},
        "required": ["code", "step"]});
    let seen = json!({"type": "array", "items": mode, "maxItems": MAX_MODES_SEEN});
    schema_with(vec![("modes_seen", seen)], codes)
}

/// Run the taxonomy Judge on `trace` (module docs).
pub(crate) async fn taxonomy(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let codes = taxonomy_codes(settings);
    // The verdict always carries the decisive mode, so the location asks for it.
    let settings = &Settings {
        error_modes: codes.clone(),
        ..settings.clone()
    };
    let make = || {
        Ok(Pass {
            protocol: Protocol::Taxonomy,
            instructions: prompts::JUDGE_TAXONOMY.rendered(json!({
                "criterion": prompts::criterion()?,
                "taxonomy": crate::error_mode_lines(&codes)
            }))?,
            schema: taxonomy_schema(&codes),
            stage: "judge/taxonomy",
        })
    };
    one_pass::<TaxonomyAnswer>(model, trace, settings, prior, Protocol::Taxonomy, make).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::judge;
    use maslens_llm::testing::ScriptedModel;

    fn trace() -> Trace {
        crate::test_support::arithmetic()
    }

    /// The prompt lists the taxonomy, the answer lists the modes seen before the verdict, and
    /// the verdict carries the decisive mode.
    #[tokio::test]
    async fn the_taxonomy_judge_lists_modes_then_locates_with_the_decisive_mode() {
        let answer = json!({
            "modes_seen": [{"code": "FM-2.5", "step": 1}, {"code": "FM-3.3", "step": 2}],
            "reason": "\"2 + 3 = 6, so the product is 24\": two and three make five.",
            "agent": "Solver", "step": 1, "confidence": 0.7, "error_mode": "FM-2.5"
        });
        let model =
            ScriptedModel::new("fixture").on("locate/judge_taxonomy.v1", answer.to_string());
        let r = judge(&model, &trace(), Protocol::Taxonomy, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.protocol, Protocol::Taxonomy);
        assert_eq!(
            (
                r.finding.agent.as_deref(),
                r.finding.step,
                r.finding.error_mode.as_deref()
            ),
            (Some("Solver"), Some(1), Some("FM-2.5"))
        );
        assert_eq!(r.trail[0]["modes_seen"][1]["code"], "FM-3.3");
        let calls = model.calls.lock().unwrap();
        assert_eq!(calls.len(), 1, "one pass");
        let prompt = &calls[0].messages.last().unwrap().content;
        assert!(
            prompt.contains("FM-2.5: corrupt reasoning process"),
            "{prompt}"
        );
        let order: Vec<usize> = ["FM-1.1", "Modes:", "Decide:", "\"modes_seen\""]
            .iter()
            .map(|s| prompt.find(s).unwrap_or(usize::MAX))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{prompt}");
        let schema = taxonomy_schema(&taxonomy_codes(&Settings::default()));
        assert_eq!(schema["required"][0], "modes_seen");
        assert_eq!(
            schema["required"].as_array().unwrap().last().unwrap(),
            "error_mode"
        );
        assert_eq!(
            schema["properties"]["error_mode"]["enum"]
                .as_array()
                .unwrap()
                .len(),
            14
        );
    }

    /// `--error-modes` narrows the taxonomy; an answer outside the trace is sent back once and
    /// then abstains, like every location answer.
    #[tokio::test]
    async fn given_codes_are_the_taxonomy_and_answers_are_checked() {
        let settings = Settings {
            error_modes: vec!["FM-2.4".into(), "FM-3.2".into()],
            ..Settings::default()
        };
        assert_eq!(taxonomy_codes(&settings), ["FM-2.4", "FM-3.2"]);
        let answer = json!({"modes_seen": [], "reason": "r", "agent": "Solver", "step": 9,
            "confidence": 0.5, "error_mode": "FM-2.4"})
        .to_string();
        let model = ScriptedModel::new("fixture").then(&answer).then(&answer);
        let r = judge(&model, &trace(), Protocol::Taxonomy, &settings)
            .await
            .unwrap();
        assert_eq!(r.finding.step, None, "{:?}", r.finding);
        assert_eq!(model.calls.lock().unwrap().len(), 2, "sent back once");
        let calls = model.calls.lock().unwrap();
        let prompt = &calls[0].messages.last().unwrap().content;
        assert!(prompt.contains("FM-3.2: force early termination"));
        assert!(!prompt.contains("FM-1.1"), "{prompt}");
    }
}
