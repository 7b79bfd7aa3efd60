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
//!
//! **Prior-guided narrowing** (opt-in, `LocateConfig::narrow_with_prior`, CLI `--prior-narrowing`):
//! when a per-step prior (maslens-prior's distribution, or any external one) is given and the
//! full trace does not fit, [`focused`] replaces 2 and 3: every step stays in the prompt, the
//! steps the prior ranks most likely decisive are shown in full (each at most
//! [`FOCUS_MAX_CHARS`]), as many as fit, and every other step is abridged to
//! their first [`ABRIDGED_CHARS`] characters (fewer, down to none, on very long traces) and the
//! marker `[... N more characters of step K abridged by maslens ...]`. One call sees
//! the whole trace instead of several windows. When even the all-abridged rendering does not
//! fit, the protocol falls back to 2 and 3. The verdict reports [`Strategy::Focused`].

use maslens_llm::ChatModel;
use maslens_trace::{Step, Trace};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Smallest per-step character cap the truncation strategy may use before switching to windows.
pub const MIN_STEP_CHARS: usize = 240;

/// Characters a step keeps when prior-guided narrowing abridges it (at most; see [`focused`]).
pub const ABRIDGED_CHARS: usize = 160;

/// Largest size of one step shown in full under prior-guided narrowing (a single web page must
/// not take the whole window from the other likely steps).
pub const FOCUS_MAX_CHARS: usize = 6000;

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
    /// Binary search only, when even the smallest cap does not fit the range: every `stride`-th
    /// step (and the steps at the range's and its halves' boundaries) shown at
    /// `max_chars_per_step`, the `steps_left_out` others replaced by a marker per run.
    Sampled {
        stride: usize,
        steps_shown: usize,
        steps_left_out: usize,
        max_chars_per_step: usize,
    },
    /// Step-by-step only: the growing prefix was shown as its last `steps_shown` steps, earlier
    /// (already cleared) steps summarised by a note.
    SlidingWindow {
        steps_shown: usize,
        max_chars_per_step: usize,
    },
    /// Prior-guided narrowing: the `steps_full` steps the prior ranks highest were shown in full
    /// (each cut to `max_chars_per_step` at most), the other `steps_abridged` abridged to their
    /// first `abridged_chars` characters.
    Focused {
        steps_full: usize,
        steps_abridged: usize,
        max_chars_per_step: usize,
        abridged_chars: usize,
    },
}

impl Strategy {
    /// How aggressive the strategy is (for reporting the strongest one used in a verdict).
    pub fn rank(&self) -> u8 {
        match self {
            Strategy::Full => 0,
            Strategy::TruncateSteps { .. } => 1,
            Strategy::Focused { .. } => 2,
            Strategy::Sampled { .. } => 3,
            Strategy::SlidingWindow { .. } => 4,
            Strategy::Windows { .. } => 5,
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
            Strategy::Sampled {
                stride,
                steps_shown,
                steps_left_out,
                max_chars_per_step,
            } => format!(
                "every {stride}th step: {steps_shown} shown (capped at {max_chars_per_step} chars), {steps_left_out} left out"
            ),
            Strategy::SlidingWindow {
                steps_shown,
                max_chars_per_step,
            } => {
                format!(
                    "sliding window of {steps_shown} steps, capped at {max_chars_per_step} chars"
                )
            }
            Strategy::Focused {
                steps_full,
                steps_abridged,
                max_chars_per_step,
                abridged_chars,
            } => format!(
                "prior-guided: {steps_full} steps in full (<= {max_chars_per_step} chars), {steps_abridged} abridged to {abridged_chars} chars"
            ),
        }
    }
}

/// Cut `text` to at most about `cap` characters, keeping head and tail around a marker.
pub fn truncate_step(text: &str, cap: usize, step: usize) -> (String, bool) {
    cut_step(text, cap, step, "omitted by maslens: long-trace truncation")
}

/// [`truncate_step`] with the marker's wording (`why`) given.
fn cut_step(text: &str, cap: usize, step: usize, why: &str) -> (String, bool) {
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
        format!("{head}\n[... {omitted} characters of step {step} {why} ...]\n{tail}"),
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

/// Append a block to a rendering, blocks separated by a blank line.
fn push_block(out: &mut String, block: &str) {
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(block);
}

/// Append a step as its header line followed by `body`.
fn push_step(out: &mut String, step: &Step, body: &str) {
    push_block(out, &step_header(step));
    out.push('\n');
    out.push_str(body);
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
        push_step(&mut out, step, &body);
    }
    (out, truncated)
}

/// Abridge a step for prior-guided narrowing: its first `cap` characters and a marker.
fn abridge_step(text: &str, cap: usize, step: usize) -> String {
    let n = text.chars().count();
    if n <= cap {
        return text.to_string();
    }
    let head: String = text.chars().take(cap).collect();
    let sep = if head.is_empty() { "" } else { " " };
    format!(
        "{head}{sep}[... {} more characters of step {step} abridged by maslens ...]",
        n - cap
    )
}

/// Render steps `range`: those with `full[position]` capped at `full_cap`, the others abridged to
/// `abridged_cap` characters with the prior-guided narrowing marker.
fn render_mixed(
    trace: &Trace,
    range: Range<usize>,
    full: &[bool],
    full_cap: usize,
    abridged_cap: usize,
) -> String {
    let mut out = String::new();
    let end = range.end.min(trace.steps.len());
    for (pos, step) in trace.steps[range.start.min(end)..end]
        .iter()
        .enumerate()
        .map(|(i, s)| (range.start + i, s))
    {
        let body = step_body(step);
        let body = if full.get(pos).copied().unwrap_or(false) {
            truncate_step(&body, full_cap, step.index).0
        } else {
            abridge_step(&body, abridged_cap, step.index)
        };
        push_step(&mut out, step, &body);
    }
    out
}

/// Prior-guided narrowing of `range` within `budget` tokens (see the module docs). `prior` holds
/// one probability per position in `trace.steps` (missing entries count as 0); `must` is a
/// position shown in full before any other (the step under review in step-by-step).
///
/// The abridged size is the first of [`ABRIDGED_CHARS`], 80, 30, 0 characters whose
/// all-abridged rendering takes at most 60% of the budget (else the smallest that fits at all),
/// so that long traces keep room for steps in full. The steps in full are the top of the prior's
/// ranking (earlier first on ties), as many as fit at [`FOCUS_MAX_CHARS`] each; when not even the
/// first fits, it gets the largest cap that fits. `None` when no all-abridged rendering fits.
pub fn focused(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: usize,
    prior: &[f64],
    must: Option<usize>,
) -> Option<Fitted> {
    let end = range.end.min(trace.steps.len());
    let range = range.start.min(end)..end;
    let p = |i: usize| {
        prior
            .get(i)
            .copied()
            .filter(|x| x.is_finite())
            .unwrap_or(0.0)
    };
    let mut order: Vec<usize> = range.clone().collect();
    order.sort_by(|&a, &b| {
        (Some(b) == must)
            .cmp(&(Some(a) == must))
            .then(p(b).total_cmp(&p(a)))
            .then(a.cmp(&b))
    });
    let render_top = |k: usize, cap: usize, abridged: usize| {
        let mut full = vec![false; trace.steps.len()];
        for &i in &order[..k] {
            full[i] = true;
        }
        let text = render_mixed(trace, range.clone(), &full, cap, abridged);
        let tokens = model.count_tokens(&text);
        (text, tokens)
    };
    let mut chosen = None;
    for abridged in [ABRIDGED_CHARS, 80, 30, 0] {
        let (text, tokens) = render_top(0, FOCUS_MAX_CHARS, abridged);
        if tokens <= budget {
            let roomy = tokens * 10 <= budget * 6;
            chosen = Some((abridged, text, tokens));
            if roomy {
                break;
            }
        }
    }
    let (abridged, text, tokens) = chosen?;
    // Largest k whose rendering fits (tokens grow with k).
    let mut best = (0, FOCUS_MAX_CHARS, text, tokens);
    let (mut lo, mut hi) = (1, order.len());
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let (text, tokens) = render_top(mid, FOCUS_MAX_CHARS, abridged);
        if tokens <= budget {
            best = (mid, FOCUS_MAX_CHARS, text, tokens);
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if best.0 == 0 && !order.is_empty() {
        // Not even the top step fits at the full cap: the largest cap that fits for it.
        let (mut lo, mut hi) = (abridged + 1, FOCUS_MAX_CHARS - 1);
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let (text, tokens) = render_top(1, mid, abridged);
            if tokens <= budget {
                best = (1, mid, text, tokens);
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
    }
    let (k, cap, text, tokens) = best;
    Some(Fitted {
        text,
        strategy: Strategy::Focused {
            steps_full: k,
            steps_abridged: order.len() - k,
            max_chars_per_step: cap,
            abridged_chars: abridged,
        },
        tokens,
    })
}

/// The note a prompt carries about a rendering (only prior-guided narrowing needs one: the
/// other strategies' markers speak for themselves).
pub fn view_note(strategy: &Strategy) -> Option<String> {
    match strategy {
        Strategy::Focused {
            steps_full,
            steps_abridged,
            ..
        } => Some(format!(
            "The trace is too long for the context window: the {steps_full} steps that a learned prior ranks most likely to be decisive are shown in full; the other {steps_abridged} steps are abridged to their first characters (marked \"abridged by maslens\"). Any step may still be the decisive one."
        )),
        Strategy::Sampled {
            stride,
            max_chars_per_step,
            ..
        } => Some(format!(
            "The steps in question do not fit the context window: only every {stride}th step is shown, plus the first and last step of each half, each cut to {max_chars_per_step} characters; each run of steps left out is marked \"left out by maslens\". Judge from what is shown."
        )),
        _ => None,
    }
}

/// Render the positions of `range` marked in `shown` (capped at `cap` characters); each run of
/// other steps becomes one marker line. Returns the text and how many steps were left out.
fn render_selected(
    trace: &Trace,
    range: Range<usize>,
    shown: &[bool],
    cap: usize,
) -> (String, usize) {
    let mut out = String::new();
    let mut left_out = 0;
    let mut gap: Option<(usize, usize)> = None;
    let end = range.end.min(trace.steps.len());
    let gap_marker = |(a, b): (usize, usize)| {
        format!("[... steps {a} to {b} left out by maslens: long-trace sampling ...]")
    };
    for pos in range.start.min(end)..end {
        let step = &trace.steps[pos];
        if shown.get(pos - range.start).copied().unwrap_or(true) {
            if let Some(g) = gap.take() {
                push_block(&mut out, &gap_marker(g));
            }
            let (body, _) = truncate_step(&step_body(step), cap, step.index);
            push_step(&mut out, step, &body);
        } else {
            left_out += 1;
            gap = Some(gap.map_or((step.index, step.index), |(a, _)| (a, step.index)));
        }
    }
    if let Some(g) = gap {
        push_block(&mut out, &gap_marker(g));
    }
    (out, left_out)
}

/// Binary search's last resort when even the smallest cap does not fit `range`: every
/// `stride`-th step of the range (the smallest stride >= 2 that fits `budget`) plus the
/// positions in `keep` (the boundaries of the halves), each capped at `cap` characters, the
/// other steps replaced by one marker per run. `None` when not even `keep` alone fits.
pub fn sampled(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: usize,
    keep: &[usize],
    cap: usize,
) -> Option<Fitted> {
    let n = range.len();
    for stride in 2..=n.max(2) {
        let shown: Vec<bool> = range
            .clone()
            .map(|p| (p - range.start).is_multiple_of(stride) || keep.contains(&p))
            .collect();
        let (text, left_out) = render_selected(trace, range.clone(), &shown, cap);
        let tokens = model.count_tokens(&text);
        if tokens <= budget {
            return Some(Fitted {
                text,
                strategy: Strategy::Sampled {
                    stride,
                    steps_shown: n - left_out,
                    steps_left_out: left_out,
                    max_chars_per_step: cap,
                },
                tokens,
            });
        }
    }
    None
}

/// [`fit`], with prior-guided narrowing first when `prior` is given and the range does not fit
/// in full.
pub fn fit_guided(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: Option<usize>,
    min_cap: usize,
    prior: Option<(&[f64], Option<usize>)>,
) -> Option<Fitted> {
    if let (Some(b), Some((probs, must))) = (budget, prior) {
        let (full, _) = render_steps(trace, range.clone(), None);
        let full_tokens = model.count_tokens(&full);
        if full_tokens <= b {
            return Some(Fitted {
                text: full,
                strategy: Strategy::Full,
                tokens: full_tokens,
            });
        }
        if let Some(f) = focused(model, trace, range.clone(), b, probs, must) {
            return Some(f);
        }
    }
    fit(model, trace, range, budget, min_cap)
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

    #[test]
    fn focused_shows_the_prior_top_steps_in_full_and_abridges_the_rest() {
        let t = trace(10, 2000);
        let m = ScriptedModel::new("fixture");
        let mut prior = vec![0.01; 10];
        prior[6] = 0.5;
        prior[2] = 0.3;
        let all = render_steps(&t, 0..10, None).0;
        let budget = m.count_tokens(&all) / 2;
        let f = focused(&m, &t, 0..10, budget, &prior, None).unwrap();
        assert!(f.tokens <= budget);
        let Strategy::Focused {
            steps_full,
            steps_abridged,
            max_chars_per_step,
            ..
        } = f.strategy
        else {
            panic!("unexpected {:?}", f.strategy)
        };
        assert_eq!(steps_full + steps_abridged, 10);
        assert!(steps_full >= 2, "room for the two top steps: {steps_full}");
        assert_eq!(max_chars_per_step, FOCUS_MAX_CHARS);
        for i in [2, 6] {
            assert!(!f.text.contains(&format!("characters of step {i} abridged")));
        }
        assert!(f.text.contains("characters of step 9 abridged by maslens"));
        // A larger budget never shows fewer steps in full.
        let g = focused(&m, &t, 0..10, budget * 2, &prior, None).unwrap();
        let Strategy::Focused {
            steps_full: more, ..
        } = g.strategy
        else {
            panic!("unexpected {:?}", g.strategy)
        };
        assert!(more >= steps_full);
        // A tight budget abridges harder before giving up.
        let h = focused(&m, &t, 0..10, 320, &prior, None).unwrap();
        assert!(
            matches!(h.strategy, Strategy::Focused { abridged_chars, .. } if abridged_chars < ABRIDGED_CHARS),
            "{:?}",
            h.strategy
        );
        // Not even the barest rendering fits: None (the caller falls back to windows).
        assert!(focused(&m, &t, 0..10, 20, &prior, None).is_none());
    }

    #[test]
    fn focused_puts_the_must_step_first_and_shrinks_a_huge_top_step() {
        let t = trace(6, 20_000);
        let m = ScriptedModel::new("fixture");
        let prior = [0.9, 0.0, 0.0, 0.0, 0.0, 0.0];
        let abridged = render_mixed(&t, 0..6, &[false; 6], FOCUS_MAX_CHARS, ABRIDGED_CHARS);
        let budget = m.count_tokens(&abridged) + 300;
        let f = focused(&m, &t, 0..6, budget, &prior, Some(4)).unwrap();
        let Strategy::Focused {
            steps_full,
            max_chars_per_step,
            ..
        } = f.strategy
        else {
            panic!("unexpected {:?}", f.strategy)
        };
        assert_eq!(steps_full, 1);
        assert!(max_chars_per_step < FOCUS_MAX_CHARS && max_chars_per_step > ABRIDGED_CHARS);
        assert!(
            f.text.contains("characters of step 0 abridged"),
            "prior top yields to must"
        );
        assert!(f.text.contains("characters of step 4 omitted by maslens"));
        assert!(f.tokens <= budget);
    }

    #[test]
    fn fit_guided_uses_full_when_it_fits_and_plain_fit_without_prior() {
        let t = trace(4, 2000);
        let m = ScriptedModel::new("fixture");
        let prior = [0.25; 4];
        let f = fit_guided(
            &m,
            &t,
            0..4,
            Some(10_000),
            MIN_STEP_CHARS,
            Some((&prior, None)),
        );
        assert_eq!(f.unwrap().strategy, Strategy::Full);
        let f = fit_guided(&m, &t, 0..4, Some(1000), MIN_STEP_CHARS, None).unwrap();
        assert!(matches!(f.strategy, Strategy::TruncateSteps { .. }));
        let f = fit_guided(
            &m,
            &t,
            0..4,
            Some(1000),
            MIN_STEP_CHARS,
            Some((&prior, None)),
        );
        assert!(matches!(f.unwrap().strategy, Strategy::Focused { .. }));
    }
}
