//! Corpus statistics over a stream of traces (`maslens stats`). Memory is bounded by the number of
//! distinct agent names and step counts, not by the corpus size.
//!
//! [`CorpusStats`] serializes to the `maslens stats --json` shape (keys in sorted order at every
//! level): `traces`, `skipped`, `warnings`, `errors`, `steps` {`min`,`median`,`mean`,`max`,`total`},
//! `outcomes` {success, failure, unknown}, `formats`, `agents` {`distinct`, `by_kind`,
//! `traces_per_agent`, `steps_per_agent`}, `labelled_traces`, `labelled_agents` {agent: count},
//! `labelled_kinds`, `label_position` {`buckets` (relative position of the labelled step,
//! position/(n-1), in fifths), `mean_relative`, `first_step`, `last_step`},
//! `label_speaker_mismatches`, `faulty_agents`, `error_modes`.

use crate::Trace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Names of the five relative-position buckets.
pub const BUCKETS: [&str; 5] = ["0.0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1.0"];

/// Step counts per trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    pub max: Option<usize>,
    pub mean: Option<f64>,
    pub median: Option<f64>,
    pub min: Option<usize>,
    pub total: u64,
}

/// Traces per outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcomes {
    pub failure: u64,
    pub success: u64,
    pub unknown: u64,
}

/// Agents over the corpus (by name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Distinct agent names by kind (the kind of the first trace the name acts in).
    pub by_kind: BTreeMap<String, u64>,
    pub distinct: usize,
    pub steps_per_agent: BTreeMap<String, u64>,
    pub traces_per_agent: BTreeMap<String, u64>,
}

/// Where decisive labels fall in their traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelPosition {
    /// [`BUCKETS`] name -> labels whose relative position falls there.
    pub buckets: BTreeMap<String, u64>,
    pub first_step: u64,
    pub last_step: u64,
    pub mean_relative: Option<f64>,
}

/// The statistics of a corpus (fields in the sorted order of the JSON keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusStats {
    pub agents: AgentStats,
    pub error_modes: BTreeMap<String, u64>,
    pub errors: u64,
    pub faulty_agents: BTreeMap<String, u64>,
    pub formats: BTreeMap<String, u64>,
    pub label_position: LabelPosition,
    /// Decisive labels whose agent is not the one acting at the labelled step.
    pub label_speaker_mismatches: u64,
    pub labelled_agents: BTreeMap<String, u64>,
    pub labelled_kinds: BTreeMap<String, u64>,
    pub labelled_traces: u64,
    pub outcomes: Outcomes,
    pub skipped: u64,
    pub steps: StepStats,
    pub traces: u64,
    pub warnings: u64,
}

/// The running accumulator: [`add`](Self::add) each trace, then [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct StatsBuilder {
    traces: u64,
    step_hist: BTreeMap<usize, u64>,
    step_total: u64,
    outcomes: BTreeMap<&'static str, u64>,
    formats: BTreeMap<String, u64>,
    traces_per_agent: BTreeMap<String, u64>,
    steps_per_agent: BTreeMap<String, u64>,
    agent_kind: BTreeMap<String, &'static str>,
    labelled_traces: u64,
    labelled_agents: BTreeMap<String, u64>,
    labelled_kinds: BTreeMap<String, u64>,
    label_buckets: [u64; 5],
    label_rel_sum: f64,
    label_in_range: u64,
    label_first: u64,
    label_last: u64,
    label_mismatch: u64,
    faulty_agents: BTreeMap<String, u64>,
    error_modes: BTreeMap<String, u64>,
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(c) => *c += 1,
        None => {
            map.insert(key.to_string(), 1);
        }
    }
}

impl StatsBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one trace.
    pub fn add(&mut self, t: &Trace) {
        self.traces += 1;
        let n = t.steps.len();
        *self.step_hist.entry(n).or_insert(0) += 1;
        self.step_total += n as u64;
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
        if let Some((Some(agent), Some(step))) = t.gold().map(|g| (g.agent, g.step)) {
            let agent = agent.as_str();
            self.labelled_traces += 1;
            bump(&mut self.labelled_agents, agent);
            bump(&mut self.labelled_kinds, t.agent_kind(agent).as_str());
            if let Some(pos) = t.position_of(step) {
                let rel = if n > 1 {
                    pos as f64 / (n - 1) as f64
                } else {
                    0.0
                };
                self.label_buckets[((rel * 5.0) as usize).min(4)] += 1;
                self.label_rel_sum += rel;
                self.label_in_range += 1;
                self.label_first += u64::from(pos == 0);
                self.label_last += u64::from(pos + 1 == n);
                self.label_mismatch += u64::from(!t.acts_at(agent, step));
            }
        }
        // Faulty-agent labels are counted even beside a decisive label.
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

    /// The statistics, with the reader's counts of skipped records and diagnostics.
    pub fn finish(self, skipped: u64, warnings: u64, errors: u64) -> CorpusStats {
        let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
        for k in self.agent_kind.values() {
            bump(&mut by_kind, k);
        }
        let outcome = |k: &str| self.outcomes.get(k).copied().unwrap_or(0);
        CorpusStats {
            traces: self.traces,
            skipped,
            warnings,
            errors,
            steps: StepStats {
                min: self.step_hist.keys().next().copied(),
                median: self.median_steps(),
                mean: (self.traces > 0).then(|| self.step_total as f64 / self.traces as f64),
                max: self.step_hist.keys().next_back().copied(),
                total: self.step_total,
            },
            outcomes: Outcomes {
                success: outcome("success"),
                failure: outcome("failure"),
                unknown: outcome("unknown"),
            },
            formats: self.formats,
            agents: AgentStats {
                distinct: self.traces_per_agent.len(),
                by_kind,
                traces_per_agent: self.traces_per_agent,
                steps_per_agent: self.steps_per_agent,
            },
            labelled_traces: self.labelled_traces,
            labelled_agents: self.labelled_agents,
            labelled_kinds: self.labelled_kinds,
            label_position: LabelPosition {
                buckets: BUCKETS
                    .iter()
                    .map(|b| b.to_string())
                    .zip(self.label_buckets)
                    .collect(),
                mean_relative: (self.label_in_range > 0)
                    .then(|| self.label_rel_sum / self.label_in_range as f64),
                first_step: self.label_first,
                last_step: self.label_last,
            },
            label_speaker_mismatches: self.label_mismatch,
            faulty_agents: self.faulty_agents,
            error_modes: self.error_modes,
        }
    }
}

/// The `k` largest counts of a map, ties by name.
pub fn top(map: &BTreeMap<String, u64>, k: usize) -> Vec<(&str, u64)> {
    let mut v: Vec<(&str, u64)> = map.iter().map(|(a, &c)| (a.as_str(), c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.truncate(k);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentKind, FaultyAgent};
    use serde_json::json;

    fn trace(n: usize, label: Option<usize>) -> Trace {
        let mut b = crate::TraceBuilder::new(format!("t{n}")).agent("a", AgentKind::Worker);
        for _ in 0..n {
            b = b.step("a", "x");
        }
        if let Some(step) = label {
            b = b.decisive("a", step);
        }
        b.build()
    }

    #[test]
    fn median_mean_and_positions() {
        let mut s = StatsBuilder::new();
        for (n, l) in [(2, Some(0)), (4, Some(3)), (10, Some(5)), (7, None)] {
            s.add(&trace(n, l));
        }
        let v = serde_json::to_value(s.finish(1, 0, 0)).unwrap();
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
        assert_eq!(v["label_speaker_mismatches"], json!(0));
        let mut s = StatsBuilder::new();
        for n in [2, 4, 10, 7, 3] {
            s.add(&trace(n, None));
        }
        assert_eq!(s.median_steps(), Some(4.0));
    }

    #[test]
    fn json_keys_are_the_documented_ones_in_sorted_order() {
        let mut t = trace(3, Some(1));
        t.steps[1].agent = "b".into();
        t.labels.faulty_agents.push(FaultyAgent {
            agent: "a".into(),
            error_mode: None,
            strategy: None,
            description: None,
        });
        let mut s = StatsBuilder::new();
        s.add(&t);
        let stats = s.finish(0, 2, 3);
        assert_eq!(stats.label_speaker_mismatches, 1);
        assert_eq!(stats.error_modes["(none)"], 1);
        let text = serde_json::to_string(&stats).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        // serde_json's map sorts keys: the struct serializes in the same order.
        assert_eq!(text, serde_json::to_string(&value).unwrap());
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 15);
        assert_eq!(top(&stats.agents.steps_per_agent, 1), vec![("a", 2)]);
    }
}
