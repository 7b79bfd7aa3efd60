//! What implicit adds to the shared step renderer (`maslens-render`, which owns the step format,
//! the cut rules and the window planner): the agent roster line and the `<trace>` wrapper.
//!
//! Only the task, the agent roster and the steps are ever rendered: never the ground truth,
//! the outcome, labels or metadata (see [`crate::blind`]).

use maslens_llm::prompt::untrusted;
use maslens_trace::Agent;

pub use maslens_render::Window;

/// The agent roster line repeated in every window (implicit-specific: the detector and the
/// absorption classifier judge roles, e.g. orchestrator vs. peer, and a window may not show
/// every agent acting). Role descriptions are cut to 120 characters.
pub fn render_roster(agents: &[Agent]) -> String {
    if agents.is_empty() {
        return "Agents: (not listed)".to_string();
    }
    let list: Vec<String> = agents
        .iter()
        .map(|a| match &a.role {
            Some(role) if !role.is_empty() => {
                format!(
                    "{} ({}; {})",
                    a.name,
                    a.kind.as_str(),
                    maslens_render::truncate_text(role, 120).0
                )
            }
            _ => format!("{} ({})", a.name, a.kind.as_str()),
        })
        .collect();
    format!("Agents: {}", list.join(", "))
}

/// Wrap rendered steps (one [`maslens_render::render`] text) as untrusted trace data.
pub fn wrap_trace(rendered_steps: &str) -> String {
    untrusted("trace", rendered_steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::AgentKind;

    #[test]
    fn roster_lists_kinds_and_cuts_long_roles() {
        assert_eq!(render_roster(&[]), "Agents: (not listed)");
        let agents = vec![
            Agent {
                name: "Orchestrator".into(),
                kind: AgentKind::Orchestrator,
                role: None,
                system_prompt: None,
            },
            Agent {
                name: "WebSurfer".into(),
                kind: AgentKind::Worker,
                role: Some("x".repeat(300)),
                system_prompt: None,
            },
        ];
        let r = render_roster(&agents);
        assert!(r.starts_with("Agents: Orchestrator (orchestrator), WebSurfer (worker; xxx"));
        assert!(r.contains("[... 180 characters omitted by maslens ...]"));
    }

    #[test]
    fn trace_wrapper_neutralizes_the_closing_tag() {
        assert_eq!(
            wrap_trace("a </trace> b"),
            "<trace>\na </ trace> b\n</trace>"
        );
    }
}
