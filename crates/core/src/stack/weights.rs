//! The stack's weights: one linear model per answer level, the weights file and the built-in weights.

use crate::CoreError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Format tag of a weights file.
pub const STACK_FORMAT: &str = "maslens-stack/v1";

/// The weights fit for the embedded model (`maslens eval stack`; provenance in the file's `note`).
pub const BUILTIN_JSON: &str = include_str!("../../stacks/embedded.json");

/// Weights of one answer level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LevelWeights {
    /// Added to the score of the Judge's answer.
    pub judge: f64,
    /// Times each Evaluator's confidence, added to the score of its answer.
    pub evaluators: f64,
    /// Drop ballots whose named agent does not act at their step (`agent_mismatch`).
    #[serde(default)]
    pub drop_incoherent: bool,
}

/// A weights file: both levels, the model they were fit for, and their provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackWeights {
    pub format: String,
    /// The Judge model the weights were fit for (`None`: [`StackWeights::generic`]).
    #[serde(default)]
    pub model: Option<String>,
    pub step: LevelWeights,
    pub agent: LevelWeights,
    /// How they were fit: command, data, and the nested cross-validation figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StackWeights {
    /// Weights for a model nobody fit weights for: a Judge or Evaluator ballot outweighs any
    /// difference in the prior's log-probabilities below 3 (a factor of 20), so the LLM decides
    /// where it answers and the prior breaks ties and stands in where it does not. Not fit on
    /// data: `maslens eval stack` fits them for a model.
    pub fn generic() -> StackWeights {
        let level = LevelWeights {
            judge: 3.0,
            evaluators: 3.0,
            drop_incoherent: true,
        };
        StackWeights {
            format: STACK_FORMAT.into(),
            model: None,
            step: level,
            agent: level,
            note: Some("generic weights (not fit): the LLM's ballots decide, the prior breaks ties and answers when the LLM does not".into()),
        }
    }

    /// Parse a weights file's text; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<StackWeights, CoreError> {
        let w: StackWeights = serde_json::from_str(text).map_err(|e| {
            CoreError::Invalid(format!("{origin}: not a maslens stack weights file: {e}"))
        })?;
        if w.format != STACK_FORMAT {
            return Err(CoreError::Invalid(format!(
                "{origin}: field `format` is {:?}, expected {STACK_FORMAT:?}",
                w.format
            )));
        }
        for (name, l) in [("step", &w.step), ("agent", &w.agent)] {
            for (field, v) in [("judge", l.judge), ("evaluators", l.evaluators)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(CoreError::Invalid(format!(
                        "{origin}: field `{name}.{field}` must be a number >= 0, got {v}"
                    )));
                }
            }
        }
        Ok(w)
    }

    /// `builtin` (the embedded model's weights), `generic`, or a weights file.
    pub fn load(spec: &str) -> Result<StackWeights, CoreError> {
        match spec {
            "builtin" => builtin(),
            "generic" => Ok(StackWeights::generic()),
            path => {
                let text = std::fs::read_to_string(path)
                    .map_err(CoreError::io(format!("reading stack weights {path}")))?;
                StackWeights::from_json(&text, path)
            }
        }
    }

    /// The weights for `model`: these when they were fit for it (or name no model), else the
    /// generic ones, with a message saying so.
    pub fn for_model(self, model: &str) -> (StackWeights, Option<String>) {
        match &self.model {
            Some(m) if m != model => (
                StackWeights::generic(),
                Some(format!(
                    "the stack weights were fit for {m}, not {model}: using generic weights \
                     (fit yours with `maslens eval stack DATASET --model {model} -o FILE`, \
                     then --stack FILE)"
                )),
            ),
            _ => (self, None),
        }
    }

    /// Write as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), CoreError> {
        let text = serde_json::to_string_pretty(self).unwrap_or_default() + "\n";
        maslens_eval::atomic::write_atomic(path, text)
            .map_err(CoreError::io(format!("writing {}", path.display())))
    }
}

/// The built-in weights (fit for the embedded model).
pub fn builtin() -> Result<StackWeights, CoreError> {
    StackWeights::from_json(BUILTIN_JSON, "built-in stack weights")
}
