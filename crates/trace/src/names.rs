//! Agent name normalization and kind inference, shared by every importer.
//!
//! Rules (documented in docs/trace-format.md):
//! - a speaker label with a trailing parenthetical acts as the agent before it:
//!   `Orchestrator (thought)` and `Orchestrator (-> WebSurfer)` act as `Orchestrator`;
//! - kinds are inferred from general naming patterns (word tokens of the name, split on `_`, `-`,
//!   spaces, digits and camelCase), never from per-dataset lists.

use crate::model::AgentKind;

/// The acting agent for a raw speaker label: trimmed, with a trailing ` (...)` removed.
pub fn normalize_speaker(speaker: &str) -> &str {
    let s = speaker.trim();
    if s.ends_with(')') {
        if let Some(open) = s.rfind('(') {
            let head = s[..open].trim_end();
            if !head.is_empty() {
                return head;
            }
        }
    }
    s
}

/// Lower-case word tokens of a name: `ComputerTerminal` -> [computer, terminal],
/// `Computer_terminal` -> [computer, terminal], `user_proxy` -> [user, proxy].
pub fn name_tokens(name: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphabetic() {
            if !cur.is_empty() {
                tokens.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            tokens.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    tokens
}

const HUMAN_WORDS: &[&str] = &["human", "user", "customer", "person"];
const TOOL_WORDS: &[&str] = &[
    "terminal",
    "executor",
    "executer",
    "tool",
    "tools",
    "interpreter",
    "shell",
    "console",
    "sandbox",
];
const ORCHESTRATOR_WORDS: &[&str] = &[
    "orchestrator",
    "manager",
    "coordinator",
    "supervisor",
    "router",
    "dispatcher",
    "controller",
    "moderator",
    "planner",
    "leader",
    "admin",
];

/// Infer the kind of an agent from its (normalized) name and, for chat transcripts, the
/// message role. Tool patterns win over human ones (`user_proxy_executor` runs code).
pub fn infer_kind(name: &str, role: Option<&str>) -> AgentKind {
    let tokens = name_tokens(name);
    let has = |words: &[&str]| tokens.iter().any(|t| words.contains(&t.as_str()));
    if has(TOOL_WORDS) {
        return AgentKind::Tool;
    }
    if has(ORCHESTRATOR_WORDS) {
        return AgentKind::Orchestrator;
    }
    // A name that is only a human word (optionally with a number), e.g. `human`, `User`, `user2`.
    if !tokens.is_empty() && tokens.iter().all(|t| HUMAN_WORDS.contains(&t.as_str())) {
        return AgentKind::Human;
    }
    match role.map(|r| r.trim().to_ascii_lowercase()) {
        Some(r) if r == "tool" || r == "function" || r == "ipython" => AgentKind::Tool,
        Some(r)
            if matches!(r.as_str(), "user" | "human" | "system" | "developer")
                && name.trim().eq_ignore_ascii_case(&r) =>
        {
            AgentKind::Human
        }
        _ => AgentKind::Worker,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parenthetical_speakers_act_as_the_agent() {
        assert_eq!(normalize_speaker("Orchestrator (thought)"), "Orchestrator");
        assert_eq!(
            normalize_speaker("Orchestrator (-> WebSurfer)"),
            "Orchestrator"
        );
        assert_eq!(normalize_speaker(" WebSurfer "), "WebSurfer");
        assert_eq!(normalize_speaker("(weird)"), "(weird)");
        assert_eq!(normalize_speaker("Node-1"), "Node-1");
    }

    #[test]
    fn tokens_split_case_and_separators() {
        assert_eq!(name_tokens("ComputerTerminal"), ["computer", "terminal"]);
        assert_eq!(name_tokens("Computer_terminal"), ["computer", "terminal"]);
        assert_eq!(
            name_tokens("Verification_Expert"),
            ["verification", "expert"]
        );
        assert_eq!(name_tokens("Assistant1"), ["assistant"]);
    }

    #[test]
    fn kinds_follow_general_patterns() {
        assert_eq!(infer_kind("Computer_terminal", None), AgentKind::Tool);
        assert_eq!(infer_kind("ComputerTerminal", None), AgentKind::Tool);
        assert_eq!(infer_kind("code_executor", None), AgentKind::Tool);
        assert_eq!(infer_kind("Orchestrator", None), AgentKind::Orchestrator);
        assert_eq!(infer_kind("chat_manager", None), AgentKind::Orchestrator);
        assert_eq!(infer_kind("human", None), AgentKind::Human);
        assert_eq!(infer_kind("User", None), AgentKind::Human);
        assert_eq!(infer_kind("WebSurfer", None), AgentKind::Worker);
        assert_eq!(infer_kind("Verification_Expert", None), AgentKind::Worker);
        assert_eq!(infer_kind("Assistant1", None), AgentKind::Worker);
        assert_eq!(infer_kind("Node-1", None), AgentKind::Worker);
        assert_eq!(infer_kind("get_weather", Some("tool")), AgentKind::Tool);
        assert_eq!(infer_kind("system", Some("system")), AgentKind::Human);
    }
}
