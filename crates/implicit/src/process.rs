//! MASIF's process metrics (tables 6 and 9) and their comparison between two sets of traces
//! with Holm-adjusted two-sided paired permutation tests (table 6: GRPO versus IF-GRPO).
//!
//! The five metrics of a set of scanned traces:
//! - **accuracy**: successes over traces with a known outcome;
//! - **IF cost / task**: the mean of C (eq. 2) over traces; **# IF / task**: the mean number of
//!   counted IFs (the paper evaluates one trace per task, so per trace = per task);
//! - **IF cost / 1K tokens** and **# IF / 1K tokens**: 1000 x the total over the total trace
//!   tokens (a ratio of totals, not a mean of per-trace ratios: in every row of tables 6 and 9 the
//!   cost density over the cost per task equals the count density over the count per task to two
//!   digits, i.e. both are divided by the same mean tokens per task, which only a ratio of totals
//!   gives). Trace tokens are the steps' recorded token counts, else about 4 characters a token
//!   ([`trace_tokens`]); scans written before they were recorded have none, and the densities
//!   are then absent.
//!
//! **Comparison** ([`compare`]): traces are paired by task (the same task text on both sides,
//! as two policies evaluated on one benchmark); tasks on one side only are left out and counted.
//! Each metric's difference `new - base` is tested with a two-sided paired permutation test that
//! swaps the two sides within tasks: exactly over all 2^n swaps when `2^n <= permutations`, else
//! over `permutations` seeded random swaps (ChaCha8), p = (1 + #{|d*| >= |d|}) / (1 + R). The
//! statistic is recomputed from the swapped totals, so the ratio metrics are tested as they are
//! defined. The five p-values of one comparison are Holm-adjusted together (the paper's table 6
//! bolds Holm-adjusted p < 0.05 per configuration; the family is not stated: maslens takes the
//! five metrics of one comparison).

use crate::scan::TraceScan;
use maslens_trace::{Outcome, Trace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Tokens of a trace: each step's recorded token count, else an estimate of its text (content
/// and tool-call arguments, about 4 characters a token).
pub fn trace_tokens(trace: &Trace) -> u64 {
    trace
        .steps
        .iter()
        .map(|s| {
            s.tokens.unwrap_or_else(|| {
                let args: usize = s.tool_calls.iter().map(|c| c.arguments.len()).sum();
                (maslens_llm::estimate_tokens(&s.content) + args.div_ceil(4)) as u64
            })
        })
        .sum()
}

/// The five process metrics of a set of traces (one row of tables 6 and 9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessMetrics {
    pub traces: usize,
    /// Successes over traces with a known outcome.
    pub accuracy: Option<f64>,
    pub if_cost_per_task: Option<f64>,
    pub ifs_per_task: Option<f64>,
    /// Total trace tokens, when every trace has them.
    pub trace_tokens: Option<u64>,
    pub if_cost_per_1k_tokens: Option<f64>,
    pub ifs_per_1k_tokens: Option<f64>,
}

/// Sums a set of traces contributes to the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    traces: f64,
    known: f64,
    successes: f64,
    cost: f64,
    ifs: f64,
    tokens: f64,
    /// Whether every trace has its token count.
    tokens_known: bool,
}

impl Totals {
    fn of<'a>(scans: impl IntoIterator<Item = &'a TraceScan>) -> Self {
        let mut t = Totals {
            tokens_known: true,
            ..Totals::default()
        };
        for s in scans {
            t.traces += 1.0;
            if s.outcome != Outcome::Unknown {
                t.known += 1.0;
            }
            if s.outcome == Outcome::Success {
                t.successes += 1.0;
            }
            t.cost += s.cost;
            t.ifs += s.events.len() as f64;
            match s.trace_tokens {
                Some(n) => t.tokens += n as f64,
                None => t.tokens_known = false,
            }
        }
        t
    }

    fn add(self, o: Totals) -> Totals {
        Totals {
            traces: self.traces + o.traces,
            known: self.known + o.known,
            successes: self.successes + o.successes,
            cost: self.cost + o.cost,
            ifs: self.ifs + o.ifs,
            tokens: self.tokens + o.tokens,
            tokens_known: self.tokens_known && o.tokens_known,
        }
    }

    fn metric(&self, m: Metric) -> Option<f64> {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let dense = |a: f64| {
            if self.tokens_known {
                ratio(1000.0 * a, self.tokens)
            } else {
                None
            }
        };
        match m {
            Metric::Accuracy => ratio(self.successes, self.known),
            Metric::IfCostPerTask => ratio(self.cost, self.traces),
            Metric::IfsPerTask => ratio(self.ifs, self.traces),
            Metric::IfCostPer1kTokens => dense(self.cost),
            Metric::IfsPer1kTokens => dense(self.ifs),
        }
    }
}

/// One of the five metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Accuracy,
    IfCostPerTask,
    IfsPerTask,
    IfCostPer1kTokens,
    IfsPer1kTokens,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Metric::Accuracy,
        Metric::IfCostPerTask,
        Metric::IfsPerTask,
        Metric::IfCostPer1kTokens,
        Metric::IfsPer1kTokens,
    ];

    /// The column name of tables 6 and 9.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Accuracy => "Accuracy (%)",
            Metric::IfCostPerTask => "IF Cost / Task",
            Metric::IfsPerTask => "# IF / Task",
            Metric::IfCostPer1kTokens => "IF Cost / 1K Tokens",
            Metric::IfsPer1kTokens => "# IF / 1K Tokens",
        }
    }
}

/// The process metrics of `scans`.
pub fn metrics(scans: &[TraceScan]) -> ProcessMetrics {
    let t = Totals::of(scans);
    ProcessMetrics {
        traces: scans.len(),
        accuracy: t.metric(Metric::Accuracy),
        if_cost_per_task: t.metric(Metric::IfCostPerTask),
        ifs_per_task: t.metric(Metric::IfsPerTask),
        trace_tokens: t.tokens_known.then_some(t.tokens as u64),
        if_cost_per_1k_tokens: t.metric(Metric::IfCostPer1kTokens),
        ifs_per_1k_tokens: t.metric(Metric::IfsPer1kTokens),
    }
}

/// One metric of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricTest {
    pub metric: Metric,
    pub base: Option<f64>,
    pub new: Option<f64>,
    /// `new - base` (for accuracy: in percentage points).
    pub change: Option<f64>,
    /// `(new - base) / base` in percent (not for accuracy, whose change is in points).
    pub relative_change: Option<f64>,
    /// Two-sided paired permutation p-value; `None` when the metric is undefined on a side.
    pub p: Option<f64>,
    /// Holm-adjusted over the defined p-values of this comparison.
    pub p_holm: Option<f64>,
}

/// A comparison of two sets of scanned traces paired by task (table 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessComparison {
    /// Tasks present on both sides (the pairing units).
    pub tasks: usize,
    /// Tasks on one side only, left out.
    pub base_only_tasks: usize,
    pub new_only_tasks: usize,
    pub base: ProcessMetrics,
    pub new: ProcessMetrics,
    pub tests: Vec<MetricTest>,
    /// Permutations used: all 2^tasks when `exact`, else the seeded random ones.
    pub permutations: usize,
    pub exact: bool,
    pub seed: u64,
}

/// Holm-Bonferroni adjustment: p_(i) sorted ascending gets max_{j <= i} min(1, (m - j + 1) p_(j)),
/// returned in the input order.
pub fn holm(ps: &[f64]) -> Vec<f64> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]).then(a.cmp(&b)));
    let mut out = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let adj = ((m - rank) as f64 * ps[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

/// Two-sided paired permutation test of `stat(new) - stat(base)` over paired units (swapping
/// the sides of each unit): exact over all 2^n swaps when `2^n <= permutations`, else over
/// `permutations` seeded random swaps. Returns (p, permutations used, exact).
fn permutation_p(
    pairs: &[(Totals, Totals)],
    stat: &dyn Fn(&Totals) -> Option<f64>,
    permutations: usize,
    seed: u64,
) -> Option<(f64, usize, bool)> {
    let sum = |flip: &dyn Fn(usize) -> bool| {
        let mut b = Totals {
            tokens_known: true,
            ..Totals::default()
        };
        let mut n = b;
        for (i, (x, y)) in pairs.iter().enumerate() {
            let (x, y) = if flip(i) { (y, x) } else { (x, y) };
            b = b.add(*x);
            n = n.add(*y);
        }
        Some(stat(&n)? - stat(&b)?)
    };
    let observed = sum(&|_| false)?.abs();
    // Differences equal up to rounding count as "at least as large".
    let tol = 1e-12 * observed.max(1.0);
    let n = pairs.len();
    if n < 63 && (1usize << n) <= permutations.max(1) {
        let total = 1usize << n;
        let mut hits = 0usize;
        for mask in 0..total {
            if sum(&|i| mask >> i & 1 == 1).is_some_and(|d| d.abs() >= observed - tol) {
                hits += 1;
            }
        }
        return Some((hits as f64 / total as f64, total, true));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut hits = 0usize;
    for _ in 0..permutations {
        let flips: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
        if sum(&|i| flips[i]).is_some_and(|d| d.abs() >= observed - tol) {
            hits += 1;
        }
    }
    Some((
        (1 + hits) as f64 / (1 + permutations) as f64,
        permutations,
        false,
    ))
}

/// Compare `new` against `base`, paired by task (module docs).
pub fn compare(
    base: &[TraceScan],
    new: &[TraceScan],
    permutations: usize,
    seed: u64,
) -> ProcessComparison {
    let by_task = |scans: &[TraceScan]| {
        let mut m: BTreeMap<String, Vec<TraceScan>> = BTreeMap::new();
        for s in scans {
            m.entry(s.task.clone()).or_default().push(s.clone());
        }
        m
    };
    let (b, n) = (by_task(base), by_task(new));
    let mut pairs: Vec<(Totals, Totals)> = Vec::new();
    let mut base_paired = Vec::new();
    let mut new_paired = Vec::new();
    for (task, bs) in &b {
        if let Some(ns) = n.get(task) {
            pairs.push((Totals::of(bs), Totals::of(ns)));
            base_paired.extend(bs.iter().cloned());
            new_paired.extend(ns.iter().cloned());
        }
    }
    let tasks = pairs.len();
    let mut used = (0usize, true);
    let mut tests: Vec<MetricTest> = Metric::ALL
        .iter()
        .map(|&m| {
            let bt = Totals::of(&base_paired);
            let nt = Totals::of(&new_paired);
            let (bv, nv) = (bt.metric(m), nt.metric(m));
            let scale = if m == Metric::Accuracy { 100.0 } else { 1.0 };
            let change = bv.zip(nv).map(|(x, y)| (y - x) * scale);
            let relative_change = match (m, bv, nv) {
                (Metric::Accuracy, _, _) => None,
                (_, Some(x), Some(y)) if x != 0.0 => Some((y - x) / x * 100.0),
                _ => None,
            };
            let p = permutation_p(&pairs, &|t: &Totals| t.metric(m), permutations, seed);
            if let Some((_, k, exact)) = p {
                used = (k, exact);
            }
            MetricTest {
                metric: m,
                base: bv.map(|v| v * scale),
                new: nv.map(|v| v * scale),
                change,
                relative_change,
                p: p.map(|x| x.0),
                p_holm: None,
            }
        })
        .collect();
    let defined: Vec<usize> = (0..tests.len()).filter(|&i| tests[i].p.is_some()).collect();
    let adjusted = holm(
        &defined
            .iter()
            .filter_map(|&i| tests[i].p)
            .collect::<Vec<_>>(),
    );
    for (k, &i) in defined.iter().enumerate() {
        tests[i].p_holm = Some(adjusted[k]);
    }
    let mut m_base = metrics(&base_paired);
    let mut m_new = metrics(&new_paired);
    if let Some(a) = m_base.accuracy.as_mut() {
        *a *= 100.0;
    }
    if let Some(a) = m_new.accuracy.as_mut() {
        *a *= 100.0;
    }
    ProcessComparison {
        tasks,
        base_only_tasks: b.keys().filter(|k| !n.contains_key(*k)).count(),
        new_only_tasks: n.keys().filter(|k| !b.contains_key(*k)).count(),
        base: m_base,
        new: m_new,
        tests,
        permutations: used.0,
        exact: used.1,
        seed,
    }
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "n/a".into())
}

/// Markdown for a comparison: one row per metric, base -> new, change, p, Holm-adjusted p
/// (bold below 0.05, as in table 6).
pub fn comparison_markdown(c: &ProcessComparison) -> String {
    let mut s = String::from("# Process metrics: base -> new (MASIF table 6)\n\n");
    s.push_str(&format!(
        "{} tasks on both sides ({} base-only and {} new-only tasks left out); two-sided paired permutation tests, {}; p-values Holm-adjusted over the metrics below.\n\n",
        c.tasks,
        c.base_only_tasks,
        c.new_only_tasks,
        if c.exact {
            format!("exact over all {} swaps", c.permutations)
        } else {
            format!("{} seeded random swaps (seed {})", c.permutations, c.seed)
        }
    ));
    s.push_str("| metric | base -> new | change | p | p (Holm) |\n|---|---|---|---|---|\n");
    for t in &c.tests {
        let change = match (t.metric, t.change, t.relative_change) {
            (Metric::Accuracy, Some(d), _) => format!("{d:+.2} pp"),
            (_, _, Some(r)) => format!("{r:+.2}%"),
            (_, Some(d), None) => format!("{d:+.2}"),
            _ => "n/a".into(),
        };
        let holm = match t.p_holm {
            Some(p) if p < 0.05 => format!("**{p:.4}**"),
            other => num(other, 4),
        };
        s.push_str(&format!(
            "| {} | {} -> {} | {change} | {} | {holm} |\n",
            t.metric.label(),
            num(t.base, 2),
            num(t.new, 2),
            num(t.p, 4)
        ));
    }
    s
}

/// Markdown lines for one set's metrics (a table 9 row).
pub fn metrics_markdown(m: &ProcessMetrics) -> String {
    format!(
        "| traces | Accuracy (%) | IF Cost / Task | # IF / Task | IF Cost / 1K Tokens | # IF / 1K Tokens |\n|---|---|---|---|---|---|\n| {} | {} | {} | {} | {} | {} |\n",
        m.traces,
        num(m.accuracy.map(|a| a * 100.0), 2),
        num(m.if_cost_per_task, 2),
        num(m.ifs_per_task, 2),
        num(m.if_cost_per_1k_tokens, 2),
        num(m.ifs_per_1k_tokens, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::ImplicitFailure;

    fn scan(task: &str, outcome: Outcome, cost: f64, ifs: usize, tokens: u64) -> TraceScan {
        let mut s: TraceScan = serde_json::from_value(serde_json::json!({
            "id": format!("{task}-{cost}"), "task": task, "outcome": outcome, "steps": 4,
            "events": [], "cost": cost, "risk": cost / 4.0, "risk_grouped": cost / 4.0,
            "windows": 1, "abstentions": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0},
            "calls": 0, "seconds": 0.0,
            "trace_tokens": tokens
        }))
        .unwrap();
        let e: ImplicitFailure = serde_json::from_value(serde_json::json!({
            "step": 1, "agent": "A", "error_type": "reasoning_error", "description": "d",
            "evidence": "e", "severity": "low", "confidence": "high",
            "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": true}
        }))
        .unwrap();
        s.events = vec![e; ifs];
        s
    }

    #[test]
    fn metrics_are_means_per_task_and_ratios_of_totals_per_1k_tokens() {
        let scans = vec![
            scan("a", Outcome::Success, 1.0, 1, 500),
            scan("b", Outcome::Failure, 3.0, 2, 1500),
            scan("c", Outcome::Unknown, 2.0, 3, 2000),
        ];
        let m = metrics(&scans);
        assert_eq!(m.accuracy, Some(0.5)); // 1 success of 2 known outcomes
        assert_eq!(m.if_cost_per_task, Some(2.0)); // 6 / 3
        assert_eq!(m.ifs_per_task, Some(2.0)); // 6 / 3
        assert_eq!(m.trace_tokens, Some(4000));
        assert_eq!(m.if_cost_per_1k_tokens, Some(1.5)); // 1000 * 6 / 4000
        assert_eq!(m.ifs_per_1k_tokens, Some(1.5));
        // A scan without token counts (an older scan file): no densities.
        let mut old = scans.clone();
        old[0].trace_tokens = None;
        let m = metrics(&old);
        assert_eq!((m.trace_tokens, m.if_cost_per_1k_tokens), (None, None));
        assert_eq!(m.if_cost_per_task, Some(2.0));
    }

    #[test]
    fn holm_adjusts_sorted_p_values_and_keeps_them_monotone() {
        // Sorted: 0.01 * 4 = 0.04, 0.02 * 3 = 0.06, 0.03 * 2 = 0.06, 0.5 * 1 = 0.5.
        let adj = holm(&[0.03, 0.01, 0.5, 0.02]);
        let want = [0.06, 0.04, 0.5, 0.06];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
        // Monotone: sorted 0.04 * 2 = 0.08, then 0.05 * 1 = 0.05 is raised to 0.08.
        let adj = holm(&[0.05, 0.04]);
        assert!(
            (adj[0] - 0.08).abs() < 1e-12 && (adj[1] - 0.08).abs() < 1e-12,
            "{adj:?}"
        );
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
    }

    #[test]
    fn exact_paired_permutation_test_by_hand() {
        // Three tasks, cost base 1, 2, 3 and new 0, 1, 1: observed mean difference -4/3.
        // Swapping a task flips its difference (-1, -1, -2). Over the 8 swaps the total
        // difference is +-1 +-1 +-2: |total| >= 4 only for (-,-,-) and (+,+,+): p = 2/8.
        let base = vec![
            scan("t1", Outcome::Success, 1.0, 1, 1000),
            scan("t2", Outcome::Success, 2.0, 2, 1000),
            scan("t3", Outcome::Failure, 3.0, 3, 1000),
        ];
        let new = vec![
            scan("t1", Outcome::Success, 0.0, 0, 1000),
            scan("t2", Outcome::Success, 1.0, 1, 1000),
            scan("t3", Outcome::Success, 1.0, 1, 1000),
            scan("t4", Outcome::Success, 9.0, 9, 1000),
        ];
        let c = compare(&base, &new, 10_000, 0);
        assert_eq!((c.tasks, c.base_only_tasks, c.new_only_tasks), (3, 0, 1));
        assert!(c.exact && c.permutations == 8);
        let cost = &c.tests[1];
        assert_eq!(cost.metric, Metric::IfCostPerTask);
        assert_eq!((cost.base, cost.new), (Some(2.0), Some(2.0 / 3.0)));
        assert!((cost.relative_change.unwrap() + 66.666_666).abs() < 1e-4);
        assert_eq!(cost.p, Some(0.25));
        // Accuracy 66.67% -> 100%: only t3 differs (+1), so every swap pattern with t3
        // swapped or not gives |d| = 1/3: p = 1.
        let acc = &c.tests[0];
        assert!((acc.change.unwrap() - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(acc.p, Some(1.0));
        // Densities: same tokens on every trace, so they follow the per-task metrics: cost
        // 6/3000 -> 2/3000 per token, p = 2/8 as above.
        let dens = &c.tests[3];
        assert_eq!(dens.p, Some(0.25));
        assert!((dens.base.unwrap() - 2.0).abs() < 1e-12);
        // Holm over the five p-values [1, .25, .25, .25, .25]: the smallest, .25 * 5 = 1.25,
        // is capped at 1, and the rest cannot fall below it: 1 for all.
        assert!(
            c.tests.iter().all(|t| t.p_holm == Some(1.0)),
            "{:?}",
            c.tests
        );
        let md = comparison_markdown(&c);
        assert!(
            md.contains("| IF Cost / Task | 2.00 -> 0.67 | -66.67% | 0.2500 | 1.0000 |"),
            "{md}"
        );
    }

    #[test]
    fn random_permutations_are_seeded_and_significant_when_every_task_moves_one_way() {
        // 20 tasks: 2^20 swaps exceed 1,000 permutations, so the test samples (seeded).
        let base: Vec<TraceScan> = (0..20)
            .map(|i| {
                scan(
                    &format!("t{i}"),
                    Outcome::Success,
                    3.0 + i as f64 * 0.1,
                    3,
                    1000,
                )
            })
            .collect();
        let new: Vec<TraceScan> = (0..20)
            .map(|i| scan(&format!("t{i}"), Outcome::Success, 1.0, 1, 1000))
            .collect();
        let a = compare(&base, &new, 1000, 7);
        let b = compare(&base, &new, 1000, 7);
        assert_eq!(a, b, "deterministic for a seed");
        assert!(!a.exact && a.permutations == 1000);
        let p = a.tests[1].p.unwrap();
        // Only the two all-same-direction swaps reach |d|: p = (1 + hits) / 1001, hits ~ 0.
        assert!(p < 0.01, "{p}");
        assert!(a.tests[1].p_holm.unwrap() < 0.05);
        // Accuracy does not move: p = 1 (every swap gives d = 0 >= 0).
        assert_eq!(a.tests[0].p, Some(1.0));
    }
}
