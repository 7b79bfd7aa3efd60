//! Terminal helpers shared by the commands: output files, JSON or text, exit codes.

use anyhow::Context;
use std::io::Write;
use std::path::Path;

/// Write `text` to `path`, or to stdout (ending in a newline) when `path` is `None`.
pub fn write_output(path: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match path {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            if !text.ends_with('\n') {
                out.write_all(b"\n")?;
            }
            Ok(())
        }
    }
}

/// Write `json` to `out` when given; print `json` to stdout with `--json`, else `human()`.
pub fn emit(
    out: Option<&Path>,
    json: &str,
    json_mode: bool,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if let Some(p) = out {
        write_output(Some(p), json)?;
    }
    if json_mode {
        write_output(None, json)
    } else {
        write_output(None, &human())
    }
}

/// Write `item` as one JSON line.
pub fn write_jsonl<T: serde::Serialize>(out: &mut dyn Write, item: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, item)?;
    out.write_all(b"\n")
}

/// A buffered output file, or stdout when `path` is `None`.
pub fn sink(path: Option<&Path>) -> anyhow::Result<Box<dyn Write>> {
    Ok(match path {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    })
}

/// Print each warning to stderr as `warning: ...`; returns how many there were.
pub fn warn_all(warnings: &[String]) -> usize {
    for w in warnings {
        eprintln!("warning: {w}");
    }
    warnings.len()
}

/// The exit code of a command that ran: 0 without problems, 1 with some.
pub fn exit_code(problems: usize) -> std::process::ExitCode {
    std::process::ExitCode::from(if problems == 0 {
        crate::cmd::EXIT_OK
    } else {
        crate::cmd::EXIT_PROBLEMS
    })
}
