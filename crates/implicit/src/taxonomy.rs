//! The MASIF taxonomies: 8 error types (paper table 2) and 6 absorption patterns (table 3),
//! plus the low/medium/high levels used for severity and confidence.

use serde::{Deserialize, Serialize};

/// IF error type (MASIF table 2). Serialized in the snake_case the detector prompt uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    FailedToolUse,
    WrongAction,
    UnnecessaryAction,
    Hallucination,
    IncompleteAction,
    ReasoningError,
    Misunderstanding,
    MalformedOutput,
}

impl ErrorType {
    pub const ALL: [ErrorType; 8] = [
        ErrorType::FailedToolUse,
        ErrorType::WrongAction,
        ErrorType::UnnecessaryAction,
        ErrorType::Hallucination,
        ErrorType::IncompleteAction,
        ErrorType::ReasoningError,
        ErrorType::Misunderstanding,
        ErrorType::MalformedOutput,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::FailedToolUse => "failed_tool_use",
            ErrorType::WrongAction => "wrong_action",
            ErrorType::UnnecessaryAction => "unnecessary_action",
            ErrorType::Hallucination => "hallucination",
            ErrorType::IncompleteAction => "incomplete_action",
            ErrorType::ReasoningError => "reasoning_error",
            ErrorType::Misunderstanding => "misunderstanding",
            ErrorType::MalformedOutput => "malformed_output",
        }
    }

    /// Parse the snake_case name (case-insensitive; spaces and hyphens accepted for underscores).
    pub fn parse(s: &str) -> Option<Self> {
        let norm = normalize_label(s);
        ErrorType::ALL.into_iter().find(|t| t.as_str() == norm)
    }
}

/// Absorption pattern (MASIF table 3 / listing 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Absorption {
    SelfCorrected,
    SelfWorkaround,
    PeerRepair,
    OrchestratorIntervention,
    UnresolvedPropagation,
    TrivialIssue,
}

impl Absorption {
    pub const ALL: [Absorption; 6] = [
        Absorption::SelfCorrected,
        Absorption::SelfWorkaround,
        Absorption::PeerRepair,
        Absorption::OrchestratorIntervention,
        Absorption::UnresolvedPropagation,
        Absorption::TrivialIssue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Absorption::SelfCorrected => "self_corrected",
            Absorption::SelfWorkaround => "self_workaround",
            Absorption::PeerRepair => "peer_repair",
            Absorption::OrchestratorIntervention => "orchestrator_intervention",
            Absorption::UnresolvedPropagation => "unresolved_propagation",
            Absorption::TrivialIssue => "trivial_issue",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let norm = normalize_label(s);
        Absorption::ALL.into_iter().find(|a| a.as_str() == norm)
    }

    /// Informative labels are all but `trivial_issue` (the paper's "trivial/unknown" bucket).
    pub fn is_informative(self) -> bool {
        self != Absorption::TrivialIssue
    }

    /// Absorbed or repaired (informative and not propagated).
    pub fn is_absorbed(self) -> bool {
        self.is_informative() && self != Absorption::UnresolvedPropagation
    }
}

/// low / medium / high, used for severity and confidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Low,
    Medium,
    High,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Low, Level::Medium, Level::High];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let norm = normalize_label(s);
        Level::ALL.into_iter().find(|l| l.as_str() == norm)
    }
}

fn normalize_label(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace([' ', '-'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_and_tolerates_spacing() {
        for t in ErrorType::ALL {
            assert_eq!(ErrorType::parse(t.as_str()), Some(t));
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::json!(t.as_str())
            );
        }
        for a in Absorption::ALL {
            assert_eq!(Absorption::parse(a.as_str()), Some(a));
            assert_eq!(
                serde_json::to_value(a).unwrap(),
                serde_json::json!(a.as_str())
            );
        }
        assert_eq!(
            ErrorType::parse("Failed Tool-Use"),
            Some(ErrorType::FailedToolUse)
        );
        assert_eq!(ErrorType::parse("typo"), None);
        assert_eq!(Level::parse(" HIGH "), Some(Level::High));
    }

    #[test]
    fn informative_and_absorbed() {
        assert!(!Absorption::TrivialIssue.is_informative());
        assert!(Absorption::UnresolvedPropagation.is_informative());
        assert!(!Absorption::UnresolvedPropagation.is_absorbed());
        assert!(Absorption::PeerRepair.is_absorbed());
    }
}
