//! Replay statistics (MASIF section 2.4): SPR, RR and delta-RR per configuration from matched
//! no-op and fix replay outcomes, averaging over IF positions within a trace and then over
//! traces, with paired task-cluster bootstrap intervals.

use maslens_eval::stats::{mean, paired_cluster_bootstrap, Interval, PairedUnit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One replay outcome (one JSONL line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayOutcome {
    /// Configuration (MAS / benchmark); default "all".
    #[serde(default = "default_config")]
    pub config: String,
    /// Task id (bootstrap cluster).
    pub task: String,
    /// Trace id.
    pub trace: String,
    /// IF step replayed from (positions within a trace are averaged).
    #[serde(default)]
    pub if_step: Option<usize>,
    /// Outcome of the original trace.
    pub original_success: bool,
    /// `noop` or `fix`.
    pub intervention: String,
    /// Outcome of the replay.
    pub success: bool,
}

fn default_config() -> String {
    "all".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigStats {
    pub config: String,
    /// Traces with both no-op and fix outcomes.
    pub traces: usize,
    pub unique_tasks: usize,
    pub if_positions: usize,
    pub success_traces: usize,
    pub failure_traces: usize,
    pub spr_noop: Option<f64>,
    pub spr_fix: Option<f64>,
    pub rr_noop: Option<f64>,
    pub rr_fix: Option<f64>,
    pub delta_rr: Option<Interval>,
    pub delta_spr: Option<Interval>,
    /// Traces dropped for lacking one of the two interventions.
    pub unmatched_traces: Vec<String>,
}

/// Per-trace rows: (task, original_success, noop outcomes, fix outcomes, IF positions).
type TraceRows = (
    String,
    bool,
    Vec<f64>,
    Vec<f64>,
    std::collections::BTreeSet<Option<usize>>,
);

/// Per-trace means over IF positions: (task, original_success, noop rate, fix rate, positions).
type TraceRates = (String, bool, f64, f64, usize);

/// Compute the statistics per configuration (sorted by name).
pub fn replay_stats(
    rows: &[ReplayOutcome],
    resamples: usize,
    seed: u64,
) -> Result<Vec<ConfigStats>, String> {
    for (i, r) in rows.iter().enumerate() {
        if r.intervention != "noop" && r.intervention != "fix" {
            return Err(format!(
                "record {}: field intervention: {:?} is not \"noop\" or \"fix\"",
                i + 1,
                r.intervention
            ));
        }
    }
    let mut by_config: BTreeMap<&str, Vec<&ReplayOutcome>> = BTreeMap::new();
    for r in rows {
        by_config.entry(r.config.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for (config, rows) in by_config {
        // trace -> (task, original, noop outcomes, fix outcomes, positions)
        let mut traces: BTreeMap<&str, TraceRows> = BTreeMap::new();
        for r in rows {
            let e = traces.entry(r.trace.as_str()).or_insert_with(|| {
                (
                    r.task.clone(),
                    r.original_success,
                    vec![],
                    vec![],
                    Default::default(),
                )
            });
            let v = if r.success { 1.0 } else { 0.0 };
            if r.intervention == "noop" {
                e.2.push(v);
            } else {
                e.3.push(v);
            }
            e.4.insert(r.if_step);
        }
        let mut unmatched = Vec::new();
        let mut rates: Vec<TraceRates> = Vec::new();
        for (id, (task, orig, noop, fix, pos)) in traces {
            match (mean(&noop), mean(&fix)) {
                (Some(a), Some(b)) => rates.push((task, orig, a, b, pos.len())),
                _ => unmatched.push(id.to_string()),
            }
        }
        let side = |orig: bool| -> Vec<PairedUnit> {
            rates
                .iter()
                .filter(|r| r.1 == orig)
                .map(|r| PairedUnit {
                    cluster: r.0.clone(),
                    a: r.2,
                    b: r.3,
                })
                .collect()
        };
        let succ = side(true);
        let fail = side(false);
        let m = |u: &[PairedUnit], f: fn(&PairedUnit) -> f64| {
            mean(&u.iter().map(f).collect::<Vec<_>>())
        };
        let tasks: std::collections::BTreeSet<&str> = rates.iter().map(|r| r.0.as_str()).collect();
        out.push(ConfigStats {
            config: config.to_string(),
            traces: rates.len(),
            unique_tasks: tasks.len(),
            if_positions: rates.iter().map(|r| r.4).sum(),
            success_traces: succ.len(),
            failure_traces: fail.len(),
            spr_noop: m(&succ, |u| u.a),
            spr_fix: m(&succ, |u| u.b),
            rr_noop: m(&fail, |u| u.a),
            rr_fix: m(&fail, |u| u.b),
            delta_rr: paired_cluster_bootstrap(&fail, resamples, 0.95, seed),
            delta_spr: paired_cluster_bootstrap(&succ, resamples, 0.95, seed),
            unmatched_traces: unmatched,
        });
    }
    Ok(out)
}

/// Markdown table in the shape of MASIF table 4.
pub fn markdown(stats: &[ConfigStats]) -> String {
    let p = |x: Option<f64>| {
        x.map(|v| format!("{:.1}", v * 100.0))
            .unwrap_or_else(|| "n/a".into())
    };
    let mut s = String::from("| config | traces | unique tasks | IF positions | SPR (%) no-op -> fix | RR (%) no-op -> fix | delta RR (pp) [95% CI] |\n|---|---:|---:|---:|---|---|---|\n");
    for c in stats {
        let d = c
            .delta_rr
            .map(|i| {
                format!(
                    "{:+.1} [{:.1}, {:.1}]",
                    i.estimate * 100.0,
                    i.lo * 100.0,
                    i.hi * 100.0
                )
            })
            .unwrap_or_else(|| "n/a".into());
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} -> {} | {} -> {} | {} |\n",
            c.config,
            c.traces,
            c.unique_tasks,
            c.if_positions,
            p(c.spr_noop),
            p(c.spr_fix),
            p(c.rr_noop),
            p(c.rr_fix),
            d
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trace: &str, task: &str, step: usize, orig: bool, iv: &str, ok: bool) -> ReplayOutcome {
        ReplayOutcome {
            config: "c".into(),
            task: task.into(),
            trace: trace.into(),
            if_step: Some(step),
            original_success: orig,
            intervention: iv.into(),
            success: ok,
        }
    }

    #[test]
    fn averages_positions_then_traces() {
        let rows = vec![
            // failed trace f1 with two IF positions: noop 0/2, fix 1/2 -> 0, 0.5
            row("f1", "t1", 3, false, "noop", false),
            row("f1", "t1", 3, false, "fix", true),
            row("f1", "t1", 7, false, "noop", false),
            row("f1", "t1", 7, false, "fix", false),
            // failed trace f2, one position: noop 0, fix 1
            row("f2", "t2", 2, false, "noop", false),
            row("f2", "t2", 2, false, "fix", true),
            // successful trace s1: noop 1, fix 0
            row("s1", "t3", 1, true, "noop", true),
            row("s1", "t3", 1, true, "fix", false),
            // unmatched
            row("u1", "t4", 1, false, "fix", true),
        ];
        let st = replay_stats(&rows, 1000, 3).unwrap();
        assert_eq!(st.len(), 1);
        let c = &st[0];
        assert_eq!(
            (c.traces, c.failure_traces, c.success_traces, c.if_positions),
            (3, 2, 1, 4)
        );
        assert_eq!(c.rr_noop, Some(0.0));
        assert_eq!(c.rr_fix, Some(0.75)); // mean(0.5, 1.0)
        assert_eq!(c.spr_noop, Some(1.0));
        assert_eq!(c.spr_fix, Some(0.0));
        let d = c.delta_rr.unwrap();
        assert!((d.estimate - 0.75).abs() < 1e-12);
        assert!(d.lo >= 0.5 - 1e-12 && d.hi <= 1.0 + 1e-12);
        assert_eq!(c.unmatched_traces, vec!["u1"]);
        assert!(markdown(&st).contains("| c | 3 | 3 | 4 | 100.0 -> 0.0 | 0.0 -> 75.0 | +75.0 ["));
        let mut bad = rows.clone();
        bad[0].intervention = "nop".into();
        assert!(replay_stats(&bad, 10, 0).unwrap_err().contains("record 1"));
    }
}
