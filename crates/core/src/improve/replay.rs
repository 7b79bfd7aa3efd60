//! Replay for verification (MASIF's counterfactual replay, section 2.4): failed runs re-run from
//! their decisive step with the original prompts (no-op) and with the proposed ones (fix), and
//! successful runs from the first step of a changed agent; the outcomes give SPR, RR and
//! delta-RR with paired task-cluster bootstrap intervals (`maslens_implicit::replay`).

use maslens_implicit::replay::{replay_stats, ConfigStats, ReplayOutcome};
use serde::{Deserialize, Serialize};

use crate::CoreError;

/// The replay section of the improvement report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Replay {
    /// Whether the replayed prompts are the kept ones (else the last candidate, not kept).
    pub kept: bool,
    /// Agents whose prompt the replayed proposal changes.
    pub changed: Vec<String>,
    /// One line per replay: configuration (`held-out`, `train`), task, trace, the step replayed
    /// from, the original outcome, `noop` or `fix`, and the replay's outcome.
    pub rows: Vec<ReplayOutcome>,
    /// SPR, RR and delta-RR per configuration.
    pub stats: Vec<ConfigStats>,
    /// Runs not replayed, with why (not located, an agent the loop cannot change, a resume error).
    pub skipped: Vec<String>,
    /// Model calls (locating the held-out failures) and system runs the replay made.
    pub calls: u64,
    pub system_runs: u64,
    /// Why nothing was replayed (the system cannot resume from a message history), when so.
    pub unsupported: Option<String>,
}

/// SPR, RR and delta-RR per configuration from the replay outcomes.
pub fn stats(
    rows: &[ReplayOutcome],
    resamples: usize,
    seed: u64,
) -> Result<Vec<ConfigStats>, CoreError> {
    replay_stats(rows, resamples, seed).map_err(CoreError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: &str, original_success: bool, intervention: &str, success: bool) -> ReplayOutcome {
        ReplayOutcome {
            config: "held-out".into(),
            task: task.into(),
            trace: format!("run-{task}"),
            if_step: Some(2),
            original_success,
            intervention: intervention.into(),
            success,
        }
    }

    #[test]
    fn a_fix_that_repairs_every_failure_gives_rr_one() {
        let mut rows = Vec::new();
        for t in ["a", "b", "c"] {
            rows.push(row(t, false, "noop", false));
            rows.push(row(t, false, "fix", true));
        }
        rows.push(row("d", true, "noop", true));
        rows.push(row("d", true, "fix", true));
        let s = stats(&rows, 500, 0).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].rr_noop, Some(0.0));
        assert_eq!(s[0].rr_fix, Some(1.0));
        assert_eq!(s[0].spr_fix, Some(1.0));
        assert_eq!(s[0].delta_rr.as_ref().unwrap().estimate, 1.0);
    }

    #[test]
    fn an_unknown_intervention_is_an_error_naming_the_record() {
        let e = stats(&[row("a", false, "undo", true)], 10, 0).unwrap_err();
        assert!(e.to_string().contains("record 1"), "{e}");
    }
}
