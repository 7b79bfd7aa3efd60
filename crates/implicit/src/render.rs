//! Rendering traces into prompt text, and splitting long traces into overlapping windows.
//!
//! Only the task, the agent roster and the steps are ever rendered: never the ground truth,
//! the outcome, labels or metadata (see [`crate::blind`]).

use maslens_llm::prompt::untrusted;
use maslens_trace::{Agent, Step};

/// Render one step as `[Step i] agent (speaker):\ncontent`, tool calls appended, cut to
/// `max_chars` characters (a note says how much was cut).
pub fn render_step(step: &Step, max_chars: usize) -> String {
    let mut head = format!("[Step {}] {}", step.index, step.agent);
    if !step.speaker.is_empty() && step.speaker != step.agent {
        head.push_str(&format!(" ({})", step.speaker));
    }
    let mut body = step.content.clone();
    for call in &step.tool_calls {
        body.push_str(&format!("\n[tool call] {}({})", call.name, call.arguments));
    }
    if let Some(id) = &step.tool_call_id {
        body.push_str(&format!("\n[result of tool call {id}]"));
    }
    format!("{head}:\n{}\n", truncate_chars(&body, max_chars))
}

/// Cut `s` to at most `max` characters, keeping head and tail, with a note of what was cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep_head = max * 3 / 4;
    let keep_tail = max - keep_head;
    let head: String = s.chars().take(keep_head).collect();
    let tail: String = s.chars().skip(n - keep_tail).collect();
    format!(
        "{head}\n[... {} characters omitted ...]\n{tail}",
        n - keep_head - keep_tail
    )
}

/// The agent roster line repeated in every window.
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
                    crate::render::truncate_chars(role, 120)
                )
            }
            _ => format!("{} ({})", a.name, a.kind.as_str()),
        })
        .collect();
    format!("Agents: {}", list.join(", "))
}

/// Wrap rendered steps as untrusted trace data.
pub fn wrap_trace(rendered_steps: &[String]) -> String {
    untrusted("trace", &rendered_steps.concat())
}

/// A window of consecutive step positions `[start, end)` into `Trace::steps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Window {
    pub start: usize,
    pub end: usize,
}

/// Greedy windows over steps whose token costs are `costs`: each window holds as many
/// consecutive steps as fit in `budget` tokens (at least one), and the next window starts
/// `overlap` steps before the previous one ended (always moving forward by at least one step).
pub fn plan_windows(costs: &[usize], budget: usize, overlap: usize) -> Vec<Window> {
    let mut out = Vec::new();
    if costs.is_empty() {
        return out;
    }
    let mut start = 0;
    loop {
        let mut end = start;
        let mut used = 0usize;
        while end < costs.len() && (end == start || used + costs[end] <= budget) {
            used += costs[end];
            end += 1;
        }
        out.push(Window { start, end });
        if end >= costs.len() {
            break;
        }
        start = end.saturating_sub(overlap).max(start + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_everything_with_overlap() {
        let w = plan_windows(&[10; 10], 30, 1);
        assert_eq!(w[0], Window { start: 0, end: 3 });
        assert_eq!(w[1], Window { start: 2, end: 5 });
        assert_eq!(w.last().unwrap().end, 10);
        // every step is in some window
        for i in 0..10 {
            assert!(w.iter().any(|x| x.start <= i && i < x.end));
        }
        // a single huge step still gets its own window and progress is made
        let w = plan_windows(&[5, 100, 5], 20, 2);
        assert_eq!(w.last().unwrap().end, 3);
        assert!(w.windows(2).all(|p| p[1].start > p[0].start));
        assert_eq!(
            plan_windows(&[1, 2, 3], 1000, 2),
            vec![Window { start: 0, end: 3 }]
        );
        assert!(plan_windows(&[], 10, 1).is_empty());
    }

    #[test]
    fn truncation_keeps_head_and_tail() {
        let s: String = "a".repeat(50) + &"b".repeat(50);
        let t = truncate_chars(&s, 20);
        assert!(
            t.starts_with("aaaa") && t.ends_with("bbbbb") && t.contains("80 characters omitted")
        );
        assert_eq!(truncate_chars("short", 20), "short");
    }

    #[test]
    fn step_rendering_shows_index_agent_speaker() {
        let step = Step {
            index: 4,
            agent: "Orchestrator".into(),
            speaker: "Orchestrator (thought)".into(),
            content: "Plan: search".into(),
            ..Default::default()
        };
        let r = render_step(&step, 100);
        assert!(r.starts_with("[Step 4] Orchestrator (Orchestrator (thought)):\nPlan: search"));
    }
}
