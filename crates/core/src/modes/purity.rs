//! How failure modes line up with gold decisive agents (runs that carry one, as Who&When's do).
//!
//! - **purity**: each mode counts its most common gold agent; the sum over modes, over the runs
//!   with gold. 1.0 when every mode holds one gold agent (singletons score 1.0, so read it with:)
//! - **inverse purity**: each gold agent counts the mode holding most of its runs; the sum over
//!   gold agents, over the runs with gold. 1.0 when each gold agent's runs sit in one mode.
//! - **f**: their harmonic mean.
//!
//! Two reference groupings are scored the same way: one mode per system (what purity is without
//! any grouping) and one mode per located agent (the modes without the text split).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FailureCase, SystemModes, UNNAMED};

/// Purity and inverse purity of a grouping against gold agents.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub groups: usize,
    pub purity: f64,
    pub inverse_purity: f64,
    pub f: f64,
}

/// [`super::group`]'s modes against gold agents, beside the two reference groupings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Purity {
    /// Runs with a gold decisive agent (the only ones scored).
    pub runs_with_gold: usize,
    pub modes: Score,
    pub one_per_system: Score,
    pub by_located_agent: Score,
    /// How often the located agent is the gold agent (the modes' first key).
    pub located_agent_accuracy: f64,
    /// Runs with gold that the built-in prior was trained on: their localizations, and so these
    /// figures, are in-sample when the prior (alone or stacked) located them.
    #[serde(default)]
    pub in_sample_runs: usize,
}

/// Scores `systems`' modes against the gold agents of `cases` (none without gold).
pub fn purity(systems: &[SystemModes], cases: &[FailureCase]) -> Option<Purity> {
    let key = |system: &Option<String>, run: &str| {
        format!("{}\u{1f}{run}", system.as_deref().unwrap_or(UNNAMED))
    };
    let gold: BTreeMap<String, &str> = cases
        .iter()
        .filter_map(|c| Some((key(&c.system, &c.run), c.gold_agent.as_deref()?)))
        .collect();
    if gold.is_empty() {
        return None;
    }
    let mut modes: Vec<Vec<&str>> = Vec::new();
    for s in systems {
        for m in &s.modes {
            let system = Some(s.system.clone());
            let labels = m
                .members
                .iter()
                .filter_map(|r| gold.get(&key(&system, r)).copied());
            modes.push(labels.collect());
        }
    }
    let mut per_system: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut per_agent: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    let mut hits = 0usize;
    for c in cases {
        let Some(g) = c.gold_agent.as_deref() else {
            continue;
        };
        let system = c.system.as_deref().unwrap_or(UNNAMED);
        per_system.entry(system).or_default().push(g);
        let located = c.agent.as_deref().unwrap_or("");
        per_agent.entry((system, located)).or_default().push(g);
        hits += usize::from(c.agent.as_deref() == Some(g));
    }
    Some(Purity {
        runs_with_gold: gold.len(),
        modes: score(&modes),
        one_per_system: score(&per_system.into_values().collect::<Vec<_>>()),
        by_located_agent: score(&per_agent.into_values().collect::<Vec<_>>()),
        located_agent_accuracy: hits as f64 / gold.len() as f64,
        in_sample_runs: cases
            .iter()
            .filter(|c| c.gold_agent.is_some() && c.in_sample)
            .count(),
    })
}

/// Purity, inverse purity and f of groups given as their members' gold labels.
pub fn score(groups: &[Vec<&str>]) -> Score {
    let n: usize = groups.iter().map(Vec::len).sum();
    let mut majority = 0usize;
    // gold label -> its count in each group
    let mut spread: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for &label in g {
            *counts.entry(label).or_default() += 1;
        }
        majority += counts.values().copied().max().unwrap_or(0);
        for (label, c) in counts {
            let row = spread.entry(label).or_insert_with(|| vec![0; groups.len()]);
            row[gi] = c;
        }
    }
    let inverse: usize = spread
        .values()
        .map(|row| row.iter().copied().max().unwrap_or(0))
        .sum();
    let ratio = |x: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let (p, ip) = (ratio(majority), ratio(inverse));
    Score {
        groups: groups.iter().filter(|g| !g.is_empty()).count(),
        purity: p,
        inverse_purity: ip,
        f: if p + ip > 0.0 {
            2.0 * p * ip / (p + ip)
        } else {
            0.0
        },
    }
}
