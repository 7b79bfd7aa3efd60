//! Structural and temporal credit from localized failures. Each verdict spreads one unit of blame
//! over its primary (agent, step) and its ranked alternatives in proportion to their
//! probabilities (all on the primary when it has none): an agent's **expected blame** is its sum
//! over the failures, and its credit is 1 - expected blame / located failures (1.0: never
//! named). The temporal view counts the blame per turn of the agent (its 1st, 2nd, ... step).

use std::collections::{BTreeMap, BTreeSet};

use maslens_trace::{Trace, Verdict};
use serde::{Deserialize, Serialize};

/// What a located failure says about its agent: the rewrite's proxy gradient.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub trace: String,
    pub task: String,
    pub step: usize,
    /// The verdict's share of blame on this (agent, step): 1.0 for a primary answer without
    /// alternatives.
    pub share: f64,
    /// The verdict's primary answer (else one of its alternatives).
    pub primary: bool,
    /// The agent's turn at the step (1 = its first step in the run).
    pub turn: usize,
    /// The start of the step's text.
    pub excerpt: String,
    pub reason: String,
}

/// One prompted agent's credit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCredit {
    pub agent: String,
    /// Failed runs whose primary answer is this agent.
    pub blamed: usize,
    /// Expected blame: the sum of the verdicts' shares on this agent.
    pub mass: f64,
    /// 1 - mass / located failures (1.0 when no failure was located).
    pub credit: f64,
    /// Blame per turn of this agent: (turn, failures).
    pub turns: Vec<TurnBlame>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnBlame {
    pub turn: usize,
    /// Expected blame at this turn.
    pub mass: f64,
}

/// The credit of every prompted agent, weakest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blame {
    pub failures: usize,
    /// Failures with a location.
    pub located: usize,
    /// Located at an agent without a prompt the loop can change (a tool, the user, ...).
    pub unprompted: BTreeMap<String, usize>,
    /// Every prompted agent, lowest credit first (ties by name).
    pub agents: Vec<AgentCredit>,
    /// Located failures per prompted agent (what [`super::rewrite`] is given).
    pub evidence: BTreeMap<String, Vec<Evidence>>,
}

impl Blame {
    /// The `k` agents to rewrite: the lowest credit first, only agents with some blame, none of
    /// `exclude` (the loop's agents whose rewrite was not kept).
    pub fn weakest(&self, k: usize, exclude: &BTreeSet<String>) -> Vec<String> {
        self.agents
            .iter()
            .filter(|a| a.mass > 0.0 && !exclude.contains(&a.agent))
            .take(k)
            .map(|a| a.agent.clone())
            .collect()
    }
}

/// Credit of `agents` (the prompted ones) from failed runs and their verdicts.
pub fn blame(failed: &[(&Trace, &Verdict)], agents: &[String]) -> Blame {
    let mut evidence: BTreeMap<String, Vec<Evidence>> = BTreeMap::new();
    let mut unprompted: BTreeMap<String, usize> = BTreeMap::new();
    let mut located = 0;
    for (trace, verdict) in failed {
        let (Some(agent), Some(_)) = (&verdict.agent, verdict.step) else {
            continue;
        };
        located += 1;
        if !agents.contains(agent) {
            *unprompted.entry(agent.clone()).or_default() += 1;
        }
        for (pick, share, primary) in shares(verdict) {
            if agents.contains(&pick.0) {
                let e = evidence_of(trace, verdict, &pick.0, pick.1, share, primary);
                evidence.entry(pick.0).or_default().push(e);
            }
        }
    }
    let mut credits: Vec<AgentCredit> = agents
        .iter()
        .map(|a| credit_of(a, evidence.get(a).map_or(&[][..], Vec::as_slice), located))
        .collect();
    credits.sort_by(|a, b| {
        a.credit
            .total_cmp(&b.credit)
            .then_with(|| a.agent.cmp(&b.agent))
    });
    for list in evidence.values_mut() {
        // The strongest evidence first: primary answers, then by share.
        list.sort_by(|a, b| b.primary.cmp(&a.primary).then(b.share.total_cmp(&a.share)));
    }
    Blame {
        failures: failed.len(),
        located,
        unprompted,
        agents: credits,
        evidence,
    }
}

/// ((agent, step), share, primary) of a verdict's primary answer and alternatives, shares
/// summing to 1 (all on the primary when the probabilities are missing).
fn shares(v: &Verdict) -> Vec<((String, usize), f64, bool)> {
    let (Some(agent), Some(step)) = (&v.agent, v.step) else {
        return Vec::new();
    };
    let mut picks = vec![((agent.clone(), step), v.probability, true)];
    for alt in &v.alternatives {
        if !picks
            .iter()
            .any(|((a, s), _, _)| a == &alt.agent && *s == alt.step)
        {
            picks.push(((alt.agent.clone(), alt.step), alt.probability, false));
        }
    }
    let total: f64 = picks
        .iter()
        .filter_map(|(_, p, _)| *p)
        .filter(|p| *p > 0.0)
        .sum();
    if v.probability.is_none() || total <= 0.0 {
        return vec![((agent.clone(), step), 1.0, true)];
    }
    picks
        .into_iter()
        .filter_map(|(pick, p, primary)| Some((pick, p.filter(|p| *p > 0.0)? / total, primary)))
        .collect()
}

fn evidence_of(
    trace: &Trace,
    v: &Verdict,
    agent: &str,
    step: usize,
    share: f64,
    primary: bool,
) -> Evidence {
    let reason = match (&v.rationale, primary) {
        (Some(r), true) => r.clone(),
        (Some(r), false) => format!(
            "(a runner-up answer; the diagnosis named {} first) {r}",
            v.agent.as_deref().unwrap_or("another agent")
        ),
        (None, _) => "(no reason given)".into(),
    };
    Evidence {
        share,
        primary,
        ..Evidence::at(trace, agent, step, reason)
    }
}

impl Evidence {
    /// A primary answer's evidence: `agent` at `step` of `trace`, with the diagnosis' `reason`.
    pub fn at(trace: &Trace, agent: &str, step: usize, reason: String) -> Evidence {
        let turn = trace
            .steps
            .iter()
            .take_while(|s| s.index <= step)
            .filter(|s| s.agent == agent)
            .count()
            .max(1);
        Evidence {
            trace: trace.id.clone(),
            task: trace.task.clone(),
            step,
            share: 1.0,
            primary: true,
            turn,
            excerpt: trace.excerpt(step, 400).unwrap_or_default(),
            reason,
        }
    }
}

fn credit_of(agent: &str, evidence: &[Evidence], located: usize) -> AgentCredit {
    let mut turns: BTreeMap<usize, f64> = BTreeMap::new();
    for e in evidence {
        *turns.entry(e.turn).or_default() += e.share;
    }
    let mass: f64 = evidence.iter().map(|e| e.share).sum();
    AgentCredit {
        agent: agent.to_string(),
        blamed: evidence.iter().filter(|e| e.primary).count(),
        mass,
        credit: if located == 0 {
            1.0
        } else {
            1.0 - mass / located as f64
        },
        turns: turns
            .into_iter()
            .map(|(turn, mass)| TurnBlame { turn, mass })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::TraceBuilder;

    fn verdict(agent: Option<&str>, step: usize, why: &str) -> Verdict {
        Verdict {
            agent: agent.map(str::to_string),
            step: agent.map(|_| step),
            rationale: Some(why.into()),
            ..Verdict::new("prior", serde_json::Value::Null)
        }
    }

    #[test]
    fn credit_counts_located_failures_per_prompted_agent_and_turn() {
        let t = |id: &str| {
            TraceBuilder::new(id)
                .task(format!("task {id}"))
                .steps(&["Planner", "Coder", "Planner", "tool"])
                .build()
        };
        let (a, b, c, d) = (t("a"), t("b"), t("c"), t("d"));
        let (va, vb, vc, vd) = (
            verdict(Some("Planner"), 2, "dropped the limit"),
            verdict(Some("Planner"), 0, "wrong plan"),
            verdict(Some("tool"), 3, "tool error"),
            verdict(None, 0, ""),
        );
        let failed = [(&a, &va), (&b, &vb), (&c, &vc), (&d, &vd)];
        let agents = vec!["Coder".to_string(), "Planner".to_string()];
        let blame = blame(&failed, &agents);
        assert_eq!((blame.failures, blame.located), (4, 3));
        assert_eq!(blame.unprompted.get("tool"), Some(&1));
        assert_eq!(blame.agents[0].agent, "Planner");
        assert_eq!((blame.agents[0].blamed, blame.agents[0].mass), (2, 2.0));
        assert!((blame.agents[0].credit - (1.0 - 2.0 / 3.0)).abs() < 1e-12);
        let turns: Vec<(usize, f64)> = blame.agents[0]
            .turns
            .iter()
            .map(|t| (t.turn, t.mass))
            .collect();
        assert_eq!(turns, [(1, 1.0), (2, 1.0)]);
        assert_eq!(blame.agents[1].credit, 1.0);
        assert_eq!(
            blame.weakest(2, &BTreeSet::new()),
            ["Planner"],
            "an agent never named is not rewritten"
        );
        let e = &blame.evidence["Planner"][0];
        assert_eq!(
            (e.task.as_str(), e.step, e.reason.as_str()),
            ("task a", 2, "dropped the limit")
        );
    }

    #[test]
    fn alternatives_share_the_blame_by_probability() {
        let t = TraceBuilder::new("a")
            .steps(&["Planner", "Coder", "Checker"])
            .build();
        let mut v = verdict(Some("Coder"), 1, "bad sum");
        v.probability = Some(0.6);
        v.alternatives = vec![
            maslens_trace::Pick {
                agent: "Planner".into(),
                step: 0,
                probability: Some(0.3),
                kind: "runner-up".into(),
            },
            maslens_trace::Pick {
                agent: "Checker".into(),
                step: 2,
                probability: None,
                kind: "runner-up".into(),
            },
        ];
        let agents: Vec<String> = ["Checker", "Coder", "Planner"].map(String::from).to_vec();
        let b = blame(&[(&t, &v)], &agents);
        let mass: Vec<(&str, f64)> = b
            .agents
            .iter()
            .map(|a| (a.agent.as_str(), (a.mass * 1000.0).round() / 1000.0))
            .collect();
        assert_eq!(
            mass,
            [("Coder", 0.667), ("Planner", 0.333), ("Checker", 0.0)]
        );
        assert_eq!(b.weakest(3, &BTreeSet::new()), ["Coder", "Planner"]);
        let tried = BTreeSet::from(["Coder".to_string()]);
        assert_eq!(
            b.weakest(1, &tried),
            ["Planner"],
            "an excluded agent is passed over"
        );
        assert!(!b.evidence["Planner"][0].primary);
        assert!(b.evidence["Planner"][0]
            .reason
            .starts_with("(a runner-up answer; the diagnosis named Coder first)"));
    }
}
