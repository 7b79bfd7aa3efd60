//! Build a [`Trace`] in code: for adapters that turn a framework's run into a trace, for
//! examples, and as the one way tests make traces (instead of a fixture helper per file).
//!
//! ```
//! use maslens_trace::{AgentKind, TraceBuilder};
//! let t = TraceBuilder::new("Hand-Crafted/7")
//!     .task("How many apples?")
//!     .agent("Computer_terminal", AgentKind::Tool)
//!     .step("Planner", "Count the crates, then multiply.")
//!     .step("Coder", "print(3 * 14)")
//!     .step("Computer_terminal", "41")
//!     .decisive("Coder", 1)
//!     .build();
//! assert_eq!(t.steps[2].index, 2);
//! assert_eq!(t.acting_agents(), ["Planner", "Coder"]);
//! ```

use crate::model::{AgentKind, DecisiveLabel, FaultyAgent, Outcome, Step, Trace};

/// A [`Trace`] under construction. Steps are numbered in the order they are added (the index
/// a step already carries is replaced). Agents keep the kind declared with
/// [`TraceBuilder::agent`]; an undeclared agent is not listed in `agents` (so it counts as a
/// worker, [`Trace::agent_kind`]).
#[derive(Debug, Clone)]
pub struct TraceBuilder {
    trace: Trace,
}

impl TraceBuilder {
    pub fn new(id: impl Into<String>) -> TraceBuilder {
        TraceBuilder {
            trace: Trace::new(id),
        }
    }

    pub fn task(mut self, task: impl Into<String>) -> Self {
        self.trace.task = task.into();
        self
    }

    pub fn ground_truth(mut self, answer: impl Into<String>) -> Self {
        self.trace.ground_truth = Some(answer.into());
        self
    }

    pub fn outcome(mut self, outcome: Outcome) -> Self {
        self.trace.outcome = outcome;
        self
    }

    /// Declare an agent and its kind (a tool, the human, an orchestrator).
    pub fn agent(mut self, name: &str, kind: AgentKind) -> Self {
        self.trace.ensure_agent(name, kind);
        self
    }

    /// A step by `agent` saying `content`.
    pub fn step(self, agent: &str, content: impl Into<String>) -> Self {
        self.step_with(Step {
            agent: agent.to_string(),
            content: content.into(),
            ..Step::default()
        })
    }

    /// One step per agent, in order, each saying `step N`.
    pub fn steps(mut self, agents: &[&str]) -> Self {
        for a in agents {
            let n = self.trace.steps.len();
            self = self.step(a, format!("step {n}"));
        }
        self
    }

    /// A step with every field given (speaker, round, phase, tool calls); its index is set.
    pub fn step_with(mut self, mut step: Step) -> Self {
        step.index = self.trace.steps.len();
        self.trace.steps.push(step);
        self
    }

    /// The decisive failure label (Who&When): `agent` at step `step`.
    pub fn decisive(mut self, agent: &str, step: usize) -> Self {
        self.trace.labels.decisive = Some(DecisiveLabel {
            agent: agent.to_string(),
            step,
            reason: None,
        });
        self
    }

    /// [`TraceBuilder::decisive`] with the labeller's reason.
    pub fn decisive_because(mut self, agent: &str, step: usize, reason: &str) -> Self {
        self.trace.labels.decisive = Some(DecisiveLabel {
            agent: agent.to_string(),
            step,
            reason: Some(reason.to_string()),
        });
        self
    }

    /// A faulty agent with its error mode (Aegis-Bench).
    pub fn faulty(mut self, agent: &str, error_mode: Option<&str>) -> Self {
        self.trace.labels.faulty_agents.push(FaultyAgent {
            agent: agent.to_string(),
            error_mode: error_mode.map(String::from),
            strategy: None,
            description: None,
        });
        self
    }

    pub fn metadata(mut self, key: &str, value: serde_json::Value) -> Self {
        self.trace.metadata.insert(key.to_string(), value);
        self
    }

    pub fn build(self) -> Trace {
        self.trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_steps_declares_kinds_and_labels() {
        let t = TraceBuilder::new("g/1")
            .agent("term", AgentKind::Tool)
            .steps(&["human", "A", "term"])
            .step_with(Step {
                index: 99,
                agent: "B".into(),
                round: Some(1),
                ..Step::default()
            })
            .decisive_because("A", 1, "wrong tool")
            .faulty("a", Some("FM-1.1"))
            .outcome(Outcome::Failure)
            .metadata("group", serde_json::json!("x"))
            .build();
        let idx: Vec<usize> = t.steps.iter().map(|s| s.index).collect();
        assert_eq!(idx, [0, 1, 2, 3]);
        assert_eq!(t.steps[1].content, "step 1");
        assert_eq!(t.acting_agents(), ["A", "B"]);
        assert_eq!(t.agents.len(), 1, "only declared agents are listed");
        let d = t
            .labels
            .decisive
            .as_ref()
            .map(|d| (d.step, d.reason.clone()));
        assert_eq!(d, Some((1, Some("wrong tool".into()))));
        assert_eq!(
            t.labels.faulty_agents[0].error_mode.as_deref(),
            Some("FM-1.1")
        );
        assert_eq!(t.group().as_deref(), Some("x"));
    }
}
