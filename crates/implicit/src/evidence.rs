//! Evidence checks: does the quoted step exist, and does the quoted excerpt (or a close
//! paraphrase of it) appear in that step?

use crate::blind::BlindView;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Outcome of checking one IF's evidence against the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceStatus {
    /// The normalized excerpt occurs in the step.
    Verbatim,
    /// Most of the excerpt's content words occur in the step (close paraphrase).
    Paraphrase,
    /// The step exists but the excerpt is not found in it.
    Unsupported,
    /// No step with that index exists.
    StepNotFound,
}

impl EvidenceStatus {
    pub fn supported(self) -> bool {
        matches!(self, EvidenceStatus::Verbatim | EvidenceStatus::Paraphrase)
    }
}

/// The check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceCheck {
    pub status: EvidenceStatus,
    /// Share of the excerpt's content words found in the step (1.0 for verbatim).
    pub coverage: f64,
    /// Whether the claimed agent matches the step's agent or speaker (case-insensitive).
    pub agent_matches: bool,
}

/// Lowercase, every non-alphanumeric character a space, whitespace collapsed.
pub fn normalize(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

const STOP: &[&str] = &[
    "the", "and", "for", "that", "this", "with", "was", "are", "but", "not", "you", "from", "has",
    "have", "its", "his", "her", "they", "their", "there", "then", "than", "into", "out", "our",
    "all", "any", "can", "will",
];

/// Content words (3+ characters, not a stop word) of a normalized text.
pub fn content_words(normalized: &str) -> Vec<&str> {
    normalized
        .split(' ')
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(w))
        .collect()
}

/// Check the evidence of an IF claimed at source step `step` by `agent`.
pub fn check(
    view: &BlindView<'_>,
    step: usize,
    agent: &str,
    evidence: &str,
    paraphrase_threshold: f64,
) -> EvidenceCheck {
    let Some(pos) = view.position(step) else {
        return EvidenceCheck {
            status: EvidenceStatus::StepNotFound,
            coverage: 0.0,
            agent_matches: false,
        };
    };
    let s = &view.steps[pos];
    let agent_l = agent.trim().to_lowercase();
    let agent_matches = !agent_l.is_empty()
        && (s.agent.to_lowercase() == agent_l
            || s.speaker.to_lowercase() == agent_l
            || s.speaker.to_lowercase().starts_with(&format!("{agent_l} ")));
    let mut text = s.content.clone();
    for c in &s.tool_calls {
        text.push(' ');
        text.push_str(&c.name);
        text.push(' ');
        text.push_str(&c.arguments);
    }
    let hay = normalize(&text);
    let needle = normalize(evidence);
    if needle.is_empty() {
        return EvidenceCheck {
            status: EvidenceStatus::Unsupported,
            coverage: 0.0,
            agent_matches,
        };
    }
    if hay.contains(&needle) {
        return EvidenceCheck {
            status: EvidenceStatus::Verbatim,
            coverage: 1.0,
            agent_matches,
        };
    }
    let words = content_words(&needle);
    if words.is_empty() {
        return EvidenceCheck {
            status: EvidenceStatus::Unsupported,
            coverage: 0.0,
            agent_matches,
        };
    }
    let have: HashSet<&str> = hay.split(' ').collect();
    let found = words.iter().filter(|w| have.contains(*w)).count();
    let coverage = found as f64 / words.len() as f64;
    let status = if coverage >= paraphrase_threshold {
        EvidenceStatus::Paraphrase
    } else {
        EvidenceStatus::Unsupported
    };
    EvidenceCheck {
        status,
        coverage,
        agent_matches,
    }
}

/// Jaccard similarity of content-word sets (used to match repeated manifestations).
pub fn similarity(a: &str, b: &str) -> f64 {
    let na = normalize(a);
    let nb = normalize(b);
    let sa: HashSet<&str> = content_words(&na).into_iter().collect();
    let sb: HashSet<&str> = content_words(&nb).into_iter().collect();
    if sa.is_empty() && sb.is_empty() {
        return 0.0;
    }
    sa.intersection(&sb).count() as f64 / sa.union(&sb).count() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::{Step, Trace};

    fn trace() -> Trace {
        let mut t = Trace::new("x");
        t.steps = vec![
            Step {
                index: 0,
                agent: "WebSurfer".into(),
                content: "I clicked 'Play' text; the page did not change.".into(),
                ..Default::default()
            },
            Step {
                index: 1,
                agent: "Orchestrator".into(),
                speaker: "Orchestrator (thought)".into(),
                content: "Ask FileSurfer to open report.pdf".into(),
                ..Default::default()
            },
        ];
        t
    }

    #[test]
    fn verbatim_paraphrase_unsupported_missing() {
        let t = trace();
        let v = BlindView::of(&t);
        let c = check(&v, 0, "WebSurfer", "clicked 'Play' text;", 0.6);
        assert_eq!(c.status, EvidenceStatus::Verbatim);
        assert!(c.agent_matches);
        let c = check(
            &v,
            0,
            "websurfer",
            "the page did not change after clicking Play",
            0.6,
        );
        assert_eq!(c.status, EvidenceStatus::Paraphrase, "{c:?}");
        let c = check(
            &v,
            0,
            "FileSurfer",
            "the PDF was converted to markdown",
            0.6,
        );
        assert_eq!(c.status, EvidenceStatus::Unsupported);
        assert!(!c.agent_matches);
        assert_eq!(
            check(&v, 9, "WebSurfer", "x", 0.6).status,
            EvidenceStatus::StepNotFound
        );
        assert_eq!(
            check(&v, 0, "WebSurfer", "", 0.6).status,
            EvidenceStatus::Unsupported
        );
        assert!(check(&v, 1, "Orchestrator", "open report.pdf", 0.6).agent_matches);
    }

    #[test]
    fn similarity_bounds() {
        assert_eq!(similarity("same words here", "same words here"), 1.0);
        assert_eq!(similarity("alpha beta", "gamma delta"), 0.0);
    }
}
