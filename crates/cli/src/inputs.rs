//! Trace input shared by every trace-reading command (`import`, `validate`, `show`, `stats`,
//! `locate`, `scan`, `repair`, `credit`, `prior`):
//! files, directories or `-` (stdin: one record per line, or one pretty-printed document),
//! `--format`, `--strict`, a progress spinner on stderr when it is a terminal, and stdout lines
//! that survive a closed pipe. A named input that does not exist stops the command (exit 2).

use crate::Global;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use maslens_trace::import::{read_lines, read_paths, Format};
use maslens_trace::{Diagnostic, ImportError, Imported, Severity};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Input options shared by the trace-reading commands.
#[derive(clap::Args, Debug, Clone)]
pub struct Inputs {
    /// Input files or directories (recursed, sorted by name); `-` reads stdin (one record per line,
    /// or one JSON document over several lines).
    #[arg(required_unless_present = "db", value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Input format: auto, whowhen, aegis, mad, chat, native. `auto` detects it from the content.
    #[arg(long, short = 'f', default_value = "auto", value_name = "FORMAT",
          value_parser = enum_parser::<Format>(FORMATS))]
    pub format: Format,
    /// Stop at the first unreadable record instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// The inputs are OpenTelemetry trace exports (OTLP/JSON, one request per line as the
    /// OpenTelemetry Collector's file exporter writes them, or `.pb` protobuf): their spans are
    /// grouped into runs (GenAI semantic conventions, OpenInference), one trace per run.
    #[arg(long)]
    pub otlp: bool,
    /// A maslens store (a `postgres://` or `sqlite:` URL, or a SQLite file; the one `maslens
    /// serve` writes): without PATHs, read every run in it; `import` stores what it reads there
    /// and `locate` and `scan` store their results there as diagnoses, `credit` its table.
    #[arg(long, value_name = "URL|FILE")]
    pub db: Option<String>,
}

impl Inputs {
    /// What was read, for the error when it held no trace: the paths, or the store and how
    /// runs get into it.
    pub fn nothing_read(&self, errors: usize) -> String {
        let errs = match errors {
            0 => String::new(),
            1 => " (1 record could not be read)".to_string(),
            n => format!(" ({n} records could not be read)"),
        };
        match (&self.db, self.inputs.is_empty()) {
            (Some(db), true) => format!(
                "the store {db} holds no runs yet{errs}: send OpenTelemetry traces to `maslens serve`, \
                 or put trace files in it with `maslens import FILES --db {db}`"
            ),
            _ => {
                let paths: Vec<String> =
                    self.inputs.iter().map(|p| p.display().to_string()).collect();
                format!("no readable traces in {}{errs}", paths.join(", "))
            }
        }
    }
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
    // A named input that does not exist is a mistake in the command line, not a bad record:
    // nothing runs (exit 2), as for any other argument that cannot be used.
    for p in inputs.inputs.iter().filter(|p| p.as_os_str() != "-") {
        if let Err(e) = std::fs::metadata(p) {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow::bail!("{}: no such file or directory", p.display());
            }
        }
    }
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
                pb.suspend(|| eprintln!("skipped: {}", crate::term::inline(&e.to_string())));
                on_error(&e);
                Ok(())
            }
        }
    };
    if let (Some(db), true) = (&inputs.db, inputs.inputs.is_empty()) {
        let traces = crate::cmd::block_on(async {
            let store = crate::db::open(db).await?;
            anyhow::Ok(store.traces(&maslens_store::RunFilter::default()).await?)
        })??;
        for trace in traces {
            let diagnostics = maslens_trace::validate(&trace);
            handle(Ok(Imported {
                record: Some(format!("run {}", trace.id)),
                file: Some(db.clone()),
                trace,
                diagnostics,
            }))?;
        }
        pb.finish_and_clear();
        return Ok(counts);
    }
    if inputs.otlp {
        let read = maslens_otlp::file::read_paths(&inputs.inputs);
        for p in read.problems {
            handle(Err(ImportError {
                file: p.file,
                record: p.record,
                path: None,
                message: p.message,
            }))?;
        }
        for trace in maslens_otlp::assemble::traces(&read.spans) {
            let diagnostics = maslens_trace::validate(&trace);
            // Assembled from spans across the files: no one file or record.
            handle(Ok(Imported {
                file: None,
                record: None,
                trace,
                diagnostics,
            }))?;
        }
        pb.finish_and_clear();
        return Ok(counts);
    }
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

/// The traces of the inputs, in input order, at most `limit` of them; unreadable records are
/// reported on stderr (`skipped: FILE: record N: ...`) and returned as messages, or end the run
/// with `--strict`. The one way every trace-reading command reads its inputs.
pub fn read_all(
    inputs: &Inputs,
    global: &Global,
    what: &str,
    limit: Option<usize>,
) -> anyhow::Result<(Vec<maslens_trace::Trace>, Vec<String>)> {
    #[derive(Debug)]
    struct Enough;
    impl std::fmt::Display for Enough {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("trace limit reached")
        }
    }
    impl std::error::Error for Enough {}
    let mut traces = Vec::new();
    let mut errors = Vec::new();
    let read = for_each_trace(
        inputs,
        global,
        what,
        |imp| {
            if limit.is_some_and(|l| traces.len() >= l) {
                return Err(Enough.into());
            }
            traces.push(imp.trace);
            Ok(())
        },
        |e| errors.push(e.to_string()),
    );
    match read {
        Err(e) if !e.is::<Enough>() => Err(e),
        _ => Ok((traces, errors)),
    }
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
        std::process::exit(i32::from(crate::cmd::EXIT_ERROR));
    }
}

/// `println!` that survives a closed pipe (see [`write_stdout_line`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::inputs::write_stdout_line(format_args!(""))
    };
    ($($t:tt)*) => {
        $crate::inputs::write_stdout_line(format_args!($($t)*))
    };
}

/// `outln!` for lines that carry text from a trace (names, ids, labels): control, bidi and
/// invisible characters shown escaped ([`crate::term::text`]), so a trace cannot write to the
/// terminal (clear it, set its title or clipboard, hide or forge a line).
#[macro_export]
macro_rules! outln_safe {
    ($($t:tt)*) => {
        $crate::inputs::write_stdout_line(format_args!(
            "{}",
            $crate::term::text(&format!($($t)*))
        ))
    };
}

/// A diagnostic as one line, with the trace id; trace text in it escaped for a terminal.
pub fn diag_line(trace_id: &str, d: &Diagnostic) -> String {
    crate::term::inline(&format!("{d} [trace {trace_id}]")).into_owned()
}

/// A value parser for a library enum parsed by `FromStr`: `--help` and completions list
/// `values` (each `[name, alias...]`; aliases are accepted, not shown) and the library's
/// parser makes the value.
pub fn enum_parser<T>(
    values: &'static [&'static [&'static str]],
) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let values = values
        .iter()
        .filter_map(|names| {
            let (name, aliases) = names.split_first()?;
            Some(PossibleValue::new(*name).aliases(aliases.iter().copied()))
        })
        .collect::<Vec<_>>();
    PossibleValuesParser::new(values).try_map(|s| s.parse::<T>().map_err(|e| e.to_string()))
}

/// `--format` values.
pub const FORMATS: &[&[&str]] = &[
    &["auto"],
    &["whowhen", "ww"],
    &["aegis", "aegisbench"],
    &["chat", "openai", "messages"],
    &["native", "maslens", "jsonl"],
    &["mad", "mast", "mastdata"],
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_format_is_a_format_value() {
        for f in Format::ALL {
            assert!(
                FORMATS
                    .iter()
                    .any(|names| names.first() == Some(&f.as_str())),
                "--format lacks {f}"
            );
        }
    }
}
