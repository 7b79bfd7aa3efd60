//! The settings of an implicit-failure scan (what counts as an IF, how many judges must agree,
//! the severity weights), shared by the scan, its file and every front end. The commands that
//! start a scan, select, repair, replay-stats and advantages are in `maslens_core` (`scan`,
//! `implicit`).

use crate::scan::ScanConfig;
use crate::weights::Weights;
use crate::ImplicitError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The severity weights of a TOML override file, or the defaults (tables 7-8) without one.
pub fn weights_or_default(path: Option<&Path>) -> Result<Weights, ImplicitError> {
    path.map_or_else(|| Ok(Weights::default()), Weights::from_toml_file)
}

/// What counts as an IF (issue 17 item 11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Counting {
    /// Events whose evidence is not found in the trace are flagged and not counted; at most
    /// `max_events` per window.
    #[default]
    Maslens,
    /// As the paper counts: every event the detector reports (the evidence check still runs and
    /// its findings are reported), at least 100 per window.
    Paper,
}

impl Counting {
    /// One line for reports.
    pub fn describe(self, max_events: usize) -> String {
        match self {
            Counting::Maslens => format!(
                "maslens (events whose evidence is not in the trace are flagged, not counted; at most {max_events} per window)"
            ),
            Counting::Paper => format!(
                "paper (every detected event counts, whatever the evidence check found; at most {max_events} per window)"
            ),
        }
    }
}

/// Settings of a corpus scan besides the weights (the `maslens scan` flags), recorded in the
/// scan file as `config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScanSettings {
    /// Classify absorption of each counted IF (otherwise IFs weigh as unknown absorption).
    pub classify_absorption: bool,
    /// Count IFs whose evidence was not found in the trace (default: flagged, not counted).
    pub count_unsupported: bool,
    /// `paper` counts as the paper does: implies `count_unsupported` and lifts `max_events`.
    pub counting: Counting,
    /// Multi-judge threshold k; `None`: a majority of the judges. The scan file records the k used.
    pub min_judges: Option<usize>,
    /// Context window to plan windows for (`None`: the model's own).
    pub window_tokens: Option<usize>,
    /// Steps repeated between consecutive windows of a long trace.
    pub overlap_steps: usize,
    /// Completion token limit of the detector.
    pub detect_max_tokens: u32,
    /// Most IFs the detector may report per window (at least 1).
    pub max_events: usize,
    /// Completion token limit of the absorption classifier.
    pub absorb_max_tokens: u32,
    /// Seed of the bootstrap intervals of the corpus report.
    pub seed: u64,
}

impl Default for ScanSettings {
    fn default() -> Self {
        ScanSettings {
            classify_absorption: true,
            count_unsupported: false,
            counting: Counting::Maslens,
            min_judges: None,
            window_tokens: None,
            overlap_steps: 2,
            detect_max_tokens: 1024,
            max_events: 10,
            absorb_max_tokens: 256,
            seed: 0,
        }
    }
}

impl ScanSettings {
    /// The judge threshold for `n_judges` judges: `min_judges` (or a majority) within 1..=n.
    pub fn judges_needed(&self, n_judges: usize) -> usize {
        let n = n_judges.max(1);
        self.min_judges.unwrap_or(n / 2 + 1).clamp(1, n)
    }

    /// Most events per window under this counting.
    pub fn events_per_window(&self) -> usize {
        match self.counting {
            Counting::Maslens => self.max_events.max(1),
            Counting::Paper => self.max_events.max(100),
        }
    }

    /// The per-trace configuration for `n_judges` judges scoring with `weights`.
    pub fn scan_config(&self, weights: &Weights, n_judges: usize) -> ScanConfig {
        ScanConfig {
            weights: weights.clone(),
            classify_absorption: self.classify_absorption,
            count_unsupported: self.count_unsupported || self.counting == Counting::Paper,
            min_judges: self.judges_needed(n_judges),
            detect: crate::detect::DetectConfig {
                context_tokens: self.window_tokens,
                overlap_steps: self.overlap_steps,
                max_tokens: self.detect_max_tokens,
                max_events: self.events_per_window(),
                ..Default::default()
            },
            absorb: crate::absorb::AbsorbConfig {
                context_tokens: self.window_tokens,
                max_tokens: self.absorb_max_tokens,
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// How to scan a corpus.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    pub weights: Weights,
    pub settings: ScanSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_threshold_defaults_to_a_majority() {
        let s = ScanSettings::default();
        assert_eq!([1, 2, 3, 4].map(|n| s.judges_needed(n)), [1, 2, 2, 3]);
        let s = ScanSettings {
            min_judges: Some(9),
            ..Default::default()
        };
        assert_eq!(s.judges_needed(3), 3);
        assert_eq!(s.scan_config(&Weights::default(), 3).min_judges, 3);
    }
}
