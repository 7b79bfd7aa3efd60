//! The one step renderer of maslens: how trace steps are written into prompts, how long steps
//! are cut, and how long traces are split into windows that fit a model's context. Locate,
//! implicit and credit all render steps through this crate, so a step reads the same to every
//! method and a change of format is made (and versioned) once.
//!
//! # Step format
//! A step is one block: a header line, then its body.
//! ```text
//! Step <index> | agent: <agent>[ | speaker: <speaker>]
//! <content>
//! [tool call <name>: <arguments>]        (one line per tool call)
//! ```
//! `<index>` is the source index (`Step::index`), so labels and answers line up with the trace;
//! the `speaker` part appears only when the raw speaker is set and differs from the agent.
//! Blocks are separated by one blank line ([`render`], [`render_steps`]). Nothing else of the
//! trace (ground truth, outcome, labels, metadata) is ever rendered here.
//!
//! # Cut rules
//! Every cut is explicit: the text says what maslens left out, never silently.
//! - **truncation** ([`truncate_step`]): a body longer than the per-step cap (characters) keeps
//!   its head (2/3 of the cap) and tail (1/3) around
//!   `[... N characters of step K omitted by maslens: long-trace truncation ...]`;
//! - **abridging** (prior-guided narrowing, [`focused`]): a body keeps its first characters and
//!   `[... N more characters of step K abridged by maslens ...]`;
//! - **gaps** ([`gap_marker`]): a run of steps left out becomes one block
//!   `[... steps A to B left out by maslens: <why> ...]` (sampling, or history beyond the budget);
//! - text that is not a step (a role description) is cut like a step, with
//!   `[... N characters omitted by maslens ...]` ([`truncate_text`]).
//!
//! # Long traces
//! When a range of steps does not fit the token budget left by the model's context window, the
//! strategy is chosen automatically and never silently:
//! 1. [`Strategy::Full`]: everything fits;
//! 2. [`Strategy::TruncateSteps`]: each step longer than a per-step character cap is truncated;
//!    the cap is the largest that fits, and must be at least [`MIN_STEP_CHARS`] ([`fit`]);
//! 3. windows: when even the minimum cap does not fit, the steps are cut into consecutive windows
//!    that fit ([`plan_windows`]); the method carries the task (and, in locate, a running
//!    summary) from window to window.
//!
//! **Window planning** ([`plan_windows`], [`extend_window`], [`tail_window`]) measures the
//! rendered text itself (not a sum of per-step estimates): a window grows one step at a time
//! while its rendering fits the budget; the next window starts `overlap` steps before the
//! previous one ended (always at least one step further). A window never exceeds the budget,
//! except when one step alone does not fit even after its cap was halved down to
//! [`MIN_WINDOW_CAP`] characters (then that step is its own window at that cap).
//!
//! **Prior-guided narrowing** (opt-in, locate's `LocateConfig::narrow_with_prior`, CLI
//! `--prior-narrowing`): when a per-step prior (maslens-prior's distribution, or any external
//! one) is given and the full trace does not fit, [`focused`] replaces 2 and 3: every step stays
//! in the prompt, the steps the prior ranks most likely decisive are shown in full (each at most
//! [`FOCUS_MAX_CHARS`]), as many as fit, and every other step is abridged to their first
//! [`ABRIDGED_CHARS`] characters (fewer, down to none, on very long traces). One call sees the
//! whole trace instead of several windows. When even the all-abridged rendering does not fit,
//! the caller falls back to 2 and 3. The verdict reports [`Strategy::Focused`].

mod hierarchy;
pub mod steering;

pub use hierarchy::{fit_hierarchical, fit_milestones, hierarchical_text, LEVEL_CHARS};

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
    /// ECHO's hierarchical context ([`hierarchy`]): the steps within 1 of `focus_step` at
    /// `level_chars[0]` characters at most, 2-3 away at `level_chars[1]`, 4-6 away at
    /// `level_chars[2]`, the rest at `level_chars[3]`.
    Hierarchical {
        focus_step: usize,
        level_chars: [usize; 4],
    },
}

impl Strategy {
    /// How aggressive the strategy is (for reporting the strongest one used in a verdict).
    pub fn rank(&self) -> u8 {
        match self {
            Strategy::Full => 0,
            Strategy::TruncateSteps { .. } => 1,
            Strategy::Focused { .. } | Strategy::Hierarchical { .. } => 2,
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
            Strategy::Hierarchical {
                focus_step,
                level_chars: [l1, l2, l3, l4],
            } => format!(
                "hierarchical around step {focus_step}: <= {l1} chars within 1 step, {l2} within 3, {l3} within 6, {l4} beyond"
            ),
        }
    }
}

/// Cut `text` to at most about `cap` characters, keeping head and tail around a marker
/// `[... N characters of step K omitted by maslens: long-trace truncation ...]` (`K` = `step`).
/// Returns the text and whether it was cut.
pub fn truncate_step(text: &str, cap: usize, step: usize) -> (String, bool) {
    cut_head_tail(text, cap, |omitted| {
        format!("[... {omitted} characters of step {step} omitted by maslens: long-trace truncation ...]")
    })
}

/// Cut text that is not a step (a role description, say) like [`truncate_step`], with the marker
/// `[... N characters omitted by maslens ...]`. Returns the text and whether it was cut.
pub fn truncate_text(text: &str, cap: usize) -> (String, bool) {
    cut_head_tail(text, cap, |omitted| {
        format!("[... {omitted} characters omitted by maslens ...]")
    })
}

/// The cut rule: longer than `cap` characters keeps its first 2/3 of `cap` and its last 1/3,
/// with `marker(omitted)` on a line of its own between them.
fn cut_head_tail(text: &str, cap: usize, marker: impl FnOnce(usize) -> String) -> (String, bool) {
    let n = text.chars().count();
    if n <= cap {
        return (text.to_string(), false);
    }
    let head_n = cap * 2 / 3;
    let tail_n = cap - head_n;
    let head: String = text.chars().take(head_n).collect();
    let tail: String = text.chars().skip(n - tail_n).collect();
    let omitted = n - head_n - tail_n;
    (format!("{head}\n{}\n{tail}", marker(omitted)), true)
}

/// Body of a step: its content, then one `[tool call <name>: <arguments>]` line per tool call.
pub fn step_body(step: &Step) -> String {
    let mut body = step.content.clone();
    for call in &step.tool_calls {
        body.push_str(&format!("\n[tool call {}: {}]", call.name, call.arguments));
    }
    body
}

/// Header line of a step: `Step <index> | agent: <agent>[ | speaker: <speaker>]`.
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

/// The block that stands for the run of steps `first..=last` (source indices) left out of a
/// rendering: `[... steps <first> to <last> left out by maslens: <why> ...]`.
pub fn gap_marker(first: usize, last: usize, why: &str) -> String {
    format!("[... steps {first} to {last} left out by maslens: {why} ...]")
}

/// Append a block to a rendering, blocks separated by a blank line.
fn push_block(out: &mut String, block: &str) {
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(block);
}

/// Append a step as its header line followed by `body`.
pub(crate) fn push_step(out: &mut String, step: &Step, body: &str) {
    push_block(out, &step_header(step));
    out.push('\n');
    out.push_str(body);
}

/// One step as a block (header line, then its body), the body truncated to `cap` characters when
/// given. Returns the text and whether the body was cut.
pub fn render_step(step: &Step, cap: Option<usize>) -> (String, bool) {
    let (out, cut) = render([step], cap);
    (out, cut > 0)
}

/// Render `steps` in order, blocks separated by a blank line, each body truncated to `cap`
/// characters when given. The steps need not be consecutive (credit renders one agent's
/// messages). Returns the text and how many steps were truncated.
pub fn render<'a>(
    steps: impl IntoIterator<Item = &'a Step>,
    cap: Option<usize>,
) -> (String, usize) {
    let mut out = String::new();
    let mut truncated = 0;
    for step in steps {
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

/// Positions `range` of `steps`, clamped to the slice (an empty slice when out of bounds).
fn clamp(steps: &[Step], range: Range<usize>) -> &[Step] {
    let end = range.end.min(steps.len());
    &steps[range.start.min(end)..end]
}

/// Render steps `range` (positions in `trace.steps`), each capped at `cap` characters when given.
/// Returns the text and how many steps were truncated.
pub fn render_steps(trace: &Trace, range: Range<usize>, cap: Option<usize>) -> (String, usize) {
    render(clamp(&trace.steps, range), cap)
}

/// Abridge a step for prior-guided narrowing: its first `cap` characters and a marker.
pub(crate) fn abridge_step(text: &str, cap: usize, step: usize) -> String {
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
    let fits = |(text, tokens): (String, usize)| (tokens <= budget).then_some((text, tokens));
    let mut best = (0, FOCUS_MAX_CHARS, text, tokens);
    if let Some((k, (text, tokens))) = largest_fitting(1, order.len(), |k| {
        fits(render_top(k, FOCUS_MAX_CHARS, abridged))
    }) {
        best = (k, FOCUS_MAX_CHARS, text, tokens);
    } else if !order.is_empty() {
        // Not even the top step fits at the full cap: the largest cap that fits for it.
        if let Some((cap, (text, tokens))) =
            largest_fitting(abridged + 1, FOCUS_MAX_CHARS - 1, |cap| {
                fits(render_top(1, cap, abridged))
            })
        {
            best = (1, cap, text, tokens);
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
        Strategy::Hierarchical {
            focus_step,
            level_chars: [_, l2, l3, l4],
        } => Some(format!(
            "The trace is shown as a hierarchy around step {focus_step}: the steps next to it in full, those 2-3 steps away cut to about {l2} characters, 4-6 away to their first {l3}, the others to their first {l4} (every cut is marked by maslens). Any step may still be the decisive one."
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
    let sampling_gap = |(a, b): (usize, usize)| gap_marker(a, b, "long-trace sampling");
    for pos in range.start.min(end)..end {
        let step = &trace.steps[pos];
        if shown.get(pos - range.start).copied().unwrap_or(true) {
            if let Some(g) = gap.take() {
                push_block(&mut out, &sampling_gap(g));
            }
            let (body, _) = truncate_step(&step_body(step), cap, step.index);
            push_step(&mut out, step, &body);
        } else {
            left_out += 1;
            gap = Some(gap.map_or((step.index, step.index), |(a, _)| (a, step.index)));
        }
    }
    if let Some(g) = gap {
        push_block(&mut out, &sampling_gap(g));
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
    let (cap, (text, n, tokens)) = largest_fitting(min_cap + 1, longest, |cap| {
        let r = try_cap(cap);
        (r.2 <= budget).then_some(r)
    })
    .unwrap_or((min_cap, (text, n, tokens)));
    Some(Fitted {
        text,
        strategy: Strategy::TruncateSteps {
            max_chars_per_step: cap,
            steps_truncated: n,
        },
        tokens,
    })
}

/// The largest `x` in `lo..=hi` for which `fits` gives a value, with that value, by binary search
/// (`fits` must be monotone: a value up to some `x`, then none); `None` when none fits. The one
/// search behind every "largest cap / most steps that fit the budget" choice of this crate.
fn largest_fitting<T>(
    mut lo: usize,
    mut hi: usize,
    mut fits: impl FnMut(usize) -> Option<T>,
) -> Option<(usize, T)> {
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        match fits(mid) {
            Some(v) => {
                best = Some((mid, v));
                lo = mid + 1;
            }
            None if mid == 0 => break,
            None => hi = mid - 1,
        }
    }
    best
}

/// Smallest per-step cap a window planner halves a step down to when that step alone does not
/// fit the budget (see [`Planner::extend`]).
pub const MIN_WINDOW_CAP: usize = 16;

/// A window of consecutive positions `start..end` in the step slice it was planned over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    pub start: usize,
    pub end: usize,
}

impl Window {
    /// The positions as a range.
    pub fn range(self) -> Range<usize> {
        self.start..self.end
    }

    /// Number of steps in the window.
    pub fn len(self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the window holds no step.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A planned window and its rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWindow {
    pub window: Window,
    /// The per-step cap `text` was rendered at: the planner's cap, or less for a step that did
    /// not fit alone.
    pub cap: usize,
    pub text: String,
    /// Tokens of `text` as counted by the planner.
    pub tokens: usize,
}

/// The window planner: which consecutive steps of `steps` go into one prompt, each step
/// truncated to `cap` characters, so that the rendering (measured with `count`, the model's
/// token counter) stays within `budget` tokens (`None`: no limit, everything fits).
#[derive(Clone, Copy)]
pub struct Planner<'a> {
    pub steps: &'a [Step],
    pub count: &'a dyn Fn(&str) -> usize,
    pub budget: Option<usize>,
    pub cap: usize,
}

impl Planner<'_> {
    fn fits(&self, tokens: usize) -> bool {
        self.budget.is_none_or(|b| tokens <= b)
    }

    fn planned(&self, window: Window, cap: usize, text: String) -> PlannedWindow {
        let tokens = (self.count)(&text);
        PlannedWindow {
            window,
            cap,
            text,
            tokens,
        }
    }

    /// The window from `start` on: first `start..min_end`, then grown one step at a time up to
    /// `max_end` while the rendering fits. When `start..min_end` does not fit even at the cap,
    /// the cap is halved (down to [`MIN_WINDOW_CAP`]) until it fits, and the window is not grown.
    /// Positions are clamped to the slice; `min_end` is at least `start + 1`.
    pub fn extend(&self, start: usize, min_end: usize, max_end: usize) -> PlannedWindow {
        let max_end = max_end.min(self.steps.len());
        let start = start.min(max_end);
        let mut end = min_end.max(start + 1).min(max_end);
        let render_at = |end: usize, cap: usize| render(&self.steps[start..end], Some(cap)).0;
        // Everything left fits: no need to grow step by step.
        let all = render_at(max_end, self.cap);
        let all_tokens = (self.count)(&all);
        if self.fits(all_tokens) {
            return PlannedWindow {
                window: Window {
                    start,
                    end: max_end,
                },
                cap: self.cap,
                text: all,
                tokens: all_tokens,
            };
        }
        let mut text = render_at(end, self.cap);
        if !self.fits((self.count)(&text)) {
            // Too long even at the cap: shrink it until it fits.
            let mut cap = self.cap;
            while cap > MIN_WINDOW_CAP && !self.fits((self.count)(&text)) {
                cap /= 2;
                text = render_at(end, cap);
            }
            return self.planned(Window { start, end }, cap, text);
        }
        while end < max_end {
            let next = render_at(end + 1, self.cap);
            if !self.fits((self.count)(&next)) {
                break;
            }
            text = next;
            end += 1;
        }
        self.planned(Window { start, end }, self.cap, text)
    }

    /// Cover `range` with consecutive windows, each as long as fits ([`Planner::extend`]); each
    /// window after the first starts `overlap` steps before the previous one ended (and always
    /// at least one step after the previous one started), so a step near a boundary is seen
    /// with its context. Empty when the range is.
    pub fn plan(&self, range: Range<usize>, overlap: usize) -> Vec<PlannedWindow> {
        let end = range.end.min(self.steps.len());
        let mut out = Vec::new();
        let mut start = range.start;
        while start < end {
            let w = self.extend(start, start + 1, end);
            let stop = w.window.end;
            out.push(w);
            if stop >= end {
                break;
            }
            start = stop.saturating_sub(overlap).max(start + 1);
        }
        out
    }

    /// The latest steps of `range` that fit, in order; the steps before them (if any) become one
    /// [`gap_marker`] block saying `why`, first in the text and counted in the budget. The window
    /// may be empty (only the marker) when not even the last step fits.
    pub fn tail(&self, range: Range<usize>, why: &str) -> PlannedWindow {
        let end = range.end.min(self.steps.len());
        let first = range.start.min(end);
        let render_from = |start: usize| {
            let mut out = String::new();
            if start > first {
                push_block(
                    &mut out,
                    &gap_marker(self.steps[first].index, self.steps[start - 1].index, why),
                );
            }
            if start < end {
                push_block(&mut out, &render(&self.steps[start..end], Some(self.cap)).0);
            }
            out
        };
        let all = render_from(first);
        if self.fits((self.count)(&all)) {
            return self.planned(Window { start: first, end }, self.cap, all);
        }
        let mut start = end;
        let mut text = render_from(start);
        while start > first {
            let next = render_from(start - 1);
            if !self.fits((self.count)(&next)) {
                break;
            }
            text = next;
            start -= 1;
        }
        self.planned(Window { start, end }, self.cap, text)
    }
}

/// Split `range` of `trace.steps` into consecutive windows (no overlap) that each fit `budget`
/// at cap `cap` (a single step that does not fit alone becomes its own window, truncated
/// further to fit): [`Planner::plan`] counting tokens with `model`.
pub fn windows(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: usize,
    cap: usize,
) -> Vec<(Range<usize>, String)> {
    let count = |t: &str| model.count_tokens(t);
    let planner = Planner {
        steps: &trace.steps,
        count: &count,
        budget: Some(budget),
        cap,
    };
    planner
        .plan(range, 0)
        .into_iter()
        .map(|w| (w.window.range(), w.text))
        .collect()
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
mod tests;
