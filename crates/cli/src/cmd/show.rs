//! `maslens show`: a trace in the terminal (rendered by [`crate::term`]).

use super::EXIT_OK;
use crate::inputs::{for_each_trace, Inputs};
use crate::term::{inline, paint, render, Style};
use crate::Global;
use maslens_trace::Imported;
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
                // serde_json leaves C1 controls raw: escape them for the terminal.
                crate::outln!("{}", crate::term::json(&serde_json::to_string_pretty(&v)?));
            } else {
                if shown > 1 {
                    crate::outln!();
                }
                let text = render(&imp.trace, &style);
                crate::outln!("{}", text.trim_end_matches('\n'));
                // What maslens could not understand about the run (OTLP assembly's warnings).
                for w in imp.trace.run_warnings() {
                    let line = format!("warning: {}", w.line());
                    crate::outln!("{}", paint(&inline(&line), "33", style.color));
                }
                for d in &imp.diagnostics {
                    if d.severity == maslens_trace::Severity::Error
                        || !d.message.contains("empty content")
                    {
                        crate::outln!("{}", paint(&inline(&d.to_string()), "2", style.color));
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
