//! `maslens import`: any supported input -> native maslens JSONL.

use crate::inputs::{diag_line, for_each_trace, Inputs};
use crate::words::count;
use crate::Global;
use anyhow::Context;
use maslens_trace::Severity;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Output file (native JSONL); stdout when absent.
    #[arg(long = "out", short = 'o', alias = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print every warning (by default only the count is reported).
    #[arg(long)]
    pub warnings: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    // `-o FILE` is written to a temporary file beside it and renamed at the end, so an
    // interrupted or failed import never leaves a half-written FILE.
    let mut tmp = match &args.output {
        Some(path) => Some(
            maslens_eval::atomic::AtomicFile::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => None,
    };
    let mut out: Box<dyn Write + '_> = match tmp.as_mut() {
        Some(f) => Box::new(BufWriter::new(f)),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let show_warnings = args.warnings;
    // `--db` with PATHs: the traces go into the store (and to `-o` when given, not to stdout).
    let to_db = args.input.db.is_some() && !args.input.inputs.is_empty();
    let write_jsonl = !to_db || args.output.is_some();
    let mut stored = Vec::new();
    // A second trace with an id already read: said, counted, and a problem (exit 1): in a store
    // the later copy replaces the earlier one.
    let mut first_seen: std::collections::HashMap<String, String> = Default::default();
    let mut duplicates = 0u64;
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
            match first_seen.get(&imp.trace.id) {
                Some(first) => {
                    duplicates += 1;
                    eprintln!(
                        "error: {}: duplicate trace id `{}` (first seen in {first}){}",
                        imp.location(),
                        crate::term::inline(&imp.trace.id),
                        if to_db {
                            "; the store keeps the later copy"
                        } else {
                            ""
                        }
                    );
                }
                None => {
                    first_seen.insert(imp.trace.id.clone(), imp.location());
                }
            }
            if to_db {
                stored.push(imp.trace.clone());
            }
            if !write_jsonl {
                return Ok(());
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
    if let (true, Some(db)) = (to_db, &args.input.db) {
        super::block_on(async {
            let store = crate::db::open(db).await?;
            for t in &stored {
                store.put_trace(t).await?;
            }
            anyhow::Ok(())
        })??;
        eprintln!(
            "stored {} in {db}",
            crate::words::count(stored.len(), "trace")
        );
    }
    if let (Some(tmp), Some(path)) = (tmp, &args.output) {
        tmp.commit()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let summary = serde_json::json!({
        "traces": counts.traces,
        "skipped": counts.skipped,
        "warnings": counts.warnings,
        "errors": counts.errors,
        "duplicate_ids": duplicates,
        "output": args.output.as_ref().map(|p| p.display().to_string()),
    });
    if global.json && args.output.is_some() {
        crate::outln!("{summary}");
    } else if global.json {
        eprintln!("{summary}");
    } else {
        eprintln!(
            "imported {}, skipped {} ({}, {}, {}){}",
            count(counts.traces, "trace"),
            count(counts.skipped, "record"),
            count(counts.warnings, "warning"),
            count(counts.errors, "validation error"),
            count(duplicates, "duplicate id"),
            if counts.warnings > 0 && !show_warnings {
                "; --warnings lists them, `maslens validate` explains them"
            } else {
                ""
            }
        );
    }
    Ok(crate::ui::exit_code((counts.skipped + duplicates) as usize))
}
