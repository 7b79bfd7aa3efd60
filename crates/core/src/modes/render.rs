//! The Markdown form of a [`ModesReport`] (the JSON is the report itself).

use std::fmt::Write;

use super::{purity::Score, ModesReport};

impl ModesReport {
    /// Markdown: per system, a table of modes (largest first) with their examples; then purity.
    pub fn to_markdown(&self) -> String {
        let mut out = String::from("# Failure modes\n\n");
        let _ = writeln!(out, "Grouping: {}.\n", self.method);
        for note in &self.notes {
            let _ = writeln!(out, "> {}\n", cell(note));
        }
        if self.systems.is_empty() {
            out.push_str("No failed runs.\n");
        }
        for s in &self.systems {
            let _ = writeln!(
                out,
                "## {}\n\n{} ({} localized, {} scanned), {}.\n",
                s.system,
                count(s.failed_runs, "run"),
                s.located_runs,
                s.scanned_runs,
                count(s.modes.len(), "mode")
            );
            out.push_str(
                "| mode | agent | implicit failure | words | runs | share | days | examples | fix |\n",
            );
            out.push_str("|---|---|---|---|---:|---:|---|---|---|\n");
            for m in &s.modes {
                let examples: Vec<String> = m
                    .examples
                    .iter()
                    .map(|e| match e.step {
                        Some(step) => format!("{} (step {step})", e.run),
                        None => e.run.clone(),
                    })
                    .collect();
                let days = match (m.trend.first(), m.trend.last()) {
                    (Some(a), Some(b)) if a.day != b.day => format!("{} .. {}", a.day, b.day),
                    (Some(a), _) => a.day.clone(),
                    _ => "-".into(),
                };
                let fix = if m.no_proposal.is_some() {
                    "-"
                } else {
                    "`--propose`"
                };
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} | {:.0}% | {} | {} | {fix} |",
                    &m.id[..8.min(m.id.len())],
                    cell(m.agent.as_deref().unwrap_or("(not located)")),
                    cell(m.failure_type.as_deref().unwrap_or("-")),
                    cell(&m.words.join(", ")),
                    m.runs,
                    m.share * 100.0,
                    days,
                    cell(&examples.join(", ")),
                );
            }
            out.push_str(&obstacles(&s.modes));
            for m in s.modes.iter().filter(|m| m.summary.is_some()) {
                let summary = m.summary.as_deref().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "\n- `{}`: {}",
                    &m.id[..8.min(m.id.len())],
                    cell(summary)
                );
            }
            out.push('\n');
        }
        if let Some(by) = &self.summaries_by {
            let _ = writeln!(out, "Summaries written by {by}.\n");
        }
        if let Some(p) = &self.purity {
            let _ = writeln!(
                out,
                "## Against gold decisive agents\n\n{} with one; the located agent is the gold one \
                 in {:.1}%.\n",
                count(p.runs_with_gold, "run"),
                p.located_agent_accuracy * 100.0
            );
            if p.in_sample_runs > 0 {
                let _ = writeln!(
                    out,
                    "> In-sample: the built-in prior was trained on {} of these {} runs; where it \
                     located them (`--method prior`, or the default stacked localizer) the figures \
                     measure a fit to its training data, not new traces.\n",
                    p.in_sample_runs, p.runs_with_gold
                );
            }
            out.push_str(
                "| grouping | groups | purity | inverse purity | f |\n|---|---:|---:|---:|---:|\n",
            );
            for (name, s) in [
                ("these modes", &p.modes),
                ("one group per system", &p.one_per_system),
                ("one group per located agent", &p.by_located_agent),
            ] {
                out.push_str(&score_row(name, s));
            }
        }
        out
    }
}

/// Why modes get no proposed fix, one line per reason with the modes it holds for.
fn obstacles(modes: &[super::Mode]) -> String {
    let mut by_reason: Vec<(&str, Vec<&str>)> = Vec::new();
    for m in modes {
        let Some(why) = m.no_proposal.as_deref() else {
            continue;
        };
        let id = &m.id[..8.min(m.id.len())];
        match by_reason.iter_mut().find(|(r, _)| *r == why) {
            Some((_, ids)) => ids.push(id),
            None => by_reason.push((why, vec![id])),
        }
    }
    let mut out = String::new();
    for (why, ids) in by_reason {
        let _ = write!(
            out,
            "\n- No fix can be proposed for {}: {}",
            ids.iter()
                .map(|id| format!("`{id}`"))
                .collect::<Vec<_>>()
                .join(", "),
            cell(why)
        );
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

fn score_row(name: &str, s: &Score) -> String {
    format!(
        "| {name} | {} | {:.3} | {:.3} | {:.3} |\n",
        s.groups, s.purity, s.inverse_purity, s.f
    )
}

/// "1 run", "2 runs".
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}
