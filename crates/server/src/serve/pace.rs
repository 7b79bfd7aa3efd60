//! How often a run that keeps growing is assembled again. Assembly reads a run's every span, so
//! a run sent in many batches, each assembled on arrival, costs time quadratic in its size (issue
//! 35 F18: 80,001 spans, 12 s of CPU in one request, 71 s in 160). After an assembly that took
//! `T` (at least [`AssemblyPace::MIN_PACED`]), the run waits `factor x T` before the next one, so
//! assembly takes at most about `1 / (1 + factor)` of the server's time on such a run, and the
//! total work on a run that grows steadily stays within a constant factor of its last assembly.
//! The price: its stored trace (UI, API, completion) lags its spans by up to `factor x T`, for
//! example 4 x 0.1 s for a run of several thousand spans. Small runs (an assembly under
//! `MIN_PACED`) are assembled on every pass, as before. `factor` 0 turns pacing off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Per run: when its last assembly ended and how long it took.
pub struct AssemblyPace {
    factor: f64,
    last: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl AssemblyPace {
    /// Assemblies shorter than this are never paced.
    pub const MIN_PACED: Duration = Duration::from_millis(20);
    /// Entries kept before old ones are dropped.
    const KEEP: usize = 4096;

    /// The largest factor (`--assembly-pace`): a run then waits 1000 x its assembly time.
    pub const MAX_FACTOR: f64 = 1000.0;

    /// `factor` when it is one [`AssemblyPace::new`] takes, else what is wrong with it, worded to
    /// follow the setting's name (`--assembly-pace must be ...`): the one check, for the CLI's flag
    /// and the server's configuration alike.
    pub fn check(factor: f64) -> Result<f64, String> {
        if factor.is_finite() && (0.0..=Self::MAX_FACTOR).contains(&factor) {
            Ok(factor)
        } else {
            Err(format!(
                "must be a number from 0 to {}, not {factor}",
                Self::MAX_FACTOR
            ))
        }
    }

    /// Pacing by `factor` (0: off), refused outside 0 to [`AssemblyPace::MAX_FACTOR`].
    pub fn new(factor: f64) -> Result<AssemblyPace, String> {
        Ok(AssemblyPace {
            factor: Self::check(factor)?,
            last: Mutex::new(HashMap::new()),
        })
    }

    fn wait(&self, took: Duration) -> Duration {
        if took < Self::MIN_PACED {
            return Duration::ZERO;
        }
        took.mul_f64(self.factor)
    }

    /// Whether `run` may be assembled at `now`.
    pub fn due(&self, run: &str, now: Instant) -> bool {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match last.get(run) {
            Some(&(ended, took)) => now.saturating_duration_since(ended) >= self.wait(took),
            None => true,
        }
    }

    /// `run`'s assembly that ended at `ended` took `took`.
    pub fn record(&self, run: &str, ended: Instant, took: Duration) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if self.wait(took).is_zero() {
            last.remove(run);
            return;
        }
        if last.len() >= Self::KEEP {
            // Entries whose wait has long passed say nothing any more.
            let factor = self.factor;
            last.retain(|_, (e, t)| {
                ended.saturating_duration_since(*e) < t.mul_f64(factor) + Duration::from_secs(60)
            });
        }
        last.insert(run.to_string(), (ended, took));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_slow_assembly_waits_its_multiple_and_a_fast_one_never_waits() {
        let pace = AssemblyPace::new(4.0).unwrap();
        let t0 = Instant::now();
        assert!(pace.due("big", t0), "never assembled: due");
        pace.record("big", t0, 100 * MS);
        assert!(!pace.due("big", t0 + 399 * MS));
        assert!(pace.due("big", t0 + 400 * MS));
        // A fast assembly is not paced, and forgets an earlier slow one.
        pace.record("small", t0, 5 * MS);
        assert!(pace.due("small", t0));
        pace.record("big", t0, 5 * MS);
        assert!(pace.due("big", t0 + MS));
        // Other runs are not held back by one slow run.
        pace.record("big", t0, 500 * MS);
        assert!(pace.due("other", t0));
    }

    #[test]
    fn factor_zero_turns_pacing_off_and_nonsense_is_refused() {
        let pace = AssemblyPace::new(0.0).unwrap();
        let t0 = Instant::now();
        pace.record("run", t0, Duration::from_secs(10));
        assert!(pace.due("run", t0));
        for f in [-1.0, 1000.5, f64::NAN, f64::INFINITY] {
            let err = AssemblyPace::new(f).err().unwrap_or_default();
            assert!(
                err.starts_with("must be a number from 0 to 1000"),
                "factor {f}: {err}"
            );
        }
        assert!(AssemblyPace::new(AssemblyPace::MAX_FACTOR).is_ok());
    }

    #[test]
    fn old_entries_are_dropped_past_the_limit() {
        let pace = AssemblyPace::new(1.0).unwrap();
        let t0 = Instant::now();
        for i in 0..AssemblyPace::KEEP {
            pace.record(&format!("r{i}"), t0, 30 * MS);
        }
        let later = t0 + Duration::from_secs(120);
        pace.record("new", later, 30 * MS);
        let last = pace.last.lock().unwrap();
        assert_eq!(last.len(), 1, "the expired ones went");
    }
}
