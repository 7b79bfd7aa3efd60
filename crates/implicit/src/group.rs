//! Beyond the paper (its appendix C asks for both):
//! - grouping repeated manifestations of one underlying error into one event with a source
//!   step and later manifestations;
//! - multi-judge mode: events matched by step, agent and type across judges, kept when at
//!   least k of n judges report them, agreement reported as an uncertainty signal.

use crate::detect::ImplicitFailure;
use crate::evidence::similarity;
use serde::{Deserialize, Serialize};

/// One underlying error and its manifestations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorGroup {
    pub id: usize,
    /// Earliest step (the source).
    pub source_step: usize,
    /// Later steps where the same error shows again.
    pub manifestations: Vec<usize>,
    /// Positions of the member events in the trace's event list.
    pub members: Vec<usize>,
}

/// Settings for grouping.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    /// Minimum content-word Jaccard similarity of descriptions (or of evidence) for two events
    /// of the same agent and type to be the same underlying error.
    pub min_similarity: f64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_similarity: 0.5,
        }
    }
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Group events (sets `event.group`) and return the groups, ordered by source step.
/// Two events are linked when they have the same agent (case-insensitive) and type, and
/// similar descriptions or evidence; groups are the connected components.
pub fn group_repeats(events: &mut [ImplicitFailure], cfg: GroupConfig) -> Vec<ErrorGroup> {
    let n = events.len();
    let mut parent: Vec<usize> = (0..n).collect();
    for i in 0..n {
        for j in (i + 1)..n {
            let (a, b) = (&events[i], &events[j]);
            if a.error_type != b.error_type
                || a.agent.trim().to_lowercase() != b.agent.trim().to_lowercase()
                || a.step == b.step
            {
                continue;
            }
            let sim = similarity(&a.description, &b.description)
                .max(similarity(&a.evidence, &b.evidence));
            if sim >= cfg.min_similarity {
                let (ri, rj) = (find(&mut parent, i), find(&mut parent, j));
                parent[ri] = rj;
            }
        }
    }
    let mut comps: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for i in 0..n {
        let r = find(&mut parent, i);
        comps.entry(r).or_default().push(i);
    }
    let mut groups: Vec<ErrorGroup> = comps
        .into_values()
        .map(|mut members| {
            members.sort_by_key(|&m| (events[m].step, m));
            let mut steps: Vec<usize> = members.iter().map(|&m| events[m].step).collect();
            steps.dedup();
            ErrorGroup {
                id: 0,
                source_step: steps[0],
                manifestations: steps[1..].to_vec(),
                members,
            }
        })
        .collect();
    groups.sort_by_key(|g| (g.source_step, g.members[0]));
    for (id, g) in groups.iter_mut().enumerate() {
        g.id = id;
        for &m in &g.members {
            events[m].group = Some(id);
        }
    }
    groups
}

/// Result of combining several judges.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JudgePanel {
    /// Events supported by at least `k` judges, with `judges` and `agreement` set.
    pub kept: Vec<ImplicitFailure>,
    /// Events below the threshold (reported, not counted).
    pub dropped: Vec<ImplicitFailure>,
    pub k: usize,
    pub n: usize,
    /// Mean agreement over all distinct events (1.0 = every judge found every event).
    pub mean_agreement: Option<f64>,
}

/// Combine per-judge event lists (`(judge id, events)`) by (step, agent, type); keep events
/// reported by at least `k` of the `n` judges. The representative is the first judge's version.
pub fn combine_judges(per_judge: &[(String, Vec<ImplicitFailure>)], k: usize) -> JudgePanel {
    let n = per_judge.len();
    let mut merged: Vec<ImplicitFailure> = Vec::new();
    for (judge, events) in per_judge {
        for e in events {
            match merged.iter_mut().find(|m| m.match_key() == e.match_key()) {
                Some(m) => {
                    if !m.judges.contains(judge) {
                        m.judges.push(judge.clone());
                    }
                }
                None => {
                    let mut e = e.clone();
                    e.judges = vec![judge.clone()];
                    merged.push(e);
                }
            }
        }
    }
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    let mut agreements = Vec::new();
    for mut e in merged {
        let a = if n == 0 {
            0.0
        } else {
            e.judges.len() as f64 / n as f64
        };
        e.agreement = Some(a);
        agreements.push(a);
        if e.judges.len() >= k {
            kept.push(e);
        } else {
            dropped.push(e);
        }
    }
    kept.sort_by_key(|e| e.step);
    dropped.sort_by_key(|e| e.step);
    JudgePanel {
        kept,
        dropped,
        k,
        n,
        mean_agreement: maslens_eval::stats::mean(&agreements),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::ErrorType;

    fn ev(step: usize, agent: &str, ty: ErrorType, desc: &str) -> ImplicitFailure {
        ImplicitFailure {
            description: desc.into(),
            ..ImplicitFailure::fixture(step, agent, ty)
        }
    }

    #[test]
    fn repeated_manifestations_form_one_group() {
        let mut events = vec![
            ev(
                2,
                "FileSurfer",
                ErrorType::IncompleteAction,
                "returns the first PDF page instead of searching the pages",
            ),
            ev(
                5,
                "FileSurfer",
                ErrorType::IncompleteAction,
                "again returns the first PDF page instead of searching",
            ),
            ev(
                6,
                "WebSurfer",
                ErrorType::WrongAction,
                "clicks page text rather than the link",
            ),
            ev(
                9,
                "filesurfer",
                ErrorType::IncompleteAction,
                "returns first PDF page instead of searching pages again",
            ),
            ev(
                11,
                "FileSurfer",
                ErrorType::IncompleteAction,
                "forgot to attach the spreadsheet file",
            ),
        ];
        let groups = group_repeats(&mut events, GroupConfig::default());
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].source_step, 2);
        assert_eq!(groups[0].manifestations, vec![5, 9]);
        assert_eq!(events[1].group, Some(0));
        assert_eq!(events[2].group, Some(1));
        assert_eq!(events[4].group, Some(2));
    }

    #[test]
    fn k_of_n_keeps_majority_events() {
        let a = vec![
            ev(1, "A", ErrorType::WrongAction, "x"),
            ev(4, "B", ErrorType::Hallucination, "y"),
        ];
        let b = vec![
            ev(1, "a", ErrorType::WrongAction, "x2"),
            ev(7, "C", ErrorType::FailedToolUse, "z"),
        ];
        let c = vec![
            ev(1, "A", ErrorType::WrongAction, "x3"),
            ev(4, "B", ErrorType::Hallucination, "y"),
        ];
        let panel = combine_judges(&[("m1".into(), a), ("m2".into(), b), ("m3".into(), c)], 2);
        assert_eq!(panel.kept.len(), 2);
        assert_eq!(panel.kept[0].judges, vec!["m1", "m2", "m3"]);
        assert_eq!(panel.kept[0].agreement, Some(1.0));
        assert!((panel.kept[1].agreement.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(panel.dropped.len(), 1);
        assert_eq!(panel.dropped[0].step, 7);
        // mean agreement over the 3 distinct events: (1 + 2/3 + 1/3) / 3
        assert!((panel.mean_agreement.unwrap() - 2.0 / 3.0).abs() < 1e-12);
    }
}
