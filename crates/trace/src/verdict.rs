//! The one verdict every localizer gives, and the rule that makes its answer coherent.
//!
//! Every localization method (the LLM pipeline, the learned prior, the stack of both, external
//! predictions) ends in a [`crate::Verdict`]: one **primary** (agent, step) pair, its probability,
//! ranked **alternatives**, the evidence in words, and which method and model produced it. The
//! primary pair is built from what the method ranked by [`Trace::resolve_answer`]:
//!
//! - **Coherent**: the primary agent is the agent that acts at the primary step
//!   ([`Trace::actor_at`]), so "AGENT at step N" is always true of the trace.
//! - **Acting only**: the primary step is a step of an acting agent ([`Trace::is_acting`]: not a
//!   tool, code executor, terminal or the human user) unless the caller allows any agent
//!   ([`Answer::allow_non_acting`]). A method that ranked such a step first gets the best-ranked
//!   acting step instead; when it ranked none, the nearest acting step before it (the agent
//!   whose call or turn produced it), else the nearest after it. The step it named is kept as an
//!   alternative, shown as such.
//! - **Two heads**: a method with a separate agent-level answer (the prior's agent head, the
//!   stack's agent level) keeps it in [`Heads`]; when it differs from the primary agent it is
//!   also an alternative. The step head decides the primary pair (the step is the more specific
//!   claim; the agent follows from it).
//!
//! [`ScoringRule::Independent`] is Who&When's scoring: agent accuracy scores the agent-level answer
//! and step accuracy the step-level answer, apart, as the paper's tables do. It exists to
//! reproduce papers; reports say which rule scored them ([`crate::Verdict::scored`]).

use crate::model::Trace;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which (agent, step) pair a report scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ScoringRule {
    /// The primary pair: the named agent acts at the named step (the default everywhere).
    #[default]
    Coherent,
    /// Who&When's scoring: the agent-level and the step-level answers apart.
    Independent,
}

impl ScoringRule {
    pub fn as_str(self) -> &'static str {
        match self {
            ScoringRule::Coherent => "coherent",
            ScoringRule::Independent => "independent",
        }
    }

    /// `coherent` or `independent`.
    pub fn parse(s: &str) -> Option<ScoringRule> {
        match s {
            "coherent" => Some(ScoringRule::Coherent),
            "independent" => Some(ScoringRule::Independent),
            _ => None,
        }
    }
}

/// One (agent, step) answer: the primary one or an alternative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pick {
    pub agent: String,
    /// Step index (as in the source).
    pub step: usize,
    /// The method's probability for this pair, when it has one (see the method's docs for what
    /// it is calibrated on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// What this alternative is: `runner-up`, `agent-level answer`, `named step (a tool's)`,
    /// `the prior`, `the LLM pipeline`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// A method's agent-level and step-level answers, kept apart (what [`ScoringRule::Independent`]
/// scores). Either may be missing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Heads {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
}

/// What a method answered, before the coherence rule.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Steps (source indices) the method ranks, best first, each with its probability when the
    /// method has one. Duplicates after the first are ignored.
    pub ranked_steps: Vec<(usize, Option<f64>)>,
    /// The method's own agent-level answer, when it has one apart from the step.
    pub agent_head: Option<String>,
    /// Other answers worth showing (another method's pair inside a stack, an Evaluator's
    /// ballot), with what they are.
    pub others: Vec<Pick>,
    /// Allow a tool, terminal or human to be the primary agent.
    pub allow_non_acting: bool,
}

/// The coherent answer [`Trace::resolve_answer`] makes of an [`Answer`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    pub primary: Option<Pick>,
    pub alternatives: Vec<Pick>,
    /// The heads as the method gave them (step head: its best-ranked step).
    pub heads: Heads,
}

/// Alternatives shown at most (runner-ups, heads and other answers together).
pub const MAX_ALTERNATIVES: usize = 5;

/// The first `chars` characters of `text`, trimmed, with ` ...` added when cut (at a character
/// boundary): the one excerpt rule of step texts and reasons.
pub fn excerpt_text(text: &str, chars: usize) -> String {
    let text = text.trim();
    let mut e: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        e.push_str(" ...");
    }
    e
}

impl Trace {
    /// The agent acting at step `index` (a source step index).
    pub fn actor_at(&self, index: usize) -> Option<&str> {
        self.position_of(index)
            .and_then(|p| self.steps.get(p))
            .map(|s| s.agent.as_str())
    }

    /// Whether the step at `index` may be named as responsible: it is in the trace and its agent
    /// acts (or `allow_non_acting`).
    pub fn is_blamable(&self, index: usize, allow_non_acting: bool) -> bool {
        self.actor_at(index)
            .is_some_and(|a| allow_non_acting || self.is_acting(a))
    }

    /// The first characters of the step's text (`chars`), ` ...` added when cut
    /// ([`excerpt_text`]).
    pub fn excerpt(&self, index: usize, chars: usize) -> Option<String> {
        let pos = self.position_of(index)?;
        Some(excerpt_text(&self.steps[pos].content, chars))
    }

    /// The acting step nearest to `index`: before it (the agent whose call or turn produced a
    /// tool's or a person's step), else after it.
    pub fn nearest_acting(&self, index: usize) -> Option<usize> {
        let pos = self.position_of(index)?;
        let acting = |p: &usize| self.is_acting(&self.steps[*p].agent);
        (0..pos)
            .rev()
            .find(acting)
            .or_else(|| (pos + 1..self.steps.len()).find(acting))
            .map(|p| self.steps[p].index)
    }

    /// The coherent primary pair and the alternatives of a method's answer (the module docs give
    /// the rule).
    pub fn resolve_answer(&self, answer: &Answer) -> Resolved {
        let mut ranked: Vec<(usize, Option<f64>)> = Vec::new();
        for &(s, p) in &answer.ranked_steps {
            if self.position_of(s).is_some() && !ranked.iter().any(|(r, _)| *r == s) {
                ranked.push((s, p));
            }
        }
        let heads = Heads {
            agent: answer.agent_head.clone(),
            step: ranked.first().map(|(s, _)| *s),
        };
        let allow = answer.allow_non_acting;
        let chosen = ranked
            .iter()
            .find(|(s, _)| self.is_blamable(*s, allow))
            .copied()
            .or_else(|| {
                let (named, _) = *ranked.first()?;
                self.nearest_acting(named).map(|s| (s, None))
            });
        let pick = |s: usize, probability: Option<f64>, kind: &str| Pick {
            agent: self.actor_at(s).unwrap_or_default().to_string(),
            step: s,
            probability,
            kind: kind.to_string(),
        };
        let primary = chosen.map(|(s, p)| pick(s, p, ""));
        let mut alternatives: Vec<Pick> = Vec::new();
        let push = |alt: Pick, alternatives: &mut Vec<Pick>| {
            let same_as_primary = primary
                .as_ref()
                .is_some_and(|p| p.agent == alt.agent && p.step == alt.step);
            let seen = alternatives
                .iter()
                .any(|a| a.agent == alt.agent && a.step == alt.step);
            if !same_as_primary && !seen && alternatives.len() < MAX_ALTERNATIVES {
                alternatives.push(alt);
            }
        };
        // The step the method named, when the rule moved off it.
        if let (Some(&(named, p)), Some(prim)) = (ranked.first(), &primary) {
            if named != prim.step {
                push(
                    pick(named, p, "named step (not an acting agent's)"),
                    &mut alternatives,
                );
            }
        }
        // The agent head's answer, at that agent's best-ranked step (else its first step).
        if let (Some(a), Some(prim)) = (&answer.agent_head, &primary) {
            if *a != prim.agent {
                if let Some(s) = self.best_step_of(a, &ranked) {
                    let p = ranked.iter().find(|(r, _)| *r == s).and_then(|(_, p)| *p);
                    push(pick(s, p, "agent-level answer"), &mut alternatives);
                }
            }
        }
        for alt in answer
            .others
            .iter()
            .filter(|o| self.acts_at(&o.agent, o.step))
        {
            push(alt.clone(), &mut alternatives);
        }
        for &(s, p) in ranked.iter().filter(|(s, _)| self.is_blamable(*s, allow)) {
            push(pick(s, p, "runner-up"), &mut alternatives);
        }
        Resolved {
            primary,
            alternatives,
            heads,
        }
    }

    /// `agent`'s best-ranked step in `ranked`, else its first step in the trace.
    fn best_step_of(&self, agent: &str, ranked: &[(usize, Option<f64>)]) -> Option<usize> {
        ranked
            .iter()
            .map(|(s, _)| *s)
            .find(|s| self.acts_at(agent, *s))
            .or_else(|| {
                self.steps
                    .iter()
                    .find(|st| st.agent == agent)
                    .map(|st| st.index)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentKind;

    /// human, Planner, search (a tool), Coder, Computer_terminal, Coder.
    fn trace() -> Trace {
        crate::TraceBuilder::new("t")
            .agent("search", AgentKind::Tool)
            .agent("Computer_terminal", AgentKind::Tool)
            .steps(&[
                "human",
                "Planner",
                "search",
                "Coder",
                "Computer_terminal",
                "Coder",
            ])
            .build()
    }

    fn answer(steps: &[usize], agent: Option<&str>) -> Answer {
        Answer {
            ranked_steps: steps.iter().map(|&s| (s, Some(0.1 * s as f64))).collect(),
            agent_head: agent.map(String::from),
            ..Answer::default()
        }
    }

    #[test]
    fn the_primary_agent_acts_at_the_primary_step() {
        let t = trace();
        let r = t.resolve_answer(&answer(&[3, 1], Some("Planner")));
        let p = r.primary.unwrap();
        assert_eq!((p.agent.as_str(), p.step), ("Coder", 3));
        assert_eq!(r.heads.agent.as_deref(), Some("Planner"));
        assert_eq!(r.heads.step, Some(3));
        // The agent head's answer is an alternative at its best-ranked step.
        assert_eq!(r.alternatives[0].kind, "agent-level answer");
        assert_eq!(
            (r.alternatives[0].agent.as_str(), r.alternatives[0].step),
            ("Planner", 1)
        );
    }

    #[test]
    fn a_tool_or_human_step_is_never_primary_unless_allowed() {
        let t = trace();
        // Ranked: the tool step, then Coder's step 5: step 5 is primary, step 2 an alternative.
        let r = t.resolve_answer(&answer(&[2, 5], None));
        assert_eq!(r.primary.as_ref().map(|p| p.step), Some(5));
        assert_eq!(r.alternatives[0].step, 2);
        assert!(r.alternatives[0].kind.starts_with("named step"));
        // Only the terminal's step ranked: its caller (Coder at step 3) is blamed.
        let r = t.resolve_answer(&answer(&[4], None));
        let p = r.primary.unwrap();
        assert_eq!(
            (p.agent.as_str(), p.step, p.probability),
            ("Coder", 3, None)
        );
        // Only the human's first step: no acting step before it, the next one (Planner).
        let r = t.resolve_answer(&answer(&[0], None));
        assert_eq!(r.primary.map(|p| p.step), Some(1));
        // Allowed: the tool is named.
        let mut a = answer(&[2, 5], None);
        a.allow_non_acting = true;
        let p = t.resolve_answer(&a).primary.unwrap();
        assert_eq!((p.agent.as_str(), p.step), ("search", 2));
    }

    #[test]
    fn nothing_ranked_in_the_trace_gives_no_primary() {
        let t = trace();
        let r = t.resolve_answer(&answer(&[99], Some("Coder")));
        assert!(r.primary.is_none() && r.alternatives.is_empty());
        assert_eq!(r.heads.step, None);
    }

    #[test]
    fn alternatives_are_distinct_coherent_and_bounded() {
        let t = trace();
        let mut a = answer(&[5, 3, 1, 2, 4, 0], Some("Planner"));
        a.others.push(Pick {
            agent: "Planner".into(),
            step: 3, // Planner does not act at step 3: not shown
            probability: None,
            kind: "the prior".into(),
        });
        let r = t.resolve_answer(&a);
        assert!(r.alternatives.len() <= MAX_ALTERNATIVES);
        for alt in &r.alternatives {
            assert!(t.acts_at(&alt.agent, alt.step), "{alt:?}");
        }
        let mut pairs: Vec<_> = r.alternatives.iter().map(|a| (&a.agent, a.step)).collect();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), r.alternatives.len());
    }

    #[test]
    fn excerpts_are_cut_at_a_char_boundary() {
        let mut t = trace();
        t.steps[1].content = "é".repeat(10);
        assert_eq!(t.excerpt(1, 3).as_deref(), Some("ééé ..."));
        assert_eq!(t.excerpt(1, 10).as_deref(), Some("éééééééééé"));
        assert_eq!(t.excerpt(42, 3), None);
    }
}
