//! `maslens replay-stats`: SPR, RR and delta-RR per configuration from matched no-op and fix
//! replay outcomes, with paired task-cluster bootstrap 95% intervals.

use crate::cmd::scan::write_output;
use crate::cmd::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use anyhow::Context;
use maslens_implicit::replay::{markdown, replay_stats, ReplayOutcome};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSONL of replay outcomes: `{"config","task","trace","if_step","original_success","intervention":"noop"|"fix","success"}`.
    pub input: PathBuf,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = maslens_eval::stats::DEFAULT_RESAMPLES)]
    pub resamples: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the JSON result here.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let mut rows = Vec::new();
    let mut problems = 0usize;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<ReplayOutcome>(line) {
            Ok(r) if r.intervention == "noop" || r.intervention == "fix" => rows.push(r),
            Ok(r) => {
                eprintln!(
                    "warning: {}: line {}: field intervention: {:?} is not noop or fix",
                    args.input.display(),
                    i + 1,
                    r.intervention
                );
                problems += 1;
            }
            Err(e) => {
                eprintln!("warning: {}: line {}: {e}", args.input.display(), i + 1);
                problems += 1;
            }
        }
    }
    let stats = replay_stats(&rows, args.resamples, args.seed).map_err(anyhow::Error::msg)?;
    for s in &stats {
        if !s.unmatched_traces.is_empty() {
            eprintln!(
                "warning: config {}: {} trace(s) lack a matched noop/fix pair and were left out: {}",
                s.config,
                s.unmatched_traces.len(),
                s.unmatched_traces.join(", ")
            );
            problems += 1;
        }
    }
    let json = serde_json::to_string_pretty(&stats)?;
    if let Some(p) = &args.out {
        write_output(Some(p), &json)?;
    }
    if global.json {
        write_output(None, &json)?;
    } else {
        write_output(None, &markdown(&stats))?;
    }
    Ok(ExitCode::from(if problems == 0 {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
