//! The improvement loop's steps (`maslens.improve`, docs/improve.md): the loop itself runs in
//! Python, where the user's system lives; each of its decisions is made here.
//!
//! - [`blame`]: structural and temporal credit from localized failures: which prompted agent the
//!   failures were located at (fewer is better), and at which of its turns.
//! - [`rewrite`]: the credit paper's role-prompt rewrite of one agent, fed with the located
//!   failures' steps and reasons (the proxy gradient).
//! - [`blackbox`]: the baseline: one rewrite of every prompt from the failed outputs alone.
//! - [`accept`]: keep a change only when the held-out score improves beyond a paired bootstrap
//!   interval.
//! - [`propose`]: a prompt change proposed for one failure mode (the UI's "Propose a fix").
//! - [`replay`]: verification by replay from the decisive step (SPR, RR, delta-RR).
//! - [`report`]: the report (JSON, Markdown, HTML).

pub mod accept;
pub mod blackbox;
pub mod blame;
pub mod propose;
pub mod replay;
pub mod report;
pub mod rewrite;

pub use accept::{accept, Acceptance};
pub use blackbox::blackbox;
pub use blame::{blame, AgentCredit, Blame, Evidence, TurnBlame};
pub use propose::{mode_of_traces, propose, FixProposal, ModeToFix};
pub use replay::Replay;
pub use report::ImproveReport;
pub use rewrite::{rewrite, Rewritten};

/// A model's answer made fit to be a prompt: trimmed, code fences and wrapping quotes or
/// `<prompt>` tags removed. Empty when nothing is left.
pub fn clean_prompt(text: &str) -> String {
    let mut t = text.trim();
    if t.len() >= 6 && t.starts_with("```") && t.ends_with("```") {
        let inner = &t[3..t.len() - 3];
        // A language tag sits on the fence line: drop that line.
        t = match inner.split_once('\n') {
            Some((tag, rest)) if !tag.trim().contains(' ') => rest,
            _ => inner,
        }
        .trim();
    }
    for (open, close) in [("<prompt>", "</prompt>"), ("\"", "\"")] {
        if t.len() > open.len() + close.len() && t.starts_with(open) && t.ends_with(close) {
            t = t[open.len()..t.len() - close.len()].trim();
        }
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::clean_prompt;

    #[test]
    fn prompts_lose_fences_tags_and_quotes() {
        assert_eq!(clean_prompt("  You check sums.  "), "You check sums.");
        assert_eq!(
            clean_prompt("```text\nYou check sums.\n```"),
            "You check sums."
        );
        assert_eq!(
            clean_prompt("<prompt>\nYou check.\n</prompt>"),
            "You check."
        );
        assert_eq!(clean_prompt("\"You check.\""), "You check.");
        assert_eq!(clean_prompt("```\n```"), "");
        assert_eq!(clean_prompt("```\nBe\nbrief.\n```"), "Be\nbrief.");
        assert_eq!(clean_prompt("```You check.```"), "You check.");
    }
}
