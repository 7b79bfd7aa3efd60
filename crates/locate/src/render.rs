//! Rendering trace steps for prompts, and the long-trace strategy.
//!
//! A step is rendered as `Step <index> | agent: <agent>[ | speaker: <raw>]` followed by its
//! content (and tool calls). When a range of steps does not fit the token budget left by the
//! model's context window, the strategy is chosen automatically and never silently:
//! 1. [`Strategy::Full`]: everything fits;
//! 2. [`Strategy::TruncateSteps`]: each step longer than a per-step character cap keeps its
//!    head (2/3) and tail (1/3) around an explicit marker
//!    `[... N characters of step K omitted by maslens: long-trace truncation ...]`; the cap is the
//!    largest that fits, and must be at least [`MIN_STEP_CHARS`];
//! 3. windows (protocol-specific, see `judge.rs`): when even the minimum cap does not fit,
//!    the steps are cut into consecutive windows that fit, and the protocol carries the task and
//!    a running summary from window to window.

use maslens_llm::ChatModel;
use maslens_trace::{Step, Trace};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Smallest per-step character cap the truncation strategy may use before switching to windows.
pub const MIN_STEP_CHARS: usize = 240;

/// Which long-trace strategy produced a rendering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// The whole range fitted.
    Full,
    /// Long steps were cut to `max_chars_per_step` with explicit markers.
    TruncateSteps {
        max_chars_per_step: usize,
        steps_truncated: usize,
    },
    /// The range was split into `windows` consecutive windows (all-at-once and evaluators).
    Windows {
        windows: usize,
        max_chars_per_step: usize,
    },
    /// Step-by-step only: the growing prefix was shown as its last `steps_shown` steps, earlier
    /// (already cleared) steps summarised by a note.
    SlidingWindow {
        steps_shown: usize,
        max_chars_per_step: usize,
    },
}

impl Strategy {
    /// How aggressive the strategy is (for reporting the strongest one used in a verdict).
    pub fn rank(&self) -> u8 {
        match self {
            Strategy::Full => 0,
            Strategy::TruncateSteps { .. } => 1,
            Strategy::SlidingWindow { .. } => 2,
            Strategy::Windows { .. } => 3,
        }
    }

    /// Short description for terminal output.
    pub fn describe(&self) -> String {
        match self {
            Strategy::Full => "full trace".into(),
            Strategy::TruncateSteps {
                max_chars_per_step,
                steps_truncated,
            } => {
                format!("{steps_truncated} long steps truncated to {max_chars_per_step} chars")
            }
            Strategy::Windows {
                windows,
                max_chars_per_step,
            } => {
                format!("{windows} windows, steps capped at {max_chars_per_step} chars")
            }
            Strategy::SlidingWindow {
                steps_shown,
                max_chars_per_step,
            } => {
                format!(
                    "sliding window of {steps_shown} steps, capped at {max_chars_per_step} chars"
                )
            }
        }
    }
}

/// Cut `text` to at most about `cap` characters, keeping head and tail around a marker.
pub fn truncate_step(text: &str, cap: usize, step: usize) -> (String, bool) {
    let n = text.chars().count();
    if n <= cap {
        return (text.to_string(), false);
    }
    let head_n = cap * 2 / 3;
    let tail_n = cap - head_n;
    let head: String = text.chars().take(head_n).collect();
    let tail: String = text.chars().skip(n - tail_n).collect();
    let omitted = n - head_n - tail_n;
    (
        format!(
            "{head}\n[... {omitted} characters of step {step} omitted by maslens: long-trace truncation ...]\n{tail}"
        ),
        true,
    )
}

fn step_body(step: &Step) -> String {
    let mut body = step.content.clone();
    for call in &step.tool_calls {
        body.push_str(&format!("\n[tool call {}: {}]", call.name, call.arguments));
    }
    body
}

/// Header line of a step.
pub fn step_header(step: &Step) -> String {
    if step.speaker.is_empty() || step.speaker == step.agent {
        format!("Step {} | agent: {}", step.index, step.agent)
    } else {
        format!(
            "Step {} | agent: {} | speaker: {}",
            step.index, step.agent, step.speaker
        )
    }
}

/// Render steps `range` (positions in `trace.steps`), each capped at `cap` characters when given.
/// Returns the text and how many steps were truncated.
pub fn render_steps(trace: &Trace, range: Range<usize>, cap: Option<usize>) -> (String, usize) {
    let mut out = String::new();
    let mut truncated = 0;
    let end = range.end.min(trace.steps.len());
    for step in &trace.steps[range.start.min(end)..end] {
        let body = step_body(step);
        let body = match cap {
            Some(cap) => {
                let (b, cut) = truncate_step(&body, cap, step.index);
                truncated += usize::from(cut);
                b
            }
            None => body,
        };
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&step_header(step));
        out.push('\n');
        out.push_str(&body);
    }
    (out, truncated)
}

/// A rendering of a range of steps that fits a budget.
#[derive(Debug, Clone)]
pub struct Fitted {
    pub text: String,
    pub strategy: Strategy,
    /// Tokens of `text` as counted by the model.
    pub tokens: usize,
}

/// Render `range` within `budget` tokens: full if it fits, else truncated with the largest cap
/// `>= min_cap` that fits. `None` when even `min_cap` does not fit (the caller then uses windows).
pub fn fit(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: Option<usize>,
    min_cap: usize,
) -> Option<Fitted> {
    let (full, _) = render_steps(trace, range.clone(), None);
    let full_tokens = model.count_tokens(&full);
    let Some(budget) = budget else {
        return Some(Fitted {
            text: full,
            strategy: Strategy::Full,
            tokens: full_tokens,
        });
    };
    if full_tokens <= budget {
        return Some(Fitted {
            text: full,
            strategy: Strategy::Full,
            tokens: full_tokens,
        });
    }
    let longest = trace.steps[range.clone()]
        .iter()
        .map(|s| step_body(s).chars().count())
        .max()
        .unwrap_or(0);
    let try_cap = |cap: usize| {
        let (text, n) = render_steps(trace, range.clone(), Some(cap));
        let tokens = model.count_tokens(&text);
        (text, n, tokens)
    };
    let (text, n, tokens) = try_cap(min_cap);
    if tokens > budget {
        return None;
    }
    // Binary search the largest cap that fits.
    let mut best = (min_cap, text, n, tokens);
    let (mut lo, mut hi) = (min_cap + 1, longest);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let (text, n, tokens) = try_cap(mid);
        if tokens <= budget {
            best = (mid, text, n, tokens);
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    let (cap, text, n, tokens) = best;
    Some(Fitted {
        text,
        strategy: Strategy::TruncateSteps {
            max_chars_per_step: cap,
            steps_truncated: n,
        },
        tokens,
    })
}

/// Split `range` into consecutive windows that each fit `budget` at cap `cap` (a single step
/// that does not fit alone becomes its own window, truncated further to fit).
pub fn windows(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: usize,
    cap: usize,
) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let mut end = start + 1;
        let (mut text, _) = render_steps(trace, start..end, Some(cap));
        if model.count_tokens(&text) > budget {
            // One step alone is too long even at `cap`: shrink it until it fits.
            let mut c = cap;
            while c > 16 && model.count_tokens(&text) > budget {
                c /= 2;
                text = render_steps(trace, start..end, Some(c)).0;
            }
        } else {
            while end < range.end {
                let (next, _) = render_steps(trace, start..end + 1, Some(cap));
                if model.count_tokens(&next) > budget {
                    break;
                }
                text = next;
                end += 1;
            }
        }
        out.push((start..end, text));
        start = end;
    }
    out
}

/// Budget (tokens) left for the trace in a prompt whose other parts take `overhead` tokens and
/// whose answer may take `answer` tokens; `None` when the model's context size is unknown.
pub fn trace_budget(model: &dyn ChatModel, overhead: usize, answer: usize) -> Option<usize> {
    const MARGIN: usize = 64;
    model
        .context_size()
        .map(|ctx| ctx.saturating_sub(overhead + answer + MARGIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;

    fn trace(n: usize, len: usize) -> Trace {
        let mut t = Trace::new("t");
        for i in 0..n {
            t.steps.push(Step {
                index: i,
                agent: format!("A{}", i % 2),
                content: "x".repeat(len),
                ..Default::default()
            });
        }
        t
    }

    #[test]
    fn truncation_keeps_head_and_tail_with_marker() {
        let text: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let (cut, did) = truncate_step(&text, 30, 7);
        assert!(did);
        assert!(cut.starts_with(&text[..20]));
        assert!(cut.ends_with(&text[90..]));
        assert!(cut.contains("70 characters of step 7 omitted"));
        assert_eq!(truncate_step("short", 30, 0), ("short".to_string(), false));
    }

    #[test]
    fn fit_picks_full_then_truncation_then_none() {
        let t = trace(4, 2000);
        let m = ScriptedModel::new("fixture");
        let f = fit(&m, &t, 0..4, None, MIN_STEP_CHARS).unwrap();
        assert_eq!(f.strategy, Strategy::Full);
        let f = fit(&m, &t, 0..4, Some(10_000), MIN_STEP_CHARS).unwrap();
        assert_eq!(f.strategy, Strategy::Full);
        let f = fit(&m, &t, 0..4, Some(1000), MIN_STEP_CHARS).unwrap();
        match f.strategy {
            Strategy::TruncateSteps {
                max_chars_per_step,
                steps_truncated,
            } => {
                assert_eq!(steps_truncated, 4);
                assert!((MIN_STEP_CHARS..2000).contains(&max_chars_per_step));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(f.tokens <= 1000);
        assert!(f.text.contains("omitted by maslens"));
        assert!(fit(&m, &t, 0..4, Some(100), MIN_STEP_CHARS).is_none());
    }

    #[test]
    fn windows_cover_the_range_in_order() {
        let t = trace(10, 2000);
        let m = ScriptedModel::new("fixture");
        let ws = windows(&m, &t, 0..10, 300, MIN_STEP_CHARS);
        assert!(ws.len() > 1);
        assert_eq!(ws.first().unwrap().0.start, 0);
        assert_eq!(ws.last().unwrap().0.end, 10);
        for pair in ws.windows(2) {
            assert_eq!(pair[0].0.end, pair[1].0.start);
        }
        for (_, text) in &ws {
            assert!(m.count_tokens(text) <= 300);
        }
    }
}
