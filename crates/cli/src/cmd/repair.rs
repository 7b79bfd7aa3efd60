//! `maslens repair`: corrected replacement steps for implicit failures (MASIF listings 5-6) and
//! matched no-op / fix replay plans as JSONL for the user's own system to resume from.

use crate::cmd::block_on;
use crate::inputs::{read_all, Inputs};
use crate::llm_args::LlmArgs;
use crate::ui::{exit_code, sink, write_jsonl};
use crate::Global;
use maslens_core::implicit::{repair_scanned, RepairEvent, RepairOptions};
use maslens_implicit::repair::RepairConfig;
use maslens_implicit::{read_trace_scans, read_trace_scans_skipping};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The traces that were scanned (files, directories, `-`).
    #[command(flatten)]
    pub input: Inputs,
    /// Their scan result (`maslens scan --out FILE`).
    #[arg(long)]
    pub scan: PathBuf,
    /// Replay plans (JSONL, one `noop` and one `fix` line per IF); default stdout.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Repair at most this many IFs per trace.
    #[arg(long)]
    pub max_per_trace: Option<usize>,
    /// Completion token limit of the repair call.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let (scans, bad_scans) = if args.input.strict {
        (read_trace_scans(&args.scan)?, Vec::new())
    } else {
        read_trace_scans_skipping(&args.scan)?
    };
    let bad_scans = crate::ui::warn_all(&bad_scans);
    let (traces, read_errors) = read_all(&args.input, global, "reading traces", None)?;
    let mut out = sink(args.out.as_deref())?;
    let opts = RepairOptions {
        config: RepairConfig {
            max_tokens: args.max_tokens,
            ..Default::default()
        },
        max_per_trace: args.max_per_trace,
    };
    let summary = block_on(async {
        let stack = args.llm.build().await?;
        let summary = repair_scanned(stack.model.as_ref(), &traces, &scans, &opts, |e| match e {
            RepairEvent::Plans(pair) => pair.iter().try_for_each(|p| write_jsonl(&mut out, p)),
            RepairEvent::Skipped(why) => {
                eprintln!("warning: {why}");
                Ok(())
            }
        })
        .await?;
        crate::llm_args::finish(&stack, global.quiet);
        anyhow::Ok(summary)
    })??;
    out.finish()?;
    let unmatched = summary.unmatched_scans.len();
    if unmatched > 0 {
        eprintln!("warning: {unmatched} scanned trace(s) were not found among the inputs");
    }
    if !global.quiet {
        eprintln!("wrote {} replay plan line(s)", summary.plans);
    }
    Ok(exit_code(
        read_errors.len() + bad_scans + summary.skipped + usize::from(unmatched > 0),
    ))
}
