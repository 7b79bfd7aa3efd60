//! `maslens validate`: check traces for problems (unknown agents, labels out of range, label
//! agents not acting at the label step, empty content, duplicate ids, ...).
//!
//! Exit code 0 when no record was skipped and no validation error was found (warnings allowed,
//! unless `--deny-warnings`), 1 otherwise.

use super::import::{for_each_trace, Inputs};
use super::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use maslens_trace::validate::CorpusValidator;
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
    let mut validator = CorpusValidator::new();
    let mut errors = 0u64;
    let mut warnings = 0u64;
    let problems_json = std::cell::RefCell::new(Vec::new());
    let errors_only = args.errors_only;
    let json_out = global.json;
    let counts = for_each_trace(
        &args.input,
        global,
        "traces validated",
        |imp| {
            let t = &imp.trace;
            let location = match (&t.source.file, &t.source.record) {
                (Some(f), Some(r)) => format!("{f}: {r}"),
                (Some(f), None) => f.clone(),
                _ => t.id.clone(),
            };
            // The importer already ran per-trace validation; add corpus checks (duplicate ids).
            let mut diags = imp.diagnostics;
            diags.extend(
                validator
                    .check(t, &location)
                    .into_iter()
                    .filter(|d| d.message.starts_with("duplicate trace id")),
            );
            for d in diags {
                match d.severity {
                    Severity::Error => errors += 1,
                    Severity::Warning => warnings += 1,
                }
                if errors_only && d.severity == Severity::Warning {
                    continue;
                }
                if json_out {
                    let mut v = serde_json::to_value(&d)?;
                    if let Some(o) = v.as_object_mut() {
                        o.insert("trace".into(), json!(t.id));
                    }
                    problems_json.borrow_mut().push(v);
                } else {
                    crate::outln!("{}", super::import::diag_line(&t.id, &d));
                }
            }
            Ok(())
        },
        |e| {
            if json_out {
                problems_json.borrow_mut().push(json!({
                    "severity": "error",
                    "file": e.file,
                    "record": e.record,
                    "path": e.path,
                    "message": e.message,
                    "skipped": true,
                }));
            }
        },
    )?;
    let ok = counts.skipped == 0 && errors == 0 && (!args.deny_warnings || warnings == 0);
    if global.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "traces": counts.traces,
                "skipped": counts.skipped,
                "errors": errors,
                "warnings": warnings,
                "ok": ok,
                "diagnostics": problems_json.into_inner(),
            }))?
        );
    } else {
        crate::outln!(
            "{} traces: {} errors, {} warnings, {} unreadable records skipped",
            counts.traces,
            errors,
            warnings,
            counts.skipped
        );
    }
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_PROBLEMS }))
}
