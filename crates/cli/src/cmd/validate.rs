//! `maslens validate`: check traces for problems (unknown agents, labels out of range, label
//! agents not acting at the label step, empty content, duplicate ids, ...).
//!
//! Exit code 0 when no record was skipped and no validation error was found (warnings allowed,
//! unless `--deny-warnings`), 1 otherwise.

use super::{EXIT_OK, EXIT_PROBLEMS};
use crate::inputs::{diag_line, for_each_trace, Inputs};
use crate::Global;
use maslens_trace::check::{diagnostic_json, skipped_json, CorpusCheck};
use maslens_trace::Severity;
use serde_json::json;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Treat warnings as problems (exit code 1).
    #[arg(long)]
    pub deny_warnings: bool,
    /// Only print errors, not warnings.
    #[arg(long)]
    pub errors_only: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut check = CorpusCheck::new();
    let records = std::cell::RefCell::new(Vec::new());
    let json_out = global.json;
    let counts = for_each_trace(
        &args.input,
        global,
        "traces validated",
        |imp| {
            let id = &imp.trace.id;
            for d in check.check(&imp) {
                if args.errors_only && d.severity == Severity::Warning {
                    continue;
                }
                if json_out {
                    records.borrow_mut().push(diagnostic_json(id, &d));
                } else {
                    crate::outln!("{}", diag_line(id, &d));
                }
            }
            Ok(())
        },
        |e| {
            if json_out {
                records.borrow_mut().push(skipped_json(e));
            }
        },
    )?;
    let ok = check.ok(counts.skipped, args.deny_warnings);
    if global.json {
        let summary = json!({
            "traces": counts.traces,
            "skipped": counts.skipped,
            "errors": check.errors,
            "warnings": check.warnings,
            "ok": ok,
            "diagnostics": records.into_inner(),
        });
        crate::outln!(
            "{}",
            crate::term::json(&serde_json::to_string_pretty(&summary)?)
        );
    } else {
        crate::outln!(
            "{}: {}, {}, {} skipped",
            crate::words::count(counts.traces, "trace"),
            crate::words::count(check.errors, "error"),
            crate::words::count(check.warnings, "warning"),
            crate::words::count(counts.skipped, "unreadable record")
        );
    }
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_PROBLEMS }))
}
