//! Validation: problems in a trace, as warnings or errors with their location.

use crate::diag::Diagnostic;
use crate::model::{Trace, FORMAT_VERSION};
use std::collections::{HashMap, HashSet};

/// Check one trace. Errors break invariants methods rely on (step indices, label steps in
/// range, known agents); warnings are odd but usable (label agent not acting at the label
/// step, empty content).
pub fn validate(trace: &Trace) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if trace.id.trim().is_empty() {
        out.push(Diagnostic::error("empty trace id").at("id"));
    }
    if trace.format_version > FORMAT_VERSION {
        out.push(
            Diagnostic::warning(format!(
                "format_version {} is newer than this maslens reads ({FORMAT_VERSION})",
                trace.format_version
            ))
            .at("format_version"),
        );
    }
    let mut agents: HashSet<&str> = HashSet::with_capacity(trace.agents.len());
    for (i, a) in trace.agents.iter().enumerate() {
        if a.name.trim().is_empty() {
            out.push(Diagnostic::error("agent with an empty name").at(format!("agents[{i}].name")));
        }
        if !agents.insert(a.name.as_str()) {
            out.push(
                Diagnostic::error(format!("duplicate agent `{}`", a.name))
                    .at(format!("agents[{i}].name")),
            );
        }
    }
    if trace.steps.is_empty() {
        out.push(Diagnostic::warning("trace has no steps").at("steps"));
    }
    let mut call_ids: HashSet<&str> = HashSet::new();
    let mut unknown_reported: HashMap<&str, usize> = HashMap::new();
    for (i, s) in trace.steps.iter().enumerate() {
        if s.index != i {
            out.push(
                Diagnostic::error(format!("step index {} at position {i}", s.index))
                    .at(format!("steps[{i}].index")),
            );
        }
        if s.agent.trim().is_empty() {
            out.push(Diagnostic::error("step without an agent").at(format!("steps[{i}].agent")));
        } else if !agents.contains(s.agent.as_str()) {
            let n = unknown_reported.entry(s.agent.as_str()).or_insert(0);
            *n += 1;
            if *n == 1 {
                out.push(
                    Diagnostic::error(format!("unknown agent `{}` (not in agents)", s.agent))
                        .at(format!("steps[{i}].agent")),
                );
            }
        }
        if s.content.trim().is_empty() && s.tool_calls.is_empty() {
            out.push(Diagnostic::warning("empty content").at(format!("steps[{i}].content")));
        }
        for c in &s.tool_calls {
            if let Some(id) = &c.id {
                call_ids.insert(id.as_str());
            }
        }
        if let Some(id) = &s.tool_call_id {
            if !call_ids.contains(id.as_str()) {
                out.push(
                    Diagnostic::warning(format!(
                        "tool_call_id `{id}` answers no earlier tool call"
                    ))
                    .at(format!("steps[{i}].tool_call_id")),
                );
            }
        }
    }

    let n = trace.steps.len();
    if let Some(d) = &trace.labels.decisive {
        check_label_agent(&mut out, &agents, &d.agent, "labels.decisive.agent");
        if d.step >= n {
            out.push(
                Diagnostic::error(format!(
                    "decisive label step {} is out of range (trace has {n} steps)",
                    d.step
                ))
                .at("labels.decisive.step"),
            );
        } else if trace.steps[d.step].agent != d.agent {
            out.push(
                Diagnostic::warning(format!(
                    "decisive label agent `{}` does not act at step {} (the speaker there is `{}`); \
                     label kept as given",
                    d.agent, d.step, trace.steps[d.step].speaker_or_agent()
                ))
                .at("labels.decisive"),
            );
        }
    }
    let mut seen_faulty = HashSet::new();
    for (i, f) in trace.labels.faulty_agents.iter().enumerate() {
        check_label_agent(
            &mut out,
            &agents,
            &f.agent,
            &format!("labels.faulty_agents[{i}].agent"),
        );
        if !seen_faulty.insert((f.agent.as_str(), f.error_mode.as_deref())) {
            out.push(
                Diagnostic::warning(format!("duplicate faulty-agent label `{}`", f.agent))
                    .at(format!("labels.faulty_agents[{i}]")),
            );
        }
    }
    for (i, l) in trace.labels.implicit.iter().enumerate() {
        let at = format!("labels.implicit[{i}]");
        if l.step >= n {
            out.push(
                Diagnostic::error(format!(
                    "implicit label step {} is out of range (trace has {n} steps)",
                    l.step
                ))
                .at(format!("{at}.step")),
            );
        } else if trace.steps[l.step].agent != l.agent {
            out.push(
                Diagnostic::warning(format!(
                    "implicit label agent `{}` does not act at step {}",
                    l.agent, l.step
                ))
                .at(at),
            );
        }
    }
    out
}

fn check_label_agent(out: &mut Vec<Diagnostic>, agents: &HashSet<&str>, name: &str, at: &str) {
    if agents.contains(name) {
        return;
    }
    let hint = agents
        .iter()
        .find(|a| a.eq_ignore_ascii_case(name))
        .map(|a| format!(" (did you mean `{a}`?)"))
        .unwrap_or_default();
    out.push(Diagnostic::warning(format!("label names unknown agent `{name}`{hint}")).at(at));
}

/// Validation across a corpus: per-trace checks plus duplicate ids.
#[derive(Debug, Default)]
pub struct CorpusValidator {
    seen: HashMap<String, String>,
}

impl CorpusValidator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Validate one trace; `location` (file and record) says where it was read, for duplicates.
    pub fn check(&mut self, trace: &Trace, location: &str) -> Vec<Diagnostic> {
        let mut out = validate(trace);
        match self.seen.get(&trace.id) {
            Some(first) => out.push(
                Diagnostic::error(format!(
                    "duplicate trace id `{}` (first seen in {first})",
                    trace.id
                ))
                .at("id"),
            ),
            None => {
                self.seen.insert(trace.id.clone(), location.to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    fn two_step() -> Trace {
        let mut t = Trace::new("t");
        t.ensure_agent("a", AgentKind::Worker);
        t.ensure_agent("b", AgentKind::Tool);
        for (i, ag) in ["a", "b"].iter().enumerate() {
            t.steps.push(Step {
                index: i,
                agent: ag.to_string(),
                content: "hi".into(),
                ..Step::default()
            });
        }
        t
    }

    #[test]
    fn clean_trace_has_no_diagnostics() {
        assert!(validate(&two_step()).is_empty());
    }

    #[test]
    fn reports_each_problem_with_location() {
        let mut t = two_step();
        t.steps[1].agent = "ghost".into();
        t.steps[0].content.clear();
        t.steps[1].index = 5;
        t.labels.decisive = Some(DecisiveLabel {
            agent: "A".into(),
            step: 9,
            reason: None,
        });
        t.labels.implicit.push(ImplicitLabel {
            step: 0,
            agent: "b".into(),
            error_type: "x".into(),
            absorption: None,
            severity: None,
            description: None,
        });
        let d = validate(&t);
        let has = |sev: crate::Severity, path: &str, needle: &str| {
            d.iter().any(|x| {
                x.severity == sev && x.path.as_deref() == Some(path) && x.message.contains(needle)
            })
        };
        use crate::Severity::*;
        assert!(
            has(Error, "steps[1].agent", "unknown agent `ghost`"),
            "{d:#?}"
        );
        assert!(has(Warning, "steps[0].content", "empty content"));
        assert!(has(Error, "steps[1].index", "step index 5"));
        assert!(has(Error, "labels.decisive.step", "out of range"));
        assert!(has(Warning, "labels.decisive.agent", "did you mean `a`"));
        assert!(has(Warning, "labels.implicit[0]", "does not act at step 0"));
        assert_eq!(d.len(), 6, "{d:#?}");
    }

    #[test]
    fn label_agent_not_acting_is_a_warning() {
        let mut t = two_step();
        t.labels.decisive = Some(DecisiveLabel {
            agent: "b".into(),
            step: 0,
            reason: None,
        });
        let d = validate(&t);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].severity, crate::Severity::Warning);
        assert!(d[0].message.contains("does not act at step 0"));
    }

    #[test]
    fn duplicate_ids_across_a_corpus() {
        let mut v = CorpusValidator::new();
        assert!(v.check(&two_step(), "f:1").is_empty());
        let d = v.check(&two_step(), "f:2");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("first seen in f:1"));
    }
}
