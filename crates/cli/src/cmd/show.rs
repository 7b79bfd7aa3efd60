//! `maslens show`: a trace in the terminal. One block per step: index, speaker (coloured per
//! agent when stdout is a terminal), content wrapped to the width and cut to `--lines` lines
//! unless `--full`; a marker on the labelled decisive step and on implicit-failure steps.

use super::import::{for_each_trace, Inputs};
use super::EXIT_OK;
use crate::Global;
use maslens_trace::{AgentKind, Imported, Trace};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Show the trace with this id (default: the first trace read).
    #[arg(long)]
    pub id: Option<String>,
    /// Show every trace read.
    #[arg(long, conflicts_with = "id")]
    pub all: bool,
    /// Show whole step contents instead of the first `--lines` lines.
    #[arg(long)]
    pub full: bool,
    /// Lines of content shown per step without `--full`.
    #[arg(long, default_value_t = 4)]
    pub lines: usize,
    /// Wrap width (default: $COLUMNS, else 100).
    #[arg(long)]
    pub width: Option<usize>,
    /// Colours: auto (when stdout is a terminal and NO_COLOR is unset), always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug)]
struct Stop;
impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}
impl std::error::Error for Stop {}

/// Rendering options.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    pub full: bool,
    pub lines: usize,
    pub width: usize,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let color = match args.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
        }
    };
    let width = args
        .width
        .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()))
        .unwrap_or(100)
        .max(40);
    let style = Style {
        color,
        full: args.full,
        lines: args.lines,
        width,
    };
    let mut shown = 0u64;
    let mut more = false;
    let result = for_each_trace(
        &args.input,
        global,
        "traces read",
        |imp: Imported| {
            if let Some(id) = &args.id {
                if &imp.trace.id != id {
                    return Ok(());
                }
            } else if !args.all && shown >= 1 {
                more = true;
                return Err(Stop.into());
            }
            shown += 1;
            if global.json {
                let v = serde_json::json!({"trace": imp.trace, "diagnostics": imp.diagnostics});
                crate::outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                if shown > 1 {
                    crate::outln!();
                }
                let text = render(&imp.trace, &style);
                crate::outln!("{}", text.trim_end_matches('\n'));
                for d in &imp.diagnostics {
                    if d.severity == maslens_trace::Severity::Error
                        || !d.message.contains("empty content")
                    {
                        crate::outln!("{}", paint(&d.to_string(), "2", style.color));
                    }
                }
            }
            if args.id.is_some() {
                return Err(Stop.into());
            }
            Ok(())
        },
        |_| {},
    );
    match result {
        Ok(_) => {}
        Err(e) if e.is::<Stop>() => {}
        Err(e) => return Err(e),
    }
    if shown == 0 {
        match &args.id {
            Some(id) => anyhow::bail!("no trace with id `{id}` in the input"),
            None => anyhow::bail!("no readable trace in the input"),
        }
    }
    if more && !global.json {
        eprintln!("(showing the first trace; --all shows every trace, --id ID one of them)");
    }
    Ok(ExitCode::from(EXIT_OK))
}

const PALETTE: &[&str] = &[
    "36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94",
];

fn paint(s: &str, code: &str, color: bool) -> String {
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
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
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
    let _ = writeln!(s, "{}", paint(&trace.id, "1", c));
    if let Some(file) = &trace.source.file {
        let rec = trace
            .source
            .record
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let _ = writeln!(s, "source:   {} {file}{rec}", trace.source.format);
    }
    let task = if style.full {
        trace.task.clone()
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
            let mut t = paint(&a.name, &agent_color(trace, &a.name), c);
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
                        &format!("⚑ faulty {}", f.error_mode.as_deref().unwrap_or("")),
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
                &format!("decisive failure {} at step {}{reason}", d.agent, d.step),
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
            paint(step.speaker_or_agent(), &agent_color(trace, &step.agent), c)
        );
        if let Some(r) = step.round {
            head.push_str(&format!("  round {r}"));
        }
        if let Some(p) = &step.phase {
            head.push_str(&format!("  [{p}]"));
        }
        if let Some(d) = trace
            .labels
            .decisive
            .as_ref()
            .filter(|d| d.step == step.index)
        {
            let mut m = format!("  ◀ DECISIVE FAILURE (label: {})", d.agent);
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
                l.error_type,
                l.absorption
                    .as_deref()
                    .map(|a| format!(" ({a})"))
                    .unwrap_or_default()
            );
            head.push_str(&paint(&m, "1;33", c));
        }
        let _ = writeln!(s, "{head}");
        let mut lines = wrap(&step.content, body_width);
        for call in &step.tool_calls {
            lines.extend(wrap(
                &format!("→ {}({})", call.name, call.arguments),
                body_width,
            ));
        }
        if let Some(id) = &step.tool_call_id {
            lines.push(format!("(result of call {id})"));
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
}
