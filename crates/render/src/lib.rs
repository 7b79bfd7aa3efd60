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

pub mod steering;

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
fn push_step(out: &mut String, step: &Step, body: &str) {
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

    fn step(index: usize, agent: &str, speaker: &str, content: &str) -> Step {
        Step {
            index,
            agent: agent.into(),
            speaker: speaker.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    /// Tokens = 10 per step header, so budgets count steps (the planner only sees the text).
    fn per_step(text: &str) -> usize {
        text.matches("Step ").count() * 10
    }

    #[test]
    fn step_format_is_exact() {
        let mut t = Trace::new("t");
        t.steps = vec![
            step(3, "Orchestrator", "Orchestrator (thought)", "Plan: search"),
            step(4, "WebSurfer", "WebSurfer", "searching"),
            step(7, "Coder", "", "x = 1"),
        ];
        t.steps[1].tool_calls.push(maslens_trace::ToolCall {
            id: None,
            name: "search".into(),
            arguments: r#"{"q":"paris"}"#.into(),
        });
        let (text, cut) = render_steps(&t, 0..3, None);
        assert_eq!(cut, 0);
        assert_eq!(
            text,
            "Step 3 | agent: Orchestrator | speaker: Orchestrator (thought)\nPlan: search\n\n\
             Step 4 | agent: WebSurfer\nsearching\n[tool call search: {\"q\":\"paris\"}]\n\n\
             Step 7 | agent: Coder\nx = 1"
        );
        // The same text from a slice, from references, and one block per step.
        assert_eq!(render(&t.steps, None).0, text);
        assert_eq!(render(t.steps.iter().rev().rev(), None).0, text);
        assert_eq!(
            render_step(&t.steps[2], None),
            ("Step 7 | agent: Coder\nx = 1".to_string(), false)
        );
        // Out-of-range positions are clamped.
        assert_eq!(
            render_steps(&t, 2..99, None).0,
            "Step 7 | agent: Coder\nx = 1"
        );
        assert_eq!(render_steps(&t, 5..9, None).0, "");
    }

    #[test]
    fn cut_markers_are_explicit() {
        let body = format!("{}{}", "a".repeat(100), "b".repeat(50));
        let (cut, did) = truncate_step(&body, 30, 12);
        assert!(did);
        assert_eq!(
            cut,
            format!(
                "{}\n[... 120 characters of step 12 omitted by maslens: long-trace truncation ...]\n{}",
                "a".repeat(20),
                "b".repeat(10)
            )
        );
        let (cut, did) = truncate_text(&body, 30);
        assert!(did);
        assert!(cut.contains("\n[... 120 characters omitted by maslens ...]\n"));
        assert_eq!(truncate_text("short", 30), ("short".to_string(), false));
        assert_eq!(
            gap_marker(3, 9, "long-trace sampling"),
            "[... steps 3 to 9 left out by maslens: long-trace sampling ...]"
        );
        assert_eq!(
            abridge_step(&body, 10, 5),
            "aaaaaaaaaa [... 140 more characters of step 5 abridged by maslens ...]"
        );
        // A cut step counts once in the truncation count, and characters (not bytes) are counted.
        let t = Trace {
            steps: vec![step(0, "A", "", &"é".repeat(50)), step(1, "B", "", "ok")],
            ..Trace::new("t")
        };
        let (text, n) = render_steps(&t, 0..2, Some(30));
        assert_eq!(n, 1);
        assert!(text.contains("20 characters of step 0 omitted"));
    }

    #[test]
    fn sampling_marks_each_run_of_left_out_steps() {
        let t = trace(9, 10);
        let shown = [true, false, false, true, true, false, true, false, false];
        let (text, left_out) = render_selected(&t, 0..9, &shown, 100);
        assert_eq!(left_out, 5);
        assert!(text.contains(&gap_marker(1, 2, "long-trace sampling")));
        assert!(text.contains(&gap_marker(5, 5, "long-trace sampling")));
        assert!(text.ends_with(&gap_marker(7, 8, "long-trace sampling")));
    }

    fn planner<'a>(
        t: &'a Trace,
        count: &'a dyn Fn(&str) -> usize,
        budget: Option<usize>,
    ) -> Planner<'a> {
        Planner {
            steps: &t.steps,
            count,
            budget,
            cap: 1000,
        }
    }

    #[test]
    fn plan_covers_everything_with_overlap() {
        let t = trace(10, 5);
        let w: Vec<Window> = planner(&t, &per_step, Some(30))
            .plan(0..10, 1)
            .into_iter()
            .map(|p| p.window)
            .collect();
        assert_eq!(w[0], Window { start: 0, end: 3 });
        assert_eq!(w[1], Window { start: 2, end: 5 });
        assert_eq!(w.last().unwrap().end, 10);
        for i in 0..10 {
            assert!(
                w.iter().any(|x| x.start <= i && i < x.end),
                "step {i} not covered"
            );
        }
        // An overlap as large as a window still moves forward one step at a time.
        let w = planner(&t, &per_step, Some(20)).plan(0..10, 5);
        assert!(w
            .windows(2)
            .all(|p| p[1].window.start == p[0].window.start + 1));
        assert_eq!(w.last().unwrap().window.end, 10);
        // No budget, or a budget everything fits in: one window; an empty range: none.
        for budget in [None, Some(1000)] {
            let w = planner(&t, &per_step, budget).plan(0..10, 2);
            assert_eq!(w.len(), 1);
            assert_eq!(w[0].window, Window { start: 0, end: 10 });
            assert_eq!(w[0].text, render_steps(&t, 0..10, Some(1000)).0);
        }
        assert!(planner(&t, &per_step, Some(30)).plan(4..4, 1).is_empty());
        // A sub-range stays inside it.
        let w = planner(&t, &per_step, Some(30)).plan(4..8, 0);
        assert_eq!(
            w.iter().map(|p| p.window.range()).collect::<Vec<_>>(),
            vec![4..7, 7..8]
        );
    }

    #[test]
    fn a_step_too_long_alone_is_shrunk_to_fit_and_the_plan_moves_on() {
        let mut t = trace(3, 10);
        t.steps[1].content = "y".repeat(5000);
        let m = ScriptedModel::new("fixture");
        let count = |s: &str| m.count_tokens(s);
        let budget = 200;
        let w = planner(&t, &count, Some(budget)).plan(0..3, 2);
        assert!(w
            .iter()
            .all(|p| p.tokens <= budget && p.tokens == m.count_tokens(&p.text)));
        let big = w
            .iter()
            .find(|p| p.window == Window { start: 1, end: 2 })
            .unwrap();
        assert!(big.cap < 1000 && big.text.contains("characters of step 1 omitted by maslens"));
        assert_eq!(w.last().unwrap().window.end, 3);
        assert!(w.windows(2).all(|p| p[1].window.start > p[0].window.start));
    }

    #[test]
    fn extend_keeps_the_required_steps_then_grows() {
        let t = trace(10, 5);
        // Steps 2..5 are required, then as many as fit (5 steps of 10 tokens).
        let w = planner(&t, &per_step, Some(50)).extend(2, 5, 10);
        assert_eq!(w.window, Window { start: 2, end: 7 });
        let w = planner(&t, &per_step, None).extend(2, 5, 10);
        assert_eq!(w.window, Window { start: 2, end: 10 });
        // Out-of-range bounds are clamped.
        let w = planner(&t, &per_step, None).extend(8, 20, 20);
        assert_eq!(w.window, Window { start: 8, end: 10 });
    }

    #[test]
    fn tail_keeps_the_latest_steps_and_marks_the_rest() {
        let t = trace(10, 5);
        // The marker has no "Step " header, so 3 steps fit in 30.
        let w = planner(&t, &per_step, Some(30)).tail(0..8, "history beyond the budget");
        assert_eq!(w.window, Window { start: 5, end: 8 });
        assert!(w.text.starts_with("[... steps 0 to 4 left out by maslens: history beyond the budget ...]\n\nStep 5 | agent: A1\n"));
        assert!(w.text.ends_with("Step 7 | agent: A1\nxxxxx"));
        assert!(w.tokens <= 30);
        // Everything fits: no marker; nothing fits: only the marker.
        let w = planner(&t, &per_step, None).tail(0..8, "x");
        assert_eq!(
            (w.window, w.text.contains("left out")),
            (Window { start: 0, end: 8 }, false)
        );
        let w = planner(&t, &per_step, Some(5)).tail(0..8, "x");
        assert_eq!(w.window, Window { start: 8, end: 8 });
        assert_eq!(w.text, gap_marker(0, 7, "x"));
        assert_eq!(planner(&t, &per_step, Some(5)).tail(0..0, "x").text, "");
    }

    #[test]
    fn windows_is_the_plan_without_overlap() {
        let t = trace(10, 2000);
        let m = ScriptedModel::new("fixture");
        let count = |s: &str| m.count_tokens(s);
        let plan = Planner {
            steps: &t.steps,
            count: &count,
            budget: Some(300),
            cap: MIN_STEP_CHARS,
        }
        .plan(0..10, 0);
        let ws = windows(&m, &t, 0..10, 300, MIN_STEP_CHARS);
        assert_eq!(ws.len(), plan.len());
        for ((r, text), p) in ws.iter().zip(&plan) {
            assert_eq!((r.clone(), text), (p.window.range(), &p.text));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn planned_windows_fit_cover_and_overlap_as_asked(
            lens in proptest::collection::vec(0usize..3000, 1..25),
            budget in 150usize..2000,
            overlap in 0usize..4,
        ) {
            let mut t = Trace::new("p");
            t.steps = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| step(i, &format!("A{}", i % 3), "", &"z".repeat(n)))
                .collect();
            let m = ScriptedModel::new("fixture");
            let count = |s: &str| m.count_tokens(s);
            let p = Planner { steps: &t.steps, count: &count, budget: Some(budget), cap: MIN_STEP_CHARS };
            let w = p.plan(0..t.steps.len(), overlap);
            proptest::prop_assert_eq!(w[0].window.start, 0);
            proptest::prop_assert_eq!(w.last().unwrap().window.end, t.steps.len());
            for x in &w {
                proptest::prop_assert!(!x.window.is_empty());
                proptest::prop_assert!(x.tokens <= budget, "{} > {budget}", x.tokens);
            }
            for pair in w.windows(2) {
                let (a, b) = (pair[0].window, pair[1].window);
                proptest::prop_assert!(b.start > a.start && b.start <= a.end);
                proptest::prop_assert!(a.end - b.start <= overlap);
            }
        }
    }

    /// `windows` as locate had it before the shared planner (kept to prove the output unchanged).
    fn windows_before(
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn locate_windows_are_unchanged(
            lens in proptest::collection::vec(0usize..3000, 1..20),
            budget in 50usize..1500,
        ) {
            let mut t = Trace::new("p");
            t.steps = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| step(i, "A", "", &"w ".repeat(n / 2)))
                .collect();
            let m = ScriptedModel::new("fixture");
            let n = t.steps.len();
            proptest::prop_assert_eq!(
                windows(&m, &t, 0..n, budget, MIN_STEP_CHARS),
                windows_before(&m, &t, 0..n, budget, MIN_STEP_CHARS)
            );
        }
    }
}
