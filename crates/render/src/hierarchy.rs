//! ECHO's hierarchical context (Banerjee, Nair and Borogovac 2025, "Where Did It All Go Wrong? A
//! Hierarchical Look into Multi-Agent Error Attribution", arXiv 2510.04886): the steps around a
//! focus step in full, farther steps progressively compressed. Four levels by distance from the
//! focus: L1 (within 1 step) in full, L2 (2-3 steps) cut to their head and tail, L3 (4-6 steps) to
//! their opening, L4 (the rest) to a milestone line of their first characters. Every cut is
//! marked in the text, as the other strategies mark theirs. The paper extracts each level's
//! content with patterns; here a level is a character budget per step (a departure).

use crate::{
    abridge_step, push_step, step_body, truncate_step, ChatModel, Fitted, Strategy, Trace,
    FOCUS_MAX_CHARS,
};

/// Characters per step at each level (L1 to L4) before any shrinking to fit a budget.
pub const LEVEL_CHARS: [usize; 4] = [FOCUS_MAX_CHARS, 1200, 300, 120];

/// No level is shrunk below this many characters per step.
const MIN_LEVEL_CHARS: usize = 30;

/// The level (0-based: L1 = 0) of a step `distance` positions away from the focus.
pub fn level(distance: usize) -> usize {
    match distance {
        0..=1 => 0,
        2..=3 => 1,
        4..=6 => 2,
        _ => 3,
    }
}

/// Every step of `trace`, the step at position `focus` and its neighbours at `chars[level]`
/// characters each (L1 and L2 keep head and tail, L3 and L4 their opening).
pub fn hierarchical_text(trace: &Trace, focus: usize, chars: [usize; 4]) -> String {
    let mut out = String::new();
    for (pos, step) in trace.steps.iter().enumerate() {
        let body = step_body(step);
        let lv = level(pos.abs_diff(focus));
        let body = match lv {
            0 | 1 => truncate_step(&body, chars[lv], step.index).0,
            _ => abridge_step(&body, chars[lv], step.index),
        };
        push_step(&mut out, step, &body);
    }
    out
}

/// The hierarchy around position `focus` within `budget` tokens: [`LEVEL_CHARS`], halved level by
/// level (never below 30 characters) until it fits; `None` when even the smallest does not.
pub fn fit_hierarchical(
    model: &dyn ChatModel,
    trace: &Trace,
    focus: usize,
    budget: Option<usize>,
) -> Option<Fitted> {
    let focus = focus.min(trace.steps.len().saturating_sub(1));
    let mut chars = LEVEL_CHARS;
    loop {
        let text = hierarchical_text(trace, focus, chars);
        let tokens = model.count_tokens(&text);
        if budget.is_none_or(|b| tokens <= b) {
            let focus_step = trace.steps.get(focus).map_or(focus, |s| s.index);
            return Some(Fitted {
                text,
                strategy: Strategy::Hierarchical {
                    focus_step,
                    level_chars: chars,
                },
                tokens,
            });
        }
        if chars.iter().all(|&c| c <= MIN_LEVEL_CHARS) {
            return None;
        }
        chars = chars.map(|c| (c / 2).max(MIN_LEVEL_CHARS));
    }
}

/// Every step as a milestone line (its first `chars` characters): the overview a scout reads to
/// pick the focus. `None` when it does not fit `budget`.
pub fn fit_milestones(
    model: &dyn ChatModel,
    trace: &Trace,
    chars: usize,
    budget: Option<usize>,
) -> Option<String> {
    let mut out = String::new();
    for step in &trace.steps {
        push_step(
            &mut out,
            step,
            &abridge_step(&step_body(step), chars, step.index),
        );
    }
    let fits = budget.is_none_or(|b| model.count_tokens(&out) <= b);
    fits.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::TraceBuilder;

    #[test]
    fn levels_compress_with_distance_from_the_focus() {
        assert_eq!(
            (0..9).map(level).collect::<Vec<_>>(),
            [0, 0, 1, 1, 2, 2, 2, 3, 3]
        );
        let long = "word ".repeat(400);
        let mut b = TraceBuilder::new("t").task("q");
        for i in 0..10 {
            b = b.step(if i % 2 == 0 { "A" } else { "B" }, &long);
        }
        let trace = b.build();
        let text = hierarchical_text(&trace, 5, LEVEL_CHARS);
        let block = |i: usize| -> &str {
            let start = text.find(&format!("Step {i} |")).unwrap();
            let rest = &text[start + 4..];
            let end = rest.find("Step ").map_or(rest.len(), |e| e);
            &rest[..end]
        };
        assert!(!block(5).contains("maslens"), "L1 in full");
        assert!(!block(4).contains("maslens") && !block(6).contains("maslens"));
        assert!(block(3).contains("omitted by maslens"), "L2 head and tail");
        assert!(block(1).contains("abridged by maslens"), "L3 opening");
        assert!(block(9).len() < block(1).len(), "L4 shorter than L3");
        assert!(block(0).len() < block(3).len());
    }

    #[test]
    fn the_hierarchy_shrinks_to_fit_a_budget() {
        let model = maslens_llm::testing::ScriptedModel::new("m");
        let long = "word ".repeat(2000);
        let mut b = TraceBuilder::new("t").task("q");
        for _ in 0..12 {
            b = b.step("A", &long);
        }
        let trace = b.build();
        let roomy = fit_hierarchical(&model, &trace, 3, None).unwrap();
        let tight = fit_hierarchical(&model, &trace, 3, Some(roomy.tokens / 3)).unwrap();
        assert!(tight.tokens <= roomy.tokens / 3);
        let Strategy::Hierarchical {
            focus_step,
            level_chars,
        } = tight.strategy
        else {
            panic!("{:?}", tight.strategy)
        };
        assert_eq!(focus_step, 3);
        assert!(level_chars[0] < LEVEL_CHARS[0]);
        assert!(fit_hierarchical(&model, &trace, 3, Some(10)).is_none());
        assert!(fit_milestones(&model, &trace, 120, None)
            .unwrap()
            .contains("abridged"));
    }
}
