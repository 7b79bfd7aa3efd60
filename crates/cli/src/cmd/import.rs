//! `maslens import`: any supported input -> native maslens JSONL.
//!
//! Also holds the input handling shared by `validate`, `show` and `stats` ([`Inputs`],
//! [`for_each_trace`]): files, directories or `-` (stdin, one record per line), `--format`,
//! `--strict`, a progress bar on stderr when it is a terminal.

use super::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use maslens_trace::import::{read_lines, read_paths, Format};
use maslens_trace::{Diagnostic, ImportError, Imported, Severity};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Input options shared by the trace-reading commands.
#[derive(clap::Args, Debug, Clone)]
pub struct Inputs {
    /// Input files or directories (recursed, sorted by name); `-` reads stdin (one record per line).
    #[arg(required = true, value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Input format: auto, whowhen, aegis, chat, native. `auto` detects it from the content.
    #[arg(long, short = 'f', default_value = "auto", value_name = "FORMAT")]
    pub format: Format,
    /// Stop at the first unreadable record instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

/// Counts kept while reading.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCounts {
    pub traces: u64,
    pub skipped: u64,
    pub warnings: u64,
    pub errors: u64,
}

/// A progress spinner on stderr, hidden unless stderr is a terminal and `--quiet` is off.
pub fn progress(global: &Global, what: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if global.quiet || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template("{spinner} {elapsed} {pos} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    pb.set_style(style);
    pb.set_message(what.to_string());
    pb
}

/// Read every record of the inputs. `on_trace` gets each trace; unreadable records are reported
/// on stderr (one line each) and counted as skipped, or end the run with `--strict`.
pub fn for_each_trace(
    inputs: &Inputs,
    global: &Global,
    what: &str,
    mut on_trace: impl FnMut(Imported) -> anyhow::Result<()>,
    mut on_error: impl FnMut(&ImportError),
) -> anyhow::Result<ReadCounts> {
    let pb = progress(global, what);
    let mut counts = ReadCounts::default();
    let mut handle = |item: Result<Imported, ImportError>| -> anyhow::Result<()> {
        pb.inc(1);
        match item {
            Ok(imp) => {
                counts.traces += 1;
                for d in &imp.diagnostics {
                    match d.severity {
                        Severity::Warning => counts.warnings += 1,
                        Severity::Error => counts.errors += 1,
                    }
                }
                on_trace(imp)
            }
            Err(e) => {
                if inputs.strict {
                    anyhow::bail!("{e}");
                }
                counts.skipped += 1;
                pb.suspend(|| eprintln!("skipped: {e}"));
                on_error(&e);
                Ok(())
            }
        }
    };
    let mut files = Vec::new();
    for p in &inputs.inputs {
        if p.as_os_str() == "-" {
            for item in read_paths(&std::mem::take(&mut files), inputs.format) {
                handle(item)?;
            }
            let stdin = std::io::stdin().lock();
            for item in read_lines(stdin, "<stdin>".into(), inputs.format) {
                handle(item)?;
            }
        } else {
            files.push(p.clone());
        }
    }
    for item in read_paths(&files, inputs.format) {
        handle(item)?;
    }
    pb.finish_and_clear();
    Ok(counts)
}

/// Write one line to stdout. A closed pipe (`maslens show x | head`) ends the program quietly
/// with exit code 0 instead of a panic; other write errors are reported on stderr.
pub fn write_stdout_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|_| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(i32::from(super::EXIT_ERROR));
    }
}

/// `println!` that survives a closed pipe (see [`write_stdout_line`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cmd::import::write_stdout_line(format_args!(""))
    };
    ($($t:tt)*) => {
        $crate::cmd::import::write_stdout_line(format_args!($($t)*))
    };
}

/// A diagnostic as one line, with the trace id.
pub fn diag_line(trace_id: &str, d: &Diagnostic) -> String {
    format!("{d} [trace {trace_id}]")
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Output file (native JSONL); stdout when absent.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print every warning (by default only the count is reported).
    #[arg(long)]
    pub warnings: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let show_warnings = args.warnings;
    let counts = for_each_trace(
        &args.input,
        global,
        "traces imported",
        |imp| {
            for d in &imp.diagnostics {
                if d.severity == Severity::Error || show_warnings {
                    eprintln!("{}", diag_line(&imp.trace.id, d));
                }
            }
            match maslens_trace::export::write_jsonl(&mut out, &imp.trace) {
                // `maslens import x | head`: the reader has gone; stop quietly.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
                other => other.context("cannot write output"),
            }
        },
        |_| {},
    )?;
    out.flush().context("cannot write output")?;
    drop(out);
    let summary = serde_json::json!({
        "traces": counts.traces,
        "skipped": counts.skipped,
        "warnings": counts.warnings,
        "errors": counts.errors,
        "output": args.output.as_ref().map(|p| p.display().to_string()),
    });
    if global.json && args.output.is_some() {
        crate::outln!("{summary}");
    } else if global.json {
        eprintln!("{summary}");
    } else {
        eprintln!(
            "imported {} traces, skipped {} records ({} warnings, {} validation errors){}",
            counts.traces,
            counts.skipped,
            counts.warnings,
            counts.errors,
            if counts.warnings > 0 && !show_warnings {
                "; --warnings lists them, `maslens validate` explains them"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::from(if counts.skipped > 0 {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }))
}
