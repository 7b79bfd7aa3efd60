//! The terminal renderer of a trace (`maslens show`): one block per step (index, speaker coloured
//! per agent, content wrapped to the width and cut to `lines` lines unless `full`), a marker on the
//! labelled decisive step and on implicit-failure steps.
//!
//! Trace data is untrusted: every string from it is passed through [`inline`] or [`text`], which
//! show control characters (C0, DEL, C1) and bidi overrides visibly as `\u{..}`, so a trace cannot
//! clear the screen, set the title, move the cursor, hide lines or forge a marker.

use maslens_trace::{AgentKind, Trace};
use std::borrow::Cow;
use std::fmt::Write as _;

/// Rendering options.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    pub full: bool,
    pub lines: usize,
    pub width: usize,
}

/// Whether `c` must not reach the terminal as is: control characters (C0, DEL, C1), the
/// bidirectional overrides, embeddings, isolates and marks, and the invisible characters that
/// hide or split text (zero-width spaces and joiners, word joiners, the byte-order mark, the
/// line and paragraph separators, interlinear annotations, soft hyphens and the tag characters
/// that can smuggle a second, invisible text).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{ad}')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e007f}')
}

fn escape<'a>(s: &'a str, keep: &[char]) -> Cow<'a, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep.contains(&c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) && !keep.contains(&c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A one-line field from trace data (names, ids, labels): every unsafe character escaped,
/// newlines and tabs included.
pub fn inline(s: &str) -> Cow<'_, str> {
    escape(s, &[])
}

/// Multi-line text from trace data (step content, the full task): newlines and tabs kept, every
/// other unsafe character (ESC, BEL, backspace, CR, ...) escaped.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, &['\n', '\t'])
}

/// JSON text for a terminal: serde_json leaves C1 controls, DEL and the bidi controls raw inside
/// strings (it escapes only C0); write them as `\u00XX` escapes, which keep the JSON valid and
/// equal.
pub fn json(s: &str) -> Cow<'_, str> {
    let risky = |c: char| is_unsafe(c) && !matches!(c, '\n' | '\t' | '\r');
    if !s.chars().any(risky) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if risky(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

const PALETTE: &[&str] = &[
    "36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94",
];

pub fn paint(s: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn agent_color(trace: &Trace, name: &str) -> String {
    match trace.agents.iter().position(|a| a.name == name) {
        Some(i) => match trace.agents[i].kind {
            AgentKind::Human => "1".to_string(),
            AgentKind::Tool => "2;37".to_string(),
            _ => PALETTE[i % PALETTE.len()].to_string(),
        },
        None => "0".to_string(),
    }
}

/// Wrap one paragraph to `width` characters (words longer than the width are cut).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        let mut len = 0usize;
        for word in para.split_whitespace() {
            let mut w: Vec<char> = word.chars().collect();
            while w.len() > width {
                if len > 0 {
                    out.push(std::mem::take(&mut line));
                    len = 0;
                }
                out.push(w[..width].iter().collect());
                w.drain(..width);
            }
            let wl = w.len();
            if len > 0 && len + 1 + wl > width {
                out.push(std::mem::take(&mut line));
                len = 0;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            line.extend(w);
            len += wl;
        }
        out.push(line);
    }
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = text(s).split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// Render a trace as text.
pub fn render(trace: &Trace, style: &Style) -> String {
    let mut s = String::new();
    let c = style.color;
    let field = style.width.saturating_sub(10).max(20);
    let _ = writeln!(s, "{}", paint(&inline(&trace.id), "1", c));
    if let Some(file) = &trace.source.file {
        let rec = trace
            .source
            .record
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let (fmt, file) = (inline(&trace.source.format), inline(file));
        let _ = writeln!(s, "source:   {fmt} {file}{}", inline(&rec));
    }
    let task = if style.full {
        text(&trace.task).into_owned()
    } else {
        one_line(&trace.task, field)
    };
    let _ = writeln!(s, "task:     {task}");
    if let Some(gt) = &trace.ground_truth {
        let _ = writeln!(s, "truth:    {}", one_line(gt, field));
    }
    let _ = writeln!(s, "outcome:  {}", trace.outcome.as_str());
    let agents: Vec<String> = trace
        .agents
        .iter()
        .map(|a| {
            let mut t = paint(&inline(&a.name), &agent_color(trace, &a.name), c);
            if a.kind != AgentKind::Worker {
                t.push_str(&format!(" ({})", a.kind.as_str()));
            }
            for f in trace
                .labels
                .faulty_agents
                .iter()
                .filter(|f| f.agent == a.name)
            {
                t.push_str(&format!(
                    " {}",
                    paint(
                        &format!("⚑ faulty {}", inline(f.error_mode.as_deref().unwrap_or(""))),
                        "1;31",
                        c
                    )
                ));
            }
            t
        })
        .collect();
    let _ = writeln!(s, "agents:   {}", agents.join(", "));
    if let Some(d) = &trace.labels.decisive {
        let reason = d
            .reason
            .as_deref()
            .map(|r| format!(": {}", one_line(r, field)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "label:    {}",
            paint(
                &format!(
                    "decisive failure {} at step {}{reason}",
                    inline(&d.agent),
                    d.step
                ),
                "1;31",
                c
            )
        );
    }
    let _ = writeln!(s, "steps:    {}", trace.steps.len());
    let body_width = style.width.saturating_sub(8).max(20);
    for step in &trace.steps {
        let _ = writeln!(s);
        let mut head = format!(
            "[{:>3}] {}",
            step.index,
            paint(
                &inline(step.speaker_or_agent()),
                &agent_color(trace, &step.agent),
                c
            )
        );
        if let Some(r) = step.round {
            head.push_str(&format!("  round {r}"));
        }
        if let Some(p) = &step.phase {
            head.push_str(&format!("  [{}]", inline(p)));
        }
        if let Some(d) = trace
            .labels
            .decisive
            .as_ref()
            .filter(|d| d.step == step.index)
        {
            let mut m = format!("  ◀ DECISIVE FAILURE (label: {})", inline(&d.agent));
            if d.agent != step.agent {
                m.push_str(" — labelled agent differs from the speaker");
            }
            head.push_str(&paint(&m, "1;31", c));
        }
        for l in trace
            .labels
            .implicit
            .iter()
            .filter(|l| l.step == step.index)
        {
            let m = format!(
                "  ◀ implicit {}{}",
                inline(&l.error_type),
                l.absorption
                    .as_deref()
                    .map(|a| format!(" ({})", inline(a)))
                    .unwrap_or_default()
            );
            head.push_str(&paint(&m, "1;33", c));
        }
        let _ = writeln!(s, "{head}");
        let mut lines = wrap(&text(&step.content), body_width);
        for call in &step.tool_calls {
            lines.extend(wrap(
                &text(&format!("→ {}({})", call.name, call.arguments)),
                body_width,
            ));
        }
        if let Some(id) = &step.tool_call_id {
            lines.push(format!("(result of call {})", inline(id)));
        }
        let total = lines.len();
        let keep = if style.full {
            total
        } else {
            total.min(style.lines)
        };
        for l in &lines[..keep] {
            let _ = writeln!(s, "      {l}");
        }
        if keep < total {
            let _ = writeln!(
                s,
                "      {}",
                paint(&format!("… {} more lines (--full)", total - keep), "2", c)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_respects_width_and_newlines() {
        let w = wrap("aaa bbb ccc\n\nddd", 7);
        assert_eq!(w, ["aaa bbb", "ccc", "", "ddd"]);
        let w = wrap("abcdefghij", 4);
        assert_eq!(w, ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn json_for_a_terminal_escapes_what_serde_json_leaves_raw() {
        let v = serde_json::json!({"c1": "a\u{9b}31m\u{7f}b\u{202e}", "c0": "\x1b[2J\x07"});
        let raw = serde_json::to_string(&v).unwrap();
        assert!(raw.contains('\u{9b}'), "serde_json writes C1 raw: {raw}");
        let safe = json(&raw);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v, "the same JSON value");
        assert!(matches!(json("{\"a\": 1}\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_from_the_trace_are_shown_not_obeyed() {
        use maslens_trace::{DecisiveLabel, Step};
        let evil = "ok\x1b[2J\x1b]0;title\x07\x08\rX\u{202e}";
        let mut t = Trace::new("t/1");
        t.task = evil.into();
        t.ensure_agent(evil, AgentKind::Worker);
        t.steps.push(Step {
            index: 0,
            agent: evil.into(),
            content: format!("line one\n{evil}\n  ◀ DECISIVE FAILURE (label: x)"),
            ..Step::default()
        });
        t.labels.decisive = Some(DecisiveLabel {
            agent: evil.into(),
            step: 0,
            reason: Some(evil.into()),
        });
        for full in [false, true] {
            let style = Style {
                color: false,
                full,
                lines: 10,
                width: 200,
            };
            let out = render(&t, &style);
            assert!(!out.chars().any(|c| is_unsafe(c) && c != '\n'), "{out:?}");
            assert!(out.contains("ok\\u{1b}[2J\\u{1b}]0;title\\u{7}\\u{8}\\u{d}X\\u{202e}"));
            // the one real marker is on the step's head line; the forged one is indented content
            let marked: Vec<&str> = out.lines().filter(|l| l.contains("◀ DECISIVE")).collect();
            assert_eq!(marked.len(), 2, "{out}");
            assert!(marked[0].starts_with("[  0] "));
            assert!(marked[1].starts_with("      "));
        }
        assert_eq!(inline("a\nb\tc"), "a\\u{a}b\\u{9}c");
        assert_eq!(text("a\nb\tc"), "a\nb\tc");
        assert!(matches!(inline("plain ✓"), Cow::Borrowed(_)));
    }
}
