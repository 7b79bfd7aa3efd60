//! Severity weights (MASIF appendix A, tables 7-8), TOML overrides, IF cost and trace risk.
//!
//! Cost  C = sum_i w_type(i) * w_abs(i)                (eq. 2)
//! Risk  r = sum_i w_type(i) * w_abs(i) / max(1, L)    (appendix A), L = parsed trace steps.
//!
//! An IF without an absorption label (the classifier abstained or was not run) is weighted with
//! `unknown_absorption`, by default the trivial-issue weight: the paper pools "trivial/unknown".

use crate::taxonomy::{Absorption, ErrorType};
use crate::ImplicitError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The weights used to score IFs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// w_type per error type.
    pub error_type: BTreeMap<ErrorType, f64>,
    /// w_abs per absorption pattern.
    pub absorption: BTreeMap<Absorption, f64>,
    /// w_abs for an IF without an absorption label.
    pub unknown_absorption: f64,
}

impl Default for Weights {
    /// Tables 7 and 8 of the paper.
    fn default() -> Self {
        use Absorption::*;
        use ErrorType::*;
        let error_type = BTreeMap::from([
            (Hallucination, 1.30),
            (ReasoningError, 1.20),
            (WrongAction, 1.10),
            (Misunderstanding, 1.10),
            (FailedToolUse, 1.00),
            (MalformedOutput, 1.00),
            (IncompleteAction, 0.90),
            (UnnecessaryAction, 0.60),
        ]);
        let absorption = BTreeMap::from([
            (TrivialIssue, 0.35),
            (SelfCorrected, 0.55),
            (SelfWorkaround, 0.65),
            (PeerRepair, 0.75),
            (OrchestratorIntervention, 0.80),
            (UnresolvedPropagation, 1.40),
        ]);
        Weights {
            error_type,
            absorption,
            unknown_absorption: 0.35,
        }
    }
}

/// The TOML shape: every key optional, unknown keys rejected.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsFile {
    #[serde(default, rename = "type")]
    error_type: BTreeMap<String, f64>,
    #[serde(default)]
    absorption: BTreeMap<String, f64>,
}

impl Weights {
    /// Weight of one error type.
    pub fn w_type(&self, t: ErrorType) -> f64 {
        self.error_type.get(&t).copied().unwrap_or(1.0)
    }

    /// Weight of one absorption label (`None`: unknown).
    pub fn w_abs(&self, a: Option<Absorption>) -> f64 {
        match a {
            Some(a) => self
                .absorption
                .get(&a)
                .copied()
                .unwrap_or(self.unknown_absorption),
            None => self.unknown_absorption,
        }
    }

    /// w_type * w_abs of one IF.
    pub fn event_weight(&self, t: ErrorType, a: Option<Absorption>) -> f64 {
        self.w_type(t) * self.w_abs(a)
    }

    /// IF cost C (eq. 2) of a list of (type, absorption) pairs.
    pub fn cost<I>(&self, events: I) -> f64
    where
        I: IntoIterator<Item = (ErrorType, Option<Absorption>)>,
    {
        events
            .into_iter()
            .map(|(t, a)| self.event_weight(t, a))
            .fold(0.0, |acc, w| acc + w) // not `sum()`: an empty f64 sum is -0.0
    }

    /// Trace risk r = C / max(1, L) (appendix A).
    pub fn risk<I>(&self, events: I, steps: usize) -> f64
    where
        I: IntoIterator<Item = (ErrorType, Option<Absorption>)>,
    {
        self.cost(events) / steps.max(1) as f64
    }

    /// Defaults overridden by a TOML document:
    /// ```toml
    /// [type]
    /// hallucination = 1.5
    /// [absorption]
    /// trivial_issue = 0.3
    /// unknown = 0.35        # weight for IFs without an absorption label
    /// ```
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ImplicitError> {
        let bad = |message: String| ImplicitError::Weights {
            file: origin.to_string(),
            message,
        };
        let file: WeightsFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let mut w = Weights::default();
        let check = |key: &str, v: f64| -> Result<f64, ImplicitError> {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(bad(format!(
                    "weight {key} = {v} must be a finite number >= 0"
                )))
            }
        };
        for (k, v) in file.error_type {
            let t = ErrorType::parse(&k).ok_or_else(|| {
                bad(format!(
                    "[type] unknown error type {k:?} (expected one of {})",
                    names(&ErrorType::ALL.map(|t| t.as_str()))
                ))
            })?;
            w.error_type.insert(t, check(&format!("type.{k}"), v)?);
        }
        for (k, v) in file.absorption {
            if k == "unknown" {
                w.unknown_absorption = check("absorption.unknown", v)?;
                continue;
            }
            let a = Absorption::parse(&k).ok_or_else(|| {
                bad(format!(
                    "[absorption] unknown label {k:?} (expected one of {}, unknown)",
                    names(&Absorption::ALL.map(|a| a.as_str()))
                ))
            })?;
            w.absorption
                .insert(a, check(&format!("absorption.{k}"), v)?);
        }
        Ok(w)
    }

    /// Read a TOML override file.
    pub fn from_toml_file(path: &std::path::Path) -> Result<Self, ImplicitError> {
        let text = std::fs::read_to_string(path).map_err(|e| ImplicitError::Weights {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Each weight multiplied by its own factor drawn uniformly from `[1 - spread, 1 + spread]`.
    pub fn perturbed<R: rand::Rng>(&self, spread: f64, rng: &mut R) -> Weights {
        let mut f = |v: f64| v * (1.0 + rng.gen_range(-spread..=spread));
        Weights {
            error_type: self.error_type.iter().map(|(k, v)| (*k, f(*v))).collect(),
            absorption: self.absorption.iter().map(|(k, v)| (*k, f(*v))).collect(),
            unknown_absorption: f(self.unknown_absorption),
        }
    }
}

fn names(xs: &[&str]) -> String {
    xs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use Absorption::*;
    use ErrorType::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn cost_and_risk_by_hand_from_tables_7_and_8() {
        let w = Weights::default();
        // Hallucination propagated: 1.30 * 1.40 = 1.82
        // Failed tool use, trivial: 1.00 * 0.35 = 0.35
        // Unnecessary action, self-corrected: 0.60 * 0.55 = 0.33
        // Reasoning error, orchestrator intervention: 1.20 * 0.80 = 0.96
        // Sum C = 3.46; with L = 10 steps, r = 0.346.
        let events = [
            (Hallucination, Some(UnresolvedPropagation)),
            (FailedToolUse, Some(TrivialIssue)),
            (UnnecessaryAction, Some(SelfCorrected)),
            (ReasoningError, Some(OrchestratorIntervention)),
        ];
        assert!(close(w.cost(events), 3.46));
        assert!(close(w.risk(events, 10), 0.346));
        // L = 0 uses max(1, L) = 1.
        assert!(close(w.risk(events, 0), 3.46));
        // Misunderstanding with peer repair 1.10 * 0.75 = 0.825; incomplete + workaround 0.9 * 0.65 = 0.585;
        // wrong action unknown absorption 1.10 * 0.35 = 0.385; malformed trivial 1.0 * 0.35 = 0.35.
        let more = [
            (Misunderstanding, Some(PeerRepair)),
            (IncompleteAction, Some(SelfWorkaround)),
            (WrongAction, None),
            (MalformedOutput, Some(TrivialIssue)),
        ];
        assert!(close(w.cost(more), 0.825 + 0.585 + 0.385 + 0.35));
        assert!(close(w.risk(more, 4), (0.825 + 0.585 + 0.385 + 0.35) / 4.0));
        assert!(close(w.cost([]), 0.0));
    }

    #[test]
    fn toml_override_merges_and_rejects_unknown() {
        let w = Weights::from_toml_str(
            "[type]\nhallucination = 2.0\n[absorption]\nunknown = 1.0\npeer_repair = 0.5\n",
            "w.toml",
        )
        .unwrap();
        assert!(close(w.w_type(Hallucination), 2.0));
        assert!(close(w.w_type(ReasoningError), 1.2));
        assert!(close(w.w_abs(None), 1.0));
        assert!(close(w.w_abs(Some(PeerRepair)), 0.5));
        let err = Weights::from_toml_str("[type]\nhalucination = 2.0\n", "w.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("w.toml") && err.contains("halucination"),
            "{err}"
        );
        assert!(Weights::from_toml_str("[type]\nhallucination = -1.0\n", "w.toml").is_err());
        assert!(Weights::from_toml_str("[severity]\nx = 1\n", "w.toml").is_err());
    }

    #[test]
    fn perturbation_stays_within_spread() {
        use rand::SeedableRng;
        let base = Weights::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..50 {
            let p = base.perturbed(0.1, &mut rng);
            for (k, v) in &p.error_type {
                let b = base.error_type[k];
                assert!(*v >= b * 0.9 - 1e-12 && *v <= b * 1.1 + 1e-12);
            }
        }
    }
}
