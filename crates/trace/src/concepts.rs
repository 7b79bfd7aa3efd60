//! One meaning per trace concept. Every crate that asks "who acts here", "which group is this
//! trace in", "what is the gold label" or "which seeded draw does this trace get" asks here, so a
//! baseline, a prior feature, a credit table and a report can never disagree about it.
//!
//! - **Acting agent** (also "non-terminal"): an agent that reasons and decides, i.e. neither a
//!   tool, code executor or terminal ([`AgentKind::Tool`], or a name containing `terminal`) nor the
//!   human user ([`AgentKind::Human`], or the names `human` / `user`). Agents of unknown kind count
//!   as acting ([`AgentKind::Worker`] is the default kind).
//! - **Group**: the subset a trace belongs to for per-subset reporting and stratified splits:
//!   `metadata.group` when the source sets it; for Aegis-Bench the `framework` metadata (else
//!   `aegis`); otherwise the trace id up to its first `/` (`Hand-Crafted/12` -> `Hand-Crafted`);
//!   none when the id has no `/`.
//! - **Task key** ([`Trace::task_key`]): which task question a trace answers, so that
//!   cross-validation never puts two runs of one question on both sides of a split: the source's
//!   question id (`metadata.question_ID`, `question_id` or `task_id`), else the task text
//!   lower-cased with its whitespace collapsed, else (no task) the trace id.
//! - **Gold label** ([`Gold`]): the decisive agent and step (Who&When) or the faulty agents with
//!   their error modes (Aegis-Bench); none when the trace carries neither.
//! - **Seeded draw** ([`seeded_rng`], [`seeded_hash`]): a ChaCha8 stream seeded by
//!   `seed XOR FNV-1a(key)` (the key is usually the trace id), so a trace's draw depends on the
//!   seed and the trace, never on the order of the cases. [`seeded_hash`] is the stream's first
//!   64-bit word, used to order ids for splits and folds.

use crate::model::{AgentKind, Trace};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// FNV-1a (64-bit) of a string.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The seeded ChaCha8 stream of `key` (see the module docs).
pub fn seeded_rng(seed: u64, key: &str) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ fnv1a(key))
}

/// The first 64-bit word of [`seeded_rng`]: a well-mixed per-key hash for ordering ids.
pub fn seeded_hash(seed: u64, key: &str) -> u64 {
    seeded_rng(seed, key).next_u64()
}

/// Order ids by their seeded hash (ties by id): the deterministic shuffle that splits and folds use.
pub fn seeded_order<S: AsRef<str>>(ids: &mut [S], seed: u64) {
    ids.sort_by_cached_key(|id| (seeded_hash(seed, id.as_ref()), id.as_ref().to_string()));
}

/// The gold labels of one case (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gold {
    /// Who&When decisive agent.
    pub agent: Option<String>,
    /// Who&When decisive step.
    pub step: Option<usize>,
    /// Aegis faulty agents with their error modes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faulty: Vec<(String, Option<String>)>,
}

/// The metadata key of a fault-injected trace (`maslens inject`, docs/inject.md): its decisive
/// label is known by construction, and it serves as training data only.
pub const INJECTION_KEY: &str = "injection";

impl Trace {
    /// Whether the trace was made by fault injection ([`INJECTION_KEY`] in its metadata).
    /// Learned methods train on such traces but never report figures on them.
    pub fn is_injected(&self) -> bool {
        self.metadata.contains_key(INJECTION_KEY)
    }

    /// Whether `agent` is an acting (non-terminal) agent here (see the module docs).
    pub fn is_acting(&self, agent: &str) -> bool {
        match self.agent_kind(agent) {
            AgentKind::Tool | AgentKind::Human => false,
            AgentKind::Worker | AgentKind::Orchestrator => {
                let l = agent.to_ascii_lowercase();
                !(l.contains("terminal") || l == "human" || l == "user")
            }
        }
    }

    /// Positions (into `steps`) of the steps an acting agent took, in order.
    pub fn acting_positions(&self) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|&p| self.is_acting(&self.steps[p].agent))
            .collect()
    }

    /// The distinct acting agents, in order of their first step.
    pub fn acting_agents(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in &self.steps {
            if self.is_acting(&s.agent) && !out.contains(&s.agent) {
                out.push(s.agent.clone());
            }
        }
        out
    }

    /// The trace's group (see the module docs).
    pub fn group(&self) -> Option<String> {
        if let Some(g) = self.metadata.get("group").and_then(|v| v.as_str()) {
            return Some(g.to_string());
        }
        if self.source.format == "aegis" {
            return Some(
                self.metadata
                    .get("framework")
                    .and_then(|v| v.as_str())
                    .unwrap_or("aegis")
                    .to_string(),
            );
        }
        match self.id.split_once('/') {
            Some((g, _)) if !g.is_empty() => Some(g.to_string()),
            _ => None,
        }
    }

    /// The task question this trace answers (see the module docs): runs with the same key are
    /// runs of one question (Who&When holds 11 questions in both of its subsets).
    pub fn task_key(&self) -> String {
        for k in ["question_ID", "question_id", "task_id"] {
            match self.metadata.get(k) {
                Some(serde_json::Value::String(v)) if !v.trim().is_empty() => {
                    return format!("id:{}", v.trim())
                }
                Some(v @ serde_json::Value::Number(_)) => return format!("id:{v}"),
                _ => {}
            }
        }
        let text = self.task.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            format!("trace:{}", self.id)
        } else {
            format!("task:{}", text.to_lowercase())
        }
    }

    /// The gold label, when the trace carries one (a decisive label wins over faulty agents).
    pub fn gold(&self) -> Option<Gold> {
        if let Some(d) = &self.labels.decisive {
            return Some(Gold {
                agent: Some(d.agent.clone()),
                step: Some(d.step),
                faulty: Vec::new(),
            });
        }
        if self.labels.faulty_agents.is_empty() {
            return None;
        }
        Some(Gold {
            agent: None,
            step: None,
            faulty: self
                .labels
                .faulty_agents
                .iter()
                .map(|f| (f.agent.clone(), f.error_mode.clone()))
                .collect(),
        })
    }

    /// Position (into `steps`) of the step with source index `index`.
    pub fn position_of(&self, index: usize) -> Option<usize> {
        // Most traces number their steps 0.., so position == index: check that first.
        match self.steps.get(index) {
            Some(s) if s.index == index => Some(index),
            _ => self.steps.iter().position(|s| s.index == index),
        }
    }

    /// Whether the verdict pair is coherent: `agent` is the agent that acts at step `index`.
    pub fn acts_at(&self, agent: &str, index: usize) -> bool {
        self.position_of(index)
            .is_some_and(|p| self.steps[p].agent == agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DecisiveLabel, FaultyAgent};
    use rand::Rng;

    fn trace() -> Trace {
        crate::TraceBuilder::new("Hand-Crafted/7")
            .agent("Computer_terminal", AgentKind::Tool)
            .agent("Orchestrator", AgentKind::Orchestrator)
            .agent("Boss", AgentKind::Human)
            .steps(&[
                "human",
                "Orchestrator",
                "Coder",
                "Computer_terminal",
                "Boss",
                "Coder",
            ])
            .build()
    }

    #[test]
    fn acting_excludes_tools_humans_and_terminal_names() {
        let t = trace();
        assert!(t.is_acting("Orchestrator"));
        assert!(t.is_acting("Coder")); // unknown kind: a worker
        assert!(!t.is_acting("Computer_terminal")); // tool kind
        assert!(!t.is_acting("Boss")); // human kind
        assert!(!t.is_acting("human")); // by name
        assert!(!t.is_acting("User"));
        assert!(!t.is_acting("bash_terminal")); // by name, worker kind
        assert_eq!(t.acting_positions(), vec![1, 2, 5]);
        assert_eq!(t.acting_agents(), vec!["Orchestrator", "Coder"]);
    }

    #[test]
    fn group_rules() {
        let mut t = trace();
        assert_eq!(t.group().as_deref(), Some("Hand-Crafted"));
        t.id = "a/b/c".into();
        assert_eq!(t.group().as_deref(), Some("a"));
        t.id = "plain".into();
        assert_eq!(t.group(), None);
        t.id = "/x".into();
        assert_eq!(t.group(), None);
        t.source.format = "aegis".into();
        assert_eq!(t.group().as_deref(), Some("aegis"));
        t.metadata.insert("framework".into(), "MetaGPT".into());
        assert_eq!(t.group().as_deref(), Some("MetaGPT"));
        t.metadata.insert("group".into(), "mine".into());
        assert_eq!(t.group().as_deref(), Some("mine"));
    }

    #[test]
    fn task_key_prefers_the_question_id_then_the_task_text() {
        let mut t = trace();
        assert_eq!(t.task_key(), "trace:Hand-Crafted/7");
        t.task = "  How many   Awnings?\n".into();
        assert_eq!(t.task_key(), "task:how many awnings?");
        let mut u = t.clone();
        u.id = "Algorithm-Generated/3".into();
        u.task = "how many awnings?".into();
        assert_eq!(
            t.task_key(),
            u.task_key(),
            "the same question in two subsets"
        );
        t.metadata.insert("question_ID".into(), "4d51c4bf".into());
        assert_eq!(t.task_key(), "id:4d51c4bf");
        t.metadata.insert("question_ID".into(), " ".into());
        t.metadata.insert("task_id".into(), 12.into());
        assert_eq!(t.task_key(), "id:12");
    }

    #[test]
    fn gold_prefers_the_decisive_label() {
        let mut t = trace();
        assert_eq!(t.gold(), None);
        t.labels.faulty_agents.push(FaultyAgent {
            agent: "Coder".into(),
            error_mode: Some("FM-1.1".into()),
            strategy: None,
            description: None,
        });
        assert_eq!(
            t.gold().map(|g| g.faulty),
            Some(vec![("Coder".to_string(), Some("FM-1.1".to_string()))])
        );
        t.labels.decisive = Some(DecisiveLabel {
            agent: "Coder".into(),
            step: 2,
            reason: None,
        });
        let g = t.gold().unwrap();
        assert_eq!(
            (g.agent.as_deref(), g.step, g.faulty.len()),
            (Some("Coder"), Some(2), 0)
        );
    }

    #[test]
    fn seeded_draws_depend_on_seed_and_key_only() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        let a: u32 = seeded_rng(3, "x/1").gen();
        assert_eq!(a, seeded_rng(3, "x/1").gen::<u32>());
        assert_ne!(seeded_hash(3, "x/1"), seeded_hash(4, "x/1"));
        assert_ne!(seeded_hash(3, "x/1"), seeded_hash(3, "x/2"));
        let mut ids = vec!["c", "a", "b", "d", "e", "f"];
        let mut again = vec!["f", "e", "d", "c", "b", "a"];
        seeded_order(&mut ids, 9);
        seeded_order(&mut again, 9);
        assert_eq!(ids, again, "the order does not depend on the input order");
        let mut other = ids.clone();
        seeded_order(&mut other, 10);
        assert_ne!(ids, other, "another seed gives another order");
    }

    #[test]
    fn coherence() {
        let t = trace();
        assert!(t.acts_at("Coder", 2));
        assert!(!t.acts_at("Coder", 3));
        assert!(!t.acts_at("Coder", 99));
        assert_eq!(t.position_of(5), Some(5));
    }
}
