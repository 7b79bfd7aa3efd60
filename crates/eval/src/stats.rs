//! Shared statistics: mean, sample standard deviation, percentiles, seeded bootstrap
//! confidence intervals (mean, proportion, paired task-cluster), Spearman rank correlation.
//!
//! Everything random takes an explicit `seed` and uses `ChaCha8Rng`, so the same call gives the
//! same interval on every machine. Intervals use the percentile method with numpy's default
//! ("linear") interpolation between order statistics.
//!
//! Functions return `None` instead of panicking when the input is too small (empty data, a
//! correlation over fewer than two points, a constant series).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Default number of bootstrap resamples.
pub const DEFAULT_RESAMPLES: usize = 5_000;

/// Arithmetic mean; `None` for empty input.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    Some(xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Sample standard deviation (denominator `n - 1`, numpy `ddof=1`); `None` for fewer than two
/// values.
pub fn sample_std(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (xs.len() - 1) as f64).sqrt())
}

/// The `q`-quantile (`q` in `[0, 1]`) of already sorted data with linear interpolation
/// (numpy's default `np.quantile(..., method="linear")`); `None` for empty input.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !q.is_finite() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The `q`-quantile of unsorted data (NaNs are dropped).
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    quantile_sorted(&v, q)
}

/// A point estimate with a bootstrap percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The statistic on the original data.
    pub estimate: f64,
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
    /// Resamples drawn.
    pub resamples: usize,
}

fn percentile_interval(mut stats: Vec<f64>, estimate: f64, level: f64) -> Option<Interval> {
    stats.retain(|x| !x.is_nan());
    if stats.is_empty() {
        return None;
    }
    stats.sort_by(|a, b| a.total_cmp(b));
    let alpha = (1.0 - level) / 2.0;
    Some(Interval {
        estimate,
        lo: quantile_sorted(&stats, alpha)?,
        hi: quantile_sorted(&stats, 1.0 - alpha)?,
        level,
        resamples: stats.len(),
    })
}

/// Seeded percentile bootstrap interval of the mean of `xs`.
pub fn bootstrap_mean_ci(xs: &[f64], resamples: usize, level: f64, seed: u64) -> Option<Interval> {
    let estimate = mean(xs)?;
    if resamples == 0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = xs.len();
    let stats: Vec<f64> = (0..resamples)
        .map(|_| {
            let s: f64 = (0..n).map(|_| xs[rng.gen_range(0..n)]).sum();
            s / n as f64
        })
        .collect();
    percentile_interval(stats, estimate, level)
}

/// Seeded percentile bootstrap interval of a proportion (share of `true`).
pub fn bootstrap_proportion_ci(
    outcomes: &[bool],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<Interval> {
    let xs: Vec<f64> = outcomes
        .iter()
        .map(|&b| if b { 1.0 } else { 0.0 })
        .collect();
    bootstrap_mean_ci(&xs, resamples, level, seed)
}

/// One unit (e.g. a trace) of a paired comparison: its cluster (e.g. the task) and the two
/// paired measurements (e.g. no-op and fix replay success rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedUnit {
    pub cluster: String,
    pub a: f64,
    pub b: f64,
}

/// Paired cluster bootstrap of `mean(b) - mean(a)` over units.
///
/// Clusters (tasks) are resampled with replacement; every unit of a drawn cluster enters the
/// resample with both its measurements, so the pairing and the within-task correlation are
/// kept. The statistic on a resample is the difference of the unit means (each unit weighs
/// the same). Returns `None` for no units.
pub fn paired_cluster_bootstrap(
    units: &[PairedUnit],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<Interval> {
    if units.is_empty() || resamples == 0 {
        return None;
    }
    // Clusters in first-seen order (deterministic).
    let mut order: Vec<&str> = Vec::new();
    let mut members: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, u) in units.iter().enumerate() {
        let e = members.entry(u.cluster.as_str()).or_default();
        if e.is_empty() {
            order.push(u.cluster.as_str());
        }
        e.push(i);
    }
    let clusters: Vec<&Vec<usize>> = order.iter().filter_map(|c| members.get(c)).collect();
    let diff = |idx: &mut dyn Iterator<Item = usize>| -> f64 {
        let (mut sa, mut sb, mut n) = (0.0, 0.0, 0usize);
        for i in idx {
            sa += units[i].a;
            sb += units[i].b;
            n += 1;
        }
        if n == 0 {
            f64::NAN
        } else {
            (sb - sa) / n as f64
        }
    };
    let estimate = diff(&mut (0..units.len()));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let k = clusters.len();
    let stats: Vec<f64> = (0..resamples)
        .map(|_| {
            let picks: Vec<usize> = (0..k).map(|_| rng.gen_range(0..k)).collect();
            diff(&mut picks.iter().flat_map(|&c| clusters[c].iter().copied()))
        })
        .collect();
    percentile_interval(stats, estimate, level)
}

/// Exact two-sided McNemar test of paired binary outcomes: `only_a` units right under A only,
/// `only_b` under B only (the discordant pairs; the concordant ones do not enter). Under the
/// null each discordant pair goes either way with probability 1/2, so the p-value is twice the
/// smaller binomial tail, capped at 1; 1 when there is no discordant pair.
pub fn mcnemar_exact(only_a: usize, only_b: usize) -> f64 {
    let n = only_a + only_b;
    if n == 0 {
        return 1.0;
    }
    let k = only_a.min(only_b);
    // ln C(n, i) built up term by term: C(n, i) = C(n, i-1) * (n-i+1) / i.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_c = 0.0f64;
    let mut tail = 0.0f64;
    for i in 0..=k {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_c + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

/// Ranks with ties given the average of the positions they span (1-based), as
/// `scipy.stats.rankdata(method="average")`.
pub fn average_ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut ranks = vec![0.0; xs.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        // Positions i..=j (0-based) share rank mean(i+1 ..= j+1).
        let r = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            ranks[k] = r;
        }
        i = j + 1;
    }
    ranks
}

/// Pearson correlation; `None` when lengths differ, fewer than two points, or a series is
/// constant.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 2 {
        return None;
    }
    let mx = mean(xs)?;
    let my = mean(ys)?;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// Spearman rank correlation with ties handled by average ranks (`scipy.stats.spearmanr`).
/// `None` when lengths differ, fewer than two points, or either series is constant.
pub fn spearman(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() {
        return None;
    }
    pearson(&average_ranks(xs), &average_ranks(ys))
}

#[cfg(test)]
mod tests {
    #[test]
    fn mcnemar_exact_matches_the_binomial_tail() {
        assert_eq!(super::mcnemar_exact(0, 0), 1.0);
        assert_eq!(super::mcnemar_exact(3, 3), 1.0);
        // 0 of 5 discordant pairs one way: 2 * 0.5^5.
        assert!((super::mcnemar_exact(0, 5) - 0.0625).abs() < 1e-12);
        // 1 vs 9: 2 * (1 + 10) / 1024.
        assert!((super::mcnemar_exact(9, 1) - 22.0 / 1024.0).abs() < 1e-12);
        assert_eq!(super::mcnemar_exact(1, 9), super::mcnemar_exact(9, 1));
        // Large counts stay finite and small.
        let p = super::mcnemar_exact(100, 300);
        assert!(p > 0.0 && p < 1e-20, "{p}");
    }

    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn basic_moments() {
        assert_eq!(mean(&[]), None);
        assert_eq!(sample_std(&[1.0]), None);
        assert!(close(mean(&[1.0, 2.0, 6.0]).unwrap(), 3.0, 1e-12));
        // var = ((1-3)^2 + (2-3)^2 + (6-3)^2) / 2 = 14 / 2 = 7
        assert!(close(
            sample_std(&[1.0, 2.0, 6.0]).unwrap(),
            7f64.sqrt(),
            1e-12
        ));
    }

    #[test]
    fn ranks_average_ties() {
        assert_eq!(
            average_ranks(&[10.0, 20.0, 10.0, 30.0]),
            vec![1.5, 3.0, 1.5, 4.0]
        );
        assert_eq!(average_ranks(&[5.0, 5.0, 5.0]), vec![2.0, 2.0, 2.0]);
    }

    #[test]
    fn spearman_degenerate_is_none() {
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[1.0]), None);
        assert!(close(
            spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap(),
            -1.0,
            1e-12
        ));
    }

    #[test]
    fn bootstrap_is_deterministic_and_brackets_estimate() {
        let xs: Vec<f64> = (0..40).map(|i| (i % 7) as f64).collect();
        let a = bootstrap_mean_ci(&xs, 2000, 0.95, 7).unwrap();
        let b = bootstrap_mean_ci(&xs, 2000, 0.95, 7).unwrap();
        assert_eq!(a, b);
        assert!(a.lo < a.estimate && a.estimate < a.hi);
        let c = bootstrap_mean_ci(&xs, 2000, 0.95, 8).unwrap();
        assert_ne!(a, c);
        assert!(bootstrap_mean_ci(&[], 100, 0.95, 0).is_none());
    }

    #[test]
    fn constant_data_gives_zero_width() {
        let ci = bootstrap_mean_ci(&[2.0; 10], 500, 0.95, 1).unwrap();
        assert_eq!((ci.lo, ci.hi), (2.0, 2.0));
        let units: Vec<PairedUnit> = (0..6)
            .map(|i| PairedUnit {
                cluster: format!("t{}", i / 2),
                a: 0.25,
                b: 0.75,
            })
            .collect();
        let ci = paired_cluster_bootstrap(&units, 500, 0.95, 1).unwrap();
        assert!(
            close(ci.estimate, 0.5, 1e-12) && close(ci.lo, 0.5, 1e-12) && close(ci.hi, 0.5, 1e-12)
        );
    }
}
