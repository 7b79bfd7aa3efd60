//! Keep a change only when it helps on held-out tasks: the paired score differences (after -
//! before, task by task) get a seeded percentile bootstrap interval of their mean, and the change
//! is accepted when the interval's lower bound is above zero.

use maslens_eval::stats::bootstrap_mean_ci;
use serde::{Deserialize, Serialize};

/// The decision on one proposed change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Acceptance {
    /// Held-out tasks scored both ways.
    pub tasks: usize,
    pub before: f64,
    pub after: f64,
    /// Mean of after - before.
    pub delta: f64,
    /// Bootstrap interval of `delta` at `level`.
    pub lo: f64,
    pub hi: f64,
    pub level: f64,
    pub accepted: bool,
    /// Why it was not accepted, in words.
    #[serde(default)]
    pub why_not: Option<String>,
}

/// Decide on a change from the held-out scores before and after it (same tasks, same order).
pub fn accept(
    before: &[f64],
    after: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Result<Acceptance, crate::CoreError> {
    if before.len() != after.len() || before.is_empty() {
        return Err(crate::CoreError::Invalid(format!(
            "acceptance needs the same held-out tasks scored before and after: {} and {} scores",
            before.len(),
            after.len()
        )));
    }
    let diffs: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    // Not empty (checked above), so every mean exists.
    let mean = |xs: &[f64]| maslens_eval::stats::mean(xs).unwrap_or(0.0);
    let delta = mean(&diffs);
    let (lo, hi) = match bootstrap_mean_ci(&diffs, resamples, level, seed) {
        Some(i) => (i.lo, i.hi),
        None => (delta, delta),
    };
    let accepted = lo > 0.0;
    let why_not = (!accepted).then(|| {
        if delta <= 0.0 {
            format!("held-out score did not rise (delta {delta:+.3})")
        } else {
            format!(
                "the {:.0}% interval of the gain [{lo:+.3}, {hi:+.3}] includes 0 ({} tasks)",
                level * 100.0,
                diffs.len()
            )
        }
    });
    Ok(Acceptance {
        tasks: diffs.len(),
        before: mean(before),
        after: mean(after),
        delta,
        lo,
        hi,
        level,
        accepted,
        why_not,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_gain_is_accepted_and_noise_is_not() {
        let before = [0.0; 12];
        let after = [1.0; 12];
        let a = accept(&before, &after, 2000, 0.95, 0).unwrap();
        assert!(
            a.accepted && a.lo > 0.0 && (a.delta - 1.0).abs() < 1e-12,
            "{a:?}"
        );
        let mixed_after = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let mixed_before = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let a = accept(&mixed_before, &mixed_after, 2000, 0.95, 0).unwrap();
        assert!(!a.accepted);
        assert!(a.why_not.unwrap().contains("did not rise"));
        let one_win = [0.0, 0.0, 0.0, 0.0, 1.0];
        let a = accept(&[0.0; 5], &one_win, 2000, 0.95, 0).unwrap();
        assert!(
            !a.accepted,
            "one task in five is not beyond the interval: {a:?}"
        );
        assert!(a.why_not.unwrap().contains("includes 0"));
        assert!(accept(&[1.0], &[], 10, 0.95, 0).is_err());
    }
}
