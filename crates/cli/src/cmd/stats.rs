//! `maslens stats`: corpus statistics. Streams the corpus (memory bounded by the number of
//! distinct agent names and step counts, not by the corpus size).
//!
//! `--json` keys: `traces`, `skipped`, `warnings`, `errors`, `steps` {`min`,`median`,`mean`,
//! `max`,`total`}, `outcomes` {success, failure, unknown}, `formats`, `agents` {`distinct`,
//! `by_kind`, `traces_per_agent`, `steps_per_agent`}, `labelled_traces`, `labelled_agents`
//! {agent: count}, `labelled_kinds`, `label_position` {`buckets` (relative position step/(n-1) in
//! fifths), `mean_relative`, `first_step`, `last_step`}, `label_speaker_mismatches`,
//! `faulty_agents`, `error_modes`.

use super::import::{for_each_trace, Inputs};
use super::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use maslens_trace::Trace;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// How many agents to list in the text output (all of them are in `--json`).
    #[arg(long, default_value_t = 15)]
    pub top: usize,
}

/// Running corpus statistics.
#[derive(Debug, Default)]
pub struct Stats {
    pub traces: u64,
    pub step_hist: BTreeMap<usize, u64>,
    pub step_total: u128,
    pub outcomes: BTreeMap<&'static str, u64>,
    pub formats: BTreeMap<String, u64>,
    pub traces_per_agent: BTreeMap<String, u64>,
    pub steps_per_agent: BTreeMap<String, u64>,
    pub agent_kind: BTreeMap<String, &'static str>,
    pub labelled_traces: u64,
    pub labelled_agents: BTreeMap<String, u64>,
    pub labelled_kinds: BTreeMap<&'static str, u64>,
    pub label_buckets: [u64; 5],
    pub label_rel_sum: f64,
    pub label_in_range: u64,
    pub label_first: u64,
    pub label_last: u64,
    pub label_mismatch: u64,
    pub faulty_agents: BTreeMap<String, u64>,
    pub error_modes: BTreeMap<String, u64>,
}

impl Stats {
    pub fn add(&mut self, t: &Trace) {
        self.traces += 1;
        let n = t.steps.len();
        *self.step_hist.entry(n).or_insert(0) += 1;
        self.step_total += n as u128;
        *self.outcomes.entry(t.outcome.as_str()).or_insert(0) += 1;
        let fmt = if t.source.format.is_empty() {
            "native"
        } else {
            t.source.format.as_str()
        };
        bump(&mut self.formats, fmt);
        let mut acting: HashSet<&str> = HashSet::new();
        for s in &t.steps {
            bump(&mut self.steps_per_agent, &s.agent);
            acting.insert(s.agent.as_str());
        }
        for a in acting {
            bump(&mut self.traces_per_agent, a);
            if !self.agent_kind.contains_key(a) {
                self.agent_kind
                    .insert(a.to_string(), t.agent_kind(a).as_str());
            }
        }
        if let Some(d) = &t.labels.decisive {
            self.labelled_traces += 1;
            bump(&mut self.labelled_agents, &d.agent);
            *self
                .labelled_kinds
                .entry(t.agent_kind(&d.agent).as_str())
                .or_insert(0) += 1;
            if d.step < n {
                let rel = if n > 1 {
                    d.step as f64 / (n - 1) as f64
                } else {
                    0.0
                };
                let b = ((rel * 5.0) as usize).min(4);
                self.label_buckets[b] += 1;
                self.label_rel_sum += rel;
                self.label_in_range += 1;
                if d.step == 0 {
                    self.label_first += 1;
                }
                if d.step + 1 == n {
                    self.label_last += 1;
                }
                if t.steps[d.step].agent != d.agent {
                    self.label_mismatch += 1;
                }
            }
        }
        for f in &t.labels.faulty_agents {
            bump(&mut self.faulty_agents, &f.agent);
            bump(
                &mut self.error_modes,
                f.error_mode.as_deref().unwrap_or("(none)"),
            );
        }
    }

    /// Median of the step counts (mean of the two middle values for an even count).
    pub fn median_steps(&self) -> Option<f64> {
        if self.traces == 0 {
            return None;
        }
        let nth = |k: u64| -> usize {
            let mut seen = 0u64;
            for (&v, &c) in &self.step_hist {
                seen += c;
                if seen > k {
                    return v;
                }
            }
            0
        };
        let n = self.traces;
        Some(if n % 2 == 1 {
            nth(n / 2) as f64
        } else {
            (nth(n / 2 - 1) + nth(n / 2)) as f64 / 2.0
        })
    }

    pub fn to_json(&self, skipped: u64, warnings: u64, errors: u64) -> Value {
        let mean = if self.traces > 0 {
            Some(self.step_total as f64 / self.traces as f64)
        } else {
            None
        };
        let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
        for k in self.agent_kind.values() {
            *by_kind.entry(k).or_insert(0) += 1;
        }
        let bucket_names = ["0.0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1.0"];
        let buckets: BTreeMap<&str, u64> = bucket_names
            .iter()
            .copied()
            .zip(self.label_buckets.iter().copied())
            .collect();
        json!({
            "traces": self.traces,
            "skipped": skipped,
            "warnings": warnings,
            "errors": errors,
            "steps": {
                "min": self.step_hist.keys().next(),
                "median": self.median_steps(),
                "mean": mean,
                "max": self.step_hist.keys().next_back(),
                "total": self.step_total as u64,
            },
            "outcomes": {
                "success": self.outcomes.get("success").copied().unwrap_or(0),
                "failure": self.outcomes.get("failure").copied().unwrap_or(0),
                "unknown": self.outcomes.get("unknown").copied().unwrap_or(0),
            },
            "formats": self.formats,
            "agents": {
                "distinct": self.traces_per_agent.len(),
                "by_kind": by_kind,
                "traces_per_agent": self.traces_per_agent,
                "steps_per_agent": self.steps_per_agent,
            },
            "labelled_traces": self.labelled_traces,
            "labelled_agents": self.labelled_agents,
            "labelled_kinds": self.labelled_kinds,
            "label_position": {
                "buckets": buckets,
                "mean_relative": if self.label_in_range > 0 {
                    Some(self.label_rel_sum / self.label_in_range as f64)
                } else {
                    None
                },
                "first_step": self.label_first,
                "last_step": self.label_last,
            },
            "label_speaker_mismatches": self.label_mismatch,
            "faulty_agents": self.faulty_agents,
            "error_modes": self.error_modes,
        })
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(c) => *c += 1,
        None => {
            map.insert(key.to_string(), 1);
        }
    }
}

fn top(map: &BTreeMap<String, u64>, k: usize) -> Vec<(&String, u64)> {
    let mut v: Vec<(&String, u64)> = map.iter().map(|(a, &c)| (a, c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.truncate(k);
    v
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut stats = Stats::default();
    let counts = for_each_trace(
        &args.input,
        global,
        "traces read",
        |imp| {
            stats.add(&imp.trace);
            Ok(())
        },
        |_| {},
    )?;
    let v = stats.to_json(counts.skipped, counts.warnings, counts.errors);
    if global.json {
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_text(&stats, &v, args.top, counts.skipped);
    }
    Ok(ExitCode::from(if counts.skipped > 0 {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }))
}

fn fmt_num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 => format!("{f:.0}"),
        Some(f) => format!("{f:.2}"),
        None => "-".into(),
    }
}

fn print_text(stats: &Stats, v: &Value, k: usize, skipped: u64) {
    crate::outln!(
        "traces:    {} ({} unreadable records skipped)",
        stats.traces,
        skipped
    );
    let s = &v["steps"];
    crate::outln!(
        "steps:     min {}  median {}  mean {}  max {}  (total {})",
        fmt_num(&s["min"]),
        fmt_num(&s["median"]),
        fmt_num(&s["mean"]),
        fmt_num(&s["max"]),
        fmt_num(&s["total"])
    );
    let o = &v["outcomes"];
    crate::outln!(
        "outcomes:  {} success, {} failure, {} unknown",
        o["success"],
        o["failure"],
        o["unknown"]
    );
    let kinds: Vec<String> = v["agents"]["by_kind"]
        .as_object()
        .map(|m| m.iter().map(|(k, c)| format!("{c} {k}")).collect())
        .unwrap_or_default();
    crate::outln!(
        "agents:    {} distinct ({})",
        stats.traces_per_agent.len(),
        kinds.join(", ")
    );
    for (a, c) in top(&stats.traces_per_agent, k) {
        crate::outln!(
            "  {a:<40} in {c:>5} traces, {:>6} steps",
            stats.steps_per_agent.get(a).copied().unwrap_or(0)
        );
    }
    if stats.labelled_traces > 0 {
        crate::outln!("decisive labels: {} traces", stats.labelled_traces);
        let kinds: Vec<String> = stats
            .labelled_kinds
            .iter()
            .map(|(k, c)| format!("{c} {k}"))
            .collect();
        crate::outln!("  by agent kind: {}", kinds.join(", "));
        for (a, c) in top(&stats.labelled_agents, k) {
            crate::outln!("  {a:<40} {c:>5}");
        }
        let lp = &v["label_position"];
        let buckets: Vec<String> = lp["buckets"]
            .as_object()
            .map(|m| m.iter().map(|(k, c)| format!("{k}: {c}")).collect())
            .unwrap_or_default();
        crate::outln!(
            "  relative position (step/(n-1)): {}; mean {}; first step {}, last step {}",
            buckets.join(", "),
            fmt_num(&lp["mean_relative"]),
            lp["first_step"],
            lp["last_step"]
        );
        crate::outln!(
            "  label agent is not the speaker at the label step: {}",
            stats.label_mismatch
        );
    }
    if !stats.faulty_agents.is_empty() {
        crate::outln!("faulty-agent labels:");
        for (a, c) in top(&stats.faulty_agents, k) {
            crate::outln!("  {a:<40} {c:>5}");
        }
        let modes: Vec<String> = stats
            .error_modes
            .iter()
            .map(|(m, c)| format!("{m} {c}"))
            .collect();
        crate::outln!("  error modes: {}", modes.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::{DecisiveLabel, Step};

    fn trace(n: usize, label: Option<usize>) -> Trace {
        let mut t = Trace::new(format!("t{n}"));
        t.ensure_agent("a", maslens_trace::AgentKind::Worker);
        for i in 0..n {
            t.steps.push(Step {
                index: i,
                agent: "a".into(),
                content: "x".into(),
                ..Step::default()
            });
        }
        t.labels.decisive = label.map(|step| DecisiveLabel {
            agent: "a".into(),
            step,
            reason: None,
        });
        t
    }

    #[test]
    fn median_mean_and_positions() {
        let mut s = Stats::default();
        for (n, l) in [(2, Some(0)), (4, Some(3)), (10, Some(5)), (7, None)] {
            s.add(&trace(n, l));
        }
        let v = s.to_json(1, 0, 0);
        assert_eq!(v["steps"]["median"], json!(5.5));
        assert_eq!(v["steps"]["mean"], json!(23.0 / 4.0));
        assert_eq!(v["steps"]["min"], json!(2));
        assert_eq!(v["steps"]["max"], json!(10));
        assert_eq!(v["skipped"], json!(1));
        assert_eq!(v["labelled_agents"]["a"], json!(3));
        // 0/1 = 0.0, 3/3 = 1.0, 5/9 = 0.56
        assert_eq!(v["label_position"]["buckets"]["0.0-0.2"], json!(1));
        assert_eq!(v["label_position"]["buckets"]["0.4-0.6"], json!(1));
        assert_eq!(v["label_position"]["buckets"]["0.8-1.0"], json!(1));
        assert_eq!(v["label_position"]["first_step"], json!(1));
        assert_eq!(v["label_position"]["last_step"], json!(1));
        s.add(&trace(3, None));
        assert_eq!(s.median_steps(), Some(4.0));
    }
}
